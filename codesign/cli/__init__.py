"""The `codesign` command: one sub-module per sub-command, loaded on demand.

Each sub-module defines `add_arguments(parser, name)` and `run(args, name) -> int`,
and may define `FLAGS`: the library's name of a quantity -> the flag that sets
it here. A library error names what to change in backquotes (narrow `bounds`);
the command prints it with its flag (narrow --bounds).

Exit codes: 0 an answer; 2 bad input (one line on stderr naming the key or flag,
the value and its domain); 3 valid input without a feasible answer (optimize
with nothing feasible, a sweep whose every point is infeasible, a job that
makes no progress for its failures: `reliability.NoProgress`); 1 an internal
fault (one line and a request to report it; CODESIGN_DEBUG=1 shows the traceback);
130 interrupted by Ctrl-C (one line, `codesign NAME: interrupted`, no traceback).

The command computes in float64 (`jax_enable_x64`, set here for its own
process; importing codesign sets nothing). Compiled models are cached on disk
(JAX's persistent compilation cache) in
`$CODESIGN_CACHE` (default ~/.cache/codesign/xla; set it empty to disable), so a
second run of the same command skips compilation; `estimate`, `traffic`,
`roofline` and `reliability` also keep their executable there
(`codesign-executables/`, keyed by this package's sources, JAX, the devices and
the scenario's structure: `compiling.stored_key`), so a second run of a scenario
of the same structure skips tracing too. A cache folder another user could
write, or one that cannot be written, is not used: one warning line naming
CODESIGN_CACHE, and the command compiles in memory (`_configure_jax`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import re
import sys
import traceback
from pathlib import Path

# sub-command -> (module under codesign.cli, one-line help)
COMMANDS = {
    "estimate": ("estimate", "step time, memory, MFU of a scenario (default GPT-3 175B)"),
    "traffic": ("estimate", "the traffic table of a scenario: one row per collective"),
    "roofline": ("estimate", "FLOP per byte achieved per tier against what the hardware needs"),
    "timeline": ("timeline", "the modelled step as a trace (Chrome JSON: Perfetto, "
                             "chrome://tracing)"),
    "report": ("report", "one self-contained HTML page of a scenario: plan, estimate, "
                         "breakdowns, timeline, roofline, sensitivities, error band"),
    "collective": ("collective", "cost of one collective: time, algbw, busbw, algorithm"),
    "presets": ("presets", "list hardware and model presets with their numbers and sources"),
    "reliability": ("reliability", "stragglers, failures, checkpoints and goodput of a scenario"),
    "optimize": ("optimize", "gradient or grid co-design of hardware and plan knobs"),
    "sensitivity": ("sensitivity", "elasticity of step time to every knob"),
    "bench": ("bench", "nccl-tests-style benchmark of the real shard_map collectives"),
    "calibrate": ("bench", "fit alpha/beta/gamma per tier from bench output or nccl-tests logs; "
                           "`calibrate compute`: GEMM, attention and HBM constants of this chip"),
    "audit": ("audit", "compare the HLO of a compiled sharded step with the traffic table"),
    "program": ("program", "trace your own jitted JAX step and cost its compiled HLO on a system"),
    "sweep": ("sweep", "run a design sweep spec (resumable, sharded)"),
    "validate": ("validate", "the model beside every published end-to-end figure we know"),
    "import": ("import_", "a scenario TOML from Megatron arguments, a NeMo recipe, a torchtitan "
                          "job or a Hugging Face config.json"),
}


OK, BAD_INPUT, INFEASIBLE, INTERNAL = 0, 2, 3, 1
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
ENTRY = "codesign.cli:main"  # what every worker process of a launch runs (execute.distributed)
EXIT_CODES = """exit codes: 0 an answer; 2 bad input (one line naming the key, value and domain);
3 valid input without a feasible answer; 1 internal fault (CODESIGN_DEBUG=1: traceback)"""
REPORT = ("this is a bug in codesign: please report it with the command line "
          "(CODESIGN_DEBUG=1 shows the traceback)")
# a value check that fired inside a compiled function (`equinox.error_if`)
_TRACED = re.compile(r"EquinoxRuntimeError: ([^\n]+)")
# what a library error asks its caller to change: `grid_points`
_QUANTITY = re.compile(r"`([\w.]+)`")


def restart_command() -> list[str]:
    """This command again, as a fresh process (`python -m codesign ARGS`): what
    `execute.distributed.configure_cpu_devices` restarts when JAX already runs."""
    return [sys.executable, "-m", "codesign", *sys.argv[1:]]


# argparse's "invalid choice: 'x' (choose from 'a', 'b')" -> "invalid choice 'x' (choose from a, b)"
_CHOICE = re.compile(r"invalid choice: (.+?) \(choose from (.+)\)$")


def _argparse_line(message: str) -> str:
    """argparse's error message, one line, naming the flag first: `--output: ...`."""
    text = " ".join(message.split())
    if text.startswith("argument "):
        text = text[len("argument "):]
    m = _CHOICE.search(text)
    if m:
        choices = ", ".join(c.strip().strip("'") for c in m.group(2).split(","))
        text = f"{text[:m.start()]}invalid choice {m.group(1)} (choose from {choices})"
    return text


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose error is one line on stderr (no usage block) and
    exit 2; `--help` is argparse's own."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(BAD_INPUT, f"{self.prog}: error: {_argparse_line(message)}\n")


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="codesign", description=__doc__.splitlines()[0],
                                     epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true",
                        help="print the versions of codesign and JAX, the backend and devices")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def _module(name: str):
    return importlib.import_module(f"codesign.cli.{COMMANDS[name][0]}")


