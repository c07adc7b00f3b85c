"""Fit alpha (latency), beta (1 / bandwidth) and gamma (1 / reduction speed) per
tier to measured collective times.

The model is `collectives.cost` itself on a `Tier(bandwidth, latency,
efficiency=1, reduction)`: the fitted bandwidth is the achieved one, so a
calibrated system sets efficiency to 1. Parameters live in log space and the
loss is the mean squared error of log time (every size weighs the same,
whatever its time), minimised by Adam (optax).

Data: `codesign bench --json` lines (each names its op, algorithm and ranks)
and nccl-tests logs (out-of-place columns; see `nccl_tests.py`). A run belongs
to the tier given by `tier=`, else `scale_up` when it fits in one node
(ranks <= local_ranks, default 8) and `scale_out` otherwise.

Which algorithm is fitted: the one the data names; `lax` (the XLA built-in) is
fitted as a ring (direct for all-to-all and send/recv). nccl-tests logs do
not name theirs: a single-node log is fitted as a ring, a multi-node one as
the algorithm NCCL runs there (`ACROSS_NODES`): the pipelined rail ring
(`rail_ring`: one ring per NIC through NVLink and the NICs at once, local_ranks
GPUs per node) for all-reduce, reduce-scatter and all-gather, the
`hierarchical` exchange for all-to-all. A two-tier run (rail_ring, rail_tree,
hierarchical) involves both tiers: the scale_out tier is solved with the
algorithm's coefficients, and scale_up comes from single-node data in the
same fit, or else from `prior` (a preset System), held fixed.

NVLS (`algorithm="nvls"`, NCCL's NVLink SHARP): `in_network` inside a node
(time = 2 alpha + n / bw: each GPU sends its n bytes into the switch and
receives the n reduced ones once), `nvls_tree` across nodes (NVLS inside,
trees across on each GPU's n / g shard). An in-network run is a fit of its
own, `scale_up_in_network` beside `scale_up` (its bandwidth the switch's, its
latency NVLS's, neither a ring's); nvls_tree reads it (from a single-node NVLS
run in the same fit, or `prior`'s scale_up at its `in_network_efficiency`)
and solves for scale_out. No scenario key carries an in-network fit, so the
TOML states it in a comment and the preset's `in_network_efficiency` stays.

gamma is the GPU's reduction speed, one value shared by both tiers. It is
identifiable only beside a collective that does not reduce (all-gather,
all-to-all, send/recv) on the same tier; otherwise it comes from `prior`,
else it is 0 and the reduction is folded into the fitted bandwidth (the TOML
then sets reduction to 1e30 B/s, i.e. free, so the fit is reproduced).

Checks: every number read from a file lies in its domain (`FIELDS`, from the
`domains` bounds the scenario keys use: sizes up to 2^70 bytes, times finite
and above 0, at least 2 ranks), else a one-line ValueError names the file, the
line, the field and the value. A fit whose latency, bandwidth or fitted
reduction speed lies outside the `Tier` fields' domains (zero excluded) is an
`UnphysicalFit` naming the parameter and why (times that fall as size grows).

Hold-out: in every run, every third size (the 2nd, 5th, 8th, ... smallest) is
left out of the fit; `holdout_error` is the MAXIMUM relative error
|predicted / measured - 1| over a tier's held-out sizes (the median is
reported beside it).

After the fit (`line_rate.check_line_rate`, `check_holdout`; the command line
runs both): a fitted bandwidth above what the machine's links carry is an
`UnphysicalFit` (`line_rate.py` holds those bounds); a held-out error above
`MAX_HOLDOUT_ERROR` is a `PoorFit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from .. import files as files_module
from ..domains import Domain
from ..model import collectives
from ..model.hardware import System, Tier
from ._fit import minimise
from .measurements import (  # noqa: F401
    ACROSS_NODES,
    FIELDS,
    LOCAL_RANKS,
    TIERS,
    Measurement,
    default_tier,
    load,
    model_algorithm,
    preset_for_device,
    two_tier,
)

FIT_STEPS = 1500
FOLDED_REDUCTION_Bps = 1e30  # "free": the fitted bandwidth already includes the reduction
# Assumption (docs/sources.md): a model that misses a size it did not see by more
# than 25% does not describe the machine (the nccl-tests fixtures, each fitted with
# the algorithm it was written with, hold out within 10%; fake CPU devices miss by
# 100% and more)
MAX_HOLDOUT_ERROR = 0.25
_REDUCING = ("all_reduce", "reduce_scatter", "reduce")
# an in-network (NVLS / SHARP) fit is one of its own beside its tier's links: its
# bandwidth is the switch's (`Tier.in_network_efficiency` of the links' rate), and its
# latency NVLS's, not a ring step's; "scale_up_in_network" is what `in_network` runs
# and `nvls_tree` runs inside the node
IN_NETWORK = "_in_network"
FITS = tuple(k for t in TIERS for k in (t, t + IN_NETWORK))


def fit_key(m: Measurement) -> str:
    """The fit a measurement solves for: its tier's links, or its tier's in-network
    reduction (`in_network`; `nvls_tree` within one node, where it is NVLS alone)."""
    if m.algorithm == "in_network" or (m.algorithm == "nvls_tree" and m.tier == "scale_up"):
        return m.tier + IN_NETWORK
    return m.tier


def _needs(m: Measurement) -> set:
    """The fits `m`'s model reads: its own, and both tiers of a two-tier algorithm
    (`nvls_tree`: the in-network scale_up and the scale_out links)."""
    if m.algorithm == "nvls_tree":
        return {"scale_up" + IN_NETWORK, "scale_out"}
    if two_tier(m.op, m.algorithm):
        return {"scale_up", "scale_out"}
    return {fit_key(m)}


def _tier(key: str, bandwidth_Bps, latency_s, reduction_Bps) -> Tier:
    """The `Tier` a fit's parameters make: efficiency 1 (the bandwidth is the achieved
    one); an in-network fit's switch reduces at that bandwidth (efficiency 1 of it)."""
    if key.endswith(IN_NETWORK):
        return Tier(bandwidth_Bps, latency_s, 1.0, reduction_Bps, 1.0)
    return Tier(bandwidth_Bps, latency_s, 1.0, reduction_Bps)
