"""Where every collective is costed: alpha-beta-gamma forms, `auto`, busbw.

A collective over p ranks on n bytes on one `Tier` costs

    time = L(p) alpha + W(p) n beta + C(p) n gamma

with alpha = tier.latency_s, beta = 1 / tier.effective_Bps, gamma = 1 /
tier.reduction_Bps. `_collective_rows.ROWS` holds (L, W, C) for every (op, algorithm) pair,
so the table below is the whole model:

| op             | algorithm          | L             | W            | C          |
|----------------|--------------------|---------------|--------------|------------|
| all_reduce     | ring               | 2(p-1)        | 2(p-1)/p     | (p-1)/p    |
| all_reduce     | recursive_doubling | log2 p        | log2 p       | log2 p     |
| all_reduce     | halving_doubling   | 2 log2 p      | 2(p-1)/p     | (p-1)/p    |
| all_reduce     | tree (double, pipelined) | 2 log2 p | 2         | 1          |
| all_reduce     | in_network (NVLS/SHARP) | 2        | 1 (in-network bw) | 0     |
| reduce_scatter | ring, direct       | p-1           | (p-1)/p      | (p-1)/p    |
| reduce_scatter | recursive_doubling (halving) | log2 p | (p-1)/p   | (p-1)/p    |
| all_gather     | ring, direct       | p-1           | (p-1)/p      | 0          |
| all_gather     | recursive_doubling | log2 p        | (p-1)/p      | 0          |
| all_to_all     | direct (pairwise)  | p-1           | (p-1)/p      | 0          |
| all_to_all     | recursive_doubling (Bruck) | log2 p | log2(p)/2  | 0          |
| broadcast      | ring (pipelined chain) | p-1       | 1            | 0          |
| broadcast      | tree (pipelined)   | log2 p        | 1            | 0          |
| broadcast      | recursive_doubling (binomial) | log2 p | log2 p  | 0          |
| broadcast      | halving_doubling (scatter+all-gather) | log2 p + p-1 | 2(p-1)/p | 0 |
| broadcast      | in_network (multicast) | 1         | 1 (in-network bw) | 0     |
| reduce         | as broadcast; C = 1 (ring, tree), log2 p (recursive_doubling), |||
|                | (p-1)/p (halving_doubling: reduce-scatter + gather), 0 (in_network) |||
| send_recv      | direct             | 1             | 1            | 0          |

n is the nccl-tests "size": the buffer of all-reduce, broadcast, reduce and
send/recv; the whole output of all-gather; the whole input of reduce-scatter;
the whole send buffer of all-to-all. Constants 1 and 2 become min(log2 p, 1)
and 2 min(log2 p, 1) so that every cost vanishes at p = 1. The log2 p of the
discrete algorithms is ceil(log2 p) in reality; we use log2 p (exact at powers
of two, smooth in between).

With `protocols` (`protocols.Protocols`: NCCL's LL / LL128 / Simple, the
step model's `system.protocols`) every row is costed once per protocol q,

    time = base(family, q) min(log2 p, 1) + r_q (L alpha + L_out alpha_out)
           + (W n beta + W_out n beta_out) / share_q + C n gamma

(alpha then is Simple's per-step latency; `_by_protocol`), and each algorithm
runs in its fastest protocol (the exact minimum, at every temperature: NCCL's
choice is a hard one); `auto` is then over the algorithms. Without, the table
above alone.

`hierarchical` spans two tiers: `local_ranks` = G ranks share the fast tier,
p / G groups are joined by the slow `outer` tier with one rail per GPU, so G
slow-tier collectives run in parallel on n / G bytes each. All-reduce is
reduce-scatter inside, all-reduce of n/G across, all-gather inside;
reduce-scatter and all-gather are the two halves; all-to-all is an exchange
inside followed by one across (each rank forwards n bytes over each); broadcast
and reduce cross once then fan out inside.

When `outer` and `local_ranks` are given, the flat algorithms run over all p
ranks as one ring / tree / exchange. Once p > local_ranks that ring crosses the
slow tier, and every step waits for its slowest link, so a flat algorithm is
costed on `outer` then (on `tier` while p <= local_ranks). This is where a
flat ring over 1024 GPUs loses to `hierarchical` for large messages.

`auto` is a soft minimum over the candidates' times t_i with temperature T,
taken in log space:

    time = exp(-T logsumexp(-log t_i / T)) = (sum_i t_i^(-1/T))^(-T)

It is the exact minimum as T goes to 0 and smooth above it; it never exceeds
min t_i and is at least min t_i x k^(-T) for k candidates (an exact two-way
tie reads 3.4% low at T = 0.05, a runner-up 20% slower moves it 0.1%); and it
increases with every t_i, so more bytes or less bandwidth never make `auto`
faster. (The softmin-weighted average of the times, the obvious alternative,
is not monotone: a slower candidate's weight falls faster than its time rises.)
The weights w_i = softmax(-log t_i / T) name the winner (argmax) and split the
time into latency, bandwidth and reduction terms (weighted, scaled to sum to
the soft minimum). `AUTO_TEMPERATURE` = 0.05: two algorithms whose times
differ by 5% get weights in the ratio of about e : 1. The functions take the
temperature as a `relax.Smoothing` `t`: `AUTO` (`relax.Relaxed(AUTO_TEMPERATURE)`)
by default, `relax.EXACT` for the exact minimum (the step model's), the
model's own `relax.Relaxed` under the optimiser.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from . import _collective_rows as _rows
from .hardware import Tier
from .protocols import Protocols
from .relax import Relaxed, Smoothing, beyond_one, exact_or_relaxed, minimum, pick, smoothing, where

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
       "reduce", "send_recv")
AUTO_TEMPERATURE = 0.05
AUTO = Relaxed(AUTO_TEMPERATURE)  # `auto`'s soft minimum outside the step model
_UNSUPPORTED_S = 1e30  # the time of an in-network algorithm on a tier without it


class Cost(eqx.Module):
    """The three terms of a collective's time, in seconds."""

    latency_s: jax.Array
    bandwidth_s: jax.Array
    reduction_s: jax.Array

    @property
    def time_s(self) -> jax.Array:
        return self.latency_s + self.bandwidth_s + self.reduction_s

    def __add__(self, other: Cost) -> Cost:
        return jax.tree.map(jnp.add, self, other)

    def scale(self, factor) -> Cost:
        return jax.tree.map(lambda x: x * factor, self)

    def __repr__(self) -> str:
        """`Cost(time 1.23 ms = latency 0.01 ms + bandwidth 1.2 ms + reduction 0.02 ms)`
        for concrete scalars; the field-by-field form otherwise (traced, batched)."""
        terms = [checks.concrete(v) for v in (self.latency_s, self.bandwidth_s, self.reduction_s)]
        if any(t is None or t.size != 1 for t in terms):
            return eqx.tree_pformat(self)
        lat, bw, red = (float(t) for t in terms)
        total = lat + bw + red
        scale, unit = next(((f, u) for f, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"))
                            if abs(total) >= f), (1e-9, "ns"))
        return (f"Cost(time {total / scale:.4g} {unit} = latency {lat / scale:.4g} {unit} + "
                f"bandwidth {bw / scale:.4g} {unit} + reduction {red / scale:.4g} {unit})")