def cache_dir() -> str:
    """`$CODESIGN_CACHE` (default ~/.cache/codesign/xla; empty: no cache)."""
    return os.environ.get("CODESIGN_CACHE", str(Path.home() / ".cache" / "codesign" / "xla"))


_REFUSED_CACHES: set = set()  # CODESIGN_CACHE folders this process found unsafe (_configure_jax)


def executable_store() -> Path | None:
    """Where `codesign estimate` keeps its compiled executables (`compiling.compiled`'s
    `store`): a folder of the cache, None without one (or one refused: `_configure_jax`)."""
    cache = cache_dir()
    return Path(cache) / "codesign-executables" if cache and cache not in _REFUSED_CACHES \
        else None


def _configure_jax(name: str = "") -> None:
    """What the command sets in JAX for its process (a library import sets nothing):
    float64 (step times span microseconds to months; gradients are checked
    against finite differences) and the persistent compilation cache.

    A cache folder another user could write into, swap or plant files in, or one
    that cannot be written (`_store.cache_folder_problem`), is not used: one
    warning line naming CODESIGN_CACHE, and the command compiles in memory (the
    answer is the same, only slower: a valid question is not refused for its
    cache). A cache that fails later (a full disk) says so once, in one line,
    instead of JAX's warnings."""
    import jax

    jax.config.update("jax_enable_x64", True)
    cache = cache_dir()
    if not cache:
        return
    from ..store import cache_folder_problem

    problem = cache_folder_problem(cache)
    if problem:
        _REFUSED_CACHES.add(cache)
        jax.config.update("jax_enable_compilation_cache", False)  # JAX_COMPILATION_CACHE_DIR too
        print(f"codesign {name}: warning: CODESIGN_CACHE not used: {problem}; compiling in "
              "memory (set CODESIGN_CACHE to a private folder of yours, or empty)",
              file=sys.stderr)
        return
    jax.config.update("jax_compilation_cache_dir", cache)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:  # the user's wins
        # every program: the eager checks' small ones too (a warm `estimate` 2.1-2.8 s -> 1.6 s)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _cache_warnings_in_one_line(name, cache)


_CACHE_LINE: dict = {}  # what the one line names: the command and its cache folder


