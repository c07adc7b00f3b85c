"""The traffic table: (workload, plan, system) -> one row per collective.

"Budget the traffic, not the FLOPs": each parallelism dimension contributes
rows through one function (`_tp_rows`, `_cp_rows`, `_ep_rows`, `_dp_rows`,
`_pp_rows`), each row a message size, a count per step, the time those
collectives take and the overlap rule by which compute hides them
(`Row.rule`, an index into `Traffic.rules`, each an `overlap.Rule` holding its
window; the step applies them to its compute, `overlap.exposed`: the traffic
never reads it). Counts are for the slowest pipeline stage, which sets the pace.

One request table, priced in one call. A dimension's function returns its
parts (`_Part`): the collectives it needs priced, each a `Request` (op,
message bytes, group geometry, the algorithms it may run, the slow tier it
sees), and a function from their seconds to its rows, grouped by the rule
they share. `table` gathers every part's requests of the step (TP's and
CP's, EP's scale-up exchange, DP's buckets and ZeRO-3's per-layer passes, the
pipeline's sends in and across domains) into one table of arrays and prices it
in one expression (`price`: the tiers each request sees, vectorised, then
`collectives.choose_many`, whose cost in equations does not grow with the
requests), then hands each part its seconds. So a new row adds entries to one
table, not a copy of the cost model to the trace.

Where a new collective goes: a `Request` in its dimension's part (a new
dimension or MoE dispatcher: a new function returning `_Part`s, listed in
`table`), priced with the others, and a `Row` built from its seconds; how the
compute hides it is an `overlap.Rule` (a new final subclass for a new way of
hiding). Host synchronisations and CUDA-graph scopes that serialise or delay
collectives are rules of the rows they act on; a MoE dispatcher whose exchange
NCCL runs is a `Request` (the all-to-all dispatcher's, below), one with a
table of its own (`dispatchers.Dispatcher.priced_by_table`) prices its part
from that table and asks for none. What is still priced beside the table: the
EP exchange's slow-tier leg and a rail-only fabric's forwarding hop, which
`_ep_rows` evaluates at the node limit's lattice points (a closed form in the
limit, not a collective), and an `auto` all-to-all request (no dimension
asks for one; `program`'s may), which `price` hands to `cost_on` for its
exchange flows and forwarding hop.

Placement: ranks are numbered with the dimensions of `plan.placement`
innermost first (default tp, cp, ep, dp, pp). Attention's mesh is tp, cp, dp,
pp (ep has no part in it); the routed experts' mesh folds over the same ranks
in the same order with tp read as the expert tensor parallel size, cp folded
in and dp read as the experts' data parallel size (Megatron-Core's MoE
parallel folding: etp, ep, edp, pp; with cp = 1 and etp = tp this is ep as
the inner part of dp). A group of
dimension d has stride = product of the sizes placed inside it; the ranks of
one group that share a scale-up domain of D GPUs number
prod_d clip(D / stride_d, 1, size_d). A group that fits is costed on the fast
tier; one that does not runs hierarchically (`collectives.cost(...,
"hierarchical")`: inside, then across on the slow tier with one rail per GPU),
which degrades continuously to a flat slow-tier collective when no two of its
ranks share a domain. The slow tier a group sees depends on how many GPUs its
members span (pods and oversubscription, `fabric.scale_out_tier`).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import collectives, fabric, overlap, stage
from .hardware import System
from .plan import DIMENSIONS, Plan
from .relax import (
    EXACT,
    beyond_one,
    lattice_linear_tree,
    safe_div,
    smooth_clip,
    smooth_max,
    smooth_min,
    stacked,
    where,
)
from .workload import Transformer


class Row(eqx.Module):
    """One collective of the step: `count_per_step` of them, `message_bytes` each
    (the public view of one row of the table: the CLI, report, timeline and
    tests read these; built by keyword)."""

    message_bytes: jax.Array
    count_per_step: jax.Array
    ranks: jax.Array  # participants of one collective
    ranks_inside: jax.Array  # of them, how many share one scale-up domain
    time_s: jax.Array  # all `count_per_step` collectives, per step
    exposed_s: jax.Array  # the part not hidden under compute (`overlap.exposed`)
    slow_tier_bytes: jax.Array  # bytes one GPU sends over the slow tier, per step
    dimension: str = eqx.field(static=True)  # tp, cp, ep, dp or pp
    collective: str = eqx.field(static=True)  # its op (`collectives.OPS`)
    algorithm: str = eqx.field(static=True)  # its label: `auto`, an algorithm, a pass
    critical_path: bool = eqx.field(static=True)
    # the overlap rule the compute hides it by (an index into `Traffic.rules`;
    # -1: none, exposed_s is final)
    rule: int = eqx.field(static=True, default=-1)

    @property
    def tier(self) -> str:
        """scale_up, scale_out or both (from concrete values; for reports)."""
        inside, ranks = float(self.ranks_inside), float(self.ranks)
        if inside >= ranks - 1e-9:
            return "scale_up"
        return "scale_out" if inside <= 1 + 1e-9 else "scale_up+scale_out"


# ------------------------------------------------------------------ placement
def _stride(plan: Plan, sizes: dict, d: str):
    """Ranks between neighbours of dimension `d`: the product of the sizes
    placed inside it (1.0 for the innermost)."""
    inside = plan.placement[:plan.placement.index(d)]
    return functools.reduce(operator.mul, (sizes[e] for e in inside)) if inside else 1.0


def _meshes(plan: Plan) -> tuple[dict, dict]:
    """(sizes, strides) of attention's dimensions (tp, cp, dp, pp; ep 1) and the
    experts' ep and edp (their mesh etp, ep, edp, pp), each numbered in
    `plan.placement`'s order."""
    sizes = {"tp": plan.tp, "cp": plan.cp, "ep": 1.0, "dp": plan.dp, "pp": plan.pp}
    expert = {"tp": plan.expert_tp, "cp": 1.0, "ep": plan.ep, "dp": plan.expert_dp,
              "pp": plan.pp}
    strides = {d: _stride(plan, sizes, d) for d in DIMENSIONS}
    for d, e in (("ep", "ep"), ("dp", "edp")):  # the experts' groups the rows form
        sizes[e], strides[e] = expert[d], _stride(plan, expert, d)
    return sizes, strides


