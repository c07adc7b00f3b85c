"""Hugging Face config.json files: the model only (Llama, Mistral/Mixtral,
Qwen2/3 and their MoE, DeepSeek-V2/V3, Gemma 2/3, GPT-OSS); the plan is
codesign's defaults unless the command's --set gives it. Every top-level key
the importer does not read is listed as ignored."""

from __future__ import annotations

from .. import files, presets
from . import _common as c
from . import _kinds

SEQ_LEN = 8192  # the training sequence assumed: at most the config's max_position_embeddings
# model_type with a gated (gate/up/down) MLP, and without
GATED = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                   "deepseek_v2", "deepseek_v3", "gemma", "gemma2", "gemma3", "gemma3_text",
                   "phi3", "olmo", "olmo2", "granite", "cohere", "internlm2", "gpt_oss",
                   "llama4_text"})
UNGATED = frozenset({"gpt_neox", "phi", "starcoder2", "gpt_bigcode", "opt", "gptj"})
# model_type whose config class ties the embeddings unless tie_word_embeddings says
# otherwise (GemmaConfig, Gemma2Config, Gemma3TextConfig); Llama's and most others' do not
TIED = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
# layer_types' names (transformers): a layer's attention
SLIDING, FULL, CHUNKED = "sliding_attention", "full_attention", "chunked_attention"
# the families' own rules where a config has no layer_types (transformers' configs):
# every other layer slides, the first too (Gemma2Config, GptOssConfig)
ALTERNATE = {"gemma2": "Gemma2Config", "gpt_oss": "GptOssConfig"}
# N-1 of every N layers slide, N = sliding_window_pattern (Gemma3TextConfig: 6)
PATTERNED = frozenset({"gemma3", "gemma3_text"})
GEMMA3_PATTERN = 6
# the layers from max_window_layers on slide, with use_sliding_window (Qwen2Config: 28)
QWEN = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
QWEN_MAX_WINDOW_LAYERS = 28
# every layer slides (MistralConfig, MixtralConfig)
EVERY_LAYER = frozenset({"mistral", "mixtral"})
# Llama 4: the RoPE layers attend in chunks, every no_rope_layer_interval-th is full
LLAMA4_NOPE_INTERVAL = 4


def hf(text: str, where: str, *, gpus: int | None = None,
       system: dict | None = None) -> c.Imported:
    """The scenario of a Hugging Face config.json: its model, on one node."""
    # nesting and numbers capped; a file of another kind named: one line naming it
    cfg = _kinds.parsed("hf", text, where, files.parse_json)
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
    d.given("model.tied_embeddings", t.flag("tie_word_embeddings"), family in TIED,
            f"no tie_word_embeddings (model_type {family}'s default)" if family in TIED
            else "no tie_word_embeddings (Llama's default)")
    _moe(t, d, layers, d.get("model.ffn_hidden"))
    if t.get("kv_lora_rank") is not None:  # multi-head latent attention
        d.put("model.attention", "mla")
        for key, name in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                          ("qk_head_dim", "qk_nope_head_dim"),
                          ("qk_rope_head_dim", "qk_rope_head_dim"), ("v_head_dim", "v_head_dim")):
            d.put(f"model.{key}", t.count(name, default=0, lo=0))  # null q_lora_rank: 0
    elif t.count("head_dim") not in (None, hidden / heads):
        d.put("model.head_dim", t.count("head_dim"))
    _window(t, d, layers, family)
    mtp = t.count("num_nextn_predict_layers", lo=0)
    if mtp:
        d.put("model.mtp_layers", mtp)
    if family == "gpt_oss":  # a learnt sink logit per head in every softmax
        d.put("model.attention_sinks", True)
    d.put("model.dropout", False)
    d.assume("plan", None, "a config.json holds no plan: [parallel] and [training] are "
             "codesign's defaults (data parallelism over every GPU, micro_batch 1, "
             "global_batch = dp, bf16, no recomputation); set them with --set")
    c.system(d, system)
    per_node = int(presets.system(d.tables["system"]["preset"]).gpus_per_node)
    c.gpus(d, gpus, (per_node, "one node of the system (--gpus N)"))
    quantized = t.node("quantization_config")  # not read: listed as ignored too
    if quantized is not None:
        method = quantized.get("quant_method", "?") if isinstance(quantized, dict) else quantized
        d.assume("quantization_config", None, f"quant_method {method} is how the release "
                 "stores its weights, not a training recipe: training.dtype is not taken "
                 "from it (--set training.dtype=...)")
    d.ignored += t.unread(every=True)
    return d.done()


