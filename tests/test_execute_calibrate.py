"""nccl-tests parsing and the alpha-beta-gamma fit (codesign calibrate)."""

import json
import math
import tomllib
from pathlib import Path

import equinox as eqx
import pytest

from codesign import scenario
from codesign.cli import main
from codesign.execute import calibrate, line_rate, nccl_tests
from codesign.model import collectives
from codesign.model.hardware import Tier
from codesign.presets import system

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
H100_AR = str(FIXTURES / "all_reduce_perf_8xH100.txt")
H100_AG = str(FIXTURES / "all_gather_perf_8xH100.txt")
H100_2N = str(FIXTURES / "all_reduce_perf_2x8xH100.txt")
A100_OLD = str(FIXTURES / "all_reduce_perf_8xA100_v2.0.txt")


def test_parser_reads_out_of_place_columns_of_both_formats():
    log = nccl_tests.read(H100_AR)
    assert (log.op, log.ranks, len(log.rows)) == ("all_reduce", 8, 28)
    last = log.rows[-1]  # "1073741824 268435456 float sum -1 5397.9 198.92 348.11 0 5410.8 ..."
    assert (last.size_bytes, last.count, last.dtype) == (1073741824, 268435456, "float")
    assert last.time_s == pytest.approx(5397.9e-6)
    assert last.busbw_Bps == pytest.approx(348.11e9)
    # nccl-tests' busbw is collectives.busbw_Bps of its size and time (to print rounding)
    assert float(collectives.busbw_Bps("all_reduce", last.size_bytes, last.time_s, 8)) == \
        pytest.approx(last.busbw_Bps, rel=1e-3)
    old = nccl_tests.read(A100_OLD)  # 2.0-era: no root column, `error` not `#wrong`
    assert (old.op, old.ranks, len(old.rows)) == ("all_reduce", 8, 26)
    assert old.rows[0].time_s == pytest.approx(17.01e-6) and old.rows[0].wrong == 0
    assert nccl_tests.read(H100_2N).ranks == 16
    assert nccl_tests.read(H100_AG).op == "all_gather"


def test_parser_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no nccl-tests column header"):
        nccl_tests.parse("# nothing here\n", source="x.txt")
    text = Path(H100_AR).read_text().replace("all_reduce_perf", "some_test")
    with pytest.raises(ValueError, match="cannot tell which nccl-tests collective"):
        nccl_tests.parse(text, source="log.txt")
    assert nccl_tests.parse(text, source="run_all_gather.log").op == "all_gather"
    assert nccl_tests.parse(text, source="log.txt", op="reduce_scatter").op == "reduce_scatter"


def test_fit_recovers_the_tiers_the_fixtures_were_written_with():
    """The fixtures follow alpha-beta-gamma with alpha 0.9 us, 395 GB/s, reduction
    1.675e12 B/s inside a node and 3.5 us, 46 GB/s per rail across, times a 15%
    protocol bump around 2 MiB and 3% noise: the fit must land near them. The
    2-node log was written with the sequential `hierarchical` all-reduce (not what
    NCCL runs, so not calibrate's default: tests/test_calibrate_multinode.py), and
    is fitted as written."""
    ms = sum((calibrate.load(f) for f in (H100_AR, H100_AG)), [])
    ms += calibrate.load(H100_2N, algorithm="hierarchical")
    result = calibrate.fit(ms)
    up, out = result.tiers["scale_up"], result.tiers["scale_out"]
    assert up.alpha_s == pytest.approx(0.9e-6, rel=0.1)
    assert up.bandwidth_Bps == pytest.approx(395e9, rel=0.1)
    assert 1 / up.gamma_s_per_byte == pytest.approx(1.675e12, rel=0.3)
    assert up.reduction == "fitted" and up.gamma_s_per_byte == out.gamma_s_per_byte
    assert out.alpha_s == pytest.approx(3.5e-6, rel=0.15)
    assert out.bandwidth_Bps == pytest.approx(46e9, rel=0.1)
    assert max(up.holdout_error, out.holdout_error) < 0.15
    assert up.holdout_points == 18 and out.holdout_points == 9
    held = [p for p in result.predictions if p.held_out and p.measurement.tier == "scale_out"]
    assert up.holdout_error >= up.holdout_error_median > 0
    assert max(abs(p.relative_error) for p in held) == pytest.approx(out.holdout_error)