class Placement(eqx.Module):
    """Each parallel dimension's ranks, stride (ranks between neighbours: the
    product of the sizes placed inside it, 1 for the innermost) and ranks
    inside one scale-up domain (clip(domain / stride, 1, ranks), relaxed), by
    dimension (attention's tp, cp, ep = 1, dp, pp and the experts' ep, edp):
    one `smooth_clip` of them all at once, once per step (`table`), for
    every group `group` forms of them."""

    sizes: dict
    strides: dict
    inside: dict


def placement(plan: Plan, system: System, t=EXACT) -> Placement:
    sizes, strides = _meshes(plan)
    inside = smooth_clip(system.scale_up_domain / stacked(*strides.values()), 1.0,
                         stacked(*(sizes[d] for d in strides)), t)
    return Placement(sizes, strides, dict(zip(strides, inside, strict=True)))


def group(place: Placement, dims: tuple[str, ...]):
    """(ranks, ranks inside one scale-up domain, GPUs spanned, innermost stride)
    of the group of `dims` of a `placement`."""
    sizes, inside, strides = ([part[d] for d in dims] for part in
                              (place.sizes, place.inside, place.strides))
    spans = [s * n for s, n in zip(strides, sizes, strict=True)]
    if len(dims) == 1:
        return sizes[0], inside[0], spans[0], strides[0]
    return (jnp.prod(jnp.stack(sizes)), jnp.prod(jnp.stack(inside)), jnp.max(jnp.stack(spans)),
            jnp.min(jnp.stack(strides)))


def split_group(geometry, shard):
    """(shard group, replica group) geometries of a group cut into groups of its
    `shard` innermost ranks (HSDP), replicated across: the shard group keeps the
    stride and fills the domain first; the replicas are `shard` ranks apart."""
    ranks, inside, span, stride = geometry
    s = jnp.clip(shard, 1.0, ranks)
    inner = (s, jnp.minimum(inside, s), span * s / ranks, stride)
    outer = (ranks / s, jnp.clip(inside / s, 1.0, ranks / s), span, stride * s)
    return inner, outer


def cost_on(op: str, n_bytes, geometry, system: System, t=EXACT, algorithm="auto"):
    """Cost of one `op` on `n_bytes` over a group of `geometry` (`group`): the fast
    tier it sees (torus dimensions spanned), the slow tier (pods its flows
    cross, ECMP), `auto` over the algorithms the system's protocols run
    (`Protocols.runs`: NCCL's flat, NVLS and pipelined rail algorithms; every
    algorithm under alpha_beta; relaxed by `t`, the exact minimum exactly);
    an all-to-all leaving the domain on a rail-only fabric pays the forwarding
    hop (`fabric.rail_forwarding_cost`)."""
    ranks, inside, span, stride = geometry
    exchange = op == "all_to_all"
    inner = fabric.scale_up_tier(system, inside, stride, t)
    outer = fabric.group_scale_out_tier(system, span, ranks / inside, exchange, t)
    # `auto` is NCCL's choice, the fastest algorithm: the minimum in the exact
    # model, relaxed with the model's t
    c = collectives.cost(op, algorithm, n_bytes, ranks, inner, outer=outer,
                         local_ranks=inside, t=t, protocols=system.protocols)
    if exchange:
        leaves = where(ranks > inside, 1.0, 0.0)
        c = c + fabric.rail_forwarding_cost(system, n_bytes, inside, inner).scale(leaves)
    return c


