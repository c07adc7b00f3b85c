"""The Megatron-Bridge recipes codesign restates (`RECIPES`, by recipe function name,
and their legacy names, `ALIASES`): each a ConfigContainer's values in its own
nested keys (model, train, dataset, mixed_precision, ...), from the source of
`REPOSITORY` at `COMMIT` (src/megatron/bridge/recipes/, the model bridges'
config.json mappings).
`megatron_bridge` reads them with their overrides; its rules are from the same
commit."""

from __future__ import annotations

REPOSITORY = "NVIDIA-NeMo/Megatron-Bridge"
COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"  # every recipe, and megatron_bridge's rules


def _shape(layers: int, hidden: int, heads: int, groups: int, ffn: int, vocab: int,
           **extra) -> dict:
    """A checkpoint's model keys as Bridge's model bridge maps its config.json
    (CONFIG_MAPPING in src/megatron/bridge/models/conversion/model_bridge.py):
    the Llama, Qwen3, DeepSeek-V3 and GPT-OSS bridges set SwiGLU, untied embeddings
    and hidden_dropout 0.0; the configs' attention_dropout is 0.0; the vocabulary
    padding is 128, the largest power of 2 up to 128 dividing each vocab_size
    (`make_vocab_size_divisible_by`)."""
    return dict(num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                num_query_groups=groups, ffn_hidden_size=ffn, vocab_size=vocab,
                make_vocab_size_divisible_by=128, gated_linear_unit=True,
                share_embeddings_and_output_weights=False, hidden_dropout=0.0,
                attention_dropout=0.0, **extra)


# The Hugging Face checkpoints the recipes build their models from
# (AutoBridge.from_hf_pretrained), as their config.json gives them
LLAMA3_8B = _shape(32, 4096, 32, 8, 14336, 128256)  # meta-llama/Meta-Llama-3-8B
LLAMA3_70B = _shape(80, 8192, 64, 8, 28672, 128256)  # meta-llama/Meta-Llama-3-70B
LLAMA31_405B = _shape(126, 16384, 128, 8, 53248, 128256)  # meta-llama/Meta-Llama-3.1-405B
# meta-llama/Llama-3.2-1B: its config.json ties the embeddings (tie_word_embeddings)
LLAMA32_1B = {**_shape(16, 2048, 32, 8, 8192, 128256), "share_embeddings_and_output_weights": True}
QWEN3_8B = _shape(36, 4096, 32, 8, 12288, 151936, kv_channels=128)  # Qwen/Qwen3-8B
QWEN3_32B = _shape(64, 5120, 64, 8, 25600, 151936, kv_channels=128)  # Qwen/Qwen3-32B
# Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B: routed experts in every layer, no shared one
QWEN3_30B_A3B = _shape(48, 2048, 32, 4, 6144, 151936, kv_channels=128, num_moe_experts=128,
                       moe_router_topk=8, moe_ffn_hidden_size=768)
QWEN3_235B_A22B = _shape(94, 4096, 64, 4, 12288, 151936, kv_channels=128, num_moe_experts=128,
                         moe_router_topk=8, moe_ffn_hidden_size=1536)
# deepseek-ai/DeepSeek-V3, with the DeepSeek-V3 bridge's own keys
# (src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py): the first 3 layers
# dense, one shared expert of the routed width, one MTP layer, padding 1280; its
# n_group 8 and topk_group 4 are moe_router_num_groups and moe_router_group_topk
# (CONFIG_MAPPING)
DEEPSEEK_V3 = {**_shape(61, 7168, 128, 128, 18432, 129280, multi_latent_attention=True,
                       q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                       qk_pos_emb_head_dim=64, v_head_dim=128, num_moe_experts=256,
                       moe_router_topk=8, moe_ffn_hidden_size=2048,
                       moe_router_num_groups=8, moe_router_group_topk=4,
                       moe_shared_expert_intermediate_size=2048,
                       moe_layer_freq=[0] * 3 + [1] * 58, mtp_num_layers=1),
               "make_vocab_size_divisible_by": 1280}


