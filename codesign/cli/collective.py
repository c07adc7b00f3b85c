"""`codesign collective`: the modelled cost of one collective, in nccl-tests' terms.

Where the ranks sit (`--tier`, default chosen from `--ranks`):
- `scale_up`: every rank in one scale-up domain (the default when ranks fit in it);
- `scale_out`: one rank per NIC, every step over the scale-out tier;
- `hierarchical` (the default when ranks exceed the domain): scale-up domains
  of `scale_up_domain` ranks joined by the scale-out tier. Flat algorithms then
  cross the slow tier and are costed on it; `hierarchical` (reduce-scatter
  inside, the slow tier on n/G, all-gather inside) and NCCL's pipelined
  two-tier algorithms (`rail_ring`, `rail_tree`, `nvls_tree`: one channel per
  NIC, NVLink and network streaming at once) are more candidates.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import jax
import numpy as np

from .. import checks, domains, output_checks, presets
from .. import scenario as sc
from ..model import collectives as co
from ..model import hardware as hw
from ..units import GB, TOO_LARGE, format_bytes, parse_bytes, parse_size_range, us
from . import _output, _system

TIERS = ("scale_up", "scale_out", "hierarchical")
DTYPE_BYTES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4,
               "double": 8, "int64": 8}
PLOT_SIZES = "1B:16GiB"  # --plot without --sweep
SPANNING = "scale_up+scale_out"
DEFAULT_SYSTEM = "dgx-h100"


def add_arguments(parser, name) -> None:
    parser.add_argument("op", help=f"one of {', '.join(co.OPS)}")
    parser.add_argument("--ranks", type=float, required=True, help="participants p (>= 1)")
    parser.add_argument("--bytes", dest="size", metavar="SIZE",
                        help="message size n as nccl-tests counts it: 8B, 64KiB, 1GiB, 1GB, 1EiB")
    parser.add_argument("--algorithm", default="auto",
                        help="ring, tree, recursive_doubling, halving_doubling, direct, "
                             "in_network, hierarchical, rail_ring, rail_tree, nvls_tree, "
                             "or auto (default: the cheapest)")
    parser.add_argument("--system", default=DEFAULT_SYSTEM,
                        help=f"hardware preset ({', '.join(presets.PRESET_NAMES)}) or system TOML "
                             f"(e.g. from `codesign calibrate --out`; without `preset` it "
                             f"builds on {DEFAULT_SYSTEM}); default {DEFAULT_SYSTEM}")
    parser.add_argument("--tier", choices=TIERS,
                        help="scale_up if the ranks fit in one scale-up domain, "
                             "else hierarchical (both tiers)")
    parser.add_argument("--dtype", default="float", choices=tuple(DTYPE_BYTES),
                        help="element type for the count column (default float)")
    parser.add_argument("--sweep", metavar="MIN:MAX",
                        help="nccl-tests-style table over powers of two, e.g. 8B:8GiB")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="time against size for every algorithm, latency/bandwidth "
                             f"crossovers marked (sizes from --sweep, else {PLOT_SIZES})")
    _output.add_format(parser, "the --sweep table as CSV (one header row)")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the ranks run: the tiers handed to `collectives.cost` and their labels."""

    tier: hw.Tier
    outer: hw.Tier | None
    local_ranks: float | None
    flat_label: str  # the tier a flat algorithm runs on
    flat_tier: hw.Tier
    protocols: hw.Protocols  # the system's (`protocols.Protocols`)

    def label(self, algorithm: str) -> str:
        two_tier = algorithm == "hierarchical" or algorithm in co.pipelined_algorithms()
        return SPANNING if two_tier else self.flat_label


def placement(system: hw.System, tier: str | None, ranks: float, preset: str) -> Placement:
    """Resolve `--tier` (None = by the ranks) on `system` (named `preset` in
    errors) for `ranks` participants."""
    domain = float(system.scale_up_domain)
    tier = tier or ("scale_up" if ranks <= domain else "hierarchical")
    if tier == "scale_up":
        if ranks > domain:
            raise ValueError(f"ranks={ranks:g} exceed the {domain:g}-GPU scale-up domain of "
                             f"{preset}; use --tier scale_out or --tier hierarchical")
        return Placement(system.scale_up, None, None, "scale_up", system.scale_up,
                         system.protocols)
    if tier == "scale_out":
        return Placement(system.scale_out, None, None, "scale_out", system.scale_out,
                         system.protocols)
    spans = ranks > domain
    return Placement(system.scale_up, system.scale_out, domain,
                     "scale_out" if spans else "scale_up",
                     system.scale_out if spans else system.scale_up, system.protocols)


