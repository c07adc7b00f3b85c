"""`codesign sweep SPEC.toml`: a design sweep, sharded over devices and processes, resumable.

Results land in OUT (default out/sweeps/NAME): chunks/ (one JSON + CSV per
chunk, written atomically), results.csv, results.json, summary.txt and
figures/*.png. `--resume` keeps the chunks on disk and computes the rest;
`--processes N` runs N local processes joined by jax.distributed (gloo on
127.0.0.1); `--coordinator` joins a jax.distributed job started elsewhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from .. import sweep


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("spec", help="the sweep spec (TOML); the format is in sweeps/README.md")
    parser.add_argument("--out", help="output folder (default out/sweeps/<spec name>)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the chunks already in --out and compute only the rest")
    parser.add_argument("--processes", type=int, default=1, metavar="N",
                        help="run N local processes joined by jax.distributed (gloo, 127.0.0.1)")
    parser.add_argument("--grad", nargs="?", const=True, default=None, metavar="OUTPUT",
                        help="also the elasticity d log y / d log x of every output (or of "
                             "OUTPUT) with respect to every float knob, at every point")
    parser.add_argument("--figures", metavar="DIR", help="where the PNGs go (default OUT/figures)")
    parser.add_argument("--chunk-size", type=int, metavar="N",
                        help="points per chunk (overrides the spec's chunk_size)")
    parser.add_argument("--no-plots", action="store_true", help="skip the figures")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="stop --processes workers after S seconds")
    parser.add_argument("--cpu-devices", type=int, metavar="K",
                        help="fake K CPU devices in each process (jax_num_cpu_devices)")
    group = parser.add_argument_group("joining a jax.distributed job (how --processes starts "
                                      "its workers; usable on a real cluster too)")
    group.add_argument("--coordinator", metavar="HOST:PORT")
    group.add_argument("--num-processes", type=int, metavar="P")
    group.add_argument("--process-id", type=int, metavar="I")
    parser.add_argument("--no-write", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-finish", action="store_true", help=argparse.SUPPRESS)


def _check(args) -> None:
    if args.processes < 1:
        raise ValueError(f"--processes={args.processes} must be at least 1")
    if args.chunk_size is not None and args.chunk_size < 1:
        raise ValueError(f"--chunk-size={args.chunk_size} must be at least 1")
    if args.cpu_devices is not None and args.cpu_devices < 1:
        raise ValueError(f"--cpu-devices={args.cpu_devices} must be at least 1")
    joined = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in joined) and any(v is None for v in joined):
        raise ValueError("--coordinator, --num-processes and --process-id go together")
    if args.coordinator is not None and args.processes > 1:
        raise ValueError("--processes spawns its own jax.distributed job; drop --coordinator")


def _argv(args) -> list:
    """The command line of `args` (to relaunch it through `sweep.boot_command`)."""
    out = [args.spec]
    for flag, value in (("--out", args.out), ("--figures", args.figures),
                        ("--chunk-size", args.chunk_size), ("--timeout", args.timeout),
                        ("--cpu-devices", args.cpu_devices), ("--coordinator", args.coordinator),
                        ("--num-processes", args.num_processes),
                        ("--process-id", args.process_id)):
        if value is not None:
            out += [flag, value]
    if args.grad is not None:
        out += ["--grad"] + ([] if args.grad is True else [args.grad])
    for flag in ("resume", "no_plots", "no_progress", "no_write", "no_finish"):
        if getattr(args, flag):
            out.append("--" + flag.replace("_", "-"))
    return out


def run(args, name: str) -> int:
    _check(args)
    import jax

    configure = args.processes == 1 and (args.cpu_devices is not None
                                         or args.coordinator is not None)
    if configure and os.environ.get("CODESIGN_SWEEP_BOOTED") != "1":
        # `import codesign` has started JAX: relaunch with the settings applied first
        return subprocess.call(sweep.boot_command(_argv(args)))
    if args.cpu_devices is not None and args.processes == 1 \
            and jax.local_device_count() != args.cpu_devices:
        raise ValueError(f"--cpu-devices={args.cpu_devices} but JAX has "
                         f"{jax.local_device_count()} local devices")
    spec = sweep.load_spec(args.spec)
    if args.chunk_size is not None:
        spec = dataclasses.replace(spec, chunk_size=args.chunk_size)
    plan = sweep.make_plan(spec, args.grad)
    out = Path(args.out) if args.out else Path("out") / "sweeps" / spec.name
    progress = not args.no_progress
    try:
        if args.processes > 1:
            result = sweep.run_local_processes(
                plan, args.spec, out, processes=args.processes, resume=args.resume,
                progress=progress, cpu_devices=args.cpu_devices, timeout_s=args.timeout,
                write=not args.no_write)
        elif args.coordinator is not None:
            try:
                result = sweep.run(plan, out, resume=args.resume,
                                   progress=progress and jax.process_index() == 0,
                                   write=not args.no_write)
                lead = jax.process_index() == 0
                print(f"process {jax.process_index()} of {jax.process_count()} "
                      f"({jax.local_device_count()} local devices): "
                      f"{result.computed_chunks} chunks computed", flush=True)
            finally:
                jax.distributed.shutdown()
            if not lead or args.no_finish:
                return 0  # process 0, or the process that spawned the workers, merges
        else:
            result = sweep.run(plan, out, resume=args.resume, progress=progress,
                               write=not args.no_write)
    except RuntimeError as e:
        from . import _traced_message

        traced = _traced_message(e)  # a knob value outside its domain (`Scenario.checked`)
        print(f"codesign {name}: error: {traced or e}", file=sys.stderr)
        return 2 if traced else 1
    if args.no_write:
        return 0
    done = sweep.finish_sweep(plan, out, figures_dir=args.figures, plots=not args.no_plots)
    print(done["summary"], end="")
    print(f"\n{result.points} points, {result.computed_chunks} chunks computed, "
          f"{result.skipped_chunks} from disk, {result.seconds:.1f} s")
    print(f"results: {done['results_csv']}  {done['results_json']}")
    for path in done["figures"]:
        print(f"figure: {path}")
    return 0
