"""Hostile inputs against every way into codesign: tried, clean and failed per category.

    python benchmarks/hostile.py [--quick] [--category NAME] [--filter TEXT] [--workers 2]

Eleven categories (issues 25, 46 and 56): `scenario` (every built-in scenario file with each
key set to nan, inf, -1, 0, 1e308, a string, a list, a table, removed,
unknown keys, duplicate tables), `cli` (every command's flags and `--set`
with hostile values, every declared key at the ends of its domain and just
outside), `data` (measurement files for `calibrate`, system files for
`--system`), `sweep` (spec mutations of sweeps/*.toml, hostile knob values of
each target, results never lost or mixed: two specs into one folder, two
runs at once, a chunk edited on disk, a read-only folder, a full disk),
`multiprocess` (launch flags, a worker stopped or killed), `library` (the
public API under jit, grad and vmap at the ends of every knob's domain),
`load` (inputs that would take unbounded memory or time: refused fast),
`import` (`codesign import` of hostile files: nesting, alias bombs, expansions
that fill memory, recursion, long numbers, values of the wrong kind),
`program` (the user's own code failing every way Python allows, extents XLA
would abort on, meshes named twice, a spec nested too deep, huge scales),
`store` (issue 56: the store of compiled executables under CODESIGN_CACHE against
planted, forged and swapped records, foreign folders, symbolic links, umask 000,
a read-only or full cache), `outputs` (an output onto an input or another output,
planted links, `-`, a spec's figure outside its folder) and `bounds` (steps of
10^6 micro-batches and more, 128 stages: bounded time and size), both
`output_cases`.

A case is clean when it exits 0 with every number it prints or writes finite,
or exits 2 or 3 with exactly one non-empty line on stderr and no traceback, or
exits 1 with exactly one line that is the model-fault report (an
`OutputOutOfRange` in the words of `codesign.cli`). Anything else is a hard
failure: a traceback, a NaN or inf at exit 0, several lines, another internal
error, a crash, a timeout, a memory blow-up (every case runs under an
address-space limit), results lost or mixed. A case whose input is invalid
(NaN, a negative count, an unknown key, a value outside its domain) must
also be refused (exit 2 or 3), and some cases check what the message says
(the value at full precision, a long value elided, the stopped worker
blamed, not the survivor).

CLI cases run `codesign.cli.main` in a child forked from this process (which
has imported codesign and every command's module but not started JAX), two at a time, in their own
folders; cases that start several processes run them as subprocesses on
127.0.0.1 with bounded timeouts, and every child is killed. Prints one JSON
object: per category {tried, clean, failed}, the failed cases (name, command,
exit code, why, the start of stderr) and the wall time. Exits 0 (it is a
benchmark) unless the harness itself fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path[:1] != [str(ROOT)]:  # first: before benchmarks/ (its codesign.py), PYTHONPATH or not
    sys.path.insert(0, str(ROOT))

import importlib  # noqa: E402

from codesign import cli, procfs  # noqa: E402 - after the path

# every command's module (and so JAX and the model) imported once here, before any
# case forks: `codesign.cli` imports a command's module when it runs, which each
# forked child would otherwise do again (~1 s a case); importing starts no JAX backend
for _name, _ in cli.COMMANDS.values():
    importlib.import_module(f"codesign.cli.{_name}")

CATEGORIES = ("scenario", "cli", "data", "sweep", "multiprocess", "library", "load", "import",
              "program", "store", "outputs", "bounds")
GiB = 1 << 30
MEMORY_BYTES = 8 * GiB  # address-space limit of every case
LOAD_MEMORY_BYTES = 4 * GiB  # of the load cases: a blow-up is a MemoryError, not a dead machine
TIMEOUT_S = 45.0
LOAD_TIMEOUT_S = 60.0
MAX_LINE_CHARS = 1000  # a message quoting a 100,000-character value must elide it
SCANNED_BYTES = 20 << 20  # written files scanned for non-finite numbers, at most this much each
TRACEBACK = "Traceback (most recent call last)"
# the one exit-1 line that is clean: an impossible output, reported as the model's fault
MODEL_FAULT = re.compile(r"^codesign [\w-]+: internal error: OutputOutOfRange: .+; "
                         + re.escape(cli.REPORT) + "$")
INTERNAL_ERROR = re.compile(r"internal error: (\w+)")
# a non-finite number as Python, JSON, CSV or a table prints it (not a word that starts so)
NON_FINITE = re.compile(r"(?<![\w.])[-+]?(?:nan|inf|infinity)(?![\w])", re.IGNORECASE)
EXPONENT = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?[eE][-+]?\d+(?![\w.])")
LONG = 100_000


# ----------------------------------------------------------------------- cases
@dataclasses.dataclass
class Outcome:
    rc: int | None = None  # exit code; negative: killed by that signal
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    timed_out: bool = False
    maxrss_mb: float = 0.0
    written: list = dataclasses.field(default_factory=list)  # (name, text) at exit 0
    problems: list = dataclasses.field(default_factory=list)  # what a script case found
    skipped: str = ""  # why a script case could not run here (not counted)


@dataclasses.dataclass
class Case:
    """One hostile case. Exactly one of `argv` (`codesign ARGV`, in a forked child),
    `call` (a library function, in a forked child; it returns a pytree), `script`
    (`script(folder) -> Outcome`, in a forked child; it starts its own processes)
    or `command` (an external command, a subprocess)."""

    name: str  # CATEGORY/...
    argv: tuple = ()
    call: Callable | None = None
    script: Callable | None = None
    command: tuple = ()
    files: dict = dataclasses.field(default_factory=dict)  # written into the case's folder
    expect: Callable | None = None  # (Outcome) -> why it fails, or None
    env: dict = dataclasses.field(default_factory=dict)  # value None: unset
    timeout_s: float = TIMEOUT_S
    memory_bytes: int | None = MEMORY_BYTES
    x64: bool = True  # library: jax_enable_x64
    quick: bool = False  # in the --quick sample
    show: str = ""  # the command as reported (default: from argv)

    @property
    def category(self) -> str:
        return self.name.split("/", 1)[0]

    def shown(self) -> str:
        if self.show:
            return self.show
        if self.argv:
            return "codesign " + " ".join(shlex.quote(_elide(str(a))) for a in self.argv)
        if self.command:
            return " ".join(shlex.quote(_elide(str(a))) for a in self.command)
        return self.name


def _elide(text: str, n: int = 80) -> str:
    return text if len(text) <= n else f"{text[:20]}...<{len(text)} chars>"


# -------------------------------------------------------------- classification
def non_finite(text: str) -> str | None:
    """The first non-finite number in `text` (nan, inf, a literal that overflows), with
    its neighbourhood, or None."""
    m = NON_FINITE.search(text)
    if m is None:
        for e in EXPONENT.finditer(text):
            if not math.isfinite(float(e.group(0))):
                m = e
                break
    if m is None:
        return None
    return text[max(0, m.start() - 40):m.end() + 20].replace("\n", " | ")


def classify(o: Outcome) -> str | None:
    """Why the outcome is a hard failure, or None when it is clean (module docstring)."""
    lines = [ln for ln in o.stderr.splitlines() if ln.strip()]
    if o.timed_out:
        return f"timeout after {o.wall_s:.0f} s"
    if o.rc is None:
        return "no exit code"
    if o.rc < 0:
        try:
            name = signal.Signals(-o.rc).name
        except ValueError:
            name = str(-o.rc)
        return f"killed by {name} (max RSS {o.maxrss_mb:.0f} MB)"
    if TRACEBACK in o.stderr or TRACEBACK in o.stdout:
        return f"traceback at exit {o.rc}"
    if o.rc == cli.OK:  # what it wrote at another exit code is its expectation's (nothing_written)
        for where, text in [("stdout", o.stdout), *o.written]:
            bad = non_finite(text)
            if bad is not None:
                return f"non-finite number in {where} at exit 0: ...{bad}..."
    elif o.rc in (cli.BAD_INPUT, cli.INFEASIBLE):
        if len(lines) != 1:
            return f"{len(lines)} non-empty stderr lines at exit {o.rc}"
    elif o.rc == cli.INTERNAL:
        if len(lines) != 1:
            return f"{len(lines)} non-empty stderr lines at exit 1"
        if not MODEL_FAULT.match(lines[0]):
            m = INTERNAL_ERROR.search(lines[0])
            return f"exit 1 with an internal error ({m.group(1) if m else 'not the report'})"
    else:
        return f"exit code {o.rc}"
    return o.problems[0] if o.problems else None


HARNESS_ERROR = 98  # a script case's own exception: the harness's fault, not codesign's


def judge(case: Case, o: Outcome) -> str | None:
    if o.skipped:
        return None
    if o.rc == HARNESS_ERROR and case.script is not None:
        return f"harness error: {(o.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    why = classify(o)
    if why is None and case.expect is not None:
        why = case.expect(o)
    return why


# ------------------------------------------------------------------- expectations
def stderr_has(*texts: str) -> Callable:
    def check(o: Outcome) -> str | None:
        missing = [t for t in texts if t not in o.stderr]
        return f"the message does not say {missing[0]!r}" if missing else None
    return check


def refused(codes=(cli.BAD_INPUT, cli.INFEASIBLE)) -> Callable:
    def check(o: Outcome) -> str | None:
        return None if o.rc in codes else f"exit {o.rc}: not refused"
    return check


def raises(o: Outcome) -> str | None:
    return None if o.rc == cli.BAD_INPUT else f"returned (exit {o.rc}) instead of raising"


def lines_at_most(n_chars: int = MAX_LINE_CHARS) -> Callable:
    def check(o: Outcome) -> str | None:
        longest = max((len(ln) for ln in (o.stderr + o.stdout).splitlines()), default=0)
        return f"a {longest}-character line: the value is not elided" if longest > n_chars \
            else None
    return check


def nothing_written(*names: str) -> Callable:
    def check(o: Outcome) -> str | None:
        if o.rc == cli.OK:
            return None
        left = [n for n in names if n in {w for w, _ in o.written}]
        return f"refused (exit {o.rc}) but wrote {left[0]}" if left else None
    return check


def all_of(*checks: Callable) -> Callable:
    def check(o: Outcome) -> str | None:
        for c in checks:
            why = c(o)
            if why is not None:
                return why
        return None
    return check


# ---------------------------------------------------------------------- running
def _read(path: Path, limit: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


def _written(folder: Path, inputs) -> list:
    """(name, text) of the text files a case left in its folder, its inputs aside."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if (rel in inputs or not path.is_file() or path.is_symlink()
                or path.suffix in (".png", ".pdf", ".svg", ".lock") or path.name == ".lock"):
            continue
        out.append((rel, _read(path, SCANNED_BYTES)))
    return out


def _write_files(folder: Path, files: dict) -> None:
    for name, content in files.items():
        path = folder / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _child_limits(case: Case) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if case.memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (case.memory_bytes, case.memory_bytes))


def _child(case: Case, folder: Path, out: Path, err: Path, env: dict) -> int:
    """In the forked child: the case's folder, stdio to files, its limits, then the case."""
    os.setpgid(0, 0)
    os.chdir(folder)
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    stderr = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if case.script is not None:  # its processes get their own limits
        outcome = case.script(folder)
        (out.parent / f"{out.stem}.outcome.json").write_text(
            json.dumps(dataclasses.asdict(outcome)))
        return 0
    _child_limits(case)
    if case.call is not None:
        return _library(case)
    sys.argv = ["codesign", *map(str, case.argv)]  # what a restart would run
    try:
        return int(cli.main([str(a) for a in case.argv]) or 0)
    except SystemExit as e:  # argparse: --help, a parse error
        if isinstance(e.code, int) or e.code is None:
            return int(e.code or 0)
        print(e.code, file=sys.stderr)
        return 1