def test_reduction_is_folded_without_a_non_reducing_collective():
    result = calibrate.fit(calibrate.load(A100_OLD))
    fit = result.tiers["scale_up"]
    assert fit.reduction == "folded" and fit.gamma_s_per_byte == 0.0
    # folded: the bandwidth absorbs 2/(2 B) + 1/R of the generating model (262 GB/s, 1e12)
    assert fit.bandwidth_Bps == pytest.approx(1 / (1 / 262e9 + 0.5 / 1e12), rel=0.1)
    assert "scale_up_reduction_Bps = 1e+30" in calibrate.system_toml(result)


def test_multi_node_log_needs_the_scale_up_tier():
    ms = calibrate.load(H100_2N)
    assert {m.algorithm for m in ms} == {"rail_ring"} and ms[0].tier == "scale_out"
    with pytest.raises(ValueError, match="need the scale_up tier too"):
        calibrate.fit(ms)
    fit = calibrate.fit(ms, prior=system("dgx-h100")).tiers
    assert set(fit) == {"scale_out"} and fit["scale_out"].reduction == "prior"


def test_calibrate_cli_json_and_system_toml(capsys, tmp_path):
    toml_path = tmp_path / "system.toml"
    rc = main(["calibrate", H100_AR, H100_AG, "--json", "--out", str(toml_path)])
    assert rc == 0
    fits = json.loads(capsys.readouterr().out)
    assert set(fits) == {"scale_up"}
    keys = {"alpha_s", "bandwidth_Bps", "gamma_s_per_byte", "holdout_error"}
    assert keys <= set(fits["scale_up"])
    table = tomllib.loads(toml_path.read_text())["system"]
    assert set(table) == {"scale_up_bandwidth_Bps", "scale_up_latency_s", "scale_up_efficiency",
                          "scale_up_reduction_Bps", "measured_on"}
    assert table["measured_on"] == "NVIDIA H100 80GB HBM3"  # the log's '# Rank' lines
    assert table["scale_up_efficiency"] == 1.0
    assert table["scale_up_bandwidth_Bps"] == pytest.approx(fits["scale_up"]["bandwidth_Bps"],
                                                            rel=1e-6)
    assert table["scale_up_reduction_Bps"] == pytest.approx(
        1 / fits["scale_up"]["gamma_s_per_byte"], rel=1e-6)


def test_calibrate_records_its_system_preset_in_the_file(capsys, tmp_path):
    toml_path = tmp_path / "system.toml"
    assert main(["calibrate", H100_AR, H100_AG, "--system", "dgx-h100", "--json",
                 "--out", str(toml_path)]) == 0
    fits = json.loads(capsys.readouterr().out)
    table = tomllib.loads(toml_path.read_text())["system"]
    assert table["preset"] == "dgx-h100"
    scn = scenario.load(None, system=str(toml_path))
    assert scenario.labels(None, system=str(toml_path)).system.preset == "dgx-h100"
    assert float(scn.system.chip.peak_flops_per_s) == float(
        system("dgx-h100").chip.peak_flops_per_s)
    assert float(scn.system.scale_up.bandwidth_Bps) == pytest.approx(
        fits["scale_up"]["bandwidth_Bps"], rel=1e-6)


def test_calibrate_cli_errors(capsys, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    assert main(["calibrate", str(bad)]) == 2
    assert "neither `codesign bench --json` output nor an nccl-tests log" in capsys.readouterr().err
    assert main(["calibrate", H100_AR, "--tier", "scale_sideways"]) == 2
    assert "tier='scale_sideways' must be one of" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path / "missing.txt")]) == 2


def _bench_lines(alpha_s, bandwidth_Bps, sizes, noise):
    """`codesign bench --json` records of a ring all-reduce on 8 ranks whose times
    follow alpha-beta with known constants (no reduction cost), times `noise`."""
    tier = Tier(bandwidth_Bps, alpha_s, 1.0, reduction_Bps=1e30)
    return [json.dumps({"op": "all_reduce", "algorithm": "ring", "ranks": 8, "mesh": "8",
                        "size_bytes": n, "count": n // 4, "wrong": 0,
                        "time_s": float(collectives.cost("all_reduce", "ring", n, 8,
                                                         tier).time_s) * f})
            for n, f in zip(sizes, noise, strict=True)]


