"""`codesign optimize`: gradient or grid co-design of hardware and plan knobs."""

from __future__ import annotations

import json
import math
import re
import sys

import numpy as np

from .. import chip, optimize, output_checks, report, units
from .. import scenario as sc
from ..compiling import compiled
from ..model import economics, hardware, memory, reliability
from ..units import day, format_bytes, format_quantity, parse_quantity, year
from ..words import words
from . import INFEASIBLE, _output, _system, executable_store

# the library's names of what to change -> this command's flags (cli.in_flags)
FLAGS = {"bounds": "--bounds", "grid_points": "--grid-points", "vary": "--vary",
         "training.tokens": "--set training.tokens=...", "uncertainty": "--uncertainty"}
# --plot and --report: the heatmap's axes; a grid of at most REPORT_GRID_POINTS points
# keeps every feasible point's objective for it (`grid_search(keep=...)`: such a grid is
# evaluated on the host anyway; a larger one streams and holds only its best designs);
# the gradient method holds up to REPORT_DESIGNS of the designs it evaluated exactly
HEATMAP_KNOBS = ("parallel.tp", "parallel.pp")
# the page's Pareto front: the objective against what the faster plans spend, memory per GPU
FRONT_METRIC = "memory_bytes_per_gpu"
REPORT_GRID_POINTS = 1 << 16
REPORT_DESIGNS = 4096


def add_arguments(parser, name):
    _system.add_scenario_arguments(parser)
    _output.add_format(parser, "the --top table as CSV (one header row)")
    parser.add_argument("--vary", action="append", default=[], metavar="KNOB[,KNOB...]",
                        required=True, help="scenario keys to vary, e.g. parallel.tp,"
                        "system.scale_out_bandwidth_Bps (repeatable); a categorical key "
                        "(parallel.zero, training.recompute, system.preset, ...) varies all "
                        "its choices, or those of KEY=A|B")
    parser.add_argument("--bounds", action="append", default=[], metavar="KNOB=LO:HI",
                        help="range of a varied knob; units allowed (10GB/s:200GB/s). "
                        "Default: a factor 8 (4 for continuous knobs) around the scenario's value")
    parser.add_argument("--objective", default="step_time", choices=tuple(optimize.OBJECTIVES))
    limits = parser.add_mutually_exclusive_group()
    limits.add_argument("--budget-usd", type=float, metavar="X",
                        help="limit on the cost to train in dollars (with chip.* knobs: "
                        "GPU-hours at the chip design's own price and energy)")
    limits.add_argument("--budget-w", type=float, metavar="X",
                        help="limit on GPU board power + scale-out fabric power in watts "
                        "(with chip.* knobs: the design's board power x GPUs x PUE)")
    parser.add_argument("--max-gpus", type=float, metavar="N", help="limit on system.gpus")
    parser.add_argument("--method", default="gradient", choices=("gradient", "grid"))
    parser.add_argument("--grid-points", type=int, default=16, metavar="N",
                        help="grid values per continuous knob (default 16)")
    parser.add_argument("--starts", type=int, default=16, metavar="N",
                        help="random starts of the gradient method (default 16)")
    parser.add_argument("--steps", type=int, default=150, metavar="N",
                        help="descent steps per start (default 150)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--usd-per-gpu-hour", type=float, default=2.0, metavar="X",
                        help="ASSUMPTION: price of a GPU-hour, server included (default 2)")
    parser.add_argument("--fabric-lifetime-years", type=float, default=4.0, metavar="Y",
                        help="ASSUMPTION: fabric amortisation period (default 4 years)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (the grid's points, or the combinations of "
                        "categorical knobs)")
    parser.add_argument("--path", action="store_true",
                        help="print the path the gradient method took")
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="also the N best distinct feasible designs (grid: of the grid; "
                             "gradient: of the points it evaluated exactly)")
    _output.add_output_arguments(parser, "the best objective over tp x pp as a heatmap (grid: "
                                 "of its every feasible point; else of the designs the search "
                                 "holds)")
    robust = parser.add_argument_group(
        "robust co-design", "optimise the mean (or --quantile) of the objective over samples "
        "of the uncertain constants; any of these flags implies --robust")
    robust.add_argument("--robust", action="store_true",
                        help="optimise over samples of the uncertain constants and report "
                             "the nominal optimum's regret on them")
    robust.add_argument("--quantile", type=float, metavar="Q",
                        help="optimise the Q-quantile (0 < Q < 1) instead of the mean")
    robust.add_argument("--samples", type=int, metavar="N",
                        help="draws of the uncertain constants (default "
                             f"{optimize.ROBUST_SAMPLES})")
    robust.add_argument("--sample-seed", type=int, metavar="N",
                        help="seed of the draws (default 0)")
    robust.add_argument("--uncertainty", action="append", default=[], metavar="KEY=SIGMA",
                        help="sigma of the log-normal factor of a continuous scenario key "
                             "(repeatable; 0: certain); defaults in docs/codesign.md")


