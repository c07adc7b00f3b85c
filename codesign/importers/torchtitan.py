"""torchtitan jobs: an old job TOML, or an entry of torchtitan's config registry
named as its command line names it (`--module llama3 --config llama3_70b`, then
`--section.key value` overrides). Both are read by one mapping of torchtitan's job
values: the model is the job's flavor (a codesign preset, or the flavor's shape
restated from torchtitan's model args); the plan is torchtitan's FSDP2 (ZeRO-3 over
the data-parallel shard degree x cp, HSDP replicas as `zero_shard_size`) with
sequence-parallel tensor parallelism."""

from __future__ import annotations

from pathlib import Path

from .. import files
from ..model import strategies, workload
from . import _common as c
from . import _kinds

# The old TOML path's defaults (torchtitan before its config registry). At commit
# b5bcd76c they have not changed: run_train.sh's `NGPU=${NGPU:-"8"}` (GPUS, which the
# registry path assumes too); torchtitan/config/configs.py's TrainingConfig
# `max_context_length = 2048` and `num_tokens_per_microbatch_per_dp_rank = 16384`
# (8 sequences of 2048), which the registry path reads from DEFAULTS.
GPUS = 8  # torchtitan's run_train.sh default NGPU
SEQ_LEN = 2048  # torchtitan's default training.seq_len
LOCAL_BATCH = 8  # torchtitan's default training.local_batch_size
QWEN3_VOCAB, DEEPSEEK_V2_VOCAB, DEEPSEEK_V3_VOCAB = 151936, 102400, 129280
GPT_OSS_VOCAB = 201088


def _qwen3(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
           tied: bool = False) -> dict:
    """A dense Qwen3 flavor's [model] keys (head width 128, SwiGLU)."""
    return dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=128,
                ffn_hidden=ffn, vocab=QWEN3_VOCAB, gated=True, tied_embeddings=tied)


def _qwen3_moe(layers: int, hidden: int, heads: int, kv_heads: int, experts: int,
               top_k: int, width: int) -> dict:
    """A Qwen3 MoE flavor: routed experts in every layer (no dense FFN), no
    shared expert."""
    model = _qwen3(layers, hidden, heads, kv_heads, 0)
    del model["ffn_hidden"]
    return dict(model, moe_layers=layers, experts=experts, top_k=top_k, expert_ffn_hidden=width)



def _deepseek(layers: int, hidden: int, heads: int, vocab: int, dense_layers: int, ffn: int,
              experts: int, shared: int, top_k: int, width: int, q_lora_rank: int) -> dict:
    """A DeepSeek-V2/V3 flavor: MLA (kv_lora_rank 512, per-head query/key 128 +
    64 RoPE, value 128), the first `dense_layers` dense, then routed experts and
    `shared` shared experts of the routed width (torchtitan's shared FFN of
    width x shared)."""
    return dict(layers=layers, hidden=hidden, heads=heads, ffn_hidden=ffn, vocab=vocab,
                moe_layers=layers - dense_layers, experts=experts, shared_experts=shared,
                top_k=top_k, expert_ffn_hidden=width, gated=True, tied_embeddings=False,
                attention="mla", q_lora_rank=q_lora_rank, kv_lora_rank=512, qk_head_dim=128,
                qk_rope_head_dim=64, v_head_dim=128)


def _gpt_oss(layers: int, experts: int) -> dict:
    """A GPT-OSS flavor: width 2880, 64 query and 8 key/value heads of 64, attention
    sinks, the even layers a 128-token sliding window (torchtitan's window_size
    (127, 0): 127 tokens back and the token itself), routed experts of width 2880
    in every layer, 4 a token, no shared expert."""
    return dict(layers=layers, hidden=2880, heads=64, kv_heads=8, head_dim=64,
                vocab=GPT_OSS_VOCAB, gated=True, tied_embeddings=False, moe_layers=layers,
                experts=experts, top_k=4, expert_ffn_hidden=2880, window_layers=layers // 2,
                window=128, attention_sinks=True)


