"""The model's attention as strategy types (`strategies.Strategy`): what kind
of attention a layer has (`Mha`, `Mla`: widths, weight matrices, K/V elements,
MLA's latents) and how its core runs (`FlashAttention`, `NaiveAttention`: the
share of score FLOPs executed, what is kept for backward, the kernel's time).
A name is parsed once, by `attention` and `attention_kernel` (an unknown name
is a one-line ValueError naming the key and the choices).
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax

from .. import checks
from .relax import EXACT, smoothing, where
from .strategies import Strategy, parse

# ------------------------------------------------------------------- attention kernels

FLASH_BACKWARD_OVER_FORWARD = 2.5  # FlashAttention-2 backward: 5 GEMMs vs 2 (Dao 2023)


class AttentionKernel(Strategy):
    """How a layer's attention core (Q K^T, softmax, A V) runs: the share of
    the score FLOPs it executes, what it keeps for backward, and its time."""

    # share of the (whole s x s) score FLOPs a causal kernel executes
    executed_score_fraction: eqx.AbstractClassVar[float]

    @abc.abstractmethod
    def stored_bytes(self, model, s, b, width) -> jax.Array:
        """Bytes one layer's core keeps for backward (before tensor parallelism)
        for `s` queries of a micro-batch of `b` at activation `width` (x 16 bits)."""

    @abc.abstractmethod
    def time_s(self, model, micro_batch, queries, tp, chip, peak_flops_per_s, gemm_s,
               t=EXACT) -> tuple:
        """(forward, backward) seconds of one layer's core, one micro-batch, per
        GPU, for `queries` queries per sequence: `peak_flops_per_s` the chip's
        peak in the attention width, `gemm_s(rows)` the seconds of batched
        GEMMs in that width, rows (m, k, n, count), priced as one table
        (`compute.attention_time_s` passes both); `t` the model (`relax.Smoothing`:
        its bounds exact in both)."""


def _per(rate) -> jax.Array:
    """1 / rate, and 0 where rate is 0 (a rate not stated: no term)."""
    stated = rate > 0
    return where(stated, 1.0 / where(stated, rate, 1.0), 0.0)


def exponential_s(chip, exponentials) -> tuple:
    """(exposed, floor) seconds of a fused kernel's `exponentials` on the chip's
    special-function units: each costs 1 / exp_per_s - 1 / attention_exp_per_s
    beyond `chip.attention_efficiency` (which holds at the latter rate: a chip
    whose efficiency is its own pays nothing extra, Blackwell Ultra's twice
    Blackwell's rate takes half of each exponential's time off the kernel it
    borrows), and the units cannot run them faster than exp_per_s (the floor);
    both 0 on a chip with no stated rate. Rates at `chip.clock_fraction` of the
    datasheet's, as the tensor peak."""
    rate = chip.exp_per_s * chip.clock_fraction
    lent = where(chip.attention_exp_per_s > 0, chip.attention_exp_per_s,
                     chip.exp_per_s) * chip.clock_fraction
    per = _per(rate)
    return exponentials * (per - _per(lent)), exponentials * per


