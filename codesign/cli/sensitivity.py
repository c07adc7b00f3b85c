"""`codesign sensitivity`: the elasticity d log(output) / d log(knob) of every knob
at the scenario point (`optimize.elasticities`), largest first, and how far each
collective is from mattering (`optimize.slack`)."""

from __future__ import annotations

import json

from .. import optimize, report
from .. import scenario as sc
from ..model import step
from ..optimize import integer_steps
from ..units import format_quantity, format_seconds
from ..words import words
from . import _output, _system
from ._text import describe_elasticity, describe_steps
from .optimize import FLAGS as FLAGS  # the library's quantities in its messages: the same flags


def add_arguments(parser, name):
    _system.add_scenario_arguments(parser)
    _output.add_format(parser, "the elasticities as CSV (one header row)")
    parser.add_argument("--knob", action="append", default=[], metavar="KNOB",
                        help="only these knobs (repeatable; default: every hardware, "
                        "plan and reliability knob)")
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="print only the N largest (0: all)")
    parser.add_argument("--all", action="store_true",
                        help="also the knobs whose elasticity is zero (omitted by default)")
    parser.add_argument("--output", default="step_time_s",
                        choices=optimize.SENSITIVITY_OUTPUTS,
                        help="the output to differentiate (default step_time_s; "
                        "time_to_train_s brings in the failure rates)")
    _output.add_output_arguments(parser, "the elasticities shown as a bar chart")


def run(args, name) -> int:
    scn = sc.load(args.scenario, args.set, system=args.system)
    labels = sc.labels(args.scenario, args.set, system=args.system)
    if args.output in step.TIME_TO_TRAIN_OUTPUTS and float(scn.tokens) <= 0:
        raise ValueError(f"--output {args.output} needs training.tokens > 0 "
                         "(add --set training.tokens=...)")
    if args.top < 0:
        raise ValueError(f"--top={args.top} must be at least 0")
    el, order = ranked_elasticities(scn, args.output, args.knob or None)
    values = {k: float(sc.get_knob(scn, k)) for k in order}
    shown = order if args.all else [k for k in order if el[k] != 0]
    omitted = len(order) - len(shown)
    shown = shown[: args.top] if args.top > 0 else shown
    steps = integer_steps(scn, args.output, args.knob or None, order if args.json else shown)
    rows = optimize.slack(scn) if args.json or not args.csv or args.report else []
    if args.json:
        print(json.dumps({**_output.echo(scn, labels, args.system), "output": args.output,
                          "elasticities": {k: el[k] for k in order}, "values": values,
                          "integer_steps": steps, "collectives": rows}, indent=1))
    elif args.csv:
        _output.write_csv([{"knob": k, "elasticity": el[k], "value": values[k]} for k in shown])
    else:
        print(_system.line(_system.info(scn.system, labels.system, args.system)))
        integer = any(k in steps for k in shown)
        print(f"{labels.scenario}: elasticity d log({words(args.output)}) / d log(knob) at the "
              "scenario point, largest first" + ("; an integer knob's exact change at its next "
                                                 "admissible value down and up" if integer else ""))
        _print_elasticities(el, shown, values, args.output, steps)
        if omitted:
            print(f"({omitted} knobs with elasticity zero omitted; --all prints them)")
        _print_slack(rows)
    if args.plot or args.report:
        system = _system.line(_system.info(scn.system, labels.system, args.system))
        _output.write(args, elasticity_figure(_output.plots(), labels, args.output, el, shown),
                      lambda fig: report.page(
                          f"codesign sensitivity: {labels.scenario}",
                          [sensitivity_section(fig, scn, labels, args.output, el, shown,
                                               steps),
                           report.section("Collectives",
                                          report.text(_output.captured(_print_slack, rows)))],
                          lines=(_output.made_by("codesign sensitivity "
                                                 f"{_output.scenario_words(args)}"), system)))
    return 0


def ranked_elasticities(scn, output: str, knobs=None) -> tuple[dict, list]:
    """(`optimize.elasticities` of `output` to `knobs` (None: every knob), the
    knobs largest first): equal to 9 digits (hbm_Bps and hbm_efficiency enter
    as a product, their last bits depend on XLA's options) by name, so the
    order is the same everywhere."""
    el = optimize.elasticities(scn, (output,), knobs)[output]
    return el, sorted(el, key=lambda k: (-float(f"{abs(el[k]):.9g}"), k))


def _print_elasticities(el: dict, shown: list, values: dict, output: str,
                        steps: dict | None = None) -> None:
    """A line per knob: its elasticity, and in words what +10% does or, for an
    integer knob (`steps`: `integer_steps`), what its next admissible values do
    (a relaxed elasticity of tp or pp is nothing a user can act on)."""
    steps = steps or {}
    for k in shown:
        said = (describe_steps(k, steps[k], words(output)) if k in steps
                else describe_elasticity(k, el[k], words(output), value=values[k]))
        print(f"  {k:<36} {el[k]:+9.4f}   {said}")


def _print_slack(rows: list) -> None:
    if rows:
        print("collectives: exposed or hidden under compute now, and the bandwidth of their "
              "tier at which that changes (the others held)")
        for r in rows:
            print(f"  {_slack_line(r)}")


def elasticity_figure(plots, labels, output: str, el: dict, shown: list):
    """The elasticities of `shown` knobs as a bar chart (`plots.elasticity_bars`)."""
    return plots.elasticity_bars({k: el[k] for k in shown}, output=words(output),
                                 title=f"{labels.scenario}: elasticity of {words(output)} at "
                                       "the scenario point, largest first")


def sensitivity_section(fig, scn, labels, output: str, el: dict, shown: list,
                        steps: dict | None = None):
    """The page's section of the elasticities: the bar chart `fig` and, per knob,
    its elasticity, its value and what it means, as `codesign sensitivity` prints
    (an integer knob at its next admissible values: `steps`, computed when not given)."""
    values = {k: float(sc.get_knob(scn, k)) for k in shown}
    steps = integer_steps(scn, output, None, shown) if steps is None else steps
    return report.section(
        "Sensitivities",
        report.figure(fig, f"elasticity d log({words(output)}) / d log(knob) at the scenario "
                           "point (codesign sensitivity); knobs of elasticity zero left out"),
        report.text(_output.captured(_print_elasticities, el, shown, values, output, steps)))


def _slack_line(r: dict) -> str:
    """One row of `optimize.slack` in words."""
    what = f"{r['dimension']} {r['collective']} ({r['tier'].replace('_', '-')})"
    if r["hidden"]:
        now = f"hidden ({format_seconds(r['time_s'])} per step under compute)"
        change = "exposed below"
    else:
        now = f"exposed {format_seconds(r['exposed_s'])} of {format_seconds(r['time_s'])}"
        change = "hidden above"
    # nothing of it hidden: on the critical path, bandwidth shortens it but never hides it
    never = not r["hidden"] and r["exposed_s"] >= r["time_s"] * (1.0 - 1e-12)
    ends = []
    for tier, t in r["tiers"].items():
        name = tier.replace("_", "-")
        ends.append(f"{change} {format_quantity('x_Bps', t['threshold_Bps'], 4)} {name} "
                    f"({t['factor']:.3g}x)" if t["factor"] is not None else
                    f"still hidden at 1e-4x the {name} bandwidth" if r["hidden"] else
                    f"never hidden under compute: more {name} bandwidth only shortens it"
                    if never else
                    f"still partly exposed at 1e4x the {name} bandwidth (what is left is "
                    "not bandwidth)")
    return f"{what}: {now}; {', '.join(ends)}"