# (model.name, model.flavor) -> a codesign model preset, or the flavor's [model]
# keys restated from torchtitan's model args (pytorch/torchtitan at commit
# b5bcd76c66d0acb1a08b176d9639425bc55e0b2a: torchtitan/models/qwen3/__init__.py
# `qwen3_configs`, torchtitan/models/deepseek_v3/__init__.py `deepseekv3_configs`,
# torchtitan/models/gpt_oss/__init__.py `gptoss_configs`; the 0.6B, 1.7B and 4B
# Qwen3 tie the embeddings, the others do not)
FLAVORS = {
    ("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b",
    ("llama3", "405B"): "llama3-405b",
    ("qwen3", "0.6B"): _qwen3(28, 1024, 16, 8, 3072, tied=True),
    ("qwen3", "1.7B"): _qwen3(28, 2048, 16, 8, 6144, tied=True),
    ("qwen3", "4B"): _qwen3(36, 2560, 32, 8, 9728, tied=True),
    ("qwen3", "8B"): _qwen3(36, 4096, 32, 8, 12288),
    ("qwen3", "14B"): _qwen3(40, 5120, 40, 8, 17408),
    ("qwen3", "32B"): _qwen3(64, 5120, 64, 8, 25600),
    ("qwen3", "30B-A3B"): _qwen3_moe(48, 2048, 32, 4, 128, 8, 768),
    ("qwen3", "235B-A22B"): _qwen3_moe(94, 4096, 64, 4, 128, 8, 1536),
    ("deepseek_v3", "16B"): _deepseek(27, 2048, 16, DEEPSEEK_V2_VOCAB, 1, 10944, 64, 2, 6, 1408,
                                      q_lora_rank=0),
    ("deepseek_v3", "236B"): _deepseek(60, 5120, 128, DEEPSEEK_V2_VOCAB, 1, 12288, 160, 2, 6,
                                       1536, q_lora_rank=1536),
    ("deepseek_v3", "671B"): _deepseek(61, 7168, 128, DEEPSEEK_V3_VOCAB, 3, 18432, 256, 1, 8,
                                       2048, q_lora_rank=1536),
    ("gpt_oss", "20b"): _gpt_oss(24, 32), ("gpt_oss", "120b"): _gpt_oss(36, 128),
}
# pipeline_parallel_schedule (lower case) -> parallel.schedule
SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved1f1b": "interleaved",
             "looped_bfs": "interleaved", "interleavedzerobubble": "zero_bubble",
             "zbvzerobubble": "zero_bubble", "dualpipev": "dualpipe"}
# the tables whose unread keys are listed as ignored
PLAN_TABLES = ("parallelism", "activation_checkpoint", "float8", "experimental")

