"""Throughput of the collective cost model: vmapped, jitted `auto` all-reduce.

Prints one JSON line per variant: configurations per second of the forward
cost over COUNT random (ranks, bytes, tier) configurations (the Tier's leaves
are vmapped too), its compile time, and the same for the gradient with respect
to bytes and every tier leaf (bandwidth, latency, efficiency, ...), measured
side by side in one run (median of REPEATS, block_until_ready).

    .venv/bin/python benchmarks/collectives.py [--count 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# run as a script, this folder heads sys.path: drop it so that a sibling file
# named like a package (benchmarks/codesign.py) cannot shadow the package
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)  # as the codesign command computes
from codesign.model import collectives as co  # noqa: E402
from codesign.model import hardware as hw  # noqa: E402


def _log_uniform(rng, lo, hi, count):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), count))


def random_tier(rng, count: int) -> hw.Tier:
    """Tiers spanning a PCIe-class NIC to a next-generation NVLink, half with NVLS/SHARP."""
    nvls = np.where(rng.uniform(size=count) < 0.5, 0.0, rng.uniform(0.3, 0.9, count))
    return hw.Tier(_log_uniform(rng, 1e9, 1e12, count), _log_uniform(rng, 1e-7, 1e-5, count),
                   rng.uniform(0.5, 1.0, count), _log_uniform(rng, 1e11, 1e13, count), nvls)


def configurations(count: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"n_bytes": _log_uniform(rng, 1.0, 1e11, count),
            "ranks": np.round(_log_uniform(rng, 2.0, 16384.0, count)),
            "tier": random_tier(rng, count), "outer": random_tier(rng, count)}


def _seconds(fn, args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def _side_by_side(fns, args, repeats: int) -> tuple[list[float], list[float]]:
    """First-call seconds (compile + run) of each function, then the median of
    `repeats` steady-state runs, the functions interleaved so that both see the
    same machine load."""
    first = [_seconds(fn, args) for fn in fns]
    runs = [[] for _ in fns]
    for _ in range(repeats):
        for fn, r in zip(fns, runs, strict=True):
            r.append(_seconds(fn, args))
    return first, [statistics.median(r) for r in runs]


def bench(hierarchical: bool, count: int, repeats: int) -> dict:
    cfg = configurations(count)

    def time_s(n_bytes, ranks, tier, outer):
        kw = dict(outer=outer, local_ranks=8.0) if hierarchical else {}
        return co.cost("all_reduce", "auto", n_bytes, ranks, tier, **kw).time_s

    forward = jax.jit(jax.vmap(time_s))
    # d time / d (bytes, every leaf of the tiers)
    gradient = jax.jit(jax.vmap(jax.grad(time_s, argnums=(0, 2, 3))))
    args = (cfg["n_bytes"], cfg["ranks"], cfg["tier"], cfg["outer"])
    (fwd_first, grad_first), (fwd_s, grad_s) = _side_by_side((forward, gradient), args, repeats)
    values = np.asarray(forward(*args))
    leaves = [np.asarray(x) for x in jax.tree.leaves(gradient(*args))]
    return {
        "benchmark": "auto all_reduce cost, vmapped + jitted",
        "candidates": list(co.algorithms("all_reduce", hierarchical=hierarchical)),
        "configurations": count,
        "forward_configs_per_s": count / fwd_s,
        "forward_s": fwd_s,
        "forward_compile_s": fwd_first - fwd_s,
        "gradient_configs_per_s": count / grad_s,
        "gradient_s": grad_s,
        "gradient_compile_s": grad_first - grad_s,
        "gradient_over_forward": grad_s / fwd_s,
        "gradient_wrt": "bytes and every leaf of the tier(s) (bandwidth, latency, efficiency, "
                        "reduction, in-network)",
        "nonfinite": int(np.sum(~np.isfinite(values))
                         + sum(int(np.sum(~np.isfinite(x))) for x in leaves)),
        "repeats": repeats,
        "device": str(jax.devices()[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for hierarchical in (False, True):
        print(json.dumps(bench(hierarchical, args.count, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
