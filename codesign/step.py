"""The training step: compute (`compute`) + exposed communication (`traffic`)
+ pipeline bubble, its memory (`memory`), MFU and HFU — one differentiable
function of (model, plan, system); and the estimate of a whole scenario with
reliability and fabric, its outputs by JSON key and their check.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _checks, collectives, compute, economics, fabric, memory, reliability, stage, traffic
from .hardware import System
from .plan import Plan, data_parallel
from .relax import lattice_linear_tree, safe_div
from .workload import Transformer


def bubble_s(plan: Plan, micro_batch_s, t=0.0) -> jax.Array:
    """Idle time of the pipeline per step, for the plan's schedule
    (`strategies.Schedule.bubble_s`: gpipe / 1f1b (p-1) t_mb, interleaved
    (p-1) t_mb / v, zero_bubble (p-1) t_mb / 3, dualpipe (p/2 - 1) 2 t_mb / 3)."""
    return plan.schedule.bubble_s(plan.pp, plan.interleave, micro_batch_s, t)


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
    # the dense peak of the width the GEMMs run in (`gemm_peak_flops_per_s`)
    peak_gemm_flops_per_s: jax.Array
    optimizer_s: jax.Array
    gpus: jax.Array
    memory: memory.Memory
    traffic: tuple  # of traffic.Row
    timing: compute.Timing

    @property
    def mfu(self):
        return self.model_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

    @property
    def mfu_causal(self):
        """MFU with the attention scores counted for the causal half only."""
        return self.mfu * self.model_flops_causal_per_step / self.model_flops_per_step

    @property
    def mfu_gemm_peak(self):
        """MFU against the peak of the precision the GEMMs run in (the fp8 peak
        for an fp8 recipe), beside the conventional 16-bit one; at most 1."""
        return self.model_flops_per_step / (
            self.step_time_s * self.gpus * self.peak_gemm_flops_per_s)

    @property
    def hfu_gemm_peak(self):
        """HFU against the peak of the precision the GEMMs run in; at most 1
        (an fp8 recipe's 16-bit HFU may exceed 1, this may not)."""
        return self.hardware_flops_per_step / (
            self.step_time_s * self.gpus * self.peak_gemm_flops_per_s)

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


def gemm_peak_flops_per_s(plan: Plan, system: System) -> jax.Array:
    """The dense peak of the precision the GEMMs run in (`plan.precision.gemm`),
    or of the attention width where that is faster (fp32 GEMMs beside bf16
    attention): no step executes its FLOPs faster, so utilisation against it
    is at most 1."""
    pr = plan.precision
    return jnp.maximum(compute.peak_flops_per_s(system, pr.gemm),
                       compute.peak_flops_per_s(system, pr.attention))


def step(model: Transformer, plan: Plan, system: System, t=0.0) -> Step:
    """One training step of `model` cut by `plan` on `system` (temperature t
    relaxes ceil/max/min for the optimiser; t = 0 is the exact model).

    Relaxed, the step between two micro-batch sizes or context-parallel
    degrees is the bilinear interpolation of the steps at the integers around
    them (`relax.lattice_linear_tree`; dp follows cp at the GPU count), not
    the formula at a fractional size: fewer, larger micro-batches cost a
    per-micro-batch overhead ~ 1/size less and a bubble ~ size more, and a
    larger cp a bubble ~ 1/cp less beside its ring's traffic, so the formula
    dips between 1 and 2 where the step at 2 is the slower (DeepSeek-V3's
    micro-batch, Megatron 1T's cp).
    """
    if isinstance(t, (int, float)) and t == 0:
        return _step(model, plan, system, t)

    def at(mb, cp):
        dp = data_parallel(plan.gpus, plan.tp, plan.pp, cp)
        return _step(model, eqx.tree_at(lambda p: (p.micro_batch, p.cp, p.dp), plan,
                                        (mb, cp, dp)), system, t)

    return lattice_linear_tree(at, (plan.micro_batch, plan.cp), t)


def _step(model: Transformer, plan: Plan, system: System, t) -> Step:
    """`step`'s formula at the plan's own values.

    Communication hidden under compute still costs compute: the SMs its kernels
    occupy (`plan.comm_sm_fraction`) are lost to the GEMMs for as long as it
    runs, so the hidden seconds times that fraction are added to the compute;
    the dimensions the stack moves on copy engines
    (`stacks.Stack.copy_engine_dimensions`) cost none.
    """
    sh = stage.shape(model, plan, t)
    tm = compute.timing(model, plan, system, t, sh)
    rows = traffic.table(model, plan, system, tm, t, sh)
    exposed = traffic.exposed_by_dimension(rows)
    m = plan.micro_batches
    on_sms = [r for r in rows if r.dimension not in plan.stack.copy_engine_dimensions]
    hidden = sum((r.time_s - r.exposed_s for r in on_sms), jnp.zeros(()))
    stolen = plan.comm_sm_fraction * hidden  # per step, spread over the micro-batches
    per_mb = tm.micro_batch_s + (exposed["tp"] + exposed["cp"] + exposed["ep"] + stolen) / m
    bubble = bubble_s(plan, per_mb, t)
    compute_s = m * tm.micro_batch_s + stolen
    step_time = compute_s + bubble + sum(exposed.values()) + tm.optimizer_s
    tokens = plan.global_batch * model.seq_len
    return Step(
        step_time_s=step_time, compute_s=compute_s, bubble_s=bubble, exposed_s=exposed,
        tokens_per_s=tokens / step_time,
        model_flops_per_step=tokens * model.model_flops_per_token(),
        model_flops_causal_per_step=tokens * model.model_flops_per_token(causal=True),
        hardware_flops_per_step=tokens * model.hardware_flops_per_token(plan.recompute),
        peak_flops_per_s=system.chip.peak_flops_per_s,
        peak_gemm_flops_per_s=gemm_peak_flops_per_s(plan, system), optimizer_s=tm.optimizer_s,
        gpus=plan.gpus, traffic=rows, timing=tm,
        memory=memory.memory(model, plan, system, t, sh, (tm.stored_bytes, tm.offloaded_bytes)))


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


def estimate(scn, t=0.0, assumptions=None, *, check=True) -> Estimate:
    """The whole model of a `scenario.Scenario`, differentiable in every float;
    the fabric counted with the default `fabric.Prices` and priced with
    `assumptions` (an `economics.Assumptions`; None: the default ones). Under
    jit/vmap/grad a knob outside its domain raises (`Scenario.checked`), and so
    does an effective training time below the failure model's floor
    (`reliability.checked`: no infinite time to train or NaN gradient), and so
    does a step that overflows (`_finite_checked`: a peak at 1e-300), unless
    `check=False`: for a scenario whose values were concrete when it was built
    (each field checks itself then, `check_outputs` the outputs), the traced
    check adds nothing, and a program without it has no host callback, so JAX's
    persistent compilation cache can store it (`codesign estimate` runs so)."""
    if check:
        scn = scn.checked()
    s = step(scn.model, scn.plan, scn.system, t)
    checkpoint_bytes = memory.checkpoint_bytes_total(scn.model, scn.plan)
    rel = reliability.report(s.step_time_s, scn.system.gpus, checkpoint_bytes, scn.reliability)
    if check:  # the failure model's validity bound (`reliability.checked`)
        rel = reliability.checked(rel)
    inventory = fabric.inventory(scn.system, t=t)
    prices = economics.default_assumptions() if assumptions is None else assumptions
    capex = economics.fabric_capex_usd(scn.system, inventory, prices, t)
    power = economics.fabric_power_w(scn.system, inventory, prices)
    est = Estimate(s, rel, inventory, capex, power, scn.tokens)
    return _finite_checked(est) if check else est


def _finite_checked(est: Estimate) -> Estimate:
    """`est` guarded by `equinox.error_if`: under jit/vmap/grad a step time that is
    not a positive finite number, a non-finite part of it, or a time to train
    (in GPU-seconds) past what a float holds raises instead of flowing on as
    inf or NaN (a peak or efficiency at 1e-300 is in its domain)."""
    s = est.step
    parts = [s.compute_s, s.bubble_s, s.optimizer_s, s.tokens_per_s, *s.exposed_s.values(),
             est.time_to_train_s * s.gpus, est.fabric_capex_usd, est.fabric_power_w]
    bad = ~(s.step_time_s > 0) | ~jnp.isfinite(s.step_time_s)
    for x in parts:
        bad = bad | ~jnp.isfinite(x)
    return _checks.error_if(est, jnp.any(bad), "the estimate is not finite (a traced value): an "
                        f"input is beyond what the model can represent; check {_STEP_INPUTS}, "
                        "training.tokens")


def outputs(est: Estimate) -> dict:
    """Every scalar of an estimate by its JSON key (jnp scalars; vmappable);
    `check_outputs` checks them."""
    s, r = est.step, est.reliability
    out = {
        "step_time_s": s.step_time_s, "tokens_per_s": s.tokens_per_s,
        "mfu": s.mfu, "mfu_causal": s.mfu_causal, "hfu": s.hfu,
        "mfu_gemm_peak": s.mfu_gemm_peak, "hfu_gemm_peak": s.hfu_gemm_peak,
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


TIME_TO_TRAIN_OUTPUTS = ("time_to_train_s", "gpu_hours")  # 0 without training.tokens


def asked(est: Estimate, out: dict) -> dict:
    """`out` (`outputs(est)`, concrete) without `TIME_TO_TRAIN_OUTPUTS` when the
    scenario sets no tokens to train on: what a command reports and checks."""
    if float(est.tokens) > 0:
        return out
    return {k: v for k, v in out.items() if k not in TIME_TO_TRAIN_OUTPUTS}


def wire_bytes_per_gpu(row: traffic.Row) -> jax.Array:
    """Bytes one GPU puts on its link per step for a row: nccl-tests' bus
    factor (bytes through each rank's link per byte of message) x size x count."""
    return row.count_per_step * row.message_bytes * collectives.bus_factor(
        row.collective, row.ranks)


def needed_flop_per_byte(system: System, dtype: str = "bf16") -> dict:
    """The FLOP per byte each tier needs to stay compute-bound: peak / bandwidth
    per direction (the seeds' 1,100 for H100 over NVLink divides by the
    bidirectional 900 GB/s, which halves it)."""
    peak = compute.peak_flops_per_s(system, dtype)
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


# ----------------------------------------------------------------- outputs
# output -> the inputs it follows from most directly (named when it is not finite)
_LIKELY_INPUTS = {
    "time_to_train_s": "training.tokens, reliability.gpu_mtbf_s, reliability.restart_s, "
                       "system.gpus",
    "gpu_hours": "training.tokens, reliability.gpu_mtbf_s, system.gpus",
    "goodput": "reliability.gpu_mtbf_s, reliability.restart_s, reliability.straggler_*, "
               "system.gpus",
    "effective_training_time_fraction": "reliability.gpu_mtbf_s, reliability.restart_s, "
                                        "reliability.checkpoint_write_s, system.gpus",
    "mtbf_s": "reliability.gpu_mtbf_s, system.gpus",
    "fabric_cost_usd": "system.gpus, system.pod_size, system.oversubscription, "
                       "system.scale_out_bandwidth_Bps, system.scale_up_bandwidth_Bps, "
                       "system.scale_up_domain",
    "fabric_power_w": "system.gpus, system.pod_size, system.oversubscription, "
                      "system.scale_out_bandwidth_Bps",
}
_STEP_INPUTS = ("model sizes, training.global_batch, training.micro_batch, parallel.*, "
                "system bandwidths, latencies and efficiencies")


# outputs that are at most 1 whatever the input -> what more than 1 would mean
_AT_MOST_ONE = {
    "mfu_gemm_peak": "more FLOP/s than the peak of the precision the GEMMs run in",
    "hfu_gemm_peak": "more FLOP/s than the peak of the precision the GEMMs run in",
    "p_step_delayed": "a probability", "goodput": "a fraction of the wall time",
    "effective_training_time_fraction": "a fraction of the wall time",
}


class OutputOutOfRange(ArithmeticError):
    """An output outside its physical range (utilisation above 1 against the
    peak of the precision the step computes in): the model's fault, not the
    input's; the command line exits 1 with this one line."""


def check_outputs(out: dict, overrides=()) -> None:
    """Check an estimate's outputs ({key: scalar}, as `step.outputs`): a
    non-finite or negative number is a one-line `ValueError` naming the output,
    the inputs it follows from, and the `--set` overrides given; an output
    above its physical bound of 1 (MFU or HFU against the peak of the GEMMs'
    precision, `mfu_gemm_peak` and `hfu_gemm_peak`; a probability; goodput) is
    an `OutputOutOfRange`. The 16-bit `mfu` and `hfu` may exceed 1 for an fp8
    recipe: legitimate, not checked. An effective training time below the
    failure model's floor is first a `reliability.NoProgress` (no feasible answer)."""
    given = [o if isinstance(o, str) else f"{o[0]}.{o[1]}={o[2]!r}" for o in overrides]
    hint = f" (overrides: {', '.join(given)})" if given else ""
    if "effective_training_time_fraction" in out:  # first: it explains an infinite time
        reliability.check_progress(out["effective_training_time_fraction"], out.get("mtbf_s"),
                                   hint)
    for key, value in out.items():
        v = _checks.concrete(value)
        if v is None:
            continue
        negative = bool(np.any(v <= 0)) if key == "step_time_s" else bool(np.any(v < 0))
        if negative and bool(np.all(np.isfinite(v))):
            raise ValueError(f"the estimate's {key}={_checks.fmt(v)} is impossible (a negative "
                             f"or zero quantity); check {_LIKELY_INPUTS.get(key, _STEP_INPUTS)}"
                             f"{hint}")
        if not bool(np.all(np.isfinite(v))):
            inputs = _LIKELY_INPUTS.get(key, _STEP_INPUTS)
            raise ValueError(f"the estimate's {key}={_checks.fmt(v)} is not finite: an input is "
                             f"beyond what the model can represent; check {inputs}{hint}")
        if key in _AT_MOST_ONE and bool(np.any(v > 1.0 + 1e-9)):
            raise OutputOutOfRange(f"the estimate's {key}={_checks.fmt(v)} exceeds 1 "
                                   f"({_AT_MOST_ONE[key]}): the model is wrong here{hint}")