def _check_algorithm(algorithm: str, where: Placement, preset: str, tier: str | None) -> None:
    """What `collectives.cost` cannot know: whether the chosen tier can run
    `algorithm` (`tier`: the --tier given, None when the ranks chose it)."""
    if (algorithm == "hierarchical" or algorithm in co.pipelined_algorithms()) \
            and where.outer is None:
        drop = (f"drop --tier {where.flat_label} or pass" if tier is not None else
                f"the ranks fit one scale-up domain of {preset}: pass")
        raise ValueError(f"algorithm={algorithm!r} spans both tiers; {drop} --tier hierarchical")
    if algorithm == "in_network" and float(where.flat_tier.in_network_efficiency) == 0:
        raise ValueError(f"algorithm='in_network' needs switches that reduce (NVLS/SHARP); "
                         f"the {where.flat_label} tier of {preset} has none")


@functools.partial(jax.jit, static_argnames=("op", "names", "protocols"))
def _terms(op, names, n_bytes, ranks, tier, outer, local_ranks, protocols):
    """One compiled evaluation of every algorithm in `names` (auto: plus its weights)."""
    kw = dict(outer=outer, local_ranks=local_ranks, protocols=protocols)
    out = {}
    for name in names:
        if name == "auto":
            c, out["weights"], _ = co.choose(op, n_bytes, ranks, tier, **kw)
        else:
            c = co.cost(op, name, n_bytes, ranks, tier, **kw)
        out[name] = {"time_s": c.time_s, "latency_s": c.latency_s,
                     "bandwidth_s": c.bandwidth_s, "reduction_s": c.reduction_s,
                     "algbw_Bps": co.algbw_Bps(n_bytes, c.time_s),
                     "busbw_Bps": co.busbw_Bps(op, n_bytes, c.time_s, ranks)}
    return out


def _evaluate_all(op: str, names: tuple, n_bytes, ranks: float, where: Placement) -> dict:
    local = None if where.local_ranks is None else checks.as_float(where.local_ranks)
    n = np.atleast_1d(np.asarray(n_bytes, dtype=float))
    out = _terms(op, names, n, checks.as_float(ranks), where.tier, where.outer, local,
                 where.protocols)
    return jax.tree.map(np.asarray, out)


def evaluate(op: str, algorithm: str, n_bytes, ranks: float, where: Placement) -> dict:
    """Cost terms, algbw, busbw and the algorithm (auto: the winner) per size in n_bytes.

    Every array is 1-D over the sizes; for auto `weights` is (sizes, candidates)
    over the candidate `names`.
    """
    out = _evaluate_all(op, (algorithm,), n_bytes, ranks, where)
    result = out[algorithm]
    if algorithm == "auto":
        result["names"] = co.candidates(op, where.protocols, hierarchical=where.outer is not None)
        result["weights"] = out["weights"].T
        result["algorithm"] = [result["names"][i] for i in np.argmax(out["weights"], axis=0)]
    else:
        result["names"], result["weights"] = None, None
        result["algorithm"] = [algorithm] * result["time_s"].size
    return result


def _row(result: dict, i: int, where: Placement) -> dict:
    """Size i of `result` as printed, once its numbers pass the estimate's output
    check (`output_checks.check_outputs`: finite, not negative)."""
    row = {k: float(result[k][i]) for k in ("time_s", "algbw_Bps", "busbw_Bps",
                                              "latency_s", "bandwidth_s", "reduction_s")}
    output_checks.check_outputs(row)
    row["algorithm"] = result["algorithm"][i]
    row["tier"] = where.label(row["algorithm"])
    if result["weights"] is not None:
        weights = zip(result["names"], result["weights"][i], strict=True)
        row["weights"] = {a: float(w) for a, w in weights}
    return row


def _fmt_time(t_s: float) -> str:
    return f"{t_s / us:.4g} us" if t_s < 1e-3 else f"{t_s * 1e3:.4g} ms" if t_s < 1 \
        else f"{t_s:.4g} s"


def _message_bytes(n_bytes: float, flag: str, text) -> float:
    """`n_bytes`, or a one-line error when it exceeds `domains.MAX_MESSAGE_BYTES`."""
    if not n_bytes <= domains.MAX_MESSAGE_BYTES:
        raise ValueError(f"{flag}={text!r}: {TOO_LARGE}")
    return n_bytes


def _describe(args, row: dict, n_bytes: float, ranks: float) -> str:
    algo = row["algorithm"] if args.algorithm != "auto" else f"auto -> {row['algorithm']}"
    lines = [
        f"{args.op} of {format_bytes(n_bytes)} over {ranks:g} ranks on {args.system} "
        f"{row['tier']}, algorithm {algo}",
        f"  time   {_fmt_time(row['time_s'])}  (latency {_fmt_time(row['latency_s'])} + "
        f"bandwidth {_fmt_time(row['bandwidth_s'])} + reduction {_fmt_time(row['reduction_s'])})",
        f"  algbw  {row['algbw_Bps'] / GB:.4g} GB/s  (size / time)",
        f"  busbw  {row['busbw_Bps'] / GB:.4g} GB/s  (algbw x "
        f"{float(co.bus_factor(args.op, ranks)):.4g}, nccl-tests' factor for {args.op})",
    ]
    if "weights" in row:
        shown = sorted(row["weights"].items(), key=lambda kv: -kv[1])
        lines.append("  auto weights  " + ", ".join(f"{a} {w:.3f}" for a, w in shown if w >= 5e-4))
    return "\n".join(lines)


