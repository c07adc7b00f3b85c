"""Record what the `codesign` command prints, so that a refactor can be checked
to change no output: `python benchmarks/outputs.py record DIR` runs every
command of `COMMANDS` (one file per command: stdout, stderr's last line and
the exit code) and `python benchmarks/outputs.py compare OLD NEW` lists the
files that differ (wall-clock times masked). Prints one JSON line per command.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

BUILTIN = ("default", "megatron-8.3b", "megatron-1t", "llama3-405b", "deepseek-v3")
TOPOLOGIES = ("system.topology=clos", "system.pod_size=64", "system.oversubscription=7")

COMMANDS: list[list[str]] = [
    *(["estimate", s] for s in BUILTIN),
    *(["estimate", s, "--json"] for s in BUILTIN),
    *(["estimate", s, *sum((["--set", x] for x in TOPOLOGIES), [])] for s in BUILTIN),
    *(["estimate", s, "--set", "system.topology=rail_only", "--json"] for s in BUILTIN),
    ["estimate", "default", "--system", "tpu-v4", "--set", "system.gpus=1024",
     "--set", "system.scale_up_domain=1024", "--set", "parallel.pp=1", "--set", "parallel.tp=16",
     "--set", "parallel.interleave=1", "--set", "parallel.schedule=1f1b", "--json"],
    ["estimate", "llama3-405b", "--set", "parallel.schedule=zero_bubble", "--json"],
    ["estimate", "llama3-405b", "--set", "parallel.zero=3", "--set", "system.routing=ecmp"],
    ["estimate", "deepseek-v3", "--set", "parallel.moe_node_limit=4", "--json"],
    *(["traffic", s] for s in BUILTIN),
    *(["roofline", s] for s in BUILTIN),
    ["reliability", "llama3-405b"],
    ["collective", "all_reduce", "--ranks", "8", "--bytes", "8GiB", "--algorithm", "ring"],
    ["collective", "all_reduce", "--ranks", "16", "--bytes", "8GiB", "--system", "dgx-h100"],
    ["collective", "all_to_all", "--ranks", "64", "--bytes", "1GiB", "--sweep", "1MiB:1GiB"],
    ["presets"],
    ["validate"],
    ["sensitivity", "default"],
    ["optimize", "default", "--vary", "parallel.tp,parallel.pp", "--method", "grid"],
    ["optimize", "megatron-8.3b", "--vary", "parallel.tp,training.micro_batch",
     "--method", "gradient"],
]

_TIMES = re.compile(r"\d+(\.\d+)?\s*(s|ms)\b(?= (wall|elapsed|compil))|"
                    r'"(wall|elapsed|compile)[a-z_]*": [0-9.e+-]+')


def _name(i: int, cmd: list[str]) -> str:
    slug = re.sub(r"[^A-Za-z0-9.=_-]+", "_", " ".join(cmd))[:90]
    return f"{i:03d}_{slug}.txt"


def record(out: Path, python: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i, cmd in enumerate(COMMANDS):
        t0 = time.perf_counter()
        r = subprocess.run([python, "-m", "codesign", *cmd], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        last = r.stderr.strip().splitlines()[-1:] if r.returncode else []
        (out / _name(i, cmd)).write_text(
            f"$ codesign {' '.join(cmd)}\nrc {r.returncode}\n{r.stdout}{''.join(last)}\n")
        print(json.dumps({"command": " ".join(cmd), "rc": r.returncode, "wall_s": round(wall, 2)}),
              flush=True)


def compare(old: Path, new: Path) -> int:
    differ = 0
    for a in sorted(old.glob("*.txt")):
        b = new / a.name
        if not b.exists():
            print(json.dumps({"file": a.name, "status": "missing"}))
            differ += 1
            continue
        ta, tb = (_TIMES.sub("<time>", p.read_text()) for p in (a, b))
        if ta != tb:
            print(json.dumps({"file": a.name, "status": "differs"}))
            differ += 1
    print(json.dumps({"compared": len(list(old.glob("*.txt"))), "differ": differ}))
    return 1 if differ else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("--python", default=sys.executable)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    a = p.parse_args()
    if a.what == "record":
        record(a.out, a.python)
        return 0
    return compare(a.old, a.new)


if __name__ == "__main__":
    sys.exit(main())
