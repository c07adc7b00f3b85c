"""`codesign report`: one self-contained HTML page of a scenario (its plan, the
estimate, the step and memory breakdowns, the timeline, the roofline, the
sensitivities and the error band); what `--report FILE.html` and `--plot
FILE.png` of optimize, sensitivity, validate and calibrate share is
`_output`'s (`add_output_arguments`, `write`). Every number comes from the functions the
commands use (`estimate`, `timeline`, `roofline`, `sensitivity`); the page is
`codesign.report`'s (docs/report.md).
"""

from __future__ import annotations

from .. import report
from ..scenario import flatten
from ..units import format_bytes
from . import _output, _system, executable_store
from ._fit import fit_lines, fit_options
from .estimate import (
    MEMORY_PARTS,
    estimate_json,
    estimate_program,
    evaluate,
    interval_ratio,
    interval_source,
    intervals_json,
    print_estimate,
    print_traffic,
    roofline_rows,
)
from .timeline import title as scenario_title
from .timeline import traced

OUTPUT_FILES = {"out": "--out"}  # checked before the command runs (cli._run)


def add_arguments(parser, name):
    _system.add_scenario_arguments(parser)
    parser.add_argument("--out", required=True, metavar="FILE.html",
                        help="the page to write: one file that opens offline in any browser")