def _gpt_oss(layers: int, experts: int) -> dict:
    """openai/gpt-oss-20b and -120b: head width 64, 4 of `experts` experts of width
    2880 per token; the GPT-OSS bridge (src/megatron/bridge/models/gpt_oss/
    gpt_oss_bridge.py) windows every other layer to sliding_window - 1 = 127 tokens
    (window_attn_skip_freq 2) and learns a sink per head (softmax_type learnable)."""
    return _shape(layers, 2880, 64, 8, 2880, 201088, kv_channels=64, num_moe_experts=experts,
                  moe_router_topk=4, moe_ffn_hidden_size=2880, window_size=[127, 0],
                  window_attn_skip_freq=2, softmax_type="learnable")


GPT_OSS_20B, GPT_OSS_120B = _gpt_oss(24, 32), _gpt_oss(36, 128)

# _pretrain_common() (src/megatron/bridge/recipes/common.py): every recipe's start;
# its tokenizer sizes the vocabulary (use_tokenizer_vocab_size), its
# data_parallel_sharding_strategy applies under Megatron FSDP only
COMMON = {
    "train": {"train_iters": 300000, "global_batch_size": 32, "micro_batch_size": 2},
    "dataset": {"seq_length": 4096},
    "ddp": {"use_distributed_optimizer": True, "grad_reduce_in_fp32": True,
            "use_megatron_fsdp": False, "data_parallel_sharding_strategy": "optim_grads_params"},
    "tokenizer": {"tokenizer_type": "HuggingFaceTokenizer", "use_tokenizer_vocab_size": True},
    "mixed_precision": "bf16_mixed",
}
# the mock-data tokenizer of the Llama, DeepSeek-V3 and GPT-OSS recipes
# (DEFAULT_NULL_TOKENIZER_VOCAB_SIZE, src/megatron/bridge/recipes/utils/tokenizer_utils.py)
NULL_TOKENIZER = {"tokenizer_type": "NullTokenizer", "vocab_size": 32000}
# bf16_mixed() with gradients reduced in bf16 (MixedPrecisionConfig)
BF16_REDUCED = {"bf16": True, "grad_reduce_in_fp32": False}


def _merged(base: dict, **sections) -> dict:
    """`base` (a recipe) with `sections`' keys over its own, section by section."""
    tree = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, body in sections.items():
        if isinstance(body, dict) and isinstance(tree.get(section), dict):
            tree[section].update(body)
        else:
            tree[section] = body
    return tree


def _recipe(model: dict, tokenizer: dict | None = None, **sections) -> dict:
    """A recipe's ConfigContainer: `COMMON` with the model's keys and the recipe's
    own sections over it (a section given as a mapping is merged, else replaced)."""
    tree = _merged(COMMON)
    tree["model"] = dict(model)
    if tokenizer is not None:
        tree["tokenizer"].update(tokenizer)
    return _merged(tree, **sections)


def _plan(tp=1, pp=1, cp=1, vp=None, ep=None, etp=None, sp=False, seq=None, **model) -> dict:
    """A recipe's parallelism (and other model keys): those left out are
    Megatron-Core's ModelParallelConfig defaults (1, none, off)."""
    keys = dict(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                context_parallel_size=cp, virtual_pipeline_model_parallel_size=vp,
                expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                sequence_parallel=sp, seq_length=seq, **model)
    return {k: v for k, v in keys.items() if v is not None}


def _hf(model_id: str) -> dict:
    """The checkpoint's own tokenizer (HuggingFaceTokenizer, `COMMON`'s type)."""
    return {"tokenizer_model": model_id}


FULL_RECOMPUTE = dict(recompute_granularity="full", recompute_method="uniform",
                      recompute_num_layers=1)
# The MoE recipes' software settings (issue 54's keys), as each function returns them on
# an H100: the Qwen3 and DeepSeek-V3 functions end in apply_flex_dispatcher_backend
# (src/megatron/bridge/training/flex_dispatcher_backend.py), which on Ampere or Hopper
# turns their moe_flex_dispatcher_backend into the flex dispatcher; the GPT-OSS ones do
# not call it: all-to-all. No CUDA graphs (cuda_graph_impl none, so their scope "full"
# is unused), the router unfused, the permute fused. (Their moe_hybridep_num_sms 16
# applies to HybridEP only: restated where it runs.)
MOE_EAGER = dict(cuda_graph_impl="none", moe_router_fusion=False, moe_permute_fusion=True)
DEEPEP = dict(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep",
              **MOE_EAGER)
