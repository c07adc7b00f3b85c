"""Memory of a training step: the bytes one GPU of the fullest stage holds —
weights, gradients and optimizer state by ZeRO stage and precision recipe,
activations by recompute mode and the micro-batches the schedule keeps in
flight, the chip's reserve — and the bytes of a checkpoint."""

from __future__ import annotations

import equinox as eqx
import jax

from . import stage
from .compute import stored_bytes_per_micro_batch
from .hardware import System
from .params import held_params
from .plan import Plan
from .relax import EXACT, once, smoothing
from .strategies import NoRecompute
from .workload import Transformer


def in_flight_micro_batches(plan: Plan, t=EXACT, micro_batches=None) -> jax.Array:
    """Micro-batches whose activations the first stage holds at once
    (`strategies.Schedule.in_flight_micro_batches`; `micro_batches`: the plan's
    if known)."""
    m = plan.micro_batches if micro_batches is None else micro_batches
    return plan.schedule.in_flight_micro_batches(m, plan.pp, plan.interleave, smoothing(t))


class Memory(eqx.Module):
    """Bytes per GPU on the fullest stage."""

    weights_bytes: jax.Array
    gradients_bytes: jax.Array
    optimizer_bytes: jax.Array
    activations_bytes: jax.Array
    reserve_bytes: jax.Array  # CUDA context, communicator buffers, fragmentation
    capacity_bytes: jax.Array

    @property
    def total_bytes(self) -> jax.Array:
        return self._total_bytes()

    @once
    def _total_bytes(self) -> jax.Array:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.reserve_bytes)

    def breakdown_bytes(self) -> dict:
        """Each term of `total_bytes` by name."""
        return {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
                "reserve": self.reserve_bytes}


def memory(model: Transformer, plan: Plan, system: System, t=EXACT, sh=None,
           stored=None, full_layer_bytes=None, params=None) -> Memory:
    """Weights, gradients and optimizer state by precision recipe, each sharded
    where the plan's ZeRO stage shards it (`sharding.ZeroStage`) over the group
    the framework shards over (`params.shard_params`: dp x cp, or HSDP's
    `parallel.zero_shard_size` groups), ZeRO-3's gathered layers on top;
    activations by recompute mode, attention kernel, sequence parallelism and
    the micro-batches in flight, less those of the layers offloaded to host
    memory (`training.offload_layers`), times what a full-iteration CUDA graph's
    pool holds (`stacks.GraphScope.activation_factor`); the chip's reserve. `sh`: the stage's
    `stage.Shape` if known; `stored`: (stored, offloaded) bytes per
    micro-batch if known (`compute.Timing.stored_bytes`, `.offloaded_bytes`);
    `full_layer_bytes`: a (dense, MoE) layer's without recomputation if known
    (`compute.Timing.full_layer_bytes`); `params`: the (unsharded, sharded)
    parameters if known (`params.held_params`, `compute.Timing.params`)."""
    t = smoothing(t)
    sh = stage.shape(model, plan, t) if sh is None else sh
    pr = plan.precision
    copies = plan.schedule.weight_copies  # DualPipe keeps two copies

    unsharded, shards = held_params(model, plan, t, sh) if params is None else params
    held = {}  # the parameters held under sharding or not, summed once

    def sharded(per_param, on):  # `on`: the plan's ZeRO stage shards this term
        if on not in held:
            dense, routed = shards if on else unsharded
            held[on] = dense + routed
        return per_param * copies * held[on]

    weights = sharded(pr.bytes("params"), plan.zero.shards_weights)
    if plan.zero.gathers_layers:  # gathered weights: one layer at a time, or all kept for backward
        gathered = (model.layer_params() / plan.tp
                    + model.routed_expert_params() / (plan.ep * plan.expert_tp)) / model.blocks
        shard_dense, shard_routed = shards
        keep = sum(unsharded) - shard_dense - shard_routed  # the other ranks' shards
        weights = weights + pr.bytes("params") * (
            2.0 * gathered if plan.reshard_after_forward else keep)
    per_layer = lambda recompute, moe: model.activation_bytes_per_layer(  # noqa: E731
        plan.micro_batch, plan.tp, plan.sequence_parallel, recompute, moe, plan.cp, pr)
    # offloaded layers' activations live in host memory; one offloaded layer's
    # stay on the GPU while they stream out or back (a staging buffer: assumption)
    per_mb, offloaded = stored_bytes_per_micro_batch(model, plan, sh, t=t) if stored is None \
        else stored
    staging = offloaded / t.hard_max(t.hard_min(plan.offload_layers, sh.layers_on_stage), 1.0)
    activations = ((per_mb - offloaded) * in_flight_micro_batches(plan, t, sh.micro_batches)
                   + staging)
    if plan.graphs.activation_factor != 1.0:  # a whole iteration's graph pool
        activations = plan.graphs.activation_factor * activations
    if not plan.recompute.keeps_layer_activations:  # the layer being recomputed
        activations = activations + (per_layer(NoRecompute(), False) if full_layer_bytes is None
                                     else full_layer_bytes[0])  # holds its full ones
    # fp32 logits of one micro-batch where the output head is (one more per MTP depth)
    activations = activations + 4.0 * plan.micro_batch * model.seq_len / plan.cp \
        * model.vocab / plan.tp * sh.head_passes
    return Memory(weights, sharded(pr.bytes("grad_reduce"), plan.zero.shards_gradients),
                  sharded(pr.optimizer_bytes_per_param, plan.zero.shards_optimizer), activations,
                  system.chip.hbm_reserve_bytes, system.chip.hbm_bytes)


def checkpoint_bytes_total(model: Transformer, plan: Plan) -> jax.Array:
    """Bytes of one checkpoint: weights, master weights and Adam moments."""
    pr = plan.precision
    return model.params() * (pr.bytes("params") + pr.optimizer_bytes_per_param)
