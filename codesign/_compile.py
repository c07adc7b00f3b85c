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

import time

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


def compiled(jitted, *args, batch: bool = False):
    """`jitted` lowered and compiled ahead of time for the structure, shapes and
    dtypes of `args` (once per process; `options(batch)`): (the executable,
    seconds spent tracing and compiling it in this call)."""
    leaves, tree = jax.tree.flatten(args)
    key = (jitted, batch, tree, tuple(jax.typeof(x) for x in leaves))
    if key in _COMPILED:
        return _COMPILED[key], 0.0
    t0 = time.perf_counter()
    _COMPILED[key] = jitted.lower(*args).compile(compiler_options=options(batch))
    return _COMPILED[key], time.perf_counter() - t0
