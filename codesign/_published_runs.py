"""The published end-to-end figures `codesign validate` sets the model beside:
each `Check` is one number with its source, the scenario tables that
reproduce the published configuration (the assumptions where the publication
is silent, said once per set) and whether it calibrates a model constant.
`validate` evaluates and summarises them."""

from __future__ import annotations

from . import scenario as scenario_lib
from ._figures import COLLECTIVE_MEASURES as COLLECTIVE_MEASURES
from ._figures import MEASURES as MEASURES
from ._figures import TIME_MEASURES as TIME_MEASURES
from ._figures import Check
from ._published_collectives import nccl_log, nccl_vendor
from .model import plan as plan_lib
from .model import stacks


def _narayanan(params_b, heads, hidden, layers, tp, pp, gpus, batch, tflops, calibration=False):
    """A row of Narayanan et al. 2021, Table 1 (seq 2048, vocab 51,200, A100s,
    full recomputation, fp16); micro-batch 1 and the 1F1B schedule are ours."""
    return Check(
        f"Megatron {params_b}B on {gpus} A100 (tp {tp}, pp {pp})",
        "Narayanan et al. 2021, Table 1", "hardware_tflops_per_gpu", tflops,
        {"model": {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": 2048,
                   "vocab": 51200, "attention_kernel": "naive", "dropout": True},
         "training": {"global_batch": batch, "micro_batch": 1, "recompute": "full",
                      "dtype": "fp16"},
         "parallel": {"tp": tp, "pp": pp},
         "system": {"preset": "dgx-a100", "gpus": gpus}},
        calibration=calibration,
        note="sets the A100 matmul_efficiency" if calibration
        else "micro-batch 1 and 1F1B assumed (not in the table)")


def _mt_nlg(nodes, seconds):
    return Check(
        f"MT-NLG 530B on {nodes * 8} A100 (tp 8, pp 35)", "Smith et al. 2022, Table 2",
        "step_time_s", seconds,
        {"model": {"preset": "megatron-530b"},
         "training": {"global_batch": 1920, "micro_batch": 1, "recompute": "full",
                      "dtype": "bf16", "stack": "deepspeed"},
         "parallel": {"tp": 8, "pp": 35},
         "system": {"preset": "dgx-a100", "gpus": nodes * 8}},
        note="micro-batch 1, 1F1B and bf16 assumed; the same model at the same tp and pp "
             "reaches 163 TFLOP/s in Narayanan et al. 2021: MT-NLG's software stack "
             "(Megatron-DeepSpeed) ran slower than the model's Megatron-LM reading")


def _llama3(gpus, cp, dp_batch, seq, mfu):
    dp = gpus // (8 * 16 * cp)
    return Check(
        f"Llama 3 405B on {gpus} H100 (tp 8, cp {cp}, pp 16, seq {seq})",
        "Dubey et al. 2024, Table 4", "mfu", mfu,
        {"model": {"preset": "llama3-405b", "seq_len": seq},
         "training": {"global_batch": dp_batch * dp, "micro_batch": 1, "recompute": "none"},
         "parallel": {"tp": 8, "pp": 16, "cp": cp, "schedule": "interleaved",
                      "interleave": 4, "zero": 1, "sequence_parallel": True},
         "system": {"preset": "dgx-h100", "gpus": gpus, "topology": "clos",
                    "pod_size": 3072, "oversubscription": 7}},
        note="MFU convention not stated: Meta's torchtitan's (6N + 12 L H Q T per token, "
             "the full s x s attention) assumed; no recomputation, "
             "interleaving 4 assumed; the model's memory says this plan does not fit "
             "80 GB without recomputation")


# --------------------------------------------------- runs of 2023-2025 stacks
# Each set copies a published table (source named with the repository and the
# commit it was read at); where the source is silent the set makes ONE
# assumption for all its rows, said in each row's note; nothing is tuned per row.
_NEMO_PERF = ("NVIDIA NeMo 24.07 performance summary (NVIDIA/NeMo "
              "docs/source/performance/performance_summary.md at 9c5c5e97, Pretraining "
              "table, DGX-H100); architectures from NeMo-Megatron-Launcher's training "
              "yamls (GPT-3, Nemotron) and NeMo's llama.py")
_NEMO_LONG = ("NVIDIA NeMo long-sequence performance (NVIDIA/NeMo "
              "docs/source/performance/performance_long_sequence.md at 8cfedd72, "
              "LLAMA2-7B (FP8) - H100, the CP columns)")
_FOUNDRY = ("MosaicML llm-foundry MPT training benchmarks (mosaicml/llm-foundry "
            "scripts/train/benchmarking/README.md at 8c8dd48f; architectures from its "
            "scripts/train/yamls/pretrain/mpt-*.yaml)")
_MCORE_MOE = ("Megatron-Core MoE README (NVIDIA/Megatron-LM "
              "megatron/core/transformer/moe/README.md at 0b981f9c): 438 TFLOPS headline "
              "and the Reference Best Parallel Mapping table; architecture from "
              "yanring/Megatron-MoE-ModelZoo Mixtral-8x7B.yaml")
# Megatron / NeMo recipe as the sources state or imply: Megatron's distributed
# optimizer (ZeRO-1 over dp x cp), sequence parallelism with tp, the
# interleaved schedule where vp > 1, flash attention, no dropout.
_MEGATRON_ASSUMED = ("recompute none (not printed; one assumption for every NeMo and "
                     "Megatron-Core row)")
# model architectures the NeMo tables name: (layers, hidden, heads, kv_heads,
# ffn_hidden, vocab, gated, tied embeddings)
_NEMO_MODELS = {
    # GPT-3 shapes from the launcher yamls (ffn 4h); vocab 51,200 and tied
    # embeddings as Megatron's GPT runs (assumption: the table prints neither)
    "GPT3-5B": (24, 4096, 32, 32, 16384, 51200, False, True),
    "GPT3-20B": (44, 6144, 48, 48, 24576, 51200, False, True),
    "GPT3-175B": (96, 12288, 96, 96, 49152, 51200, False, True),
    # Llama 2 (Touvron et al. 2023: vocab 32,000, SwiGLU, untied)
    "LLAMA2-7B": (32, 4096, 32, 32, 11008, 32000, True, False),
    "LLAMA2-13B": (40, 5120, 40, 40, 13824, 32000, True, False),
    "LLAMA2-70B": (80, 8192, 64, 8, 28672, 32000, True, False),
    # Llama 3 (Dubey et al. 2024, Table 3: vocab 128,256)
    "LLAMA3-8B": (32, 4096, 32, 8, 14336, 128256, True, False),
    "LLAMA3-70B": (80, 8192, 64, 8, 28672, 128256, True, False),
    # Nemotron-4 340B (NVIDIA 2024 report: vocab 256,000, squared-ReLU MLP, untied)
    "Nemotron-340B": (96, 18432, 96, 8, 73728, 256000, False, False),
}


def _nemo_model(name: str, seq_len: int) -> dict:
    layers, hidden, heads, kv, ffn, vocab, gated, tied = _NEMO_MODELS[name]
    return {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
            "ffn_hidden": ffn, "vocab": vocab, "seq_len": seq_len, "gated": gated,
            "tied_embeddings": tied}


# NeMo 24.07's table does not say whether TP communication overlapped the GEMMs;
# NVIDIA's performance recipes for its models turn Transformer Engine's
# userbuffers on (one assumption for the set; tp > 1 rows only)
_NEMO_TP_OVERLAP = (
    "TP communication hidden under the GEMMs (parallel.tp_overlap 1; not printed: "
    "NVIDIA's performance recipes set it, NeMo-Megatron-Launcher's gpt3/"
    "175b_fp8_performance.yaml, 20b_fp8_performance.yaml, llama/llama3_70b.yaml and "
    "nemotron/nemotron_340b.yaml ub_tp_comm_overlap: True, NeMo 2.0's gpt3_175b and "
    "llama3_70b performance recipes tp_comm_overlap=True; its llama2_70b.yaml leaves it "
    "off, as it leaves fp8 off)")


def _megatron_parallel(gpus, tp, pp, cp, vp, ep=1, dtype="fp8", tp_overlap=0.0) -> dict:
    """Megatron-Core's plan: the distributed optimizer (ZeRO-1), its default
    gradient bucket (`plan.megatron_bucket_bytes`), TP communication hidden
    under the GEMMs by `tp_overlap` (Transformer Engine's userbuffers)."""
    out = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "zero": 1, "sequence_parallel": tp > 1,
           "dp_bucket_bytes": plan_lib.megatron_bucket_bytes(dtype, gpus / (tp * pp))}
    if tp > 1 and tp_overlap:
        out["tp_overlap"] = tp_overlap
    if vp > 1:
        out |= {"schedule": "interleaved", "interleave": vp}
    return out


