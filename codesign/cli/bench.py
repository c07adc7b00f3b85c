"""`codesign bench` (nccl-tests-style timing of the executed collectives) and
`codesign calibrate` (fit alpha, beta, gamma per tier from measurements).

On CPU the bench fakes `--devices` (default 8) CPU devices unless XLA_FLAGS
already sets --xla_force_host_platform_device_count; on a GPU or TPU host it
runs on the accelerators JAX sees. `--processes N` runs N local processes
joined by jax.distributed (gloo on CPU), each with devices / N devices; on a
cluster each host runs `--coordinator HOST:PORT --num-processes N
--process-id I`.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..progress import Progress
from ..units import parse_bytes, parse_size_range
from . import ENTRY, INFEASIBLE, _output, restart_command

DEFAULT_SIZES = "4KiB:4MiB"
DEFAULT_DEVICES = 8
DEFAULT_JOIN_TIMEOUT_S = 60
# the library's names of what to change -> this command's flags (cli.in_flags)
FLAGS = {"op": "--op", "ranks": "--ranks", "prior": "a preset (--system)", "preset": "--system",
         "local_ranks": "--local-ranks", "holdout_every": "--holdout-every"}
OUTPUT_FILES = {"out": "--out"}  # bench and calibrate: checked before they run (cli._run)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "calibrate":
        _calibrate_arguments(parser)
        return
    parser.add_argument("--op", default="all_reduce",
                        help="all_reduce, reduce_scatter, all_gather, all_to_all or send_recv")
    parser.add_argument("--algorithm", default=None,
                        help="an algorithm of the op (ring, recursive_doubling, halving_doubling, "
                             "tree, hierarchical, direct, lax = the jax.lax built-in) or 'all'; "
                             "default: the op's first (ring, or direct for all_to_all/send_recv)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help=f"MIN:MAX, every power of two between (default {DEFAULT_SIZES})")
    parser.add_argument("--mesh", default=None,
                        help="RANKS (e.g. 8) or NODESxLOCAL (e.g. 2x4, needed by hierarchical); "
                             "default: every device, 1D")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per size")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first")
    parser.add_argument("--dtype", default="float32",
                        help="float32, bfloat16, float16, int32 or float64")
    _output.add_format(parser, "one CSV table (one header row) over every algorithm and size",
                       "one JSON object per size and line instead of the table")
    parser.add_argument("--out", default=None, help="also write the JSON lines to this file")
    parser.add_argument("--devices", type=int, default=DEFAULT_DEVICES,
                        help="fake CPU devices (per host) when JAX runs on CPU "
                             f"(default {DEFAULT_DEVICES}; ignored if XLA_FLAGS sets a count)")
    add_launcher_arguments(parser, processes_help="run over N local processes joined by "
                                                  "jax.distributed on 127.0.0.1")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace, name: str) -> int:
    if name == "calibrate":
        return _run_calibrate(args)
    sizes = parse_size_range(args.sizes, name="sizes")
    launched = launch(args, name, devices=args.devices)
    return _bench(args, sizes) if launched is None else launched


# ------------------------------------------------------------------ one process
def _steps_bar(name: str):
    """A `bench.run` progress callback (done, total, label) drawing the one
    progress bar (`codesign.progress.Progress`) of `name` on stderr."""
    bar = None

    def update(done: int, total: int, label: str) -> None:
        nonlocal bar
        if bar is None:
            bar = Progress(name, 0, total, unit="steps")
        bar.set(0, done)
        if done >= total:
            bar.close()

    return update


def _bench(args: argparse.Namespace, sizes: list[float]) -> int:
    from ..execute import distributed

    if not distributed.joined():  # a worker was set up (and joined) by its bootstrap
        distributed.configure_cpu_devices(args.devices, restart=restart_command())
    import jax

    from ..execute import algorithms, bench

    op = algorithms.check_op(args.op)
    mesh = bench.make_mesh(args.mesh)
    names = (bench.runnable_algorithms(op, mesh) if args.algorithm == "all"
             else (args.algorithm or algorithms.algorithm_names(op)[0],))
    for algorithm in names:
        bench.check_runnable(op, algorithm, mesh)
    bench.check_dtype(args.dtype)
    lead = jax.process_index() == 0
    show = lead and not args.no_progress
    platform = f"{mesh.ranks} x {jax.devices()[0].platform} in {jax.process_count()} process(es)"
    records = []
    for algorithm in names:
        rows = bench.run(op, algorithm, mesh, sizes, dtype=args.dtype, iters=args.iters,
                         warmup=args.warmup,
                         progress=_steps_bar(f"bench {op} {algorithm}") if show else None)
        records += rows
        if lead and not args.csv:
            _print_rows(rows, args, mesh, algorithm, platform, sys.stdout)
    if lead and args.csv:
        _output.write_csv([r.as_json() for r in records])
    if lead and args.out:
        _output.save(args, args.out, "--out", [json.dumps(r.as_json()) + "\n" for r in records])
    return 0


def _print_rows(rows, args, mesh, algorithm, platform, stream) -> None:
    from ..execute import bench

    if args.json:
        stream.writelines(json.dumps(r.as_json()) + "\n" for r in rows)
    else:
        print(bench.table_header(rows[0].op, algorithm, mesh, args.dtype, args.iters,
                                 args.warmup, platform), file=stream)
        for r in rows:
            print(bench.table_row(r), file=stream)
        print(bench.table_footer(rows), file=stream)
    stream.flush()


# ------------------------------------------------------------------ several processes
LAUNCHER_OPTIONS = ("processes", "coordinator", "num_processes", "process_id", "join_timeout")


def launch(args: argparse.Namespace, name: str, *, devices: int | None) -> int | None:
    """Run this command over several processes when asked (`--processes`,
    `--coordinator`) or when the environment is a cluster JAX detects; None when
    it runs right here (one process, or already a joined worker).

    The workers get this command line less the launcher's options
    (`distributed.forwarded_argv`); they fake `devices` CPU devices per host
    (on CPU) and print only from process 0, whose stdout is printed here.
    """
    import os

    from ..execute import distributed

    if distributed.joined():
        return None
    parser = argparse.ArgumentParser(prog=f"codesign {name}")
    add_arguments(parser, name)
    argv = [name, *distributed.forwarded_argv(parser, args, drop=LAUNCHER_OPTIONS)]
    if args.processes < 1:
        raise ValueError(f"processes={args.processes} must be at least 1")
    if args.processes > 1:
        n = args.processes
        if args.coordinator is not None:
            raise ValueError("--processes starts its own coordinator on 127.0.0.1; "
                             "use --coordinator alone on a cluster")
        if devices is not None and devices % n:
            raise ValueError(f"processes={n} must divide devices={devices}")
        address = f"127.0.0.1:{distributed.free_port()}"
        commands = [distributed.worker_command(
            ENTRY, argv, coordinator=address, num_processes=n, process_id=i,
            devices=None if devices is None else devices // n, timeout_s=args.join_timeout)
            for i in range(n)]
        done = distributed.supervise(commands, join_timeout_s=args.join_timeout,
                                     coordinator=address, env=distributed.local_env())
        sys.stdout.write(done[0].stdout)
        return 0
    if args.coordinator is not None:
        distributed.check_coordinator(args.coordinator)
        if args.num_processes is None or args.process_id is None:
            raise ValueError("--coordinator needs --num-processes and --process-id")
        address, total, index = args.coordinator, args.num_processes, args.process_id
    else:
        cluster = distributed.detect_cluster()
        if cluster is None:
            return None
        address, total, index = None, cluster.num_processes, cluster.process_id
    command = distributed.worker_command(ENTRY, argv, coordinator=address, num_processes=total,
                                         process_id=index, devices=devices,
                                         timeout_s=args.join_timeout)
    done = distributed.supervise([command], join_timeout_s=args.join_timeout,
                                 coordinator=address or "", process_ids=[index],
                                 num_processes=total, env={**os.environ})
    sys.stdout.write(done[0].stdout)
    return 0


def add_launcher_arguments(parser: argparse.ArgumentParser, *, processes_help: str) -> None:
    """`--processes`, `--coordinator`, `--num-processes`, `--process-id`, `--join-timeout`."""
    parser.add_argument("--processes", type=int, default=1, help=processes_help)
    parser.add_argument("--coordinator", default=None,
                        help="HOST:PORT of process 0 (with --num-processes, --process-id) where "
                             "JAX cannot detect the cluster; under srun, mpirun, a TPU pod or "
                             "Kubernetes it needs no flags")
    parser.add_argument("--num-processes", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=None)
    parser.add_argument("--join-timeout", type=int, default=DEFAULT_JOIN_TIMEOUT_S,
                        help=f"seconds to wait for every process to join (default "
                             f"{DEFAULT_JOIN_TIMEOUT_S})")


# ------------------------------------------------------------------ calibrate
def _calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("fit alpha/beta/gamma per tier from bench output or nccl-tests logs "
                          "(calibrate FILE...), or time GEMMs, attention and a streaming "
                          "kernel on this device and fit the compute constants "
                          "(calibrate compute)")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="`codesign bench --json` output or nccl-tests logs (*_perf output); "
                             "or the word `compute`")
    parser.add_argument("--json", action="store_true",
                        help="per tier: alpha_s, bandwidth_Bps, gamma_s_per_byte, holdout_error "
                             "(compute: the constants, held-out errors and every kernel)")
    parser.add_argument("--out", default=None,
                        help="write a [system] override (TOML) for scenarios and --system")
    parser.add_argument("--tier", default=None,
                        help="scale_up or scale_out for every FILE (default: scale_up when a "
                             "run has <= --local-ranks ranks, else scale_out)")
    parser.add_argument("--local-ranks", type=int, default=8,
                        help="GPUs per node: bigger runs span nodes (default 8)")
    parser.add_argument("--algorithm", default=None,
                        help="fit this collectives.py algorithm instead of the one the data "
                             "names (nccl-tests: ring in a node; across nodes rail_ring, NCCL's, "
                             "or rail_tree, hierarchical); nvls: NVLink SHARP, in_network in a "
                             "node and nvls_tree across")
    parser.add_argument("--min-bytes", default=None, metavar="SIZE",
                        help="fit only sizes of at least SIZE (e.g. 1MiB: NCCL runs other "
                             "algorithms and protocols on small messages)")
    parser.add_argument("--op", default=None, help="the collective of nccl-tests logs whose "
                                                   "text and name do not say it")
    parser.add_argument("--ranks", type=int, default=None,
                        help="rank count of nccl-tests logs without '# Rank' lines")
    parser.add_argument("--system", default=None,
                        help="preset or system TOML supplying tiers/reduction the data cannot "
                             "identify (calibrate compute: the chip's peaks)")
    parser.add_argument("--holdout-every", type=int, default=3,
                        help="hold out every N-th size of each run (default 3)")
    parser.add_argument("--accept-poor-fit", action="store_true",
                        help="write the fit even when its held-out error is above the "
                             "threshold (docs/execution.md), with a warning; else exit 3")
    parser.add_argument("--points", action="store_true",
                        help="print measured against predicted time for every size (kernel)")
    _output.add_output_arguments(parser, "bus bandwidth against message size per tier, measured "
                                 "and fitted (calibrate FILE... only)")
    group = parser.add_argument_group("calibrate compute")
    group.add_argument("--dtype", default="bf16", choices=("bf16", "fp8", "fp32"),
                       help="the GEMMs' dtype (default bf16; attention is always bf16)")
    group.add_argument("--sizes", default=None, metavar="H[,H...]",
                       help="hidden sizes of the GEMM grid (default 1024,...,16384 on an "
                            "accelerator, 64,128,256 on CPU)")
    group.add_argument("--tokens", type=int, default=None,
                       help="rows m of the layer GEMMs (default 4096; 128 on CPU)")
    group.add_argument("--iters", type=int, default=5, help="timed calls per kernel (minimum)")
    group.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    group.add_argument("--repeats", type=int, default=None,
                       help="chained copies of the kernel per call (default 16; 4 on CPU)")
    group.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_launcher_arguments(parser, processes_help=argparse.SUPPRESS)


def _run_calibrate(args: argparse.Namespace) -> int:
    from .. import presets
    from .. import scenario as sc
    from ..execute import calibrate, line_rate

    if args.files[0] == "compute":
        if len(args.files) > 1:
            raise ValueError(f"calibrate compute takes no files; got {args.files[1:]}")
        for flag, value in (("--plot", args.plot), ("--report", args.report)):
            if value:
                raise ValueError(f"{flag} {value!r}: calibrate compute draws nothing; {flag} "
                                 "draws the collectives' fit (calibrate FILE...)")
        if args.processes != 1:
            raise ValueError(f"processes={args.processes}: calibrate compute measures one device "
                             "per process; on a cluster run it under srun/mpirun (or with "
                             "--coordinator) instead")
        launched = launch(args, "calibrate", devices=None)
        return _run_calibrate_compute(args) if launched is None else launched
    if args.holdout_every < 2:
        raise ValueError(f"holdout-every={args.holdout_every} must be at least 2")
    measurements = []
    for path in args.files:
        measurements += calibrate.load(path, tier=args.tier, algorithm=args.algorithm,
                                       op=args.op, ranks=args.ranks,
                                       local_ranks=args.local_ranks)
    if args.min_bytes is not None:
        least = parse_bytes(args.min_bytes, name="min-bytes")
        largest = max(m.size_bytes for m in measurements)
        measurements = [m for m in measurements if m.size_bytes >= least]
        if not measurements:
            raise ValueError(f"min-bytes={args.min_bytes!r} is above every size measured "
                             f"(the largest is {largest:.0f} bytes)")
    prior = sc.system(args.system) if args.system else None
    preset = sc.system_labels(args.system).preset if args.system else None
    # the links' line rates: the preset of --system, else of the logs' devices, else the default
    checked = preset or calibrate.devices_preset(measurements)
    named = (f"--system {args.system}" if args.system else "the logs' devices" if checked
             else "the default preset; --system names yours")
    checked = checked or sc.DEFAULT_SYSTEM
    try:
        result = line_rate.fit_within_line_rate(measurements, presets.system(checked),
                                                f"{checked} ({named})", prior=prior,
                                                holdout_every=args.holdout_every)
        for t, f in result.tiers.items():
            if f.ceiling_Bps:
                print(f"codesign calibrate: note: {t} bandwidth held to at most the "
                      f"{f.ceiling_Bps / 1e9:.1f} GB/s line rate of {checked}: the fit rose "
                      "above it where the model's other tier set every time", file=sys.stderr)
        calibrate.check_holdout(result)
    except calibrate.UnphysicalFit as e:  # valid input, no physical answer: nothing written
        print(f"codesign calibrate: {e}", file=sys.stderr)
        return INFEASIBLE
    except calibrate.PoorFit as e:
        if not args.accept_poor_fit:
            print(f"codesign calibrate: {e}; nothing written (--accept-poor-fit writes it)",
                  file=sys.stderr)
            return INFEASIBLE
        print(f"codesign calibrate: warning: {e}; written as --accept-poor-fit asks",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        print(calibrate.summary_table(result))
        print(_holdout_line(args.holdout_every))
        if args.points:
            print(calibrate.predictions_table(result))
    if args.out:
        _output.save(args, args.out, "--out", calibrate.system_toml(
            result, preset=preset, measured_on=calibrate.devices_kind(measurements)))
    if args.plot or args.report:
        _output.write(args, _output.plots().calibration_busbw(
            _busbw_runs(result), title="codesign calibrate: bus bandwidth, measured and fitted"),
            lambda fig: _calibrate_page(args, result, fig))
    return 0


def _holdout_line(every: int) -> str:
    nth = {2: "second", 3: "third", 4: "fourth", 5: "fifth"}.get(every, f"{every}th")
    return ("holdout: max (and median) relative error |model/measured - 1| over every "
            f"{nth} size of each run, left out of the fit")


def _busbw_runs(result) -> dict:
    """The fit's sizes as `plots.calibration_busbw` draws them: tier -> run
    ("all_reduce ring 8 ranks (file)") -> its predictions as `_busbw_run`."""
    import os

    runs: dict = {}
    for p in result.predictions:
        m = p.measurement
        key = f"{m.op} {m.algorithm} {m.ranks} ranks ({os.path.basename(m.source)})"
        runs.setdefault(m.tier, {}).setdefault(key, []).append(p)
    return {tier: {key: _busbw_run(ps) for key, ps in by_run.items()}
            for tier, by_run in runs.items()}


def _busbw_run(predictions) -> tuple:
    """(sizes, measured busbw, the fitted model's busbw, held out) of one run's
    predictions: nccl-tests' bus bandwidth (`collectives.busbw_Bps`) of the
    measured and of the fitted times."""
    import numpy as np

    from ..model.collectives import busbw_Bps

    m = predictions[0].measurement
    sizes = np.array([p.measurement.size_bytes for p in predictions])
    busbw = lambda times: np.asarray(busbw_Bps(m.op, sizes, np.array(times), m.ranks))  # noqa: E731
    return (sizes, busbw([p.measurement.time_s for p in predictions]),
            busbw([p.predicted_s for p in predictions]),
            np.array([p.held_out for p in predictions]))


def _calibrate_page(args: argparse.Namespace, result, fig) -> str:
    """calibrate's page: the bus bandwidth figure, the fit per tier and every size."""
    import os

    from .. import report
    from ..execute import calibrate

    return report.page("codesign calibrate", [
        report.section("Bus bandwidth against message size", report.figure(
            fig, "nccl-tests' bus bandwidth per run: measured (held-out sizes hollow) and the "
                 "fitted alpha-beta model at each size (a line), one panel per tier")),
        report.section("Fit per tier", report.text(calibrate.summary_table(result)),
                       report.paragraph(_holdout_line(args.holdout_every))),
        report.section("Every size", report.text(calibrate.predictions_table(result)))],
        lines=(_output.made_by("codesign calibrate " + " ".join(os.path.basename(f)
                                                         for f in args.files)),))


def _hidden_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 8:
        raise ValueError(f"sizes={text!r} must be hidden sizes H[,H...], each at least 8")
    return sizes


def _run_calibrate_compute(args: argparse.Namespace) -> int:
    import jax

    from .. import scenario as sc
    from ..execute import compute, measurements

    device = jax.devices()[0]
    platform, kind = device.platform, device.device_kind
    spec = args.system or measurements.preset_for_device(kind)
    if spec is None:
        raise ValueError(f"no preset matches device {kind!r} ({platform}): pass --system PRESET "
                         "(its peak FLOP/s and hbm_Bps are what the constants are relative to)")
    chosen = sc.system(spec)  # a preset name or a system TOML (its chip's peaks)
    preset = sc.system_labels(spec).preset
    peaks = compute.Peaks.of(chosen, args.dtype)
    grid = compute.default_grid(platform)
    if args.sizes is not None:
        grid["hidden"] = _hidden_sizes(args.sizes)
    for key, value in (("tokens", args.tokens), ("repeats", args.repeats)):
        if value is not None:
            if value < 1:
                raise ValueError(f"{key}={value} must be at least 1")
            grid[key] = value
    lead = jax.process_index() == 0
    bar = Progress("calibrate compute", 0, compute.grid_size(grid), unit="kernels",
                   enabled=lead and not args.no_progress)
    kernels = compute.measure(args.dtype, grid, platform=platform, iters=args.iters,
                              warmup=args.warmup, progress=lambda label: bar.update(0, 1))
    bar.close()
    result = compute.fit(kernels, peaks, holdout_every=args.holdout_every)
    if not lead:
        return 0
    where = f"{kind} ({platform}), preset {preset}, dtype {args.dtype}"
    if args.json:
        print(json.dumps({"device": kind, "platform": platform, "preset": preset,
                          "dtype": args.dtype, "jax": jax.__version__, **result.as_json()},
                         indent=1))
    else:
        print(f"calibrate compute: {len(kernels)} kernels on {where}")
        if platform == "cpu":
            print("note: measured on a CPU with the preset's peaks: the constants describe this "
                  "CPU, not the preset's chip")
        print(compute.summary_table(result))
        print(f"holdout: max (and median) relative error |model/measured - 1| over every "
              f"{args.holdout_every}-th shape of each kind, left out of the fit")
        if args.points:
            print(compute.kernels_table(result))
    if args.out:
        text = compute.system_toml(result, preset=preset, dtype=args.dtype, device=kind,
                                   platform=platform)
        _output.save(args, args.out, "--out", text)
    return 0
