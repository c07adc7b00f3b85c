"""What users of Calculon, llm-analysis and nccl-tests expect of the CLI: an
optional scenario, the scenario echoed in JSON, CSV tables, --top, files named."""

import csv
import dataclasses
import io
import json

import jax
import jax.numpy as jnp
import pytest

from codesign import optimize, presets
from codesign.cli import main
from codesign.model import collectives as co
from codesign.model.plan import Plan
from codesign.scenario import load

PLAN_FIELDS = {f.name for f in dataclasses.fields(Plan)}


def _run(capsys, *argv, code=0):
    assert main(list(argv)) == code
    return capsys.readouterr()


def _csv(text: str) -> list[dict]:
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and all(len(r) == len(rows[0]) for r in rows)  # one header, rectangular
    return list(csv.DictReader(io.StringIO(text)))


def _check_echo(out: dict, scenario: str = "default") -> None:
    assert out["scenario"] == scenario
    assert set(out["plan"]) == PLAN_FIELDS
    assert isinstance(out["plan"]["tp"], float) and isinstance(out["plan"]["schedule"], str)
    system = out["system"]
    assert {"preset", "chip", "chip_spec", "scale_up", "scale_out", "gpus", "topology"} <= set(
        system)
    assert system["chip_spec"]["peak_flops_per_s"] > 0
    assert system["scale_out"]["bandwidth_Bps"] > 0


@pytest.mark.parametrize("argv", [
    ["estimate"], ["traffic"], ["roofline"], ["reliability"],
    ["sensitivity", "--knob", "parallel.tp", "--knob", "system.scale_out_bandwidth_Bps"],
])
def test_every_json_echoes_scenario_plan_and_system(argv, capsys):
    out = json.loads(_run(capsys, *argv, "--json").out)
    _check_echo(out)
    assert out["plan"]["tp"] == 8 and out["system"]["preset"] == "dgx-a100"


@pytest.mark.parametrize("command", ["traffic", "roofline", "reliability"])
def test_scenario_argument_is_optional(command, capsys):
    implicit = json.loads(_run(capsys, command, "--json").out)
    explicit = json.loads(_run(capsys, command, "default", "--json").out)
    assert implicit == explicit
    other = json.loads(_run(capsys, command, "megatron-8.3b", "--json").out)
    assert other["scenario"] == "megatron-8.3b" and other != implicit


def test_traffic_csv_is_the_json_rows(capsys):
    rows = json.loads(_run(capsys, "traffic", "--json").out)["rows"]
    table = _csv(_run(capsys, "traffic", "--csv").out)
    assert [r["dimension"] for r in table] == [r["dimension"] for r in rows]
    assert list(table[0]) == list(rows[0])
    for t, r in zip(table, rows, strict=True):
        assert float(t["time_s"]) == pytest.approx(r["time_s"])
        assert float(t["message_bytes"]) == pytest.approx(r["message_bytes"])


def test_roofline_csv_and_plot_path(capsys, tmp_path):
    png = tmp_path / "roof.png"
    done = _run(capsys, "roofline", "--csv", "--plot", str(png))
    table = _csv(done.out)
    assert {r["dimension"] for r in table} == {"tp", "dp", "pp"}
    assert all(float(r["needed_flop_per_byte"]) > 0 for r in table)
    assert f"wrote {png}" in done.err and png.stat().st_size > 1000
    text = _run(capsys, "roofline", "--plot", str(png)).out
    assert text.rstrip().endswith(f"wrote {png}")
    out = json.loads(_run(capsys, "roofline", "--json", "--plot", str(png)).out)
    assert out["plot"] == str(png)


def test_json_and_csv_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["traffic", "--json", "--csv"])
    assert e.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_estimate_plot_writes_a_png_and_prints_its_path(capsys, tmp_path):
    png = tmp_path / "estimate.png"
    text = _run(capsys, "estimate", "--plot", str(png)).out
    assert text.rstrip().endswith(f"wrote {png}")
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(head[16:20], "big")
    assert width >= 1400  # 11 inches at 150 dpi, trimmed
    out = json.loads(_run(capsys, "estimate", "--json", "--plot", str(png)).out)
    assert out["plot"] == str(png)
    assert {f"memory_{k}_bytes" for k in ("weights", "gradients", "optimizer", "activations",
                                          "reserve")} <= set(out)


def test_estimate_breakdown_figure_has_two_titled_panels():
    from codesign import plots

    fig = plots.estimate_breakdown({"compute": 2.0, "tp": 0.5}, {"weights": 4e9,
                                   "activations": 9e9}, 8e9, title="t")
    left, right = fig.axes
    assert "(s)" in left.get_xlabel() and "GiB" in right.get_ylabel()  # as the tables
    assert "DOES NOT FIT" in right.get_title() and fig._suptitle.get_text() == "t"


