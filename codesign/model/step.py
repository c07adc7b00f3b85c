"""The training step: compute (`compute`) + exposed communication (`traffic`)
+ pipeline bubble, its memory (`memory`), MFU and HFU — one differentiable
function of (model, plan, system), and the scenario's estimate built on it
(reliability, fabric and price of that step) with its outputs by JSON key.
One direction: the stage's shape (`stage`), then the traffic (costed without
the compute), the compute, the memory, what of the traffic the compute hides
(`overlap`), each once, handed on as typed values. The outputs' check is
`output_checks`', the network roofline `network_roofline`'s, the bisection
that fits a matmul efficiency `validate`'s.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from ..output_checks import STEP_INPUTS
from . import compute, economics, fabric, memory, overlap, reliability, stage, traffic
from .hardware import System
from .plan import Plan, data_parallel
from .relax import EXACT, Smoothing, exact_or_relaxed, lattice_linear_tree, once, smoothing, where
from .workload import Transformer


def bubble_s(plan: Plan, micro_batch_s, t=EXACT) -> jax.Array:
    """Idle time of the pipeline per step, for the plan's schedule
    (`strategies.Schedule.bubble_s`: gpipe / 1f1b (p-1) t_mb, interleaved
    (p-1) t_mb / v, zero_bubble (p-1) t_mb / 3, dualpipe (p/2 - 1) 2 t_mb / 3)."""
    return plan.schedule.bubble_s(plan.pp, plan.interleave, micro_batch_s, smoothing(t))


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

    @once
    def _gpu_seconds(self, peak: str = "") -> jax.Array:
        """step_time_s x gpus, times the peak named (`peak_flops_per_s`,
        `peak_gemm_flops_per_s`) where one is: the denominators of the
        utilisations, each computed once."""
        seconds = self.step_time_s * self.gpus
        return seconds if not peak else self._gpu_seconds() * getattr(self, peak)

    @property
    def mfu(self):
        return self._mfu()

    @once
    def _mfu(self):
        return self.model_flops_per_step / self._gpu_seconds("peak_flops_per_s")

    @property
    def mfu_causal(self):
        """MFU with the attention scores counted for the causal half only."""
        return self.mfu * self.model_flops_causal_per_step / self.model_flops_per_step

    @property
    def mfu_gemm_peak(self):
        """MFU against the peak of the precision the GEMMs run in (the fp8 peak
        for an fp8 recipe), beside the conventional 16-bit one; at most 1."""
        return self.model_flops_per_step / self._gpu_seconds("peak_gemm_flops_per_s")

    @property
    def hfu_gemm_peak(self):
        """HFU against the peak of the precision the GEMMs run in; at most 1
        (an fp8 recipe's 16-bit HFU may exceed 1, this may not)."""
        return self.hardware_flops_per_step / self._gpu_seconds("peak_gemm_flops_per_s")

    @property
    def hfu(self):
        return self.hardware_flops_per_step / self._gpu_seconds("peak_flops_per_s")

    @property
    def model_flops_per_s_per_gpu(self):
        return self.model_flops_per_step / self._gpu_seconds()

    @property
    def hardware_flops_per_s_per_gpu(self):
        return self.hardware_flops_per_step / self._gpu_seconds()

    def breakdown_s(self) -> dict:
        return {"compute": self.compute_s, "tp": self.exposed_s["tp"],
                "cp": self.exposed_s["cp"], "dp": self.exposed_s["dp"],
                "ep": self.exposed_s["ep"], "pp_p2p": self.exposed_s["pp"],
                "pp_bubble": self.bubble_s, "optimizer": self.optimizer_s}


def gemm_peak_flops_per_s(plan: Plan, system: System) -> jax.Array:
    """The dense peak of the precision the GEMMs run in (`plan.precision.gemm`;
    fp8 under `plan.fp8_recipe`: FP4 for NVFP4), or of the attention width where
    that is faster (fp32 GEMMs beside bf16 attention): no step executes its
    FLOPs faster, so utilisation against it is at most 1."""
    pr = plan.precision
    return jnp.maximum(compute.peak_flops_per_s(system, pr.gemm, plan.fp8_recipe),
                       compute.peak_flops_per_s(system, pr.attention))


def step(model: Transformer, plan: Plan, system: System, t: Smoothing = EXACT) -> Step:
    """One training step of `model` cut by `plan` on `system`: the exact model
    (`t` = `relax.EXACT`, the default) or the relaxed one the optimiser descends
    (`relax.Relaxed(temperature)`: ceil/max/min smooth; a bare float is a TypeError).

    Relaxed, the step between two micro-batch sizes or context-parallel
    degrees is the bilinear interpolation of the steps at the integers around
    them (`relax.lattice_linear_tree`; dp follows cp at the GPU count), not
    the formula at a fractional size: fewer, larger micro-batches cost a
    per-micro-batch overhead ~ 1/size less and a bubble ~ size more, and a
    larger cp a bubble ~ 1/cp less beside its ring's traffic, so the formula
    dips between 1 and 2 where the step at 2 is the slower (DeepSeek-V3's
    micro-batch, Megatron 1T's cp).
    """
    t = smoothing(t)

    def at(mb, cp):
        dp = data_parallel(plan.gpus, plan.tp, plan.pp, cp)
        return _step(model, eqx.tree_at(lambda p: (p.micro_batch, p.cp, p.dp), plan,
                                        (mb, cp, dp)), system, t)

    return exact_or_relaxed(lambda: _step(model, plan, system, t),
                            lambda: lattice_linear_tree(at, (plan.micro_batch, plan.cp), t), t)


def _step(model: Transformer, plan: Plan, system: System, t) -> Step:
    """`step`'s formula at the plan's own values.

    Communication hidden under compute still costs compute: the SMs its kernels
    occupy (`plan.comm_sm_fraction`) are lost to the GEMMs for as long as it
    runs, so the hidden seconds times that fraction are added to the compute;
    the dimensions the stack moves on copy engines
    (`stacks.Stack.copy_engine_dimensions`) cost none; the EP exchanges of a
    dispatcher with SMs of its own (DeepEP, HybridEP) cost their share,
    `parallel.moe_dispatcher_sms` / the chip's SMs.
    """
    if plan.pipeline_layout:
        sh, mem = heaviest(model, plan, system, t)
        rows = traffic.table(model, plan, system, t, sh)
        tm = compute.timing(model, plan, system, t, sh)
    else:
        sh = stage.shape(model, plan, t)
        rows = traffic.table(model, plan, system, t, sh)
        tm = compute.timing(model, plan, system, t, sh)
        mem = memory.memory(model, plan, system, t, sh, (tm.stored_bytes, tm.offloaded_bytes),
                            tm.full_layer_bytes, tm.params)
    rows = overlap.exposed(rows, tm, t)
    m = plan.micro_batches
    own = plan.moe_dispatcher.holds_sms  # the EP rows hold the dispatcher's SMs
    # the hidden seconds of the rows on the SMs (not on copy engines), summed
    # with the exposed seconds by dimension
    on_sms = np.array([r.dimension not in plan.stack.copy_engine_dimensions for r in rows])
    ep = np.array([own and r.dimension == "ep" for r in rows])
    masks = {"hidden": on_sms & ~ep} | ({"ep": on_sms & ep} if own else {})
    exposed, hidden = traffic.exposed_by_dimension(rows, masks)
    stolen = plan.comm_sm_fraction * hidden["hidden"]  # per step, spread over the micro-batches
    if own:
        stolen = stolen + plan.moe_dispatcher_sms / system.chip.compute_units * hidden["ep"]
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
        gpus=plan.gpus, traffic=rows, timing=tm, memory=mem)


