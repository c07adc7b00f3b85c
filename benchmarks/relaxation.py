"""Relaxation audit: does the relaxed model the gradient method descends point
the way the exact model moves? Prints one JSON object.

    python benchmarks/relaxation.py [--quick] [--scenarios default,deepseek-v3]
                                    [--anchors 7] [--fine 5]

For every knob `optimize` can vary on a scenario (`optimize.SENSITIVITY_KNOBS`
there: every hardware, plan and reliability knob; the workload and the token
count are what is trained, not how) on every built-in scenario, the knob is
moved alone (the others held; dp follows system.gpus, and parallel.dp moves
system.gpus with tp, pp and cp held, as `scenario.set_knobs` does) across its
range: `optimize.default_bounds` (a knob at 0 in the scenario: its domain's
lower bound to 8 for a count, to 1 otherwise; a knob whose 0 means a value
the model derives, `optimize.DERIVED_AT_ZERO`, around that value, as
`optimize` ranges it), its admissible values (`optimize.problem`) for a
count, with 0 added where the domain admits it and it is a branch `optimize`
may cross (unlimited node routing), log-spaced points for a continuous knob.
The audited output is the step time, and the time to train for the
reliability knobs (scenarios with training tokens).

Around each anchor a the step spans the knob's discrete spacing: a +- 1 for a
count ((f(a+1) - f(a-1)) / 2; one-sided at a bound), the neighbouring anchors
for a continuous knob. On every segment between a and a neighbour, `--fine`
points (ends included) carry the relaxed value and its derivative (a
forward-mode `jax.jvp` along the knob, float64) at each temperature of
`TEMPERATURES`, and the exact model's value (t = 0). A sample is the relaxed
elasticity d log f_t / d log x (d log f_t / dx at x = 0) at a point, set
against the exact model's difference over its step: for a count, at an
anchor the central difference over a - 1 and a + 1 and at an interior point
its unit segment's difference (between integers the exact formula is itself a
surrogate of the count, so only the integers are the exact model); for a
continuous knob, at every point the central difference over the neighbouring
points. It is *moving* where the exact model changes by more than `MOVES`
(1%) relative over its step and the point is not a discrete extremum (f(x)
above or below both ends: either sign is right there), and then

- flat where the elasticity's size is under `FLAT` (1e-6);
- agreeing where it is not flat and has the sign of the exact change;
- a segment is non-monotone where the exact model changes by more than
  `MOVES` from end to end, monotonically on its points (a count: its ends),
  and the relaxed values on its fine points reverse (by more than `REVERSAL`
  relative) against that direction.

Per scenario and knob, per temperature: the counts, the sign-agreement ratio
(agreeing / moving), the disagreements, the flat intervals (touching steps
merged) and the non-monotone segments, and `max_value_gap`, the largest
|f_t - f_0| / f_0 on the points (a count: at the integers); then totals, the
knobs skipped (no range: ep on a dense model) and wall time. A point where
either model is not finite is counted under `nonfinite` and left out. One
program per scenario and model (relaxed jvp, exact value), computing only the
outputs audited, vmapped over padded chunks of `CHUNK` points and compiled
with the CPU's fast-compile options (`compiling.compiled`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

# `python benchmarks/relaxation.py` puts benchmarks/ first on the import path, where a
# sibling script named codesign.py would shadow the package: keep that directory off it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)  # as the codesign command computes
from codesign import optimize  # noqa: E402
from codesign import scenario as sc  # noqa: E402
from codesign.compiling import compiled  # noqa: E402
from codesign.model import relax, step  # noqa: E402

TEMPERATURES = (0.01, 0.1)
MOVES = 0.01  # the exact model moves: relative change over the step above 1%
FLAT = 1e-6  # a relaxed elasticity under this is flat
REVERSAL = 1e-6  # relative reversal of the relaxed values that breaks monotonicity
CHUNK = 512  # points per vmapped call (padded)
ANCHORS, FINE = 7, 5  # anchors per knob (a count's admissible values thinned), points per segment
QUICK = {"scenarios": ("deepseek-v3",), "anchors": 3, "fine": 3,
         "knobs": ("parallel.pp", "system.scale_up_domain", "parallel.moe_node_limit",
                   "system.scale_out_bandwidth_Bps")}
OUTPUTS = ("step_time_s", "time_to_train_s")


# ------------------------------------------------------------------ sampling
class Knob(NamedTuple):
    name: str
    output: str  # OUTPUTS entry audited
    integer: bool
    anchors: np.ndarray  # (A,) sorted
    segments: np.ndarray  # (S, 2) [lo, hi] of every segment
    anchor_segments: np.ndarray  # (A, 2) index of the segment left and right of each anchor (-1)


def audited_knobs(scn) -> tuple[str, ...]:
    """The knobs of `scn` the audit moves (module docstring)."""
    tokens = float(scn.tokens) > 0
    return tuple(k for k in sc.knobs(scn) if k in optimize.SENSITIVITY_KNOBS
                 and (tokens or not k.startswith("reliability.")))


def knob_range(scn, name: str) -> tuple[float, float]:
    """`optimize.default_bounds` (a knob whose 0 means a derived value: around
    that value), or for another knob at 0 its domain's lower bound to 8 (a
    count) or 1."""
    if float(sc.get_knob(scn, name)) > 0 or name in optimize.DERIVED_AT_ZERO:
        return optimize.default_bounds(scn, name)
    d = sc.DOMAINS[name]
    return d.clip(d.lo, 8.0 if d.integer else 1.0)


def _thin(values: np.ndarray, keep: float, count: int) -> np.ndarray:
    """At most `count` of sorted `values`, spread in log (or linear) position,
    always keeping `keep` (the scenario's own value) when it is among them."""
    if len(values) <= count:
        return values
    pos = np.log(np.maximum(values, 1e-300)) if values[0] > 0 else values
    targets = np.linspace(pos[0], pos[-1], count)
    idx = set(np.abs(pos[:, None] - targets[None]).argmin(axis=0))
    idx |= set(np.flatnonzero(values == keep))
    return values[sorted(idx)]


def anchors(scn, name: str, count: int) -> np.ndarray:
    lo, hi = knob_range(scn, name)
    if not hi > lo:
        raise ValueError(f"{name} has no range ({lo:g}:{hi:g})")
    here = float(sc.get_knob(scn, name))
    d = sc.DOMAINS[name]
    if d.integer:
        adm = optimize.problem(scn, [name], {name: (lo, hi)}).admissible[0]
        branch = d.lo == 0 and name not in optimize.DERIVED_AT_ZERO
        adm = np.union1d(adm, [0.0]) if branch else adm
        return _thin(adm, here, count)
    pts = (np.geomspace(lo, hi, count) if lo > 0 else np.linspace(lo, hi, count))
    near = np.any(np.isclose(pts, here, rtol=1e-6))
    return pts if near or not lo <= here <= hi else np.union1d(pts, [here])


def sample(scn, name: str, count: int) -> Knob:
    """The anchors of knob `name` and the segments around each (module docstring)."""
    a = anchors(scn, name, count)
    d = sc.DOMAINS[name]
    if d.integer:
        left = np.maximum(a - 1.0, d.lo)
        right = np.minimum(a + 1.0, d.hi)
    else:
        left, right = np.r_[a[0], a[:-1]], np.r_[a[1:], a[-1]]
    pairs, where = {}, np.full((len(a), 2), -1)
    for i, (lo, x, hi) in enumerate(zip(left, a, right, strict=True)):
        for side, seg in enumerate(((lo, x), (x, hi))):
            if seg[1] > seg[0]:
                where[i, side] = pairs.setdefault(seg, len(pairs))
    output = "time_to_train_s" if name.startswith("reliability.") else "step_time_s"
    segments = np.asarray(list(pairs), dtype=float).reshape(-1, 2)
    return Knob(name, output, d.integer, a, segments, where)


# ------------------------------------------------------------------ models
def _vector(scn) -> tuple[tuple[str, ...], np.ndarray]:
    """The knobs set together (every knob of `scn` but parallel.dp, which follows)."""
    names = tuple(k for k in sc.knobs(scn) if k != "parallel.dp")
    return names, np.asarray([float(sc.get_knob(scn, k)) for k in names])


def _outputs(scn, names, x, t, outputs):
    s = sc.set_knobs(scn, dict(zip(names, x, strict=True)))
    if outputs == ("step_time_s",):  # the step alone: no reliability or fabric to compile
        return jnp.stack([step.step(s.model, s.plan, s.system, t).step_time_s])
    est = step.estimate(s, t, check=False)
    return jnp.stack([{"step_time_s": est.step.step_time_s,
                       "time_to_train_s": est.time_to_train_s}[o] for o in outputs])


def _programs(names, outputs):
    def relaxed(scn, x, v, t):  # (values, derivatives along v) at temperature t
        smooth = relax.Relaxed(t)
        return jax.vmap(lambda xi, vi: jax.jvp(lambda y: _outputs(scn, names, y, smooth, outputs),
                                               (xi,), (vi,)))(x, v)

    def exact(scn, x):
        return jax.vmap(lambda xi: _outputs(scn, names, xi, relax.EXACT, outputs))(x)

    return jax.jit(relaxed), jax.jit(exact)


def _chunks(program, scn, arrays, *extra):
    """program(scn, *rows of arrays, *extra) over the rows in padded chunks of at
    most CHUNK (compiled once for that size), as numpy."""
    n = len(arrays[0])
    size = min(CHUNK, n)
    run = None
    outs = []
    for i in range(0, n, size):
        block = [a[i:i + size] for a in arrays]
        pad = [jnp.asarray(np.concatenate([b, np.repeat(b[-1:], size - len(b), 0)]))
               for b in block]
        if run is None:
            run = compiled(program, scn, *pad, *extra)[0]
        out = run(scn, *pad, *extra)
        outs.append(jax.tree.map(lambda o, m=len(block[0]): np.asarray(o)[:m], out))
    return jax.tree.map(lambda *o: np.concatenate(o), *outs)


class Evaluated(NamedTuple):
    exact: np.ndarray  # (S, F) exact output on each segment's fine points
    relaxed: dict  # t -> (S, F) relaxed output on each segment's fine points
    slope: dict  # t -> (S, F) d f_t / dx there
    fine: np.ndarray  # (S, F) the fine points


def evaluate(scn, knobs: list[Knob], fine: int, temperatures=TEMPERATURES) -> dict:
    """{knob name: Evaluated} for every knob, in one relaxed and one exact
    program per scenario (`_programs`)."""
    names, base = _vector(scn)
    outputs = tuple(o for o in OUTPUTS if any(k.output == o for k in knobs))
    relaxed, exact = _programs(names, outputs)
    scale = float(scn.plan.tp * scn.plan.pp * scn.plan.cp)
    rows, tangents, owners = [], [], []
    for k in knobs:
        col, mult = ((names.index("system.gpus"), scale) if k.name == "parallel.dp"
                     else (names.index(k.name), 1.0))
        frac = np.linspace(0.0, 1.0, fine)
        pts = k.segments[:, :1] + (k.segments[:, 1:] - k.segments[:, :1]) * frac[None]
        x = np.repeat(base[None], pts.size, 0)
        x[:, col] = pts.ravel() * mult
        v = np.zeros_like(x)
        v[:, col] = mult
        rows.append(x)
        tangents.append(v)
        owners.append((k, pts, col))
    x, v = np.concatenate(rows), np.concatenate(tangents)
    f0 = _chunks(exact, scn, (x,))
    by_t = {t: _chunks(relaxed, scn, (x, v), jnp.asarray(t)) for t in temperatures}
    out, start = {}, 0
    for k, pts, _ in owners:
        n, j = pts.size, outputs.index(k.output)
        sl = slice(start, start + n)
        e = f0[sl, j].reshape(pts.shape)
        out[k.name] = Evaluated(e, {t: by_t[t][0][sl, j].reshape(pts.shape) for t in by_t},
                                {t: by_t[t][1][sl, j].reshape(pts.shape) for t in by_t}, pts)
        start += n
    return out


# ------------------------------------------------------------------ classifying
class Samples(NamedTuple):
    """Gradient samples: where, the exact change over the step around each, and
    the relaxed elasticity there."""

    x: np.ndarray  # (n,) knob value
    lo: np.ndarray  # (n,) the step's ends
    hi: np.ndarray
    change: np.ndarray  # (n,) (f(hi) - f(lo)) / f(x) of the exact model
    elasticity: np.ndarray  # (n,) d log f_t / d log x (d log f_t / dx at x = 0)
    extremum: np.ndarray  # (n,) bool: f(x) is above or below both f(lo) and f(hi)


def classify(s: Samples, moves: float = MOVES, flat: float = FLAT) -> dict:
    """Counts, sign agreement, disagreements and flat samples of `s`."""
    ok = np.isfinite(s.change) & np.isfinite(s.elasticity)
    moving = ok & (np.abs(s.change) > moves) & ~s.extremum
    is_flat = moving & (np.abs(s.elasticity) < flat)
    agree = moving & ~is_flat & (np.sign(s.elasticity) == np.sign(s.change))
    bad = np.flatnonzero(moving & ~agree)
    return {"samples": int(ok.sum()), "nonfinite": int((~ok).sum()),
            "extrema": int((ok & s.extremum).sum()), "moving": int(moving.sum()),
            "agree": int(agree.sum()),
            "sign_agreement": float(agree.sum() / moving.sum()) if moving.any() else None,
            "disagreements": [{"x": _r(s.x[i]), "step": [_r(s.lo[i]), _r(s.hi[i])],
                               "exact_change": _r(s.change[i]),
                               "relaxed_elasticity": _r(s.elasticity[i])} for i in bad],
            "flat": merge([(s.lo[i], s.hi[i]) for i in np.flatnonzero(is_flat)])}


def non_monotone(segments: np.ndarray, exact: np.ndarray, relaxed: np.ndarray,
                 moves: float = MOVES, reversal: float = REVERSAL) -> list:
    """Segments (S, 2) where the exact model moves by more than `moves` from
    end to end, monotonically on its F points (S, F; a count's exact values
    are its ends alone: pass (S, 2)), and the relaxed values on the fine
    points (S, F') reverse against that direction by more than `reversal`
    relative: [lo, hi, largest reversal]."""
    out = []
    for (lo, hi), e, r in zip(segments, exact, relaxed, strict=True):
        if not (np.all(np.isfinite(e)) and np.all(np.isfinite(r))):
            continue
        direction = np.sign(e[-1] - e[0])
        if abs(e[-1] - e[0]) <= moves * abs(e[0]) or np.any(direction * np.diff(e) < 0):
            continue
        back = np.max(-direction * np.diff(r)) / np.max(np.abs(r))
        if back > reversal:
            out.append([_r(lo), _r(hi), _r(back)])
    return out


def merge(intervals) -> list:
    """Overlapping or touching [lo, hi] intervals merged, sorted."""
    out: list = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], _r(hi))
        else:
            out.append([_r(lo), _r(hi)])
    return out