def parse_bounds(items) -> dict:
    """["parallel.tp=1:16", "system.scale_out_bandwidth_Bps=10GB/s:200GB/s"] -> {knob: (lo, hi)}."""
    out = {}
    for item in items:
        if "=" not in item or ":" not in item.split("=", 1)[1]:
            raise ValueError(f"--bounds {item!r} must look like KNOB=LO:HI")
        knob, rng = item.split("=", 1)
        if knob.strip() in optimize.CATEGORICAL:
            raise ValueError(f"--bounds for {knob.strip()}, a choice, not a number: restrict "
                             f"its choices with --vary '{knob.strip()}=A|B'")
        lo, hi = rng.split(":", 1)
        out[knob.strip()] = (parse_quantity(knob, lo.strip(), field=f"--bounds {knob}"),
                              parse_quantity(knob, hi.strip(), field=f"--bounds {knob}"))
    return out


def parse_uncertainty(items) -> dict:
    """["system.matmul_efficiency=0.2", ...] -> {key: sigma}."""
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--uncertainty {item!r} must look like KEY=SIGMA (a number)") \
                from None
    return out


def _robust_problem(args, prob, labels):
    """The robust version of `prob` (`optimize.robust`) the robust flags ask for,
    the matmul efficiency's spread validate's for the scenario's chip family."""
    if args.quantile is not None and not 0 < args.quantile < 1:
        raise ValueError(f"--quantile={args.quantile:g} must be in (0, 1)")
    samples = optimize.ROBUST_SAMPLES if args.samples is None else args.samples
    if not 1 <= samples <= optimize.MAX_ROBUST_SAMPLES:
        raise ValueError(f"--samples={samples} must be in [1, {optimize.MAX_ROBUST_SAMPLES}]")
    return optimize.robust(prob, hardware.chip_family(labels.system.chip),
                           parse_uncertainty(args.uncertainty), samples=samples,
                           seed=args.sample_seed or 0, quantile=args.quantile)


def _is_robust(args) -> bool:
    return bool(args.robust or args.quantile is not None or args.samples is not None
                or args.sample_seed is not None or args.uncertainty)


def parse_vary(items) -> tuple[list[str], dict]:
    """["parallel.zero=0|1,parallel.tp", ...] -> (the keys in order, {key: its
    choices given}). A comma not followed by a scenario key (section.name)
    belongs to a choice: 'system.placement=tp,cp,ep,dp,pp|dp,tp,cp,ep,pp'."""
    keys, given = [], {}
    for item in items:
        for part in re.split(r",(?=\s*[A-Za-z_]+\.)", item):
            key, eq, options = part.partition("=")
            key = key.strip()
            if not key:
                continue
            keys.append(key)
            if eq:
                if key not in optimize.CATEGORICAL:
                    raise ValueError(
                        f"--vary {part.strip()!r}: only a categorical key takes choices "
                        "(KEY=A|B: parallel.schedule, system.preset, ...); " + (
                            f"{key} is a number: give its range with --bounds {key}=LO:HI"
                            if key in sc.KEYS or key in sc.CHIP_KNOBS
                            else f"{key} is not one; they are "
                            f"{', '.join(optimize.CATEGORICAL)}"))
                given[key] = options.split("|")
    return keys, given


