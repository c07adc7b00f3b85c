"""`codesign calibrate` on hostile measurement files (issue 25): every bad value is
one line naming the file, the line, the field and the value (exit 2); a fit with
no physical answer is refused with its reason (exit 3); nothing is written."""

import json
from pathlib import Path

import pytest

from codesign.cli import main
from codesign.model import collectives
from codesign.model.hardware import Tier

SIZES = [4096 * 2**k for k in range(9)]
HEADER = """# Collective test starting: all_reduce_perf
#
# Using devices
{ranks}#
#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong
#   (B)  (elements)               (us)  (GB/s)  (GB/s)          (us)  (GB/s)  (GB/s)
"""
FIRST_ROW_LINE = 3 + 8 + 1 + 2 + 1  # the header: comments, 8 "# Rank" lines, "#", columns


def _time_s(size_bytes, alpha_s=20e-6, bandwidth_Bps=3e9):
    return float(collectives.cost("all_reduce", "ring", size_bytes, 8,
                                  Tier(bandwidth_Bps, alpha_s, 1.0, 1e30)).time_s)


def _log(tmp_path, times_us=None, *, sizes=SIZES, ranks=8, wrong="0", name="all_reduce.log"):
    """A tiny nccl-tests all_reduce_perf log: `times_us` (tokens) per size, default
    alpha-beta times; the first row is on line FIRST_ROW_LINE."""
    times_us = times_us or [f"{_time_s(n) * 1e6:.2f}" for n in sizes]
    rank_lines = "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r} on host device {r}\n"
                         for r in range(ranks))
    rows = "".join(f"{n:12d} {n // 4:12d} float sum -1 {t} 1.0 1.0 {wrong} {t} 1.0 1.0 {wrong}\n"
                   for n, t in zip(sizes, times_us, strict=True))
    path = tmp_path / name
    path.write_text(HEADER.format(ranks=rank_lines) + rows)
    return str(path)


def _bench(tmp_path, **change):
    """`codesign bench --json` lines of an 8-rank ring all-reduce; `change` maps a
    field to a function of the row index giving its value (or None: leave it)."""
    lines = []
    for i, n in enumerate(SIZES):
        record = {"op": "all_reduce", "algorithm": "ring", "ranks": 8, "mesh": "8",
                  "size_bytes": n, "time_s": _time_s(n), "wrong": 0}
        for key, value in change.items():
            if value(i) is not None:
                record[key] = value(i)
        lines.append(json.dumps(record))
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _refused(capsys, tmp_path, argv, code):
    """Run calibrate with --out; it exits `code`, writes nothing, prints one line."""
    out = tmp_path / "fit.toml"
    assert main(["calibrate", *argv, "--out", str(out)]) == code
    captured = capsys.readouterr()
    assert not out.exists() and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


# ---------------------------------------------------------------- 1. NaN, inf, one rank
def test_an_infinite_time_in_a_log_is_refused_naming_its_line(capsys, tmp_path):
    times = [f"{_time_s(n) * 1e6:.2f}" for n in SIZES]
    times[3] = "inf"
    log = _log(tmp_path, times)
    line = _refused(capsys, tmp_path, [log], 2)
    assert line == (f"codesign calibrate: error: {log} line {FIRST_ROW_LINE + 3}: "
                    "time_s=inf must be a number in (0, 1e9]")


@pytest.mark.parametrize("bad,shown", [(float("nan"), "nan"), (-1.0, "-1"), (0.0, "0")])
def test_a_nan_negative_or_zero_time_in_bench_output_is_refused(capsys, tmp_path, bad, shown):
    path = _bench(tmp_path, time_s=lambda i: bad if i == 4 else None)
    line = _refused(capsys, tmp_path, [path], 2)
    assert line == (f"codesign calibrate: error: {path} line 5: time_s={shown} must be a "
                    "number in (0, 1e9]")


@pytest.mark.parametrize("ranks", [1, 0, 2.5, "8", True])
def test_ranks_must_be_an_integer_of_at_least_two(capsys, tmp_path, ranks):
    path = _bench(tmp_path, ranks=lambda i: ranks)
    line = _refused(capsys, tmp_path, [path], 2)
    assert line.startswith(f"codesign calibrate: error: {path} line 1: ranks={ranks!r}")
    if not isinstance(ranks, (str, bool)):
        assert line.endswith("must be an integer in [2, 1e7]: a collective over fewer than 2 "
                             "ranks crosses no network")


