"""Hand-written collectives against the jax.lax built-ins, and the calibrated
model's prediction error. Prints JSON lines.

    python -P benchmarks/collectives_exec.py [--sizes 4KiB:1MiB] [--iters 10] [--devices 8]

(-P: do not put benchmarks/ first on sys.path, where a module could shadow codesign.)

For every op and every hand-written algorithm the devices can run (flat ones
on a 1D mesh of all devices, `hierarchical` on a 2 x (devices/2) mesh), at
each size the algorithm and the lax built-in are called alternately, one call
each per iteration, so both see the same machine state; a line per size gives
both minimum times and `ratio` = algorithm / lax (above 1: the hand-written
one is slower). Every output is checked (`wrong` must be 0).

Then each algorithm's alpha-beta(-gamma) model is fitted (`codesign.execute
.calibrate`) on two thirds of its sizes and asked for the held-out third:
a line per algorithm gives alpha, bandwidth and the held-out errors (max and
median of |model / measured - 1|). A last line summarises.

On fake CPU devices the "network" is memory copies between threads and each
message costs a thread rendezvous, so latency dominates below ~1 MiB and the
figures say how the algorithms compare in message count, not what a GPU
fabric would do; run it on GPUs for those.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def side_by_side(fn_a, fn_b, xs, iters: int, warmup: int):
    """Warm both up on every input, then `iters` rounds: in each, every input in turn
    gets one call of fn_a and one of fn_b. Returns per input (times_a, times_b,
    out_a, out_b)."""
    import jax

    outs = [(jax.block_until_ready(fn_a(x)), jax.block_until_ready(fn_b(x)))
            for x in xs for _ in range(max(warmup, 1))][max(warmup, 1) - 1::max(warmup, 1)]
    times = [([], []) for _ in xs]
    for _ in range(iters):
        for i, x in enumerate(xs):
            start = time.perf_counter()
            out_a = jax.block_until_ready(fn_a(x))
            middle = time.perf_counter()
            out_b = jax.block_until_ready(fn_b(x))
            times[i][0].append(middle - start)
            times[i][1].append(time.perf_counter() - middle)
            outs[i] = (out_a, out_b)
    return [(ta, tb, oa, ob) for (ta, tb), (oa, ob) in zip(times, outs, strict=True)]


def run(sizes, iters: int, warmup: int) -> list[dict]:
    import jax

    jax.config.update("jax_enable_x64", True)  # as the codesign command computes
    from codesign.execute import bench, calibrate

    flat, two_level = bench.make_mesh(None), None
    if flat.ranks % 2 == 0 and flat.ranks >= 4:
        two_level = bench.make_mesh(f"2x{flat.ranks // 2}")
    lines, fits = [], []
    for op in OPS:
        cases = [(a, flat) for a in bench.runnable_algorithms(op, flat) if a != "lax"]
        if two_level is not None:
            cases.append(("hierarchical", two_level))
        for algorithm, mesh in cases:
            fn, ref = bench.compiled(op, algorithm, mesh), bench.compiled(op, "lax", mesh)
            measurements = []
            cases = [bench.prepare(op, mesh, size) for size in sizes]
            timed = side_by_side(fn, ref, [c.x for c in cases], iters, warmup)
            for case, (ta, tb, oa, ob) in zip(cases, timed, strict=True):
                ra = bench.record(op, algorithm, mesh, case, "float32", ta, oa)
                rb = bench.record(op, "lax", mesh, case, "float32", tb, ob)
                lines.append({"op": op, "algorithm": algorithm, "mesh": mesh.spec,
                              "size_bytes": ra.size_bytes, "time_s": ra.time_s,
                              "lax_time_s": rb.time_s, "ratio": ra.time_s / rb.time_s,
                              "wrong": ra.wrong + rb.wrong})
                measurements.append(calibrate.Measurement(
                    op, calibrate.model_algorithm(op, algorithm, mesh.ranks), mesh.ranks,
                    float(ra.size_bytes), ra.time_s, "scale_up", "bench",
                    local_ranks=mesh.ranks))
            if algorithm == "hierarchical":  # spans two tiers: its fit needs both
                continue
            fit = calibrate.fit(measurements).tiers["scale_up"]
            fits.append({"op": op, "algorithm": algorithm, "mesh": mesh.spec,
                         "alpha_s": fit.alpha_s, "bandwidth_Bps": fit.bandwidth_Bps,
                         "holdout_error": fit.holdout_error,
                         "holdout_error_median": fit.holdout_error_median,
                         "holdout_points": fit.holdout_points})
    ratios = [ln["ratio"] for ln in lines]
    summary = {
        "summary": True, "devices": flat.ranks, "platform": jax.devices()[0].platform,
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "sizes": [int(s) for s in sizes], "iters": iters,
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
        "ratio_max": max(ratios), "wrong": sum(ln["wrong"] for ln in lines),
        "holdout_error_max_median_over_algorithms": statistics.median(
            f["holdout_error"] for f in fits),
        "holdout_error_median_median_over_algorithms": statistics.median(
            f["holdout_error_median"] for f in fits),
        "holdout_error_within_25pct": sum(f["holdout_error"] < 0.25 for f in fits),
        "fits": len(fits),
    }
    return lines + fits + [summary]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4KiB:1MiB")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices on CPU")
    args = parser.parse_args()
    # before JAX starts (importing codesign may start it): the CPU device count
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                                   f"--xla_force_host_platform_device_count={args.devices}")
    from codesign.units import parse_size_range

    for line in run(parse_size_range(args.sizes), args.iters, args.warmup):
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
