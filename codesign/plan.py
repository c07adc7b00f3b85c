"""How a model is cut across the machine: a `Plan`.

Sizes and counts are float leaves (differentiable, exact at integers); the
discrete choices (schedule, ZeRO stage, recompute, sequence parallelism,
placement) are static. Expert parallelism shards the experts across the
data-parallel ranks (Megatron, DeepSeek-V3): ep divides dp, and experts are
replicated dp / ep times.
"""

from __future__ import annotations

import equinox as eqx
import jax

from . import _checks as C
from .workload import RECOMPUTE, Transformer

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe")
DTYPES = ("bf16", "fp8")
DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_PLACEMENT = ("tp", "cp", "ep", "dp", "pp")


class Plan(eqx.Module):
    dp: jax.Array
    tp: jax.Array
    pp: jax.Array
    cp: jax.Array
    ep: jax.Array
    micro_batch: jax.Array  # sequences per micro-batch per data-parallel rank
    global_batch: jax.Array  # sequences per step
    interleave: jax.Array  # virtual stages per GPU (v)
    moe_node_limit: jax.Array  # M: nodes a token may reach; 0 = unlimited
    dp_bucket_bytes: jax.Array  # gradient bucket size of the data-parallel reduction
    schedule: str = eqx.field(static=True, default="1f1b")
    zero: int = eqx.field(static=True, default=0)
    sequence_parallel: bool = eqx.field(static=True, default=False)
    recompute: str = eqx.field(static=True, default="none")
    reshard_after_forward: bool = eqx.field(static=True, default=True)
    dtype: str = eqx.field(static=True, default="bf16")
    placement: tuple = eqx.field(static=True, default=DEFAULT_PLACEMENT)

    def __init__(self, dp=1, tp=1, pp=1, cp=1, ep=1, micro_batch=1, global_batch=None,
                 interleave=1, moe_node_limit=0, dp_bucket_bytes=25 * 2**20, *,
                 schedule="1f1b", zero=0, sequence_parallel=False, recompute="none",
                 reshard_after_forward=True, dtype="bf16", placement=DEFAULT_PLACEMENT):
        f = C.as_float
        self.dp, self.tp, self.pp, self.cp, self.ep = f(dp), f(tp), f(pp), f(cp), f(ep)
        self.micro_batch = f(micro_batch)
        self.global_batch = f(dp * micro_batch if global_batch is None else global_batch)
        self.interleave, self.moe_node_limit = f(interleave), f(moe_node_limit)
        self.dp_bucket_bytes = f(dp_bucket_bytes)
        self.schedule, self.zero = schedule, zero
        self.sequence_parallel, self.recompute = sequence_parallel, recompute
        self.reshard_after_forward, self.dtype = reshard_after_forward, dtype
        self.placement = tuple(placement)

    def __check_init__(self):
        for k in ("dp", "tp", "pp", "cp", "ep", "micro_batch", "global_batch", "interleave"):
            C.at_least_one(f"parallel.{k}" if k not in ("micro_batch", "global_batch")
                           else f"training.{k}", getattr(self, k))
        C.non_negative("parallel.moe_node_limit", self.moe_node_limit)
        C.positive("parallel.dp_bucket_bytes", self.dp_bucket_bytes)
        _one_of("parallel.schedule", self.schedule, SCHEDULES)
        _one_of("training.recompute", self.recompute, RECOMPUTE)
        _one_of("training.dtype", self.dtype, DTYPES)
        _one_of("parallel.zero", self.zero, (0, 1, 2, 3))
        if sorted(self.placement) != sorted(DIMENSIONS):
            raise ValueError(f"system.placement={','.join(self.placement)!r} must order "
                             f"each of {','.join(DIMENSIONS)} exactly once")

    @property
    def micro_batches(self) -> jax.Array:
        """m: micro-batches per step per pipeline."""
        return self.global_batch / (self.dp * self.micro_batch)

    @property
    def gpus(self) -> jax.Array:
        return self.dp * self.tp * self.pp * self.cp


def _one_of(name, value, options):
    if value not in options:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(str, options))}")


def _divides(a_name, a, b_name, b) -> None:
    av, bv = C.concrete(a), C.concrete(b)
    if av is not None and bv is not None and (bv % av) != 0:
        raise ValueError(f"{a_name}={av.item():g} must divide {b_name}={bv.item():g}")


def validate(plan: Plan, model: Transformer, gpus) -> None:
    """Structural checks of a plan against a model and a GPU count (concrete values)."""
    g = C.concrete(gpus)
    if g is not None and C.concrete(plan.gpus) is not None and g != C.concrete(plan.gpus):
        raise ValueError(
            f"system.gpus={g.item():g} must equal dp*tp*pp*cp="
            f"{plan.dp:g}*{plan.tp:g}*{plan.pp:g}*{plan.cp:g}={C.concrete(plan.gpus).item():g}")
    _divides("parallel.tp", plan.tp, "model.heads", model.heads)
    _divides("parallel.tp", plan.tp, "model.kv_heads", model.kv_heads)
    _divides("parallel.cp", plan.cp, "model.seq_len", model.seq_len)
    _divides("parallel.ep", plan.ep, "parallel.dp", plan.dp)
    if C.concrete(model.moe_layers) is not None and C.concrete(model.moe_layers) > 0:
        _divides("parallel.ep", plan.ep, "model.experts", model.experts)
    elif C.concrete(plan.ep) is not None and C.concrete(plan.ep) > 1:
        raise ValueError(f"parallel.ep={C.concrete(plan.ep).item():g} needs an MoE model "
                         "(model.moe_layers > 0)")
    _divides("dp*micro_batch", plan.dp * plan.micro_batch, "training.global_batch",
             plan.global_batch)
    layers, pp, v = (C.concrete(x) for x in (model.layers, plan.pp, plan.interleave))
    if layers is not None and pp is not None and v is not None and pp * v > layers:
        raise ValueError(f"parallel.pp={pp.item():g} x parallel.interleave={v.item():g} "
                         f"= {(pp * v).item():g} must not exceed model.layers={layers.item():g}")
    v = C.concrete(plan.interleave)
    if v is not None and v > 1 and plan.schedule != "interleaved":
        raise ValueError(f"parallel.interleave={v.item():g} needs parallel.schedule='interleaved'"
                         f" (got {plan.schedule!r})")