def _cache_warnings_in_one_line(name: str, cache: str) -> None:
    """JAX's persistent-cache warnings (a full disk: one per program, with the line
    of JAX that warned) and the store's (`_store.StoreWarning`) as one line
    naming CODESIGN_CACHE, once per command; other warnings as Python shows them.
    The hook is installed once per process (a command run again in it, as the
    tests do, names its own command and folder)."""
    import warnings

    from ..store import StoreWarning

    _CACHE_LINE.update(name=name, cache=cache, said=False)
    if getattr(warnings.showwarning, "codesign_cache_line", False):
        return
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        jax_cache = "persistent compilation cache entry" in text
        if not (jax_cache or issubclass(category, StoreWarning)):
            return shown(message, category, filename, lineno, file, line)
        if not _CACHE_LINE["said"]:
            _CACHE_LINE["said"] = True
            cause = text.rsplit(chr(39) + ": ", 1)[-1]  # JAX's: ... for 'name': Error: ...
            why = (f"{text}; compiled programs are not kept" if not jax_cache
                   else f"cannot be written ({cause}); compiled programs are not kept"
                   if "writing" in text else f"holds an entry JAX cannot read ({cause}); "
                   "compiled again (remove the folder to rebuild it)")
            print(f"codesign {_CACHE_LINE['name']}: warning: CODESIGN_CACHE "
                  f"{_CACHE_LINE['cache']!r}: {why}", file=sys.stderr)
        return None

    show.codesign_cache_line = True
    warnings.showwarning = show


def version_line() -> str:
    """`codesign --version`: this package, JAX and jaxlib, the backend and the devices
    JAX sees (on one line; starting the backend is the only cost)."""
    import jax

    from .. import __version__

    try:
        from jaxlib import version as jaxlib_version

        jaxlib = f" (jaxlib {jaxlib_version.__version__})"
    except ImportError:
        jaxlib = ""
    try:
        devices = jax.devices()
        kinds: dict = {}
        for d in devices:
            kinds[d.device_kind] = kinds.get(d.device_kind, 0) + 1
        seen = ", ".join(f"{n} x {k}" for k, n in kinds.items())
        where = f"backend {jax.default_backend()}: {seen}"
        if jax.process_count() > 1:
            where += f" in {jax.process_count()} processes"
    except RuntimeError as e:
        where = f"no backend ({str(e).splitlines()[0][:200]})"
    return f"codesign {__version__}; jax {jax.__version__}{jaxlib}; {where}"


