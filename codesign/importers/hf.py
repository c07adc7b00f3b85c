"""Hugging Face config.json files: the model only (Llama, Mistral/Mixtral,
Qwen2/3 and their MoE, DeepSeek-V2/V3); the plan is codesign's defaults unless
the command's --set gives it."""

from __future__ import annotations

import json

from .. import hardware
from . import _common as c

SEQ_LEN = 8192  # the training sequence assumed: at most the config's max_position_embeddings
# model_type with a gated (gate/up/down) MLP, and without
GATED = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                   "deepseek_v2", "deepseek_v3", "gemma", "gemma2", "phi3", "olmo", "olmo2",
                   "granite", "cohere", "internlm2"})
UNGATED = frozenset({"gpt_neox", "phi", "starcoder2", "gpt_bigcode", "opt", "gptj"})


def hf(text: str, where: str, *, gpus: int | None = None,
       system: dict | None = None) -> c.Imported:
    """The scenario of a Hugging Face config.json: its model, on one node."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{where} must hold a JSON object (a model's config.json)")
    t, d = c.Tree(cfg, where), c.Draft("hf", where)
    need = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                        "vocab_size") if t.get(k) is None]
    if need:
        raise ValueError(f"{where}: {', '.join(need)} missing (a decoder's config.json)")
    layers, hidden = t.count("num_hidden_layers"), t.count("hidden_size")
    heads = t.count("num_attention_heads")
    d.put("model.layers", layers)
    d.put("model.hidden", hidden)
    d.put("model.heads", heads)
    d.given("model.kv_heads", t.count("num_key_value_heads"), heads,
            "no num_key_value_heads (multi-head attention)")
    d.given("model.ffn_hidden", t.count("intermediate_size"), 4 * hidden,
            "no intermediate_size: 4 hidden")
    top = t.count("max_position_embeddings")
    d.assume("model.seq_len", SEQ_LEN if top is None else min(top, SEQ_LEN),
             f"a pre-training sequence: the lesser of {SEQ_LEN} and max_position_embeddings "
             f"{top} (--set model.seq_len=N)")
    d.put("model.vocab", t.count("vocab_size"))
    family = str(t.get("model_type", default=""))
    if family in GATED | UNGATED:
        d.put("model.gated", family in GATED)
    else:
        d.assume("model.gated", True, f"model_type {family!r}: a Llama-style gated MLP")
    d.given("model.tied_embeddings", t.flag("tie_word_embeddings"), False,
            "no tie_word_embeddings (Llama's default)")
    _moe(t, d, layers, d.get("model.ffn_hidden"))
    if t.get("kv_lora_rank") is not None:  # multi-head latent attention
        d.put("model.attention", "mla")
        for key, name in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                          ("qk_head_dim", "qk_nope_head_dim"),
                          ("qk_rope_head_dim", "qk_rope_head_dim"), ("v_head_dim", "v_head_dim")):
            d.put(f"model.{key}", t.count(name, default=0, lo=0))  # null q_lora_rank: 0
    elif t.count("head_dim") not in (None, hidden / heads):
        d.put("model.head_dim", t.count("head_dim"))
    d.put("model.dropout", False)
    d.assume("plan", None, "a config.json holds no plan: [parallel] and [training] are "
             "codesign's defaults (data parallelism over every GPU, micro_batch 1, "
             "global_batch = dp, bf16, no recomputation); set them with --set")
    c.system(d, system)
    per_node = int(hardware.system(d.tables["system"]["preset"]).gpus_per_node)
    c.gpus(d, gpus, (per_node, "one node of the system (--gpus N)"))
    return d.done()


def _moe(t: c.Tree, d: c.Draft, layers: int, ffn: int) -> None:
    """Routed experts: every layer (Mixtral), after the first dense ones every
    moe_layer_freq-th (DeepSeek), or every decoder_sparse_step-th but the
    mlp_only_layers (Qwen)."""
    experts = t.count("num_local_experts", "num_experts", "n_routed_experts", lo=0)
    if not experts:
        return
    dense_first = t.count("first_k_dense_replace", default=0, lo=0)
    dense_only = set(t.get("mlp_only_layers", default=[]) or [])
    freq, step = t.count("moe_layer_freq"), t.count("decoder_sparse_step", default=1)
    moe = [i for i in range(dense_first, layers) if i not in dense_only
           and (i % freq == 0 if freq else (i + 1) % step == 0)]
    d.put("model.moe_layers", len(moe))
    d.put("model.experts", experts)
    d.given("model.top_k", t.count("num_experts_per_tok"), 2, "no num_experts_per_tok")
    width = t.count("moe_intermediate_size", default=ffn)
    d.put("model.expert_ffn_hidden", width)
    shared, shared_width = t.count("n_shared_experts", lo=0), \
        t.count("shared_expert_intermediate_size", lo=0)
    if shared:
        d.put("model.shared_experts", shared)
    elif shared_width:
        d.assume("model.shared_experts", max(1, round(shared_width / width)),
                 f"shared_expert_intermediate_size {shared_width} as shared experts of the "
                 f"routed width {width}")
