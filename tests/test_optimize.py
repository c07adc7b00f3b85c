"""Gradient co-design against the exhaustive grid, the relaxation at integer
points, constraints, objectives, elasticities against finite differences, and
the `optimize` / `sensitivity` commands.

Every problem here varies the same knobs of the default scenario (bounds,
objectives and limits are leaves), so the compiled functions (one exact
evaluation, one vmapped descent, one Jacobian) are shared.
"""

import itertools
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import optimize
from codesign import scenario as sc
from codesign.cli import main
from codesign.model import economics, fabric, relax, step
from codesign.optimize._model import relaxed_loss  # internal: the loss the descent follows
from codesign.optimize._problem import to_box  # internal: the descent's unit box
from codesign.units import GB, day

SCN = sc.load(None)
# the sensitivity knobs the default scenario has (a two-tier fabric: no pods)
KNOBS = tuple(k for k in sc.knobs(SCN) if k in optimize.SENSITIVITY_KNOBS)
SMALL = {"parallel.tp": (1, 16), "parallel.pp": (1, 16), "training.micro_batch": (1, 4),
         "system.scale_out_bandwidth_Bps": (5 * GB, 400 * GB)}
STARTS, STEPS, POINTS = 8, 40, 4  # the runs below share these shapes (one compilation)


@pytest.fixture(scope="module")
def small():
    return optimize.problem(SCN, list(SMALL), SMALL)


@pytest.fixture(scope="module")
def small_runs(small):
    """The gradient method and the grid on `small`: the descent's programs through
    the run's executable store (`codesign.cli.executable_store`), as `codesign
    optimize` runs them, so the CLI's run of this very problem
    (tests/test_cli_ux.py's `SMALL_ARGV`) in another worker reads them back."""
    from codesign.cli import executable_store

    return (optimize.optimize(small, starts=STARTS, steps=STEPS, store=executable_store()),
            optimize.grid_search(small, POINTS, progress=False))


# ----------------------------------------------------------------- problems
def test_admissible_values_project_divisibility():
    # tp must divide heads = 96 and (GPUs fixed) 1024; micro_batch must divide 1536
    p = optimize.problem(SCN, ["parallel.tp", "training.micro_batch", "parallel.interleave"],
                         {"parallel.tp": (1, 96), "training.micro_batch": (1, 16),
                          "parallel.interleave": (1, 4)})
    assert p.admissible[0].tolist() == [1, 2, 4, 8, 16, 32]
    assert p.admissible[1].tolist() == [1, 2, 3, 4, 6, 8, 12, 16]
    assert p.admissible[2].tolist() == [1, 2, 3, 4]  # pp 8 x interleave <= 96 layers
    assert p.knobs[0].integer and p.knobs[0].log
    # a non-interleaved schedule admits interleave 1 only; a dense model ep 1 only
    q = optimize.problem(sc.load("megatron-8.3b"), ["parallel.interleave", "parallel.ep"],
                         {"parallel.interleave": (1, 4), "parallel.ep": (1, 8)})
    assert q.admissible[0].tolist() == [1] and q.admissible[1].tolist() == [1]


@pytest.mark.parametrize("name", ["default", "deepseek-v3"])
def test_a_knob_varied_alone_admits_exactly_its_feasible_values(name):
    """Varied alone, a knob's admissible values are the integers in its
    bounds at which every structural rule holds (`plan.RULES` read by both)."""
    scn = sc.load(name)
    for knob in ("parallel.tp", "parallel.pp", "parallel.dp", "parallel.cp", "parallel.ep",
                 "training.micro_batch", "training.global_batch", "system.gpus",
                 "system.scale_up_domain", "model.heads", "model.experts"):
        if float(sc.get_knob(scn, knob)) == 0:
            continue
        lo, hi = optimize.default_bounds(scn, knob)
        v = np.arange(lo, hi + 1)
        ok = jax.vmap(lambda x, k=knob: optimize.structurally_feasible(
            sc.set_knobs(scn, {k: x})))(jnp.asarray(v))
        assert optimize.problem(scn, [knob]).admissible[0].tolist() == v[np.asarray(ok)].tolist()