HYBRIDEP_16 = dict(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
                   moe_hybridep_num_sms=16, **MOE_EAGER)
ALLTOALL = dict(moe_token_dispatcher_type="alltoall", **MOE_EAGER)
# qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config's own: HybridEP on 32 SMs, the router
# fused, Transformer Engine's graphs of the router and the preprocessing
QWEN3_30B_16GPU = dict(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
                       moe_hybridep_num_sms=32, moe_router_fusion=True, moe_permute_fusion=True,
                       cuda_graph_impl="transformer_engine",
                       cuda_graph_scope=["moe_router", "moe_preprocess"])
NO_SHARD = {"data_parallel_sharding_strategy": "no_shard"}
LONG_RUN = {"train_iters": 1168251, "global_batch_size": 512, "micro_batch_size": 1}


def _llama(model: dict, seq: int, plan: dict, batch: int = 512, precision="bf16_mixed",
           tp_overlap: bool = False) -> dict:
    """A Llama 3 pretrain recipe (src/megatron/bridge/recipes/llama/h100/llama3.py):
    the mock-data tokenizer, 1,168,251 iterations of micro-batch 1, no FSDP."""
    return _recipe({**model, **plan, "seq_length": seq}, NULL_TOKENIZER,
                   train={**LONG_RUN, "global_batch_size": batch}, dataset={"seq_length": seq},
                   ddp=NO_SHARD, mixed_precision=precision,
                   **({"comm_overlap": {"tp_comm_overlap": True}} if tp_overlap else {}))


def _gpt_oss_recipe(model: dict, ep: int, precision: str = "bf16_mixed") -> dict:
    """A GPT-OSS pretrain recipe (src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py)."""
    return _recipe({**model, **_plan(tp=2, pp=4, ep=ep, etp=1, sp=True, seq=4096), **ALLTOALL},
                   NULL_TOKENIZER, train={"train_iters": 1000000, "global_batch_size": 512,
                                          "micro_batch_size": 1},
                   dataset={"seq_length": 4096}, ddp=NO_SHARD, mixed_precision=precision)


def _deepseek_v3(pp: int, ep: int, recompute: dict) -> dict:
    """A DeepSeek-V3 pretrain recipe (src/megatron/bridge/recipes/deepseek/h100/
    deepseek_v3.py): bf16 with gradients reduced in bf16, tp 2, sequence parallel."""
    return _recipe({**DEEPSEEK_V3, **_plan(tp=2, pp=pp, ep=ep, etp=1, sp=True, seq=4096),
                    **recompute, **HYBRIDEP_16}, NULL_TOKENIZER,
                   train={"train_iters": 1_000_000, "global_batch_size": 4096,
                          "micro_batch_size": 1},
                   ddp={**NO_SHARD, "grad_reduce_in_fp32": False}, mixed_precision=BF16_REDUCED,
                   comm_overlap={"tp_comm_overlap": False,
                                 "overlap_moe_expert_parallel_comm": False})


