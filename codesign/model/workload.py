"""Transformers (dense or MoE; MHA, GQA or MLA): parameters, FLOPs and activation bytes.

FLOP conventions (what MFU and HFU count; docs/model.md compares them with
published MFUs). Model FLOPs follow Narayanan et al. 2021 (appendix) and
PaLM (Chowdhery et al. 2022, appendix B): 2 FLOPs per multiply-add of every
weight matrix per token, plus the attention scores Q K^T and A V over the
*whole* s x s matrix (no causal discount: 2 s heads (d_qk + d_v) per token
per layer, 4 s h for MHA), plus the logits (2 V h per token); backward costs
twice the forward. For GPT shapes this is their 72 B s l h^2 (1 + s/(6h) +
V/(16 l h)). Hardware FLOPs add what recomputation redoes (full: one more
forward of the layers; selective, Korthikanti et al. 2022: the attention
scores). The FLOPs a kernel *executes* differ from both: a fused causal
attention kernel (FlashAttention) skips the masked half of the scores and its
backward recomputes them (2.5x the forward's FLOPs, Dao 2023); `step.py`
times what is executed and reports MFU/HFU by these conventions.

Attention kernels (`attention_kernel`, an `attention.AttentionKernel` or its
name): "flash" (2022 on) keeps only O(s) softmax statistics (fp32 log-sum-exp
per query and head) for backward, never writes the s x s scores to HBM and
skips the masked half; "naive" (Megatron 2019-2021) materialises, stores and
streams the scores (softmax output, its dropout mask and output: 5 a s^2 b
bytes with dropout, 2 a s^2 b without) and computes the whole matrix.

Activation bytes per layer follow Korthikanti et al. 2022, generalised from
their GPT block (ffn = 4h) to any ffn width, gated FFNs, GQA and MLA:
attention 11 s b h (K and V scaled by their widths) plus the scores above,
MLP 3 s b h + 4 s b f (+ 2 s b f for the gate), layer norms 4 s b h, all in
16-bit; dropout masks (2 s b h) only for models trained with dropout.

MLA (DeepSeek-V2/V3): queries through a rank-q_lora_rank bottleneck, keys and
values through a shared rank-kv_lora_rank latent plus a decoupled RoPE key of
qk_rope_head_dim; per head a query/key width of qk_head_dim + qk_rope_head_dim
and a value width of v_head_dim. Its parameters and score FLOPs are costed
from these shapes; in training K and V are materialised per head.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from ..checks import float_field, static_field, strategy_field
from ..domains import MAX_WIDTH, count
from . import attention as attn
from . import strategies
from .relax import once as _once
from .relax import where

RECOMPUTE = strategies.RECOMPUTES


# (dense, MoE): `Transformer.activation_bytes_per_layer` of both kinds of layer at once
LAYER_KINDS = np.array([False, True])


class Transformer(eqx.Module):
    """A decoder-only transformer; MoE when `moe_layers` > 0.

    The last `moe_layers` of `layers` replace their FFN by `experts` routed
    experts (top `top_k` per token) plus `shared_experts` always-on experts, each
    of width `expert_ffn_hidden`. `gated` FFNs (SwiGLU) have three matrices.
    """

    layers: jax.Array = float_field("model.layers", count(1e4))
    hidden: jax.Array = float_field("model.hidden", count(MAX_WIDTH))
    heads: jax.Array = float_field("model.heads", count(1e5))
    # default: heads (MHA)
    kv_heads: jax.Array = float_field("model.kv_heads", count(1e5), default=None, kw_only=True)
    # per-head query/key/value width of MHA/GQA (Qwen3: 128 on a hidden of 4096
    # over 64 heads; Megatron's --kv-channels, HF's head_dim); 0 = hidden / heads
    head_dim: jax.Array = float_field("model.head_dim", count(MAX_WIDTH, lo=0.0), default=0.0,
                                      kw_only=True)
    # default: 4 hidden
    ffn_hidden: jax.Array = float_field("model.ffn_hidden", count(MAX_WIDTH), default=None,
                                        kw_only=True)
    seq_len: jax.Array = float_field("model.seq_len", count(MAX_WIDTH), unit="tokens")
    vocab: jax.Array = float_field("model.vocab", count(MAX_WIDTH))
    moe_layers: jax.Array = float_field("model.moe_layers", count(1e4, lo=0.0), default=0.0,
                                        kw_only=True)
    experts: jax.Array = float_field("model.experts", count(1e5, lo=0.0), default=0.0,
                                     kw_only=True)
    shared_experts: jax.Array = float_field("model.shared_experts", count(1e4, lo=0.0),
                                            default=0.0, kw_only=True)
    top_k: jax.Array = float_field("model.top_k", count(1e5, lo=0.0), default=0.0, kw_only=True)
    expert_ffn_hidden: jax.Array = float_field("model.expert_ffn_hidden", count(MAX_WIDTH, lo=0.0),
                                               default=0.0, kw_only=True)
    # MLA only (0 = full-rank queries)
    q_lora_rank: jax.Array = float_field("model.q_lora_rank", count(MAX_WIDTH, lo=0.0),
                                         default=0.0, kw_only=True)
    # MLA only
    kv_lora_rank: jax.Array = float_field("model.kv_lora_rank", count(MAX_WIDTH, lo=0.0),
                                          default=0.0, kw_only=True)
    # MLA only: per-head query/key width without RoPE
    qk_head_dim: jax.Array = float_field("model.qk_head_dim", count(MAX_WIDTH, lo=0.0),
                                         default=0.0, kw_only=True)
    # MLA only: decoupled RoPE width
    qk_rope_head_dim: jax.Array = float_field("model.qk_rope_head_dim", count(MAX_WIDTH, lo=0.0),
                                              default=0.0, kw_only=True)
    # MLA only
    v_head_dim: jax.Array = float_field("model.v_head_dim", count(MAX_WIDTH, lo=0.0),
                                        default=0.0, kw_only=True)
    # layers whose attention sees only a window of `window` keys (GPT-OSS: every
    # other layer, 128 tokens; Gemma 2: every other, 4,096; Gemma 3: 5 of 6, 1,024)
    window_layers: jax.Array = float_field("model.window_layers", count(1e4, lo=0.0),
                                           default=0.0, kw_only=True)
    window: jax.Array = float_field("model.window", count(MAX_WIDTH, lo=0.0), default=0.0,
                                    unit="tokens", kw_only=True)
    # multi-token prediction depth (DeepSeek-V3: 1): each depth a projection of
    # the hidden state and the next token's embedding (2h x h), one more block
    # (an MoE block in an MoE model) and the shared output head, on the last
    # pipeline stage (Megatron-Core's mtp_num_layers)
    mtp_layers: jax.Array = float_field("model.mtp_layers", count(100, lo=0.0), default=0.0,
                                        kw_only=True)
    # a learnt logit per head in every softmax (GPT-OSS): heads parameters per layer
    attention_sinks: bool = static_field("model.attention_sinks", bool, default=False,
                                         kw_only=True)
    # the windowed layers attend within fixed chunks of `window` tokens (Llama 4)
    # instead of a window sliding with the query (Mistral, Gemma, GPT-OSS)
    chunked_attention: bool = static_field("model.chunked_attention", bool, default=False,
                                           kw_only=True)
    gated: bool = static_field("model.gated", bool, default=False, kw_only=True)
    tied_embeddings: bool = static_field("model.tied_embeddings", bool, default=True,
                                         kw_only=True)
    # multi-head (incl. GQA/MQA via kv_heads) or multi-head latent
    # (`attention.Attention`, or its name)
    attention: attn.Attention = strategy_field(
        "model.attention", attn.attention, attn.ATTENTION_CLASSES,
        default=attn.Mha(), kw_only=True)
    # how the attention core runs (`attention.AttentionKernel`, or its name)
    attention_kernel: attn.AttentionKernel = strategy_field(
        "model.attention_kernel", attn.attention_kernel, attn.ATTENTION_KERNEL_CLASSES,
        default=attn.FlashAttention(), kw_only=True)
    dropout: bool = static_field("model.dropout", bool, default=False, kw_only=True)

    def __post_init__(self):
        if self.kv_heads is None:
            self.kv_heads = self.heads
        if self.ffn_hidden is None:
            self.ffn_hidden = 4 * self.hidden

    def __check_init__(self):
        """The rules between keys (each field's domain is checked by its
        declaration); a rule with a traced operand is skipped here, and
        `scenario.Scenario.checked` covers it."""
        g = lambda x: f"{x.item():g}"  # noqa: E731
        layers, kv_heads = checks.concrete(self.layers), checks.concrete(self.kv_heads)
        if layers is not None:
            checks.check("model.moe_layers", self.moe_layers, lambda v: v <= layers,
                          f"must not exceed model.layers={g(layers)}")
            checks.check("model.window_layers", self.window_layers, lambda v: v <= layers,
                          f"must not exceed model.layers={g(layers)}")
        windowed = checks.concrete(self.window_layers)
        if windowed is not None and windowed > 0:
            checks.at_least_one("model.window", self.window)
        if kv_heads is not None:
            checks.check("model.heads", self.heads, lambda v: v % kv_heads == 0,
                          f"must be a multiple of model.kv_heads={g(kv_heads)}")
        self.attention.check(self)
        moe = checks.concrete(self.moe_layers)
        if moe is not None and moe > 0:
            checks.at_least_one("model.experts", self.experts)
            checks.at_least_one("model.top_k", self.top_k)
            checks.at_least_one("model.expert_ffn_hidden", self.expert_ffn_hidden)
            experts = checks.concrete(self.experts)
            if experts is not None:
                checks.check("model.top_k", self.top_k, lambda v: v <= experts,
                              f"must not exceed model.experts={g(experts)}")

    # ---------------------------------------------------------------- shapes
    @property
    @_once
    def dense_layers(self) -> jax.Array:
        return self.layers - self.moe_layers

    @property
    @_once
    def mtp_moe_layers(self) -> jax.Array:
        """The MTP blocks that are MoE blocks (all of them in an MoE model)."""
        return where(self.moe_layers > 0, self.mtp_layers, 0.0)

    @property
    @_once
    def moe_blocks(self) -> jax.Array:
        """MoE blocks: the MoE layers and the MTP depths' MoE blocks."""
        return self.moe_layers + self.mtp_moe_layers

    @property
    @_once
    def dense_blocks(self) -> jax.Array:
        """Dense blocks: the dense layers and the MTP depths' dense blocks."""
        return self.dense_layers + self.mtp_layers - self.mtp_moe_layers

    @property
    @_once
    def blocks(self) -> jax.Array:
        """Transformer blocks: the layers and the MTP depths' blocks."""
        return self.layers + self.mtp_layers

    @property
    @_once
    def head_width(self) -> jax.Array:
        """MHA/GQA's per-head width: `head_dim`, or hidden / heads where it is 0."""
        return where(self.head_dim > 0, self.head_dim, self.hidden / self.heads)

    @property
    @_once
    def kv_hidden(self) -> jax.Array:
        """MHA/GQA's width of K (and of V): kv_heads x the head width."""
        return self.kv_heads * self.head_width

    @property
    def ffn_matrices(self) -> float:
        return 3.0 if self.gated else 2.0

    @property
    @_once
    def qk_width(self) -> jax.Array:
        """Per-head query/key width."""
        return self.attention.qk_width(self)

    @property
    @_once
    def v_width(self) -> jax.Array:
        """Per-head value width."""
        return self.attention.v_width(self)

    @_once
    def attention_gemms(self) -> tuple:
        """The attention block's weight matrices per layer, as (k, n, split,
        count): `count` of a token's (1 x k) @ (k x n) (1, or 0 for a matrix the
        model's shape leaves out: MLA's query bottleneck at q_lora_rank 0);
        `split` says which side tensor parallelism cuts ("n" column-parallel,
        "k" row-parallel, "" replicated)."""
        return self.attention.gemms(self)

    @_once
    def kv_elements_per_token(self) -> jax.Array:
        """Elements of K and V per token as the attention kernel reads them (what
        ring attention exchanges)."""
        return self.attention.kv_elements_per_token(self)

    # ------------------------------------------------------------ parameters
    @_once
    def attention_params(self) -> jax.Array:
        """Weights of one layer's attention: Q and O (h x heads x head width
        each), K and V (h x kv_hidden each) for MHA/GQA; the projections of `attention_gemms`
        for MLA."""
        # a matrix counted a Python 1 multiplies nothing; the sum starts at its first
        matrices = functools.reduce(operator.add, (
            k * n if isinstance(c, (int, float)) and c == 1 else c * k * n
            for k, n, _, c in self.attention_gemms()))
        return matrices + self.heads if self.attention_sinks else matrices

    @_once
    def dense_ffn_params(self) -> jax.Array:
        return self.ffn_matrices * self.hidden * self.ffn_hidden

    @_once
    def expert_params(self) -> jax.Array:
        """One expert's FFN."""
        return self.ffn_matrices * self.hidden * self.expert_ffn_hidden

    @_once
    def embedding_params(self) -> jax.Array:
        return self.vocab * self.hidden * (1.0 if self.tied_embeddings else 2.0)

    @_once
    def routed_expert_params(self) -> jax.Array:
        """All routed experts of all MoE blocks (sharded by expert parallelism)."""
        return self.moe_blocks * self.experts * self.expert_params()

    @_once
    def mtp_projection_params(self) -> jax.Array:
        """One MTP depth's projection of [hidden; next embedding] (2h x h)."""
        return 2.0 * self.hidden * self.hidden

    @_once
    def layer_params(self) -> jax.Array:
        """Parameters of all layers but their routed experts (attention, dense
        FFNs, shared experts, routers): what tensor parallelism alone shards."""
        return self.params() - self.routed_expert_params() - self.embedding_params()

    def _blocks_params(self, moe_ffn) -> jax.Array:
        """Attention and FFN parameters of every block (the MTP depths' too, with
        their projections), `moe_ffn` those of one MoE block's FFN."""
        return (self.blocks * self.attention_params()
                + self.dense_blocks * self.dense_ffn_params() + self.moe_blocks * moe_ffn
                + self.mtp_layers * self.mtp_projection_params())

    @_once
    def params(self) -> jax.Array:
        """Total parameters (norms and biases, < 0.1%, are left out)."""
        moe_ffn = self.shared_experts * self.expert_params() + self.hidden * self.experts
        return self._blocks_params(moe_ffn) + self.routed_expert_params() + self.embedding_params()

    @_once
    def active_params_per_token(self) -> jax.Array:
        """Matrix parameters each token multiplies through (blocks + logits, the
        output head once per MTP depth too)."""
        moe_ffn = (self.top_k + self.shared_experts) * self.expert_params()
        return self._blocks_params(moe_ffn) + (1.0 + self.mtp_layers) * self.vocab * self.hidden

    # ----------------------------------------------------------------- FLOPs
    @_once
    def layer_forward_flops_per_token(self, moe: bool) -> jax.Array:
        """Matrix FLOPs of one layer's forward per token (excluding attention scores)."""
        ffn = ((self.top_k + self.shared_experts) * self.expert_params() if moe
               else self.dense_ffn_params())
        return 2 * (self.attention_params() + ffn)

    @property
    @_once
    def score_keys(self) -> jax.Array:
        """Keys per query of the attention scores, the mean over the layers, in
        the whole-matrix convention (twice what a causal kernel executes): s
        for full attention; for a window of w = min(window, s) keys, 2w - w^2/s
        sliding (query i sees min(i, w) keys: w - w^2/2s on average), w chunked
        (query i sees i mod w: w/2)."""
        s, w = self.seq_len, self.window_keys
        windowed = w if self.chunked_attention else 2.0 * w - w * w / s
        return s - self.windowed_share * (s - windowed)

    @property
    @_once
    def window_keys(self) -> jax.Array:
        """A windowed layer's keys per query at most: min(window, s)."""
        return jnp.minimum(self.window, self.seq_len)

    @property
    @_once
    def windowed_share(self) -> jax.Array:
        """The share of the layers with windowed attention."""
        return self.window_layers / self.layers

    @_once
    def attention_score_flops_per_token(self) -> jax.Array:
        """Q K^T and A V of one layer (the mean over the layers), per token,
        forward, over the whole s x s matrix (the MFU convention; Narayanan:
        4 s h for MHA), a windowed layer over its window (`score_keys`)."""
        return 2 * self.score_keys * self.heads * (self.qk_width + self.v_width)

    @_once
    def kv_share_per_layer(self) -> jax.Array:
        """The share of the sequence's K and V a query's keys span, the mean over
        the layers: 1 for full attention, min(window, s) / s for a windowed
        layer (what ring attention needs to pass around)."""
        return 1.0 - self.windowed_share * (1.0 - self.window_keys / self.seq_len)

    @_once
    def logits_flops_per_token(self) -> jax.Array:
        return 2 * self.vocab * self.hidden

    @_once
    def forward_flops_per_token(self, causal: bool = False) -> jax.Array:
        """One forward per token; `causal` counts only the unmasked half of the
        attention scores (a convention some MFU reports use)."""
        blocks, scores, logits = self._forward_terms()
        return blocks + (0.5 if causal else 1.0) * scores + logits

    @_once
    def _forward_terms(self) -> tuple:
        """(the blocks' and MTP's forward FLOPs per token, the attention scores',
        the output head's): `forward_flops_per_token`'s terms, the same for both
        counts of the scores."""
        layers = (self.dense_blocks * self.layer_forward_flops_per_token(False)
                  + self.moe_blocks * self.layer_forward_flops_per_token(True))
        mtp = self.mtp_layers * (2.0 * self.mtp_projection_params() + self.logits_flops_per_token())
        return (layers + mtp, self.blocks * self.attention_score_flops_per_token(),
                self.logits_flops_per_token())

    @_once
    def model_flops_per_token(self, causal: bool = False) -> jax.Array:
        """Forward + backward (3x forward): the FLOPs MFU counts."""
        return 3 * self.forward_flops_per_token(causal)

    def hardware_flops_per_token(self, recompute) -> jax.Array:
        """Model FLOPs plus what recomputation (a `strategies.Recompute` or its
        name) adds: the FLOPs HFU counts."""
        extra = strategies.recompute(recompute, "recompute").extra_flops_per_token(self)
        return self.model_flops_per_token() + extra

    # ----------------------------------------------------------- activations
    def activation_bytes_per_layer(self, micro_batch, tp, sequence_parallel: bool,
                                   recompute, moe, cp=1.0, precision=None, terms=None
                                   ) -> jax.Array:
        """Bytes one layer keeps for backward, per GPU, per micro-batch in flight:
        an MoE layer's where `moe` is true, a dense layer's where false (`moe`
        may be an array, [False, True] gives both kinds in one evaluation).

        Korthikanti et al. 2022, eqs. 1-6, generalised (see module docstring).
        Tensor parallelism divides everything but the norms, block inputs and
        dropout masks unless sequence parallelism divides those too; context
        parallelism divides s. `precision` (plan.Precision) scales the 16-bit
        accounting by the activation width; an fp8 GEMM recipe caches the
        linear layers' inputs in 8 bits (DeepSeek-V3, section 3.3). `recompute`
        is a `strategies.Recompute` or its name; `terms`: `activation_terms`
        of the same arguments if known.
        """
        recompute = strategies.recompute(recompute, "recompute")
        width = 1.0 if precision is None else precision.bytes("activations") / 2.0
        s, b, h = self.seq_len / cp, micro_batch, self.hidden
        if not recompute.keeps_layer_activations:  # only the layer input survives
            return jnp.ones(jnp.shape(moe)) * width * 2 * s * b * h / (
                tp if sequence_parallel else 1.0)
        kept = self.activation_terms(micro_batch, moe, cp, precision) if terms is None else terms
        terms = dict(kept)
        for module in recompute.modules(self):  # what each recomputed module does not keep
            share = None if module.layers == "all" else strategies.layer_share(module, moe)
            for term, dropped in module.dropped_bytes(self, kept).items():
                terms[term] = terms[term] - (dropped if share is None else share * dropped)
        split = terms["qkv"] + terms["attention_output"] + terms["ffn"]
        replicated = terms["norms"] + terms["norm_outputs"] + terms["dropout"] + terms["latents"]
        return (split + terms["scores"]) / tp + replicated / (tp if sequence_parallel else 1.0)

    def activation_terms(self, micro_batch, moe, cp=1.0, precision=None) -> dict:
        """{term: bytes} one layer keeps for backward per micro-batch before
        tensor parallelism, by tensor (`strategies.ACTIVATION_TERMS`; an MoE
        layer's where `moe` is true): split by tp, the per-head Q, K and V, the
        attention output (the projection's input), the FFN's first GEMM output
        and second GEMM input (6 f gated, 4 f plain: `strategies.
        ffn_term_elements`), the attention kernel's own (`scores`); replicated
        unless sequence-parallel, the two norms' inputs, their outputs (the
        QKV and first FFN GEMMs' inputs), dropout masks, MLA's latents. Only
        the FFN's term has `moe`'s shape; the others, the same in both kinds,
        are scalars.
        Korthikanti et al. 2022, eqs. 1-6, generalised (see
        `activation_bytes_per_layer`)."""
        width = 1.0 if precision is None else precision.bytes("activations") / 2.0
        s, b, h = self.seq_len / cp, micro_batch, self.hidden
        sbw = s * b * width
        f = where(moe, (self.top_k + self.shared_experts) * self.expert_ffn_hidden,
                      self.ffn_hidden)
        linear = 0.5 if precision is not None and precision.gemm == "fp8" else 1.0
        norms = 4.0 * h * sbw
        return {"qkv": 2 * self.attention.qkv_elements_per_token(self) * sbw,
                "attention_output": linear * 2 * self.heads * self.v_width * sbw,
                "ffn": linear * strategies.ffn_term_elements(self) * f * sbw,
                "scores": self.attention_kernel.stored_bytes(self, s, b, width),
                "norms": norms, "norm_outputs": norms,
                "dropout": 2.0 * h * sbw if self.dropout else 0.0,
                "latents": 2 * self.attention.latent_elements_per_token(self) * sbw}