def _nemo(model, gpus, gbs, mbs, seq, tp, pp, cp, vp, tokens_per_s_per_gpu, why=""):
    """A row of NeMo 24.07's FP8 pre-training table (DGX H100); `why`: what the
    model's memory says of the plan when it does not fit."""
    return Check(
        f"NeMo 24.07 {model} FP8 on {gpus} H100 (tp {tp}, pp {pp}, cp {cp}, vp {vp})",
        _NEMO_PERF, "tokens_per_s_per_gpu", tokens_per_s_per_gpu,
        {"model": _nemo_model(model, seq),
         "training": {"global_batch": gbs, "micro_batch": mbs, "recompute": "none",
                      "dtype": "fp8"},
         "parallel": _megatron_parallel(gpus, tp, pp, cp, vp, tp_overlap=1.0),
         "system": {"preset": "dgx-h100", "gpus": gpus}},
        note=f"{_MEGATRON_ASSUMED}; " + (f"{_NEMO_TP_OVERLAP}; " if tp > 1 else "") + (
            "GPT-3's vocabulary 51,200 and tied embeddings assumed (not printed)"
            if model.startswith("GPT3") else "vocabulary from the model's own report")
        + why)


_FP32_GRADIENTS = ("; does not fit the model's 80 GB: {} with Megatron's fp32 gradient "
                   "buffer (the bf16 recipe's default); the source prints neither the "
                   "gradient width nor recomputation")


def _nemo_long(seq_k, gpus, gbs, tp, dp, cp, tflops):
    """A row of NeMo's long-sequence table: Llama 2 7B FP8 with context parallelism."""
    return Check(
        f"NeMo Llama 2 7B FP8 seq {seq_k}K on {gpus} H100 (tp {tp}, dp {dp}, cp {cp})",
        _NEMO_LONG, "model_tflops_per_gpu", tflops,
        {"model": _nemo_model("LLAMA2-7B", seq_k * 1024),
         "training": {"global_batch": gbs, "micro_batch": 1, "recompute": "none",
                      "dtype": "fp8"},
         "parallel": _megatron_parallel(gpus, tp, 1, cp, 1),
         "system": {"preset": "dgx-h100", "gpus": gpus}},
        note=f"micro-batch 1 (not printed; one assumption for the set); "
             f"{_MEGATRON_ASSUMED}; TP communication not hidden (not printed; Llama 2 "
             "7B's recipes, NeMo-Megatron-Launcher's llama/llama2_7b.yaml and NeMo 2.0's "
             "llama2_7b performance recipe, leave it off); TFLOPS taken as model FLOPs "
             "over the whole s x s attention (NeMo 24.07's Llama 2 7B row, 780 model "
             "TFLOP/s at 16,934 tokens/s, is 46.1 GFLOP per token: that count)")


# MPT (MosaicML): GPT-style decoder, GeLU MLP 4h, ALiBi, tied embeddings, vocab 50,368
_MPT = {"1b": (24, 2048, 16), "7b": (32, 4096, 32), "13b": (40, 5120, 40),
        "30b": (48, 7168, 56), "70b": (80, 8192, 64)}


def _foundry(size, seq, gpus, chip, mbs, gbs, fsdp, ac, mp, tokens_per_s_per_gpu,
             calibration=False):
    """A row of llm-foundry's MPT benchmark tables (PyTorch FSDP, BF16);
    `calibration`: one of `H100_GEMM_ROWS`."""
    layers, hidden, heads = _MPT[size]
    training = {"global_batch": gbs, "micro_batch": mbs,
                "recompute": "full" if ac else "none", "dtype": "bf16", "stack": "pytorch"}
    if mp == "PURE":  # FSDP mixed precision PURE: gradients reduced in bf16
        training["grad_reduce_dtype"] = "bf16"
    system = {"preset": "dgx-h100" if chip.startswith("h100") else "dgx-a100", "gpus": gpus}
    if chip == "a100_40gb":  # NVIDIA A100 datasheet: 40 GB of HBM2 at 1,555 GB/s
        system |= {"hbm_bytes": 40e9, "hbm_Bps": 1.555e12}
    return Check(
        f"llm-foundry MPT-{size} seq {seq} on {gpus} {chip} ({fsdp}, AC {ac})",
        _FOUNDRY, "tokens_per_s_per_gpu", tokens_per_s_per_gpu,
        {"model": {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq,
                   "vocab": 50368},
         "training": training,
         "parallel": {"zero": 3 if fsdp == "FULL_SHARD" else 2},
         "system": system},
        calibration=calibration,
        note=("with the other H100_GEMM_ROWS, sets the H100-class sustained "
              "matmul_efficiency; " if calibration else "")
        + "pure FSDP (dp = GPUs) as the table has no TP/PP columns; FULL_SHARD = ZeRO-3, "
          "SHARD_GRAD_OP = ZeRO-2, AC = full recomputation; Adam assumed")


# torchtitan's H100 benchmarks (the PyTorch team, end of 2024): Llama 3.1 under
# FSDP2, TP (async), PP and CP, BF16 or torchao Float8 with torch.compile; every
# fact is the table's or its train_configs', the set's assumptions said once in
# `_TORCHTITAN_ASSUMED`.
TORCHTITAN_SOURCE = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md at "
                     "b5bcd76c (results of torchtitan 9dec370, 2024-12-26; TPS/GPU read at "
                     "step 90); train_configs/llama3_*.toml at 9dec370")
_TORCHTITAN_ASSUMED = (
    "the 96 GB HBM2e H100 at 500 W as grand-teton-h100 (its clocks FBGEMM's 500 W GEMMs' "
    "share of the 700 W part's); the BF16 rows ran eager (no torch.compile), modelled with "
    "the compiled rows' fusions; FSDP2 as "
    "ZeRO-3 over dp (reshard after forward unless pp > 1, torchtitan's default), gradients "
    "reduced in fp32 (FSDP2's default reduce_dtype); torchao Float8 linears as the fp8 "
    "recipe under the pytorch stack (each input cast from bf16); selective activation "
    "checkpointing as codesign's selective recomputation; pipeline micro-batches of 1 "
    "sequence (pipeline_parallel_microbatch_size's default), Interleaved 1F1B with 2 "
    "stages a rank")


def _torchtitan(size, gpus, fsdp, tp, pp, cp, local, seq, fp8, recompute, published,
                interleave=1):
    """A row of torchtitan's H100 benchmark tables (TPS/GPU)."""
    parallel = {"tp": tp, "pp": pp, "cp": cp, "dp": fsdp, "zero": 3 if fsdp > 1 else 0,
                "sequence_parallel": tp > 1}
    if fsdp > 1 and pp > 1:
        parallel["reshard_after_forward"] = False
    if tp > 1:
        parallel["tp_overlap"] = 1.0  # AsyncTP: the TP collectives under the GEMMs
    micro = 1 if pp > 1 else local
    if interleave > 1:  # Interleaved 1F1B; pp > 1 otherwise runs 1F1B, the default
        parallel |= {"schedule": "interleaved", "interleave": interleave}
    training = {"global_batch": local * fsdp, "micro_batch": micro, "recompute": recompute,
                "dtype": "fp8" if fp8 else "bf16", "grad_reduce_dtype": "fp32",
                "stack": "pytorch"}
    plan = f"FSDP {fsdp}, TP {tp}, PP {pp}" + (f", CP {cp}" if cp > 1 else "") + (
        ", interleaved" if interleave > 1 else ", 1f1b" if pp > 1 else "")
    return Check(
        f"torchtitan Llama 3.1 {size} {'Float8' if fp8 else 'BF16'} seq {seq} on {gpus} "
        f"H100 ({plan})", TORCHTITAN_SOURCE, "tokens_per_s_per_gpu", published,
        {"model": {"preset": f"llama3-{size.lower()}", "seq_len": seq},
         "training": training, "parallel": parallel,
         "system": {"preset": "grand-teton-h100", "gpus": gpus}},
        note=_TORCHTITAN_ASSUMED)


# MaxText's MFU tables on TPU v5p and v5e (end of 2023): its synthetic decoders
# (global_parameter_scale over base.yml: relu MLP, MHA with 256-wide heads,
# vocabulary 32,768) under FSDP x TP in one slice.
MAXTEXT_SOURCE = ("google/maxtext MaxText/configs/v5p/README.md and v5e/README.md at 76bd53b0 "
                  "(2023-12-15); shapes from base.yml and pyconfig.py's scales, batches from "
                  "configs/v5p/*.sh and v5e/*.sh at that commit; MFU as train.py counts it "
                  "(6 N per token with embeddings, causal attention)")