@pytest.mark.parametrize("kwargs,message", [
    ({"vary": []}, "names no knob"),
    ({"vary": ["parallel.warp"]}, "unknown"),
    ({"vary": ["parallel.tp"], "objective": "speed"}, "objective='speed'"),
    ({"vary": ["parallel.tp"], "bounds": {"parallel.tp": (8, 2)}}, "0 <= LO < HI"),
    ({"vary": ["parallel.tp"], "bounds": {"parallel.tp": (1.5, 8)}}, "must be integers"),
    ({"vary": ["parallel.tp"], "bounds": {"parallel.pp": (1, 8)}}, "not varied"),
    ({"vary": ["parallel.tp"], "budget_usd": -1.0}, "budget_usd=-1.0 must be positive"),
    ({"vary": ["parallel.dp", "system.gpus"]}, "not both"),
    ({"vary": ["parallel.tp"], "bounds": {"parallel.tp": (5, 7)}}, "no admissible"),
])
def test_problem_errors_name_the_argument(kwargs, message):
    kwargs = {"bounds": None, **kwargs}
    with pytest.raises(ValueError, match=message):
        optimize.problem(SCN, kwargs.pop("vary"), kwargs.pop("bounds"), **kwargs)


def test_objectives_that_need_tokens_say_so():
    with pytest.raises(ValueError, match="training.tokens"):
        optimize.problem(sc.load("megatron-1t"), ["parallel.tp"], objective="time_to_train")


# --------------------------------------------------------------- relaxation
def test_relaxed_model_equals_exact_model_at_integer_points(small):
    """At integer points the relaxed objective (penalty off) tends to the exact
    one as t -> 0: the error shrinks with t and is below 1e-6 at t = 1e-7."""
    axes = optimize.grid_axes(small, POINTS)
    pts = np.asarray(list(itertools.product(*axes)))[::47][:STARTS]
    exact = optimize.evaluate(small, pts).loss
    t = jnp.geomspace(1.0, 1e-7, STEPS)
    at = jax.vmap(jax.vmap(relaxed_loss, (None, None, 0, None)), (0, None, None, None))
    losses = jax.jit(at)(jnp.asarray(to_box(small, pts)), small.core, relax.Relaxed(t), 0.0)
    err = np.abs(np.asarray(losses) - exact[:, None])  # (points, temperatures)
    assert np.all(np.isfinite(err))
    assert np.all(err[:, -1] < 1e-6)
    assert np.all(err[:, -1] <= err[:, 0] + 1e-12)
    assert np.max(err[:, 0]) > 1e-3  # at t = 1 the relaxation does smooth


# ------------------------------------------------------------ the two methods
def test_grid_is_exhaustive(small, small_runs):
    _, grid = small_runs
    pts = np.asarray(list(itertools.product(*optimize.grid_axes(small, POINTS))))
    assert grid.grid_size == len(pts) == 5 * 5 * 4 * POINTS == grid.evaluations
    ex = optimize.evaluate(small, pts)
    assert grid.feasible_points == int(ex.feasible.sum()) > 0
    i = int(np.argmin(np.where(ex.feasible, ex.objective, np.inf)))
    assert grid.value == pytest.approx(ex.objective[i], rel=1e-12)
    assert list(grid.best.values()) == pts[i].tolist()


@pytest.mark.parametrize("scan, devices, top, rescan", [
    ("float64", 1, 5, ""), ("float32", 3, 5, ""), ("float32", 1, 2, "tie")])
def test_streamed_grid_is_a_plain_loop(scan, devices, top, rescan, monkeypatch):
    """The streamed grid (blocks on the device, GPU count held per block and
    enumerated outermost, top-N per block) finds what a plain loop over the
    grid in C order finds in float64: the best feasible point, ties to the
    first, the same feasible count and the same top points in order, whether
    it scans in float64 or in float32 (its candidates ranked again in
    float64). Tiny blocks and calls make it cross block, call and GPU-count
    boundaries, and three devices take its calls in turn (their tops merged);
    the checkpoint interval does not move the step time, so every design ties
    3 ways. A float32 scan that keeps fewer candidates than tie (2 of the
    three-way tie: GRID_RERANK lowered) scans again in float64 and says so."""
    monkeypatch.setattr(optimize._grid, "GRID_RERANK", top)
    vary = {"parallel.tp": (1, 16), "system.gpus": (512, 1024),
            "reliability.checkpoint_interval_s": (60, 3600), "training.micro_batch": (1, 4)}
    p = optimize.problem(SCN, list(vary), vary)
    axes = optimize.grid_axes(p, 3)
    pts = np.asarray(list(itertools.product(*axes)))
    r = optimize.grid_search(p, 3, top=top, stream=True, block_points=8, call_points=24,
                             scan=scan, devices=jax.devices()[:devices])
    assert (rescan in r.profile["float64_rescan"]) and bool(r.profile["float64_rescan"]) == bool(
        rescan)
    assert p.names[1] == "system.gpus" and len(axes[1]) > 2  # enumerated out of C order
    assert r.profile["calls"] > 2 and r.grid_size == len(pts)
    ex = optimize.evaluate(p, pts)
    score = np.where(ex.feasible, ex.loss, np.inf)
    order = np.lexsort((np.arange(len(pts)), score))[:top]  # ties: first in C order
    assert r.feasible_points == int(ex.feasible.sum()) > 5
    assert list(r.best.values()) == pts[order[0]].tolist()
    assert r.value == ex.objective[order[0]]
    assert [list(t["knobs"].values()) for t in r.top] == pts[order].tolist()
    assert score[order[0]] == score[order[1]] == np.sort(score)[2]  # a three-way tie


