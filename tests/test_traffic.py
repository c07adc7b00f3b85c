"""The traffic table as large models are trained today: ZeRO stages' bytes, FSDP
per-layer exposure, HSDP, context parallelism, NCCL's pipelined rail algorithms
across nodes, TP overlap, pods, rail-only forwarding and ECMP.

Scenarios are estimated eagerly: most have a static structure of their own, and
an eager estimate (~0.2 s once JAX's primitives are warm) costs less than
compiling one (2-4 s)."""

import dataclasses

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import presets
from codesign import scenario as sc
from codesign.model import collectives as co
from codesign.model import fabric, hardware, overlap, step, traffic
from codesign.model.relax import EXACT
from codesign.units import GiB


def _rows(est, dimension):
    return [r for r in est.step.traffic if r.dimension == dimension]


# ------------------------------------------------------------------ collectives
@pytest.mark.parametrize("preset, nic_Bps", [("dgx-h100", 400e9 / 8), ("dgx-a100", 200e9 / 8)])
def test_sixteen_rank_all_reduce_reaches_the_nic_aggregate(preset, nic_Bps):
    """NCCL's rail rings: busbw of a large all-reduce over 2 nodes approaches
    8 NICs x per-NIC achieved bandwidth (~376 GB/s H100, ~188 GB/s A100)."""
    s = presets.system(preset)
    n = 8 * GiB
    bound = 8 * nic_Bps * hardware.NIC_EFFICIENCY
    ring = co.cost("all_reduce", "rail_ring", n, 16.0, s.scale_up, outer=s.scale_out,
                   local_ranks=8.0)
    busbw = float(co.busbw_Bps("all_reduce", n, ring.time_s, 16.0))
    assert busbw == pytest.approx(bound, rel=0.01) and busbw <= bound
    auto = co.cost("all_reduce", "auto", n, 16.0, s.scale_up, outer=s.scale_out,
                   local_ranks=8.0)
    seq = co.cost("all_reduce", "hierarchical", n, 16.0, s.scale_up, outer=s.scale_out,
                  local_ranks=8.0)
    assert float(co.busbw_Bps("all_reduce", n, auto.time_s, 16.0)) == pytest.approx(
        bound, rel=0.05)
    assert float(seq.time_s) > 1.3 * float(ring.time_s)  # the phases' sum is far slower


def test_rail_ring_closed_form_and_one_domain():
    inner = hardware.Tier(300e9, 1e-6, 1.0, 1e12)
    outer = hardware.Tier(25e9, 4e-6, 1.0, 1e12)
    n, p, g = 1e9, 32.0, 8.0
    c = co.cost("all_reduce", "rail_ring", n, p, inner, outer=outer, local_ranks=g)
    nodes = p / g
    up = 2 * (p - 1) / p * (1 - nodes / p) * n / 300e9 + (p - 1) / p * n / 1e12
    out = 2 * (p - 1) / p / g * n / 25e9
    lat = 2 * (p - 1) * ((1 - nodes / p) * 1e-6 + nodes / p * 4e-6)
    assert float(c.time_s) == pytest.approx(lat + max(up, out), rel=1e-9)
    # one domain: the rail ring is the flat ring on the fast tier
    one = co.cost("all_reduce", "rail_ring", n, 8.0, inner, outer=outer, local_ranks=8.0)
    flat = co.cost("all_reduce", "ring", n, 8.0, inner)
    assert float(one.time_s) == pytest.approx(float(flat.time_s), rel=1e-9)


def test_nvls_tree_needs_nvls():
    s = presets.system("dgx-a100")
    with pytest.raises(ValueError, match="in_network_efficiency"):
        co.cost("all_reduce", "nvls_tree", 1e9, 16.0, s.scale_up, outer=s.scale_out,
                local_ranks=8.0)


@pytest.mark.parametrize("algorithm", ["rail_ring", "rail_tree", "nvls_tree"])
def test_pipelined_gradients_are_finite_and_signed(algorithm):
    s = presets.system("dgx-h100")

    def f(n, up_Bps, out_Bps):
        up = eqx.tree_at(lambda t: t.bandwidth_Bps, s.scale_up, up_Bps)
        out = eqx.tree_at(lambda t: t.bandwidth_Bps, s.scale_out, out_Bps)
        return co.cost("all_reduce", algorithm, n, 64.0, up, outer=out, local_ranks=8.0).time_s

    g = jax.grad(f, argnums=(0, 1, 2))(1e9, 450e9, 50e9)
    assert all(np.isfinite(float(x)) for x in g)
    assert float(g[0]) > 0 and float(g[2]) < 0 and float(g[1]) <= 0