# ------------------------------------------------------------------ the fit
@dataclasses.dataclass(frozen=True)
class TierFit:
    tier: str
    alpha_s: float
    bandwidth_Bps: float
    gamma_s_per_byte: float  # 0 when folded into the bandwidth
    reduction: str  # "fitted", "prior" or "folded"
    holdout_error: float  # max relative error over held-out sizes (one at least)
    holdout_error_median: float
    train_error: float  # max relative error over the fitted sizes
    points: int
    holdout_points: int
    runs: tuple[str, ...]
    # the bound the fit was held to (`fit_within_line_rate`), 0 when free; the fitted
    # bandwidth sits at it where the data leave the link unidentified
    ceiling_Bps: float = 0.0

    def as_json(self) -> dict:
        out = dataclasses.asdict(self)
        if not self.ceiling_Bps:  # free: as before bounded fits existed
            del out["ceiling_Bps"]
        return out

    @property
    def in_network(self) -> bool:
        """An in-network (NVLS / SHARP) fit: its bandwidth is the switch's."""
        return self.tier.endswith(IN_NETWORK)

    @property
    def reduction_Bps(self) -> float:
        return 1.0 / self.gamma_s_per_byte if self.gamma_s_per_byte > 0 else FOLDED_REDUCTION_Bps


@dataclasses.dataclass(frozen=True)
class Prediction:
    measurement: Measurement
    predicted_s: float
    held_out: bool

    @property
    def relative_error(self) -> float:
        return self.predicted_s / self.measurement.time_s - 1.0