def plan_tables(plan_json: dict, n: int = 3) -> str:
    """The resolved plan (the plan of `--json`'s echo, nested keys dotted) as
    (key, value) tables, `n` side by side."""
    rows = [{"key": k, "value": ", ".join(v) if isinstance(v, list) else v}
            for k, v in flatten(plan_json).items()]
    per = -(-len(rows) // n)
    return report.columns(*(report.table(rows[i:i + per], {"key": "plan key", "value": "value"})
                            for i in range(0, len(rows), per)))


def _interval_line(out: dict) -> str:
    """The error band as `codesign estimate` words it."""
    if "step_time_s_interval" not in out:
        return f"no interval: {out['interval']['none']}"
    lo, hi = out["step_time_s_interval"]
    return (f"{out['interval']['coverage']:.0%} interval of the step time {lo:.3f}-{hi:.3f} s "
            f"(estimate {out['step_time_s']:.3f} s; {interval_ratio(out)}), from "
            f"{interval_source(out['interval'])}")


def _step_section(plots, out: dict, title: str):
    step = out["step_time_s"]
    rows = [{"part": k, "seconds": v, "share": f"{v / step if step else 0.0:.1%}"}
            for k, v in out["breakdown_s"].items()]
    rows.append({"part": "step time", "seconds": step, "share": "100.0%"})
    interval = out.get("step_time_s_interval")
    fig = plots.step_stack(out["breakdown_s"], interval_s=interval, title=f"{title}: step time "
                           f"{step:.3f} s by part")
    return report.section(
        "Step time", report.figure(fig, "the step's parts, stacked; the bracket is the "
                                        "error band" if interval else "the step's parts, stacked"),
        report.table(rows, {"part": "part", "seconds": "seconds per step", "share": "share"}))


def _memory_section(plots, out: dict, title: str):
    memory = {k: out[f"memory_{k}_bytes"] for k in MEMORY_PARTS}
    rows = [{"part": k, "bytes": format_bytes(v)} for k, v in memory.items()]
    rows += [{"part": "total", "bytes": format_bytes(out["memory_bytes_per_gpu"])},
             {"part": "HBM capacity", "bytes": format_bytes(out["memory_capacity_bytes"])}]
    fig = plots.memory_per_gpu(memory, out["memory_capacity_bytes"], title=title)
    return report.section("Memory per GPU", report.columns(
        report.figure(fig, "memory per GPU by part against the HBM capacity "
                           "(GiB = 2^30 bytes, as the table)"),
        report.table(rows, {"part": "part", "bytes": "per GPU"})),
        report.paragraph(f"memory {format_bytes(out['memory_bytes_per_gpu'])} of "
                         f"{format_bytes(out['memory_capacity_bytes'])} per GPU "
                         f"({'fits' if out['fits_memory'] else 'DOES NOT FIT'})"))


def _roofline_section(plots, scn, labels, est):
    rows = roofline_rows(scn, est)
    fig = plots.roofline(rows, title=f"{labels.scenario}: network roofline")
    shown = [{"dimension": r["dimension"], "tier": r["tier"],
              "bytes": format_bytes(r["wire_bytes_per_gpu"]),
              "flop_per_byte": r["flop_per_byte"], "needed": r["needed_flop_per_byte"],
              "bound": "compute" if r["compute_bound"] else "NETWORK"} for r in rows]
    return report.section("Roofline", report.columns(
        report.figure(fig, "FLOP per byte on the wire per parallel dimension, against what "
                           "each tier needs to keep the GPUs busy (codesign roofline)"),
        report.table(shown, {"dimension": "dim", "tier": "tier", "bytes": "bytes/GPU/step",
                             "flop_per_byte": "FLOP/byte", "needed": "needed",
                             "bound": "bound"})))


def _timeline_section(plots, scn, labels, est):
    fig = plots.timeline(traced(scn, labels, est), title=f"{scenario_title(scn, labels)}, one step")
    return report.section("Timeline", report.figure(
        fig, "the modelled step as codesign timeline writes it (one row per pipeline stage and "
             "track; hidden communication hatched, the bubble grey)"))


def _chip_section(scn, out: dict):
    """A scenario with a chip design (`[chip]`): its silicon by kind, its cost to
    make by kind, its price, and its board power at full load and at the step's
    hardware FLOP utilisation (HBM and links at full load: an upper bound)."""
    from .. import chip

    d = scn.chip
    a, c = chip.area(d), chip.cost(d)
    area_rows = [{"part": k, "value": f"{float(v):,.0f} mm^2"} for k, v in (
        ("logic", a.logic_mm2), ("SRAM", a.sram_mm2), ("PHYs (HBM, links)", a.phy_mm2),
        ("total", a.total_mm2))]
    area_rows += [{"part": "dies", "value": f"{float(d.dies):g} of {float(chip.die_mm2(d)):,.0f} "
                   f"mm^2, {chip.package_kind(d)}"}]
    cost_rows = [{"part": k, "usd": f"${float(v):,.0f}"} for k, v in (
        ("logic (good dies)", c.logic_usd), ("HBM", c.hbm_usd), ("packaging", c.packaging_usd),
        ("test", c.test_usd), ("cost to make", c.total_usd), ("price", chip.price_usd(d)))]
    full, at = chip.board_power_w(d), chip.board_power_w(d, mfu=out["hfu"])
    return report.section("Chip", report.columns(
        report.table(area_rows, {"part": "silicon", "value": "area"}),
        report.table(cost_rows, {"part": "cost", "usd": "per part"})),
        report.paragraph(f"board power {float(full):,.0f} W at full load, {float(at):,.0f} W at "
                         f"the step's hardware FLOP utilisation {out['hfu']:.1%} (HBM and links "
                         "at full load); the model and its constants: docs/chip.md"))


def run(args, name) -> int:
    from .sensitivity import elasticity_figure, ranked_elasticities, sensitivity_section

    scn, labels, est = evaluate(args)
    out = estimate_json(est)
    out = {**out, **intervals_json(labels, out), **_output.echo(scn, labels, args.system)}
    plots = _output.plots()
    title = scenario_title(scn, labels)
    if not out["fits_memory"]:  # as `codesign estimate` says it
        out["fit_options"] = fit_options(args, estimate_program, executable_store())
    el, order = ranked_elasticities(scn, "step_time_s")
    shown = [k for k in order if el[k] != 0]  # as `codesign sensitivity` shows them
    sections = [
        report.section("Scenario and plan",
                       report.paragraph(_system.line(out["system"])),
                       plan_tables(out["plan"])),
        _step_section(plots, out, labels.scenario),
        report.section("Error band", report.paragraph(_interval_line(out))),
        report.section("Estimate", report.paragraph("as codesign estimate prints it"),
                       report.text(_output.captured(print_estimate, scn, labels, out) + "\n"
                                   + _output.captured(print_traffic, out["traffic"]))),
        _memory_section(plots, out, title),
        *([_chip_section(scn, out)] if scn.chip is not None else []),
        *([report.section("What would make it fit", report.text("\n".join(
            fit_lines(out["fit_options"]))))] if "fit_options" in out else []),
        _timeline_section(plots, scn, labels, est),
        _roofline_section(plots, scn, labels, est),
        sensitivity_section(elasticity_figure(plots, labels, "step_time_s", el, shown), scn,
                            labels, "step_time_s", el, shown),
    ]
    text = report.page(f"codesign report: {title}", sections,
                       lines=(_output.made_by(f"codesign report {_output.scenario_words(args)}"),))
    print(f"{labels.scenario}: step {out['step_time_s']:.3f} s, "
          f"{report.figures_in(text)} figures, {len(text) / 1024:,.0f} KiB")
    _output.save(args, args.out, "--out", text)
    return 0
