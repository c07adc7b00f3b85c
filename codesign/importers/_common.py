"""What every importer shares: the result (`Imported`), the draft it fills with
its assumptions, reading a value so an error names the source and key, the
vocabulary and GPU-count rules, and dotted reads of a parsed mapping."""

from __future__ import annotations

import dataclasses
import json
import math
import re

from .. import files
from ..model import strategies

SECTIONS = ("model", "training", "parallel", "system")
DEFAULT_SYSTEM = "dgx-h100"  # the system of a source that names none
ASSUMED_VOCAB = 128256  # a source naming neither a vocabulary nor a known tokenizer (Llama 3's)
VOCAB_MULTIPLE = 128  # Megatron's (and NeMo's) --make-vocab-size-divisible-by default
# tokenizer names (lower case, a substring of the type or model name) -> vocabulary
# before padding: GPT-2 BPE (Radford et al. 2019), Llama 2 and Mixtral SentencePiece,
# Llama 3 tiktoken (Dubey et al. 2024)
TOKENIZERS = (("gpt2", 50257), ("llama-3", 128256), ("llama3", 128256), ("llama-2", 32000),
              ("llama2", 32000), ("mixtral", 32000), ("mistral-7b", 32000))


@dataclasses.dataclass(frozen=True)
class Imported:
    """What an importer read: `tables` ({section: {key: value}}, scenario keys),
    `assumed` ({scenario key or topic: one line saying what was assumed and why}),
    `ignored` (names in the source that codesign does not read)."""

    kind: str
    where: str
    tables: dict
    assumed: dict
    ignored: tuple = ()

    def with_overrides(self, items) -> Imported:
        """This import with `--set` items ((section, key, value)) over its tables;
        the assumptions about the keys they set are dropped (the user said)."""
        tables = {s: dict(t) for s, t in self.tables.items()}
        given = set()
        for section, key, value in items:
            tables.setdefault(section, {})[key] = value
            given.add(f"{section}.{key}")
        return dataclasses.replace(self, tables=tables, assumed={
            k: v for k, v in self.assumed.items() if k not in given})

    def toml(self, header: str, overrides=()) -> str:
        """The scenario TOML: `header` and the comments, then the tables."""
        comments = [header, *(f"assumed: {why}" for why in self.assumed.values()),
                    *(f"set: {o}" for o in overrides),
                    *(line.removeprefix("# ") for line in _wrapped(
                        "# ignored (not read by codesign): ", list(self.ignored)))]
        return files.toml_text(self.tables, comments)


def _value(v) -> str:
    """A TOML value: booleans, whole numbers as integers, strings quoted."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def _wrapped(prefix: str, names: list, width: int = 100) -> list[str]:
    lines, line = [], prefix
    for name in names:
        piece = name if line == prefix else ", " + name
        if len(line) + len(piece) > width and line != prefix:
            lines.append(line + ",")
            line, piece = "#   ", name
        line += piece
    return lines + ([line] if line != prefix else [])


class Draft:
    """Tables being filled, with the assumptions made on the way."""

    def __init__(self, kind: str, where: str):
        self.kind, self.where = kind, where
        self.tables: dict = {s: {} for s in SECTIONS}
        self.assumed: dict = {}
        self.ignored: list = []

    def put(self, key: str, value) -> None:
        section, name = key.split(".", 1)
        self.tables[section][name] = value

    def assume(self, key: str, value, why: str) -> None:
        """Set `key` to `value` (None: leave it to the loader) and say why."""
        if value is not None:
            self.put(key, value)
        shown = f"{key} = {_value(value)}: " if value is not None else f"{key}: "
        self.assumed[key] = shown + why

    def given(self, key: str, value, default, why: str) -> None:
        """`key` = `value` from the source, or `default` (not None) assumed, saying why."""
        if value is None:
            self.assume(key, default, why)
        else:
            self.put(key, value)

    def get(self, key: str, default=None):
        section, name = key.split(".", 1)
        return self.tables[section].get(name, default)

    def done(self) -> Imported:
        system = self.tables["system"]
        self.tables["system"] = {k: system[k] for k in sorted(system, key=lambda k: k != "preset")}
        return Imported(self.kind, self.where, {s: t for s, t in self.tables.items() if t},
                        self.assumed, tuple(self.ignored))


# ----------------------------------------------------------------- values
SHOWN_CHARS = 60  # of a value in a message: a hostile one may be megabytes


def shown(value) -> str:
    """`value` as a message shows it (a string quoted), cut to SHOWN_CHARS with its
    length said: a message stays one short line whatever the file holds."""
    try:
        text = repr(value) if isinstance(value, str) else str(value)
    except ValueError:  # an integer past Python's int-to-str limit
        return "(an integer too long to show)"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def bad(where: str, name: str, value, need: str) -> ValueError:
    return ValueError(f"{where}: {name}={shown(value)} {need}")


def whole(where: str, name: str, value, lo: int = 1) -> int:
    """`value` (an int, an integral float, or such a string) as an int >= lo."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, int) and not isinstance(number, bool) and lo <= number <= 2**53:
        return number
    if (not isinstance(number, float) or not math.isfinite(number) or number != int(number)
            or not lo <= number <= 2**53):
        raise bad(where, name, value, f"must be a whole number >= {lo}" + (
            " (a shell expression or variable codesign does not resolve; give the value,"
            " or the variable's with --var NAME=VALUE)"
            if isinstance(value, str) and "$" in value else ""))
    return int(number)


