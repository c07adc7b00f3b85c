"""The gradient co-design method against the exhaustive grid. Prints JSON.

    python benchmarks/codesign.py [--problems NAME,...] [--starts 32] [--steps 150]
                                  [--no-grid] [--out results.json]

Each problem is a `codesign.optimize.Problem` whose grid (every admissible
integer of every integer knob x `grid_points` values of every continuous knob)
holds at least 10^6 points. For each, one JSON line:

- grid: the true optimum on the grid (`grid_search`), its evaluations (= the
  grid size: every point is evaluated exactly), how many points were
  feasible, wall time;
- gradient: `optimize` (multi-start relaxed descent, rounding, lattice search,
  polish), its objective, evaluations (relaxed value-and-gradients + exact
  evaluations) and wall time (compilation included for both methods);
- gap_pct: 100 x (gradient - grid) / |grid| in the minimised direction
  (negative: the gradient beat the grid, which samples continuous knobs only
  at grid points); eval_ratio_pct: gradient evaluations / grid evaluations.

Done when every problem has gap_pct <= 1 and eval_ratio_pct <= 1. The last
line is a summary object with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

# This script shares the package's name: keep its own directory off the import
# path so that `import codesign` finds the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # as the codesign command computes

from codesign import optimize  # noqa: E402
from codesign import scenario as sc  # noqa: E402
from codesign.units import GB  # noqa: E402

# name -> (scenario, overrides, vary {knob: (lo, hi)}, objective, limits, grid_points, what)
PROBLEMS = {
    "gpt3_plan_and_bandwidth": (
        "default", [],
        {"parallel.tp": (1, 32), "parallel.pp": (1, 64), "training.micro_batch": (1, 16),
         "parallel.interleave": (1, 8),
         "system.scale_out_bandwidth_Bps": (10 * GB, 200 * GB),
         "system.scale_up_bandwidth_Bps": (100 * GB, 900 * GB)},
        "cost_to_train_usd", {}, 20,
        "GPT-3 175B on 1024 A100s: the 3D plan and both tiers' bandwidths for the "
        "cheapest run (bandwidth costs fabric, saves GPU-hours)"),
    "a_domain_vs_scale_out_at_budget": (
        "default", [],
        {"system.scale_up_domain": (8, 256), "parallel.tp": (1, 32), "parallel.pp": (1, 64),
         "training.micro_batch": (1, 8),
         "system.scale_out_bandwidth_Bps": (10 * GB, 200 * GB),
         "system.scale_up_bandwidth_Bps": (100 * GB, 900 * GB)},
        "time_to_train", {"budget_usd": 2.0e6}, 32,
        "(a) GPT-3 175B: scale-up domain size and tensor parallelism against "
        "scale-out bandwidth, fastest run within a $2.0M cost-to-train budget"),
    "b_moe_node_limit_vs_scale_out": (
        "deepseek-v3", [],
        {"parallel.moe_node_limit": (1, 8), "parallel.ep": (8, 256), "parallel.pp": (4, 32),
         "system.scale_up_domain": (8, 64), "training.micro_batch": (1, 4),
         "system.scale_out_bandwidth_Bps": (10 * GB, 200 * GB),
         "system.scale_up_bandwidth_Bps": (100 * GB, 900 * GB)},
        "cost_to_train_usd", {}, 20,
        "(b) DeepSeek-V3 on 2048 H800s: node limit, expert and pipeline parallelism, "
        "domain size and both bandwidths for the cheapest run"),
    "c_micro_batches_vs_memory": (
        "llama3-405b", [],
        {"training.micro_batch": (1, 8), "parallel.pp": (4, 64), "parallel.interleave": (1, 8),
         "parallel.tp": (2, 16), "parallel.cp": (1, 8), "training.global_batch": (1792, 2304)},
        "time_to_train", {}, 2,
        "(c) Llama 3 405B on 16,384 H100s: micro-batch size and count (global batch), "
        "pipeline depth and interleaving, tp and cp under 80 GB per GPU"),
    "d_checkpoint_vs_cluster_size": (
        "default", [],
        {"system.gpus": (512, 16384), "reliability.checkpoint_interval_s": (30, 7200),
         "training.micro_batch": (1, 4), "system.scale_out_bandwidth_Bps": (10 * GB, 200 * GB)},
        "time_to_train", {"budget_usd": 2.2e6}, 32,
        "(d) GPT-3 175B: cluster size and checkpoint interval (with micro-batch size and "
        "scale-out bandwidth), fastest run within a $2.2M budget"),
}


def build(name: str, problems: dict = PROBLEMS) -> tuple[optimize.Problem, int, str]:
    """The `optimize.Problem` of `problems[name]`, its grid points and its description
    (benchmarks/search.py passes its own table, which takes a problem from this one)."""
    source, overrides, vary, objective, limits, points, what = problems[name]
    scn = sc.load(source, overrides)
    return optimize.problem(scn, list(vary), vary, objective, **limits), points, what


def gap_pct(prob: optimize.Problem, gradient: float, grid: float) -> float:
    sign = optimize.OBJECTIVES[prob.objective][1]
    return 100.0 * sign * (gradient - grid) / abs(grid)


def run(name: str, starts: int, steps: int, grid: bool, progress: bool) -> dict:
    prob, points, what = build(name)
    size = optimize.grid_size(prob, points)
    g = optimize.optimize(prob, starts=starts, steps=steps)
    row = {"problem": name, "what": what, "objective": prob.objective,
           "knobs": list(prob.names), "grid_points": points, "grid_size": size,
           "gradient": {"value": g.value, "feasible": g.feasible, "evaluations": g.evaluations,
                        "wall_s": round(g.wall_s, 2), "best": g.best}}
    if grid:
        r = optimize.grid_search(prob, points, progress=progress)
        row["grid"] = {"value": r.value, "feasible": r.feasible, "evaluations": r.evaluations,
                       "feasible_points": r.feasible_points, "wall_s": round(r.wall_s, 2),
                       "best": r.best}
        row["gap_pct"] = gap_pct(prob, g.value, r.value)
        row["eval_ratio_pct"] = 100.0 * g.evaluations / r.evaluations
        row["done"] = bool(g.feasible and row["gap_pct"] <= 1.0
                           and row["eval_ratio_pct"] <= 1.0)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS),
                        help="comma-separated subset of " + ", ".join(PROBLEMS))
    parser.add_argument("--starts", type=int, default=32)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--no-grid", action="store_true", help="gradient method only")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--out", help="also write the summary JSON here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.problems.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        print(f"error: unknown problem(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        row = run(name, args.starts, args.steps, not args.no_grid, not args.no_progress)
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {
        "benchmark": "codesign", "starts": args.starts, "steps": args.steps,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "table": [{k: r.get(k) for k in ("problem", "grid_size", "gap_pct", "eval_ratio_pct",
                                          "done")}
                  | {"gradient_evaluations": r["gradient"]["evaluations"],
                     "gradient_wall_s": r["gradient"]["wall_s"],
                     "grid_evaluations": r.get("grid", {}).get("evaluations"),
                     "grid_wall_s": r.get("grid", {}).get("wall_s")} for r in rows],
        "all_done": all(r.get("done", False) for r in rows),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