class Request(NamedTuple):
    """One collective the step needs priced: a row of the request table.

    `op` on `n_bytes` over a group of `geometry` (`group`: ranks, ranks inside
    one scale-up domain, GPUs spanned, innermost stride), by the fastest of
    `algorithms` (None: `auto` over the algorithms the system's protocols run,
    two-tier included; one name: that algorithm, as `collectives.cost` prices
    it: a flat one runs on the fast tier when every rank shares the domain,
    on the slow one when none does). The slow tier is the group's
    (`fabric.group_scale_out_tier`: the pods its flows cross and ECMP) or, for
    a `pair` of neighbours, the tier of its span (`fabric.scale_out_tier`)."""

    op: str
    n_bytes: jax.Array
    geometry: tuple
    algorithms: tuple[str, ...] | None = None
    pair: bool = False


def price(requests, system: System, t=EXACT) -> list:
    """The seconds of one collective of each `Request`: the tiers each sees and
    every request's candidates in one vectorised expression
    (`collectives.choose_many`). An `auto` all-to-all (an exchange across
    domains: its flows and the rail-only forwarding hop) is priced by `cost_on`
    beside it.

    Args:
        requests: the `Request`s, in any order.
        system: the `hardware.System` whose tiers and protocols price them.
        t: the model's temperature (`auto`'s soft minimum, a group's spill).

    Returns:
        a list of jnp scalars, seconds of one collective, in `requests`' order.
    """
    costs = [None] * len(requests)
    alone = [i for i, r in enumerate(requests) if r.op == "all_to_all" and r.algorithms is None]
    for i in alone:
        costs[i] = cost_on(requests[i].op, requests[i].n_bytes, requests[i].geometry, system,
                           t).time_s
    many = [i for i in range(len(requests)) if i not in alone]
    if many:
        batch = [requests[i] for i in many]
        n_bytes, ranks, inside, span, stride = (
            jnp.stack([jnp.broadcast_to(x, ()) for x in column]) for column in
            zip(*((r.n_bytes, *r.geometry) for r in batch), strict=True))
        inner = fabric.scale_up_tier(system, inside, stride, t)
        outer = _scale_out_tiers(batch, system, span, ranks / inside, t)
        times_s = collectives.choose_many(tuple(r.op for r in batch), n_bytes, ranks, inner,
                                          outer, inside, t=t,
                                          protocols=system.protocols,
                                          algorithms=tuple(r.algorithms for r in batch))
        for i, time_s in zip(many, jnp.unstack(times_s), strict=True):
            costs[i] = time_s
    return costs


def _scale_out_tiers(requests, system: System, span, across, t):
    """The slow tier each request sees (leaves (R,) where they differ): its
    group's, or a pair's (`Request.pair`)."""
    group = fabric.group_scale_out_tier
    if system.routing.collides:  # ECMP's balls into bins reads one group's counts
        group = jax.vmap(group, in_axes=(None, 0, 0, None, None))
    outer = group(system, span, across, False, t)
    pairs = np.array([r.pair for r in requests])
    if not pairs.any():
        return outer
    pair = fabric.scale_out_tier(system, span, t)
    return jax.tree.map(lambda a, b: a if a is b else where(pairs, a, b), pair, outer)


class _Part(NamedTuple):
    """A dimension's share of the table: the collectives it needs priced
    (`requests`, `Request`s), and `rows`, which turns one collective's seconds
    of each into its rows, grouped by the overlap rule they share: a list of
    (`overlap.Rule` or None, [`_Line`, ...])."""

    requests: tuple
    rows: Callable


def slow_tier_bytes(op, n_bytes, ranks, inside) -> jax.Array:
    """Bytes one GPU sends over the slow tier in one hierarchical `op`: the
    phase across domains runs on n / inside bytes (all n for all-to-all) over
    ranks / inside participants, with nccl-tests' bus factor. `op` is one op's
    name, or a tuple of R (the other arguments then (R,) arrays: every row at once)."""
    across = ranks / inside
    if isinstance(op, str):
        n_across = n_bytes if op == "all_to_all" else n_bytes / inside
        return collectives.bus_factor(op, across) * n_across
    a2a = np.array([o == "all_to_all" for o in op])
    n_across = where(a2a, n_bytes, n_bytes / inside) if a2a.any() else n_bytes / inside
    return collectives.bus_factors(tuple(op), across) * n_across


