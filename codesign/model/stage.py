"""The slowest pipeline stage's shape: its layers (dense and MoE, the MTP
blocks), the output-head passes and embedding matrices it holds, micro-batches
and tokens per micro-batch. The first thing a step computes, once (`step`),
and handed as a typed value to the traffic, the compute and the memory of that
step.

Without a layout the layers are split evenly (the stage's share padded to
whole layers) and the slowest stage is taken to hold the output head and the
MTP blocks too. With `parallel.pipeline_layout` (Megatron-Core's
`--pipeline-model-parallel-layout`, parsed by `parse_layout`) every pipeline
rank's layers are counted from the layout (`shapes`) and `step` costs the
heaviest: the rank with the most compute, and for memory the rank with the
most bytes (they may differ)."""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp

from .relax import EXACT, lattice_cubic, once, smooth_ceil, where
from .workload import Transformer

if TYPE_CHECKING:  # plan reads this module's layout parser
    from .plan import Plan

LAYOUT_KEY = "parallel.pipeline_layout"
# Megatron-Core's layer characters (`PipelineParallelLayerLayout.parse_str_to_list`)
LAYOUT_CHARS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}


class Shape(eqx.Module):
    """Per-micro-batch quantities of the slowest stage that the rows need."""

    layers_on_stage: jax.Array  # transformer blocks: decoder layers and MTP blocks
    moe_layers_on_stage: jax.Array  # of them, MoE blocks
    micro_batches: jax.Array
    tokens: jax.Array  # tokens per micro-batch per data-parallel rank (b s / cp)
    mtp_layers_on_stage: jax.Array  # MTP blocks (their [h; emb] projections)
    head_passes: jax.Array  # output head + loss passes: the head's and each MTP depth's
    # embedding matrices' parameters held (input and output); None: the even
    # split's rule (`params.local_params`)
    embedding_params: jax.Array | None = None

    @property
    def dense_layers_on_stage(self) -> jax.Array:
        return self._dense_layers_on_stage()

    @once
    def _dense_layers_on_stage(self) -> jax.Array:
        return self.layers_on_stage - self.moe_layers_on_stage


def shape(model: Transformer, plan: Plan, t=EXACT) -> Shape:
    """The stage a step costs without costing every stage: the even split's
    slowest stage, or with a layout the rank with the most blocks (`shapes`;
    `step` costs every rank of a layout and takes the heaviest)."""
    if plan.pipeline_layout:
        batched, valid = shapes(model, plan)
        most = batched.layers_on_stage + 1e-3 * batched.head_passes
        return pick(batched, jnp.argmax(where(valid, most, -jnp.inf)))
    # relaxed: the stage's share of the layers over an even split (>= 1, 1 where
    # pp v divides L), times the even split L / pp; m x layers, m ~ pp, stays flat
    # between stage counts where relaxing the count itself overshot it by ~12%
    padding = lattice_cubic(lambda pp, v: smooth_ceil(model.layers / (pp * v)) * v * pp
                            / model.layers, (plan.pp, plan.interleave), t)
    layers = model.layers / plan.pp * padding
    # the MTP blocks on the last stage, taken as the slowest (it holds the output head)
    return Shape(layers + model.mtp_layers,
                 layers * model.moe_layers / model.layers + model.mtp_moe_layers,
                 plan.micro_batches,
                 plan.micro_batch * model.seq_len / plan.cp,
                 model.mtp_layers, 1.0 + model.mtp_layers)


# ------------------------------------------------------------------ layouts
@dataclasses.dataclass(frozen=True)
class Layout:
    """A parsed pipeline layout: per virtual stage (Megatron's order: virtual
    stage k of pipeline rank r is stage k pp + r) the count of each layer
    character (`LAYOUT_CHARS`), and the characters in model order."""

    text: str
    stages: tuple  # of dicts char -> count, one a virtual stage
    order: str  # every character, stages concatenated (model order)

    def count(self, char: str) -> int:
        return self.order.count(char)