def test_streamed_pareto_front_is_non_dominated_over_the_grid():
    """The streamed front (a running non-dominated set folded per block on the
    device) is `non_dominated` over every feasible grid point."""
    vary = {"parallel.tp": (1, 16), "system.gpus": (512, 1024), "training.micro_batch": (1, 4),
            "system.scale_out_bandwidth_Bps": (10 * GB, 200 * GB)}
    p = optimize.problem(SCN, list(vary), vary, "time_to_train", budget_usd=2.5e6)
    front = optimize.grid_pareto(p, 3, capacity=64, block_points=16, call_points=64)
    full = optimize.grid_search(p, 3, progress=False, keep=("cost_to_train_usd", "time_to_train_s"))
    kept = full.metrics["grid"]
    want = optimize.non_dominated(kept["cost_to_train_usd"], kept["time_to_train_s"])
    assert front.feasible_points == full.feasible_points == len(kept["knobs"])
    assert 3 <= len(front.knobs) == len(want) < front.feasible_points
    assert [list(k.values()) for k in front.knobs] == [kept["knobs"][i] for i in want]
    np.testing.assert_allclose(front.a, np.asarray(kept["cost_to_train_usd"])[want], rtol=1e-12)
    np.testing.assert_allclose(front.b, np.asarray(kept["time_to_train_s"])[want], rtol=1e-12)
    assert front.profile["calls"] > 2
    with pytest.raises(ValueError, match="raise it"):
        optimize.grid_pareto(p, 3, capacity=1, block_points=16, call_points=64)
    with pytest.raises(ValueError, match="b='speed' is not a metric"):
        optimize.grid_pareto(p, 3, b="speed", progress=False)


def _recorded_gradients() -> dict:
    """Gradients recorded from the code before issue 15 (fixtures/record_gradients.py)."""
    return json.loads((Path(__file__).parent / "fixtures" / "gradients_recorded.json")
                      .read_text())


def test_step_time_gradients_match_values_recorded_before_the_speed_work(
        step_time_value_and_grad):
    """Gradients of step time (13 knobs, 3 scenarios) equal the recorded ones to
    1e-9 relative (step time differentiated w.r.t. every knob of the scenario,
    with the suite's shared compiled function)."""
    for r in _recorded_gradients()["step_time_grad"]:
        base = sc.load(r["scenario"])
        knobs = {k: sc.get_knob(base, k) for k in sc.knobs(base) if k not in sc.RELATIONAL}
        value, grad = step_time_value_and_grad(
            base, {**knobs, **{k: jnp.asarray(v) for k, v in r["knobs"].items()}})
        assert float(value) == pytest.approx(r["step_time_s"], rel=1e-9)
        old = np.asarray([r["grad"][k] for k in sorted(r["grad"])])
        new = np.asarray([float(grad[k]) for k in sorted(r["grad"])])
        np.testing.assert_allclose(new, old, rtol=1e-9, atol=1e-12 * np.abs(old).max())


def test_relaxed_loss_gradients_match_values_recorded_before_the_speed_work():
    """Gradients of the relaxed loss (3 temperatures and penalties, 3 points
    each) equal the recorded ones to 1e-9 relative."""
    prob = optimize.problem(SCN, list(SMALL), SMALL, "cost_to_train_usd")
    # the exact model (recorded as t = 0) one compile; every t > 0 one traced
    # compile, as the descent anneals it
    for r in _recorded_gradients()["relaxed_loss_grad"]:
        t = relax.Relaxed(jnp.asarray(r["t"])) if r["t"] > 0 else relax.EXACT
        value, grad = _RELAXED(jnp.asarray(r["z"]), prob.core, t, r["mu"])
        assert float(value) == pytest.approx(r["loss"], rel=1e-9)
        old = np.asarray(r["grad"])
        np.testing.assert_allclose(np.asarray(grad), old, rtol=1e-9,
                                   atol=1e-12 * np.abs(old).max())


_RELAXED = jax.jit(jax.value_and_grad(relaxed_loss))  # one compilation per Core.parts


def count_equations(jaxpr) -> int:
    """Equations of `jaxpr` and of its sub-jaxprs (benchmarks/estimate.py's count)."""
    import jax.extend as jex

    return len(jaxpr.eqns) + sum(count_equations(sub) for eqn in jaxpr.eqns
                                 for sub in jex.core.jaxprs_in_params(eqn.params))


