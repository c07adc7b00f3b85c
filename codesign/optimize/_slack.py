"""How far each collective of the step is from mattering: the bandwidth of its
tier at which a hidden collective would become exposed, or an exposed one
hidden (`slack`).

An elasticity reads 0 for a collective hidden under compute, whatever its
margin: a link at twice the bandwidth it needs and one at 1.01x look alike.
`slack` scans each tier's bandwidth over `FACTORS` (1e-4x to 1e4x of the
scenario's, 40 points per decade, one vmapped program for both tiers) with
every other knob held, and reports for each row of the traffic table where its
exposure changes: the bandwidth to within a factor of 10^(1/80) (3%).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import scenario as sc
from ..compiling import compiled
from ..model import step
from ..scenario import Scenario

TIERS = ("scale_up", "scale_out")
FACTORS = np.geomspace(1e-4, 1e4, 321)  # bandwidth multipliers tried, 40 per decade
HIDDEN = 1e-6  # a row is hidden while its exposed seconds are at most this share of its time


@jax.jit
def _exposure(scn: Scenario, factors: jax.Array):
    """(exposed_s, time_s) of every traffic row with one tier's bandwidth
    multiplied by each factor, the rest held: arrays (tiers, factors, rows)."""
    def at(tier, f):
        key = f"system.{tier}_bandwidth_Bps"
        rows = step.estimate(sc.set_knobs(scn, {key: sc.get_knob(scn, key) * f}),
                             check=False).step.traffic
        return jnp.stack([r.exposed_s for r in rows]), jnp.stack([r.time_s for r in rows])

    per_tier = [jax.vmap(lambda f, tier=tier: at(tier, f))(factors) for tier in TIERS]
    return tuple(jnp.stack(x) for x in zip(*per_tier, strict=True))


@jax.jit
def _traffic(scn: Scenario) -> tuple:
    return step.estimate(scn, check=False).step.traffic


def _crossing(hidden: np.ndarray, now: int) -> int | None:
    """The index nearest `now` beyond which `hidden` (over FACTORS) differs from
    its value at `now`, on the side where it changes: downwards for a hidden
    row, upwards for an exposed one (None: it never changes on that side)."""
    if hidden[now]:
        changed = np.flatnonzero(~hidden[:now])
        return int(changed[-1]) if changed.size else None
    changed = np.flatnonzero(hidden[now + 1:])
    return now + 1 + int(changed[0]) if changed.size else None


def slack(scn: Scenario) -> list[dict]:
    """Per row of the traffic table that moves bytes (time > 0): dimension,
    collective, tier(s), time_s and exposed_s now, `hidden` (exposed at most
    `HIDDEN` of its time), and per tier it runs on `threshold_Bps`: the
    bandwidth at which its exposure changes (a hidden row is exposed below it,
    an exposed row hidden above it; None when that does not happen within
    1e-4x-1e4x) and `factor`, threshold over today's bandwidth."""
    factors = jnp.asarray(FACTORS)
    exe = compiled(_exposure, scn, factors)[0]
    exposed, times = (np.asarray(a) for a in exe(scn, factors))
    now = int(np.argmin(np.abs(np.log(FACTORS))))  # the factor 1
    out = []
    for i, row in enumerate(compiled(_traffic, scn)[0](scn)):
        if float(row.time_s) <= 0:
            continue
        hidden_now = bool(exposed[0, now, i] <= HIDDEN * times[0, now, i])
        tiers = {}
        for j, tier in enumerate(TIERS):
            if tier not in row.tier:
                continue
            bandwidth = float(sc.get_knob(scn, f"system.{tier}_bandwidth_Bps"))
            k = _crossing(exposed[j, :, i] <= HIDDEN * times[j, :, i], now)
            # the geometric middle of the two factors that bracket the change
            factor = None if k is None else float(np.sqrt(FACTORS[k] * FACTORS[
                k + 1 if hidden_now else k - 1]))
            tiers[tier] = {"bandwidth_Bps": bandwidth, "factor": factor,
                           "threshold_Bps": None if factor is None else bandwidth * factor}
        out.append({"dimension": row.dimension, "collective": row.collective,
                    "tier": row.tier, "time_s": float(row.time_s),
                    "exposed_s": float(row.exposed_s), "hidden": hidden_now, "tiers": tiers})
    return out