# ------------------------------------------------------------------ ZeRO / FSDP
def _gpt3_zero(stage, dp=256, extra=()):
    return sc.load(None, ["parallel.tp=1", "parallel.pp=1", f"parallel.dp={dp}",
                          f"system.gpus={dp}", f"parallel.zero={stage}",
                          "training.global_batch=1536", "training.micro_batch=2",
                          "parallel.schedule=1f1b", "parallel.interleave=1",
                          "system.preset=dgx-h100", *extra])


def _wire_params(est, collective):
    """Bytes per step of `collective` in the dp rows (message x count)."""
    return sum(float(r.message_bytes * r.count_per_step) for r in _rows(est, "dp")
               if r.collective == collective)


def test_zero_stages_move_their_own_bytes():
    ests = {z: step.estimate(_gpt3_zero(z)) for z in (1, 2, 3)}
    scn = _gpt3_zero(3)
    m = float(scn.plan.micro_batches)
    params = float(scn.model.params())
    pb, gb = scn.plan.precision.bytes("params"), scn.plan.precision.bytes("grad_reduce")
    # ZeRO-3: gather forward + gather backward (resharded) + reduce-scatter, per
    # micro-batch, and no ZeRO-1/2 rows
    assert _wire_params(ests[3], "all_gather") == pytest.approx(2 * m * params * pb, rel=1e-6)
    assert _wire_params(ests[3], "reduce_scatter") == pytest.approx(m * params * gb, rel=1e-6)
    assert not any(r.algorithm.startswith("zero1") or r.algorithm.startswith("zero2")
                   for r in _rows(ests[3], "dp"))
    # ZeRO-2 reduce-scatters every micro-batch; ZeRO-1 once per step; both gather once
    assert _wire_params(ests[2], "reduce_scatter") == pytest.approx(m * params * gb, rel=1e-6)
    assert _wire_params(ests[1], "reduce_scatter") == pytest.approx(params * gb, rel=1e-6)
    for z in (1, 2):
        assert _wire_params(ests[z], "all_gather") == pytest.approx(params * pb, rel=1e-6)
    no_reshard = step.estimate(_gpt3_zero(3, extra=("parallel.reshard_after_forward=false",)))
    assert _wire_params(no_reshard, "all_gather") == pytest.approx(m * params * pb, rel=1e-6)


def test_layered_exposure_closed_form():
    c, f, L = 3.0, 2.0, 10.0
    assert float(overlap.layered_exposed_s(c, f, L, 1.0)) == pytest.approx(c + (L - 1) * (c - f))
    assert float(overlap.layered_exposed_s(c, f, L, 4.0)) == pytest.approx(c + (L - 1) * (c - f))
    assert float(overlap.layered_exposed_s(1.0, f, L, 1.0)) == pytest.approx(1.0)  # hidden
    assert float(overlap.layered_exposed_s(c, f, L, 0.0)) == pytest.approx(L * c)  # no prefetch


@pytest.mark.parametrize("scale_out_Bps", [50e9, 1e7])
def test_pipeline_sends_hide_no_more_than_the_chunks_they_run_beside(scale_out_Bps):
    """An interleaved 1F1B pipeline waits for the fill's and drain's sends and
    hides each other send under one chunk of its pass (`overlap.Steady`): at
    50 GB/s a send is far below a chunk, so only the 2 (pp - 1) waited are
    exposed; at 10 MB/s a send outlasts its chunk and the excess of every send is
    exposed, so the hidden part is at most the chunks' compute."""
    scn = sc.load("llama3-405b", [f"system.scale_out_bandwidth_Bps={scale_out_Bps}"])
    est = step.estimate(scn)
    (row,), p, timing = _rows(est, "pp"), scn.plan, est.step.timing
    one_s, count = float(row.time_s / row.count_per_step), float(row.count_per_step)
    waited = 2.0 * (float(p.pp) - 1.0)
    v, m = float(p.interleave), count / (2.0 * float(p.interleave))
    chunks_s = (float(timing.forward_s) / v, float(timing.backward_s) / v)
    want = waited * one_s + 0.5 * (count - waited) * sum(max(one_s - c, 0.0) for c in chunks_s)
    assert float(row.exposed_s) == pytest.approx(want, rel=1e-12)
    assert float(row.time_s - row.exposed_s) <= m * float(timing.micro_batch_s) * (1 + 1e-12)
    slow = one_s > max(chunks_s)
    assert slow == (scale_out_Bps < 1e9)
    assert (float(row.exposed_s) > waited * one_s * 1.01) == slow


