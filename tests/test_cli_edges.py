"""The command's rough edges: every bad command line, file argument and
interruption is one line on stderr naming the flag or file, with its exit code."""

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