@dataclasses.dataclass(frozen=True)
class Calibration:
    tiers: dict  # tier -> TierFit, only tiers with measurements
    predictions: tuple[Prediction, ...]

    def as_json(self) -> dict:
        return {t: f.as_json() for t, f in self.tiers.items()}


def _run_key(m: Measurement):
    return (m.source, m.op, m.algorithm, m.ranks, m.tier)


def holdout_mask(measurements: Sequence[Measurement], every: int = 3) -> np.ndarray:
    """True for every `every`-th size (the 2nd, 5th, ... smallest) of each run."""
    mask = np.zeros(len(measurements), bool)
    runs: dict = {}
    for i, m in enumerate(measurements):
        runs.setdefault(_run_key(m), []).append(i)
    for idx in runs.values():
        ordered = sorted(idx, key=lambda i: measurements[i].size_bytes)
        for j, i in enumerate(ordered):
            mask[i] = every > 0 and j % every == 1
    return mask


def _groups(measurements, mask):
    """(op, algorithm, tier, local_ranks) -> (indices, sizes, ranks) for vectorised costing."""
    groups: dict = {}
    for i, m in enumerate(measurements):
        if mask[i]:
            groups.setdefault((m.op, m.algorithm, m.tier, m.local_ranks), []).append(i)
    return {k: (np.array(v), np.array([measurements[i].size_bytes for i in v]),
                np.array([float(measurements[i].ranks) for i in v])) for k, v in groups.items()}


def _reduction_identified(measurements: Sequence[Measurement]) -> bool:
    ops = {m.op for m in measurements}
    return bool(ops & set(_REDUCING)) and bool(ops - set(_REDUCING))


def _predict(theta: dict, groups: dict, n: int, fixed: dict, log_reduction):
    """Predicted times (n,) for the measurements in `groups` (others 0)."""
    reduction = jnp.exp(log_reduction)
    tiers = {t: _tier(t, jnp.exp(p[1]), jnp.exp(p[0]), reduction) for t, p in theta.items()}
    tiers = {**fixed, **tiers}
    out = jnp.zeros(n)
    for (op, algorithm, tier, local_ranks), (idx, sizes, ranks) in groups.items():
        if algorithm == "nvls_tree":
            c = collectives.cost(op, algorithm, sizes, ranks, tiers["scale_up" + IN_NETWORK],
                                 outer=tiers["scale_out"], local_ranks=float(local_ranks))
        elif algorithm == "in_network":
            c = collectives.cost(op, algorithm, sizes, ranks, tiers[tier + IN_NETWORK])
        elif two_tier(op, algorithm):
            c = collectives.cost(op, algorithm, sizes, ranks, tiers["scale_up"],
                                 outer=tiers["scale_out"], local_ranks=float(local_ranks))
        else:
            c = collectives.cost(op, algorithm, sizes, ranks, tiers[tier])
        out = out.at[idx].set(c.time_s)
    return out


def _initial_theta(measurements, tiers) -> dict:
    """Per tier log [alpha, bandwidth]: alpha from the smallest size; the bandwidth
    the busiest size needs by the fitted algorithm's own coefficients, with every
    other tier free (a rail ring's NIC carries 2(p-1)/p / g of an all-reduce, not
    all of it), so a two-tier fit starts on the data, not orders of magnitude above
    the link it solves for."""
    slow, fast = _FITTED["bandwidth_Bps"].lo, _FITTED["bandwidth_Bps"].hi  # 1 KB/s, 1 PB/s
    groups = _groups(measurements, np.array([fit_key(m) in tiers for m in measurements]))
    theta = {}
    for t in tiers:
        ms = [m for m in measurements if fit_key(m) == t]
        smallest = min(ms, key=lambda m: m.size_bytes)
        alpha = smallest.time_s / (2.0 * max(m.ranks for m in ms))
        unit = {t: jnp.log(jnp.array([1e-30, slow]))}  # no latency, and slow: t dominates
        # seconds on the slow tier x its bandwidth = bytes through the tier's busiest link
        others = {u: _tier(u, fast, 0.0, fast) for u in FITS if u != t}
        link_bytes = slow * np.asarray(jax.jit(lambda th, others=others: _predict(
            th, groups, len(measurements), others, jnp.log(FOLDED_REDUCTION_Bps)))(unit))
        bandwidth = max(b / m.time_s for m, b in zip(measurements, link_bytes, strict=True)
                        if fit_key(m) == t)
        theta[t] = jnp.log(jnp.array([alpha, bandwidth]))
    return theta


