"""Transformers (dense or MoE): parameters, FLOPs and activation bytes, with presets.

FLOP accounting follows Narayanan et al. 2021 (appendix): a forward pass costs
2 FLOPs per multiply-add of every weight matrix per token, plus the attention
scores (Q K^T and A V: 4 s h FLOPs per token per layer), plus the logits
(2 V h per token); backward costs twice the forward. For GPT shapes this is
their 72 B s l h^2 (1 + s/(6h) + V/(16 l h)) without recomputation and
96 B s l h^2 (...) with full recomputation (one more forward of the layers,
not of the logits). Selective recomputation (Korthikanti et al. 2022)
recomputes only the attention scores.

Activation bytes per layer follow Korthikanti et al. 2022, generalised from
their GPT block (ffn = 4h) to any ffn width, gated FFNs and GQA:
attention 11 s b h + 5 a s^2 b (K and V scaled by kv_heads/heads),
MLP 3 s b h + 4 s b f (+ 2 s b f for the gate), layer norms 4 s b h, all in
16-bit. DeepSeek-V3's MLA attention is approximated by standard multi-head
attention of the same width (stated in its preset).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _checks as C

RECOMPUTE = ("none", "selective", "full")


class Transformer(eqx.Module):
    """A decoder-only transformer; MoE when `moe_layers` > 0.

    The last `moe_layers` of `layers` replace their FFN by `experts` routed
    experts (top `top_k` per token) plus `shared_experts` always-on experts, each
    of width `expert_ffn_hidden`. `gated` FFNs (SwiGLU) have three matrices.
    """

    layers: jax.Array
    hidden: jax.Array
    heads: jax.Array
    kv_heads: jax.Array
    ffn_hidden: jax.Array
    seq_len: jax.Array
    vocab: jax.Array
    moe_layers: jax.Array
    experts: jax.Array
    shared_experts: jax.Array
    top_k: jax.Array
    expert_ffn_hidden: jax.Array
    gated: bool = eqx.field(static=True, default=False)
    tied_embeddings: bool = eqx.field(static=True, default=True)
    name: str = eqx.field(static=True, default="custom")

    def __init__(self, layers, hidden, heads, seq_len, vocab, *, kv_heads=None,
                 ffn_hidden=None, moe_layers=0, experts=0, shared_experts=0, top_k=0,
                 expert_ffn_hidden=0, gated=False, tied_embeddings=True, name="custom"):
        f = C.as_float
        self.layers, self.hidden, self.heads = f(layers), f(hidden), f(heads)
        self.kv_heads = f(heads if kv_heads is None else kv_heads)
        self.ffn_hidden = f(4 * hidden if ffn_hidden is None else ffn_hidden)
        self.seq_len, self.vocab = f(seq_len), f(vocab)
        self.moe_layers, self.experts = f(moe_layers), f(experts)
        self.shared_experts, self.top_k = f(shared_experts), f(top_k)
        self.expert_ffn_hidden = f(expert_ffn_hidden)
        self.gated, self.tied_embeddings, self.name = gated, tied_embeddings, name

    def __check_init__(self):
        for k in ("layers", "hidden", "heads", "kv_heads", "seq_len", "vocab", "ffn_hidden"):
            C.at_least_one(f"model.{k}", getattr(self, k))
        for k in ("moe_layers", "experts", "shared_experts", "top_k", "expert_ffn_hidden"):
            C.non_negative(f"model.{k}", getattr(self, k))
        C.check("model.moe_layers", self.moe_layers, lambda v: v <= C.concrete(self.layers),
                f"must not exceed model.layers={C.concrete(self.layers).item():g}")
        C.check("model.heads", self.heads,
                lambda v: v % C.concrete(self.kv_heads) == 0,
                f"must be a multiple of model.kv_heads={C.concrete(self.kv_heads).item():g}")
        moe = C.concrete(self.moe_layers)
        if moe is not None and moe > 0:
            C.at_least_one("model.experts", self.experts)
            C.at_least_one("model.top_k", self.top_k)
            C.at_least_one("model.expert_ffn_hidden", self.expert_ffn_hidden)
            C.check("model.top_k", self.top_k, lambda v: v <= C.concrete(self.experts),
                    f"must not exceed model.experts={C.concrete(self.experts).item():g}")

    # ---------------------------------------------------------------- shapes
    @property
    def dense_layers(self) -> jax.Array:
        return self.layers - self.moe_layers

    @property
    def kv_hidden(self) -> jax.Array:
        return self.hidden * self.kv_heads / self.heads

    @property
    def ffn_matrices(self) -> float:
        return 3.0 if self.gated else 2.0

    # ------------------------------------------------------------ parameters
    def attention_params(self) -> jax.Array:
        """Q and O (h x h each), K and V (h x kv_hidden each), per layer."""
        return 2 * self.hidden**2 + 2 * self.hidden * self.kv_hidden

    def dense_ffn_params(self) -> jax.Array:
        return self.ffn_matrices * self.hidden * self.ffn_hidden

    def expert_params(self) -> jax.Array:
        """One expert's FFN."""
        return self.ffn_matrices * self.hidden * self.expert_ffn_hidden

    def embedding_params(self) -> jax.Array:
        return self.vocab * self.hidden * (1.0 if self.tied_embeddings else 2.0)

    def routed_expert_params(self) -> jax.Array:
        """All routed experts of all MoE layers (sharded by expert parallelism)."""
        return self.moe_layers * self.experts * self.expert_params()

    def params(self) -> jax.Array:
        """Total parameters (norms and biases, < 0.1%, are left out)."""
        moe_ffn = self.shared_experts * self.expert_params() + self.hidden * self.experts
        return (self.layers * self.attention_params() + self.dense_layers * self.dense_ffn_params()
                + self.moe_layers * moe_ffn + self.routed_expert_params()
                + self.embedding_params())

    def active_params_per_token(self) -> jax.Array:
        """Matrix parameters each token multiplies through (layers + logits)."""
        moe_ffn = (self.top_k + self.shared_experts) * self.expert_params()
        return (self.layers * self.attention_params() + self.dense_layers * self.dense_ffn_params()
                + self.moe_layers * moe_ffn + self.vocab * self.hidden)

    # ----------------------------------------------------------------- FLOPs
    def layer_forward_flops_per_token(self, moe: bool) -> jax.Array:
        """Matrix FLOPs of one layer's forward per token (excluding attention scores)."""
        ffn = ((self.top_k + self.shared_experts) * self.expert_params() if moe
               else self.dense_ffn_params())
        return 2 * (self.attention_params() + ffn)

    def attention_score_flops_per_token(self) -> jax.Array:
        """Q K^T and A V of one layer, per token, forward (Narayanan: 4 s h)."""
        return 4 * self.seq_len * self.hidden

    def logits_flops_per_token(self) -> jax.Array:
        return 2 * self.vocab * self.hidden

    def forward_flops_per_token(self) -> jax.Array:
        layers = (self.dense_layers * self.layer_forward_flops_per_token(False)
                  + self.moe_layers * self.layer_forward_flops_per_token(True))
        return (layers + self.layers * self.attention_score_flops_per_token()
                + self.logits_flops_per_token())

    def model_flops_per_token(self) -> jax.Array:
        """Forward + backward (3x forward): the FLOPs MFU counts."""
        return 3 * self.forward_flops_per_token()

    def hardware_flops_per_token(self, recompute: str) -> jax.Array:
        """Model FLOPs plus what recomputation adds: the FLOPs HFU counts."""
        _check_recompute(recompute)
        if recompute == "full":
            extra = self.forward_flops_per_token() - self.logits_flops_per_token()
        elif recompute == "selective":
            extra = self.layers * self.attention_score_flops_per_token()
        else:
            extra = jnp.zeros(())
        return self.model_flops_per_token() + extra

    # ----------------------------------------------------------- activations
    def activation_bytes_per_layer(self, micro_batch, tp, sequence_parallel: bool,
                                   recompute: str, moe: bool, cp=1.0) -> jax.Array:
        """Bytes one layer keeps for backward, per GPU, per micro-batch in flight.

        Korthikanti et al. 2022, eqs. 1-6, generalised (see module docstring).
        Tensor parallelism divides everything but the 10 s b h of norms,
        dropout masks and block inputs unless sequence parallelism divides those
        too; context parallelism divides s.
        """
        _check_recompute(recompute)
        s, b, h = self.seq_len / cp, micro_batch, self.hidden
        if recompute == "full":  # only the layer input survives
            return 2 * s * b * h / (tp if sequence_parallel else 1.0)
        f = ((self.top_k + self.shared_experts) * self.expert_ffn_hidden if moe
             else self.ffn_hidden)
        kv = self.kv_heads / self.heads
        # split by tp: Q K^T inputs (2 + 2kv), V (2kv), projection input (2),
        # FFN activation input and fc2 input (4 f/h), the gate (2 f/h)
        split_sbh = 4 + 4 * kv + (6.0 if self.gated else 4.0) * f / h
        scores = 5 * self.heads * s * self.seq_len * b  # softmax, its mask, dropout
        if recompute == "selective":
            scores = 0.0 * scores
        split = split_sbh * s * b * h + scores
        replicated = 10 * s * b * h  # norms (4), block inputs (4), dropout masks (2)
        return split / tp + replicated / (tp if sequence_parallel else 1.0)


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r} is not one of {', '.join(RECOMPUTE)}")