def _r(x) -> float:
    return float(f"{float(x):.6g}")


def samples(k: Knob, ev: Evaluated, t: float) -> Samples:
    """The gradient samples of knob `k` at temperature `t` (module docstring)."""
    if k.integer:
        return _count_samples(k, ev, t)
    x, f, r, d = (np.ravel(a) for a in (ev.fine, ev.exact, ev.relaxed[t], ev.slope[t]))
    x, idx = np.unique(x, return_index=True)
    f, r, d = f[idx], r[idx], d[idx]
    lo, hi = np.r_[0, np.arange(len(x) - 1)], np.r_[np.arange(1, len(x)), len(x) - 1]
    return Samples(x, x[lo], x[hi], (f[hi] - f[lo]) / f, _elasticity(x, r, d),
                   _extremum(f[lo], f, f[hi]))


def _extremum(f_lo, f_x, f_hi):
    """Where f(x) is strictly above or below both neighbours: a discrete extremum,
    at which either sign of a derivative is right."""
    return (f_hi - f_x) * (f_x - f_lo) < 0


def _elasticity(x, value, slope):
    """d log f / d log x (d log f / dx at x = 0)."""
    return slope / value * np.where(x > 0, x, 1.0)


def _count_samples(k: Knob, ev: Evaluated, t: float) -> Samples:
    """A count's anchors (central difference over a - 1, a + 1) and the interior
    fine points of each unit segment (the segment's difference)."""
    r, d = ev.relaxed[t], ev.slope[t]
    ends = ev.exact[:, [0, -1]]
    lo_s, hi_s = k.segments[:, 0], k.segments[:, 1]
    rows = []
    for i, a in enumerate(k.anchors):
        left, right = k.anchor_segments[i]
        seg, pos = (right, 0) if right >= 0 else (left, -1)
        if seg < 0:
            continue
        f_a = ends[seg, 0 if pos == 0 else 1]
        lo, f_lo = (lo_s[left], ends[left, 0]) if left >= 0 else (a, f_a)
        hi, f_hi = (hi_s[right], ends[right, 1]) if right >= 0 else (a, f_a)
        rows.append((a, lo, hi, (f_hi - f_lo) / f_a, r[seg, pos], d[seg, pos],
                     _extremum(f_lo, f_a, f_hi)))
    for s in range(len(k.segments)):
        change = (ends[s, 1] - ends[s, 0]) / (0.5 * (ends[s, 0] + ends[s, 1]))
        rows += [(ev.fine[s, j], lo_s[s], hi_s[s], change, r[s, j], d[s, j], False)
                 for j in range(1, r.shape[1] - 1)]
    x, lo, hi, change, value, slope, extremum = np.asarray(rows, dtype=float).T
    return Samples(x, lo, hi, change, _elasticity(x, value, slope), extremum > 0)