def _moe(t: c.Tree, d: c.Draft, layers: int, ffn: int) -> None:
    """Routed experts: every layer (Mixtral), after the first dense ones every
    moe_layer_freq-th (DeepSeek), or every decoder_sparse_step-th but the
    mlp_only_layers (Qwen)."""
    experts = t.count("num_local_experts", "num_experts", "n_routed_experts", lo=0)
    if not experts:
        return
    dense_first = t.count("first_k_dense_replace", default=0, lo=0)
    dense_only = t.get("mlp_only_layers", default=[]) or []
    if not isinstance(dense_only, list):
        raise c.bad(t.where, "mlp_only_layers", dense_only, "must list layer numbers")
    dense_only = {c.whole(t.where, f"mlp_only_layers[{i}]", x, lo=0)
                  for i, x in enumerate(dense_only)}
    freq, step = t.count("moe_layer_freq"), t.count("decoder_sparse_step", default=1)
    d.put("model.moe_layers", _routed_layers(layers, dense_first, dense_only, freq, step))
    d.put("model.experts", experts)
    top_k, per_token = t.count("num_experts_per_tok"), t.count("experts_per_token")  # GPT-OSS
    if None not in (top_k, per_token) and top_k != per_token:
        raise c.bad(t.where, "experts_per_token", per_token,
                    f"must equal num_experts_per_tok={top_k} (both name the routed top-k)")
    d.given("model.top_k", top_k or per_token, 2, "no num_experts_per_tok")
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
    c.group_limit(d, t.count("n_group", lo=0), t.count("topk_group", lo=0), "n_group",
                  "topk_group")