# recipe function -> its ConfigContainer; the GPU count is the name's (`_(N)gpu_`).
# Each restates the function of that name at COMMIT, in the file its builder names.
RECIPES = {
    # src/megatron/bridge/recipes/llama/h100/llama3.py
    "llama3_8b_pretrain_2gpu_h100_bf16_config": _llama(LLAMA3_8B, 8192, _plan(cp=2)),
    "llama3_8b_pretrain_2gpu_h100_fp8cs_config": _llama(
        LLAMA3_8B, 8192, _plan(cp=2), batch=768, precision="bf16_with_fp8_current_scaling_mixed"),
    "llama3_8b_pretrain_2gpu_h100_fp8mx_config": _llama(
        LLAMA3_8B, 8192, _plan(cp=2), batch=768, precision="bf16_with_mxfp8_mixed"),
    "llama3_8b_pretrain_16gpu_h100_bf16_16k_config": _llama(
        LLAMA3_8B, 16384, _plan(tp=4, pp=2, cp=2, sp=True)),
    "llama3_8b_pretrain_32gpu_h100_bf16_64k_config": _llama(
        LLAMA3_8B, 65536, _plan(tp=4, pp=2, cp=4, sp=True)),
    "llama3_8b_pretrain_64gpu_h100_bf16_128k_config": _llama(
        LLAMA3_8B, 131072, _plan(tp=4, pp=2, cp=8, sp=True)),
    "llama3_70b_pretrain_32gpu_h100_bf16_config": _llama(
        LLAMA3_70B, 8192, _plan(tp=4, pp=4, vp=5, cp=2, sp=True), tp_overlap=True),
    "llama3_70b_pretrain_32gpu_h100_bf16_16k_config": _llama(
        LLAMA3_70B, 16384, _plan(tp=8, pp=2, cp=2, sp=True), tp_overlap=True),
    "llama3_70b_pretrain_256gpu_h100_bf16_64k_config": _llama(
        LLAMA3_70B, 65536, _plan(tp=8, pp=4, cp=8, sp=True), tp_overlap=True),
    "llama31_405b_pretrain_256gpu_h100_bf16_config": _llama(
        LLAMA31_405B, 131072, _plan(tp=8, pp=8, vp=2, cp=4, sp=True), tp_overlap=True),
    # the tutorial's (tutorials/recipes/llama/02_pretrain_with_yaml.py runs it, as
    # llama32_1b_pretrain_config, under conf/llama32_1b_pretrain.yaml)
    "llama32_1b_pretrain_1gpu_h100_bf16_config": _llama(LLAMA32_1B, 8192, _plan()),
    # src/megatron/bridge/recipes/qwen/h100/qwen3.py (the 16-GPU 8B starts from the 4-GPU)
    "qwen3_8b_pretrain_4gpu_h100_bf16_config": _recipe(
        {**QWEN3_8B, **_plan(tp=4, seq=4096)}, _hf("Qwen/Qwen3-8B")),
    "qwen3_8b_pretrain_16gpu_h100_bf16_config": _recipe(
        {**QWEN3_8B, **_plan(seq=4096)}, _hf("Qwen/Qwen3-8B"),
        train={"train_iters": 100, "global_batch_size": 1024, "micro_batch_size": 1},
        ddp={"grad_reduce_in_fp32": False}, mixed_precision=BF16_REDUCED),
    "qwen3_32b_pretrain_16gpu_h100_bf16_config": _recipe(
        {**QWEN3_32B, **_plan(tp=8, pp=2, seq=4096), **FULL_RECOMPUTE}, _hf("Qwen/Qwen3-32B")),
    # src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py (the 16-GPU 30B-A3B starts
    # from the 8-GPU one)
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config": _recipe(
        {**QWEN3_30B_A3B, **_plan(tp=4, pp=2, ep=4, etp=1, sp=True, seq=4096),
         **FULL_RECOMPUTE, **DEEPEP}, _hf("Qwen/Qwen3-30B-A3B")),
    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config": _recipe(
        {**QWEN3_30B_A3B, **_plan(ep=16, etp=1, seq=4096), **QWEN3_30B_16GPU},
        _hf("Qwen/Qwen3-30B-A3B"),
        train={"train_iters": 100, "global_batch_size": 1024, "micro_batch_size": 1},
        ddp={"grad_reduce_in_fp32": False}, mixed_precision=BF16_REDUCED,
        comm_overlap={"tp_comm_overlap": True}),
    "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config": _recipe(
        {**QWEN3_235B_A22B, **_plan(tp=4, pp=16, cp=2, ep=8, etp=1, sp=True, seq=4096),
         **DEEPEP},
        _hf("Qwen/Qwen3-235B-A22B"), train={"micro_batch_size": 1}),
    # src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py
    "deepseek_v3_pretrain_1024gpu_h100_bf16_config": _deepseek_v3(16, 64, {}),
    "deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config": _deepseek_v3(8, 32, FULL_RECOMPUTE),
    # src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py
    "gpt_oss_20b_pretrain_16gpu_h100_bf16_config": _gpt_oss_recipe(GPT_OSS_20B, 4),
    "gpt_oss_20b_pretrain_16gpu_h100_fp8cs_config": _gpt_oss_recipe(
        GPT_OSS_20B, 4, "bf16_with_fp8_current_scaling_mixed"),
    "gpt_oss_120b_pretrain_64gpu_h100_bf16_config": _gpt_oss_recipe(GPT_OSS_120B, 16),
}
# the legacy names (src/megatron/bridge/recipes/{llama/llama3,qwen/qwen3,qwen/qwen3_moe,
# deepseek/deepseek_v3,gpt_oss/gpt_oss}.py import the functions above under them)
ALIASES = {
    "llama32_1b_pretrain_config": "llama32_1b_pretrain_1gpu_h100_bf16_config",
    "llama3_8b_pretrain_config": "llama3_8b_pretrain_2gpu_h100_bf16_config",
    "llama3_8b_low_precision_pretrain_config": "llama3_8b_pretrain_2gpu_h100_fp8cs_config",
    "llama3_8b_16k_pretrain_config": "llama3_8b_pretrain_16gpu_h100_bf16_16k_config",
    "llama3_8b_64k_pretrain_config": "llama3_8b_pretrain_32gpu_h100_bf16_64k_config",
    "llama3_8b_128k_pretrain_config": "llama3_8b_pretrain_64gpu_h100_bf16_128k_config",
    "llama3_70b_pretrain_config": "llama3_70b_pretrain_32gpu_h100_bf16_config",
    "llama3_70b_16k_pretrain_config": "llama3_70b_pretrain_32gpu_h100_bf16_16k_config",
    "llama3_70b_64k_pretrain_config": "llama3_70b_pretrain_256gpu_h100_bf16_64k_config",
    "llama31_405b_pretrain_config": "llama31_405b_pretrain_256gpu_h100_bf16_config",
    "qwen3_8b_pretrain_config": "qwen3_8b_pretrain_16gpu_h100_bf16_config",
    "qwen3_32b_pretrain_config": "qwen3_32b_pretrain_16gpu_h100_bf16_config",
    "qwen3_30b_a3b_pretrain_config": "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
    "qwen3_235b_a22b_pretrain_config": "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config",
    "deepseek_v3_pretrain_config": "deepseek_v3_pretrain_1024gpu_h100_bf16_config",
    "gpt_oss_20b_pretrain_config": "gpt_oss_20b_pretrain_16gpu_h100_bf16_config",
    "gpt_oss_20b_pretrain_fp8_current_scaling_config":
        "gpt_oss_20b_pretrain_16gpu_h100_fp8cs_config",
    "gpt_oss_120b_pretrain_config": "gpt_oss_120b_pretrain_64gpu_h100_bf16_config",
}