# ------------------------------------------------------------------ the config registry
# pytorch/torchtitan at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21).
# The dataclass defaults of the sections codesign reads, by their command-line names:
# torchtitan/config/configs.py `TrainingConfig`, `ParallelismConfig`, `CompileConfig`
# (every field: any other key of these sections is not an option); `activation_checkpoint`
# is the policy Trainer.Config defaults to (torchtitan/trainer.py: SelectiveAC.Config),
# named as its command-line subcommand (`activation_checkpoint:full`,
# torchtitan/distributed/activation_checkpoint.py `ActivationCheckpointingConfig`).
DEFAULTS = {
    "training": {
        "num_tokens_per_microbatch_per_dp_rank": 16384, "num_tokens_per_train_step": -1,
        "max_context_length": 2048, "max_norm": 1.0, "steps": 10000,
        "enable_cpu_offload": False, "disable_cuda_graphs": False, "dtype": "float32",
        "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32",
        "gc_freq": 50, "gc_debug": False},
    "parallelism": {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1,
        "fsdp_reshard_after_forward": "default", "enable_fsdp_symm_mem": False,
        "tensor_parallel_degree": 1, "enable_sequence_parallel": True,
        "spmd_backend": "spmd_types", "pipeline_parallel_degree": 1,
        "module_fqns_per_model_part": None, "pipeline_parallel_first_stage_less_layers": 1,
        "pipeline_parallel_last_stage_less_layers": 1,
        "pipeline_parallel_layers_per_stage": None, "pipeline_parallel_schedule": "1F1B",
        "pipeline_parallel_schedule_csv": "", "num_pp_microbatches": 1,
        "context_parallel_degree": 1, "context_parallel_load_balancer": "headtail",
        "context_parallel_ptrr_mask_key": None, "expert_parallel_degree": 1},
    "compile": {"enable": False, "enable_async_tensor_parallel": False,
                "components": ["model", "loss"], "backend": "inductor"},
    "activation_checkpoint": {"mode": "selective"},
}
# the other fields and sections of Trainer.Config (torchtitan/trainer.py): options
# codesign does not read
OTHER_FIELDS = ("hf_assets_path", "dump_folder")
OTHER_SECTIONS = ("profiler", "metrics", "tokenizer", "dataloader", "optimizer", "lr_scheduler",
                  "checkpoint", "comm", "validator", "debug", "override", "loss",
                  "activation_checkpoint")
# the activation-checkpointing subcommands codesign reads (memory-budget it does not)
CHECKPOINTING = ("selective", "full", "none")
# run_train.sh's environment words, and the launcher itself
LAUNCHER = ("NGPU", "MODULE", "CONFIG")
# The entries: (--module, --config) -> ((model.name, flavor), the values the function
# sets over DEFAULTS). torchtitan/models/<module>/config_registry.py; `model.converters`
# (not a command-line option: the model spec's) names its converter classes.
_LLAMA3_8B = {"training.num_tokens_per_microbatch_per_dp_rank": 1 * 8192,
              "training.max_context_length": 8192, "training.steps": 1000,
              "activation_checkpoint.mode": "selective"}
_LLAMA3_BIG = {"training.max_context_length": 8192, "parallelism.tensor_parallel_degree": 8,
               "activation_checkpoint.mode": "full"}
_QWEN3_SMALL = {"training.num_tokens_per_microbatch_per_dp_rank": 4 * 4096,
                "training.max_context_length": 4096, "activation_checkpoint.mode": "selective"}
_QWEN3_BIG = {"training.max_context_length": 4096, "training.steps": 3000,
              "parallelism.data_parallel_shard_degree": -1,
              "parallelism.tensor_parallel_degree": 1, "parallelism.context_parallel_degree": 1,
              "parallelism.pipeline_parallel_degree": 1, "activation_checkpoint.mode": "full"}
_DEEPSEEK_V3 = {"training.num_tokens_per_microbatch_per_dp_rank": 4 * 4096,
                "training.max_context_length": 4096, "training.disable_cuda_graphs": True,
                "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
                "activation_checkpoint.mode": "selective", "compile.enable": True,
                "compile.components": ["loss"]}
_DEEPSEEK_V3_16B = {**_DEEPSEEK_V3, "training.steps": 1000,
                    "parallelism.expert_parallel_degree": 8}
_DEEPSEEK_V3_671B = {**_DEEPSEEK_V3, "training.steps": 10000,
                     "parallelism.expert_parallel_degree": 2}
_GPT_OSS = {"training.num_tokens_per_microbatch_per_dp_rank": 1 * 8192,
            "training.max_context_length": 8192, "training.steps": 10000,
            "parallelism.expert_parallel_degree": 1, "activation_checkpoint.mode": "full"}