def _library(case: Case) -> int:
    """A library case: its value's every leaf printed (a NaN shows as nan); a
    ValueError, an OutputOutOfRange or a check traced into the program
    (`equinox.error_if`) is one line and exit 2; anything else a traceback."""
    import logging

    import jax
    import numpy as np

    from codesign import output_checks

    jax.config.update("jax_enable_x64", case.x64)
    logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)
    try:
        value = case.call()
        leaves = [(jax.tree_util.keystr(path), np.asarray(x))
                  for path, x in jax.tree_util.tree_flatten_with_path(value)[0]]
    except (ValueError, output_checks.OutputOutOfRange) as e:
        print(f"library: {type(e).__name__}: {cli._one_line(e)}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        traced = cli._traced_message(e)
        if traced is None:
            raise
        print(f"library: traced check: {traced}", file=sys.stderr)
        return 2
    for path, leaf in leaves:  # the output's name first: a NaN's message names it
        print(path or "value", *(repr(float(v)) if np.issubdtype(leaf.dtype, np.number)
                                 else repr(v) for v in np.ravel(leaf)))
    return 0


class _Job:
    """A running case: a forked child (argv, call, script) or a subprocess (command)."""

    def __init__(self, case: Case, folder: Path, slot: int = 0, env: dict | None = None):
        self.case, self.folder, self.slot = case, folder, slot
        env = {**(env or {}), **case.env}
        folder.mkdir(parents=True)
        _write_files(folder, case.files)
        self.out, self.err = folder.with_suffix(".out"), folder.with_suffix(".err")
        self.start = time.monotonic()
        self.proc = None
        if case.command:
            with open(self.out, "wb") as out, open(self.err, "wb") as err:
                self.proc = subprocess.Popen(list(case.command), cwd=folder, stdout=out,
                                             stderr=err, stdin=subprocess.DEVNULL,
                                             start_new_session=True,
                                             env={k: v for k, v in {**os.environ, **env}.items()
                                                  if v is not None})
            self.pid = self.proc.pid
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child never returns into the harness
            code = 99
            try:
                code = _child(case, folder, self.out, self.err, env)
            except BaseException:  # noqa: BLE001 - whatever escapes is the case's outcome
                traceback.print_exc()
                code = HARNESS_ERROR if case.script is not None else 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        self.pid = pid
        try:
            os.setpgid(pid, pid)
        except OSError:  # the child did it first, or already left
            pass

    def poll(self) -> Outcome | None:
        timed_out = time.monotonic() - self.start > self.case.timeout_s
        if timed_out:
            self._kill()
        pid, status, usage = os.wait4(self.pid, 0 if timed_out else os.WNOHANG)
        if pid == 0:
            return None
        self._kill()  # what the case left running in its group
        o = Outcome(rc=os.waitstatus_to_exitcode(status), wall_s=time.monotonic() - self.start,
                    timed_out=timed_out, maxrss_mb=usage.ru_maxrss / 1024,
                    stdout=_read(self.out), stderr=_read(self.err))
        script = self.out.parent / f"{self.out.stem}.outcome.json"
        if self.case.script is not None and o.rc == 0 and not timed_out:
            if script.exists():
                found = json.loads(script.read_text())
                o = dataclasses.replace(o, **{k: found[k] for k in (
                    "rc", "stdout", "stderr", "problems", "skipped", "timed_out")})
            else:
                o = dataclasses.replace(o, problems=["the script left no outcome"])
        o.written = _written(self.folder, set(self.case.files))
        return o

    def _kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _long(case: Case) -> bool:
    return case.script is not None or case.call is not None or case.timeout_s > TIMEOUT_S


def run_cases(cases: list, workers: int = 2, folder: Path | None = None,
              verbose: bool = False) -> list:
    """Run `cases`, `workers` at a time, each in a folder of its own under `folder`;
    return [(case, outcome, why or None)] in the order of `cases`."""
    folder = Path(folder or tempfile.mkdtemp(prefix="hostile-"))
    # the long cases first, so that the short ones fill the other worker meanwhile
    pending = sorted(enumerate(cases), key=lambda ic: not _long(ic[1]))
    running: dict = {}
    results: dict = {}
    cache = os.environ.get("CODESIGN_CACHE", "")
    while pending or running:
        while pending and len(running) < workers:
            i, case = pending.pop(0)
            # one compilation cache per worker: JAX's cache is not safe for concurrent writers
            slot = min(set(range(workers)) - {job.slot for job in running.values()})
            env = {"CODESIGN_CACHE": f"{cache}-{slot}" if cache else ""}
            running[i] = _Job(case, folder / f"{i:04d}", slot, env)
        for i, job in list(running.items()):
            o = job.poll()
            if o is None:
                continue
            del running[i]
            why = judge(job.case, o)
            results[i] = (job.case, o, why)
            if verbose:
                print(f"{'FAIL' if why else 'ok  '} {o.wall_s:6.1f}s rc={o.rc} {job.case.name}"
                      f"{': ' + why if why else ''}", file=sys.stderr, flush=True)
        time.sleep(0.01)
    return [results[i] for i in range(len(cases))]


def report(results: list, wall_s: float) -> dict:
    per = {c: {"tried": 0, "clean": 0, "failed": 0} for c in CATEGORIES}
    failed, skipped = [], []
    for case, o, why in results:
        if o.skipped:
            skipped.append({"name": case.name, "why": o.skipped})
            continue
        counts = per.setdefault(case.category, {"tried": 0, "clean": 0, "failed": 0})
        counts["tried"] += 1
        counts["clean" if why is None else "failed"] += 1
        if why is not None:
            failed.append({"name": case.name, "command": case.shown(), "exit_code": o.rc,
                           "why": why[:300], "stderr": o.stderr.strip()[:200],
                           "wall_s": round(o.wall_s, 1)})
    total = {k: sum(c[k] for c in per.values()) for k in ("tried", "clean", "failed")}
    out = {"categories": {c: v for c, v in per.items() if v["tried"]}, "total": total,
           "failed": failed, "wall_s": round(wall_s, 1)}
    if skipped:
        out["skipped"] = skipped
    return out


# ------------------------------------------------------------------- TOML text
def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def toml_text(doc: dict) -> str:
    """A TOML document of top-level scalars and one level of tables (others inline)."""
    top = [f"{_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    tables = [f"\n[{_key(k)}]\n" + "".join(f"{_key(a)} = {toml_value(b)}\n" for a, b in v.items())
              for k, v in doc.items() if isinstance(v, dict)]
    return "\n".join(top) + ("\n" if top else "") + "".join(tables)


NUMBER_VALUES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-1": -1, "0": 0,
                 "0.5": 0.5, "1e308": 1e308, "string": "abc", "list": [1, 2], "table": {"a": 1}}
FEW_NUMBER_VALUES = ("nan", "-1", "string")
STRING_VALUES = {"empty": "", "unknown": "nosuch", "number": 1, "nan": math.nan,
                 "list": ["x"], "table": {"a": 1}}
BOOL_VALUES = {"string": "yes", "number": 2}
# mutations no key of a built-in scenario file accepts (every domain there is finite)
INVALID_EVERYWHERE = {"nan", "inf", "-inf", "-1", "1e308", "string", "list", "table",
                      "unknown", "number", "yes"}


# -------------------------------------------------------------------- scenario
def scenario_cases() -> list:
    cases = []
    for path in sorted((ROOT / "codesign" / "scenarios").glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        stem, full = path.stem, path.stem == "default"

        def case(label, text, stem=stem, quick=False, invalid=False):
            cases.append(Case(f"scenario/{stem}/{label}", ("estimate", "s.toml", "--json"),
                              files={"s.toml": text}, quick=quick,
                              expect=refused() if invalid else None,
                              show=f"codesign estimate s.toml --json  # {stem}.toml, {label}"))

        for section, table in doc.items():
            for key, value in table.items():
                if isinstance(value, bool):
                    values = BOOL_VALUES
                elif isinstance(value, (int, float)):
                    values = {k: NUMBER_VALUES[k] for k in
                              (NUMBER_VALUES if full else FEW_NUMBER_VALUES)}
                else:
                    values = STRING_VALUES
                for label, bad in values.items():
                    mutated = {s: dict(t) for s, t in doc.items()}
                    mutated[section][key] = bad
                    case(f"{section}.{key}={label}", toml_text(mutated),
                         quick=full and (section, key, label) == ("parallel", "tp", "nan"),
                         invalid=label in INVALID_EVERYWHERE)
                removed = {s: {k: v for k, v in t.items() if (s, k) != (section, key)}
                           for s, t in doc.items()}
                case(f"{section}.{key} removed", toml_text(removed))
            unknown = {s: dict(t) for s, t in doc.items()}
            unknown[section]["bogus_key"] = 1
            case(f"{section}.bogus_key", toml_text(unknown), quick=full and section == "model",
                 invalid=True)
            case(f"[{section}] twice", toml_text(doc) + f"\n[{section}]\nbogus = 1\n",
                 invalid=True)
        case("[bogus] table", toml_text({**doc, "bogus": {"x": 1}}), invalid=True)
        case("top-level key", "x = 1\n" + toml_text(doc), invalid=True)
        case("empty file", "")
        case("not TOML", "[model\npreset = \n", invalid=True)
        case("system.placement empty", toml_text({**doc, "system": {**doc.get("system", {}),
                                                                      "placement": ""}}))
    return cases


# ------------------------------------------------------------------------- cli
NUM = ("nan", "inf", "-inf", "-1", "0", "1e308", "1e400", "abc", "", "1" + "0" * 400)
FEW_NUM = ("nan", "-1", "0", "1e308", "abc")
SIZES = ("nan", "inf", "-1", "0", "1e308", "1e400", "abc", "", "1ZiB", "1e21", "1.5B", "-0B")
RANGES = ("", ":", "1B:", ":1GiB", "1GiB:1B", "nan:1GiB", "1B:1e308", "1B:1e400", "0:0",
          "-1:1", "1B:1ZiB", "1B:1GiB:2")
CHOICES = ("", "bogus", " ring", "RING")
PATHS = ("", "/", ".", "/dev/null", "missing/file.toml", "empty.toml", "bad.toml",
         "nan.toml", "x" * 300)
PATH_FILES = {"empty.toml": "", "bad.toml": "[system\n", "nan.toml": "[system]\ngpus = nan\n"}
PLOTS = ("", "/", ".", "plot.nosuch", "missing/dir/plot.png", "/dev/null", "x" * 300 + ".png")
SETS = ("a", "=", "model.layers", "model.layers=", "nosuch.key=1", "model.nosuch=1",
        "model.layers=1e400", ".=1", "model..layers=1", "model.layers==1",
        "system.preset=", "system.preset=nosuch", "system.gpus=1e308", "training.dtype=fp4",
        "parallel.tp=2.5", "system.placement=", 'system.placement=""',
        "model.layers=" + "9" * LONG)
EXTRA = ("--bogus", "extra-argument")


# flag values that no flag of their kind accepts: each must be refused
INVALID_VALUES = {"nan", "abc", "", "bogus", "/", ".", "missing/file.toml", "empty.toml",
                  "bad.toml", "nan.toml", "x" * 300, "nosuch", "1e400", "1ZiB", ":", "1B:",
                  ":1GiB", "nan:1GiB", "1B:1e308", "1B:1e400", "-1:1", "1B:1ZiB",
                  "1B:1GiB:2", "a", "=", "model.layers", "model.layers=", "nosuch.key=1",
                  "model.nosuch=1", "model.layers=1e400", ".=1", "model..layers=1",
                  "model.layers==1", "system.preset=nosuch", "system.gpus=1e308",
                  "training.dtype=fp4", "parallel.tp=2.5", "model.layers=nan",
                  "model.layers=" + "9" * LONG}


def _flag_cases(prefix: str, base: tuple, flag: str, values, *, quick=(), files=None,
                timeout_s=TIMEOUT_S) -> list:
    """`codesign BASE FLAG VALUE` for each value (FLAG empty: a positional value); a
    value in INVALID_VALUES must be refused, a long one elided in the message."""
    out = []
    for v in values:
        argv = (*base, flag, v) if flag else (*base, v)
        label = f"{flag or 'arg'}={_elide(v, 40)!r}"
        # an empty value of a flag whose absence has a default may mean that default
        lenient = v == "" and flag in ("--plot", "--out", "--system", "--op", "--mesh",
                                       "--algorithm", "--figures", "--sweep")
        checks = [refused()] if v in INVALID_VALUES and not lenient else []
        if len(v) > 1000:
            checks.append(lines_at_most())
        out.append(Case(f"cli/{prefix}/{label}", argv, files=dict(files or {}), quick=v in quick,
                        expect=all_of(*checks) if checks else None, timeout_s=timeout_s))
    return out


def _set_cases(prefix: str, base: tuple, values=SETS, quick=()) -> list:
    return _flag_cases(prefix, base, "--set", values, quick=quick)


def domain_ends(domain) -> tuple:
    """(the lowest valid value, the highest (at most 1e300), one just outside)."""
    lo, hi = domain.lo, domain.hi
    low = lo if not domain.lo_open else (1e-300 if lo == 0 else lo * (1 + 1e-9))
    outside = hi * 1.001 + 1 if math.isfinite(hi) else -1.0
    return low, min(hi, 1e300), outside


def declared_key_cases() -> list:
    """`estimate --set KEY=VALUE` at both ends of every declared key's domain and
    just outside it; a string or boolean key at an unknown value."""
    from codesign import scenario

    cases = []
    for key, k in scenario.declared_keys(scenario.Scenario).items():
        d = k.declaration
        scn = "llama3-405b" if k.owner is not None else "default"  # a Clos's keys
        base = ("estimate", scn, "--json")
        if d.domain is None:
            values = {"unknown": "nosuch", "number": "2"} if d.kind is not bool else \
                {"unknown": "maybe", "number": "2"}
        else:
            low, high, outside = domain_ends(d.domain)
            values = {"lo": repr(low), "hi": repr(high), "outside": repr(outside)}
        for label, v in values.items():
            cases.append(Case(f"cli/declared/{key}={label}", (*base, "--set", f"{key}={v}"),
                              expect=refused() if label in ("outside", "unknown") else None))
    return cases


def cli_cases() -> list:
    est = ("estimate", "--json")
    col = ("collective", "all_reduce", "--ranks", "8", "--bytes", "1MiB", "--json")
    col_nobytes = ("collective", "all_reduce", "--ranks", "8", "--json")
    opt = ("optimize", "--vary", "parallel.tp", "--method", "grid", "--grid-points", "4",
           "--no-progress")
    grad = ("optimize", "--vary", "system.scale_out_bandwidth_Bps", "--starts", "2", "--steps",
            "2", "--no-progress")
    bench = ("bench", "--sizes", "1KiB:1KiB", "--iters", "1", "--warmup", "0", "--no-progress",
             "--devices", "2")
    sens = ("sensitivity", "--top", "3")
    c = []
    # the cases issue 25 names
    c += [Case("cli/issue/collective --bytes 1e308", ("collective", "all_reduce", "--ranks", "8",
                                                      "--json", "--bytes", "1e308"), quick=True),
          Case("cli/issue/collective --bytes 1e400", ("collective", "all_reduce", "--ranks", "8",
                                                      "--json", "--bytes", "1e400")),
          Case("cli/issue/collective --sweep 1B:1e308", ("collective", "all_reduce", "--ranks",
                                                         "8", "--json", "--sweep", "1B:1e308")),
          Case("cli/issue/sensitivity time_to_train_s gpu_mtbf_s=1000",
               ("sensitivity", "--output", "time_to_train_s", "--set",
                "reliability.gpu_mtbf_s=1000"), timeout_s=180),
          Case("cli/issue/sensitivity goodput restart_s=1e9",
               ("sensitivity", "--output", "goodput", "--set", "reliability.restart_s=1e9"),
               timeout_s=180, quick=True),
          Case("cli/issue/matmul_efficiency=1.0000001",
               (*est, "--set", "system.matmul_efficiency=1.0000001"),
               expect=all_of(refused(), stderr_has("1.0000001")), quick=True),
          Case("cli/issue/100000-character --set value",
               (*est, "--set", "system.preset=" + "x" * LONG), expect=lines_at_most(),
               quick=True),
          Case("cli/issue/100000-character scenario", ("estimate", "x" * LONG),
               expect=lines_at_most()),
          Case("cli/issue/100000-character --system", ("estimate", "--system", "x" * LONG),
               expect=lines_at_most()),
          Case("cli/issue/100000-character --bytes", (*col_nobytes, "--bytes", "9" * LONG),
               expect=lines_at_most()),
          Case("cli/issue/100000-character --vary", ("optimize", "--vary", "x" * LONG),
               expect=lines_at_most()),
          Case("cli/issue/placement=''", (*est, "--set", "system.placement="), quick=True),
          Case("cli/issue/placement='\"\"'", (*est, "--set", 'system.placement=""'))]
    # reliability at the ends of its failure model
    for kv in ("reliability.gpu_mtbf_s=1e-3", "reliability.gpu_mtbf_s=1",
               "reliability.restart_s=1e9", "reliability.checkpoint_write_s=1e9",
               "reliability.straggler_q=1", "reliability.straggler_sigma=5",
               "reliability.straggler_slowdown=1000", "reliability.storage_Bps=1000",
               "reliability.checkpoint_interval_s=1e9", "reliability.replacement_s=1e9"):
        for cmd in (("reliability", "--json"), est):
            c.append(Case(f"cli/{cmd[0]}/{kv}", (*cmd, "--set", kv)))
    # every command's flags
    c += _set_cases("estimate", est, quick=("model.layers=1e400",))
    c += _flag_cases("estimate", est, "--system", (*PATHS, "nosuch", "tpu-v4"), files=PATH_FILES)
    c += _flag_cases("estimate", ("estimate", "--json"), "", (*PATHS, "nosuch"), files=PATH_FILES)
    c += _flag_cases("estimate", ("estimate",), "--plot", PLOTS[:5])
    for cmd in ("traffic", "roofline", "reliability", "audit"):
        c += _set_cases(cmd, (cmd,), ("nosuch.key=1", "model.layers=nan", "system.gpus=0",
                                      "model.layers=" + "9" * LONG))
        c += [Case(f"cli/{cmd}/{e}", (cmd, e)) for e in EXTRA]
    c += [Case("cli/traffic/--json --csv", ("traffic", "--json", "--csv"))]
    c += _flag_cases("roofline", ("roofline",), "--plot", PLOTS[:4])
    c += _flag_cases("collective", col_nobytes, "--bytes", SIZES, quick=("nan",))
    c += _flag_cases("collective", col[:2] + col[4:], "--ranks",
                     (*NUM, "1", "2.5", "1e7", "1e8"))
    c += _flag_cases("collective", col, "--algorithm", (*CHOICES, "auto", "in_network",
                                                        "nvls_tree", "rail_ring", "hierarchical"))
    c += _flag_cases("collective", col, "--system", (*PATHS, "nosuch", "gb200-nvl72"),
                     files=PATH_FILES)
    c += _flag_cases("collective", col, "--tier", ("", "bogus", "scale_out"))
    c += _flag_cases("collective", col, "--dtype", ("", "bogus", "int8"))
    c += _flag_cases("collective", col_nobytes, "--sweep", RANGES)
    c += _flag_cases("collective", col, "--plot", PLOTS)
    c += _flag_cases("collective", ("collective", "--ranks", "8", "--bytes", "1MiB"), "",
                     ("", "bogus", "ALL_REDUCE"))
    c += _flag_cases("sensitivity", sens, "--top", ("nan", "-1", "abc", "1e400", ""))
    c += _flag_cases("sensitivity", sens, "--knob", ("", "nosuch", "model.preset"))
    c += _flag_cases("sensitivity", sens, "--output", ("", "bogus"))
    c += _flag_cases("optimize", ("optimize", "--no-progress", "--method", "grid",
                                  "--grid-points", "4"), "--vary",
                     ("", ",", "nosuch", "model.preset", "parallel.tp,parallel.tp",
                      "system.placement", "reliability.share_gpu"))
    c += _flag_cases("optimize", opt, "--bounds",
                     ("", "x", "parallel.tp=", "parallel.tp=1:", "parallel.tp=8:1",
                      "parallel.tp=nan:8", "parallel.tp=1:inf", "parallel.tp=0:8",
                      "nosuch=1:2", "parallel.tp=1e400:1e401", "parallel.pp=1:8"))
    for flag in ("--budget-usd", "--budget-w", "--max-gpus", "--grid-points", "--seed",
                 "--usd-per-gpu-hour", "--fabric-lifetime-years", "--top"):
        c += _flag_cases("optimize", opt, flag, FEW_NUM)
    for flag in ("--starts", "--steps"):
        c += _flag_cases("optimize", grad, flag, FEW_NUM)
    c += _flag_cases("optimize", opt, "--objective", ("", "bogus"))
    c += _flag_cases("optimize", opt, "--method", ("", "bogus"))
    c += _flag_cases("bench", bench, "--op", ("", "bogus", "broadcast", "send_recv"))
    c += _flag_cases("bench", bench, "--algorithm", ("", "bogus", "hierarchical"))
    c += _flag_cases("bench", bench[:1] + bench[3:], "--sizes", RANGES[:-1])
    c += _flag_cases("bench", bench, "--mesh", ("", "0", "-8", "1e9", "2x", "x4", "2x4x8",
                                                "3x3", "nan", "4"))
    for flag in ("--iters", "--warmup"):
        c += _flag_cases("bench", bench, flag, ("nan", "-1", "abc", "1e400", ""))
    c += _flag_cases("bench", bench, "--dtype", ("", "bogus", "int8"))
    c += _flag_cases("bench", bench, "--out", ("", "/", ".", "missing/dir/b.jsonl", "/dev/full"))
    c += _flag_cases("bench", bench[:-1], "--devices", ("nan", "-1", "0", "abc", "3", "1e400"))
    c += _flag_cases("bench", bench, "--join-timeout", ("nan", "-1", "abc"))
    c += _flag_cases("calibrate compute", ("calibrate", "compute", "--sizes", "64", "--tokens",
                                           "16", "--iters", "1", "--repeats", "1",
                                           "--no-progress"), "--dtype", ("", "bogus"))
    for flag in ("--sizes", "--tokens", "--iters", "--warmup", "--repeats"):
        c += _flag_cases("calibrate compute", ("calibrate", "compute", "--no-progress"), flag,
                         ("nan", "-1", "0", "abc", ""))
    c += _flag_cases("audit", ("audit", "--devices", "4"), "--mesh",
                     ("", "dp=0", "dp=-1", "tp=3", "dp=2,tp=4,pp=2", "x", "dp=1e400", "dp=nan",
                      "ep=2", "dp=2,dp=2"))
    c += _flag_cases("audit", ("audit", "--mesh", "dp=2,tp=2"), "--devices",
                     ("nan", "-1", "0", "abc", "1e400", "3"))
    c += [Case("cli/validate/--json --csv", ("validate", "--json", "--csv")),
          Case("cli/validate/extra", ("validate", "extra")),
          Case("cli/presets/--json", ("presets", "--json"), quick=True),
          Case("cli/presets/extra", ("presets", "extra")),
          Case("cli/top/no command", ()), Case("cli/top/unknown command", ("nosuch",)),
          Case("cli/top/--version", ("--version",)), Case("cli/top/--bogus", ("--bogus",)),
          Case("cli/top/estimate --help", ("estimate", "--help")),
          Case("cli/top/estimate --bogus", ("estimate", "--bogus"))]
    # every op x algorithm at the far end of ranks and size
    from codesign.model import collectives

    for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
               "reduce", "send_recv"):
        for alg in (*collectives.algorithms(op), "auto"):
            c.append(Case(f"cli/collective/{op} {alg} at 1e7 ranks and 1024EiB",
                          ("collective", op, "--ranks", "10000000", "--bytes", "1024EiB",
                           "--algorithm", alg, "--json")))
    return c + declared_key_cases()


