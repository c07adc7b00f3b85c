"""Which scenario and system a command uses: its arguments (scenario, --set,
--system), a text header line and a JSON field."""

from __future__ import annotations

import dataclasses

from .. import checks
from ..model.hardware import System, Tier
from ..scenario import BUILTIN, SystemLabels
from ..units import GB, us
from .presets import to_json


def add_scenario_arguments(parser, set_example: str = "") -> None:
    """The scenario (optional, default `default`), `--set` and `--system`."""
    parser.add_argument("scenario", nargs="?", default=None,
                        help="TOML file or built-in name: " + ", ".join(BUILTIN)
                        + " (default: default)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a scenario key (repeatable)" + set_example)
    parser.add_argument("--system", help="system preset name or system TOML (e.g. from "
                        "`codesign calibrate --out`)")


def _tier(t: Tier) -> dict:
    return {"bandwidth_Bps": float(t.bandwidth_Bps), "latency_s": float(t.latency_s),
            "efficiency": float(t.efficiency), "reduction_Bps": float(t.reduction_Bps),
            "in_network_efficiency": float(t.in_network_efficiency)}


def info(system: System, labels: SystemLabels, source: str | None) -> dict:
    """The preset, chip, tiers and where they came from (`--system` or the
    scenario), with every number of the chip (`chip_spec`) and the topology
    (`labels`: `scenario.labels(...).system` or `scenario.system_labels`)."""
    return {"preset": labels.preset, "chip": labels.chip,
            "source": source or "scenario", "gpus": float(system.gpus),
            "scale_up_domain": float(system.scale_up_domain),
            "scale_up": _tier(system.scale_up), "scale_out": _tier(system.scale_out),
            "gpus_per_node": float(system.gpus_per_node),
            "topology": system.topology.name, "routing": system.routing.name,
            # the topology's own keys (a Clos's pods; nothing for the others)
            **{f.name: float(getattr(system.topology, f.name))
               for f in dataclasses.fields(system.topology) if checks.declaration(f)},
            "chip_spec": to_json(system.chip)}


def line(d: dict) -> str:
    """`system dgx-a100 (from scenario): A100-SXM4-80GB; scale-up 8 GPUs at 150 GB/s, ...`."""
    up, out = d["scale_up"], d["scale_out"]
    return (f"system {d['preset']} (from {d['source']}): {d['chip']}; scale-up "
            f"{d['scale_up_domain']:g} GPUs at {up['bandwidth_Bps'] / GB:.4g} GB/s, "
            f"{up['latency_s'] / us:.3g} us; scale-out {out['bandwidth_Bps'] / GB:.4g} GB/s, "
            f"{out['latency_s'] / us:.3g} us (per GPU, one direction)")