def test_fit_recovers_known_constants_from_bench_records(tmp_path):
    """Bench output generated with alpha 20 us and 3 GB/s (a CPU-like machine) and a
    fixed +-2% ripple: the fit lands on the constants and predicts the held-out sizes."""
    sizes = [4096 * 2**k for k in range(9)]  # 4 KiB .. 1 MiB, as the bench default
    noise = [1.02, 0.98, 1.01, 0.99, 1.0, 1.02, 0.98, 1.01, 0.99]
    out = tmp_path / "bench.jsonl"
    out.write_text("\n".join(_bench_lines(20e-6, 3e9, sizes, noise)) + "\n")
    result = calibrate.fit(calibrate.load(str(out)))
    fit = result.tiers["scale_up"]
    assert fit.holdout_points == 3 and fit.points == 9 and fit.reduction == "folded"
    assert fit.alpha_s == pytest.approx(20e-6, rel=0.05)
    assert fit.bandwidth_Bps == pytest.approx(3e9, rel=0.05)
    # generated records (no clock): the held-out error is the fit's, against a 2% ripple
    held_out_error = fit.holdout_error
    assert held_out_error < 0.05, calibrate.predictions_table(result)


def test_calibration_of_a_live_bench_run_has_the_expected_structure(tmp_path):
    """A real (CPU) bench run through calibrate: counts and signs only. How well it
    predicts held-out sizes depends on how busy the machine is, so that figure is a
    benchmark (benchmarks/collectives_exec.py), not a test."""
    out = tmp_path / "bench.jsonl"
    assert main(["bench", "--sizes", "4KiB:1MiB", "--iters", "6", "--warmup", "2",
                 "--algorithm", "ring", "--json", "--out", str(out),
                 "--no-progress"]) == 0
    result = calibrate.fit(calibrate.load(str(out)))
    fit = result.tiers["scale_up"]
    assert fit.holdout_points == 3 and fit.points == 9
    assert fit.alpha_s > 0 and fit.bandwidth_Bps > 0 and fit.reduction == "folded"
    assert math.isfinite(fit.holdout_error)


# ---------------------------------------------------------------- NVLS (issue 56)
# nccl-tests issue 290: one DGX H100 (8 GPUs, NCCL's defaults: NVLink SHARP), busbw
# 383 GB/s at 128 MiB to 474 GB/s at 4 GiB, above the 450 GB/s NVLink4 line rate
NVLS_1X8 = str(FIXTURES / "public" / "all_reduce_perf_1x8xH100_nccl-tests-290.txt")


@pytest.fixture(scope="module")
def nvls_fit():
    return calibrate.fit(calibrate.load(NVLS_1X8, algorithm="nvls"))


def test_nvls_fits_the_public_dgx_h100_log_within_10_percent_at_every_size(nvls_fit):
    fit = nvls_fit.tiers["scale_up_in_network"]
    assert set(nvls_fit.tiers) == {"scale_up_in_network"} and fit.in_network
    assert fit.reduction == "in-switch" and fit.gamma_s_per_byte == 0.0
    assert {p.measurement.algorithm for p in nvls_fit.predictions} == {"in_network"}
    # the model's busbw against the log's, at every size (all >= 1 MiB): the busbw error
    # is measured / predicted time - 1
    log = {r.size_bytes: r.busbw_Bps for r in nccl_tests.read(NVLS_1X8).rows}
    errors = []
    for p in nvls_fit.predictions:
        m = p.measurement
        model_busbw = float(collectives.busbw_Bps("all_reduce", m.size_bytes, p.predicted_s, 8))
        assert model_busbw / log[m.size_bytes] - 1 == pytest.approx(
            m.time_s / p.predicted_s - 1, abs=2e-3)  # the log's busbw, to print rounding
        errors.append(abs(model_busbw / log[m.size_bytes] - 1))
    assert len(errors) == 6 and max(errors) < 0.05
    # in-network: time = 2 alpha + n / bw; the slope of the two largest sizes' times
    (n1, t1), (n2, t2) = sorted((r.size_bytes, r.time_s)
                                for r in nccl_tests.read(NVLS_1X8).rows)[-2:]
    assert fit.bandwidth_Bps == pytest.approx((n2 - n1) / (t2 - t1), rel=0.03)
    # physical: below the link (each GPU sends and receives n once), while its busbw
    # 2(p-1)/p x bw exceeds the link, as the log's does
    links_Bps = float(system("dgx-h100").scale_up.bandwidth_Bps)  # 450 GB/s per direction
    assert fit.bandwidth_Bps < links_Bps < 2 * 7 / 8 * fit.bandwidth_Bps
    line_rate.check_line_rate(nvls_fit, system("dgx-h100"), "dgx-h100")


