"""The host as a lane beside the GPU: the PyTorch calls (a kernel launch, or a call
that launches none, such as an allocation) one training step issues, counted from
the software's configuration, and what a device-to-host synchronisation costs.

`layer_launches` counts a layer's calls per graph region (attention, the dense
MLP, the MoE router and preprocessing, the shared and the routed experts, the
output head) through the plan's CUDA-graph scope (`stacks.GraphScope`: a
captured region launches as one); `host_launches` sums them over a micro-batch
of the stage and `rerun_launches` adds what selective recomputation runs again;
`sync_penalty_s` is the closed form of a layer with a synchronisation. The
seconds per call are the plan's (`training.host_launch_s`: the stack's, by host
and NUMA binding, `stacks`); `compute.timing` sets the lane beside the GPU's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import stacks
from . import stage as stage_lib
from .plan import Plan
from .relax import where
from .workload import Transformer

KERNELS_PER_LAYER = 6.0  # memory-bound kernels of one layer's forward: 2 norms, 2
# residual adds, the activation, rotary/bias (assumption; GEMMs and the attention
# kernel pay their own overhead in gemm_time_s / attention_time_s)
# Host calls of one MoE layer's routing beside its GEMMs, forward: Megatron-
# Core's router (its GEMM apart) and the dispatcher's preprocessing, 72
# kernels in DeepSeek-V3's baseline, 31 with router fusion
# (--moe-router-fusion), 17 with DeepEP's fused preprocessing on top
# (NVIDIA/Megatron-LM@eb0783b6, the DeepSeek-V3 GB200 optimisation log; the
# same counts carried to other routers: assumption). Split into the router's
# (`moe_router` graph region: softmax / sigmoid, top-k, the routing map, the
# load-balancing loss) and the preprocessing's (`moe_preprocess`: tokens per
# expert, the permute's indices): the fused preprocessing removed 31 - 17 = 14,
# the preprocessing's (assumption: the log gives the totals only), so router
# fusion cut the router's 58 to 17
ROUTER_CALLS = 58.0
ROUTER_FUSED_CALLS = 17.0
PREPROCESS_CALLS = 14.0
# Host calls of an unfused permute or unpermute (Megatron-Core's
# moe_utils.permute / unpermute without --moe-permute-fusion: the routing map's
# transpose, the indices' arange and masked select, the index select; the
# unpermute's zeros, probability scaling and scatter-add: ~5 each, counted from
# megatron/core/transformer/moe/moe_utils.py, assumption) against 1 fused
PERMUTE_UNFUSED_CALLS = 5.0
# Host calls per grouped GEMM beside its experts' launches and quantisations:
# the split of the grouped input into the experts' views and the output's
# allocation, one call each for all the experts (Transformer Engine's
# GroupedLinear: torch.split, one output split after; assumption, counted from
# transformer_engine/pytorch/module/grouped_linear.py)
GROUPED_GEMM_CALLS = 2.0


def rerun_launches(model: Transformer, plan: Plan, sh: stage_lib.Shape):
    """Launches the host adds to one micro-batch's backward for the layer parts
    selective recomputation runs again (`plan.recompute.reruns()`): each
    part's eager launches added to its graph region (`_launch_regions`: the
    attention core and MLA's up projections to attention's, the norms to
    attention's and the FFN's or router's, the experts' GEMMs and activation to
    the routed experts'), then what the plan's graph scope leaves of them
    (`stacks.GraphScope.layer_launches` with and without them), over the
    stage's dense and MoE layers."""
    parts = plan.recompute.reruns()
    regions, routed, head, gemm, local = _launch_regions(model, plan)  # local: expert calls
    quantise = quantisation_calls(plan)
    up = sum(c for *_, c in model.attention.up_projections(model)) * gemm
    added = {"attention_core": {"attn": 1.0}, "up_projections": {"attn": up},
             "norms": {"attn": 1.0, "mlp": 1.0, "moe_router": 1.0},
             "norm_requant": {"attn": quantise, "mlp": quantise, "moe_router": quantise},
             "dense_ffn": {"mlp": regions["mlp"]}, "dense_activation": {"mlp": 1.0},
             "router": {"moe_router": regions["moe_router"]},
             "permute": {"moe_preprocess": regions["moe_preprocess"],
                         "routed": plan.moe_dispatcher.launches},
             "routed_experts": {"routed": 2.0 * local},
             "expert_activation": {"routed": 1.0}, "expert_requant": {"routed": quantise},
             "shared_experts": {"shared": regions["shared"]}}
    more = dict(regions, routed=routed)
    for part in parts:
        for region, n in added[part].items():
            more[region] = more[region] + n
    scope = plan.cuda_graph_scope
    before = plan.graphs.layer_launches(regions, routed, head, scope)
    after = plan.graphs.layer_launches(more, more.pop("routed"), head, scope)
    return (sh.dense_layers_on_stage * (after[0] - before[0])
            + sh.moe_layers_on_stage * (after[1] - before[1]))