def _assumptions(args) -> economics.Assumptions:
    for name, v in (("--usd-per-gpu-hour", args.usd_per_gpu_hour),
                    ("--fabric-lifetime-years", args.fabric_lifetime_years)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name}={v:g} must be positive")
    return economics.Assumptions(usd_per_gpu_hour=args.usd_per_gpu_hour,
                                 fabric_lifetime_s=args.fabric_lifetime_years * year)


def _limits(args) -> dict:
    return {"budget_usd": args.budget_usd, "budget_w": args.budget_w,
            "max_gpus": args.max_gpus, "assumptions": _assumptions(args)}


def _problem(args, scn, keys):
    return optimize.problem(scn, keys, parse_bounds(args.bounds), args.objective,
                            **_limits(args))


def _checked(load, r: optimize.Result, overrides) -> optimize.Result:
    """`r`, once the numbers of a feasible result pass the estimate's output
    check (`output_checks.check_outputs`: its metrics and those of its --top) and its
    best design clears the failure model's floor (`reliability.check_job`: a
    `reliability.NoProgress`, exit 3). An infeasible result (exit 3 anyway)
    keeps its numbers; what is not finite in it prints as n/a (null in JSON)."""
    if not r.feasible:
        return r
    given = [f"{o}" for o in overrides]
    hint = f" at the best design {_design(r.best)}" + (
        f" (overrides: {', '.join(given)})" if given else "")
    best = optimize.design_scenario(load, r.best)
    reliability.check_job(best.system.gpus, memory.checkpoint_bytes_total(best.model, best.plan),
                          best.reliability, hint)
    output_checks.check_outputs({"objective": r.value, **r.metrics}, overrides)
    for t in r.top or []:
        output_checks.check_outputs({"objective": t["objective"], **t["metrics"]}, overrides)
    return r


def _design(best: dict) -> str:
    return ", ".join(f"{k}={_shown(k, v)}" for k, v in best.items())


def _shown(key: str, value) -> str:
    """A knob's value for people: a number in its unit, a choice as `--set` takes it."""
    return str(value).lower() if isinstance(value, bool) else format_quantity(key, value)


