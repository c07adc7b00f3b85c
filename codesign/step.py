"""The training step: compute + exposed communication + pipeline bubble, memory,
MFU and HFU — one differentiable function of (model, plan, system).

Compute. A GEMM of shape (M x K) @ (K x N) runs at
    peak x matmul_efficiency x I / (I + I_ridge),
a roofline on its arithmetic intensity I = 2MKN / (bytes of A, B and C) with a
saturation term: I_ridge = peak / HBM bandwidth is where a GEMM turns
compute-bound, and `chip.matmul_efficiency` is the ceiling a large GEMM
reaches. Thin GEMMs (small hidden sizes, or a narrow slice after tensor
parallelism) fall below it smoothly. Memory-bound operators (norms, softmax,
element-wise) stream the layer's activations at HBM speed: twice (write and
read) in forward, twice that in backward.

Calibration (the only throughput figures in the seeds; rerun with
`calibrate_matmul_efficiency`, checked in tests/test_step.py):
- A100 `matmul_efficiency`: Narayanan et al. 2021, 1T parameters on 3072
  A100s (tp 8, pp 64, global batch 3072, micro-batch 1, full recompute):
  163 TFLOP/s per GPU of hardware FLOPs (502 PFLOP/s, 52% of peak).
- V100 `matmul_efficiency`: Shoeybi et al. 2019, 39 TFLOP/s on one V100 for
  the 1.2B baseline (40 layers, h 1536, 16 heads, seq 1024; batch 8 and full
  recompute assumed). The 8.3B run on 512 V100s (15.1 PFLOP/s, 76% scaling)
  is then a prediction, checked in tests.
- H100, H800, B200, GB200, TPU: no figure in the seeds; they borrow A100's
  factor (labelled in hardware.py).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from . import collectives, economics, fabric, reliability, traffic
from .hardware import System
from .plan import DTYPE_BYTES, Plan
from .relax import safe_div
from .strategies import NoRecompute
from .workload import FLASH_BACKWARD_OVER_FORWARD, Transformer

KERNELS_PER_LAYER = 6.0  # memory-bound kernels of one layer's forward: 2 norms, 2
# residual adds, the activation, rotary/bias (assumption; GEMMs and the attention
# kernel pay their own overhead in gemm_time_s / attention_time_s)


def peak_flops_per_s(system: System, dtype: str) -> jax.Array:
    """The chip's dense peak for GEMMs in `dtype` (16-bit for bf16 and fp16)."""
    chip = system.chip
    return {"fp8": chip.peak_fp8_flops_per_s, "fp32": chip.peak_fp32_flops_per_s}.get(
        dtype, chip.peak_flops_per_s)


def streaming_time_s(system: System, n_bytes) -> jax.Array:
    """Seconds a memory-bound kernel takes to move `n_bytes` (read + written)."""
    return n_bytes / (system.chip.hbm_Bps * system.chip.hbm_efficiency)


def gemm_time_s(system: System, m, k, n, dtype: str, count=1.0) -> jax.Array:
    """Seconds for `count` GEMMs of (m x k) @ (k x n), run as one (batched or
    grouped) kernel (see module docstring).

    flops / (peak x E x I / (I + I_ridge)) simplifies to
    (flops / peak + bytes / achieved HBM bandwidth) / E: the compute and memory
    times add, divided by the large-GEMM efficiency E; plus one kernel's fixed
    overhead.
    """
    flops = 2.0 * m * k * n
    moved = DTYPE_BYTES[dtype] * (m * k + k * n + m * n)
    seconds = flops / peak_flops_per_s(system, dtype) + streaming_time_s(system, moved)
    return count * seconds / system.chip.matmul_efficiency + system.chip.kernel_overhead_s


