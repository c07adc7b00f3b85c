"""Ahead-of-time compilation, once per process and argument structure, with
XLA:CPU options chosen for the step model's programs on the CPU.

The step model's programs run for microseconds to a second, and XLA spends
seconds optimising them: with the classic emitters at LLVM -O0
(`CPU_COMPILER_OPTIONS`) a full estimate compiles 2-4x faster and runs a few
times slower, which pays wherever a program is compiled to run a few times
(one `codesign estimate`, the gradient method's descent and exact evaluation:
70 s and 19 s at XLA's defaults on the Llama-3-70B problem of
benchmarks/search.py, about 10 s and 2.5 s with these options, the values
equal to rounding). Programs that evaluate many scenarios at once (the grid,
benchmarks/estimate.py) keep XLA's optimisation (`BATCH_COMPILER_OPTIONS`).

Both turn off XLA:CPU's YNNPACK fusions, which hand a reduction or a small
contraction, with the elementwise code around it, to a library kernel: on the
vmapped full estimate (1,000 scenarios) they took 2.8 us per scenario against
0.86 us for XLA's own loops, and 5.6 against 3.7 us with the fast-compile
options (benchmarks/estimate.py measures the rate).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import platform
import time
from pathlib import Path

import jax

_OWN_LOOPS = {"xla_cpu_experimental_ynn_fusion_type": ""}  # no YNNPACK fusions
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False,
                        "xla_backend_optimization_level": 0, **_OWN_LOOPS}
BATCH_COMPILER_OPTIONS = dict(_OWN_LOOPS)
_COMPILED: dict = {}  # (jitted function, options, argument structure and types) -> executable


def options(batch: bool = False) -> dict | None:
    """The compiler options of a program on the default backend (None off the CPU)."""
    if jax.default_backend() != "cpu":
        return None
    return dict(BATCH_COMPILER_OPTIONS if batch else CPU_COMPILER_OPTIONS)


def compiled(jitted, *args, batch: bool = False, store: str | Path | None = None,
             prove: bool = True):
    """`jitted` lowered and compiled ahead of time for the structure, shapes and
    dtypes of `args` (once per process; `options(batch)`): (the executable,
    seconds spent tracing and compiling it, or reading it back, in this call).

    With `store` (a folder), the executable is also kept there and read back by
    a later process (`stored_key`), which then neither traces nor compiles; one
    read back is run once on `args` to prove it whole unless `prove` is False
    (`run`, whose own first run is the proof)."""
    key = _key(jitted, args, batch)
    if key in _COMPILED:
        return _COMPILED[key], 0.0
    t0 = time.perf_counter()
    path = Path(store) / f"{stored_key(jitted, args, batch)}.exe" if store else None
    exe = _load(path, args, prove) if path is not None else None
    if exe is None:
        exe = _compile(jitted, args, batch, xla_cache=path is None)
        if path is not None:
            _save(path, exe)
    _COMPILED[key] = exe
    return exe, time.perf_counter() - t0


def run(jitted, *args, store: str | Path | None = None):
    """`jitted(*args)` through `compiled`'s executable, waited for: (its output,
    seconds spent tracing and compiling or reading back). An executable read
    back from `store` that fails on its first run is compiled afresh and run
    again (what `compiled`'s proof does, without running a long program twice)."""
    exe, compile_s = compiled(jitted, *args, store=store, prove=False)
    try:
        return jax.block_until_ready(exe(*args)), compile_s
    except Exception:  # noqa: BLE001
        if store is None:
            raise
    # the stored one is broken: forgotten, so `compiled` compiles and stores it anew
    _COMPILED.pop(_key(jitted, args, False), None)
    (Path(store) / f"{stored_key(jitted, args)}.exe").unlink(missing_ok=True)
    exe, again_s = compiled(jitted, *args, store=store, prove=False)
    return jax.block_until_ready(exe(*args)), compile_s + again_s


def _key(jitted, args, batch):
    """This process's key of a compiled program: the function and the arguments'
    structure, shapes and dtypes."""
    leaves, tree = jax.tree.flatten(args)
    return (jitted, batch, tree, tuple(jax.typeof(x) for x in leaves))


# ------------------------------------------------------------------ stored executables
_DIGEST: list = []  # this package's source digest, once per process
STORED_MAX = 64  # executables kept in a store; the least recently written go first


def _source_digest() -> str:
    """sha256 of every Python source of the package: a stored executable is this code's."""
    if not _DIGEST:
        root = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
        _DIGEST.append(h.hexdigest())
    return _DIGEST[0]


def _cpu_flags() -> str:
    try:  # Linux: the instruction sets compiled code may use
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return ""


def stored_key(jitted, args, batch: bool = False) -> str:
    """What a stored executable is valid for, hashed: the package's sources, JAX and
    jaxlib, the backend, its devices and this CPU, float64 or not, the compiler
    options and XLA_FLAGS, the function, and the structure of `args` (every
    static field, every leaf's shape and dtype)."""
    from jaxlib import version as jaxlib_version

    structure = jax.tree.map(lambda x: str(jax.typeof(x)), args)
    parts = (_source_digest(), jax.__version__, jaxlib_version.__version__,
             jax.default_backend(), str(jax.devices()), platform.machine(), _cpu_flags(),
             str(jax.config.jax_enable_x64), repr(options(batch)),
             os.environ.get("XLA_FLAGS", ""),
             f"{jitted.__module__}.{jitted.__qualname__}")
    h = hashlib.sha256("\0".join(parts).encode())
    h.update(pickle.dumps(structure, protocol=4))
    return h.hexdigest()


def _compile(jitted, args, batch, xla_cache=True):
    """`jitted` lowered and compiled for `args`; without `xla_cache`, by XLA itself,
    not read from JAX's persistent cache: an XLA:CPU executable read back from
    that cache serializes without its kernels (a later process that loads it
    fails with "Function ... not found"), so one to be stored is compiled so."""
    lowered = jitted.lower(*args)
    if xla_cache or not jax.config.jax_enable_compilation_cache:
        return lowered.compile(compiler_options=options(batch))
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        return lowered.compile(compiler_options=options(batch))
    finally:
        jax.config.update("jax_enable_compilation_cache", True)


def _save(path: Path, exe) -> None:
    """Best effort (a read-only or full cache folder is not an error): the
    serialized executable, its output's structure (a pytree of zeros: JAX's tree
    definitions of equinox modules do not survive pickling themselves) and the
    devices it runs on."""
    from jax.experimental import serialize_executable

    try:
        blob, _, out_tree = serialize_executable.serialize(exe)
        example = jax.tree.unflatten(out_tree, [0] * out_tree.num_leaves)
        devices = sorted({d.id for s in jax.tree.leaves(exe.input_shardings)
                          for d in s.device_set})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps((blob, example, devices), protocol=4))
        tmp.replace(path)  # atomic: a reader sees the whole file or none
        stored = sorted(path.parent.glob("*.exe"), key=lambda p: p.stat().st_mtime)
        for old in stored[:max(len(stored) - STORED_MAX, 0)]:
            old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001
        return


def _load(path: Path, args, prove: bool = True):
    """The executable stored at `path` for `args`, run once on them (a few
    milliseconds) to prove it whole unless `prove` is False (`run` proves it by
    its own first run), or None (absent, unreadable, from another build, or
    failing: compiled again)."""
    from jax.experimental import serialize_executable

    try:
        blob, example, devices = pickle.loads(path.read_bytes())
        by_id = {d.id: d for d in jax.devices()}
        exe = serialize_executable.deserialize_and_load(
            blob, jax.tree.structure((args, {})), jax.tree.structure(example),
            execution_devices=[by_id[i] for i in devices])
        if prove:
            jax.block_until_ready(exe(*args))
        return exe
    except Exception:  # noqa: BLE001
        return None
