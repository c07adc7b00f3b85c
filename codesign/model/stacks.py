"""The training software stack as a strategy type (`training.stack`, built on
`strategies.Strategy` and `parse`): what a framework fuses, which of its
communication runs on copy engines rather than SMs, how it runs the routed
experts' GEMMs and what a kernel launch costs its host. A stack gives the
plan's `training.host_launch_s`, `parallel.comm_sm_fraction` and
`training.grouped_gemm_streams` their defaults (a scenario's own value wins)
and owns two mechanisms the step model reads: whether fp8 GEMM inputs are
written quantised by their producers (`compute._layers_s`) and which
dimensions' hidden communication costs no SMs (`step`). A name is parsed once,
by `stack`.

What every stack shares is the chip's, not the stack's: the attention kernel's
efficiency (`system.attention_efficiency`: every Hopper stack in validate's
table runs a FlashAttention-2-class kernel, Transformer Engine's cuDNN one
included, at 35% of the peak, which the NeMo long-sequence rows fit) and the
GEMM efficiency (one per chip family, DESIGN.md's rule). Gradient accumulation
and the DP overlap windows are the schedule's and `traffic`'s for every stack.
"""

from __future__ import annotations

import abc
import itertools
from typing import ClassVar

import equinox as eqx

from .strategies import Strategy, parse

# Host seconds per kernel launch through an eager PyTorch training stack (Python,
# the dispatcher, autograd bookkeeping, Transformer Engine's module logic and
# cudaLaunchKernel): PyTorch's own overhead is ~10 us per operator (Horace He,
# "Making Deep Learning Go Brrrr From First Principles", 2022, section
# "Overhead"); one launch per kernel the step model counts (assumption)
EAGER_LAUNCH_S = 10e-6
# The share of compute lost while NCCL's communication overlaps it: DeepSeek-V3
# gives 20 of the H800's 132 SMs to communication
NCCL_SM_FRACTION = 20.0 / 132.0
# Transformer Engine's GroupedLinear issues one cuBLAS GEMM per local expert over
# its 4 compute streams (transformer_engine/common/util/multi_stream.h,
# num_compute_streams = 4)
TE_GROUPED_STREAMS = 4.0
# A fused grouped kernel (torch._grouped_mm, XLA's ragged dot, CUTLASS's grouped
# GEMM, DeepGEMM) schedules every local expert's tiles together: the top of
# `training.grouped_gemm_streams`' domain, so the local experts bound it
EVERY_EXPERT = 1e6


class Stack(Strategy):
    """A training framework: the defaults it gives the plan's launch, SM and
    grouped-GEMM knobs, and the mechanisms it owns."""

    host_launch_s: eqx.AbstractClassVar[float]  # `training.host_launch_s`'s default
    comm_sm_fraction: eqx.AbstractClassVar[float]  # `parallel.comm_sm_fraction`'s default
    grouped_gemm_streams: eqx.AbstractClassVar[float]  # its default
    # fp8: the norm and the activation before a GEMM write its input quantised
    # (only the transpose is left); False: every fp8 input is cast from the wide
    # tensor by a cast-transpose of its own
    fused_fp8_producers: eqx.AbstractClassVar[bool]
    # the dimensions whose communication hidden under compute runs on copy
    # engines (no SMs lost): `step` charges `comm_sm_fraction` on the others
    copy_engine_dimensions: eqx.AbstractClassVar[tuple[str, ...]]


class MegatronCore(Stack):
    """Megatron-Core with Transformer Engine (NeMo, Megatron-LM, Megatron-Bridge):
    eager PyTorch launches; NCCL on SMs; TE's GroupedLinear on 4 streams;
    LayerNormLinear / LayerNormMLP and the fused activation write fp8 inputs;
    userbuffers' TP overlap charged as SM communication (its pipelined
    reduce-scatter reduces on SMs: assumption for the whole overlap)."""

    name: ClassVar[str] = "megatron"
    host_launch_s: ClassVar[float] = EAGER_LAUNCH_S
    comm_sm_fraction: ClassVar[float] = NCCL_SM_FRACTION
    grouped_gemm_streams: ClassVar[float] = TE_GROUPED_STREAMS
    fused_fp8_producers: ClassVar[bool] = True
    copy_engine_dimensions: ClassVar[tuple[str, ...]] = ()