def _finite_or_none(x):
    """JSON of a result: NaN and inf as null (they are not JSON numbers)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite_or_none(v) for v in x]
    return x


def _print_result(u, r: optimize.Result, here: dict, show_path: bool):
    value = f"{r.value:.6g}" if math.isfinite(r.value) else "n/a"
    what = r.objective if u is None else f"{_statistic(u)} {r.objective} over the samples"
    print(f"{r.method}: {what} ({r.goal}) = {value}"
          f"{'' if r.feasible else '   NOT FEASIBLE (least-violating point shown)'}")
    for k, v in r.best.items():
        print(f"  {k:<36} {_shown(k, v):>14}   (scenario: {_shown(k, here[k])})")
    m = r.metrics
    if not all(math.isfinite(v) for v in m.values() if isinstance(v, float)):
        print(f"{r.evaluations:,} evaluations, {r.wall_s:.1f} s (metrics n/a at this point)")
        return
    print(f"step {m['step_time_s']:.3f} s, {m['tokens_per_s']:,.0f} tokens/s, memory "
          f"{format_bytes(m['memory_bytes_per_gpu'])} of {format_bytes(m['memory_capacity_bytes'])}"
          f", {m['gpus']:,.0f} GPUs, {m['power_w'] / 1e6:.2f} MW")
    if math.isfinite(m["time_to_train_s"]) and m["time_to_train_s"] > 0:
        print(f"time to train {m['time_to_train_s'] / day:.2f} days (goodput "
              f"{m['goodput']:.1%}), cost ${m['cost_to_train_usd'] / 1e6:.3f}M "
              f"(fabric capex ${m['fabric_capex_usd'] / 1e6:.2f}M, amortised), "
              f"{m['tokens_per_joule']:.3g} tokens/J")
    size = f" of a {r.grid_size:,}-point grid ({r.feasible_points:,} feasible)" \
        if r.grid_size else ""
    print(f"{r.evaluations:,} evaluations{size}, {r.wall_s:.1f} s")
    if r.combinations is not None:
        print(_combinations_line(r.combinations))
    if show_path:
        for step in r.path:
            print("  path:", json.dumps(step))


def _combinations_line(rows: list) -> str:
    """How many combinations of the choices were solved, feasible, refused (the first why)."""
    refused = [c for c in rows if c["refused"] is not None]
    feasible = sum(bool(c["feasible"]) for c in rows)
    keys = " x ".join(rows[0]["choices"])
    why = (f"; refused {len(refused):,} (first: {_design(refused[0]['choices'])}: "
           f"{refused[0]['refused']})") if refused else ""
    return (f"{len(rows):,} combinations of {keys}: {len(rows) - len(refused):,} solved, "
            f"{feasible:,} feasible{why}")


def _statistic(u: optimize.Uncertainty) -> str:
    return "mean" if u.quantile is None else f"{u.quantile:g}-quantile"


def _print_uncertainty(u: optimize.Uncertainty) -> None:
    print(f"robust: the {_statistic(u)} over {u.samples} samples (seed {u.seed}) of log-normal "
          "factors of the uncertain constants, sigma of log (the metrics below are the "
          "statistic's):")
    stated = {k: source for k, (_, source) in optimize.DEFAULT_SIGMAS.items()}
    items = [f"{k} {v:.3g}" + (f" ({u.sources[k]})" if u.sources[k] != stated.get(k) else "")
             for k, v in u.sigmas.items()]  # a source docs/codesign.md does not state shown
    lines = [""]
    for item in items:  # wrapped between items, at 100 columns
        if lines[-1] and len(lines[-1]) + len(item) > 96:
            lines.append("")
        lines[-1] += (", " if lines[-1] else "") + item
    print("\n".join(f"  {line}{',' if i < len(lines) - 1 else ''}"
                    for i, line in enumerate(lines)))


def _print_comparison(prob, cmp: dict) -> None:
    """The nominal and the robust design under the nominal model and on the
    samples, the nominal design's regret and the robust design's price."""
    stat = _statistic(prob.uncertainty)
    where = {"nominal": "under the nominal model", "robust": f"at the {stat}"}
    print(f"{'':<16} {'nominal':>14} {stat:>14}   ({prob.objective} of each design)")
    for name in ("nominal_design", "robust_design"):
        d = cmp[name]
        broken = [where[k] for k, ok in d["feasible"].items() if not ok]
        print(f"  {name.replace('_', ' '):<14} {d['nominal']:>14.6g} {d['robust']:>14.6g}   "
              f"{_design(d['knobs'])}" + (f"   breaks the limits {' and '.join(broken)}"
                                          if broken else ""))
    print("regret of the nominal design on the samples: " + (
        f"{cmp['regret']:+.2%} (its {stat} over the robust design's)" if cmp["regret"]
        is not None else f"n/a (a design breaks the limits {where['robust']})"))
    print("price of the robust design under the nominal model: " + (
        f"{cmp['price']:+.2%}" if cmp["price"] is not None
        else f"n/a (a design breaks the limits {where['nominal']})"))


def _top_rows(r: optimize.Result) -> list[dict]:
    """--top as table rows: rank, objective, the knobs, then every metric."""
    return [{"rank": i + 1, "objective": t["objective"], **t["knobs"], **t["metrics"]}
            for i, t in enumerate(r.top or [])]


def _print_top(r: optimize.Result, n: int) -> None:
    top = r.top or []
    print(f"top {len(top)} distinct feasible designs (of {n} asked), best first:")
    if not top:
        return
    knobs = list(top[0]["knobs"])
    print(f"  {'#':>3} {r.objective:>14}  " + "  ".join(f"{k:>{max(len(k), 12)}}"
                                                       for k in knobs))
    for i, t in enumerate(top):
        print(f"  {i + 1:>3} {t['objective']:>14.6g}  " + "  ".join(
            f"{_shown(k, t['knobs'][k]):>{max(len(k), 12)}}" for k in knobs))


def run(args, name) -> int:
    if args.grid_points < 2:
        raise ValueError(f"--grid-points={args.grid_points} must be at least 2")
    if args.top < 0:
        raise ValueError(f"--top={args.top} must be at least 0")
    if args.csv and not args.top:
        raise ValueError("--csv prints the --top table; add --top N")
    scn = sc.load(args.scenario, args.set, system=args.system)
    labels = sc.labels(args.scenario, args.set, system=args.system)
    keys, given = parse_vary(args.vary)
    part = chip.PART_OF_PRESET_CHIP.get(labels.system.chip)
    if scn.chip is None and part and any(k.startswith("chip.") for k in keys):
        # a chip knob varies the design of the preset's chip: its [chip] table
        args.set = [*args.set, f"chip.part={part}"]
        scn = sc.load(args.scenario, args.set, system=args.system)
    categorical = [k for k in keys if k in optimize.CATEGORICAL]
    load = lambda extra: sc.load(args.scenario, [*args.set, *extra],  # noqa: E731
                                 system=args.system)
    here = {k: optimize.scenario_choice(scn, k, labels) if k in categorical
            else float(sc.get_knob(scn, k)) for k in dict.fromkeys(keys)}
    drawn = bool(args.plot or args.report)
    method = optimize.search_method(args.method, "--method")
    options = method.options(grid_points=args.grid_points, starts=args.starts, steps=args.steps,
                             seed=args.seed, top=args.top,
                             least_top=REPORT_DESIGNS if drawn else 0, store=executable_store)
    rob = cmp = None
    every = ()  # the knobs of a grid that keeps every feasible point (`_points`)
    if categorical:
        if _is_robust(args):
            raise ValueError(f"--robust takes no categorical knob ({categorical[0]}): "
                             f"run it at each choice with --set {categorical[0]}=...")
        try:
            r = optimize.categorical_search(
                load, keys, parse_bounds(args.bounds), args.objective, choices=given,
                method=method, progress=not args.no_progress, **_limits(args),
                **options)
        except optimize.NoValidChoice as e:
            print(f"codesign {name}: no feasible answer: {e}", file=sys.stderr)
            return INFEASIBLE
    elif _is_robust(args):
        prob = _problem(args, scn, keys)
        rob = _robust_problem(args, prob, labels)
        nominal, r, cmp = optimize.robust_search(prob, rob, method, **options,
                                                 progress=not args.no_progress)
        nominal = _checked(load, nominal, args.set)
    else:
        prob = _problem(args, scn, keys)
        if drawn and 0 < method.grid_points(optimize.grid_size(prob, args.grid_points)) \
                <= REPORT_GRID_POINTS:
            every = prob.names
        keep = (optimize.OBJECTIVES[args.objective][0], FRONT_METRIC) if every else ()
        r = method.search(prob, progress=not args.no_progress, keep=keep, **options)
    points = _points(r, every if "grid" in r.metrics else ())
    r = r._replace(metrics={k: v for k, v in r.metrics.items() if k != "grid"})
    r = r._replace(top=method.reported_top(r.top, args.top, drawn))
    r = _checked(load, r, args.set)
    if args.json:
        extra = {} if rob is None else {"robust": {
            **rob.uncertainty.to_json(), **cmp, "nominal": nominal.to_json(with_path=False)}}
        print(json.dumps(_finite_or_none({**r.to_json(), **extra,
                                          **_output.echo(scn, labels, args.system)}), indent=1))
    elif args.csv:
        _output.write_csv(_top_rows(r))
    else:
        _print_text(args, scn, labels, r, here, rob, cmp)
    if not r.feasible:
        if drawn:
            print(f"codesign {name}: nothing feasible to draw: --plot and --report not written",
                  file=sys.stderr)
        print(f"codesign {name}: no feasible design within the bounds and limits"
              f"{_cheapest(args, prob if not categorical else None, r)} (exit code 3)",
              file=sys.stderr)
        return INFEASIBLE
    if drawn:
        heatmap, title = _heatmap(scn, labels, r, points)
        _output.write(args, heatmap, lambda fig: report.page(
            f"codesign optimize: {labels.scenario}",
            [report.section("Result", report.text(_output.captured(
                _print_text, args, scn, labels, r, here, rob, cmp))),
             report.section("Best objective over tp x pp", report.figure(fig, title)),
             report.section("Pareto front", report.figure(*_front(labels, r, points))),
             report.section("The best designs side by side",
                            _side_by_side(load, points["designs"])),
             report.section("Designs", _designs_table(r, points["designs"]))],
            lines=(_output.made_by(f"codesign optimize {_output.scenario_words(args)} "
                                   f"--method {args.method}"),)))
    return 0


def _cheapest(args, prob, r: optimize.Result) -> str:
    """What the budget set is against: under --budget-usd the cheapest design's
    cost to train (the same search minimising the cost, budget lifted; at a
    categorical search, the least-violating design's), under --budget-w the
    least-violating design's power; "" without a budget."""
    if args.budget_usd is not None:
        cost = r.metrics.get("cost_to_train_usd", math.nan)
        if prob is not None and float(prob.scenario.tokens) > 0:
            cheap = prob.with_limits(objective="cost_to_train_usd", budget_usd=None)
            method = optimize.search_method(args.method, "--method")
            c = method.search(cheap, **method.options(
                grid_points=args.grid_points, starts=args.starts, steps=args.steps,
                seed=args.seed, top=0, least_top=0, store=lambda: None))
            cost = c.value if c.feasible else cost
        what = "the cheapest design" if prob is not None else "the least-violating design"
        return f": {what} costs ${cost:,.0f} to train (--budget-usd={args.budget_usd:,.0f})"
    if args.budget_w is not None:
        return (f": the least-violating design draws {r.metrics.get('power_w', math.nan):,.0f} W"
                f" (--budget-w={args.budget_w:,.0f})")
    return ""


def _print_text(args, scn, labels, r: optimize.Result, here: dict, rob, cmp) -> None:
    """What the command prints without --json or --csv."""
    print(_system.line(_system.info(scn.system, labels.system, args.system)))
    if rob is not None:
        _print_uncertainty(rob.uncertainty)
    _print_result(None if rob is None else rob.uncertainty, r, here, args.path)
    if args.top:
        _print_top(r, args.top)
    if rob is not None:
        _print_comparison(rob, cmp)


def _points(r: optimize.Result, names) -> dict:
    """The designs the heatmap shows, [{knob: value, "objective": value}], and
    what they are: with `names` (the problem's knobs), every feasible point of
    the grid (`grid_search`'s keep: `r.metrics["grid"]`); else the best
    distinct feasible designs the result holds (`Result.top`), which also
    make the page's table ("designs")."""
    held = [{**t["knobs"], "objective": t["objective"], FRONT_METRIC: t["metrics"][FRONT_METRIC]}
            for t in r.top or []]
    if not names:
        return {"points": held, "designs": held,
                "what": f"the {len(held):,} best distinct feasible designs the "
                        f"{r.method} search evaluated exactly"}
    kept = r.metrics["grid"]
    every = [{**dict(zip(names, x, strict=True)), "objective": v, FRONT_METRIC: m}
             for x, v, m in zip(kept["knobs"], kept[optimize.OBJECTIVES[r.objective][0]],
                                kept[FRONT_METRIC], strict=True)]
    return {"points": every, "designs": held,
            "what": f"each of the grid's {len(every):,} feasible points "
                    f"(of {r.grid_size:,})"}


def _best_cells(points: list, here: dict, goal: str, value: str) -> dict:
    """The best objective (`goal` min or max) per (tp, pp) cell of `points`, a
    knob a point does not vary at the scenario's value `here`: a table for
    `plots.sweep_heatmap` (`value`: the objective's metric, which names the colour bar)."""
    best: dict = {}
    for p in points:
        cell = tuple(float(p.get(k, here[k])) for k in HEATMAP_KNOBS)
        v = float(p["objective"])
        if math.isfinite(v) and (cell not in best or (v < best[cell] if goal == "min"
                                                      else v > best[cell])):
            best[cell] = v
    cells = sorted(best)
    return {HEATMAP_KNOBS[0]: np.array([c[0] for c in cells]),
            HEATMAP_KNOBS[1]: np.array([c[1] for c in cells]),
            value: np.array([best[c] for c in cells])}


def _heatmap(scn, labels, r: optimize.Result, points: dict):
    """(the tp x pp heatmap of the best objective over `points`, its caption)."""
    here = {k: float(sc.get_knob(scn, k)) for k in HEATMAP_KNOBS}
    value = optimize.OBJECTIVES[r.objective][0]
    table = _best_cells(points["points"], here, r.goal, value)
    title = f"{labels.scenario}: the best {words(value)} ({r.goal}) per tp x pp"
    return (_output.plots().sweep_heatmap(table, x=HEATMAP_KNOBS[0], y=HEATMAP_KNOBS[1],
                                          value=value, title=title),
            f"{title}, over {points['what']}; an empty cell holds none of them")


def _front(labels, r: optimize.Result, points: dict):
    """(the figure of the objective against memory per GPU over `points`, with
    the designs no other beats in both, its caption)."""
    value = optimize.OBJECTIVES[r.objective][0]
    scale = units.unit_of(value)[0]  # the objective in the unit its label names
    objective = [p["objective"] / scale for p in points["points"]]
    memory = [p[FRONT_METRIC] / 2**30 for p in points["points"]]
    sign = 1.0 if r.goal == "min" else -1.0
    front = optimize.non_dominated([sign * v for v in objective], memory)
    plots = _output.plots()
    fig = plots.pareto_points(
        objective, memory, front, xlabel=plots.column_label(value),
        ylabel="memory per GPU (GiB)", title=f"{labels.scenario}: {words(value)} against memory")
    return fig, (f"{words(value)} ({r.goal}) against memory per GPU over {points['what']}; "
                 f"the {len(front)} designs on the line are beaten by no other in both")


SIDE_BY_SIDE = 4  # the page's designs evaluated in full, side by side


def _side_by_side(load, designs: list, n: int = SIDE_BY_SIDE) -> str:
    """The best `n` designs side by side, a column each: their knobs, then the
    exact estimate of each (`codesign estimate`'s program; designs that differ
    only in float knobs share one executable): step time, its parts (compute,
    exposed communication per dimension, bubble, optimizer), memory per GPU
    against the capacity."""
    from .estimate import estimate_program

    columns, evaluated = {"what": ""}, []
    for i, d in enumerate(designs[:n]):
        knobs = {k: v for k, v in d.items() if k not in ("objective", FRONT_METRIC)}
        s = optimize.design_scenario(load, knobs)
        est, out = compiled(estimate_program, s, store=executable_store())[0](s)
        evaluated.append((knobs, est, out))
        columns[f"d{i}"] = f"#{i + 1}"
    if not evaluated:
        return report.paragraph("no feasible design to show")
    rows = [{"what": k, **{f"d{i}": _shown(k, kn[k]) for i, (kn, _, _) in enumerate(evaluated)}}
            for k in evaluated[0][0]]
    rows.append({"what": "step time (s)",
                 **{f"d{i}": float(o["step_time_s"]) for i, (_, _, o) in enumerate(evaluated)}})
    parts = evaluated[0][1].step.breakdown_s()
    for part in parts:
        rows.append({"what": f"  {part} (s)", **{f"d{i}": float(e.step.breakdown_s()[part])
                                                 for i, (_, e, _) in enumerate(evaluated)}})
    rows.append({"what": "memory per GPU", **{
        f"d{i}": f"{format_bytes(float(o['memory_bytes_per_gpu']))} of "
                 f"{format_bytes(float(o['memory_capacity_bytes']))}"
                 f" ({'fits' if bool(o['fits_memory']) else 'DOES NOT FIT'})"
        for i, (_, _, o) in enumerate(evaluated)}})
    return report.table(rows, columns, caption=f"the best {len(evaluated)} designs, each "
                        "estimated exactly as codesign estimate --set ... would (exposed "
                        "communication per dimension)")


def _designs_table(r: optimize.Result, designs: list, n: int = 50) -> str:
    """The page's table of the best `n` designs the result holds, best first."""
    rows = [{"rank": i + 1, "objective": d["objective"],
             **{k: format_bytes(v) if k == FRONT_METRIC else _shown(k, v)  # GiB, as
                for k, v in d.items() if k != "objective"}}  # the side-by-side table
            for i, d in enumerate(designs[:n])]
    return report.table(rows, caption=f"the best {len(rows)} distinct feasible designs "
                                      f"({r.objective}, {r.goal}) the search holds")
