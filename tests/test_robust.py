"""Robust co-design (`optimize.robust`): the uncertainty model, the statistic
over common samples, the gradient method and the grid on it, the regret, and
`codesign optimize --robust`.

One problem throughout (so one set of compilations): Llama 3 405B with the
data-parallel width varied (dp 16-2048, 2,048-262,144 GPUs), time to train.
Past ~65k GPUs the job's MTBF falls to tens of minutes against 10-minute
restarts, and the failure waste is convex in the failure rate: nominally
dp 1024 is fastest, at the 0.9-quantile over the uncertain constants dp 512.
"""

import json

import numpy as np
import pytest

from codesign import compiling, optimize, uncertainty
from codesign import scenario as sc
from codesign.cli import main
from codesign.optimize import _robust

SCN = sc.load("llama3-405b", ["training.tokens=1.5e13"])
FAMILY = "H100"
BOUNDS = {"parallel.dp": (16, 2048)}
SAMPLES = 32  # points x samples fill the exact chunks of `evaluate` and the gradient alike


@pytest.fixture(scope="module")
def prob():
    return optimize.problem(SCN, list(BOUNDS), BOUNDS, "time_to_train")


@pytest.fixture(scope="module")
def q90(prob):
    return optimize.robust(prob, FAMILY, samples=SAMPLES, quantile=0.9)


@pytest.fixture(scope="module")
def grid_runs(prob, q90):
    return optimize.robust_search(prob, q90, "grid", progress=False)


def test_the_uncertainty_model_defaults_and_checks():
    model = optimize.uncertainty_sigmas(SCN, FAMILY)
    assert set(model) == set(optimize.DEFAULT_SIGMAS)
    sigma, source = model["system.matmul_efficiency"]
    r = uncertainty.ratio_interval(FAMILY)  # validate's 68% interval: exp(+-sigma)
    assert sigma == pytest.approx(np.log(r.hi / r.lo) / 2, rel=1e-12)
    assert f"{r.rows} H100 rows" in source
    assert "every family" in optimize.uncertainty_sigmas(SCN, "B200")[
        "system.matmul_efficiency"][1]
    assert optimize.uncertainty_sigmas(SCN, FAMILY, {"system.hbm_efficiency": 0.3})[
        "system.hbm_efficiency"] == (0.3, "given")
    for given, message in (({"parallel.tp": 0.1}, "not a continuous key"),
                           ({"system.foo": 0.1}, "not a continuous key"),
                           ({"system.hbm_efficiency": -1}, "must be a sigma")):
        with pytest.raises(ValueError, match=message):
            optimize.uncertainty_sigmas(SCN, FAMILY, given)
    # draws: log-normal of median 1 with the sigma asked, one stream per constant
    sig = {"system.matmul_efficiency": 0.2, "reliability.gpu_mtbf_s": 0.5}
    f = _robust.factors(sig, 4096, 0)
    assert np.std(np.log(f), axis=0) == pytest.approx([0.2, 0.5], rel=0.05)
    assert np.array_equal(_robust.factors({"reliability.gpu_mtbf_s": 0.5}, 4096, 0)[:, 0],
                          f[:, 1])
    # Harrell-Davis weights sum to 1 and centre on the quantile's rank
    w = _robust.quantile_weights(64, 0.9)
    assert w.sum() == pytest.approx(1.0) and np.argmax(w) in (56, 57, 58)


def test_an_efficiency_factor_is_clipped_to_its_domain():
    f = np.array([4.0, 0.5])
    scn = optimize._model.perturbed(SCN, ("system.matmul_efficiency", "reliability.gpu_mtbf_s"),
                                    f)
    assert float(sc.get_knob(scn, "system.matmul_efficiency")) == 1.0
    assert float(scn.reliability.gpu_mtbf_s) == float(SCN.reliability.gpu_mtbf_s) / 2


