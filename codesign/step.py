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

from . import collectives, fabric, reliability
from . import traffic as T
from .hardware import System
from .plan import Plan
from .relax import smooth_max, smooth_min
from .workload import Transformer

CHECKPOINT_BYTES_PER_PARAM = 14.0  # 16-bit weights + fp32 master weights, Adam m and v
OPTIMIZER_BYTES_PER_PARAM = 12.0  # fp32 master weights, Adam m and v (ZeRO paper's K = 12)
WEIGHT_BYTES_PER_PARAM = 2.0  # 16-bit weights
GRAD_BYTES_PER_PARAM = 2.0  # 16-bit gradients


def peak_flops_per_s(system: System, dtype: str) -> jax.Array:
    return system.chip.peak_fp8_flops_per_s if dtype == "fp8" else system.chip.peak_flops_per_s


def gemm_time_s(system: System, m, k, n, dtype: str, count=1.0) -> jax.Array:
    """Seconds for `count` GEMMs of (m x k) @ (k x n) (see module docstring).

    flops / (peak x E x I / (I + I_ridge)) simplifies to
    (flops / peak + bytes / hbm_Bps) / E: the compute and memory times add,
    divided by the large-GEMM efficiency E. Zero for an empty GEMM.
    """
    elem = T.ACTIVATION_BYTES[dtype]
    flops = 2.0 * m * k * n
    moved = elem * (m * k + k * n + m * n)
    seconds = flops / peak_flops_per_s(system, dtype) + moved / system.chip.hbm_Bps
    return count * seconds / system.chip.matmul_efficiency


class Timing(eqx.Module):
    """Compute of the slowest stage: one micro-batch, and what rows hide under."""

    forward_s: jax.Array  # one micro-batch forward
    backward_s: jax.Array  # one micro-batch backward (incl. recomputation)
    attention_s: jax.Array  # per step: attention-score compute (ring attention hides under it)
    overlap_s: jax.Array  # per step: compute another micro-batch can hide comm under

    @property
    def micro_batch_s(self) -> jax.Array:
        return self.forward_s + self.backward_s


def _layer_forward_s(model: Transformer, plan: Plan, system: System, moe: bool):
    """(matrix + memory-bound, attention-score) seconds of one layer's forward,
    one micro-batch, per GPU."""
    d = plan.dtype
    tokens = plan.micro_batch * model.seq_len / plan.cp
    h, tp = model.hidden, plan.tp
    mats = 2.0 if model.gated else 1.0
    t = gemm_time_s(system, tokens, h, (h + 2 * model.kv_hidden) / tp, d)  # QKV
    t += gemm_time_s(system, tokens, h / tp, h, d)  # attention output projection
    if moe:
        f_e = jnp.maximum(model.expert_ffn_hidden, 1.0)  # finite for dense models too
        experts = jnp.maximum(model.experts, 1.0)
        per_expert = tokens * plan.ep * model.top_k / experts
        local = experts / plan.ep
        t += gemm_time_s(system, per_expert, h, mats * f_e / tp, d, local)
        t += gemm_time_s(system, per_expert, f_e / tp, h, d, local)
        shared = model.shared_experts * f_e
        t += (gemm_time_s(system, tokens, h, mats * shared / tp, d)
              + gemm_time_s(system, tokens, shared / tp, h, d)) * (model.shared_experts > 0)
    else:
        f = model.ffn_hidden
        t += gemm_time_s(system, tokens, h, mats * f / tp, d)
        t += gemm_time_s(system, tokens, f / tp, h, d)
    heads = model.heads / tp * plan.micro_batch  # one (query x key) GEMM pair per head
    head_dim, queries = h / model.heads, model.seq_len / plan.cp
    scores = (gemm_time_s(system, queries, head_dim, model.seq_len, d, heads)
              + gemm_time_s(system, queries, model.seq_len, head_dim, d, heads))
    stored = model.activation_bytes_per_layer(plan.micro_batch, tp, plan.sequence_parallel,
                                              "none", moe, plan.cp)
    memory = 2.0 * stored / system.chip.hbm_Bps
    return t + memory, scores