_MAXTEXT_ASSUMED = (
    "MaxText's MFU read as codesign's causal MFU (its 6 N counts the input embedding too: "
    "~1% more FLOPs); FSDP as ZeRO-3 over dp, one micro-batch a step (no gradient "
    "accumulation), TP communication hidden under the GEMMs (XLA's collective matmul); "
    "remat_policy minimal as selective recomputation, full as full; the slice a torus of "
    "its chips (v5p: the most cube-like shape; v5e: the 16 x 16 pod)")


def _maxtext(size, chip, chips, fsdp, tp, per_device, layers, hidden, heads, ffn, remat,
             mfu):
    """A row of MaxText's TPU MFU tables (one slice, FSDP x TP)."""
    model = {"layers": layers, "hidden": hidden, "heads": heads, "head_dim": 256,
             "ffn_hidden": ffn, "vocab": 32768, "seq_len": 2048, "gated": False,
             "tied_embeddings": True}  # logits_via_embedding: the source's parameter count
    return Check(
        f"MaxText {size} on {chips} TPU {chip} (FSDP {fsdp}, TP {tp})", MAXTEXT_SOURCE,
        "mfu_causal", mfu,
        {"model": model,
         "training": {"global_batch": per_device * chips, "micro_batch": per_device * tp,
                      "recompute": remat, "dtype": "bf16", "stack": "xla"},
         "parallel": {"tp": tp, "dp": fsdp, "zero": 3, "tp_overlap": 1.0 if tp > 1 else 0.0},
         "system": {"preset": f"tpu-{chip}", "gpus": chips, "scale_up_domain": chips}},
        note=_MAXTEXT_ASSUMED)


# Megatron-Bridge 25.11's performance table (GB200 and H100), the 2025-26 MoE
# models with the recipes' settings; every fact below is read in the source
# named or in the recipe files it names, and the set's assumptions are said once
# in `_BRIDGE_ASSUMED`.
BRIDGE_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at 00b7660b (25.11 "
           "NeMo container, Pre-Training; typo fixes 5776a6d9 change no number); shapes "
           "from src/megatron/bridge/models/*/*_provider.py, recipe facts from "
           "scripts/performance/configs/ and src/megatron/bridge/recipes/")
BRIDGE_GB300_SOURCE = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at 00b7660b (25.11 NeMo container, "
    "Pre-Training, System: DGX-GB300); shapes and recipe facts as the 25.11 set's, the "
    "configs' GB300 entries")
_BRIDGE_ASSUMED = (
    "recompute as the recipe sets it (none unless said); the distributed optimizer "
    "(ZeRO-1; ZeRO-3 where the table prints FSDP: Megatron FSDP); gradients reduced in "
    "bf16 (grad_reduce_in_fp32 False in the performance scripts); MoE routing "
    "force-balanced (the table's footnote: moe_imbalance 1); MXFP8 and NVFP4 as "
    "training.fp8_recipe mxfp8 / nvfp4 where a 2026 row names them, the 25.11 rows' FP8-CS per "
    "tensor and their FP8-MX (GB200's DeepSeek-V3 and Qwen3-30B-A3B) mxfp8; the "
    "table's GBS and MBS where the workload config differs")
# (layers, hidden, heads, kv_heads, head_dim, ffn, vocab, seq_len, MoE
# (moe_layers, experts, top_k, expert width, shared experts), extra model keys)
_BRIDGE_MODELS = {
    # Llama3ModelProvider8B / 70B, Llama31ModelProvider405B (SwiGLU, untied,
    # vocab 128,256 unpadded)
    "Llama3-8B": (32, 4096, 32, 8, 0, 14336, 128256, 8192, None, {}),
    "Llama3-70B": (80, 8192, 64, 8, 0, 28672, 128256, 8192, None, {}),
    "Llama3.1-405B": (126, 16384, 128, 8, 0, 53248, 128256, 8192, None, {}),
    # DeepSeekV3ModelProvider: codesign's deepseek-v3 preset (the table's rows run
    # without MTP)
    "DeepSeek-V3": None,
    # GPTOSSProvider120B: kv_channels 64, a 128-token sliding window on every other
    # layer (window_attn_skip_freq 2), attention sinks
    "GPT-OSS-120B": (36, 2880, 64, 8, 64, 2880, 201088, None, (36, 128, 4, 2880, 0),
                     {"window_layers": 18, "window": 128, "attention_sinks": True}),
    # Qwen3MoEModelProvider30B_A3B / 235B_A22B: kv_channels 128, qk_layernorm
    "Qwen3-30B-A3B": (48, 2048, 32, 4, 128, 6144, 151936, 4096, (48, 128, 8, 768, 0), {}),
    "Qwen3-235B-A22B": (94, 4096, 64, 4, 128, 12288, 151936, 4096, (94, 128, 8, 1536, 0), {}),
}


def _bridge_model(name: str, seq: int) -> dict:
    spec = _BRIDGE_MODELS[name]
    if spec is None:
        return {"preset": "deepseek-v3", "seq_len": seq}
    layers, hidden, heads, kv, head_dim, ffn, vocab, seq_len, moe, extra = spec
    out = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
           "head_dim": head_dim, "ffn_hidden": ffn, "vocab": vocab, "seq_len": seq,
           "gated": True, "tied_embeddings": False, **extra}
    if moe is not None:
        out |= dict(zip(("moe_layers", "experts", "top_k", "expert_ffn_hidden",
                         "shared_experts"), moe, strict=True))
    return out


