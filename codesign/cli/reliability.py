"""`codesign reliability`: stragglers, failures, checkpoints and goodput of a scenario.

The scenario's step time comes from the step model (`step.estimate`); this
command prints the part of the estimate that `reliability.report` adds: the
distribution of the synchronous step, the job's mean time between failures
(and each component's share), the checkpoint write time and interval, and the
goodput. Override any `[reliability]` key with `--set`, e.g.
`--set reliability.straggler_q=0.01`.
"""

from __future__ import annotations

import json

from .. import output_checks
from ..model import reliability, step
from . import _output, _system
from .estimate import evaluate

REPORT_KEYS = ("expected_step_time_s", "step_time_p50_s", "step_time_p99_s", "p_step_delayed",
               "mtbf_s", "checkpoint_write_s", "checkpoint_interval_s", "restart_downtime_s",
               "effective_training_time_fraction", "goodput")


def add_arguments(parser, name) -> None:
    _system.add_scenario_arguments(parser, ", e.g. reliability.straggler_q=0.01")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def reliability_json(scn, est: step.Estimate) -> dict:
    """The reliability part of an estimate by JSON key (plain floats)."""
    rep, rel = est.reliability, scn.reliability
    out = {"step_time_s": float(est.step.step_time_s), "gpus": float(scn.system.gpus)}
    out.update({k: float(getattr(rep, k)) for k in REPORT_KEYS})
    out["young_interval_s"] = float(
        reliability.young_interval_s(rep.checkpoint_write_s, rep.mtbf_s))
    mtbf = reliability.component_mtbf_s(scn.system.gpus, rel)
    # a component with share 0 never stops the job: no MTBF (null), not ~1e300 s
    out["component_mtbf_s"] = {k: float(v) if float(getattr(rel, f"share_{k}")) > 0 else None
                               for k, v in mtbf.items()}
    out["straggler_q"] = float(rel.straggler_q)
    out["straggler_slowdown"] = float(rel.straggler_slowdown)
    out["straggler_sigma"] = float(rel.straggler_sigma)
    if float(est.tokens) > 0:
        out["time_to_train_s"] = float(est.time_to_train_s)
    return out


def checked(out: dict, overrides=()) -> dict:
    """`out` (`reliability_json`), once every number in it passes the estimate's
    output check (`output_checks.check_outputs`: finite, in range, the cause named)."""
    numbers = {k: v for k, v in out.items() if isinstance(v, float)}
    numbers.update({f"component_mtbf_s.{k}": v for k, v in out["component_mtbf_s"].items()
                    if v is not None})
    output_checks.check_outputs(numbers, overrides)
    return out


def _print(scn, labels, out: dict) -> None:
    hours = out["mtbf_s"] / 3600
    print(f"scenario {labels.scenario}: {labels.model} on {out['gpus']:.0f} x "
          f"{labels.system.chip} ({labels.system.preset}, {scn.system.topology.name})")
    print(f"stragglers   q {out['straggler_q']:g}, slowdown {out['straggler_slowdown']:g}x, "
          f"jitter sigma {out['straggler_sigma']:g}; P(step delayed) "
          f"{out['p_step_delayed']:.1%} over {out['gpus']:.0f} participants")
    print(f"step time    {out['step_time_s']:.3f} s without stragglers; synchronous step "
          f"mean {out['expected_step_time_s']:.3f} s, p50 {out['step_time_p50_s']:.3f} s, "
          f"p99 {out['step_time_p99_s']:.3f} s")
    print(f"failures     job MTBF {hours:.2f} h ({out['mtbf_s']:,.0f} s); by component:")
    for k, v in out["component_mtbf_s"].items():
        print(f"  {k:<13} {v / 3600:10.1f} h" if v is not None else f"  {k:<13} {'never':>10}"
              "   (share 0)")
    print(f"checkpoints  write {out['checkpoint_write_s']:.1f} s every "
          f"{out['checkpoint_interval_s']:,.0f} s of work (Young: "
          f"{out['young_interval_s']:,.0f} s); restart {out['restart_downtime_s']:,.0f} s "
          "per failure")
    print(f"effective training time {out['effective_training_time_fraction']:.1%}; goodput "
          f"{out['goodput']:.1%} (stragglers included)")
    if "time_to_train_s" in out:
        print(f"time to train {out['time_to_train_s'] / 86400:.1f} days")


def run(args, name) -> int:
    scn, labels, est = evaluate(args)
    out = checked(reliability_json(scn, est), args.set)
    out.update(_output.echo(scn, labels, args.system))
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(_system.line(out["system"]))
        _print(scn, labels, out)
    return 0