REGISTRY = {
    ("llama3", "llama3_8b"): (("llama3", "8B"), _LLAMA3_8B),
    ("llama3", "llama3_8b_mxfp8"): (("llama3", "8B"), {
        **_LLAMA3_8B, "compile.enable": True, "compile.components": ["model"],
        "model.converters": ["MXFP8LinearConverter"]}),
    ("llama3", "llama3_70b"): (("llama3", "70B"), {
        **_LLAMA3_BIG, "training.num_tokens_per_microbatch_per_dp_rank": 8 * 8192,
        "training.steps": 1000}),
    ("llama3", "llama3_405b"): (("llama3", "405B"), {
        **_LLAMA3_BIG, "training.num_tokens_per_microbatch_per_dp_rank": 2 * 8192,
        "training.steps": 3000, "compile.enable": True,
        "compile.enable_async_tensor_parallel": True,
        "model.converters": ["Float8LinearConverter"]}),
    ("qwen3", "qwen3_0_6b"): (("qwen3", "0.6B"), {**_QWEN3_SMALL, "training.steps": 10}),
    ("qwen3", "qwen3_1_7b"): (("qwen3", "1.7B"), {**_QWEN3_SMALL, "training.steps": 100}),
    ("qwen3", "qwen3_14b"): (("qwen3", "14B"), {
        **_QWEN3_BIG, "training.num_tokens_per_microbatch_per_dp_rank": 4 * 4096}),
    ("qwen3", "qwen3_30b_a3b"): (("qwen3", "30B-A3B"), {
        **_QWEN3_BIG, "training.num_tokens_per_microbatch_per_dp_rank": 2 * 4096}),
    ("qwen3", "qwen3_32b"): (("qwen3", "32B"), {
        **_QWEN3_BIG, "training.num_tokens_per_microbatch_per_dp_rank": 2 * 4096}),
    ("qwen3", "sft_qwen3_8b_math"): (("qwen3", "8B"), {
        "training.num_tokens_per_microbatch_per_dp_rank": 1 * 2048,
        "training.max_context_length": 2048, "training.steps": 180,
        "activation_checkpoint.mode": "selective"}),
    ("deepseek_v3", "deepseek_v3_16b"): (("deepseek_v3", "16B"), _DEEPSEEK_V3_16B),
    ("deepseek_v3", "deepseek_v3_16b_hybridep"): (("deepseek_v3", "16B"), {
        **_DEEPSEEK_V3_16B, "training.disable_cuda_graphs": False}),
    ("deepseek_v3", "deepseek_v3_671b"): (("deepseek_v3", "671B"), _DEEPSEEK_V3_671B),
    ("deepseek_v3", "deepseek_v3_671b_float8"): (("deepseek_v3", "671B"), {
        **_DEEPSEEK_V3_671B,
        "model.converters": ["Float8LinearConverter", "Float8GroupedExpertsConverter"]}),
    ("gpt_oss", "gpt_oss_20b"): (("gpt_oss", "20b"), _GPT_OSS),
    ("gpt_oss", "gpt_oss_120b"): (("gpt_oss", "120b"), _GPT_OSS),
}
# converters whose GEMMs are codesign's fp8 recipe: tensor-wise float8 (the old job
# file's "float8"), and MXFP8's block-scaled float8 (said as an assumption)
FLOAT8 = ("float8", "Float8LinearConverter")
MXFP8 = ("MXFP8LinearConverter",)


def torchtitan(text: str, where: str, *, gpus: int | None = None,
               system: dict | None = None) -> c.Imported:
    """The scenario of a torchtitan job TOML."""
    t = c.Tree(_kinds.parsed("torchtitan", text, where, lambda text, _: files.parse_toml(
        text, f"torchtitan job file {where!r}")), where)
    d = _job(t, gpus, system)
    d.ignored += [k for table in PLAN_TABLES for k in t.unread(table)]
    return d.done()


