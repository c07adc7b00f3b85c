"""Stragglers, failures, checkpoints and goodput.

Stragglers. A synchronous step finishes with its slowest participant. Each of p
participants takes base x J x S, where J is lognormal (median 1, log-sd
`straggler_sigma`: the jitter of a healthy GPU) and S = `straggler_slowdown`
with probability `straggler_q` (a slow participant: a throttling GPU, a
congested link), else 1. With F the per-participant CDF, the step is the
maximum of p draws, with CDF F^p:

    E[step] = base x int_0^inf (1 - F(x)^p) dx,   P(step delayed) = 1 - (1 - q)^p,

evaluated by quadrature on a log grid (to ~1e-5, differentiable in q, p, s,
sigma); quantiles solve F(x)^p = u. One synchronisation per step is modelled
(the step as a whole waits for the slowest participant).

Failures. A job of N GPUs stops every M = `gpu_mtbf_s` / N seconds on average
(exponential failures). It checkpoints every tau seconds of work, each write
stalls it delta seconds, and each failure costs a restart R plus the work since
the last checkpoint. Daly (2006) gives the expected wall time of T of work,

    T_wall = M e^{R/M} (e^{(tau + delta)/M} - 1) T / tau,

whose first order is the familiar waste delta/tau + tau/(2M) + R/M (half an
interval lost per failure on average); its optimum is Young's tau = sqrt(2
delta M) to first order and Daly's higher-order form below. The effective
training time fraction is T / T_wall (Meta's "effective training time").
It falls as e^{-R/M} once M is short against R: below `MIN_EFFECTIVE_FRACTION`
(0.1%) a job makes no progress, and such inputs have no feasible answer
(`NoProgress`, `check_progress`; `checked` is the traced check): past R/M ~ 700
the wall time would overflow float64.

Defaults (a Llama-3-like run: 16,384 H100s, a ~6 TB 405B checkpoint, ~10 s
steps) give M = 3.1 h, delta = 2.8 s, tau = 4.2 min, and an effective training
time of about 92% (Llama 3 reports "higher than 90%"): the restart time
`restart_s` = 10 min is the assumption that sets it (see `Reliability`).
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from ..checks import as_float, float_field
from ..domains import BANDWIDTH, DURATION, UNIT, Domain, interval
from ..units import day
from .relax import safe_log, where

# --------------------------------------------------------------- default rates
# Llama 3 (Dubey et al. 2024):
# 419 unexpected interruptions in a 54-day snapshot on up to 16,384 H100s.
LLAMA3_GPUS = 16_384
LLAMA3_SNAPSHOT_S = 54 * day
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_GPU_MTBF_S = LLAMA3_GPUS * LLAMA3_SNAPSHOT_S / LLAMA3_UNEXPECTED_INTERRUPTIONS
# = 1.82e8 s (5.8 years) per GPU's share; the job's MTBF is 3.09 h.

# Shares of the job-stopping interruptions by component (they sum to 1):
# - 78% confirmed hardware, GPU issues 58.7% (Llama 3);
# - HBM3 17.2% (72 of 419), network switch and cable 8.4% (35), NIC 1.7% (7)
#   (Llama 3, Table 5: root causes of unexpected interruptions);
# - gpu = 58.7% - 17.2% (HBM) = the rest of the GPU category;
# - host = 78% - 58.7% - 8.4% - 1.7%: the remaining hardware (CPU, DRAM, power
#   supply, SSD, chassis) by difference;
# - software = 22% = 1 - 78%: software bugs, NCCL timeouts, dependencies,
#   unplanned host maintenance and unconfirmed causes.
COMPONENT_SHARES = {"gpu": 0.587 - 0.172, "hbm": 0.172, "nic": 0.017, "switch_cable": 0.084,
                    "host": 0.78 - 0.587 - 0.084 - 0.017, "software": 0.22}
COMPONENTS = tuple(COMPONENT_SHARES)

STORAGE_BPS = 2e12  # Llama 3: Tectonic storage sustains 2 TB/s (7 TB/s peak)

_SHARE_FIELDS = tuple(f"share_{c}" for c in COMPONENTS)


class Reliability(eqx.Module):
    """Straggler, failure and checkpoint parameters; every number is a float leaf.

    Defaults and their sources:
    - straggler_q = 0 (no slow participants unless asked; the seed's 1% is an
      illustration), straggler_slowdown = 2 (ASSUMPTION: a slow participant
      takes twice as long), straggler_sigma = 0.01 (ASSUMPTION: 1% log-sd
      step-to-step jitter of a healthy GPU; it costs ~4% at 16K participants).
    - gpu_mtbf_s = Llama 3's 54 days x 16,384 GPUs / 419 interruptions; the
      `share_*` split it by component (`COMPONENT_SHARES`).
    - checkpoint_write_s = 0: derive it as checkpoint bytes / storage_Bps;
      storage_Bps = 2 TB/s (Llama 3's Tectonic, sustained).
    - restart_s = 600 (ASSUMPTION: detect, drain, reschedule on spares, rebuild
      communicators and reload the checkpoint in 10 minutes), the time from a
      failure to training again, work since the last checkpoint excluded.
    - checkpoint_interval_s = 0: Daly's optimum.
    - spare_fraction = 1 (ASSUMPTION: spares are kept in the same pod, so a node
      failure is repaired by a swap); without a spare, a hardware failure also
      waits `replacement_s` = 1 h (ASSUMPTION) for a repair or a re-placement.
    - dual_homed = 0 (single-homed hosts, as a plain Clos): the fraction of
      hosts with two ToR uplinks (Alibaba HPN); dual-homing makes the
      `tor_share` = 0.5 (ASSUMPTION: half of the network interruptions are a
      ToR or a host's link) of switch and cable failures non-fatal.
    """

    straggler_q: jax.Array = float_field("reliability.straggler_q", UNIT, default=0.0)
    # a slow participant's time over a healthy one's
    straggler_slowdown: jax.Array = float_field("reliability.straggler_slowdown",
                                                interval(1.0, 1e3), default=2.0)
    straggler_sigma: jax.Array = float_field("reliability.straggler_sigma", interval(0.0, 5.0),
                                             default=0.01)
    gpu_mtbf_s: jax.Array = float_field("reliability.gpu_mtbf_s", Domain(0.0, 1e12, lo_open=True),
                                        default=LLAMA3_GPU_MTBF_S)
    share_gpu: jax.Array = float_field("reliability.share_gpu", UNIT,
                                       default=COMPONENT_SHARES["gpu"])
    share_hbm: jax.Array = float_field("reliability.share_hbm", UNIT,
                                       default=COMPONENT_SHARES["hbm"])
    share_nic: jax.Array = float_field("reliability.share_nic", UNIT,
                                       default=COMPONENT_SHARES["nic"])
    share_switch_cable: jax.Array = float_field("reliability.share_switch_cable", UNIT,
                                                default=COMPONENT_SHARES["switch_cable"])
    share_host: jax.Array = float_field("reliability.share_host", UNIT,
                                        default=COMPONENT_SHARES["host"])
    share_software: jax.Array = float_field("reliability.share_software", UNIT,
                                            default=COMPONENT_SHARES["software"])
    checkpoint_write_s: jax.Array = float_field("reliability.checkpoint_write_s", DURATION,
                                                default=0.0)
    storage_Bps: jax.Array = float_field("reliability.storage_Bps", BANDWIDTH,
                                         default=STORAGE_BPS)
    restart_s: jax.Array = float_field("reliability.restart_s", DURATION, default=600.0)
    checkpoint_interval_s: jax.Array = float_field("reliability.checkpoint_interval_s", DURATION,
                                                   default=0.0)
    spare_fraction: jax.Array = float_field("reliability.spare_fraction", UNIT, default=1.0)
    replacement_s: jax.Array = float_field("reliability.replacement_s", DURATION, default=3600.0)
    dual_homed: jax.Array = float_field("reliability.dual_homed", UNIT, default=0.0)
    tor_share: jax.Array = float_field("reliability.tor_share", UNIT, default=0.5)

    def __check_init__(self):
        shares = [checks.concrete(getattr(self, f)) for f in _SHARE_FIELDS]
        if all(s is not None for s in shares) and abs(sum(float(s) for s in shares) - 1) > 1e-6:
            raise ValueError(f"reliability.share_*={sum(float(s) for s in shares):g} "
                             f"({'+'.join(_SHARE_FIELDS)}) must sum to 1")


# ------------------------------------------------------------------- stragglers


def p_step_delayed(q, p) -> jax.Array:
    """P(at least one of p participants is slow) = 1 - (1 - q)^p, stably.

    -expm1(p log1p(-q)); q is capped at 1 - 1e-15 so the gradient stays finite at q = 1.
    """
    q = jnp.minimum(as_float(q), 1.0 - 1e-15)
    return -jnp.expm1(as_float(p) * jnp.log1p(-q))


_K_SIGMA = 10.0  # grid half-width in log-sds: F^p ~ 1 beyond it for p up to ~1e20
_N_PEAK = 400  # grid points around each mode (healthy, slow)
_N_GAP = 128  # grid points between them
_MIN_SIGMA = 1e-6  # sigma = 0 is evaluated as this (a step function to ~1e-6)


_UNIT = np.linspace(0.0, 1.0, _N_PEAK)  # the grid's shape (`_grid`), as jnp.linspace
_UNIT_GAP = np.linspace(0.0, 1.0, _N_GAP)[1:]


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@jax.custom_jvp
def _log_ndtr(x):
    """`jax.scipy.special.log_ndtr(x)` for float64 (its segments at -20 and 8, its
    series of order 3, the same operations in the same order: the same numbers)
    in fewer equations: no nested `jnp.where` jits, one `erfc`."""
    upper, inner = x > 8.0, x > -20.0
    w = jax.lax.select(upper, -x, jnp.maximum(x, -20.0)) * _HALF_SQRT_2
    z = jnp.abs(w)
    erfc = jax.lax.erfc(z)
    y = 0.5 * jax.lax.select(z < _HALF_SQRT_2, 1.0 + jax.lax.erf(w),
                             jax.lax.select(w > 0.0, 2.0 - erfc, erfc))
    low = jnp.minimum(x, -20.0)  # the asymptotic series (x << -1)
    x2 = low * low
    x4 = x2 * x2
    series = (1.0 + 3.0 / x4) - (1.0 / x2 + 15.0 / (x4 * x2))
    lower = (-0.5 * x2 - jnp.log(-low) - _LOG_SQRT_2PI) + jnp.log(series)
    return jax.lax.select(upper, -y, jax.lax.select(inner, jnp.log(y), lower))


_HALF_SQRT_2 = 0.5 * math.sqrt(2.0)


@_log_ndtr.defjvp
def _log_ndtr_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    ans = _log_ndtr(x)
    return ans, t * jnp.exp((-0.5 * (x * x) - _LOG_SQRT_2PI) - ans)


def _logaddexp(a, b):
    """`jnp.logaddexp(a, b)` of finite a, b (the same operations: the same numbers)."""
    return jnp.maximum(a, b) + jnp.log1p(jnp.exp(-jnp.abs(a - b)))


def _standard(u, mix):
    """The standard scores of log time u under the two modes (healthy, slow), stacked."""
    _, log_s, sigma = mix
    return jnp.stack(jnp.broadcast_arrays(u / sigma, (u - log_s) / sigma))


def _log_cdf(u, mix, z=None):
    """log F(e^u): the per-participant step-time CDF (units of the base time), log
    space (`z`: u's `_standard` scores, if computed already)."""
    z = _log_ndtr(_standard(u, mix) if z is None else z)
    return _logaddexp(*jax.lax.unstack(_weighted(mix[0], z)))  # healthy, slow


def _log_pdf_u(u, mix, z=None):
    """log dF/du at e^u (`z` as `_log_cdf`'s)."""
    log_w, _, sigma = mix
    z = _standard(u, mix) if z is None else z
    log_phi = -0.5 * z * z - _LOG_SQRT_2PI
    return _logaddexp(*jax.lax.unstack(_weighted(log_w, log_phi))) - jnp.log(sigma)


def _weighted(log_w, terms):
    """log w_k + terms[k] of both modes (healthy, slow) at once: `terms` stacked
    along the first axis, the log weights a column beside them."""
    return jnp.reshape(log_w, (2,) + (1,) * (jnp.ndim(terms) - 1)) + terms


def _params(rel: Reliability):
    """(log weights (healthy, slow), log slowdown, sigma) of the per-participant mixture."""
    q = rel.straggler_q
    sigma = jnp.maximum(rel.straggler_sigma, _MIN_SIGMA)
    return jnp.stack([safe_log(1.0 - q), safe_log(q)]), safe_log(rel.straggler_slowdown), sigma


def _grid(log_s, sigma):
    """A monotone log-time grid: dense within 10 sigma of log 1 and of log s, sparse between.

    When the two modes overlap (log s < 20 sigma) the gap collapses to a point
    at log(s)/2 and the dense parts meet there.
    """
    w = _K_SIGMA * sigma
    m1, m2 = jnp.minimum(w, log_s / 2), jnp.maximum(log_s - w, log_s / 2)
    # in the trace's dtype: a bare NumPy constant lowers as float32 in a float64
    # trace once jax_enable_x64 is switched on after a float32 one (JAX 0.10)
    unit, gap = (jnp.asarray(x, w.dtype) for x in (_UNIT, _UNIT_GAP))
    return jnp.concatenate([-w + (m1 + w) * unit, m1 + (m2 - m1) * gap,
                            m2 + (log_s + w - m2) * unit[1:]])


def _interp(x, xp, fp):
    """jnp.interp(x, xp, fp) for a non-decreasing xp, finding the interval by
    comparing every x with every xp at once (no search loop), its ends gathered
    in one indexing (x0, x1, f0, f1 of each x)."""
    i = jnp.minimum(jnp.maximum(jnp.sum(xp <= x[..., None], axis=-1), 1), len(xp) - 1)
    x0, x1, f0, f1 = jax.lax.unstack(jnp.stack([xp[:-1], xp[1:], fp[:-1], fp[1:]], -1)[i - 1],
                                     axis=-1)
    dx = x1 - x0
    flat = jnp.abs(dx) <= np.spacing(np.finfo(dx.dtype).eps)
    f = where(flat, f0, f0 + ((x - x0) / where(flat, 1.0, dx)) * (f1 - f0))
    return where(x < x0, f0, where(x > x1, f1, f))  # beyond either end: fp[0], fp[-1]


@jax.jit
def _max_stats(participants, rel: Reliability, levels):
    """(E[max], quantiles at `levels`) of max over p participants of J x S, in base times.

    E[max] = int_0^inf (1 - F(x)^p) dx on the log grid (x = e^u): below the
    grid 1 - F^p = 1 (contributes e^{u_min}), above it < 1e-17 for p < 1e6.
    A quantile solves p log F(e^u) = log(level): interpolated on the grid, then
    one Newton step, which also carries the gradient (the implicit-function
    derivative at the root).
    """
    mix = _params(rel)
    p = as_float(participants)
    sg = jax.lax.stop_gradient
    u = _grid(*mix[1:])
    log_cdf_max = p * _log_cdf(u, mix)  # log of F^p on the grid
    y = -jnp.expm1(log_cdf_max) * jnp.exp(u)
    mean = jnp.exp(u[0]) + jnp.sum(0.5 * (y[1:] + y[:-1]) * jnp.diff(u))
    target = jnp.log(levels)
    u0 = sg(_interp(target, log_cdf_max, u))
    z0 = _standard(u0, mix)  # once for the CDF and the density
    log_cdf0 = _log_cdf(u0, mix, z0)
    slope = p * jnp.exp(_log_pdf_u(u0, mix, z0) - log_cdf0)
    u1 = u0 - (p * log_cdf0 - target) / jnp.maximum(sg(slope), 1e-300)
    return mean, jnp.exp(u1)


def step_time_stats(step_time_s, participants, rel: Reliability):
    """(mean, p50, p99) of a synchronous step whose healthy median time is `step_time_s`."""
    base = as_float(step_time_s)
    mean, (p50, p99) = _max_stats(as_float(participants), rel, as_float([0.5, 0.99]))
    return base * mean, base * p50, base * p99


def straggler_monte_carlo(key: jax.Array, participants, rel: Reliability, trials: int = 4000,
                          width: int | None = None) -> jax.Array:
    """`trials` samples of max over `participants` of J x S (jax.random), for tests and plots.

    Draws a (trials, width) array (width defaults to the participant count)
    and keeps the first `participants` columns, so one compilation serves every
    participant count up to `width`.
    """
    width = int(round(float(participants))) if width is None else int(width)
    return _monte_carlo(key, as_float(participants), rel, int(trials), width)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _monte_carlo(key, participants, rel, trials, width):
    k1, k2 = jax.random.split(key)
    shape = (trials, width)
    log_j = rel.straggler_sigma * jax.random.normal(k1, shape)
    slow = jax.random.uniform(k2, shape) < rel.straggler_q
    log_t = log_j + jnp.where(slow, jnp.log(rel.straggler_slowdown), 0.0)
    log_t = jnp.where(jnp.arange(width) < participants, log_t, -jnp.inf)
    return jnp.exp(jnp.max(log_t, axis=1))


# --------------------------------------------------------------------- failures


def failure_rate_per_gpu(rel: Reliability) -> jax.Array:
    """Job-stopping failures per second per GPU, after dual-homing removes ToR/link failures."""
    survivable = rel.dual_homed * rel.tor_share * rel.share_switch_cable
    return (1.0 - survivable) / rel.gpu_mtbf_s


def job_mtbf_s(gpus, rel: Reliability) -> jax.Array:
    """Mean time between job-stopping failures of a job on `gpus` GPUs: gpu_mtbf_s / gpus.

    (Divided further by 1 - dual_homed x tor_share x share_switch_cable.)
    """
    return 1.0 / (as_float(gpus) * failure_rate_per_gpu(rel))


def component_mtbf_s(gpus, rel: Reliability) -> dict[str, jax.Array]:
    """The job's MTBF from each component alone: gpu_mtbf_s / (gpus x share).

    Rates add: 1 / job_mtbf_s = sum of 1 / component_mtbf_s (before dual-homing).
    """
    n = as_float(gpus)
    return {c: rel.gpu_mtbf_s / (n * jnp.maximum(getattr(rel, f"share_{c}"), 1e-300))
            for c in COMPONENTS}


def restart_downtime_s(rel: Reliability) -> jax.Array:
    """Mean downtime per failure: restart_s, plus replacement_s for hardware failures
    that find no spare in the pod (a re-placement or a wait for repair)."""
    hardware = 1.0 - rel.share_software
    return rel.restart_s + hardware * (1.0 - rel.spare_fraction) * rel.replacement_s


def checkpoint_write_time_s(checkpoint_bytes, rel: Reliability) -> jax.Array:
    """delta: rel.checkpoint_write_s if set (> 0), else checkpoint bytes / storage bandwidth."""
    derived = as_float(checkpoint_bytes) / rel.storage_Bps
    return where(rel.checkpoint_write_s > 0, rel.checkpoint_write_s, derived)


def young_interval_s(delta, mtbf) -> jax.Array:
    """Young (1974): tau = sqrt(2 delta M), the minimiser of delta/tau + tau/(2M)."""
    x = 2.0 * as_float(delta) * as_float(mtbf)
    return where(x > 0, jnp.sqrt(where(x > 0, x, 1.0)), 0.0)


def daly_interval_s(delta, mtbf) -> jax.Array:
    """Daly (2006) higher-order optimum of the checkpoint interval (work between checkpoints).

    tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + (1/9) delta/(2M)] - delta
    for delta < 2M, else M.
    """
    d, m = as_float(delta), as_float(mtbf)
    r = d / (2.0 * m)
    ok = r < 1.0
    rs = where(ok & (r > 0), r, 1.0)
    tau = young_interval_s(d, m) * (1.0 + jnp.sqrt(rs) / 3.0 + rs / 9.0) - d
    return where(ok, where(r > 0, tau, 0.0), m)


def first_order_waste(interval_s, delta, mtbf, restart_s=0.0) -> jax.Array:
    """delta/tau + tau/(2M) + R/M: checkpoint stalls, half an interval lost, restarts."""
    tau, m = as_float(interval_s), as_float(mtbf)
    return as_float(delta) / tau + tau / (2.0 * m) + as_float(restart_s) / m


def effective_training_time_fraction(interval_s, delta, mtbf, restart_s) -> jax.Array:
    """Useful work over wall time under exponential failures (Daly 2006):
    tau / (M e^{R/M} (e^{(tau + delta)/M} - 1)), failures during checkpoints and restarts included.
    """
    tau, d = as_float(interval_s), as_float(delta)
    m, r = as_float(mtbf), as_float(restart_s)
    return tau / (m * jnp.exp(r / m) * jnp.expm1((tau + d) / m))


def checkpoint_interval_s(delta, mtbf, rel: Reliability) -> jax.Array:
    """rel.checkpoint_interval_s if set (> 0), else Daly's optimum (at least 1 ms)."""
    optimal = jnp.maximum(daly_interval_s(delta, mtbf), 1e-3)
    return where(rel.checkpoint_interval_s > 0, rel.checkpoint_interval_s, optimal)


# ----------------------------------------------------------------------- report


class ReliabilityReport(eqx.Module):
    """The reliability part of an estimate (seconds, probabilities, fractions)."""

    expected_step_time_s: jax.Array  # mean of the synchronous step (stragglers included)
    step_time_p50_s: jax.Array
    step_time_p99_s: jax.Array
    p_step_delayed: jax.Array  # 1 - (1 - q)^p
    mtbf_s: jax.Array  # the job's mean time between failures
    checkpoint_write_s: jax.Array  # delta
    checkpoint_interval_s: jax.Array  # tau, work between checkpoints
    restart_downtime_s: jax.Array  # R, per failure
    effective_training_time_fraction: jax.Array  # useful / wall time (failures, checkpoints)
    goodput: jax.Array  # effective fraction x step_time_s / expected_step_time_s

    def time_to_train_s(self, ideal_time_s) -> jax.Array:
        """Wall time of a run that would take `ideal_time_s` at the straggler-free step time."""
        return as_float(ideal_time_s) / self.goodput


def report(step_time_s, gpus, checkpoint_bytes, rel: Reliability,
           participants=None) -> ReliabilityReport:
    """Stragglers, failures and checkpoints of a job of `gpus` GPUs stepping in `step_time_s`.

    `participants` (default `gpus`) is the number of ranks the step waits for.
    `goodput` is the fraction of the straggler-free throughput delivered over
    wall time: time_to_train_s = tokens / (tokens_per_step / step_time_s) / goodput.
    """
    p = gpus if participants is None else participants
    return _report(as_float(step_time_s), as_float(gpus), as_float(checkpoint_bytes),
                   rel, as_float(p))


def failures(gpus, checkpoint_bytes, rel: Reliability) -> tuple:
    """The failure half of `report`, stragglers aside: (job MTBF M, checkpoint
    write delta, checkpoint interval tau, downtime per failure R, effective
    training time fraction), which no step time enters."""
    mtbf = job_mtbf_s(gpus, rel)
    delta = checkpoint_write_time_s(checkpoint_bytes, rel)
    tau = checkpoint_interval_s(delta, mtbf, rel)
    downtime = restart_downtime_s(rel)
    return mtbf, delta, tau, downtime, effective_training_time_fraction(tau, delta, mtbf,
                                                                        downtime)


@jax.jit
def _report(base, gpus, checkpoint_bytes, rel: Reliability, p) -> ReliabilityReport:
    mean, p50, p99 = step_time_stats(base, p, rel)
    mtbf, delta, tau, downtime, effective = failures(gpus, checkpoint_bytes, rel)
    goodput = effective * base / mean
    return ReliabilityReport(mean, p50, p99, p_step_delayed(rel.straggler_q, p), mtbf, delta,
                             tau, downtime, effective, goodput)


# ------------------------------------------------------------- validity bound
# The failure model's validity bound. Daly's wall time grows as e^{(R + tau + delta)/M}:
# a job whose MTBF M is short against its downtime per failure R (or its checkpoint
# write delta) spends nearly all its wall time restarting and redoing lost work
# (effective fraction ~ e^{-R/M}: 0.1% at M = R/7), and past R/M ~ 700 the wall time
# overflows float64 (time to train inf, goodput 0, NaN gradients). Below
# MIN_EFFECTIVE_FRACTION of its wall time on useful work a job makes no progress:
# valid input without a feasible answer (`NoProgress`; the command exits 3).
MIN_EFFECTIVE_FRACTION = 1e-3
# the inputs the bound follows from, as scenario keys
FAILURE_INPUTS = ("reliability.gpu_mtbf_s", "reliability.restart_s",
                  "reliability.checkpoint_write_s", "system.gpus")


class NoProgress(ValueError):
    """Valid inputs under which the job makes no progress (its effective training
    time below `MIN_EFFECTIVE_FRACTION`): no feasible answer, exit code 3."""


NO_PROGRESS = "the job makes no progress"  # how `NoProgress` and its traced form begin


def _no_progress(effective: str, inputs) -> str:
    """The message of `NoProgress`: `effective` says the fraction ("would be ... , below")."""
    return (f"{NO_PROGRESS}: its effective training time {effective} the "
            f"failure model's floor of {MIN_EFFECTIVE_FRACTION:g}: failures come faster than "
            f"it restarts and checkpoints; check {', '.join(inputs)}")


def check_progress(effective, mtbf_s=None, hint: str = "", inputs=FAILURE_INPUTS, *,
                   downtime_s=None, write_s=None) -> None:
    """Raise `NoProgress` (one line naming the cause, the job's MTBF and, given,
    its downtime per failure and checkpoint write, the `inputs`, then `hint`)
    unless the effective training time fraction `effective` (concrete; traced
    values are skipped) is at least `MIN_EFFECTIVE_FRACTION` everywhere."""
    v = checks.concrete(effective)
    if v is None or bool(np.all(v >= MIN_EFFECTIVE_FRACTION)):
        return
    worst = int(np.argmin(np.where(np.isnan(v), -np.inf, v).ravel()))

    def at(x):
        x = checks.concrete(x)
        return None if x is None else float(np.broadcast_to(x, v.shape).ravel()[worst])

    terms = [f"{name} {at(x):.3g} s" for name, x in (
        ("a job MTBF of", mtbf_s), ("against a downtime per failure of", downtime_s),
        ("and checkpoint writes of", write_s)) if x is not None]
    where = f" ({' '.join(terms)})" if terms else ""
    share = f"{at(v):.3g} of the wall time" if math.isfinite(at(v)) else "undefined (NaN)"
    raise NoProgress(_no_progress(f"would be {share}{where}, below", inputs) + hint)


def check_job(gpus, checkpoint_bytes, rel: Reliability, hint: str = "",
              inputs=FAILURE_INPUTS) -> None:
    """`check_progress` of the failure model of a job (`failures`), before any
    step is computed: a `NoProgress` when it makes no progress."""
    mtbf, delta, _, downtime, effective = failures(as_float(gpus), as_float(checkpoint_bytes),
                                                   rel)
    check_progress(effective, mtbf, hint, inputs, downtime_s=downtime, write_s=delta)


_TRACED_NO_PROGRESS = _no_progress("(a traced value) is below", FAILURE_INPUTS)


def checked(rep: ReliabilityReport) -> ReliabilityReport:
    """`rep` guarded by `equinox.error_if`: under jit/vmap/grad an effective
    training time below `MIN_EFFECTIVE_FRACTION` (or NaN) raises naming the
    cause instead of flowing on as an infinite time to train, a zero goodput
    or a NaN gradient (`step.estimate` calls it unless `check=False`)."""
    bad = ~(rep.effective_training_time_fraction >= MIN_EFFECTIVE_FRACTION)
    return checks.error_if(rep, jnp.any(bad), _TRACED_NO_PROGRESS)
