"""The MoE software as types: the token dispatcher (`dispatchers`), the host's
synchronisations with the GPU (`compute.sync_penalty_s`), the CUDA-graph scope
(`stacks.GraphScope`) and padded experts, each against a closed form or a
published table point."""

import contextlib
import io

import numpy as np
import pytest

from codesign import presets
from codesign import scenario as sc
from codesign.cli import main
from codesign.model import (
    collectives,
    compute,
    dispatchers,
    fabric,
    memory,
    stacks,
    stage,
    step,
    traffic,
)

# Qwen3-30B-A3B's layer shape (128 experts of 768, top-8) on 4 layers, one
# H100 node, ep 8: small, so eager evaluation and one compile stay cheap
TABLES = {"model": {"layers": 4, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                    "ffn_hidden": 6144, "vocab": 151936, "seq_len": 512, "moe_layers": 4,
                    "experts": 128, "top_k": 8, "expert_ffn_hidden": 768, "gated": True},
          "training": {"global_batch": 16, "micro_batch": 1},
          "parallel": {"ep": 8, "dp": 8}, "system": {"preset": "dgx-h100", "gpus": 8}}


def _scn(**sections):
    t = {k: dict(v) for k, v in TABLES.items()}
    for section, values in sections.items():
        t[section].update(values)
    return sc.from_tables(t)


def _ep_row(scn):
    return next(r for r in traffic.table(scn.model, scn.plan, scn.system) if r.dimension == "ep")


# ------------------------------------------------------------------ dispatcher
@pytest.mark.parametrize("cls", [dispatchers.DeepEP, dispatchers.HybridEP])
def test_each_dispatchers_bandwidth_is_its_published_table_at_its_points(cls):
    """On an H100's NVLink (450 GB/s a direction, the benchmark's chip) the curve
    passes through every published (bytes a token, SMs) point; between token
    sizes it lies between them, and it is clipped beyond the table."""
    tier = presets.system("dgx-h100").scale_up
    assert float(tier.bandwidth_Bps) == dispatchers.BENCHMARK_NVLINK_Bps
    d = cls()
    for size, row in zip(d.token_bytes, d.table_GBps, strict=True):
        for sms, gbps in zip(d.sm_points, row, strict=True):
            assert float(d.fast_tier_Bps(size, sms, tier)) == pytest.approx(gbps * 1e9, rel=1e-12)
    lo, hi = d.token_bytes[0], d.token_bytes[-1]
    mid = float(d.fast_tier_Bps(np.sqrt(lo * d.token_bytes[1]), 24.0, tier))
    assert d.table_GBps[0][1] * 1e9 < mid < d.table_GBps[1][1] * 1e9
    assert float(d.fast_tier_Bps(hi * 4, 64.0, tier)) == pytest.approx(d.table_GBps[-1][1] * 1e9)
    assert float(d.fast_tier_Bps(lo / 4, 1.0, tier)) == pytest.approx(d.table_GBps[0][0] * 1e9)
    # half way between the SM counts, half way between their bandwidths
    half = float(d.fast_tier_Bps(lo, 16.0, tier))
    assert half == pytest.approx(0.5e9 * (d.table_GBps[0][0] + d.table_GBps[0][1]))


def test_the_all_to_all_dispatcher_is_ncclS_direct_exchange_and_the_others_their_tables():
    """Inside one node the EP row of one exchange is NCCL's direct all-to-all of
    tokens x top_k x hidden x width bytes (the all-to-all dispatcher: the model
    before the type); HybridEP's moves (p-1)/p of it at its table's bandwidth
    for a 4,096 B token (bf16, hidden 2,048) with its 8 SMs, after the same
    latencies; DeepEP adds its layout kernel before each forward dispatch."""
    base = _scn()
    assert base.plan.moe_dispatcher == dispatchers.AllToAll()
    row = _ep_row(base)
    tier = fabric.scale_up_tier(base.system, 8.0, 1.0)
    n = 512 * 8 * 2048 * 2.0
    one = collectives.cost("all_to_all", "direct", n, 8.0, tier,
                           protocols=base.system.protocols).time_s
    assert float(row.count_per_step) == 4 * 4 * 2  # 4 exchanges, 4 layers, 2 micro-batches
    assert float(row.time_s) == pytest.approx(float(row.count_per_step * one), rel=1e-12)
    hy = _ep_row(_scn(parallel={"moe_dispatcher": "hybridep"}))
    moved = n * 7 / 8 / 304e9
    assert float(hy.time_s / hy.count_per_step) == pytest.approx(
        7 * float(tier.latency_s) + moved, rel=1e-9)
    deep = _ep_row(_scn(parallel={"moe_dispatcher": "deepep"}))
    assert float(deep.time_s / deep.count_per_step) == pytest.approx(
        7 * float(tier.latency_s) + n * 7 / 8 / 302e9 + 39e-6 / 4, rel=1e-9)


