"""The network roofline of a step, per parallelism dimension: the FLOP per byte
the plan achieves on the wire against the FLOP per byte its tier needs to stay
compute-bound (`codesign roofline`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import collectives, compute, traffic
from .hardware import System
from .relax import safe_div
from .step import Step


def wire_bytes_per_gpu(row: traffic.Row) -> jax.Array:
    """Bytes one GPU puts on its link per step for a row: nccl-tests' bus
    factor (bytes through each rank's link per byte of message) x size x count."""
    return row.count_per_step * row.message_bytes * collectives.bus_factor(
        row.collective, row.ranks)


def needed_flop_per_byte(system: System, dtype: str = "bf16") -> dict:
    """The FLOP per byte each tier needs to stay compute-bound: peak / bandwidth
    per direction (the seeds' 1,100 for H100 over NVLink divides by the
    bidirectional 900 GB/s, which halves it)."""
    peak = compute.peak_flops_per_s(system, dtype)
    return {"scale_up": peak / system.scale_up.bandwidth_Bps,
            "scale_out": peak / system.scale_out.bandwidth_Bps}


def roofline(s: Step, system: System, dtype: str = "bf16") -> dict:
    """The network roofline per dimension: FLOP per byte the plan achieves on
    the wire against the FLOP per byte its tier needs to stay compute-bound
    (`needed_flop_per_byte`). A dimension whose traffic crosses domains
    (`scale_out`, a jnp boolean: traceable) is judged on the bytes it sends over
    the slow tier (`Row.slow_tier_bytes`); one that stays inside on all its wire
    bytes (`wire_bytes`). `flop_per_byte` is 0 for a dimension without traffic.

    Args:
        s: the `step.Step` (`estimate(scn).step`).
        system: the `hardware.System` it ran on.
        dtype: the width the GEMMs' peak is read in ("bf16", "fp8", ...).

    Returns:
        {dimension: {"bytes": bytes per GPU per step judged, "wire_bytes": every
        byte it sends, "scale_out": whether its traffic crosses domains,
        "needed_flop_per_byte", "flop_per_byte"}}, jnp scalars.
    """
    flops = s.hardware_flops_per_step / s.gpus
    need = needed_flop_per_byte(system, dtype)
    totals = {}
    for r in s.traffic:
        wire, slow = totals.get(r.dimension, (0.0, 0.0))
        totals[r.dimension] = (wire + wire_bytes_per_gpu(r), slow + r.slow_tier_bytes)
    out = {}
    for dim, (wire, slow) in totals.items():
        scale_out = slow > 0
        moved = jnp.where(scale_out, slow, wire)
        out[dim] = {"bytes": moved, "wire_bytes": wire, "scale_out": scale_out,
                    "needed_flop_per_byte": jnp.where(scale_out, need["scale_out"],
                                                      need["scale_up"]),
                    "flop_per_byte": safe_div(flops, moved)}
    return out