def timing(model: Transformer, plan: Plan, system: System, t=0.0) -> Timing:
    sh = T.shape(model, plan, t)
    dense_mm, dense_sc = _layer_forward_s(model, plan, system, moe=False)
    moe_mm, moe_sc = _layer_forward_s(model, plan, system, moe=True)
    dense_layers = sh.layers_on_stage - sh.moe_layers_on_stage
    matrix = dense_layers * dense_mm + sh.moe_layers_on_stage * moe_mm
    scores = dense_layers * dense_sc + sh.moe_layers_on_stage * moe_sc
    tokens = plan.micro_batch * model.seq_len / plan.cp
    logits = gemm_time_s(system, tokens, model.hidden, model.vocab / plan.tp, plan.dtype)
    forward = matrix + scores + logits
    recompute = {"none": 0.0, "selective": scores, "full": matrix + scores}[plan.recompute]
    backward = 2.0 * forward + recompute
    m = sh.micro_batches
    attention = m * scores * (4.0 if plan.recompute != "none" else 3.0)  # fwd, bwd (2x), redo
    return Timing(forward, backward, attention, m * (forward + backward))


def bubble_s(plan: Plan, micro_batch_s, t=0.0) -> jax.Array:
    """Idle time of the pipeline per step, for the schedule.

    gpipe / 1f1b: (p-1) t_mb (fraction (p-1)/(m+p-1) of the step);
    interleaved: (p-1) t_mb / v; zero_bubble (ZB-H1, Qi et al. 2023):
    (p-1)(F + B - 2W) = (p-1) t_mb / 3 with F = W = t_mb/3, B = 2 t_mb/3;
    dualpipe (DeepSeek-V3, Table 2): (p/2 - 1)(F&B + B - 3W) = (p/2 - 1) 2 t_mb / 3.
    """
    p = plan.pp
    if plan.schedule in ("gpipe", "1f1b"):
        return (p - 1.0) * micro_batch_s
    if plan.schedule == "interleaved":
        return (p - 1.0) * micro_batch_s / plan.interleave
    if plan.schedule == "zero_bubble":
        return (p - 1.0) * micro_batch_s / 3.0
    return smooth_max(p / 2.0 - 1.0, 0.0, t) * 2.0 * micro_batch_s / 3.0


def in_flight_micro_batches(plan: Plan, t=0.0) -> jax.Array:
    """Micro-batches whose activations the first stage holds at once."""
    m, p = plan.micro_batches, plan.pp
    if plan.schedule == "gpipe":
        return m
    if plan.schedule == "interleaved":  # Korthikanti et al. 2022, section 4.2.3
        return smooth_min(p * (1.0 + (p - 1.0) / (p * plan.interleave)), m, t)
    if plan.schedule == "dualpipe":  # DeepSeek-V3, Table 2: PP + 1
        return smooth_min(p + 1.0, m, t)
    return smooth_min(p, m, t)  # 1f1b, zero_bubble (ZB-H1 keeps 1F1B's memory)


class Memory(eqx.Module):
    """Bytes per GPU on the fullest stage."""

    weights_bytes: jax.Array
    gradients_bytes: jax.Array
    optimizer_bytes: jax.Array
    activations_bytes: jax.Array
    capacity_bytes: jax.Array

    @property
    def total_bytes(self) -> jax.Array:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes)


