"""`codesign audit`: compile a sharded training step and compare its HLO collectives
with the traffic table the step model predicts for the same configuration.

On CPU it fakes `--devices` (default 8) CPU devices unless XLA_FLAGS already
sets a count; on GPUs/TPUs it compiles for the accelerators JAX sees.
"""

from __future__ import annotations

import argparse
import json

from . import _system, restart_command


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    _system.add_scenario_arguments(parser)
    parser.add_argument("--mesh", default="dp=2,tp=4",
                        help="the cut to compile, AXIS=SIZE pairs over dp and tp "
                             "(default dp=2,tp=4)")
    parser.add_argument("--devices", type=int, default=8,
                        help="fake CPU devices when JAX runs on CPU (default 8)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace, name: str) -> int:
    from ..execute import distributed

    distributed.configure_cpu_devices(args.devices, restart=restart_command())
    from .. import scenario as sc
    from ..execute import audit
    from . import _output

    mesh = audit.parse_mesh(args.mesh)
    scn = sc.load(args.scenario, args.set, system=args.system)
    labels = sc.labels(args.scenario, args.set, system=args.system)
    report = audit.run(scn, mesh, name=labels.scenario)
    if args.json:
        print(json.dumps({**report.as_json(), **_output.echo(scn, labels, args.system)},
                         indent=2))
    else:
        print(audit.format_report(report))
    return 0
