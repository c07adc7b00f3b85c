"""Co-design with the chip (docs/next-chip.md): the `chip.*` knobs of a scenario
with a [chip] table, the chip-priced GPU-hour and facility power the limits
read, the design's physical domain as constraints, `chip.node` as a
categorical knob. Small problems on megatron-8.3b, one compilation each."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import chip, optimize
from codesign import scenario as sc
from codesign.model import economics, relax, step
from codesign.optimize import _categorical, _model, _problem

CHIP = ["chip.part=H100 SXM5", "training.tokens=1e11"]
FLOAT_CHIP_KNOBS = sc.CHIP_KNOBS


@pytest.fixture(scope="module")
def scn():
    return sc.load("megatron-8.3b", CHIP)


@pytest.fixture(scope="module")
def prob(scn):
    bounds = {"chip.peak_flops_per_s": (5e14, 1.2e15), "chip.hbm_stacks": (3, 6),
              "parallel.tp": (2, 8)}
    return optimize.problem(scn, list(bounds), bounds, "time_to_train", budget_w=4e5)


def test_chip_keys_are_knobs_only_with_a_chip_table():
    plain = sc.load("megatron-8.3b")
    assert plain.chip is None
    with pytest.raises(ValueError, match=r"chip\.hbm_stacks is a knob of a scenario with a "
                                         r"\[chip\] table"):
        sc.get_knob(plain, "chip.hbm_stacks")
    # a problem without a chip design prices as before: no ownership in its core
    p = optimize.problem(plain, ["parallel.tp"], {"parallel.tp": (1, 8)})
    assert p.core.ownership is None


def test_set_knobs_sets_the_design_and_the_system_follows(scn):
    s = sc.set_knobs(scn, {"chip.hbm_stacks": 6.0, "system.scale_out_bandwidth_Bps": 1e11})
    design = dataclasses.replace(scn.chip, hbm_stacks=6.0, nic_Bps=1e11)
    assert float(s.chip.nic_Bps) == pytest.approx(1e11)  # the alias: the NIC is scale-out
    want = chip.to_system(design, scn.system)
    for got, ref in ((s.system.chip.hbm_bytes, want.chip.hbm_bytes),
                     (s.system.chip.hbm_Bps, want.chip.hbm_Bps),
                     (s.system.scale_out.bandwidth_Bps, 1e11),
                     (s.system.chip.tdp_w, chip.board_power_w(design))):
        assert float(got) == pytest.approx(float(ref), rel=1e-6)
    # 6 stacks of 8-high 2 GB HBM3 dies (H100's generation and height)
    assert float(s.system.chip.hbm_bytes) == pytest.approx(6 * 8 * 2e9, rel=1e-6)
    with pytest.raises(ValueError, match=r"system\.hbm_Bps follows from the \[chip\] table"):
        sc.set_knobs(scn, {"system.hbm_Bps": 1e12})


def test_bounds_outside_the_domain_name_the_key(scn):
    with pytest.raises(ValueError, match=r"bounds chip\.hbm_stacks=1:80: chip\.hbm_stacks "
                                         r"must be"):
        optimize.problem(scn, ["chip.hbm_stacks"], {"chip.hbm_stacks": (1, 80)})
    with pytest.raises(ValueError, match=r"chip\.hbm_stacks=2\.5:6 must be integers"):
        optimize.problem(scn, ["chip.hbm_stacks"], {"chip.hbm_stacks": (2.5, 6)})


def test_power_and_cost_are_the_designs(prob):
    """budget_w's power: board power at the step's hardware FLOP utilisation x
    GPUs x PUE + the fabric's; cost: GPU-hours at the design's own GPU-hour."""
    x = prob.here
    m = optimize.point_metrics(prob, x)
    s = _problem.apply(prob.core, jnp.asarray(x))
    own = chip.Ownership()
    a = chip.to_assumptions(s.chip, prob.core.assumptions, own)
    est = step.estimate(s, relax.EXACT, a, check=False)
    out = step.outputs(est)
    board = chip.board_power_w(s.chip, float(out["hfu_gemm_peak"]))
    want = (float(board) * float(s.system.gpus) * float(own.pue)
            + float(economics.fabric_power_w(s.system, est.fabric, a)))
    assert m["power_w"] == pytest.approx(want, rel=1e-5)
    assert m["cost_to_train_usd"] == pytest.approx(float(economics.cost_to_train_usd(
        out["gpu_hours"], est.fabric_capex_usd, out["time_to_train_s"], a)), rel=1e-5)
    assert float(a.usd_per_gpu_hour) == pytest.approx(float(chip.usd_per_gpu_hour(s.chip, own)))


def test_physical_domain_is_a_constraint(prob):
    """A 1.2 PFLOP/s design on one die is over the reticle (H100's 0.99 PFLOP/s
    take 821 mm^2 of 858): infeasible though every knob is in its bounds; the
    scenario's own design is feasible."""
    big = np.array([1.2e15, 5.0, 8.0])
    ex = _model.evaluate(prob, np.stack([prob.here, big]))
    over = eqx.tree_at(lambda d: d.peak_flops_per_s, prob.scenario.chip, 1.2e15)  # unchecked
    die = float(chip.area_mm2(over))
    assert die > 858.0
    assert bool(ex.structural[1]) and not bool(ex.feasible[1])
    assert bool(ex.feasible[0])


