"""Megatron-LM's arguments read into a scenario: the flags (inline, or the words
`_shell` takes from a shell script or a Megatron-MoE-ModelZoo YAML) to the
model, the plan and the software's keys; `read` is also what reads a NeMo recipe
and a Megatron-Bridge one, translated to these flags (`importers.nemo`)."""

from __future__ import annotations

import ast
import dataclasses
import re

from ..domains import MAX_GPUS
from ..model import dispatchers, plan, strategies
from . import _common as c
from ._shell import UNSET


# Issue 54's software settings: the name issue 54 gives each -> `Software` (Megatron-LM's
# flag, Megatron-Bridge's ConfigContainer key, the scenario key it sets and how its values
# map; `why` where it sets none). Read by `_software` for all three importers (Bridge's and
# NeMo's keys become these flags); a value the model cannot express is named on `# ignored`
# with the value, a value Megatron does not take is a one-line error.
@dataclasses.dataclass(frozen=True)
class Software:
    flag: str  # Megatron-LM's
    key: str  # Megatron-Bridge's ConfigContainer key
    scenario: str | None  # the scenario key it sets; None: read, not modelled (`why`)
    # Megatron's value -> the scenario's (IGNORED: one the model cannot express); None:
    # a number or a switch, as given
    values: dict | None = None
    why: str = ""


IGNORED = None  # a value of Megatron's that the step model cannot express
# Megatron-Core's CUDA-graph scopes (CudaGraphScope; `full`: the older name of a whole
# layer) -> the step model's regions (`stacks.GRAPH_REGIONS`); IGNORED: a scope the model
# has no region for
GRAPH_SCOPES = {"attn": "attn", "mlp": "mlp", "moe_router": "moe_router",
                "moe_preprocess": "moe_preprocess", "moe": IGNORED, "mamba": IGNORED,
                "full": "full", "full_iteration": "full_iteration"}
SOFTWARE_FLAGS = {
    "moe_token_dispatcher_type": Software(
        "--moe-token-dispatcher-type", "model.moe_token_dispatcher_type",
        "parallel.moe_dispatcher",
        {"alltoall": "alltoall", "alltoall_seq": "alltoall", "flex": "flex",
         "allgather": IGNORED}),
    # flex's backend (Megatron-Core's default deepep)
    "moe_flex_dispatcher_backend": Software(
        "--moe-flex-dispatcher-backend", "model.moe_flex_dispatcher_backend",
        "parallel.moe_dispatcher", {"deepep": "deepep", "hybridep": "hybridep"}),
    "moe_hybridep_num_sms": Software("--moe-hybridep-num-sms", "model.moe_hybridep_num_sms",
                                     "parallel.moe_dispatcher_sms"),
    "moe_deepep_num_sms": Software("--moe-deepep-num-sms", "model.moe_deepep_num_sms",
                                   "parallel.moe_dispatcher_sms"),
    "cuda_graph_impl": Software(
        "--cuda-graph-impl", "model.cuda_graph_impl", "training.cuda_graphs",
        {"none": "none", "local": "layer", "transformer_engine": "layer",
         "full_iteration": "full_iteration"}),
    "cuda_graph_scope": Software("--cuda-graph-scope", "model.cuda_graph_scope",
                                 "training.cuda_graph_scope", GRAPH_SCOPES),
    "moe_router_fusion": Software("--moe-router-fusion", "model.moe_router_fusion",
                                  "training.moe_router_fusion"),
    "moe_permute_fusion": Software("--moe-permute-fusion", "model.moe_permute_fusion",
                                   "training.moe_permute_fusion"),
    # Bridge's perf scripts' --moe_a2a_overlap sets comm_overlap's key
    "moe_a2a_overlap": Software(
        "--overlap-moe-expert-parallel-comm", "comm_overlap.overlap_moe_expert_parallel_comm",
        "parallel.ep_overlap"),
    # the MoE block's weight gradients after the backward's dispatch (with the overlap only)
    "delay_wgrad_compute": Software(
        "--delay-wgrad-compute", "comm_overlap.delay_wgrad_compute", "training.delay_wgrad"),
    "moe_expert_capacity_factor": Software(
        "--moe-expert-capacity-factor", "model.moe_expert_capacity_factor",
        "training.moe_capacity_factor"),
    # the paged stash's bound on the tokens a rank receives (static buffers, not padding)
    "moe_expert_rank_capacity_factor": Software(
        "--moe-expert-rank-capacity-factor", "model.moe_expert_rank_capacity_factor",
        "training.moe_capacity_factor"),
    "moe_pad_expert_input_to_capacity": Software(
        "--moe-pad-expert-input-to-capacity", "model.moe_pad_expert_input_to_capacity",
        "training.moe_pad_experts"),
    "pipeline_model_parallel_layout": Software(
        "--pipeline-model-parallel-layout", "model.pipeline_model_parallel_layout",
        "parallel.pipeline_layout"),
    # Megatron-Core's modules (TransformerConfig.recompute_modules) -> codesign's
    # (`strategies.RECOMPUTE_MODULES`); IGNORED: a module of a layer codesign has none of
    # (GatedDeltaNet / GatedDeltaProduct, hyper-connections); read under selective only
    "recompute_modules": Software(
        "--recompute-modules", "model.recompute_modules", "training.recompute_modules",
        {**{m: m for m in strategies.RECOMPUTE_MODULES}, "gdn_norm_out": IGNORED,
         "gdp_in_proj": IGNORED, "gdp_qkv": IGNORED, "mhc": IGNORED}),
    "fp8_recipe": Software(
        "--fp8-recipe", "mixed_precision.fp8_recipe", None,
        why="codesign's fp8 has no scaling variants: tensorwise, delayed, blockwise"),
}
# switches (flags without a value) the reader reads, or knows to take no value
SWITCHES = frozenset({
    "--moe-router-fusion", "--moe-permute-fusion", "--overlap-moe-expert-parallel-comm",
    "--sequence-parallel", "--swiglu", "--untie-embeddings-and-output-weights",
    "--group-query-attention", "--bf16", "--fp16", "--use-distributed-optimizer",
    "--recompute-activations", "--use-flash-attn", "--multi-latent-attention",
    "--use-torch-fsdp2", "--use-custom-fsdp", "--use-megatron-fsdp", "--tp-comm-overlap",
    "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32",
    "--moe-pad-expert-input-to-capacity", "--delay-wgrad-compute"})