class PyTorchFsdp(Stack):
    """PyTorch FSDP / FSDP2 (torchtitan, llm-foundry's Composer): eager launches
    (torch.compile fuses element-wise kernels, not the launch cost the step
    model counts: assumption); NCCL on SMs; torch._grouped_mm for the experts;
    torchao's Float8Linear casts each fp8 input from the bf16 tensor its
    producer wrote (dynamic scaling: torchao's float8 README); async TP's
    collectives run as copy-engine transfers through symmetric memory (PyTorch's
    "Introducing Async Tensor Parallelism in PyTorch", 2024)."""

    name: ClassVar[str] = "pytorch"
    host_launch_s: ClassVar[float] = EAGER_LAUNCH_S
    comm_sm_fraction: ClassVar[float] = NCCL_SM_FRACTION
    grouped_gemm_streams: ClassVar[float] = EVERY_EXPERT
    fused_fp8_producers: ClassVar[bool] = False
    copy_engine_dimensions: ClassVar[tuple[str, ...]] = ("tp",)


class Xla(Stack):
    """JAX / XLA (MaxText): one compiled program a step, no per-kernel host
    launch; XLA's fusions write every GEMM input in the width its GEMM reads;
    the ragged dot schedules every local expert together; collectives run as
    asynchronous DMA transfers beside the compute (on TPUs the ICI's DMA
    engines; collective matmul decomposes TP's into them): no SMs lost
    (assumption)."""

    name: ClassVar[str] = "xla"
    host_launch_s: ClassVar[float] = 0.0
    comm_sm_fraction: ClassVar[float] = 0.0
    grouped_gemm_streams: ClassVar[float] = EVERY_EXPERT
    fused_fp8_producers: ClassVar[bool] = True
    copy_engine_dimensions: ClassVar[tuple[str, ...]] = ()


class DeepSpeed(Stack):
    """DeepSpeed (Megatron-DeepSpeed): eager launches; NCCL on SMs; DeepSpeed-MoE
    runs its local experts one after another; no fp8 producer fusion."""

    name: ClassVar[str] = "deepspeed"
    host_launch_s: ClassVar[float] = EAGER_LAUNCH_S
    comm_sm_fraction: ClassVar[float] = NCCL_SM_FRACTION
    grouped_gemm_streams: ClassVar[float] = 1.0
    fused_fp8_producers: ClassVar[bool] = False
    copy_engine_dimensions: ClassVar[tuple[str, ...]] = ()


STACK_CLASSES = (MegatronCore, PyTorchFsdp, Xla, DeepSpeed)
STACKS = tuple(c.name for c in STACK_CLASSES)


def stack(value, key: str = "training.stack") -> Stack:
    """The stack named `value` (or `value` itself if it is a `Stack`)."""
    return parse(key, value, Stack, STACK_CLASSES)


# ------------------------------------------------------------ CUDA-graph scope
# What CUDA graphs capture (`training.cuda_graphs`, Megatron-Core's
# --cuda-graph-impl / --cuda-graph-scope): a captured region replays as one
# launch. The regions of a layer's forward (`compute.host_launches`): attention
# (`attn`), the dense FFN (`mlp`), the MoE router (`moe_router`: its GEMM,
# softmax / top-k, the load-balancing loss) and the dispatcher's preprocessing
# (`moe_preprocess`: tokens per expert, the permute's indices); the routed
# experts (the dispatch, their GEMMs, the combine) follow the routing's shapes
# and are captured only with the whole iteration.
GRAPH_REGIONS = ("attn", "mlp", "moe_router", "moe_preprocess")
# Activations a full-iteration graph holds beyond the eager peak: the graph's
# private memory pool keeps every intermediate buffer of the captured step
# alive; Megatron-Bridge's recipe notes put the cost at up to 1.5-2x the peak
# activation memory: 1.5, the low end (assumption)
FULL_ITERATION_ACTIVATION_FACTOR = 1.5


def graph_scope_regions(value) -> str:
    """`training.cuda_graph_scope`: "attn,moe_router" (as a scenario table writes
    it) or a sequence of `GRAPH_REGIONS`, written back comma-separated in
    `GRAPH_REGIONS`' order (one spelling a scope); an unknown region is a
    one-line error."""
    regions = tuple(s.strip() for s in value.split(",")) if isinstance(value, str) \
        else tuple(value)
    for r in regions:
        if r not in GRAPH_REGIONS:
            raise ValueError(f"training.cuda_graph_scope={','.join(regions)!r}: {r!r} is not "
                             f"one of {', '.join(GRAPH_REGIONS)}")
    return ",".join(r for r in GRAPH_REGIONS if r in regions)