def quantisation_calls(plan: Plan) -> float:
    """Host calls of one GEMM input's quantisation, in fp8
    (`plan.Fp8Recipe.host_calls`: its kernels and the tensors it allocates)."""
    return plan.fp8_recipe.host_calls() if plan.precision.gemm == "fp8" else 0.0


def gemm_calls(plan: Plan) -> float:
    """Host calls of one GEMM module's forward: the stack's module
    (`stacks.Stack.module_calls`: its logic and its launch) and its input's
    quantisation (`quantisation_calls`)."""
    return plan.stack.module_calls + quantisation_calls(plan)


def routed_calls(model: Transformer, plan: Plan, issued=None):
    """Host calls of one MoE layer's routed part, forward: per local expert (a
    multi-stream grouped GEMM issues each expert's GEMMs apart; a fused grouped
    kernel, `training.grouped_gemm_streams` at `stacks.EVERY_EXPERT`, one for
    them all) its two GEMMs' launches and quantisations (`quantisation_calls`),
    each grouped GEMM module's logic beyond a launch (`stacks.Stack.module_calls`
    - 1) and its split and output (`GROUPED_GEMM_CALLS`); the dispatcher's kernels
    (`dispatchers.Dispatcher.launches`: the permute and unpermute fused, the
    exchanges); an unfused permute and unpermute (`training.moe_permute_fusion`
    off, a dispatcher that does not fuse them) `PERMUTE_UNFUSED_CALLS` each.
    `issued`: `_issued` if known."""
    issued = _issued(model, plan) if issued is None else issued
    unfused = not (plan.moe_permute_fusion or plan.moe_dispatcher.fuses_permute)
    module = plan.stack.module_calls - 1.0 + GROUPED_GEMM_CALLS  # beyond its launches
    return (2.0 * ((1.0 + quantisation_calls(plan)) * issued + module)
            + plan.moe_dispatcher.launches
            + (2.0 * (PERMUTE_UNFUSED_CALLS - 1.0) if unfused else 0.0))


def router_calls(plan: Plan) -> tuple:
    """(the router's, the preprocessing's) host calls of one MoE layer, forward:
    the router's GEMM and `ROUTER_CALLS` (`ROUTER_FUSED_CALLS` under
    `training.moe_router_fusion`); `PREPROCESS_CALLS`, none where the
    dispatcher fuses the preprocessing (`Dispatcher.fused_preprocess`)."""
    router = 1.0 + (ROUTER_FUSED_CALLS if plan.moe_router_fusion else ROUTER_CALLS)
    return router, 0.0 if plan.moe_dispatcher.fused_preprocess else PREPROCESS_CALLS


