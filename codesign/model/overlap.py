"""What of each collective the compute hides: the step's traffic (`traffic.table`,
each row's seconds and the overlap rule it names, a `Rule` below) against its
compute (`compute.timing`), the exposed seconds of every row (`exposed`).

The traffic is costed before the compute is known and never reads it; a rule
names the compute phase its rows hide under and holds the counts that shape
the overlap (buckets, layers, micro-batches, the GEMMs' share): its window. The
rules are a column of the traffic table (`traffic.Traffic.rules`, each row
naming its own by index, `traffic.Row.rule`): the rows of one pass share one
rule, whose `hiding_s` is computed once for them. The step (`step`) hands the
two together here, so the flow is one way: the stage's shape, then the
traffic, the compute, the memory, and the step from them.

A new way of hiding communication (a dispatcher's own overlap, a CUDA-graph
scope that serialises its collectives, a host synchronisation that waits for
them) is a new final subclass of `Rule` with its two methods, named by the rows
it applies to: `exposed` needs no change.
"""

from __future__ import annotations

import abc
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from .relax import EXACT, safe_div, smooth_max, smooth_min, stacked

PHASES = ("forward", "backward")  # a micro-batch's compute phase a rule hides under


def _phase_s(timing, phase: str) -> jax.Array:
    """One micro-batch's `phase` seconds on the slowest stage."""
    return timing.forward_s if phase == PHASES[0] else timing.backward_s


class Rule(eqx.Module):
    """How a step's compute hides the traffic rows that name it (`traffic.Row.rule`):
    the base of the overlap rules. A rule holds its window (the counts and the
    phase that shape the overlap) and is applied in two steps, so that rows
    sharing it (the collectives of one pass) are served by one `hiding_s`."""

    @abc.abstractmethod
    def hiding_s(self, timing, t):
        """What the compute offers the rule's rows, computed once for all of them.

        Args:
            timing: the step's `compute.Timing` (one micro-batch's forward and
                backward seconds, its attention's, the layers, the compute another
                micro-batch can hide traffic under).
            t: the model's temperature, passed on to the smooth maxima.

        Returns:
            seconds, or a tuple of seconds (one per phase), or the pass's exposed
            seconds that its rows split: whatever `exposed_s` reads.
        """

    @abc.abstractmethod
    def exposed_s(self, time_s, hiding_s, t):
        """One row's exposed seconds per step.

        Args:
            time_s: the row's seconds per step (`traffic.Row.time_s`).
            hiding_s: this rule's `hiding_s`.
            t: the model's temperature.

        Returns:
            the seconds of `time_s` the compute does not hide (jnp scalar).
        """


class UnderGemms(Rule):
    """Tensor parallelism: the share `plan.tp_overlap` hidden under the GEMMs
    (Transformer Engine's userbuffers, async TP), at most the step's compute
    another micro-batch can hide it under (`Timing.overlap_s`), split evenly
    over the `parts` collectives of the pair (reduce-scatter and all-gather
    with sequence parallelism; one all-reduce without)."""

    share: jax.Array
    parts: int = eqx.field(static=True)

    def hiding_s(self, timing, t):
        return timing.overlap_s / self.parts

    def exposed_s(self, time_s, hiding_s, t):
        return time_s - smooth_min(self.share * time_s, hiding_s, t)


class UnderAttention(Rule):
    """Ring attention: a pass's K/V exchanges overlap that pass's attention
    kernels (`Timing.attention_forward_s` forward, the rest of
    `Timing.attention_s` backward); only the excess is exposed, shared among
    the pass's rows in proportion to their seconds (`pass_s`: all of them)."""

    pass_s: jax.Array
    phase: str = eqx.field(static=True)

    def hiding_s(self, timing, t):  # the pass's exposed excess (shared by its rows)
        hide_s = (timing.attention_forward_s if self.phase == PHASES[0]
                  else timing.attention_s - timing.attention_forward_s)
        return smooth_max(self.pass_s - hide_s, 0.0, t, 0.5 * (self.pass_s + hide_s))

    def exposed_s(self, time_s, excess_s, t):
        return excess_s if self.phase == PHASES[0] else safe_div(excess_s, self.pass_s) * time_s