def _fixed_tiers(needed: set, fitted: Iterable[str], prior: System | None) -> dict:
    missing = needed - set(fitted)
    if not missing:
        return {}
    if prior is None:
        raise ValueError(f"multi-node runs are fitted with a two-tier algorithm ("
                         f"{', '.join(sorted(set(ACROSS_NODES.values()) | {'nvls_tree'}))}) "
                         f"and need the {', '.join(sorted(missing))} tier too: add a "
                         f"single-node run for it{_NVLS_HINT if _IN_NETWORK_UP in missing else ''}"
                         " or pass `prior` to take it from")
    out = {}
    for key in sorted(missing):
        links = getattr(prior, key.removesuffix(IN_NETWORK))
        if key == key.removesuffix(IN_NETWORK):
            out[key] = Tier(links.effective_Bps, links.latency_s, 1.0, links.reduction_Bps)
            continue
        if not float(links.in_network_efficiency) > 0:
            raise ValueError(f"nvls_tree needs the in-network reduction of the scale_up tier, "
                             f"and the prior's scale_up in_network_efficiency="
                             f"{float(links.in_network_efficiency):g} has none: add a "
                             f"single-node run for it{_NVLS_HINT}, or pass a prior with NVLS")
        out[key] = _tier(key, links.bandwidth_Bps * links.in_network_efficiency,
                         links.latency_s, links.reduction_Bps)
    return out


_IN_NETWORK_UP = "scale_up" + IN_NETWORK
_NVLS_HINT = " (fitted as nvls: in_network inside the node)"


def fit(measurements: Sequence[Measurement], *, prior: System | None = None,
        holdout_every: int = 3, steps: int = FIT_STEPS,
        ceilings: dict | None = None) -> Calibration:
    """Least squares on log time over the non-held-out sizes; see the module doc.
    `ceilings` (fit key -> B/s) bounds those fits' bandwidths from above."""
    ms = list(measurements)
    if not ms:
        raise ValueError("no measurements to calibrate from")
    held = holdout_mask(ms, holdout_every)
    tiers = tuple(t for t in FITS if any(fit_key(m) == t for m in ms))
    for t in tiers:
        _check_enough(t, [(m, h) for m, h in zip(ms, held, strict=True) if fit_key(m) == t])
    needed = set().union(*(_needs(m) for m in ms))
    fixed = _fixed_tiers(needed, tiers, prior)
    identified = _reduction_identified(ms)
    if identified:
        reduction_source = "fitted"
    elif prior is not None:
        reduction_source = "prior"
    else:
        reduction_source = "folded"
    log_r0 = jnp.log(prior.scale_up.reduction_Bps if reduction_source == "prior"
                     else FOLDED_REDUCTION_Bps)
    measured = jnp.log(jnp.array([m.time_s for m in ms]))
    train_groups = _groups(ms, ~held)

    def unpack(flat):
        theta = {t: flat[2 * i: 2 * i + 2] for i, t in enumerate(tiers)}
        return theta, (flat[-1] if identified else log_r0)

    def loss(flat):
        theta, log_r = unpack(flat)
        pred = _predict(theta, train_groups, len(ms), fixed, log_r)
        safe = jnp.where(~held, pred, 1.0)
        return jnp.sum(jnp.where(~held, (jnp.log(safe) - measured) ** 2, 0.0)) / np.sum(~held)

    init = _initial_theta(ms, tiers)
    start = jnp.concatenate([init[t] for t in tiers]
                            + [jnp.log(jnp.array([10.0 * jnp.exp(init[tiers[0]][1])]))])
    upper = None
    if ceilings:
        upper = jnp.concatenate([jnp.array([jnp.inf, jnp.log(ceilings.get(t, jnp.inf))])
                                 for t in tiers] + [jnp.array([jnp.inf])])
    flat = minimise(loss, start, steps, upper)
    theta, log_r = unpack(flat)
    all_groups = _groups(ms, np.ones(len(ms), bool))
    pred = np.asarray(jax.jit(lambda th, lr: _predict(th, all_groups, len(ms), fixed, lr))(
        theta, log_r))
    gamma = 0.0 if reduction_source == "folded" else float(jnp.exp(-log_r))
    predictions = tuple(Prediction(m, float(p), bool(h)) for m, p, h in zip(ms, pred, held,
                                                                          strict=True))
    fits = {t: _tier_fit(t, theta[t], gamma, reduction_source, predictions,
                         (ceilings or {}).get(t, 0.0)) for t in tiers}
    for f in fits.values():
        _check_physical(f, [m for m in ms if fit_key(m) == f.tier])
    return Calibration(fits, predictions)


