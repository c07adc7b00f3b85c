"""Every collective algorithm as data: the (L, W, C) coefficients of each
(op, algorithm) over a few closed forms of its ranks (`ROWS`, `FEATURES`),
gathered into the arrays `collectives` evaluates in one expression
(`table`, `basis`). `collectives`' docstring gives the formulas this table
encodes; what a collective costs on a `Tier`, and `auto`, are computed there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .relax import log2_ranks, where


def _f(p):
    return (p - 1.0) / p


def crossings(p, g, ramp=True, domains=None):
    """Domain boundaries one ring over p ranks, g per domain, crosses: N = p / g
    over whole domains, at least 2 once a rank spills (a ring over 6 + 2 ranks
    crosses two), 0 for p = g: max(N, 2) min(p - g, 1) for p > g, which runs
    linearly from 0 over the first rank beyond one domain (between integers:
    no jump); without the `ramp`, max(N, 2): the relaxed way from one domain
    to spilling over is `collectives._spill_mixed`'s, in time. (N min(log2 N, 1), which
    it replaces, counted 0.55 crossings at N = 8 / 6, so a 6-GPU domain beat
    an 8-GPU one for tp = 8 on Llama 3 405B.) `domains`: N where the caller has it."""
    spill = jnp.minimum(p - g, 1.0) if ramp else 1.0
    n = p / g if domains is None else domains
    return where(p > g, jnp.maximum(n, 2.0) * spill, 0.0)


def _rail_ring(passes: float):
    """NCCL's rail-parallel ring: g channels, each a ring over all p ranks that
    enters and leaves every domain through a different GPU's NIC, `passes`
    times around (2 for an all-reduce: reduce-scatter then all-gather). Of the
    p hops of a ring, c = `crossings` cross domains (N = p / g for whole
    domains); each GPU sends `passes` x (p-1)/p x n in all, c/p of it through
    its own NIC and the rest over the scale-up tier. The terms of (p - 1, (p -
    1) / p, c / p), the features "p-1", "f(p)" and "cross/p" (computed once for
    both ring rows)."""
    def terms(p_minus_1, f_p, cross):
        hops, share = ((p_minus_1, f_p) if passes == 1.0
                       else (passes * p_minus_1, passes * f_p))
        inside = 1.0 - cross
        return (hops * inside, hops * cross, share * inside, share * cross)
    return terms


# ------------------------------------------------------------- the candidates as data
# Every (op, algorithm) is one `_Row` of `ROWS`: its terms are linear in a few
# closed forms of p, g = ranks per scale-up domain and N = p / g (`_FEATURES`),
#
#   time = L alpha_0 + L_out alpha_1 + L_back alpha_0
#          + (W beta_0 + C gamma_0) n (+) (W_out beta_1 + C_out gamma_1) n_out + W_back beta_0 n
#
# where tier 0 is the tier the row runs on (`_flat_tier` for a flat algorithm,
# the fast tier of a two-tier one), tier 1 is the slow `outer` (on n_out = n /
# g bytes, one rail per GPU, for a `per_rail` row; n otherwise), the `_back`
# terms are a last phase on tier 0 (hierarchical all-reduce's all-gather), and
# (+) is a sum for phases that run one after the other and a max for the
# pipelined two-tier algorithms, whose two streams overlap (NCCL's chunks flow
# through NVLink and the NICs together): latencies add, time = latencies +
# max(W n beta_0 + C n gamma_0, W_out n beta_1). The phases add in this order,
# as the algorithms run. An `in_network` row moves W at tier 0's in-network
# bandwidth (`bandwidth_Bps` x `in_network_efficiency`; 1e30 s where the tier
# has none). `choose` evaluates every candidate of an op in one expression: the
# coefficients are a sum over the features each term uses (rows x features, sparse)
# and the times one vectorised formula, so a new algorithm adds a row, not equations.
#
# Features: "p-1", "f(p)" = (p-1)/p, "lg(p)" = log2 p, "one(p)" = min(log2 p, 1)
# (the constants 1 and 2 of the table, vanishing at p = 1), the same of g and N,
# "one(N)/g" = min(log2 N, 1) / g, and "rail_ring(passes).i" = term i of
# `_rail_ring(passes)`.
#
# Pipelined two-tier algorithms (p ranks, g per domain, N = p / g domains, one
# NIC (rail) per GPU; C is the reduction share of the op's ring):
#
# | op             | algorithm | L              | L_out          | W               | W_out        |
# |----------------|-----------|----------------|----------------|-----------------|--------------|
# | all_reduce     | rail_ring | 2(p-1)(1-N/p)  | 2(p-1) N/p     | 2(p-1)/p (1-N/p)| 2(p-1)/p / g |
# | all_reduce     | rail_tree | 2(g-1)         | 2 log2 N       | 2(g-1)/g        | 2 / g        |
# | all_reduce     | nvls_tree | 2 (NVLS)       | 2 log2 N       | 1 (in-network)  | 2 / g        |
# | reduce_scatter | rail_ring | (p-1)(1-N/p)   | (p-1) N/p      | (p-1)/p (1-N/p) | (p-1)/p / g  |
# | all_gather     | rail_ring | as reduce_scatter, no reduction                                 |
#
# (N/p is 0 when N = 1: one domain never uses the NIC; in the rail_ring rows N
# is the `crossings` count, at least 2 once the group spills.) rail_ring over N
# domains moves 2(p-1)/p n / g through each NIC, so a large all-reduce's busbw
# approaches g x the NIC's bandwidth: the node's NIC aggregate. rail_tree is a
# chain inside each domain and a double binary tree across (one per rail, n / g
# each: ~2 n / g per NIC); nvls_tree reduces inside the domain in the NVSwitch
# (NVLS) and runs the trees across on each GPU's shard (NCCL's NVLSTree).

TERM_NAMES = ("L", "W", "C", "L_out", "W_out", "C_out", "L_back", "W_back")


class _Row(NamedTuple):
    """One algorithm of one op: {term: {feature: coefficient}} and how it runs."""

    terms: dict
    two_tier: bool = False  # on (tier, outer); else on `_flat_tier`
    in_network: bool = False  # W at tier 0's in-network bandwidth (NVLS / SHARP)
    pipelined: bool = False  # the two tiers' streams overlap (max, not sum)
    per_rail: bool = False  # the outer phase moves n / g bytes on each of g rails
    family: str = "ring"  # whose protocol constants it takes (`protocols.Protocols`)


def _family(in_network, tree):
    return "nvls" if in_network else "tree" if tree else "ring"


def _flat(L, W, C=None, *, in_network=False, tree=False) -> _Row:
    return _Row({"L": L, "W": W, **({"C": C} if C else {})}, in_network=in_network,
                family=_family(in_network, tree))


def _two(L, L_out, W, W_out, C=None, C_out=None, *, back=(None, None), in_network=False,
         pipelined=False, per_rail=False, tree=False) -> _Row:
    terms = {"L": L, "L_out": L_out, "W": W, "W_out": W_out, "C": C, "C_out": C_out,
             "L_back": back[0], "W_back": back[1]}
    return _Row({t: v for t, v in terms.items() if v}, True, in_network, pipelined, per_rail,
                _family(in_network, tree))


def _rail_ring_row(passes: int, reduction: bool) -> _Row:
    t = [{f"rail_ring({passes}).{i}": 1.0} for i in range(4)]
    return _two(*t, C={"f(p)": 1.0} if reduction else None, pipelined=True)


_BCAST = {
    "ring": ({"p-1": 1.0}, {"one(p)": 1.0}),
    "tree": ({"lg(p)": 1.0}, {"one(p)": 1.0}),
    "recursive_doubling": ({"lg(p)": 1.0}, {"lg(p)": 1.0}),
    "halving_doubling": ({"lg(p)": 1.0, "p-1": 1.0}, {"f(p)": 2.0}),
}
_REDUCE_SHARE = {"ring": "one(p)", "tree": "one(p)", "recursive_doubling": "lg(p)",
                 "halving_doubling": "f(p)"}
_RING_RS = _flat({"p-1": 1.0}, {"f(p)": 1.0}, {"f(p)": 1.0})
_RING_AG = _flat({"p-1": 1.0}, {"f(p)": 1.0})

ROWS: dict[str, dict[str, _Row]] = {
    "all_reduce": {
        "ring": _flat({"p-1": 2.0}, {"f(p)": 2.0}, {"f(p)": 1.0}),
        "recursive_doubling": _flat({"lg(p)": 1.0}, {"lg(p)": 1.0}, {"lg(p)": 1.0}),
        "halving_doubling": _flat({"lg(p)": 2.0}, {"f(p)": 2.0}, {"f(p)": 1.0}),
        "tree": _flat({"lg(p)": 2.0}, {"one(p)": 2.0}, {"one(p)": 1.0}, tree=True),
        "in_network": _flat({"one(p)": 2.0}, {"one(p)": 1.0}, in_network=True),
        # reduce-scatter inside, all-reduce of n/g across (g rails), all-gather inside
        "hierarchical": _two({"g-1": 1.0}, {"N-1": 2.0}, {"f(g)": 1.0}, {"f(N)": 2.0},
                             {"f(g)": 1.0}, {"f(N)": 1.0},
                             back=({"g-1": 1.0}, {"f(g)": 1.0}), per_rail=True),
        "rail_ring": _rail_ring_row(2, reduction=True),
        "rail_tree": _two({"g-1": 2.0}, {"lg(N)": 2.0}, {"f(g)": 2.0}, {"one(N)/g": 2.0},
                          {"f(p)": 1.0}, pipelined=True, tree=True),
        "nvls_tree": _two({"one(g)": 2.0}, {"lg(N)": 2.0}, {"one(g)": 1.0}, {"one(N)/g": 2.0},
                          in_network=True, pipelined=True),
    },
    "reduce_scatter": {
        "ring": _RING_RS,
        "direct": _RING_RS,
        "recursive_doubling": _flat({"lg(p)": 1.0}, {"f(p)": 1.0}, {"f(p)": 1.0}),
        # reduce-scatter inside, then across on n/g
        "hierarchical": _two({"g-1": 1.0}, {"N-1": 1.0}, {"f(g)": 1.0}, {"f(N)": 1.0},
                             {"f(g)": 1.0}, {"f(N)": 1.0}, per_rail=True),
        "rail_ring": _rail_ring_row(1, reduction=True),
    },
    "all_gather": {
        "ring": _RING_AG,
        "direct": _RING_AG,
        "recursive_doubling": _flat({"lg(p)": 1.0}, {"f(p)": 1.0}),
        # across on n/g, then inside
        "hierarchical": _two({"g-1": 1.0}, {"N-1": 1.0}, {"f(g)": 1.0}, {"f(N)": 1.0},
                             per_rail=True),
        "rail_ring": _rail_ring_row(1, reduction=False),
    },
    "all_to_all": {
        "direct": _flat({"p-1": 1.0}, {"f(p)": 1.0}),
        "recursive_doubling": _flat({"lg(p)": 1.0}, {"lg(p)": 0.5}),
        # an exchange inside, then one across: each rank forwards n bytes over each
        "hierarchical": _two({"g-1": 1.0}, {"N-1": 1.0}, {"f(g)": 1.0}, {"f(N)": 1.0}),
    },
    "broadcast": {
        **{a: _flat(L, W, tree=a == "tree") for a, (L, W) in _BCAST.items()},
        "in_network": _flat({"one(p)": 1.0}, {"one(p)": 1.0}, in_network=True),
        # cross once, fan out inside (pipelined trees)
        "hierarchical": _two({"lg(g)": 1.0}, {"lg(N)": 1.0}, {"one(g)": 1.0}, {"one(N)": 1.0}),
    },
    "reduce": {
        **{a: _flat(L, W, {_REDUCE_SHARE[a]: 1.0}, tree=a == "tree")
           for a, (L, W) in _BCAST.items()},
        "in_network": _flat({"one(p)": 1.0}, {"one(p)": 1.0}, in_network=True),
        "hierarchical": _two({"lg(g)": 1.0}, {"lg(N)": 1.0}, {"one(g)": 1.0}, {"one(N)": 1.0},
                             {"one(g)": 1.0}, {"one(N)": 1.0}),
    },
    "send_recv": {"direct": _flat({"one(p)": 1.0}, {"one(p)": 1.0})},
}


def _features() -> dict[str, Callable]:
    """name -> value(get), where get(other name) is another feature (computed once)."""
    out: dict[str, Callable] = {"N": lambda v: v("p") / v("g")}
    for x in ("p", "g", "N"):
        out |= {f"{x}-1": lambda v, x=x: v(x) - 1.0,
                  f"f({x})": lambda v, x=x: v(f"{x}-1") / v(x),
                  f"lg({x})": lambda v, x=x: log2_ranks(v(x)),
                  f"one({x})": lambda v, x=x: jnp.minimum(v(f"lg({x})"), 1.0)}
    out["one(N)/g"] = lambda v: v("one(N)") / v("g")
    out["cross/p"] = lambda v: crossings(v("p"), v("g"), v("ramp"), v("N")) / v("p")
    for passes in (1, 2):
        out[f"rail_ring({passes})"] = lambda v, passes=passes: _rail_ring(float(passes))(
            v("p-1"), v("f(p)"), v("cross/p"))
        out |= {f"rail_ring({passes}).{i}": lambda v, passes=passes, i=i:
                  v(f"rail_ring({passes})")[i] for i in range(4)}
    return out


_FEATURES = _features()


def local(ranks, local_ranks):
    """g: the local ranks clipped to [1, p]."""
    return jnp.minimum(jnp.maximum(local_ranks, 1.0), jnp.maximum(ranks, 1.0))


def basis(ranks, local_ranks, ramp=True) -> Callable:
    """feature name -> value, each computed once (g = `local`;
    `ramp`: `crossings`')."""
    memo = {"p": ranks, "ramp": ramp}
    if local_ranks is not None:
        memo["g"] = local(ranks, local_ranks)

    def get(name):
        if name not in memo:
            memo[name] = _FEATURES[name](get)
        return memo[name]

    return get


class Table(NamedTuple):
    """The rows of one or more collectives (`requests`), padded to A rows each.

    For one request the arrays have a leading row axis (A, ...); for R > 1 the
    requests are a second axis (A, R, ...), matched by the leading axis of the
    inputs. A padded row repeats its request's last row and is masked out
    (`valid`), so no padding ever wins `auto`."""

    features: tuple[str, ...]
    matrices: dict  # term -> (A, features[, R]) coefficients; terms that are all zero left out
    two_tier: np.ndarray  # per row: (A[, R])
    in_network: np.ndarray
    pipelined: np.ndarray
    per_rail: np.ndarray
    family: np.ndarray  # per row: its `_Row.family`
    valid: np.ndarray

    @property
    def requests(self) -> tuple:
        """() for one request, (R,) for R of them: the axes after the row axis."""
        return self.valid.shape[1:]


@functools.cache
def table(requests: tuple[tuple[str, tuple[str, ...]], ...]) -> Table:
    """The `Table` of `requests`: (op, algorithm names) each."""
    width = max(len(names) for _, names in requests)
    rows = [[ROWS[op][names[min(a, len(names) - 1)]] for op, names in requests]
            for a in range(width)]  # [row][request]
    features = tuple(dict.fromkeys(f for row in rows for r in row for term in r.terms.values()
                                   for f in term))
    squeeze = (lambda x: x[:, 0]) if len(requests) == 1 else (lambda x: x)  # noqa: E731
    matrices = {}
    for t in TERM_NAMES:
        m = np.array([[[r.terms.get(t, {}).get(f, 0.0) for r in row] for f in features]
                      for row in rows])
        if m.any():
            matrices[t] = m[:, :, 0] if len(requests) == 1 else m
    flags = (squeeze(np.array([[getattr(r, f) for r in row] for row in rows]))
             for f in Table._fields[2:7])  # _Row's
    valid = squeeze(np.array([[a < len(names) for _, names in requests] for a in range(width)]))
    return Table(features, matrices, *flags, valid)