def _spill_mixed(cost_at, ranks, local_ranks, t):
    """`cost_at(local_ranks, ramp)` (a pytree of arrays) of a two-tier group,
    relaxed where it spills out of its domain by less than one rank: relaxed,
    the mix (1 - w) cost_at(ranks) + w cost_at(local_ranks), w =
    `beyond_one`(p - g + 1), of the group fitting and spilling (with its
    whole crossings: `_rows.crossings` without the ramp), both costed in one
    `jax.vmap`. Exact at integer ranks; in the exact model, or with no outer tier
    (`local_ranks` None), cost_at(local_ranks, ramp=True). Mixing times, not
    the crossing count: a ring whose NIC carries a fraction of a crossing's
    share beats both the NVLink ring and the ring that crosses twice (the two
    streams run in parallel), so a relaxed count made the step dip between
    tp 8 and 9 on an 8-GPU domain."""
    t = smoothing(t)  # (a bare float is refused even where t is not read)
    if local_ranks is None:
        return cost_at(local_ranks, True)
    return exact_or_relaxed(lambda: cost_at(local_ranks, True),
                            lambda: _spill_mix(cost_at, ranks, local_ranks, t), t)


def _spill_mix(cost_at, ranks, local_ranks, t):
    g = _rows.local(ranks, local_ranks)
    shape = jnp.broadcast_shapes(jnp.shape(ranks), jnp.shape(g))
    both = jax.vmap(lambda x: cost_at(x, False))(jnp.stack([jnp.broadcast_to(ranks, shape),
                                                            jnp.broadcast_to(g, shape)]))
    w = beyond_one(ranks - g + 1.0, t)
    return jax.tree.map(lambda x: (1.0 - w) * x[0] + w * x[1], both)  # exact at w = 0, 1