class FlashAttention(AttentionKernel):
    """One fused kernel (2022 on): keeps only fp32 log-sum-exp statistics per
    query and head, never writes the s x s scores to HBM, skips the masked
    half; runs at `chip.attention_efficiency` of the peak, its backward
    FLASH_BACKWARD_OVER_FORWARD x the forward's FLOPs (it recomputes the scores).

    Each executed score takes one exponential in forward (the softmax) and one
    in backward (P recomputed from the log-sum-exp), on the special-function
    units, whose time sits between the two GEMMs of a tile (NVIDIA, "Making
    Softmax More Efficient with NVIDIA Blackwell Ultra"): on a chip with a
    stated rate (`chip.exp_per_s`) they add `exponential_s`'s exposed time, and
    each pass is bounded below by both units, its FLOPs at the peak and its
    exponentials at the rate (FlashAttention-4: the exponentials match the
    GEMMs' time on B200 at head width 128)."""

    name: ClassVar[str] = "flash"
    executed_score_fraction: ClassVar[float] = 0.5

    def stored_bytes(self, model, s, b, width) -> jax.Array:
        return 4.0 * model.heads * s * b

    def time_s(self, model, micro_batch, queries, tp, chip, peak_flops_per_s, gemm_s,
               t=EXACT) -> tuple:
        flops = (micro_batch * queries * model.attention_score_flops_per_token() / tp
                 * self.executed_score_fraction)
        fwd = flops / (peak_flops_per_s * chip.attention_efficiency)
        bwd = FLASH_BACKWARD_OVER_FORWARD * fwd
        # one exponential per executed score: Q K^T and A V take 2 (qk + v) FLOPs each
        exposed, floor = exponential_s(chip, flops / (2.0 * (model.qk_width + model.v_width)))
        stated, t = chip.exp_per_s > 0, smoothing(t)
        fwd = where(stated, t.hard_max(fwd + exposed, t.hard_max(
            flops / peak_flops_per_s, floor)), fwd)
        bwd = where(stated, t.hard_max(bwd + exposed, t.hard_max(
            FLASH_BACKWARD_OVER_FORWARD * flops / peak_flops_per_s, floor)), bwd)
        overhead = chip.kernel_overhead_s
        return fwd + overhead, bwd + overhead


class NaiveAttention(AttentionKernel):
    """Megatron 2019-2021: batched GEMMs over the whole s x s matrix (one
    (query x key) pair per head), backward twice the forward; materialises and
    stores the softmax output (+ its dropout mask and output: 5 a s^2 b bytes
    with dropout, 2 a s^2 b without). The softmax traffic over s x s is in the
    memory-bound term."""

    name: ClassVar[str] = "naive"
    executed_score_fraction: ClassVar[float] = 1.0

    def stored_bytes(self, model, s, b, width) -> jax.Array:
        per = 5.0 if model.dropout else 2.0
        return per * model.heads * s * model.seq_len * b * width

    def time_s(self, model, micro_batch, queries, tp, chip, peak_flops_per_s, gemm_s,
               t=EXACT) -> tuple:
        heads = model.heads / tp * micro_batch
        fwd = gemm_s([(queries, model.qk_width, model.seq_len, heads),
                      (queries, model.seq_len, model.v_width, heads)])
        return fwd, 2.0 * fwd


ATTENTION_KERNEL_CLASSES = (FlashAttention, NaiveAttention)
ATTENTION_KERNELS = tuple(c.name for c in ATTENTION_KERNEL_CLASSES)


def attention_kernel(value, key: str = "model.attention_kernel") -> AttentionKernel:
    """The attention kernel named `value` (or `value` itself if it is an `AttentionKernel`)."""
    return parse(key, value, AttentionKernel, ATTENTION_KERNEL_CLASSES)


# ------------------------------------------------------------------- attention


class Attention(Strategy):
    """How a layer's attention projects a token into per-head queries, keys and
    values: its weight matrices, widths and stored elements, from the model's
    shapes (the MLA dimensions are the model's `model.*` keys)."""

    # backward recomputes the up-projected per-head Q, K, V and every RMSNorm
    # with the attention core (DeepSeek-V3, section 3.2.3)
    recomputes_projections: ClassVar[bool] = False

    def check(self, model) -> None:
        """Raise when the model lacks a dimension this attention reads."""

    @abc.abstractmethod
    def qk_width(self, model) -> jax.Array:
        """Per-head query/key width."""

    @abc.abstractmethod
    def v_width(self, model) -> jax.Array:
        """Per-head value width."""

    @abc.abstractmethod
    def gemms(self, model) -> tuple:
        """The weight matrices per layer, as (k, n, split, count)
        (`Transformer.attention_gemms`)."""

    def up_projections(self, model) -> tuple:
        """The rows of `gemms` that project low-rank latents up to the per-head
        Q, K and V (what Megatron-Core's `mla_up_proj` recomputes); none in MHA."""
        return ()

    @abc.abstractmethod
    def kv_elements_per_token(self, model) -> jax.Array:
        """Elements of K and V per token as the attention kernel reads them."""

    @abc.abstractmethod
    def qkv_elements_per_token(self, model) -> jax.Array:
        """Elements of Q, K and V per token that backward keeps (split by tp)."""

    def latent_elements_per_token(self, model) -> jax.Array:
        """Elements of low-rank latents per token that backward keeps (replicated)."""
        return 0.0


