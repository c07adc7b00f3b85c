"""Reading a MaxText config as MaxText's pyconfig does: base.yml (every default; a
file naming a `base_config` builds on it), the files given, the model file
`model_name=X` names (`models/X.yml`), then the `key=value` overrides, each key
remembering which of them set it (`Merged`), and which keys nobody read
(`ignored`). The mapping to a scenario is `maxtext`'s. Facts are MaxText's at
AI-Hypercomputer/maxtext commit e591f30cbbf217ed67ef71263ec0538239f9c3b8
(src/maxtext/configs/pyconfig.py, types.py)."""

from __future__ import annotations

import re
from pathlib import Path

from .. import files as files_module
from . import _common as c

WHAT = "MaxText config"
OVERRIDES = "the key=value overrides"
MAX_BASE_CONFIGS = 8  # `base_config` links followed from one file (a cycle ends here)
OVERRIDE = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)

DEFAULTS_WHERE = "MaxText's defaults (types.py)"
# MaxTextConfig's field defaults (types.py) of the keys codesign reads: what a config
# leaving one out means (base.yml restates each); every other axis's degree is 1
DEFAULTS = {
    "model_name": "default", "override_model_config": False, "global_parameter_scale": 1,
    "base_emb_dim": 2048, "base_num_query_heads": 16, "base_num_kv_heads": 16,
    "base_mlp_dim": 7168, "base_num_decoder_layers": 16, "head_dim": 128,
    "mlp_activations": ["silu", "linear"], "logits_via_embedding": False,
    "decoder_block": "llama2", "max_target_length": 2048, "vocab_size": 32000,
    "dropout_rate": 0.0, "enable_dropout": True, "mtp_num_layers": 0,
    "attention": "autoselected", "attention_type": "global", "attention_sink": False,
    "sliding_window_size": 0, "chunk_attn_window_size": 0, "nope_layer_interval": -1,
    "q_lora_rank": 0, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "num_experts": 1, "num_experts_per_tok": 1, "base_moe_mlp_dim": -1,
    "first_num_dense_layers": 0, "shared_experts": 0, "interleave_moe_layer_step": 1,
    "n_routing_groups": -1, "topk_routing_group": -1, "dtype": "bfloat16",
    "weight_dtype": "float32", "grad_dtype": "float32", "quantization": "",
    "remat_policy": "full", "hardware": "tpu", "compile_topology": "",
    "compile_topology_num_slices": -1, "num_slices": -1, "te_comm_gemm_overlap": "disabled",
    "mesh_axes": ["data", "stage", "fsdp", "fsdp_transpose", "sequence", "context",
                  "context_usp_ulysses", "context_autoregressive", "tensor", "tensor_sequence",
                  "expert", "autoregressive"],
    "dcn_data_parallelism": -1, "ici_fsdp_parallelism": -1, "shard_optimizer_over_data": False,
    "per_device_batch_size": 12, "gradient_accumulation_steps": 1,
    "num_layers_per_pipeline_stage": 1, "num_pipeline_repeats": -1,
    "num_pipeline_microbatches": -1, "pipeline_parallel_layers": -1,
    "pipeline_delay_activation_forwarding": False, "steps": 150_001,
    "learning_rate_schedule_steps": -1}


class Merged(c.Tree):
    """The merged config: a `c.Tree` whose messages name the file (or the
    overrides) that gave the key read."""

    def __init__(self, root: dict, origin: dict, where: str):
        super().__init__(root, where)
        self.origin, self.first = origin, where

    def where_of(self, key: str) -> str:
        return self.origin.get(key, self.first)

    def get(self, *paths, default=None):
        """The first of `paths` set (not null), else `default`, else MaxText's default."""
        found = next((p for p in paths if self.node(p) is not None), paths[0])
        self.where = self.where_of(found)
        return super().get(*paths, default=DEFAULTS.get(found) if default is None else default)

    def text(self, key: str) -> str:
        value = self.get(key)
        return "" if value is None else str(value)


def overrides(words: list[str]) -> dict:
    """{key: value} of the key=value words, the value read as YAML (OmegaConf's
    from_cli: `4` an int, `[silu,linear]` a list, nothing an empty string)."""
    out = {}
    for word in words:
        m = OVERRIDE.match(word)
        if m:
            key, raw = m.groups()
            out[key] = files_module.parse_yaml(raw, f"{OVERRIDES}: {key}") if raw.strip() else ""
    return out


def roots(files: list[str]) -> tuple[Path, ...]:
    """The folders a config's own paths (base_config, the model file model_name
    names) may lead into: the folder of each file named on the command line and,
    where that folder lies in a MaxText configs folder (its parent holds base.yml),
    that configs folder; each with its links resolved."""
    out: dict = {}
    for name in files:
        folder = Path(name).resolve().parent
        out[folder] = None
        if (folder.parent / "base.yml").is_file():
            out[folder.parent] = None
    return tuple(out)


def confined(path: Path, inside: tuple[Path, ...], given: tuple[str, ...]) -> bool:
    """Whether `path` (its links resolved) is a file named on the command line
    (`given`) or lies in one of the folders `inside`: a config cannot lead the
    importer to read (and name the keys of) a file elsewhere."""
    real = path.resolve()
    return any(real == Path(g).resolve() for g in given) or any(
        real.is_relative_to(root) for root in inside)


