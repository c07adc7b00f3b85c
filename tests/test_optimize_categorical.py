"""Categorical knobs in `codesign optimize --vary` (`optimize.categorical_search`):
both methods find the best of an explicit enumeration with `codesign estimate
--set` at every combination, `--top` lists distinct designs with their
choices, and what cannot be answered is one line (exit 2: a bad choice;
exit 3: no combination feasible)."""

import contextlib
import io
import itertools
import json

import numpy as np
import pytest

from codesign import optimize
from codesign import scenario as sc
from codesign.cli import main
from codesign.cli.optimize import parse_vary

# the small problem: the default scenario, ZeRO 0 or 1, selective or full
# recompute, and tp over its admissible values in [4, 16] (4, 8, 16)
ZERO, RECOMPUTE, TP = (0, 1), ("selective", "full"), (4.0, 8.0, 16.0)


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def explicit() -> dict:
    """{(zero, recompute, tp): step time, None where the plan does not fit}:
    `codesign estimate --set` at every design of the small problem."""
    out = {}
    for zero, recompute, tp in itertools.product(ZERO, RECOMPUTE, TP):
        with contextlib.redirect_stdout(io.StringIO()) as text:
            rc = main(["estimate", "--json", "--set", f"parallel.zero={zero}", "--set",
                       f"training.recompute={recompute}", "--set", f"parallel.tp={tp:g}"])
        assert rc == 0
        d = json.loads(text.getvalue())
        out[zero, recompute, tp] = d["step_time_s"] if d["fits_memory"] else None
    return out


def _design(knobs: dict) -> tuple:
    return (knobs["parallel.zero"], knobs["training.recompute"], knobs["parallel.tp"])


# the gradient method compiles its descent once per combination (~10 s on a CPU
# core): it solves two of them, the grid all four
@pytest.mark.parametrize("method, recompute", [("grid", RECOMPUTE), ("gradient", RECOMPUTE[:1])])
def test_both_methods_find_the_best_of_the_explicit_enumeration(explicit, capsys, method,
                                                                 recompute):
    feasible = {k: v for k, v in explicit.items() if v is not None and k[1] in recompute}
    assert 0 < len(feasible) < len(explicit)  # the memory limit bites somewhere
    best = min(feasible, key=feasible.get)
    extra = ["--starts", "2", "--steps", "10"] if method == "gradient" else []
    rc, text, err = _run(capsys, "optimize", "--vary", f"parallel.zero=0|1,training.recompute="
                         f"{'|'.join(recompute)},parallel.tp", "--bounds", "parallel.tp=4:16",
                         "--method", method, "--top", "3", "--json", "--no-progress", *extra)
    assert rc == 0, err
    r = json.loads(text)
    assert _design(r["best"]) == best
    assert r["objective"]["value"] == pytest.approx(feasible[best], rel=1e-9)
    top = [_design(t["knobs"]) for t in r["top"]]
    assert len(set(top)) == len(top) == min(3, len(feasible))  # distinct, the choices in them
    if method == "grid":  # every design evaluated: the top is the enumeration's
        assert top == sorted(feasible, key=feasible.get)[:3]
    for t in r["top"]:
        assert t["objective"] == pytest.approx(feasible[_design(t["knobs"])], rel=1e-9)
    assert [c["choices"] for c in r["combinations"]] == [
        {"parallel.zero": z, "training.recompute": c} for z in ZERO for c in recompute]


def test_text_output_names_the_choices(capsys):
    rc, text, _ = _run(capsys, "optimize", "--vary", "parallel.zero=0|1", "--method", "grid",
                       "--top", "2", "--no-progress")
    assert rc == 0
    assert "  parallel.zero                                     1   (scenario: 0)" in text
    assert "2 combinations of parallel.zero: 2 solved, 2 feasible" in text
    assert "top 2 distinct feasible designs" in text