class Mha(Attention):
    """Multi-head attention, GQA/MQA through `kv_heads`, each head
    `model.head_width` wide (hidden / heads unless `head_dim` says otherwise):
    Q and O h x (heads x head width), K and V h x kv_hidden each."""

    name: ClassVar[str] = "mha"

    def qk_width(self, model) -> jax.Array:
        return model.head_width

    def v_width(self, model) -> jax.Array:
        return model.head_width

    def gemms(self, model) -> tuple:
        h, q = model.hidden, model.heads * model.head_width
        return ((h, q + 2 * model.kv_hidden, "n", 1.0), (q, h, "k", 1.0))

    def kv_elements_per_token(self, model) -> jax.Array:
        return 2 * model.kv_hidden

    def qkv_elements_per_token(self, model) -> jax.Array:
        return model.heads * model.head_width + 2 * model.kv_hidden


class Mla(Attention):
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a rank
    `q_lora_rank` bottleneck (0: full rank), keys and values through a shared
    rank `kv_lora_rank` latent plus a decoupled RoPE key of `qk_rope_head_dim`;
    per head a query/key width of qk_head_dim + qk_rope_head_dim and a value
    width of v_head_dim, K and V materialised per head in training."""

    name: ClassVar[str] = "mla"
    recomputes_projections: ClassVar[bool] = True

    def check(self, model) -> None:
        for k in ("kv_lora_rank", "qk_head_dim", "v_head_dim"):
            checks.at_least_one(f"model.{k}", getattr(model, k))

    def qk_width(self, model) -> jax.Array:
        return model.qk_head_dim + model.qk_rope_head_dim

    def v_width(self, model) -> jax.Array:
        return model.v_head_dim

    def gemms(self, model) -> tuple:
        h, heads, qk, v = model.hidden, model.heads, model.qk_width, model.v_width
        rope, q_rank = model.qk_rope_head_dim, model.q_lora_rank
        # the query's low-rank pair, or (q_lora_rank 0) its full-rank projection:
        # both rows, counted 1 or 0, so traced and concrete ranks cost the same
        low = where(q_rank > 0, 1.0, 0.0)
        q_up, kv_up = self.up_projections(model)
        return ((h, q_rank, "", low), q_up,
                (h, heads * qk, "n", 1.0 - low), (h, model.kv_lora_rank + rope, "", 1.0),
                kv_up, (heads * v, h, "k", 1.0))

    def up_projections(self, model) -> tuple:
        """The query's up projection (counted 0 at full rank) and the shared
        K/V latent's up projection to the per-head no-RoPE keys and values."""
        low = where(model.q_lora_rank > 0, 1.0, 0.0)
        return ((model.q_lora_rank, model.heads * model.qk_width, "n", low),
                (model.kv_lora_rank, model.heads * (model.qk_head_dim + model.v_width), "n",
                 1.0))

    def kv_elements_per_token(self, model) -> jax.Array:
        return model.heads * (model.qk_width + model.v_width)

    def qkv_elements_per_token(self, model) -> jax.Array:
        return model.heads * (2 * model.qk_width + model.v_width)

    def latent_elements_per_token(self, model) -> jax.Array:
        return model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim


ATTENTION_CLASSES = (Mha, Mla)
ATTENTIONS = tuple(c.name for c in ATTENTION_CLASSES)


def attention(value, key: str = "model.attention") -> Attention:
    """The attention named `value` (or `value` itself if it is an `Attention`)."""
    return parse(key, value, Attention, ATTENTION_CLASSES)