def attention_time_s(model: Transformer, plan: Plan, system: System):
    """(forward, backward) seconds of one layer's attention scores (Q K^T, softmax,
    A V), one micro-batch, per GPU.

    flash: one fused kernel executing the unmasked half of the score FLOPs at
    `chip.attention_efficiency` of the peak in the attention width; backward
    2.5x the forward's FLOPs (it recomputes the scores). naive: batched GEMMs
    over the whole s x s matrix (one (query x key) pair per head), backward
    twice the forward; the softmax traffic over s x s is in the memory-bound
    term (the scores are part of the stored activations).
    """
    d = plan.precision.attention
    queries = model.seq_len / plan.cp
    if model.attention_kernel == "flash":
        flops = (plan.micro_batch * queries * model.attention_score_flops_per_token() / plan.tp
                 * model.executed_score_fraction())
        fwd = flops / (peak_flops_per_s(system, d) * system.chip.attention_efficiency)
        overhead = system.chip.kernel_overhead_s
        return fwd + overhead, FLASH_BACKWARD_OVER_FORWARD * fwd + overhead
    heads = model.heads / plan.tp * plan.micro_batch
    fwd = (gemm_time_s(system, queries, model.qk_width, model.seq_len, d, heads)
           + gemm_time_s(system, queries, model.seq_len, model.v_width, d, heads))
    return fwd, 2.0 * fwd


def _linear_time_s(system, tokens, k, n, split, tp, dtype):
    """One weight matrix of `attention_gemms`, cut by tensor parallelism."""
    k = k / tp if split == "k" else k
    n = n / tp if split == "n" else n
    return gemm_time_s(system, tokens, k, n, dtype)


class Timing(eqx.Module):
    """Compute of the slowest stage: one micro-batch, and what rows hide under."""

    forward_s: jax.Array  # one micro-batch forward
    backward_s: jax.Array  # one micro-batch backward (incl. recomputation)
    attention_s: jax.Array  # per step: attention-score compute (ring attention hides under it)
    overlap_s: jax.Array  # per step: compute another micro-batch can hide comm under
    optimizer_s: jax.Array  # per step: the optimizer update over the local shard
    attention_forward_s: jax.Array  # per step: the forward part of attention_s (+ recompute)
    layers: jax.Array  # layers on the slowest stage (per-layer times: forward_s / layers)

    @property
    def micro_batch_s(self) -> jax.Array:
        return self.forward_s + self.backward_s


def _layer_forward_s(model: Transformer, plan: Plan, system: System, moe: bool):
    """(matrix + memory-bound, attention forward, attention backward) seconds of
    one layer, one micro-batch, per GPU."""
    d = plan.precision.gemm
    tokens = plan.micro_batch * model.seq_len / plan.cp
    h, tp = model.hidden, plan.tp
    mats = 2.0 if model.gated else 1.0
    t = sum(_linear_time_s(system, tokens, k, n, split, tp, d)
            for k, n, split in model.attention_gemms())
    if moe:
        f_e = jnp.maximum(model.expert_ffn_hidden, 1.0)  # finite for dense models too
        experts = jnp.maximum(model.experts, 1.0)
        # the busiest expert rank sets the pace: moe_imbalance x the mean load
        per_expert = tokens * plan.ep * model.top_k / experts * plan.moe_imbalance
        local = experts / plan.ep
        t += gemm_time_s(system, per_expert, h, mats * f_e / tp, d, local)
        t += gemm_time_s(system, per_expert, f_e / tp, h, d, local)
        shared = model.shared_experts * f_e
        t += (gemm_time_s(system, tokens, h, mats * shared / tp, d)
              + gemm_time_s(system, tokens, shared / tp, h, d)) * (model.shared_experts > 0)
        # router (16-bit, replicated) and the permute / unpermute of the top_k
        # copies of each token (read + write each, a kernel each)
        t += gemm_time_s(system, tokens, h, experts, plan.precision.attention)
        copies = tokens * model.top_k * h * plan.precision.bytes("activations")
        t += streaming_time_s(system, 2.0 * 2.0 * copies) + 2.0 * system.chip.kernel_overhead_s
    else:
        f = model.ffn_hidden
        t += gemm_time_s(system, tokens, h, mats * f / tp, d)
        t += gemm_time_s(system, tokens, f / tp, h, d)
    att_fwd, att_bwd = attention_time_s(model, plan, system)
    stored = model.activation_bytes_per_layer(plan.micro_batch, tp, plan.sequence_parallel,
                                              "none", moe, plan.cp, plan.precision)
    memory = streaming_time_s(system, 2.0 * stored)
    overhead = KERNELS_PER_LAYER * system.chip.kernel_overhead_s
    return t + memory + overhead, att_fwd, att_bwd