def _inside(ranks, local_ranks):
    """Whether a flat algorithm over `ranks` stays in the domain (a relative slack
    of 1e-6: a group that fits only misses it by a relaxed clip's rounding, t log 2,
    near t = 0)."""
    return ranks <= local_ranks * (1.0 + 1e-6)


def _flat_tier(tier: Tier, outer: Tier | None, ranks, local_ranks) -> Tier:
    """The tier a flat algorithm over `ranks` runs on: `outer` once it leaves the domain."""
    if outer is None:
        return tier
    inside = _inside(ranks, local_ranks)
    return jax.tree.map(lambda a, b: where(inside, a, b), tier, outer)


def _costs(table: _rows.Table, n_bytes, ranks, tier: Tier, outer: Tier | None, local_ranks,
           ramp=True, protocols: Protocols | None = None) -> Cost:
    """The Costs of the rows of `table`, stacked on a leading axis (one expression
    for all of them; `_rows.ROWS`). Every leaf has the shape (A,) + the common
    shape of n_bytes, ranks, local_ranks and the tiers' leaves (whose leading
    axis is the requests' when there are several). With `protocols`, each row
    in its fastest protocol (`_by_protocol`)."""
    shape = jnp.broadcast_shapes(table.requests,
                                 *(jnp.shape(x) for x in
                                   (n_bytes, ranks, *jax.tree.leaves((local_ranks, tier, outer)))))
    feature = _rows.basis(ranks, local_ranks, ramp)
    extra = (1,) * (len(shape) - len(table.requests))

    def per_row(flags):  # a (A[, R]) constant against (A,) + shape
        return flags.reshape(flags.shape + extra)

    def combine(matrix):  # sum_f matrix[:, f] phi_f over the features it uses
        used = [(f, matrix[:, i]) for i, f in enumerate(table.features) if matrix[:, i].any()]
        return functools.reduce(jnp.add, (per_row(c) * feature(f) for f, c in used))

    # each term's coefficients, over the few features it uses (a sparse sum:
    # XLA fuses it into the formulas below, where a dense contraction would not)
    coef = {t: combine(m) for t, m in table.matrices.items()}
    two_tier = table.two_tier[table.valid]
    # where each row runs on `tier`: a two-tier row always, a flat one while its
    # group stays in the domain (`_flat_tier`); True: every row (no select at all)
    on_tier = True
    inside = functools.cache(lambda: _inside(ranks, local_ranks))  # (computed once)
    if outer is not None and not two_tier.all():
        on_tier = inside()
        if two_tier.any():
            on_tier = per_row(table.two_tier) | on_tier

    @functools.cache
    def tier0(field):  # a field of the tier each row runs on (the first of two)
        if on_tier is True:
            return getattr(tier, field)
        return where(on_tier, getattr(tier, field), getattr(outer, field))

    zero = jnp.zeros(table.valid.shape[:1] + shape)
    latency, latency_out = coef["L"] * tier0("latency_s"), 0.0
    if table.in_network.any():
        in_network = per_row(table.in_network)
        efficiency = tier0("in_network_efficiency")
        ok = efficiency > 0
        bps = where(in_network, tier0("bandwidth_Bps") * where(ok, efficiency, 1.0),
                        tier0("effective_Bps"))
        bandwidth = where(in_network & ~ok, _UNSUPPORTED_S, coef["W"] * n_bytes / bps)
    else:
        bandwidth = coef["W"] * n_bytes / tier0("effective_Bps")
    reduction = coef["C"] * n_bytes / tier0("reduction_Bps") if "C" in coef else zero
    if "L_out" in coef:
        latency_out = coef["L_out"] * outer.latency_s
        n_out = n_bytes
        if table.per_rail.any():
            n_out = where(per_row(table.per_rail), n_bytes / feature("g"), n_bytes)
        out = coef["W_out"] * n_out / outer.effective_Bps
        serial = bandwidth + out
        if table.pipelined.any():  # the reduction (tier 0's) streams with tier 0
            streams = jnp.maximum(bandwidth + reduction, out) - reduction
            serial = where(per_row(table.pipelined), streams, serial)
        bandwidth = serial
        if "C_out" in coef:
            reduction = reduction + coef["C_out"] * n_out / outer.reduction_Bps
    if "L_back" in coef:
        latency = latency + coef["L_back"] * tier0("latency_s")
        bandwidth = bandwidth + coef["W_back"] * n_bytes / tier0("effective_Bps")
    if not table.valid.all():
        bandwidth = where(per_row(table.valid), bandwidth, _UNSUPPORTED_S)
    if protocols is None or _single_protocol(protocols):
        return Cost(*jnp.broadcast_arrays(latency + latency_out, bandwidth, reduction, zero)[:3])
    terms = jnp.broadcast_arrays(latency, latency_out, bandwidth, reduction, zero)[:4]
    # the rows whose first tier is the outer one: the flat rows of a group that leaves
    # its domain (their steps take the network's protocol ratios)
    on_outer = spans = False
    if outer is not None:
        spans = ~inside()  # the group spans domains (nodes)
        if not two_tier.all():
            on_outer = per_row(~table.two_tier) & spans
    return _by_protocol(protocols, table, feature("one(p)"), on_outer, spans, *terms)