def heaviest(model: Transformer, plan: Plan, system: System, t=EXACT):
    """(the `stage.Shape` of the rank with the most compute per micro-batch,
    the `memory.Memory` of the rank with the most bytes) of the plan's pipeline
    layout (`stage.shapes`, one vmapped costing of every rank): the slowest
    sets the pace of every stage (its traffic and compute are the step's), the
    fullest is what must fit; they may be different ranks (DeepSeek-V3: the
    last is the slowest, the first, with the dense layers, the fullest)."""
    ranks, valid = stage.shapes(model, plan)
    seconds = jax.vmap(lambda sh: compute.timing(model, plan, system, t, sh).micro_batch_s)(ranks)
    mems = jax.vmap(lambda sh: memory.memory(model, plan, system, t, sh))(ranks)
    fullest = jnp.argmax(where(valid, mems.total_bytes, -jnp.inf))
    slowest = jnp.argmax(where(valid, seconds, -jnp.inf))
    return stage.pick(ranks, slowest), jax.tree.map(lambda x: x[fullest], mems)


# what an estimate adds to its step, each computed only when asked for
# (`estimate(parts=...)`): the failure model's report, and the scale-out
# fabric's inventory priced (its capex and power)
PARTS = ("reliability", "fabric")


class Estimate(eqx.Module):
    """A scenario's step, reliability and fabric: what `codesign estimate`
    prints. A part `estimate` was not asked for (`PARTS`) is None."""

    step: Step
    reliability: reliability.ReliabilityReport | None
    fabric: fabric.Inventory | None
    fabric_capex_usd: jax.Array | None  # `economics.fabric_capex_usd` of the inventory
    fabric_power_w: jax.Array | None  # `economics.fabric_power_w` of the inventory
    tokens: jax.Array  # tokens to train on (0 = not set)

    @property
    def time_to_train_s(self) -> jax.Array:
        """Wall time for `tokens`, stragglers, checkpoints and failures included."""
        return self.reliability.time_to_train_s(self.tokens / self.step.tokens_per_s)


