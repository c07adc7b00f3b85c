"""The step model against the seeds' figures, closed forms and finite differences.

Scenarios are estimated eagerly where each is evaluated once (an eager estimate
costs ~0.2 s once JAX's primitives are warm, compiling one 2-4 s)."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import presets, validate
from codesign import scenario as sc
from codesign.model import (
    compute,
    hardware,
    host,
    memory,
    overlap,
    params,
    plan,
    stacks,
    stage,
    step,
    traffic,
    workload,
)


def test_narayanan_1t_reproduces_163_tflops_per_gpu():
    est = step.estimate(sc.load("megatron-1t"))
    assert float(est.step.hardware_flops_per_s_per_gpu) == pytest.approx(163e12, rel=0.05)
    assert float(est.step.hfu) == pytest.approx(0.52, abs=0.03)  # "52% of peak"


def test_megatron_2019_prediction_within_5_percent():
    est = step.estimate(sc.load("megatron-8.3b"))
    aggregate = float(est.step.hardware_flops_per_s_per_gpu) * 512
    assert aggregate == pytest.approx(15.1e15, rel=0.05)  # 15.1 PFLOP/s, 76% scaling
    assert aggregate / (512 * 39e12) == pytest.approx(0.76, abs=0.04)


def test_calibration_reruns_to_the_preset_constants():
    s1t = sc.load("megatron-1t")
    e = validate.calibrate_matmul_efficiency(s1t.model, s1t.plan, s1t.system, 163e12, iterations=25)
    assert e == pytest.approx(hardware.A100_MATMUL_EFFICIENCY, rel=0.005)
    small = workload.model("megatron-1.2b")  # Megatron-LM's 1.2B baseline
    one = plan.Plan(dp=1, micro_batch=8, global_batch=8, recompute="full", dtype="fp16")
    e = validate.calibrate_matmul_efficiency(small, one, presets.system("dgx-v100"), 39e12,
                                         iterations=25)
    assert e == pytest.approx(hardware.V100_MATMUL_EFFICIENCY, rel=0.005)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 32), (16, 16)])
def test_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    pl = plan.Plan(dp=1, pp=p, global_batch=m, micro_batch=1)
    t_mb = 1.7
    bubble = float(step.bubble_s(pl, t_mb))
    assert bubble / (bubble + m * t_mb) == pytest.approx((p - 1) / (m + p - 1))
    inter = plan.Plan(dp=1, pp=p, global_batch=m, interleave=2, schedule="interleaved")
    assert float(step.bubble_s(inter, t_mb)) == pytest.approx(bubble / 2)


def test_bucketed_dp_overlap_has_an_optimal_bucket():
    # exposed = max(c, hide/B + B c - hide) with c = alpha + size/B beta
    alpha, beta, grad, hide = 1e-3, 1e-10, 4e9, 0.5
    sizes = np.logspace(5, 10, 60)
    exposed = [float(overlap.bucketed_exposed_s(alpha + s * beta, grad / s, hide))
               for s in sizes]
    best = int(np.argmin(exposed))
    assert 0 < best < len(sizes) - 1  # too small pays latency, too large starts late


def test_tensor_parallelism_degrades_past_the_scale_up_domain():
    ests = [step.estimate(sc.load(None, [f"parallel.tp={tp}", "parallel.pp=4",
                               "training.global_batch=1024"])) for tp in (4, 8, 16)]
    rows = [[r for r in e.step.traffic if r.dimension == "tp"][0] for e in ests]
    one = [float(r.time_s / r.count_per_step) for r in rows]  # one all-reduce
    # inside the 8-GPU domain doubling TP costs little per collective; leaving
    # it crosses the NICs and costs more (on the critical path). NCCL's rail
    # rings pipeline NVLink and the 8 NICs, so the step is the busbw ratio
    # (DGX A100: NVLink ring ~230 GB/s, NIC aggregate 8 x 23.5 = 188 GB/s) times
    # 2(p-1)/p at 16 over 8 ranks: ~1.31x, not the sum of two phases (was > 1.6x)
    assert [r.tier for r in rows] == ["scale_up", "scale_up", "scale_up+scale_out"]
    assert one[1] < 1.25 * one[0]
    assert one[2] > 1.25 * one[1]
    assert float(ests[2].step.step_time_s) > float(ests[1].step.step_time_s)


def test_node_limit_caps_slow_tier_copies():
    m = workload.model("deepseek-v3")
    p = plan.Plan(dp=64, ep=64, moe_node_limit=4)
    nodes = jnp.asarray(8.0)
    assert float(traffic.ep_slow_tier_copies(m, p, nodes)) == pytest.approx(4 * 7 / 8)
    unlimited = eqx.tree_at(lambda q: q.moe_node_limit, p, jnp.asarray(0.0))
    assert float(traffic.ep_slow_tier_copies(m, unlimited, nodes)) == pytest.approx(8 * 7 / 8)
    # deduplication per node (DeepEP) is its own choice: unlimited with it is M = N
    dedup = dataclasses.replace(unlimited, moe_dedup=True)
    all_nodes = eqx.tree_at(lambda q: q.moe_node_limit, p, nodes)
    assert float(traffic.ep_slow_tier_copies(m, dedup, nodes)) == pytest.approx(
        float(traffic.ep_slow_tier_copies(m, all_nodes, nodes)), rel=1e-12)
    assert float(traffic.ep_slow_tier_copies(m, dedup, nodes)) == pytest.approx(
        float(traffic.expected_remote_nodes(nodes, 8.0)), rel=1e-12)
    scn = sc.load("deepseek-v3", ["parallel.moe_node_limit=0", "parallel.moe_dedup=true"])
    limited = sc.load("deepseek-v3", ["parallel.moe_node_limit=8"])  # 8 nodes of the ep group
    assert float(step.estimate(scn).step.step_time_s) == pytest.approx(
        float(step.estimate(limited).step.step_time_s), rel=1e-9)
    # closed form of the expected distinct remote nodes, by enumeration-free Monte Carlo
    rng = np.random.default_rng(0)
    picks = rng.integers(0, 8, size=(200_000, 8))
    remote = np.array([len(set(r) - {0}) for r in picks[:20_000]])
    assert float(traffic.expected_remote_nodes(nodes, 8.0)) == pytest.approx(remote.mean(),
                                                                             rel=0.02)


def test_combined_1f1b_hides_the_all_to_alls_as_dualpipe_does():
    """`parallel.ep_overlap` (Megatron-Core's combined 1F1B): under interleaved,
    and 1f1b without pipeline stages, the MoE all-to-alls hide under an adjacent
    micro-batch's compute exactly as under DualPipe: a forward's exchanges under
    the paired backward's compute, a backward's under the forward's, each at
    most that compute, the step's first forward and last backward unpaired;
    off, all of it is exposed; with GPipe, or 1f1b over pipeline stages, it is
    bad input naming the key. Over a slow scale-out the exchanges outlast the
    forward compute they pair with and the excess shows."""
    def ep_row(overrides):
        est = step.estimate(sc.load("deepseek-v3", overrides)).step
        return [r for r in est.traffic if r.dimension == "ep"][0], est

    slow = "system.scale_out_bandwidth_Bps=5e9"
    for base in (["parallel.schedule=1f1b", "parallel.pp=1", "system.gpus=1024"],
                 ["parallel.schedule=interleaved", "parallel.interleave=2"],
                 ["parallel.schedule=interleaved", "parallel.interleave=2", slow]):
        off, est_off = ep_row(base)
        on, est_on = ep_row([*base, "parallel.ep_overlap=true"])
        assert float(off.exposed_s) == float(off.time_s) > 0
        assert float(on.time_s) == float(off.time_s)
        assert float(on.exposed_s) < float(off.exposed_s)
        m = float(est_on.timing.overlap_s / est_on.timing.micro_batch_s)
        # combined 1F1B layer by layer (its two-stream timeline: tests/test_ep_overlap.py):
        # the step's unpaired micro-batch exposes its exchanges whole, the others hide
        assert float(on.time_s) / m * (1 - 1e-12) <= float(on.exposed_s)
        assert float(est_on.step_time_s) < float(est_off.step_time_s)
    assert 0 < float(on.exposed_s) < float(on.time_s)  # the slow fabric: an excess shows
    dual, _ = ep_row(["parallel.schedule=dualpipe"])
    dual_on, _ = ep_row(["parallel.schedule=dualpipe", "parallel.ep_overlap=true"])
    assert float(dual_on.exposed_s) == float(dual.exposed_s)  # DualPipe always overlaps
    for bad in (["parallel.schedule=gpipe"], ["parallel.schedule=1f1b"]):  # pp 16, no v
        with pytest.raises(ValueError, match=r"parallel\.ep_overlap=true needs parallel\."
                                             r"schedule='interleaved'"):
            sc.load("deepseek-v3", [*bad, "parallel.ep_overlap=true"])


def test_deepseek_forwarding_is_free_up_to_the_bandwidth_ratio():
    """DeepSeek-V3: with M = 4 nodes, NVLink forwards ~3.2 experts per IB copy at
    no extra cost. The dispatch time stays flat while top_k / M <= 3.2 and
    grows beyond it (the bytes' time: latencies left out)."""
    def dispatch(k):
        s = sc.load("deepseek-v3", ["parallel.schedule=1f1b", f"model.top_k={k}",
                                    "system.protocols=alpha_beta",
                                    "system.scale_up_latency_s=1e-12",
                                    "system.scale_out_latency_s=1e-12"])
        row = [r for r in step.estimate(s).step.traffic if r.dimension == "ep"][0]
        return float(row.time_s / row.count_per_step)

    flat = [dispatch(k) for k in (8, 12)]  # 2 and 3 experts per node
    assert flat[1] == pytest.approx(flat[0], rel=0.01)
    # 4 per node exceeds 160/50 = 3.2: NVLink forwarding becomes the bottleneck
    assert dispatch(16) == pytest.approx(flat[0] * 16 / 12.8, rel=0.02)


def _fd_check(value_and_grad, scn, signs: dict):
    """jax.grad of step time w.r.t. each knob equals a central difference and has
    the expected sign (one compiled function, shared by the suite, for all
    knobs of the scenario: the differences use its values)."""
    x0 = {k: sc.get_knob(scn, k) for k in sc.knobs(scn) if k not in sc.RELATIONAL}
    grad = value_and_grad(scn, x0)[1]
    for name, sign in signs.items():
        h = float(x0[name]) * 1e-5
        up, down = ({**x0, name: x0[name] + d} for d in (h, -h))
        fd = (float(value_and_grad(scn, up)[0]) - float(value_and_grad(scn, down)[0])) / (2 * h)
        g = float(grad[name])
        assert np.isfinite(g), name
        assert g == pytest.approx(fd, rel=1e-4), name
        assert np.sign(g) == sign, name


def test_gradients_match_finite_differences_dense(step_time_value_and_grad):
    # scale_up_domain 16 keeps every clip strictly inside (8 is a kink)
    _fd_check(step_time_value_and_grad, sc.load(None, ["system.scale_up_domain=16"]), {
        "system.scale_out_bandwidth_Bps": -1, "system.scale_up_bandwidth_Bps": -1,
        "system.scale_out_latency_s": 1, "system.matmul_efficiency": -1,
        "system.scale_up_domain": -1, "training.micro_batch": -1})


def test_gradients_match_finite_differences_moe(step_time_value_and_grad):
    _fd_check(step_time_value_and_grad, sc.load("deepseek-v3", ["parallel.schedule=1f1b"]), {
        "parallel.moe_node_limit": 1, "system.scale_up_domain": -1,
        "system.scale_out_bandwidth_Bps": -1})


def test_more_micro_batches_shrink_the_bubble():
    scn = sc.load(None)
    f = jax.grad(lambda g: step.estimate(sc.set_knobs(scn, {
        "training.global_batch": g})).step.bubble_s / g)
    assert float(f(1536.0)) < 0  # bubble per sequence falls as m grows


def test_estimate_vmaps_over_scenarios_and_does_not_recompile():
    scn = sc.load(None)
    traces = []

    def f(bw, lat):
        traces.append(1)
        est = step.estimate(sc.set_knobs(scn, {"system.scale_out_bandwidth_Bps": bw,
                                               "system.scale_out_latency_s": lat}))
        return step.outputs(est)["step_time_s"]

    g = jax.jit(jax.vmap(f))
    bw = jnp.linspace(10e9, 100e9, 64)
    out1 = g(bw, jnp.full(64, 2e-6))
    out2 = g(bw * 2, jnp.full(64, 3e-6))
    assert len(traces) == 1
    assert np.all(np.isfinite(out1)) and np.all(np.isfinite(out2))
    assert np.all(np.diff(np.asarray(out1)) < 0)  # more bandwidth, shorter step


def test_every_output_is_finite_on_every_builtin():
    for name in sc.BUILTIN:
        out = step.outputs(step.estimate(sc.load(name)))
        bad = [k for k, v in out.items() if not np.isfinite(float(v))]
        assert not bad, (name, bad)


def test_memory_follows_zero_stages():
    scn = sc.load(None)
    mems = [memory.memory(scn.model, dataclasses.replace(scn.plan, zero=z), scn.system)
            for z in (0, 1, 2, 3)]
    dp = float(scn.plan.dp)
    assert float(mems[1].optimizer_bytes) == pytest.approx(float(mems[0].optimizer_bytes) / dp)
    assert float(mems[2].gradients_bytes) == pytest.approx(float(mems[0].gradients_bytes) / dp)
    assert float(mems[3].weights_bytes) < float(mems[0].weights_bytes) / 2


def test_slow_tier_bytes_of_hierarchical_collectives():
    n = 1e9
    # all-reduce over 2 domains of 8: only n/8 crosses, all-reduced between 2 ranks
    assert float(traffic.slow_tier_bytes("all_reduce", n, 16.0, 8.0)) == pytest.approx(n / 8)
    assert float(traffic.slow_tier_bytes("all_reduce", n, 8.0, 8.0)) == 0.0
    assert float(traffic.slow_tier_bytes("all_reduce", n, 64.0, 1.0)) == pytest.approx(
        2 * 63 / 64 * n)
    assert float(traffic.slow_tier_bytes("all_to_all", n, 64.0, 8.0)) == pytest.approx(7 / 8 * n)


def _llama3_8b_memory(gpus, **plan_fields):
    scn = sc.load(None, ["model.preset='llama3-8b'", "training.micro_batch=1",
                         "training.dtype='bf16'", f"training.global_batch={gpus}",
                         "parallel.tp=1", "parallel.pp=1", "parallel.schedule='1f1b'",
                         "parallel.interleave=1",
                         "system.preset='dgx-h100'", f"system.gpus={gpus}"])
    p = dataclasses.replace(scn.plan, zero=plan_fields.pop("zero", 1))
    p = eqx.tree_at(lambda q: [getattr(q, k) for k in plan_fields], p,
                    [jnp.asarray(float(v)) for v in plan_fields.values()])
    return scn.model, memory.memory(scn.model, p, scn.system)


def test_memory_shards_over_the_group_the_framework_shards_over():
    """Llama 3 8B on 128 GPUs, Adam with fp32 master weights and moments
    (12 bytes per parameter): HSDP with shard groups of 8 holds 1/8 of the
    state (12.0 GB), not 1/128; Megatron's distributed optimizer with cp 8
    (dp 16) shards over dp x cp = 128, not 16; ZeRO-3's weights likewise."""
    model, hsdp = _llama3_8b_memory(128, zero_shard_size=8)
    params = float(model.params())  # pp 1: both embedding matrices on the GPU
    assert float(hsdp.optimizer_bytes) == pytest.approx(12.0 * params / 8)
    assert float(hsdp.optimizer_bytes) / 1e9 == pytest.approx(12.0, abs=0.1)
    _, cp = _llama3_8b_memory(128, dp=16, cp=8)
    assert float(cp.optimizer_bytes) == pytest.approx(12.0 * params / 128)
    _, z2 = _llama3_8b_memory(128, zero=2, dp=16, cp=8)
    assert float(z2.gradients_bytes) == pytest.approx(4.0 * params / 128)  # fp32 grads
    _, z3 = _llama3_8b_memory(128, zero=3, zero_shard_size=8)
    layer = (params - float(model.embedding_params())) / 32  # one gathered layer
    # bf16 weights in shards of 8 ranks, plus the layer computing and the one prefetched
    assert float(z3.weights_bytes) == pytest.approx(2.0 * params / 8 + 2.0 * 2.0 * layer)
    _, z0 = _llama3_8b_memory(128, zero=0, zero_shard_size=8)  # nothing sharded
    assert float(z0.optimizer_bytes) == pytest.approx(12.0 * params)


def test_an_mtp_depth_lands_on_the_last_stage_and_costs_a_block_and_an_output_head():
    scn = sc.load("deepseek-v3")
    mtp = eqx.tree_at(lambda s: s.model.mtp_layers, scn, jnp.asarray(1.0))
    base_sh = stage.shape(scn.model, scn.plan)
    sh = stage.shape(mtp.model, mtp.plan)
    assert float(sh.layers_on_stage - base_sh.layers_on_stage) == 1.0
    assert float(sh.moe_layers_on_stage - base_sh.moe_layers_on_stage) == 1.0
    a, b = step.estimate(scn), step.estimate(mtp)
    assert float(b.step.step_time_s) > float(a.step.step_time_s)
    assert float(b.step.memory.total_bytes) > float(a.step.memory.total_bytes)


def test_the_host_shows_only_where_its_launches_outlast_the_gpu_and_cuda_graphs_remove_it():
    """Qwen3-30B-A3B's shape (128 experts of 768, top-8) at a micro-batch of 128
    tokens: the host's launches (a GEMM a local expert) outlast the GPU's work,
    which they bound; CUDA graphs of the layers leave the routed experts' kernels,
    of the iteration none; a large micro-batch hides the host entirely."""
    tables = {"model": {"layers": 4, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                        "ffn_hidden": 6144, "vocab": 151936, "seq_len": 128, "moe_layers": 4,
                        "experts": 128, "top_k": 8, "expert_ffn_hidden": 768, "gated": True},
              # the experts' GEMMs in one fused grouped kernel: their SMs busy
              "training": {"global_batch": 8, "micro_batch": 1, "grouped_gemm_streams": 16},
              "parallel": {"ep": 8, "dp": 8},
              "system": {"preset": "dgx-h100", "gpus": 8}}

    def timing(graphs="none", seq=128):
        t = {**tables, "training": {**tables["training"], "cuda_graphs": graphs},
             "model": {**tables["model"], "seq_len": seq}}
        scn = sc.from_tables(t)
        sh = stage.shape(scn.model, scn.plan)
        return (compute.timing(scn.model, scn.plan, scn.system),
                host.host_launches(scn.model, scn.plan, sh), scn.plan.host_launch_s)

    eager, (fwd, bwd), launch_s = timing()
    # 4 MoE layers: attention (2 GEMMs, the kernel, 6 memory-bound), router (its GEMM
    # and 58 calls) and preprocessing (14), 16 local experts x 2 GEMMs, each grouped
    # GEMM module's split and output, the unfused permute and unpermute (5 calls each) and 2
    # all-to-alls; the output head's 3
    m = stacks.TE_MODULE_CALLS  # a Transformer Engine GEMM module's calls
    routed = 2 * (16 + m - 1 + 2) + 2 * 5 + 2
    per_layer = 2 * m + 1 + host.KERNELS_PER_LAYER + 1 + 58 + 14 + routed
    assert float(fwd) == pytest.approx(4 * per_layer + 3)
    assert float(bwd) == pytest.approx(2 * float(fwd))
    assert float(eager.forward_s) == pytest.approx(float(fwd) * float(launch_s))  # host-bound
    layer, (fwd_layer, _), _ = timing("layer")
    assert float(fwd_layer) == pytest.approx(4 + 4 * routed + 3)
    whole, (fwd_whole, _), _ = timing("iteration")
    assert float(fwd_whole) == 0.0
    assert float(whole.forward_s) < float(layer.forward_s) < float(eager.forward_s)
    long, (fwd_long, _), _ = timing(seq=65536)  # the GPU's work outlasts the launches
    assert float(fwd_long) == float(fwd)
    assert float(long.forward_s) > 10 * float(fwd_long) * float(launch_s)


def test_the_experts_mesh_folds_over_attentions():
    """MoE parallel folding (Megatron-Core): Qwen3-235B-A22B's experts at ep 32 x
    etp 1 over attention's tp 2 x dp 16. An expert's tokens are those of the ep x
    etp ranks it gathers from (tokens / tp each), so its GEMMs' FLOPs per GPU are
    those of etp = tp at ep 16; the routed weights split ep x etp ways and
    replicate over the rest; etp = 1 drops the MoE layers' TP pair, and the
    experts' gradients reduce over tp cp dp / (ep etp) ranks."""
    model = {"layers": 8, "hidden": 4096, "heads": 64, "kv_heads": 4, "head_dim": 128,
             "ffn_hidden": 12288, "vocab": 151936, "seq_len": 4096, "moe_layers": 8,
             "experts": 128, "top_k": 8, "expert_ffn_hidden": 1536, "gated": True}

    def scn(ep, etp):
        return sc.from_tables({"model": model, "training": {"global_batch": 64},
                               "parallel": {"tp": 2, "ep": ep, "etp": etp,
                                            "sequence_parallel": True},
                               "system": {"preset": "dgx-h100", "gpus": 32}})

    folded, legacy = scn(32, 1), scn(16, 0)
    assert float(folded.plan.expert_dp) == 1.0 and float(legacy.plan.expert_dp) == 1.0
    routed = [params.local_params(s.model, s.plan)[1] for s in (folded, legacy)]
    assert float(routed[0]) == pytest.approx(float(routed[1]))  # 128 x 1/(32 x 1) = 1/(16 x 2)
    rows = {s: {(r.dimension, r.algorithm, r.collective): r
                for r in step.step(x.model, x.plan, x.system).traffic}
            for s, x in (("folded", folded), ("legacy", legacy))}
    tp = ("tp", "auto", "reduce_scatter")  # 8 MoE layers: 2 pairs each at etp = tp, 1 at etp 1
    assert float(rows["legacy"][tp].count_per_step) == 2 * float(rows["folded"][tp].count_per_step)
    assert float(rows["folded"][("ep", "two_tier_dispatch", "all_to_all")].ranks) == 32.0
    experts_dp = [r for r in rows["folded"].values() if r.algorithm.endswith("experts")
                  and r.dimension == "dp"]
    assert experts_dp and all(float(r.ranks) == 1.0 for r in experts_dp)
    with pytest.raises(ValueError, match=r"^parallel.ep=64 x parallel.etp=1 must divide "
                       r"tp\*cp\*dp=32"):
        plan.validate(scn(64, 1).plan, scn(64, 1).model, 32.0)


def test_offloaded_activations_leave_the_gpu_and_cost_only_what_outlasts_the_compute():
    """Llama 3 70B under FSDP on 64 GB200s at micro-batch 2 (the Megatron-Bridge
    row's plan): its 80 layers keep ~237 GB for backward, over the 186 GB
    part; offloading 40 layers' to the Grace CPU leaves half of them and one
    layer's staging buffer on the GPU, and the 118 GB cross NVLink-C2C (225 GB/s)
    under the forward's compute. Over a link 1,000x slower the copies set the pace."""
    tables = {"model": {"preset": "llama3-70b", "seq_len": 8192},
              "training": {"global_batch": 256, "micro_batch": 2, "dtype": "fp8"},
              "parallel": {"zero": 3},
              "system": {"preset": "gb200-nvl72", "gpus": 64}}

    def run(layers, host_Bps=None):
        t = {**tables, "training": {**tables["training"], "offload_layers": layers}}
        if host_Bps is not None:
            t["system"] = {**t["system"], "host_Bps": host_Bps}
        scn = sc.from_tables(t)
        sh = stage.shape(scn.model, scn.plan)
        return (step.step(scn.model, scn.plan, scn.system),
                compute.stored_bytes_per_micro_batch(scn.model, scn.plan, sh))

    (kept, (stored, none)), (half, (_, out)) = run(0), run(40)
    assert float(none) == 0.0 and float(out) == pytest.approx(float(stored) / 2)
    layer = float(stored) / 80
    freed = float(kept.memory.activations_bytes - half.memory.activations_bytes)
    assert freed == pytest.approx(float(out) - layer)  # one micro-batch in flight (pp 1)
    assert float(kept.memory.total_bytes) > float(kept.memory.capacity_bytes) \
        > float(half.memory.total_bytes)
    assert float(half.step_time_s) == pytest.approx(float(kept.step_time_s), rel=1e-12)
    slow, _ = run(40, host_Bps=225e6)
    assert float(slow.timing.forward_s) == pytest.approx(float(out) / 225e6, rel=1e-12)
    assert float(run(1000)[1][1]) == pytest.approx(float(stored))  # at most the stage's layers


def test_the_folding_and_offload_knobs_have_finite_gradients(step_time_value_and_grad):
    """The knobs of issue 44 are differentiable where they act: the experts' TP
    size, the offloaded layers, the host link, the host's launch time, the
    grouped GEMMs' streams and the chip's compute units, on
    DeepSeek-V3 with its experts' TP set and 2 layers a stage offloaded."""
    scn = sc.load("deepseek-v3", ["parallel.etp=1", "training.offload_layers=2",
                                  "system.host_Bps=2e9", "training.host_launch_s=2e-5"])
    knobs = ("parallel.etp", "training.offload_layers", "system.host_Bps",
             "training.host_launch_s", "training.grouped_gemm_streams", "system.compute_units")
    _, grad = step_time_value_and_grad(scn, {k: sc.get_knob(scn, k) for k in knobs})
    assert all(np.isfinite(float(grad[k])) for k in knobs)
    assert float(grad["system.host_Bps"]) < 0  # 2 GB/s: the copies outlast the compute


def test_small_experts_leave_sms_idle_as_a_public_grouped_gemm_benchmark_shows():
    """tgale96/grouped_gemm PR 37 (H100, BF16): Qwen3-30B-A3B's up-projection,
    128 experts x 512 tokens (k 2,048, n 1,536), one cuBLAS GEMM per expert on
    one stream: 129.5 TFLOP/s. Each GEMM has 48 tiles of 128 x 128 for 132 SMs:
    the model gives 116 (-11%). Transformer Engine's 4 streams fill the SMs;
    a micro-batch's thousands of tokens per expert fill them alone."""
    h100 = presets.system("dgx-h100")
    m, k, n, experts = 512.0, 2048.0, 1536.0, 128.0

    def tflops(streams):
        busy = compute.grouped_occupancy(h100, m, n, streams)
        seconds = compute.gemm_time_s(h100, m, k, n, "bf16", experts / busy)
        return float(2 * m * k * n * experts / seconds) / 1e12

    assert float(compute.grouped_occupancy(h100, m, n, 1.0)) == pytest.approx(48 / 132)
    assert tflops(1.0) == pytest.approx(129.5, rel=0.15)
    assert float(compute.grouped_occupancy(h100, m, n, stacks.TE_GROUPED_STREAMS)) == 1.0
    assert float(compute.grouped_occupancy(h100, 4096.0, n, 1.0)) == 1.0
    assert float(compute.grouped_occupancy(h100, 0.0, n, 1.0)) == 1.0 / 132  # one tile at least
    # in a step: one stream slows Qwen3-30B-A3B's experts at a micro-batch of 128 tokens
    tables = {"model": {"layers": 4, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                        "ffn_hidden": 6144, "vocab": 151936, "seq_len": 128, "moe_layers": 4,
                        "experts": 128, "top_k": 8, "expert_ffn_hidden": 768, "gated": True},
              "training": {"global_batch": 8, "micro_batch": 1, "cuda_graphs": "iteration"},
              "parallel": {"ep": 8, "dp": 8}, "system": {"preset": "dgx-h100", "gpus": 8}}
    times = []
    for streams in (1, 4):
        t = {**tables, "training": {**tables["training"], "grouped_gemm_streams": streams}}
        scn = sc.from_tables(t)
        times.append(float(compute.timing(scn.model, scn.plan, scn.system).forward_s))
    assert times[0] > times[1]