def test_fsdp_throughput_per_gpu_falls_as_dp_grows():
    """GPT-3 175B, ZeRO-3, tp = pp = 1, global batch 1536, one micro-batch per GPU."""
    tput, exposed = [], []
    for dp in (128, 512, 1536):
        scn = sc.load(None, ["parallel.tp=1", "parallel.pp=1", f"parallel.dp={dp}",
                             f"system.gpus={dp}", "parallel.zero=3",
                             "training.global_batch=1536", f"training.micro_batch={1536 // dp}",
                             "parallel.schedule=1f1b", "parallel.interleave=1",
                             "system.preset=dgx-h100"])
        e = step.estimate(scn)
        tput.append(float(e.step.tokens_per_s) / dp)
        exposed.append(float(e.step.exposed_s["dp"]) / float(e.step.step_time_s))
    assert tput[0] > tput[1] > tput[2]
    assert exposed[0] < exposed[2]


def test_hsdp_shards_inside_and_all_reduces_across():
    full = step.estimate(_gpt3_zero(3))
    hsdp = step.estimate(_gpt3_zero(3, extra=("parallel.zero_shard_size=8",)))
    shard_rows = [r for r in _rows(hsdp, "dp") if r.algorithm.startswith("zero3")]
    assert all(float(r.ranks) == 8 and r.tier == "scale_up" for r in shard_rows)
    rep = [r for r in _rows(hsdp, "dp") if r.algorithm.startswith("hsdp")]
    assert len(rep) == 2 and float(rep[0].ranks) == 32
    assert float(rep[0].count_per_step) > 0
    no_rep = [r for r in _rows(full, "dp") if r.algorithm.startswith("hsdp")]
    assert all(float(r.count_per_step) == 0 for r in no_rep)
    # the weights now stay inside the node: less exposed dp time
    assert float(hsdp.step.exposed_s["dp"]) < float(full.step.exposed_s["dp"])


def test_zero_shard_size_must_divide_dp_cp():
    with pytest.raises(ValueError, match="zero_shard_size=3"):
        _gpt3_zero(3, extra=("parallel.zero_shard_size=3",))


# ------------------------------------------------------------------ CP
def test_context_parallel_ranks_join_the_dp_group():
    base = step.estimate(sc.load("llama3-405b"))
    cp2 = step.estimate(sc.load("llama3-405b", ["parallel.cp=2"]))
    ranks = lambda e: {float(r.ranks) for r in _rows(e, "dp") if r.count_per_step > 0}  # noqa: E731
    assert ranks(base) == {128.0}
    assert ranks(cp2) == {128.0}  # dp 64 x cp 2
    assert float(cp2.step.traffic[0].ranks) == 8.0
    cp = _rows(cp2, "cp")
    kinds = {(r.collective, r.algorithm) for r in cp}
    assert kinds == {("all_gather", "ring/forward"), ("all_gather", "ring/backward"),
                     ("reduce_scatter", "ring/backward")}
    fwd = [r for r in cp if r.algorithm == "ring/forward"][0]
    bwd = [r for r in cp if r.collective == "all_gather" and r.algorithm == "ring/backward"][0]
    # full recompute: forward twice, backward passes K/V once more
    assert float(fwd.count_per_step) == pytest.approx(2 * float(bwd.count_per_step))


# ------------------------------------------------------------------ TP
def test_tp_overlap_hides_tp_time_and_charges_compute():
    base = sc.load("llama3-405b")
    half = sc.load("llama3-405b", ["parallel.tp_overlap=0.5"])
    a, b = step.estimate(base), step.estimate(half)
    ta, tb = sum(float(r.time_s) for r in _rows(a, "tp")), sum(
        float(r.time_s) for r in _rows(b, "tp"))
    assert ta == pytest.approx(tb, rel=1e-9)
    assert float(b.step.exposed_s["tp"]) == pytest.approx(0.5 * ta, rel=1e-6)
    stolen = float(b.step.compute_s) - float(a.step.compute_s)
    assert stolen == pytest.approx(float(base.plan.comm_sm_fraction) * 0.5 * ta, rel=1e-3)


