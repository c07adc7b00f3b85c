"""`codesign timeline`: the modelled step as Chrome trace-event JSON (`timeline`)."""

from __future__ import annotations

import json

from .. import timeline
from . import _output, _system
from .estimate import evaluate

OUTPUT_FILES = {"out": "--out"}  # checked before the command runs (cli._run; --plot too)


def add_arguments(parser, name):
    _system.add_scenario_arguments(parser)
    parser.add_argument("--out", required=True, metavar="FILE.json",
                        help="the trace to write (open it in ui.perfetto.dev or chrome://tracing)")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw it as a Gantt chart")


def title(scn, labels) -> str:
    """What a figure of the scenario is titled: `default: gpt3-175b on 1024 x A100-...`."""
    return (f"{labels.scenario}: {labels.model} on {float(scn.system.gpus):.0f} x "
            f"{labels.system.chip}")


def traced(scn, labels, est) -> dict:
    """The estimate's step as a trace (`timeline.trace`), naming its scenario,
    model and system."""
    trace = timeline.trace(est.step, scn.plan)
    trace["otherData"] |= {"scenario": labels.scenario, "model": labels.model,
                           "system": labels.system.preset}
    return trace


def run(args, name) -> int:
    scn, labels, est = evaluate(args)
    trace = traced(scn, labels, est)
    _output.save(args, args.out, "--out", json.dumps(trace), named=False)
    shown = sorted({e["pid"] for e in trace["traceEvents"]})
    print(f"{labels.scenario}: step {trace['otherData']['step_time_s']:.3f} s, "
          f"{trace['otherData']['micro_batches']} micro-batches, pipeline stages "
          f"{', '.join(str(s) for s in shown)} of {trace['otherData']['pipeline_stages']}")
    for key in ("aggregated", "gaps"):  # what the trace draws in brief (timeline.trace)
        if key in trace["otherData"]:
            print(f"{key}: {trace['otherData'][key]}")
    _output.wrote(args.out, args)
    if args.plot:
        _output.plots().timeline(trace, path=args.plot, title=f"{title(scn, labels)}, one step")
        _output.wrote(args.plot, args)
    return 0
