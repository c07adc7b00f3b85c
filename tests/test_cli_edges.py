"""The command's rough edges: every bad command line, file argument and
interruption is one line on stderr naming the flag or file, with its exit code."""

import json
import math
import os

import pytest

from codesign.cli import main


def _fails(capsys, *argv, code=2) -> str:
    """The one stderr line of a command that exits `code` (argparse's exits too)."""
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    captured = capsys.readouterr()
    assert rc == code, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "usage:" not in captured.err and "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize("argv, words", [
    (["frobnicate"], ["codesign: error:", "'frobnicate'"]),
    (["optimize", "--method", "grid"], ["codesign optimize: error:", "--vary"]),
    (["sensitivity", "--output", "nonsense"],
     ["codesign sensitivity: error: --output: invalid choice 'nonsense' (choose from "
      "step_time_s, tokens_per_s"]),
    (["collective", "all_reduce", "--ranks", "x"], ["codesign collective: error: --ranks:", "'x'"]),
    (["estimate", "--json", "--csv"], ["codesign estimate: error:", "--csv"]),
])
def test_argparse_errors_are_one_line(argv, words, capsys):
    line = _fails(capsys, *argv)
    for w in words:
        assert w in line


def test_help_keeps_its_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sensitivity", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: codesign sensitivity")


# ------------------------------------------------------------ file arguments
@pytest.mark.parametrize("argv, what", [
    (["estimate", "{dir}"], "scenario file"),
    (["estimate", "--system", "{dir}"], "system file"),
    (["calibrate", "{dir}"], "measurement file"),
    (["sweep", "{dir}"], "spec file"),
])
def test_a_directory_is_named(argv, what, capsys, tmp_path):
    folder = tmp_path / "d.toml"  # a .toml name: --system reads it as a file
    folder.mkdir()
    line = _fails(capsys, *(a.format(dir=folder) for a in argv))
    assert f"{what} '{folder}' is a directory" in line


@pytest.mark.parametrize("argv, what", [
    (["estimate", "/dev/zero"], "scenario file"),
    (["sweep", "/dev/zero"], "spec file"),
    (["calibrate", "/dev/zero"], "measurement file"),
])
def test_an_endless_stream_is_refused_at_the_cap(argv, what, capsys, monkeypatch):
    from codesign import files

    monkeypatch.setattr(files, "LOG_LIMIT_BYTES", 2**20)  # the log cap is 1 GiB
    line = _fails(capsys, *argv)
    assert f"{what} '/dev/zero' is not a regular file" in line


def test_a_scenario_over_the_cap_is_refused(capsys, tmp_path):
    from codesign import files

    big = tmp_path / "big.toml"
    big.write_text("#" * (files.TOML_LIMIT_BYTES + 1))
    line = _fails(capsys, "estimate", str(big))
    assert f"scenario file '{big}' is larger than 16MiB" in line


NCCL_LOG = "tests/fixtures/nccl/all_gather_perf_8xH100.txt"