def test_a_log_of_one_rank_and_the_ranks_flags_are_checked(capsys, tmp_path):
    log = _log(tmp_path, ranks=1)
    assert _refused(capsys, tmp_path, [log], 2) == (
        f"codesign calibrate: error: {log}: its '#  Rank' lines count ranks=1 must be an "
        "integer in [2, 1e7]: a collective over fewer than 2 ranks crosses no network")
    assert "error: --ranks=1 must be an integer in [2, 1e7]" in _refused(
        capsys, tmp_path, [log, "--ranks", "1"], 2)
    assert "error: --local-ranks=0 must be an integer in [1, 1e7]" in _refused(
        capsys, tmp_path, [log, "--local-ranks", "0"], 2)


# ---------------------------------------------------------------- 2. no physical answer
def test_times_that_fall_as_size_grows_are_refused_with_exit_3(capsys, tmp_path):
    sizes = [8 * 2**k for k in range(28)]  # 8 B .. 1 GiB, as all_reduce_perf -b 8 -e 1G
    log = _log(tmp_path, [f"{1000 / (4 + k):.2f}" for k in range(28)], sizes=sizes)
    line = _refused(capsys, tmp_path, [log, "--json"], 3)
    assert line.startswith(f"codesign calibrate: the fit of {log} gives scale_up_bandwidth_Bps=")
    assert line.endswith(", not a number in [1000, 1e15]: times fall as size grows (lines "
                         f"{FIRST_ROW_LINE}-{FIRST_ROW_LINE + 27}); check the measurements")


def test_times_far_too_long_for_their_sizes_are_refused_with_exit_3(capsys, tmp_path):
    path = _bench(tmp_path, time_s=lambda i: SIZES[i] / 10.0)  # 10 B/s: seconds as us?
    line = _refused(capsys, tmp_path, [path], 3)
    assert "gives scale_up_bandwidth_Bps=" in line
    assert line.endswith("not a number in [1000, 1e15]: the times are long for their sizes: "
                         "are they in seconds?; check the measurements")


@pytest.mark.parametrize("size,shown", [(1e30, "1e+30"), (10**400, "inf"), (-8, "-8")])
def test_a_message_size_outside_its_domain_is_refused(capsys, tmp_path, size, shown):
    path = _bench(tmp_path, size_bytes=lambda i: size if i == 8 else None)
    assert _refused(capsys, tmp_path, [path], 2) == (
        f"codesign calibrate: error: {path} line 9: size_bytes={shown} must be a number in "
        "[0, 1.18059e21]")
    log = _log(tmp_path, sizes=[*SIZES[:-1], 10**30])
    assert f"{log} line {FIRST_ROW_LINE + 8}: size_bytes=1e+30 must be" in _refused(
        capsys, tmp_path, [log], 2)


def test_a_fit_needs_a_range_of_sizes_and_a_held_out_one(capsys, tmp_path):
    path = _bench(tmp_path, size_bytes=lambda i: 4096)
    assert "cannot tell latency from bandwidth" in _refused(capsys, tmp_path, [path], 2)
    lines = Path(_bench(tmp_path)).read_text().splitlines()
    singles = []
    for k, text in enumerate(lines[:3]):  # three runs of one size each: nothing held out
        single = tmp_path / f"single{k}.jsonl"
        single.write_text(text + "\n")
        singles.append(str(single))
    assert "has no held-out size" in _refused(capsys, tmp_path, singles, 2)


# ---------------------------------------------------------------- 3. wrong shapes
@pytest.mark.parametrize("text,message", [
    ("[1, 2, 3]\n", "line 1: a record must be a JSON object with op, algorithm, ranks, "
                    "size_bytes, time_s (`codesign bench --json` output), not int 1"),
    ('{"op": "all_reduce"}\n', "line 1: the record lacks algorithm, ranks, size_bytes, time_s; "
                               "expected `codesign bench --json` output"),
    ('[\n7]', "line 2: a record must be a JSON object"),
])
def test_json_of_the_wrong_shape_is_refused(capsys, tmp_path, text, message):
    path = tmp_path / "x.json"
    path.write_text(text)
    assert _refused(capsys, tmp_path, [str(path)], 2).startswith(
        f"codesign calibrate: error: {path} {message}")


