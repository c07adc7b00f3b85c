"""Sweep runner throughput: configurations per second on 1 process and on 2
(side by side, `codesign sweep --processes N` end to end), and the cost of
checkpointing every chunk (the same run with and without writing chunks).

    .venv/bin/python benchmarks/sweep.py [--workload collective|estimate] [--quick]

Prints one JSON object per workload. The two process counts get the same total
number of fake CPU devices (`--devices`, default 2: 1 x 2 vs 2 x 1), so the
comparison is of the runner (processes, jax.distributed, chunk hand-out), not
of the hardware. Wall times include interpreter start-up and compilation;
`runner_s` is what the runner itself reports (evaluation, writing, merging).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = {
    # cheap points: measures the runner (chunking, sharding, writing) more than the model
    "collective": """
name = "bench-collective"
target = "collective"
chunk_size = {chunk}
[base]
system = "dgx-h100"
[knobs]
algorithm = {{ categories = ["ring", "tree"] }}
ranks = {{ log_grid = [2, 4096, 12] }}
n_bytes = {{ log_grid = ["1KiB", "4GiB", {n}] }}
""",
    # expensive points: the whole step model of Llama 3 405B
    "estimate": """
name = "bench-estimate"
target = "estimate"
chunk_size = {chunk}
[base]
scenario = "llama3-405b"
[knobs]
system.scale_out_bandwidth_Bps = {{ log_grid = ["10GB/s", "400GB/s", {n}] }}
"system.scale_up_bandwidth_Bps" = {{ log_grid = ["100GB/s", "900GB/s", 8] }}
""",
}
SIZES = {"collective": (2000, 4096), "estimate": (256, 256)}  # (n, chunk)
QUICK = {"collective": (200, 512), "estimate": (32, 64)}


def _spec(folder: Path, workload: str, quick: bool) -> Path:
    n, chunk = (QUICK if quick else SIZES)[workload]
    path = folder / f"{workload}.toml"
    path.write_text(WORKLOADS[workload].format(n=n, chunk=chunk))
    return path


def _cli(spec: Path, out: Path, processes: int, devices: int, *extra) -> dict:
    cmd = [sys.executable, "-m", "codesign", "sweep", str(spec), "--out", str(out),
           "--processes", str(processes), "--cpu-devices", str(devices // processes),
           "--no-plots", "--no-progress", "--timeout", "900", *extra]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    m = re.search(r"(\d+) points, (\d+) chunks computed, \d+ from disk, ([0-9.]+) s", done.stdout)
    points, chunks, runner_s = int(m.group(1)), int(m.group(2)), float(m.group(3))
    return {"processes": processes, "devices_per_process": devices // processes,
            "points": points, "chunks": chunks, "wall_s": round(wall, 3),
            "runner_s": runner_s, "points_per_s_wall": round(points / wall, 1),
            "points_per_s_runner": round(points / runner_s, 1)}


def _checkpoint_cost(spec: Path, out: Path, devices: int, repeats: int) -> dict:
    """In one process: `sweep.run` with and without writing chunks (best of `repeats`,
    compilation excluded by a warm-up run over the same jitted functions)."""
    code = f"""
import json, time
import jax
jax.config.update("jax_num_cpu_devices", {devices})
jax.config.update("jax_enable_x64", True)  # as the codesign command computes
from codesign import sweep
from codesign.sweep._evaluate import Evaluator, chunk_rows  # the loop inside sweep.run
from codesign.sweep._store import prepare_out_dir, write_chunk
job = sweep.make_job(sweep.load_spec({str(spec)!r}))
ev = Evaluator(job)
def once(write):
    start = time.perf_counter()
    if write:
        prepare_out_dir(job, {str(out)!r}, resume=False)
    for chunk in job.chunks:
        rows = chunk_rows(job, chunk, ev(chunk))
        if write:
            write_chunk(job, {str(out)!r}, chunk, rows)
    return time.perf_counter() - start
once(False)  # compile every combo
times = {{w: min(once(w) for _ in range({repeats})) for w in (False, True)}}
print(json.dumps({{"points": job.points.size, "chunks": len(job.chunks),
                  "no_write_s": times[False], "write_s": times[True]}}))
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    r = json.loads(done.stdout.strip().splitlines()[-1])
    extra = r["write_s"] - r["no_write_s"]
    chunk_bytes = sum(p.stat().st_size for p in (out / "chunks").iterdir())
    return {"points": r["points"], "chunks": r["chunks"],
            "no_write_s": round(r["no_write_s"], 4), "write_s": round(r["write_s"], 4),
            "overhead_fraction": round(extra / r["no_write_s"], 3),
            "ms_per_chunk": round(1e3 * extra / r["chunks"], 3),
            "chunk_bytes_on_disk": chunk_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=tuple(WORKLOADS) + ("all",), default="all")
    parser.add_argument("--devices", type=int, default=2, help="fake CPU devices in total")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sweeps (a smoke run)")
    args = parser.parse_args()
    workloads = tuple(WORKLOADS) if args.workload == "all" else (args.workload,)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for workload in workloads:
            spec = _spec(tmp, workload, args.quick)
            one = _cli(spec, tmp / f"{workload}-1", 1, args.devices)
            two = _cli(spec, tmp / f"{workload}-2", 2, args.devices)
            same = all((tmp / f"{workload}-1" / f).read_bytes()
                       == (tmp / f"{workload}-2" / f).read_bytes()
                       for f in ("results.csv", "results.json"))
            print(json.dumps({
                "benchmark": "sweep", "workload": workload, "cpu_count": os.cpu_count(),
                "one_process": one, "two_processes": two,
                "speedup_wall": round(one["wall_s"] / two["wall_s"], 3),
                "identical_results": same,
                "checkpoint": _checkpoint_cost(spec, tmp / f"{workload}-ckpt", args.devices,
                                               args.repeats),
            }), flush=True)


if __name__ == "__main__":
    main()