class _Line(NamedTuple):
    """A row before its columns are computed (`_rows`): `count` collectives of
    `one_s` seconds each; `slow_bytes` None: `slow_tier_bytes`' per collective."""

    dimension: str
    op: str
    algorithm: str
    n_bytes: jax.Array
    count: jax.Array
    one_s: jax.Array
    ranks: jax.Array
    inside: jax.Array
    critical: bool = True
    slow_bytes: jax.Array | None = None


def _rows(lines) -> list[Row]:
    """The `Row`s of `lines`, each column computed once for all of them (one
    array: seconds = count x one's, the slow tier's bytes by `slow_tier_bytes`
    unless a line gives its own), all of a row exposed until the overlap rule
    its part gives it is applied (`overlap.exposed`)."""
    n, count, one, ranks, inside = (stacked(*c) for c in zip(
        *((x.n_bytes, x.count, x.one_s, x.ranks, x.inside) for x in lines), strict=True))
    time = count * one
    slow = count * slow_tier_bytes(tuple(x.op for x in lines), n, ranks, inside)
    given = np.array([x.slow_bytes is not None for x in lines])
    if given.any():
        slow = where(given, stacked(*(0.0 if x.slow_bytes is None else x.slow_bytes
                                       for x in lines)), slow)
    return [Row(message_bytes=x.n_bytes, count_per_step=x.count, ranks=x.ranks,
                ranks_inside=x.inside, time_s=time_s, exposed_s=time_s, slow_tier_bytes=slow_s,
                dimension=x.dimension, collective=x.op, algorithm=x.algorithm,
                critical_path=x.critical)
            for x, time_s, slow_s in zip(lines, jnp.unstack(time), jnp.unstack(slow),
                                         strict=True)]


# ---------------------------------------------------------------- dimensions
def _tp_rows(model, plan, system, sh, place, t):
    """Megatron: 2 all-reduces per layer forward and 2 backward, per micro-batch
    (+2 when the forward is recomputed); reduce-scatter + all-gather each with
    sequence parallelism; `auto` over ring, tree, NVLS... An MoE layer's
    second pair gathers and scatters the experts' tokens over the expert
    tensor-parallel group: none at etp = 1 (the all-to-all carries each rank's
    own tokens), the tp group's at etp = tp, linear between (1 < etp < tp:
    costed on the tp group, an approximation; Megatron-Core's recipes and
    torchtitan use etp = 1 or tp; an etp above tp is not charged). On the
    critical path, except the share `plan.tp_overlap` hidden under the GEMMs
    (Transformer Engine's userbuffers, async TP: `overlap.UnderGemms`)."""
    n = sh.tokens * model.hidden * plan.precision.bytes("activations")
    per_layer = 2.0 + 2.0 * plan.recompute.layer_forwards
    experts_pair = safe_div(plan.expert_tp - 1.0, plan.tp - 1.0)  # 0 at etp 1, 1 at tp
    layers = sh.layers_on_stage - 0.5 * sh.moe_layers_on_stage * (1.0 - experts_pair)
    count = per_layer * layers * sh.micro_batches
    ops = ("reduce_scatter", "all_gather") if plan.sequence_parallel else ("all_reduce",)
    geometry = group(place, ("tp",))
    ranks, inside = geometry[:2]
    rule = overlap.UnderGemms(plan.tp_overlap, len(ops))
    return [_Part(tuple(Request(op, n, geometry) for op in ops),
                  lambda costs: [(rule, [_Line("tp", op, "auto", n, count, one, ranks, inside)
                                         for op, one in zip(ops, costs, strict=True)])])]


def _cp_rows(model, plan, system, sh, place, t):
    """Ring attention (dp x cp hold the same weights; the cp ranks of a sequence
    pass K/V blocks around a ring): forward all-gathers K and V (again when
    the forward is recomputed); backward passes K/V around again and
    reduce-scatters dK, dV, per layer and micro-batch (a windowed layer only
    the share of K/V its window spans, `kv_share_per_layer`). Each overlaps the
    attention kernels of its own pass; only the excess over them is exposed
    (`overlap.UnderAttention`)."""
    n = (plan.micro_batch * model.seq_len * model.kv_elements_per_token() / plan.tp
         * plan.precision.bytes("attention") * model.kv_share_per_layer())
    per = sh.layers_on_stage * sh.micro_batches
    fwd = plan.recompute.layer_forwards * per
    geometry = group(place, ("cp",))
    ranks, inside = geometry[:2]

    def rows(costs):
        ag, rs = costs
        forward = overlap.UnderAttention(fwd * ag, overlap.PHASES[0])
        backward = overlap.UnderAttention(per * ag + per * rs, overlap.PHASES[1])
        return [(forward, [_Line("cp", "all_gather", "ring/forward", n, fwd, ag, ranks, inside)]),
                (backward, [_Line("cp", "all_gather", "ring/backward", n, per, ag, ranks, inside),
                            _Line("cp", "reduce_scatter", "ring/backward", n, per, rs, ranks,
                                  inside)])]

    return [_Part((Request("all_gather", n, geometry), Request("reduce_scatter", n, geometry)),
                  rows)]