def chain(path: str, inside: tuple[Path, ...] = (), given: tuple[str, ...] = ()
          ) -> list[tuple[str, dict]]:
    """The config at `path` and the `base_config` files under it, root first
    (MaxText's _load_config: a relative base_config beside the file), each
    `confined` to the folders `inside` (or a file `given` on the command line)."""
    from . import _kinds  # here: _kinds reads this module's DEFAULTS on import
    chain: list[tuple[str, dict]] = []
    while True:
        tree = _kinds.parsed("maxtext", files_module.read_text(path, WHAT), path, c.yaml_mapping)
        chain.append((path, tree))
        parent = tree.get("base_config")
        if parent is None:
            return chain[::-1]
        if len(chain) >= MAX_BASE_CONFIGS:
            raise c.bad(path, "base_config", parent, f"makes a chain of more than "
                        f"{MAX_BASE_CONFIGS} configs (a cycle?)")
        target = Path(path).parent / str(parent)
        if inside and not confined(target, inside, given):
            raise c.bad(path, "base_config", parent, "leads out of the config's folder; "
                        "codesign reads a file elsewhere only when the command line names it")
        path = str(target)


def merged(files: list[str], overrides: dict) -> tuple[Merged, str]:
    """The merged config (base files, the files given, the model file
    model_name names, the overrides, in that order: MaxText's) and the root
    base file (whose keys are MaxText's defaults)."""
    layers, seen = [], set()
    inside = roots(files)
    for name in files:
        for path, tree in chain(name, inside, tuple(files)):
            if Path(path).resolve() not in seen:
                seen.add(Path(path).resolve())
                layers.append((path, tree))
    root = layers[0][0]
    merged, origin = dict(DEFAULTS), dict.fromkeys(DEFAULTS, DEFAULTS_WHERE)
    for path, tree in layers:
        merged.update(tree)
        origin.update(dict.fromkeys(tree, path))
    name = str(overrides.get("model_name", merged.get("model_name", "default")))
    name = name.replace("-Instruct", "")  # an instruction-tuned model's architecture is the base's
    if name != "default":
        where = OVERRIDES if "model_name" in overrides else origin.get("model_name", root)
        path, tree = model_file(name, files[0], root, inside, where)
        conflicts(merged, overrides, path, tree)
        merged.update(tree)
        origin.update(dict.fromkeys(tree, path))
    unknown = [k for k in overrides if k not in merged and k != "model_name"]
    if unknown:
        raise ValueError(f"{OVERRIDES}: {unknown[0]}={c.shown(overrides[unknown[0]])} is not a "
                         f"key of {root} (MaxText refuses a key its config does not declare)")
    merged.update(overrides)
    origin.update(dict.fromkeys(overrides, OVERRIDES))
    t = Merged(merged, origin, root)
    t.read.update(("base_config", "model_name", "override_model_config"))
    return t, root


def model_file(name: str, config: str, root: str, inside: tuple[Path, ...] = (),
               where: str = OVERRIDES) -> tuple[str, dict]:
    """models/NAME.yml beside the config, beside its folder, or beside the root
    base file (pyconfig.py's search, the package's own folder being the last),
    those `confined` to the folders `inside`; NAME is a name, not a path (`where`
    set it)."""
    from . import _kinds  # here: _kinds reads this module's DEFAULTS on import
    if not name or re.search(r"[/\\]", name) or name in (".", ".."):
        raise c.bad(where, "model_name", name, "is not a model name (models/NAME.yml beside "
                    "the config); give a model file elsewhere by its path on the command line")
    folders = dict.fromkeys(str(Path(p) / "models") for p in (
        Path(config).parent, Path(config).parent.parent, Path(root).parent))
    for folder in folders:
        path = Path(folder) / f"{name}.yml"
        if path.is_file() and (not inside or confined(path, inside, ())):
            text = files_module.read_text(path, WHAT)
            return str(path), _kinds.parsed("maxtext", text, str(path), c.yaml_mapping)
    raise ValueError(f"model_name={name!r}: no {name}.yml in {' or '.join(folders)}")


def conflicts(merged: dict, overrides: dict, path: str, model: dict) -> None:
    """MaxText refuses a key the model file and the overrides both set to
    different values, unless override_model_config=true (then the override wins)."""
    if c.flag(OVERRIDES, "override_model_config",
              overrides.get("override_model_config", merged.get("override_model_config", False))):
        return
    for key, value in overrides.items():
        if key in model and model[key] != value:
            raise ValueError(f"{OVERRIDES}: {key}={c.shown(value)} is also set by {path} "
                             f"({c.shown(model[key])}); MaxText refuses a key both set "
                             "unless override_model_config=true")


def ignored(t: Merged, d: c.Draft, root: str) -> None:
    """The keys set by a file other than the root base, or by an override, that
    codesign does not read; the root's own unread keys (base.yml's: MaxText's
    defaults of everything else) as one count."""
    mine = [k for k, where in t.origin.items()
            if where not in (root, DEFAULTS_WHERE) and k not in t.read]
    d.ignored += mine
    others = sum(1 for k, where in t.origin.items() if where == root and k not in t.read)
    if others:
        d.ignored.append(f"{others} other keys of {Path(root).name}")