def _bridge(model, chip, gpus, dtype, gbs, mbs, seq, tp, pp, cp, vp, ep, published, note,
            fsdp=False, recompute="none", tp_overlap=0.0, ep_overlap=False, etp=0,
            offload_layers=0, dispatcher=None, graph_scope=None, release="25.11",
            source=BRIDGE_SOURCE, label=None, software=None):
    """A row of Megatron-Bridge's pre-training table (tokens/s/GPU) of `release`
    (25.11 unless said; `source` names its table, `label` the precision as the
    table prints it). An MoE row's routing is dropless: its dispatcher's host
    synchronisations are charged (`training.host_syncs`); `dispatcher` and
    `graph_scope` (Transformer Engine's partial CUDA graphs over those regions)
    where the row's note names them from the release's configs; `software`:
    the release's other flags as scenario keys ({"training": {...},
    "parallel": {...}}, set last)."""
    parallel = _megatron_parallel(gpus, tp, pp, cp, vp, ep=ep, dtype=dtype,
                                  tp_overlap=tp_overlap)
    if etp:
        parallel["etp"] = etp
    if fsdp:
        parallel["zero"] = 3
    if ep_overlap:
        parallel["ep_overlap"] = True
    training = {"global_batch": gbs, "micro_batch": mbs, "recompute": recompute,
                "dtype": dtype, "grad_reduce_dtype": "bf16"}
    if offload_layers:
        training["offload_layers"] = offload_layers
    if _BRIDGE_MODELS[model] is None or _BRIDGE_MODELS[model][8] is not None:
        training["moe_imbalance"] = 1.0
        training["host_syncs"] = True
    if dispatcher is not None:
        parallel["moe_dispatcher"] = dispatcher
    if graph_scope is not None:
        training |= {"cuda_graphs": "partial", "cuda_graph_scope": graph_scope}
    training |= (software or {}).get("training", {})
    parallel |= (software or {}).get("parallel", {})
    plan = f"tp {tp}, pp {pp}" + (f", cp {cp}" if cp > 1 else "") + (
        f", vp {vp}" if vp > 1 else "") + (f", ep {ep}" if ep > 1 else "") + (
        f", etp {etp}" if etp else "") + (
        ", FSDP" if fsdp else "")
    preset = {"GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "H100": "dgx-h100"}[chip]
    return Check(
        f"Megatron-Bridge {release} {model} {label or dtype.upper()} on {gpus} {chip} ({plan}, "
        f"mbs {mbs})", source, "tokens_per_s_per_gpu", published,
        {"model": _bridge_model(model, seq), "training": training, "parallel": parallel,
         "system": {"preset": preset, "gpus": gpus}},
        note=f"{_BRIDGE_ASSUMED}; {note}")


# ------------------------------------- the software that runs MoE (2026 releases)
# The same plans across Megatron-Bridge's releases, matched runs of one plan
# with one flag changed, and Megatron-Core's DeepSeek-V3 log on GB200: each row
# written with its own release's flags as scenario keys (`parallel.moe_dispatcher`,
# `training.cuda_graphs` and its scope, `training.moe_router_fusion`,
# `training.moe_capacity_factor` with `moe_pad_experts`, `parallel.ep_overlap`,
# the precision recipe); a flag no key expresses is named in the row's note.
# Predictions: nothing is fitted to them.
_MBRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
BRIDGE_2608_SOURCE = (
    f"Megatron-Bridge 26.08 performance summary ({_MBRIDGE} docs/performance-summary.md at "
    "067f987d, the same table as 4ab94dfa, '26.08 NeMo Container', Pre-Training); recipe flags "
    "from src/megatron/bridge/perf_recipes/ at 067f987d and PR #4211 (55443cbf)")
BRIDGE_2606_SOURCE = (
    f"Megatron-Bridge 26.06 performance summary ({_MBRIDGE} docs/performance-summary-archive.md "
    "at 067f987d, '26.06 NeMo Container', Pre-Training); recipe flags from "
    "src/megatron/bridge/recipes/llama/ at 067f987d")
BRIDGE_26041_SOURCE = (
    f"Megatron-Bridge 26.04.01 performance summary ({_MBRIDGE} "
    "docs/performance-summary-archive.md at 067f987d, '26.04.01 NeMo Container', Pre-Training)")
BRIDGE_SKILL_SOURCE = (
    f"Megatron-Bridge's matched MoE runs ({_MBRIDGE} skills/nemo-mbridge-perf-moe-comm-overlap/"
    "SKILL.md and skills/nemo-mbridge-perf-moe-hardware-configs/SKILL.md at 067f987d, "
    "2026-07-25; also docs/training/moe-optimization.md)")
AUTOMODEL_SOURCE = (
    "NeMo Automodel's DeepEP against HybridEP benchmark (NVIDIA-NeMo/Automodel "
    "docs/deepep_vs_hybridep_benchmark.md at 18007663, 2026-07-22, sections 4.1 and 4.2)")
_DSV3_GUIDE = ("NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/"
               "deepseek-v3-gb200-optimization.md at eb0783b6")
MCORE_DSV3_GUIDE_SOURCE = (
    f"Megatron-Core's DeepSeek-V3 on GB200, the end of its optimisation log ({_DSV3_GUIDE}, "
    "section 3's table, last row; flags from deepseek-v3-gb200-reproduce-guide.md on dev at "
    "d48bd6be)")
MCORE_DSV3_STEPS_SOURCE = (
    f"Megatron-Core's DeepSeek-V3 on GB200, the optimisation log's steps ({_DSV3_GUIDE}, "
    "section 3's table, rows 1-12, and sections 1-2 for each step's flags)")
# validate's sets of the 2026 software (name -> the source its rows share)
SETS = {"bridge_2511": BRIDGE_SOURCE, "bridge_26041_gb200": BRIDGE_26041_SOURCE,
        "bridge_2606_gb200": BRIDGE_2606_SOURCE, "bridge_2608_gb200": BRIDGE_2608_SOURCE,
        "bridge_skill_h100": BRIDGE_SKILL_SOURCE, "automodel_h100": AUTOMODEL_SOURCE,
        "mcore_dsv3_gb200_guide": MCORE_DSV3_GUIDE_SOURCE,
        "mcore_dsv3_gb200_steps": MCORE_DSV3_STEPS_SOURCE,
        "bridge_2511_gb300": BRIDGE_GB300_SOURCE}

# PR #4211's MXFP8 recipe for Qwen3 on GB200 (26.06 on), as keys: the whole
# iteration one CUDA graph over padded experts at capacity 1.5 (static shapes:
# no host synchronisation left), HybridEP, router fusion, the CuTeDSL fused
# grouped MLP as one grouped kernel over the local experts, EP overlap
_FULL_ITERATION_MXFP8 = {
    "training": {"cuda_graphs": "full_iteration", "moe_pad_experts": True,
                 "moe_capacity_factor": 1.5, "moe_router_fusion": True,
                 "grouped_gemm_streams": stacks.EVERY_EXPERT, "host_syncs": False,
                 "delay_wgrad": True},
    "parallel": {"moe_dispatcher": "hybridep", "ep_overlap": True}}
_FULL_ITERATION_NOTE = (
    "PR #4211's MXFP8 recipe as keys: cuda_graphs full_iteration (was transformer_engine over "
    "moe_router, moe_preprocess), moe_pad_experts with moe_capacity_factor 1.5 "
    "(moe_expert_rank_capacity_factor; static shapes, so host_syncs off), HybridEP, "
    "moe_router_fusion, the CuTeDSL fused grouped MLP as one grouped kernel "
    "(grouped_gemm_streams: every local expert), EP overlap on with delay_wgrad_compute "
    "(training.delay_wgrad); no key for the paged stash "
    "(moe_paged_stash), the MLP fusion itself or FP8 dot-product attention (attention stays "
    "bf16)")
# VP 8 over PP 16 is 128 chunks of one layer: Megatron-Bridge counts the
# embedding and the loss as pipeline layers (126 + 2). The model's layers are
# the transformer layers (126 < 128 chunks is refused), so it runs VP 4: every
# stage still holds 8 layers at most, and the bubble at 384 micro-batches
# differs by (p - 1) / (v m) = 1.0% against 0.5%
_VP4 = {"parallel": {"interleave": 4}}
_VP8_OVER_126 = ("VP 8 x PP 16 = 128 one-layer chunks counts the embedding and the loss as "
                 "pipeline layers (126 + 2); the model's 126 transformer layers cannot fill 128 "
                 "chunks: run at VP 4 (8 layers a stage either way; the bubble 1.0% of the "
                 "step, not 0.5%)")
_NO_NVFP4 = ("NVFP4 as training.fp8_recipe nvfp4 (GB200's dense FP4 peak, 1 x 16 E4M3 "
             "scales, the Hadamard and amax passes), fp8's GEMM efficiency assumed for it")
# the fp8 recipe a row's precision label names (training.fp8_recipe; FP8-CS: tensorwise)
_RECIPE_OF_LABEL = {"MXFP8": "mxfp8", "NVFP4": "nvfp4"}


def _bridge_2026(release, model, gpus, label, gbs, mbs, seq, tp, pp, vp, ep, published, note,
                 **kw):
    """A row of Megatron-Bridge's 26.04.01-26.08 pre-training tables (GB200)."""
    source = {"26.04.01": BRIDGE_26041_SOURCE, "26.06": BRIDGE_2606_SOURCE,
              "26.08": BRIDGE_2608_SOURCE}[release]
    software = kw.pop("software", None) or {}
    if label in _RECIPE_OF_LABEL:
        software = {**software, "training": {**software.get("training", {}),
                                             "fp8_recipe": _RECIPE_OF_LABEL[label]}}
    return _bridge(model, "GB200", gpus, "fp8", gbs, mbs, seq, tp, pp, 1, vp, ep, published,
                   note, release=release, source=source, label=label, software=software, **kw)


def _qwen3_16_h100(published, ep_overlap):
    """Megatron-Bridge's matched Qwen3-30B-A3B runs on 16 H100 (BF16, EP 16,
    HybridEP with 32 SMs, Transformer Engine's graphs over the router and the
    preprocessing), with and without EP overlap."""
    overlap = "on" if ep_overlap else "off"
    return Check(
        f"Megatron-Bridge Qwen3-30B-A3B BF16 on 16 H100 (ep 16, HybridEP, EP overlap {overlap})",
        BRIDGE_SKILL_SOURCE, "tokens_per_s_per_gpu", published,
        {"model": _bridge_model("Qwen3-30B-A3B", 4096),
         "training": {"global_batch": 1024, "micro_batch": 1, "recompute": "none",
                      "dtype": "bf16", "grad_reduce_dtype": "bf16", "moe_imbalance": 1.0,
                      "host_syncs": True, "cuda_graphs": "partial",
                      "cuda_graph_scope": "moe_router,moe_preprocess"},
         "parallel": {**_megatron_parallel(16, 1, 1, 1, 1, ep=16, dtype="bf16"),
                      "moe_dispatcher": "hybridep", "moe_dispatcher_sms": 32,
                      "ep_overlap": ep_overlap},
         "system": {"preset": "dgx-h100", "gpus": 16}},
        note=(f"{_BRIDGE_ASSUMED}; tokens/s/GPU = 1024 x 4096 / step seconds / 16 (published "
              + ("20.14729 s, 299.352 model TFLOP/s: the canonical run, 64-token combine "
                 "chunks and permute fusion, not keys" if ep_overlap else
                 "24.7138 s, 244.039 model TFLOP/s: the matched A/B's EP-overlap-off run")
              + "); delay_wgrad_compute off (training.delay_wgrad false, as the comparison "
                "states); peak memory not compared"))


def _automodel(gpus, mbs, gbs, dispatcher, streams, published, step_s):
    """A row of NeMo Automodel's DeepEP / HybridEP benchmark: Qwen3-30B-A3B on
    H100 under PyTorch FSDP2 with EP over the data-parallel ranks."""
    return Check(
        f"NeMo Automodel Qwen3-30B-A3B on {gpus} H100 (FSDP2, ep {gpus}, {dispatcher}, "
        f"mbs {mbs})", AUTOMODEL_SOURCE, "tokens_per_s_per_gpu", published,
        {"model": _bridge_model("Qwen3-30B-A3B", 4096),
         "training": {"global_batch": gbs, "micro_batch": mbs,
                      "recompute": "full", "dtype": "bf16", "grad_reduce_dtype": "fp32",
                      "stack": "pytorch", "moe_imbalance": 1.0, "host_syncs": True,
                      "grouped_gemm_streams": streams},
         "parallel": {"ep": gpus, "zero": 3, "moe_dispatcher": dispatcher},
         "system": {"preset": "dgx-h100", "gpus": gpus}},
        note=(f"step {step_s} s (mean of 10 steps after warm-up), mock data, balanced gate "
              "(moe_imbalance 1); activation checkpointing ON, granularity not printed: full "
              "recomputation assumed; BF16 assumed ('TE attention/linear', no FP8 stated); "
              "FSDP2 as ZeRO-3 over dp, gradients reduced in fp32 (as torchtitan's set); "
              + ("experts gmm: one grouped kernel (grouped_gemm_streams: every local expert)"
                 if streams > 1 else "experts torch_mm: one GEMM per local expert at a time "
                 "(grouped_gemm_streams 1)")
              + "; no CUDA graphs stated (none); a different framework from Megatron-Bridge"))


# DeepSeek-V3 on 256 GB200 (Megatron-Core's log): one plan, TP 1, PP 8 x VP 4,
# EP 32 inside 32-GPU NVLink domains, MBS 1, GBS 2048, seq 4096, MXFP8, BF16
# Adam moments, forced load balancing; each step's flags on top of the last.
_DSV3_STEPS_ASSUMED = (
    "MXFP8 as training.fp8_recipe mxfp8; the PP layout Et|(tt|)*30L (61 layers over 32 "
    "virtual stages) as parallel.pipeline_layout; recomputation by module as the log names it "
    "(training.recompute_modules: mla_up_proj and mlp, the 3 dense layers' MLPs, from the "
    "baseline; moe_act and mlp from step 5 on); fp8-param-gather not a key "
    "(weights gathered in bf16); forced load balancing (moe_imbalance 1); dropless, the "
    "dispatcher's host synchronisations charged (host_syncs); the ranks not NUMA-bound before "
    "the bindpcie step (training.numa_binding false), Grace hosts (training.host grace, the "
    "gb200-nvl72 preset's)")
# (the log's step, published model TFLOP/s/GPU, the keys it changes (None:
# none does), what a mechanism for it would need where none is modelled)
DSV3_STEPS = (
    ("baseline (NCCL all-to-all, MLA up-projection recompute)", 494.46, {}, ""),
    ("fused MXFP8 scale allocation, permute rewrite", 529.55, None,
     "a key for TE PR 1927's fused allocation of the MXFP8 scales (the model counts four "
     "allocations per MXFP8 quantisation as host calls, the log's count before it) and the "
     "permute kernel's own speed (the model runs the permute as one pass at the HBM's "
     "bandwidth)"),
    ("router fusion", 540.00,
     {"training": {"moe_router_fusion": True}}, ""),
    ("DeepEP", 566.07,
     {"parallel": {"moe_dispatcher": "deepep"}}, ""),
    ("no MLA up-projection recompute", 610.71,
     {"training": {"recompute_modules": "moe_act,mlp"}}, ""),
    ("CUDA graphs over attn, router, preprocess", 663.27, {"training": {"cuda_graphs": "partial",
                           "cuda_graph_scope": "attn,moe_router,moe_preprocess"}}, ""),
    ("DeepEP tuned", 691.49, None,
     "the tuned settings (SMs, chunking) and DeepEP's bandwidth at EP 32 over multi-node "
     "NVLink, which the log does not publish"),
    ("NUMA binding (bindpcie)", 762.12, {"training": {"numa_binding": True}}, ""),
    ("PDL, fused MXFP8 scale swizzle", 797.67, None,
     "a gap between dependent kernels on the GPU (launch latency, prologue) that programmatic "
     "dependent launch hides, and the swizzle kernels' count: the model runs kernels back to "
     "back and does not count swizzles"),
    ("graphs capture the shared expert", 829.93, None,
     "a shared-expert region in training.cuda_graph_scope (the partial scope leaves it eager)"),
    ("HybridEP", 943.56,
     {"parallel": {"moe_dispatcher": "hybridep", "moe_dispatcher_sms": 32}}, ""),
    ("CPU-side optimisation 2", 956.21, None,
     "which host calls were removed and what each cost: unpublished"),
    ("MXFP8 quantisation fused into RMSNorm", 970.01, None,
     "a stack whose norm does not write fp8: the megatron stack's producers write their "
     "outputs quantised from the baseline on, so the model credits this step from step 1"),
)


# the log's steps around its NUMA binding (bindpcie alone): the two rows that set
# `stacks.NUMA_UNBOUND_FACTOR` (`NUMA_FIT_ROWS`)
_NUMA_FIT_STEPS = ("DeepEP tuned", "NUMA binding (bindpcie)")


def _dsv3_step(i: int) -> Check:
    """Step `i` (0-based) of the log: the flags of steps 0..i applied in order; the
    last step is the guide's row (its own set)."""
    training = {"global_batch": 2048, "micro_batch": 1, "recompute": "selective",
                "recompute_modules": "mla_up_proj,mlp",
                "dtype": "fp8", "fp8_recipe": "mxfp8", "optimizer_dtype": "bf16",
                "moe_imbalance": 1.0, "host_syncs": True, "numa_binding": False}
    parallel = _megatron_parallel(256, 1, 8, 1, 4, ep=32, dtype="fp8") | {
        "pipeline_layout": "Et|(tt|)*30L"}
    for _, _, keys, _ in DSV3_STEPS[:i + 1]:
        training |= (keys or {}).get("training", {})
        parallel |= (keys or {}).get("parallel", {})
    label, published, keys, need = DSV3_STEPS[i]
    last = i == len(DSV3_STEPS) - 1
    fits = label in _NUMA_FIT_STEPS
    return Check(
        f"Megatron-Core DeepSeek-V3 MXFP8 on 256 GB200, step {i + 1}: {label}",
        MCORE_DSV3_GUIDE_SOURCE if last else MCORE_DSV3_STEPS_SOURCE, "model_tflops_per_gpu",
        published,
        {"model": {"preset": "deepseek-v3", "seq_len": 4096}, "training": training,
         "parallel": parallel,
         "system": {"preset": "gb200-nvl72", "gpus": 256, "scale_up_domain": 32}},
        note=f"{_DSV3_STEPS_ASSUMED}; " + (
            f"no key for this step: a mechanism would need {need}" if keys is None
            else "keys of this step: " + ", ".join(
                f"{t}.{k} = {v}" for t, d in keys.items() for k, v in d.items())
            if keys else "the baseline: all-to-all dispatcher (NCCL), eager, no router fusion")
        + ("; the reproduce guide's launch: HybridEP 32 SMs, TE graphs attn, moe_router, "
           "moe_preprocess, router and permute fusion, bindpcie" if last else "")
        + ("; with the other row around the bindpcie step, sets stacks.NUMA_UNBOUND_FACTOR "
           "(the model's ratio of the two at the published one)" if fits else ""),
        calibration=fits)


_NEW_2026 = (
    # --- Megatron-Bridge 26.08 on GB200 (tokens/s/GPU)
    _bridge_2026("26.08", "DeepSeek-V3", 256, "MXFP8", 4096, 1, 4096, 1, 4, 4, 64, 4912,
                 "the recipe (deepseek/gb200/deepseek_v3.py fp8mx at 067f987d): recompute "
                 "selective (mla_up_proj), HybridEP, TE graphs over attn, moe_router, "
                 "moe_preprocess, EP overlap off, as 25.11's BF16 row; published 1276 model "
                 "TFLOP/s; the same plan gave 4256 in 26.04.01; without MTP",
                 recompute="selective", dispatcher="hybridep",
                 graph_scope="attn,moe_router,moe_preprocess",
                 software={"training": {"recompute_modules": "mla_up_proj"}}),
    _bridge_2026("26.08", "GPT-OSS-120B", 64, "MXFP8", 1280, 4, 4096, 1, 1, 1, 64, 28672,
                 "the recipe (perf_recipes/gpt_oss/gb200/gpt_oss.py "
                 "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config and common.py's "
                 "_apply_gpt_oss_120b_full_iter_fp8mx_configs, read in the stored version "
                 "3564acfd) is PR #4211's full-iteration recipe with HybridEP on 32 SMs and "
                 f"no recomputation: {_FULL_ITERATION_NOTE}; published 934 model TFLOP/s; "
                 "28947 in 26.06, 18304 in 26.06.01 (a cuDNN frontend regression)",
                 software={"training": _FULL_ITERATION_MXFP8["training"],
                           "parallel": {**_FULL_ITERATION_MXFP8["parallel"],
                                        "moe_dispatcher_sms": 32}}),
    _bridge_2026("26.08", "Qwen3-30B-A3B", 8, "MXFP8", 512, 4, 4096, 1, 1, 1, 8, 39936,
                 f"{_FULL_ITERATION_NOTE}; published 923 model TFLOP/s; the same plan was "
                 "26112 in 26.04.01 and 23766 in 25.11 (a row of the 25.11 set)",
                 software=_FULL_ITERATION_MXFP8),
    _bridge_2026("26.08", "Qwen3-235B-A22B", 256, "MXFP8", 8192, 1, 4096, 1, 8, 3, 32, 7280,
                 f"{_FULL_ITERATION_NOTE}; published 1077 model TFLOP/s; 5680 in 26.04.01; "
                 "94 layers over pp x vp = 24 chunks, uneven as Megatron splits them",
                 software=_FULL_ITERATION_MXFP8),
    # --- Megatron-Bridge 26.06 on GB200: Llama 3.1 405B in three precisions
    _bridge_2026("26.06", "Llama3.1-405B", 256, "FP8", 1536, 1, 8192, 4, 16, 4, 1, 843,
                 "FP8 per-tensor current scaling; TP overlap on (llama31.py); the same plan "
                 "gave 813 in 25.11 (a row of that set): no flag of this row's changed that a "
                 "key expresses; published 2129 model TFLOP/s", tp_overlap=1.0),
    _bridge_2026("26.06", "Llama3.1-405B", 256, "MXFP8", 1536, 1, 8192, 4, 16, 8, 1, 783,
                 f"MXFP8 as training.fp8_recipe mxfp8; TP overlap on; "
                 f"{_VP8_OVER_126}; published 1976 model TFLOP/s", tp_overlap=1.0,
                 software=_VP4),
    _bridge_2026("26.06", "Llama3.1-405B", 256, "NVFP4", 1536, 1, 8192, 4, 16, 8, 1, 1166,
                 f"{_NO_NVFP4}; TP overlap on; the NVFP4 variant sets cuda_graph_impl none; "
                 f"{_VP8_OVER_126}; published 2944 model TFLOP/s", tp_overlap=1.0,
                 software=_VP4),
    # --- Megatron-Bridge 26.04.01 on GB200
    _bridge_2026("26.04.01", "Llama3-70B", 64, "MXFP8", 256, 1, 8192, 2, 4, 5, 1, 3712,
                 "MXFP8 as training.fp8_recipe mxfp8; sequence parallel with TP 2; TP overlap on "
                 "(perf_recipes/llama/"
                 "gb200/llama3.py llama3_70b_pretrain_64gpu_gb200_fp8mx_config, read in the "
                 "stored version 3564acfd: userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192); no "
                 "CUDA graphs set; published 1664 model TFLOP/s",
                 tp_overlap=1.0),
    # --- Megatron-Bridge's matched runs of Qwen3-30B-A3B on 16 H100
    _qwen3_16_h100(13011, True),
    _qwen3_16_h100(10607, False),
    # --- NeMo Automodel on H100: DeepEP against HybridEP
    _automodel(8, 4, 128, "deepep", stacks.EVERY_EXPERT, 12211, 5.366),
    _automodel(8, 4, 128, "hybridep", stacks.EVERY_EXPERT, 12885, 5.085),
    _automodel(16, 2, 256, "deepep", 1.0, 11096, 5.906),
    _automodel(16, 2, 256, "hybridep", 1.0, 11976, 5.472),
    # --- Megatron-Core's DeepSeek-V3 on 256 GB200: the log's last step (its own
    # set) and its 12 steps before
    *(_dsv3_step(i) for i in range(len(DSV3_STEPS))),
)


# Megatron-Bridge 25.11 on DGX-GB300 (the same table's "System: DGX-GB300"
# section): three plans are the GB200 rows' own (Llama 3 8B and 70B, Qwen3-30B-A3B),
# the others differ in pp / ep / mbs; recipe flags from the same commit's
# scripts/performance/configs/*/*_workload_base_configs.py GB300 entries. What
# differs from GB200 is the chip (`presets._gb300_nvl72`): nothing here is fitted.
def _gb300(model, *args, **kwargs) -> Check:
    """A row of the 25.11 table's DGX-GB300 section (`_bridge` on GB300)."""
    return _bridge(model, "GB300", *args, source=BRIDGE_GB300_SOURCE, **kwargs)


_GB300_2511 = (
    _gb300("Llama3-8B", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 1, 37556,
           "CUDA graphs (full iteration) in the workload config, whose MBS 4 differs from "
           "the table's 2 (the table's used); 31508 on GB200 at the same plan"),
    _gb300("Llama3-70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 4520,
           "activation offload of 20 layers to the Grace CPU "
           "(LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_BASE_CONFIG cpu_offloading_num_layers; "
           "GB200's 40); 4312 on GB200 at the same plan", fsdp=True, offload_layers=20),
    _gb300("Llama3.1-405B", 256, "fp8", 1536, 1, 8192, 2, 8, 2, 4, 1, 999,
           "TP overlap on (tp_comm_overlap in llama31_405b_pretrain_config); the workload "
           "config (FSDP, TP 2, 10 layers offloaded) differs from the table's plan (the "
           "table's used)", tp_overlap=1.0),
    _gb300("DeepSeek-V3", 256, "bf16", 4096, 1, 4096, 1, 2, 1, 4, 32, 3848,
           "recompute_modules [moe_act] (memory-bound: none); HybridEP dispatcher; "
           "Transformer Engine's CUDA graphs over attn, moe_router, moe_preprocess; EP "
           "overlap off; without MTP; the workload config's PP 4 EP 64 GBS 2048 differ "
           "from the table's (the table's used)", dispatcher="hybridep",
           graph_scope="attn,moe_router,moe_preprocess"),
    _gb300("DeepSeek-V3", 256, "fp8", 4096, 1, 4096, 1, 2, 1, 4, 32, 4357,
           "as the BF16 row (one GB300 config for every precision); MXFP8 as fp8 per "
           "tensor, as the 25.11 GB200 rows", dispatcher="hybridep",
           graph_scope="attn,moe_router,moe_preprocess"),
    _gb300("GPT-OSS-120B", 64, "bf16", 1280, 2, 8192, 1, 1, 1, 1, 64, 18347,
           "no recompute modules on GB300; Transformer Engine's CUDA graphs over attn, "
           "moe_router, moe_preprocess (GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_BASE_CONFIG, "
           "whose MBS 4 differs from the table's 2: the table's used)",
           graph_scope="attn,moe_router,moe_preprocess"),
    _gb300("Qwen3-30B-A3B", 8, "fp8", 512, 4, 4096, 1, 1, 1, 1, 8, 28934,
           "HybridEP dispatcher and Transformer Engine's CUDA graphs over moe_router and "
           "moe_preprocess (QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_CS_BASE_CONFIG, whose "
           "MBS 8 differs from the table's 4: the table's used); 23766 on GB200 at the "
           "same plan", dispatcher="hybridep", graph_scope="moe_router,moe_preprocess"),
    _gb300("Qwen3-235B-A22B", 256, "bf16", 8192, 2, 4096, 1, 4, 1, 12, 16, 6131,
           "94 layers over pp x vp = 48 chunks, uneven as Megatron splits them; the "
           "workload config (64 GPUs, TP 2, EP 64, HybridEP, graphs over moe_router, "
           "moe_preprocess) is another plan: the table's used, its flags left out as the "
           "GB200 row leaves them"),
)


# the 25.11 table's FP8-MX (MXFP8) rows' recipe, as keys
_MX = {"training": {"fp8_recipe": "mxfp8"}}


CHECKS: tuple[Check, ...] = (
    # ------------------------------------------------------------ calibration
    _narayanan(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, calibration=True),
    Check("Megatron-LM 1.2B on one V100", "Shoeybi et al. 2019", "hardware_tflops_per_gpu",
          39.0, {"model": {"preset": "megatron-1.2b"},
                 "training": {"global_batch": 8, "micro_batch": 8, "recompute": "full",
                              "dtype": "fp16"},
                 "system": {"preset": "dgx-v100", "gpus": 1}},
          calibration=True, note="sets the V100 matmul_efficiency (batch 8 assumed)"),
    nccl_vendor("nccl-tests all-reduce, 8x H100 NVLink, ring", "dgx-h100", "ring",
                "scale_up", 8, 370.0, "sets the NVLink4 efficiency"),
    nccl_vendor("nccl-tests all-reduce, 8x H100 NVLink SHARP", "dgx-h100", "in_network",
                "scale_up", 8, 480.0, "sets the NVLS efficiency"),
    nccl_vendor("nccl-tests all-reduce, 8x A100 NVLink", "dgx-a100", "ring", "scale_up", 8,
                230.0, "sets the NVLink3 efficiency"),
    nccl_vendor("nccl-tests, one 400 Gb/s NDR NIC per GPU", "dgx-h100", "ring", "scale_out",
                16, 47.0, "sets the NIC efficiency (46-48 GB/s)"),
    # ------------------------------------------------------------ predictions
    # --- nccl-tests across nodes (all-reduce time)
    *(nccl_log("nccl-tests-309-qoofyk-2", "dgx-h100", 2, b, t) for b, t in (
        (8192, 32.12), (2**20, 71.93), (64 * 2**20, 466.1), (2**30, 4484.9))),
    *(nccl_log("nccl-tests-309-qoofyk-4", "dgx-h100", 4, b, t) for b, t in (
        (8192, 46.84), (2**20, 82.17), (64 * 2**20, 579.1), (2**30, 5808.8))),
    *(nccl_log("nccl-tests-309-gj-aion", "dgx-h100", nodes, b, t) for nodes, b, t in (
        (4, 2**20, 317.0), (4, 64 * 2**20, 624.1), (4, 2**30, 6460.4),
        (8, 2**20, 117.0), (8, 64 * 2**20, 718.1), (8, 2**30, 7370.5))),
    *(nccl_log("oci-hpc-oke", "dgx-a100", 2, b, t) for b, t in (
        (8192, 48.16), (2**20, 85.58), (64 * 2**20, 821.7), (2**30, 9187.8))),
    Check("Megatron-LM 8.3B on 512 V100 (tp 8, dp 64)", "Shoeybi et al. 2019",
          "aggregate_hardware_pflops", 15.1, scenario_lib.read("megatron-8.3b"),
          note="micro-batch 8 and full recomputation assumed"),
    _narayanan(1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    _narayanan(3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    _narayanan(7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    _narayanan(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    _narayanan(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    _narayanan(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    _narayanan(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    _narayanan(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    _narayanan(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    Check("GPT-3 175B on 1024 A100 (tp 8, pp 8)",
          "Narayanan et al. 2021, GPT-3 training-time estimate",
          "hardware_tflops_per_gpu", 140.0, scenario_lib.read("default"),
          note="interleaved schedule (2 chunks) assumed"),
    _mt_nlg(280, 60.1),
    _mt_nlg(350, 50.2),
    _mt_nlg(420, 44.4),
    _llama3(8192, 1, 32, 8192, 0.43),
    _llama3(16384, 1, 16, 8192, 0.41),
    _llama3(16384, 16, 16, 131072, 0.38),
    Check("DeepSeek-V3 pre-training, 14.8T tokens on 2048 H800",
          "DeepSeek-V3 technical report, Table 1", "gpu_hours", 2.664e6,
          scenario_lib.read("deepseek-v3"),
          note="final global batch 15,360 for the whole run (the batch-size ramp and "
               "the FP8 GEMMs' fine-grained scaling are not modelled)"),
    # --- NeMo 24.07 performance summary, FP8 on DGX H100 (tokens/s/GPU)
    _nemo("GPT3-5B", 64, 2048, 4, 2048, 1, 1, 1, 1, 23406),
    _nemo("GPT3-20B", 64, 256, 2, 2048, 2, 1, 1, 1, 5851,
          _FP32_GRADIENTS.format("10B parameters per GPU (tp 2, pp 1)")),
    _nemo("GPT3-175B", 128, 256, 1, 2048, 4, 8, 1, 6, 716),
    _nemo("GPT3-175B", 512, 2048, 2, 2048, 4, 8, 1, 6, 825),
    _nemo("LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 1, 16934),
    _nemo("LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 1, 10, 8715),
    _nemo("LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 1, 20, 1728),
    _nemo("LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 12273,
          "; over the model's 80 GB by less than its HBM reserve (2 GiB + 5%, an "
          "assumption): the fp32 gradient buffer of all 8B parameters (pp 1)"),
    _nemo("LLAMA3-70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1524),
    _nemo("Nemotron-340B", 128, 32, 1, 4096, 8, 8, 1, 12, 326,
          _FP32_GRADIENTS.format(
              "5.3B parameters per GPU (tp 8, pp 8), optimizer state sharded over dp 2 only,")),
    # --- NeMo long-sequence Llama 2 7B FP8 with context parallelism (TFLOP/s/GPU)
    _nemo_long(4, 4, 1024, 1, 4, 1, 768),
    _nemo_long(16, 16, 256, 2, 8, 1, 660),
    _nemo_long(32, 32, 128, 2, 8, 2, 610),
    _nemo_long(128, 128, 32, 4, 8, 4, 555),
    _nemo_long(512, 512, 8, 8, 4, 16, 549),
    _nemo_long(1024, 1024, 4, 8, 4, 32, 536),
    # --- llm-foundry MPT under PyTorch FSDP, BF16 (tokens/s/GPU)
    _foundry("70b", 2048, 512, "h100_80gb", 8, 4096, "FULL_SHARD", True, "DEFAULT", 1007,
             calibration=True),
    _foundry("70b", 2048, 128, "h100_80gb", 8, 1024, "FULL_SHARD", True, "DEFAULT", 1058,
             calibration=True),
    _foundry("30b", 2048, 512, "h100_80gb", 8, 4096, "FULL_SHARD", True, "DEFAULT", 2115,
             calibration=True),
    _foundry("13b", 2048, 512, "h100_80gb", 16, 8192, "FULL_SHARD", True, "DEFAULT", 4952,
             calibration=True),
    _foundry("7b", 2048, 512, "h100_80gb", 6, 3072, "FULL_SHARD", False, "DEFAULT", 9670),
    _foundry("1b", 2048, 512, "h100_80gb", 12, 6144, "SHARD_GRAD_OP", False, "DEFAULT",
             39837),
    _foundry("7b", 2048, 8, "h100_80gb", 6, 48, "FULL_SHARD", False, "DEFAULT", 10643),
    _foundry("7b", 8192, 8, "h100_80gb", 8, 128, "FULL_SHARD", True, "DEFAULT", 6935),
    _foundry("70b", 2048, 64, "a100_80gb", 8, 2048, "FULL_SHARD", True, "PURE", 410),
    _foundry("7b", 2048, 128, "a100_40gb", 18, 2304, "FULL_SHARD", True, "PURE", 3623),
    # --- Megatron-Core MoE: Mixtral 8x7B, BF16, 64 H100 (model TFLOP/s/GPU)
    Check("Megatron-Core 0.8 Mixtral 8x7B on 64 H100 (tp 1, ep 8, pp 4, vp 8)", _MCORE_MOE,
          "model_tflops_per_gpu", 438.0,
          {"model": {"preset": "mixtral-8x7b", "seq_len": 4096},
           "training": {"global_batch": 256, "micro_batch": 1, "recompute": "none",
                        "dtype": "bf16"},
           "parallel": _megatron_parallel(64, 1, 4, 1, 8, ep=8, dtype="bf16"),
           "system": {"preset": "dgx-h100", "gpus": 64}},
          note=f"{_MEGATRON_ASSUMED}; the headline's pairing with the mapping table is "
               "the README's (both MCore v0.8), not stated as one measurement; Megatron's "
               "FLOP count (top-2 experts, whole s x s attention)"),
    # --- torchtitan on H100 (96 GB, 500 W), end of 2024 (tokens/s/GPU)
    _torchtitan("8B", 8, 8, 1, 1, 1, 2, 8192, False, "selective", 5762),
    _torchtitan("8B", 8, 8, 1, 1, 1, 2, 8192, True, "selective", 8532),
    _torchtitan("8B", 128, 128, 1, 1, 1, 2, 8192, False, "selective", 5605),
    _torchtitan("8B", 128, 128, 1, 1, 1, 2, 8192, True, "selective", 8380),
    _torchtitan("8B", 8, 1, 1, 1, 8, 1, 262144, True, "full", 548),
    _torchtitan("70B", 256, 32, 8, 1, 1, 16, 8192, True, "full", 876),
    _torchtitan("405B", 512, 8, 8, 8, 1, 32, 8192, True, "full", 128, interleave=2),
    _torchtitan("405B", 512, 8, 8, 8, 1, 32, 8192, True, "full", 100),
    _torchtitan("405B", 512, 8, 8, 8, 1, 8, 32768, True, "full", 76),
    # --- MaxText on TPU v5p and v5e (MFU, causal attention)
    _maxtext("32B", "v5p", 64, 16, 4, 8, 32, 10240, 32, 32768, "selective", 0.7147),
    _maxtext("128B", "v5p", 128, 16, 8, 2, 64, 10240, 64, 65536, "selective", 0.6868),
    _maxtext("1024B", "v5p", 2048, 128, 16, 2, 128, 20480, 128, 131072, "full", 0.648),
    _maxtext("16B", "v5e", 256, 256, 1, 6, 32, 5120, 32, 32768, "full", 0.611),
    _maxtext("128B", "v5e", 256, 16, 16, 1, 64, 10240, 64, 65536, "full", 0.5606),
    # --- Megatron-Bridge 25.11 on GB200 and H100 (tokens/s/GPU)
    _bridge("Llama3-8B", "GB200", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 1, 31508,
            "CUDA graphs (full iteration) in the workload config"),
    _bridge("Llama3-70B", "GB200", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 4312,
            "activation offload of 40 layers to the Grace CPU "
            "(LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_BASE_CONFIG cpu_offloading_num_layers)",
            fsdp=True, offload_layers=40),
    _bridge("Llama3.1-405B", "GB200", 256, "fp8", 1536, 1, 8192, 4, 16, 1, 4, 1, 813,
            "TP overlap on (tp_comm_overlap in llama31_405b_pretrain_config); the recipe "
            "counts embedding and loss as pipeline layers (126 + 2)", tp_overlap=1.0),
    _bridge("DeepSeek-V3", "GB200", 256, "bf16", 4096, 1, 4096, 1, 4, 1, 4, 64, 3139,
            "recompute selective (set_deepseek_v3_common_configs) of mla_up_proj "
            "(DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_BASE_CONFIG recompute_modules); HybridEP "
            "dispatcher; Transformer Engine's CUDA graphs over attn, moe_router, "
            "moe_preprocess; EP overlap off (moe_a2a_overlap False); without MTP",
            recompute="selective", dispatcher="hybridep",
            graph_scope="attn,moe_router,moe_preprocess",
            software={"training": {"recompute_modules": "mla_up_proj"}}),
    _bridge("DeepSeek-V3", "GB200", 256, "fp8", 4096, 1, 4096, 1, 8, 1, 4, 32, 4018,
            "the table prints FP8-MX: training.fp8_recipe mxfp8; recompute selective "
            "(mla_up_proj); HybridEP dispatcher and Transformer Engine's "
            "CUDA graphs over attn, moe_router, moe_preprocess (as the BF16 row); EP overlap "
            "off; without MTP", recompute="selective", dispatcher="hybridep",
            graph_scope="attn,moe_router,moe_preprocess",
            software={"training": {"recompute_modules": "mla_up_proj", **_MX["training"]}}),
    _bridge("GPT-OSS-120B", "GB200", 64, "bf16", 1280, 1, 8192, 1, 1, 1, 1, 64, 15876,
            "recompute_modules [layernorm, moe_act] without a granularity "
            "(GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG; Megatron-Core reads the "
            "modules under selective granularity only: none)"),
    _bridge("Qwen3-30B-A3B", "GB200", 8, "fp8", 512, 4, 4096, 1, 1, 1, 1, 8, 23766,
            "the table prints FP8-MX: training.fp8_recipe mxfp8; HybridEP dispatcher and CUDA "
            "graphs in the workload config (Transformer "
            "Engine's, over moe_router and moe_preprocess as the recipes' MXFP8 GB200 "
            "config sets them)", dispatcher="hybridep",
            graph_scope="moe_router,moe_preprocess", software=_MX),
    _bridge("Qwen3-235B-A22B", "GB200", 256, "bf16", 8192, 1, 4096, 1, 8, 1, 3, 32, 4916,
            "94 layers over pp x vp = 24 chunks, uneven as Megatron splits them; HybridEP and "
            "Transformer Engine's CUDA graphs over attn, moe_router, moe_preprocess as every "
            "Qwen3 GB200 workload config sets them (scripts/performance/configs/qwen/"
            "qwen3_workload_base_configs.py, read in the stored version 01b2977e, not at this "
            "row's commit)", dispatcher="hybridep", graph_scope="attn,moe_router,moe_preprocess"),
    _bridge("Llama3-8B", "H100", 8, "fp8", 128, 1, 8192, 1, 1, 1, 1, 1, 14451,
            "the workload config recomputes 5 of 32 layers (recompute_num_layers 5), "
            "not expressed", fsdp=True),
    _bridge("Llama3-70B", "H100", 64, "fp8", 128, 1, 8192, 4, 8, 1, 5, 1, 1602,
            "TP overlap on (userbuffers_fp8_h100_h8192_tp4)", tp_overlap=1.0),
    _bridge("Llama3.1-405B", "H100", 1024, "fp8", 512, 1, 8192, 8, 8, 2, 8, 1, 292,
            "TP overlap on (userbuffers_fp8_h100_h16384_tp8_cp2)", tp_overlap=1.0),
    _bridge("GPT-OSS-120B", "H100", 64, "bf16", 512, 4, 4096, 1, 4, 1, 1, 8, 5630,
            "the table's GA 2 disagrees with GBS / (MBS x DP) = 8: GBS and MBS as printed; "
            "at that MBS 4 the plan does not fit the model's 80 GB (pp 4 keeps 4 micro-batches "
            "of ~16 GB of activations in flight, 124 GB in all): the printed MBS is doubtful"),
    _bridge("Qwen3-30B-A3B", "H100", 16, "fp8", 512, 2, 4096, 1, 2, 1, 24, 8, 5275,
            "EP overlap off (no moe_a2a_overlap in the 30B configs)"),
    _bridge("Qwen3-235B-A22B", "H100", 256, "fp8", 2048, 1, 4096, 2, 8, 1, 4, 32, 1575,
            "EP overlap on (moe_a2a_overlap in QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_"
            "CS_BASE_CONFIG) with delay_wgrad_compute (scripts/performance/utils/overrides.py "
            "_set_moe_a2a_overlap_overrides sets both); TP overlap off; the experts' EP 32 x "
            "ETP 1 folded over attention's TP 2 x DP 16", tp_overlap=0.0, ep_overlap=True,
            etp=1, software={"training": {"delay_wgrad": True}}),
    # --- the software that runs MoE: Megatron-Bridge 26.04.01-26.08, matched
    # H100 runs, NeMo Automodel, Megatron-Core's DeepSeek-V3 log on GB200
    *_NEW_2026,
    # --- Megatron-Bridge 25.11 on GB300 (tokens/s/GPU)
    *_GB300_2511,
)


# The four H100 rows whose steps are most nearly all large GEMMs (BF16, full
# recomputation, hidden 5,120-8,192, no TP/PP traffic), 4 of the table's 28 H100
# rows: they set `hardware.H100_MATMUL_EFFICIENCY` by `fit_matmul_efficiency`.
H100_GEMM_ROWS = tuple(c.name for c in CHECKS if c.calibration and c.source == _FOUNDRY)


# The two rows of Megatron-Core's DeepSeek-V3 log around its NUMA-binding step
# (steps 7 and 8: bindpcie alone), 2 of the GB200 family's 29 predicted rows:
# they set `stacks.NUMA_UNBOUND_FACTOR` (the model's step-8 / step-7 ratio at
# the published 762.12 / 691.49; `validate.fit_numa_unbound_factor`).
NUMA_FIT_ROWS = tuple(c.name for c in CHECKS if c.source == MCORE_DSV3_STEPS_SOURCE
                      and c.calibration)