def estimate(scn, t: Smoothing = EXACT, assumptions=None, *, check=True,
             parts=PARTS) -> Estimate:
    """The whole model of a `scenario.Scenario`, differentiable in every float:
    exact (`t` = `relax.EXACT`, the default) or relaxed (`relax.Relaxed(temperature)`,
    what the gradient optimiser descends; a bare float is a TypeError naming `t`);
    the fabric counted with the default `fabric.Prices` and priced with
    `assumptions` (an `economics.Assumptions`; None: the default ones). Under
    jit/vmap/grad a knob outside its domain raises (`Scenario.checked`), and so
    does an effective training time below the failure model's floor
    (`reliability.checked`: no infinite time to train or NaN gradient), and so
    does a step that overflows (`_finite_checked`: a peak at 1e-300), unless
    `check=False`: for a scenario whose values were concrete when it was built
    (each field checks itself then, `check_outputs` the outputs), the traced
    check adds nothing, and a program without it has no host callback, so JAX's
    persistent compilation cache can store it (`codesign estimate` runs so).
    `parts` (of `PARTS`) names what is computed beside the step: a caller that
    needs the step alone (`parts=()`) traces no reliability, fabric or price.

    Args:
        scn: the `scenario.Scenario` (`codesign.load`).
        t: `relax.EXACT` (the exact model) or `relax.Relaxed(temperature)`.
        assumptions: the `economics.Assumptions` the fabric is priced with.
        check: trace the domain and output checks (see above).
        parts: of `PARTS`, what is computed beside the step.

    Returns:
        the `Estimate`: its `step` (seconds, FLOPs, bytes, MFU; `Step`), and
        the reliability, fabric inventory, fabric capital cost (USD) and power
        (W) asked for by `parts` (None otherwise). `outputs` flattens it.
    """
    t = smoothing(t)
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"parts={tuple(parts)!r}: {', '.join(sorted(unknown))} is not one of "
                         f"{', '.join(PARTS)}")
    if check:
        scn = scn.checked()
    s = step(scn.model, scn.plan, scn.system, t)
    rel = inventory = capex = power = None
    if "reliability" in parts:
        checkpoint_bytes = memory.checkpoint_bytes_total(scn.model, scn.plan)
        rel = reliability.report(s.step_time_s, scn.system.gpus, checkpoint_bytes,
                                 scn.reliability)
        if check:  # the failure model's validity bound (`reliability.checked`)
            rel = reliability.checked(rel)
    if "fabric" in parts:
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
    parts = [s.compute_s, s.bubble_s, s.optimizer_s, s.tokens_per_s, *s.exposed_s.values()]
    if est.reliability is not None:
        parts.append(est.time_to_train_s * s.gpus)
    if est.fabric is not None:
        parts += [est.fabric_capex_usd, est.fabric_power_w]
    bad = ~(s.step_time_s > 0) | ~jnp.isfinite(s.step_time_s)
    for x in parts:
        bad = bad | ~jnp.isfinite(x)
    return checks.error_if(est, jnp.any(bad), "the estimate is not finite (a traced value): an "
                        f"input is beyond what the model can represent; check {STEP_INPUTS}, "
                        "training.tokens")