def _single_protocol(protocols: Protocols) -> bool:
    """One protocol that adds nothing to alpha and beta (`AlphaBeta`)."""
    return (len(protocols.protocol_names) == 1 and protocols.scale_up_step == (1.0,)
            and protocols.scale_up_step_across == (1.0,)
            and all(o == (1.0,) for o in protocols.scale_out_step.values())
            and protocols.bandwidth_share == (1.0,)
            and all(b == (0.0,) for b in protocols.base_s.values()))


def _by_protocol(protocols: Protocols, table: _rows.Table, one, on_outer, spans, latency,
                 latency_out, bandwidth, reduction) -> Cost:
    """Each row's terms (leading axis A) in its fastest protocol: per protocol,
    its base latency (x min(log2 p, 1), so one rank costs nothing), the steps'
    alphas scaled (`latency` on the first tier, by the scale-up ratios, those
    across domains where the group `spans` them, or, where `on_outer`, the
    row's family's scale-out ones; `latency_out` on the outer) and the
    bandwidth terms at its share (`protocols.Protocols`; a protocol the row's
    family cannot run is skipped). The fastest is chosen elementwise (ties to
    the first; NCCL's choice is a hard one too) and the terms are computed once
    with its constants, so the gradient flows through one set of terms: a
    reduction over a protocol axis of 3A candidates ran 4-8x slower on XLA:CPU,
    and selecting whole Costs doubled the gradient's cost."""
    families = table.family.reshape(-1)
    base = np.array([protocols.base_s[f] for f in families], dtype=object)
    base = base.reshape(table.family.shape + (len(protocols.protocol_names),))
    outs = np.array([protocols.scale_out_step[f] for f in families], dtype=float)
    outs = outs.reshape(table.family.shape + (len(protocols.protocol_names),))
    extra = (1,) * (latency.ndim - table.family.ndim)
    lat, lat_out, bw, red = (jax.lax.stop_gradient(x)
                             for x in (latency, latency_out, bandwidth, reduction))
    chosen = None  # (time, base, step, out, share, ok) of the fastest so far
    every_ok = True  # no row skips a protocol (no mask on the chosen bandwidth)
    for q, (up, across, share) in enumerate(zip(protocols.scale_up_step,
                                                protocols.scale_up_step_across,
                                                protocols.bandwidth_share, strict=True)):
        ok = base[..., q] != None  # noqa: E711 (an object array of floats and None)
        if not ok.any():
            continue
        out = outs[..., q].reshape(outs.shape[:-1] + extra)
        up = up if spans is False or across == up else where(spans, across, up)
        step = up if on_outer is False else where(on_outer, out, up)
        base_s = np.where(ok, base[..., q], 0.0).astype(float).reshape(ok.shape + extra)
        every_ok &= bool(ok.all())
        ok = ok.reshape(ok.shape + extra)
        time_s = where(ok, base_s * one + step * lat + out * lat_out
                       + (bw if share == 1.0 else bw / share) + red,
                       _UNSUPPORTED_S)
        candidate = (time_s, base_s, step, out, 1.0 / share, ok)
        if chosen is None:
            chosen = candidate
            continue
        faster = time_s < chosen[0]
        chosen = tuple(where(faster, new, old) for new, old in zip(candidate, chosen, strict=True))
    _, base_s, step, out, per_share, ok = chosen
    bandwidth = bandwidth * per_share
    if not every_ok:
        bandwidth = where(ok, bandwidth, _UNSUPPORTED_S)
    return Cost(*jnp.broadcast_arrays(base_s * one + step * latency + out * latency_out,
                                      bandwidth, reduction))