def torchtitan_words(words: list[str], *, gpus: int | None = None,
                     system: dict | None = None) -> c.Imported:
    """The scenario of a torchtitan job as its command line gives it: one path
    ending in .toml (or naming a file) is an old job file (a file of another kind:
    one line naming it); else a registry entry (`--module M --config
    C`, or run_train.sh's `MODULE=M CONFIG=C NGPU=N`) and its `--section.key value`
    overrides, over the entry's values over torchtitan's dataclass defaults."""
    if len(words) == 1 and (words[0].endswith(".toml") or (
            not words[0].startswith("-") and "=" not in words[0] and Path(words[0]).is_file())):
        text = files.read_text(words[0], "torchtitan job file")
        return torchtitan(text, words[0], gpus=gpus, system=system)
    launcher, overrides = _command_line(words)
    entry = (_module(launcher.get("MODULE")), launcher.get("CONFIG"))
    where = f"torchtitan --module {entry[0]} --config {entry[1]}"
    if entry not in REGISTRY:
        known = "; ".join(f"{m} {f}" for m, f in REGISTRY)
        raise ValueError(f"{where} is not a registry entry codesign knows ({known})")
    if gpus is None and "NGPU" in launcher:
        gpus = c.whole(where, "NGPU", launcher["NGPU"])
    (name, flavor), values = REGISTRY[entry]
    tree = {s: dict(body) for s, body in DEFAULTS.items()}
    tree["model"] = {"name": name, "flavor": flavor}
    given = dict.fromkeys([*values, *overrides])
    for key, value in {**values, **overrides}.items():
        section, _, field = key.partition(".")
        if section in tree:  # the others codesign does not read
            tree[section][field] = value
    t = c.Tree(tree, where)
    d = _job(t, gpus, system)
    d.ignored += [k for k in given if k not in t.read]
    return d.done()


def _module(name: str | None) -> str | None:
    """--module's short name: torchtitan.models.M and its .config_registry are M."""
    if name is None:
        return None
    return name.removesuffix(".config_registry").removeprefix("torchtitan.models.")


def _command_line(words: list[str]) -> tuple[dict, dict]:
    """({MODULE, CONFIG, NGPU}: value, {section.key: value}) of torchtitan's words:
    --module and --config (or run_train.sh's environment), then the overrides as
    tyro reads them: `--section.key value` or `=value` (dashes as underscores), a
    boolean bare (`--section.no_key` to turn it off), `activation_checkpoint:POLICY`."""
    launcher: dict = {}
    overrides: dict = {}
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, value = word.partition("=")
        nxt = words[i + 1] if i + 1 < len(words) else None
        if flag in LAUNCHER and eq:
            launcher[flag] = value
        elif word.endswith("run_train.sh"):
            pass
        elif flag in ("--module", "--config"):
            if not eq:
                if nxt is None:
                    raise ValueError(f"torchtitan: {flag} needs a value")
                value, i = nxt, i + 1
            launcher[flag[2:].upper()] = value
        elif word.replace("-", "_").startswith("activation_checkpoint:"):
            policy = word.split(":", 1)[1]
            if policy not in CHECKPOINTING:
                raise c.bad("torchtitan", "activation_checkpoint", policy, "is not a policy "
                            f"codesign reads ({', '.join(CHECKPOINTING)})")
            overrides["activation_checkpoint.mode"] = policy
        elif flag.startswith("--"):
            key, value, used = _override(flag[2:].replace("-", "_"), eq, value, nxt)
            overrides[key] = value
            i += used
        else:
            raise ValueError(f"torchtitan: {c.shown(word)} is not a torchtitan option "
                             "(--module M --config C, then --section.key value overrides)")
        i += 1
    for name in ("MODULE", "CONFIG"):
        if name not in launcher:
            raise ValueError(f"torchtitan: --{name.lower()} is required (--module llama3 "
                             "--config llama3_8b)")
    return launcher, overrides