SYSTEM_TOML = """# as `codesign calibrate --out` writes it
[system]
preset = "dgx-h100"
scale_up_bandwidth_Bps = 1.000000e+11
scale_up_latency_s = 9.000000e-06
scale_up_efficiency = 1.0
"""


def test_collective_takes_a_system_file(capsys, tmp_path):
    path = tmp_path / "h100.toml"
    path.write_text(SYSTEM_TOML)
    argv = ["collective", "all_reduce", "--ranks", "8", "--bytes", "1GiB", "--algorithm", "ring",
            "--json"]
    fitted = json.loads(_run(capsys, *argv, "--system", str(path)).out)
    preset = json.loads(_run(capsys, *argv).out)
    assert fitted["system"]["source"] == str(path) and preset["system"]["preset"] == "dgx-h100"
    assert fitted["system"]["scale_up"]["bandwidth_Bps"] == 1e11
    assert fitted["system"]["chip"] == preset["system"]["chip"]  # the file's preset
    assert fitted["latency_s"] > preset["latency_s"] and fitted["time_s"] > preset["time_s"]
    err = _run(capsys, *argv, "--system", str(tmp_path / "missing.toml"), code=2).err
    assert "missing.toml" in err and "\n" not in err.strip()


def test_collective_sweep_csv(capsys):
    argv = ["collective", "all_gather", "--ranks", "8", "--sweep", "1KiB:8KiB"]
    table = _csv(_run(capsys, *argv, "--csv").out)
    rows = json.loads(_run(capsys, *argv, "--json").out)["rows"]
    assert [int(float(r["size_bytes"])) for r in table] == [1024, 2048, 4096, 8192]
    assert [float(r["busbw_Bps"]) for r in table] == pytest.approx([r["busbw_Bps"] for r in rows])
    err = _run(capsys, "collective", "all_gather", "--ranks", "8", "--bytes", "1KiB", "--csv",
               code=2).err
    assert "--csv prints the --sweep table" in err


def _assert_top(top: list, n: int, goal: str) -> None:
    assert len(top) == n
    knobs = [tuple(t["knobs"].values()) for t in top]
    assert len(set(knobs)) == n  # distinct
    values = [t["objective"] for t in top]
    assert values == sorted(values, reverse=goal == "max")
    for t in top:
        assert t["metrics"]["step_time_s"] > 0


# the gradient method on tests/test_optimize.py's small problem, its starts and
# steps: one compiled descent for both files (the run's executable store)
SMALL_ARGV = ["--vary", "parallel.tp,parallel.pp,training.micro_batch,"
              "system.scale_out_bandwidth_Bps", "--bounds=parallel.tp=1:16",
              "--bounds=parallel.pp=1:16", "--bounds=training.micro_batch=1:4",
              "--bounds=system.scale_out_bandwidth_Bps=5e+09:4e+11", "--starts", "8",
              "--steps", "40"]


@pytest.mark.parametrize("method", [["--vary", "parallel.tp,parallel.pp", "--method", "grid",
                                     "--no-progress"], SMALL_ARGV])
def test_optimize_top_is_distinct_and_sorted(method, capsys):
    argv = ["optimize", *method, "--top", "4"]
    out = json.loads(_run(capsys, *argv, "--json").out)
    _check_echo(out)
    _assert_top(out["top"], 4, out["objective"]["goal"])
    assert out["top"][0]["knobs"] == out["best"]
    assert out["top"][0]["objective"] == pytest.approx(out["objective"]["value"])
    table = _csv(_run(capsys, *argv, "--csv").out)
    assert [int(r["rank"]) for r in table] == [1, 2, 3, 4]
    assert [float(r["parallel.tp"]) for r in table] == [t["knobs"]["parallel.tp"]
                                                       for t in out["top"]]
    text = _run(capsys, *argv).out
    assert "top 4 distinct feasible designs" in text