# ------------------------------------------------------------------ perf recipes
# The flat performance recipes (src/megatron/bridge/perf_recipes/, which replaced
# scripts/performance/configs/): each starts from a library recipe above and sets
# its plan, then `_benchmark_common` (perf_recipes/_common.py). Named PERF + the
# function's name; a name only perf_recipes exports is an alias too (a name both
# packages export is the library's here: train.sh --recipe runs the perf one).
PERF = "perf_recipes."


def _benchmark(base: dict, model: dict, train: dict, precision: dict, **sections) -> dict:
    """A perf recipe: `base`'s model with `model` over it, then _benchmark_common():
    50 iterations, the checkpoint's vocabulary as set (use_tokenizer_vocab_size
    off), gradients reduced in the recipe's width, RoPE and cross-entropy fusions.
    `precision` is _perf_precision()'s MixedPrecisionConfig (grad_reduce_in_fp32 off);
    a HybridEP dispatcher gets 32 SMs."""
    merged = {**base["model"], **model}
    hybridep = {"moe_hybridep_num_sms": 32} \
        if merged.get("moe_flex_dispatcher_backend") == "hybridep" else {}
    return _merged(
        base, model={**merged, "apply_rope_fusion": True, "cross_entropy_fusion_impl": "te",
                     **hybridep},
        train={**train, "train_iters": 50, "eval_iters": 0},
        tokenizer={**sections.pop("tokenizer", {}), "use_tokenizer_vocab_size": False},
        ddp={**sections.pop("ddp", {}), "grad_reduce_in_fp32": False},
        mixed_precision={**precision, "grad_reduce_in_fp32": False}, **sections)


