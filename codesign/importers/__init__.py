"""Scenario tables from the configurations users already have.

`codesign import KIND SOURCE` reads a Megatron-LM argument list (inline, a shell
script or a Megatron-MoE-ModelZoo YAML: `megatron`), a NeMo YAML recipe (`nemo`,
translated to Megatron's flags and read as they are), a torchtitan job (`torchtitan`:
an old job TOML, or an entry of its config registry with command-line overrides), a
Megatron-Bridge recipe with YAML and `key=value` overrides (`megatron-bridge`), a
MaxText config (`maxtext`: base.yml, a model file, overrides) or a Hugging Face
config.json (`hf`), and writes a scenario TOML:
the model, the plan, the precision recipe and the recomputation. Where the
source is silent the importer takes the framework's own default or an
assumption and says so: each is one `# assumed: ...` comment line naming the
key, the value and why; what the source gives that codesign does not read is
listed on `# ignored` lines (Megatron flags, NeMo model keys, the keys of
torchtitan's plan tables, every top-level key of a config.json not read). Each
importer is a pure function of the source's text to an `Imported` (tables,
assumptions, ignored names); `Imported.toml` renders it.

A value the importer cannot read (a number that is not one, a shell variable or
interpolation it cannot resolve, an unknown torchtitan flavor) is a one-line
ValueError naming the source, the flag or key and the value; so is a file of
another kind (`_kinds`: `codesign import maxtext config.json` names the Hugging
Face config it is), a MaxText `base_config` or `model_name` leading out of the
config's folder, and a Megatron-Bridge key nested past 32 levels. A Megatron
script's shell variables may be given (`from_file(..., variables=)`, the
command's `--var NAME=VALUE`); one left unset stays as written and is said. So is a hostile
file: nesting past 32 levels, YAML aliases repeating more than 100,000 values, an
integer of more than 1,000 digits (`files.parse_json`, `parse_toml`,
`parse_yaml`), shell expansions adding more than 1 MiB, a layer pattern past
100,000 layers, interpolations past 1,000 or 1 MiB. Whether the plan is possible
is the scenario loader's to say (`scenario.from_tables`), as for any scenario file.
"""

from __future__ import annotations

from pathlib import Path

from .. import files
from . import _kinds
from . import hf as _hf
from . import maxtext as _maxtext
from . import megatron as _megatron
from . import megatron_bridge as _megatron_bridge
from . import nemo as _nemo
from . import torchtitan as _torchtitan
from ._common import DEFAULT_SYSTEM, Imported, padded_vocab, tokenizer_vocab
from ._shell import modelzoo_arguments, shell_arguments
from .hf import hf
from .maxtext import maxtext_words
from .megatron import SHAPE_FLAGS, megatron, moe_layer_count
from .megatron_bridge import megatron_bridge_words
from .nemo import nemo
from .torchtitan import torchtitan, torchtitan_words

FILE_KINDS = ("megatron", "nemo", "torchtitan", "hf")  # a file is a scenario (`from_file`)
# kinds whose importer reads the command line's words itself: files, a registry entry
# or recipe name, overrides (`codesign import KIND WORDS...`)
WORDS = {"torchtitan": torchtitan_words, "megatron-bridge": megatron_bridge_words,
         "maxtext": maxtext_words}
KINDS = (*FILE_KINDS, *(k for k in WORDS if k not in FILE_KINDS))
IMPORTERS = {"megatron": megatron, "nemo": nemo, "torchtitan": torchtitan, "hf": hf}
# each kind's importer module (its docstring is `codesign import KIND --help`'s)
MODULES = {"megatron": _megatron, "nemo": _nemo, "torchtitan": _torchtitan, "hf": _hf,
           "megatron-bridge": _megatron_bridge, "maxtext": _maxtext}
WHAT = {"megatron": "Megatron arguments file", "nemo": "NeMo recipe",
        "torchtitan": "torchtitan job file", "hf": "Hugging Face config",
        "megatron-bridge": "Megatron-Bridge recipe", "maxtext": "MaxText config"}

__all__ = ["DEFAULT_SYSTEM", "FILE_KINDS", "IMPORTERS", "KINDS", "MODULES", "WHAT", "WORDS",
           "Imported", "from_file", "hf", "maxtext_words", "megatron", "megatron_bridge_words",
           "modelzoo_arguments", "moe_layer_count", "nemo", "padded_vocab", "shell_arguments",
           "tokenizer_vocab", "torchtitan", "torchtitan_words"]


def from_file(kind: str, path: str | Path, *, gpus: int | None = None,
              system: dict | None = None, variables: dict | None = None) -> Imported:
    """Import the file `path` as `kind` (see `KINDS`): a Megatron script or text of
    arguments (a `.yaml` is a Megatron-MoE-ModelZoo config), a NeMo YAML recipe,
    a torchtitan job TOML or a Hugging Face config.json; `gpus` and `system` (the
    [system] keys of --system) are what the command line gives, `variables` a
    Megatron script's shell variables (--var NAME=VALUE)."""
    text = files.read_text(path, WHAT[kind])
    where = str(path)
    if kind == "megatron":
        words = (modelzoo_arguments(text, where) if Path(where).suffix in (".yaml", ".yml")
                 else shell_arguments(text, where, variables))
        if not any(w.startswith(SHAPE_FLAGS) for w in words):  # another kind's file?
            _kinds.check_text(kind, text, where)
        return megatron(words, where, gpus=gpus, system=system)
    return IMPORTERS[kind](text, where, gpus=gpus, system=system)
