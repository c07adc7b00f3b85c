"""How fast is the step model? Prints one JSON object.

    python benchmarks/estimate.py [--batch 100000] [--chunk 25000] [--block 1000] [--repeats 5]

Random scenarios are built with `scenario.set_knobs` from the built-in default
(GPT-3 175B on 1,024 A100s) by drawing tp and pp from {1, 2, 4, 8},
micro_batch from {1, 2, 4}, the global batch (m = 1..64 micro-batches), both
tiers' bandwidths, latencies and efficiencies, the scale-up domain, the
matmul efficiency and the DP bucket size. One `jax.jit(jax.vmap(...))`
evaluates them in chunks of `--chunk` scenarios:

- evals_per_s: full estimates (`step.estimate` -> every scalar of
  `step.outputs`: step time, memory, MFU, reliability, fabric) per second,
  the faster of the whole chunk and `--block` points at a time (as below;
  `evals_per_s_whole_chunk` is the former). Every vmapped program compiles
  with the options of the grid's kernel (`compiling.options(batch=True)`).
- grad_over_forward: time of `jax.grad` of step_time_s with respect to every
  drawn knob, over the same scenarios, divided by the time of the forward
  pass of step_time_s alone (the function being differentiated), measured
  side by side; medians of `--repeats` runs, each blocked until ready. Each
  side is timed two ways, vmapped over the whole chunk and vmapped over
  `--block` points at a time (`lax.map` over the blocks), and the faster of
  each counts: the reverse pass keeps ~190 arrays of the batch live (XLA
  fuses it into ~190 loops, against ~29 for the forward), which spill out of
  cache at 25,000 points and stay in it at 1,000, while the forward is
  fastest over the whole chunk. `grad_over_forward_whole_chunk` is the ratio
  without blocks (how this benchmark measured it before), and
  `grad_blocked_max_rel_diff` checks that blocks change no gradient.
- compile_s: first-call time of the full-estimate function (trace + compile +
  one chunk), and the same for the two step-time functions.
- scenarios: for each built-in scenario, the size of the jaxpr of one full
  estimate (`equations`: every equation, those of sub-jaxprs included, as
  `jit`, `custom_jvp` and loop bodies nest them; `top_level_equations`), the
  time to trace, lower and XLA-compile it (unbatched, as `codesign estimate`
  runs it: without the traced domain check, with `compiling.options()`;
  `xla_compile_default_options_s` at XLA's defaults, and
  `equations_with_traced_check` as under jit of user code;
  `relaxed_equations` and `relaxed_gradient_equations`: the step time at a
  traced temperature, as the gradient method evaluates it, and its gradient
  with respect to the scenario), and
  `equations_by_module`: the equations each codesign module emits (the
  innermost codesign frame of each equation's traceback; library code such
  as jnp.interp counts for the codesign function that called it).
  `--profile-only` prints just these.

Also reports how many outputs or gradients were not finite (should be 0).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

# `python benchmarks/estimate.py` puts benchmarks/ first on the import path, where a
# sibling script named codesign.py would shadow the package: keep that directory off it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import jax  # noqa: E402
import jax.extend as jex  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)  # as the codesign command computes
from codesign import scenario as sc  # noqa: E402
from codesign.compiling import options  # noqa: E402
from codesign.model import relax, step  # noqa: E402

CHOICES = {"parallel.tp": (1, 2, 4, 8), "parallel.pp": (1, 2, 4, 8),
           "training.micro_batch": (1, 2, 4), "system.scale_up_domain": (4, 8, 16, 72)}
LOG_UNIFORM = {  # knob: (low, high)
    "system.scale_up_bandwidth_Bps": (100e9, 900e9),
    "system.scale_out_bandwidth_Bps": (12.5e9, 100e9),
    "system.scale_up_latency_s": (0.3e-6, 3e-6),
    "system.scale_out_latency_s": (1e-6, 20e-6),
    "parallel.dp_bucket_bytes": (4e6, 400e6),
}
UNIFORM = {
    "system.scale_up_efficiency": (0.6, 1.0),
    "system.scale_out_efficiency": (0.6, 1.0),
    "system.matmul_efficiency": (0.4, 0.9),
}


def count_equations(jaxpr, by_module: collections.Counter | None = None) -> int:
    """Equations of `jaxpr` and of every sub-jaxpr (a nested jit, a custom_jvp's
    function, a loop body), counted where they appear; `by_module` tallies them by
    the codesign module of the innermost codesign frame that emitted them."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        if by_module is not None:
            by_module[_module(eqn)] += 1
        for sub in jex.core.jaxprs_in_params(eqn.params):
            total += count_equations(sub, by_module)
    return total


