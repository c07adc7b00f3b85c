"""`codesign sweep SPEC.toml`: a design sweep, sharded over devices and processes, resumable.

Results land in OUT (default out/sweeps/NAME): chunks/ (one JSON + CSV per
chunk, written atomically), results.csv, results.json, summary.txt and
figures/*.png. `--resume` keeps the chunks on disk and computes the rest;
`--processes N` runs N local processes joined by jax.distributed (gloo on
127.0.0.1), their logs in OUT/logs; under `srun`, `mpirun`, on a TPU pod or
Kubernetes every process joins the job JAX detects; `--coordinator` joins a
jax.distributed job anywhere else. Workers get every option of this command
line but the launcher's (`execute.distributed.forwarded_argv`), so any
combination of --chunk-size, --grad and --resume gives the files one process
gives. OUT holds one job: another job into it, or a second run while one
holds its lock (OUT/.lock), is refused before anything is written; a chunk
changed on disk is computed again (`codesign/sweep/_store.py`, docs/sweeps.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

from .. import sweep
from ..progress import Progress
from ..sweep import LOCK_FILE, chunks_on_disk, claimed, prepare_out_dir, writing
from . import ENTRY, restart_command
from .bench import DEFAULT_JOIN_TIMEOUT_S

LAUNCHER_OPTIONS = ("processes", "coordinator", "num_processes", "process_id", "join_timeout",
                    "timeout", "cpu_devices")
# the library's names of what to change -> this command's flags (cli.in_flags)
FLAGS = {"grad": "--grad", "resume": "--resume", "out_dir": "--out",
         "chunk_size": "--chunk-size or the spec's chunk_size"}
OUTPUT_DIRS = {"out": "--out", "figures": "--figures"}  # checked before it runs (cli._run)
SWEEP_JOIN_TIMEOUT_S = 2 * DEFAULT_JOIN_TIMEOUT_S  # every process compiles the point function


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
    group = parser.add_argument_group("joining a jax.distributed job where JAX cannot detect "
                                      "the cluster (under srun, mpirun, a TPU pod or Kubernetes "
                                      "no flags are needed)")
    group.add_argument("--coordinator", metavar="HOST:PORT")
    group.add_argument("--num-processes", type=int, metavar="P")
    group.add_argument("--process-id", type=int, metavar="I")
    group.add_argument("--join-timeout", type=int, default=SWEEP_JOIN_TIMEOUT_S, metavar="S",
                       help=f"seconds to wait for every process to join (default "
                            f"{SWEEP_JOIN_TIMEOUT_S})")
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


def _job(args):
    spec = sweep.load_spec(args.spec)
    if args.chunk_size is not None:
        spec = dataclasses.replace(spec, chunk_size=args.chunk_size)
    job = sweep.make_job(spec, args.grad)
    out = Path(args.out) if args.out else Path("out") / "sweeps" / spec.name
    _check_written(args, job, out)
    return job, out


OWN_FILES = ("manifest.json", "results.csv", "results.json", "summary.txt", LOCK_FILE)
OWN_FOLDERS = ("chunks", "logs")


def _check_written(args, job, out: Path) -> None:
    """Before anything is computed: the spec is none of the files the sweep writes
    (OUT's own files and folders, its figures), and no figure is one of OUT's own
    files; each a one-line ValueError naming the flag or the spec's key."""
    from .. import files

    figures = Path(args.figures) if args.figures else out / "figures"
    own = {name: out / name for name in OWN_FILES}
    named = {**{f"OUT/{k}": v for k, v in own.items()},
             **{f"plots[{i}].file": figures / p.file for i, p in enumerate(job.spec.plots)}}
    for what, path in named.items():
        if Path(args.spec).exists() and files.same_file(args.spec, path):
            raise ValueError(f"the spec {args.spec!r} is {what} ({str(path)!r}), which the "
                             f"sweep writes; move the spec or choose another --out")
    for folder in OWN_FOLDERS:
        inside = (out / folder).resolve()
        if Path(args.spec).resolve().is_relative_to(inside):
            raise ValueError(f"the spec {args.spec!r} is inside {str(out / folder)!r}, which "
                             "the sweep rewrites; move the spec or choose another --out")
    for i, p in enumerate(job.spec.plots):
        for k, path in own.items():
            if files.same_file(figures / p.file, path):
                raise ValueError(f"plots[{i}].file={p.file!r} is the sweep's own {k} "
                                 f"({str(path)!r}); name another file")


def _worker_argv(args, name: str, **override) -> list[str]:
    from ..execute import distributed

    parser = argparse.ArgumentParser(prog=f"codesign {name}")
    add_arguments(parser, name)
    return [name, *distributed.forwarded_argv(parser, args, drop=LAUNCHER_OPTIONS,
                                              override=override)]


def resume_hint(args) -> str:
    """What an interrupted sweep says (`cli._interrupted`): the chunks it wrote stay,
    and this command line with --resume computes only the rest."""
    if args.no_write:
        return ""
    out = f" --out {args.out}" if args.out else ""
    return f"`codesign sweep {args.spec}{out} --resume` continues from the chunks written"


def run(args, name: str) -> int:
    return _run(args, name)


def _run(args, name: str) -> int:
    _check(args)
    from ..execute import distributed

    if distributed.joined():
        return _run_worker(args)
    if args.processes > 1:
        return _run_local_processes(args, name)
    cluster = distributed.detect_cluster()
    if args.coordinator is not None or cluster is not None:
        return _run_cluster_worker(args, name, cluster)
    if args.cpu_devices is not None:
        distributed.configure_cpu_devices(args.cpu_devices, restart=restart_command())
        import jax

        if jax.local_device_count() != args.cpu_devices:
            raise ValueError(f"--cpu-devices={args.cpu_devices} but JAX has "
                             f"{jax.local_device_count()} local devices")
    job, out = _job(args)
    with _owning(job, out, args):
        result = sweep.run(job, out, resume=args.resume, progress=not args.no_progress,
                           write=not args.no_write)
        return _finish(args, job, out, result)


def _owning(job, out: Path, args):
    """The lock of OUT for this command's life, from the first chunk to the merge (a
    folder of another job refused first, nothing written); none without writing."""
    return contextlib.nullcontext() if args.no_write else claimed(job, out)


def _run_worker(args) -> int:
    """One process of a jax.distributed job (the launcher's bootstrap has joined it)."""
    import jax

    job, out = _job(args)
    lead = jax.process_index() == 0
    # --no-finish: the process that spawned the workers merges, and holds OUT's lock
    owner = lead and not args.no_finish
    with contextlib.ExitStack() as hold:
        try:
            if owner:
                hold.enter_context(_owning(job, out, args))
            result = sweep.run(job, out, resume=args.resume,
                               progress=not args.no_progress and lead, write=not args.no_write,
                               lock=owner)
            print(f"process {jax.process_index()} of {jax.process_count()} "
                  f"({jax.local_device_count()} local devices): "
                  f"{result.computed_chunks} chunks computed", flush=True)
        finally:
            jax.distributed.shutdown()  # before process 0 merges: nobody waits on it
        if not owner:
            return 0
        return _finish(args, job, out, result)


def _run_cluster_worker(args, name: str, cluster) -> int:
    """This host's process of a cluster job: one supervised worker joins it."""
    import os

    from ..execute import distributed

    if args.coordinator is not None:
        address, total, index = args.coordinator, args.num_processes, args.process_id
    else:
        address, total, index = None, cluster.num_processes, cluster.process_id
    command = distributed.worker_command(
        ENTRY, _worker_argv(args, name), coordinator=address, num_processes=total, process_id=index,
        devices=args.cpu_devices, timeout_s=args.join_timeout)
    done = distributed.supervise([command], join_timeout_s=args.join_timeout,
                                 coordinator=address or "", process_ids=[index],
                                 num_processes=total, env={**os.environ},
                                 timeout_s=args.timeout)
    sys.stdout.write(done[0].stdout)
    return 0


def _run_local_processes(args, name: str) -> int:
    """`--processes N`: N local workers on 127.0.0.1; this process prepares OUT and holds
    its lock for them, shows progress from the chunk files as they land, and merges."""
    job, out = _job(args)
    with _owning(job, out, args):
        return _launch(args, name, job, out)


def _launch(args, name: str, job, out: Path) -> int:
    import time

    from ..execute import distributed

    n = args.processes
    start = time.perf_counter()
    skipped, changed = set(), ()
    if not args.no_write:
        prepare_out_dir(job, out, args.resume)
        if args.resume:
            skipped, changed = chunks_on_disk(job, out)
    logs = out / "logs"
    if logs.is_symlink():
        raise ValueError(f"{str(logs)!r} is a symbolic link; the workers' logs go in a folder of "
                         "the sweep's own: remove the link")
    with writing(logs):
        logs.mkdir(parents=True, exist_ok=True)
        for i in range(n):  # made afresh by the launcher: a link planted there goes, unfollowed
            (logs / f"process-{i}.log").unlink(missing_ok=True)
    address = f"127.0.0.1:{distributed.free_port()}"
    argv = _worker_argv(args, name, out=str(out), resume=True, no_progress=True,
                        no_finish=True)
    commands = [distributed.worker_command(ENTRY, argv, coordinator=address, num_processes=n,
                                           process_id=i, devices=args.cpu_devices,
                                           timeout_s=args.join_timeout) for i in range(n)]
    bar = Progress(job.spec.name, len(job.chunks), job.points.size,
                   enabled=not args.no_progress)
    sizes = {c.id: c.stop - c.start for c in job.chunks}
    bar.skip(len(skipped), sum(sizes[i] for i in skipped))

    def progress() -> None:
        done = [int(p.stem) for p in (out / "chunks").glob("*.json")]
        bar.set(len(done), sum(sizes.get(i, 0) for i in done))

    try:
        distributed.supervise(commands, join_timeout_s=args.join_timeout, coordinator=address,
                              env=distributed.local_env(), relay_stderr_of=None,
                              logs=[logs / f"process-{i}.log" for i in range(n)],
                              timeout_s=args.timeout, on_poll=progress)
    finally:
        bar.close()
    result = sweep.RunResult(out, len(job.chunks) - len(skipped), len(skipped),
                             job.points.size, time.perf_counter() - start, changed)
    return _finish(args, job, out, result)


def _finish(args, job, out: Path, result) -> int:
    for line in result.recomputed:
        print(f"codesign sweep: {line}; recomputed", file=sys.stderr)
    if args.no_write:
        return 0
    done = sweep.finish_sweep(job, out, figures_dir=args.figures, plots=not args.no_plots)
    print(done["summary"], end="")
    print(f"\n{result.points} points, {result.computed_chunks} chunks computed, "
          f"{result.skipped_chunks} from disk, {result.seconds:.1f} s")
    print(f"results: {done['results_csv']}  {done['results_json']}")
    for path in done["figures"]:
        print(f"figure: {path}")
    return 0
