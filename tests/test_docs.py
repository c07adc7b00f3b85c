"""Every command output quoted in README.md and docs/*.md is rerun here.

A fenced block whose first line is `$ codesign ...` is checked: each `$ ` line is a
command (a trailing backslash continues it on the next line) and the lines after it,
up to the next `$ ` line or the fence, are its quoted standard output. The commands
are `codesign ...`, run in-process through `codesign.cli.main`, and `cat FILE` of a
file such a command wrote; they run in order in one scratch directory (where
`tests/` points at this repository's tests, so fixture paths resolve). A quote
without `...` lines must equal the output; a `...` line stands for any number of
omitted lines, and the quoted runs between them must appear in order, contiguous,
anchored at the start and the end of the output unless a `...` stands there.
Trailing whitespace is ignored.

Each distinct command runs once per session (a JIT compile each, ~5-20 s on a
2-core CPU): keep the quoted commands few (`MAX_COMMANDS`). Outputs that are
measurements (timings) are not quoted as `$ codesign` blocks: they are labelled
with the command and the date that produced them.

docs/tutorial.md is one story whose commands read the files earlier ones wrote
(a scenario, benchmark records, a fitted system): its blocks run in order, in a
scratch directory of their own, in one test (`test_the_tutorial_runs_in_order`),
every command afresh; its measurements (bench timings, the fitted constants and
what follows from them) are left out with `...`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from codesign.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TUTORIAL = ROOT / "docs" / "tutorial.md"  # run in order, in one test
MAX_COMMANDS = 13  # distinct quoted commands outside the tutorial; each costs a compile


@dataclass(frozen=True)
class Quote:
    page: str
    line: int  # 1-based line of the command
    command: str
    expected: tuple[str, ...]


def _fenced_blocks(text: str):
    """(first line number, lines) of every fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if re.match(r"^```[\w-]*\s*$", lines[i]):
            start, i = i + 1, i + 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            yield start + 1, lines[start:i]
        i += 1


def quotes(path: Path) -> list[list[Quote]]:
    """The checked blocks of a page, each a list of its commands with their output."""
    page = str(path.relative_to(ROOT))
    blocks = []
    for first, lines in _fenced_blocks(path.read_text()):
        if not lines or not lines[0].startswith("$ codesign "):
            continue
        block: list[Quote] = []
        i = 0
        while i < len(lines):
            assert lines[i].startswith("$ "), (page, first + i, lines[i])
            at, command = first + i, lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            out = []
            while i < len(lines) and not lines[i].startswith("$ "):
                out.append(lines[i].rstrip())
                i += 1
            while out and not out[-1]:
                out.pop()
            block.append(Quote(page, at, command, tuple(out)))
        blocks.append(block)
    return blocks


BLOCKS = [block for path in PAGES if path != TUTORIAL for block in quotes(path)]


def _matches(expected: tuple[str, ...], actual: list[str]) -> str | None:
    """None if `actual` matches the quote, else what is missing."""
    runs: list[list[str]] = [[]]
    for line in expected:
        if line.strip() == "...":
            runs.append([])
        else:
            runs[-1].append(line)
    if len(runs) == 1:
        return None if runs[0] == actual else "the output differs"
    pos = 0
    for k, run in enumerate(runs):
        if not run:
            continue
        if k == 0:  # anchored at the start
            if actual[: len(run)] != run:
                return f"the output does not start with {run[0]!r}"
            pos = len(run)
        elif k == len(runs) - 1:  # anchored at the end
            if len(actual) - len(run) < pos or actual[len(actual) - len(run):] != run:
                return f"the output does not end with {run[-1]!r}"
        else:
            for start in range(pos, len(actual) - len(run) + 1):
                if actual[start:start + len(run)] == run:
                    pos = start + len(run)
                    break
            else:
                return f"not found (in order): {run[0]!r}"
    return None


_OUTPUTS: dict[str, str] = {}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("docs")
    (d / "tests").symlink_to(ROOT / "tests")
    return d


def _execute(command: str, capsys) -> str:
    """What `command` (`codesign ...` or `cat FILE...`) prints, run here and now."""
    argv = shlex.split(command)
    if argv[0] == "cat":
        return "".join(Path(f).read_text() for f in argv[1:])
    assert argv[0] == "codesign", f"only `codesign` and `cat` commands are checked: {command}"
    capsys.readouterr()
    rc = main(argv[1:])
    captured = capsys.readouterr()
    assert rc == 0, f"{command} exited {rc}: {captured.err.strip()[-500:]}"
    return captured.out


def _run(command: str, capsys) -> str:
    """`_execute`, once per distinct `codesign` command of the session."""
    if command.startswith("cat "):
        return _execute(command, capsys)
    if command not in _OUTPUTS:
        _OUTPUTS[command] = _execute(command, capsys)
    return _OUTPUTS[command]


def _check(q: Quote, printed: str) -> None:
    actual = [line.rstrip() for line in printed.split("\n")]
    while actual and not actual[-1]:
        actual.pop()
    problem = _matches(q.expected, actual)
    assert problem is None, (
        f"{q.page}:{q.line}: `{q.command}`: {problem}; it now prints:\n" + "\n".join(actual))


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b[0].page}:{b[0].line}" for b in BLOCKS])
def test_quoted_output_is_what_the_command_prints(block, scratch, capsys, monkeypatch, request):
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("COLUMNS", "120")
    if any(q.command.startswith("codesign validate") for q in block):
        from codesign import validate  # its rows computed once per run (conftest)

        rows = request.getfixturevalue("validate_rows")
        monkeypatch.setattr(validate, "run", lambda: rows)
    for q in block:
        _check(q, _run(q.command, capsys))


def test_the_tutorial_runs_in_order(tmp_path, capsys, monkeypatch):
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "120")
    steps = [q for block in quotes(TUTORIAL) for q in block]
    assert {"import", "estimate", "optimize", "sensitivity", "bench", "calibrate"} <= {
        q.command.split()[1] for q in steps if q.command.startswith("codesign ")}
    assert any("--system fit.toml" in q.command for q in steps)
    for q in steps:
        _check(q, _execute(q.command, capsys))


def test_the_quoted_commands_stay_few():
    commands = {q.command for b in BLOCKS for q in b if q.command.startswith("codesign")}
    assert 0 < len(commands) <= MAX_COMMANDS, sorted(commands)


def test_the_matcher():
    out = ["a", "b", "c", "d"]
    assert _matches(("a", "b", "c", "d"), out) is None
    assert _matches(("a", "b"), out) is not None
    assert _matches(("a", "...", "c", "d"), out) is None
    assert _matches(("...", "b", "c", "..."), out) is None
    assert _matches(("...", "c", "b", "..."), out) is not None
    assert _matches(("...", "c"), out) is not None
    assert _matches(("b", "..."), out) is not None
    assert _matches(("...", "b", "...", "d"), out) is None


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a page."""
    found, fence = set(), False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.*)$", line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_resolve_inside_the_repository(path):
    text = path.read_text()
    assert "../shared" not in text
    assert not re.search(r"\bseeds? \d{3}\b", text), "cite sources by name"
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.is_relative_to(ROOT) and dest.exists(), f"{path.name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{path.name}: no heading #{anchor} in {file}"
