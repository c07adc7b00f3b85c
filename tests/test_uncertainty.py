"""Error bars on every estimate: the step-time ratios of `codesign validate`'s
rows per chip family (`codesign.uncertainty`), stored in the package and
printed by `codesign estimate` (text and JSON)."""

import json
import math

import pytest

from codesign import scenario as sc
from codesign import uncertainty, validate
from codesign.cli import main
from codesign.model import hardware


def _percentile(values, q):
    """The q-quantile by hand: linear interpolation at position q (n - 1)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    i = math.floor(pos)
    return v[i] if i + 1 == len(v) else v[i] + (pos - i) * (v[i + 1] - v[i])


def _ratios(rows, family=None):
    out = []
    for r in rows:
        if r["calibration"] or not math.isfinite(r["error"]):
            continue
        if r["measure"] in validate.COLLECTIVE_MEASURES:  # a collective, not a step
            continue
        if r["source"] == validate.SETS["mcore_dsv3_gb200_steps"]:  # one plan: its last row
            continue
        if family is not None and r["family"] != family:
            continue
        # a rate measure too high by (1 + e) means a step (1 + e) longer; a time the reverse
        time = r["measure"] in ("step_time_s", "gpu_hours")
        out.append(1 / (1 + r["error"]) if time else 1 + r["error"])
    return out


def test_stored_table_is_validates(validate_rows):
    # regenerate it from validate's rows: a stale codesign/uncertainty.json fails here
    # (rewrite it with `codesign validate --write-uncertainty`)
    stored = json.loads(uncertainty.TABLE.read_text())
    assert validate.uncertainty(validate_rows) == stored
    assert stored["quantile"] == uncertainty.QUANTILE and stored["min_rows"] == uncertainty.MIN_ROWS


@pytest.mark.parametrize("family", ["A100", "H100", None])
def test_ends_are_the_percentiles_of_the_step_time_ratios(validate_rows, family):
    ratios = _ratios(validate_rows, family)
    entry = (uncertainty.table()["all"] if family is None
             else uncertainty.table()["families"][family])
    q = uncertainty.QUANTILE
    assert entry["rows"] == len(ratios) >= uncertainty.MIN_ROWS
    assert entry["ratio_lo"] == pytest.approx(_percentile(ratios, q), rel=1e-5)
    assert entry["ratio_hi"] == pytest.approx(_percentile(ratios, 1 - q), rel=1e-5)


def test_direction_of_a_rate_and_a_time_row():
    # the model 20% fast on a rate: the true step 1.2x longer; 20% long on a time: 1/1.2
    assert validate.step_time_ratio({"measure": "tokens_per_s_per_gpu", "error": 0.2}) == 1.2
    assert validate.step_time_ratio({"measure": "step_time_s", "error": 0.2}) == 1 / 1.2


def test_a_family_with_few_rows_takes_all_rows():
    tab = uncertainty.table()
    h800 = uncertainty.interval("H800", 10.0)  # DeepSeek-V3's one row
    h200 = uncertainty.interval("H200", 10.0)  # none
    for i, n in ((h800, 1), (h200, 0)):
        assert (i.rows_family, i.rows, i.family_rows) == ("all", tab["all"]["rows"], n)
        assert (i.lo, i.hi) == pytest.approx((10 * tab["all"]["ratio_lo"],
                                              10 * tab["all"]["ratio_hi"]))
    a100 = uncertainty.interval("A100", 10.0)
    assert (a100.rows_family, a100.rows, a100.quantile) == ("A100", 15, uncertainty.QUANTILE)
    assert a100.coverage == pytest.approx(0.68)


def test_a_scenarios_family_is_validates():
    # one function: a check's family and a scenario's system's come from the chip name
    check = next(c for c in validate.CHECKS if c.name.startswith("GPT-3 175B"))
    assert validate.family(check) == "A100"
    assert hardware.chip_family(sc.labels("default").system.chip) == "A100"
    assert hardware.chip_family(sc.labels("llama3-405b").system.chip) == "H100"
    assert hardware.chip_family(sc.labels("deepseek-v3").system.chip) == "H800"


def test_estimate_prints_and_returns_the_interval(capsys):
    assert main(["estimate", "--json"]) == 0  # default: GPT-3 175B on 1024 A100s
    out = json.loads(capsys.readouterr().out)
    tab = uncertainty.table()["families"]["A100"]
    lo, hi = out["step_time_s_interval"]
    assert lo < out["step_time_s"] < hi  # A100's interval brackets the point estimate
    assert (lo, hi) == pytest.approx((out["step_time_s"] * tab["ratio_lo"],
                                      out["step_time_s"] * tab["ratio_hi"]), rel=1e-12)
    lo, hi = out["time_to_train_s_interval"]
    assert lo < out["time_to_train_s"] < hi
    assert out["interval"] == {"quantile": 0.16, "coverage": 0.68, "family": "A100",
                               "rows": 15, "rows_family": "A100", "family_rows": 15}
    assert main(["estimate"]) == 0
    text = capsys.readouterr().out
    step_lo, step_hi = out["step_time_s_interval"]
    assert (f"  68% interval   {step_lo:.3f}-{step_hi:.3f} s, from validate's 15 A100 rows"
            in text.splitlines())
    assert max(len(line) for line in text.splitlines()[3:12]) <= 100


def test_no_validate_interval_for_a_system_calibrated_on_other_devices(tmp_path, capsys):
    """`calibrate` writes the devices it measured (`system.measured_on`); an
    estimate on a preset whose chips those are not (fake CPU devices fitted as a
    dgx-h100's tiers) gives no interval and says why; on its own chips it does."""
    fit = tmp_path / "fit.toml"
    fit.write_text('[system]\npreset = "dgx-h100"\nmeasured_on = "cpu"\n'
                   "scale_up_bandwidth_Bps = 1.5e9\n")
    assert main(["estimate", "--system", str(fit), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "step_time_s_interval" not in out
    assert out["interval"] == {"none": "the system's tiers were calibrated on cpu, not on "
                               "dgx-h100's H100-SXM5-80GB, and validate's rows describe those "
                               "chips"}
    assert main(["estimate", "--system", str(fit)]) == 0
    assert "  interval       none: the system's tiers were calibrated on cpu" in \
        capsys.readouterr().out
    fit.write_text('[system]\npreset = "dgx-h100"\nmeasured_on = "NVIDIA H100 80GB HBM3"\n')
    assert main(["estimate", "--system", str(fit), "--json"]) == 0
    assert "step_time_s_interval" in json.loads(capsys.readouterr().out)
