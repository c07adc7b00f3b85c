"""`codesign bench`: the nccl-tests table and JSON records of the executed collectives."""

import json

import numpy as np
import pytest

from codesign.cli import main
from codesign.execute import bench, nccl_tests


def test_layout_rounds_sizes_like_nccl_tests():
    assert bench.layout("all_reduce", 4096, 4, 8) == (1024, 4096)
    assert bench.layout("all_reduce", 6, 4, 8) == (1, 4)  # whole elements, at least one
    assert bench.layout("all_gather", 4096, 4, 8) == (128, 4096)  # size = whole output
    assert bench.layout("reduce_scatter", 100, 4, 8) == (24, 96)  # a multiple of ranks
    assert bench.layout("all_to_all", 4, 4, 8) == (8, 32)


def test_expected_output_closed_forms():
    x = bench.input_pattern(4, 8)
    assert x.min() >= -5 and x.max() <= 5
    blocks = x.reshape(4, 8)
    np.testing.assert_array_equal(bench.expected_output("all_reduce", x, 4)[8:16], blocks.sum(0))
    np.testing.assert_array_equal(bench.expected_output("reduce_scatter", x, 4), blocks.sum(0))
    a2a = bench.expected_output("all_to_all", x, 4).reshape(4, 4, 2)
    np.testing.assert_array_equal(a2a[1, 2], blocks.reshape(4, 4, 2)[2, 1])  # rank 1 from 2
    np.testing.assert_array_equal(bench.expected_output("send_recv", x, 4)[:8], blocks[3])


def test_bench_json_records_follow_nccl_tests_definitions(capsys, tmp_path):
    out = tmp_path / "bench.jsonl"
    rc = main(["bench", "--op", "all_reduce", "--algorithm", "ring", "--sizes", "4KiB:8KiB",
               "--iters", "3", "--warmup", "1", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["size_bytes"] for r in records] == [4096, 8192]
    for r in records:
        assert {"size_bytes", "time_s", "algbw_Bps", "busbw_Bps", "wrong", "op", "algorithm",
                "ranks", "time_median_s"} <= set(r)
        assert r["wrong"] == 0 and r["ranks"] == 8 and r["count"] == r["size_bytes"] // 4
        assert 0 < r["time_s"] <= r["time_median_s"]
        assert r["algbw_Bps"] == pytest.approx(r["size_bytes"] / r["time_s"])
        assert r["busbw_Bps"] == pytest.approx(r["algbw_Bps"] * 2 * 7 / 8)
    assert [json.loads(line) for line in out.read_text().splitlines()] == records
    # the one progress bar (codesign.progress): 2 warm-ups and 3 rounds
    assert f"bench all_reduce ring [{'#' * 20}] 5/5 steps " in captured.err


def test_bench_table_reads_back_as_an_nccl_tests_log(capsys):
    rc = main(["bench", "--op", "all_to_all", "--algorithm", "all", "--mesh", "2x4",
               "--sizes", "1KiB:2KiB", "--iters", "2", "--warmup", "1", "--dtype", "int32",
               "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0
    tables = text.split("# codesign bench: ")[1:]
    assert [t.split()[2] for t in tables] == ["direct", "hierarchical", "lax"]
    for table in tables:
        log = nccl_tests.parse("#" + table, op="all_to_all", ranks=8)
        assert [r.size_bytes for r in log.rows] == [1024, 2048]
        assert all(r.wrong == 0 and r.dtype == "int32" and r.time_s > 0 for r in log.rows)
        assert "# Out of bounds values : 0 OK" in table


@pytest.mark.parametrize("argv,message", [
    (["--algorithm", "hierarchical", "--mesh", "8"], "needs a 2D mesh"),
    (["--mesh", "3x4"], "mesh='3x4' needs 12 devices; JAX sees 8"),
    (["--mesh", "two"], "must be RANKS"),
    (["--op", "gather"], "op='gather' is not executable"),
    (["--algorithm", "tree", "--op", "all_gather"], "algorithm='tree' is not executable"),
    (["--sizes", "64KiB:4KiB"], "sizes='64KiB:4KiB' needs 1 <= MIN <= MAX"),
    (["--dtype", "int8"], "dtype='int8' is not supported"),
    (["--iters", "0"], "iters=0 must be >= 1"),
])
def test_bench_errors_are_one_line(capsys, argv, message):
    assert main(["bench", "--sizes", "1KiB:1KiB", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_power_of_two_algorithms_refuse_six_ranks():
    import jax

    mesh = bench.make_mesh("6", jax.devices()[:6])
    assert "recursive_doubling" not in bench.runnable_algorithms("all_reduce", mesh)
    assert "tree" in bench.runnable_algorithms("all_reduce", mesh)
    with pytest.raises(ValueError, match="needs a power-of-two number of ranks"):
        bench.check_runnable("all_reduce", "halving_doubling", mesh)
