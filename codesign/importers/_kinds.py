"""Which kind of source a file looks like, so that each importer refuses a file
of another kind in one line naming it (`codesign import maxtext config.json`
is a Hugging Face config, not MaxText's default model). The signs are cheap and
positive: a kind is named only where the file carries its marks; a file with
none of them is left to the importer's own reading."""

from __future__ import annotations

import re

from .. import files
from ._maxtext_config import DEFAULTS as MAXTEXT_DEFAULTS

# ConfigContainer's fields (Megatron-Bridge src/megatron/bridge/training/config.py,
# class ConfigContainer): the top-level keys of a Bridge override file
BRIDGE_SECTIONS = ("env_vars", "rng", "rerun_state_machine", "train", "model", "optimizer",
                   "optimizer_config_override_provider", "ddp", "validation", "scheduler",
                   "dataset", "logger", "tokenizer", "checkpoint", "dist", "ft", "straggler",
                   "nvrx_straggler", "profiling", "peft", "comm_overlap", "mixed_precision",
                   "tensor_inspect", "inprocess_restart")
# a config.json's own keys (transformers' PretrainedConfig and every decoder's)
HF_KEYS = frozenset({"architectures", "num_hidden_layers", "torch_dtype", "transformers_version"})
# MaxText's keys: those codesign reads (their defaults) and the chain's link
MAXTEXT_KEYS = frozenset({*MAXTEXT_DEFAULTS, "base_config"})
# the model-shape flags of a Megatron argument list, as text
_MEGATRON_FLAG = re.compile(r"(^|\s)--(num-layers|hidden-size|num-attention-heads)[\s=]")
_TOML_TABLE = re.compile(r"^\s*\[[A-Za-z_][\w.]*\]\s*$", re.M)
# each kind as a message names it, and what imports it
NAMED = {"megatron": "a Megatron-LM argument file", "nemo": "a NeMo recipe",
         "torchtitan": "a torchtitan job file", "hf": "a Hugging Face config.json",
         "megatron-bridge": "a Megatron-Bridge override file (codesign import megatron-bridge "
                            "RECIPE FILE)",
         "maxtext": "a MaxText config"}


def tree_kind(tree) -> str | None:
    """The kind whose marks the parsed mapping `tree` carries, else None."""
    if not isinstance(tree, dict) or not tree:
        return None
    keys = {str(k) for k in tree}
    model = tree.get("model")
    if "MODEL_ARGS" in keys or any(k.startswith("--") for k in keys):
        return "megatron"
    if keys & HF_KEYS or {"model_type", "hidden_size"} <= keys:
        return "hf"
    if "trainer" in keys and isinstance(model, dict):
        return "nemo"
    if "job" in keys or (isinstance(model, dict) and {"name", "flavor"} <= set(map(str, model))):
        return "torchtitan"
    if keys <= set(BRIDGE_SECTIONS):
        return "megatron-bridge"
    if keys & MAXTEXT_KEYS:
        return "maxtext"
    return None


def text_kind(text: str, where: str) -> str | None:
    """The kind whose marks the text carries: a JSON, TOML or YAML mapping's
    (`tree_kind`), else Megatron's flags; None where it carries none (or does not
    parse at all)."""
    stripped = text.lstrip()
    parsers = ([files.parse_json] if stripped.startswith("{") else []) + (
        [files.parse_toml] if _TOML_TABLE.search(text) else []) + [files.parse_yaml]
    for parse in parsers:
        try:
            kind = tree_kind(parse(text, where))
        except ValueError:
            continue
        if kind is not None:
            return kind
    return "megatron" if _MEGATRON_FLAG.search(text) else None


def refusal(kind: str, other: str, where: str) -> ValueError:
    """`where` is a file of `other` kind given to `kind`'s importer: one line."""
    command = "" if other == "megatron-bridge" else f" (codesign import {other})"
    return ValueError(f"{where} looks like {NAMED[other]}{command}, not "
                      f"{NAMED[kind].split(' (')[0]}")


def check_tree(kind: str, tree, where: str, accept: tuple = ()) -> None:
    """Refuse the parsed `tree` given to `kind` if it carries another kind's marks
    (those in `accept` let through)."""
    other = tree_kind(tree)
    if other not in (None, kind, *accept):
        raise refusal(kind, other, where)


def check_text(kind: str, text: str, where: str, accept: tuple = ()) -> None:
    """As `check_tree`, of the file's text."""
    other = text_kind(text, where)
    if other not in (None, kind, *accept):
        raise refusal(kind, other, where)


def parsed(kind: str, text: str, where: str, parse, accept: tuple = ()):
    """`parse(text, where)` refusing a file of another kind (`check_tree`); a file
    that does not parse as `kind`'s format is named as the kind it looks like,
    where it looks like one, else by the parser's own error."""
    try:
        tree = parse(text, where)
    except ValueError:
        check_text(kind, text, where, accept)
        raise
    check_tree(kind, tree, where, accept)
    return tree