@pytest.mark.parametrize("argv, words", [
    (["calibrate", NCCL_LOG, "--out", "{tmp}"], "--out '{tmp}' is a directory"),
    (["calibrate", NCCL_LOG, "--out", "{tmp}/no/x.toml"], "its folder '{tmp}/no' does not exist"),
    (["sweep", "sweeps/moe_node_limit.toml", "--out", "{tmp}/f"], "--out '{tmp}/f' is a file"),
    (["sweep", "sweeps/moe_node_limit.toml", "--figures", "{tmp}/f"], "--figures '{tmp}/f' is a"),
])
def test_output_paths_are_checked_first(argv, words, capsys, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    (tmp_path / "f").write_text("")
    line = _fails(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert words.format(tmp=tmp_path) in line


def test_calibrate_writes_a_system_file_that_loads(capsys, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    out = tmp_path / "cal.toml"
    assert main(["calibrate", NCCL_LOG, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["estimate", "--system", str(out), "--json"]) == 0


# ------------------------------------------------------------ --system FILE
@pytest.mark.parametrize("text", ["", "# nothing\n", "[system]\n"])
@pytest.mark.parametrize("command", [["estimate"], ["collective", "all_reduce", "--ranks", "8"]])
def test_a_system_file_that_sets_nothing_is_refused(text, command, capsys, tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text(text)
    line = _fails(capsys, *command, "--system", str(path))
    assert f"system file '{path}' sets no [system] key" in line


def test_a_minimal_system_file_loads(capsys, tmp_path):
    path = tmp_path / "h100.toml"
    path.write_text('[system]\npreset = "dgx-h100"\n')
    assert main(["estimate", "--system", str(path), "--json"]) == 0
    assert '"preset": "dgx-h100"' in capsys.readouterr().out


# ------------------------------------------------------------ --plot PATH
@pytest.mark.parametrize("command", [
    ["estimate"], ["roofline"], ["collective", "all_reduce", "--ranks", "8", "--bytes", "1MiB"]])
def test_plot_prints_the_path_it_wrote(command, capsys, tmp_path):
    (tmp_path / "adir").mkdir()  # a name without a suffix: matplotlib adds .png
    assert main([*command, "--plot", str(tmp_path / "adir")]) == 0
    written = tmp_path / "adir.png"
    assert f"wrote {written}" in capsys.readouterr().out.splitlines()
    assert written.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name, written", [("x.", "x.png"), ("..png", "..png.png")])
def test_the_printed_plot_path_is_matplotlib_s(name, written, capsys, tmp_path, monkeypatch):
    """matplotlib adds .png where os.path.splitext finds no extension (`..png` has
    none: leading dots are skipped) and strips trailing dots first."""
    monkeypatch.chdir(tmp_path)
    assert main(["roofline", "--plot", name]) == 0
    assert f"wrote {written}" in capsys.readouterr().out.splitlines()
    assert sorted(p.name for p in tmp_path.iterdir()) == [written]


@pytest.mark.parametrize("name, words", [("x.v2", "matplotlib cannot write '.v2'"),
                                         ("d.png", "is a directory"), (".", "is a directory"),
                                         ("..", "is a directory"),
                                         ("no/such.png", "its folder")])
def test_plot_path_is_checked_first(name, words, capsys, tmp_path):
    (tmp_path / "d.png").mkdir()
    path = os.path.join(str(tmp_path), name)  # not pathlib: it drops a trailing "."
    line = _fails(capsys, "estimate", "--plot", path)
    assert line.startswith("codesign estimate: error: --plot ") and words in line


@pytest.mark.parametrize("size, text", [("1PiB", "1PiB"), ("1EiB", "1EiB")])
def test_collective_takes_sizes_up_to_exbibytes(size, text, capsys):
    assert main(["collective", "all_reduce", "--ranks", "8", "--bytes", size]) == 0
    assert f"all_reduce of {text} over 8 ranks" in capsys.readouterr().out


# ------------------------------------------------------------ Ctrl-C
def test_an_interrupted_sweep_says_how_to_resume(tmp_path):
    """SIGINT once the sweep has written a chunk: one line naming --resume, exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec, out = root / "sweeps" / "moe_node_limit.toml", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(root)}
    # `python -m codesign`, taking SIGINT as from a terminal's Ctrl-C even where this
    # process was started with it ignored (a background job)
    start = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "runpy.run_module('codesign', run_name='__main__', alter_sys=True)")
    proc = subprocess.Popen(
        [sys.executable, "-c", start, "sweep", str(spec), "--out", str(out),
         "--chunk-size", "1", "--no-progress", "--no-plots"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 240
        while not list((out / "chunks").glob("*.json")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no chunk written in 240 s"
            time.sleep(0.01)  # the compiled sweep's chunks follow fast: catch it mid-way
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        f"codesign sweep: interrupted; `codesign sweep {spec} --out {out} --resume` continues "
        "from the chunks written"], err


def test_an_interrupted_command_is_one_line_and_130(capsys, monkeypatch):
    from codesign.cli import estimate

    def interrupted(args, name):
        raise KeyboardInterrupt

    monkeypatch.setattr(estimate, "run", interrupted)
    assert _fails(capsys, "estimate", code=130) == "codesign estimate: interrupted"


@pytest.mark.parametrize("flag, value", [("--bytes", "1e308"), ("--bytes", "1e400"),
                                         ("--sweep", "1B:1e308")])
def test_a_message_past_the_cost_models_range_is_refused_not_nan(capsys, flag, value):
    """1e308 bytes overflowed to a NaN time at exit 0 (issue 25); past 2^70 bytes
    the size is refused in one line, and 1 EiB still answers with finite numbers."""
    assert main(["collective", "all_reduce", "--ranks", "8", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag}='{value}': a message must be at most 2^70" in err
    assert main(["collective", "all_reduce", "--ranks", "8", "--bytes", "1EiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(math.isfinite(out[k]) and out[k] > 0 for k in ("time_s", "algbw_Bps", "busbw_Bps"))


def test_an_8_bit_recipe_on_a_chip_without_fp8_names_its_8_bit_peak(capsys):
    """The A100's 8-bit peak is int8's (it has no fp8): the text says '8-bit'."""
    assert main(["estimate", "--set", "training.dtype=fp8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("MFU "))
    assert ", of the 8-bit peak " in line and "fp8" not in line, line