PERF_BF16 = {"bf16": True}  # _perf_precision("bf16"): bf16_mixed()
# _perf_precision("fp8_cs"): bf16_with_fp8_current_scaling_mixed(), all layers in fp8
PERF_FP8CS = {"bf16": True, "fp8": "hybrid", "fp8_recipe": "tensorwise",
              "first_last_layers_bf16": False}
# perf_recipes/deepseek/common.py _deepseek_v3_common() and the 1024-GPU H100 plan
# (perf_recipes/deepseek/h100/deepseek_v3.py), over the library's
# deepseek_v3_pretrain_config
_DEEPSEEK_V3_PERF = dict(
    tensor_model_parallel_size=2, pipeline_model_parallel_size=8,
    virtual_pipeline_model_parallel_size=4, context_parallel_size=1,
    expert_model_parallel_size=64, sequence_parallel=True, moe_router_fusion=True,
    recompute_granularity="selective", moe_router_force_load_balancing=True,
    recompute_modules=["mla_up_proj", "mlp"], pipeline_model_parallel_layout="Et|(tt|)*30mL")
# perf_recipes/llama/h100/llama3.py over the library's llama3_8b_pretrain_config
_LLAMA3_8B_PERF = dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                       context_parallel_size=2, sequence_parallel=False, should_pad_vocab=True,
                       moe_token_dispatcher_type="alltoall")


def _deepseek_v3_perf(precision: dict) -> dict:
    base = RECIPES["deepseek_v3_pretrain_1024gpu_h100_bf16_config"]
    return _benchmark(base, _DEEPSEEK_V3_PERF, {"global_batch_size": 16384,
                                                "micro_batch_size": 1}, precision,
                      dataset={"seq_length": base["model"]["seq_length"]},
                      dist={"enable_megatron_core_experimental": True},
                      ddp={"overlap_grad_reduce": False},
                      comm_overlap={"overlap_grad_reduce": False,
                                    "overlap_param_gather_with_optimizer_step": True},
                      optimizer={"overlap_param_gather_with_optimizer_step": True})


def _llama3_8b_perf(precision: dict, cp: int, recompute: dict) -> dict:
    base = RECIPES["llama3_8b_pretrain_2gpu_h100_bf16_config"]
    return _benchmark(base, {**_LLAMA3_8B_PERF, "context_parallel_size": cp, **recompute},
                      {"global_batch_size": 128, "micro_batch_size": 1}, precision,
                      tokenizer={"vocab_size": 128256}, comm_overlap={"tp_comm_overlap": False})


def _without(model: dict, *keys: str) -> dict:
    """A model's keys less `keys` (a recipe setting them to None: Megatron's default)."""
    return {k: v for k, v in model.items() if k not in keys}


NO_RECOMPUTE = ("recompute_granularity", "recompute_method", "recompute_num_layers")
# perf_recipes/qwen/h100/qwen3_moe.py: the FP8 30B-A3B and both 235B-A22B recipes turn
# recompute off and fuse the router and the bias-activation, at sequence 4096, with
# forced load balancing
_QWEN3_PERF = dict(bias_activation_fusion=True, moe_router_fusion=True, seq_length=4096,
                   moe_router_force_load_balancing=True)


def _qwen3_30b_a3b_perf(precision: dict) -> dict:
    """qwen3_30b_a3b_pretrain_16gpu_h100_{bf16,fp8cs}_config: the BF16 one over the
    library's 16-GPU recipe (EP overlap on); the FP8 one over the 8-GPU recipe
    (perf_recipes/qwen/common.py imports it as qwen3_30b_a3b_pretrain_config) with
    the 16-GPU plan, HybridEP and Transformer Engine's graphs of attention, the router
    and the preprocessing (_benchmark_common: HybridEP on 32 SMs)."""
    if precision is PERF_BF16:
        base = RECIPES["qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"]
        return _benchmark(base, {"moe_router_force_load_balancing": True,
                                 "moe_permute_fusion_into_hybridep": True},
                          base["train"], precision,
                          comm_overlap={"overlap_moe_expert_parallel_comm": True,
                                        "delay_wgrad_compute": False})
    base = RECIPES["qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config"]
    base = {**base, "model": _without(base["model"], *NO_RECOMPUTE)}
    return _benchmark(base, {**_QWEN3_PERF, **_plan(ep=16, etp=1, seq=4096),
                             "moe_token_dispatcher_type": "flex",
                             "moe_flex_dispatcher_backend": "hybridep",
                             "moe_hybridep_num_sms": 32, "cuda_graph_impl": "transformer_engine",
                             "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"]},
                      {"global_batch_size": 1024, "micro_batch_size": 1}, precision,
                      dataset={"seq_length": 4096}, comm_overlap={"tp_comm_overlap": True})