def _check_enough(tier: str, points: list[tuple[Measurement, bool]]) -> None:
    """A tier's (measurement, held out) pairs tell latency from bandwidth and test
    the fit: 3 sizes to fit, 2 of them distinct and above 0 bytes, 1 held out."""
    train = [m for m, h in points if not h]
    if len(train) < 3:
        raise ValueError(f"tier {tier} has {len(train)} sizes to fit; calibration needs at "
                         "least 3 (plus held-out ones): measure more sizes")
    if len({m.size_bytes for m in train if m.size_bytes > 0}) < 2:
        raise ValueError(f"tier {tier}: the sizes to fit take fewer than 2 distinct values "
                         "above 0 bytes, which cannot tell latency from bandwidth: measure a "
                         "range of sizes")
    if all(not h for _, h in points):
        raise ValueError(f"tier {tier} has no held-out size (each run's 2nd smallest, then "
                         "one in `holdout_every`): measure more sizes per run")


class UnphysicalFit(ArithmeticError):
    """Valid measurements whose fit lies outside a tier's physical domain (a
    bandwidth above 1 PB/s, a latency of more than 1 s): no answer to write (the
    command line exits 3 with this one line)."""


class PoorFit(ArithmeticError):
    """A fit that misses its held-out sizes by more than `MAX_HOLDOUT_ERROR`: the
    measurements do not follow the model (the command line exits 3 with this one
    line, or warns and writes the fit with --accept-poor-fit)."""


def devices_preset(measurements: Sequence[Measurement]) -> str | None:
    """The system preset of the devices the measurements name (nccl-tests '# Rank'
    lines: "NVIDIA H100 80GB HBM3" -> dgx-h100), when they name one and only one."""
    presets = {preset_for_device(d) for m in measurements for d in m.devices}
    return presets.pop() if len(presets) == 1 and None not in presets else None


def check_holdout(calibration: Calibration, max_error: float = MAX_HOLDOUT_ERROR) -> None:
    """A `PoorFit` naming every tier whose held-out error exceeds `max_error`."""
    poor = [(t, f.holdout_error) for t, f in calibration.tiers.items()
            if not f.holdout_error <= max_error]
    if poor:
        errors = ", ".join(f"{t} {e:.0%}" for t, e in poor)
        raise PoorFit(f"held-out max relative error {errors} is above {max_error:.0%}: the "
                      "times do not follow the model (a busy machine? fake CPU devices? "
                      "--points shows every size)")