# flags that take one or more words (argparse's nargs): their words, comma-joined
LIST_FLAGS = frozenset({"--cuda-graph-scope", "--recompute-modules"})
# the model's shape: an argument list without any of them is not a model's (`read`)
SHAPE_FLAGS = ("--num-layers", "--hidden-size", "--num-attention-heads")
# --attention-backend -> model.attention_kernel
ATTENTION_BACKENDS = {"flash": "flash", "fused": "flash", "unfused": "naive", "local": "naive"}
# --data-parallel-sharding-strategy (Megatron FSDP) -> parallel.zero
SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
# Megatron's multi-latent attention defaults (arguments.py): (key, flag, default)
MLA = (("q_lora_rank", "--q-lora-rank", 0), ("kv_lora_rank", "--kv-lora-rank", 32),
       ("qk_head_dim", "--qk-head-dim", 128), ("qk_rope_head_dim", "--qk-pos-emb-head-dim", 64),
       ("v_head_dim", "--v-head-dim", 128))
# the text of a --moe-layer-freq / --window-attn-skip-freq pattern, and the layers
# it may give (more than any model's)
PATTERN_CHARS, PATTERN_LAYERS = 2**20, 10**5


class Flags:
    """The `--flag value` pairs of an argument list (`--flag=value` too; a later
    one wins), remembering which were read; `names` spells a flag as the source
    does (a NeMo key) in messages."""

    def __init__(self, words: list[str], where: str, names: dict | None = None):
        self.where, self.names, self.values, self.read = where, names or {}, {}, set()
        self.notes: dict = {}  # flag -> why it is not read (`ignore`)
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            if not word.startswith("--") or word == "--":
                continue  # commands, scripts, positional values
            if "=" in word:
                name, value = word.split("=", 1)
            elif word in SWITCHES or i >= len(words) or words[i].startswith("--"):
                name, value = word, True
            elif word in LIST_FLAGS:  # its words up to the next flag
                j = next((k for k in range(i, len(words)) if words[k].startswith("--")),
                         len(words))
                name, value, i = word, ",".join(words[i:j]), j
            else:
                name, value = word, words[i]
                i += 1
            self.values[name] = value

    def name(self, flag: str) -> str:
        try:
            return self.names[flag]
        except KeyError:
            return flag

    def get(self, *flags):
        """The value of the first of `flags` given (True for a switch), else None."""
        self.read.update(flags)
        return next((self.values[f] for f in flags if f in self.values), None)

    def value(self, flag: str):
        """The value of `flag` (None when not given); a flag that takes a value given
        without one (`--num-layers` last, or before another flag) is a one-line error
        naming it, not the value True."""
        value = self.get(flag)
        if value is True:
            raise ValueError(f"{self.where}: {self.name(flag)} needs a value")
        return value

    def count(self, flag: str, default=None, lo: int = 1):
        value = self.value(flag)
        return default if value is None else c.whole(self.where, self.name(flag), value, lo)

    def number(self, flag: str):
        value = self.value(flag)
        return None if value is None else c.number(self.where, self.name(flag), value)

    def switch(self, flag: str) -> bool:
        return self.get(flag) is not None

    def text(self, flag: str):
        value = self.value(flag)
        return None if value is None else str(value)

    def ignore(self, flag: str, why: str) -> None:
        """`flag` given but not read, for the reason `why` (its `# ignored` entry)."""
        self.notes[flag] = why

    def unread(self) -> list[str]:
        """The flags given and not read, each with its value and why where it is said."""
        return [self.name(f) + (f"={noted(self.values[f], self.notes[f])}"
                                if f in self.notes else "")
                for f in self.values if f not in self.read or f in self.notes]


