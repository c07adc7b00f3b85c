"""One answer, by construction: drawn scenarios over every strategy family,
each evaluated eagerly, under jit and under vmap, with its gradient.

    python benchmarks/properties.py [--draws 200] [--seed 0] [--batch 3]

Each draw takes one value of every family at once (so N draws give N per
family): the attention (MHA on llama3-405b; MLA on deepseek-v3, with and
without a query low rank), the topology, the pipeline schedule, the
recomputation, the collective library's protocols, the routing, the precision
recipe and the software stack, and multiplies a few float knobs (bandwidths,
latencies, efficiencies) by random factors. A draw the loader refuses (a
schedule the plan cannot run) is counted and redrawn. For each scenario the
step time, MFU and memory per GPU of `jax.jit(jax.vmap(...))` over a batch of
scale-out bandwidths equal the eager estimates at each bandwidth to 1e-9
relative, and the gradient of log step time in every drawn float knob is
finite. Prints one JSON object: draws per family value, the largest relative
difference, the draws that failed and why, the wall time. x64, as the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

from codesign import scenario as sc  # noqa: E402
from codesign.model import step  # noqa: E402

# family -> its values, each a (label, base scenario or None, overrides)
ATTENTION = (("mha", "llama3-405b", ()), ("mla", "deepseek-v3", ()),
             ("mla, q_lora_rank 0", "deepseek-v3", ("model.q_lora_rank=0",)))
FAMILIES = {
    "topology": (("two_tier", ("system.topology='two_tier'",)),
                 ("clos", ("system.topology='clos'", "system.pod_size=1024",
                           "system.oversubscription=3")),
                 ("rail_only", ("system.topology='rail_only'",)),
                 ("torus", ("system.topology='torus'",))),
    "schedule": (("1f1b", ("parallel.schedule='1f1b'", "parallel.interleave=1")),
                 ("gpipe", ("parallel.schedule='gpipe'", "parallel.interleave=1")),
                 ("interleaved", ("parallel.schedule='interleaved'", "parallel.interleave=2")),
                 ("zero_bubble", ("parallel.schedule='zero_bubble'", "parallel.interleave=1")),
                 ("dualpipe", ("parallel.schedule='dualpipe'", "parallel.interleave=1"))),
    "recompute": tuple((r, (f"training.recompute='{r}'",)) for r in ("none", "selective", "full")),
    "protocols": tuple((p, (f"system.protocols='{p}'",)) for p in ("nccl", "alpha_beta")),
    "routing": tuple((r, (f"system.routing='{r}'",)) for r in ("ecmp", "spray", "adaptive")),
    "precision": tuple((d, (f"training.dtype='{d}'",)) for d in ("bf16", "fp8", "fp16", "fp32")),
    "stack": tuple((s, (f"training.stack='{s}'",)) for s in
                   ("megatron", "pytorch", "xla", "deepspeed")),
}
# float knobs scaled by a factor drawn log-uniformly in [1/2, 2] (efficiencies
# drawn in [0.3, 0.9])
SCALED = ("system.scale_up_bandwidth_Bps", "system.scale_up_latency_s",
          "system.scale_out_latency_s", "system.hbm_Bps")
EFFICIENCIES = ("system.matmul_efficiency", "system.hbm_efficiency")
BATCHED = "system.scale_out_bandwidth_Bps"  # the knob vmapped over
OUTPUTS = ("step_time_s", "mfu", "memory_bytes_per_gpu")


def draw(rng: random.Random) -> tuple[dict, str, list[str]]:
    """(labels per family, base scenario, overrides) of one draw."""
    attention, base, extra = rng.choice(ATTENTION)
    labels, overrides = {"attention": attention}, list(extra)
    for family, values in FAMILIES.items():
        label, sets = rng.choice(values)
        labels[family] = label
        overrides += sets
    scn = sc.load(base)
    for key in SCALED:
        overrides.append(f"{key}={float(sc.get_knob(scn, key)) * 2.0 ** rng.uniform(-1, 1)!r}")
    for key in EFFICIENCIES:
        overrides.append(f"{key}={rng.uniform(0.3, 0.9)!r}")
    return labels, base, overrides


def _outputs(scn) -> jax.Array:
    out = step.outputs(step.estimate(scn))
    return jnp.stack([jnp.asarray(out[k], float) for k in OUTPUTS])


def check(base: str, overrides: list[str], factors=(0.8, 1.0, 1.25), grad: bool = True) -> dict:
    """The largest relative difference between jit(vmap) and eager over the
    batch, and whether the gradient is finite (`grad`: compiled and checked);
    raises ValueError if the loader refuses the draw."""
    scn = sc.load(base, overrides)
    bw = float(sc.get_knob(scn, BATCHED))
    values = jnp.asarray([bw * f for f in factors])
    batched = jax.jit(jax.vmap(lambda v: _outputs(sc.set_knobs(scn, {BATCHED: v}))))(values)
    worst = 0.0
    for i, v in enumerate(values):
        eager = _outputs(sc.set_knobs(scn, {BATCHED: v}))
        rel = jnp.abs(batched[i] - eager) / jnp.maximum(jnp.abs(eager), 1e-300)
        worst = max(worst, float(jnp.max(rel)))
    if not grad:
        return {"worst_rel": worst, "finite_grad": True}
    knobs = (*SCALED, *EFFICIENCIES, BATCHED)
    here = {k: jnp.asarray(float(sc.get_knob(scn, k))) for k in knobs}
    grad = jax.jit(jax.grad(lambda x: jnp.log(step.estimate(sc.set_knobs(scn, x))
                                              .step.step_time_s)))(here)
    finite = all(math.isfinite(float(g)) for g in grad.values())
    return {"worst_rel": worst, "finite_grad": finite}


def run(draws: int, seed: int, tolerance: float = 1e-9) -> dict:
    rng = random.Random(seed)
    counts: dict = {}
    refused, failures, worst, done = 0, [], 0.0, 0
    start = time.time()
    while done < draws:
        labels, base, overrides = draw(rng)
        try:
            result = check(base, overrides)
        except ValueError:
            refused += 1
            continue
        done += 1
        for family, label in labels.items():
            counts.setdefault(family, {}).setdefault(label, 0)
            counts[family][label] += 1
        worst = max(worst, result["worst_rel"])
        if result["worst_rel"] > tolerance or not result["finite_grad"]:
            failures.append({"base": base, "overrides": overrides, **result})
    return {"draws": done, "refused_draws": refused, "per_family": counts,
            "worst_rel": worst, "tolerance": tolerance, "failures": failures,
            "wall_s": round(time.time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(run(args.draws, args.seed), indent=1))


if __name__ == "__main__":
    main()
