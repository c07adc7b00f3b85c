"""Fake 8 CPU devices before any JAX computation (the real execution path runs on them).

The suite compiles with XLA:CPU's fast-compile options (the classic emitters at
LLVM -O0, as the gradient method and `codesign estimate` compile on the CPU:
`codesign.compiling.CPU_COMPILER_OPTIONS`): compiling is most of the suite's time, and what the
tests check (values, errors, gradients) does not depend on how hard XLA
optimises the code, only how fast it runs. Subprocesses (notebook kernels,
multi-process runs) inherit the flags.

One persistent compilation cache serves the whole run: a fresh directory made
by the first process that loads this file (the pytest process, or the
controller under pytest-xdist, whose workers inherit it), removed when that
process exits. The library's jitted functions (`jax_compilation_cache_dir`,
in every process: workers, notebook kernels, subprocesses) and the `codesign`
command's (`CODESIGN_CACHE`) use it, so one structure compiled by one process
is read from disk by the others; the user's cache is neither read nor filled.
Every program is stored (minimum compile time 0), the small ones of eager
evaluation too, which each worker and kernel would otherwise compile again
(13% less wall time measured on five of the files).
"""

import atexit
import os
import shutil
import tempfile

_FLAGS = ("--xla_force_host_platform_device_count=8", "--xla_cpu_use_fusion_emitters=false",
          "--xla_backend_optimization_level=0")
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), *(f for f in _FLAGS if f not in os.environ.get(
        "XLA_FLAGS", ""))]).strip()

if "CODESIGN_TEST_CACHE" not in os.environ:  # the first process of the run
    os.environ["CODESIGN_TEST_CACHE"] = tempfile.mkdtemp(prefix="codesign-test-cache-")
    atexit.register(shutil.rmtree, os.environ["CODESIGN_TEST_CACHE"], ignore_errors=True)
os.environ["CODESIGN_CACHE"] = os.environ["CODESIGN_TEST_CACHE"]
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["CODESIGN_TEST_CACHE"]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
# what the `codesign` command sets for its process (importing codesign sets nothing)
jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="session")
def step_time_value_and_grad():
    """(step time, its gradient w.r.t. `knobs`) of `(scn, knobs)`, as
    `step.estimate(scenario.set_knobs(scn, knobs))`, jitted once for the session:
    the scenario is an argument, not a closure, so every scenario of one static
    structure (and one set of knob names) shares one compile across the files.
    Without the traced domain check (`check=False`: the tests pass values inside
    the domains), so the program has no host callback and the run's persistent
    cache hands one worker's compile to the others."""
    from codesign import scenario
    from codesign.model import step

    def step_time_s(scn, knobs):
        return step.estimate(scenario.set_knobs(scn, knobs), check=False).step.step_time_s

    return jax.jit(jax.value_and_grad(step_time_s, argnums=1))


@pytest.fixture(scope="session")
def validate_rows():
    """`codesign.validate.run()`'s rows (~15 s), evaluated once per run: the
    first worker that asks computes them and leaves them in the run's cache
    directory (JSON gives them back exactly: str, bool, float and NaN), the
    others wait on the lock and read them. The honesty table's tests and the
    intervals' (tests/test_uncertainty.py) use them."""
    import fcntl
    import json
    from pathlib import Path

    from codesign import validate

    path = Path(os.environ["CODESIGN_TEST_CACHE"]) / "validate-rows.json"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if path.exists():
            return json.loads(path.read_text())
        rows = validate.run()
        path.write_text(json.dumps(rows))
        return rows


@pytest.fixture(scope="session")
def run_notebook():
    """run_notebook(nb): execute notebook `nb` (outputs cleared) top to bottom in
    this worker's one Jupyter kernel, its namespace reset first (`%reset -f`: a
    name a notebook forgets to import or define is still a NameError), so the
    notebooks share the kernel's start, codesign's import and the programs it
    compiled (~4 s a notebook here). The kernel runs in notebooks/, with this
    interpreter (the venv's), so it sees the same `codesign` as the tests."""
    from pathlib import Path

    import nbclient
    import nbformat
    from jupyter_client.manager import KernelManager

    folder = Path(__file__).resolve().parents[1] / "notebooks"
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(folder))

    def run(nb):
        for c in nb.cells:
            if c.cell_type == "code":
                c.outputs = []
        nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
        try:
            # timeout: a hang guard per cell, not a speed claim (benchmarks/notebooks.py times them)
            nbclient.NotebookClient(nb, km=km, timeout=3600, kernel_name="python3",
                                    resources={"metadata": {"path": str(folder)}}).execute()
        finally:
            nb.cells.pop(0)
        return nb

    yield run
    km.shutdown_kernel(now=True)