def _one_line(e: BaseException) -> str:
    text = str(e.args[0] if isinstance(e, KeyError) and e.args else e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def in_flags(text: str, flags: dict) -> str:
    """A library message in the command's words: each `quantity` it asks to change
    as the flag that sets it (`flags`, a sub-command module's FLAGS); others stay."""
    return _QUANTITY.sub(lambda m: flags.get(m.group(1), m.group(0)), text)


def _traced_message(e: BaseException) -> str | None:
    m = _TRACED.search(str(e))
    return m.group(1).strip() if m else None


def set_item(text: str) -> str:
    """A --set word: KEY=VALUE, else one line naming it. `--set parallel.tp 2` gives
    --set `parallel.tp` and the next argument `2` (a scenario named '2'): each
    command's --set words are checked before it reads anything (`_run`)."""
    if "=" not in text:
        raise ValueError(f"--set takes KEY=VALUE, got {text!r}")
    return text


def _run(module, args, name) -> int:
    """Run a sub-command and map what it raises to an exit code and one line."""
    debug = os.environ.get("CODESIGN_DEBUG", "") not in ("", "0")
    try:
        for item in getattr(args, "set", None) or ():
            set_item(item)
        _check_outputs(module, args)
        if _to_stdout(module, args):  # the file is stdout: what the command prints, stderr
            with contextlib.redirect_stdout(sys.stderr):
                return int(module.run(args, name) or 0)
        return int(module.run(args, name) or 0)
    except KeyboardInterrupt:
        return _interrupted(name, module, args)
    except BrokenPipeError:  # the reader (e.g. `head`) left: not a fault
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except (ValueError, FileNotFoundError, KeyError, RuntimeError) as e:
        from .. import domains
        from ..model.reliability import NO_PROGRESS, NoProgress

        traced = _traced_message(e)
        if traced is not None or isinstance(e, (ValueError, FileNotFoundError, KeyError)):
            if debug:
                traceback.print_exc()
            text = domains.shown_words(in_flags(traced or _one_line(e),
                                                 getattr(module, "FLAGS", {})))
            if isinstance(e, NoProgress) or (traced or "").startswith(NO_PROGRESS):
                # valid input, no feasible answer (raised, or by the traced check)
                print(f"codesign {name}: no feasible answer: {text}", file=sys.stderr)
                return INFEASIBLE
            print(f"codesign {name}: error: {text}", file=sys.stderr)
            return BAD_INPUT
        return _internal(name, e, debug)
    except OSError as e:  # the filesystem's answer: no space, a name too long, no permission
        from .. import domains

        if debug:
            traceback.print_exc()
        path = f"{e.filename!r}: " if e.filename is not None else ""
        print(f"codesign {name}: error: {domains.shown_words(path + (e.strerror or str(e)))}",
              file=sys.stderr)
        return BAD_INPUT
    except Exception as e:  # noqa: BLE001 - every other exception is a fault of ours
        return _internal(name, e, debug)


def _interrupted(name: str, module=None, args=None) -> int:
    """Ctrl-C (SIGINT): one line, `codesign NAME: interrupted`, with what the
    command says continues it (a sub-module's `resume_hint(args)`), and 130."""
    hint = getattr(module, "resume_hint", None)
    text = hint(args) if hint is not None and args is not None else ""
    if sys.stderr.isatty():
        print(file=sys.stderr)  # off the line of a progress bar and the terminal's ^C
    print(f"codesign {name}: interrupted{'; ' + text if text else ''}", file=sys.stderr)
    return INTERRUPTED


def _check_outputs(module, args) -> None:
    """What the command will write, checked before it works: `--plot` of every command
    that has it (the path it writes, `_output.plot_path`), `--report` (an HTML page:
    `report.add_output_arguments`), and the files and folders a sub-module names in
    `OUTPUT_FILES` / `OUTPUT_DIRS` (argument -> flag): none a symbolic link, none
    the same file as an input of the command or as another output
    (`files.check_outputs`), `-` (standard output) only for text."""
    from .. import files
    from . import _output

    if getattr(args, "plot", None) and not files.is_stdout(args.plot):
        args.plot = _output.plot_path(args.plot)
    outputs = {"--plot": getattr(args, "plot", None), "--report": getattr(args, "report", None)}
    outputs |= {flag: getattr(args, dest, None)
                for dest, flag in getattr(module, "OUTPUT_FILES", {}).items()}
    files.check_outputs(outputs, _output.inputs(args), binary={"--plot"})
    for dest, flag in getattr(module, "OUTPUT_DIRS", {}).items():
        if getattr(args, dest, None):
            _output.check_output_dir(getattr(args, dest), flag)
    args.stdout_stream = sys.stdout  # where an output named `-` goes (cli._run: the rest to stderr)


def _to_stdout(module, args) -> bool:
    """Whether an output of the command is `-` (standard output)."""
    from .. import files

    dests = ["plot", "report", *getattr(module, "OUTPUT_FILES", {})]
    return any(files.is_stdout(getattr(args, d, None)) for d in dests)


def _internal(name: str, e: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    from .. import domains

    print(f"codesign {name}: internal error: {type(e).__name__}: "
          f"{domains.shown_words(_one_line(e))}; {REPORT}", file=sys.stderr)
    return INTERNAL


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        print(version_line())
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser = _parser()
        if argv and argv[0] not in ("-h", "--help"):
            print(f"codesign: error: unknown command {argv[0]!r}; choose one of "
                  f"{', '.join(COMMANDS)}", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    name, rest = argv[0], argv[1:]
    try:
        _configure_jax(name)
        # jax logs a traced check's error (the callback's traceback) before raising it
        logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)
        module = _module(name)
        parser = OneLineParser(prog=f"codesign {name}", description=COMMANDS[name][1],
                               epilog=EXIT_CODES)
        module.add_arguments(parser, name)
        args = parser.parse_args(rest)  # exits 2 with a one-line error (OneLineParser)
    except KeyboardInterrupt:  # while JAX and the command load: nothing to resume yet
        return _interrupted(name)
    return _run(module, args, name)


if __name__ == "__main__":
    sys.exit(main())