def _override(key: str, eq: str, value: str, nxt: str | None) -> tuple[str, object, int]:
    """(key, value, the following words it took) of `--key`: a field of DEFAULTS'
    sections (a boolean a bare flag, `no_` its negation; any other needs its value),
    or of a Trainer.Config field or section codesign does not read (its value the
    next word unless that is another option)."""
    section, _, field = key.partition(".")
    fields = DEFAULTS.get(section, {}) if section != "activation_checkpoint" else {}
    negated = field.startswith("no_") and isinstance(fields.get(field[3:]), bool)
    field = field[3:] if negated else field
    if fields:
        if field not in fields:
            raise ValueError(f"torchtitan: --{key} is not an option of torchtitan's "
                             f"{section} ({', '.join(fields)})")
        if isinstance(fields[field], bool):
            if eq:
                raise c.bad("torchtitan", f"--{key}", value, "takes no value: a boolean is "
                            f"--{section}.{field} or --{section}.no_{field}")
            return f"{section}.{field}", not negated, 0
    elif not (section in OTHER_FIELDS and not field or section in OTHER_SECTIONS and field):
        raise ValueError(f"torchtitan: --{key} is not a torchtitan option (--SECTION.KEY of "
                         f"{', '.join(dict.fromkeys([*DEFAULTS, *OTHER_SECTIONS]))}; "
                         f"--{', --'.join(OTHER_FIELDS)})")
    if eq:
        return key, value, 0
    if nxt is not None and (fields or not nxt.startswith("--")):
        return key, nxt, 1
    if fields:
        raise ValueError(f"torchtitan: --{key} needs a value")
    return key, True, 0


def _job(t: c.Tree, gpus: int | None, system: dict | None) -> c.Draft:
    """The Draft of torchtitan's job values, read from `t` (an old job TOML, or a
    registry entry's values over its dataclass defaults: the same keys where the
    two agree, the registry's token counts where they do not)."""
    d = c.Draft("torchtitan", t.where)
    name, flavor = str(t.get("model.name", default="")), str(t.get("model.flavor", default=""))
    model = FLAVORS.get((name, flavor))
    if model is None:
        known = "; ".join(f"{n} {f}" for n, f in FLAVORS)
        raise ValueError(f"{t.where}: model.name={name!r} model.flavor={flavor!r} is not a "
                         f"flavor codesign knows ({known})")
    if isinstance(model, str):
        d.put("model.preset", model)
        layers = int(workload.model(model).layers)
    else:
        for key, value in model.items():
            d.put(f"model.{key}", value)
        layers = model["layers"]
    seq = t.count("training.seq_len", "training.max_context_length")
    d.given("model.seq_len", seq, SEQ_LEN, "no training.seq_len (torchtitan's default)")
    degree = lambda k: t.count(f"parallelism.{k}", f"experimental.{k}", default=1)  # noqa: E731
    tp, pp, cp = (degree(f"{k}_parallel_degree") for k in ("tensor", "pipeline", "context"))
    ep, replicate = degree("expert_parallel_degree"), degree("data_parallel_replicate_degree")
    shard = _shard(t, d, gpus, tp * pp * cp * replicate)
    dp = shard * replicate
    _batches(t, d, seq or SEQ_LEN, pp, dp)
    d.put("training.recompute", _recompute(t, d))
    d.put("training.dtype", _dtype(t, d))
    for key, value in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("dp", dp)):
        d.put(f"parallel.{key}", value)
    etp = t.count("parallelism.expert_tensor_parallel_degree")
    if ep > 1 and tp > 1:  # the experts' own TP: 1 (none on the experts) or tp
        d.given("parallel.etp", etp, 1,
                "no parallelism.expert_tensor_parallel_degree (torchtitan's default)")
    if pp > 1:
        _schedule(t, d, layers, pp)
    # torchtitan's TP shards norms by sequence unless enable_sequence_parallel is off
    d.put("parallel.sequence_parallel",
          tp > 1 and t.flag("parallelism.enable_sequence_parallel", default=True))
    d.put("training.stack", "pytorch")  # FSDP2, torchao's float8, async TP on copy engines
    if tp > 1 and t.flag("parallelism.enable_async_tensor_parallel",
                         "experimental.enable_async_tensor_parallel",
                         "compile.enable_async_tensor_parallel"):
        d.put("parallel.tp_overlap", 1.0)  # async TP: the collectives hide under the GEMMs
    _cuda_graphs(t, d, pp)
    fsdp = shard * cp
    d.put("parallel.zero", 3 if fsdp > 1 else 0)
    if fsdp > 1 and replicate > 1:
        d.put("parallel.zero_shard_size", fsdp)  # HSDP: shards within, replicas across
    if fsdp > 1 and str(t.get("parallelism.fsdp_reshard_after_forward")) == "never":
        d.put("parallel.reshard_after_forward", False)
    c.system(d, system)
    c.tokens(d, t.count("training.steps"), "training.steps")
    return d


