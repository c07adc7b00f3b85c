"""The training software stack as a strategy type (`training.stack`, built on
`strategies.Strategy` and `parse`): what a framework fuses, which of its
communication runs on copy engines rather than SMs, how it runs the routed
experts' GEMMs and what a kernel launch costs its host. A stack gives the
plan's `training.host_launch_s`, `parallel.comm_sm_fraction` and
`training.grouped_gemm_streams` their defaults (a scenario's own value wins)
and owns two mechanisms the step model reads: whether fp8 GEMM inputs are
written quantised by their producers (`compute._layers_s`) and which
dimensions' hidden communication costs no SMs (`step`). A name is parsed once,
by `stack`. A GEMM module's host calls are the stack's (`module_calls`); the
CPU that runs the stack (`training.host`: `Host`, x86 or Grace) and the ranks'
NUMA binding scale its seconds per call (`host_call_s`).

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
# A PyTorch call's host seconds on a Grace CPU over an x86 host's: nn.Linear's
# forward, timed on the CPU, 37.08 us on GB200 (Grace) against 13.48 us on a
# DGX H100 (Xeon Platinum 8480C) (NVIDIA/TransformerEngine issue #2053, "High
# CPU overhead on Grace systems", 2025-08, BF16, hidden 2,048, 8,192 tokens);
# Transformer Engine's Linear on the same GB200, 99.66 us, is 2.7 such calls
GRACE_CALL_FACTOR = 37.08 / 13.48
# Transformer Engine's Linear module, forward, timed on the CPU: 99.66 us on
# GB200 against PyTorch's nn.Linear's 37.08 us (the same issue #2053): one TE
# GEMM module costs 2.69 PyTorch calls of host time (its Python module logic,
# the fp8 / recipe state, the launch)
TE_MODULE_CALLS = 99.66 / 37.08
# A PyTorch call that launches no kernel (an allocation) costs "several
# microseconds" (Megatron-Core's DeepSeek-V3 GB200 log, on Grace): 5 us read for
# "several" (assumption), in PyTorch calls of the x86 host's cost on Grace
ALLOCATION_CALLS = 5e-6 / (EAGER_LAUNCH_S * GRACE_CALL_FACTOR)
# A rank's host calls without NUMA binding over with it: each rank's process
# bound to the CPU cores and memory next to its GPU (`numactl`, Megatron's
# `bindpcie`) against the scheduler's placement. Fitted (DESIGN.md's rule: one
# constant for this mechanism, on GB200): on two of the GB200 family's 29
# predicted rows, steps 7 and 8 of Megatron-Core's DeepSeek-V3 log (bindpcie
# alone, 691.49 -> 762.12 TFLOP/s: the step time x 0.907), see `NUMA_FIT_ROWS`
NUMA_UNBOUND_FACTOR = 1.83
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
    # host calls of one GEMM module's forward (its module logic and its launch)
    module_calls: eqx.AbstractClassVar[float]
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
    module_calls: ClassVar[float] = TE_MODULE_CALLS
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
    module_calls: ClassVar[float] = 1.0
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
    module_calls: ClassVar[float] = 1.0
    comm_sm_fraction: ClassVar[float] = 0.0
    grouped_gemm_streams: ClassVar[float] = EVERY_EXPERT
    fused_fp8_producers: ClassVar[bool] = True
    copy_engine_dimensions: ClassVar[tuple[str, ...]] = ()


class DeepSpeed(Stack):
    """DeepSpeed (Megatron-DeepSpeed): eager launches; NCCL on SMs; DeepSpeed-MoE
    runs its local experts one after another; no fp8 producer fusion."""

    name: ClassVar[str] = "deepspeed"
    host_launch_s: ClassVar[float] = EAGER_LAUNCH_S
    module_calls: ClassVar[float] = 1.0
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
# launch. The regions of a layer's forward (`host.host_launches`): attention
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


# ------------------------------------------------------------------- the host
class Host(Strategy):
    """The CPU that issues a rank's kernels (`training.host`): its seconds per
    PyTorch call relative to an x86 server CPU's (`call_factor`), which
    scales the stack's `host_launch_s` (`Plan.host_launch_s`' default)."""

    call_factor: eqx.AbstractClassVar[float]


class X86(Host):
    """An x86 server CPU (the DGX H100's Xeon Platinum 8480C; the stack's
    `host_launch_s` is measured there)."""

    name: ClassVar[str] = "x86"
    call_factor: ClassVar[float] = 1.0


class Grace(Host):
    """NVIDIA's Grace CPU (GH200, GB200 and GB300 superchips): a PyTorch call
    takes `GRACE_CALL_FACTOR` as long as on the x86 host."""

    name: ClassVar[str] = "grace"
    call_factor: ClassVar[float] = GRACE_CALL_FACTOR


HOST_CLASSES = (X86, Grace)
HOSTS = tuple(c.name for c in HOST_CLASSES)
# the system presets whose GPUs sit beside a Grace CPU (the superchips)
GRACE_PRESETS = ("gb200-nvl72", "gb300-nvl72")


def host(value, key: str = "training.host") -> Host:
    """The host named `value` (or `value` itself if it is a `Host`)."""
    return parse(key, value, Host, HOST_CLASSES)


def preset_host(preset) -> str:
    """The host of the system preset named `preset` (`training.host`'s default):
    grace for the Grace superchips (`GRACE_PRESETS`), else x86."""
    return "grace" if preset in GRACE_PRESETS else "x86"


def host_call_s(stack_launch_s: float, host_type: Host, numa_binding: bool) -> float:
    """Host seconds per PyTorch call of a stack whose x86 cost is
    `stack_launch_s` on `host_type`, its ranks NUMA-bound or not."""
    return stack_launch_s * host_type.call_factor * (1.0 if numa_binding
                                                     else NUMA_UNBOUND_FACTOR)