def pipelined_algorithms() -> tuple[str, ...]:
    """The two-tier pipelined algorithms of any op (the pipelined rows of `_rows.ROWS`)."""
    return tuple(dict.fromkeys(a for rows in _rows.ROWS.values() for a, r in rows.items()
                               if r.pipelined))


def algorithms(op: str, *, hierarchical: bool = False) -> tuple[str, ...]:
    """The algorithms defined for `op` (plus `hierarchical` and the pipelined
    two-tier algorithms when asked)."""
    op = check_op(op)
    return tuple(a for a, r in _rows.ROWS[op].items() if hierarchical or not r.two_tier)


def candidates(op: str, protocols: Protocols | None, *, hierarchical: bool = False):
    """`auto`'s candidates for `op`: the algorithms `protocols` runs
    (`Protocols.runs`; every algorithm without protocols or where it says None)."""
    names = algorithms(op, hierarchical=hierarchical)
    runs = None if protocols is None else protocols.runs
    return names if runs is None else tuple(a for a in names if a in runs[check_op(op)])


def check_op(op: str) -> str:
    name = str(op).replace("-", "_")
    if name not in OPS:
        raise ValueError(f"op={op!r} is unknown; choose one of {', '.join(OPS)}")
    return name


def _check_algorithm(op: str, algorithm: str) -> None:
    valid = algorithms(op, hierarchical=True) + ("auto",)
    if algorithm not in valid:
        raise ValueError(f"algorithm={algorithm!r} is not defined for op={op!r}; "
                         f"choose one of {', '.join(valid)}")


def _check_tiers(outer, local_ranks):
    if (outer is None) != (local_ranks is None):
        raise ValueError(f"outer and local_ranks go together; got outer="
                         f"{'a Tier' if outer is not None else None}, {local_ranks=}")
    if local_ranks is not None:
        checks.at_least_one("local_ranks", local_ranks)
        local_ranks = checks.as_float(local_ranks)
    return local_ranks


def choose(op: str, n_bytes, ranks, tier: Tier, *, outer: Tier | None = None,
           local_ranks=None, t: Smoothing = AUTO, protocols: Protocols | None = None):
    """`auto`: (soft-minimum Cost, weights over algorithms, algorithm names).

    The winner is `names[argmax(weights)]`; see the module docstring for the
    soft minimum and its bounds. With `protocols` each algorithm is a candidate
    in its fastest protocol (`_by_protocol`).
    """
    op = check_op(op)
    local_ranks = _check_tiers(outer, local_ranks)
    names = candidates(op, protocols, hierarchical=outer is not None)
    table = _rows.table(((op, names),))
    return _spill_mixed(lambda g, ramp: _soft_min_cost(
        _costs(table, n_bytes, ranks, tier, outer, g, ramp, protocols), t),
                        ranks, local_ranks, t) + (names,)


def choose_many(ops: tuple[str, ...], n_bytes, ranks, tier: Tier, outer: Tier, local_ranks,
                t: Smoothing = AUTO, protocols: Protocols | None = None,
                algorithms: tuple | None = None) -> jax.Array:
    """The seconds of `auto` for R two-tier collectives at once: `ops[i]` on
    `n_bytes[i]` over `ranks[i]`, `local_ranks[i]` of them on `tier` (leaves (R,)
    or scalars), joined by `outer`. One expression for every candidate of every
    op (each padded to the longest op's candidates); shape (R,). The time of
    `choose`'s Cost, without its split into terms (the minimum itself in the
    exact model, `relax.EXACT`; the soft minimum relaxed).

    `algorithms[i]`: the candidates of request i (a tuple of algorithm names of
    `ops[i]`; one name prices that algorithm, as `cost` does: a flat one over
    `local_ranks[i]` = `ranks[i]` runs on `tier`, over `local_ranks[i]` = 1 on
    `outer`), or None for `auto`'s (`candidates`, two-tier included); all None
    when `algorithms` is None."""
    ops = tuple(check_op(op) for op in ops)
    if algorithms is None:
        algorithms = (None,) * len(ops)
    for op, names in zip(ops, algorithms, strict=True):
        for a in names or ():
            _check_algorithm(op, a)
    checks.non_negative("bytes", n_bytes)
    checks.at_least_one("ranks", ranks)
    local_ranks = _check_tiers(outer, local_ranks)
    table = _rows.table(tuple(
        (op, candidates(op, protocols, hierarchical=True) if names is None else tuple(names))
        for op, names in zip(ops, algorithms, strict=True)))
    n_bytes, ranks = checks.as_float(n_bytes), checks.as_float(ranks)

    def auto_s(g, ramp):
        times = _costs(table, n_bytes, ranks, tier, outer, g, ramp, protocols).time_s
        return minimum(times, t)  # 0 where every candidate is, as `choose`

    return _spill_mixed(auto_s, ranks, local_ranks, t)


