"""Dollars and watts of a scenario: prices, amortisation, fabric capital, power, cost to train.

`Assumptions` holds the prices and lifetimes (each number labelled with its
source or as an ASSUMPTION); `fabric.Prices` prices the parts of a 400 Gb/s
scale-out fabric, which `fabric.inventory` counts. This module owns what turns
them into money: the fabric's capital cost (`fabric_capex_usd`: the scale-out
inventory scaled to the scale-out bandwidth in rails of `port_Bps`, plus the
scale-up switching), the power drawn (`power_w`: GPU boards and the scale-out
fabric in such rails, `fabric_power_w`) and the cost to train (`cost_to_train_usd`: GPU-hours at
a price plus the fabric's capital amortised over its lifetime). `step.estimate`
(its `fabric_cost_usd` and `fabric_power_w` outputs, with
`default_assumptions`), the optimiser's metrics and the sweeps' fabric target
all read it, so one scenario has one fabric cost and power everywhere. Every
function is jnp (differentiable, vmappable) and takes the model's
`relax.Smoothing` `t` where a count is rounded (`relax.EXACT` by default).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax

from .. import checks
from ..checks import float_field
from ..units import GB, year
from . import fabric
from .hardware import System
from .relax import EXACT, smoothing

_FIELDS = ("usd_per_gpu_hour", "fabric_lifetime_s", "port_Bps", "scale_up_link_Bps",
           "scale_up_switch_radix", "scale_up_usd_per_port")


def _float(value) -> float | None:
    """A concrete scalar as a float; None when traced (or not one number)."""
    v = checks.concrete(value)
    return None if v is None or v.size != 1 else float(v.item())


class Assumptions(eqx.Module):
    """Prices and lifetimes the dollar and energy figures need.

    Every number is an ASSUMPTION (order of magnitude, 2024) unless a source is
    given; override them (CLI: --usd-per-gpu-hour, --fabric-lifetime-years).
    - usd_per_gpu_hour = 2: the GPU and its server, hosted and powered (cloud
      reserved pricing for A100/H100-class GPUs is of this order).
    - fabric_lifetime_s = 4 years: straight-line amortisation of the fabric,
      a common server depreciation period; a run is charged
      fabric_capex x time_to_train / lifetime.
    - port_Bps = 400 Gb/s: the port generation `fabric.Prices` prices; a
      scale-out bandwidth B per GPU takes B / port_Bps such rails, so the
      scale-out inventory's cost and power scale by that factor (continuous:
      a relaxation of the rail count).
    - scale_up_link_Bps = 25 GB/s: one NVLink4 link per direction (vendor:
      900 GB/s bidirectional over 18 links); a GPU needs B_up / link of them.
    - scale_up_switch_radix = 64: NVLink4 ports on a third-generation NVSwitch
      chip (vendor datasheet). A domain of D GPUs is a non-blocking fat tree
      of such switches per link plane: L levels, 2L - 1 switch ports per link.
    - scale_up_usd_per_port = 150: ASSUMPTION, one NVSwitch port with its
      share of the switch, board and copper.
    """

    usd_per_gpu_hour: jax.Array = float_field(default=2.0)
    fabric_lifetime_s: jax.Array = float_field(default=4 * year)
    port_Bps: jax.Array = float_field(default=400e9 / 8)
    scale_up_link_Bps: jax.Array = float_field(default=25 * GB)
    scale_up_switch_radix: jax.Array = float_field(default=64.0)
    scale_up_usd_per_port: jax.Array = float_field(default=150.0)

    def __repr__(self) -> str:
        """The prices and lifetimes with their units (concrete values; the
        field-by-field form when traced)."""
        v = {f: _float(getattr(self, f)) for f in _FIELDS}
        if any(x is None for x in v.values()):
            return eqx.tree_pformat(self)
        return (f"Assumptions(${v['usd_per_gpu_hour']:.4g} per GPU-hour, fabric lifetime "
                f"{v['fabric_lifetime_s'] / year:.4g} years, port "
                f"{v['port_Bps'] * 8 / 1e9:.4g} Gb/s, scale-up link "
                f"{v['scale_up_link_Bps'] / GB:.4g} GB/s, switch radix "
                f"{v['scale_up_switch_radix']:.4g}, ${v['scale_up_usd_per_port']:.4g} per "
                "scale-up port)")

    def __check_init__(self):
        for name in _FIELDS:
            if name != "scale_up_switch_radix":
                checks.positive(name, getattr(self, name))
        checks.check("scale_up_switch_radix", self.scale_up_switch_radix, lambda v: v >= 4,
                      "must be at least 4")


@functools.cache
def default_assumptions() -> Assumptions:
    """The default `Assumptions`, built on first use and eagerly even inside a
    trace (as `fabric.default_prices`), so the cache never holds tracers."""
    with jax.ensure_compile_time_eval():
        return Assumptions()


def scale_out_rails(system: System, a: Assumptions) -> jax.Array:
    """Rails of `port_Bps` the scale-out bandwidth per GPU takes (continuous)."""
    return system.scale_out.bandwidth_Bps / a.port_Bps


def fabric_capex_usd(system: System, inventory: fabric.Inventory, a: Assumptions,
                     t=EXACT) -> jax.Array:
    """The fabric's capital cost: the scale-out inventory (`fabric.inventory`,
    one 400 Gb/s port per GPU) times the rails its bandwidth takes, plus the
    scale-up switching: (2L - 1) switch ports per link, B_up / link links per
    GPU, L the levels of a fat tree of `scale_up_switch_radix` switches over
    the domain (`fabric.fat_tree_levels`, relaxed under `t`). A torus
    (TPU ICI) joins its chips directly: no scale-up switch ports."""
    rails, t = scale_out_rails(system, a), smoothing(t)
    if not system.topology.switched_scale_up:
        return inventory.cost_usd * rails
    levels = fabric.fat_tree_levels(system.scale_up_domain, a.scale_up_switch_radix, t)
    links = system.scale_up.bandwidth_Bps / a.scale_up_link_Bps
    up = ((system.scale_up_domain > 1) * (2.0 * levels - 1.0) * links
          * a.scale_up_usd_per_port)
    return inventory.cost_usd * rails + up * system.gpus


def fabric_power_w(system: System, inventory: fabric.Inventory, a: Assumptions) -> jax.Array:
    """The scale-out fabric's power (`fabric.inventory`, one 400 Gb/s port per
    GPU) times the rails its bandwidth takes."""
    return inventory.power_w * scale_out_rails(system, a)


def power_w(system: System, inventory: fabric.Inventory, a: Assumptions) -> jax.Array:
    """GPU board power (`chip.tdp_w`) and the scale-out fabric's (`fabric_power_w`)."""
    return system.chip.tdp_w * system.gpus + fabric_power_w(system, inventory, a)


def cost_to_train_usd(gpu_hours, capex_usd, time_to_train_s, a: Assumptions) -> jax.Array:
    """GPU-hours at `usd_per_gpu_hour` plus the fabric's capital amortised
    straight-line: capex x time to train / `fabric_lifetime_s`."""
    return gpu_hours * a.usd_per_gpu_hour + capex_usd * time_to_train_s / a.fabric_lifetime_s