def _module(eqn) -> str:
    traceback = eqn.source_info.traceback
    for frame in traceback.frames if traceback is not None else ():
        path = Path(frame.file_name)
        if "codesign" in path.parts[:-1]:
            parts = path.parts[len(path.parts) - path.parts[::-1].index("codesign") - 1:]
            return ".".join(parts)[:-3]
    return "other"


def compile_profile(names=sc.BUILTIN) -> dict:
    """Per built-in scenario: the jaxpr of one full estimate as `codesign
    estimate` compiles it (`step.outputs` of `step.estimate(scn, check=False)`:
    a loaded scenario's values were checked on load) and the seconds to trace,
    lower and compile it, with the command's XLA options
    (`compiling.options()`) and with XLA's defaults; and the size of
    the program with the traced domain check (`check=True`, as under jit/vmap/grad
    of user code)."""
    def full(scn):
        return step.outputs(step.estimate(scn, check=False))

    def checked(scn):
        return step.outputs(step.estimate(scn))

    def relaxed_step_time_s(scn, t):  # what the gradient method descends (t traced)
        return step.estimate(scn, relax.Relaxed(t), check=False,
                             parts=()).step.step_time_s  # the step alone

    out = {}
    for name in names:
        scn = sc.load(name)
        jax.clear_caches()  # scenarios of one structure (megatron-8.3b, -1t) compile each
        t0 = time.perf_counter()
        closed = jax.make_jaxpr(full)(scn)
        t1 = time.perf_counter()
        lowered = jax.jit(full).lower(scn)
        t2 = time.perf_counter()
        lowered.compile(compiler_options=options())
        t3 = time.perf_counter()
        again = jax.jit(lambda s: full(s)).lower(scn)  # a new function: compiled anew
        t4 = time.perf_counter()
        again.compile()
        t5 = time.perf_counter()
        by_module = collections.Counter()
        total = count_equations(closed.jaxpr, by_module)
        out[name] = {"equations": total, "top_level_equations": len(closed.jaxpr.eqns),
                     "equations_with_traced_check": count_equations(
                         jax.make_jaxpr(checked)(scn).jaxpr, collections.Counter()),
                     "relaxed_equations": count_equations(jax.make_jaxpr(relaxed_step_time_s)(
                         scn, jnp.asarray(0.05)).jaxpr),
                     "relaxed_gradient_equations": count_equations(jax.make_jaxpr(jax.grad(
                         relaxed_step_time_s))(scn, jnp.asarray(0.05)).jaxpr),
                     "trace_s": t1 - t0, "lower_s": t2 - t1, "xla_compile_s": t3 - t2,
                     "xla_compile_default_options_s": t5 - t4,
                     "equations_by_module": dict(by_module.most_common())}
    return out