def memory(model: Transformer, plan: Plan, system: System, t=0.0) -> Memory:
    """Weights, gradients and optimizer state by ZeRO stage; activations by
    recompute mode, sequence parallelism and the micro-batches in flight."""
    sh = T.shape(model, plan, t)
    share = sh.layers_on_stage / model.layers  # of the layers, on the fullest stage
    experts = model.routed_expert_params()
    layer_params = model.params() - experts - model.embedding_params()
    dense = (layer_params * share + model.vocab * model.hidden) / plan.tp
    routed = experts * share / (plan.ep * plan.tp)
    copies = 2.0 if plan.schedule == "dualpipe" else 1.0  # DualPipe keeps two copies

    def sharded(per_param, stage):
        over = lambda g: g if plan.zero >= stage else 1.0  # noqa: E731
        return per_param * copies * (dense / over(plan.dp) + routed / over(plan.dp / plan.ep))

    weights = sharded(WEIGHT_BYTES_PER_PARAM, 3)
    if plan.zero == 3:  # gathered weights: one layer at a time, or all kept for backward
        gathered = (layer_params / model.layers + experts / jnp.maximum(model.layers, 1.0)
                    / plan.ep) / plan.tp
        keep = (dense + routed) * (1.0 - 1.0 / plan.dp)
        weights = weights + WEIGHT_BYTES_PER_PARAM * (
            2.0 * gathered if plan.reshard_after_forward else keep)
    dense_layers = sh.layers_on_stage - sh.moe_layers_on_stage
    per_mb = (dense_layers * model.activation_bytes_per_layer(
        plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute, False, plan.cp)
        + sh.moe_layers_on_stage * model.activation_bytes_per_layer(
        plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute, True, plan.cp))
    # fp8 training caches the activations of its GEMM inputs in 8 bits
    # (DeepSeek-V3, section 3.3): the 16-bit accounting halves
    activations = per_mb * in_flight_micro_batches(plan, t) * T.ACTIVATION_BYTES[plan.dtype] / 2
    if plan.recompute == "full":  # the layer being recomputed holds its full activations
        activations = activations + model.activation_bytes_per_layer(
            plan.micro_batch, plan.tp, plan.sequence_parallel, "none", False, plan.cp)
    # fp32 logits of one micro-batch on the last stage
    activations = activations + 4.0 * plan.micro_batch * model.seq_len / plan.cp \
        * model.vocab / plan.tp
    return Memory(weights, sharded(GRAD_BYTES_PER_PARAM, 2),
                  sharded(OPTIMIZER_BYTES_PER_PARAM, 1), activations, system.chip.hbm_bytes)


class Step(eqx.Module):
    """Everything one step costs; every leaf a jnp scalar (vmaps over scenarios)."""

    step_time_s: jax.Array
    compute_s: jax.Array
    bubble_s: jax.Array
    exposed_s: dict  # dimension -> exposed communication seconds per step
    tokens_per_s: jax.Array
    model_flops_per_step: jax.Array
    hardware_flops_per_step: jax.Array
    peak_flops_per_s: jax.Array
    gpus: jax.Array
    memory: Memory
    traffic: tuple  # of traffic.Row
    timing: Timing

    @property
    def mfu(self):
        return self.model_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

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
                "pp_bubble": self.bubble_s}


def step(model: Transformer, plan: Plan, system: System, t=0.0) -> Step:
    """One training step of `model` cut by `plan` on `system` (temperature t
    relaxes ceil/max/min for the optimiser; t = 0 is the exact model)."""
    tm = timing(model, plan, system, t)
    rows = T.table(model, plan, system, tm, t)
    exposed = T.exposed_by_dimension(rows)
    m = plan.micro_batches
    per_mb = tm.micro_batch_s + (exposed["tp"] + exposed["cp"] + exposed["ep"]) / m
    bubble = bubble_s(plan, per_mb, t)
    compute = m * tm.micro_batch_s
    step_time = compute + bubble + sum(exposed.values())
    tokens = plan.global_batch * model.seq_len
    return Step(
        step_time_s=step_time, compute_s=compute, bubble_s=bubble, exposed_s=exposed,
        tokens_per_s=tokens / step_time,
        model_flops_per_step=tokens * model.model_flops_per_token(),
        hardware_flops_per_step=tokens * model.hardware_flops_per_token(plan.recompute),
        peak_flops_per_s=peak_flops_per_s(system, plan.dtype), gpus=plan.gpus,
        memory=memory(model, plan, system, t), traffic=rows, timing=tm)


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
    tokens: jax.Array  # tokens to train on (0 = not set)

    @property
    def time_to_train_s(self) -> jax.Array:
        """Wall time for `tokens`, stragglers, checkpoints and failures included."""
        ideal = self.tokens / self.step.tokens_per_s
        return ideal / self.reliability.goodput


