"""Compute of a training step: the seconds its GEMMs, attention kernels,
memory-bound operators and optimizer update take on one GPU (`timing`), read
by `step` with the traffic it hides under.

A GEMM of shape (M x K) @ (K x N) runs at
    peak x matmul_efficiency x I / (I + I_ridge),
a roofline on its arithmetic intensity I = 2MKN / (bytes of A, B and C) with a
saturation term: I_ridge = peak / HBM bandwidth is where a GEMM turns
compute-bound, and `chip.matmul_efficiency` is the ceiling a large GEMM
reaches (fp8 GEMMs `hardware.FP8_RELATIVE_EFFICIENCY` = 0.902 of it). Thin
GEMMs (small hidden sizes, or a narrow slice after tensor parallelism) fall
below it smoothly. Memory-bound operators (norms, softmax, element-wise)
stream the layer's activations at HBM speed: twice (write and read) in
forward, twice that in backward; fp8 GEMMs quantise their operands as
Transformer Engine does (`_layers_s`), under the plan's fp8 recipe
(`plan.Fp8Recipe`: per-tensor scaling, MXFP8 or NVFP4, which owns the GEMM
inputs' bytes, the peak and the quantisation passes).

Calibration (the only throughput figures in the seeds; rerun with
`calibrate_matmul_efficiency`, checked in tests/test_step.py):
- A100 `matmul_efficiency`: Narayanan et al. 2021, 1T parameters on 3072
  A100s (tp 8, pp 64, global batch 3072, micro-batch 1, full recompute):
  163 TFLOP/s per GPU of hardware FLOPs (502 PFLOP/s, 52% of peak).
- V100 `matmul_efficiency`: Shoeybi et al. 2019, 39 TFLOP/s on one V100 for
  the 1.2B baseline (40 layers, h 1536, 16 heads, seq 1024; batch 8 and full
  recompute assumed). The 8.3B run on 512 V100s (15.1 PFLOP/s, 76% scaling)
  is then a prediction, checked in tests.
- H100-class chips (H100, H200, H800; B200 and GB200 borrow it): no figure in
  the seeds; the sustained `matmul_efficiency` is fitted to four of
  `codesign validate`'s H100 rows (`validate.fit_matmul_efficiency`, see
  measured.py), and attention runs at FlashAttention-2's 35% of the H100 peak.
  TPUs borrow A100's factor (labelled in hardware.py).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from . import stage as stage_lib
from . import strategies
from .hardware import FP8_RELATIVE_EFFICIENCY, System
from .host import KERNELS_PER_LAYER, host_launches, layer_launches, rerun_launches, sync_penalty_s
from .params import held_params, local_params
from .plan import DTYPE_BYTES, Fp8Recipe, Plan, Tensorwise
from .relax import EXACT, once, smoothing, where
from .workload import LAYER_KINDS, Transformer

# the output tile one SM computes at a time: 128 x 128, cuBLAS's and CUTLASS's
# common Hopper tile for 16- and 8-bit GEMMs (assumption; DeepGEMM's BLOCK_M is
# 64-128 and its BLOCK_N up to 256)
GEMM_TILE = 128.0
TENSORWISE = Tensorwise()  # the default fp8 recipe (`plan.Fp8Recipe`)


def peak_flops_per_s(system: System, dtype: str, recipe: Fp8Recipe = TENSORWISE) -> jax.Array:
    """The chip's dense peak for GEMMs in `dtype` (16-bit for bf16 and fp16; fp8
    the one `recipe` runs at: FP8, or FP4 for NVFP4) at the clocks its power
    limit sustains (`chip.clock_fraction` of the datasheet's)."""
    width = {"fp8": recipe.peak, "fp32": "fp32"}.get(dtype, "")
    return _sustained_flops_per_s(system.chip, width)


@once
def _sustained_flops_per_s(chip, width: str) -> jax.Array:
    """`peak_flops_per_s` of the chip's peak in `width` ("" the 16-bit one), once a chip."""
    peaks = {"fp8": chip.peak_fp8_flops_per_s, "fp4": chip.peak_fp4_flops_per_s,
             "fp32": chip.peak_fp32_flops_per_s, "": chip.peak_flops_per_s}
    return chip.clock_fraction * peaks[width]


def check_fp4(plan: Plan, system: System) -> None:
    """Refuse an fp8 recipe whose GEMM peak the chip lacks (NVFP4 on a chip
    without an FP4 peak) in one line naming the key (concrete values; a traced
    chip is not checked)."""
    recipe = plan.fp8_recipe
    if plan.precision.gemm != "fp8" or recipe.peak != "fp4":
        return
    peak = checks.concrete(system.chip.peak_fp4_flops_per_s)
    if peak is not None and not float(peak) > 0.0:
        raise ValueError(f"training.fp8_recipe={recipe.name!r} needs a chip with an FP4 peak "
                         "(chip.peak_fp4_flops_per_s=0 here: Blackwell's B200, GB200, B300, "
                         "GB300 have one)")


def matmul_efficiency(system: System, dtype: str) -> jax.Array:
    """The large-GEMM efficiency of GEMMs in `dtype`: the chip's, times
    `hardware.FP8_RELATIVE_EFFICIENCY` for fp8 (measured on an H200; every fp8
    recipe's, NVFP4's FP4 GEMMs too: assumption)."""
    e = system.chip.matmul_efficiency
    return e * FP8_RELATIVE_EFFICIENCY if dtype == "fp8" else e


def streaming_time_s(system: System, n_bytes) -> jax.Array:
    """Seconds a memory-bound kernel takes to move `n_bytes` (read + written)."""
    return n_bytes / _achieved_hbm_Bps(system.chip)


@once
def _achieved_hbm_Bps(chip) -> jax.Array:
    """The chip's HBM bandwidth at its efficiency (`streaming_time_s`), once a chip."""
    return chip.hbm_Bps * chip.hbm_efficiency


def gemm_time_s(system: System, m, k, n, dtype: str, count=1.0,
                recipe: Fp8Recipe = TENSORWISE) -> jax.Array:
    """Seconds for `count` GEMMs of (m x k) @ (k x n), run as one (batched or
    grouped) kernel (see module docstring).

    flops / (peak x E x I / (I + I_ridge)) (E: `matmul_efficiency`) simplifies to
    (flops / peak + bytes / achieved HBM bandwidth) / E: the compute and memory
    times add, divided by the large-GEMM efficiency E; plus one kernel's fixed
    overhead. An fp8 GEMM's inputs weigh `recipe.element_bytes` (values and
    block scales), its output the fp8 width.
    """
    flops = 2.0 * m * k * n
    inputs = recipe.element_bytes if dtype == "fp8" else DTYPE_BYTES[dtype]
    moved = inputs * (m * k + k * n) + DTYPE_BYTES[dtype] * m * n
    seconds = flops / peak_flops_per_s(system, dtype, recipe) + streaming_time_s(system, moved)
    return count * seconds / matmul_efficiency(system, dtype) + system.chip.kernel_overhead_s


def grouped_occupancy(system: System, m, n, concurrent, t=EXACT) -> jax.Array:
    """The share of the chip's compute units a grouped GEMM keeps busy when
    `concurrent` of its (m x k) @ (k x n) GEMMs run at once: each has
    (m / tile) (n / tile) output tiles (`GEMM_TILE`), at least one, each on one
    unit at a time, so min(1, concurrent x tiles / units) (continuous: wave
    quantisation left out).
    Qwen3-30B-A3B's 128 experts at 512 tokens each (n 1,536) in one stream
    leave 48 tiles for the H100's 132 SMs: 36%."""
    t = smoothing(t)
    tiles = t.hard_max((m / GEMM_TILE) * (n / GEMM_TILE), 1.0)
    return t.hard_min(concurrent * tiles / system.chip.compute_units, 1.0)


def attention_time_s(model: Transformer, plan: Plan, system: System, t=EXACT):
    """(forward, backward) seconds of one layer's attention scores (Q K^T, softmax,
    A V), one micro-batch, per GPU: the model's kernel's (`attention.AttentionKernel`)
    in the attention width."""
    d = plan.precision.attention
    return model.attention_kernel.time_s(
        model, plan.micro_batch, model.seq_len / plan.cp, plan.tp, system.chip,
        peak_flops_per_s(system, d),
        lambda rows: _gemms_s(system, [(m, k, n, c, d, 1.0, 0.0, 0.0) for m, k, n, c in rows])[0],
        t)


class Timing(eqx.Module):
    """Compute of the slowest stage: one micro-batch, and what rows hide under."""

    forward_s: jax.Array  # one micro-batch forward
    backward_s: jax.Array  # one micro-batch backward (incl. recomputation)
    attention_s: jax.Array  # per step: attention-score compute (ring attention hides under it)
    overlap_s: jax.Array  # per step: compute another micro-batch can hide comm under
    optimizer_s: jax.Array  # per step: the optimizer update over the local shard
    attention_forward_s: jax.Array  # per step: the forward part of attention_s (+ recompute)
    layers: jax.Array  # layers on the slowest stage (per-layer times: forward_s / layers)
    # per micro-batch: what the stage's layers keep for backward, and of it what
    # goes to host memory (`stored_bytes_per_micro_batch`; memory reads them)
    stored_bytes: jax.Array
    offloaded_bytes: jax.Array
    # per micro-batch: the stage's MoE blocks' forward (router, permute, routed
    # and shared experts: `strategies.MoeBlock.reruns`), read by Megatron-Core's
    # combined 1F1B (`overlap.Paired`); 0 without `parallel.ep_overlap`
    moe_forward_s: jax.Array
    # per micro-batch: (a dense layer's, an MoE layer's) bytes kept for
    # backward without recomputation (`full_layer_bytes`; memory reads them)
    full_layer_bytes: jax.Array
    # (unsharded, sharded) (dense, routed) parameters one GPU of the stage
    # holds (`held_params`; memory reads them)
    params: tuple

    @property
    def micro_batch_s(self) -> jax.Array:
        return self.forward_s + self.backward_s


def _column(values):
    """One column of a GEMM table: the entry itself where every row holds the
    same object, numpy where every entry is a Python number (nothing traced),
    else the entries stacked."""
    if all(v is values[0] for v in values):
        return values[0]
    if all(isinstance(v, (int, float)) for v in values):
        return np.asarray(values, float)
    return jnp.stack([jnp.asarray(v, float) for v in values])


def _select(dtypes, value):
    """`value(dtype)` for each row's dtype: one scalar where the rows share a
    dtype, else a per-row array chosen by static masks."""
    kinds = list(dict.fromkeys(dtypes))
    out = value(kinds[0])
    for dtype in kinds[1:]:
        out = where(np.asarray([d == dtype for d in dtypes]), value(dtype), out)
    return out


def _rows_s(system: System, gemms, recipe: Fp8Recipe = TENSORWISE):
    """(forward, backward) seconds of each row of `gemms` (`_gemms_s`' rows),
    weighted, as arrays: one vectorised roofline (`gemm_time_s`) over the
    table, each row's dtype choosing its peak, efficiency and widths."""
    m, k, n, count, weight = (_column([g[i] for g in gemms]) for i in (0, 1, 2, 3, 5))
    dtypes = [g[4] for g in gemms]
    inputs = _column([recipe.element_bytes if d == "fp8" else DTYPE_BYTES[d] for d in dtypes])
    outputs = _column([DTYPE_BYTES[d] for d in dtypes])
    flops = 2.0 * m * k * n
    mk, mn = m * k, m * n  # the input's and the output's elements
    moved = inputs * (mk + k * n) + outputs * mn
    peak = _select(dtypes, lambda d: peak_flops_per_s(system, d, recipe))
    efficiency = _select(dtypes, lambda d: matmul_efficiency(system, d))
    seconds = count * (flops / peak + streaming_time_s(system, moved)) / efficiency \
        + system.chip.kernel_overhead_s
    forward, backward = seconds, 2.0 * seconds
    for col, elements, phase in ((6, mk, "forward"), (7, mn, "backward")):
        casts = [g[col] if isinstance(g[col], tuple) else (g[col], float(g[col] > 0))
                 for g in gemms]
        per_element = [b for b, _ in casts]
        if any(per_element):
            kernels = np.asarray([c for _, c in casts], float)
            cast = (streaming_time_s(system, np.asarray(per_element, float) * count * elements)
                    + kernels * system.chip.kernel_overhead_s)
            if phase == "forward":
                forward = forward + cast
            else:
                backward = backward + cast
    if isinstance(weight, float) and weight == 1.0:
        return forward, backward
    return weight * forward, weight * backward


def _gemms_s(system: System, gemms, recipe: Fp8Recipe = TENSORWISE):
    """(forward, backward) seconds of sum_i weight_i x the GEMMs of row i of
    `gemms`, rows (m, k, n, count, dtype, weight, x_cast, dy_cast): one
    vectorised `gemm_time_s` over the table (`_rows_s`; fp8 under `recipe`), a
    new GEMM a row; backward's two GEMMs (input and weight gradients) take
    twice the forward's time. Quantisation (narrow GEMMs; `Precision.
    quantisation`'s (HBM bytes per element, kernels), or 0 for none) is
    memory-bound: forward quantises the m x k input (`x_cast`), backward the
    m x n output gradient (`dy_cast`)."""
    forward, backward = _rows_s(system, gemms, recipe)
    return jnp.sum(forward), jnp.sum(backward)


def _grouped_s(system: System, groups: dict, recipe: Fp8Recipe = TENSORWISE,
               totals: dict = {}):  # noqa: B006 (read only)
    """The (forward, backward) seconds of each group's rows (`_gemms_s`) and
    of each total (`totals`: {name: the groups it sums}), as `_Priced`: all
    groups' rows priced as one table, each group's sum one product with a
    static membership column."""
    rows = [row for g in groups.values() for row in g]
    forward, backward = _rows_s(system, rows, recipe)
    names = [*groups, *totals]
    member = np.zeros((len(rows), len(names)))
    at = 0
    for j, (name, g) in enumerate(groups.items()):
        member[at:at + len(g), j] = 1.0
        for i, total in enumerate(totals.values()):
            if name in total:
                member[at:at + len(g), len(groups) + i] = 1.0
        at += len(g)
    return _Priced(jnp.broadcast_to(forward, (len(rows),)),
                   jnp.broadcast_to(backward, (len(rows),)),
                   dict(zip(names, member.T, strict=True)))


class _Priced:
    """`_grouped_s`' sums by group, each taken (one product of the rows' forward
    or backward seconds with the group's membership column) only when read."""

    def __init__(self, forward, backward, members: dict):
        self._rows, self._members, self._sums = (forward, backward), members, {}

    def __contains__(self, name) -> bool:
        return name in self._members

    def _sum(self, name, phase: int) -> jax.Array:
        if (name, phase) not in self._sums:
            self._sums[name, phase] = self._rows[phase] @ self._members[name]
        return self._sums[name, phase]

    def forward(self, name) -> jax.Array:
        """Forward seconds of group `name`."""
        return self._sum(name, 0)

    def backward(self, name) -> jax.Array:
        """Backward seconds of group `name`."""
        return self._sum(name, 1)


def _moe_shape(model: Transformer, plan: Plan, t=EXACT):
    """(tokens of one micro-batch per GPU, the token copies one GPU's experts
    take, the experts' tensor-parallel size, an expert's width and the experts,
    these two at least 1: finite for dense models too): an expert gathers from the
    ep x etp ranks, each holding tokens / tp (sequence parallel) of its own."""
    t = smoothing(t)
    tokens = plan.micro_batch * model.seq_len / plan.cp
    etp = plan.expert_tp
    return (tokens, tokens * etp / plan.tp * model.top_k, etp,
            t.hard_max(model.expert_ffn_hidden, 1.0), t.hard_max(model.experts, 1.0))


def _routed_gemms(model: Transformer, plan: Plan, system: System, shape, weight, t=EXACT):
    """The routed experts' two GEMM rows (`_gemms_s`' rows), `weight` MoE layers,
    of the MoE layer `shape` (`_moe_shape`).

    The busiest expert rank sets the pace: moe_imbalance x the mean load, or,
    with padded experts (`training.moe_pad_experts`: static shapes), every
    expert `training.moe_capacity_factor` x the mean. Small experts' GEMMs,
    `grouped_gemm_streams` at a time, may leave units idle: the local experts'
    GEMMs take 1 / occupancy as long."""
    t = smoothing(t)
    d, cast = plan.precision.gemm, plan.precision.quantisation(plan.fp8_recipe)
    _, received, etp, f_e, experts = shape
    h = model.hidden
    mats = 2.0 if model.gated else 1.0
    load = plan.moe_capacity_factor if plan.moe_pad_experts else plan.moe_imbalance
    per_expert = received * plan.ep / experts * load
    local = experts / plan.ep
    at_once = t.hard_min(plan.grouped_gemm_streams, t.hard_max(local, 1.0))
    wide = _over(f_e, etp, mats)  # the first GEMM's width
    # both GEMMs' occupancies as one vector
    busy = jax.lax.unstack(grouped_occupancy(
        system, per_expert, jnp.stack(jnp.broadcast_arrays(wide, h)), at_once, t))
    return [(per_expert, h, wide, local / busy[0], d, weight, cast, cast),
            (per_expert, f_e / etp, h, local / busy[1], d, weight, cast, cast)]


def _permute_s(model: Transformer, plan: Plan, system: System, received):
    """Seconds of one MoE layer's permute and unpermute of the `received` token
    copies the experts take (read + write each, a kernel each)."""
    copies = received * model.hidden * plan.precision.bytes("activations")
    return streaming_time_s(system, 2.0 * 2.0 * copies) + 2.0 * system.chip.kernel_overhead_s


def routed_forward_s(model: Transformer, plan: Plan, system: System):
    """Forward seconds of one MoE layer's routed part: the experts' GEMMs (with
    their quantisation) and the permute / unpermute: the GPU's work between the
    dispatcher's host synchronisation and the next layer (`sync_penalty_s`)."""
    shape = _moe_shape(model, plan)
    forward, _ = _gemms_s(system, _routed_gemms(model, plan, system, shape, 1.0),
                          plan.fp8_recipe)
    return forward + _permute_s(model, plan, system, shape[1])


def _over(x, divisor, factor=1.0):
    """factor x x / divisor, leaving out a Python 1 on either side (nothing
    traced for it: the same value)."""
    x = x if isinstance(factor, (int, float)) and factor == 1 else factor * x
    return x if isinstance(divisor, (int, float)) and divisor == 1 else x / divisor


def _gemm_parts(model: Transformer, plan: Plan, system: System, sh: stage_lib.Shape,
                up_projections: bool = False, moe_shape=None, t=EXACT) -> dict:
    """The stage's GEMM rows (`_gemms_s`' rows, each weighted by its layers on
    the stage), by the layer part they compute (`strategies.RERUN_PARTS`):
    attention's projections, the dense FFN, the routed and shared experts and
    the router (`_layers_s` explains the quantisation); `up_projections`: only
    MLA's up projections of attention's (`Attention.up_projections`).
    `moe_shape`: `_moe_shape` if known."""
    d = plan.precision.gemm
    cast = plan.precision.quantisation(plan.fp8_recipe)
    fused = (plan.precision.quantisation(plan.fp8_recipe, producer=True)
             if plan.stack.fused_fp8_producers else cast)
    moe_shape = _moe_shape(model, plan) if moe_shape is None else moe_shape
    tokens, _, _, f_e, experts = moe_shape
    h, tp = model.hidden, plan.tp
    mats = 2.0 if model.gated else 1.0
    dense_layers, moe_layers = sh.dense_layers_on_stage, sh.moe_layers_on_stage
    cut = {"k": (tp, 1.0), "n": (1.0, tp), "": (1.0, 1.0)}  # tensor parallelism's cut (k, n)
    # every projection but the output one reads a norm's output (the layer's,
    # or MLA's latent norms)
    projections = (model.attention.up_projections(model) if up_projections
                   else model.attention_gemms())
    parts = {"attention": [(tokens, _over(k, cut[split][0]), _over(n, cut[split][1]), 1.0, d,
                            _over(sh.layers_on_stage, 1.0, c), cast if split == "k" else fused,
                            cast)
                           for k, n, split, c in projections]}
    if up_projections:
        return {"up_projections": parts["attention"]}
    f = model.ffn_hidden
    parts["dense_ffn"] = [(tokens, h, _over(f, tp, mats), 1.0, d, dense_layers, fused, 0.0),
                          (tokens, f / tp, h, 1.0, d, dense_layers, fused, cast)]
    shared = model.shared_experts * f_e
    with_shared = moe_layers * (model.shared_experts > 0)
    parts["routed_experts"] = _routed_gemms(model, plan, system, moe_shape, moe_layers, t)
    parts["shared_experts"] = [(tokens, h, _over(shared, tp, mats), 1.0, d, with_shared,
                                cast, cast),
                               (tokens, shared / tp, h, 1.0, d, with_shared, cast, cast)]
    # router (16-bit, replicated)
    parts["router"] = [(tokens, h, experts, 1.0, plan.precision.attention, moe_layers, 0.0, 0.0)]
    return parts


def _layers_s(model: Transformer, plan: Plan, system: System, sh: stage_lib.Shape):
    """(forward, backward) matrix + memory-bound seconds of the stage's layers,
    one micro-batch, per GPU: the dense layers' and the MoE layers' GEMMs as
    rows of one table (the attention projections are the same in both), their
    memory-bound kernels (backward: twice the forward's).

    Narrow (fp8) GEMMs quantise their operands as Transformer Engine does: a
    cast-transpose of a wide input (`Precision.gemm_cast_bytes`) except where
    the producer writes it quantised (the norm before the column-parallel
    projections and the dense FFN's first GEMM: LayerNormLinear / LayerNormMLP;
    the activation before the FFN's second GEMM), which leaves the transpose
    (`Precision.gemm_transpose_bytes`); in backward a cast-transpose of every
    output gradient but the dense FFN's first GEMM's, which the activation's
    backward writes quantised. The experts' GEMMs (grouped, after the permute)
    and the shared experts' cast their own. A stack whose producers write wide
    (`stacks.Stack.fused_fp8_producers` False: torchao's Float8Linear) casts
    every input."""
    gemms = [row for rows in _gemm_parts(model, plan, system, sh).values() for row in rows]
    forward, backward = _gemms_s(system, gemms, plan.fp8_recipe)
    passes = _layer_passes_s(model, plan, system, sh)
    return forward + passes, backward + 2.0 * passes


def layer_terms(model: Transformer, plan: Plan) -> dict:
    """{term: (a dense layer's, an MoE layer's) bytes} one layer keeps for
    backward per micro-batch before recomputation and tensor parallelism
    (`Transformer.activation_terms`)."""
    return model.activation_terms(plan.micro_batch, LAYER_KINDS, plan.cp, plan.precision)


def full_layer_bytes(model: Transformer, plan: Plan, terms=None) -> jax.Array:
    """(a dense layer's, an MoE layer's) bytes kept for backward per
    micro-batch without recomputation (`Transformer.activation_bytes_per_layer`;
    `terms`: `layer_terms` if known)."""
    return model.activation_bytes_per_layer(plan.micro_batch, plan.tp, plan.sequence_parallel,
                                             "none", LAYER_KINDS, plan.cp, plan.precision, terms)


def _layer_passes_s(model: Transformer, plan: Plan, system: System, sh: stage_lib.Shape,
                    stored=None, moe_shape=None):
    """Forward seconds of the stage's layers' memory-bound kernels, one
    micro-batch (`_layers_s`; backward: twice these): two passes over what
    each layer stores (`stored`: `full_layer_bytes` if known), the MoE
    layers' permute and unpermute, and each layer's `KERNELS_PER_LAYER`
    fixed overheads. `moe_shape`: `_moe_shape` if known."""
    received = (_moe_shape(model, plan) if moe_shape is None else moe_shape)[1]
    dense_layers, moe_layers = sh.dense_layers_on_stage, sh.moe_layers_on_stage
    permute = _permute_s(model, plan, system, received)
    stored = full_layer_bytes(model, plan) if stored is None else stored
    passes_s = streaming_time_s(system, 2.0 * stored)  # (dense, MoE) layer
    memory = dense_layers * passes_s[0] + moe_layers * (passes_s[1] + permute)
    overhead = sh.layers_on_stage * KERNELS_PER_LAYER * system.chip.kernel_overhead_s
    return memory + overhead


def _pass_s(system: System, moved_bytes, kernels) -> jax.Array:
    """Seconds of a memory-bound pass moving `moved_bytes` (read and written
    together) in `kernels` kernels."""
    return streaming_time_s(system, moved_bytes) + kernels * system.chip.kernel_overhead_s


def rerun_parts_s(model: Transformer, plan: Plan, system: System, sh: stage_lib.Shape,
                  attention_forward_s, priced=None, moe_shape=None) -> dict:
    """{part: the stage's forward seconds of it, one micro-batch} of the layer
    parts selective recomputation runs again (`plan.recompute.reruns()`, of
    `strategies.RERUN_PARTS`; `parts_s`)."""
    return parts_s(model, plan, system, sh, attention_forward_s, plan.recompute.reruns(),
                   priced, moe_shape)


def parts_s(model: Transformer, plan: Plan, system: System, sh: stage_lib.Shape,
            attention_forward_s, parts, priced=None, moe_shape=None) -> dict:
    """{part: the stage's forward seconds of it, one micro-batch} of the layer
    `parts` (`strategies.RERUN_PARTS`): the attention core (`attention_forward_s`:
    the stage's), the GEMM rows of each part (`_gemm_parts`, with their
    quantisation), the router, permute and unpermute (`_permute_s`), and the
    memory-bound passes: each norm reads and writes a token's hidden vector
    (two norms a layer), an activation reads the first GEMM's output (2 f
    gated, f plain) and writes f; a discarded output that fed an fp8 GEMM
    (`RecomputeModule.discards_output`: the norms', the experts' activation's)
    is quantised again (`norm_requant`, `expert_requant`: `Precision.
    quantisation`, nothing in the activations' width). `priced`: the GEMM
    parts priced if known (`_grouped_s` of `_gemm_parts`, the up
    projections' too where `parts` names them); `moe_shape`: `_moe_shape` if
    known."""
    width = plan.precision.bytes("activations")
    moe_shape = _moe_shape(model, plan) if moe_shape is None else moe_shape
    tokens, received, etp, f_e, _ = moe_shape
    mats = 2.0 if model.gated else 1.0
    moved, kernels = plan.precision.quantisation(plan.fp8_recipe)
    h, tp = model.hidden, plan.tp
    norm_tokens = tokens / (tp if plan.sequence_parallel else 1.0)
    layers, dense, moe = sh.layers_on_stage, sh.dense_layers_on_stage, sh.moe_layers_on_stage
    if priced is None:
        gemm_parts = _gemm_parts(model, plan, system, sh, moe_shape=moe_shape)
        if "up_projections" in parts:
            gemm_parts |= _gemm_parts(model, plan, system, sh, True, moe_shape)
        priced = _grouped_s(system, gemm_parts, plan.fp8_recipe)
    seconds = {
        "attention_core": lambda: attention_forward_s,
        "norms": lambda: layers * 2.0 * _pass_s(system, 2.0 * width * h * norm_tokens, 1.0),
        "norm_requant": lambda: layers * 2.0 * _pass_s(system, moved * h * tokens, kernels),
        "dense_activation": lambda: dense * _pass_s(
            system, (mats + 1.0) * width * model.ffn_hidden / tp * tokens, 1.0),
        "expert_activation": lambda: moe * _pass_s(
            system, (mats + 1.0) * width * f_e / etp * received, 1.0),
        "expert_requant": lambda: moe * _pass_s(system, moved * f_e / etp * received, kernels),
        "permute": lambda: moe * _permute_s(model, plan, system, received)}
    return {p: priced.forward(p) if p in priced else seconds[p]() for p in parts}


def _synced_s(model: Transformer, plan: Plan, system: System, sh: stage_lib.Shape,
              forward_s):
    """Seconds the dispatcher's host synchronisations add to one forward pass of
    the stage (`sync_penalty_s` per sync and MoE layer): the routed part's GPU
    work (`routed_forward_s`) and launches after the sync, the mean layer's
    (`forward_s` / layers: the head's share included) around it."""
    _, moe, routed, _ = layer_launches(model, plan)
    one = sync_penalty_s(routed_forward_s(model, plan, system), forward_s / sh.layers_on_stage,
                         routed * plan.host_launch_s, moe * plan.host_launch_s)
    # and the host's busy-wait at each sync beyond the GPU's draining (DeepEP's)
    return sh.moe_layers_on_stage * (plan.moe_dispatcher.host_syncs * one
                                     + plan.moe_dispatcher.host_wait_s)


def stored_bytes_per_micro_batch(model: Transformer, plan: Plan, sh: stage_lib.Shape,
                                 terms=None, t=EXACT):
    """(bytes the stage's layers keep for backward per micro-batch, of them the
    bytes `plan.offload_layers` of its layers send to host memory): the
    offloaded layers hold the stage's mean layer's bytes (dense and MoE layers
    in their proportion); at most every layer of the stage is offloaded.
    `terms`: `layer_terms` if known."""
    kinds = model.activation_bytes_per_layer(plan.micro_batch, plan.tp, plan.sequence_parallel,
                                             plan.recompute, LAYER_KINDS, plan.cp,
                                             plan.precision, terms)  # (dense, MoE) layer
    stored = sh.dense_layers_on_stage * kinds[0] + sh.moe_layers_on_stage * kinds[1]
    offloaded = (smoothing(t).hard_min(plan.offload_layers, sh.layers_on_stage)
                 / sh.layers_on_stage)
    return stored, stored * offloaded


def optimizer_time_s(model: Transformer, plan: Plan, system: System, t=EXACT, sh=None,
                     params=None):
    """One Adam step over the local shard (sharded over dp where the plan's
    ZeRO stage shards the optimizer states): a memory-bound pass over
    gradients, master weights, moments and weights. `params`: `held_params` if
    known."""
    on = plan.zero.shards_optimizer
    dense, routed = (local_params(model, plan, t, sharded=on, sh=sh) if params is None
                     else params[on])
    moved = (dense + routed) * plan.precision.optimizer_step_bytes_per_param
    return streaming_time_s(system, moved) + system.chip.kernel_overhead_s


def timing(model: Transformer, plan: Plan, system: System, t=EXACT, sh=None) -> Timing:
    t = smoothing(t)
    sh = stage_lib.shape(model, plan, t) if sh is None else sh
    reruns = plan.recompute.reruns()  # selective recomputation by module
    moe_parts = strategies.MoeBlock.reruns if plan.ep_overlap else ()
    # every GEMM of the step as one table (`_grouped_s`): the layers' parts,
    # MLA's up projections again where recomputed, and the output head
    moe_shape = _moe_shape(model, plan, t)
    groups = _gemm_parts(model, plan, system, sh, moe_shape=moe_shape, t=t)
    layer_parts = tuple(groups)
    if "up_projections" in (*reruns, *moe_parts):
        groups |= _gemm_parts(model, plan, system, sh, True, moe_shape, t)
    tokens = moe_shape[0]
    # the output layer stays 16-bit; each MTP depth projects [hidden; next
    # embedding] and runs the output head again
    groups["head"] = [(tokens, model.hidden, model.vocab / plan.tp, 1.0,
                       plan.precision.attention, sh.head_passes, 0.0, 0.0),
                      (tokens, 2.0 * model.hidden, model.hidden / plan.tp, 1.0,
                       plan.precision.gemm, sh.mtp_layers_on_stage, 0.0, 0.0)]
    priced = _grouped_s(system, groups, plan.fp8_recipe, {"layers": layer_parts})
    terms = layer_terms(model, plan)
    full = full_layer_bytes(model, plan, terms)
    passes = _layer_passes_s(model, plan, system, sh, full, moe_shape)
    matrix = priced.forward("layers") + passes
    matrix_backward = priced.backward("layers") + 2.0 * passes
    layer_af, layer_ab = attention_time_s(model, plan, system, t)  # the same in every layer
    att_fwd, att_bwd = sh.layers_on_stage * layer_af, sh.layers_on_stage * layer_ab
    # the loss: fp32 logits written, then read by softmax / cross-entropy; in
    # backward their gradient written and read again (memory-bound)
    loss = sh.head_passes * (streaming_time_s(system, 2.0 * 4.0 * tokens * model.vocab / plan.tp)
                             + system.chip.kernel_overhead_s)
    forward = matrix + att_fwd + (priced.forward("head") + loss)
    rerun_s = (rerun_parts_s(model, plan, system, sh, att_fwd, priced, moe_shape) if reruns
               else None)
    recompute = plan.recompute.extra_forward_s(matrix, att_fwd, rerun_s)
    backward = matrix_backward + (priced.backward("head") + 2.0 * loss) + att_bwd + recompute
    # the host launches the kernels while the GPU runs the ones before, and the
    # copy engines move the offloaded activations to host memory in forward and
    # back in backward beside the compute: only the excess of either over the
    # GPU's work shows (exact at every temperature: the relaxation smooths the
    # plan's knobs, and a softplus here would move every relaxed step the host
    # does not bound)
    launches = host_launches(model, plan, sh)
    if reruns:  # the recomputed modules' launches in backward
        launches = (launches[0], launches[1] + rerun_launches(model, plan, sh))
    stored, offloaded = stored_bytes_per_micro_batch(model, plan, sh, terms, t)
    offload_s = offloaded / system.chip.host_Bps
    waits = plan.host_syncs and plan.moe_dispatcher.host_syncs > 0
    synced = _synced_s(model, plan, system, sh, forward) if waits else None
    forward = t.hard_max(forward, t.hard_max(launches[0] * plan.host_launch_s, offload_s))
    backward = t.hard_max(backward, t.hard_max(launches[1] * plan.host_launch_s, offload_s))
    if waits:
        # each forward pass waits at the dispatcher's syncs (backward reuses the
        # forward's layout; a recomputed forward waits again)
        forward = forward + synced
        backward = backward + (plan.recompute.moe_forwards - 1.0) * synced
    m = sh.micro_batches
    attention_fwd = m * att_fwd * plan.recompute.attention_forwards
    attention = attention_fwd + m * att_bwd
    moe_forward = (sum(parts_s(model, plan, system, sh, att_fwd, moe_parts, priced,
                                       moe_shape).values())
                   if plan.ep_overlap else jnp.zeros(()))
    params = held_params(model, plan, t, sh)
    return Timing(forward, backward, attention, m * (forward + backward),
                  optimizer_time_s(model, plan, system, t, sh, params), attention_fwd,
                  sh.layers_on_stage, stored, offloaded, moe_forward, full, params)
