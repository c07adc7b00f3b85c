"""The MoE software as types: the token dispatcher (`dispatchers`), the host's
synchronisations with the GPU (`host.sync_penalty_s`), the CUDA-graph scope
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
    host,
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
        got = float(host.sync_penalty_s(g_a, g_a + g_b, h_a, h_a + h_b))
        assert got == pytest.approx(segment(g_a, g_b, h_a, h_b))
    # where the host's calls before the sync fit in the GPU's work after it, a layer
    # with a sync costs its GPU work before it + the larger of the host's and the
    # GPU's time after it (issue 54's form): g_b + max(g_a, h_a)
    for g_a, g_b, h_a, h_b in ((1.0, 3.0, 2.0, 0.5), (2.0, 3.0, 1.0, 0.5), (0.5, 2.0, 3.0, 1.0)):
        free = max(g_a + g_b, h_a + h_b)
        got = float(host.sync_penalty_s(g_a, g_a + g_b, h_a, h_a + h_b))
        assert free + got == pytest.approx(g_b + max(g_a, h_a))
    # the host bounds the part after the sync
    assert float(host.sync_penalty_s(1.0, 4.0, 2.0, 2.5)) == pytest.approx(1.0)
    assert float(host.sync_penalty_s(2.0, 5.0, 1.0, 1.5)) == 0.0  # the GPU ahead


def test_host_syncs_slow_a_step_whose_host_bounds_the_experts_and_not_one_whose_gpu_leads():
    """Qwen3-30B's experts at 1,536 tokens a micro-batch: 16 local experts'
    GEMMs launch slower (10 us each) than the GPU runs them, attention runs
    longer than its launches, the GPU bounds the whole forward: each forward
    pays the closed form per MoE layer. At a host 100x faster the GPU leads
    everywhere and the syncs cost nothing."""
    seq = {"seq_len": 1536}
    eager = _scn(model=seq)
    synced = _scn(model=seq, training={"host_syncs": True})
    sh = stage.shape(synced.model, synced.plan)
    a = compute.timing(eager.model, eager.plan, eager.system)
    b = compute.timing(synced.model, synced.plan, synced.system)
    _, moe, routed, _ = host.layer_launches(synced.model, synced.plan)
    gpu = a.forward_s  # the GPU bounds the whole forward (no host max applied)
    assert float(host.host_launches(eager.model, eager.plan, sh)[0] * 1e-5) < float(gpu)
    one = host.sync_penalty_s(compute.routed_forward_s(synced.model, synced.plan,
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


def _moe_calls(**sections):
    scn = _scn(**sections)
    return float(host.layer_launches(scn.model, scn.plan)[1])


def test_the_hosts_calls_per_moe_layer_follow_the_software_configuration():
    """An MoE layer's forward calls, eager, bf16, Transformer Engine's modules
    (m calls each): attention 2 m + 7, router 59, preprocessing 14, the routed
    part 2 (16 + m + 1) + 12 (see the graph-scope test); each knob moves its
    own term by its closed form."""
    m = stacks.TE_MODULE_CALLS
    assert m == pytest.approx(99.66 / 37.08)  # TE issue #2053: TE's Linear / PyTorch's
    base = (2 * m + 1 + host.KERNELS_PER_LAYER) + (1 + 58) + 14 + (2 * (16 + m + 1) + 12)
    assert _moe_calls() == pytest.approx(base, rel=1e-12)
    # router fusion: the router's 58 -> 17 (the log's 72 -> 31 with the 14 of preprocessing)
    assert _moe_calls(training={"moe_router_fusion": True}) == pytest.approx(base - 41)
    # permute fusion: a fused permute and unpermute, one call each
    assert _moe_calls(training={"moe_permute_fusion": True}) == pytest.approx(base - 8)
    # DeepEP: its fused preprocessing (31 -> 17: none of the 14 left), 6 kernels for 2
    # exchanges; with router fusion, the log's 17 router and preprocessing calls
    deepep = base - 14 + 2
    assert _moe_calls(parallel={"moe_dispatcher": "deepep"}) == pytest.approx(deepep)
    assert _moe_calls(parallel={"moe_dispatcher": "deepep"},
                      training={"moe_router_fusion": True}) == pytest.approx(deepep - 41)
    assert host.ROUTER_CALLS + host.PREPROCESS_CALLS == 72  # the log's counts
    assert host.ROUTER_FUSED_CALLS + host.PREPROCESS_CALLS == 31
    assert host.ROUTER_FUSED_CALLS == 17
    # HybridEP: fused preprocessing and permute, 4 kernels as the all-to-all
    assert _moe_calls(parallel={"moe_dispatcher": "hybridep"}) == pytest.approx(base - 22)
    # fp8: each GEMM's quantisation, its kernels and its allocations (a: an allocation
    # in calls, "several microseconds", 5 us on Grace): per-tensor 1 + 2 a, MXFP8
    # 1 + 4 a (the log's four tensors), NVFP4 1 + 2 (its amax) + 4 a, on attention's
    # 2 GEMMs and the experts' 32 (the router's GEMM stays 16-bit)
    a = stacks.ALLOCATION_CALLS
    assert a * stacks.EAGER_LAUNCH_S * stacks.GRACE_CALL_FACTOR == pytest.approx(5e-6)
    for recipe, per in (("tensorwise", 1 + 2 * a), ("mxfp8", 1 + 4 * a), ("nvfp4", 3 + 4 * a)):
        got = _moe_calls(training={"dtype": "fp8", "fp8_recipe": recipe},
                         system={"preset": "dgx-b200"})  # a chip with an FP4 peak
        assert got == pytest.approx(base + (2 + 2 * 16) * per), recipe
    # a fused grouped kernel: one call for all the local experts' GEMMs
    assert _moe_calls(training={"grouped_gemm_streams": stacks.EVERY_EXPERT}) == \
        pytest.approx(base - 2 * 15)
    # a shared expert: its two GEMMs
    assert _moe_calls(model={"shared_experts": 1}) == pytest.approx(base + 2 * m, rel=1e-12)


def test_a_dense_models_calls_do_not_see_the_moe_software():
    """A dense model (no MoE layer): attention 2 m + 7 and the FFN's 2 GEMM
    modules a layer, the head's 3, whatever the dispatcher, router or permute
    fusion say."""
    dense = {"moe_layers": 0, "experts": 0, "top_k": 0, "expert_ffn_hidden": 0}
    counts = set()
    for extra in ({}, {"training": {"moe_router_fusion": True, "moe_permute_fusion": True}},
                  {"parallel": {"moe_dispatcher": "deepep"}}):
        t = {"model": dense, **extra}
        t["parallel"] = {"ep": 1, **t.get("parallel", {})}
        scn = _scn(**t)
        sh = stage.shape(scn.model, scn.plan)
        counts.add(float(host.host_launches(scn.model, scn.plan, sh)[0]))
    assert len(counts) == 1
    m = stacks.TE_MODULE_CALLS
    assert counts.pop() == pytest.approx(4 * (4 * m + 1 + host.KERNELS_PER_LAYER) + 3)


def test_the_hosts_seconds_per_call_are_the_stacks_on_its_cpu_and_numa_binding():
    """x86 (a DGX H100's Xeon): the stack's 10 us; Grace (the GB200 / GB300
    presets): x 37.08 / 13.48 (TE issue #2053's nn.Linear on GB200 against a DGX
    H100); unbound ranks x NUMA_UNBOUND_FACTOR; a scenario's own value wins."""
    h100 = _scn()
    assert h100.plan.host.name == "x86"
    assert float(h100.plan.host_launch_s) == pytest.approx(stacks.EAGER_LAUNCH_S, rel=1e-12)
    gb = _scn(system={"preset": "gb200-nvl72"})
    assert gb.plan.host.name == "grace"
    grace = stacks.EAGER_LAUNCH_S * 37.08 / 13.48
    assert float(gb.plan.host_launch_s) == pytest.approx(grace, rel=1e-12)
    unbound = _scn(system={"preset": "gb200-nvl72"}, training={"numa_binding": False})
    assert float(unbound.plan.host_launch_s) == pytest.approx(
        grace * stacks.NUMA_UNBOUND_FACTOR, rel=1e-12)
    assert float(_scn(training={"host": "grace"}).plan.host_launch_s) == pytest.approx(grace)
    assert float(_scn(system={"preset": "gb200-nvl72"}, training={"host_launch_s": 3e-6})
                 .plan.host_launch_s) == 3e-6
    assert float(_scn(training={"stack": "xla"}, system={"preset": "gb200-nvl72"})
                 .plan.host_launch_s) == 0.0
    with pytest.raises(ValueError, match="training.host"):
        _scn(training={"host": "arm"})


def test_deepeps_busy_wait_adds_to_each_synced_forward():
    """DeepEP's notify_dispatch busy-waits ~35 us a layer beyond the sync's own
    cost: forward(synced) - forward(not) = layers x (sync_penalty + 35 us)."""
    seq = {"seq_len": 1536}
    kw = {"parallel": {"moe_dispatcher": "deepep"}, "model": seq}
    eager, synced = _scn(**kw), _scn(training={"host_syncs": True}, **kw)
    a = compute.timing(*_parts(eager))
    b = compute.timing(*_parts(synced))
    _, moe, routed, _ = host.layer_launches(synced.model, synced.plan)
    one = host.sync_penalty_s(compute.routed_forward_s(*_parts(synced)), a.forward_s / 4.0,
                                 routed * 1e-5, moe * 1e-5)
    assert float(b.forward_s - a.forward_s) == pytest.approx(4 * (float(one) + 35e-6), rel=1e-9)


# ------------------------------------------------------------------ CUDA graphs
def test_graph_scopes_launch_their_captured_regions_as_one_and_full_iteration_none():
    """Eager: attention 2 GEMMs (QKV, output) + kernel + 6, router 1 + 58, preprocessing 14,
    16 local experts x 2 GEMMs + 2 x (split, output) + the unfused permute and unpermute
    (5 calls each) + the two exchanges; partial over (attn, moe_router, moe_preprocess):
    3 + the routed part; full iteration: none."""
    eager = _scn()
    sh = stage.shape(eager.model, eager.plan)
    m = stacks.TE_MODULE_CALLS  # a Transformer Engine GEMM module's calls
    routed = 2 * (16 + m - 1 + 2) + 2 * 5 + 2
    per_layer = (2 * m + 1 + host.KERNELS_PER_LAYER) + (1 + 58) + 14 + routed
    assert float(host.host_launches(*_parts(eager)[:2], sh)[0]) == \
        pytest.approx(4 * per_layer + 3, rel=1e-12)
    partial = _scn(training={"cuda_graphs": "partial"})
    assert float(host.host_launches(*_parts(partial)[:2], sh)[0]) == \
        pytest.approx(4 * (3 + routed) + 3, rel=1e-12)
    router_only = _scn(training={"cuda_graphs": "partial", "cuda_graph_scope": "moe_router"})
    assert float(host.host_launches(*_parts(router_only)[:2], sh)[0]) == \
        pytest.approx(4 * (per_layer - 58) + 3, rel=1e-12)
    fused = _scn(training={"moe_router_fusion": True})  # 72 -> 31 of DeepSeek's router kernels
    assert float(host.host_launches(*_parts(fused)[:2], sh)[0]) == \
        pytest.approx(4 * (per_layer - 41) + 3, rel=1e-12)
    full = _scn(training={"cuda_graphs": "full_iteration", "moe_pad_experts": True,
                          "moe_capacity_factor": 1.1})
    assert float(host.host_launches(*_parts(full)[:2], sh)[0]) == 0.0
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