def noted(value, why: str) -> str:
    """An ignored value and why: `value (why)`, the value cut as messages cut it."""
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{c.shown(text).strip(chr(39))} ({why})"


def moe_layer_count(where: str, name: str, value, layers: int) -> int:
    """MoE layers of --moe-layer-freq: an int k (every k-th layer) or a pattern of
    0/1 per layer (`[0]*3+[1]*58`, `([1]*48)`, `[0,1,1]`)."""
    if str(value).strip().isdigit():
        return -(-layers // c.whole(where, name, value))
    return sum(layer_pattern(where, name, value, layers))


def window_layer_count(where: str, name: str, value, layers: int) -> int:
    """Windowed layers of --window-attn-skip-freq (Megatron-Core's
    `is_layer_window_attention`): an int N, every N-th layer (counting from 1)
    full attention and the others windowed, or a pattern of 0/1 per layer (1:
    windowed)."""
    if str(value).strip().isdigit():
        return layers - layers // c.whole(where, name, value)
    return sum(layer_pattern(where, name, value, layers))


def layer_pattern(where: str, name: str, value, layers: int) -> list[int]:
    """A 0/1 per layer, as Megatron's `moe_freq_type` reads a list expression: at
    most PATTERN_CHARS of text (Python's parser recurses on a long sum: its
    RecursionError is this one-line error too)."""
    text = str(value).strip().strip("'\"")
    try:
        if len(text) > PATTERN_CHARS:
            raise ValueError("too long a text")
        pattern = _layer_pattern(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise c.bad(where, name, value, "must be an integer or a list of 0/1 per layer "
                    "such as [0]*3+[1]*58") from None
    if len(pattern) != layers or any(p not in (0, 1) for p in pattern):
        raise c.bad(where, name, value, f"must give 0 or 1 for each of the {layers} layers")
    return pattern


def window_size(where: str, name: str, value) -> tuple[int, int]:
    """--window-size (Megatron's `tuple_type`: "A,B" or "(A, B)"; "A B" and a lone A
    too): the window's left and right extents; -1 is an unbounded extent."""
    words = [w for w in re.split(r"[\s,]+", str(value).strip().strip("()[]")) if w]
    try:
        extents = [int(w) for w in words]
    except ValueError:
        extents = []
    if len(extents) not in (1, 2) or extents[0] == 0 or any(e < -1 for e in extents):
        raise c.bad(where, name, value, "must be the window's left and right extents in "
                    "tokens, such as 128,0 (-1: unbounded)")
    return extents[0], extents[1] if len(extents) == 2 else 0


def _layer_pattern(root) -> list:
    """A list expression of integer literals, `*` by an integer and `+`, of at most
    PATTERN_LAYERS entries; evaluated with a stack of its own, not by recursion (a
    sum of thousands of lists nests as deep)."""
    done: list[list] = []  # the values of the nodes evaluated, in order
    todo = [(root, False)]  # (node, whether its operands are evaluated)
    while todo:
        node, ready = todo.pop()
        if isinstance(node, ast.List):
            _bounded(len(node.elts))
            done.append([_int_literal(e) for e in node.elts])
        elif not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult))):
            raise ValueError("not a layer pattern")
        elif not ready:
            todo.append((node, True))
            todo += [(node.right, False)] if isinstance(node.op, ast.Add) else []
            todo.append((node.left, False))
        elif isinstance(node.op, ast.Add):  # each list in `done` is its own: extended
            right = done.pop()
            _bounded(len(done[-1]) + len(right))
            done[-1].extend(right)
        else:
            times = _int_literal(node.right)
            _bounded(len(done[-1]) * times)
            if times != 1:  # a chain of `* 1` copies nothing
                done[-1] = done[-1] * times
    return done[0]


def _bounded(entries: int) -> None:
    """A pattern of more than PATTERN_LAYERS entries (more than any model's layers)
    is refused before it is built."""
    if entries > PATTERN_LAYERS:
        raise ValueError("too long a pattern")


def _int_literal(node) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 10**5:
        return node.value
    raise ValueError("not an integer")