def test_a_directory_or_a_missing_file_is_refused(capsys, tmp_path):
    folder = tmp_path / "logs.jsonl"
    folder.mkdir()
    assert _refused(capsys, tmp_path, [str(folder)], 2) == (
        f"codesign calibrate: error: measurement file '{folder}' is a directory; name a file")
    assert _refused(capsys, tmp_path, [str(tmp_path / "none.log")], 2) == (
        f"codesign calibrate: error: measurement file '{tmp_path / 'none.log'}' does not exist")


@pytest.mark.parametrize("field,value,message", [
    ("op", "gather", "op='gather' is not one of all_reduce"),
    ("algorithm", "bogus", "algorithm='bogus' has no cost model for op='all_reduce'"),
    ("wrong", "no", "wrong='no' must be a number"),
    ("wrong", -1, "wrong=-1 must be a number >= 0"),
])
def test_every_field_of_a_record_is_checked(capsys, tmp_path, field, value, message):
    path = _bench(tmp_path, **{field: lambda i: value if i == 2 else None})
    assert _refused(capsys, tmp_path, [path], 2).startswith(
        f"codesign calibrate: error: {path} line 3: {message}")


def test_a_hierarchical_record_needs_a_mesh_that_matches_its_ranks(capsys, tmp_path):
    path = _bench(tmp_path, algorithm=lambda i: "hierarchical", mesh=lambda i: "3x4")
    assert _refused(capsys, tmp_path, [path], 2) == (
        f"codesign calibrate: error: {path} line 1: mesh='3x4' must be NODESxLOCAL with "
        "NODES*LOCAL = ranks=8")


# ---------------------------------------------------------------- 4. unreadable text
def test_bytes_that_are_not_utf8_name_the_file_and_line(capsys, tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_bytes(b'{"op": "all_reduce"}\n{"op": "\xff"}\n')
    assert _refused(capsys, tmp_path, [str(path)], 2) == (
        f"codesign calibrate: error: measurement file '{path}' is not UTF-8 text (line 2, "
        "byte 29: invalid start byte); is it the right file?")


def test_an_unparsable_number_in_a_log_names_the_line_and_column(capsys, tmp_path):
    times = [f"{_time_s(n) * 1e6:.2f}" for n in SIZES]
    times[1] = "1x3.04"
    log = _log(tmp_path, times)
    assert _refused(capsys, tmp_path, [log], 2) == (
        f"codesign calibrate: error: {log} line {FIRST_ROW_LINE + 1}: time='1x3.04' is not a "
        "number")
    log = _log(tmp_path, wrong="many")
    assert f"{log} line {FIRST_ROW_LINE}: #wrong='many' is not a number" in _refused(
        capsys, tmp_path, [log], 2)


@pytest.mark.parametrize("text,where", [
    ('{"op": "all_reduce",\n "ranks": }\n', "line 2 column 11: not JSON (Expecting value)"),
    ('[{"op": 1}\n{"op": 2}]', "line 2 column 1: not JSON (Expecting ',' or ']' after a "
                               "record)"),
    ('{"op": 1}\n{"op": 2', "line 2 column 9: not JSON (Expecting ',' delimiter)"),
])
def test_a_json_syntax_error_names_the_line_and_column(capsys, tmp_path, text, where):
    path = tmp_path / "bench.jsonl"
    path.write_text(text)
    assert _refused(capsys, tmp_path, [str(path)], 2) == (
        f"codesign calibrate: error: {path} {where}")


# ---------------------------------------------------------------- what still works
def test_a_log_without_data_check_is_fitted(capsys, tmp_path):
    """nccl-tests -c 0 prints N/A under #wrong: the times are kept."""
    log = _log(tmp_path, wrong="N/A")
    assert main(["calibrate", log, "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["scale_up"]
    assert fit["points"] == len(SIZES)
    assert fit["alpha_s"] == pytest.approx(20e-6, rel=0.05)
    assert fit["bandwidth_Bps"] == pytest.approx(3e9, rel=0.05)
