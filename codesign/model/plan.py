"""How a model is cut across the machine: a `Plan`.

Sizes and counts are float leaves (differentiable, exact at integers); the
discrete choices are static (ZeRO stage, sequence parallelism, placement)
or strategies (`strategies.Schedule`, `strategies.Recompute`: types that own
their formulas). The routed experts have a mesh of their own over the same
GPUs as attention's tp x cp x dp (Megatron-Core's MoE parallel folding):
expert tensor parallelism `etp` (0: attention's tp, Megatron-Core's default),
expert parallelism `ep` and expert data parallelism `expert_dp` = tp cp dp /
(etp ep), the replicas of each expert shard; ep x etp divides tp x cp x dp,
as Megatron-Core requires. The structural rules of a plan on a model and a
machine are one table (`RULES`), read by `validate` and by the optimiser.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from ..checks import float_field, static_field, strategy_field
from ..domains import MAX_GPUS, UNIT, Domain, count, interval
from . import dispatchers, sharding, stacks, stage, strategies
from .strategies import SCHEDULES as SCHEDULES
from .strategies import NoRecompute, OneFOneB, Recompute, Schedule
from .workload import Transformer

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "none": 0.0}
DTYPES = ("fp32", "fp16", "bf16", "fp8")  # recipes (training.dtype)
WIDE_DTYPES = ("fp32", "bf16", "fp16")  # widths of the parts that are never fp8
NARROW_DTYPES = (*WIDE_DTYPES, "fp8")  # widths of the other parts
DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_PLACEMENT = ("tp", "cp", "ep", "dp", "pp")
MOE_IMBALANCE = 1.1  # tokens on the busiest expert rank / the mean (assumption)
# ZeRO-3 / FSDP prefetch: gather the next layer's weights while this one computes
# (PyTorch FSDP's forward/backward prefetch of one module; DeepSpeed's prefetch
# bucket). Deeper prefetch holds more gathered layers and buys slack only for
# uneven layers, which the uniform per-layer model does not see.
FSDP_PREFETCH_LAYERS = 1.0
# CUDA graphs (Megatron-Core's --cuda-graph-impl / --cuda-graph-scope): the
# scopes of `stacks.GraphScope` (none; layer: each layer's static parts, the
# routed experts eager; partial: Transformer Engine's per-region graphs over
# `training.cuda_graph_scope`; iteration; full_iteration: Megatron-Core's, with
# static (padded) experts)
CUDA_GRAPHS = stacks.GRAPH_SCOPES


class Fp8Recipe(strategies.Strategy):
    """How the narrow (`training.dtype = "fp8"`) GEMMs are scaled and quantised
    (`training.fp8_recipe`): what each GEMM input weighs in HBM (values and
    scales), the peak the GEMM runs at, and the memory-bound passes that make
    its two quantised copies. Every GEMM input is needed twice (Transformer
    Engine's "tensor usages"): rowwise for its forward / data-gradient GEMM and
    columnwise for the weight-gradient GEMM.

    - `value_bytes`: one quantised value; `block_elements` values share one
      scale of `scale_bytes` (0: one per-tensor scale, negligible);
    - `peak`: the chip's dense peak the GEMMs run at (`"fp8"`:
      `Chip.peak_fp8_flops_per_s`, `"fp4"`: `Chip.peak_fp4_flops_per_s`);
    - `transposes_narrow`: the columnwise copy is a transpose of the rowwise
      one (a per-tensor scale survives transposition); else it is quantised
      again from the wide tensor (block scales run along the other axis);
    - `amax_reads`: extra reads of the wide tensor per quantised copy before
      quantising it (a per-tensor amax computed from the data, a kernel each).
    Which parts stay wide is the `Precision`'s (attention, the output layer,
    the gradient reduction, the MoE combine): every recipe leaves them.
    """

    value_bytes: eqx.AbstractClassVar[float]
    block_elements: eqx.AbstractClassVar[float]
    scale_bytes: eqx.AbstractClassVar[float]
    peak: eqx.AbstractClassVar[str]
    transposes_narrow: eqx.AbstractClassVar[bool]
    amax_reads: eqx.AbstractClassVar[float]
    # tensors one quantisation allocates (host calls that launch no kernel)
    allocations: eqx.AbstractClassVar[float]

    @property
    def element_bytes(self) -> float:
        """HBM bytes per element of one quantised copy: the value and its share
        of a block scale (MXFP8 1 + 1/32, NVFP4 0.5 + 1/16)."""
        return self.value_bytes + (self.scale_bytes / self.block_elements
                                   if self.block_elements else 0.0)

    def cast_bytes(self, wide: float) -> float:
        """HBM bytes per element of quantising a `wide` input into both copies
        in one pass (Transformer Engine's cast-transpose; MXFP8's quantisation
        writes four tensors: two copies and their scales), after the amax reads."""
        return wide * (1.0 + 2.0 * self.amax_reads) + 2.0 * self.element_bytes

    def producer_bytes(self, wide: float) -> float:
        """HBM bytes per element left when the producer (a norm, an activation)
        writes the rowwise copy quantised itself: the transpose of the narrow
        copy (per-tensor scales), or the columnwise copy quantised from the
        wide tensor (block scales)."""
        if self.transposes_narrow:
            return 2.0 * self.element_bytes
        return wide * (1.0 + self.amax_reads) + self.element_bytes

    def kernels(self, producer: bool = False) -> float:
        """Memory-bound kernels of one quantisation (`cast_bytes`, or
        `producer_bytes`): the cast and its amax passes."""
        return 1.0 + (1.0 if producer else 2.0) * self.amax_reads

    def host_calls(self) -> float:
        """Host calls of one quantisation of a GEMM input, in PyTorch calls: its
        kernels and the tensors it allocates (`allocations`, each
        `stacks.ALLOCATION_CALLS` of a call: it launches no kernel)."""
        return self.kernels() + self.allocations * stacks.ALLOCATION_CALLS


class Tensorwise(Fp8Recipe):
    """FP8 with one scale per tensor (Transformer Engine's DelayedScaling and
    Float8CurrentScaling; E4M3 forward, E5M2 or E4M3 backward): the default,
    as codesign priced fp8 before the recipes (the amax is the producer's or
    the history's: no pass of its own)."""

    name: ClassVar[str] = "tensorwise"
    value_bytes: ClassVar[float] = 1.0
    block_elements: ClassVar[float] = 0.0
    scale_bytes: ClassVar[float] = 4.0
    peak: ClassVar[str] = "fp8"
    transposes_narrow: ClassVar[bool] = True
    amax_reads: ClassVar[float] = 0.0
    allocations: ClassVar[float] = 2.0  # the values and their transpose (assumption)


class MXFP8(Fp8Recipe):
    """MXFP8 (OCP Microscaling v1.0; Transformer Engine's MXFP8BlockScaling,
    Blackwell): E4M3 values, one E8M0 (1-byte) scale per 32 consecutive
    values along the row or the column; the columnwise copy cannot be a
    transpose of the rowwise one, so both are quantised from the wide tensor."""

    name: ClassVar[str] = "mxfp8"
    value_bytes: ClassVar[float] = 1.0
    block_elements: ClassVar[float] = 32.0
    scale_bytes: ClassVar[float] = 1.0
    peak: ClassVar[str] = "fp8"
    transposes_narrow: ClassVar[bool] = False
    amax_reads: ClassVar[float] = 0.0
    allocations: ClassVar[float] = 4.0  # two copies and their scales (the DeepSeek-V3 GB200 log)


class NVFP4(Fp8Recipe):
    """NVFP4 (NVIDIA's NVFP4 pretraining recipe; Transformer Engine's
    NVFP4BlockScaling, Blackwell only): E2M1 values (half a byte), one E4M3
    (1-byte) scale per 16 values plus a per-tensor FP32 scale, which needs the
    tensor's amax before quantising: a read of the wide tensor per copy (the
    columnwise copy's after its random Hadamard transform, applied to the
    weight-gradient GEMM's inputs). Stochastic rounding of the gradients is
    done inside the quantisation kernel (no pass of its own). The GEMMs run at
    the chip's FP4 peak."""

    name: ClassVar[str] = "nvfp4"
    value_bytes: ClassVar[float] = 0.5
    block_elements: ClassVar[float] = 16.0
    scale_bytes: ClassVar[float] = 1.0
    peak: ClassVar[str] = "fp4"
    transposes_narrow: ClassVar[bool] = False
    amax_reads: ClassVar[float] = 1.0
    allocations: ClassVar[float] = 4.0  # two copies and their scales, as MXFP8 (assumption)


FP8_RECIPES = (Tensorwise, MXFP8, NVFP4)


def fp8_recipe(value, key: str = "training.fp8_recipe") -> Fp8Recipe:
    """The fp8 recipe named `value` (or `value` itself if it is an `Fp8Recipe`)."""
    return strategies.parse(key, value, Fp8Recipe, FP8_RECIPES)


class Precision(eqx.Module):
    """A precision recipe: the width of each kind of tensor, compute and wire.

    `gemm` is the linear layers' GEMMs (QKV and output projections, FFN and
    experts); `attention` the attention kernel and the output layer (logits);
    `activations` what is stored for backward and sent by TP/SP, CP and PP;
    `ep_dispatch` / `ep_combine` the MoE all-to-alls, each in both directions
    of backward too (DeepSeek-V3: the activation gradient before the experts'
    down-projections is dispatched in FP8, both combines stay BF16);
    `grad_reduce` the gradient accumulation
    buffer and the DP reduction; `params` the weights in HBM and in ZeRO
    gathers; `master` the optimizer's master weights ("none": the weights are
    the master copy); `optimizer` each of Adam's two moments.
    """

    gemm: str = static_field("training.gemm_dtype", str, choices=NARROW_DTYPES)
    attention: str = static_field("training.attention_dtype", str, choices=WIDE_DTYPES)
    activations: str = static_field("training.activations_dtype", str, choices=NARROW_DTYPES)
    ep_dispatch: str = static_field("training.ep_dispatch_dtype", str, choices=NARROW_DTYPES)
    ep_combine: str = static_field("training.ep_combine_dtype", str, choices=NARROW_DTYPES)
    grad_reduce: str = static_field("training.grad_reduce_dtype", str, choices=WIDE_DTYPES)
    params: str = static_field("training.params_dtype", str, choices=WIDE_DTYPES)
    master: str = static_field("training.master_dtype", str, choices=("fp32", "bf16", "none"))
    optimizer: str = static_field("training.optimizer_dtype", str, choices=WIDE_DTYPES)

    def bytes(self, part: str) -> float:
        """Bytes per element of `part` (a field name)."""
        return DTYPE_BYTES[getattr(self, part)]

    @property
    def optimizer_bytes_per_param(self) -> float:
        """Master weights and Adam's two moments (ZeRO paper's K = 12 in fp32)."""
        return self.bytes("master") + 2.0 * self.bytes("optimizer")

    def quantise_bytes(self, recipe: Fp8Recipe, producer: bool = False) -> float:
        """HBM bytes per element of quantising one GEMM input to the GEMM width
        under `recipe` (`Fp8Recipe.cast_bytes`, or `producer_bytes` where the
        producer writes the rowwise copy); 0 when the GEMMs run in the
        activations' width."""
        wide, narrow = self.bytes("activations"), DTYPE_BYTES[self.gemm]
        if narrow >= wide:
            return 0.0
        return recipe.producer_bytes(wide) if producer else recipe.cast_bytes(wide)

    def quantisation(self, recipe: Fp8Recipe, producer: bool = False) -> tuple:
        """(HBM bytes per element, kernels) of quantising one GEMM input
        (`quantise_bytes`); (0, 0) when the GEMMs run in the activations' width."""
        moved = self.quantise_bytes(recipe, producer)
        return moved, (recipe.kernels(producer) if moved > 0 else 0.0)

    @property
    def gemm_cast_bytes(self) -> float:
        """HBM bytes per element of a GEMM input quantised to a GEMM width
        narrower than the activations' (per-tensor scaling): Transformer
        Engine's cast-transpose reads it once and writes the narrow copy and its
        transpose (for the weight-gradient GEMM), e.g. 2 + 1 + 1 = 4 B for fp8
        GEMMs on bf16 activations; 0 when the GEMMs run in the activations' width."""
        return self.quantise_bytes(Tensorwise())

    @property
    def gemm_transpose_bytes(self) -> float:
        """HBM bytes per element of a narrow GEMM input whose producer writes it
        quantised already (Transformer Engine's norm and activation kernels with
        an fp8 output): only its transpose is left, read and written narrow,
        e.g. 1 + 1 = 2 B for fp8; 0 when the GEMMs run in the activations' width."""
        return self.quantise_bytes(Tensorwise(), producer=True)

    @property
    def optimizer_step_bytes_per_param(self) -> float:
        """HBM traffic of one Adam step per parameter: read the gradient, the
        master weight and both moments, write the master, the moments and the
        working weights (30 B in the bf16 recipe)."""
        return (self.bytes("grad_reduce") + 2.0 * self.bytes("master")
                + 4.0 * self.bytes("optimizer") + self.bytes("params"))


PRECISION_PARTS = tuple(f.name for f in dataclasses.fields(Precision))

# Recipes (`training.dtype`); every part can be overridden by `training.<part>_dtype`.
# - fp32: everything in 32 bits (TF32 tensor cores where the chip has them).
# - fp16: Megatron-LM's mixed precision as in 2019-2021: fp16 GEMMs and wire,
#   fp32 master weights and Adam moments, gradients reduced in fp16 (Megatron's
#   default for fp16).
# - bf16: as fp16, but gradients accumulated and reduced in fp32 (Megatron-LM's
#   default for bf16; Llama 3 reduces in fp32).
# - fp8: FP8 for the linear layers' GEMMs and the MoE dispatch only;
#   attention, the output layer, the combine, gradient reduction in bf16/fp32
#   (Transformer Engine's recipe; DeepSeek-V3 section 3.3).
def _mixed(width: str, grad_reduce: str) -> dict:
    """16-bit (or 32-bit) `width` everywhere, fp32 master weights and Adam moments."""
    return dict(gemm=width, attention=width, activations=width, ep_dispatch=width,
                ep_combine=width, grad_reduce=grad_reduce, params=width, master="fp32",
                optimizer="fp32")


RECIPES = {
    "fp32": {**_mixed("fp32", "fp32"), "master": "none"},
    "fp16": _mixed("fp16", "fp16"),
    "bf16": _mixed("bf16", "fp32"),
    "fp8": {**_mixed("bf16", "fp32"), "gemm": "fp8", "ep_dispatch": "fp8"},
}


# Megatron-Core's gradient bucket when none is set (DistributedDataParallelConfig.
# bucket_size): max(40M, 1M x dp) parameters, dp counting the context-parallel
# ranks (larger dp, larger buckets, so the collectives stay bandwidth-bound)
MCORE_BUCKET_PARAMS = 40e6
MCORE_BUCKET_PARAMS_PER_DP = 1e6


def megatron_bucket_bytes(dtype: str, dp_cp: float | None = None,
                          params: float | None = None) -> float:
    """`parallel.dp_bucket_bytes` of a Megatron-Core run in recipe `dtype`: a
    bucket of `params` parameters (None: Megatron-Core's default for `dp_cp`
    data x context-parallel ranks; None: its 40M floor) in the recipe's
    gradient-reduction width."""
    if params is None:
        params = max(MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_DP * (dp_cp or 0.0))
    return DTYPE_BYTES[RECIPES[dtype]["grad_reduce"]] * params


def recipe(dtype: str, **overrides) -> Precision:
    """The recipe `dtype` (see RECIPES) with parts overridden by name."""
    checks.one_of("training.dtype", dtype, DTYPES)
    for k in overrides:
        if k not in PRECISION_PARTS:
            raise ValueError(f"training.{k}_dtype is not a precision part; parts are "
                             f"{', '.join(PRECISION_PARTS)}")
    return Precision(**{**RECIPES[dtype], **overrides})


def _placement(order) -> tuple:
    """`system.placement`: "tp,cp,ep,dp,pp" (as a scenario table writes it) or a sequence."""
    return tuple(s.strip() for s in order.split(",")) if isinstance(order, str) else tuple(order)


class Plan(eqx.Module):
    dp: jax.Array = float_field("parallel.dp", count(MAX_GPUS), default=1.0)
    tp: jax.Array = float_field("parallel.tp", count(MAX_GPUS), default=1.0)
    pp: jax.Array = float_field("parallel.pp", count(MAX_GPUS), default=1.0)
    cp: jax.Array = float_field("parallel.cp", count(MAX_GPUS), default=1.0)
    ep: jax.Array = float_field("parallel.ep", count(MAX_GPUS), default=1.0)
    # sequences per micro-batch per data-parallel rank
    micro_batch: jax.Array = float_field("training.micro_batch", count(1e9), unit="sequences",
                                         default=1.0)
    # sequences per step; default dp micro_batch
    global_batch: jax.Array = float_field("training.global_batch", count(1e9),
                                          unit="sequences", default=None)
    # virtual stages per GPU (v)
    interleave: jax.Array = float_field("parallel.interleave", count(1e4), default=1.0)
    # M: nodes a token may reach; 0 = all
    moe_node_limit: jax.Array = float_field("parallel.moe_node_limit", count(MAX_GPUS, lo=0.0),
                                            unit="nodes", default=0.0)
    # gradient bucket size of the data-parallel reduction
    dp_bucket_bytes: jax.Array = float_field("parallel.dp_bucket_bytes", interval(1.0, 1e15),
                                             default=25 * 2.0**20)
    # tokens on the busiest expert rank / the mean (>= 1)
    moe_imbalance: jax.Array = float_field("training.moe_imbalance", interval(1.0, 1e3),
                                           default=MOE_IMBALANCE)
    # share of compute lost while communication overlaps it; below 1: some SMs
    # compute; default the stack's (`stacks.Stack.comm_sm_fraction`)
    comm_sm_fraction: jax.Array = float_field("parallel.comm_sm_fraction", Domain(0.0, 0.99),
                                              default=None)
    # HSDP: ZeRO shards inside groups of this many dp x cp ranks, replicated
    # across them; 0 = shard over the whole dp x cp group
    zero_shard_size: jax.Array = float_field("parallel.zero_shard_size",
                                             count(MAX_GPUS, lo=0.0), unit="ranks", default=0.0)
    # ZeRO-3 layers gathered ahead of the one computing
    fsdp_prefetch_layers: jax.Array = float_field("parallel.fsdp_prefetch_layers",
                                                  count(1e4, lo=0.0), unit="layers",
                                                  default=FSDP_PREFETCH_LAYERS)
    # fraction of TP traffic hidden under GEMMs (TE userbuffers, async TP)
    tp_overlap: jax.Array = float_field("parallel.tp_overlap", UNIT, default=0.0)
    # the pipeline schedule (`strategies.Schedule`, or its name)
    schedule: Schedule = strategy_field("parallel.schedule", strategies.schedule,
                                        strategies.SCHEDULE_CLASSES, default=OneFOneB(),
                                        kw_only=True)
    # what data parallelism shards (`sharding.ZeroStage`, or its number 0-3)
    zero: sharding.ZeroStage = strategy_field("parallel.zero", sharding.zero_stage,
                                              sharding.ZERO_CLASSES, default=sharding.NoZero(),
                                              kw_only=True)
    sequence_parallel: bool = static_field("parallel.sequence_parallel", bool, default=False,
                                           kw_only=True)
    # what backward recomputes (`strategies.Recompute`, or its name)
    recompute: Recompute = strategy_field("training.recompute", strategies.recompute,
                                          strategies.RECOMPUTE_CLASSES, default=NoRecompute(),
                                          kw_only=True)
    # the modules selective recomputation recomputes (Megatron-Core's
    # --recompute-modules: `strategies.RECOMPUTE_MODULES`, comma-separated); ""
    # the attention core (`strategies.SelectiveRecompute`)
    recompute_modules: str = static_field("training.recompute_modules", str, default="",
                                          converter=strategies.recompute_module_names,
                                          kw_only=True)
    reshard_after_forward: bool = static_field("parallel.reshard_after_forward", bool,
                                               default=True, kw_only=True)
    # the MoE dispatch sends one copy of a token per destination node and forwards
    # it inside (DeepEP); node-limited routing (moe_node_limit > 0) always does
    moe_dedup: bool = static_field("parallel.moe_dedup", bool, default=False, kw_only=True)
    # Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): a
    # micro-batch's MoE all-to-alls overlap an adjacent one's compute, under the
    # interleaved schedule or 1f1b without pipeline stages (dualpipe always does)
    ep_overlap: bool = static_field("parallel.ep_overlap", bool, default=False, kw_only=True)
    # Megatron-Core's --delay-wgrad-compute (with ep_overlap): the MoE block's
    # weight-gradient GEMMs run after the backward's dispatch is issued, so
    # that exchange hides under them (`overlap.Paired`)
    delay_wgrad: bool = static_field("training.delay_wgrad", bool, default=False, kw_only=True)
    # the experts' tensor-parallel size (--expert-tensor-parallel-size); 0 = tp
    etp: jax.Array = float_field("parallel.etp", count(MAX_GPUS, lo=0.0), default=0.0,
                                 kw_only=True)
    # host seconds per PyTorch call (a kernel launch, or a call that launches
    # none) of the training stack; default the stack's on the plan's host
    # (`training.host`, `training.numa_binding`: `stacks.host_call_s`)
    host_launch_s: jax.Array = float_field("training.host_launch_s", interval(0.0, 1.0),
                                           default=None, kw_only=True)
    # the routed experts' GEMMs in flight at once; default the stack's
    grouped_gemm_streams: jax.Array = float_field("training.grouped_gemm_streams", count(1e6),
                                                  default=None, kw_only=True)
    # layers per stage whose stored activations go to host memory in forward and
    # come back in backward (Megatron-Core's --cpu-offloading-num-layers)
    offload_layers: jax.Array = float_field("training.offload_layers", count(1e4, lo=0.0),
                                            unit="layers", default=0.0, kw_only=True)
    # what CUDA graphs capture (`stacks.GraphScope`, or its name; see CUDA_GRAPHS)
    graphs: stacks.GraphScope = strategy_field("training.cuda_graphs", stacks.graph_scope,
                                               stacks.GRAPH_SCOPE_CLASSES,
                                               default=stacks.NoGraphs(), kw_only=True)
    # the regions `partial` graphs capture (`stacks.GRAPH_REGIONS`)
    cuda_graph_scope: str = static_field("training.cuda_graph_scope", str,
                                         choices=stacks.GRAPH_SCOPE_CHOICES,
                                         default="attn,moe_router,moe_preprocess",
                                         converter=stacks.graph_scope_regions, kw_only=True)
    # the MoE token dispatcher (`dispatchers.Dispatcher`, or its name)
    moe_dispatcher: dispatchers.Dispatcher = strategy_field(
        "parallel.moe_dispatcher", dispatchers.dispatcher, dispatchers.DISPATCHER_CLASSES,
        default=dispatchers.AllToAll(), kw_only=True)
    # SMs the dispatcher's kernels hold (DeepEP, HybridEP); default the dispatcher's
    moe_dispatcher_sms: jax.Array = float_field("parallel.moe_dispatcher_sms",
                                                Domain(0.0, 1e4), unit="SMs", default=None,
                                                kw_only=True)
    # the host waits for the GPU at the dispatcher's device-to-host
    # synchronisations (`dispatchers.Dispatcher.host_syncs`): the launches after
    # one are exposed (`host.sync_penalty_s`); false: the host runs ahead
    host_syncs: bool = static_field("training.host_syncs", bool, default=False, kw_only=True)
    # tokens an expert takes over the mean (Megatron-Core's
    # --moe-expert-capacity-factor); read with moe_pad_experts
    moe_capacity_factor: jax.Array = float_field("training.moe_capacity_factor",
                                                 interval(0.0, 1e3), default=0.0,
                                                 kw_only=True)
    # the router's kernels fused (Megatron-Core's --moe-router-fusion): fewer
    # host calls (`host.ROUTER_FUSED_CALLS`)
    moe_router_fusion: bool = static_field("training.moe_router_fusion", bool, default=False,
                                           kw_only=True)
    # the permute and unpermute each one fused kernel (Megatron-Core's
    # --moe-permute-fusion); false: Megatron-Core's unfused index operations
    # (`host.PERMUTE_UNFUSED_CALLS`)
    moe_permute_fusion: bool = static_field("training.moe_permute_fusion", bool, default=False,
                                            kw_only=True)
    # the CPU that issues the kernels (`stacks.Host`, or its name); a scenario's
    # default is its system preset's (`stacks.preset_host`)
    host: stacks.Host = strategy_field("training.host", stacks.host, stacks.HOST_CLASSES,
                                       default=stacks.X86(), kw_only=True)
    # each rank bound to the CPU cores and memory beside its GPU (numactl,
    # Megatron's bindpcie), as the performance recipes launch; false: a host
    # call takes `stacks.NUMA_UNBOUND_FACTOR` as long
    numa_binding: bool = static_field("training.numa_binding", bool, default=True,
                                      kw_only=True)
    # every expert's input padded to its capacity (Megatron-Core's
    # --moe-pad-expert-input-to-capacity): static expert shapes, each expert's
    # GEMMs on moe_capacity_factor x the mean tokens; false: dropless, the
    # busiest rank moe_imbalance x the mean
    moe_pad_experts: bool = static_field("training.moe_pad_experts", bool, default=False,
                                         kw_only=True)
    # the training framework (`stacks.Stack`, or its name): the defaults of the
    # three knobs above and the mechanisms it owns
    stack: stacks.Stack = strategy_field("training.stack", stacks.stack, stacks.STACK_CLASSES,
                                         default=stacks.MegatronCore(), kw_only=True)
    # Megatron-Core's --pipeline-model-parallel-layout ("Et*4|(t*4|)*14tmL"):
    # the layers of each (virtual) stage; "" = the even split (`stage`)
    pipeline_layout: str = static_field("parallel.pipeline_layout", str, default="",
                                        converter=stage.layout_text, kw_only=True)
    # the recipe's name
    dtype: str = static_field("training.dtype", str, choices=DTYPES, default="bf16",
                              kw_only=True)
    placement: tuple = static_field("system.placement", str, default=DEFAULT_PLACEMENT,
                                    kw_only=True, converter=_placement)
    # how fp8 GEMMs are scaled and quantised (`Fp8Recipe`, or its name); read
    # only where the GEMMs run in fp8 (`training.dtype = "fp8"`)
    fp8_recipe: Fp8Recipe = strategy_field("training.fp8_recipe", fp8_recipe, FP8_RECIPES,
                                           default=Tensorwise(), kw_only=True)
    # the per-part widths (training.<part>_dtype); default `recipe(dtype)`
    precision: Precision = eqx.field(static=True, default=None, kw_only=True)

    def __post_init__(self):
        if self.global_batch is None:
            self.global_batch = self.dp * self.micro_batch
        for knob in ("comm_sm_fraction", "grouped_gemm_streams"):
            if getattr(self, knob) is None:  # the stack's, as a float leaf
                setattr(self, knob, jnp.asarray(getattr(stacks.stack(self.stack), knob), float))
        if self.host_launch_s is None:  # the stack's on the plan's host, as a float leaf
            self.host_launch_s = jnp.asarray(stacks.host_call_s(
                stacks.stack(self.stack).host_launch_s, stacks.host(self.host),
                self.numa_binding), float)
        if self.moe_dispatcher_sms is None:  # the dispatcher's, as a float leaf
            self.moe_dispatcher_sms = jnp.asarray(dispatchers.dispatcher(self.moe_dispatcher).sms,
                                                  float)
        if self.precision is None:
            self.precision = recipe(self.dtype)
        # the modules are the selective strategy's (one list, two spellings); the
        # fields' converters run after this: parse both here
        recompute = strategies.recompute(self.recompute)
        names = strategies.recompute_module_names(self.recompute_modules)
        if isinstance(recompute, strategies.SelectiveRecompute):
            if names and recompute.names != names:
                self.recompute = strategies.SelectiveRecompute(names)
            elif not names:
                self.recompute_modules = recompute.names

    def __check_init__(self):
        if sorted(self.placement) != sorted(DIMENSIONS):
            raise ValueError(f"system.placement={','.join(self.placement)!r} must order "
                             f"each of {','.join(DIMENSIONS)} exactly once")

    @property
    def cuda_graphs(self) -> str:
        """The name of the graph scope (`graphs`), as a scenario writes it."""
        return self.graphs.name

    @property
    def micro_batches(self) -> jax.Array:
        """m: micro-batches per step per pipeline."""
        return self.global_batch / (self.dp * self.micro_batch)

    @property
    def gpus(self) -> jax.Array:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> jax.Array:
        """The routed experts' tensor-parallel size (`expert_tp_size`)."""
        return expert_tp_size(self.etp, self.tp)

    @property
    def expert_dp(self) -> jax.Array:
        """Replicas of each expert shard: tp cp dp / (expert_tp ep)."""
        return self.tp * self.cp * self.dp / (self.expert_tp * self.ep)


def data_parallel(gpus, tp, pp, cp):
    """dp = gpus / (tp pp cp): the one place the data-parallel width follows
    from a GPU count (scenario loading, `scenario.set_knobs`, the optimiser)."""
    return gpus / (tp * pp * cp)


def check_data_parallel(gpus, tp, pp, cp) -> float:
    """The whole dp >= 1 that `gpus` leaves for tp pp cp (concrete values), else a
    one-line ValueError (scenario loading, a sweep's plan axes)."""
    dp = float(data_parallel(gpus, tp, pp, cp))
    if dp != int(dp) or dp < 1:
        raise ValueError(f"system.gpus={float(gpus):g} is not a multiple of "
                         f"tp*pp*cp={float(tp * pp * cp):g}; set parallel.dp or system.gpus")
    return dp


# ------------------------------------------------------------------- rules
# The structural rules of a plan on a model and a machine, in one table read by
# `validate` (concrete values, the first broken rule raises), the optimiser's
# `structurally_feasible` (all rules, vmappable) and its admissible values (a
# value of a varied knob is admissible iff every rule that reads it and no
# other varied knob holds). A rule's predicate takes (model, plan, system)
# and is jnp throughout; divisibility holds to 1e-9 relative.
DP_FROM = ("system.gpus", "parallel.tp", "parallel.pp", "parallel.cp")  # dp = gpus / (tp pp cp)


class Rule(NamedTuple):
    """One structural rule: what it reads (scenario keys), when it holds, and
    what `validate` says when it does not (None: `validate` skips the rule,
    which only the optimiser needs)."""

    name: str
    reads: tuple  # the scenario keys the predicate reads
    holds: Callable  # (model, plan, system) -> bool array
    message: Callable | None  # (model, plan, system) -> str, on concrete values


def integral(x) -> jax.Array:
    """True where x is a whole number (to 1e-9 relative): the rules' integrality."""
    xp = _xp(x)
    return xp.abs(x - xp.round(x)) <= 1e-9 * xp.maximum(1.0, xp.abs(x))


def _xp(x):
    """jax.numpy for a JAX array or tracer, NumPy for the NumPy values `validate` passes."""
    return jnp if isinstance(x, jax.Array) else np


def expert_tp_size(etp, tp):
    """The routed experts' tensor-parallel size: `etp`, or attention's `tp` where
    `etp` is 0 (Megatron-Core's default; JAX or NumPy values, as `_xp`)."""
    return _xp(etp).where(etp > 0, etp, tp)


def _divides(a, b) -> jax.Array:
    return integral(b / a)


def _g(x) -> str:
    return f"{float(np.asarray(x)):g}"


def _value(key: str, m, p, s):
    """The value of scenario key `key` ("section.field") on (model, plan, system)."""
    section, field = key.split(".", 1)
    return getattr({"model": m, "parallel": p, "training": p, "system": s}[section], field)


def _divides_rule(a: str, b: str, validated: bool = True) -> Rule:
    """Scenario key `a` divides scenario key `b`."""
    name = f"{a.split('.', 1)[1]} | {b.split('.', 1)[1]}"
    message = (lambda m, p, s: f"{a}={_g(_value(a, m, p, s))} must divide "
               f"{b}={_g(_value(b, m, p, s))}") if validated else None
    return Rule(name, (a, b), lambda m, p, s: _divides(_value(a, m, p, s), _value(b, m, p, s)),
                message)


def _layout_fits(m, p):
    """True without a layout or where `stage.check_layout` finds it fits (concrete
    counts; traced ones: the layout's stage count against pp x interleave)."""
    xp = _xp(p.pp)
    if not p.pipeline_layout:
        return xp.asarray(True)
    values = [checks.concrete(x) for x in (m.layers, m.mtp_layers, p.pp, p.interleave)]
    if all(v is not None and np.ndim(v) == 0 for v in values):
        return xp.asarray(stage.check_layout(p.pipeline_layout, *values) is None)
    lay = stage.parse_layout(p.pipeline_layout)
    return ((xp.abs(p.pp * p.interleave - len(lay.stages)) < 1e-9)
            & (xp.abs(m.layers - lay.count("t")) < 1e-9)
            & (xp.abs(m.mtp_layers - lay.count("m")) < 1e-9))


def _gpus_message(m, p, s) -> str:
    return (f"system.gpus={_g(s.gpus)} must equal dp*tp*pp*cp={_g(p.dp)}*{_g(p.tp)}*"
            f"{_g(p.pp)}*{_g(p.cp)}={_g(p.gpus)}")


RULES = (
    Rule("gpus = dp tp pp cp", ("system.gpus", "parallel.dp", *DP_FROM[1:]),
         lambda m, p, s: s.gpus == p.gpus, _gpus_message),
    _divides_rule("parallel.tp", "model.heads"),
    _divides_rule("parallel.tp", "model.kv_heads"),
    _divides_rule("parallel.cp", "model.seq_len"),
    Rule("ep etp | tp cp dp", ("parallel.ep", "parallel.etp", "parallel.dp", "parallel.tp",
                               "parallel.cp"),
         lambda m, p, s: _divides(p.ep * expert_tp_size(p.etp, p.tp), p.tp * p.cp * p.dp),
         lambda m, p, s: f"parallel.ep={_g(p.ep)} x parallel.etp="
         f"{_g(expert_tp_size(p.etp, p.tp))} must divide tp*cp*dp="
         f"{_g(p.tp * p.cp * p.dp)} (the experts' mesh folds over attention's)"),
    Rule("zero_shard_size | dp cp", ("parallel.zero_shard_size", "parallel.dp", "parallel.cp"),
         lambda m, p, s: (p.zero_shard_size <= 0) | _divides(p.zero_shard_size, p.dp * p.cp),
         lambda m, p, s: f"parallel.zero_shard_size={_g(p.zero_shard_size)} must divide "
         f"dp*cp={_g(p.dp * p.cp)}"),
    Rule("ep | experts", ("parallel.ep", "model.experts", "model.moe_layers"),
         lambda m, p, s: (m.moe_layers <= 0)
         | _divides(p.ep, _xp(m.experts).maximum(m.experts, 1.0)),
         lambda m, p, s: f"parallel.ep={_g(p.ep)} must divide model.experts={_g(m.experts)}"),
    Rule("ep = 1 without experts", ("parallel.ep", "model.moe_layers"),
         lambda m, p, s: (m.moe_layers > 0) | (p.ep == 1.0),
         lambda m, p, s: f"parallel.ep={_g(p.ep)} needs an MoE model (model.moe_layers > 0)"),
    Rule("dp micro_batch | global_batch",
         ("parallel.dp", "training.micro_batch", "training.global_batch"),
         lambda m, p, s: _divides(p.dp * p.micro_batch, p.global_batch),
         lambda m, p, s: f"dp*micro_batch={_g(p.dp * p.micro_batch)} must divide "
         f"training.global_batch={_g(p.global_batch)}"),
    Rule("pp interleave <= layers", ("parallel.pp", "parallel.interleave", "model.layers"),
         lambda m, p, s: p.pp * p.interleave <= m.layers + 1e-9,
         lambda m, p, s: f"parallel.pp={_g(p.pp)} x parallel.interleave={_g(p.interleave)} = "
         f"{_g(p.pp * p.interleave)} must not exceed model.layers={_g(m.layers)}"),
    Rule("interleave needs the interleaved schedule", ("parallel.interleave",),
         lambda m, p, s: p.schedule.interleaves | (p.interleave == 1.0),
         lambda m, p, s: f"parallel.interleave={_g(p.interleave)} needs "
         f"parallel.schedule='interleaved' (got {p.schedule.name!r})"),
    # Megatron-Core's combined 1F1B pairs micro-batches: with pipeline stages
    # only on the interleaved schedule (virtual stages)
    Rule("ep_overlap needs a schedule that pairs micro-batches",
         ("parallel.ep_overlap", "parallel.schedule", "parallel.pp"),
         lambda m, p, s: (not p.ep_overlap) | p.schedule.overlaps_all_to_all
         | (p.schedule.combines_all_to_all & (p.schedule.interleaves | (p.pp == 1.0))),
         lambda m, p, s: "parallel.ep_overlap=true needs parallel.schedule='interleaved' "
         f"(or '1f1b' with parallel.pp=1; 'dualpipe' always overlaps), got "
         f"{p.schedule.name!r} with parallel.pp={_g(p.pp)}"),
    # Megatron-Core reads --recompute-modules under selective granularity only;
    # mla_up_proj needs MLA (TransformerConfig refuses it otherwise)
    Rule("recompute_modules need selective recomputation",
         ("training.recompute_modules", "training.recompute"),
         lambda m, p, s: _xp(p.pp).asarray(
             not p.recompute_modules or isinstance(p.recompute, strategies.SelectiveRecompute)),
         lambda m, p, s: f"training.recompute_modules={p.recompute_modules!r} needs "
         f"training.recompute='selective' (got {p.recompute.name!r})"),
    Rule("mla_up_proj needs MLA", ("training.recompute_modules", "model.attention"),
         lambda m, p, s: _xp(p.pp).asarray(
             "mla_up_proj" not in p.recompute_modules.split(",")
             or m.attention.recomputes_projections),
         lambda m, p, s: f"training.recompute_modules={p.recompute_modules!r}: mla_up_proj "
         f"needs model.attention='mla' (got {m.attention.name!r})"),
    # Megatron-Core asserts overlap_moe_expert_parallel_comm for delay_wgrad_compute
    Rule("delay_wgrad needs ep_overlap", ("training.delay_wgrad", "parallel.ep_overlap"),
         lambda m, p, s: _xp(p.pp).asarray(not p.delay_wgrad or p.ep_overlap),
         lambda m, p, s: "training.delay_wgrad=true needs parallel.ep_overlap=true "
         "(Megatron-Core delays the weight gradients for its combined 1F1B only)"),
    # a pipeline layout places every layer once on pp x interleave stages
    Rule("pipeline_layout fits the model and plan",
         ("parallel.pipeline_layout", "parallel.pp", "parallel.interleave", "model.layers",
          "model.mtp_layers"),
         lambda m, p, s: _layout_fits(m, p),
         lambda m, p, s: stage.check_layout(p.pipeline_layout, m.layers, m.mtp_layers, p.pp,
                                            p.interleave)),
    # Megatron-Core captures the whole iteration only with static expert shapes
    Rule("full_iteration graphs need static experts",
         ("training.cuda_graphs", "training.moe_pad_experts", "training.moe_capacity_factor",
          "model.moe_layers"),
         lambda m, p, s: (not p.graphs.needs_static_experts) | (m.moe_layers <= 0)
         | (p.moe_pad_experts & (p.moe_capacity_factor > 0)),
         lambda m, p, s: f"training.cuda_graphs={p.graphs.name!r} needs static expert shapes "
         "on an MoE model: set training.moe_pad_experts=true and "
         f"training.moe_capacity_factor > 0 (got {str(p.moe_pad_experts).lower()}, "
         f"{_g(p.moe_capacity_factor)})"),
    # The optimiser's own rows (no message: validate skips them; scenario
    # loading checks dp itself, and validate is given no scale-up domain).
    Rule("integral dp >= 1", ("parallel.dp",),
         lambda m, p, s: integral(p.dp) & (p.dp >= 1.0 - 1e-9), None),
    _divides_rule("training.micro_batch", "training.global_batch", False),
    *(_divides_rule(k, "system.gpus", False) for k in DP_FROM[1:]),
    _divides_rule("system.scale_up_domain", "system.gpus", False),  # whole domains
    _divides_rule("system.gpus_per_node", "system.scale_up_domain", False),  # of whole nodes
    _divides_rule("system.gpus_per_node", "system.gpus", False),  # whole nodes
)


class _GpuCount(NamedTuple):
    """The part of a system `validate` is given: its GPU count."""

    gpus: jax.Array


def validate(plan: Plan, model: Transformer, gpus) -> None:
    """Structural checks of a plan against a model and a GPU count (concrete
    values; a traced rule is skipped): the first rule of `RULES` with a
    message that does not hold raises a one-line ValueError."""
    system = _GpuCount(gpus)
    leaves = jax.tree.leaves((model, plan, system))
    if not any(isinstance(x, jax.core.Tracer) for x in leaves):  # in NumPy: no dispatch
        model, plan, system = jax.tree.map(np.asarray, (model, plan, system))
    with jax.ensure_compile_time_eval(), np.errstate(divide="ignore", invalid="ignore"):
        for rule in RULES:
            if rule.message is None:
                continue
            ok = checks.concrete(rule.holds(model, plan, system))
            if ok is not None and not bool(ok):
                raise ValueError(rule.message(model, plan, system))
