"""The parameters one GPU holds: the fullest pipeline stage's dense and routed
parameters split by tensor parallelism (the routed experts by ep x etp), and
sharded as the plan's ZeRO stage says (`sharding.ZeroStage`) over the group
the framework shards over (dp x cp, the experts' replicas, or HSDP's groups).
Read by the optimizer's step (`compute.optimizer_time_s`, `compute.Timing.params`)
and memory (`memory.memory`)."""

from __future__ import annotations

import jax.numpy as jnp

from . import stage as stage_lib
from .plan import Plan
from .relax import EXACT, where
from .workload import Transformer


def local_params(model: Transformer, plan: Plan, t=EXACT, sharded=False, sh=None):
    """(dense, routed) parameters one GPU of the fullest stage holds, sharded by
    tp (the routed experts by ep x etp), and, when `sharded` (a term the plan's
    ZeRO stage shards: `sharding.ZeroStage`), over the group the framework
    shards over (`shard_params`). The fullest stage holds one embedding matrix (input on
    the first stage, output on the last), both when pp = 1; a layout's rank
    its own blocks and matrices (`stage.layout_params`). `sh`: the stage's
    `stage.Shape` if known."""
    sh = stage_lib.shape(model, plan, t) if sh is None else sh
    if sh.embedding_params is not None:  # a layout's rank: its own blocks and matrices
        dense, routed = stage_lib.layout_params(model, sh)
        dense, routed = dense / plan.tp, routed / (plan.ep * plan.expert_tp)
        return shard_params(plan, dense, routed) if sharded else (dense, routed)
    share = sh.layers_on_stage / model.blocks  # of the blocks, on the fullest stage
    embedding = where(plan.pp > 1, model.vocab * model.hidden, model.embedding_params())
    dense = (model.layer_params() * share + embedding) / plan.tp
    routed = model.routed_expert_params() * share / (plan.ep * plan.expert_tp)
    return shard_params(plan, dense, routed) if sharded else (dense, routed)


def held_params(model: Transformer, plan: Plan, t=EXACT, sh=None) -> tuple:
    """((dense, routed) parameters one GPU of the fullest stage holds
    unsharded, the same sharded as ZeRO shards them, or None where the plan's
    stage shards nothing), each computed once (`local_params`, `shard_params`)."""
    unsharded = local_params(model, plan, t, sharded=False, sh=sh)
    return unsharded, (shard_params(plan, *unsharded) if plan.zero.shards_anything else None)


def shard_params(plan: Plan, dense, routed):
    """`local_params`' (dense, routed) unsharded parameters, sharded over the
    group the framework shards over: every dp x cp rank holds the same weights (Megatron's
    distributed optimizer shards over dp x cp), the routed experts' over their
    replicas (`Plan.expert_dp`); HSDP (`plan.zero_shard_size` > 0) shards inside
    groups of that many of them and replicates across."""
    def shard(ranks):  # the ranks one shard group spans
        return jnp.where(plan.zero_shard_size > 0,
                         jnp.clip(plan.zero_shard_size, 1.0, ranks), ranks)

    return dense / shard(plan.dp * plan.cp), routed / shard(plan.expert_dp)