def random_knobs(n: int, gpus: float, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = {k: rng.choice(np.asarray(v, dtype=float), n) for k, v in CHOICES.items()}
    x |= {k: np.exp(rng.uniform(np.log(lo), np.log(hi), n)) for k, (lo, hi) in
          LOG_UNIFORM.items()}
    x |= {k: rng.uniform(lo, hi, n) for k, (lo, hi) in UNIFORM.items()}
    dp = gpus / (x["parallel.tp"] * x["parallel.pp"])
    micro_batches = rng.integers(1, 65, n).astype(float)
    x["training.global_batch"] = dp * x["training.micro_batch"] * micro_batches
    return x


def _chunks(x: dict, chunk: int):
    n = len(next(iter(x.values())))
    for i in range(0, n, chunk):
        yield {k: jnp.asarray(v[i:i + chunk]) for k, v in x.items()}


def blocked(fn, block: int):
    """`fn` vmapped over `block` points at a time: `lax.map` over the blocks of a
    chunk (whose length `block` divides)."""
    def run(knobs):
        n = len(next(iter(knobs.values())))
        parts = jax.tree.map(lambda a: a.reshape(n // block, block), knobs)
        return jax.tree.map(lambda a: a.reshape(n), jax.lax.map(jax.vmap(fn), parts))

    return run


def _timed(fn, chunks) -> tuple[float, list]:
    t0 = time.perf_counter()
    out = [jax.block_until_ready(fn(c)) for c in chunks]
    return time.perf_counter() - t0, out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=100_000, help="random scenarios (default 1e5)")
    ap.add_argument("--chunk", type=int, default=25_000, help="scenarios per vmapped call")
    ap.add_argument("--block", type=int, default=1000,
                    help="points per vmapped block in the blocked timings (divides --chunk)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile-only", action="store_true",
                    help="print only the per-scenario jaxpr sizes and compile times")
    args = ap.parse_args(argv)
    if args.profile_only:
        result = {"scenarios": compile_profile()}
        print(json.dumps(result))
        return result
    if args.batch % args.chunk:
        ap.error(f"--batch={args.batch} must be a multiple of --chunk={args.chunk}")
    if args.chunk % args.block:
        ap.error(f"--chunk={args.chunk} must be a multiple of --block={args.block}")

    base = sc.load(None)
    x = random_knobs(args.batch, float(base.system.gpus), args.seed)
    chunks = list(_chunks(x, args.chunk))

    def full(knobs):  # every scalar output of the whole estimate
        return step.outputs(step.estimate(sc.set_knobs(base, knobs)))

    def step_time(knobs):  # the step alone (no reliability, fabric or price traced)
        return step.estimate(sc.set_knobs(base, knobs), parts=()).step.step_time_s

    def jit(fn):  # as the grid's kernel compiles (`compiling.options(batch=True)`)
        return jax.jit(fn, compiler_options=options(batch=True))

    forward_full = jit(jax.vmap(full))
    full_blocked = jit(blocked(full, args.block))
    forward = jit(jax.vmap(step_time))
    grad = jit(jax.vmap(jax.grad(step_time)))
    forward_blocked = jit(blocked(step_time, args.block))
    grad_blocked = jit(blocked(jax.grad(step_time), args.block))

    compile_s = {}
    for name, fn in (("full", forward_full), ("full_blocked", full_blocked),
                     ("step_time", forward), ("grad", grad),
                     ("step_time_blocked", forward_blocked), ("grad_blocked", grad_blocked)):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(chunks[0]))
        compile_s[name] = time.perf_counter() - t0

    t_full, t_full_b, t_fwd, t_grad, t_fwd_b, t_grad_b = [], [], [], [], [], []
    for _ in range(args.repeats):  # interleaved, so load on the machine hits all alike
        t, outs_full = _timed(forward_full, chunks)
        t_full.append(t)
        t_full_b.append(_timed(full_blocked, chunks)[0])
        t, outs_fwd = _timed(forward, chunks)
        t_fwd.append(t)
        t, outs_grad = _timed(grad, chunks)
        t_grad.append(t)
        t_fwd_b.append(_timed(forward_blocked, chunks)[0])
        t, outs_grad_b = _timed(grad_blocked, chunks)
        t_grad_b.append(t)

    step_s = np.concatenate([np.asarray(o["step_time_s"]) for o in outs_full])
    nonfinite_outputs = sum(int(np.sum(~np.isfinite(np.asarray(o[k]))))
                            for o in outs_full for k in o if k not in ("time_to_train_s",
                                                                        "gpu_hours"))
    nonfinite_grads = {k: int(sum(np.sum(~np.isfinite(np.asarray(g[k]))) for g in outs_grad))
                       for k in x}
    fwd_match = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b["step_time_s"]))))
                    for a, b in zip(outs_fwd, outs_full, strict=True))

    blocked_diff = max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k]))
                                    / np.maximum(np.abs(np.asarray(a[k])), 1e-300)))
                       for a, b in zip(outs_grad, outs_grad_b, strict=True) for k in a)

    med = statistics.median
    dev = jax.devices()[0]
    best_fwd, best_grad = min(med(t_fwd), med(t_fwd_b)), min(med(t_grad), med(t_grad_b))
    result = {
        "evals_per_s": args.batch / min(med(t_full), med(t_full_b)),
        "evals_per_s_whole_chunk": args.batch / med(t_full),
        "grad_over_forward": best_grad / best_fwd,
        "grad_over_forward_whole_chunk": med(t_grad) / med(t_fwd),
        "compile_s": compile_s["full"],
        "batch": args.batch,
        "chunk": args.chunk,
        "block": args.block,
        "repeats": args.repeats,
        "knobs": sorted(x),
        "full_estimate_s": med(t_full),
        "full_estimate_blocked_s": med(t_full_b),
        "step_time_forward_s": med(t_fwd),
        "step_time_grad_s": med(t_grad),
        "step_time_forward_blocked_s": med(t_fwd_b),
        "step_time_grad_blocked_s": med(t_grad_b),
        "grad_blocked_max_rel_diff": blocked_diff,
        "step_time_evals_per_s": args.batch / med(t_fwd),
        "grads_per_s": args.batch / best_grad,
        "grad_over_full_estimate": med(t_grad) / med(t_full),
        "compile_step_time_s": compile_s["step_time"],
        "compile_grad_s": compile_s["grad"],
        "compile_grad_blocked_s": compile_s["grad_blocked"],
        "step_time_s_range": [float(np.min(step_s)), float(np.median(step_s)),
                              float(np.max(step_s))],
        "nonfinite_outputs": nonfinite_outputs,
        "nonfinite_grads": {k: v for k, v in nonfinite_grads.items() if v},
        "forward_max_abs_diff_s": fwd_match,
        "scenarios": compile_profile(),
        "device": {"platform": dev.platform, "kind": dev.device_kind,
                   "count": jax.device_count(), "cpu_count": os.cpu_count(),
                   "machine": platform.machine(), "jax": jax.__version__,
                   "x64": bool(jax.config.jax_enable_x64)},
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