def expected_remote_nodes(nodes, top_k):
    """Distinct nodes other than its own among a token's top_k experts, with
    experts spread evenly over `nodes` nodes: (N-1)(1 - (1-1/N)^k)."""
    many = nodes > 1.0
    n = where(many, nodes, 2.0)  # double where: no NaN gradient at N = 1
    return where(many, (n - 1.0) * (1.0 - (1.0 - 1.0 / n) ** top_k), 0.0)


def ep_slow_tier_copies(model, plan, nodes, t=EXACT, limit=None):
    """Copies of one token that cross the slow tier in one dispatch, at the
    node limit `limit` (default: the plan's `moe_node_limit`).

    Unlimited routing (limit = 0): a plain all-to-all (Megatron's) sends each
    of the top_k expert copies separately, k (N-1)/N of them cross; with
    `plan.moe_dedup` (DeepEP) one copy per destination node crosses, the
    expected distinct remote nodes, and is forwarded inside. Node-limited
    (DeepSeek-V3) routing always deduplicates, and reaches at most M nodes:
    min(expected distinct remote nodes, M (N-1)/N); a dispatcher that
    deduplicates (`dispatchers.Dispatcher.dedups`: DeepEP, HybridEP) does as
    `plan.moe_dedup`. So M = N equals M = 0 with
    deduplication, and M = 0 without it is the plain all-to-all. (`_ep_rows`
    relaxes M between integers.)
    """
    k = model.top_k
    limit = plan.moe_node_limit if limit is None else limit
    remote = (nodes - 1.0) / jnp.maximum(nodes, 1.0)
    dedup = expected_remote_nodes(nodes, k)
    unlimited = dedup if plan.moe_dedup or plan.moe_dispatcher.dedups else k * remote
    return where(limit > 0, smooth_min(dedup, limit * remote, t), unlimited)


def _ep_rows(model, plan, system, sh, place, t):
    """Dispatch and combine all-to-alls, forward and backward, per MoE layer and
    micro-batch (+2 when the forward is recomputed).

    Inside a scale-up domain the exchange is a direct all-to-all. Across
    domains (N = ep / inside nodes), the slow tier carries
    `ep_slow_tier_copies` copies of each token while the fast tier forwards the
    k copies to their experts; the two run pipelined, so a dispatch costs the
    larger of the two (DeepSeek-V3: NVLink forwards ~3.2 copies per IB copy
    for free). Critical path, except that DualPipe (and Megatron-Core's combined
    1F1B, `plan.ep_overlap`) overlaps one micro-batch's forward with another's
    backward: the forward's exchanges hide under the backward's compute and the
    backward's under the forward's, each at most under the compute it pairs
    with, and the first forward and the last backward of a step have no partner.
    """
    # as many exchanges in the dispatch width as in the combine width: forward
    # dispatch and combine (again when recomputed), and in backward the
    # combine's gradient, dispatched to the experts (FP8 in DeepSeek-V3: the
    # activation gradient before the down-projections), and the dispatch's,
    # combined back (BF16)
    d = plan.moe_dispatcher
    widths = (d.dispatch_bytes_per_element(plan.precision), plan.precision.bytes("ep_combine"))
    width = 0.5 * (widths[0] + widths[1])
    per_token = model.hidden * width
    tokens = sh.tokens / plan.tp
    n = tokens * model.top_k * per_token
    ranks, inside, span, stride = group(place, ("ep",))
    nodes = ranks / inside
    inner = fabric.scale_up_tier(system, inside, stride, t)
    outer = fabric.group_scale_out_tier(system, span, nodes, True, t)
    if d.priced_by_table:  # the dispatcher's own fast-tier bandwidth
        table_s, requests = _table_exchange_s(d, plan, model, tokens, widths, inside, inner), ()
    else:  # NCCL's direct all-to-all of the `n` bytes over the domain, in the request table
        requests = (Request("all_to_all", n, (inside, inside, span, stride), ("direct",)),)
    return [_Part(requests, lambda costs: _ep_row(
        model, plan, system, sh, t, (n, tokens, per_token), (ranks, inside, inner, outer),
        costs[0] if requests else table_s))]