def test_parse_vary_keeps_commas_inside_choices():
    keys, given = parse_vary(["system.placement=tp,cp,ep,dp,pp|dp,tp,cp,ep,pp,parallel.tp",
                              "parallel.zero"])
    assert keys == ["system.placement", "parallel.tp", "parallel.zero"]
    assert given == {"system.placement": ["tp,cp,ep,dp,pp", "dp,tp,cp,ep,pp"]}


def test_every_categorical_key_has_its_choices():
    scn, labels = sc.load("deepseek-v3"), sc.labels("deepseek-v3")
    for key in optimize.CATEGORICAL:
        options = optimize.categorical_choices(key)
        assert len(options) >= 2, key
        assert optimize.scenario_choice(scn, key, labels) in options, key
        assert optimize.parse_choice(key, str(options[-1]).lower()) == options[-1]
    assert len(optimize.categorical_choices("system.placement")) == 120


@pytest.mark.parametrize("argv, message", [
    (["--vary", "training.recompute=none|most"],
     "training.recompute='most' is not one of none, selective, full"),
    (["--vary", "parallel.zero=4"], "parallel.zero=4 is not one of 0, 1, 2, 3"),
    (["--vary", "parallel.tp=1|2"], "only a categorical key takes choices"),
    (["--vary", "parallel.zero", "--bounds", "parallel.zero=0:3"],
     "bounds for parallel.zero, a choice, not a number"),
    (["--vary", "parallel.zero", "--robust"], "--robust takes no categorical knob"),
])
def test_bad_choices_are_one_line_exit_2(capsys, argv, message):
    rc, _, err = _run(capsys, "optimize", *argv)
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_no_valid_combination_exits_3(capsys):
    # the default's interleave 2 needs the interleaved schedule
    rc, text, err = _run(capsys, "optimize", "--vary", "parallel.schedule=gpipe|1f1b")
    assert rc == 3 and text == ""
    assert len(err.strip().splitlines()) == 1
    assert "none of the 2 combinations of parallel.schedule" in err
    assert "parallel.interleave=2 needs parallel.schedule='interleaved'" in err


def test_no_feasible_combination_exits_3(capsys):
    rc, _, err = _run(capsys, "optimize", "--vary", "parallel.zero=0|1", "--max-gpus", "8",
                      "--method", "grid", "--no-progress")
    assert rc == 3
    assert err.strip().splitlines()[-1].endswith("(exit code 3)")


def test_combinations_count_against_the_grid_cap():
    load = lambda extra: sc.load(None, list(extra))  # noqa: E731
    with pytest.raises(ValueError, match="make 360 combinations, each compiled on its own, "
                                         "above the cap of 32"):
        optimize.categorical_search(load, ["system.placement", "training.recompute"])
    with pytest.raises(ValueError, match="make 12 combinations, above the cap max_points=10"):
        optimize.categorical_search(load, ["parallel.zero", "training.recompute"],
                                    max_points=10)
    with pytest.raises(ValueError, match="the grid has 12 points over 2 combinations"):
        optimize.categorical_search(load, ["parallel.tp", "parallel.zero"],
                                    choices={"parallel.zero": [0, 1]}, max_points=10)


def test_top_merges_points_equal_to_the_printed_digits():
    # polished starts converge to one continuous optimum a few ulps apart: one design
    from codesign.optimize._model import Exact  # internal: what `top_points` ranks
    from codesign.optimize._result import top_points  # internal: the --top list

    prob = optimize.problem(sc.load(None), ["system.scale_out_bandwidth_Bps"])
    x = np.asarray([[14.7123e9], [14.71231e9], [14.8e9], [14.7124e9]])
    loss = np.asarray([1.0, 1.0 + 1e-12, 1.1, 1.2])
    ex = Exact(loss, loss, loss, np.ones(4, bool), np.ones(4, bool), {"gpus": loss})
    top = top_points(prob, x, ex, 4)
    assert [t["knobs"]["system.scale_out_bandwidth_Bps"] for t in top] == [14.7123e9, 14.8e9]