def _soft_min_cost(stacked: Cost, t) -> tuple[Cost, jax.Array]:
    """(soft-minimum Cost, weights) over the leading (candidate) axis of `stacked`."""
    return pick(stacked, stacked.time_s, t)


def cost(op: str, algorithm: str, n_bytes, ranks, tier: Tier, *, outer: Tier | None = None,
         local_ranks=None, t: Smoothing = AUTO,
         protocols: Protocols | None = None) -> Cost:
    """The Cost of one collective: `op` by `algorithm` on `n_bytes` over `ranks`,
    in the fastest of `protocols` (`protocols.Protocols`, exactly) or, without,
    on the tiers' alpha and beta alone (`t`, a `relax.Smoothing`: `auto`'s soft minimum and
    the mix of a group spilling out of its domain).

    Jits, vmaps and differentiates in n_bytes, ranks (a float: exact at
    integers) and every leaf of the tiers; finite for p >= 1 and any n >= 0.
    """
    op = check_op(op)
    _check_algorithm(op, algorithm)
    checks.non_negative("bytes", n_bytes)
    checks.at_least_one("ranks", ranks)
    n_bytes, ranks = checks.as_float(n_bytes), checks.as_float(ranks)
    local_ranks = _check_tiers(outer, local_ranks)
    if algorithm == "auto":
        return choose(op, n_bytes, ranks, tier, outer=outer, local_ranks=local_ranks,
                      t=t, protocols=protocols)[0]
    if algorithm in ("in_network", "nvls_tree"):
        checks.check("in_network_efficiency",
                      (tier if algorithm == "nvls_tree"
                       else _flat_tier(tier, outer, ranks, local_ranks)).in_network_efficiency,
                lambda v: v > 0,
                "must be positive: this tier has no in-network reduction (NVLS/SHARP)")
    table = _rows.table(((op, (algorithm,)),))
    if table.two_tier.any() and outer is None:
        raise ValueError(f"algorithm={algorithm!r} needs an outer tier and local_ranks")
    return _spill_mixed(lambda g, ramp: jax.tree.map(lambda x: x[0], _costs(
        table, n_bytes, ranks, tier, outer, g, ramp, protocols)), ranks, local_ranks,
                        t)


# nccl-tests' bus factor of each op, a (p-1)/p + b: (a, b)
_BUS_FACTOR = {"all_reduce": (2.0, 0.0), "all_gather": (1.0, 0.0), "reduce_scatter": (1.0, 0.0),
               "all_to_all": (1.0, 0.0), "broadcast": (0.0, 1.0), "reduce": (0.0, 1.0),
               "send_recv": (0.0, 1.0)}


def bus_factor(op: str, ranks) -> jax.Array:
    """nccl-tests' busbw / algbw: 2(p-1)/p for all-reduce; (p-1)/p for all-gather,
    reduce-scatter and all-to-all; 1 for broadcast, reduce and send/recv.

    nccl-tests applies the same factor whatever the algorithm, so an in-network
    (NVLS) all-reduce reports busbw = 2(p-1)/p x algbw although each GPU's link
    carries only about n in each direction: its busbw may exceed the link.
    """
    a, _ = _BUS_FACTOR[check_op(op)]
    p = checks.as_float(ranks)
    return a * (p - 1) / p if a else jnp.ones_like(p)


def bus_factors(ops: tuple[str, ...], ranks) -> jax.Array:
    """`bus_factor` of R collectives at once: `ops[i]` over `ranks[i]` (shape (R,))."""
    a, b = (np.array([_BUS_FACTOR[check_op(op)][k] for op in ops]) for k in (0, 1))
    p = checks.as_float(ranks)
    return a * (p - 1) / p + b


def algbw_Bps(n_bytes, time_s) -> jax.Array:
    """nccl-tests' algbw = size / time (0 when time is 0)."""
    t, n = checks.as_float(time_s), checks.as_float(n_bytes)  # (a Python int past 2**31)
    return where(t > 0, n / where(t > 0, t, 1.0), 0.0)


def busbw_Bps(op: str, n_bytes, time_s, ranks) -> jax.Array:
    return algbw_Bps(n_bytes, time_s) * bus_factor(op, ranks)