def test_zero_spread_is_the_nominal_model(prob):
    """Every factor exactly 1: the nominal metrics to the last bits (the program
    vmapped over the samples is compiled apart, and XLA rounds it its own
    way: a few ulps), the same feasibility and the same optimum."""
    zero = optimize.robust(prob, FAMILY, {k: 0.0 for k in optimize.DEFAULT_SIGMAS},
                           samples=SAMPLES)
    assert np.all(np.asarray(zero.core.factors) == 1.0)
    x = optimize.grid_axes(prob)[0][:, None]
    nominal, robust = optimize.evaluate(prob, x), optimize.evaluate(zero, x)
    for k, v in nominal.metrics.items():
        np.testing.assert_allclose(robust.metrics[k], v, rtol=4 * np.finfo(float).eps,
                                   atol=0, err_msg=k)
    assert np.array_equal(nominal.feasible, robust.feasible)
    assert np.argmin(robust.objective) == np.argmin(nominal.objective)


def test_the_robust_design_differs_and_never_loses_on_the_samples(prob, q90, grid_runs):
    nominal, robust, cmp = grid_runs
    assert nominal.best == {"parallel.dp": 1024.0} and robust.best == {"parallel.dp": 512.0}
    assert robust.evaluations == nominal.evaluations * SAMPLES  # each point on every sample
    assert cmp["robust_design"]["robust"] == pytest.approx(robust.value, rel=1e-12)
    assert cmp["nominal_design"]["nominal"] == pytest.approx(nominal.value, rel=1e-12)
    assert cmp["regret"] > 0.05 and cmp["price"] > 0  # the grid holds both designs
    # on the same samples every grid point is at least the robust optimum's statistic
    every = optimize.evaluate(q90, optimize.grid_axes(prob)[0][:, None])
    assert every.objective.min() == pytest.approx(robust.value, rel=1e-12)
    # the mean: a smaller shift (the quantile weighs the short-MTBF samples)
    mean = optimize.robust(prob, FAMILY, samples=SAMPLES)
    at = optimize.evaluate(mean, np.array([[512.0], [1024.0]])).objective
    assert 0 < (at[1] - at[0]) / at[0] < cmp["regret"]


def test_the_gradient_method_and_the_streamed_grid_find_the_robust_optimum(q90, grid_runs):
    nominal, robust, _ = grid_runs
    r = optimize.optimize(q90, starts=4, steps=20)
    assert r.best == robust.best and r.value == pytest.approx(robust.value, rel=1e-12)
    assert not compiling._AHEAD  # the programs started ahead are those run (S points a chunk)
    assert r.evaluations > 4 * 20 * SAMPLES
    # given the nominal optimum, it is among the candidates (path: no start descended to it)
    r = optimize.optimize(q90, starts=4, steps=20, include=[list(nominal.best.values())])
    assert r.best == robust.best
    streamed = optimize.grid_search(q90, stream=True)  # each block vmaps the samples too
    assert streamed.best == robust.best
    assert streamed.value == pytest.approx(robust.value, rel=1e-12)


def test_optimize_robust_command(capsys):
    args = ["optimize", "llama3-405b", "--set", "training.tokens=1.5e13", "--vary",
            "parallel.dp", "--bounds", "parallel.dp=16:2048", "--objective", "time_to_train",
            "--method", "grid", "--no-progress", "--quantile", "0.9", "--samples", str(SAMPLES)]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rob = out["robust"]
    assert out["best"] == {"parallel.dp": 512.0} and rob["statistic"] == "quantile"
    assert rob["nominal_design"]["knobs"] == {"parallel.dp": 1024.0}
    assert rob["regret"] > 0.05 and rob["samples"] == SAMPLES
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "grid: 0.9-quantile time_to_train over the samples (min)" in text
    assert "regret of the nominal design on the samples: +" in text
    for bad, message in ((["--quantile", "1"], "--quantile=1 must be in (0, 1)"),
                         (["--samples", "0"], "--samples=0 must be in"),
                         (["--uncertainty", "system.hbm_efficiency"], "must look like KEY=SIGMA"),
                         (["--uncertainty", "parallel.tp=0.1"],
                          "--uncertainty parallel.tp: not a continuous key")):
        assert main([*args, *bad]) == 2
        assert message in capsys.readouterr().err