# ------------------------------------------------------------------------- data
LOG_SIZES = [4096 * 2**k for k in range(9)]
LOG_HEADER = """# Collective test starting: all_reduce_perf
#
# Using devices
{ranks}#
#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong
#   (B)  (elements)               (us)  (GB/s)  (GB/s)          (us)  (GB/s)  (GB/s)
"""


def _ring_time_s(n_bytes: float, ranks: int = 8, alpha_s: float = 20e-6,
                 bandwidth_Bps: float = 3e9) -> float:
    """A ring all-reduce's alpha-beta time: 2(p-1) alpha + 2(p-1)/p n / B."""
    return 2 * (ranks - 1) * alpha_s + 2 * (ranks - 1) / ranks * n_bytes / bandwidth_Bps


def nccl_log(times_us=None, *, sizes=LOG_SIZES, ranks=8, wrong="0") -> str:
    times_us = times_us or [f"{_ring_time_s(n) * 1e6:.2f}" for n in sizes]
    rank_lines = "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r} on host device {r}\n"
                         for r in range(ranks))
    rows = "".join(f"{n:12} {n // 4 if isinstance(n, int) else 1:12} float sum -1 {t} 1.0 1.0 "
                   f"{wrong} {t} 1.0 1.0 {wrong}\n"
                   for n, t in zip(sizes, times_us, strict=True))
    return LOG_HEADER.format(ranks=rank_lines) + rows


def bench_lines(rows=None, **change) -> str:
    """`codesign bench --json` lines of an 8-rank ring all-reduce, with `change`
    (field -> value; `DROP` removes the field) in the `rows` given (default all)."""
    lines = []
    for i, n in enumerate(LOG_SIZES):
        record = {"op": "all_reduce", "algorithm": "ring", "ranks": 8, "mesh": "8",
                  "size_bytes": n, "time_s": _ring_time_s(n), "wrong": 0}
        if rows is None or i in rows:
            record.update(change)
            record = {k: v for k, v in record.items() if v is not DROP}
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


DROP = object()
# changes of one bench record that may leave it valid (a mesh matters only to a
# hierarchical record, wrong counts errors, one size of 0 among others, an algorithm of
# null may mean the data's default): no expectation
VALID_RECORD_CHANGES = {*(("mesh", label) for label in ("nan", "inf", "-1", "0", "1e308",
                                                         "string", "null", "list", "object",
                                                         "true", "missing")),
                        *(("wrong", label) for label in ("0", "1e308", "inf", "true", "null",
                                                          "missing")),
                        ("size_bytes", "0"), ("algorithm", "null")}
JSON_VALUES = {"nan": math.nan, "inf": math.inf, "-1": -1, "0": 0, "1e308": 1e308,
               "string": "x", "null": None, "list": [], "object": {}, "true": True,
               "missing": DROP}


def _calibrate(name: str, text, *extra, quick=False, file="m.jsonl", invalid=True) -> Case:
    """calibrate FILE --out fit.toml: refused (unless not `invalid`), writing nothing."""
    expect = all_of(refused(), nothing_written("fit.toml")) if invalid else None
    return Case(f"data/calibrate/{name}", ("calibrate", file, "--out", "fit.toml", *extra),
                files={file: text}, expect=expect, quick=quick)


def data_cases() -> list:
    times = [f"{_ring_time_s(n) * 1e6:.2f}" for n in LOG_SIZES]
    falling = [8 * 2**k for k in range(28)]
    c = [
        _calibrate("a valid bench file", bench_lines(), quick=True, invalid=False),
        _calibrate("a valid nccl-tests log", nccl_log(), file="all_reduce.log", invalid=False),
        _calibrate("log: one time inf", nccl_log([*times[:3], "inf", *times[4:]]),
                   file="all_reduce.log", quick=True),
        _calibrate("bench: time_s NaN", bench_lines({4}, time_s=math.nan),
                   quick=True),
        _calibrate("bench: time_s negative",
                   bench_lines({4}, time_s=-1.0)),
        _calibrate("bench: ranks=1 everywhere", bench_lines(ranks=1)),
        _calibrate("log: ranks=1", nccl_log(ranks=1), file="all_reduce.log"),
        _calibrate("bench: ranks=0", bench_lines(ranks=0)),
        _calibrate("log: times fall as size grows",
                   nccl_log([f"{1000 / (4 + k):.2f}" for k in range(28)], sizes=falling),
                   file="all_reduce.log"),
        _calibrate("bench: size 1e30", bench_lines({8}, size_bytes=1e30)),
        _calibrate("log: size 1e30", nccl_log(sizes=[*LOG_SIZES[:-1], 10**30]),
                   file="all_reduce.log"),
        _calibrate("a file holding [1, 2, 3]", "[1, 2, 3]\n"),
        _calibrate("bad JSON", '{"op": "all_reduce",\n "ranks": }\n'),
        _calibrate("non-UTF-8 bytes", b'{"op": "all_reduce"}\n{"op": "\xff"}\n'),
        _calibrate("log: unparsable number", nccl_log([times[0], "1x3.04", *times[2:]]),
                   file="all_reduce.log"),
        _calibrate("log: #wrong unparsable", nccl_log(wrong="many"), file="all_reduce.log"),
        _calibrate("log: #wrong N/A", nccl_log(wrong="N/A"), file="all_reduce.log",
                   invalid=False),
        _calibrate("empty file", ""),
        _calibrate("only comments", "# nothing\n#\n", file="all_reduce.log"),
        _calibrate("NUL bytes", b"\0" * 4096),
        _calibrate("random bytes", bytes(range(256)) * 64),
        _calibrate("a 10 MB line", "{" + "x" * (10 << 20) + "\n"),
        _calibrate("log: truncated row", nccl_log()[:-20], file="all_reduce.log",
                   invalid=False),
        _calibrate("log: header only", LOG_HEADER.format(ranks=""), file="all_reduce.log"),
        _calibrate("one size only", bench_lines(size_bytes=4096)),
        _calibrate("JSON nested 5,000 deep", "[" * 5000 + "]" * 5000 + "\n"),
        Case("data/calibrate/a directory", ("calibrate", "logs.jsonl", "--out", "fit.toml"),
             files={"logs.jsonl/": ""}, expect=nothing_written("fit.toml")),
        Case("data/calibrate/a missing file", ("calibrate", "none.jsonl")),
        Case("data/calibrate/dev-zero", ("calibrate", "/dev/zero"), memory_bytes=4 * GiB),
        Case("data/calibrate/--out onto the input", ("calibrate", "m.jsonl", "--out", "m.jsonl"),
             files={"m.jsonl": bench_lines()}),
    ]
    for field in ("op", "algorithm", "ranks", "mesh", "size_bytes", "time_s", "wrong"):
        for label, v in JSON_VALUES.items():
            c.append(_calibrate(f"bench: {field}={label} on line 3",
                                bench_lines({2}, **{field: v}),
                                invalid=(field, label) not in VALID_RECORD_CHANGES))
    for label, token in (("nan", "nan"), ("-inf", "-inf"), ("-1", "-1"), ("0", "0"),
                         ("1e400", "1e400"), ("empty", "''"), ("x", "x")):
        c.append(_calibrate(f"log: time {label}", nccl_log([*times[:2], token, *times[3:]]),
                            file="all_reduce.log"))
    flags = ("calibrate", "m.jsonl")
    for flag, values in (("--tier", ("", "bogus", "scale_out")),
                         ("--local-ranks", ("nan", "-1", "0", "abc", "1e400")),
                         ("--algorithm", ("", "bogus", "tree")), ("--op", ("", "bogus")),
                         ("--ranks", ("nan", "-1", "0", "1", "abc")),
                         ("--holdout-every", ("nan", "-1", "0", "1", "abc", "1000")),
                         ("--system", ("", "nosuch", "/dev/null", "bad.toml")),
                         ("--out", ("", "/", ".", "missing/dir/fit.toml", "/dev/full"))):
        for v in values:
            c.append(Case(f"data/calibrate/{flag}={v!r}", (*flags, flag, v),
                          files={"m.jsonl": bench_lines(), **PATH_FILES}))
    # system files (`calibrate --out`'s form) with each [system] number hostile
    from codesign import scenario

    keys = [k for k, v in scenario.declared_keys(scenario.Scenario).items()
            if k.startswith("system.") and v.declaration.domain is not None
            and v.owner is None]
    for key in keys:
        for label in ("nan", "-1", "string"):
            text = toml_text({"system": {"preset": "dgx-h100",
                                         key.split(".", 1)[1]: NUMBER_VALUES[label]}})
            c.append(Case(f"data/system file/{key}={label}", ("estimate", "--system", "sys.toml",
                                                             "--json"),
                          files={"sys.toml": text}))
            if "scale" in key and label == "nan":
                c.append(Case(f"data/system file for collective/{key}={label}",
                              ("collective", "all_reduce", "--ranks", "16", "--bytes", "1MiB",
                               "--system", "sys.toml", "--json"), files={"sys.toml": text}))
    c.append(Case("data/system file/unknown key", ("estimate", "--system", "sys.toml"),
                  files={"sys.toml": "[system]\nbogus = 1\n"}))
    c.append(Case("data/system file/unknown preset", ("estimate", "--system", "sys.toml"),
                  files={"sys.toml": '[system]\npreset = "nosuch"\n'}))
    c.append(Case("data/system file/non-UTF-8", ("estimate", "--system", "sys.toml"),
                  files={"sys.toml": b"[system]\npreset = \"\xff\"\n"}))
    return c