def test_tp_auto_uses_nvls_on_h100():
    s = presets.system("dgx-h100")
    _, w, names = co.choose("all_reduce", 256 * 2**20, 8.0, s.scale_up)
    assert names[int(np.argmax(np.asarray(w)))] == "in_network"


# ------------------------------------------------------------------ topology
def test_rail_only_pays_the_forwarding_hop_in_ep():
    def ep(topology):
        e = step.estimate(sc.load("deepseek-v3", [f"system.topology={topology}",
                                        "parallel.schedule=1f1b"]))
        return _rows(e, "ep")[0], e

    clos, e_clos = ep("clos")
    rail, e_rail = ep("rail_only")
    scn = sc.load("deepseek-v3")
    # the hop: the slow-tier bytes of one exchange regrouped over NVLink first
    cross = float(clos.slow_tier_bytes / clos.count_per_step)
    hop = fabric.rail_forwarding_cost(fabric.with_topology(scn.system, fabric.RailOnly()), cross,
                                      float(clos.ranks_inside)).time_s
    assert float(rail.time_s - clos.time_s) == pytest.approx(
        float(clos.count_per_step * hop), rel=1e-6)
    assert float(rail.time_s) > 1.2 * float(clos.time_s)
    assert float(e_rail.step.step_time_s) > float(e_clos.step.step_time_s)
    # and the sweeps' penalty runs the same hop
    penalty = fabric.rail_only_all_to_all_penalty(scn.system, 1e8, 64.0)
    direct = co.cost("all_to_all", "direct", 1e8, 8.0, scn.system.scale_out).time_s
    assert float(penalty) == pytest.approx(float(fabric.rail_forwarding_cost(
        fabric.with_topology(scn.system, fabric.RailOnly()), 1e8, 8.0).time_s / direct))


def test_pods_cost_by_the_ring_hops_that_cross():
    s = sc.load("llama3-405b").system  # 3072-GPU pods, 1:7
    # a ring of 128 members over 5.3 pods: 5.3 of 128 hops cross, 7 x 0.04 < 1
    assert float(fabric.pod_factor(s, 16384.0, 128.0)) == pytest.approx(1.0)
    # one member per pod: every hop crosses, the full 7
    assert float(fabric.pod_factor(s, 16384.0, 16384.0 / 3072.0)) == pytest.approx(7.0)
    # an exchange over the same span: 1 - 3072/16384 of its bytes leave the pod
    assert float(fabric.pod_factor(s, 16384.0, 128.0, exchange=True)) == pytest.approx(
        7.0 * (1.0 - 3072.0 / 16384.0))
    assert float(fabric.pod_factor(s, 3072.0, 3072.0)) == 1.0  # inside a pod


def test_ecmp_routing_slows_crossing_groups():
    # dp placed outside pp: its ring leaves a leaf at every other hop (the
    # default placement keeps the dp ring inside 4 leaves: ECMP barely matters)
    where = "system.placement='tp,cp,ep,pp,dp'"
    spray = step.estimate(sc.load("llama3-405b", [where]))
    ecmp = step.estimate(sc.load("llama3-405b", [where, "system.routing=ecmp"]))
    dp = lambda e: sum(float(r.time_s) for r in _rows(e, "dp"))  # noqa: E731
    assert dp(ecmp) > dp(spray)
    tp = lambda e: sum(float(r.time_s) for r in _rows(e, "tp"))  # noqa: E731
    assert tp(ecmp) == pytest.approx(tp(spray))  # inside the domain: no ECMP
    with pytest.raises(ValueError, match="system.routing='hash'"):
        sc.load("llama3-405b", ["system.routing=hash"])


