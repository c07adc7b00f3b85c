"""What every command's output shares: the `--json` / `--csv` switch, CSV tables,
the scenario echo in JSON, the figures' backend, the line naming a file a
command wrote, and the `--report FILE.html` / `--plot FILE.png` pair of the
commands that draw (`add_output_arguments`, `write`; the page is `codesign.report`'s)."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
from pathlib import Path

from .. import __version__
from ..scenario import flatten
from . import _system
from .presets import to_json


def add_format(parser, csv_help: str | None = None,
               json_help: str = "machine-readable output") -> None:
    """`--json` and (for commands whose output is a table) `--csv`, exclusive."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help=json_help)
    if csv_help is not None:
        group.add_argument("--csv", action="store_true", help=csv_help)


def write_csv(rows: list[dict], stream=None) -> None:
    """One header row (every column any row has, in first-seen order), then the rows."""
    rows = [flatten(r) for r in rows]
    columns: dict = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    writer = csv.DictWriter(stream or sys.stdout, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def echo(scn, labels, source: str | None) -> dict:
    """The scenario's name and its resolved plan and system, for every JSON output
    (`labels`: `scenario.labels` of the scenario)."""
    return {"scenario": labels.scenario, "plan": to_json(scn.plan),
            "system": _system.info(scn.system, labels.system, source)}


def plots():
    """`codesign.plots`, drawing off-screen: the command only writes figures to files,
    so it chooses matplotlib's file backend (Agg) for its process, here."""
    import matplotlib

    matplotlib.use("Agg")
    from .. import plots as module

    return module


def plot_path(path: str) -> str:
    """The file `--plot PATH` writes, checked before anything is computed. It is
    matplotlib's own name (`FigureCanvasBase.print_figure`): a name without an
    extension (by `os.path.splitext`, which skips leading dots: `..png` has none)
    gets its trailing dots stripped and `.png` added, so `--plot adir` writes
    `adir.png`, and says so (even beside a folder `adir`). A name that is only
    dots or ends in a separator (`.`, `..`, `a/`), a directory, a folder that
    does not exist or an extension matplotlib cannot write is a ValueError
    naming --plot."""
    if not os.path.basename(path).strip("."):  # '.', '..', 'a/': no name to add .png to
        raise ValueError(f"--plot {path!r} is a directory; name a file, e.g. "
                         f"{os.path.join(path, 'plot.png')}")
    ext = os.path.splitext(path)[1][1:]
    out = path if ext else f"{path.rstrip('.')}.png"
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if (ext or "png").lower() not in formats:
        raise ValueError(f"--plot {out!r}: matplotlib cannot write '.{ext}' files; use one "
                         f"of {', '.join('.' + f for f in sorted(formats))}")
    if Path(out).is_dir():
        raise ValueError(f"--plot {out!r} is a directory; name a file, e.g. {out}/plot.png")
    if not Path(out).resolve().parent.is_dir():
        raise ValueError(f"--plot {out!r}: its folder {str(Path(out).parent)!r} does not exist")
    return out


# the arguments that name a file a command reads (argument -> words naming it), where
# a command has them: no output of the command may be one of them (`inputs`)
INPUT_ARGUMENTS = {"scenario": "the scenario file", "system": "the --system file",
                   "spec": "the spec file", "files": "an input file"}


def inputs(args) -> dict:
    """The files the command line names to read (`INPUT_ARGUMENTS`; a name that is
    no file, a built-in scenario's, is none): words naming each -> its path."""
    found = {}
    for dest, words in INPUT_ARGUMENTS.items():
        value = getattr(args, dest, None)
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, str) and path and os.path.lexists(path):
                found[f"{words} {path!r}" if isinstance(value, list) else words] = path
    return found


def save(args, path: str, flag: str, content, named: bool = True) -> None:
    """`content` (text, or a callable given a binary file) to the file `path` of
    `flag` (`files.write_file`: atomic, never through a link; `-` is the command's
    standard output, `args.stdout_stream`, set by `cli._check_outputs`), then named
    (`wrote`) unless `named` is False."""
    from .. import files

    files.write_file(path, content, flag=flag, stdout=getattr(args, "stdout_stream", None))
    if named:
        wrote(path, args)


def check_output_file(path: str, flag: str) -> None:
    """A file the command will write (`--out FILE`): not a directory, in a folder that exists."""
    if Path(path).is_dir():
        raise ValueError(f"{flag} {path!r} is a directory; name a file")
    if not Path(path).resolve().parent.is_dir():
        raise ValueError(f"{flag} {path!r}: its folder {str(Path(path).parent)!r} does not exist")


def check_output_dir(path: str, flag: str) -> None:
    """A folder the command will write into (`--out DIR`): absent (it is made) or a folder."""
    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"{flag} {path!r} is a file, not a folder; name a folder")


def wrote(path, args) -> None:
    """Name a file the command wrote: on stdout beside text, on stderr beside
    --json or --csv (whose stdout a program reads)."""
    from .. import files

    if files.is_stdout(path):  # the file is the output itself
        return
    machine = getattr(args, "json", False) or getattr(args, "csv", False)
    print(f"wrote {path}", file=sys.stderr if machine else sys.stdout)


PLOT_DPI = 150  # --plot's PNG, as the other commands' figures


def add_output_arguments(parser, figure: str) -> None:
    """`--report FILE.html` and `--plot FILE.png` (the command's main figure,
    `figure` in words) of a command; both paths are checked before it runs
    (`cli._check_outputs`)."""
    parser.add_argument("--report", metavar="FILE.html",
                        help="also write one self-contained HTML page of the result with its "
                             "figures (opens offline; docs/report.md)")
    parser.add_argument("--plot", metavar="FILE.png", help=f"also draw {figure}")


def captured(print_, *args) -> str:
    """What `print_(*args)` prints (a command's text output, for its page)."""
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        print_(*args)
    return stream.getvalue()


def made_by(command: str) -> str:
    """The page's line saying what made it."""
    return f"made by codesign {__version__}: {command}"


def scenario_words(args) -> str:
    """The scenario of a command line as it was given: `default --set parallel.tp=4`."""
    return " ".join([args.scenario or "default", *(f"--set {o}" for o in args.set),
                     *([f"--system {args.system}"] if args.system else [])])


def write(args, fig, page) -> None:
    """The command's main figure `fig` to --plot and the page `page(fig)` (an
    HTML string embedding it, `report.figure`, which closes it) to --report,
    as asked; each file named once written (`_output.wrote`)."""
    from .. import files

    if args.plot:
        files.write_figure(fig, args.plot, flag="--plot", dpi=PLOT_DPI, bbox_inches="tight")
    if args.report:
        files.write_file(args.report, page(fig), flag="--report",
                          stdout=getattr(args, "stdout_stream", None))
    else:
        import matplotlib.pyplot as plt

        plt.close(fig)
    for path in (args.plot, args.report):
        if path:
            wrote(path, args)