# the fitted parameters' domains: the Tier fields' (the scenario keys'), zero excluded
_FITTED = {f.name: dataclasses.replace(d, lo_open=d.lo_open or d.lo == 0)
           for f in dataclasses.fields(Tier)
           if f.name in ("bandwidth_Bps", "latency_s", "reduction_Bps")
           for d in [checks.declaration(f).domain]}


def _check_physical(fit: TierFit, measurements: Sequence[Measurement]) -> None:
    """An `UnphysicalFit` naming the parameter, its domain and why, for a fit
    outside `_FITTED`."""
    values = {"latency_s": fit.alpha_s, "bandwidth_Bps": fit.bandwidth_Bps}
    if fit.reduction == "fitted":
        values["reduction_Bps"] = fit.reduction_Bps
    for key, value in values.items():
        domain = _FITTED[key]
        if not domain.ok(value):
            files = ", ".join(sorted({m.source for m in measurements}))
            raise UnphysicalFit(f"the fit of {files} gives {fit.tier}_{key}={value:.3g}, not "
                                f"{domain.describe()}: {_why(key, value, domain, measurements)}"
                                "; check the measurements")


def _why(key: str, value: float, domain: Domain, measurements: Sequence[Measurement]) -> str:
    """What in the measurements puts a fitted parameter outside its domain."""
    if key == "bandwidth_Bps" and not value < domain.hi:
        falling = _falling(measurements)
        if falling:
            first, last = falling
            where = f" of {first.source}" if len({m.source for m in measurements}) > 1 else ""
            return f"times fall as size grows (lines {first.line}-{last.line}{where})"
        return ("times barely grow with size (up to "
                f"{max(m.size_bytes for m in measurements):.3g} bytes)")
    if key == "bandwidth_Bps" or (key == "latency_s" and value > domain.hi):
        return "the times are long for their sizes: are they in seconds?"
    return "the data do not follow latency + size / bandwidth"


def _falling(measurements: Sequence[Measurement]) -> tuple[Measurement, Measurement] | None:
    """The first and last of the longest stretch (3 sizes or more) of one run whose
    times fall as the size grows."""
    runs: dict = {}
    for m in measurements:
        runs.setdefault(_run_key(m), []).append(m)
    best: tuple[int, Measurement, Measurement] | None = None  # (sizes, first, last)
    for run in runs.values():
        ordered = sorted(run, key=lambda m: m.size_bytes)
        start = 0
        for i in range(1, len(ordered)):
            if ordered[i].time_s >= ordered[i - 1].time_s:
                start = i
            elif i - start + 1 >= 3 and (best is None or i - start + 1 > best[0]):
                best = (i - start + 1, ordered[start], ordered[i])
    return None if best is None else best[1:]


def _tier_fit(tier, params, gamma, reduction_source, predictions, ceiling_Bps) -> TierFit:
    mine = [p for p in predictions if fit_key(p.measurement) == tier]
    if tier.endswith(IN_NETWORK):  # the switch reduces: no GPU reduction in its time
        gamma, reduction_source = 0.0, "in-switch"
    held = np.abs([p.relative_error for p in mine if p.held_out])
    train = np.abs([p.relative_error for p in mine if not p.held_out])
    runs = sorted({f"{p.measurement.op} {p.measurement.algorithm} on {p.measurement.ranks} ranks "
                   f"({p.measurement.source})" for p in mine})
    return TierFit(tier, float(jnp.exp(params[0])), float(jnp.exp(params[1])), gamma,
                   reduction_source,
                   float(held.max()), float(np.median(held)),
                   float(train.max()), len(mine), int(held.size), tuple(runs),
                   float(ceiling_Bps))


# ------------------------------------------------------------------ outputs
def devices_kind(measurements: Sequence[Measurement]) -> str | None:
    """The one device kind the measurements name ("cpu", "NVIDIA H100 80GB HBM3"),
    None when they name none or several."""
    kinds = {d for m in measurements for d in m.devices}
    return kinds.pop() if len(kinds) == 1 else None