def layout_text(value) -> str:
    """`parallel.pipeline_layout` as a plan holds it: "" (no layout: the even
    split) or a layout whose grammar `parse_layout` accepts, spaces dropped."""
    text = str(value).replace(" ", "")
    if text:
        parse_layout(text)
    return text


def _error(text: str, why: str) -> ValueError:
    return ValueError(f"{LAYOUT_KEY}={text!r}: {why}")


@functools.lru_cache(maxsize=64)
def parse_layout(text: str) -> Layout:
    """Megatron-Core's layout grammar (`PipelineParallelLayerLayout.
    parse_str_to_list`): commas are cosmetic and dropped; `(...)*n` repeats a
    group n times (no nesting), then `x*n` a character; `|` separates virtual
    stages; each character is a layer: E embedding, t transformer layer, m MTP
    layer, L loss (output head). Checks what holds for any model: one E, the
    first character; one L, the last; no t after an m. A bad token is a one-line
    ValueError naming the key and the token."""
    s = text.replace(",", "").replace(" ", "")
    if not s:
        raise _error(text, "is empty")

    def unroll(m, what):
        n = int(m.group(2))
        if n < 1:
            raise _error(text, f"{m.group(0)!r} repeats {what} {n} times (at least 1)")
        return m.group(1) * n

    s = re.sub(r"\(([^()]+)\)\*(\d+)", lambda m: unroll(m, "a group"), s)
    s = re.sub(r"([^()|*\d])\*(\d+)", lambda m: unroll(m, "a layer"), s)
    bad = re.search(r"[^ELtm|]", s)
    if bad:
        token = re.search(r"\([^)|]*\)?(\*\d*)?|\*\d*|[^ELtm|]+", s[bad.start():]).group(0)
        raise _error(text, f"{token!r} is not a layer (E embedding, t transformer layer, "
                     "m MTP layer, L loss; '|' between stages; '(...)*n' and 'x*n' repeat)")
    order = s.replace("|", "")
    if order.count("E") != 1 or order[0] != "E":
        raise _error(text, "must begin with the embedding 'E', once")
    if order.count("L") != 1 or order[-1] != "L":
        raise _error(text, "must end with the loss 'L', once")
    if "m" in order and "t" in order[order.index("m"):]:
        raise _error(text, "places a transformer layer 't' after an MTP layer 'm'")
    stages = tuple({c: st.count(c) for c in LAYOUT_CHARS} for st in s.split("|"))
    return Layout(text, stages, order)


def check_layout(text: str, layers, mtp_layers, pp, interleave) -> str | None:
    """None where the layout `text` fits the model and plan (concrete counts),
    else the one-line reason: every layer exactly once (t = model.layers,
    m = model.mtp_layers) on pp x interleave stages, the MTP layers on one
    rank's last virtual stage, not the first rank's (Megatron-Core's
    `validate_layer_layout`)."""
    lay = parse_layout(text)
    pp, v = int(round(float(pp))), int(round(float(interleave)))
    layers, mtp = int(round(float(layers))), int(round(float(mtp_layers)))
    if lay.count("t") != layers:
        return f"{LAYOUT_KEY}={text!r} places {lay.count('t')} transformer layers 't', " \
               f"model.layers={layers}"
    if lay.count("m") != mtp:
        return f"{LAYOUT_KEY}={text!r} places {lay.count('m')} MTP layers 'm', " \
               f"model.mtp_layers={mtp}"
    if len(lay.stages) != pp * v:
        return f"{LAYOUT_KEY}={text!r} has {len(lay.stages)} stages, parallel.pp x " \
               f"parallel.interleave = {pp} x {v} = {pp * v}"
    holding = [i for i, st in enumerate(lay.stages) if st["m"]]
    if holding and (len(holding) > 1 or holding[0] < (v - 1) * pp):
        return f"{LAYOUT_KEY}={text!r} must place every MTP layer on one stage, a " \
               "rank's last virtual stage"
    return None


def rank_groups(lay: Layout) -> list:
    """Every (pp, rank, stages) a layout of n stages may be cut into: for each
    divisor pp of n, rank r holds the virtual stages r, r + pp, ... (the plan's
    pp picks its own under jit, where it is traced; `shapes`)."""
    n = len(lay.stages)
    return [(pp, r, tuple(range(r, n, pp))) for pp in range(1, n + 1) if n % pp == 0
            for r in range(pp)]