# ----------------------------------------------------------------- reading
def megatron(words: list[str], where: str = "megatron arguments", *, gpus: int | None = None,
             system: dict | None = None) -> c.Imported:
    """The scenario of a Megatron-LM argument list (words, as a shell splits them);
    shell variables left unset in it are said (what they give is not read unless a
    flag the model reads needs it: that flag names it)."""
    flags = Flags(words, where)
    imported = read(flags, "megatron", gpus=gpus, system=system)
    unset = list(dict.fromkeys(a or b for value in flags.values.values() if value is not True
                               for a, b in UNSET.findall(str(value))))
    if not unset:
        return imported
    return dataclasses.replace(imported, assumed={**imported.assumed, "shell variables": (
        f"shell variables {', '.join('$' + v for v in unset)} unset: codesign reads no "
        "number from the flags that hold them (--var NAME=VALUE sets one)")})


def read(f: Flags, kind: str, *, gpus: int | None = None, system: dict | None = None,
         default: str = "Megatron's default") -> c.Imported:
    """The scenario of Megatron arguments `f` (`default` names whose defaults
    the absent ones take, in the assumptions)."""
    d, n = c.Draft(kind, f.where), f.name
    missing = [n(x) for x in SHAPE_FLAGS if f.get(x) is None]
    if missing:
        raise ValueError(f"{f.where}: {', '.join(missing)} missing (the model's shape)")
    layers = f.count("--num-layers")
    tp = f.count("--tensor-model-parallel-size", 1)
    pp = f.count("--pipeline-model-parallel-size", 1)
    _model(f, d, layers, tp, default)
    d.given("training.micro_batch", f.count("--micro-batch-size"), 1,
            f"no {n('--micro-batch-size')}")
    batch = f.count("--global-batch-size")
    if batch is None:
        d.assume("training.global_batch", None, f"micro_batch x dp ({default}: no "
                 f"{n('--global-batch-size')})")
    else:
        d.put("training.global_batch", batch)
    _recompute(f, d, layers // pp, default)
    if f.switch("--cpu-offloading"):  # the activations of that many layers to host memory
        d.put("training.offload_layers", f.count("--cpu-offloading-num-layers", 0, lo=0))
    bf16, fp16 = f.switch("--bf16"), f.switch("--fp16")
    if f.get("--fp8-format") is not None:
        d.put("training.dtype", "fp8")
    elif bf16 or fp16:
        d.put("training.dtype", "bf16" if bf16 else "fp16")
    else:
        given = " or ".join(dict.fromkeys(n(x) for x in ("--bf16", "--fp16", "--fp8-format")))
        d.assume("training.dtype", "fp32", f"no {given} ({default})")
    bf16_reduce, fp32_reduce = (f.switch("--grad-reduce-in-bf16"),
                                f.switch("--accumulate-allreduce-grads-in-fp32"))
    if bf16_reduce or fp32_reduce:  # Megatron: reducing in bf16 turns fp32 accumulation off
        d.put("training.grad_reduce_dtype", "bf16" if bf16_reduce else "fp32")

    for key, name in (("tp", "--tensor-model-parallel-size"),
                      ("pp", "--pipeline-model-parallel-size"),
                      ("cp", "--context-parallel-size"), ("ep", "--expert-model-parallel-size")):
        d.put(f"parallel.{key}", f.count(name, 1))
    etp = f.count("--expert-tensor-parallel-size")  # MoE parallel folding; absent: tp
    if etp is not None and etp != tp:
        d.put("parallel.etp", etp)
    _interleave(f, d, layers, pp)
    d.put("parallel.sequence_parallel", f.switch("--sequence-parallel") and tp > 1)
    if f.switch("--tp-comm-overlap") and tp > 1:  # Transformer Engine's userbuffers
        d.put("parallel.tp_overlap", 1.0)
    strategy = f.text("--data-parallel-sharding-strategy")
    if strategy is not None or f.switch("--use-torch-fsdp2"):
        d.put("parallel.zero", SHARDING.get(strategy, 3))
    elif f.switch("--use-distributed-optimizer"):
        d.put("parallel.zero", 1)
    else:
        d.assume("parallel.zero", 0, f"no {n('--use-distributed-optimizer')} ({default})")
    nodes, per_node = f.count("--nnodes"), f.count("--nproc-per-node") or f.count(
        "--nproc_per_node")
    source = None
    if nodes is not None and per_node is not None:
        per_node_flag = "--nproc-per-node" if f.get("--nproc-per-node") is not None \
            else "--nproc_per_node"
        if nodes * per_node > MAX_GPUS:  # named here: the loader would blame a derived key
            raise ValueError(f"{f.where}: {n('--nnodes')}={nodes} x {n(per_node_flag)}="
                             f"{per_node} is {nodes * per_node} GPUs, more than codesign "
                             f"models ({MAX_GPUS:,.0f})")
        source = (nodes * per_node, f"{n('--nnodes')} {nodes} x {n('--nproc-per-node')} "
                  f"{per_node}")
    c.system(d, system)
    c.gpus(d, gpus, source)
    _bucket(f, d, tp * pp, default)
    _software(f, d, default)
    samples, seq = f.count("--train-samples"), d.get("model.seq_len")
    if samples is not None:
        d.assume("training.tokens", samples * seq, f"{n('--train-samples')} {samples} x "
                 f"seq_len {seq}")
    else:
        c.tokens(d, f.count("--train-iters"), n("--train-iters"))
    d.ignored += f.unread()
    return d.done()


def _bucket(f: Flags, d: c.Draft, model_parallel: int, default: str) -> None:
    """parallel.dp_bucket_bytes: --ddp-bucket-size parameters, else Megatron-Core's
    default for the run's dp x cp (`plan.megatron_bucket_bytes`), in the
    gradient-reduction width (the recipe's, or --grad-reduce-in-bf16's)."""
    dtype = d.get("training.dtype")  # set above, given or assumed
    recipe = plan.RECIPES[dtype]["grad_reduce"]
    width = plan.DTYPE_BYTES[d.get("training.grad_reduce_dtype", recipe)] / \
        plan.DTYPE_BYTES[recipe]  # the reduction's width over the recipe's
    given = f.number("--ddp-bucket-size")
    if given is not None:
        d.put("parallel.dp_bucket_bytes", width * plan.megatron_bucket_bytes(dtype, params=given))
        return
    gpus = d.get("system.gpus")
    dp_cp = None if gpus is None else gpus / model_parallel
    d.assume("parallel.dp_bucket_bytes", width * plan.megatron_bucket_bytes(dtype, dp_cp),
             f"no {f.name('--ddp-bucket-size')}: max(40M, 1M x dp) parameters "
             f"({default}, Megatron-Core)")


def _model(f: Flags, d: c.Draft, layers: int, tp: int, default: str) -> None:
    n = f.name
    hidden, heads = f.count("--hidden-size"), f.count("--num-attention-heads")
    d.put("model.layers", layers)
    d.put("model.hidden", hidden)
    d.put("model.heads", heads)
    d.put("model.kv_heads", f.count("--num-query-groups", 1)
          if f.switch("--group-query-attention") else heads)
    gated = f.switch("--swiglu")
    ffn = f.count("--ffn-hidden-size")
    d.given("model.ffn_hidden", ffn, int(4 * hidden * 2 / 3 / 64) * 64 if gated else 4 * hidden,
            f"no {n('--ffn-hidden-size')}: {default} " + (
                "2/3 x 4 hidden rounded down to 64 (SwiGLU)" if gated else "4 hidden"))
    ffn = d.get("model.ffn_hidden")
    seq = f.count("--seq-length")
    if seq is None:
        seq = f.count("--max-position-embeddings")
        if seq is None:
            raise ValueError(f"{f.where}: {n('--seq-length')} missing (the training sequence)")
        d.assume("model.seq_len", seq, f"no {n('--seq-length')}: "
                 f"{n('--max-position-embeddings')}")
    else:
        d.put("model.seq_len", seq)
    tokenizer = (f.text("--tokenizer-type") or ("GPT2BPETokenizer" if f.get("--merge-file")
                                                else None), f.text("--tokenizer-model"))
    c.vocab(d, f.count("--vocab-size"), f.count("--padded-vocab-size"), tokenizer,
            f.count("--make-vocab-size-divisible-by", c.VOCAB_MULTIPLE), tp, n("--vocab-size"))
    d.put("model.gated", gated)
    d.put("model.tied_embeddings", not f.switch("--untie-embeddings-and-output-weights"))
    experts = f.count("--num-experts", lo=0)
    if experts:
        _moe(f, d, layers, ffn, experts, default)
    if f.switch("--multi-latent-attention"):  # its head widths are its own (MLA)
        d.put("model.attention", "mla")
        for key, name, value in MLA:
            d.given(f"model.{key}", f.count(name, lo=0), value, f"no {n(name)} ({default})")
    elif f.count("--kv-channels") not in (None, hidden / heads):  # default: hidden / heads
        d.put("model.head_dim", f.count("--kv-channels"))
    _window(f, d, layers)
    mtp = f.count("--mtp-num-layers", lo=0)
    if mtp:
        d.put("model.mtp_layers", mtp)
    kernel = ATTENTION_BACKENDS.get(f.text("--attention-backend"))
    if f.switch("--use-flash-attn") or kernel is not None:
        d.put("model.attention_kernel", kernel or ATTENTION_BACKENDS["flash"])
    else:
        d.assume("model.attention_kernel", "flash", f"no {n('--use-flash-attn')}: Transformer "
                 "Engine's fused attention, Megatron-Core's default")
    dropouts = [f.number("--hidden-dropout"), f.number("--attention-dropout")]
    if None in dropouts:
        d.assume("model.dropout", any(p is None or p > 0 for p in dropouts),
                 f"{default} {n('--hidden-dropout')} and {n('--attention-dropout')} 0.1 "
                 "where not given")
    else:
        d.put("model.dropout", any(p > 0 for p in dropouts))


def _window(f: Flags, d: c.Draft, layers: int) -> None:
    """--window-size's left extent over the layers --window-attn-skip-freq leaves
    windowed (every layer without it); an unbounded (-1) window is full attention."""
    given = f.get("--window-size")
    if given is None:
        return
    left, _ = window_size(f.where, f.name("--window-size"), given)
    skip = f.get("--window-attn-skip-freq")
    windowed = layers if skip is None else window_layer_count(
        f.where, f.name("--window-attn-skip-freq"), skip, layers)
    if left > 0 and windowed:
        d.put("model.window_layers", windowed)
        d.put("model.window", left)


def _moe(f: Flags, d: c.Draft, layers: int, ffn: int, experts: int, default: str) -> None:
    n = f.name
    freq = f.get("--moe-layer-freq")
    d.put("model.moe_layers", layers if freq is None else
          moe_layer_count(f.where, n("--moe-layer-freq"), freq, layers))
    d.put("model.experts", experts)
    d.given("model.top_k", f.count("--moe-router-topk"), 2,
            f"no {n('--moe-router-topk')} ({default})")
    width = f.count("--moe-ffn-hidden-size", ffn)
    d.put("model.expert_ffn_hidden", width)
    c.group_limit(d, f.count("--moe-router-num-groups", lo=0),
                  f.count("--moe-router-group-topk", lo=0), n("--moe-router-num-groups"),
                  n("--moe-router-group-topk"))
    shared = f.count("--moe-shared-expert-intermediate-size", lo=0)
    if shared:
        d.assume("model.shared_experts", max(1, round(shared / width)),
                 f"{n('--moe-shared-expert-intermediate-size')} {shared} as shared experts of "
                 f"the routed width {width}")


def _recompute(f: Flags, d: c.Draft, layers_per_stage: int, default: str) -> None:
    n = f.name
    granularity = f.text("--recompute-granularity")
    if granularity is None and f.switch("--recompute-activations"):
        granularity = "selective"
    if granularity is None:
        d.assume("training.recompute", "none", f"no {n('--recompute-granularity')} ({default})")
        _recompute_modules(f, d, strategies.NoRecompute())
        return
    recompute = c.recompute(f.where, n("--recompute-granularity"), granularity)
    method, layers = f.text("--recompute-method"), f.count("--recompute-num-layers", lo=0)
    if (isinstance(recompute, strategies.FullRecompute) and method == "block"
            and layers is not None and layers < layers_per_stage):
        d.assume("training.recompute", recompute.name, f"{n('--recompute-method')} block "
                 f"recomputes {layers} of {layers_per_stage} layers per stage; codesign "
                 "recomputes every layer")
    else:
        d.put("training.recompute", recompute.name)
    _recompute_modules(f, d, recompute)


def _recompute_modules(f: Flags, d: c.Draft, recompute: strategies.Recompute) -> None:
    """training.recompute_modules from --recompute-modules (Megatron-Core reads it
    under selective granularity only; a module of a layer codesign has none of is
    named as ignored, one Megatron does not take is a one-line error)."""
    sw = SOFTWARE_FLAGS["recompute_modules"]
    given = f.text(sw.flag)
    if given is None:
        return
    if not isinstance(recompute, strategies.SelectiveRecompute):
        f.ignore(sw.flag, f"read under {f.name('--recompute-granularity')} selective only")
        return
    names = [w for w in re.split(r"[,\s]+", given) if w]
    mapped = [_mapped(f, "recompute_modules", w) for w in names]
    kept = [m for m in mapped if m is not IGNORED]
    if len(kept) < len(mapped):
        f.ignore(sw.flag, ", ".join(w for w, m in zip(names, mapped, strict=True)
                                    if m is IGNORED)
                 + ": not modelled (no such layer in codesign's model)")
    if kept:
        d.put(sw.scenario, strategies.recompute_module_names(kept, sw.scenario))


def _interleave(f: Flags, d: c.Draft, layers: int, pp: int) -> None:
    per_stage = f.count("--num-layers-per-virtual-pipeline-stage")
    v = f.count("--virtual-pipeline-model-parallel-size") or \
        f.count("--num-virtual-stages-per-pipeline-rank")
    if per_stage is not None:
        if layers % (pp * per_stage):
            n = f.name
            raise ValueError(f"{f.where}: {n('--num-layers-per-virtual-pipeline-stage')}="
                             f"{per_stage} must divide {n('--num-layers')}={layers} / "
                             f"{n('--pipeline-model-parallel-size')}={pp}")
        v = layers // (pp * per_stage)
    if v and v > 1:
        d.put("parallel.schedule", "interleaved")
        d.put("parallel.interleave", v)


# ----------------------------------------------------------------- issue 54's software
def _mapped(f: Flags, name: str, value: str):
    """`value` of SOFTWARE_FLAGS[name] as the scenario writes it (IGNORED: one the
    model cannot express); a value Megatron does not take is a one-line error."""
    sw = SOFTWARE_FLAGS[name]
    if value not in sw.values:
        raise c.bad(f.where, f.name(sw.flag), value, f"must be one of {', '.join(sw.values)}")
    return sw.values[value]


def _software(f: Flags, d: c.Draft, default: str) -> None:
    """Issue 54's MoE software settings (SOFTWARE_FLAGS) into their scenario keys;
    on a dense model the MoE ones are named as ignored."""
    sw, n = SOFTWARE_FLAGS, f.name
    moe = bool(d.get("model.experts"))
    if f.get(sw["fp8_recipe"].flag) is not None:
        f.ignore(sw["fp8_recipe"].flag, sw["fp8_recipe"].why)
    layout = f.get(sw["pipeline_model_parallel_layout"].flag)
    if layout is not None:  # Megatron-Core's grammar, as `parallel.pipeline_layout` reads it
        d.put(sw["pipeline_model_parallel_layout"].scenario, str(layout))
    if not moe:
        for name in ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
                     "moe_hybridep_num_sms", "moe_deepep_num_sms", "moe_router_fusion",
                     "moe_permute_fusion", "moe_a2a_overlap", "delay_wgrad_compute",
                     "moe_expert_capacity_factor",
                     "moe_expert_rank_capacity_factor", "moe_pad_expert_input_to_capacity"):
            if f.get(sw[name].flag) not in (None, False):
                f.ignore(sw[name].flag, "a dense model: no MoE layers")
        _graphs(f, d, moe)
        return
    dispatcher = _dispatcher(f, d, default)
    capacity = _capacity(f, d)
    for name in ("moe_router_fusion", "moe_permute_fusion"):
        if f.switch(sw[name].flag):
            d.put(sw[name].scenario, True)
    overlap = sw["moe_a2a_overlap"].flag
    if f.switch(overlap):
        pp = d.get("parallel.pp", 1)
        if pp > 1 and d.get("parallel.interleave", 1) <= 1:  # no virtual stages
            f.ignore(overlap, f"pp {pp} without virtual stages: Megatron-Core's combined "
                     "1F1B pairs micro-batches of the interleaved schedule")
        else:
            d.put(sw["moe_a2a_overlap"].scenario, True)
    delay = sw["delay_wgrad_compute"].flag
    if f.switch(delay):
        if d.get(sw["moe_a2a_overlap"].scenario):
            d.put(sw["delay_wgrad_compute"].scenario, True)
        else:  # Megatron-Core asserts the overlap; without it the flag changes nothing here
            f.ignore(delay, f"read with {n(overlap)} only")
    if dispatcher is not None and capacity is None \
            and dispatchers.dispatcher(dispatcher).host_syncs > 0:
        d.assume("training.host_syncs", True, f"dropless routing (no "
                 f"{n(sw['moe_expert_capacity_factor'].flag)}) with the {dispatcher} "
                 "dispatcher: Megatron-Core reads the tokens per expert back to the host "
                 "once per MoE layer")
    _graphs(f, d, moe)  # after the capacity: full_iteration needs padded experts