def _modules(jaxpr) -> set:
    """The codesign modules that emitted an equation of `jaxpr` or of a sub-jaxpr."""
    import jax.extend as jex

    out = set()
    for eqn in jaxpr.eqns:
        tb = eqn.source_info.traceback
        out |= {Path(f.file_name).stem for f in (tb.frames if tb is not None else ())
                if "codesign" in Path(f.file_name).parent.parts}
        for sub in jex.core.jaxprs_in_params(eqn.params):
            out |= _modules(sub)
    return out


def test_an_objective_traces_only_what_it_needs(small):
    """Issue 55: a problem's relaxed loss traces the parts of the estimate its
    objective and set limits need (`Core.parts`) and nothing else: step time
    traces no reliability, fabric or price (no equation from those modules,
    fewer equations), with the loss and gradient of every part computed to
    1e-12; the exact evaluation still reports every metric."""
    import dataclasses

    assert small.core.parts == () and small.with_limits(max_gpus=1e4).core.parts == ()
    assert small.with_limits("time_to_train").core.parts == ("reliability",)
    assert small.with_limits(budget_w=1e6).core.parts == ("fabric",)
    assert small.with_limits("tokens_per_s", budget_usd=1e9).core.parts == step.PARTS
    full = dataclasses.replace(small.core, parts=step.PARTS)
    z, t, mu = jnp.full(len(SMALL), 0.4), relax.Relaxed(jnp.asarray(0.05)), jnp.asarray(10.0)
    grad = jax.value_and_grad(relaxed_loss)
    lean, every = (jax.make_jaxpr(grad)(z, c, t, mu).jaxpr for c in (small.core, full))
    gone = {"reliability", "economics"}  # (the step's traffic reads `fabric`'s topology)
    assert gone <= _modules(every) and not gone & _modules(lean)
    assert count_equations(lean) < count_equations(every) - 500
    value, g = _RELAXED(z, small.core, t, mu)
    value_all, g_all = _RELAXED(z, full, t, mu)
    assert float(value) == pytest.approx(float(value_all), rel=1e-12)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_all), rtol=1e-12)
    # step.estimate's own option: the step alone, its outputs without the rest
    est = step.estimate(SCN, parts=())
    assert est.reliability is None and est.fabric is None
    out = step.outputs(est)
    assert "goodput" not in out and "fabric_cost_usd" not in out
    assert set(optimize.point_metrics(small, small.here)) >= {"cost_to_train_usd", "power_w"}


def test_gradient_method_lands_on_the_grid_optimum(small_runs):
    grad, grid = small_runs
    assert grad.feasible and grid.feasible
    assert grad.value == pytest.approx(grid.value, rel=1e-9)
    # step time falls with bandwidth: both take the top of its range
    assert grad.best == pytest.approx(grid.best, rel=1e-9)
    assert grid.best["system.scale_out_bandwidth_Bps"] == pytest.approx(400 * GB)
    phases = [p["phase"] for p in grad.path]
    assert phases[0] == "gradient" and "round" in phases and phases[-1] == "best"
    descent = [p for p in grad.path if p["phase"] == "gradient"]
    assert descent[0]["t"] > descent[-1]["t"]  # annealed
    assert grad.evaluations >= STARTS * STEPS
    out = grad.to_json()
    assert {"best", "objective", "feasible", "evaluations", "wall_s", "path"} <= set(out)
    assert out["objective"]["name"] == "step_time" and out["objective"]["goal"] == "min"


def test_continuous_knob_is_polished_to_a_stationary_point(small):
    """Cost to train against scale-out bandwidth: bandwidth costs fabric and
    saves GPU-hours, so the optimum is interior; the gradient method finds it
    at least as well as a 16-point grid and the exact cost is flat there."""
    p = small.with_limits("cost_to_train_usd")
    grad = optimize.optimize(p, starts=STARTS, steps=STEPS)
    grid = optimize.grid_search(p, 16, progress=False)
    assert grad.feasible and grad.value <= grid.value * (1 + 1e-9)
    bw = grad.best["system.scale_out_bandwidth_Bps"]
    assert 5 * GB < bw < 400 * GB
    x = np.asarray(list(grad.best.values()))
    around = optimize.evaluate(p, [x * [1, 1, 1, 0.97], x * [1, 1, 1, 1 / 0.97]]).objective
    assert np.all(around >= grad.value * (1 - 1e-9))