class Paired(Rule):
    """Expert parallelism: with a schedule that pairs one micro-batch's forward
    with another's backward (`Schedule.exposed_all_to_all_s`: DualPipe, or
    Megatron-Core's combined 1F1B, `plan.ep_overlap`), the forward's exchanges
    (`forward_share` of them) hide under the backward's compute and the
    backward's under the forward's; `paired` micro-batches have a partner (the
    first forward and the last backward of a step have none).

    DualPipe: each at most under the whole pass it pairs with. Megatron-Core's
    combined 1F1B runs the pair layer by layer on a compute and a
    communication stream (`model_chunk_schedule_plan.TransformerLayerSchedulePlan.
    run`), per MoE layer three segments:

    - the backward's combine beside the forward's attention and router
      (`pre_dispatch_fwd`, P_f): max(P_f, C_b);
    - the forward's dispatch D_f, then the backward's dispatch D_b (issued after
      the MLP's data gradient) beside the MLP's data-gradient GEMMs M, its
      weight-gradient GEMMs M and the forward's MLP M (which waits for D_f):
      max(max(2M, D_f) + M, max(D_f, w) + D_b), w = 2M, or M with the weight
      gradients delayed past the dispatch (`delay_wgrad`, Megatron-Core's
      --delay-wgrad-compute), so D_b also runs beside them;
    - the forward's combine beside the backward's attention (P_b): max(C_f, P_b);

    of each, what exceeds the compute is exposed, in each of the `moe_layers`
    MoE layers of the `paired` micro-batches; the step's unpaired one exposes
    its exchanges whole. M is the MoE block's forward (`Timing.moe_forward_s`
    per layer; backward two GEMMs to each forward one, data and weight
    gradients alike), P_f and P_b the layer's other work (the stage's mean)."""

    paired: jax.Array
    forward_share: jax.Array
    combined: jax.Array
    schedule: object
    moe_layers: jax.Array = 0.0
    micro_batches: jax.Array = 1.0
    delay_wgrad: bool = eqx.field(static=True, default=False)

    def _layered(self) -> bool:
        """Megatron-Core's combined 1F1B (`plan.ep_overlap` on a schedule that
        does not overlap the exchanges itself)."""
        return bool(self.combined) and not self.schedule.overlaps_all_to_all \
            and self.schedule.combines_all_to_all

    def hiding_s(self, timing, t):
        if not self._layered():
            return timing.backward_s, timing.forward_s
        mlp = safe_div(timing.moe_forward_s, self.moe_layers)  # one MoE block's forward
        pre_forward = safe_div(timing.forward_s - timing.moe_forward_s, timing.layers)
        pre_backward = safe_div(timing.backward_s - 2.0 * timing.moe_forward_s, timing.layers)
        return pre_forward, mlp, pre_backward

    def exposed_s(self, time_s, hiding_s, t):
        if not self._layered():
            backward_s, forward_s = hiding_s
            return sum(self.schedule.exposed_all_to_all_s(share * time_s, self.paired * hide_s,
                                                          t, self.combined)
                       for share, hide_s in ((self.forward_share, backward_s),
                                             (1.0 - self.forward_share, forward_s)))
        p_f, m, p_b = hiding_s
        # one layer's exchanges of one micro-batch, half dispatch and half combine
        per_layer = safe_div(time_s, self.moe_layers * self.micro_batches)
        d_f = c_f = 0.5 * self.forward_share * per_layer
        d_b = c_b = 0.5 * (1.0 - self.forward_share) * per_layer
        wait = m if self.delay_wgrad else 2.0 * m  # compute before the backward's dispatch
        middle = smooth_max(smooth_max(2.0 * m, d_f, t) + m,
                            smooth_max(d_f, wait, t) + d_b, t) - 3.0 * m
        layer = (smooth_max(p_f, c_b, t) - p_f) + middle + (smooth_max(c_f, p_b, t) - p_b)
        return time_s - self.paired * self.moe_layers * (per_layer - layer)


class Steady(Rule):
    """Pipeline sends under a schedule that overlaps them (`Schedule.overlaps_p2p`):
    of the `count` sends a step (half activations forward, half gradients
    backward) the `waited` ones of the fill and drain are exposed; each other one
    runs beside one chunk of its pass's compute (`chunks` a micro-batch: the
    interleaved stages) and only what exceeds that chunk is exposed, so no more
    is hidden than there is compute to hide it. `one_s` is one send's seconds."""

    one_s: jax.Array
    count: jax.Array
    waited: jax.Array
    chunks: jax.Array

    def hiding_s(self, timing, t):  # one chunk's forward and backward seconds
        return (safe_div(timing.forward_s, self.chunks),
                safe_div(timing.backward_s, self.chunks))

    def exposed_s(self, time_s, hiding_s, t):
        one_s, steady = self.one_s, 0.5 * (self.count - self.waited)
        return self.waited * one_s + steady * sum(
            smooth_max(one_s - chunk_s, 0.0, t, 0.5 * (one_s + chunk_s)) for chunk_s in hiding_s)