def _qwen3_235b_a22b_perf(precision: dict) -> dict:
    """qwen3_235b_a22b_pretrain_256gpu_h100_{bf16,fp8cs}_config: tp 2, pp 8, vp 4, ep 32,
    the all-to-all dispatcher (flex backend cleared) with EP overlap, the optimizer
    step's parameter gather overlapped."""
    base = RECIPES["qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config"]
    base = {**base, "model": _without(base["model"], *NO_RECOMPUTE,
                                      "moe_flex_dispatcher_backend")}
    return _benchmark(base, {**_QWEN3_PERF, **_plan(tp=2, pp=8, vp=4, cp=1, ep=32, etp=1,
                                                    sp=True, seq=4096),
                             "moe_token_dispatcher_type": "alltoall"},
                      {"global_batch_size": 8192, "micro_batch_size": 1}, precision,
                      dataset={"seq_length": 4096},
                      comm_overlap={"tp_comm_overlap": False,
                                    "overlap_moe_expert_parallel_comm": True,
                                    "delay_wgrad_compute": True,
                                    "overlap_param_gather_with_optimizer_step": True},
                      optimizer={"overlap_param_gather_with_optimizer_step": True})


def _gpt_oss_120b_perf(precision: dict) -> dict:
    """gpt_oss_120b_pretrain_64gpu_h100_{bf16,fp8cs}_config: tp 1, pp 4, ep 8, the
    router fused, selective recompute of the layer norms and the expert activation
    (the library's all-to-all dispatcher)."""
    base = RECIPES["gpt_oss_120b_pretrain_64gpu_h100_bf16_config"]
    return _benchmark(base, {"moe_router_fusion": True, "moe_router_force_load_balancing": True,
                             "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4,
                             "expert_model_parallel_size": 8, "sequence_parallel": False,
                             "recompute_modules": ["layernorm", "moe_act"],
                             "recompute_granularity": "selective"},
                      {"global_batch_size": 1280, "micro_batch_size": 1}, precision)


PERF_RECIPES = {
    # src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py
    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config": _qwen3_30b_a3b_perf(PERF_BF16),
    "qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config": _qwen3_30b_a3b_perf(PERF_FP8CS),
    "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config": _qwen3_235b_a22b_perf(PERF_BF16),
    "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config": _qwen3_235b_a22b_perf(PERF_FP8CS),
    # src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py
    "gpt_oss_120b_pretrain_64gpu_h100_bf16_config": _gpt_oss_120b_perf(PERF_BF16),
    "gpt_oss_120b_pretrain_64gpu_h100_fp8cs_config": _gpt_oss_120b_perf(PERF_FP8CS),
    # src/megatron/bridge/perf_recipes/llama/h100/llama3.py
    "llama3_8b_pretrain_8gpu_h100_bf16_config": _llama3_8b_perf(PERF_BF16, 2, {}),
    "llama3_8b_pretrain_8gpu_h100_fp8cs_config": _llama3_8b_perf(
        PERF_FP8CS, 1, dict(recompute_granularity="full", recompute_method="block",
                            recompute_num_layers=5)),
    # src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py
    "deepseek_v3_pretrain_1024gpu_h100_bf16_config": _deepseek_v3_perf(PERF_BF16),
    "deepseek_v3_pretrain_1024gpu_h100_fp8cs_config": _deepseek_v3_perf(PERF_FP8CS),
}
for _name, _tree in PERF_RECIPES.items():
    RECIPES[PERF + _name] = _tree
    if _name not in RECIPES:
        ALIASES[_name] = PERF + _name