def test_maximised_objective(small):
    """tokens per joule is maximised: the gradient method at least matches the
    grid from above, and more bandwidth is not free any more (fabric power)."""
    p = small.with_limits("tokens_per_joule")
    grad = optimize.optimize(p, starts=STARTS, steps=STEPS)
    grid = optimize.grid_search(p, POINTS, progress=False)
    assert grad.goal == grid.goal == "max" and grad.feasible
    assert grad.value >= grid.value * (1 - 1e-9)
    assert grad.value == pytest.approx(grad.metrics["tokens_per_joule"])
    assert grad.best["system.scale_out_bandwidth_Bps"] < 400 * GB


def test_limits_are_respected_or_reported_infeasible(small):
    def run(p):
        return optimize.optimize(p, starts=STARTS, steps=STEPS)

    free = run(small)
    boards_w = 1024 * 400.0  # A100 board power
    tight = run(small.with_limits(budget_w=0.9 * boards_w))
    assert not tight.feasible  # the GPUs alone exceed it
    watts = run(small.with_limits(budget_w=1.1 * boards_w))
    assert watts.feasible and watts.metrics["power_w"] <= 1.1 * boards_w
    assert watts.metrics["power_w"] < free.metrics["power_w"]  # it bought less bandwidth
    memory = optimize.problem(SCN, list(SMALL),
                              {**SMALL, "parallel.tp": (1, 2), "parallel.pp": (1, 2)})
    r = optimize.grid_search(memory, POINTS, progress=False)  # 175B on <= 4-way model parallelism
    assert not r.feasible and r.feasible_points == 0
    budget = free.metrics["cost_to_train_usd"] * 1.01
    capped = run(small.with_limits("time_to_train", budget_usd=budget))
    assert capped.feasible and capped.metrics["cost_to_train_usd"] <= budget


def test_objective_metrics_follow_their_definitions(small, small_runs):
    grad, _ = small_runs
    m = optimize.point_metrics(small, small.here)
    a = economics.Assumptions()
    # cost = GPU-hours x price + fabric capex x time / lifetime (4 years)
    assert m["cost_to_train_usd"] == pytest.approx(
        m["gpu_hours"] * 2.0 + m["fabric_capex_usd"] * m["time_to_train_s"] / (4 * 365.25 * day))
    assert m["tokens_per_joule"] == pytest.approx(m["tokens_per_s"] * m["goodput"] / m["power_w"])
    # 25 GB/s (HDR) per GPU is half a 400 Gb/s rail; one NVSwitch level, 12 links of 25 GB/s
    inv = fabric.inventory(SCN.system)
    rails = 25 * GB / (400 * GB / 8)
    links = float(SCN.system.scale_up.bandwidth_Bps) / float(a.scale_up_link_Bps)
    assert m["fabric_capex_usd"] == pytest.approx(float(inv.cost_usd) * rails
                                                  + 1024 * links * 150.0)
    assert m["power_w"] == pytest.approx(1024 * 400.0 + float(inv.power_w) * rails)
    # the estimate's fabric cost is the same capital cost (`economics`)
    fabric_cost = step.outputs(step.estimate(SCN))["fabric_cost_usd"]
    assert float(fabric_cost) == pytest.approx(m["fabric_capex_usd"], rel=1e-12)
    assert grad.metrics["step_time_s"] <= m["step_time_s"]  # at least as good as the scenario


def test_non_dominated_front():
    a = [1.0, 2.0, 3.0, 2.5, 1.0]
    b = [5.0, 3.0, 1.0, 3.5, 6.0]
    assert optimize.non_dominated(a, b).tolist() == [0, 1, 2]


# ---------------------------------------------------------------- sensitivity
OUTPUTS = ("step_time_s",)  # what the CLI differentiates by default (shared compilation)


@pytest.fixture(scope="module")
def elasticities():
    return optimize.elasticities(SCN, OUTPUTS)


_log_outputs = jax.jit(lambda scn: jnp.stack([jnp.log(step.outputs(step.estimate(scn))[o])
                                               for o in OUTPUTS]))


def _logs(moved: dict) -> np.ndarray:
    """Log outputs at the default scenario with the `moved` knobs changed."""
    return np.asarray(_log_outputs(sc.set_knobs(SCN, moved)))


def _elasticities(moved: dict) -> dict:
    """{knob: elasticity of each output} there (the compilation `elasticities` shares)."""
    el = optimize.elasticities(sc.set_knobs(SCN, moved), OUTPUTS)
    return {k: np.asarray([el[o][k] for o in OUTPUTS]) for k in KNOBS}