def bucketed_exposed_s(bucket_cost_s, buckets, hide_s, t=EXACT):
    """Exposed time of `buckets` back-to-back collectives overlapped with a
    compute phase of `hide_s` that produces their inputs at an even rate.

    Bucket i is ready at i hide_s / buckets; the last one finishes at
    max(hide_s + c, hide_s / buckets + buckets c) with c = one bucket's cost,
    so exposed = max(c, hide_s / buckets + buckets c - hide_s): small buckets
    pay latency `buckets` times, large ones start late.
    """
    return smooth_max(bucket_cost_s, hide_s / buckets + buckets * bucket_cost_s - hide_s, t,
                      0.5 * (buckets * bucket_cost_s + hide_s))


def layered_exposed_s(comm_s, compute_s, layers, prefetch, t=EXACT):
    """Exposed time of one collective per layer (`comm_s` each) on a
    communication stream beside `layers` layers of compute (`compute_s` each),
    issued `prefetch` layers ahead (FSDP / ZeRO-3).

    Without prefetch every layer waits for its own gather: L c. With depth >= 1
    the gather of layer i+1 runs under layer i's compute: only the first is
    exposed, each later one by what exceeds the compute, c + (L-1) max(c - f, 0)
    (when c > f the stream sets the pace: communication-bound). A depth in
    (0, 1) hides that fraction of f. Depth beyond 1 holds more gathered layers
    and helps only uneven layers, which this uniform form does not see.
    """
    d = smooth_min(prefetch, 1.0, t)
    return comm_s + smooth_max(layers - 1.0, 0.0, t, 0.5 * layers) * smooth_max(
        comm_s - d * compute_s, 0.0, t, 0.5 * (comm_s + d * compute_s))


class Buckets(Rule):
    """Data parallelism in buckets (`bucketed_exposed_s`): `times` passes a step
    of `buckets` collectives of `one_s` each, each pass under one micro-batch's
    `phase` (the gradients' reduction under the backward, the weights' gather
    under the next forward); `present` is 0 for a group with nothing to move."""

    one_s: jax.Array
    buckets: jax.Array
    times: jax.Array
    present: jax.Array
    phase: str = eqx.field(static=True)

    def hiding_s(self, timing, t):
        return _phase_s(timing, self.phase)

    def exposed_s(self, time_s, hiding_s, t):
        return self.times * bucketed_exposed_s(self.one_s, self.buckets, hiding_s, t) \
            * self.present


class PerLayer(Rule):
    """ZeRO-3 / FSDP (`layered_exposed_s`): per micro-batch, one collective pass
    of `comm_s` a layer beside each of `layers` layers of the `phase`'s compute,
    prefetched `prefetch` layers ahead. The forward's gathers are one row
    (`whole`); the backward's gather and reduce-scatter share the pass's
    exposure in proportion to their seconds."""

    comm_s: jax.Array
    layers: jax.Array
    prefetch: jax.Array
    micro_batches: jax.Array
    present: jax.Array
    phase: str = eqx.field(static=True)
    whole: bool = eqx.field(static=True)

    def hiding_s(self, timing, t):  # the passes' exposed seconds (shared by their rows)
        layer_s = safe_div(_phase_s(timing, self.phase), timing.layers)
        return self.micro_batches * layered_exposed_s(self.comm_s, layer_s, self.layers,
                                                      self.prefetch, t) * self.present

    def exposed_s(self, time_s, passes_s, t):
        return passes_s if self.whole else safe_div(
            passes_s, self.micro_batches * self.layers * self.comm_s) * time_s


def exposed(traffic, timing, t=EXACT) -> tuple:
    """The traffic table's rows with their exposed seconds against the step's
    compute (`timing`, `compute.Timing`), each by the rule it names
    (`traffic.Traffic.rules`; a row naming none is on the critical path as the
    traffic costed it). The rows of one kind of rule (its class and static
    fields: a phase, a share of the pass) are one array: their rules' windows
    stacked row by row, `hiding_s` and `exposed_s` applied once to all of them
    (a rule shared by several rows is read by each, the same values). The rows
    returned name no rule (`traffic.Row.rule` = -1)."""
    rows = list(traffic.rows)
    kinds: dict = {}  # a rule's structure -> the rows whose rule has it
    for i, r in enumerate(rows):
        if r.rule >= 0:
            kinds.setdefault(jax.tree.structure(traffic.rules[r.rule]), []).append(i)
    for members in kinds.values():
        rules = [traffic.rules[rows[i].rule] for i in members]
        times = [rows[i].time_s for i in members]
        if len(members) > 1:  # the kind's rows as one array
            rules = [jax.tree.map(stacked, *rules)]
            times = [stacked(*times)]
        out = rules[0].exposed_s(times[0], rules[0].hiding_s(timing, t), t)
        for i, e in zip(members, jnp.unstack(out) if len(members) > 1 else (out,), strict=True):
            rows[i] = dataclasses.replace(rows[i], exposed_s=e, rule=-1)
    return tuple(rows)