# ------------------------------------------------------------------------ sweeps
COLLECTIVE_SPEC = """name = "h"
target = "collective"
[base]
system = "dgx-h100"
op = "all_reduce"
algorithm = "ring"
[knobs]
"""
# a few chunks of cheap points (the store's cases), and a slow spec for stopping a worker
SMALL_SPEC = """name = "small"
target = "collective"
chunk_size = 2
[base]
system = "dgx-h100"
op = "all_reduce"
algorithm = "ring"
[knobs]
ranks = [8]
n_bytes = {{ log_grid = ["1KiB", "1GiB", {n}] }}
"""
OTHER_SPEC = SMALL_SPEC.replace('ranks = [8]', 'ranks = [16]')
ONE_POINT_CHUNKS = SMALL_SPEC.replace("chunk_size = 2", "chunk_size = 1")
SLOW_SPEC = """name = "slow"
target = "estimate"
chunk_size = 1
[base]
scenario = "default"
[knobs]
"system.scale_out_bandwidth_Bps" = {{ log_grid = ["10GB/s", "400GB/s", {n}] }}
"""
SWEEP_FLAGS = ("--no-plots", "--no-progress")


def _knob_spec(knob: str, value, base: str = COLLECTIVE_SPEC,
               others=(("n_bytes", 1048576), ("ranks", 8))) -> str:
    lines = [f"{_key(k)} = [{toml_value(v)}]" for k, v in others if k != knob]
    return base + "\n".join([*lines, f"{_key(knob)} = [{toml_value(value)}]"]) + "\n"


def _spec_mutations(doc: dict) -> dict:
    knob = next(iter(doc.get("knobs", {})), None)
    knobs = dict(doc.get("knobs", {}))
    out = {"target unknown": {**doc, "target": "nosuch"},
           "top-level key unknown": {**doc, "bogus": 1},
           "chunk_size=0": {**doc, "chunk_size": 0},
           "samples=1e12": {**doc, "samples": 10**12},
           "a knob unknown": {**doc, "knobs": {**knobs, "nosuch_knob": [1, 2]}}}
    if knob is not None:
        out[f"{knob} empty"] = {**doc, "knobs": {**knobs, knob: []}}
    if doc.get("plots"):
        out["a plot of a column that is not there"] = {
            **doc, "plots": [{**doc["plots"][0], "y": "nosuch_column"}]}
    elif doc.get("summary"):
        out["a summary of an unknown kind"] = {
            **doc, "summary": [{**doc["summary"][0], "kind": "nosuch"}]}
    return out


def _spec_text(doc: dict) -> str:
    """A spec with arrays of tables ([[plots]], [[summary]])."""
    plain = {k: v for k, v in doc.items() if not (isinstance(v, list) and v
                                                 and isinstance(v[0], dict))}
    text = toml_text(plain)
    for k, v in doc.items():
        if k not in plain:
            for item in v:
                text += f"\n[[{k}]]\n" + "".join(f"{_key(a)} = {toml_value(b)}\n"
                                                 for a, b in item.items())
    return text