def rank_counts(lay: Layout, pp: int, dense_layers: int) -> list:
    """Per pipeline rank (virtual stages r, r + pp, ...), the counts (dense
    layers, MoE layers, MTP layers, embeddings, losses): the transformer layers
    numbered in model order (stage by stage), the first `dense_layers` of them
    dense (`workload.Transformer`: the last moe_layers are MoE)."""
    cum = _before(lay)
    out = []
    for _, _, stages in (g for g in rank_groups(lay) if g[0] == pp):
        t = sum(lay.stages[i]["t"] for i in stages)
        dense = sum(max(0, min(lay.stages[i]["t"], dense_layers - cum[i])) for i in stages)
        out.append((dense, t - dense, *(sum(lay.stages[i][c] for i in stages) for c in "mEL")))
    return out


def _before(lay: Layout) -> list:
    """The transformer layers before each stage (model order)."""
    cum, seen = [], 0
    for st in lay.stages:
        cum.append(seen)
        seen += st["t"]
    return cum


def shapes(model: Transformer, plan: Plan):
    """(every rank's `Shape` of the plan's layout, batched on a leading axis,
    and which of them are the plan's: the ranks of its pp). Each rank's
    decoder layers (the first model.layers - model.moe_layers dense), MTP
    blocks (MoE blocks in an MoE model), the output head with a pass per MTP
    depth where the loss is (Megatron-Core computes the MTP losses with the
    output layer there), and its embedding matrices (input and output, one
    where they are tied and on the same rank). Static counts from the layout,
    the model's and plan's (traced under jit) in jnp: one vmapped costing
    covers every rank (`step.heaviest`)."""
    lay = parse_layout(plan.pipeline_layout)
    groups = rank_groups(lay)
    n = len(lay.stages)
    member = [[1.0 if i in stages else 0.0 for i in range(n)] for _, _, stages in groups]
    member = jnp.asarray(member)
    per = {c: jnp.asarray([float(st[c]) for st in lay.stages]) for c in LAYOUT_CHARS}
    cum = jnp.asarray([float(c) for c in _before(lay)])
    dense_stage = jnp.clip(model.layers - model.moe_layers - cum, 0.0, per["t"])
    t, mtp, emb, loss, dense = (member @ per["t"], member @ per["m"], member @ per["E"],
                                member @ per["L"], member @ dense_stage)
    tied = 1.0 if model.tied_embeddings else 0.0
    mats = emb + loss - tied * emb * loss
    k = len(groups)
    ones = jnp.ones(k)
    sh = Shape(t + mtp, t - dense + where(model.moe_layers > 0, mtp, 0.0),
               plan.micro_batches * ones, plan.micro_batch * model.seq_len / plan.cp * ones,
               mtp, loss * (1.0 + model.mtp_layers), mats * model.vocab * model.hidden)
    valid = jnp.asarray([float(pp) for pp, _, _ in groups]) == plan.pp
    return sh, valid


def pick(batched: Shape, index) -> Shape:
    """The rank at `index` of `shapes`' batch."""
    return jax.tree.map(lambda x: x[index], batched)


def layout_params(model: Transformer, sh: Shape):
    """(dense, routed) parameters of a layout's rank, unsharded: its blocks'
    attention, dense FFNs, MoE blocks' shared experts and routers, the MTP
    projections and its embedding matrices; the routed experts of its MoE
    blocks (`workload.Transformer.params`, block by block)."""
    moe_ffn = model.shared_experts * model.expert_params() + model.hidden * model.experts
    dense = (sh.layers_on_stage * model.attention_params()
             + sh.dense_layers_on_stage * model.dense_ffn_params()
             + sh.moe_layers_on_stage * moe_ffn
             + sh.mtp_layers_on_stage * model.mtp_projection_params() + sh.embedding_params)
    return dense, sh.moe_layers_on_stage * model.experts * model.expert_params()