# --------------------------------------------------------------------------- presets
@dataclasses.dataclass(frozen=True)
class Preset:
    model: Transformer
    description: str
    sources: dict


_PRESETS = {
    # Shoeybi et al. 2019 (Megatron-LM), Table 1: 8.3B: 72 layers, h 3072, 32 heads;
    # seq 1024, vocab 51,200 (GPT-2 BPE padded).
    "megatron-8.3b": lambda: Preset(
        Transformer(72, 3072, 32, 1024, 51200, name="megatron-8.3b"),
        "Megatron-LM 2019 GPT-2 8.3B", {"shape": "Shoeybi et al. 2019, Table 1"}),
    # Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, n_ctx 2048;
    # vocab 51,200 as in Megatron's GPT runs (Narayanan et al. 2021).
    "gpt3-175b": lambda: Preset(
        Transformer(96, 12288, 96, 2048, 51200, name="gpt3-175b"),
        "GPT-3 175B", {"shape": "Brown et al. 2020, Table 2.1"}),
    # Smith et al. 2022 (MT-NLG): 105 layers, h 20480, 128 heads, seq 2048.
    "megatron-530b": lambda: Preset(
        Transformer(105, 20480, 128, 2048, 51200, name="megatron-530b"),
        "Megatron-Turing NLG 530B", {"shape": "Smith et al. 2022"}),
    # Narayanan et al. 2021, Table 1: 1T: 128 layers, h 25600, 160 heads, seq 2048.
    "megatron-1t": lambda: Preset(
        Transformer(128, 25600, 160, 2048, 51200, name="megatron-1t"),
        "Megatron 1T (Narayanan et al. 2021)", {"shape": "Narayanan et al. 2021, Table 1"}),
    # Llama 3 herd paper (Dubey et al. 2024), Table 3; seq 8192, vocab 128,256, untied.
    "llama3-8b": lambda: Preset(
        Transformer(32, 4096, 32, 8192, 128256, kv_heads=8, ffn_hidden=14336, gated=True,
                    tied_embeddings=False, name="llama3-8b"),
        "Llama 3 8B", {"shape": "Dubey et al. 2024, Table 3"}),
    "llama3-70b": lambda: Preset(
        Transformer(80, 8192, 64, 8192, 128256, kv_heads=8, ffn_hidden=28672, gated=True,
                    tied_embeddings=False, name="llama3-70b"),
        "Llama 3 70B", {"shape": "Dubey et al. 2024, Table 3"}),
    "llama3-405b": lambda: Preset(
        Transformer(126, 16384, 128, 8192, 128256, kv_heads=8, ffn_hidden=53248, gated=True,
                    tied_embeddings=False, name="llama3-405b"),
        "Llama 3 405B", {"shape": "Dubey et al. 2024, Table 3"}),
    # Jiang et al. 2024 (Mixtral): 32 layers, h 4096, 32 heads, 8 kv heads, 8 experts
    # of width 14336, top-2, vocab 32,000; seq 4096 (training context assumed).
    "mixtral-8x7b": lambda: Preset(
        Transformer(32, 4096, 32, 4096, 32000, kv_heads=8, ffn_hidden=14336, moe_layers=32,
                    experts=8, top_k=2, expert_ffn_hidden=14336, gated=True,
                    tied_embeddings=False, name="mixtral-8x7b"),
        "Mixtral 8x7B", {"shape": "Jiang et al. 2024", "seq_len": "assumption"}),
    # DeepSeek-V3 report: 61 layers, h 7168, 128 heads, first 3 layers dense
    # (ffn 18432), 256 routed + 1 shared expert of width 2048, top-8, vocab
    # 129,280, seq 4096. MLA approximated by 128-head MHA (see module docstring).
    "deepseek-v3": lambda: Preset(
        Transformer(61, 7168, 128, 4096, 129280, ffn_hidden=18432, moe_layers=58,
                    experts=256, shared_experts=1, top_k=8, expert_ffn_hidden=2048,
                    gated=True, tied_embeddings=False, name="deepseek-v3"),
        "DeepSeek-V3 671B (MoE, 37B active)",
        {"shape": "DeepSeek-V3 technical report", "attention": "MLA approximated by MHA"}),
}
PRESET_NAMES = tuple(_PRESETS)


def preset(name: str) -> Preset:
    if name not in _PRESETS:
        raise ValueError(f"model preset {name!r} is unknown; choose one of "
                         f"{', '.join(PRESET_NAMES)}")
    return _PRESETS[name]()


def model(name: str) -> Transformer:
    return preset(name).model