def test_elasticities_are_finite_for_every_knob(elasticities):
    for out in OUTPUTS:
        assert set(elasticities[out]) == set(KNOBS)
        assert all(math.isfinite(v) for v in elasticities[out].values())
    e = elasticities["step_time_s"]
    assert e["system.scale_out_bandwidth_Bps"] < 0 < e["system.scale_out_latency_s"]
    assert e["system.matmul_efficiency"] < -0.5
    assert e["parallel.dp"] == e["system.gpus"] < 0
    assert e["reliability.gpu_mtbf_s"] == 0  # failures cost time to train, not step time
    assert elasticities["step_time_s"]["parallel.moe_node_limit"] == 0  # unset on a dense model


# Knobs whose exact model has a step at the default point: the layers of a
# pipeline stage, ceil(96 / (pp v)) v, are an exact integer there; t = 0 gives
# the envelope's slope (straight-through), checked below with the step removed.
STEPPED = ("parallel.pp", "parallel.interleave")


def _differences(moved: dict, knob: str, h: float = 1e-4):
    """(central, forward, backward) differences of the log outputs in log knob."""
    x = float({**{k: sc.get_knob(SCN, k) for k in KNOBS}, **moved}[knob])
    up = _logs({**moved, knob: x * math.exp(h)})
    down = _logs({**moved, knob: x * math.exp(-h)})
    here = _logs(moved)
    return (up - down) / (2 * h), (up - here) / h, (here - down) / h


@pytest.mark.parametrize("moved,corners", [
    ({}, {"parallel.tp", "parallel.cp", "system.scale_up_domain"}),
    ({"system.scale_up_domain": 16.0}, {"parallel.cp"}),
], ids=["default", "domain16"])
def test_elasticities_agree_with_central_finite_differences(elasticities, moved, corners):
    """Where the exact model is smooth (one-sided differences agree) the
    elasticity equals the central difference. The default point has corners:
    tp = 8 fills the 8-GPU domain exactly and cp = 1 sits on its clip, so
    there the elasticity lies between the one-sided slopes; with a 16-GPU
    domain every clip but cp's is strictly inside (cp = 1 is its group's size,
    the clip's upper bound, and cp is part of the data-parallel group)."""
    el = _elasticities(moved)
    found = set()
    for knob in KNOBS:
        if knob in STEPPED or knob == "parallel.dp":
            continue
        e = el[knob]
        if float(sc.get_knob(SCN, knob)) == 0:
            assert np.all(e == 0)
            continue
        central, forward, backward = _differences(moved, knob)
        if np.max(np.abs(forward - backward)) > 1e-3 * max(1.0, np.max(np.abs(central))):
            found.add(knob)
            lo, hi = np.minimum(forward, backward), np.maximum(forward, backward)
            # the differences' own truncation; at cp = 1 several kinks meet (its
            # clip, the ties of a one-rank group's algorithms) and AD takes one
            # side of each: 0.25% beyond the backward slope under NCCL's candidates
            slack = 5e-3 * np.abs(central) + 1e-6
            assert np.all((e >= lo - slack) & (e <= hi + slack)), knob
            continue
        np.testing.assert_allclose(e, central, rtol=1e-3, atol=1e-6, err_msg=knob)
    assert found == corners
    assert np.array_equal(np.asarray([elasticities[o]["parallel.tp"] for o in OUTPUTS]),
                          _elasticities({})["parallel.tp"])


def test_stepped_knobs_get_the_envelope_slope(elasticities, monkeypatch):
    """With ceil replaced by the identity (the envelope), central differences
    of the step time agree with the exact model's elasticities of pp and interleave."""
    from codesign.model import stage

    monkeypatch.setattr(stage, "smooth_ceil", lambda x, t=relax.EXACT: x)
    f = jax.jit(lambda v: jnp.log(step.step(*(lambda s: (s.model, s.plan, s.system))(
        sc.set_knobs(SCN, v))).step_time_s))
    for knob in STEPPED:
        x = float(sc.get_knob(SCN, knob))
        fd = (f({knob: jnp.asarray(x * math.exp(1e-4))})
              - f({knob: jnp.asarray(x * math.exp(-1e-4))})) / 2e-4
        assert elasticities["step_time_s"][knob] == pytest.approx(float(fd), rel=1e-3, abs=1e-6)


# ------------------------------------------------------------------------ CLI
def _cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _small_args():
    return ["--vary", ",".join(SMALL)] + [f"--bounds={k}={lo:g}:{hi:g}"
                                          for k, (lo, hi) in SMALL.items()]


def test_cli_optimize_json(capsys, small_runs):
    rc, out, _ = _cli(capsys, "optimize", "default", *_small_args(), "--starts", str(STARTS),
                      "--steps", str(STEPS), "--json")
    assert rc == 0
    r = json.loads(out)
    assert {"best", "objective", "feasible", "evaluations", "wall_s", "path"} <= set(r)
    assert r["best"] == small_runs[0].best and r["feasible"] is True


