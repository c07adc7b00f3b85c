"""Scenario files: schema, overrides, errors naming the key, and the estimate CLI."""

import json

import jax.numpy as jnp
import pytest

from codesign import scenario as sc
from codesign.cli import main


def test_builtins_load_and_override():
    s = sc.load(None, ["parallel.tp=4", "system.scale_out_bandwidth_Bps=50GB/s"])
    assert float(s.plan.tp) == 4 and float(s.plan.dp) == 1024 / (4 * 8)
    assert float(s.system.scale_out.bandwidth_Bps) == 50e9
    for name in sc.BUILTIN:
        scn = sc.load(name)
        assert float(scn.plan.gpus) == float(scn.system.gpus)


def test_dp_determines_gpus_when_given(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[model]\npreset = "llama3-8b"\n[parallel]\ndp = 4\ntp = 2\n'
                 '[training]\nglobal_batch = 16\n[system]\npreset = "dgx-h100"\n')
    s = sc.load(str(f))
    assert float(s.system.gpus) == 8 and sc.labels(str(f)).model == "llama3-8b"


@pytest.mark.parametrize("override,message", [
    ("model.widht=3", "model.widht is not a known key of \\[model\\]"),
    ("parallel.tp=eight", "parallel.tp='eight' must be a number"),
    ("parallel.tp=3", "system.gpus=1024 is not a multiple of tp\\*pp\\*cp=24"),
    ("parallel.tp=64", "parallel.tp=64 must divide model.heads=96"),
    ("training.global_batch=1000", "must divide training.global_batch=1000"),
    ("parallel.schedule=pipedream", "parallel.schedule='pipedream' is not one of"),
    ("system.scale_out_bandwidth_Bps=-5",
     "system.scale_out_bandwidth_Bps=-5 must be a number in \\[1000, 1e15\\]"),
    ("reliability.straggler_q=1.5",
     "reliability.straggler_q=1.5 must be a number in \\[0, 1\\]"),
    ("nosuch.key=1", "\\[nosuch\\] is not a scenario table"),
    ("system.preset=dgx-z100", "system preset 'dgx-z100' is unknown"),
    ("parallel.ep=2", "parallel.ep=2 needs an MoE model"),
    ("parallel.interleave=2", None),  # the default already interleaves: accepted
])
def test_bad_values_are_rejected_naming_the_key(override, message):
    if message is None:
        sc.load(None, [override])
        return
    with pytest.raises(ValueError, match=message):
        sc.load(None, [override])


def test_malformed_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\npreset = 1")
    with pytest.raises(ValueError, match="not valid TOML"):
        sc.load(str(bad))
    with pytest.raises(FileNotFoundError, match="neither a file nor a built-in"):
        sc.load(str(tmp_path / "nope.toml"))


def test_system_file_overrides_the_tiers(tmp_path):
    f = tmp_path / "system.toml"
    f.write_text("[system]\nscale_out_bandwidth_Bps = 12.5e9\nscale_out_latency_s = 5e-6\n"
                 "scale_out_efficiency = 1.0\n")
    s = sc.load(None, system=str(f))
    assert float(s.system.scale_out.bandwidth_Bps) == 12.5e9
    assert float(s.system.scale_out.latency_s) == 5e-6


def test_set_knobs_derives_dp_and_is_traceable():
    s = sc.load(None)
    t = sc.set_knobs(s, {"parallel.tp": jnp.asarray(4.0)})
    assert float(t.plan.dp) == 32
    u = sc.set_knobs(s, {"parallel.dp": 8.0})
    assert float(u.system.gpus) == 8 * 8 * 8
    with pytest.raises(ValueError, match="knob 'parallel.tq' is unknown"):
        sc.set_knobs(s, {"parallel.tq": 1.0})


ESTIMATE_KEYS = {
    "step_time_s", "tokens_per_s", "mfu", "hfu", "model_tflops_per_gpu",
    "hardware_tflops_per_gpu", "memory_bytes_per_gpu", "memory_capacity_bytes", "fits_memory",
    "breakdown_s", "traffic", "time_to_train_s", "gpu_hours", "expected_step_time_s",
    "step_time_p99_s", "goodput", "effective_training_time_fraction", "checkpoint_interval_s",
    "mtbf_s", "fabric_cost_usd", "fabric_power_w"}
ROW_KEYS = {"dimension", "collective", "algorithm", "tier", "message_bytes", "count_per_step",
            "critical_path", "time_s", "exposed_s"}


def test_estimate_cli_json_has_every_key(capsys):
    assert main(["estimate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert ESTIMATE_KEYS <= set(out)
    assert set(out["breakdown_s"]) == {"compute", "tp", "cp", "dp", "ep", "pp_p2p", "pp_bubble",
                                       "optimizer"}
    assert out["traffic"] and all(ROW_KEYS <= set(r) for r in out["traffic"])
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["step_time_s"])
    assert main(["estimate"]) == 0
    text = capsys.readouterr().out
    assert "step time" in text and "MFU" in text


def test_traffic_and_roofline_cli(capsys, tmp_path):
    assert main(["traffic", "default", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["dimension"] for r in rows} == {"tp", "dp", "pp"}
    png = tmp_path / "roof.png"
    assert main(["roofline", "default", "--json", "--plot", str(png)]) == 0
    roof = {r["dimension"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    # A100: 312e12 / 300e9 per direction over NVLink; / 25e9 behind a 200 Gb/s NIC
    assert roof["tp"]["needed_flop_per_byte"] == pytest.approx(1040)
    assert roof["dp"]["needed_flop_per_byte"] == pytest.approx(12480)
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("argv", [
    ["estimate", "--set", "parallel.tp=3"],
    ["estimate", "--set", "parallel"],
    ["estimate", "no_such_scenario.toml"],
    ["traffic", "default", "--set", "model.hidden=-1"],
])
def test_cli_errors_are_one_line_with_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("codesign ") and "error:" in err and "\n" not in err