def test_a_dispatcher_with_sms_of_its_own_charges_their_share_of_the_hidden_exchange():
    """DeepSeek-style overlap (dualpipe hides the exchanges): the compute lost
    to the hidden EP seconds is the dispatcher's SMs / the chip's (24 / 132),
    not NCCL's parallel.comm_sm_fraction."""
    scn = _scn(parallel={"moe_dispatcher": "deepep", "schedule": "dualpipe", "pp": 2, "dp": 8},
               system={"gpus": 16},
               training={"global_batch": 32})
    s = step.step(scn.model, scn.plan, scn.system)
    other = sum(float(r.time_s - r.exposed_s) for r in s.traffic if r.dimension != "ep")
    ep = sum(float(r.time_s - r.exposed_s) for r in s.traffic if r.dimension == "ep")
    assert ep > 0
    stolen = float(s.compute_s) - float(scn.plan.micro_batches * s.timing.micro_batch_s)
    assert stolen == pytest.approx(float(scn.plan.comm_sm_fraction) * other + 24 / 132 * ep,
                                   rel=1e-9)


# ------------------------------------------------------------------ the host
def test_a_sync_costs_the_hosts_excess_after_it_that_the_gpus_slack_before_cannot_absorb():
    """max(max(g_a, h_a) + g_b, h_a + h_b) - max(g_a + g_b, h_a + h_b)."""
    def segment(g_a, g_b, h_a, h_b):
        return max(max(g_a, h_a) + g_b, h_a + h_b) - max(g_a + g_b, h_a + h_b)

    for g_a, g_b, h_a, h_b in ((1.0, 3.0, 2.0, 0.5), (2.0, 3.0, 1.0, 0.5), (1.0, 1.0, 2.0, 2.0),
                               (1.0, 2.0, 3.0, 0.5), (0.5, 0.1, 0.2, 0.3)):
        got = float(compute.sync_penalty_s(g_a, g_a + g_b, h_a, h_a + h_b))
        assert got == pytest.approx(segment(g_a, g_b, h_a, h_b))
    # the host bounds the part after the sync
    assert float(compute.sync_penalty_s(1.0, 4.0, 2.0, 2.5)) == pytest.approx(1.0)
    assert float(compute.sync_penalty_s(2.0, 5.0, 1.0, 1.5)) == 0.0  # the GPU ahead


def test_host_syncs_slow_a_step_whose_host_bounds_the_experts_and_not_one_whose_gpu_leads():
    """Qwen3-30B's experts at 1,024 tokens a micro-batch: 16 local experts'
    GEMMs launch slower (10 us each) than the GPU runs them, attention runs
    longer than its launches, the GPU bounds the whole forward: each forward
    pays the closed form per MoE layer. At a host 100x faster the GPU leads
    everywhere and the syncs cost nothing."""
    seq = {"seq_len": 1024}
    eager = _scn(model=seq)
    synced = _scn(model=seq, training={"host_syncs": True})
    sh = stage.shape(synced.model, synced.plan)
    a = compute.timing(eager.model, eager.plan, eager.system)
    b = compute.timing(synced.model, synced.plan, synced.system)
    _, moe, routed, _ = compute.layer_launches(synced.model, synced.plan)
    gpu = a.forward_s  # the GPU bounds the whole forward (no host max applied)
    assert float(compute.host_launches(eager.model, eager.plan, sh)[0] * 1e-5) < float(gpu)
    one = compute.sync_penalty_s(compute.routed_forward_s(synced.model, synced.plan,
                                                          synced.system),
                                 gpu / 4.0, routed * 1e-5, moe * 1e-5)
    assert float(one) > 0
    assert float(b.forward_s - a.forward_s) == pytest.approx(4 * float(one), rel=1e-9)
    assert float(b.backward_s) == float(a.backward_s)  # backward reuses the forward's layout
    fast = dict(host_launch_s=1e-7)
    assert float(compute.timing(*_parts(_scn(model=seq, training={"host_syncs": True, **fast})))
                 .forward_s) == float(compute.timing(*_parts(_scn(model=seq, training=fast)))
                                      .forward_s)
    # HybridEP does not synchronise
    hy = _scn(model=seq, training={"host_syncs": True}, parallel={"moe_dispatcher": "hybridep"})
    hy0 = _scn(model=seq, parallel={"moe_dispatcher": "hybridep"})
    assert float(compute.timing(*_parts(hy)).forward_s) == float(compute.timing(*_parts(hy0))
                                                                   .forward_s)


def _parts(scn):
    return scn.model, scn.plan, scn.system


