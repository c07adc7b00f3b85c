"""The slowest pipeline stage's shape: its layers (dense and MoE, the MTP blocks
on the last stage), micro-batches and tokens per micro-batch. The first thing a
step computes, once (`step`), and handed as a typed value to the traffic, the
compute and the memory of that step."""

from __future__ import annotations

import equinox as eqx
import jax

from .plan import Plan
from .relax import lattice_cubic, smooth_ceil
from .workload import Transformer


class Shape(eqx.Module):
    """Per-micro-batch quantities of the slowest stage that the rows need."""

    layers_on_stage: jax.Array
    moe_layers_on_stage: jax.Array
    micro_batches: jax.Array
    tokens: jax.Array  # tokens per micro-batch per data-parallel rank (b s / cp)

    @property
    def dense_layers_on_stage(self) -> jax.Array:
        return self.layers_on_stage - self.moe_layers_on_stage


def shape(model: Transformer, plan: Plan, t=0.0) -> Shape:
    # relaxed: the stage's share of the layers over an even split (>= 1, 1 where
    # pp v divides L), times the even split L / pp; m x layers, m ~ pp, stays flat
    # between stage counts where relaxing the count itself overshot it by ~12%
    padding = lattice_cubic(lambda pp, v: smooth_ceil(model.layers / (pp * v)) * v * pp
                            / model.layers, (plan.pp, plan.interleave), t)
    layers = model.layers / plan.pp * padding
    # the MTP blocks on the last stage, taken as the slowest (it holds the output head)
    return Shape(layers + model.mtp_layers,
                 layers * model.moe_layers / model.layers + model.mtp_moe_layers,
                 plan.micro_batches,
                 plan.micro_batch * model.seq_len / plan.cp)