def test_cli_optimize_grid_json_and_text(capsys, small_runs):
    grid = ["--method", "grid", "--grid-points", str(POINTS)]
    rc, out, err = _cli(capsys, "optimize", "default", *_small_args(), *grid, "--json")
    assert rc == 0 and "grid [" in err  # the progress bar
    r = json.loads(out)
    assert r["grid_size"] == r["evaluations"] == 400
    assert r["objective"]["value"] == pytest.approx(small_runs[1].value)
    rc, out, _ = _cli(capsys, "optimize", "default", *_small_args(), *grid, "--no-progress")
    assert rc == 0 and "400 evaluations of a 400-point grid" in out


@pytest.mark.parametrize("argv,message", [
    (["--vary", "parallel.warp"], "knob 'parallel.warp' is unknown"),
    (["--vary", "parallel.tp", "--bounds", "parallel.tp=1-8"], "KNOB=LO:HI"),
    (["--vary", "system.scale_out_bandwidth_Bps", "--bounds",
      "system.scale_out_bandwidth_Bps=10GB:20GB/s"], "not a bandwidth"),
    (["--vary", "parallel.tp", "--grid-points", "1"], "--grid-points=1"),
    (["--vary", "parallel.tp", "--usd-per-gpu-hour", "0"], "--usd-per-gpu-hour=0"),
])
def test_cli_optimize_errors_are_one_line(capsys, argv, message):
    rc, out, err = _cli(capsys, "optimize", "default", *argv)
    assert rc == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_cli_budgets_are_exclusive(capsys):
    with pytest.raises(SystemExit) as e:
        main(["optimize", "--vary", "parallel.tp", "--budget-usd", "1", "--budget-w", "1"])
    assert e.value.code == 2


def test_cli_sensitivity(capsys, elasticities):
    rc, out, _ = _cli(capsys, "sensitivity", "default", "--json")
    assert rc == 0
    r = json.loads(out)
    assert r["elasticities"] == pytest.approx(elasticities["step_time_s"])
    magnitudes = [float(f"{abs(v):.9g}") for v in r["elasticities"].values()]
    assert magnitudes == sorted(magnitudes, reverse=True)  # largest first (to 9 digits)
    pairs = list(zip(magnitudes, r["elasticities"], strict=True))
    ties = [(a[1], b[1]) for a, b in zip(pairs, pairs[1:], strict=False) if a[0] == b[0]]
    assert ties and all(a < b for a, b in ties), ties  # e.g. hbm_Bps, hbm_efficiency: by name
    rc, out, _ = _cli(capsys, "sensitivity", "default", "--top", "3")
    lines = out.strip().splitlines()  # system, title, 3 knobs, the zeros omitted, collectives
    assert rc == 0 and len(lines) == 10 and "gives" in out and "omitted" in lines[5]
    assert lines[6].startswith("collectives: ") and lines[7].startswith("  tp all_reduce")
    assert out.startswith("system dgx-a100 (from scenario): A100-SXM4-80GB;")
    rc, out, _ = _cli(capsys, "sensitivity", "default", "--all", "--knob",
                      "system.scale_out_bandwidth_Bps", "--knob", "parallel.moe_node_limit")
    e = elasticities["step_time_s"]["system.scale_out_bandwidth_Bps"]  # 10% more: 1.1^e - 1
    assert rc == 0 and out.splitlines()[2].endswith(
        f"+10% scale-out bandwidth per accelerator gives {(1.1 ** e - 1) * 100:+.2f}% step time")
    assert out.splitlines()[3].endswith("moe node limit is 0 (unset): no local effect")
    rc, _, err = _cli(capsys, "sensitivity", "megatron-1t", "--output", "time_to_train_s")
    assert rc == 2 and "training.tokens" in err


def test_gradient_method_compiles_once_per_problem(monkeypatch):
    """The descent (its relaxed loss and gradient), the exact evaluation and the
    rule check are traced once per problem's knobs: not again across restarts
    (another seed), annealing stages or the polish (one executable each), nor
    for another objective or limit of the same parts (`Core.parts`: step time,
    tokens per second and a GPU count need the step alone); `Result.profile`
    counts the compiling."""
    import chex

    from codesign.optimize import _gradient, _model

    wrap = lambda fn: chex.assert_max_traces(fn, n=1)  # noqa: E731
    monkeypatch.setattr(_gradient, "relaxed_loss", wrap(_gradient.relaxed_loss))
    monkeypatch.setattr(_model, "_exact_point", wrap(_model._exact_point))
    monkeypatch.setattr(_gradient, "structural_point", wrap(_gradient.structural_point))
    # knobs no other test varies, so that nothing is compiled for them yet
    vary = {"parallel.tp": (1, 16), "parallel.pp": (1, 16),
            "system.scale_up_bandwidth_Bps": (100 * GB, 900 * GB)}
    p = optimize.problem(SCN, list(vary), vary)
    first = optimize.optimize(p, starts=STARTS, steps=STEPS)
    again = optimize.optimize(p.with_limits("tokens_per_s", max_gpus=1e6), starts=STARTS,
                              steps=STEPS, seed=1)
    assert first.profile["compile_s"] > 0 and again.profile["compile_s"] == 0
    from codesign import compiling

    assert not compiling._AHEAD  # each program started ahead (`compiling.ahead`) is one run
    assert again.wall_s < first.wall_s
    monkeypatch.undo()  # the grid compiles its own evaluation
    grid = optimize.grid_search(p, POINTS, progress=False)
    assert first.value <= grid.value * 1.01  # within 1% of the grid optimum


