"""Ahead-of-time compilation, once per process and argument structure, with
XLA:CPU's fast-compile options on the CPU.

The step model's programs run for microseconds to a second, and XLA spends
seconds optimising them: with the classic emitters at LLVM -O0
(`CPU_COMPILER_OPTIONS`) a full estimate compiles 2-4x faster and runs a few
times slower, which pays wherever a program is compiled to run a few times
(one `codesign estimate`, the gradient method's descent and exact evaluation:
70 s and 19 s at XLA's defaults on the Llama-3-70B problem of
benchmarks/search.py, about 10 s and 2.5 s with these options, the values
equal to rounding). The grid and vmapped benchmarks keep XLA's defaults.
"""

from __future__ import annotations

import time

import jax

CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False,
                        "xla_backend_optimization_level": 0}
_COMPILED: dict = {}  # (jitted function, argument structure and types) -> executable


def compiled(jitted, *args):
    """`jitted` lowered and compiled ahead of time for the structure, shapes and
    dtypes of `args` (once per process; `CPU_COMPILER_OPTIONS` on the CPU):
    (the executable, seconds spent tracing and compiling it in this call)."""
    leaves, tree = jax.tree.flatten(args)
    key = (jitted, tree, tuple(jax.typeof(x) for x in leaves))
    if key in _COMPILED:
        return _COMPILED[key], 0.0
    t0 = time.perf_counter()
    options = CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
    _COMPILED[key] = jitted.lower(*args).compile(compiler_options=options)
    return _COMPILED[key], time.perf_counter() - t0