# every scope `partial` graphs may take: the non-empty sets of regions
GRAPH_SCOPE_CHOICES = tuple(",".join(c) for n in range(1, len(GRAPH_REGIONS) + 1)
                            for c in itertools.combinations(GRAPH_REGIONS, n))


class GraphScope(Strategy):
    """What CUDA graphs capture: `layer_launches` maps a layer's regions'
    eager launches to the launches the host still issues."""

    # the routed experts' shapes must be static (padded to a capacity factor)
    needs_static_experts: eqx.AbstractClassVar[bool]
    # the activations' memory under it, relative to eager
    activation_factor: eqx.AbstractClassVar[float]

    @abc.abstractmethod
    def layer_launches(self, regions: dict, routed, head, scope: str = ""):
        """(a dense layer's, an MoE layer's forward launches, of the latter the
        routed experts' (issued after the dispatcher's host synchronisation),
        the output head's) from each region's eager launches (`regions`, keyed
        by `GRAPH_REGIONS` and `shared`: the shared expert's), the routed
        experts' `routed` and the head's `head`; `scope`: the regions `partial`
        graphs capture (`training.cuda_graph_scope`, comma-separated)."""


class NoGraphs(GraphScope):
    """Eager: every kernel a launch."""

    name: ClassVar[str] = "none"
    needs_static_experts: ClassVar[bool] = False
    activation_factor: ClassVar[float] = 1.0

    def layer_launches(self, regions, routed, head, scope=""):
        attention = regions["attn"]
        moe = attention + (regions["moe_router"] + regions["moe_preprocess"]) + regions["shared"] \
            + routed
        return attention + regions["mlp"], moe, routed, head


class LayerGraphs(GraphScope):
    """Each layer's static parts (attention, the dense FFN, the router, the
    preprocessing, the shared expert) one graph, the routed experts eager."""

    name: ClassVar[str] = "layer"
    needs_static_experts: ClassVar[bool] = False
    activation_factor: ClassVar[float] = 1.0

    def layer_launches(self, regions, routed, head, scope=""):
        return 1.0, 1.0 + routed, routed, head


class PartialGraphs(GraphScope):
    """Transformer Engine's per-module graphs over the regions `scope`
    (the plan's `training.cuda_graph_scope`, comma-separated `GRAPH_REGIONS`; Megatron-
    Bridge's recipes: attn, moe_router, moe_preprocess): each captured region
    one launch, the others and the routed experts and the shared expert eager."""

    name: ClassVar[str] = "partial"
    needs_static_experts: ClassVar[bool] = False
    activation_factor: ClassVar[float] = 1.0

    def layer_launches(self, regions, routed, head, scope=""):
        captured = scope.split(",")
        n = {r: 1.0 if r in captured else regions[r] for r in GRAPH_REGIONS}
        moe = n["attn"] + n["moe_router"] + n["moe_preprocess"] + regions["shared"] + routed
        return n["attn"] + n["mlp"], moe, routed, head


class IterationGraphs(GraphScope):
    """The whole iteration one graph, its routed experts' shapes taken as
    static without a capacity factor (an idealisation, as before this type)."""

    name: ClassVar[str] = "iteration"
    needs_static_experts: ClassVar[bool] = False
    activation_factor: ClassVar[float] = 1.0

    def layer_launches(self, regions, routed, head, scope=""):
        return 0.0, 0.0, 0.0, 0.0


class FullIterationGraphs(GraphScope):
    """Megatron-Core's `full_iteration` scope: the whole forward and backward
    one graph; the routed experts need static shapes (padded to a capacity
    factor: `training.moe_pad_experts` and `training.moe_capacity_factor` > 0
    on an MoE model), and
    the graph's pool holds `FULL_ITERATION_ACTIVATION_FACTOR` x the activations."""

    name: ClassVar[str] = "full_iteration"
    needs_static_experts: ClassVar[bool] = True
    activation_factor: ClassVar[float] = FULL_ITERATION_ACTIVATION_FACTOR

    def layer_launches(self, regions, routed, head, scope=""):
        return 0.0, 0.0, 0.0, 0.0


GRAPH_SCOPE_CLASSES = (NoGraphs, LayerGraphs, PartialGraphs, IterationGraphs,
                       FullIterationGraphs)
GRAPH_SCOPES = tuple(c.name for c in GRAPH_SCOPE_CLASSES)


def graph_scope(value, key: str = "training.cuda_graphs") -> GraphScope:
    """The graph scope named `value` (or `value` itself if it is a `GraphScope`)."""
    return parse(key, value, GraphScope, GRAPH_SCOPE_CLASSES)