def _ep_row(model, plan, system, sh, t, sizes, tiers, fast):
    """`_ep_rows`' row, from the seconds of one exchange's scale-up part (`fast`),
    the exchange's (bytes, tokens, bytes a token) and its group's (ranks, ranks
    inside a domain, fast tier, slow tier)."""
    d = plan.moe_dispatcher
    (n, tokens, per_token), (ranks, inside, inner, outer) = sizes, tiers
    nodes = ranks / inside

    def dispatch(limit):  # (seconds of one dispatch, bytes crossing) at a node limit
        cross_bytes = tokens * ep_slow_tier_copies(model, plan, nodes, t, limit) * per_token
        slow = collectives.Cost(jnp.maximum(nodes - 1.0, 0.0) * outer.latency_s,
                                cross_bytes / outer.effective_Bps, jnp.zeros(()))
        # rail-only: the bytes that leave the domain first hop to the GPU on their rail
        slow = slow + fabric.rail_forwarding_cost(system, cross_bytes, inside, inner)
        return smooth_max(fast, slow.time_s, t), cross_bytes

    # relaxed: linear in M between the integers around it (the limit's steps, the
    # plain all-to-all at 0 included, and the point where forwarding stops being
    # free fall between integers: the slope at M is the step to M + 1)
    one_s, cross_bytes = lattice_linear_tree(dispatch, (plan.moe_node_limit,), t, lowest=0.0)
    forwards = plan.recompute.moe_forwards  # the MoE block's, with its recomputation
    exchanges = 2.0 + 2.0 * forwards  # per MoE layer and micro-batch
    if d.layout_s > 0:  # its layout kernel before each forward dispatch
        one_s = one_s + d.layout_s * forwards / exchanges
    one_s = one_s * (model.moe_layers > 0)
    count = exchanges * sh.moe_layers_on_stage * sh.micro_batches
    paired = jnp.maximum(sh.micro_batches - 1.0, 0.0)  # micro-batches with a partner
    forward_share = forwards / (1.0 + forwards)
    rule = overlap.Paired(paired, forward_share, plan.ep_overlap, plan.schedule,
                          sh.moe_layers_on_stage, sh.micro_batches, plan.delay_wgrad)
    return [(rule, [_Line("ep", "all_to_all", "two_tier_dispatch", n, count, one_s, ranks, inside,
                          slow_bytes=count * cross_bytes * (model.moe_layers > 0))])]


def _table_exchange_s(d, plan, model, tokens, widths, inside, inner):
    """Seconds of one exchange's scale-up part over `inside` ranks on `inner` for a
    dispatcher with its own table (`dispatchers.Dispatcher.fast_tier_Bps`; the
    all-to-all dispatcher's is NCCL's direct all-to-all, a `Request`): it moves
    the (p-1)/p of the copies that leave the GPU at the bandwidth it reaches for
    tokens of their bytes with its SMs (`plan.moe_dispatcher_sms`), the mean of
    dispatch (`widths[0]` bytes an element) and combine (`widths[1]`), after
    NCCL's (p-1) latencies."""
    leaving = (inside - 1.0) / inside
    moved_s = [tokens * model.top_k * model.hidden * w * leaving
               / d.fast_tier_Bps(model.hidden * w, plan.moe_dispatcher_sms, inner)
               for w in widths]
    return (inside - 1.0) * inner.latency_s + 0.5 * (moved_s[0] + moved_s[1])


def _bucketed_row(op, label, total_bytes, geometry, plan, phase, times, present):
    """A part (`_Part`): `times` x a bucketed `op` of `total_bytes` over
    `geometry`, each pass hidden under a micro-batch's `phase` (`overlap.Buckets`)."""
    buckets = jnp.maximum(total_bytes / plan.dp_bucket_bytes, 1.0)
    bucket = total_bytes / buckets
    return _Part((Request(op, bucket, geometry),), lambda costs: [(
        overlap.Buckets(costs[0], buckets, times, present, phase),
        [_Line("dp", op, label, bucket, times * buckets * present, costs[0], geometry[0],
               geometry[1], critical=False)])])


