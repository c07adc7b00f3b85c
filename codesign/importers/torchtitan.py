"""torchtitan job TOMLs: the model is a codesign preset named by the job's
flavor; the plan is torchtitan's FSDP2 (ZeRO-3 over the data-parallel shard
degree x cp, HSDP replicas as `zero_shard_size`) with sequence-parallel tensor
parallelism."""

from __future__ import annotations

import tomllib

from .. import strategies, workload
from . import _common as c

GPUS = 8  # torchtitan's run_train.sh default NGPU
SEQ_LEN = 2048  # torchtitan's default training.seq_len
LOCAL_BATCH = 8  # torchtitan's default training.local_batch_size
# (model.name, model.flavor) -> codesign model preset
FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b",
           ("llama3", "405B"): "llama3-405b", ("deepseek_v3", "671B"): "deepseek-v3"}
# pipeline_parallel_schedule (lower case) -> parallel.schedule
SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved1f1b": "interleaved",
             "looped_bfs": "interleaved", "interleavedzerobubble": "zero_bubble",
             "zbvzerobubble": "zero_bubble", "dualpipev": "dualpipe"}
# the tables whose unread keys are listed as ignored
PLAN_TABLES = ("parallelism", "activation_checkpoint", "float8", "experimental")


def torchtitan(text: str, where: str, *, gpus: int | None = None,
               system: dict | None = None) -> c.Imported:
    """The scenario of a torchtitan job TOML."""
    try:
        t = c.Tree(tomllib.loads(text), where)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"torchtitan job file {where!r} is not valid TOML: {e}") from None
    d = c.Draft("torchtitan", where)
    name, flavor = str(t.get("model.name", default="")), str(t.get("model.flavor", default=""))
    preset = FLAVORS.get((name, flavor))
    if preset is None:
        known = "; ".join(f"{n} {f}" for n, f in FLAVORS)
        raise ValueError(f"{where}: model.name={name!r} model.flavor={flavor!r} is not a "
                         f"flavor codesign knows ({known})")
    d.put("model.preset", preset)
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
    if pp > 1:
        _schedule(t, d, preset, pp)
    d.put("parallel.sequence_parallel", tp > 1)  # torchtitan's TP shards norms by sequence
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
    if "float8" in converters or t.flag("float8.enable_float8_linear", default=False):
        return "fp8"
    param = str(t.get("training.mixed_precision_param", "parallelism.mixed_precision_param",
                      default="bfloat16"))
    reduce = str(t.get("training.mixed_precision_reduce", "parallelism.mixed_precision_reduce",
                       default="float32"))
    if reduce == "bfloat16":
        d.put("training.grad_reduce_dtype", "bf16")
    return "fp32" if param == "float32" else "bf16"


def _schedule(t: c.Tree, d: c.Draft, preset: str, pp: int) -> None:
    name = str(t.get("parallelism.pipeline_parallel_schedule",
                     "experimental.pipeline_parallel_schedule", default="1F1B"))
    schedule = SCHEDULES.get(name.lower())
    if schedule is None:
        raise c.bad(t.where, "parallelism.pipeline_parallel_schedule", name,
                    f"is not a schedule codesign knows ({', '.join(SCHEDULES)})")
    d.put("parallel.schedule", schedule)
    if not strategies.schedule(schedule).interleaves:
        return
    layers = int(workload.model(preset).layers)
    per_stage = t.count("parallelism.pipeline_parallel_layers_per_stage")
    if per_stage is None:
        d.assume("parallel.interleave", 2, f"{name} without pipeline_parallel_layers_per_stage")
    elif layers % (pp * per_stage):
        raise ValueError(f"{t.where}: parallelism.pipeline_parallel_layers_per_stage="
                         f"{per_stage} must divide the model's {layers} layers / "
                         f"pipeline_parallel_degree {pp}")
    else:
        d.put("parallel.interleave", layers // (pp * per_stage))
