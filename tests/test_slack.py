"""`optimize.slack` and `sensitivity`'s collectives: the bandwidth at which a
collective's exposure changes."""

import json

import jax
import pytest

from codesign import optimize
from codesign import scenario as sc
from codesign.cli import main
from codesign.compiling import compiled
from codesign.optimize._slack import HIDDEN, _traffic


def _row(scn, dimension, collective):
    rows = compiled(_traffic, scn)[0](scn)
    return next(r for r in rows if (r.dimension, r.collective) == (dimension, collective))


def test_a_hidden_collective_is_exposed_just_below_its_threshold_and_not_above(capsys):
    """DeepSeek-V3's expert all-to-all hides under compute: below the reported
    scale-up bandwidth it is exposed, 5% above it still hidden; an exposed row
    that never hides reports no threshold; `sensitivity` prints and writes the
    same rows (one test: one compile of the scan)."""
    scn = sc.load("deepseek-v3")
    rows = optimize.slack(scn)
    ep = next(r for r in rows if r["dimension"] == "ep")
    assert ep["hidden"] and ep["exposed_s"] == 0.0
    assert set(ep["tiers"]) == {"scale_up", "scale_out"}  # it runs on both tiers
    up = ep["tiers"]["scale_up"]
    assert 0 < up["factor"] < 1 and up["threshold_Bps"] == pytest.approx(
        up["bandwidth_Bps"] * up["factor"])
    key = "system.scale_up_bandwidth_Bps"
    for scale, hidden in ((1.05, True), (0.95, False)):
        at = sc.set_knobs(scn, {key: jax.numpy.asarray(up["threshold_Bps"] * scale)})
        r = _row(at, "ep", "all_to_all")
        assert (float(r.exposed_s) <= HIDDEN * float(r.time_s)) is hidden, scale
    pp = next(r for r in rows if r["dimension"] == "pp")
    assert not pp["hidden"] and pp["tiers"]["scale_out"]["threshold_Bps"] is None

    assert main(["sensitivity", "deepseek-v3", "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "ep all_to_all (scale-up+scale-out): hidden (" in text
    assert f"exposed below {up['threshold_Bps'] / 1e9:.4g} GB/s scale-up ({up['factor']:.3g}x)" \
        in text
    assert "pp send_recv (scale-out): exposed " in text
    assert "still partly exposed at 1e4x the scale-out bandwidth" in text
    assert main(["sensitivity", "deepseek-v3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["collectives"] == rows


def test_a_collective_never_hidden_is_said_so(capsys):
    """The default's TP all-reduce (no TP overlap) is on the critical path: more
    bandwidth shortens it but never hides it, which the line says in those words
    rather than "still exposed at 1e4x the bandwidth"."""
    assert main(["sensitivity", "default", "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert ("tp all_reduce (scale-up): exposed 3.034 s of 3.034 s; never hidden under "
            "compute: more scale-up bandwidth only shortens it") in text