def test_group_flow_slowdown_matches_balls_into_bins():
    s = dataclasses.replace(presets.system("dgx-h100"), routing="ecmp")
    # a ring of 64 members, one per leaf (a leaf holds 32 domains of 8 GPUs): all
    # 32 flows of a leaf go up, hashed onto its 32 uplinks
    # (the smooth Poisson form, eagerly as under jit: within 3% of the exact 3.53)
    got = float(fabric.group_flow_slowdown(s, 64 * 256.0, 64.0))
    assert got == pytest.approx(float(fabric.ecmp_slowdown(32.0, 32.0, exact=False)), rel=1e-6)
    assert got == pytest.approx(float(fabric.flow_slowdown(32.0, 32.0)), rel=0.03)
    assert got > 2.0
    # inside one leaf nothing goes up
    assert float(fabric.group_flow_slowdown(s, 256.0, 32.0)) == 1.0
    spray = presets.system("dgx-h100")
    assert float(fabric.group_flow_slowdown(spray, 64 * 256.0, 64.0)) == 1.0


def test_one_call_prices_each_request_as_it_would_be_priced_alone():
    """The request table (`traffic.price`): a group's `auto` collective, a pair of
    pipeline neighbours in one domain and in two (on a pair's slow tier: pods
    oversubscribed 1:7 beyond 64 GPUs and no ECMP collisions, which a group of
    two ranks 512 apart would see) and a direct all-to-all inside a domain,
    priced in one call, each as `cost_on` / `collectives.cost` prices it alone."""
    s = sc.load("llama3-405b", ["system.topology=clos", "system.pod_size=64",
                                "system.oversubscription=7", "system.routing=ecmp"]).system
    group, pair, n = (256.0, 8.0, 2048.0, 1.0), (1024.0, 512.0), 3e7
    requests = [traffic.Request("all_reduce", 1e8, group),
                traffic.Request("send_recv", n, (2.0, 2.0, *pair), ("direct",), pair=True),
                traffic.Request("send_recv", n, (2.0, 1.0, *pair), ("direct",), pair=True),
                traffic.Request("all_to_all", 5e7, (8.0, 8.0, 8.0, 1.0), ("direct",))]
    up = fabric.scale_up_tier(s, 2.0, pair[1])
    alone = [traffic.cost_on("all_reduce", 1e8, group, s),
             co.cost("send_recv", "direct", n, 2.0, up, protocols=s.protocols),
             co.cost("send_recv", "direct", n, 2.0, up, outer=fabric.scale_out_tier(s, pair[0]),
                     local_ranks=1.0, t=EXACT, protocols=s.protocols),
             co.cost("all_to_all", "direct", 5e7, 8.0, fabric.scale_up_tier(s, 8.0, 1.0),
                     protocols=s.protocols)]
    got = jax.jit(lambda: traffic.price(requests, s))()
    for g, a in zip(got, alone, strict=True):
        assert float(g) == pytest.approx(float(a.time_s), rel=1e-12)
    # a group of the pair's geometry would see ECMP's collisions on top of the pods
    assert float(fabric.group_scale_out_tier(s, pair[0], 2.0).bandwidth_Bps) < float(
        fabric.scale_out_tier(s, pair[0]).bandwidth_Bps)


# ------------------------------------------------------------------ differentiable
KNOBS = ("parallel.fsdp_prefetch_layers", "parallel.tp_overlap", "parallel.zero_shard_size",
         "system.scale_out_bandwidth_Bps", "system.oversubscription")


def test_new_knobs_have_finite_gradients_and_vmap_without_recompiling():
    scn = sc.load("llama3-405b", ["parallel.zero=3", "parallel.zero_shard_size=32",
                                  "parallel.tp_overlap=0.3", "system.routing=ecmp",
                                  "parallel.cp=2"])
    x0 = {k: sc.get_knob(scn, k) for k in KNOBS}

    def f(x):
        return step.estimate(sc.set_knobs(scn, x)).step.step_time_s

    g = jax.jit(jax.grad(f))(x0)
    assert all(np.isfinite(float(v)) for v in g.values())
    assert float(g["system.scale_out_bandwidth_Bps"]) < 0
    assert float(g["parallel.tp_overlap"]) < 0

    batched = jax.jit(jax.vmap(chex.assert_max_traces(f, n=1)))  # a second trace raises
    xs = {k: jnp.stack([v, v * 1.1]) for k, v in x0.items()}
    xs["parallel.zero_shard_size"] = jnp.array([32.0, 64.0])
    out = batched(xs)
    assert np.all(np.isfinite(np.asarray(out)))
    batched({k: v * 1.01 for k, v in xs.items()})  # new values, the same trace