def system_toml(calibration: Calibration, preset: str | None = None,
                measured_on: str | None = None) -> str:
    """A `[system]` override with the fitted tiers (keys `scale_up_*` / `scale_out_*`),
    which scenario files and `codesign estimate --system FILE.toml` accept; with
    `preset` (the --system the fit took its prior from) it names that preset, so
    the file carries the chip and topology its tiers belong to; with `measured_on`
    (the devices' kind) it says what was measured (`system.measured_on`: an
    estimate on a preset whose chips were not those gives no validate interval)."""
    comments = ["codesign calibrate: alpha-beta-gamma fitted per tier (see codesign/execute/"
                "calibrate.py); each tier's efficiency is 1: the fitted bandwidth is the "
                "achieved one"]
    for t, f in calibration.tiers.items():
        comments.append(f"{t}: {f.points} sizes from {'; '.join(f.runs)}; held-out max "
                        f"relative error {f.holdout_error:.1%}, reduction {f.reduction}"
                        + (" (folded into the bandwidth)" if f.reduction == "folded" else ""))
        if f.ceiling_Bps:
            comments.append(f"{t}: bandwidth held to at most the {f.ceiling_Bps / 1e9:.2f} GB/s "
                            "line rate (the data bound it from below only)")
        if f.in_network:  # no scenario key: a comment, not a key
            comments.append(f"{t}: {f.bandwidth_Bps / 1e9:.2f} GB/s per GPU through the "
                            f"switch, alpha {f.alpha_s * 1e6:.3g} us; no scenario key carries "
                            "an in-network fit: the preset's in_network_efficiency stays")
    system = {"preset": preset, "measured_on": measured_on}
    for t, f in calibration.tiers.items():
        if f.in_network:
            continue
        system |= {f"{t}_bandwidth_Bps": _digits(f.bandwidth_Bps), f"{t}_latency_s":
                   _digits(f.alpha_s), f"{t}_efficiency": 1.0}
        if f.reduction != "prior":
            system[f"{t}_reduction_Bps"] = _digits(f.reduction_Bps)
    return files_module.toml_text({"system": {k: v for k, v in system.items() if v is not None}},
                            comments)


def _digits(x: float) -> float:
    """`x` to the 7 significant digits a fitted constant is written with."""
    return float(f"{x:.6e}")


def summary_table(calibration: Calibration) -> str:
    w = max(10, *(len(t) for t in calibration.tiers))  # scale_up_in_network: 19
    head = (f"{'tier':<{w}} {'points':>6} {'alpha(us)':>10} {'bw(GB/s)':>9} {'gamma(ps/B)':>11} "
            f"{'reduction':>9} {'holdout max':>11} {'median':>7}")
    rows = [head]
    for t, f in calibration.tiers.items():
        rows.append(f"{t:<{w}} {f.points:6d} {f.alpha_s * 1e6:10.3f} {f.bandwidth_Bps / 1e9:9.2f} "
                    f"{f.gamma_s_per_byte * 1e12:11.4f} {f.reduction:>9} "
                    f"{f.holdout_error:11.1%} {f.holdout_error_median:7.1%}")
    return "\n".join(rows)


def predictions_table(calibration: Calibration) -> str:
    rows = [f"{'tier':<10} {'op':<15} {'algorithm':<13} {'ranks':>5} {'size(B)':>12} "
            f"{'measured(us)':>12} {'model(us)':>10} {'error':>7}  held-out"]
    for p in calibration.predictions:
        m = p.measurement
        rows.append(f"{m.tier:<10} {m.op:<15} {m.algorithm:<13} {m.ranks:5d} "
                    f"{int(m.size_bytes):12d} {m.time_s * 1e6:12.2f} {p.predicted_s * 1e6:10.2f} "
                    f"{p.relative_error:7.1%}  {'*' if p.held_out else ''}")
    return "\n".join(rows)