def outputs(est: Estimate) -> dict:
    """Every scalar of an estimate by its JSON key (vmappable).

    Args:
        est: an `Estimate`.

    Returns:
        {key: jnp scalar}, each key naming its unit (`step_time_s`,
        `memory_bytes_per_gpu`, `tokens_per_s`, `fabric_cost_usd`, ...), as
        `codesign estimate --json` prints them; those of a part the estimate
        lacks (`PARTS`) left out. `output_checks.check_outputs` checks them.
    """
    s, r = est.step, est.reliability
    total = s.memory.total_bytes
    out = {
        "step_time_s": s.step_time_s, "tokens_per_s": s.tokens_per_s,
        "mfu": s.mfu, "mfu_causal": s.mfu_causal, "hfu": s.hfu,
        "mfu_gemm_peak": s.mfu_gemm_peak, "hfu_gemm_peak": s.hfu_gemm_peak,
        "model_tflops_per_gpu": s.model_flops_per_s_per_gpu / 1e12,
        "hardware_tflops_per_gpu": s.hardware_flops_per_s_per_gpu / 1e12,
        "memory_bytes_per_gpu": total,
        "memory_capacity_bytes": s.memory.capacity_bytes,
        **{f"memory_{k}_bytes": v for k, v in s.memory.breakdown_bytes().items()},
        "fits_memory": (total <= s.memory.capacity_bytes).astype(float),
        **{f"breakdown_{k}_s": v for k, v in s.breakdown_s().items()},
    }
    if r is not None:
        out |= {
            "expected_step_time_s": r.expected_step_time_s,
            "step_time_p50_s": r.step_time_p50_s, "step_time_p99_s": r.step_time_p99_s,
            "p_step_delayed": r.p_step_delayed, "goodput": r.goodput,
            "effective_training_time_fraction": r.effective_training_time_fraction,
            "checkpoint_interval_s": r.checkpoint_interval_s, "mtbf_s": r.mtbf_s,
        }
    if est.fabric is not None:
        out |= {"fabric_cost_usd": est.fabric_capex_usd, "fabric_power_w": est.fabric_power_w}
    if r is not None:
        out["time_to_train_s"] = time_to_train = est.time_to_train_s
        out["gpu_hours"] = time_to_train * s.gpus / 3600.0
    return out


TIME_TO_TRAIN_OUTPUTS = ("time_to_train_s", "gpu_hours")  # 0 without training.tokens


def asked(est: Estimate, out: dict) -> dict:
    """`out` (`outputs(est)`, concrete) without `TIME_TO_TRAIN_OUTPUTS` when the
    scenario sets no tokens to train on: what a command reports and checks."""
    if float(est.tokens) > 0:
        return out
    return {k: v for k, v in out.items() if k not in TIME_TO_TRAIN_OUTPUTS}