def sweep_cases() -> list:
    c = []
    sweep = ("sweep", "s.toml", "--out", "o", *SWEEP_FLAGS)
    # the collective target's knobs (issue 25's six first)
    issue = (("n_bytes", math.nan), ("ranks", -8), ("ranks", 0),
             ("scale_up.bandwidth_Bps", -1e9), ("scale_up.efficiency", 2.0),
             ("scale_out.latency_s", -1.0))
    for knob, v in issue:
        c.append(Case(f"sweep/issue/collective {knob}=[{toml_value(v)}]", sweep,
                      files={"s.toml": _knob_spec(knob, v)}, quick=knob == "n_bytes",
                      expect=refused()))
    for knob in ("n_bytes", "ranks", "local_ranks", "scale_up.bandwidth_Bps",
                 "scale_up.latency_s", "scale_up.efficiency", "scale_out.bandwidth_Bps",
                 "scale_out.latency_s", "scale_out.efficiency"):
        for label in ("nan", "inf", "-inf", "-1", "0", "1e308", "string"):
            v = NUMBER_VALUES[label]
            c.append(Case(f"sweep/collective/{knob}=[{label}]", sweep,
                          files={"s.toml": _knob_spec(knob, v)},
                          expect=None if label == "0" else refused()))
    est = 'name = "e"\ntarget = "estimate"\n[base]\nscenario = "default"\n[knobs]\n'
    hostile = [(k, v) for k in ("parallel.tp", "system.gpus", "system.scale_out_bandwidth_Bps",
                                "training.micro_batch") for v in (math.nan, -1, 1e308)]
    for knob, v in [*hostile, ("reliability.gpu_mtbf_s", 1e-3), ("reliability.restart_s", 1e9)]:
        c.append(Case(f"sweep/estimate/{knob}=[{toml_value(v)}]", sweep,
                      files={"s.toml": _knob_spec(knob, v, est, ())}, expect=refused()))
    rel = 'name = "r"\ntarget = "reliability"\n[base]\ncheckpoint_bytes = 6e12\n[knobs]\n'
    for knob, v in (("gpu_mtbf_s", 1e-3), ("gpu_mtbf_s", 1.0), ("restart_s", 1e9),
                    ("checkpoint_write_s", 1e9), ("gpus", 1e7), ("step_time_s", 0),
                    ("step_time_s", -1), ("step_time_s", math.nan), ("step_time_s", 1e308),
                    ("straggler_q", 1.0), ("checkpoint_bytes", 1e30)):
        c.append(Case(f"sweep/reliability/{knob}=[{toml_value(v)}]", sweep,
                      files={"s.toml": _knob_spec(knob, v, rel, ())},
                      expect=refused() if knob in ("gpu_mtbf_s", "restart_s",
                                                   "checkpoint_write_s", "step_time_s")
                      else None))
    ecmp = 'name = "x"\ntarget = "ecmp"\n[knobs]\n'
    for knob, v in (("k_flows", 0), ("k_flows", -1), ("k_flows", math.nan), ("k_flows", 1e308),
                    ("m_links", 0), ("m_links", 1e308), ("overhead", -1), ("overhead", math.nan)):
        c.append(Case(f"sweep/ecmp/{knob}=[{toml_value(v)}]", sweep,
                      files={"s.toml": _knob_spec(knob, v, ecmp, ())},
                      expect=None if (knob, v) == ("k_flows", 0) else refused()))
    fab = 'name = "f"\ntarget = "fabric"\n[base]\nsystem = "dgx-h100"\n[knobs]\n'
    for knob, v in (("gpus", 0), ("gpus", 1e308), ("gpus", math.nan), ("scale_up_domain", 0),
                    ("n_bytes", -1), ("ranks", 0)):
        c.append(Case(f"sweep/fabric/{knob}=[{toml_value(v)}]", sweep,
                      files={"s.toml": _knob_spec(knob, v, fab, ())}, expect=refused()))
    # every spec of sweeps/, mutated so that it must be refused before any work
    for path in sorted((ROOT / "sweeps").glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        for label, mutated in _spec_mutations(doc).items():
            c.append(Case(f"sweep/spec/{path.stem}: {label}", sweep, expect=refused(),
                          files={"s.toml": _spec_text(mutated)}, timeout_s=60,
                          show=f"codesign sweep s.toml ...  # sweeps/{path.name}, {label}"))
    small = SMALL_SPEC.format(n=6)
    c += [
        Case("sweep/spec/two 1e6-point axes", sweep, memory_bytes=LOAD_MEMORY_BYTES,
             files={"s.toml": COLLECTIVE_SPEC + 'ranks = { log_grid = [2, 4096, 1000000] }\n'
                    'n_bytes = { log_grid = ["1KiB", "4GiB", 1000000] }\n'}, quick=True),
        Case("sweep/spec/duplicate knob", sweep,
             files={"s.toml": COLLECTIVE_SPEC + "ranks = [8]\nranks = [16]\nn_bytes = [1]\n"}),
        Case("sweep/spec/not TOML", sweep, files={"s.toml": "[knobs\n"}),
        Case("sweep/spec/empty", sweep, files={"s.toml": ""}),
        Case("sweep/spec/a directory", ("sweep", "d", *SWEEP_FLAGS), files={"d/": ""}),
        Case("sweep/spec/missing", ("sweep", "none.toml", *SWEEP_FLAGS)),
        Case("sweep/a valid small sweep", sweep, files={"s.toml": small}),
        Case("sweep/--out an existing file", ("sweep", "s.toml", "--out", "taken", *SWEEP_FLAGS),
             files={"s.toml": small, "taken": "x"}),
        Case("sweep/--out under a file", ("sweep", "s.toml", "--out", "taken/o", *SWEEP_FLAGS),
             files={"s.toml": small, "taken": "x"}),
        Case("sweep/--out in /proc", ("sweep", "s.toml", "--out", "/proc/hostile", *SWEEP_FLAGS),
             files={"s.toml": small}),
        Case("sweep/--figures a file", ("sweep", "s.toml", "--out", "o", "--figures", "taken",
                                        "--no-progress"), files={"s.toml": small, "taken": "x"}),
        Case("sweep/--resume of nothing", (*sweep, "--resume"), files={"s.toml": small}),
        Case("sweep/--grad bogus", (*sweep, "--grad", "bogus"), files={"s.toml": small}),
    ]
    for flag in ("--chunk-size", "--timeout", "--cpu-devices"):
        for v in ("nan", "-1", "0", "abc", "1e400"):
            c.append(Case(f"sweep/{flag}={v}", (*sweep, flag, v), files={"s.toml": small}))
    c += [Case("sweep/store/two specs into one --out", script=_two_specs, timeout_s=150,
               quick=True),
          Case("sweep/store/two specs into one --out, the second with --resume",
               script=lambda f: _two_specs(f, resume=True), timeout_s=150),
          Case("sweep/store/a second run while the first runs", script=_concurrent,
               timeout_s=180),
          Case("sweep/store/a chunk edited on disk, then --resume", script=_edited_chunk,
               timeout_s=150),
          Case("sweep/store/a chunk emptied, then --resume",
               script=lambda f: _edited_chunk(f, how="empty"), timeout_s=150),
          Case("sweep/store/--out read-only", script=_read_only, timeout_s=120),
          Case("sweep/store/a full disk, then --resume", script=_full_disk,
               timeout_s=150)]
    return c


# ----------------------------------------------------------- scripted cases
def _codesign(args, cwd: Path, timeout_s: float = 120, **popen) -> Outcome:
    """`python -m codesign ARGS` in `cwd`, to its end (killed at `timeout_s`)."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "codesign", *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, **popen)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Outcome(rc=proc.returncode, stdout=out, stderr=err,
                       wall_s=time.monotonic() - start)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Outcome(rc=None, stdout=out, stderr=err, timed_out=True,
                       wall_s=time.monotonic() - start)


def _step(label: str, o: Outcome, want=(0,)) -> str | None:
    """Why a preparing or checking step of a script went wrong, or None."""
    if o.rc in want and TRACEBACK not in o.stderr:
        return None
    return f"{label}: exit {o.rc}, {o.stderr.strip()[-200:]!r}"


def _result(o: Outcome, problems) -> Outcome:
    o.problems = [p for p in problems if p]
    return o


def _sweep(folder: Path, spec: str, out: str, *extra, **kw) -> Outcome:
    return _codesign(["sweep", spec, "--out", out, *SWEEP_FLAGS, *extra], folder, **kw)


def _csv(folder: Path, out: str) -> bytes | None:
    path = folder / out / "results.csv"
    return path.read_bytes() if path.exists() else None


def _two_specs(folder: Path, resume: bool = False) -> Outcome:
    (folder / "a.toml").write_text(SMALL_SPEC.format(n=6))
    (folder / "b.toml").write_text(OTHER_SPEC.format(n=6))
    first = _sweep(folder, "a.toml", "o")
    before = _csv(folder, "o")
    o = _sweep(folder, "b.toml", "o", *(["--resume"] if resume else []))
    again = _sweep(folder, "a.toml", "o", "--resume")
    return _result(o, [_step("the first sweep", first), refused()(o),
                       _csv(folder, "o") != before and "the first sweep's results.csv changed",
                       _step("the first sweep's --resume", again),
                       _csv(folder, "o") != before and "--resume changed the first results.csv"])


def _concurrent(folder: Path) -> Outcome:
    """A second run of the same spec into the folder while the first holds it (the
    first is stopped with SIGSTOP after its second chunk, so that it still runs):
    refused; the first, continued, ends with a sweep run alone's results."""
    (folder / "s.toml").write_text(ONE_POINT_CHUNKS.format(n=12))
    first = subprocess.Popen([sys.executable, "-m", "codesign", "sweep", "s.toml", "--out", "o",
                              *SWEEP_FLAGS], cwd=folder, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not (folder / "o" / "chunks" / "000001.json").exists():
            if first.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)
        running = first.poll() is None
        o = _sweep(folder, "s.toml", "o")
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    first_o = Outcome(rc=first.returncode, stdout=out, stderr=err)
    got = _csv(folder, "o")
    ref = _sweep(folder, "s.toml", "ref")
    again = _sweep(folder, "s.toml", "o", "--resume")
    return _result(o, [not running and "the first sweep ended before the second started",
                       refused()(o), _step("the first sweep", first_o),
                       _step("a reference sweep", ref),
                       got != _csv(folder, "ref") and "the first sweep's results.csv differs "
                                                      "from a sweep run alone",
                       _step("--resume after both", again),
                       _csv(folder, "o") != got and "--resume changed results.csv"])


def _edited_chunk(folder: Path, how: str = "edit") -> Outcome:
    (folder / "s.toml").write_text(SMALL_SPEC.format(n=6))
    first = _sweep(folder, "s.toml", "o")
    before = _csv(folder, "o")
    chunk = folder / "o" / "chunks" / "000001.json"
    if not chunk.exists():
        return _result(first, ["the sweep wrote no chunk 000001.json"])
    text = chunk.read_text()
    if how == "empty":
        chunk.write_text("")
    else:  # one digit of one number changed, the file still JSON
        m = re.search(r"\d\.\d{3}", text)
        chunk.write_text(text[:m.start()] + str((int(text[m.start()]) + 1) % 10)
                         + text[m.start() + 1:] if m else text + " ")
    o = _sweep(folder, "s.toml", "o", "--resume")
    return _result(o, [_step("the first sweep", first),
                       o.rc != 0 and f"--resume after the edit exited {o.rc}",
                       o.rc == 0 and _csv(folder, "o") != before
                       and "results.csv after --resume differs from the first"])


def _mount_namespace() -> bool:
    """Whether this process may mount in a mount namespace of its own (root and unshare)."""
    return (os.geteuid() == 0 and shutil.which("unshare") is not None
            and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0)


def _sweep_mounted(folder: Path, mount_sh: str, after_sh: str, *args) -> Outcome:
    """`codesign sweep ARGS` in a mount namespace where `mount_sh` ran first and
    `after_sh` runs after it (the mounts end with the namespace)."""
    cmd = shlex.join([sys.executable, "-m", "codesign", "sweep", *args, *SWEEP_FLAGS])
    script = f"{mount_sh} || exit 97\n{cmd}\nrc=$?\n{after_sh}\nexit $rc\n"
    start = time.monotonic()
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=folder, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    return Outcome(rc=done.returncode, stdout=done.stdout, stderr=done.stderr,
                   wall_s=time.monotonic() - start)


def _read_only(folder: Path) -> Outcome:
    """--out a read-only folder: a read-only bind mount (root ignores permissions),
    else a folder without write permission."""
    (folder / "s.toml").write_text(SMALL_SPEC.format(n=6))
    (folder / "o").mkdir()
    if _mount_namespace():
        o = _sweep_mounted(folder, "mount --bind o o && mount -o remount,bind,ro o", "",
                           "s.toml", "--out", "o")
    elif os.geteuid() != 0:
        (folder / "o").chmod(0o555)
        o = _sweep(folder, "s.toml", "o")
    else:
        return Outcome(skipped="root without a mount namespace cannot make a read-only folder")
    return _result(o, [o.rc == 97 and "harness: the read-only mount failed", refused()(o)])


def _full_disk(folder: Path) -> Outcome:
    """A disk that fills during the sweep: a 40 KiB tmpfs as --out (its chunks copied
    out before the mount ends), else files limited to 3 KB (RLIMIT_FSIZE); then
    --resume with room must finish with a sweep run alone's results."""
    (folder / "s.toml").write_text(ONE_POINT_CHUNKS.format(n=24))
    out, saved = folder / "o", folder / "saved"
    out.mkdir()
    if _mount_namespace():
        saved.mkdir()
        o = _sweep_mounted(folder, "mount -t tmpfs -o size=40k tmpfs o", "cp -a o/. saved/",
                           "s.toml", "--out", "o")
        out.rmdir()
        saved.rename(out)
    else:
        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

        o = _sweep(folder, "s.toml", "o", preexec_fn=small_files,
                   env={**os.environ, "CODESIGN_CACHE": ""})
    resumed = _sweep(folder, "s.toml", "o", "--resume")
    ref = _sweep(folder, "s.toml", "ref")
    return _result(o, [o.rc == 97 and "harness: the tmpfs mount failed", refused()(o),
                       _step("--resume with room", resumed), _step("a reference sweep", ref),
                       _csv(folder, "o") != _csv(folder, "ref")
                       and "results.csv after the full disk and --resume differs"])


# ------------------------------------------------------------------ multi-process


def _process_id(pid: int) -> int | None:
    """The jax.distributed process id of a worker (`distributed.worker_command`'s config)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return int(json.loads(argv[3])["process_id"])
    except (OSError, IndexError, ValueError, KeyError):
        return None


def _signalled_worker(folder: Path, argv, sig: int, after_s: float = 5.0,
                      wait_for: str | None = None) -> Outcome:
    """Start `codesign ARGV` (it launches local workers), send `sig` to worker 1 once it
    ran `after_s` (or once `wait_for` exists), and check the one line blames it."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "codesign", *argv], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    victim, workers = None, []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            workers = procfs.children(proc.pid)
            ids = {w: _process_id(w) for w in workers}
            victim = next((w for w, i in ids.items() if i == 1), None)
            if victim is not None and len(workers) >= 2:
                break
            time.sleep(0.05)
        if victim is None:
            proc.kill()
            out, err = proc.communicate()
            return Outcome(rc=proc.returncode, stdout=out, stderr=err,
                           problems=["no worker 1 was started"])
        seen = time.monotonic()
        while time.monotonic() - seen < after_s and proc.poll() is None:
            if wait_for and (folder / wait_for).exists():
                break
            time.sleep(0.05)
        os.kill(victim, sig)
        try:
            out, err = proc.communicate(timeout=120)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            timed_out = True
    finally:
        for w in [*workers, proc.pid]:
            try:
                os.kill(w, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait()
    o = Outcome(rc=proc.returncode, stdout=out, stderr=err, timed_out=timed_out,
                wall_s=time.monotonic() - start)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    blamed = re.findall(r"process (\d+) of \d+", last)
    return _result(o, [timed_out and "the launch did not end after its worker 1 stopped",
                       refused()(o) if not timed_out else None,
                       blamed[:1] != ["1"] and f"the message blames process "
                       f"{blamed[0] if blamed else '(none named)'}, not process 1 "
                       f"({signal.Signals(sig).name})"])


def _stopped_sweep(folder: Path, sig: int) -> Outcome:
    (folder / "s.toml").write_text(SLOW_SPEC.format(n=16))
    o = _signalled_worker(folder, ["sweep", "s.toml", "--out", "o", "--processes", "2",
                                   "--join-timeout", "10", *SWEEP_FLAGS], sig, after_s=60,
                          wait_for="o/chunks/000002.json")
    resumed = _sweep(folder, "s.toml", "o", "--resume")
    ref = _sweep(folder, "s.toml", "ref")
    o.problems += [p for p in (_step("--resume after the stop", resumed),
                               _step("a reference sweep", ref),
                               _csv(folder, "o") != _csv(folder, "ref")
                               and "results.csv after --resume differs from a sweep run alone")
                   if p]
    return o


def _processes_match(folder: Path) -> Outcome:
    (folder / "s.toml").write_text(SMALL_SPEC.format(n=6))
    o = _sweep(folder, "s.toml", "two", "--processes", "2", "--join-timeout", "30")
    ref = _sweep(folder, "s.toml", "one")
    return _result(o, [_step("a one-process sweep", ref),
                       o.rc == 0 and _csv(folder, "two") != _csv(folder, "one")
                       and "results.csv of 2 processes differs from 1 process"])


def _unused_address() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def multiprocess_cases() -> list:
    unused = _unused_address()  # a coordinator nobody else joins
    bench = ("bench", "--sizes", "1KiB:1KiB", "--iters", "1", "--warmup", "0", "--no-progress")
    forever = ("bench", "--sizes", "1KiB:1KiB", "--iters", "100000000", "--no-progress",
               "--processes", "2", "--join-timeout", "10")
    small = {"s.toml": SMALL_SPEC.format(n=6)}
    sweep = ("sweep", "s.toml", "--out", "o", *SWEEP_FLAGS)
    c = [Case("multiprocess/bench --processes 2", (*bench, "--processes", "2"), quick=True),
         Case("multiprocess/sweep --processes 2 matches 1 process", script=_processes_match,
              timeout_s=150),
         Case("multiprocess/bench worker 1 SIGSTOPped",
              script=lambda f: _signalled_worker(f, forever, signal.SIGSTOP), timeout_s=180,
              quick=True),
         Case("multiprocess/bench worker 1 SIGKILLed",
              script=lambda f: _signalled_worker(f, forever, signal.SIGKILL), timeout_s=180),
         Case("multiprocess/sweep worker 1 SIGSTOPped, then --resume",
              script=lambda f: _stopped_sweep(f, signal.SIGSTOP), timeout_s=240),
         Case("multiprocess/sweep worker 1 SIGKILLed, then --resume",
              script=lambda f: _stopped_sweep(f, signal.SIGKILL), timeout_s=240),
         Case("multiprocess/bench --coordinator nobody joins",
              (*bench, "--coordinator", unused, "--num-processes", "2", "--process-id",
               "0", "--join-timeout", "3"), timeout_s=60),
         Case("multiprocess/sweep --processes 2 --timeout 0.5", (*sweep, "--processes", "2",
                                                                 "--timeout", "0.5"),
              files=small),
         Case("multiprocess/bench --processes 2 with --coordinator",
              (*bench, "--processes", "2", "--coordinator", "127.0.0.1:1234")),
         Case("multiprocess/sweep --processes 2 with --coordinator",
              (*sweep, "--processes", "2", "--coordinator", "127.0.0.1:1234", "--num-processes",
               "2", "--process-id", "0"), files=small),
         Case("multiprocess/calibrate compute --processes 2",
              ("calibrate", "compute", "--processes", "2"))]
    for v in ("0", "-1", "3", "nan", "abc", "", "1e400"):
        c.append(Case(f"multiprocess/bench --processes {v!r}", (*bench, "--processes", v)))
        c.append(Case(f"multiprocess/sweep --processes {v!r}", (*sweep, "--processes", v),
                      files=small))
    for coordinator in ("", ":", "host", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:-1",
                        "[::1]:x", "nohost.invalid:1234"):
        c.append(Case(f"multiprocess/bench --coordinator {coordinator!r}",
                      (*bench, "--coordinator", coordinator, "--num-processes", "2",
                       "--process-id", "0", "--join-timeout", "2"), timeout_s=60))
    for n, i in (("0", "0"), ("2", "5"), ("2", "-1"), ("-2", "0"), ("nan", "0"), ("2", "")):
        c.append(Case(f"multiprocess/bench --num-processes {n} --process-id {i!r}",
                      (*bench, "--coordinator", unused, "--num-processes", n,
                       "--process-id", i, "--join-timeout", "2"), timeout_s=60))
    for t in ("nan", "-1", "0", "1e400", "abc"):
        c.append(Case(f"multiprocess/bench --processes 2 --join-timeout {t}",
                      (*bench, "--processes", "2", "--join-timeout", t), timeout_s=60))
    return c


# ----------------------------------------------------------------------- library
def _knob_function(scn_name: str, key: str, what: str = "outputs") -> Callable:
    """v -> every output (or the time to train) of scenario `scn_name` with knob `key` = v."""
    import codesign

    scn = codesign.load(scn_name)

    def f(v):
        est = codesign.estimate(codesign.set_knobs(scn, {key: v}))
        return codesign.outputs(est) if what == "outputs" else est.time_to_train_s
    return f


def _lib(how: str, scn_name: str, key: str, value):
    """The public API at `key` = value: eager, jit, grad (of the time to train), vmap
    (value a list), ends (jit of vmap over a list) or grad ends (jit of vmap of grad)."""
    import jax
    import jax.numpy as jnp

    f = _knob_function(scn_name, key, "time" if "grad" in how else "outputs")
    if how == "eager":
        return f(value)
    if how == "jit":
        return jax.jit(f)(value)
    if how == "grad":
        return jax.grad(f)(value)
    values = jnp.asarray(value, dtype=float)
    if how == "vmap":
        return jax.vmap(f)(values)
    return jax.jit(jax.vmap(jax.grad(f) if how == "grad ends" else f))(values)


def _lib_builtin(scn_name: str):
    import jax

    import codesign

    return jax.jit(lambda s: codesign.outputs(codesign.estimate(s)))(codesign.load(scn_name))


def _lib_collective(op: str, alg: str, n_bytes: float, ranks: float):
    import jax

    from codesign.model import collectives
    from codesign.model.hardware import Tier

    tier = Tier(50e9, 5e-6, 0.9, 1e12)

    def time_s(n, p):
        return collectives.cost(op, alg, n, p, tier).time_s

    return jax.jit(jax.value_and_grad(time_s, argnums=(0, 1)))(n_bytes, ranks)


def _lib_report(step_time_s: float, gpus: float, checkpoint_bytes: float, **rel):
    import jax

    from codesign.model import reliability

    r = reliability.Reliability(**rel)
    return jax.jit(lambda t: reliability.report(t, gpus, checkpoint_bytes, r))(step_time_s)


# the knobs whose gradient of the time to train is taken at both ends of their domains,
# and every LIBRARY_KNOB_STRIDE-th knob's outputs there (each is a compile; every key's ends
# go through the command line in cli/declared)
GRADIENT_KNOBS = ("system.scale_out_bandwidth_Bps", "system.matmul_efficiency",
                  "training.micro_batch", "reliability.gpu_mtbf_s", "reliability.restart_s",
                  "training.tokens")
LIBRARY_KNOB_STRIDE = 3


def library_cases() -> list:
    import functools

    from codesign import scenario
    from codesign.model import collectives

    c = []
    # issue 25: the failure model past its validity (must raise, not return inf or NaN)
    for key, v in (("reliability.gpu_mtbf_s", 1e-3), ("reliability.gpu_mtbf_s", 1.0),
                   ("reliability.restart_s", 1e9), ("reliability.checkpoint_write_s", 1e9)):
        for how in ("eager", "jit", "grad", "vmap"):
            c.append(Case(f"library/issue/{how} {key}={v:g}", call=functools.partial(
                _lib, how, "default", key, [v, 2 * v] if how == "vmap" else v), expect=raises,
                quick=how == "grad" and v == 1e-3))
    # every knob at both ends of its domain, jit(vmap(outputs, grad))
    declared = scenario.declared_keys(scenario.Scenario)
    knobs = [k for k in scenario.KNOBS if declared[k].owner is None]  # the default's knobs
    for key in sorted({*knobs[::LIBRARY_KNOB_STRIDE], *GRADIENT_KNOBS}, key=knobs.index):
        low, high, _ = domain_ends(scenario.DOMAINS[key])
        c.append(Case(f"library/knob ends/{key}", call=functools.partial(
            _lib, "ends", "default", key, [low, high])))
        if key in GRADIENT_KNOBS:
            c.append(Case(f"library/knob ends, gradient/{key}", call=functools.partial(
                _lib, "grad ends", "default", key, [low, high])))
    for name in ("default", "llama3-405b", "deepseek-v3", "megatron-1t", "megatron-8.3b"):
        c.append(Case(f"library/builtin/{name} jit float64", call=functools.partial(
            _lib_builtin, name), quick=name == "default"))
        if name in ("default", "llama3-405b"):
            c.append(Case(f"library/builtin/{name} jit float32", call=functools.partial(
                _lib_builtin, name), x64=False))
    for op in ("all_reduce", "all_to_all", "broadcast"):
        for alg in collectives.algorithms(op)[:2]:
            for n, p in ((2.0**70, 1e7), (0.0, 1.0), (1.0, 2.0)):
                c.append(Case(f"library/collective/{op} {alg} n={n:g} p={p:g}",
                              call=functools.partial(_lib_collective, op, alg, n, p)))
    for t, gpus, ckpt, rel in ((1e-300, 1e7, 0.0, {}), (1e9, 1.0, 1e30, {}),
                               (10.0, 1e7, 6e12, {"gpu_mtbf_s": 1e-3}),
                               (10.0, 16384.0, 6e12, {"restart_s": 1e9}),
                               (10.0, 16384.0, 6e12, {"straggler_q": 1.0,
                                                       "straggler_slowdown": 1e3}),
                               (10.0, 16384.0, 6e12, {"straggler_sigma": 5.0})):
        c.append(Case(f"library/reliability.report/t={t:g} gpus={gpus:g} ckpt={ckpt:g} {rel}",
                      call=functools.partial(_lib_report, t, gpus, ckpt, **rel)))
    return c


# -------------------------------------------------------------------------- load
def load_cases() -> list:
    deep_array = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    deep_table = "x = " + "{a = " * 5000 + "1" + " }" * 5000 + "\n"
    deep_keys = "[" + ".".join(["a"] * 5000) + "]\nx = 1\n"

    def load(name, argv, files=None, quick=False, timeout_s=LOAD_TIMEOUT_S, **kw):
        return Case(f"load/{name}", argv, files=files or {}, memory_bytes=LOAD_MEMORY_BYTES,
                    timeout_s=timeout_s, quick=quick, **kw)

    c = [load("optimize grid 1e9 points over two knobs",
              ("optimize", "--method", "grid", "--grid-points", "1000000000", "--vary",
               "system.scale_out_bandwidth_Bps,system.scale_up_bandwidth_Bps", "--no-progress"),
              quick=True, expect=refused()),
         load("optimize grid 1e5 points over three knobs",
              ("optimize", "--method", "grid", "--grid-points", "100000", "--vary",
               "system.scale_out_bandwidth_Bps,system.scale_up_bandwidth_Bps,"
               "system.scale_out_latency_s", "--no-progress"), expect=refused()),
         load("optimize --starts 1e9", ("optimize", "--vary", "system.scale_out_bandwidth_Bps",
                                        "--starts", "1000000000", "--steps", "2",
                                        "--no-progress"), expect=refused()),
         load("optimize --top 1e9", ("optimize", "--vary", "parallel.tp", "--method", "grid",
                                     "--grid-points", "4", "--top", "1000000000",
                                     "--no-progress")),
         load("scenario /dev/zero", ("estimate", "/dev/zero"), quick=True),
         load("--system /dev/zero", ("estimate", "--system", "/dev/zero")),
         load("sweep spec /dev/zero", ("sweep", "/dev/zero", "--out", "o", *SWEEP_FLAGS)),
         load("scenario a FIFO", ("estimate", "fifo.toml"), timeout_s=20),
         load("scenario 17 MiB", ("estimate", "big.toml"),
              files={"big.toml": "# " + "x" * (17 << 20) + "\n"}),
         load("scenario 15 MiB of comments", ("estimate", "big.toml", "--json"),
              files={"big.toml": ("#" + "x" * 1000 + "\n") * (15 << 10)
                     + '[model]\npreset = "gpt3-175b"\n'}),
         load("10,000 --set flags", ("estimate", "--json",
                                     *[a for _ in range(10000)
                                       for a in ("--set", "parallel.tp=8")])),
         load("bench --sizes 1B:1EiB", ("bench", "--sizes", "1B:1EiB", "--iters", "1",
                                        "--warmup", "0", "--no-progress", "--devices", "2")),
         load("bench --devices 100000", ("bench", "--devices", "100000", "--sizes", "1KiB:1KiB",
                                         "--iters", "1", "--no-progress")),
         load("sweep --cpu-devices 100000", ("sweep", "s.toml", "--out", "o", "--cpu-devices",
                                             "100000", *SWEEP_FLAGS),
              files={"s.toml": SMALL_SPEC.format(n=2)}),
         load("audit --devices 100000", ("audit", "--devices", "100000")),
         load("calibrate compute --sizes 1000000", ("calibrate", "compute", "--sizes", "1000000",
                                                    "--no-progress")),
         load("calibrate compute --tokens 1e9", ("calibrate", "compute", "--tokens", "1000000000",
                                                 "--sizes", "64", "--no-progress")),
         load("calibrate 200,000 records", ("calibrate", "m.jsonl", "--json"),
              files={"m.jsonl": bench_lines() * 22222}),
         load("collective --sweep 1B:1024EiB at 1e7 ranks",
              ("collective", "all_reduce", "--ranks", "10000000", "--sweep", "1B:1024EiB",
               "--csv")),
         load("sweep samples 1e8", ("sweep", "s.toml", "--out", "o", *SWEEP_FLAGS),
              files={"s.toml": COLLECTIVE_SPEC.replace("[base]", "samples = 100000000\n[base]")
                     + "n_bytes = { random = [1, 1e9], log = true }\nranks = [8]\n"}),
         load("sweep grid of 1e12 points per axis", ("sweep", "s.toml", "--out", "o",
                                                     *SWEEP_FLAGS),
              files={"s.toml": COLLECTIVE_SPEC + 'n_bytes = { grid = [1, 1e9, 1e12] }\n'
                     'ranks = [8]\n'})]
    for label, text in (("arrays", deep_array), ("inline tables", deep_table),
                        ("dotted keys", deep_keys)):
        c.append(load(f"scenario TOML nested 5,000 deep ({label})", ("estimate", "deep.toml"),
                      files={"deep.toml": text}, quick=label == "arrays"))
        c.append(load(f"--system TOML nested 5,000 deep ({label})",
                      ("estimate", "--system", "deep.toml"), files={"deep.toml": text}))
        c.append(load(f"sweep spec TOML nested 5,000 deep ({label})",
                      ("sweep", "deep.toml", "--out", "o", *SWEEP_FLAGS),
                      files={"deep.toml": text}))
    return c


# ----------------------------------------------------------------------- import
_HF = '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "vocab_size": 1024'
_TITAN = '[model]\nname = "llama3"\nflavor = "8B"\n'
_NEMO = ("trainer:\n  num_nodes: 1\n  devices: 8\nmodel:\n  num_layers: 2\n  hidden_size: 64\n"
         "  num_attention_heads: 8\n  encoder_seq_length: 128\n")
_ZOO = ("MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 64\n  --num-attention-heads: 8\n"
        "  --seq-length: 128\n")
_MEGATRON = "--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 128"


def _bomb(key: str) -> str:
    """A YAML alias bomb (nine levels of nine aliases) bound to `key`."""
    lines = ['a0: &a0 ["lol"]'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]"
                                    for i in range(1, 10)]
    return "\n".join(lines) + f"\nMODEL_ARGS:\n  {key}: *a9\n"


def import_cases() -> list:
    """`codesign import` of hostile files (issue 46): nesting past the cap, an
    alias bomb, a shell variable doubled to fill memory, a --moe-layer-freq past
    Python's stack, numbers of thousands of digits, values of the wrong kind:
    each refused in one line; a byte-order mark read."""
    deep = "[" * 100_000

    def case(name, kind, file, text, *extra, expect=None, quick=True):
        return Case(f"import/{name}", ("import", kind, file, *extra), files={file: text},
                    memory_bytes=LOAD_MEMORY_BYTES, timeout_s=LOAD_TIMEOUT_S,
                    expect=expect or all_of(refused(), stderr_has(file)), quick=quick)

    doubled = "A=x\n" + "A=$A$A\n" * 40 + "echo $A " + _MEGATRON + "\n"
    return [
        case("hf config.json nested 100,000 deep", "hf", "config.json", deep),
        case("torchtitan TOML nested 5,000 deep", "torchtitan", "job.toml",
             "deep = " + "[" * 5000 + "]" * 5000 + "\n" + _TITAN),
        case("nemo YAML nested 20,000 deep", "nemo", "r.yaml", _NEMO + "  x: " + "[" * 20_000),
        case("modelzoo YAML nested 20,000 deep", "megatron", "zoo.yaml",
             _ZOO + "  --x: " + "[" * 20_000),
        case("modelzoo YAML alias bomb at --num-layers", "megatron", "zoo.yaml",
             _bomb("--num-layers")),
        case("megatron script doubling a variable 40 times", "megatron", "run.sh", doubled),
        case("megatron --moe-layer-freq nested past the stack", "megatron", "run.sh",
             _MEGATRON + " --num-experts 8 --moe-layer-freq " + "(" * 100_000 + "[1]"
             + ")" * 100_000 + "\n"),
        case("megatron --num-layers without its value", "megatron", "run.sh",
             "--hidden-size 64 --num-attention-heads 8 --seq-length 128 --num-layers\n"),
        case("hf integer of 5,000 digits", "hf", "config.json",
             _HF + ', "intermediate_size": ' + "9" * 5000 + "}"),
        case("nemo trainer.num_nodes 1e11", "nemo", "r.yaml",
             _NEMO.replace("num_nodes: 1", "num_nodes: 100000000000"),
             expect=all_of(refused(), stderr_has("trainer.num_nodes"))),
        case("nemo num_layers a list", "nemo", "r.yaml",
             _NEMO.replace("num_layers: 2", "num_layers: [32]"),
             expect=all_of(refused(), stderr_has("num_layers"))),
        case("hf config.json with a byte-order mark", "hf", "config.json", "\ufeff" + _HF + "}",
             expect=lambda o: None if o.rc == 0 else f"exit {o.rc}, not 0"),
        # issue 48's importers: MaxText YAML, Megatron-Bridge overrides, torchtitan's registry
        case("maxtext base.yml nested 20,000 deep", "maxtext", "base.yml",
             "base_emb_dim: " + "[" * 20_000),
        case("maxtext base.yml alias bomb", "maxtext", "base.yml",
             _bomb("base_num_decoder_layers").replace("MODEL_ARGS:\n  ", "")),
        case("maxtext override of 5,000 digits", "maxtext", "base.yml", "base_emb_dim: 64\n",
             "base_emb_dim=" + "9" * 5000, expect=all_of(refused(), stderr_has("base_emb_dim"))),
        Case("import/megatron-bridge override YAML alias bomb",
             ("import", "megatron-bridge", "llama3_8b_pretrain_config", "o.yaml"),
             files={"o.yaml": _bomb("model.num_layers").replace("MODEL_ARGS:\n  ", "")},
             memory_bytes=LOAD_MEMORY_BYTES, timeout_s=LOAD_TIMEOUT_S,
             expect=all_of(refused(), stderr_has("o.yaml"))),
        Case("import/megatron-bridge empty override YAML",
             ("import", "megatron-bridge", "llama3_8b_pretrain_config", "o.yaml"),
             files={"o.yaml": ""}, expect=all_of(refused(), stderr_has("o.yaml"))),
        Case("import/torchtitan registry entry unknown",
             ("import", "torchtitan", "--module", "llama3", "--config", "llama3_9000b"),
             expect=all_of(refused(), stderr_has("llama3_9000b"))),
        *import_review_cases(),
    ]


def import_review_cases() -> list:
    """`codesign import` against issue 56's review: a file of another kind (each
    refused naming the kind it looks like), a MaxText path out of the config's
    folder (refused naming key and value, the file unread), slices of no chips,
    `--set KEY VALUE`, a Bridge key 10,000 deep, an unset shell variable where a
    number is read: one line each; `import KIND --help`: the kind's usage, exit 0."""
    maxtext = {"base.yml": "base_emb_dim: 64\n"}
    bridge = ("model:\n  tensor_model_parallel_size: 2\ntrain:\n  train_iters: 5\n"
              "optimizer:\n  lr: 0.001\n")

    def case(name, argv, files=None, expect=None, quick=True):
        return Case(f"import/{name}", ("import", *argv), files=files or {},
                    memory_bytes=LOAD_MEMORY_BYTES, timeout_s=LOAD_TIMEOUT_S,
                    expect=expect, quick=quick)

    def kind(name, importer, file, text, looks_like, *extra):
        return case(f"{importer} given {name}", (importer, *extra, file), {file: text},
                    all_of(refused(), stderr_has(f"looks like {looks_like}"), lines_at_most()))

    def unread(o: Outcome) -> str | None:  # nothing of the file outside is shown
        return "a line of /etc/passwd is shown" if "root:" in o.stderr + o.stdout else None

    def usage(k: str) -> Callable:
        def check(o: Outcome) -> str | None:
            if o.rc != cli.OK:
                return f"exit {o.rc}, not 0"
            return None if o.stdout.startswith(f"usage: codesign import {k} ") else \
                "no usage line"
        return check

    deep = "model." + ".".join(["a"] * 10_000) + "=1"
    return [
        kind("a config.json", "maxtext", "config.json", _HF + "}", "a Hugging Face config.json"),
        kind("a NeMo recipe", "maxtext", "r.yaml", _NEMO, "a NeMo recipe"),
        kind("a Megatron-Bridge override", "maxtext", "o.yaml", bridge,
             "a Megatron-Bridge override file"),
        kind("a MaxText config", "hf", "base.yml", "base_emb_dim: 64\nbase_mlp_dim: 128\n",
             "a MaxText config"),
        kind("a torchtitan job", "megatron", "job.toml", _TITAN, "a torchtitan job file"),
        kind("a Megatron script", "torchtitan", "run.sh", _MEGATRON + "\n",
             "a Megatron-LM argument file"),
        kind("a NeMo recipe", "megatron-bridge", "r.yaml", _NEMO, "a NeMo recipe",
             "llama3_8b_pretrain_config"),
        case("maxtext base_config: /etc/passwd", ("maxtext", "run.yml"),
             {"run.yml": "base_config: /etc/passwd\n"},
             all_of(refused(), stderr_has("base_config='/etc/passwd' leads out"), unread)),
        case("maxtext base_config up and out", ("maxtext", "run.yml"),
             {"run.yml": "base_config: ../../../../../../etc/passwd\n"},
             all_of(refused(), stderr_has("base_config="), unread)),
        case("maxtext model_name=../../..", ("maxtext", "base.yml", "model_name=../../.."),
             maxtext, all_of(refused(), stderr_has("model_name='../../..' is not a model name"))),
        case("maxtext compile_topology=v5e-0", ("maxtext", "base.yml", "compile_topology=v5e-0"),
             maxtext, all_of(refused(), stderr_has("compile_topology='v5e-0'"))),
        case("maxtext num_slices=0", ("maxtext", "base.yml", "num_slices=0"), maxtext,
             all_of(refused(), stderr_has("num_slices=0"))),
        case("--set with a space", ("hf", "config.json", "--set", "parallel.tp", "2"),
             {"config.json": _HF + "}"},
             all_of(refused(), stderr_has("--set takes KEY=VALUE, got 'parallel.tp'"))),
        Case("import/estimate --set with a space", ("estimate", "--set", "parallel.tp", "2"),
             expect=all_of(refused(), stderr_has("--set takes KEY=VALUE, got 'parallel.tp'")),
             quick=True),
        case("megatron-bridge key 10,000 deep", ("megatron-bridge", "llama3_8b_pretrain_config",
                                                 deep),
             expect=all_of(refused(), stderr_has("nests past 32 levels"), lines_at_most())),
        case("megatron script with --num-layers an unset variable", ("megatron", "run.sh"),
             {"run.sh": _MEGATRON.replace("--num-layers 2", "--num-layers $NL") + "\n"},
             all_of(refused(), stderr_has("--num-layers='$NL'", "--var NAME=VALUE"))),
        *(case(f"{k} --help", (k, "--help"), expect=usage(k)) for k in
          ("megatron", "nemo", "torchtitan", "hf", "megatron-bridge", "maxtext")),
    ]


# ---------------------------------------------------------------------- program
_ARGS_SPEC = '[mesh]\ndp = 8\n[[args]]\nshape = [64, 32]\nsharding = ["dp"]\n'
_OK_STEP = "def step(x):\n    return (x * 2.0).sum()\n"


def program_cases() -> list:
    """`codesign program` on the user's own code failing in every way Python
    allows, extents XLA would abort on, a mesh axis named twice or empty, a spec
    nested past the cap, a scale that rounding would make negative (issue 46):
    each one line at exit 2 (the user's error or bad input), or every number >= 0."""

    def case(name, body, spec=_ARGS_SPEC, *extra, expect=None, quick=True):
        return Case(f"program/{name}", ("program", "m.py:step", "--spec", "s.toml", "--json",
                                        *extra),
                    files={"m.py": body, "s.toml": spec}, quick=quick,
                    expect=expect or all_of(refused(), stderr_has("m.py")))

    def non_negative(o: Outcome) -> str | None:
        if o.rc != 0:
            return f"exit {o.rc}, not 0"
        todo, negative = [json.loads(o.stdout)], []
        while todo:
            x = todo.pop()
            if isinstance(x, dict):
                todo += x.values()
            elif isinstance(x, list):
                todo += x
            elif isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0:
                negative.append(x)
        return f"negative numbers {negative[:3]}" if negative else None

    deep = "[mesh]\ndp = 8\n[x]\ny = " + "[" * 5000 + "]" * 5000 + "\n"
    return [
        case("a SyntaxError in the user's module", "def step(x):\n    return (x *\n"),
        case("a RuntimeError raised as the module imports",
             "raise RuntimeError('boom')\n" + _OK_STEP),
        case("a RecursionError in the step", "def step(x):\n    return step(x)\n"),
        case("a MemoryError in the step", "def step(x):\n    raise MemoryError('oom')\n"),
        case("SystemExit(0) in the step under --json",
             "def step(x):\n    raise SystemExit(0)\n"),
        case("a step that returns None", "def step(x):\n    return None\n"),
        case("a spec array of 1e12 x 1e12", _OK_STEP,
             '[mesh]\ndp = 8\n[[args]]\nshape = [1000000000000, 1000000000000]\n',
             expect=all_of(refused(), stderr_has("shape"))),
        case("--mesh dp=2,dp=4", _OK_STEP, _ARGS_SPEC, "--mesh", "dp=2,dp=4",
             expect=all_of(refused(), stderr_has("--mesh"))),
        case("a spec nested 5,000 deep", _OK_STEP, deep,
             expect=all_of(refused(), stderr_has("s.toml"))),
        case("--scale dp=10000000: no negative time", _OK_STEP, _ARGS_SPEC,
             "--scale", "dp=10000000", expect=non_negative, quick=False),
    ]


def store_cases() -> list:
    """`codesign-executables/`, the store of compiled executables under
    CODESIGN_CACHE (issue 56): a planted pickle never runs and a forged record is
    never used; records swapped between scenarios of other structures (schedule,
    dtype, recompute, ZeRO; an optimize pair) give each its own answer; a cache
    folder another user could write, or another user's, is not used (one line
    naming CODESIGN_CACHE, exit 0); a symbolic-linked store is not followed and
    its clean-up deletes none of a user's `*.exe`; planted symbolic links are
    never written through; what it makes is private under umask 000; a
    read-only or full cache is one line naming CODESIGN_CACHE, not tracebacks."""
    est = ("estimate", "--json")
    opt = ("optimize", "--json", "--starts", "4", "--steps", "20", "--no-progress")

    def run(folder: Path, cache, argv, **popen) -> Outcome:
        env = {**os.environ, "CODESIGN_CACHE": str(cache)}
        return _codesign(argv, folder, timeout_s=300, env=env, **popen)

    def answer(o: Outcome):
        """The command's answer: its JSON without the timings (wall_s, profile)."""
        try:
            doc = json.loads(o.stdout)
        except ValueError:
            return None
        return {k: v for k, v in doc.items() if k not in ("wall_s", "profile")}

    def records(cache: Path) -> list:
        return sorted((cache / "codesign-executables").glob("*.exe"))

    def one_line_naming(o: Outcome, cache) -> str | None:
        lines = [ln for ln in o.stderr.splitlines() if ln.strip() and "warning" in ln]
        if len(lines) != 1 or "CODESIGN_CACHE" not in lines[0] or str(cache) not in lines[0]:
            return f"not one warning line naming CODESIGN_CACHE {str(cache)!r}: {o.stderr!r:.300}"
        if TRACEBACK in o.stderr or "UserWarning" in o.stderr:
            return "JAX's warnings or a traceback on stderr"
        return None

    def planted(folder: Path, forged: bool) -> Outcome:
        cache, marker = folder.with_suffix(".cache"), folder / "ran"
        first = run(folder, cache, est)
        evil = f"cos\nmkdir\n(V{marker}\ntR.".encode()  # pickle: os.mkdir(marker)
        if forged:  # the format and the key right, the tags guessed
            from codesign.store import RECORD_MAGIC

            evil = RECORD_MAGIC + b"%s" + os.urandom(64) + evil
        for path in records(cache):
            path.write_bytes(evil.replace(b"%s", path.stem.encode(), 1) if forged else evil)
        o = run(folder, cache, est)
        return _result(o, [_step("the first run", first), not records(cache) and "nothing stored",
                           marker.exists() and "the planted pickle ran",
                           o.rc == 0 and answer(o) != answer(first)
                           and "another answer after the plant"])

    def swapped(folder: Path, a, b) -> Outcome:
        """Two commands (argv) of two structures, their records rotated, run again."""
        cache = folder.with_suffix(".cache")  # beside the folder: its files are not scanned
        one, two = run(folder, cache, a), run(folder, cache, b)
        stored = records(cache)
        blobs = [p.read_bytes() for p in stored]
        for path, blob in zip(stored, blobs[1:] + blobs[:1], strict=True):  # another's
            path.write_bytes(blob)
        again_one, again_two = run(folder, cache, a), run(folder, cache, b)
        return _result(again_one, [
            _step("the first scenario", one), _step("the second scenario", two),
            len(stored) < 2 and f"{len(stored)} records stored",
            answer(one) == answer(two) and "the pair's answers do not differ",
            answer(again_one) != answer(one) and "the first scenario's answer changed",
            _step("the second scenario again", again_two),
            answer(again_two) != answer(two) and "the second scenario's answer changed"])

    def refused_cache(folder: Path, how: str) -> Outcome:
        cache = folder.with_suffix(".cache")  # beside the folder: its files are not scanned
        cache.mkdir()
        if how == "world-writable":
            cache.chmod(0o777)
        elif os.geteuid() == 0:
            os.chown(cache, 65534, 65534)
        else:
            return Outcome(skipped="giving a folder to another user needs root")
        o = run(folder, cache, est)
        return _result(o, [o.rc != 0 and f"exit {o.rc}", one_line_naming(o, cache),
                           any(cache.iterdir()) and "written into the refused cache"])

    def user_files(where: Path) -> dict:
        where.mkdir(parents=True, exist_ok=True)
        for i in range(100):
            (where / f"{i:03d}.exe").write_text(f"the user's file {i}\n")
        return {p.name: p.read_bytes() for p in where.iterdir()}

    def symlinked_store(folder: Path) -> Outcome:
        cache, mine = folder.with_suffix(".cache"), folder / "mine"
        before = user_files(mine)
        cache.mkdir(mode=0o700)
        (cache / "codesign-executables").symlink_to(mine, target_is_directory=True)
        o = run(folder, cache, est)
        after = {p.name: p.read_bytes() for p in mine.iterdir()}
        return _result(o, [o.rc != 0 and f"exit {o.rc}", one_line_naming(o, cache),
                           after != before and f"{len(set(before) - set(after))} of the user's "
                           f"files deleted, {len(set(after) - set(before))} added"])

    def foreign_files(folder: Path) -> Outcome:
        cache = folder.with_suffix(".cache")  # beside the folder: its files are not scanned
        before = user_files(cache / "codesign-executables")
        o = run(folder, cache, est)
        after = {p.name: p.read_bytes() for p in (cache / "codesign-executables").glob("*.exe")
                 if p.name in before}
        return _result(o, [o.rc != 0 and f"exit {o.rc}",
                           after != before and f"{len(set(before) - set(after))} of the user's "
                           "100 files deleted or changed by the clean-up"])

    def planted_links(folder: Path) -> Outcome:
        cache, victim = folder.with_suffix(".cache"), folder / "victim"
        first = run(folder, cache, est)
        victim.write_text("precious\n")
        pid = subprocess.Popen(["true"]).pid  # the next processes' ids follow it
        for path in records(cache):
            path.unlink()
            path.symlink_to(victim)
            for p in range(pid, pid + 400):
                (path.parent / f"{path.stem}.{p}.tmp").symlink_to(victim)
        o = run(folder, cache, est)
        return _result(o, [_step("the first run", first), not records(cache) and "nothing stored",
                           victim.read_bytes() != b"precious\n"
                           and "the planted link's target was written",
                           answer(o) != answer(first) and "another answer"])

    def umask_000(folder: Path) -> Outcome:
        cache = folder.with_suffix(".cache")  # beside the folder: its files are not scanned
        o = run(folder, cache, est, preexec_fn=lambda: os.umask(0))
        loose = [f"{p.relative_to(folder.parent)} {p.stat().st_mode & 0o7777:04o}"
                 for p in [cache, *(cache / "codesign-executables").iterdir(),
                           cache / "codesign-executables"]
                 if p.stat().st_mode & (0o077 if p.is_dir() or p.suffix == ".key" else 0o022)]
        return _result(o, [o.rc != 0 and f"exit {o.rc}", not records(cache) and "nothing stored",
                           loose and f"open to others under umask 000: {loose[:3]}"])

    def unwritable(folder: Path, how: str) -> Outcome:
        cache = folder.with_suffix(".cache")  # beside the folder: its files are not scanned
        cache.mkdir(mode=0o700)
        if _mount_namespace():
            c = shlex.quote(str(cache))
            mount = (f"mount --bind {c} {c} && mount -o remount,bind,ro {c}"
                     if how == "read-only" else f"mount -t tmpfs -o size=64k,mode=0700 tmpfs {c}")
            cmd = shlex.join([sys.executable, "-m", "codesign", *est])
            start = time.monotonic()
            done = subprocess.run(["unshare", "-m", "sh", "-c", f"{mount} || exit 97\n{cmd}"],
                                  cwd=folder, text=True, capture_output=True,
                                  stdin=subprocess.DEVNULL, timeout=300,
                                  env={**os.environ, "CODESIGN_CACHE": str(cache)})
            o = Outcome(rc=done.returncode, stdout=done.stdout, stderr=done.stderr,
                        wall_s=time.monotonic() - start)
        elif os.geteuid() != 0 and how == "read-only":
            cache.chmod(0o500)
            o = run(folder, cache, est)
        elif how == "full":  # files limited to 3 KB: every entry fails as on a full disk
            def small_files():
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

            o = run(folder, cache, est, preexec_fn=small_files)
        else:
            return Outcome(skipped="root without a mount namespace cannot make a read-only folder")
        return _result(o, [o.rc == 97 and "harness: the mount failed",
                           o.rc != 0 and f"exit {o.rc}", one_line_naming(o, cache)])

    pairs = {"schedule": ("parallel.schedule=1f1b", "parallel.interleave=1"),
             "dtype": ("training.dtype=bf16",), "recompute": ("training.recompute=selective",),
             "ZeRO": ("parallel.zero=1",)}
    c = [Case("store/a planted pickle never runs", script=lambda f: planted(f, False),
              timeout_s=240, quick=True),
         Case("store/a forged record (no secret) never runs",
              script=lambda f: planted(f, True), timeout_s=240),
         Case("store/optimize records swapped between two --vary sets",
              script=lambda f: swapped(f, (*opt, "--vary", "parallel.tp,parallel.pp"),
                                       (*opt, "--vary", "parallel.tp,training.micro_batch")),
              timeout_s=600),
         Case("store/CODESIGN_CACHE world-writable", script=lambda f: refused_cache(
             f, "world-writable"), timeout_s=240, quick=True),
         Case("store/CODESIGN_CACHE another user's", script=lambda f: refused_cache(f, "foreign"),
              timeout_s=240),
         Case("store/a symlinked store of a user's 100 *.exe", script=symlinked_store,
              timeout_s=240),
         Case("store/100 *.exe of the user's in the store", script=foreign_files,
              timeout_s=240),
         Case("store/planted symlinks at the record and temporaries", script=planted_links,
              timeout_s=240),
         Case("store/umask 000", script=umask_000, timeout_s=240),
         Case("store/CODESIGN_CACHE read-only", script=lambda f: unwritable(f, "read-only"),
              timeout_s=240),
         Case("store/CODESIGN_CACHE full", script=lambda f: unwritable(f, "full"),
              timeout_s=240)]
    for what, sets in pairs.items():
        c.append(Case(f"store/estimate records swapped: {what}",
                      script=lambda f, sets=sets: swapped(
                          f, est, (*est, *(a for s in sets for a in ("--set", s)))),
                      timeout_s=300))
    return c


# ------------------------------------------------------------------------- all
def output_cases(category: str) -> list:
    """`outputs` (issue 56): a command's output onto its own input or another of its
    outputs (same path, a hard link, a folder that is a link), a link planted at the
    output's name, `-` for a figure, a sweep spec's figure outside its folder, a
    link planted as the sweep folder's lock: each refused (exit 2, one line) before
    any work, every file as it was; `-` for the trace is stdout, and validate
    --cross --json is strict JSON. `bounds`: the timeline and the report at 10^6
    micro-batches and more, 128 stages: done in bounded time, memory and size."""
    scenario = '[model]\npreset = "gpt3-175b"\n'
    spec = COLLECTIVE_SPEC + 'ranks = [8, 16]\n[[plots]]\nfile = "{file}"\nx = "ranks"\n' \
        'y = "time_s"\n'

    def entries(folder: Path) -> dict:
        return {str(p.relative_to(folder)): os.readlink(p) if p.is_symlink() else
                None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))
                if "cache" not in p.parts}

    def clobber(argv, *, links=(), hard=(), files=None, outside=None):
        """Write the case's files (a scenario as s.toml and s.png, `files`) and
        links, run `codesign ARGV` (refused: exit 2), and say what changed: any
        entry of the folder, or `outside` (made)."""
        def script(folder: Path) -> Outcome:
            for name, text in {"s.toml": scenario, "s.png": scenario, **(files or {})}.items():
                (folder / name).write_text(text)
            (folder / "victim").write_text("someone else's file\n")
            for name, target in links:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).symlink_to(target)
            for name, target in hard:
                os.link(folder / target, folder / name)
            before = entries(folder)
            o = _codesign(argv, folder, timeout_s=120)
            changed = [k for k in before.keys() | entries(folder).keys()
                       if before.get(k, "absent") != entries(folder).get(k, "absent")]
            escaped = outside is not None and (folder / outside).resolve().exists()
            return _result(o, [refused((cli.BAD_INPUT,))(o),
                               changed and f"refused, but changed {sorted(changed)[:3]}",
                               escaped and f"wrote {outside} outside the folder"])
        return script

    def to_stdout(folder: Path) -> Outcome:
        o = _codesign(["timeline", "--out", "-"], folder, timeout_s=120)
        try:
            json.loads(o.stdout, parse_constant=lambda c: 1 / 0)
            bad = None
        except (ValueError, ZeroDivisionError) as e:
            bad = f"stdout is not the trace's JSON ({type(e).__name__})"
        return _result(o, [_step("timeline --out -", o), bad,
                           (folder / "-").exists() and "wrote a file named '-'"])

    def strict_json(o: Outcome) -> str | None:
        try:
            json.loads(o.stdout, parse_constant=lambda c: 1 / 0)
            return None if o.rc == cli.OK else f"exit {o.rc}"
        except (ValueError, ZeroDivisionError):
            return "not strict JSON (NaN or inf, or not JSON at all)"

    def small(limit_bytes: int = 5_000_000) -> Callable:
        def check(o: Outcome) -> str | None:
            if o.rc != cli.OK:
                return f"exit {o.rc}: a valid (if absurd) step refused"
            big = [n for n, text in o.written if len(text) >= limit_bytes]
            return f"{big[0]} is {limit_bytes:,} bytes or more" if big else None
        return check

    def case(name, script):
        return Case(f"outputs/{name}", script=script, quick=True, timeout_s=180)

    if category == "outputs":
        sweep = ("sweep", "sp.toml", "--out", "o", "--no-progress")
        away, ok = "/tmp/codesign-hostile-escape.png", {"sp.toml": spec.format(file="ok.png")}
        return [
            case("timeline --out X --plot X", clobber(
                ["timeline", "--out", "t.png", "--plot", "t.png"], files={"t.png": "old"})),
            case("timeline --out X --plot a hard link of X", clobber(
                ["timeline", "--out", "s.png", "--plot", "h.png"], hard=[("h.png", "s.png")])),
            case("timeline --out X --plot X through a linked folder", clobber(
                ["timeline", "--out", "s.png", "--plot", "here/s.png"], links=[("here", ".")])),
            case("validate --report X --plot a hard link of X", clobber(
                ["validate", "--report", "s.png", "--plot", "h.png"], hard=[("h.png", "s.png")])),
            case("estimate s.png --plot s.png", clobber(["estimate", "s.png", "--plot", "s.png"])),
            case("timeline s.toml --out s.toml", clobber(
                ["timeline", "s.toml", "--out", "s.toml"])),
            case("timeline s.toml --out a hard link of it", clobber(
                ["timeline", "s.toml", "--out", "h.toml"], hard=[("h.toml", "s.toml")])),
            case("report s.toml --out s.toml", clobber(["report", "s.toml", "--out", "s.toml"])),
            case("timeline --out a planted link", clobber(
                ["timeline", "--out", "t.json"], links=[("t.json", "victim")])),
            case("report --out a planted link", clobber(
                ["report", "--out", "r.html"], links=[("r.html", "victim")])),
            case("timeline --plot -", clobber(["timeline", "--out", "t.json", "--plot", "-"])),
            case("timeline --out - is stdout", to_stdout),
            case("sweep plots file ../../..", clobber(
                list(sweep), files={"sp.toml": spec.format(file="../../../escape.png")},
                outside="../escape.png")),
            case("sweep plots file absolute", clobber(
                list(sweep), files={"sp.toml": spec.format(file=away)}, outside=away)),
            case("sweep .lock a planted link", clobber(
                list(sweep), files=ok, links=[("o/.lock", "../victim")])),
            case("sweep --resume .lock a planted link", clobber(
                [*sweep, "--resume"], files=ok,
                links=[("o/.lock", "../victim")])),
            Case("outputs/validate --cross --json is strict JSON",
                 ("validate", "--cross", "--json"), expect=strict_json, timeout_s=400),
        ]
    big = [("timeline --set training.global_batch=1e9", ("timeline", "--set",
            "training.global_batch=1e9", "--out", "t.json", "--plot", "t.png")),
           ("timeline 1e6 micro-batches", ("timeline", "--set", "training.global_batch=16e6",
                                           "--out", "t.json")),
           ("timeline pp 128 x 1e5 micro-batches", (
               "timeline", "--set", "model.layers=256", "--set", "parallel.pp=128", "--set",
               "training.global_batch=1e5", "--out", "t.json", "--plot", "t.png")),
           ("timeline deepseek-v3 (DualPipe) global_batch=1e9", (
               "timeline", "deepseek-v3", "--set", "training.global_batch=1e9", "--out",
               "t.json"))]

    def page(folder: Path) -> Outcome:
        """The report at 10^9: its page small, its text (the figures' base64 aside,
        where any letters occur) without a non-finite number; the page then goes."""
        o = _codesign(["report", "--set", "training.global_batch=1e9", "--out", "r.html"],
                      folder, timeout_s=280)
        path = folder / "r.html"
        text = path.read_text() if path.exists() else ""
        path.unlink(missing_ok=True)
        bad = non_finite(re.sub(r"base64,[A-Za-z0-9+/=]+", "base64,", text))
        return _result(o, [_step("report", o), len(text) >= 5_000_000 and "a page of 5 MB+",
                           bad and f"non-finite number in the page: ...{bad}..."])

    return [*(Case(f"bounds/{name}", argv, expect=small(), quick=i < 2, timeout_s=300)
              for i, (name, argv) in enumerate(big)),
            Case("bounds/report --set training.global_batch=1e9", script=page, timeout_s=300)]


