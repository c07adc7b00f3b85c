"""`codesign import KIND SOURCE...`: a scenario TOML from what a training job
already has (`codesign.importers`): a Megatron-LM argument list, inline or in a
file (a shell script, or a Megatron-MoE-ModelZoo YAML), a NeMo YAML recipe, a
torchtitan job TOML or a Hugging Face config.json. Printed, or written to --out;
every assumption is a `# assumed:` comment line. The scenario is loaded before it
is written, so what the command prints `codesign estimate` reads."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import tomllib
from pathlib import Path

from .. import files, importers, scenario
from . import _output, set_item

# the command's own flags, also taken from among a Megatron argument list
OWN = ("--out", "--system", "--gpus", "--set", "--var")
HELP = ("-h", "--help")  # among the words after KIND: that kind's usage
# each kind's SOURCE, as `codesign import KIND --help` shows it (its importer's own
# description follows)
USAGE = {
    "megatron": "FILE [--var NAME=VALUE ...] | --flag value ...  (a shell script or text of "
                "Megatron-LM arguments, a Megatron-MoE-ModelZoo YAML, or the arguments inline)",
    "nemo": "RECIPE.yaml",
    "torchtitan": "JOB.toml | --module M --config C [--section.key value ...]",
    "hf": "config.json",
    "megatron-bridge": "RECIPE [OVERRIDES.yaml ...] [key=value ...] [-tp N ...]",
    "maxtext": "base.yml [models/X.yml ...] [model_name=X] [key=value ...]",
}
COMMON_USAGE = "[--out FILE.toml] [--system SYSTEM] [--gpus N] [--set SECTION.KEY=VALUE ...]"


def add_arguments(parser, name) -> None:
    # KIND is checked in `run` (after the --set words: `--set parallel.tp 2 hf ...`
    # would else name '2' as the kind)
    parser.add_argument("kind", metavar="KIND",
                        help="megatron (arguments or a FILE holding them), nemo (RECIPE.yaml), "
                             "torchtitan (JOB.toml, or --module M --config C "
                             "[--section.key value ...]), hf (config.json), "
                             "megatron-bridge (RECIPE [OVERRIDES.yaml ...] [key=value ...]), "
                             "maxtext (base.yml [models/X.yml ...] [model_name=X] [key=value ...])")
    parser.add_argument("source", nargs=argparse.REMAINDER, metavar="SOURCE",
                        help="the file; for megatron the arguments themselves may follow")
    parser.add_argument("--out", metavar="FILE.toml", help="write the scenario here "
                        "(default: print it)")
    parser.add_argument("--system", help="system preset or system TOML (default: "
                        f"{importers.DEFAULT_SYSTEM}, said in the output)")
    parser.add_argument("--gpus", metavar="N", help="the GPU count, where the source has none "
                        "or another")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="set a scenario key in the output (repeatable)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="megatron FILE: set a shell variable of the script (its "
                             "positional parameters too: --var 2=tokenizer.model; repeatable)")


def usage(kind: str) -> str:
    """`codesign import KIND --help`: the kind's usage, then its importer's own
    description (the docstring of its module)."""
    module = importers.MODULES[kind]
    return (f"usage: codesign import {kind} {USAGE[kind]}\n"
            f"       {COMMON_USAGE}\n\n{inspect.getdoc(module)}\n\n"
            "--out FILE.toml writes the scenario there (default: print it); --system a "
            "preset or system TOML; --gpus N the GPU count; --set SECTION.KEY=VALUE a "
            "scenario key over the import (repeatable).\n")


def variables(words: list[str]) -> dict:
    """{NAME: VALUE} of the --var words."""
    out = {}
    for word in words:
        name, eq, value = word.partition("=")
        if not eq or not re.fullmatch(r"\w+", name):
            raise ValueError(f"--var takes NAME=VALUE (a shell variable, or a positional "
                             f"parameter 1, 2, ...), got {word!r}")
        out[name] = value
    return out


def split_own(words: list[str]) -> tuple[dict, list[str]]:
    """The command's own flags (`OWN`, `--flag value` or `--flag=value`) out of the
    words after KIND, and the rest (the source)."""
    own: dict = {"--set": [], "--var": []}
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, value = word.partition("=")
        if flag in OWN:
            if not eq:
                if i + 1 >= len(words):
                    raise ValueError(f"{flag} needs a value")
                value, i = words[i + 1], i + 1
            if flag in ("--set", "--var"):
                own[flag].append(set_item(value) if flag == "--set" else value)
            else:
                own[flag] = value
        else:
            rest.append(word)
        i += 1
    return own, rest[1:] if rest[:1] == ["--"] else rest


def _count(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{flag}={text!r} must be a whole number >= 1")
    return value


def imported(kind: str, source: list[str], gpus: int | None,
             system: dict | None, shell: dict | None = None) -> importers.Imported:
    """The import of `source` (the words after KIND, the command's flags taken out);
    `shell`: a Megatron script's variables (--var)."""
    script = (kind == "megatron" and len(source) == 1 and not source[0].startswith("-")
              and Path(source[0]).suffix not in (".yaml", ".yml"))  # a ModelZoo YAML: none
    if shell and not script:
        what = importers.WHAT[kind] if kind != "megatron" else (
            "the arguments" if len(source) != 1 or source[0].startswith("-")
            else "a Megatron-MoE-ModelZoo YAML")
        raise ValueError(f"--var {next(iter(shell))}=...: --var sets the variables of a "
                         f"script (codesign import megatron FILE), not of {what}")
    if kind in importers.WORDS:
        return importers.WORDS[kind](source, gpus=gpus, system=system)
    if len(source) == 1 and not source[0].startswith("-"):
        return importers.from_file(kind, source[0], gpus=gpus, system=system,
                                   variables=shell)
    if kind == "megatron" and source:
        return importers.megatron(source, gpus=gpus, system=system)
    what = "a FILE or the arguments" if kind == "megatron" else f"one FILE ({importers.WHAT[kind]})"
    raise ValueError(f"import {kind} takes {what}; got {' '.join(source) or 'nothing'}")


def run(args, name) -> int:
    if args.kind not in importers.KINDS:
        raise ValueError(f"KIND: invalid choice {args.kind!r} (choose from "
                         f"{', '.join(importers.KINDS)})")
    if any(w in HELP for w in args.source):  # no source's own words are -h or --help
        sys.stdout.write(usage(args.kind))
        return 0
    own, source = split_own(args.source)
    out, spec = own.get("--out", args.out), own.get("--system", args.system)
    gpus = _count("--gpus", own.get("--gpus", args.gpus))
    sets = [*args.set, *own["--set"]]
    if out:  # never the importer's own input, never through a link (`files.check_outputs`)
        read = {f"the source {w!r}": w for w in [*source, spec or ""] if w and os.path.isfile(w)}
        files.check_outputs({"--out": out}, read)
    if spec:
        scenario.system(spec)  # a preset or system file that does not load: named here
    system = scenario.system_table(spec) if spec else None
    result = imported(args.kind, source, gpus, system, variables([*args.var, *own["--var"]]))
    result = result.with_overrides([scenario.parse_override(s) for s in sets])
    where = result.where if result.where != "megatron arguments" else "the arguments"
    text = result.toml(f"codesign import {args.kind}: {where}", sets)
    try:  # what is written is what the loader reads
        scenario.from_tables(tomllib.loads(text))
    except ValueError as e:
        raise ValueError(f"{where} imports as a scenario codesign refuses: {e}") from None
    if not out:
        sys.stdout.write(text)
        return 0
    try:
        files.write_file(out, text, flag="--out", stdout=getattr(args, "stdout_stream", None))
    except OSError as e:
        raise ValueError(f"--out {out!r} cannot be written: {e.strerror or e}") from None
    _output.wrote(out, args)
    return 0