def estimate(scn, t=0.0) -> Estimate:
    """The whole model of a `scenario.Scenario`, differentiable in every float.
    Under jit/vmap/grad a knob outside its domain raises (`Scenario.checked`)."""
    scn = scn.checked()
    s = step(scn.model, scn.plan, scn.system, t)
    checkpoint_bytes = scn.model.params() * CHECKPOINT_BYTES_PER_PARAM
    rel = reliability.report(s.step_time_s, scn.system.gpus, checkpoint_bytes, scn.reliability)
    return Estimate(s, rel, fabric.inventory(scn.system, t=t), scn.tokens)


def outputs(est: Estimate) -> dict:
    """Every scalar of an estimate by its JSON key (jnp scalars; vmappable)."""
    s, r, f = est.step, est.reliability, est.fabric
    out = {
        "step_time_s": s.step_time_s, "tokens_per_s": s.tokens_per_s,
        "mfu": s.mfu, "hfu": s.hfu,
        "model_tflops_per_gpu": s.model_flops_per_s_per_gpu / 1e12,
        "hardware_tflops_per_gpu": s.hardware_flops_per_s_per_gpu / 1e12,
        "memory_bytes_per_gpu": s.memory.total_bytes,
        "memory_capacity_bytes": s.memory.capacity_bytes,
        "fits_memory": (s.memory.total_bytes <= s.memory.capacity_bytes).astype(float),
        **{f"breakdown_{k}_s": v for k, v in s.breakdown_s().items()},
        "expected_step_time_s": r.expected_step_time_s,
        "step_time_p50_s": r.step_time_p50_s, "step_time_p99_s": r.step_time_p99_s,
        "p_step_delayed": r.p_step_delayed, "goodput": r.goodput,
        "effective_training_time_fraction": r.effective_training_time_fraction,
        "checkpoint_interval_s": r.checkpoint_interval_s, "mtbf_s": r.mtbf_s,
        "fabric_cost_usd": f.cost_usd, "fabric_power_w": f.power_w,
    }
    out["time_to_train_s"] = est.time_to_train_s
    out["gpu_hours"] = est.time_to_train_s * s.gpus / 3600.0
    return out


def wire_bytes_per_gpu(row: T.Row) -> jax.Array:
    """Bytes one GPU puts on its link per step for a row: nccl-tests' bus
    factor (bytes through each rank's link per byte of message) x size x count."""
    return row.count_per_step * row.message_bytes * collectives.bus_factor(
        row.collective, row.ranks)


def roofline(s: Step, system: System, dtype: str = "bf16") -> dict:
    """The network roofline per dimension: FLOP per byte the plan achieves on
    the wire against the FLOP per byte the tier needs to stay compute-bound,
    peak / bandwidth (per direction; the seeds' 1,100 for H100 over NVLink
    divides by the bidirectional 900 GB/s, which halves it). A dimension whose
    traffic crosses domains is judged on the bytes it sends over the slow tier
    (`Row.slow_tier_bytes`); one that stays inside on all its wire bytes."""
    flops = s.hardware_flops_per_step / s.gpus
    peak = peak_flops_per_s(system, dtype)
    need = {"scale_up": peak / system.scale_up.bandwidth_Bps,
            "scale_out": peak / system.scale_out.bandwidth_Bps}
    totals = {}
    for r in s.traffic:
        wire, slow = totals.get(r.dimension, (0.0, 0.0))
        totals[r.dimension] = (wire + wire_bytes_per_gpu(r), slow + r.slow_tier_bytes)
    out = {}
    for dim, (wire, slow) in totals.items():
        tier = "scale_out" if float(slow) > 0 else "scale_up"
        moved = jnp.asarray(slow if tier == "scale_out" else wire)
        out[dim] = {"bytes": moved, "tier": tier, "needed_flop_per_byte": need[tier],
                    "flop_per_byte": jnp.where(moved > 0, flops / jnp.maximum(moved, 1.0),
                                               jnp.inf)}
    return out
