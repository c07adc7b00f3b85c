"""Megatron-Bridge recipes (NVIDIA-NeMo/Megatron-Bridge): `codesign import
megatron-bridge RECIPE [OVERRIDES.yaml ...] [key=value ...]`.

A recipe is a Python function returning a ConfigContainer; codesign cannot run
it, so each supported recipe's values are restated (`_bridge_recipes.RECIPES`, in
the ConfigContainer's own nested keys, from the source at its `COMMIT`). The YAML override
files and Hydra-style `key=value` words then apply over it in the order given,
later winning, with the same dotted keys (`model.tensor_model_parallel_size`,
`train.global_batch_size`), as Bridge's `process_config_with_overrides` merges
them. Bridge's model keys are Megatron-Core's arguments by their Python names, so
the result is read as the Megatron arguments it stands for (`megatron.read`),
every message naming the ConfigContainer key; a key of a ConfigContainer section
that codesign does not read is listed on `# ignored`."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from .. import files
from . import _common as c
from . import _kinds
from ._bridge_recipes import ALIASES, RECIPES
from .megatron import SOFTWARE_FLAGS, SWITCHES, Flags, noted, read
from .nemo import LISTS, RENAMED, FlagNames

DEFAULT = "Megatron-Bridge's default"
SECTIONS = _kinds.BRIDGE_SECTIONS  # ConfigContainer's fields
REQUIRED = ("model", "train", "dataset")  # sections that must stay mappings
# mixed-precision recipes by name (src/megatron/bridge/training/mixed_precision.py; each
# is registered with hyphens too): (16-bit width, fp8 format, grad_reduce_in_fp32)
PRECISIONS = {
    "bf16_mixed": ("bf16", None, True), "fp16_mixed": ("fp16", None, False),
    **{f"{w}_with_{kind}_mixed": (w, fmt, w == "bf16") for w in ("bf16", "fp16")
       for kind, fmt in (("fp8_delayed_scaling", "hybrid"), ("mxfp8", "e4m3"),
                         ("fp8_current_scaling", "hybrid"), ("fp8_subchannel_scaling", "hybrid"))},
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": ("bf16", "hybrid", True),
    "nanov2_bf16_with_fp8_current_scaling_mixed": ("bf16", "hybrid", True),
}
FP4 = ("bf16_with_nvfp4_mixed", "nemotron_3_super_bf16_with_nvfp4_mixed")  # no fp4 recipe
# MixedPrecisionConfig fields read (its defaults: no 16-bit width, no fp8, reduce in fp32;
# fp8_recipe too)
PRECISION_FIELDS = ("fp32", "fp16", "bf16", "fp8", "fp4", "grad_reduce_in_fp32")
# model keys the mixed-precision config overwrites (MixedPrecisionConfig.setup)
PRECISION_OWNED = frozenset(PRECISION_FIELDS + ("params_dtype", "pipeline_dtype"))
# model keys read otherwise than as the Megatron flag of their name
MODEL_OWN = frozenset({"num_query_groups", "gated_linear_unit", "vocab_size", "seq_length",
                       "share_embeddings_and_output_weights", "softmax_type"})
# scripts/training/run_recipe.py's convenience flags (COMMON_OVERRIDE_FIELDS)
RUN_RECIPE_FLAGS = {
    "max_steps": ("ms", "train.train_iters"),
    "global_batch_size": ("gb", "train.global_batch_size"),
    "micro_batch_size": ("mb", "train.micro_batch_size"),
    "seq_length": ("sl", "dataset.seq_length"),
    "tensor_model_parallel_size": ("tp", "model.tensor_model_parallel_size"),
    "pipeline_model_parallel_size": ("pp", "model.pipeline_model_parallel_size"),
    "context_parallel_size": ("cp", "model.context_parallel_size"),
    "virtual_pipeline_model_parallel_size": ("vp", "model.virtual_pipeline_model_parallel_size"),
    "expert_model_parallel_size": ("ep", "model.expert_model_parallel_size"),
    "expert_tensor_parallel_size": ("etp", "model.expert_tensor_parallel_size"),
    "lr": (None, "optimizer.lr"), "min_lr": (None, "optimizer.min_lr"),
    "warmup_iters": (None, "scheduler.lr_warmup_iters"),
    "pretrained_checkpoint": (None, "checkpoint.pretrained_checkpoint"),
    "save_dir": (None, "checkpoint.save"), "load_dir": (None, "checkpoint.load"),
    "save_interval": (None, "checkpoint.save_interval"),
}
FLAG_KEYS = {**{f"--{long}": key for long, (_, key) in RUN_RECIPE_FLAGS.items()},
             **{f"-{short}": key for short, key in RUN_RECIPE_FLAGS.values() if short}}
LAUNCH_FLAGS = ("--dataset", "--step-func", "--step_func")  # run_recipe.py's, not the model's


# ----------------------------------------------------------------- the words
def megatron_bridge_words(words: list[str], *, gpus: int | None = None,
                          system: dict | None = None) -> c.Imported:
    """The scenario of a Megatron-Bridge run: the words after `codesign import
    megatron-bridge` (the command's own flags taken out): a recipe function name
    (or `--recipe NAME`), YAML override files (or `--config-file FILE`), Hydra-style
    `key=value` words and run_recipe.py's convenience flags (`-tp 2`), applied over
    the recipe in the order given."""
    recipe, sources, launch = _parse(words)
    name = ALIASES.get(recipe, recipe)
    if name not in RECIPES and Path(recipe).is_file():  # a file where the recipe goes
        text = files.read_text(recipe, "Megatron-Bridge override file")
        other = _kinds.text_kind(text, recipe)
        raise ValueError(f"megatron-bridge: {c.shown(recipe)} is a file, not a recipe function"
                         + (f"; it looks like {_kinds.NAMED[other]}" if other else "")
                         + " (codesign import megatron-bridge RECIPE [OVERRIDES.yaml ...])")
    if name not in RECIPES:
        raise ValueError(f"megatron-bridge: recipe {c.shown(recipe)} is not one codesign "
                         f"restates (known: {', '.join([*RECIPES, *ALIASES])})")
    where = " + ".join([recipe, *dict.fromkeys(w for w, _ in sources)])
    tree = _copy(RECIPES[name])
    for source, items in sources:
        for key, value in items:
            _set(tree, key, value, source)
    count = int(re.search(r"_(\d+)gpu", name).group(1))
    imported = _read(tree, where, name, count, gpus, system)
    return dataclasses.replace(imported, ignored=imported.ignored + tuple(launch))


def _parse(words: list[str]) -> tuple[str, list, list]:
    """The recipe named, the override sources in order ((where, [(dotted key,
    value)]) per YAML file, run_recipe.py flag or `key=value` word) and the
    run_recipe.py flags that do not shape the run (listed as ignored)."""
    recipe, sources, ignored = None, [], []
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, value = word.partition("=")
        takes = flag in ("--recipe", "--config-file", "--config_file", "--mode",
                         *FLAG_KEYS, *LAUNCH_FLAGS)
        if word.startswith("-") and not takes:
            raise ValueError(f"megatron-bridge: {c.shown(word)} is not a flag codesign reads "
                             "(--recipe, --config-file, --mode pretrain and run_recipe.py's "
                             f"{', '.join(FLAG_KEYS)}; a ConfigContainer key is key=value)")
        if takes and not eq:
            if i + 1 >= len(words):
                raise ValueError(f"megatron-bridge: {flag} needs a value")
            value, i = words[i + 1], i + 1
        i += 1
        if flag == "--recipe" or (not takes and recipe is None and "=" not in word
                                  and not word.startswith(("~", "+"))):
            if recipe is not None:
                raise ValueError(f"megatron-bridge: two recipes: {recipe} and {value or word}")
            recipe = value if takes else word
        elif flag == "--mode":
            if value != "pretrain":
                raise ValueError(f"megatron-bridge: --mode {c.shown(value)}: codesign "
                                 "restates pretrain recipes only")
        elif flag in LAUNCH_FLAGS:
            ignored.append(flag)
        elif flag in FLAG_KEYS:
            sources.append(("the command line", [(FLAG_KEYS[flag], _value(value, flag))]))
        elif takes or not ("=" in word or word.startswith(("~", "+"))):
            sources.append((value if takes else word, _yaml_file(value if takes else word)))
        else:
            sources.append(("the command line", _word(word)))
    if recipe is None:
        raise ValueError("megatron-bridge: no recipe named (a recipe function, such as "
                         "llama3_8b_pretrain_config)")
    return recipe, sources, ignored


def _yaml_file(path: str) -> list:
    """The (dotted key, value) pairs of a YAML override file."""
    try:
        text = files.read_text(path, "Megatron-Bridge override file")
    except FileNotFoundError as e:  # a word that names no file: one line, as any value
        raise ValueError(f"megatron-bridge: {e}") from None
    tree = _kinds.parsed("megatron-bridge", text, path, files.parse_yaml)
    if tree is None:
        raise ValueError(f"{path} is empty: a Megatron-Bridge override file holds "
                         "ConfigContainer keys (model:, train:, ...)")
    if not isinstance(tree, dict):
        raise ValueError(f"{path} must hold a YAML mapping of ConfigContainer keys, not "
                         f"{type(tree).__name__}")
    return _pairs(tree, "")


def _pairs(tree: dict, prefix: str) -> list:
    """A mapping's leaves as (dotted key, value); a mapping merges key by key."""
    out = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _pairs(value, dotted + ".")
        else:
            out.append((dotted, value))
    return out


def _word(word: str) -> list:
    """A Hydra override word: `key=value`, `+key=value` or `++key=value` (add or
    force: the same here); `~key` deletes, which codesign does not do."""
    key, _, text = word.partition("=")
    if key.startswith("~"):
        raise ValueError(f"megatron-bridge: {c.shown(word)} deletes a key; codesign "
                         "imports over the recipe's keys (give key=value)")
    key = key.lstrip("+")
    value = _value(text, key)
    return _pairs(value, key + ".") if isinstance(value, dict) and value else [(key, value)]


def _value(text: str, key: str):
    """A command-line value as Hydra reads one (YAML's scalars, lists and mappings)."""
    return files.parse_yaml(text, f"megatron-bridge: {key}={c.shown(text)}")


def _copy(tree):
    return {k: _copy(v) for k, v in tree.items()} if isinstance(tree, dict) else tree


def _set(tree: dict, key: str, value, where: str) -> None:
    """`key` (dotted) = `value` in the ConfigContainer `tree`; a section that is not
    the ConfigContainer's, or a required section set to a non-mapping, is an error.
    A mixed-precision recipe name under a key of its own is the recipe's fields."""
    parts = key.split(".", files.MAX_DEPTH)  # past the cap: refused below, not split on
    if len(parts) > files.MAX_DEPTH:
        raise ValueError(f"{where}: {c.shown(key)} nests past {files.MAX_DEPTH} levels; "
                         "a ConfigContainer key has a few")
    if parts[0] not in SECTIONS or "" in parts:
        raise ValueError(f"{where}: {key}={c.shown(value)}: {parts[0]!r} is not a "
                         f"ConfigContainer field ({', '.join(SECTIONS)})")
    if len(parts) == 1 and parts[0] in REQUIRED:
        raise ValueError(f"{where}: {key}={c.shown(value)} must be a mapping of its keys")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if part == "mixed_precision" and node is tree and isinstance(child, str):
            child = _precision_fields(child, where)
        if not isinstance(child, dict):
            child = {}
        node[part] = child
        node = child
    node[parts[-1]] = value


def _precision_fields(name: str, where: str) -> dict:
    """The MixedPrecisionConfig fields codesign reads of a recipe by name."""
    known = PRECISIONS.get(str(name).replace("-", "_"))
    if known is None:
        if str(name).replace("-", "_") in FP4:
            raise ValueError(f"{where}: mixed_precision={c.shown(name)} trains in NVFP4, "
                             "which codesign does not model (its recipes: fp32, fp16, bf16, fp8)")
        raise ValueError(f"{where}: mixed_precision={c.shown(name)} is not a mixed-precision "
                         f"recipe Megatron-Bridge defines ({', '.join(PRECISIONS)})")
    width, fp8, reduce32 = known
    return {width: True, "fp8": fp8, "grad_reduce_in_fp32": reduce32,
            "fp8_recipe": "mxfp8" if "mxfp8" in name else None}


# ----------------------------------------------------------------- reading
class _Arguments:
    """Megatron arguments built from ConfigContainer keys: `names` spells each flag
    as its key (in messages and `# ignored`; a flag not given is `model.` and its
    name, as NeMo's); a key is read when `megatron.read` asks for its flag, or is
    `consumed` here."""

    def __init__(self):
        self.words: list[str] = []
        # Bridge's attention kernel is model.attention_backend (None: Transformer Engine's)
        self.names: dict = FlagNames({"--use-flash-attn": "model.attention_backend"})
        self.consumed: set = set()

    def give(self, flag: str, key: str, value) -> None:
        """The flag `flag` from `key` (a switch when True and the flag is one;
        None and False give nothing)."""
        self.names[flag] = key
        if value is not None and value is not False:
            self.words.extend([flag] if value is True and flag in SWITCHES
                              else [flag, str(value)])

    def mark(self, *keys: str) -> None:
        """Keys read without a flag of their own."""
        self.consumed.update(keys)


def _section(tree: dict, name: str) -> dict:
    body = tree.get(name)
    return body if isinstance(body, dict) else {}


def _read(tree: dict, where: str, name: str, count: int, gpus: int | None,
          system: dict | None) -> c.Imported:
    """The scenario of the ConfigContainer `tree`, read as Megatron arguments;
    `count` is the recipe's GPU count (its name's)."""
    a, model = _Arguments(), _section(tree, "model")
    for k, value in model.items():
        if k in MODEL_OWN or k in PRECISION_OWNED or isinstance(value, dict):
            continue
        if isinstance(value, list):  # a list where a number goes is its text: refused
            value = LISTS[k](value) if k in LISTS else str(value)
        a.give(RENAMED.get(k, "--" + k.replace("_", "-")), f"model.{k}", value)
    if model.get("num_query_groups") is not None:
        a.give("--group-query-attention", "model.num_query_groups", True)
        a.give("--num-query-groups", "model.num_query_groups", model["num_query_groups"])
    a.give("--swiglu", "model.gated_linear_unit", bool(model.get("gated_linear_unit")))
    a.give("--untie-embeddings-and-output-weights", "model.share_embeddings_and_output_weights",
           model.get("share_embeddings_and_output_weights", True) is False)
    train = _section(tree, "train")
    for flag, key in (("--micro-batch-size", "micro_batch_size"),
                      ("--global-batch-size", "global_batch_size"),
                      ("--train-iters", "train_iters"), ("--train-samples", "train_samples")):
        a.give(flag, f"train.{key}", train.get(key))
    seq_note = _seq(tree, model, a)
    mxfp8 = _precision(tree, where, a)
    _sharding(tree, a)
    vocab_note = _vocab(tree, model, where, a)
    a.mark("model.softmax_type")
    flags = Flags(a.words, where, a.names)
    fits = gpus is None and _holds(model, count)
    imported = read(flags, "megatron-bridge", gpus=count if fits else gpus, system=system,
                    default=DEFAULT)
    extra = [("training", "stack", "megatron")]  # Megatron-Core with Transformer Engine
    if str(model.get("softmax_type")) == "learnable":  # a learnt sink logit per head
        extra.append(("model", "attention_sinks", True))
    done = imported.with_overrides(extra)
    assumed = dict(done.assumed)
    if fits:
        assumed["system.gpus"] = f"system.gpus = {count}: the recipe's ({name}; --gpus N)"
    elif gpus is None:
        assumed["system.gpus"] = (
            f"system.gpus = {done.tables['system']['gpus']}: the recipe's {count} GPUs "
            f"({name}) do not hold its tp x pp x cp as overridden: the fewest that do, "
            "tp x pp x cp x ep (--gpus N)")
    if vocab_note:
        assumed["model.vocab"] = f"model.vocab = {done.tables['model']['vocab']}: {vocab_note}"
    if seq_note:
        assumed["model.seq_len"] = seq_note
    if mxfp8:
        assumed["training.dtype"] = ('training.dtype = "fp8": MXFP8 (e4m3 blocks of 32 with '
                                     "a shared scale) as codesign's fp8 recipe")
    read_keys = {a.names[f] for f in flags.read if f in a.names and f not in flags.notes} \
        | a.consumed
    notes = {a.names[f]: why for f, why in flags.notes.items() if f in a.names}
    ignored = tuple(f"{k}={noted(v, notes[k])}" if k in notes else k
                    for k, v in _pairs(tree, "") if k not in read_keys)
    return c.Imported("megatron-bridge", where, done.tables, assumed, ignored)


def _holds(model: dict, count: int) -> bool:
    """Whether the recipe's `count` GPUs hold its tp x pp x cp (overrides may
    change the plan past them)."""
    sizes = [model.get(k) or 1 for k in ("tensor_model_parallel_size",
                                         "pipeline_model_parallel_size", "context_parallel_size")]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        return False  # read names the value it cannot read
    return count % (sizes[0] * sizes[1] * sizes[2]) == 0


def _seq(tree: dict, model: dict, a: _Arguments) -> str | None:
    """The training sequence: dataset.seq_length (run_recipe.py sets the model's
    from it, sync_model_dataset_sequence_length); a note when model.seq_length
    differs."""
    given, own = _section(tree, "dataset").get("seq_length"), model.get("seq_length")
    a.give("--seq-length", "dataset.seq_length" if given is not None else "model.seq_length",
           given if given is not None else own)
    a.mark("model.seq_length", "dataset.seq_length")
    if given is not None and own is not None and str(own) != str(given):
        return (f"model.seq_len = {given}: dataset.seq_length (run_recipe.py sets "
                f"model.seq_length {own} to it)")
    return None


def _precision(tree: dict, where: str, a: _Arguments) -> bool:
    """The recipe (`mixed_precision`: a recipe's name or MixedPrecisionConfig
    fields, which overwrite the model's and the DDP config's own; without one, the
    model's and the DDP config's) as --bf16 / --fp16 / --fp8-format and the
    gradient reduction's width; whether it is MXFP8 (fp8_recipe mxfp8)."""
    given = tree.get("mixed_precision")
    a.mark("ddp.grad_reduce_in_fp32")
    if isinstance(given, str):
        fields = _precision_fields(given, where)
        name = lambda f: "mixed_precision"  # noqa: E731
    elif isinstance(given, dict):
        fields, name = given, lambda f: f"mixed_precision.{f}"  # noqa: E731
    else:
        fields = {**_section(tree, "model"),
                  "grad_reduce_in_fp32": _section(tree, "ddp").get("grad_reduce_in_fp32", True)}
        name = lambda f: "ddp.grad_reduce_in_fp32" if f == "grad_reduce_in_fp32" \
            else f"model.{f}"  # noqa: E731
    fp4 = fields.get("fp4")
    if fp4 not in (None, False):
        raise ValueError(f"{where}: {name('fp4')}={c.shown(fp4)}: codesign does not model "
                         "NVFP4 (its recipes: fp32, fp16, bf16, fp8)")
    a.mark(*(name(f) for f in PRECISION_FIELDS))
    bf16 = c.flag(where, name("bf16"), fields.get("bf16", False))
    fp16 = c.flag(where, name("fp16"), fields.get("fp16", False))
    a.give("--bf16", name("bf16"), bf16)
    a.give("--fp16", name("fp16"), fp16 and not bf16)
    fp8 = fields.get("fp8")
    a.give("--fp8-format", name("fp8"), None if fp8 in (None, False) else fp8)
    reduce32 = c.flag(where, name("grad_reduce_in_fp32"), fields.get("grad_reduce_in_fp32", True))
    a.give("--accumulate-allreduce-grads-in-fp32", name("grad_reduce_in_fp32"),
           reduce32 and (bf16 or fp16))
    a.give("--grad-reduce-in-bf16", name("grad_reduce_in_fp32"), bf16 and not reduce32)
    mxfp8 = fp8 not in (None, False) and fields.get("fp8_recipe") == "mxfp8"
    if mxfp8:  # read as the fp8 recipe's kind; any other fp8_recipe is listed as ignored
        a.mark(name("fp8_recipe"))
    elif isinstance(given, dict) and fields.get("fp8_recipe") is not None:
        a.give(SOFTWARE_FLAGS["fp8_recipe"].flag, name("fp8_recipe"), fields["fp8_recipe"])
    return mxfp8


def _sharding(tree: dict, a: _Arguments) -> None:
    """The data-parallel sharding (the distributed optimizer; Megatron FSDP, from
    ddp or dist, with its strategy; torch FSDP2), the DDP bucket and the TP overlap."""
    ddp, dist = _section(tree, "ddp"), _section(tree, "dist")
    a.give("--use-distributed-optimizer", "ddp.use_distributed_optimizer",
           bool(ddp.get("use_distributed_optimizer")))
    fsdp = bool(ddp.get("use_megatron_fsdp")) or bool(dist.get("use_megatron_fsdp"))
    a.mark("ddp.use_megatron_fsdp", "dist.use_megatron_fsdp",
           "ddp.data_parallel_sharding_strategy")
    a.give("--data-parallel-sharding-strategy", "ddp.data_parallel_sharding_strategy",
           ddp.get("data_parallel_sharding_strategy", "no_shard") if fsdp else None)
    a.give("--use-torch-fsdp2", "dist.use_torch_fsdp2", bool(dist.get("use_torch_fsdp2")))
    a.give("--ddp-bucket-size", "ddp.bucket_size", ddp.get("bucket_size"))
    a.give("--tp-comm-overlap", "comm_overlap.tp_comm_overlap",
           bool(_section(tree, "comm_overlap").get("tp_comm_overlap")))
    for name in ("moe_a2a_overlap", "delay_wgrad_compute"):  # comm_overlap's keys
        sw = SOFTWARE_FLAGS[name]  # (moe_a2a_overlap: the model's key of that name too)
        if sw.key.split(".", 1)[1] in _section(tree, "comm_overlap"):
            a.give(sw.flag, sw.key, bool(_section(tree, "comm_overlap").get(
                sw.key.split(".", 1)[1])))


def _vocab(tree: dict, model: dict, where: str, a: _Arguments) -> str | None:
    """The vocabulary as Bridge's setup sizes it (_validate_and_set_vocab_size in
    src/megatron/bridge/training/setup.py): the tokenizer's, padded
    (use_tokenizer_vocab_size), else model.vocab_size as given. A NullTokenizer has
    tokenizer.vocab_size + 1 tokens (its end of document); a Hugging Face tokenizer
    codesign cannot count is taken as the checkpoint's vocab_size, said (the note
    returned)."""
    tok = _section(tree, "tokenizer")
    a.give("--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by",
           model.get("make_vocab_size_divisible_by", c.VOCAB_MULTIPLE))
    a.mark("tokenizer.tokenizer_type", "tokenizer.use_tokenizer_vocab_size", "model.vocab_size")
    kind, own = str(tok.get("tokenizer_type")), model.get("vocab_size")
    if not tok.get("use_tokenizer_vocab_size") and own is not None:
        a.give("--padded-vocab-size", "model.vocab_size", own)  # as given: not padded
        return None
    if kind == "NullTokenizer":
        size = c.whole(where, "tokenizer.vocab_size", tok.get("vocab_size"))
        a.mark("tokenizer.vocab_size")
        a.give("--vocab-size", f"the NullTokenizer's tokenizer.vocab_size {size} + its "
               "end-of-document token =", size + 1)
        return None
    model_id = tok.get("tokenizer_model")
    a.give("--tokenizer-model", "tokenizer.tokenizer_model", model_id)
    if c.tokenizer_vocab(model_id) is not None or own is None:
        return None
    a.give("--vocab-size", "model.vocab_size", own)
    return (f"tokenizer {model_id or kind}: Bridge takes the tokenizer's own length "
            "(use_tokenizer_vocab_size), which codesign cannot count: the checkpoint's "
            f"model.vocab_size {own}, padded to a multiple of "
            f"{model.get('make_vocab_size_divisible_by', c.VOCAB_MULTIPLE)} x tp")