def local_params(model: Transformer, plan: Plan, t=0.0, stage=1):
    """(dense, routed) parameters one GPU of the fullest stage holds, sharded by
    tp (and ep for the routed experts), and by dp when ZeRO `stage` or higher
    is on (`stage=None`: never)."""
    sh = traffic.shape(model, plan, t)
    share = sh.layers_on_stage / model.layers  # of the layers, on the fullest stage
    experts = model.routed_expert_params()
    layer_params = model.params() - experts - model.embedding_params()
    dense = (layer_params * share + model.vocab * model.hidden) / plan.tp
    routed = experts * share / (plan.ep * plan.tp)
    sharded = stage is not None and plan.zero >= stage
    return (dense / (plan.dp if sharded else 1.0),
            routed / (plan.dp / plan.ep if sharded else 1.0))


def optimizer_time_s(model: Transformer, plan: Plan, system: System, t=0.0):
    """One Adam step over the local shard (ZeRO >= 1 shards it over dp): a
    memory-bound pass over gradients, master weights, moments and weights."""
    dense, routed = local_params(model, plan, t, stage=1)
    moved = (dense + routed) * plan.precision.optimizer_step_bytes_per_param
    return streaming_time_s(system, moved) + system.chip.kernel_overhead_s


def timing(model: Transformer, plan: Plan, system: System, t=0.0) -> Timing:
    sh = traffic.shape(model, plan, t)
    dense_mm, dense_af, dense_ab = _layer_forward_s(model, plan, system, moe=False)
    moe_mm, moe_af, moe_ab = _layer_forward_s(model, plan, system, moe=True)
    dense_layers = sh.layers_on_stage - sh.moe_layers_on_stage
    matrix = dense_layers * dense_mm + sh.moe_layers_on_stage * moe_mm
    att_fwd = dense_layers * dense_af + sh.moe_layers_on_stage * moe_af
    att_bwd = dense_layers * dense_ab + sh.moe_layers_on_stage * moe_ab
    tokens = plan.micro_batch * model.seq_len / plan.cp
    logits = gemm_time_s(system, tokens, model.hidden, model.vocab / plan.tp,
                         plan.precision.attention)  # the output layer stays 16-bit
    # the loss: fp32 logits written, then read by softmax / cross-entropy; in
    # backward their gradient written and read again (memory-bound)
    loss = streaming_time_s(system, 2.0 * 4.0 * tokens * model.vocab / plan.tp) \
        + system.chip.kernel_overhead_s
    logits = logits + loss
    forward = matrix + att_fwd + logits
    recompute = plan.recompute.extra_forward_s(matrix, att_fwd)
    backward = 2.0 * (matrix + logits) + att_bwd + recompute
    m = sh.micro_batches
    attention_fwd = m * att_fwd * plan.recompute.attention_forwards
    attention = attention_fwd + m * att_bwd
    return Timing(forward, backward, attention, m * (forward + backward),
                  optimizer_time_s(model, plan, system, t), attention_fwd, sh.layers_on_stage)


def bubble_s(plan: Plan, micro_batch_s, t=0.0) -> jax.Array:
    """Idle time of the pipeline per step, for the plan's schedule
    (`strategies.Schedule.bubble_s`: gpipe / 1f1b (p-1) t_mb, interleaved
    (p-1) t_mb / v, zero_bubble (p-1) t_mb / 3, dualpipe (p/2 - 1) 2 t_mb / 3)."""
    return plan.schedule.bubble_s(plan.pp, plan.interleave, micro_batch_s, t)


def in_flight_micro_batches(plan: Plan, t=0.0) -> jax.Array:
    """Micro-batches whose activations the first stage holds at once
    (`strategies.Schedule.in_flight_micro_batches`)."""
    return plan.schedule.in_flight_micro_batches(plan.micro_batches, plan.pp, plan.interleave, t)


class Memory(eqx.Module):
    """Bytes per GPU on the fullest stage."""

    weights_bytes: jax.Array
    gradients_bytes: jax.Array
    optimizer_bytes: jax.Array
    activations_bytes: jax.Array
    reserve_bytes: jax.Array  # CUDA context, communicator buffers, fragmentation
    capacity_bytes: jax.Array

    @property
    def total_bytes(self) -> jax.Array:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.reserve_bytes)

    def breakdown_bytes(self) -> dict:
        """Each term of `total_bytes` by name."""
        return {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
                "reserve": self.reserve_bytes}