def _routed_layers(layers: int, dense_first: int, dense_only: set, freq: int | None,
                   step: int) -> int:
    """Layers i from `dense_first` on, not in `dense_only`, with i % freq == 0 (freq
    given) or (i + 1) % step == 0: counted, not listed (a config may claim 2^53 layers)."""
    def routed(i: int) -> bool:
        return i % freq == 0 if freq else (i + 1) % step == 0

    if freq:  # multiples of freq in [dense_first, layers)
        every = max(0, (layers - 1) // freq - (dense_first - 1) // freq)
    else:  # multiples of step in [dense_first + 1, layers]
        every = max(0, layers // step - dense_first // step)
    return every - sum(1 for i in dense_only if dense_first <= i < layers and routed(i))


def _window(t: c.Tree, d: c.Draft, layers: int, family: str) -> None:
    """model.window_layers and model.window: the sliding (or chunked) layers of
    layer_types, else the family's rule (said as an assumption), else none."""
    window = t.count("sliding_window", lo=0)  # null or 0: no window
    chunk = t.count("attention_chunk_size", lo=0)
    kinds = t.get("layer_types")
    if kinds is not None:
        sliding, chunked = _layer_types(t, kinds, layers)
        if sliding:
            _put_window(t, d, sliding, window, "sliding_window", SLIDING)
        elif chunked:
            _put_window(t, d, chunked, chunk, "attention_chunk_size", CHUNKED)
        return
    if chunk:  # Llama 4: chunked attention on the RoPE layers
        _chunked(t, d, layers, chunk)
        return
    if family in QWEN:  # a window only with use_sliding_window, from max_window_layers on
        use = t.flag("use_sliding_window", default=False)
        full = t.count("max_window_layers", lo=0)
        if not (use and window):
            return
        if full is None:
            full = QWEN_MAX_WINDOW_LAYERS
            why = f"no max_window_layers: Qwen2's default {full}"
        else:
            why = f"max_window_layers {full}"
        windowed = max(0, layers - full)
        if windowed:
            _put_window(t, d, windowed, window, "sliding_window", SLIDING, (
                f"{why}: layers {full} and up slide (use_sliding_window, Qwen's rule)"))
        return
    if t.flag("use_sliding_window") is False or not window:
        return
    pattern = t.count("sliding_window_pattern", "_sliding_window_pattern")
    if family in ALTERNATE:
        windowed, rule = (layers + 1) // 2, (
            f"model_type {family} without layer_types: every other layer slides, the first "
            f"too ({ALTERNATE[family]}'s rule)")
    elif family in PATTERNED or pattern is not None:
        if pattern is None:
            pattern = GEMMA3_PATTERN
            given = f"no sliding_window_pattern: Gemma 3's {pattern}"
        else:
            given = f"sliding_window_pattern {pattern}"
        windowed = layers - layers // pattern
        rule = f"{given}: {pattern - 1} of every {pattern} layers slide (Gemma 3's rule)"
    elif family in EVERY_LAYER:
        windowed, rule = layers, None
    else:
        windowed, rule = layers, (f"model_type {family or '?'} without layer_types: every "
                                  "layer slides (Mistral's rule)")
    _put_window(t, d, windowed, window, "sliding_window", SLIDING, rule)


def _layer_types(t: c.Tree, kinds, layers: int) -> tuple[int, int]:
    """(sliding, chunked) layers of layer_types: one name per layer."""
    if not isinstance(kinds, list) or len(kinds) != layers:
        got = f"{len(kinds)} entries" if isinstance(kinds, list) else type(kinds).__name__
        raise ValueError(f"{t.where}: layer_types must name the attention of each of the "
                         f"{layers} layers (num_hidden_layers), not {got}")
    for i, kind in enumerate(kinds):
        if kind not in (SLIDING, FULL, CHUNKED):
            raise c.bad(t.where, f"layer_types[{i}]", kind,
                        f"is not an attention codesign models ({FULL}, {SLIDING}, {CHUNKED})")
    sliding, chunked = kinds.count(SLIDING), kinds.count(CHUNKED)
    if sliding and chunked:
        raise ValueError(f"{t.where}: layer_types mixes {SLIDING} and {CHUNKED} layers; "
                         "codesign models one window per model")
    return sliding, chunked


def _chunked(t: c.Tree, d: c.Draft, layers: int, chunk: int) -> None:
    """Llama 4: no_rope_layers (1: a RoPE layer, chunked) or, without it, every
    no_rope_layer_interval-th layer full."""
    rope = t.get("no_rope_layers")
    if rope:
        if (not isinstance(rope, list) or len(rope) != layers
                or any(r not in (0, 1) or isinstance(r, bool) for r in rope)):
            raise ValueError(f"{t.where}: no_rope_layers must give 0 or 1 for each of the "
                             f"{layers} layers (num_hidden_layers)")
        _put_window(t, d, sum(rope), chunk, "attention_chunk_size", CHUNKED)
        return
    interval = t.count("no_rope_layer_interval")
    given = f"no_rope_layer_interval {interval}" if interval else \
        f"no no_rope_layers: Llama 4's interval {LLAMA4_NOPE_INTERVAL}"
    interval = interval or LLAMA4_NOPE_INTERVAL
    _put_window(t, d, layers - layers // interval, chunk, "attention_chunk_size", CHUNKED,
                f"{given}: every {interval}th layer full (no RoPE), the others chunked "
                "(Llama 4's rule)")


def _put_window(t: c.Tree, d: c.Draft, windowed: int, window, key: str, kind: str,
                rule: str | None = None) -> None:
    """`windowed` layers attend within `window` (the config's `key`) tokens;
    `rule`: the family's rule that gave the count, said as an assumption."""
    if not window:
        raise c.bad(t.where, key, window, f"must be a whole number >= 1 for the {windowed} "
                    f"{kind} layers")
    if rule is None:
        d.put("model.window_layers", windowed)
    else:
        d.assume("model.window_layers", windowed, rule)
    d.put("model.window", window)
    if kind == CHUNKED:
        d.put("model.chunked_attention", True)