def _dp_rows(model, plan, system, sh, place, t):
    """Data parallelism over dp x cp (context-parallel ranks hold the same
    weights): the dense weights over all of it, the routed experts over their
    replicas (`plan.expert_dp`). Gradients in the `grad_reduce` width, weights in
    the `params` width; the sharded stages shard inside groups of
    `plan.zero_shard_size` ranks (HSDP; 0 = all) and all-reduce each shard
    across the replicas once per step. The rows follow from what the plan's
    stage shards (`sharding.ZeroStage`):

    - ZeRO-0: one bucketed all-reduce of the gradients per step, overlapped
      with the last micro-batch's backward.
    - ZeRO-1: reduce-scatter of the gradients + all-gather of the updated
      weights, once per step (the gather under the next forward).
    - ZeRO-2: the reduce-scatter per micro-batch, under its backward
      (DeepSpeed frees the gradients as it goes); the gather once per step.
    - ZeRO-3 (FSDP): per micro-batch and layer, all-gather the layer's weights
      before forward, again before backward when `reshard_after_forward`, and
      reduce-scatter its gradients: 3x (2x) the weights per micro-batch, no
      ZeRO-1/2 rows. Exposure is per layer against that layer's compute
      (`overlap.layered_exposed_s`, prefetch `plan.fsdp_prefetch_layers`): at
      large dp with one or two micro-batches per GPU the gathers outrun the compute.
    """
    if sh.embedding_params is not None:  # a layout's rank: its own parameters
        dense, expert = stage.layout_params(model, sh)
        dense, expert = dense / plan.tp, expert / (plan.ep * plan.expert_tp)
    else:
        expert = model.routed_expert_params() / (plan.ep * plan.expert_tp * plan.pp)
        dense = (model.params() - model.routed_expert_params()) / (plan.tp * plan.pp)
    m = sh.micro_batches
    forward, backward = overlap.PHASES
    parts = []  # priced with every other part's requests (`table`)
    for label, params, dims, layers in (
            ("dense", dense, ("cp", "dp"), sh.layers_on_stage),
            ("experts", expert, ("edp",), sh.moe_layers_on_stage)):
        grad_bytes = params * plan.precision.bytes("grad_reduce")
        param_bytes = params * plan.precision.bytes("params")
        present = grad_bytes > 0  # no routed experts: the experts rows are empty
        geo = group(place, dims)
        if plan.zero.all_reduces_gradients:
            parts.append(_bucketed_row("all_reduce", f"all_reduce/{label}", grad_bytes, geo,
                                       plan, backward, 1.0, present))
            continue
        shard = where(plan.zero_shard_size > 0, plan.zero_shard_size, geo[0])
        inner, across = split_group(geo, shard)
        if not plan.zero.gathers_layers:
            times = plan.zero.gradient_scatters(m)
            parts.append(_bucketed_row("reduce_scatter", f"zero{plan.zero.name}/{label}",
                                       grad_bytes, inner, plan, backward, times, present))
            parts.append(_bucketed_row("all_gather", f"zero{plan.zero.name}/{label}",
                                       param_bytes, inner, plan, forward, 1.0, present))
        else:
            parts.append(_zero3_rows(label, param_bytes, grad_bytes, layers, inner, plan, sh,
                                     present))
        # HSDP: each shard's gradients all-reduced across the replicas, once per step
        replicated = present * beyond_one(across[0], t)
        parts.append(_bucketed_row("all_reduce", f"hsdp-replicas/{label}", grad_bytes / shard,
                                   across, plan, backward, 1.0, replicated))
    return parts


def _zero3_rows(label, param_bytes, grad_bytes, layers, inner, plan, sh, present):
    """A part (`_Part`): ZeRO-3's per-layer gathers and reduce-scatters (`_dp_rows`),
    each pass beside the layers of its phase (`overlap.PerLayer`)."""
    m = sh.micro_batches
    n_layers = jnp.maximum(layers, 1.0)
    layer_params, layer_grads = param_bytes / n_layers, grad_bytes / n_layers
    again = 1.0 if plan.reshard_after_forward else 0.0
    depth = plan.fsdp_prefetch_layers
    forward, backward = overlap.PHASES
    count = m * layers * present

    def rows(costs):
        ag, rs = costs
        fwd = overlap.PerLayer(ag, layers, depth, m, present, forward, whole=True)
        bwd = overlap.PerLayer(again * ag + rs, layers, depth, m, present, backward, whole=False)
        return [(fwd, [_Line("dp", "all_gather", f"zero3-forward/{label}", layer_params, count,
                             ag, inner[0], inner[1], critical=False)]),
                (bwd, [_Line("dp", "all_gather", f"zero3-backward/{label}", layer_params,
                             again * count, ag, inner[0], inner[1], critical=False),
                       _Line("dp", "reduce_scatter", f"zero3/{label}", layer_grads, count, rs,
                             inner[0], inner[1], critical=False)])]

    return _Part((Request("all_gather", layer_params, inner),
                  Request("reduce_scatter", layer_grads, inner)), rows)