def memory(model: Transformer, plan: Plan, system: System, t=0.0) -> Memory:
    """Weights, gradients and optimizer state by ZeRO stage and precision recipe;
    activations by recompute mode, attention kernel, sequence parallelism and
    the micro-batches in flight; the chip's reserve."""
    sh = traffic.shape(model, plan, t)
    pr = plan.precision
    copies = plan.schedule.weight_copies  # DualPipe keeps two copies

    def sharded(per_param, stage):
        dense, routed = local_params(model, plan, t, stage)
        return per_param * copies * (dense + routed)

    weights = sharded(pr.bytes("params"), 3)
    if plan.zero == 3:  # gathered weights: one layer at a time, or all kept for backward
        experts = model.routed_expert_params()
        layer_params = model.params() - experts - model.embedding_params()
        gathered = (layer_params / model.layers + experts / jnp.maximum(model.layers, 1.0)
                    / plan.ep) / plan.tp
        dense, routed = local_params(model, plan, t, stage=None)
        keep = (dense + routed) * (1.0 - 1.0 / plan.dp)
        weights = weights + pr.bytes("params") * (
            2.0 * gathered if plan.reshard_after_forward else keep)
    dense_layers = sh.layers_on_stage - sh.moe_layers_on_stage
    per_layer = lambda recompute, moe: model.activation_bytes_per_layer(  # noqa: E731
        plan.micro_batch, plan.tp, plan.sequence_parallel, recompute, moe, plan.cp, pr)
    per_mb = (dense_layers * per_layer(plan.recompute, False)
              + sh.moe_layers_on_stage * per_layer(plan.recompute, True))
    activations = per_mb * in_flight_micro_batches(plan, t)
    if not plan.recompute.keeps_layer_activations:  # the layer being recomputed
        activations = activations + per_layer(NoRecompute(), False)  # holds its full ones
    # fp32 logits of one micro-batch on the last stage
    activations = activations + 4.0 * plan.micro_batch * model.seq_len / plan.cp \
        * model.vocab / plan.tp
    return Memory(weights, sharded(pr.bytes("grad_reduce"), 2),
                  sharded(pr.optimizer_bytes_per_param, 1), activations,
                  system.chip.hbm_reserve_bytes, system.chip.hbm_bytes)


class Step(eqx.Module):
    """Everything one step costs; every leaf a jnp scalar (vmaps over scenarios)."""

    step_time_s: jax.Array
    compute_s: jax.Array
    bubble_s: jax.Array
    exposed_s: dict  # dimension -> exposed communication seconds per step
    tokens_per_s: jax.Array
    model_flops_per_step: jax.Array
    model_flops_causal_per_step: jax.Array  # attention scores counted for the causal half
    hardware_flops_per_step: jax.Array
    peak_flops_per_s: jax.Array  # dense 16-bit peak: MFU's denominator, whatever the recipe
    peak_fp8_flops_per_s: jax.Array
    optimizer_s: jax.Array
    gpus: jax.Array
    memory: Memory
    traffic: tuple  # of traffic.Row
    timing: Timing

    @property
    def mfu(self):
        return self.model_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

    @property
    def mfu_causal(self):
        """MFU with the attention scores counted for the causal half only."""
        return self.mfu * self.model_flops_causal_per_step / self.model_flops_per_step

    @property
    def mfu_fp8_peak(self):
        """MFU against the chip's dense fp8 peak (beside the conventional one)."""
        return self.model_flops_per_step / (
            self.step_time_s * self.gpus * self.peak_fp8_flops_per_s)

    @property
    def hfu(self):
        return self.hardware_flops_per_step / (
            self.step_time_s * self.gpus * self.peak_flops_per_s)

    @property
    def model_flops_per_s_per_gpu(self):
        return self.model_flops_per_step / (self.step_time_s * self.gpus)

    @property
    def hardware_flops_per_s_per_gpu(self):
        return self.hardware_flops_per_step / (self.step_time_s * self.gpus)

    def breakdown_s(self) -> dict:
        return {"compute": self.compute_s, "tp": self.exposed_s["tp"],
                "cp": self.exposed_s["cp"], "dp": self.exposed_s["dp"],
                "ep": self.exposed_s["ep"], "pp_p2p": self.exposed_s["pp"],
                "pp_bubble": self.bubble_s, "optimizer": self.optimizer_s}