def value_gap(k: Knob, ev: Evaluated, t: float) -> float | None:
    """Largest |f_t - f_0| / f_0 on the fine points (a count: at the integers)."""
    cols = [0, -1] if k.integer else slice(None)
    gap = np.abs(ev.relaxed[t][:, cols] - ev.exact[:, cols]) / np.abs(ev.exact[:, cols])
    gap = gap[np.isfinite(gap)]
    return _r(gap.max()) if gap.size else None


def audit_knob(k: Knob, ev: Evaluated, temperatures=TEMPERATURES) -> dict:
    out = {"output": k.output, "anchors": [_r(a) for a in k.anchors], "by_t": {}}
    for t in temperatures:
        c = classify(samples(k, ev, t))
        exact = ev.exact[:, [0, -1]] if k.integer else ev.exact
        c["non_monotone"] = non_monotone(k.segments, exact, ev.relaxed[t])
        c["max_value_gap"] = value_gap(k, ev, t)
        out["by_t"][str(t)] = c
    return out


def audit(names=sc.BUILTIN, anchors_per_knob=ANCHORS, fine=FINE, only=None,
          temperatures=TEMPERATURES) -> dict:
    """The audit's JSON object (module docstring); `only`: the knobs to move."""
    start = time.perf_counter()
    result = {"temperatures": list(temperatures),
              "thresholds": {"moves": MOVES, "flat": FLAT, "reversal": REVERSAL},
              "scenarios": {}, "skipped": {}}
    for name in names:
        scn = sc.load(name)
        knobs, skipped = [], {}
        for k in audited_knobs(scn):
            if only is None or k in only:
                try:
                    knobs.append(sample(scn, k, anchors_per_knob))
                except ValueError as e:  # no range (ep on a dense model) or no admissible value
                    skipped[k] = str(e)
        ev = evaluate(scn, knobs, fine, temperatures)
        result["scenarios"][name] = {k.name: audit_knob(k, ev[k.name], temperatures)
                                     for k in knobs}
        result["skipped"][name] = skipped
    result["totals"] = totals(result, temperatures)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    return result