def _batches(t: c.Tree, d: c.Draft, seq: int, pp: int, dp: int) -> None:
    """training.micro_batch and global_batch (sequences). An old job file gives
    local_batch_size per data-parallel rank (pipeline_parallel_microbatch_size
    under pp) and global_batch_size (-1: local x dp); the registry gives tokens:
    num_tokens_per_microbatch_per_dp_rank per micro-batch (num_pp_microbatches of
    them under pp) and num_tokens_per_train_step (-1: all of them x dp), each a
    whole number of max_context_length sequences, the step's a multiple of the ranks'."""
    tokens = t.count("training.num_tokens_per_microbatch_per_dp_rank")
    if tokens is not None:
        micro = _sequences(t, "training.num_tokens_per_microbatch_per_dp_rank", tokens, seq)
        local = micro * (t.count("parallelism.num_pp_microbatches", default=1) if pp > 1 else 1)
        step = t.count("training.num_tokens_per_train_step", lo=-1, default=-1)
        batch = step if step == -1 else _sequences(t, "training.num_tokens_per_train_step",
                                                   step, seq)
        if batch != -1 and batch % (local * dp):
            raise c.bad(t.where, "training.num_tokens_per_train_step", step, f"must be a "
                        f"multiple of the tokens of a micro-batch step: {local * seq} per "
                        f"data-parallel rank x dp {dp}")
    else:
        local = t.count("training.local_batch_size", "training.batch_size")
        if local is None:
            d.assume("training.micro_batch", LOCAL_BATCH, "no training.local_batch_size "
                     "(torchtitan's default)")
            local = LOCAL_BATCH
        batch = t.count("training.global_batch_size", lo=-1, default=-1)  # -1: local x dp
        micro = t.count("parallelism.pipeline_parallel_microbatch_size", default=1) \
            if pp > 1 else local
    d.put("training.micro_batch", micro)
    d.put("training.global_batch", local * dp if batch == -1 else batch)


def _sequences(t: c.Tree, key: str, tokens: int, seq: int) -> int:
    """`tokens` as whole sequences of max_context_length `seq`."""
    if tokens % seq:
        raise c.bad(t.where, key, tokens, f"is not a whole number of sequences of "
                    f"training.max_context_length {seq}")
    return tokens // seq


def _cuda_graphs(t: c.Tree, d: c.Draft, pp: int) -> None:
    """training.cuda_graphs: the registry captures each forward+backward in a CUDA
    graph unless training.disable_cuda_graphs (an old job file says nothing)."""
    disabled = t.flag("training.disable_cuda_graphs")
    if disabled is None:
        return
    if not disabled and pp > 1:
        raise c.bad(t.where, "training.disable_cuda_graphs", False, f"with "
                    f"pipeline_parallel_degree {pp}: torchtitan captures no CUDA graph under "
                    "pipeline parallelism (--training.disable_cuda_graphs)")
    d.put("training.cuda_graphs", "none" if disabled else "iteration")

