"""Megatron-LM's arguments as words: from a shell script (or any text holding
them: backslash continuations, comments, `NAME=value` strings and `NAME=( ... )`
arrays, `$NAME` / `${NAME:-default}` expanded within `EXPANSION_LIMIT`) or from a
Megatron-MoE-ModelZoo YAML (`MODEL_ARGS`); `megatron.read` reads the words."""

from __future__ import annotations

import re
import shlex

from ..units import format_bytes
from . import _common as c
from . import _kinds

_VAR = re.compile(r"\$(?:\{(?P<braced>\w+)(?::?-(?P<default>[^}]*))?\}|(?P<plain>\w+))")
_PLAIN_VAR = re.compile(r"\$(?P<plain>\w+)")  # `$NAME` only
# a variable left unset in a flag's value (`$NAME`, `${NAME}`): its text stays
UNSET = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)
# what `$NAME` expansions may add to a script, all together: a script's arguments
# are a few KiB; `A=$A$A` forty times over would be a TiB
EXPANSION_LIMIT = 2**20


class _Overflow(Exception):
    """An expansion past EXPANSION_LIMIT, at the variable `args[0]`."""


def _expand(text: str, env: dict, room: int) -> tuple[str, int]:
    """`$NAME`, `${NAME}` and `${NAME:-default}` from `env` (unset ones stay as
    written, so that a flag they give names them), and what
    is left of `room`, the characters expansions may still add; past it, _Overflow
    naming the variable (raised before the text is built)."""
    def sub(m):
        nonlocal room
        name, default = m["plain"] or m["braced"], m.groupdict().get("default")
        value = env[name] if name in env else (default if default is not None else m.group(0))
        room -= max(0, len(value) - len(m.group(0)))
        if room < 0:
            raise _Overflow(name)
        return value
    # past the last `}` no `${` closes: only `$NAME` is looked for there (`_VAR` would
    # scan from each unclosed `${NAME:-` to the end of the text: quadratic)
    cut = text.rfind("}") + 1
    head = _VAR.sub(sub, text[:cut])
    return head + _PLAIN_VAR.sub(sub, text[cut:]), room


def shell_arguments(text: str, where: str, variables: dict | None = None) -> list[str]:
    """The words of a shell script or text holding Megatron arguments: line
    continuations joined, comments dropped, `NAME=value` assignments (strings and
    arrays of arguments too) followed, `$NAME` / `${NAME:-default}` expanded, the
    expansions adding at most EXPANSION_LIMIT characters in all (else a one-line
    error naming the file and the variable). `variables` (`--var NAME=VALUE`: the
    script's positional parameters `1`, `2`, ... too) are set before the script
    runs and stand over its own assignments of them; a variable left unset stays
    as written (`$2`), which only a flag the model reads refuses."""
    lines = [re.sub(r"(^|\s)#.*$", "", line) for line in text.replace("\\\n", " ").split("\n")]
    try:
        words = shlex.split("\n".join(lines))
    except ValueError as e:
        raise ValueError(f"{where} cannot be read as shell words ({e})") from None
    given = dict(variables or {})
    env: dict = dict(given)
    out: list[str] = []
    room = EXPANSION_LIMIT
    try:
        for word in words:
            m = _ASSIGN.match(word)
            if m:
                value, room = _expand(m.group(2), env, room)
                value = value[1:] if value.startswith("(") else value  # NAME=( opens an array
                if m.group(1) not in given:  # --var's value stands
                    env[m.group(1)] = value
                out += value.split()  # a string of arguments: its words count too
            elif word not in ("(", ")"):
                expanded, room = _expand(word, env, room)
                out += expanded.split()  # an expansion splits into words
    except _Overflow as e:
        raise ValueError(f"{where}: ${e.args[0]} expands the script past "
                         f"{format_bytes(EXPANSION_LIMIT)} (a variable doubled over and "
                         "over?); codesign expands no more") from None
    return out


def modelzoo_arguments(text: str, where: str) -> list[str]:
    """The arguments of a Megatron-MoE-ModelZoo YAML: `MODEL_ARGS` (or the top
    level) maps `--flag` to a value; true is the bare switch, false leaves it out."""
    tree = _kinds.parsed("megatron", text, where, c.yaml_mapping)
    args = tree.get("MODEL_ARGS", tree)
    if not isinstance(args, dict):
        raise ValueError(f"{where}: MODEL_ARGS must map --flags to values")
    out: list[str] = []
    for name, value in args.items():
        if str(value).lower() == "false":
            continue
        switch = value is None or str(value).lower() == "true"
        out += [str(name)] if switch else [str(name), str(value)]
    return out