def test_nvls_fit_is_refused_above_the_links_or_where_the_switch_cannot_reduce(nvls_fit):
    h100 = system("dgx-h100")
    slower = eqx.tree_at(lambda s: s.scale_up.bandwidth_Bps, h100, 200e9)
    with pytest.raises(calibrate.UnphysicalFit, match=r"gives scale_up in-network \(NVLS/SHARP\) "
                       r"bandwidth 2\d\d\.\d GB/s per GPU, above the 200\.0 GB/s line rate of the "
                       r"scale-up links \(NVLink or ICI\) of slow"):
        line_rate.check_line_rate(nvls_fit, slower, "slow")
    with pytest.raises(calibrate.UnphysicalFit, match="in-network .NVLS/SHARP. reduction, which "
                       "the scale-up links .NVLink or ICI. of dgx-a100 do not have"):
        line_rate.check_line_rate(nvls_fit, system("dgx-a100"), "dgx-a100")


def test_nvls_log_fitted_as_a_ring_is_refused_with_the_nvls_hint(capsys, tmp_path):
    out = tmp_path / "fit.toml"
    assert main(["calibrate", NVLS_1X8, "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not out.exists()
    assert "(ring) gives scale_up bandwidth 472." in err[0]
    assert "above the 450.0 GB/s line rate" in err[0]
    assert err[0].endswith("(--algorithm nvls if NCCL ran NVLink SHARP, whose busbw may reach "
                           "2(p-1)/p x the links')")


def test_nvls_cli_writes_the_fit_as_a_comment_not_a_key(capsys, tmp_path):
    out = tmp_path / "fit.toml"
    assert main(["calibrate", NVLS_1X8, "--algorithm", "nvls", "--json", "--out",
                 str(out)]) == 0
    fits = json.loads(capsys.readouterr().out)
    assert set(fits) == {"scale_up_in_network"}
    text = out.read_text()
    assert tomllib.loads(text)["system"] == {"measured_on": "NVIDIA H100 80GB HBM3"}
    gbps = fits["scale_up_in_network"]["bandwidth_Bps"] / 1e9
    assert f"# scale_up_in_network: {gbps:.2f} GB/s per GPU through the switch" in text


def test_nvls_names_the_in_network_algorithms():
    assert calibrate.model_algorithm("all_reduce", "nvls", 8) == "in_network"
    assert calibrate.model_algorithm("all_reduce", "nvls", 32) == "nvls_tree"
    assert calibrate.model_algorithm("broadcast", "nvls", 8) == "in_network"
    with pytest.raises(ValueError, match="algorithm='nvls' has no cost model for "
                                         "op='all_gather'"):
        calibrate.model_algorithm("all_gather", "nvls", 8)
    with pytest.raises(ValueError, match="op='broadcast' across nodes"):
        calibrate.model_algorithm("broadcast", "nvls", 16)


def test_nic_rate_is_the_nodes_nic_aggregate_over_its_gpus():
    h100 = system("dgx-h100")  # 8 GPUs per node, one 400 Gb/s NIC (50 GB/s) each
    assert line_rate.nic_rate_Bps(h100, 8) == pytest.approx(50e9)
    assert line_rate.nic_rate_Bps(h100, 4) == pytest.approx(100e9)  # 8 NICs, 4 GPUs
    assert line_rate.nic_rate_Bps(h100, 72) == pytest.approx(50e9)  # a domain of many nodes
    assert nccl_tests.read(H100_2N).ranks_per_host == 8  # "on dgx-h100-0N" x 8 each
    assert nccl_tests.read(NVLS_1X8).ranks_per_host == 8  # "on    node005" x 8
