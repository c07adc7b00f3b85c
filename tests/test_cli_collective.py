"""`codesign collective`: the issue's Done-when numbers, sweeps, plots and one-line errors."""

import json
import subprocess
import sys

import pytest

from codesign.cli import main
from codesign.model import collectives as co
from codesign.model import hardware as hw
from codesign.units import GB, GiB


def _json(capsys, *argv):
    assert main(["collective", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


KEYS = {"time_s", "algbw_Bps", "busbw_Bps", "algorithm", "tier", "latency_s", "bandwidth_s",
        "reduction_s"}


def test_dgx_h100_ring_all_reduce_busbw_is_370_GBps(capsys):
    out = _json(capsys, "all_reduce", "--ranks", "8", "--bytes", "8GiB", "--system", "dgx-h100",
                "--algorithm", "ring")
    assert KEYS <= set(out) and "weights" not in out
    assert out["busbw_Bps"] == pytest.approx(370 * GB, rel=0.05)
    assert out["algorithm"] == "ring" and out["tier"] == "scale_up"
    assert out["algbw_Bps"] == pytest.approx(8 * GiB / out["time_s"])
    assert out["busbw_Bps"] == pytest.approx(out["algbw_Bps"] * 2 * 7 / 8)
    assert out["time_s"] == pytest.approx(out["latency_s"] + out["bandwidth_s"]
                                          + out["reduction_s"])


@pytest.mark.parametrize("system, algorithm, target_GBps", [
    ("dgx-h100", "in_network", 480), ("dgx-a100", "ring", 230),
])
def test_nvls_and_dgx_a100_busbw(capsys, system, algorithm, target_GBps):
    out = _json(capsys, "all_reduce", "--ranks", "8", "--bytes", "8GiB", "--system", system,
                "--algorithm", algorithm)
    assert out["busbw_Bps"] == pytest.approx(target_GBps * GB, rel=0.05)


def test_one_ndr_nic_is_about_47_GBps(capsys):
    ring = _json(capsys, "all_reduce", "--ranks", "16", "--bytes", "8GiB", "--tier", "scale_out",
                 "--algorithm", "ring")
    assert ring["tier"] == "scale_out"
    assert ring["busbw_Bps"] == pytest.approx(47 * GB, rel=0.05)
    p2p = _json(capsys, "send_recv", "--ranks", "2", "--bytes", "8GiB", "--tier", "scale_out",
                "--algorithm", "direct")
    assert p2p["busbw_Bps"] == pytest.approx(47 * GB, rel=0.01)


def test_auto_on_one_node_picks_nvls_for_large_messages(capsys):
    out = _json(capsys, "all_reduce", "--ranks", "8", "--bytes", "8GiB")
    assert out["algorithm"] == "in_network" and out["tier"] == "scale_up"
    assert set(out["weights"]) == set(co.candidates("all_reduce", hw.Nccl()))
    assert sum(out["weights"].values()) == pytest.approx(1.0)


def test_auto_on_1024_ranks_is_log_latency_small_and_bandwidth_optimal_large(capsys):
    small = _json(capsys, "all_reduce", "--ranks", "1024", "--bytes", "8B", "--algorithm", "auto")
    # NCCL's tree across the 128 nodes (chains inside each): log2 N network steps;
    # recursive doubling and halving-doubling are not NCCL's, so not candidates
    assert small["algorithm"] == "rail_tree" and small["tier"] == "scale_up+scale_out"
    assert "recursive_doubling" not in small["weights"]
    assert small["latency_s"] > 100 * small["bandwidth_s"]
    large = _json(capsys, "all_reduce", "--ranks", "1024", "--bytes", "8GiB", "--algorithm", "auto")
    # NCCL's pipelined two-tier algorithms (one channel per NIC, NVLink and the
    # network streaming at once) beat the sequential hierarchical form; over 128
    # domains the NVLS + tree one wins on latency (was "hierarchical" before them)
    assert large["algorithm"] == "nvls_tree" and large["tier"] == "scale_up+scale_out"
    assert set(large["weights"]) == set(co.candidates("all_reduce", hw.Nccl(), hierarchical=True))
    assert large["bandwidth_s"] > 10 * large["latency_s"]


def test_human_output_is_readable(capsys):
    assert main(["collective", "all-reduce", "--ranks", "8", "--bytes", "1GB", "--algorithm",
                 "ring"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "all_reduce of 953.7MiB over 8 ranks on dgx-h100 scale_up, algorithm ring")
    assert "busbw" in out and "algbw" in out and "GB/s" in out and "latency" in out


def test_sweep_prints_an_nccl_tests_table(capsys):
    assert main(["collective", "all_gather", "--ranks", "8", "--sweep", "8B:1MiB",
                 "--dtype", "half"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    header = lines[1].lstrip("#").split()
    assert header == ["size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                      "algorithm"]
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 18  # 8 B, 16 B, ..., 1 MiB
    assert [int(r[0]) for r in rows] == [8 * 2**i for i in range(18)]
    assert [int(r[1]) for r in rows] == [4 * 2**i for i in range(18)]  # 2-byte elements
    assert all(r[2] == "half" and r[6] in co.algorithms("all_gather") for r in rows)
    busbw = [float(r[5]) for r in rows]
    assert busbw == sorted(busbw) and busbw[-1] > 10  # bandwidth grows with size


def test_sweep_json_rows(capsys):
    out = _json(capsys, "reduce_scatter", "--ranks", "8", "--sweep", "1KiB:4KiB")
    assert [r["size_bytes"] for r in out["rows"]] == [1024.0, 2048.0, 4096.0]
    assert all(KEYS <= set(r) and r["type"] == "float" for r in out["rows"])


def test_plot_draws_every_algorithm(tmp_path, capsys):
    path = tmp_path / "all_reduce.png"
    assert main(["collective", "all_reduce", "--ranks", "8", "--sweep", "8B:1GiB",
                 "--plot", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


@pytest.mark.parametrize("argv, named", [
    (["allreduce", "--ranks", "8", "--bytes", "8B"], "op='allreduce'"),
    (["all_reduce", "--ranks", "8", "--bytes", "8B", "--algorithm", "bogus"], "algorithm='bogus'"),
    (["all_to_all", "--ranks", "8", "--bytes", "8B", "--algorithm", "tree"], "algorithm='tree'"),
    (["all_reduce", "--ranks", "8", "--bytes", "8B", "--system", "dgx-z9"], "'dgx-z9'"),
    (["all_reduce", "--ranks", "8", "--bytes=-5GiB"], "bytes='-5GiB'"),
    (["all_reduce", "--ranks", "8", "--bytes", "12XB"], "bytes='12XB'"),
    (["all_reduce", "--ranks", "0", "--bytes", "8B"], "--ranks=0 must be an integer in [1, 1e7]"),
    (["all_reduce", "--ranks", "-3", "--bytes", "8B"], "ranks=-3"),
    (["all_reduce", "--ranks", "3.5", "--bytes", "8B"], "--ranks=3.5 must be an integer"),
    (["all_reduce", "--ranks", "6", "--bytes", "8B", "--algorithm", "recursive_doubling"],
     "--ranks=6 must be a power of two for --algorithm recursive_doubling"),
    (["all_reduce", "--ranks", "12", "--bytes", "8B", "--algorithm", "halving_doubling"],
     "--ranks=12 must be a power of two"),
    (["all_reduce", "--ranks", "16", "--bytes", "8B", "--tier", "scale_up"], "ranks=16"),
    (["all_reduce", "--ranks", "8", "--bytes", "8B", "--tier", "scale_out", "--algorithm",
      "in_network"], "algorithm='in_network'"),
    (["all_reduce", "--ranks", "8", "--bytes", "8B", "--tier", "scale_out", "--algorithm",
      "hierarchical"], "algorithm='hierarchical'"),
    (["all_reduce", "--ranks", "8"], "--bytes"),
    (["all_reduce", "--ranks", "8", "--sweep", "1GiB:8B"], "sweep='1GiB:8B'"),
])
def test_bad_input_is_one_line_naming_the_value_and_exit_2(capsys, argv, named):
    assert main(["collective", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and "\n" not in err
    assert err.startswith("codesign collective: error: ") and named in err


@pytest.mark.parametrize("argv", [
    ["all_reduce", "--ranks", "abc", "--bytes", "8B"],
    ["all_reduce", "--ranks", "8", "--bytes", "8B", "--tier", "nvlink"],
    ["all_reduce", "--bytes", "8B"],
])
def test_argparse_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(["collective", *argv])
    assert exit_.value.code == 2 and "error:" in capsys.readouterr().err


def test_console_error_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "codesign", "collective", "all_reduce",
                           "--ranks", "8", "--bytes", "lots"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("codesign collective: error: bytes='lots' is not a size; "
                                   "write e.g. 8B, 64KiB, 1GiB or 1GB")


def test_a_two_tier_algorithm_on_ranks_that_fit_one_domain_names_the_flag_to_pass(capsys):
    """Without --tier the ranks chose the scale-up tier: the message does not ask
    to drop a flag that was never given."""
    assert main(["collective", "all_reduce", "--ranks", "8", "--bytes", "1MiB",
                 "--algorithm", "nvls_tree"]) == 2
    err = capsys.readouterr().err
    assert "drop --tier" not in err and "pass --tier hierarchical" in err