def test_library_errors_name_quantities_and_the_command_its_flags(capsys):
    """The library asks for a change in its own words (`grid_points`); the command
    prints the same message with the flag that makes the change."""
    argv = ["optimize", "--method", "grid", "--grid-points", "100000", "--vary",
            "system.scale_out_bandwidth_Bps,system.scale_up_bandwidth_Bps,parallel.tp_overlap"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "codesign optimize: error: parallel.tp_overlap=0 in the scenario: give --bounds "
        "parallel.tp_overlap=LO:HI (no default range around 0)")
    assert main([*argv, "--bounds", "parallel.tp_overlap=0.1:0.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("codesign optimize: error: the grid has 1,000,000,000,000,000 points "
                          "(grid_points=100000 over 3 knobs), above the cap max_points=")
    assert err.endswith("; narrow --bounds or lower --grid-points"), err
    vary = {"system.scale_out_bandwidth_Bps": (1e10, 1e11), "parallel.tp_overlap": (0.1, 0.9)}
    prob = optimize.problem(load(None), list(vary), vary)
    with pytest.raises(ValueError, match=r"\(grid_points=100000 over 2 knobs\), above the cap "
                       r"max_points=1,000,000; narrow `bounds` or lower `grid_points`$"):
        optimize.grid_search(prob, 100000, max_points=1_000_000)
def test_optimize_csv_needs_top(capsys):
    err = _run(capsys, "optimize", "--vary", "parallel.tp", "--csv", code=2).err
    assert "--top" in err


def test_sensitivity_omits_zero_elasticities(capsys):
    el = json.loads(_run(capsys, "sensitivity", "--json").out)["elasticities"]
    zeros = [k for k, v in el.items() if v == 0]
    assert zeros and len(zeros) < len(el)
    text = _run(capsys, "sensitivity").out
    assert f"({len(zeros)} knobs with elasticity zero omitted; --all prints them)" in text
    assert not any(f"  {k} " in text for k in zeros)
    every = _run(capsys, "sensitivity", "--all").out
    assert all(f"  {k} " in every for k in el) and "omitted" not in every
    table = _csv(_run(capsys, "sensitivity", "--csv").out)
    assert len(table) == len(el) - len(zeros)
    assert {r["knob"]: float(r["elasticity"]) for r in table} == pytest.approx(
        {k: v for k, v in el.items() if v != 0})


def test_cost_repr_has_units():
    tier = presets.system("dgx-h100").scale_up
    c = co.cost("all_reduce", "ring", 1e9, 8.0, tier)
    text = repr(c)
    assert text.startswith("Cost(time ") and text.count(" ms") == 4
    total = float(text.split()[1])
    assert total == pytest.approx(float(c.time_s) * 1e3, rel=1e-3)
    batched = co.cost("all_reduce", "ring", jnp.asarray([1e3, 1e9]), 8.0, tier)
    assert "latency_s=" in repr(batched)  # not one number: the field-by-field form
    seen = []
    jax.jit(lambda n: seen.append(repr(co.cost("all_reduce", "ring", n, 8.0, tier))) or n)(1e6)
    assert "latency_s=" in seen[0]


def test_assumptions_repr_has_units():
    text = repr(optimize.Assumptions(usd_per_gpu_hour=3.0))
    assert "$3 per GPU-hour" in text and "4 years" in text and "400 Gb/s" in text
    seen = []
    jax.jit(lambda u: seen.append(repr(optimize.Assumptions(usd_per_gpu_hour=u))) or u)(2.0)
    assert "usd_per_gpu_hour=" in seen[0]


def test_bench_csv_is_one_table(capsys, tmp_path):
    out = tmp_path / "bench.jsonl"
    done = _run(capsys, "bench", "--op", "all_reduce", "--algorithm", "all", "--sizes",
                "4KiB:8KiB", "--iters", "2", "--warmup", "1", "--no-progress", "--csv",
                "--out", str(out))
    table = _csv(done.out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(table) == len(records) > 2
    assert [r["algorithm"] for r in table] == [r["algorithm"] for r in records]
    assert f"wrote {out}" in done.err


def test_calibrated_file_is_a_system_for_collective_and_calibrate(capsys, tmp_path):
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures" / "nccl"
    logs = [str(fixtures / "all_reduce_perf_8xH100.txt"),
            str(fixtures / "all_gather_perf_8xH100.txt")]
    first = tmp_path / "h100.toml"
    done = _run(capsys, "calibrate", *logs, "--system", "dgx-h100", "--json", "--out", str(first))
    fits = json.loads(done.out)
    assert f"wrote {first}" in done.err
    out = json.loads(_run(capsys, "collective", "all_reduce", "--ranks", "8", "--bytes", "1GiB",
                          "--system", str(first), "--json").out)
    assert out["system"]["scale_up"]["bandwidth_Bps"] == pytest.approx(
        fits["scale_up"]["bandwidth_Bps"], rel=1e-6)
    again = tmp_path / "again.toml"  # the file as the prior of another fit
    _run(capsys, "calibrate", *logs, "--system", str(first), "--out", str(again))
    assert 'preset = "dgx-h100"' in again.read_text()


def test_estimate_prints_the_total_and_active_parameters(capsys):
    """The first thing a user checks after an import: deepseek-v3's 671B
    parameters, of which a token multiplies through 36.5B (its technical report:
    671B, 37B activated per token)."""
    from codesign.cli import estimate

    assert [estimate._count(n) for n in (8.03e9, 671e9, 1.008e12, 3.2e6, 950.0)] == [
        "8.03B", "671B", "1.01T", "3.2M", "950"]
    assert main(["estimate", "deepseek-v3"]) == 0
    assert ("parameters       671B total (36.5B active per token without the input embedding, "
            "37.4B with it)") in capsys.readouterr().out