# --------------------------------------------------------------------------- presets
@dataclasses.dataclass(frozen=True)
class Preset:
    model: Transformer
    description: str
    sources: dict


# Megatron-LM's GPT runs of 2019-2021 (and MT-NLG, early 2022): unfused
# attention that materialises the scores, dropout 0.1 (Megatron's default).
# Later presets train without dropout (Llama 3, Mixtral, DeepSeek-V3 report
# none) and with fused attention kernels (the Transformer default).
_MEGATRON_2019_2021 = dict(attention_kernel="naive", dropout=True)

_PRESETS = {
    # Shoeybi et al. 2019 (Megatron-LM), Table 1: 8.3B: 72 layers, h 3072, 32 heads;
    # seq 1024, vocab 51,200 (GPT-2 BPE padded).
    # Shoeybi et al. 2019: the 1.2B single-GPU baseline (40 layers, h 1536,
    # 16 heads), 39 TFLOP/s on one V100: calibrates the V100 matmul efficiency.
    "megatron-1.2b": lambda: Preset(
        Transformer(40, 1536, 16, 1024, 51200, **_MEGATRON_2019_2021),
        "Megatron-LM 2019 1.2B single-GPU baseline", {"shape": "Shoeybi et al. 2019"}),
    "megatron-8.3b": lambda: Preset(
        Transformer(72, 3072, 32, 1024, 51200, **_MEGATRON_2019_2021),
        "Megatron-LM 2019 GPT-2 8.3B", {"shape": "Shoeybi et al. 2019, Table 1"}),
    # Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, n_ctx 2048;
    # vocab 51,200 as in Megatron's GPT runs (Narayanan et al. 2021).
    "gpt3-175b": lambda: Preset(
        Transformer(96, 12288, 96, 2048, 51200, **_MEGATRON_2019_2021),
        "GPT-3 175B", {"shape": "Brown et al. 2020, Table 2.1"}),
    # Smith et al. 2022 (MT-NLG): 105 layers, h 20480, 128 heads, seq 2048.
    "megatron-530b": lambda: Preset(
        Transformer(105, 20480, 128, 2048, 51200,
                    **_MEGATRON_2019_2021),
        "Megatron-Turing NLG 530B", {"shape": "Smith et al. 2022"}),
    # Narayanan et al. 2021, Table 1: 1T: 128 layers, h 25600, 160 heads, seq 2048.
    "megatron-1t": lambda: Preset(
        Transformer(128, 25600, 160, 2048, 51200, **_MEGATRON_2019_2021),
        "Megatron 1T (Narayanan et al. 2021)", {"shape": "Narayanan et al. 2021, Table 1"}),
    # Llama 3 herd paper (Dubey et al. 2024), Table 3; seq 8192, vocab 128,256, untied.
    "llama3-8b": lambda: Preset(
        Transformer(32, 4096, 32, 8192, 128256, kv_heads=8, ffn_hidden=14336, gated=True,
                    tied_embeddings=False),
        "Llama 3 8B", {"shape": "Dubey et al. 2024, Table 3"}),
    "llama3-70b": lambda: Preset(
        Transformer(80, 8192, 64, 8192, 128256, kv_heads=8, ffn_hidden=28672, gated=True,
                    tied_embeddings=False),
        "Llama 3 70B", {"shape": "Dubey et al. 2024, Table 3"}),
    "llama3-405b": lambda: Preset(
        Transformer(126, 16384, 128, 8192, 128256, kv_heads=8, ffn_hidden=53248, gated=True,
                    tied_embeddings=False),
        "Llama 3 405B", {"shape": "Dubey et al. 2024, Table 3"}),
    # Jiang et al. 2024 (Mixtral): 32 layers, h 4096, 32 heads, 8 kv heads, 8 experts
    # of width 14336, top-2, vocab 32,000; seq 4096 (training context assumed).
    "mixtral-8x7b": lambda: Preset(
        Transformer(32, 4096, 32, 4096, 32000, kv_heads=8, ffn_hidden=14336, moe_layers=32,
                    experts=8, top_k=2, expert_ffn_hidden=14336, gated=True,
                    tied_embeddings=False),
        "Mixtral 8x7B", {"shape": "Jiang et al. 2024", "seq_len": "assumption"}),
    # DeepSeek-V3 report: 61 layers, h 7168, 128 heads, first 3 layers dense
    # (ffn 18432), 256 routed + 1 shared expert of width 2048, top-8, vocab
    # 129,280, seq 4096. MLA: q_lora_rank 1536, kv_lora_rank 512, per-head
    # query/key width 128 + 64 (RoPE), value width 128 (section 4.2).
    "deepseek-v3": lambda: Preset(
        Transformer(61, 7168, 128, 4096, 129280, ffn_hidden=18432, moe_layers=58,
                    experts=256, shared_experts=1, top_k=8, expert_ffn_hidden=2048,
                    gated=True, tied_embeddings=False, attention="mla", q_lora_rank=1536,
                    kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
        "DeepSeek-V3 671B (MoE, 37B active, MLA)",
        {"shape": "DeepSeek-V3 technical report, sections 2.1 and 4.2"}),
}
PRESET_NAMES = tuple(_PRESETS)


class ParameterCounts(NamedTuple):
    """A model's parameter counts with their conventions, as people quote them:
    `total` (`Transformer.params`: every matrix, the MTP depths' included, of
    which `mtp` are the MTP module's: its blocks and projections); `active`
    (`Transformer.active_params_per_token`: the matrices a token multiplies
    through, blocks and output head, without the input embedding, which is a
    lookup), `input_embedding` the untied input embedding's parameters (0 where it
    is the output head's matrix, `tied`), so `active + input_embedding` is the
    active count with it (the convention of model cards: Qwen3-30B-A3B's 3.3B)."""

    total: float
    mtp: float
    active: float
    input_embedding: float
    tied: bool


def parameter_counts(model: Transformer) -> ParameterCounts:
    """`model`'s `ParameterCounts`, each computed from its fields (the MTP module's
    share as the total less that of the same model without MTP depths)."""
    total = float(model.params())
    no_mtp = eqx.tree_at(lambda m: m.mtp_layers, model, jnp.zeros_like(model.mtp_layers))
    untied = 0.0 if model.tied_embeddings else float(model.vocab * model.hidden)
    return ParameterCounts(total, total - float(no_mtp.params()),
                           float(model.active_params_per_token()), untied,
                           bool(model.tied_embeddings))


def preset(name: str) -> Preset:
    checks.known("model preset", name, PRESET_NAMES)
    return _PRESETS[name]()


def model(name: str) -> Transformer:
    return preset(name).model