def _shard(t: c.Tree, d: c.Draft, gpus: int | None, rest: int) -> int:
    """data_parallel_shard_degree; -1 (the default) takes the GPUs the others leave."""
    shard = t.get("parallelism.data_parallel_shard_degree", default=-1)
    if str(shard) != "-1":
        if gpus is not None:
            d.put("system.gpus", gpus)
        return c.whole(t.where, "parallelism.data_parallel_shard_degree", shard)
    total = gpus if gpus is not None else -(-GPUS // rest) * rest
    if total % rest:
        raise ValueError(f"--gpus={total} is not a multiple of tensor x pipeline x context x "
                         f"data_parallel_replicate degrees = {rest}")
    if gpus is None:
        d.assume("system.gpus", total, "data_parallel_shard_degree -1 takes the GPUs the "
                 f"launcher gives: run_train.sh's NGPU {GPUS}, in whole groups of tp x pp x "
                 f"cp x data_parallel_replicate = {rest} (--gpus N)")
    return total // rest


def _recompute(t: c.Tree, d: c.Draft) -> str:
    mode = t.get("activation_checkpoint.mode")
    if mode is None:
        d.assume("training.recompute", "selective",
                 "no activation_checkpoint.mode (torchtitan's default)")
        return "selective"
    recompute = c.recompute(t.where, "activation_checkpoint.mode", mode)
    option = str(t.get("activation_checkpoint.selective_ac_option", default="op"))
    if isinstance(recompute, strategies.SelectiveRecompute) and option.isdigit():
        d.assume("training.recompute", recompute.name, f"selective_ac_option {option} "
                 f"recomputes every {option}th layer whole; codesign models it as selective")
    return recompute.name


def _dtype(t: c.Tree, d: c.Draft) -> str:
    """fp8 with a Float8 converter (MXFP8's as an assumption); else
    mixed_precision_param (bf16 by default) and, reduced in bf16, the gradients' width."""
    converters = t.get("model.converters", default=[])
    if not isinstance(converters, (list, str)):
        raise c.bad(t.where, "model.converters", converters, "must list converters "
                    '(such as ["float8"])')
    if any(k in converters for k in FLOAT8) or t.flag("float8.enable_float8_linear",
                                                      default=False):
        return "fp8"
    mx = next((k for k in MXFP8 if k in converters), None)
    if mx is not None:
        d.assume("training.dtype", "fp8", f"{mx}: MXFP8's block-scaled float8 GEMMs as "
                 "codesign's fp8 recipe")
        return "fp8"
    param = str(t.get("training.mixed_precision_param", "parallelism.mixed_precision_param",
                      default="bfloat16"))
    reduce = str(t.get("training.mixed_precision_reduce", "parallelism.mixed_precision_reduce",
                       default="float32"))
    if reduce == "bfloat16":
        d.put("training.grad_reduce_dtype", "bf16")
    return "fp32" if param == "float32" else "bf16"


def _schedule(t: c.Tree, d: c.Draft, layers: int, pp: int) -> None:
    name = str(t.get("parallelism.pipeline_parallel_schedule",
                     "experimental.pipeline_parallel_schedule", default="1F1B"))
    schedule = SCHEDULES.get(name.lower())
    if schedule is None:
        raise c.bad(t.where, "parallelism.pipeline_parallel_schedule", name,
                    f"is not a schedule codesign knows ({', '.join(SCHEDULES)})")
    d.put("parallel.schedule", schedule)
    if not strategies.schedule(schedule).interleaves:
        return
    per_stage = t.count("parallelism.pipeline_parallel_layers_per_stage")
    if per_stage is None:
        d.assume("parallel.interleave", 2, f"{name} without pipeline_parallel_layers_per_stage")
    elif layers % (pp * per_stage):
        raise ValueError(f"{t.where}: parallelism.pipeline_parallel_layers_per_stage="
                         f"{per_stage} must divide the model's {layers} layers / "
                         f"pipeline_parallel_degree {pp}")
    else:
        d.put("parallel.interleave", layers // (pp * per_stage))