def number(where: str, name: str, value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past 1e308
        x = math.nan
    if isinstance(value, bool) or not math.isfinite(x):
        raise bad(where, name, value, "must be a number")
    return x


def flag(where: str, name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise bad(where, name, value, "must be true or false")


def recompute(where: str, key: str, value) -> strategies.Recompute:
    """The recomputation the source names (its names are codesign's: none,
    selective, full), or a one-line error naming the source and key."""
    try:
        return strategies.recompute(str(value), key)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


# ----------------------------------------------------------------- rules
def padded_vocab(vocab: int, multiple: int, tp: int) -> int:
    """Megatron's (and NeMo's) padding of the vocabulary: up to a multiple of
    `multiple` x tp (`_vocab_size_with_padding`)."""
    step = multiple * tp
    return -(-vocab // step) * step


def tokenizer_vocab(*names) -> int | None:
    """The unpadded vocabulary of a tokenizer codesign knows by name (`TOKENIZERS`)."""
    text = " ".join(str(n) for n in names if n).lower()
    return next((v for key, v in TOKENIZERS if key in text), None)


def vocab(d: Draft, explicit, padded, tokenizer: tuple, multiple: int, tp: int,
          what: str) -> None:
    """model.vocab: an explicit padded size, else an explicit or tokenizer size
    padded as Megatron does, else `ASSUMED_VOCAB` (each but the first said)."""
    if padded is not None:
        d.put("model.vocab", padded)
        return
    base, source = explicit, f"{what} {explicit}"
    if base is None:
        base = tokenizer_vocab(*tokenizer)
        names = " ".join(str(t) for t in tokenizer if t and "$" not in str(t))
        source = f"tokenizer {names} ({base} tokens)"
    if base is None:
        d.assume("model.vocab", ASSUMED_VOCAB, "the source names neither a vocabulary size "
                 "nor a tokenizer codesign knows (Llama 3's)")
        return
    size = padded_vocab(base, multiple, tp)
    if size == base and explicit is not None:
        d.put("model.vocab", size)
    else:
        d.assume("model.vocab", size, source + (
            f", a multiple of {multiple} x tp {tp} already" if size == base else
            f" padded to a multiple of {multiple} x tp {tp} (Megatron's rule)"))


def system(d: Draft, table: dict | None) -> None:
    """[system]: the --system keys, or the assumed preset."""
    for k, v in (table or {}).items():
        d.put(f"system.{k}", v)
    if "preset" not in d.tables["system"]:
        d.assume("system.preset", DEFAULT_SYSTEM, "the source names no system (--system PRESET)")


def gpus(d: Draft, given: int | None, source: tuple | None) -> None:
    """system.gpus: --gpus, else the source's (value, why), else the fewest the plan
    allows: dp = ep (the data-parallel width is a multiple of ep; if ep micro-batches
    do not divide the global batch, no multiple does)."""
    if given is not None:
        d.put("system.gpus", given)
    elif source is not None:
        d.assume("system.gpus", *source)
    else:
        tp, pp, cp, ep = (int(d.get(f"parallel.{k}", 1)) for k in ("tp", "pp", "cp", "ep"))
        d.assume("system.gpus", tp * pp * cp * ep,
                 f"the source gives no GPU count: tp {tp} x pp {pp} x cp {cp} x dp {ep}, the "
                 "smallest data-parallel width the plan allows (a multiple of ep; --gpus N)")


def group_limit(d: Draft, groups: int | None, limit: int | None, groups_name: str,
                limit_name: str) -> None:
    """DeepSeek's group-limited routing (a token's top-k experts from at most `limit`
    of `groups` expert groups: HF's topk_group of n_group, Megatron's
    --moe-router-group-topk of --moe-router-num-groups, MaxText's topk_routing_group
    of n_routing_groups) as parallel.moe_node_limit, each group taken as a node's
    experts; `*_name` are the source's keys. Unset, -1 or not below `groups`: no limit."""
    if groups and limit and 0 < limit < groups:
        d.assume("parallel.moe_node_limit", limit,
                 f"{limit_name} {limit} of {groups_name} {groups}: a token's experts come from "
                 f"at most {limit} of {groups} expert groups, taken as one group per node "
                 "(DeepSeek-V3: at most 4 of the 8 nodes holding its experts); another layout "
                 "bounds otherwise (--set parallel.moe_node_limit=M)")


def tokens(d: Draft, steps, what: str) -> None:
    """training.tokens = steps x global batch x sequence, where the source gives steps."""
    batch, seq = d.get("training.global_batch"), d.get("model.seq_len")
    if steps and batch and seq:
        d.assume("training.tokens", steps * batch * seq,
                 f"{what} {steps} x global_batch {batch} x seq_len {seq}")
    else:
        d.assume("training.tokens", None, "not set: the source gives no training length "
                 "(no time to train)")


# ----------------------------------------------------------------- trees
_INNER = re.compile(r"\$\{([^${}]*)\}")
MAX_INTERPOLATIONS = 1000  # `${...}` resolved for one value read (with those they name)
MAX_RESOLVED_CHARS = 2**20  # what one value's interpolations may grow it to


class Tree:
    """Dotted-path reads of a parsed YAML/TOML/JSON mapping (None and null read as
    absent), remembering which were read; OmegaConf's `${path}` and `${.sibling}`
    and the NeMo launcher's `${multiply:a, b}` resolved where read."""

    def __init__(self, root: dict, where: str):
        self.root, self.where, self.read = root, where, set()
        # the interpolations left to the value being read, and its (path, text)
        self._left, self._reading = MAX_INTERPOLATIONS, ("", "")

    def node(self, path: str):
        node = self.root
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def get(self, *paths, default=None):
        for path in paths:
            self.read.add(path)
            node = self.node(path)
            if isinstance(node, str) and "${" in node:
                self._left, self._reading = MAX_INTERPOLATIONS, (path, node)
                node = self._resolve(node, path)
            if node is not None:
                return node
        return default

    def _resolve(self, text: str, path: str, depth: int = 0):
        """`text` with its interpolations resolved: at most MAX_INTERPOLATIONS for one
        value read, growing it to at most MAX_RESOLVED_CHARS (interpolations of
        interpolations, each naming the next many times, would multiply without end:
        a one-line error naming the key read)."""
        while "${" in text and depth < 20:
            m = _INNER.search(text)
            if m is None:
                break
            self._left -= 1
            if self._left < 0:
                raise bad(self.where, *self._reading, f"takes more than "
                          f"{MAX_INTERPOLATIONS} interpolations to resolve; codesign "
                          "resolves no more")
            value = self._interpolation(m.group(1).strip(), path, depth)
            if m.group(0) == text:
                return value
            piece = str(value)
            if len(text) - len(m.group(0)) + len(piece) > MAX_RESOLVED_CHARS:
                raise bad(self.where, *self._reading, "resolves to more than "
                          f"{MAX_RESOLVED_CHARS} characters; codesign resolves no more")
            text = text[:m.start()] + piece + text[m.end():]
            depth += 1
        if "${" in text:
            raise bad(self.where, path, text, "is an interpolation codesign does not resolve")
        return text

    def _interpolation(self, expr: str, path: str, depth: int):
        if expr.startswith("multiply:"):
            return math.prod(number(self.where, path, x)
                             for x in expr[len("multiply:"):].split(","))
        if expr.startswith("."):  # relative to the mapping that holds `path`
            expr = ".".join(path.split(".")[:-1] + [expr.lstrip(".")])
        parts = expr.split(".")
        if parts[0] not in self.root and len(parts) > 1:
            parts = parts[1:]  # the launcher nests a recipe under `training.`
        node = self.node(".".join(parts))
        if node is None:
            raise bad(self.where, path, f"${{{expr}}}",
                      "is an interpolation codesign does not resolve")
        return self._resolve(node, ".".join(parts), depth + 1) if isinstance(node, str) else node

    def count(self, *paths, default=None, lo: int = 1):
        for path in paths:
            value = self.get(path)
            if value is not None:
                return whole(self.where, path, value, lo)
        return default

    def flag(self, *paths, default=None):
        for path in paths:
            value = self.get(path)
            if value is not None:
                return flag(self.where, path, value)
        return default

    def unread(self, prefix: str = "", every: bool = False) -> list[str]:
        """The keys of the table `prefix` ("": the top level) not read: `every`
        one, else those whose value is set (not null, false, 0 or empty, nor a
        table)."""
        node = self.node(prefix) if prefix else self.root
        if not isinstance(node, dict):
            return []
        dot = f"{prefix}." if prefix else ""
        return [f"{dot}{k}" for k, v in node.items() if f"{dot}{k}" not in self.read
                and (every or (v not in (None, False, 0, "", []) and not isinstance(v, dict)))]


def yaml_mapping(text: str, where: str) -> dict:
    """A YAML file's mapping (`files.parse_yaml`: its errors, nesting, aliases and
    numbers are one line naming the file)."""
    tree = files.parse_yaml(text, where)
    if not isinstance(tree, dict):
        raise ValueError(f"{where} must hold a YAML mapping, not {type(tree).__name__}")
    return tree