# ------------------------------------------------------------------ CUDA graphs
def test_graph_scopes_launch_their_captured_regions_as_one_and_full_iteration_none():
    """Eager: attention 2 GEMMs (QKV, output) + kernel + 6, router 1 + 12, preprocessing 12,
    16 local experts x 2 GEMMs + the dispatcher's 4; partial over (attn,
    moe_router, moe_preprocess): 3 + the routed part; full iteration: none."""
    eager = _scn()
    sh = stage.shape(eager.model, eager.plan)
    routed = 32 + 4
    per_layer = (2 + 1 + compute.KERNELS_PER_LAYER) + (1 + compute.ROUTER_KERNELS) \
        + compute.PREPROCESS_KERNELS + routed
    assert float(compute.host_launches(*_parts(eager)[:2], sh)[0]) == 4 * per_layer + 3
    partial = _scn(training={"cuda_graphs": "partial"})
    assert float(compute.host_launches(*_parts(partial)[:2], sh)[0]) == 4 * (3 + routed) + 3
    router_only = _scn(training={"cuda_graphs": "partial", "cuda_graph_scope": "moe_router"})
    assert float(compute.host_launches(*_parts(router_only)[:2], sh)[0]) == \
        4 * (per_layer - compute.ROUTER_KERNELS) + 3
    fused = _scn(training={"moe_router_fusion": True})  # 72 -> 31 of DeepSeek's router kernels
    assert float(compute.host_launches(*_parts(fused)[:2], sh)[0]) == pytest.approx(
        4 * (per_layer - 24 * (1 - 31 / 72)) + 3, rel=1e-12)
    full = _scn(training={"cuda_graphs": "full_iteration", "moe_pad_experts": True,
                          "moe_capacity_factor": 1.1})
    assert float(compute.host_launches(*_parts(full)[:2], sh)[0]) == 0.0
    assert full.plan.cuda_graphs == "full_iteration"
    # padded to 1.1 x the mean: the experts' GEMMs of the dropless busiest rank
    # at moe_imbalance 1.1, exactly
    assert float(compute.timing(*_parts(full)).backward_s) == pytest.approx(
        float(compute.timing(*_parts(_scn(training={"cuda_graphs": "iteration"}))).backward_s),
        rel=1e-12)
    # its graph's pool holds 1.5x the layers' activations of the micro-batches in flight
    mem = [float(step.step(*_parts(s)).memory.activations_bytes)
           for s in (full, _scn(training={"cuda_graphs": "iteration", "moe_pad_experts": True,
                                          "moe_capacity_factor": 1.1}))]
    stored, _ = compute.stored_bytes_per_micro_batch(full.model, full.plan, sh)
    kept = float(stored * memory.in_flight_micro_batches(full.plan))
    assert mem[0] - mem[1] == pytest.approx(
        (stacks.FULL_ITERATION_ACTIVATION_FACTOR - 1.0) * kept, rel=1e-12)


def test_full_iteration_without_padded_experts_is_refused_in_one_line(capsys):
    with pytest.raises(ValueError, match=r"training.cuda_graphs='full_iteration' needs static "
                       r"expert shapes .* training.moe_pad_experts=true"):
        _scn(training={"cuda_graphs": "full_iteration"})
    with pytest.raises(ValueError, match="training.cuda_graph_scope='attn,moe'"):
        _scn(training={"cuda_graphs": "partial", "cuda_graph_scope": "attn,moe"})
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["estimate", "deepseek-v3", "--set", "training.cuda_graphs=full_iteration"]) \
            == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.moe_pad_experts" in err[0]


# ------------------------------------------------------------------ every new knob
def test_new_knobs_have_finite_gradients_and_eager_equals_jit(step_time_value_and_grad):
    scn = _scn(parallel={"moe_dispatcher": "deepep", "schedule": "dualpipe", "pp": 2, "dp": 8,
                         "moe_dispatcher_sms": 16},  # between the table's SM counts
               system={"gpus": 16},
               training={"global_batch": 32, "host_syncs": True, "moe_pad_experts": True,
                         "moe_capacity_factor": 1.25, "cuda_graphs": "partial"})
    knobs = {k: sc.get_knob(scn, k) for k in ("parallel.moe_dispatcher_sms",
                                              "training.moe_capacity_factor",
                                              "training.host_launch_s")}
    value, grads = step_time_value_and_grad(scn, knobs)
    eager = step.estimate(scn, check=False).step.step_time_s
    assert float(value) == pytest.approx(float(eager), rel=1e-12)
    assert all(np.isfinite(float(g)) for g in grads.values())
    for key in ("training.moe_capacity_factor", "parallel.moe_dispatcher_sms"):
        h = 1e-4 * float(knobs[key])  # a central difference of the eager step
        at = [float(step.estimate(sc.set_knobs(scn, {key: knobs[key] + d}), check=False)
                    .step.step_time_s) for d in (h, -h)]
        assert float(grads[key]) == pytest.approx((at[0] - at[1]) / (2 * h), rel=1e-4, abs=1e-9)
    assert float(grads["parallel.moe_dispatcher_sms"]) != 0.0  # faster exchange, fewer SMs


def test_the_dispatcher_and_graph_scope_families_are_abstract_or_final():
    """As tests/test_strategies.py checks the other families: the classes a name
    parses to are final, their bases abstract, and each name parses to its class."""
    for base, registry, parse in ((dispatchers.Dispatcher, dispatchers.DISPATCHER_CLASSES,
                                   dispatchers.dispatcher),
                                  (stacks.GraphScope, stacks.GRAPH_SCOPE_CLASSES,
                                   stacks.graph_scope)):
        assert set(base.__subclasses__()) == set(registry)
        for c in registry:
            assert not c.__subclasses__() and type(parse(c.name)) is c
        with pytest.raises(ValueError, match="is not one of"):
            parse("nccl")