def _pp_rows(model, plan, system, sh, place, t):
    """Point-to-point activations forward and gradients backward between
    neighbouring stages, per micro-batch and virtual stage; on the critical path.
    Each tensor-parallel rank sends 1/tp of the activation (Narayanan et al.
    2021's scatter/gather optimisation; the all-gather inside the domain that
    reassembles it is neglected). A schedule that `overlaps_p2p` waits only
    for the sends of the pipeline's fill and drain, (p - 1) hops each way, and
    hides each other one under a chunk of compute, exposing what exceeds it
    (`overlap.Steady`)."""
    n = sh.tokens * model.hidden * plan.precision.bytes("activations") / plan.tp
    count = 2.0 * sh.micro_batches * plan.interleave * beyond_one(plan.pp, t)
    ranks, _, _, stride = group(place, ("pp",))
    # a neighbour shares the domain when the stage stride fits inside it
    neighbour_inside = smooth_clip(system.scale_up_domain / stride - 1.0, 0.0, 1.0, t,
                                   0.5 * system.scale_up_domain / stride)
    # a pair in one domain, and a pair in two (one rank each: the send crosses the
    # scale-out tier of its span, in its protocols' network step; exact: a 2-rank
    # group over 1-rank domains has no spill to relax)
    span = 2.0 * stride
    sends = (Request("send_recv", n, (2.0, 2.0, span, stride), ("direct",), pair=True),
             Request("send_recv", n, (2.0, 1.0, span, stride), ("direct",), pair=True))

    def rows(costs):
        up, out = costs
        one_s = neighbour_inside * up + (1 - neighbour_inside) * out
        rule = overlap.Steady(one_s, count, jnp.minimum(2.0 * (plan.pp - 1.0), count),
                              plan.interleave) if plan.schedule.overlaps_p2p else None
        return [(rule, [_Line("pp", "send_recv", "direct", n, count, one_s,
                              jnp.minimum(ranks, 2.0), 1.0 + neighbour_inside,
                              slow_bytes=count * n * (1.0 - neighbour_inside))])]

    return [_Part(sends, rows)]


class Traffic(eqx.Module):
    """The step's traffic table: its rows (`Row`, in the order of `DIMENSIONS`'
    parts: tp, cp, ep, dp, pp) and the overlap rules they name by index
    (`Row.rule`): a rule shared by the rows of one pass is one entry, its
    hiding computed once (`overlap.exposed`). Iterates, indexes and measures
    as its rows."""

    rows: tuple
    rules: tuple

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def table(model: Transformer, plan: Plan, system: System, t=EXACT, sh=None) -> Traffic:
    """Every collective of one step, costed without the compute: each dimension's
    requests priced in one call (`price`), its rows built from their seconds, and
    the rule each row's compute hides it by (`Traffic.rules`), which
    `overlap.exposed` applies once the step's compute is known.

    Args:
        model, plan, system: the workload, its plan and the machine.
        t: the model's temperature (the exact model at its default).
        sh: the stage's `stage.Shape` if known (default: `stage.shape`'s).

    Returns:
        the `Traffic` table: rows in tp, cp, ep, dp, pp order, each all exposed
        until `overlap.exposed` applies its rule.
    """
    sh = stage.shape(model, plan, t) if sh is None else sh
    place = placement(plan, system, t)
    parts = [part for rows in (_tp_rows, _cp_rows, _ep_rows, _dp_rows, _pp_rows)
             for part in rows(model, plan, system, sh, place, t)]
    # every collective of the step priced at once
    costs = price([r for part in parts for r in part.requests], system, t)
    lines, named, rules, start = [], [], [], 0  # named: each line's rule (-1: none)
    for part in parts:
        for rule, shared in part.rows(tuple(costs[start:start + len(part.requests)])):
            named += [-1 if rule is None else len(rules)] * len(shared)
            rules += [] if rule is None else [rule]
            lines += shared
        start += len(part.requests)
    rows = (r if k < 0 else dataclasses.replace(r, rule=k)
            for r, k in zip(_rows(lines), named, strict=True))
    return Traffic(tuple(rows), tuple(rules))


def column(rows, field: str) -> jax.Array:
    """One numeric field of `rows` (`Row`s) as one array, in their order."""
    return stacked(*(getattr(r, field) for r in rows))


def exposed_by_dimension(rows, hidden: dict) -> tuple[dict, dict]:
    """(each dimension's exposed seconds per step (`DIMENSIONS`): the rows'
    `exposed_s` summed by dimension; for each mask of `hidden` ({name: a
    static bool per row}), the rows' hidden seconds summed over it: their
    `time_s` summed less their `exposed_s` summed). One product of a static
    matrix of 0s and +-1s with the two columns as one array, so every sum
    reads the rows' exposed seconds once: taken apart (a product per column,
    or the hidden seconds row by row), XLA:CPU fused each row's exposure, a
    long chain of cheap operations on the step's compute, anew into every
    consumer, and under `vmap` ran it once per dimension and again for the
    hidden seconds."""
    n = len(rows)
    weights = np.zeros((len(DIMENSIONS) + len(hidden), 2 * n))
    weights[:len(DIMENSIONS), :n] = [[r.dimension == d for r in rows] for d in DIMENSIONS]
    masks = np.array(list(hidden.values()), dtype=float)
    weights[len(DIMENSIONS):, :n], weights[len(DIMENSIONS):, n:] = -masks, masks
    both = jnp.concatenate([column(rows, "exposed_s"), column(rows, "time_s")])
    sums = jnp.unstack(weights @ both)
    return (dict(zip(DIMENSIONS, sums, strict=False)),
            dict(zip(hidden, sums[len(DIMENSIONS):], strict=True)))