GENERATORS = {"scenario": scenario_cases, "cli": cli_cases, "data": data_cases,
              "sweep": sweep_cases, "multiprocess": multiprocess_cases,
              "library": library_cases, "load": load_cases, "import": import_cases,
              "program": program_cases, "store": store_cases,
              "outputs": lambda: output_cases("outputs"), "bounds": lambda: output_cases("bounds")}


# in the --quick sample too (besides the cases generated with quick=True)
QUICK = ("cli/declared/system.gpus=outside", "data/calibrate/a directory",
         "data/calibrate/non-UTF-8 bytes", "sweep/store/a chunk edited on disk, then --resume",
         "multiprocess/bench --processes '0'", "library/knob ends/system.gpus",
         "load/10,000 --set flags")


def all_cases(categories=CATEGORIES) -> list:
    cases = []
    for name in categories:
        cases += GENERATORS[name]()
    for c in cases:
        c.quick = c.quick or c.name in QUICK
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RuntimeError(f"duplicate case names: {sorted(dupes)[:5]}")
    return cases


def _environment(folder: Path, cache: str | None) -> None:
    """What every case inherits: JAX on CPU, this checkout first on the path, the
    compilation cache of this run (or `cache`)."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    os.environ["CODESIGN_CACHE"] = cache if cache is not None else str(folder / "xla")
    os.environ.pop("CODESIGN_DEBUG", None)
    os.environ["MPLBACKEND"] = "Agg"


def _fifo_cases(cases: list, folder: Path) -> None:
    """The FIFO case needs its FIFO made (os.mkfifo) in the folder before the run."""
    for c in cases:
        if c.name == "load/scenario a FIFO":
            c.files = {}
            c.argv = ("estimate", str(folder / "fifo.toml"))
            os.mkfifo(folder / "fifo.toml")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a sample of ~30 cases")
    parser.add_argument("--category", action="append", choices=CATEGORIES,
                        help="only this category (repeatable)")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--workers", type=int, default=2, help="cases at a time (default 2)")
    parser.add_argument("--list", action="store_true", help="print the case names and stop")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    parser.add_argument("--cache", default=None,
                        help="compilation cache folder (default: a new one per run)")
    parser.add_argument("--verbose", action="store_true", help="one line per case on stderr")
    args = parser.parse_args(argv)
    start = time.monotonic()
    cases = all_cases(args.category or CATEGORIES)
    if args.quick:
        cases = [c for c in cases if c.quick]
    if args.filter:
        cases = [c for c in cases if args.filter in c.name]
    if args.list:
        for c in cases:
            print(c.name)
        return 0
    folder = Path(tempfile.mkdtemp(prefix="hostile-"))
    folder.chmod(0o755)  # the read-only case runs as nobody when this runs as root
    try:
        _environment(folder, args.cache)
        _fifo_cases(cases, folder)
        results = run_cases(cases, args.workers, folder / "cases", args.verbose)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"cases kept in {folder}", file=sys.stderr)
    summary = report(results, time.monotonic() - start)
    print(json.dumps(summary, indent=1))
    return 1 if any(f["why"].startswith("harness error") for f in summary["failed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