def _dispatcher(f: Flags, d: c.Draft, default: str) -> str | None:
    """parallel.moe_dispatcher (and its SMs) from the dispatcher type and flex's
    backend; None where not given (or not modelled: allgather)."""
    sw, n = SOFTWARE_FLAGS, f.name
    kind_flag, backend_flag = sw["moe_token_dispatcher_type"].flag, \
        sw["moe_flex_dispatcher_backend"].flag
    kind, backend = f.text(kind_flag), f.text(backend_flag)
    if kind is not None:
        kind = _mapped(f, "moe_token_dispatcher_type", kind)
    if backend is not None:
        backend = _mapped(f, "moe_flex_dispatcher_backend", backend)
        if kind != "flex":
            f.ignore(backend_flag, f"read under {n(kind_flag)} flex only")
    if kind is None:
        if f.get(kind_flag) is not None:
            f.ignore(kind_flag, f"{f.text(kind_flag)}: not modelled; parallel.moe_dispatcher "
                     "stays alltoall")
        return None
    if kind == "flex":
        if backend is None:
            d.assume("parallel.moe_dispatcher", "deepep", f"{n(kind_flag)} flex without "
                     f"{n(backend_flag)}: Megatron-Core's default backend, deepep")
            kind = "deepep"
        else:
            kind = backend
    d.put(sw["moe_token_dispatcher_type"].scenario, kind)
    for name in ("moe_hybridep_num_sms", "moe_deepep_num_sms"):
        sms = f.number(sw[name].flag)
        if sms is None:
            continue
        if not name.startswith(f"moe_{kind}_"):
            f.ignore(sw[name].flag, f"the dispatcher is {kind}")
        elif not 0 < sms <= 1e4:
            raise c.bad(f.where, n(sw[name].flag), sms, "must be a number of SMs, 1 to 10000")
        else:
            d.put(sw[name].scenario, sms)
    return kind


