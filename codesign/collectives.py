"""Where every collective is costed: alpha-beta-gamma forms, `auto`, busbw.

A collective over p ranks on n bytes on one `Tier` costs

    time = L(p) alpha + W(p) n beta + C(p) n gamma

with alpha = tier.latency_s, beta = 1 / tier.effective_Bps, gamma = 1 /
tier.reduction_Bps. `_TERMS` holds (L, W, C) for every (op, algorithm) pair,
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
differ by 5% get weights in the ratio of about e : 1.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _checks
from .hardware import Tier
from .relax import log2_ranks, safe_div, safe_log, softmin_weights

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
       "reduce", "send_recv")
AUTO_TEMPERATURE = 0.05
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
        terms = [_checks.concrete(v) for v in (self.latency_s, self.bandwidth_s, self.reduction_s)]
        if any(t is None or t.size != 1 for t in terms):
            return eqx.tree_pformat(self)
        lat, bw, red = (float(t) for t in terms)
        total = lat + bw + red
        scale, unit = next(((f, u) for f, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"))
                            if abs(total) >= f), (1e-9, "ns"))
        return (f"Cost(time {total / scale:.4g} {unit} = latency {lat / scale:.4g} {unit} + "
                f"bandwidth {bw / scale:.4g} {unit} + reduction {red / scale:.4g} {unit})")


Terms = Callable[[jax.Array], tuple]  # p -> (L, W, C); W/C multiply n


def _one(p):
    return jnp.minimum(log2_ranks(p), 1.0)


def _f(p):
    return (p - 1.0) / p


_BCAST = {
    "ring": lambda p: (p - 1.0, _one(p), 0.0),
    "tree": lambda p: (log2_ranks(p), _one(p), 0.0),
    "recursive_doubling": lambda p: (log2_ranks(p), log2_ranks(p), 0.0),
    "halving_doubling": lambda p: (log2_ranks(p) + p - 1.0, 2 * _f(p), 0.0),
}


def _with_reduction(terms: Terms, share: Callable) -> Terms:
    return lambda p: terms(p)[:2] + (share(p),)


_TERMS: dict[str, dict[str, Terms]] = {
    "all_reduce": {
        "ring": lambda p: (2 * (p - 1.0), 2 * _f(p), _f(p)),
        "recursive_doubling": lambda p: (log2_ranks(p),) * 3,
        "halving_doubling": lambda p: (2 * log2_ranks(p), 2 * _f(p), _f(p)),
        "tree": lambda p: (2 * log2_ranks(p), 2 * _one(p), _one(p)),
        "in_network": lambda p: (2 * _one(p), _one(p), 0.0),
    },
    "reduce_scatter": {
        "ring": lambda p: (p - 1.0, _f(p), _f(p)),
        "direct": lambda p: (p - 1.0, _f(p), _f(p)),
        "recursive_doubling": lambda p: (log2_ranks(p), _f(p), _f(p)),
    },
    "all_gather": {
        "ring": lambda p: (p - 1.0, _f(p), 0.0),
        "direct": lambda p: (p - 1.0, _f(p), 0.0),
        "recursive_doubling": lambda p: (log2_ranks(p), _f(p), 0.0),
    },
    "all_to_all": {
        "direct": lambda p: (p - 1.0, _f(p), 0.0),
        "recursive_doubling": lambda p: (log2_ranks(p), log2_ranks(p) / 2, 0.0),
    },
    "broadcast": {**_BCAST, "in_network": lambda p: (_one(p), _one(p), 0.0)},
    "reduce": {
        "ring": _with_reduction(_BCAST["ring"], _one),
        "tree": _with_reduction(_BCAST["tree"], _one),
        "recursive_doubling": _with_reduction(_BCAST["recursive_doubling"], log2_ranks),
        "halving_doubling": _with_reduction(_BCAST["halving_doubling"], _f),
        "in_network": lambda p: (_one(p), _one(p), 0.0),
    },
    "send_recv": {"direct": lambda p: (_one(p), _one(p), 0.0)},
}
_HIERARCHICAL_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                     "broadcast", "reduce")


def _crossings(nodes):
    """Node boundaries one ring over `nodes` domains crosses: N, and 0 for N = 1."""
    return nodes * _one(nodes)


def _rail_ring(passes: float):
    """NCCL's rail-parallel ring: g channels, each a ring over all p ranks that
    enters and leaves every domain through a different GPU's NIC, `passes`
    times around (2 for an all-reduce: reduce-scatter then all-gather). Of the
    p hops of a ring, N cross domains; each GPU sends `passes` x (p-1)/p x n in
    all, N/p of it through its own NIC and the rest over the scale-up tier."""
    def terms(p, g):
        nodes = p / g
        cross = _crossings(nodes) / p
        hops, share = passes * (p - 1.0), passes * _f(p)
        return (hops * (1.0 - cross), hops * cross, share * (1.0 - cross), share * cross)
    return terms


# Pipelined two-tier algorithms: p ranks, g per scale-up domain, N = p / g
# domains, one NIC (rail) per GPU. Both tiers stream at once, so the time is
#   L_up alpha_up + L_out alpha_out + max(W_up n beta_up + C n gamma, W_out n beta_out)
# (NCCL's chunks flow through NVLink and the NICs together). Terms: (p, g) ->
# (L_up, L_out, W_up, W_out); C is the reduction share of the op's ring.
#
# | op             | algorithm | L_up           | L_out          | W_up            | W_out        |
# |----------------|-----------|----------------|----------------|-----------------|--------------|
# | all_reduce     | rail_ring | 2(p-1)(1-N/p)  | 2(p-1) N/p     | 2(p-1)/p (1-N/p)| 2(p-1)/p / g |
# | all_reduce     | rail_tree | 2(g-1)         | 2 log2 N       | 2(g-1)/g        | 2 / g        |
# | all_reduce     | nvls_tree | 2 (NVLS)       | 2 log2 N       | 1 (in-network)  | 2 / g        |
# | reduce_scatter | rail_ring | (p-1)(1-N/p)   | (p-1) N/p      | (p-1)/p (1-N/p) | (p-1)/p / g  |
# | all_gather     | rail_ring | as reduce_scatter, no reduction                                 |
#
# (N/p is 0 when N = 1: one domain never uses the NIC.) rail_ring over N
# domains moves 2(p-1)/p n / g through each NIC, so a large all-reduce's busbw
# approaches g x the NIC's bandwidth: the node's NIC aggregate. rail_tree is a
# chain inside each domain and a double binary tree across (one per rail, n / g
# each: ~2 n / g per NIC); nvls_tree reduces inside the domain in the NVSwitch
# (NVLS) and runs the trees across on each GPU's shard (NCCL's NVLSTree).
_PIPELINED: dict[str, dict[str, Callable]] = {
    "all_reduce": {
        "rail_ring": _rail_ring(2.0),
        "rail_tree": lambda p, g: (2.0 * (g - 1.0), 2.0 * log2_ranks(p / g),
                                   2.0 * _f(g), 2.0 * _one(p / g) / g),
        "nvls_tree": lambda p, g: (2.0 * _one(g), 2.0 * log2_ranks(p / g), _one(g),
                                   2.0 * _one(p / g) / g),
    },
    "reduce_scatter": {"rail_ring": _rail_ring(1.0)},
    "all_gather": {"rail_ring": _rail_ring(1.0)},
}


def pipelined_algorithms() -> tuple[str, ...]:
    """The two-tier pipelined algorithms of any op (`_PIPELINED`)."""
    return tuple(dict.fromkeys(a for table in _PIPELINED.values() for a in table))


def algorithms(op: str, *, hierarchical: bool = False) -> tuple[str, ...]:
    """The algorithms defined for `op` (plus `hierarchical` and the pipelined
    two-tier algorithms of `_PIPELINED` when asked)."""
    op = _check_op(op)
    names = tuple(_TERMS[op])
    if not hierarchical or op not in _HIERARCHICAL_OPS:
        return names
    return names + ("hierarchical",) + tuple(_PIPELINED.get(op, ()))


def _check_op(op: str) -> str:
    name = str(op).replace("-", "_")
    if name not in OPS:
        raise ValueError(f"op={op!r} is unknown; choose one of {', '.join(OPS)}")
    return name


def _check_algorithm(op: str, algorithm: str) -> None:
    valid = algorithms(op, hierarchical=True) + ("auto",)
    if algorithm not in valid:
        raise ValueError(f"algorithm={algorithm!r} is not defined for op={op!r}; "
                         f"choose one of {', '.join(valid)}")


def _flat(op: str, algorithm: str, n_bytes, ranks, tier: Tier) -> Cost:
    L, W, Cr = _TERMS[op][algorithm](ranks)
    if algorithm == "in_network":
        eff = tier.in_network_efficiency
        ok = eff > 0
        bandwidth_s = jnp.where(
            ok, W * n_bytes / (tier.bandwidth_Bps * jnp.where(ok, eff, 1.0)), _UNSUPPORTED_S)
    else:
        bandwidth_s = W * n_bytes / tier.effective_Bps
    # every term gets the common shape of (n, p, tier) so candidates stack in `choose`
    zero = jnp.zeros(jnp.broadcast_shapes(jnp.shape(n_bytes), jnp.shape(ranks)))
    terms = jnp.broadcast_arrays(L * tier.latency_s, bandwidth_s,
                                 Cr * n_bytes / tier.reduction_Bps, zero)
    return Cost(*terms[:3])


def _flat_tier(tier: Tier, outer: Tier | None, ranks, local_ranks) -> Tier:
    """The tier a flat algorithm over `ranks` runs on: `outer` once it leaves the domain."""
    if outer is None:
        return tier
    # (a relative slack of 1e-6: a group that fits only misses it by a relaxed
    # clip's rounding, t log 2, near t = 0)
    inside = ranks <= local_ranks * (1.0 + 1e-6)
    return jax.tree.map(lambda a, b: jnp.where(inside, a, b), tier, outer)


def _hierarchical(op: str, n_bytes, ranks, tier: Tier, outer: Tier, local_ranks) -> Cost:
    g = jnp.clip(local_ranks, 1.0, jnp.maximum(ranks, 1.0))
    across = ranks / g
    inside = lambda o, n: _flat(o, "ring", n, g, tier)  # noqa: E731
    out = lambda o, n: _flat(o, "ring", n, across, outer)  # noqa: E731
    if op == "all_reduce":
        return (inside("reduce_scatter", n_bytes) + out("all_reduce", n_bytes / g)
                + inside("all_gather", n_bytes))
    if op == "reduce_scatter":
        return inside("reduce_scatter", n_bytes) + out("reduce_scatter", n_bytes / g)
    if op == "all_gather":
        return out("all_gather", n_bytes / g) + inside("all_gather", n_bytes)
    if op == "all_to_all":
        return (_flat(op, "direct", n_bytes, g, tier)
                + _flat(op, "direct", n_bytes, across, outer))
    # broadcast / reduce: cross once, fan out inside (pipelined trees)
    return _flat(op, "tree", n_bytes, across, outer) + _flat(op, "tree", n_bytes, g, tier)


def _pipelined(op: str, algorithm: str, n_bytes, ranks, tier: Tier, outer: Tier,
               local_ranks) -> Cost:
    """A `_PIPELINED` algorithm: latencies add, the two tiers' streams overlap.

    The Cost's reduction term is the op's ring reduction; its bandwidth term is
    what the slower stream adds beyond it (the three still sum to the time)."""
    g = jnp.clip(local_ranks, 1.0, jnp.maximum(ranks, 1.0))
    L_up, L_out, W_up, W_out = _PIPELINED[op][algorithm](ranks, g)
    c_share = {"all_reduce": _f, "reduce_scatter": _f}.get(op, lambda p: 0.0 * p)(ranks)
    if algorithm == "nvls_tree":
        eff = tier.in_network_efficiency
        ok = eff > 0
        up_bw = jnp.where(ok, W_up * n_bytes / (tier.bandwidth_Bps * jnp.where(ok, eff, 1.0)),
                          _UNSUPPORTED_S)
        c_share = 0.0 * c_share  # reduced in the switch
    else:
        up_bw = W_up * n_bytes / tier.effective_Bps
    reduction = c_share * n_bytes / tier.reduction_Bps
    out_bw = W_out * n_bytes / outer.effective_Bps
    stream = jnp.maximum(up_bw + reduction, out_bw)
    latency = L_up * tier.latency_s + L_out * outer.latency_s
    zero = jnp.zeros(jnp.broadcast_shapes(jnp.shape(n_bytes), jnp.shape(ranks)))
    terms = jnp.broadcast_arrays(latency, stream - reduction, reduction, zero)
    return Cost(*terms[:3])


def _candidates(op, n_bytes, ranks, tier, outer, local_ranks):
    names = algorithms(op, hierarchical=outer is not None and local_ranks is not None)
    costs = [_one_algorithm(op, a, n_bytes, ranks, tier, outer, local_ranks) for a in names]
    return names, costs


def _one_algorithm(op, algorithm, n_bytes, ranks, tier, outer, local_ranks) -> Cost:
    if algorithm == "hierarchical" or algorithm in _PIPELINED.get(op, ()):
        if outer is None:
            raise ValueError(f"algorithm={algorithm!r} needs an outer tier and local_ranks")
        if algorithm != "hierarchical":
            return _pipelined(op, algorithm, n_bytes, ranks, tier, outer, local_ranks)
        return _hierarchical(op, n_bytes, ranks, tier, outer, local_ranks)
    return _flat(op, algorithm, n_bytes, ranks, _flat_tier(tier, outer, ranks, local_ranks))


def _check_tiers(outer, local_ranks):
    if (outer is None) != (local_ranks is None):
        raise ValueError(f"outer and local_ranks go together; got outer="
                         f"{'a Tier' if outer is not None else None}, {local_ranks=}")
    if local_ranks is not None:
        _checks.at_least_one("local_ranks", local_ranks)
        local_ranks = _checks.as_float(local_ranks)
    return local_ranks


def choose(op: str, n_bytes, ranks, tier: Tier, *, outer: Tier | None = None,
           local_ranks=None, temperature=AUTO_TEMPERATURE):
    """`auto`: (soft-minimum Cost, weights over algorithms, algorithm names).

    The winner is `names[argmax(weights)]`; see the module docstring for the
    soft minimum and its bounds.
    """
    op = _check_op(op)
    local_ranks = _check_tiers(outer, local_ranks)
    names, costs = _candidates(op, n_bytes, ranks, tier, outer, local_ranks)
    times = jnp.stack([c.time_s for c in costs])
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *costs)
    if isinstance(temperature, (int, float)) and temperature == 0:  # the exact minimum
        best = jnp.argmin(times, axis=0)
        weights = jax.nn.one_hot(best, len(names), axis=0, dtype=times.dtype)
        pick = lambda x: jnp.take_along_axis(x, best[None], axis=0)[0]  # noqa: E731
        return jax.tree.map(pick, stacked), weights, names
    weights = softmin_weights(times, temperature, axis=0)  # equal at p = 1 (all zero)
    t = jnp.maximum(temperature, 1e-6)  # as softmin_weights
    soft_min_s = jnp.exp(-t * jax.nn.logsumexp(-safe_log(times) / t, axis=0))
    scale = safe_div(soft_min_s, jnp.sum(weights * times, axis=0))  # in (k^-T, 1]
    return jax.tree.map(lambda x: scale * jnp.sum(weights * x, axis=0), stacked), weights, names


def cost(op: str, algorithm: str, n_bytes, ranks, tier: Tier, *, outer: Tier | None = None,
         local_ranks=None, temperature=AUTO_TEMPERATURE) -> Cost:
    """The Cost of one collective: `op` by `algorithm` on `n_bytes` over `ranks`.

    Jits, vmaps and differentiates in n_bytes, ranks (a float: exact at
    integers) and every leaf of the tiers; finite for p >= 1 and any n >= 0.
    """
    op = _check_op(op)
    _check_algorithm(op, algorithm)
    _checks.non_negative("bytes", n_bytes)
    _checks.at_least_one("ranks", ranks)
    n_bytes, ranks = _checks.as_float(n_bytes), _checks.as_float(ranks)
    local_ranks = _check_tiers(outer, local_ranks)
    if algorithm == "auto":
        return choose(op, n_bytes, ranks, tier, outer=outer, local_ranks=local_ranks,
                      temperature=temperature)[0]
    if algorithm in ("in_network", "nvls_tree"):
        _checks.check("in_network_efficiency",
                      (tier if algorithm == "nvls_tree"
                       else _flat_tier(tier, outer, ranks, local_ranks)).in_network_efficiency,
                lambda v: v > 0,
                "must be positive: this tier has no in-network reduction (NVLS/SHARP)")
    return _one_algorithm(op, algorithm, n_bytes, ranks, tier, outer, local_ranks)


def bus_factor(op: str, ranks) -> jax.Array:
    """nccl-tests' busbw / algbw: 2(p-1)/p for all-reduce; (p-1)/p for all-gather,
    reduce-scatter and all-to-all; 1 for broadcast, reduce and send/recv.

    nccl-tests applies the same factor whatever the algorithm, so an in-network
    (NVLS) all-reduce reports busbw = 2(p-1)/p x algbw although each GPU's link
    carries only about n in each direction: its busbw may exceed the link.
    """
    op = _check_op(op)
    p = _checks.as_float(ranks)
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return jnp.ones_like(p)


def algbw_Bps(n_bytes, time_s) -> jax.Array:
    """nccl-tests' algbw = size / time (0 when time is 0)."""
    t = _checks.as_float(time_s)
    return jnp.where(t > 0, n_bytes / jnp.where(t > 0, t, 1.0), 0.0)


def busbw_Bps(op: str, n_bytes, time_s, ranks) -> jax.Array:
    return algbw_Bps(n_bytes, time_s) * bus_factor(op, ranks)
