"""torchtitan job TOMLs: the model is the job's flavor (a codesign preset, or
the flavor's shape restated from torchtitan's model args); the plan is
torchtitan's FSDP2 (ZeRO-3 over the data-parallel shard degree x cp, HSDP
replicas as `zero_shard_size`) with sequence-parallel tensor parallelism."""

from __future__ import annotations

from .. import _files, strategies, workload
from . import _common as c

GPUS = 8  # torchtitan's run_train.sh default NGPU
SEQ_LEN = 2048  # torchtitan's default training.seq_len
LOCAL_BATCH = 8  # torchtitan's default training.local_batch_size
QWEN3_VOCAB, DEEPSEEK_V2_VOCAB, DEEPSEEK_V3_VOCAB = 151936, 102400, 129280


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


# (model.name, model.flavor) -> a codesign model preset, or the flavor's [model]
# keys restated from torchtitan's model args (pytorch/torchtitan at commit
# b5bcd76c66d0acb1a08b176d9639425bc55e0b2a: torchtitan/models/qwen3/__init__.py
# `qwen3_configs`, torchtitan/models/deepseek_v3/__init__.py `deepseekv3_configs`;
# the 0.6B, 1.7B and 4B Qwen3 tie the embeddings, the others do not)
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
}
# pipeline_parallel_schedule (lower case) -> parallel.schedule
SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved1f1b": "interleaved",
             "looped_bfs": "interleaved", "interleavedzerobubble": "zero_bubble",
             "zbvzerobubble": "zero_bubble", "dualpipev": "dualpipe"}
# the tables whose unread keys are listed as ignored
PLAN_TABLES = ("parallelism", "activation_checkpoint", "float8", "experimental")


def torchtitan(text: str, where: str, *, gpus: int | None = None,
               system: dict | None = None) -> c.Imported:
    """The scenario of a torchtitan job TOML."""
    t = c.Tree(_files.parse_toml(text, f"torchtitan job file {where!r}"), where)
    d = c.Draft("torchtitan", where)
    name, flavor = str(t.get("model.name", default="")), str(t.get("model.flavor", default=""))
    model = FLAVORS.get((name, flavor))
    if model is None:
        known = "; ".join(f"{n} {f}" for n, f in FLAVORS)
        raise ValueError(f"{where}: model.name={name!r} model.flavor={flavor!r} is not a "
                         f"flavor codesign knows ({known})")
    if isinstance(model, str):
        d.put("model.preset", model)
        layers = int(workload.model(model).layers)
    else:
        for key, value in model.items():
            d.put(f"model.{key}", value)
        layers = model["layers"]
    d.given("model.seq_len", t.count("training.seq_len"), SEQ_LEN,
            "no training.seq_len (torchtitan's default)")
    degree = lambda k: t.count(f"parallelism.{k}", f"experimental.{k}", default=1)  # noqa: E731
    tp, pp, cp = (degree(f"{k}_parallel_degree") for k in ("tensor", "pipeline", "context"))
    ep, replicate = degree("expert_parallel_degree"), degree("data_parallel_replicate_degree")
    shard = _shard(t, d, gpus, tp * pp * cp * replicate)
    local = t.count("training.local_batch_size", "training.batch_size")
    if local is None:
        d.assume("training.micro_batch", LOCAL_BATCH, "no training.local_batch_size "
                 "(torchtitan's default)")
        local = LOCAL_BATCH
    dp = shard * replicate
    batch = t.count("training.global_batch_size", lo=-1, default=-1)  # -1: local x dp
    micro = t.count("parallelism.pipeline_parallel_microbatch_size", default=1) \
        if pp > 1 else local
    d.put("training.micro_batch", micro)
    d.put("training.global_batch", local * dp if batch == -1 else batch)
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
    d.put("parallel.sequence_parallel", tp > 1)  # torchtitan's TP shards norms by sequence
    d.put("training.stack", "pytorch")  # FSDP2, torchao's float8, async TP on copy engines
    if tp > 1 and t.flag("parallelism.enable_async_tensor_parallel",
                         "experimental.enable_async_tensor_parallel"):
        d.put("parallel.tp_overlap", 1.0)  # async TP: the collectives hide under the GEMMs
    fsdp = shard * cp
    d.put("parallel.zero", 3 if fsdp > 1 else 0)
    if fsdp > 1 and replicate > 1:
        d.put("parallel.zero_shard_size", fsdp)  # HSDP: shards within, replicas across
    if fsdp > 1 and str(t.get("parallelism.fsdp_reshard_after_forward")) == "never":
        d.put("parallel.reshard_after_forward", False)
    c.system(d, system)
    c.tokens(d, t.count("training.steps"), "training.steps")
    d.ignored += [k for table in PLAN_TABLES for k in t.unread(table)]
    return d.done()


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
    """fp8 with the Float8 converter; else mixed_precision_param (bf16 by default)
    and, reduced in bf16, the gradients' width."""
    converters = t.get("model.converters", default=[])
    if not isinstance(converters, (list, str)):
        raise c.bad(t.where, "model.converters", converters, "must list converters "
                    '(such as ["float8"])')
    if "float8" in converters or t.flag("float8.enable_float8_linear", default=False):
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
