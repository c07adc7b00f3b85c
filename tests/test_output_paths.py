"""Every file a command writes is where the user pointed and nowhere else (issue 56):
an output that is an input of the same command, or another of its outputs (by
path, through a symbolic link on the way, or as a hard link), is refused before
any work with one line and exit 2, the input left as it was; a symbolic link at
the final name is refused, never written through; `-` is standard output for
text and refused for a figure; a sweep spec's figure files stay inside the
figures folder and the sweep folder's lock is never followed; validate's JSON
and CSV hold no NaN."""

import csv
import io
import json
import os

import pytest

from codesign import files
from codesign.cli import main
from codesign.sweep import _spec, _store

SCENARIO = "[model]\npreset = \"gpt3-175b\"\n"  # a scenario file (its name is the test's)


def _fails(capsys, *argv, code=2) -> str:
    """The one stderr line of a command that exits `code`."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    captured = capsys.readouterr()
    assert rc == code, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.fixture
def never(monkeypatch):
    """Any estimate before the paths are checked fails the test."""
    from codesign.cli import estimate, report, timeline  # imported before any is patched

    def no_work(*_):
        raise AssertionError("computed before the output paths were checked")

    for module in (estimate, timeline, report):
        monkeypatch.setattr(module, "evaluate", no_work)


def _files_of(folder) -> dict:
    return {p.name: os.readlink(p) if p.is_symlink() else p.read_bytes()
            for p in sorted(folder.iterdir())}


# ------------------------------------------------------- outputs onto inputs and each other
@pytest.mark.parametrize("argv, words", [
    # the trace and the figure in one file: the trace would be lost
    (["timeline", "--out", "t.png", "--plot", "t.png"], "--out 't.png' is --plot's file too"),
    # the same file by a hard link
    (["timeline", "--out", "t.png", "--plot", "hard.png"],
     "--out 't.png' is --plot's file too"),
    # the same file through a folder that is a link
    (["timeline", "--out", "t.png", "--plot", "here/t.png"],
     "--out 't.png' is --plot's file too"),
    # the scenario overwritten by a figure, a trace, a page
    (["estimate", "s.png", "--plot", "s.png"], "--plot 's.png' is the scenario file"),
    (["timeline", "s.toml", "--out", "s.toml"], "--out 's.toml' is the scenario file"),
    (["report", "s.toml", "--out", "s.toml"], "--out 's.toml' is the scenario file"),
    (["report", "s.toml", "--out", "hard.toml"], "--out 'hard.toml' is the scenario file"),
    (["timeline", "s.toml", "--out", "here/s.toml"], "--out 'here/s.toml' is the scenario file"),
    (["timeline", "--system", "sys.toml", "--out", "sys.toml"],
     "--out 'sys.toml' is the --system file"),
    # a link planted at the final name: never written through
    (["timeline", "--out", "link.json"], "--out 'link.json' is a symbolic link"),
    (["report", "--out", "link.json"], "--out 'link.json' is a symbolic link"),
    (["timeline", "--out", "t.json", "--plot", "link.png"], "--plot 'link.png' is a symbolic"),
    # a figure is binary: not to standard output
    (["timeline", "--out", "t.json", "--plot", "-"], "--plot -: a figure is a binary file"),
    (["timeline", "--out", "-", "--plot", "t.png"], None),  # fine: checked, then `never`
])
def test_an_output_onto_an_input_or_another_output_is_refused_first(
        argv, words, tmp_path, monkeypatch, capsys, never):
    monkeypatch.chdir(tmp_path)
    for name in ("s.png", "s.toml", "t.png", "sys.toml"):
        (tmp_path / name).write_text(SCENARIO if name != "sys.toml" else "[system]\n")
    for name in ("victim.json", "victim.png"):
        (tmp_path / name).write_text("someone else's file")
    os.link(tmp_path / ("s.toml" if argv[0] == "report" else "t.png"),
            tmp_path / ("hard.toml" if argv[0] == "report" else "hard.png"))
    (tmp_path / "link.json").symlink_to("victim.json")
    (tmp_path / "link.png").symlink_to("victim.png")
    (tmp_path / "here").symlink_to(".")
    before = _files_of(tmp_path)
    if words is None:  # the paths pass: the command gets to its work
        assert main(argv) == 1 and "computed before" in capsys.readouterr().err
        return
    line = _fails(capsys, *argv)
    assert words in line, line
    assert _files_of(tmp_path) == before  # nothing written, nothing followed


def test_two_outputs_on_standard_output_are_refused():
    with pytest.raises(ValueError, match="--report -: --out is standard output too"):
        files.check_outputs({"--out": "-", "--report": "-"}, {})


def test_the_writer_replaces_a_file_and_leaves_a_hard_link_to_it(tmp_path):
    """`write_file` writes a new file and renames it over the old name: another name
    of the old file (a hard link) keeps the old bytes; no temp file is left."""
    out, other = tmp_path / "out.json", tmp_path / "other.json"
    out.write_text("old")
    os.link(out, other)
    files.write_file(out, "new")
    assert out.read_text() == "new" and other.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "out.json"]
    (tmp_path / "link").symlink_to(other)
    with pytest.raises(ValueError, match="is a symbolic link"):
        files.write_file(tmp_path / "link", "new")
    assert other.read_text() == "old"


def test_the_writer_keeps_permissions_and_writes_a_device_in_place(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")
    out.chmod(0o600)
    files.write_file(out, "new")
    assert out.read_text() == "new" and (out.stat().st_mode & 0o777) == 0o600
    files.write_file("/dev/null", "nothing")  # a character device: written, not replaced
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_a_failed_write_leaves_the_old_file(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")

    def fails(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        files.write_file(out, fails)
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_dash_is_standard_output_for_the_trace(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["timeline", "--out", "-"]) == 0
    captured = capsys.readouterr()
    trace = json.loads(captured.out)  # stdout is the trace alone
    assert trace["otherData"]["scenario"] == "default"
    assert "default: step" in captured.err and "wrote" not in captured.err
    assert not (tmp_path / "-").exists()


# ------------------------------------------------------------------------- sweeps
SPEC = """
name = "p"
target = "collective"
[base]
system = "dgx-h100"
op = "all_reduce"
algorithm = "ring"
[knobs]
ranks = [8, 16]
[[plots]]
file = {file}
x = "ranks"
y = "time_s"
"""


@pytest.mark.parametrize("file", ['"../../escape.png"', '"/tmp/escape.png"', '"a/../../x.png"',
                                  '"~/x.png"', '""', '"figs/"'])
def test_a_spec_names_no_file_outside_the_figures_folder(file, tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(file=file))
    line = _fails(capsys, "sweep", spec, "--out", tmp_path / "o", "--no-progress")
    assert "plots[0].file=" in line, line
    assert not (tmp_path / "o").exists() and not (tmp_path / "escape.png").exists()


def test_a_spec_figure_in_a_subfolder_is_drawn_there():
    spec = _spec.parse_spec({"target": "collective", "base": {"op": "all_reduce"},
                             "knobs": {"ranks": [8, 16]},
                             "plots": [{"file": "sub/t.png", "x": "ranks", "y": "time_s"}]})
    assert spec.plots[0].file == "sub/t.png"


def test_a_figure_folder_linked_out_is_refused(tmp_path):
    from codesign.sweep._report import figure_path

    figures, away = tmp_path / "figures", tmp_path / "away"
    figures.mkdir()
    away.mkdir()
    (figures / "sub").symlink_to(away)
    with pytest.raises(ValueError, match=r"plots\[0\].file='sub/t.png' leads out"):
        figure_path(figures, "sub/t.png", "plots[0].file")


@pytest.mark.parametrize("resume", [False, True])
def test_a_planted_lock_link_is_refused_and_its_target_untouched(resume, tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(file='"t.png"'))
    out, victim = tmp_path / "o", tmp_path / "victim"
    out.mkdir()
    victim.write_text("someone else's file\n")
    (out / _store.LOCK_FILE).symlink_to(victim)
    line = _fails(capsys, "sweep", spec, "--out", out, "--no-progress",
                  *(["--resume"] if resume else []))
    assert f"'{out / _store.LOCK_FILE}' is a symbolic link" in line
    assert victim.read_text() == "someone else's file\n"
    assert sorted(p.name for p in out.iterdir()) == [_store.LOCK_FILE]


def test_a_lock_hard_linked_to_another_file_is_refused(tmp_path):
    out, victim = tmp_path / "o", tmp_path / "victim"
    out.mkdir()
    victim.write_text("someone else's file\n")
    os.link(victim, out / _store.LOCK_FILE)
    with pytest.raises(ValueError, match="not a plain file of its own"), _store.locked(out):
        pass
    assert victim.read_text() == "someone else's file\n"


def test_the_spec_is_not_one_of_the_files_the_sweep_writes(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    spec = out / "summary.txt"
    spec.write_text(SPEC.format(file='"t.png"'))
    line = _fails(capsys, "sweep", spec, "--out", out, "--no-progress")
    assert "is OUT/summary.txt" in line
    assert spec.read_text() == SPEC.format(file='"t.png"')


# ------------------------------------------------------------------------ validate
def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} in the JSON")

    return json.loads(text, parse_constant=refuse)


def test_validate_json_and_csv_hold_no_nan(capsys, monkeypatch, validate_rows):
    from codesign import validate

    nan = float("nan")  # and a row the model refuses (none of today's rows is)
    given = [*validate_rows, dict(validate_rows[0], predicted=nan, error=nan,
                                  refused="an output outside its physical range")]
    monkeypatch.setattr(validate, "run", lambda *_: given)  # evaluated once
    assert main(["validate", "--json"]) == 0
    rows = _strict(capsys.readouterr().out)
    refused = [r for r in rows if r["refused"]]
    assert refused
    for r in refused:  # no prediction: null, and the reason says why
        assert r["predicted"] is None and r["error"] is None
        assert r["reason"] == f"predicted, error: refused: {r['refused']}"
    assert all(r["reason"] == "" for r in rows if not r["refused"])
    assert main(["validate", "--csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(table) == len(rows) and "reason" in table[0]
    for r in table:
        assert not any(v.lower() in ("nan", "inf", "-inf") for v in r.values()), r


def test_validate_cross_json_holds_no_nan(capsys, monkeypatch, validate_rows):
    """Where `--cross` has no cross-validated error (NaN in `validate.cross_validate`):
    a calibration row (it sets the constant), and a constant only its own set fits (no
    other set has rows of its chip family to refit it on: Shoeybi et al.'s V100 rows)."""
    from codesign import validate

    nan = float("nan")
    rows = [dict(validate_rows[0], cross_error=nan, calibration=True, cross_note=""),
            dict(validate_rows[0], cross_error=nan, calibration=False, family="V100",
                 cross_note="only its own set fits its constant"),
            dict(validate_rows[0], cross_error=0.05, cross_note="matmul_efficiency 0.5 without "
                                                                "its set")]
    monkeypatch.setattr(validate, "run", lambda *_: validate_rows)
    monkeypatch.setattr(validate, "cross_validate", lambda rows=None, **_: (crossed, []))
    crossed = rows
    assert main(["validate", "--cross", "--json"]) == 0
    got = _strict(capsys.readouterr().out)
    assert [r["cross_error"] for r in got] == [None, None, 0.05]
    assert got[0]["reason"].startswith("cross_error: a calibration row")
    assert got[1]["reason"] == ("cross_error: no other source set has rows of its chip family "
                                "(V100) to refit its constant on without this one")
    assert got[2]["reason"] == ""


@pytest.mark.parametrize("folder", ["chunks", "figures"])
def test_a_planted_folder_link_in_the_sweep_folder_is_refused(folder, tmp_path, capsys):
    """OUT/chunks or OUT/figures a link to someone else's folder: refused, nothing
    there written or removed (a fresh run removes its old chunks)."""
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(file='"t.png"'))
    out, away = tmp_path / "o", tmp_path / "away"
    out.mkdir()
    away.mkdir()
    (away / "000000.json").write_text("someone else's file\n")
    (out / folder).symlink_to(away)
    line = _fails(capsys, "sweep", spec, "--out", out, "--no-progress")
    assert f"'{out / folder}' is a symbolic link" in line
    assert [p.name for p in away.iterdir()] == ["000000.json"]
    assert (away / "000000.json").read_text() == "someone else's file\n"