def step(model: Transformer, plan: Plan, system: System, t=0.0) -> Step:
    """One training step of `model` cut by `plan` on `system` (temperature t
    relaxes ceil/max/min for the optimiser; t = 0 is the exact model).

    Communication hidden under compute still costs compute: the SMs its kernels
    occupy (`plan.comm_sm_fraction`) are lost to the GEMMs for as long as it
    runs, so the hidden seconds times that fraction are added to the compute.
    """
    tm = timing(model, plan, system, t)
    rows = traffic.table(model, plan, system, tm, t)
    exposed = traffic.exposed_by_dimension(rows)
    m = plan.micro_batches
    hidden = sum((r.time_s - r.exposed_s for r in rows), jnp.zeros(()))
    stolen = plan.comm_sm_fraction * hidden  # per step, spread over the micro-batches
    per_mb = tm.micro_batch_s + (exposed["tp"] + exposed["cp"] + exposed["ep"] + stolen) / m
    bubble = bubble_s(plan, per_mb, t)
    compute = m * tm.micro_batch_s + stolen
    step_time = compute + bubble + sum(exposed.values()) + tm.optimizer_s
    tokens = plan.global_batch * model.seq_len
    return Step(
        step_time_s=step_time, compute_s=compute, bubble_s=bubble, exposed_s=exposed,
        tokens_per_s=tokens / step_time,
        model_flops_per_step=tokens * model.model_flops_per_token(),
        model_flops_causal_per_step=tokens * model.model_flops_per_token(causal=True),
        hardware_flops_per_step=tokens * model.hardware_flops_per_token(plan.recompute),
        peak_flops_per_s=system.chip.peak_flops_per_s,
        peak_fp8_flops_per_s=system.chip.peak_fp8_flops_per_s, optimizer_s=tm.optimizer_s,
        gpus=plan.gpus, memory=memory(model, plan, system, t), traffic=rows, timing=tm)


def calibrate_matmul_efficiency(model: Transformer, plan: Plan, system: System,
                                target_flops_per_s_per_gpu: float, *, hardware: bool = True,
                                iterations: int = 40) -> float:
    """The `chip.matmul_efficiency` at which `step` reports the target per-GPU
    throughput (hardware FLOPs, or model FLOPs when `hardware=False`). Bisection:
    throughput rises monotonically with the efficiency."""
    run = jax.jit(lambda e: step(model, plan, eqx.tree_at(
        lambda s: s.chip.matmul_efficiency, system, e)))

    def throughput(e):
        r = run(jnp.asarray(e))
        return float(r.hardware_flops_per_s_per_gpu if hardware
                     else r.model_flops_per_s_per_gpu)

    lo, hi = 1e-3, 1.0
    if throughput(hi) < target_flops_per_s_per_gpu:
        raise ValueError(f"target={target_flops_per_s_per_gpu:g} FLOP/s per GPU is out of "
                         "reach even at matmul_efficiency=1")
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if throughput(mid) < target_flops_per_s_per_gpu else (lo, mid)
    return 0.5 * (lo + hi)


class Estimate(eqx.Module):
    """A scenario's step, reliability and fabric: what `codesign estimate` prints."""

    step: Step
    reliability: reliability.ReliabilityReport
    fabric: fabric.Inventory
    fabric_capex_usd: jax.Array  # `economics.fabric_capex_usd` of the inventory
    fabric_power_w: jax.Array  # `economics.fabric_power_w` of the inventory
    tokens: jax.Array  # tokens to train on (0 = not set)

    @property
    def time_to_train_s(self) -> jax.Array:
        """Wall time for `tokens`, stragglers, checkpoints and failures included."""
        return self.reliability.time_to_train_s(self.tokens / self.step.tokens_per_s)


def checkpoint_bytes_total(model: Transformer, plan: Plan) -> jax.Array:
    """Bytes of one checkpoint: weights, master weights and Adam moments."""
    pr = plan.precision
    return model.params() * (pr.bytes("params") + pr.optimizer_bytes_per_param)


def estimate(scn, t=0.0, assumptions=None) -> Estimate:
    """The whole model of a `scenario.Scenario`, differentiable in every float;
    the fabric counted with the default `fabric.Prices` and priced with
    `assumptions` (an `economics.Assumptions`; None: the default ones). Under
    jit/vmap/grad a knob outside its domain raises (`Scenario.checked`)."""
    scn = scn.checked()
    s = step(scn.model, scn.plan, scn.system, t)
    checkpoint_bytes = checkpoint_bytes_total(scn.model, scn.plan)
    rel = reliability.report(s.step_time_s, scn.system.gpus, checkpoint_bytes, scn.reliability)
    inventory = fabric.inventory(scn.system, t=t)
    prices = economics.default_assumptions() if assumptions is None else assumptions
    capex = economics.fabric_capex_usd(scn.system, inventory, prices, t)
    power = economics.fabric_power_w(scn.system, inventory, prices)
    return Estimate(s, rel, inventory, capex, power, scn.tokens)


