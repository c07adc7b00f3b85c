"""Stragglers, failures and checkpoints against closed forms, Monte Carlo and Llama 3."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign.model import reliability
from codesign.model.reliability import Reliability
from codesign.units import TB, day


def test_p_step_delayed_reproduces_the_seed():
    # q = 1%, 100 participants -> ~63%; 1,000 -> essentially all
    assert float(reliability.p_step_delayed(0.01, 100)) == pytest.approx(1 - 0.99**100, rel=1e-12)
    assert float(reliability.p_step_delayed(0.01, 100)) == pytest.approx(0.634, abs=5e-4)
    assert float(reliability.p_step_delayed(0.01, 1000)) == pytest.approx(0.99996, abs=5e-6)
    assert float(reliability.p_step_delayed(0.3, 1)) == pytest.approx(0.3, rel=1e-12)
    assert float(reliability.p_step_delayed(0.0, 1e6)) == 0.0
    assert float(reliability.p_step_delayed(1.0, 2.0)) == pytest.approx(1.0, abs=1e-12)
    # tiny q: the stable form keeps p q (1 - (1-q)^p rounds to 0 in 1 - (1-q)**p)
    assert float(reliability.p_step_delayed(1e-18, 10)) == pytest.approx(1e-17, rel=1e-6)
    g = jax.grad(reliability.p_step_delayed)(1.0, 2.0)
    assert np.isfinite(float(g))


def test_quantile_interpolation_is_jnp_interp():
    """The quantile's first guess interpolates log F^p on the grid by comparison
    (no search loop): the same numbers as jnp.interp, flat stretches and points
    beyond either end included."""
    xp = jnp.asarray(np.concatenate([np.linspace(-50.0, -1.0, 40), [-1.0, -1.0],
                                     np.linspace(-0.5, 0.0, 30), [0.0]]))
    fp = jnp.asarray(np.linspace(-3.0, 2.0, xp.size))
    x = jnp.asarray([-60.0, -50.0, -7.3, -1.0, -0.75, -1e-9, 0.0, 0.5])
    got = reliability._interp(x, xp, fp)
    assert np.array_equal(np.asarray(got), np.asarray(jnp.interp(x, xp, fp)))


def test_llama3_interruption_rate_defaults():
    assert reliability.LLAMA3_GPU_MTBF_S == pytest.approx(16_384 * 54 * day / 419)
    rel = reliability.Reliability()
    # the job's MTBF is the GPU share divided by the count: 54 days / 419
    assert float(reliability.job_mtbf_s(16_384, rel)) == pytest.approx(54 * day / 419, rel=1e-12)
    assert float(reliability.job_mtbf_s(1_024, rel)) == pytest.approx(16 * 54 * day / 419,
                                                                      rel=1e-12)
    # component view: rates add up to the total
    comp = reliability.component_mtbf_s(16_384, rel)
    assert sum(1 / float(v) for v in comp.values()) == pytest.approx(
        1 / float(reliability.job_mtbf_s(16_384, rel)), rel=1e-9)
    # GPU issues 58.7% (GPU + HBM), 78% hardware (all but software)
    assert float(rel.share_gpu + rel.share_hbm) == pytest.approx(0.587)
    assert 1 - float(rel.share_software) == pytest.approx(0.78)


def test_llama3_like_run_is_near_90_percent_effective():
    # 16,384 H100s, a 405B checkpoint with bf16 weights + fp32 master + Adam moments
    # (14 B/param = 5.7 TB), 10 s steps: Llama 3 reports "higher than 90%"
    rep = reliability.report(10.0, 16_384, 405e9 * 14, reliability.Reliability())
    assert float(rep.mtbf_s) == pytest.approx(11_135, rel=1e-3)
    assert float(rep.checkpoint_write_s) == pytest.approx(5.67 * TB / 2e12, rel=1e-9)
    assert 0.90 < float(rep.effective_training_time_fraction) < 0.94
    # first-order check: 1 - delta/tau - tau/2M - R/M
    d, m, tau = 2.835, float(rep.mtbf_s), float(rep.checkpoint_interval_s)
    first = 1 - d / tau - tau / (2 * m) - 600 / m
    assert float(rep.effective_training_time_fraction) == pytest.approx(first, abs=3e-3)
    # goodput additionally pays the straggler tax of the default 1% jitter
    assert float(rep.goodput) == pytest.approx(
        float(rep.effective_training_time_fraction) * 10 / float(rep.expected_step_time_s))
    assert float(rep.time_to_train_s(1e6)) == pytest.approx(1e6 / float(rep.goodput))


def test_report_does_not_recompile_for_new_values():
    reliability.report(10.0, 16_384, 5e12, reliability.Reliability())
    before = reliability._report._cache_size()
    reliability.report(3, 1000, 1e11, Reliability(straggler_q=0.1, restart_s=60), participants=64)
    assert reliability._report._cache_size() == before


def test_young_is_the_minimiser_of_first_order_waste():
    taus = jnp.logspace(0, 5, 400_001)
    for delta, mtbf in [(3.0, 1.1e4), (60.0, 3.6e3), (600.0, 8.64e4)]:
        best = float(taus[jnp.argmin(reliability.first_order_waste(taus, delta, mtbf))])
        young = float(reliability.young_interval_s(delta, mtbf))
        assert young == pytest.approx(math.sqrt(2 * delta * mtbf), rel=1e-12)
        assert best == pytest.approx(young, rel=1e-4)


def test_daly_formula_and_brute_force_optimum():
    delta, mtbf = 100.0, 1e4
    r = delta / (2 * mtbf)
    want = math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(r) / 3 + r / 9) - delta
    assert float(reliability.daly_interval_s(delta, mtbf)) == pytest.approx(want, rel=1e-12)
    assert float(reliability.daly_interval_s(3 * mtbf, mtbf)) == mtbf  # delta >= 2M: tau = M
    taus = jnp.logspace(-1, 6, 400_001)
    for delta in (1.0, 10.0, 100.0, 1000.0):
        wall = 1 / reliability.effective_training_time_fraction(taus, delta, mtbf, 300.0)
        best = float(taus[jnp.argmin(wall)])
        assert float(reliability.daly_interval_s(delta, mtbf)) == pytest.approx(best, rel=1e-3)
    # Daly beats Young on the exact model (strictly, at delta / M = 0.1)
    fraction = reliability.effective_training_time_fraction
    daly = fraction(reliability.daly_interval_s(1e3, mtbf), 1e3, mtbf, 0.0)
    young = fraction(reliability.young_interval_s(1e3, mtbf), 1e3, mtbf, 0.0)
    assert float(daly) > float(young)


def test_interval_and_write_time_overrides():
    rel = reliability.Reliability(checkpoint_write_s=30.0, checkpoint_interval_s=1800.0)
    rep = reliability.report(5.0, 4096, 1e12, rel)
    assert float(rep.checkpoint_write_s) == 30.0
    assert float(rep.checkpoint_interval_s) == 1800.0
    assert float(reliability.checkpoint_write_time_s(1e12, Reliability(storage_Bps=1e10))) == 100.0


def test_spares_and_dual_homing():
    base = reliability.Reliability()
    no_spares = reliability.Reliability(spare_fraction=0.0)
    assert float(reliability.restart_downtime_s(base)) == 600.0
    assert float(reliability.restart_downtime_s(no_spares)) == pytest.approx(600 + 0.78 * 3600)
    dual = reliability.Reliability(dual_homed=1.0)
    ratio = float(reliability.job_mtbf_s(8192, dual) / reliability.job_mtbf_s(8192, base))
    assert ratio == pytest.approx(1 / (1 - 0.5 * 0.084))
    e = [float(reliability.report(10.0, 16_384, 5e12, r).effective_training_time_fraction)
         for r in (no_spares, base, dual)]
    assert e[0] < e[1] < e[2]


CASES = [  # (q, slowdown, sigma, participants)
    (0.01, 2.0, 0.01, 100),
    (0.0, 2.0, 0.05, 1000),
    (0.05, 1.2, 0.1, 10),
]


@pytest.mark.parametrize("q,s,sigma,p", CASES)
def test_straggler_stats_match_monte_carlo(q, s, sigma, p):
    rel = reliability.Reliability(straggler_q=q, straggler_slowdown=s, straggler_sigma=sigma)
    mean, p50, p99 = (float(x) for x in reliability.step_time_stats(1.0, float(p), rel))
    mc = np.asarray(reliability.straggler_monte_carlo(jax.random.key(7), p, rel, 4000, width=1000))
    se = mc.std() / math.sqrt(mc.size)
    assert mean == pytest.approx(mc.mean(), abs=4 * se + 1e-4)
    assert p50 == pytest.approx(np.quantile(mc, 0.5), rel=0.01)
    assert p99 == pytest.approx(np.quantile(mc, 0.99), rel=0.02)


def test_straggler_closed_forms():
    # no slow participants, no jitter: exactly the base time
    rel = reliability.Reliability(straggler_sigma=0.0)
    mean, p50, p99 = (float(x) for x in reliability.step_time_stats(10.0, 1000.0, rel))
    assert mean == pytest.approx(10.0, rel=1e-4) and p50 == pytest.approx(10.0, rel=1e-4)
    # sigma -> 0 mixture: max is s with prob 1 - (1-q)^p, else 1
    rel = reliability.Reliability(straggler_q=0.01, straggler_slowdown=3.0, straggler_sigma=0.0)
    mean = float(reliability.step_time_stats(1.0, 100.0, rel)[0])
    assert mean == pytest.approx(1 + 2 * (1 - 0.99**100), rel=1e-4)
    # one participant, lognormal: E = exp(sigma^2 / 2), median 1
    rel = reliability.Reliability(straggler_sigma=0.2)
    mean, p50, p99 = (float(x) for x in reliability.step_time_stats(1.0, 1.0, rel))
    assert mean == pytest.approx(math.exp(0.02), rel=1e-5)
    assert p50 == pytest.approx(1.0, abs=1e-6)
    assert p99 == pytest.approx(math.exp(0.2 * 2.3263478740408408), rel=1e-5)
    # two participants, lognormal: P(max <= x) = Phi^2 -> median at Phi^-1(sqrt(.5))
    mean, p50, _ = (float(x) for x in reliability.step_time_stats(1.0, 2.0, rel))
    assert p50 == pytest.approx(math.exp(0.2 * 0.5449521356173604), rel=1e-5)


def test_expected_step_grows_with_cluster_size():
    rel = reliability.Reliability(straggler_q=0.001, straggler_slowdown=1.5)
    mean = [float(reliability.step_time_stats(1.0, n, rel)[0]) for n in (1, 10, 100, 1000, 10_000)]
    assert np.all(np.diff(mean) > 0)
    assert mean[-1] > 1.5  # at 10K, almost every step has a slow participant


KNOBS = ("straggler_q", "participants", "gpu_mtbf_s", "storage_Bps", "checkpoint_interval_s",
         "restart_s", "straggler_sigma", "straggler_slowdown", "checkpoint_bytes", "gpus")
X0 = np.array([0.002, 1000.0, 1.8e8, 2e12, 900.0, 600.0, 0.02, 1.5, 5e12, 16_384.0])


def _outputs(x):
    # the Reliability is built from traced values: its checks are skipped under jit
    rel = reliability.Reliability(straggler_q=x[0], gpu_mtbf_s=x[2], storage_Bps=x[3],
                                  checkpoint_interval_s=x[4], restart_s=x[5], straggler_sigma=x[6],
                                  straggler_slowdown=x[7])
    rep = reliability.report(10.0, x[9], x[8], rel, participants=x[1])
    return jnp.stack([jnp.log(rep.goodput), jnp.log(rep.expected_step_time_s),
                      jnp.log(rep.step_time_p99_s), rep.p_step_delayed])


_f = jax.jit(_outputs)
_jac = jax.jit(jax.jacrev(_outputs))


def test_gradients_match_central_differences():
    jac = np.asarray(_jac(jnp.asarray(X0)))
    for i, name in enumerate(KNOBS):
        h = 1e-4 * X0[i]
        up, down = X0.copy(), X0.copy()
        up[i] += h
        down[i] -= h
        fd = (np.asarray(_f(jnp.asarray(up))) - np.asarray(_f(jnp.asarray(down)))) / (2 * h)
        np.testing.assert_allclose(jac[:, i], fd, rtol=2e-3, atol=1e-9 / X0[i], err_msg=name)
    # the knobs move the model the right way
    assert jac[0, 0] < 0 and jac[1, 0] > 0 and jac[3, 0] > 0  # q: less goodput, longer steps
    assert jac[0, 2] > 0 and jac[0, 3] > 0  # a longer MTBF and faster storage help
    assert jac[0, 5] < 0 and jac[0, 9] < 0  # a slower restart and a bigger job hurt
    assert jac[1, 1] > 0  # more participants, longer expected step


@pytest.mark.parametrize("edge", [
    {"straggler_q": 0.0, "straggler_sigma": 0.0, "participants": 1.0, "checkpoint_bytes": 0.0},
    {"straggler_q": 1.0, "straggler_sigma": 0.0, "gpus": 1.0, "checkpoint_interval_s": 1e-3},
    {"straggler_q": 0.5, "straggler_sigma": 0.5, "participants": 1e6, "gpus": 1e6},
])
def test_edges_are_finite_with_finite_gradients(edge):
    x = X0.copy()
    for k, v in edge.items():
        x[KNOBS.index(k)] = v
    assert np.all(np.isfinite(np.asarray(_f(jnp.asarray(x)))))
    assert np.all(np.isfinite(np.asarray(_jac(jnp.asarray(x)))))


@pytest.mark.parametrize("field,value", [
    ("straggler_q", 1.5), ("straggler_q", -0.1), ("gpu_mtbf_s", -1.0), ("gpu_mtbf_s", 0.0),
    ("restart_s", -5.0), ("checkpoint_interval_s", -1.0), ("checkpoint_write_s", -2.0),
    ("storage_Bps", 0.0), ("straggler_slowdown", 0.5), ("straggler_sigma", -0.1),
    ("spare_fraction", 2.0), ("share_gpu", -0.1),
])
def test_bad_inputs_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"reliability\.{field}={value:g} "):
        reliability.Reliability(**{field: value})


def test_shares_must_sum_to_one():
    with pytest.raises(ValueError, match="must sum to 1"):
        reliability.Reliability(share_software=0.5)


def test_cli_llama3_scenario(capsys):
    from codesign.cli import main

    assert main(["reliability", "llama3-405b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("expected_step_time_s", "step_time_p50_s", "step_time_p99_s", "p_step_delayed",
                "mtbf_s", "checkpoint_write_s", "checkpoint_interval_s", "goodput",
                "effective_training_time_fraction", "time_to_train_s", "component_mtbf_s"):
        assert key in out
    assert out["gpus"] == 16_384
    assert out["mtbf_s"] == pytest.approx(54 * day / 419, rel=1e-9)
    assert 0.90 < out["effective_training_time_fraction"] < 0.94
    assert out["step_time_p50_s"] <= out["step_time_p99_s"]
    assert out["expected_step_time_s"] > out["step_time_s"]  # the 1% jitter over 16K GPUs
    assert out["p_step_delayed"] == 0.0  # q = 0 by default


def test_cli_rejects_bad_reliability(capsys):
    from codesign.cli import main

    assert main(["reliability", "default", "--set", "reliability.straggler_q=1.5"]) == 2
    err = capsys.readouterr().err
    assert "reliability.straggler_q=1.5 must be a number in [0, 1]" in err
    assert "Traceback" not in err
    assert main(["reliability", "default", "--set", "reliability.checkpoint_interval_s=-1"]) == 2
    err = capsys.readouterr().err
    assert "reliability.checkpoint_interval_s=-1 must be a number in [0, 1e9]" in err