def _capacity(f: Flags, d: c.Draft):
    """training.moe_capacity_factor (the expert's, else the rank's) and
    moe_pad_experts; the factor given, or None (dropless)."""
    sw, n = SOFTWARE_FLAGS, f.name
    factors = {}
    for name in ("moe_expert_capacity_factor", "moe_expert_rank_capacity_factor"):
        value = f.number(sw[name].flag)
        if value is not None and not 0 < value <= 1e3:
            raise c.bad(f.where, n(sw[name].flag), value, "must be a factor over the mean "
                        "tokens, above 0 (up to 1000)")
        if value is not None:
            factors[name] = value
    expert = factors.get("moe_expert_capacity_factor")
    factor = expert if expert is not None else factors.get("moe_expert_rank_capacity_factor")
    if factor is not None:
        d.put(sw["moe_expert_capacity_factor"].scenario, factor)
    if expert is not None and "moe_expert_rank_capacity_factor" in factors:
        f.ignore(sw["moe_expert_rank_capacity_factor"].flag,
                 f"{n(sw['moe_expert_capacity_factor'].flag)} sets the capacity")
    pad = sw["moe_pad_expert_input_to_capacity"].flag
    if f.switch(pad):
        if expert is None:
            f.ignore(pad, f"needs {n(sw['moe_expert_capacity_factor'].flag)}")
        else:
            d.put(sw["moe_pad_expert_input_to_capacity"].scenario, True)
    return factor