def layer_launches(model: Transformer, plan: Plan):
    """(a dense layer's, an MoE layer's forward host calls, of the latter the
    routed experts', the output head's) under `plan.graphs`
    (`stacks.GraphScope.layer_launches`) from each region's eager calls (a
    call: a kernel launch, or a PyTorch call that launches none, such as an
    allocation): a GEMM `gemm_calls`; attention its projections, the attention
    kernel and the memory-bound kernels (`KERNELS_PER_LAYER`); the MoE router
    and preprocessing `router_calls`; the shared expert's GEMMs; the routed
    part `routed_calls`; the output head and loss (again per MTP depth)."""
    regions, routed, head, _, _ = _launch_regions(model, plan)
    return plan.graphs.layer_launches(regions, routed, head, plan.cuda_graph_scope)


def _launch_regions(model: Transformer, plan: Plan):
    """(each region's eager forward calls, the routed part's, the output head's,
    a GEMM module's, one routed GEMM's launches and quantisations over the local
    experts as they are issued) as `layer_launches` counts them."""
    gemm = gemm_calls(plan)
    issued = _issued(model, plan)
    routed = routed_calls(model, plan, issued)
    head = (1.0 + model.mtp_layers) * 3.0  # logits GEMM, loss forward and its reduction
    attention = sum(c for *_, c in model.attention_gemms()) * gemm + 1.0 + KERNELS_PER_LAYER
    router, preprocess = router_calls(plan)
    regions = {"attn": attention, "mlp": 2.0 * gemm, "moe_router": router,
               "moe_preprocess": preprocess,
               "shared": where(model.shared_experts > 0, 2.0 * gemm, 0.0)}
    return regions, routed, head, gemm, (1.0 + quantisation_calls(plan)) * issued


def _issued(model: Transformer, plan: Plan):
    """Grouped GEMMs issued per routed GEMM: one per local expert (a multi-stream
    grouped GEMM), one for them all (a fused grouped kernel)."""
    local = jnp.maximum(model.experts / plan.ep, 1.0)
    return where(plan.grouped_gemm_streams >= stacks.EVERY_EXPERT, 1.0, local)


def host_launches(model: Transformer, plan: Plan, sh: stage_lib.Shape):
    """(forward, backward) kernel launches the host issues for one micro-batch
    of the stage (`layer_launches`; none under a whole iteration's graph).
    Backward launches twice the forward's (two GEMMs per forward GEMM), plus the
    forward's again per recomputed forward."""
    dense, moe, _, head = layer_launches(model, plan)
    if sh.embedding_params is not None:  # a layout's rank: its own head passes
        head = head * sh.head_passes / (1.0 + model.mtp_layers)
    forward = sh.dense_layers_on_stage * dense + sh.moe_layers_on_stage * moe + head
    return forward, (1.0 + plan.recompute.layer_forwards) * forward


def sync_penalty_s(gpu_after_s, gpu_layer_s, host_after_s, host_layer_s) -> jax.Array:
    """Seconds one device-to-host synchronisation adds to a layer whose host and
    GPU otherwise run apart (the host ahead, the GPU's queue full).

    The sync drains the GPU's queue: the host issues the layer's part after it
    (`host_after_s`, while the GPU runs that part's `gpu_after_s`), then the
    next layer's part before its sync (host h_b = host_layer_s - host_after_s,
    GPU g_b = gpu_layer_s - gpu_after_s), and waits. With each part's kernels
    spread evenly, that segment takes max(max(g_a, h_a) + g_b, h_a + h_b)
    against max(g_a + g_b, h_a + h_b) without the sync: the difference is
    max(0, min(h_a - g_a, g_b - h_b)), the host's excess after the sync that
    the GPU's slack before the next one cannot absorb. Zero where the GPU is
    ahead after the sync (h_a <= g_a) and where the host bounds the whole layer."""
    gpu_before = gpu_layer_s - gpu_after_s
    host_before = host_layer_s - host_after_s
    return jnp.maximum(jnp.minimum(host_after_s - gpu_after_s, gpu_before - host_before), 0.0)