def test_a_stored_program_compiles_nothing_in_a_new_process(tmp_path, monkeypatch):
    """`compiling.run(..., store=...)` keeps an executable keyed by its arguments'
    structure: a later process (this one with its programs and JAX's caches
    forgotten) running it on other values of that structure reads it back and
    compiles nothing, with the same answer."""
    from codesign import compiling

    @jax.jit
    def program(core, x):
        return jnp.sum(core.lo * x) + core.objective

    core = optimize.problem(SCN, list(SMALL), SMALL).core
    monkeypatch.setattr(compiling, "_COMPILED", {})
    jax.clear_caches()  # compiled afresh here, not handed back from JAX's own caches
    _, compile_s = compiling.run(program, core, jnp.ones(len(SMALL)), store=tmp_path)
    stored = sorted(tmp_path.glob("*.exe"))
    assert compile_s > 0 and len(stored) == 1
    edited = optimize.problem(SCN, list(SMALL), {**SMALL, "parallel.tp": (1, 8)}).core
    monkeypatch.setattr(compiling, "_COMPILED", {})
    monkeypatch.setattr(compiling, "_compile", lambda *a, **k: pytest.fail("compiled again"))
    out, _ = compiling.run(program, edited, 2.0 * jnp.ones(len(SMALL)), store=tmp_path)
    assert sorted(tmp_path.glob("*.exe")) == stored
    assert float(out) == float(jnp.sum(edited.lo * 2.0) + edited.objective)


def test_the_gradient_method_runs_its_programs_through_the_store(small, monkeypatch):
    """`optimize(store=...)` hands its store to every program it runs (the descent,
    the structural rules, the exact evaluation), so a repeated or edited question
    in a new process reads them back (`compiling.run`, tested above)."""
    from codesign.optimize import _gradient

    seen, started = [], []
    run, ahead = _gradient._compiled_run, _gradient._ahead
    monkeypatch.setattr(_gradient, "_compiled_run", lambda jitted, *args, store=None: (
        seen.append((jitted, store)) or run(jitted, *args, store=None)))
    monkeypatch.setattr(_gradient, "_ahead", lambda jitted, *args, store=None: (
        started.append((jitted, store)) or ahead(jitted, *args, store=None)))
    optimize.optimize(small, starts=STARTS, steps=STEPS, store="/nowhere")
    programs = {_gradient._multistart, _gradient._structural_batch, _gradient.exact_batch}
    assert {j for j, _ in seen} == programs
    assert {s for _, s in seen} == {"/nowhere"}
    # each started at once (`compiling.ahead`), on the structure it then runs on: none
    # compiled again when run
    assert [j for j, _ in started] == [_gradient._multistart, _gradient._structural_batch,
                                       _gradient.exact_batch]
    assert {s for _, s in started} == {"/nowhere"}


def test_a_stored_program_that_fails_to_run_is_compiled_and_stored_again(tmp_path, monkeypatch):
    """An executable read back from the store whose first run fails (an XLA:CPU
    program the persistent cache served, stored without its kernels) is
    forgotten, compiled afresh and stored again; the answer is the program's."""
    from codesign import compiling

    program = jax.jit(lambda x: jnp.sum(x * 3.0))
    x = jnp.arange(4.0)
    compiling.run(program, x, store=tmp_path)
    (stored,) = tmp_path.glob("*.exe")
    monkeypatch.setattr(compiling, "_COMPILED", {})

    def broken(*args):
        raise RuntimeError("Function not found")

    monkeypatch.setattr(compiling, "load_record",
                        lambda path, args, prove=True: broken if path.exists() else None)
    mtime = stored.stat().st_mtime_ns
    out, compile_s = compiling.run(program, x, store=tmp_path)
    assert float(out) == 18.0 and compile_s > 0
    assert stored.exists() and stored.stat().st_mtime_ns != mtime  # stored anew