def outputs(est: Estimate) -> dict:
    """Every scalar of an estimate by its JSON key (jnp scalars; vmappable)."""
    s, r = est.step, est.reliability
    out = {
        "step_time_s": s.step_time_s, "tokens_per_s": s.tokens_per_s,
        "mfu": s.mfu, "mfu_causal": s.mfu_causal, "mfu_fp8_peak": s.mfu_fp8_peak, "hfu": s.hfu,
        "model_tflops_per_gpu": s.model_flops_per_s_per_gpu / 1e12,
        "hardware_tflops_per_gpu": s.hardware_flops_per_s_per_gpu / 1e12,
        "memory_bytes_per_gpu": s.memory.total_bytes,
        "memory_capacity_bytes": s.memory.capacity_bytes,
        **{f"memory_{k}_bytes": v for k, v in s.memory.breakdown_bytes().items()},
        "fits_memory": (s.memory.total_bytes <= s.memory.capacity_bytes).astype(float),
        **{f"breakdown_{k}_s": v for k, v in s.breakdown_s().items()},
        "expected_step_time_s": r.expected_step_time_s,
        "step_time_p50_s": r.step_time_p50_s, "step_time_p99_s": r.step_time_p99_s,
        "p_step_delayed": r.p_step_delayed, "goodput": r.goodput,
        "effective_training_time_fraction": r.effective_training_time_fraction,
        "checkpoint_interval_s": r.checkpoint_interval_s, "mtbf_s": r.mtbf_s,
        "fabric_cost_usd": est.fabric_capex_usd, "fabric_power_w": est.fabric_power_w,
    }
    out["time_to_train_s"] = est.time_to_train_s
    out["gpu_hours"] = est.time_to_train_s * s.gpus / 3600.0
    return out


def wire_bytes_per_gpu(row: traffic.Row) -> jax.Array:
    """Bytes one GPU puts on its link per step for a row: nccl-tests' bus
    factor (bytes through each rank's link per byte of message) x size x count."""
    return row.count_per_step * row.message_bytes * collectives.bus_factor(
        row.collective, row.ranks)


def needed_flop_per_byte(system: System, dtype: str = "bf16") -> dict:
    """The FLOP per byte each tier needs to stay compute-bound: peak / bandwidth
    per direction (the seeds' 1,100 for H100 over NVLink divides by the
    bidirectional 900 GB/s, which halves it)."""
    peak = peak_flops_per_s(system, dtype)
    return {"scale_up": peak / system.scale_up.bandwidth_Bps,
            "scale_out": peak / system.scale_out.bandwidth_Bps}


def roofline(s: Step, system: System, dtype: str = "bf16") -> dict:
    """The network roofline per dimension: FLOP per byte the plan achieves on
    the wire against the FLOP per byte its tier needs to stay compute-bound
    (`needed_flop_per_byte`). A dimension whose traffic crosses domains
    (`scale_out`, a jnp boolean: traceable) is judged on the bytes it sends over
    the slow tier (`Row.slow_tier_bytes`); one that stays inside on all its wire
    bytes (`wire_bytes`). `flop_per_byte` is 0 for a dimension without traffic."""
    flops = s.hardware_flops_per_step / s.gpus
    need = needed_flop_per_byte(system, dtype)
    totals = {}
    for r in s.traffic:
        wire, slow = totals.get(r.dimension, (0.0, 0.0))
        totals[r.dimension] = (wire + wire_bytes_per_gpu(r), slow + r.slow_tier_bytes)
    out = {}
    for dim, (wire, slow) in totals.items():
        scale_out = slow > 0
        moved = jnp.where(scale_out, slow, wire)
        out[dim] = {"bytes": moved, "wire_bytes": wire, "scale_out": scale_out,
                    "needed_flop_per_byte": jnp.where(scale_out, need["scale_out"],
                                                      need["scale_up"]),
                    "flop_per_byte": safe_div(flops, moved)}
    return out
