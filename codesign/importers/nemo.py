"""NeMo YAML recipes (NeMo-Megatron-Launcher's and Megatron-Bridge's layouts): a
recipe's `model:` settings are Megatron-Core's arguments by their Python names,
so the recipe is translated to Megatron flags and read as they are
(`megatron.read`), every message naming the recipe's own key."""

from __future__ import annotations

from . import _common as c
from . import _kinds
from .megatron import SWITCHES, Flags, read

# model.* keys whose Megatron flag is not their own name with dashes
RENAMED = {"encoder_seq_length": "--seq-length", "num_moe_experts": "--num-experts",
           "activations_checkpoint_granularity": "--recompute-granularity",
           "activations_checkpoint_method": "--recompute-method",
           "activations_checkpoint_num_layers": "--recompute-num-layers",
           "use_flash_attention": "--use-flash-attn", "ub_tp_comm_overlap": "--tp-comm-overlap"}
# model.* keys read below, as NeMo spells them otherwise than Megatron
SPELLED = ("fp8", "share_embeddings_and_output_weights", "activation", "gated_linear_unit")
# model.* keys whose value may be a list, given to Megatron as its flag's text
LISTS = {"window_size": lambda v: ",".join(str(x) for x in v),  # (left, right)
         "window_attn_skip_freq": str,  # a 0/1 per layer
         # argparse's nargs: the words, comma-joined (as megatron.Flags joins them)
         "cuda_graph_scope": lambda v: ",".join(str(x) for x in v),
         "recompute_modules": lambda v: ",".join(str(x) for x in v)}
GATED_ACTIVATIONS = ("swiglu", "fast-swiglu", "geglu", "fast-geglu", "reglu", "fast-reglu")
DISTRIBUTED_OPTIMIZERS = ("distributed_fused_adam", "mcore_distributed_optim")


class FlagNames(dict):
    """A Megatron flag as the recipe spells it: `--num-layers` is model.num_layers."""

    def __missing__(self, flag: str) -> str:
        return "model." + flag.removeprefix("--").replace("-", "_")


def nemo(text: str, where: str, *, gpus: int | None = None,
         system: dict | None = None) -> c.Imported:
    """The scenario of a NeMo YAML recipe: trainer.* and model.*."""
    tree = _kinds.parsed("nemo", text, where, c.yaml_mapping, accept=("megatron-bridge",))
    if _kinds.tree_kind(tree) == "megatron-bridge" and not (
            isinstance(tree.get("model"), dict) and "num_layers" in tree["model"]):
        raise _kinds.refusal("nemo", "megatron-bridge", where)  # overrides, not a recipe
    t = c.Tree(tree, where)
    model = t.node("model")
    if not isinstance(model, dict):
        raise ValueError(f"{where} has no model: mapping (a NeMo recipe's model settings)")
    words: list[str] = []
    names = FlagNames({flag: f"model.{key}" for key, flag in RENAMED.items()})

    def give(name: str, key: str, value) -> None:
        """The Megatron flag `name` from the recipe's `key` (a switch when True and
        the flag is one: else True is the flag's value, which its reader refuses)."""
        names[name] = key
        if value is not None and value is not False:
            words.extend([name] if value is True and name in SWITCHES else [name, str(value)])

    for k in model:
        value = t.get(f"model.{k}")
        if k in LISTS and isinstance(value, list):
            value = LISTS[k](value)
        # a list where the flag takes a number is its text, which the reader refuses
        # naming the key (left out, the flag would read as missing); an empty one is unset
        if k not in SPELLED and not isinstance(value, dict) and value != []:
            give(RENAMED.get(k, "--" + str(k).replace("_", "-")), f"model.{k}", value)
    # what NeMo spells otherwise than Megatron
    if t.get("model.num_query_groups") is not None:
        give("--group-query-attention", "model.num_query_groups", True)
    give("--untie-embeddings-and-output-weights", "model.share_embeddings_and_output_weights",
         t.flag("model.share_embeddings_and_output_weights") is False)
    activation = str(t.get("model.activation", default="")).lower()
    give("--swiglu", "model.activation", activation in GATED_ACTIVATIONS
         or bool(t.flag("model.gated_linear_unit")))
    fp8 = t.get("model.fp8")
    give("--fp8-format", "model.fp8", "hybrid" if fp8 not in (None, False) and str(
        fp8).lower() not in ("false", "none") else None)
    precision = str(t.get("trainer.precision", "mixed_precision", default="32")).lower()
    give("--bf16", "trainer.precision", precision.startswith("bf16") or None)
    give("--fp16", "trainer.precision", precision.startswith(("16", "fp16")) or None)
    optimizer = t.get("model.optim.name", "optimizer.optimizer")
    give("--use-distributed-optimizer", "model.optim.name",
         str(optimizer) in DISTRIBUTED_OPTIMIZERS
         or bool(t.flag("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")))
    if t.get("comm_overlap.tp_comm_overlap") is not None:  # Megatron-Bridge's layout
        give("--tp-comm-overlap", "comm_overlap.tp_comm_overlap",
             bool(t.flag("comm_overlap.tp_comm_overlap")))
    give("--tokenizer-type", "model.tokenizer.type", t.get("model.tokenizer.type"))
    give("--tokenizer-model", "model.tokenizer.model", t.get("model.tokenizer.model"))
    for name, key in (("--micro-batch-size", "train.micro_batch_size"),
                      ("--global-batch-size", "train.global_batch_size")):
        if t.get(key) is not None:  # Megatron-Bridge keeps the batches under train:
            give(name, key, t.get(key))
    devices = t.get("trainer.devices")
    if str(devices).isdigit():  # not "auto" or -1
        give("--nproc-per-node", "trainer.devices", devices)
        give("--nnodes", "trainer.num_nodes", t.get("trainer.num_nodes", default=1))
    key = "trainer.max_steps" if t.get("trainer.max_steps") is not None else "train.train_iters"
    steps = t.count(key, lo=-1)  # -1: Lightning's no limit
    give("--train-iters", key, steps if steps and steps > 0 else None)
    return read(Flags(words, where, names), "nemo", gpus=gpus, system=system,
                default="NeMo's default")