def _table(args, sizes, result, ranks: float, where: Placement) -> str:
    elt = DTYPE_BYTES[args.dtype]
    head = (f"# codesign collective {args.op}: {ranks:g} ranks on {args.system}, "
            f"--tier {args.tier or 'default'}, algorithm {args.algorithm}\n"
            f"#{'size':>14} {'count':>14} {'type':>8} {'time(us)':>12} "
            f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12}  algorithm")
    rows = [f"{int(n):>15d} {int(n // elt):>14d} {args.dtype:>8} {t / us:>12.2f} "
            f"{a / GB:>12.2f} {b / GB:>12.2f}  {w}"
            for n, t, a, b, w in zip(sizes, result["time_s"], result["algbw_Bps"],
                                     result["busbw_Bps"], result["algorithm"], strict=True)]
    return "\n".join([head, *rows])


def _plot(args, sizes, ranks: float, where: Placement) -> None:
    plots = _output.plots()
    grid = np.geomspace(sizes[0], sizes[-1], max(64, 8 * len(sizes)))
    names = tuple(a for a in co.algorithms(args.op, hierarchical=where.outer is not None)
                  if (a != "in_network" or float(where.flat_tier.in_network_efficiency) > 0)
                  and (a != "nvls_tree" or float(where.tier.in_network_efficiency) > 0))
    out = _evaluate_all(args.op, names + ("auto",), grid, ranks, where)
    crossovers = {}
    for name in names:  # latency is flat in n, bandwidth + reduction linear
        latency_s = float(out[name]["latency_s"][-1])
        slope_s = float(out[name]["bandwidth_s"][-1] + out[name]["reduction_s"][-1]) / grid[-1]
        if latency_s > 0 and slope_s > 0:
            crossovers[name] = (latency_s / slope_s, 2 * latency_s)
    plots.collective_times(
        grid, {a: out[a]["time_s"] for a in names}, crossovers, auto_s=out["auto"]["time_s"],
        path=args.plot,
        title=f"{args.op}, {ranks:g} ranks, {args.system} ({where.flat_label}"
              f"{' + hierarchical' if where.outer is not None else ''})")


def run(args, name) -> int:
    system = sc.system(args.system, default_preset=DEFAULT_SYSTEM)
    labels = sc.system_labels(args.system, default_preset=DEFAULT_SYSTEM)
    domains.check_in("--ranks", args.ranks, domains.count(domains.MAX_GPUS))
    ranks = float(args.ranks)
    co.algorithms(args.op)  # names an unknown op
    op = args.op = args.op.replace("-", "_")
    where = placement(system, args.tier, ranks, labels.preset)
    _check_algorithm(args.algorithm, where, labels.preset, args.tier)
    if args.algorithm in ("recursive_doubling", "halving_doubling"):
        checks.check("--ranks", ranks, lambda p: np.log2(p) == np.round(np.log2(p)),
                      f"must be a power of two for --algorithm {args.algorithm}")
    if args.size is None and args.sweep is None:
        raise ValueError("--bytes SIZE (or --sweep MIN:MAX) is required")
    if args.csv and not args.sweep:
        raise ValueError("--csv prints the --sweep table; add --sweep MIN:MAX")
    out: dict = {"op": op, "ranks": ranks,
                 "system": _system.info(system, labels, args.system)}

    if args.size is not None:
        n_bytes = _message_bytes(parse_bytes(args.size, name="bytes"), "--bytes", args.size)
        row = _row(evaluate(op, args.algorithm, n_bytes, ranks, where), 0, where)
        out.update(row, bytes=n_bytes)
        if not (args.json or args.csv):
            print(_describe(args, row, n_bytes, ranks))
    sizes = parse_size_range(args.sweep or PLOT_SIZES, name="--sweep") \
        if args.sweep or args.plot else None
    if args.sweep:
        result = evaluate(op, args.algorithm, sizes, ranks, where)
        out["rows"] = [{"size_bytes": n, "count": int(n // DTYPE_BYTES[args.dtype]),
                        "type": args.dtype, **_row(result, i, where)}
                       for i, n in enumerate(sizes)]
        if args.csv:
            _output.write_csv(out["rows"])
        elif not args.json:
            print(_table(args, sizes, result, ranks, where))
    if args.plot:
        _plot(args, sizes, ranks, where)
        out["plot"] = args.plot
        _output.wrote(args.plot, args)
    if args.json:
        print(json.dumps(out, indent=1))
    return 0

