"""`codesign optimize --method gradient` timed as a user runs it: a whole process,
cold (a fresh executable store) and again with the store warm, beside the
exhaustive grid's optimum. Prints one JSON line per problem, then a summary.

    python benchmarks/whole_process.py [--problems NAME,...] [--checkout DIR ...]
                                       [--no-grid] [--repeat N]

The problems are `benchmarks/search.py`'s four of issue 55 (GPT-3's plan and
bandwidths, Llama-3-70B's plan, domain and GPUs at 4 and 12 bandwidth points,
Llama-3-70B within a $3M budget), each turned into the command line a user
would type (`--vary`, `--bounds`, `--objective`, `--budget-usd`). Each
`--checkout` (a repository root; default: this one) runs its own
`python -m codesign` (`PYTHONPATH` set to it), side by side in one run, so that
two commits are compared on the same machine at the same time:

- cold_s: wall seconds of the gradient command with an empty `CODESIGN_CACHE`
  (tracing, compiling, the descent, the exact evaluation, Python's start);
- warm_s: the same command again, the store now holding its executables;
- cold_cpu_s, warm_cpu_s: the CPU seconds (user and system) the same two processes
  used, their threads' together: less disturbed than wall seconds by other work on
  a shared machine, though a process that compiles on two cores at once (the
  gradient method's three programs, `compiling.ahead`) spends about as many CPU
  seconds for fewer wall seconds;
- with --repeat N, each checkout's cold and warm pair runs N times, the checkouts
  taking turns, and each figure is the least of the N (the least disturbed run);
- grid_value (the first checkout only, unless --no-grid): `--method grid` with the
  problem's grid points; gap_pct = 100 (gradient - grid) / |grid| in the
  minimised direction (negative: the gradient found a better design between
  the grid's points).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ISSUE_55 = ("gpt3_plan_and_bandwidth", "llama70b_plan_domain_gpus",
            "llama70b_plan_domain_gpus_12bw", "llama70b_budget_3m")


def _search():
    spec = importlib.util.spec_from_file_location("search", HERE / "search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command(problem: tuple, method: str) -> list[str]:
    """The `codesign optimize` arguments of one `search.PROBLEMS` entry."""
    source, overrides, vary, objective, limits, points, _ = problem
    args = ["optimize", source, *sum((["--set", o] for o in overrides), []),
            "--vary", ",".join(vary), *sum((["--bounds", f"{k}={lo}:{hi}"]
                                            for k, (lo, hi) in vary.items()), []),
            "--objective", objective, "--method", method, "--json", "--no-progress"]
    if "budget_usd" in limits:
        args += ["--budget-usd", str(limits["budget_usd"])]
    if "budget_w" in limits:
        args += ["--budget-w", str(limits["budget_w"])]
    if method == "grid":
        args += ["--grid-points", str(points)]
    return args


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(checkout: Path, args: list[str], cache: str) -> tuple[float, dict, float]:
    """(wall seconds, the printed JSON, CPU seconds) of `python -m codesign ARGS`
    from `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "CODESIGN_CACHE": cache}
    t0, cpu0 = time.perf_counter(), _children_cpu_s()
    proc = subprocess.run([sys.executable, "-m", "codesign", *args], capture_output=True,
                          text=True, env=env, cwd=checkout, timeout=1800, check=False)
    wall, cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} (in {checkout}): exit {proc.returncode}: "
                           f"{proc.stderr.strip().splitlines()[-1:]}")
    return wall, json.loads(proc.stdout), cpu


def cold_and_warm(checkout: Path, problem: tuple) -> dict:
    """One checkout's gradient command on `problem`, cold then warm, in a fresh store."""
    with tempfile.TemporaryDirectory() as cache:
        cold, out, cold_cpu = run(checkout, command(problem, "gradient"), cache)
        warm, _, warm_cpu = run(checkout, command(problem, "gradient"), cache)
    return {"cold_s": cold, "warm_s": warm, "cold_cpu_s": cold_cpu, "warm_cpu_s": warm_cpu,
            "value": value_of(out)}


def value_of(out: dict) -> float:
    """The optimum's objective value in a `codesign optimize --json` output."""
    return float(out["objective"]["value"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", default=",".join(ISSUE_55))
    ap.add_argument("--checkout", action="append", default=None,
                    help="a repository root whose codesign runs (repeatable; default: this one)")
    ap.add_argument("--no-grid", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each checkout's cold and warm pair; the least is kept")
    args = ap.parse_args(argv)
    checkouts = [Path(c).resolve() for c in (args.checkout or [HERE.parent])]
    problems = _search().PROBLEMS
    rows = []
    for name in args.problems.split(","):
        problem = problems[name]
        row = {"problem": name}
        runs = [[cold_and_warm(c, problem) for c in checkouts] for _ in range(args.repeat)]
        for i, checkout in enumerate(checkouts):
            tag = "" if i == 0 else f"_{i}"
            mine = [r[i] for r in runs]
            row |= {f"checkout{tag}": str(checkout),
                    **{f"{k}{tag}": round(min(m[k] for m in mine), 2)
                       for k in ("cold_s", "warm_s", "cold_cpu_s", "warm_cpu_s")},
                    f"value{tag}": mine[0]["value"]}
            if len({m["value"] for m in mine}) > 1:
                raise RuntimeError(f"{name} (in {checkout}): the optimum changed between runs")
        if not args.no_grid:
            with tempfile.TemporaryDirectory() as cache:
                grid_s, grid, _ = run(checkouts[0], command(problem, "grid"), cache)
            sign = -1.0 if grid["objective"]["goal"] == "max" else 1.0
            row |= {"grid_s": round(grid_s, 2), "grid_value": value_of(grid),
                    "gap_pct": 100.0 * sign * (row["value"] - value_of(grid))
                    / abs(value_of(grid))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"kind": "summary", "cold_s_max": max(r["cold_s"] for r in rows),
                      "warm_s_max": max(r["warm_s"] for r in rows),
                      **({"gap_pct_max": max(r["gap_pct"] for r in rows)}
                         if not args.no_grid else {}),
                      "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