def test_gradients_finite_on_every_chip_knob_and_match_differences(scn):
    """The relaxed loss's gradient on every float chip knob is finite; on HBM
    stacks (relaxed: a float) it matches a central difference."""
    names = list(FLOAT_CHIP_KNOBS)
    here = {n: float(sc.get_knob(scn, n)) for n in names}
    bounds = {n: (v / 1.5, v * 1.5) for n, v in here.items() if n not in
              ("chip.hbm_stacks", "chip.dies")}
    bounds["chip.hbm_stacks"] = (3.0, 8.0)
    bounds["chip.dies"] = (1.0, 2.0)
    bounds["chip.gross_margin"] = (0.1, 0.9)
    bounds["chip.design_nre_usd"] = (1e8, 1e9)
    bounds["chip.hbm_price_factor"] = (0.5, 2.0)
    bounds["chip.hbm_pin_bits_per_s"] = (3e9, 6e9)
    p = optimize.problem(scn, names, bounds, "time_to_train", budget_usd=1e7)
    z = jnp.asarray(_problem.to_box(p, p.here), dtype=float)
    t = relax.Relaxed(0.05)
    loss = jax.jit(lambda z: _model.relaxed_loss(z, p.core, t, 10.0))
    g = jax.jit(jax.grad(lambda z: _model.relaxed_loss(z, p.core, t, 10.0)))(z)
    assert np.all(np.isfinite(np.asarray(g))), dict(zip(names, np.asarray(g), strict=True))
    i, h = names.index("chip.hbm_stacks"), 1e-3
    e = jnp.zeros_like(z).at[i].set(h)
    fd = (float(loss(z + e)) - float(loss(z - e))) / (2 * h)
    assert float(g[i]) == pytest.approx(fd, rel=2e-2, abs=1e-4)


def test_eager_equals_jit(prob):
    s = _problem.apply(prob.core, jnp.asarray(prob.here))
    f = lambda s: _model.metrics(s, prob.core.assumptions, relax.EXACT,  # noqa: E731
                                 prob.core.ownership)
    eager, jitted = f(s), jax.jit(f)(s)
    for k in ("power_w", "cost_to_train_usd", "time_to_train_s"):
        assert float(eager[k]) == pytest.approx(float(jitted[k]), rel=1e-6), k


def test_grid_keeps_the_budget_and_the_physical_domain(prob):
    """The grid's best is within 4e5 W and its die within the reticle (benchmarks/search.py
    sets the gradient method beside the grid on the 1.2e7-point problem)."""
    grid = optimize.grid_search(prob, grid_points=4)
    assert grid.feasible and grid.metrics["power_w"] <= 4e5 * (1 + 1e-9)
    s = _problem.apply(prob.core, jnp.asarray([grid.best[n] for n in prob.names]))
    assert float(chip.area_mm2(s.chip) / s.chip.dies) <= 858.0


def test_chip_node_is_categorical():
    assert _categorical.choices_of("chip.node") == tuple(chip.NODES)
    assert _categorical.parse_choice("chip.hbm", "hbm4") == "hbm4"
    with pytest.raises(ValueError, match=r"chip\.node='n2' is not one of"):
        _categorical.parse_choice("chip.node", "n2")
    s = sc.load("megatron-8.3b", [*CHIP, "chip.node=n3"])
    assert optimize.scenario_choice(s, "chip.node") == "n3"


def test_the_report_shows_the_chips_area_and_cost_and_sensitivity_skips_its_derived_keys():
    """A scenario with a [chip] table: the report's Chip section states the
    design's area, cost to make and price by kind, as `codesign.chip` computes
    them; the system keys the design sets are not knobs of it (sensitivity and
    report iterate `scenario.knobs`), the ones that stand for a chip knob are."""
    from codesign.cli import report as cli_report

    scn = sc.load("llama3-405b", ["chip.hbm_stacks=6"])
    knobs = sc.knobs(scn)
    assert "system.hbm_Bps" not in knobs and "system.scale_out_bandwidth_Bps" in knobs
    assert "system.hbm_Bps" in sc.knobs(sc.load("llama3-405b"))
    _, body = cli_report._chip_section(scn, {"hfu": 0.4})
    assert f"${float(chip.cost_usd(scn.chip)):,.0f}" in body
    assert f"${float(chip.price_usd(scn.chip)):,.0f}" in body
    assert f"{float(chip.area_mm2(scn.chip)):,.0f} mm^2" in body
    assert f"{float(chip.board_power_w(scn.chip, mfu=0.4)):,.0f} W" in body