def _graphs(f: Flags, d: c.Draft, moe: bool) -> None:
    """training.cuda_graphs and cuda_graph_scope from the implementation and
    Megatron-Core's scopes (a scope the model has no region for is named as ignored)."""
    sw, n = SOFTWARE_FLAGS, f.name
    impl_flag, scope_flag = sw["cuda_graph_impl"].flag, sw["cuda_graph_scope"].flag
    impl, given = f.text(impl_flag), f.text(scope_flag)
    words = [w for w in re.split(r"[\s,\[\]'\"]+", given or "") if w]
    scopes = [s.removeprefix("CudaGraphScope.") for s in words]
    regions = [_mapped(f, "cuda_graph_scope", s) for s in scopes]
    if impl is None and "full_iteration" in regions:
        impl = "full_iteration"  # Megatron-Core promotes the implementation from the scope
    if impl is None:
        if scopes:
            f.ignore(scope_flag, f"no {n(impl_flag)}: no CUDA graphs")
        return
    graphs = _mapped(f, "cuda_graph_impl", impl)
    if "full_iteration" in regions:  # whatever the implementation
        graphs = "full_iteration"
    elif graphs == "none":
        if scopes:
            f.ignore(scope_flag, f"{n(impl_flag)} none: no CUDA graphs")
    elif graphs == "layer":
        dropped = [s for s, r in zip(scopes, regions, strict=True) if r is IGNORED]
        if dropped:
            f.ignore(scope_flag, f"{', '.join(dropped)}: no region of the step model's")
        kept = [r for r in regions if r not in (IGNORED, "full")]
        if kept and "full" not in regions:
            graphs = "partial"
            d.put(sw["cuda_graph_scope"].scenario, ",".join(dict.fromkeys(kept)))
    if graphs == "full_iteration" and moe and not d.get("training.moe_pad_experts"):
        d.assume(sw["cuda_graph_impl"].scenario, "iteration", f"{n(impl_flag)} "
                 "full_iteration without padded experts (the routed experts' shapes static, "
                 "not padded to a capacity): codesign's iteration scope")
        return
    d.put(sw["cuda_graph_impl"].scenario, graphs)