def totals(result: dict, temperatures=TEMPERATURES) -> dict:
    out = {}
    for t in temperatures:
        rows = [(s, k, v["by_t"][str(t)]) for s, ks in result["scenarios"].items()
                for k, v in ks.items()]
        moving = sum(r["moving"] for _, _, r in rows)
        agree = sum(r["agree"] for _, _, r in rows)
        out[str(t)] = {
            "knobs": len(rows), "samples": sum(r["samples"] for _, _, r in rows),
            "extrema": sum(r["extrema"] for _, _, r in rows),
            "nonfinite": sum(r["nonfinite"] for _, _, r in rows),
            "moving": moving, "agree": agree,
            "sign_agreement": agree / moving if moving else None,
            "flat_intervals": sum(len(r["flat"]) for _, _, r in rows),
            "non_monotone_intervals": sum(len(r["non_monotone"]) for _, _, r in rows),
            "defective": sorted(f"{s}:{k}" for s, k, r in rows
                                if r["disagreements"] or r["flat"] or r["non_monotone"])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one scenario, four knobs, few points (what the test runs)")
    ap.add_argument("--scenarios", default=",".join(sc.BUILTIN))
    ap.add_argument("--knobs", default=None, help="comma-separated knobs (default: every one)")
    ap.add_argument("--anchors", type=int, default=ANCHORS)
    ap.add_argument("--fine", type=int, default=FINE)
    args = ap.parse_args(argv)
    if args.quick:
        res = audit(QUICK["scenarios"], QUICK["anchors"], QUICK["fine"], QUICK["knobs"])
    else:
        only = tuple(args.knobs.split(",")) if args.knobs else None
        res = audit(tuple(args.scenarios.split(",")), args.anchors, args.fine, only)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
