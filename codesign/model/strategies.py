"""Strategies as types: the fabric's topology and routing, the pipeline
schedule and what backward recomputes (the model's attention and its kernel
are in `attention`, a collective library's protocols in `protocols`, built on
`Strategy` and `parse` here).

Each family is an abstract `eqx.Module` declaring the interface; each strategy
a small final class that owns its formulas and carries the parameters only it
reads: a Clos its pods (`pod_size`, `oversubscription`: float leaves, so
differentiable knobs), a torus its shape (static: the shape is structure).
A name is parsed once, by `topology`, `routing`, `schedule` and `recompute`:
an unknown name is a one-line ValueError naming the key and the choices, so
no other code compares strategy names.

Topologies (`fabric` applies them to a `hardware.System`):

- `TwoTier`: a non-blocking fat tree over every GPU, one NIC each.
- `Clos`: pods of `pod_size` GPUs at full bisection, `oversubscription`:1
  above them (Llama 3: 3,072-GPU pods at 1:7). A group whose flows leave its
  pod is slowed by the share that crosses (`pod_factor`; see `fabric` for why
  the whole group slows); groups that fit in a pod are assumed placed inside one.
- `RailOnly`: no spine: GPU i of every scale-up domain hangs off rail i only, so
  cross-rail traffic is first forwarded through the scale-up domain.
- `Torus`: the scale-up domain is a 3D torus (ICI) of `shape`; a group drives
  only the links of the dimensions it spans; the scale-out tier is the
  data-centre network between pods, unchanged.

Routings: `Ecmp` hashes each flow onto one path (collisions, `_ecmp`);
`Spray` / `Adaptive` spread every flow over all paths.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import checks
from ..checks import float_field
from ..domains import interval
from ._ecmp import ecmp_slowdown
from ._geometry import (  # noqa: F401  (re-exported: fabric and tests read them here)
    TORUS_DIMS,
    TORUS_OPTICAL_ENDS_PER_CHIP,
    crosses_pod,
    crossing_fraction,
    fat_tree_levels,
    fat_tree_ports,
    torus_dims_spanned,
    torus_shape,
)
from .relax import EXACT, smooth_ceil, smooth_max, smooth_min

ONE_POD_GPUS = 1e9  # the pod size of a fabric without pods: every group fits in one


class Strategy(eqx.Module):
    """A strategy of one of the families, known by its `name`."""

    name: eqx.AbstractClassVar[str]


def parse(key: str, value, family: type, classes: tuple):
    """`value` if it is a `family` already, else the strategy of `classes` named
    `value` (an unknown name: a one-line ValueError naming `key` and the choices)."""
    if isinstance(value, family):
        return value
    by_name = {c.name: c for c in classes}
    if not isinstance(value, str) or value not in by_name:
        raise ValueError(f"{key}={value!r} is not one of {', '.join(by_name)}")
    return by_name[value]()


def _tier_bandwidth(tier, bandwidth_Bps):
    return eqx.tree_at(lambda x: x.bandwidth_Bps, tier, bandwidth_Bps)


# ------------------------------------------------------------------- topologies


class Topology(Strategy):
    """How the scale-out fabric joins the GPUs (and, for a torus, the scale-up domain).

    A topology without pods reads as one pod at 1:1 (`pod_size`,
    `oversubscription`); only `Clos` carries (and reads) them.
    """

    # cross-rail traffic hops through the scale-up domain first (rail-only)
    forwards_through_scale_up: ClassVar[bool] = False
    # the scale-up domain is switched (NVSwitch): not a torus of direct links
    switched_scale_up: ClassVar[bool] = True

    @property
    def pod_size(self):
        return ONE_POD_GPUS

    @property
    def oversubscription(self):
        return 1.0

    @classmethod
    def of(cls, scale_up_domain, **params) -> Topology:
        """This topology for a scale-up domain of `scale_up_domain` GPUs, with its
        own parameters `params` (scenario keys `system.<name>`); a parameter it
        does not read is a one-line ValueError naming the key and the topology."""
        _check_params(cls, params)
        return cls(**params)

    def params(self) -> dict:
        """Its float parameters by scenario key (`system.<name>`)."""
        return {k: getattr(self, k) for k in float_params(type(self))}

    def check_domain(self, scale_up_domain) -> None:
        """Raise when a (concrete) scale-up domain does not fit the topology."""

    def scale_up_tier(self, tier, group_size, stride, t=EXACT):
        """The fast tier seen by a group of `group_size` ranks `stride` apart:
        switched domains give every group the full per-GPU bandwidth."""
        return tier

    def scale_out_tier(self, tier, span, t=EXACT):
        """The slow tier seen by a group spanning `span` GPU indices (`fabric.scale_out_tier`)."""
        return tier

    def pod_factor(self, span, across, exchange: bool = False, t=EXACT) -> jax.Array | None:
        """The bandwidth divisor of a group from the pods its flows leave; None
        without pods (no divide at all)."""
        return None

    def leaf_block(self, scale_up_domain, leaf_downlinks) -> jax.Array | None:
        """GPUs under one leaf switch's block (rail-optimised: the same-index GPU of
        `leaf_downlinks` domains), where ECMP hashes flows onto the uplinks;
        None without leaf switches."""
        return leaf_downlinks * scale_up_domain

    @abc.abstractmethod
    def switch_ports(self, gpus, scale_up_domain, radix, t=EXACT) -> tuple:
        """(leaf, spine, core) switch ports of the scale-out fabric."""

    def links(self, gpus, gpus_per_node, ports, ocs_radix, t=EXACT) -> tuple:
        """(NICs, optical circuit switches, links, transceivers) of the fabric
        with `ports` = (leaf, spine, core) switch ports: one NIC per GPU, every
        link optical with a transceiver at each end."""
        leaf, spine, core = ports
        nics = gpus
        links = (nics + leaf + spine + core) / 2.0
        return nics, jnp.zeros_like(gpus), links, 2.0 * links


def _check_params(cls, params: dict) -> None:
    reads = float_params(cls)
    for k, v in params.items():
        if k not in reads:
            raise ValueError(f"system.{k}={float(v):g} does not apply to topology "
                             f"{cls.name}: only {readers(k)} reads it")


def float_params(cls) -> tuple[str, ...]:
    """The float parameters a topology class carries (scenario keys `system.<name>`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("static", False))


def readers(key: str) -> str:
    """The topologies that read parameter `key`, by name."""
    return ", ".join(c.name for c in TOPOLOGY_CLASSES if key in float_params(c)) or "none"


class TwoTier(Topology):
    """A non-blocking fat tree over all GPUs (one NIC per GPU)."""

    name: ClassVar[str] = "two_tier"

    def switch_ports(self, gpus, scale_up_domain, radix, t=EXACT) -> tuple:
        leaf, upper, levels = fat_tree_ports(gpus, radix)
        top = jnp.where(levels > 2, gpus, 0.0)  # a 3+-level tree's top level is its "core"
        return leaf, upper - top, top


class Clos(Topology):
    """Pods of `pod_size` GPUs as non-blocking fat trees, `oversubscription`:1
    above them: N/k uplinks from the pods into one aggregation layer of N/k ports.

    The defaults are one pod at 1:1 (a Clos that never oversubscribes)."""

    name: ClassVar[str] = "clos"
    pod_size: jax.Array = float_field("system.pod_size", interval(1.0, ONE_POD_GPUS),
                                      unit="GPUs", default=ONE_POD_GPUS)
    oversubscription: jax.Array = float_field("system.oversubscription", interval(1.0, 1e3),
                                              default=1.0)

    def oversubscription_factor(self, span, t=EXACT) -> jax.Array:
        """1 + (k - 1) x crosses_pod: k when the group leaves its pod, 1 inside."""
        return 1.0 + (self.oversubscription - 1.0) * crosses_pod(span, self.pod_size, t)

    def scale_out_tier(self, tier, span, t=EXACT):
        """bandwidth / oversubscription when the span exceeds `pod_size`; smooth in
        span, pod size and oversubscription under `t` (exact under `relax.EXACT`)."""
        return _tier_bandwidth(tier, tier.bandwidth_Bps / self.oversubscription_factor(span, t))

    def pod_factor(self, span, across, exchange: bool = False, t=EXACT) -> jax.Array:
        """max(1, k f): f the share of flows that leave the pod (`crossing_fraction`).

        Every GPU of a pod runs its copy of the collective at once, so the pod's
        uplinks (1/k of what its GPUs inject) carry the crossing share f of that
        injection: the crossing hops slow by k f when k f > 1, and a ring waits
        for them. f = 1 (a flat exchange, or a ring with one member per pod) is
        `oversubscription_factor`'s all-or-nothing k.
        """
        f = crossing_fraction(span, across, self.pod_size, exchange, t)
        return smooth_max(self.oversubscription * f, 1.0, t)

    def switch_ports(self, gpus, scale_up_domain, radix, t=EXACT) -> tuple:
        # pods are fat trees over min(N, P); their top level sends N/k up to a
        # single aggregation ("core") layer when the job spans more than one pod.
        pod = jnp.minimum(gpus, self.pod_size)
        pods = gpus / pod
        leaf, upper, _ = fat_tree_ports(pod, radix)
        cross = crosses_pod(gpus, self.pod_size, t)
        uplinks = cross * gpus / self.oversubscription
        return leaf * pods, upper * pods + uplinks, uplinks


class RailOnly(Topology):
    """`scale_up_domain` rails, each a non-blocking fat tree over the N / G GPUs
    of that rail; no spine joining the rails (Wang et al.)."""

    name: ClassVar[str] = "rail_only"
    forwards_through_scale_up: ClassVar[bool] = True

    def switch_ports(self, gpus, scale_up_domain, radix, t=EXACT) -> tuple:
        leaf, upper, _ = fat_tree_ports(gpus / scale_up_domain, radix)
        g = scale_up_domain
        return leaf * g, upper * g, jnp.zeros_like(gpus)


class Torus(Topology):
    """The scale-up domain as a 3D torus of `shape` (x, y, z), ranks laid out x
    fastest; `Torus.of(chips)` takes the most cube-like shape (`torus_shape`).

    A group drives only the links of the dimensions it spans (a ring along one
    dimension uses 2 of the 6 links). Its fabric is 3 links per chip (6 ends),
    1.5 optical ends per chip through OCSes (TPU v4's cube faces), and one
    data-centre NIC per host (the data-centre network is shared, not counted).
    """

    name: ClassVar[str] = "torus"
    switched_scale_up: ClassVar[bool] = False
    shape: tuple = eqx.field(static=True, converter=lambda s: tuple(int(n) for n in s))

    def __check_init__(self):
        if len(self.shape) != TORUS_DIMS or min(self.shape) < 1:
            raise ValueError(f"torus shape={self.shape} must be {TORUS_DIMS} positive sizes")

    @classmethod
    def of(cls, scale_up_domain, **params) -> Torus:
        _check_params(cls, params)  # it reads none
        return cls(torus_shape(scale_up_domain))

    @property
    def chips(self) -> int:
        return math.prod(self.shape)

    def check_domain(self, scale_up_domain) -> None:
        v = checks.concrete(scale_up_domain)
        if v is not None and float(v) != self.chips:
            raise ValueError(f"system.scale_up_domain={float(v):g} must equal the torus's "
                             f"{'x'.join(map(str, self.shape))} = {self.chips} chips")

    def scale_up_tier(self, tier, group_size, stride, t=EXACT):
        """bandwidth x max(dims spanned, 1) / 3 (a group of one moves no bytes, so
        the floor only keeps the tier valid)."""
        dims = torus_dims_spanned(group_size, stride, self.shape, t)
        return _tier_bandwidth(tier, tier.bandwidth_Bps * jnp.maximum(dims, 1.0) / TORUS_DIMS)

    def leaf_block(self, scale_up_domain, leaf_downlinks) -> None:
        return None  # no leaf switches: nothing to hash onto

    def switch_ports(self, gpus, scale_up_domain, radix, t=EXACT) -> tuple:
        z = jnp.zeros_like(gpus)
        return z, z, z

    def links(self, gpus, gpus_per_node, ports, ocs_radix, t=EXACT) -> tuple:
        nics = gpus / gpus_per_node
        optical_ends = TORUS_OPTICAL_ENDS_PER_CHIP * gpus
        ocs = smooth_ceil(optical_ends / ocs_radix, t)
        links = 3.0 * gpus + nics  # ICI links + host-to-network links
        return nics, ocs, links, optical_ends + 2.0 * nics


TOPOLOGY_CLASSES = (TwoTier, Clos, RailOnly, Torus)
TOPOLOGIES = tuple(c.name for c in TOPOLOGY_CLASSES)


def topology_class(name: str, key: str = "system.topology") -> type[Topology]:
    """The topology class named `name`."""
    by_name = {c.name: c for c in TOPOLOGY_CLASSES}
    if not isinstance(name, str) or name not in by_name:
        raise ValueError(f"{key}={name!r} is not one of {', '.join(TOPOLOGIES)}")
    return by_name[name]


def as_topology(value, key: str = "system.topology") -> Topology:
    """`value`, a `Topology`; anything else is a one-line ValueError (a name
    needs its scale-up domain: `topology` parses it)."""
    if not isinstance(value, Topology):
        raise ValueError(f"{key}={value!r} must be a strategies.Topology "
                         f"({', '.join(TOPOLOGIES)}; `strategies.topology` parses a name)")
    return value


def topology(name: str, scale_up_domain, **params) -> Topology:
    """The topology `name` (system.topology) for a scale-up domain of
    `scale_up_domain` GPUs with its own parameters (`Topology.of`)."""
    return topology_class(name).of(scale_up_domain, **params)


# ------------------------------------------------------------------- routing


class Routing(Strategy):
    """How the scale-out fabric spreads a collective's flows over equal-cost paths."""

    collides: eqx.AbstractClassVar[bool]  # flows can share a link by chance

    @abc.abstractmethod
    def flow_slowdown(self, k_flows, m_links, overhead=0.0, exact=False) -> jax.Array:
        """Slowdown of a collective of `k_flows` elephant flows over `m_links` links."""


class Ecmp(Routing):
    """Each flow hashed onto one path: balls into bins (`_ecmp.ecmp_slowdown`);
    `exact` as `ecmp_expected_max_load` (False: its smooth form, the same
    eagerly and under jit)."""

    name: ClassVar[str] = "ecmp"
    collides: ClassVar[bool] = True

    def flow_slowdown(self, k_flows, m_links, overhead=0.0, exact=False) -> jax.Array:
        checks.non_negative("overhead", overhead)
        return ecmp_slowdown(k_flows, m_links, exact)


# Packet spraying and adaptive routing spread each flow over every link, so the
# busiest link carries k/m flows (slowdown 1). ASSUMPTION: 0 extra cost; a real
# deployment pays reordering/probe overhead, pass `overhead` to model it.
class _Spreading(Routing):
    collides: ClassVar[bool] = False

    def flow_slowdown(self, k_flows, m_links, overhead=0.0, exact=False) -> jax.Array:
        """1 + `overhead`."""
        checks.non_negative("overhead", overhead)
        return 1.0 + checks.as_float(overhead) + 0.0 * checks.as_float(k_flows)


class Spray(_Spreading):
    """Packet spraying: every packet on its own path."""

    name: ClassVar[str] = "spray"


class Adaptive(_Spreading):
    """Adaptive routing: flows follow the least loaded path."""

    name: ClassVar[str] = "adaptive"


ROUTING_CLASSES = (Ecmp, Spray, Adaptive)
ROUTINGS = tuple(c.name for c in ROUTING_CLASSES)


def routing(value, key: str = "system.routing") -> Routing:
    """The routing named `value` (or `value` itself if it is a `Routing`)."""
    return parse(key, value, Routing, ROUTING_CLASSES)


# ------------------------------------------------------------------- pipeline schedules


class Schedule(Strategy):
    """A pipeline schedule: its bubble and the micro-batches the first stage holds.

    `pp` stages, `micro_batches` m per step, `interleave` v virtual stages per
    GPU (read by `Interleaved` only), `micro_batch_s` t_mb: one micro-batch's
    forward and backward on one stage.
    """

    interleaves: ClassVar[bool] = False  # runs v > 1 virtual stages per GPU
    # its stage-to-stage sends overlap another chunk's compute, so only the
    # pipeline's fill and drain wait for them
    overlaps_p2p: ClassVar[bool] = False
    weight_copies: ClassVar[float] = 1.0  # copies of the stage's weights each GPU holds
    # the MoE all-to-alls of one micro-batch overlap an adjacent micro-batch's
    # compute: always (`overlaps_all_to_all`), or where it pairs micro-batches and
    # the plan asks for it (`combines_all_to_all`, `parallel.ep_overlap`:
    # Megatron-Core's combined 1F1B)
    overlaps_all_to_all: ClassVar[bool] = False
    combines_all_to_all: ClassVar[bool] = False

    @abc.abstractmethod
    def bubble_s(self, pp, interleave, micro_batch_s, t=EXACT) -> jax.Array:
        """Idle time of the pipeline per step."""

    def in_flight_micro_batches(self, micro_batches, pp, interleave, t=EXACT) -> jax.Array:
        """Micro-batches whose activations the first stage holds at once: min(p, m)."""
        return smooth_min(pp, micro_batches, t)

    def exposed_all_to_all_s(self, time_s, overlap_s, t=EXACT, combined=False) -> jax.Array:
        """The part of the MoE all-to-alls' `time_s` left on the critical path
        (`overlap_s`: compute another micro-batch could hide it under; `combined`:
        the plan's `ep_overlap`)."""
        if self.overlaps_all_to_all or (combined and self.combines_all_to_all):
            return smooth_max(time_s - overlap_s, 0.0, t, 0.5 * (time_s + overlap_s))
        return time_s


class GPipe(Schedule):
    """All forwards, then all backwards (Huang et al. 2019): (p-1) t_mb idle,
    fraction (p-1)/(m+p-1) of the step; every micro-batch in flight."""

    name: ClassVar[str] = "gpipe"

    def bubble_s(self, pp, interleave, micro_batch_s, t=EXACT) -> jax.Array:
        return (pp - 1.0) * micro_batch_s

    def in_flight_micro_batches(self, micro_batches, pp, interleave, t=EXACT) -> jax.Array:
        return micro_batches


class OneFOneB(Schedule):
    """One forward, one backward (PipeDream-Flush): GPipe's bubble, at most p in flight."""

    name: ClassVar[str] = "1f1b"
    combines_all_to_all: ClassVar[bool] = True

    def bubble_s(self, pp, interleave, micro_batch_s, t=EXACT) -> jax.Array:
        return (pp - 1.0) * micro_batch_s


class Interleaved(Schedule):
    """1F1B over v virtual stages per GPU (Narayanan et al. 2021): (p-1) t_mb / v
    idle; p (1 + (p-1)/(p v)) in flight (Korthikanti et al. 2022, section 4.2.3)."""

    name: ClassVar[str] = "interleaved"
    interleaves: ClassVar[bool] = True
    # Megatron-LM overlaps the interleaved schedule's sends with the next
    # chunk's compute (--overlap-p2p-communication, on by default)
    overlaps_p2p: ClassVar[bool] = True
    combines_all_to_all: ClassVar[bool] = True

    def bubble_s(self, pp, interleave, micro_batch_s, t=EXACT) -> jax.Array:
        return (pp - 1.0) * micro_batch_s / interleave

    def in_flight_micro_batches(self, micro_batches, pp, interleave, t=EXACT) -> jax.Array:
        return smooth_min(pp * (1.0 + (pp - 1.0) / (pp * interleave)), micro_batches, t)


class ZeroBubble(Schedule):
    """ZB-H1 (Qi et al. 2023): (p-1)(F + B - 2W) = (p-1) t_mb / 3 idle with
    F = W = t_mb/3, B = 2 t_mb/3; 1F1B's memory."""

    name: ClassVar[str] = "zero_bubble"

    def bubble_s(self, pp, interleave, micro_batch_s, t=EXACT) -> jax.Array:
        return (pp - 1.0) * micro_batch_s / 3.0


class DualPipe(Schedule):
    """DeepSeek-V3 (Table 2): (p/2 - 1)(F&B + B - 3W) = (p/2 - 1) 2 t_mb / 3 idle,
    p + 1 in flight, two copies of the weights; the MoE all-to-alls overlap the
    other micro-batch's compute."""

    name: ClassVar[str] = "dualpipe"
    weight_copies: ClassVar[float] = 2.0
    overlaps_p2p: ClassVar[bool] = True  # a forward and a backward chunk overlap
    overlaps_all_to_all: ClassVar[bool] = True

    def bubble_s(self, pp, interleave, micro_batch_s, t=EXACT) -> jax.Array:
        # max(p/2 - 1, 0) turns at p = 2, a count: not relaxed, it is piecewise
        # linear between integers already (a smooth max put 0.03 s of bubble on
        # DeepSeek-V3's pp = 2 at t = 0.1, and the relaxed step fell and rose
        # between pp 1 and 2)
        return jnp.maximum(pp / 2.0 - 1.0, 0.0) * 2.0 * micro_batch_s / 3.0

    def in_flight_micro_batches(self, micro_batches, pp, interleave, t=EXACT) -> jax.Array:
        return smooth_min(pp + 1.0, micro_batches, t)


SCHEDULE_CLASSES = (GPipe, OneFOneB, Interleaved, ZeroBubble, DualPipe)
SCHEDULES = tuple(c.name for c in SCHEDULE_CLASSES)


def schedule(value, key: str = "parallel.schedule") -> Schedule:
    """The schedule named `value` (or `value` itself if it is a `Schedule`)."""
    return parse(key, value, Schedule, SCHEDULE_CLASSES)


# ------------------------------------------------------------------- recomputation


class Recompute(Strategy):
    """What backward recomputes instead of storing (Korthikanti et al. 2022)."""

    # forwards of each layer per micro-batch, its TP/CP/EP communication with it
    layer_forwards: eqx.AbstractClassVar[float]
    @property
    @abc.abstractmethod
    def attention_forwards(self) -> float:
        """Forwards of the attention core (the scores) per micro-batch."""
    # False: only the layer input is stored, the layer is recomputed whole
    keeps_layer_activations: ClassVar[bool] = True
    # False: the attention core's activations are recomputed, not stored
    keeps_attention_core: ClassVar[bool] = True

    @property
    def moe_forwards(self) -> float:
        """Forwards of each MoE block per micro-batch: its dispatch and combine
        run again with it (the layer's, unless a module recomputes the MoE block)."""
        return self.layer_forwards

    def modules(self, model) -> tuple:
        """The `RecomputeModule`s whose activations backward does not keep on
        `model` (none unless selective)."""
        return ()

    def reruns(self) -> tuple:
        """The layer parts (`RERUN_PARTS`) backward runs again whose seconds the
        step prices (`compute.rerun_parts_s`); none: `extra_forward_s` needs no parts."""
        return ()

    @abc.abstractmethod
    def extra_forward_s(self, layers_s, attention_forward_s, parts_s=None):
        """Forward time backward adds, from a stage's layer (GEMM) forward time
        and its attention core's (and, for the parts of `reruns`, `parts_s`:
        {part: the stage's forward seconds of it})."""

    @abc.abstractmethod
    def extra_flops_per_token(self, model) -> jax.Array:
        """FLOPs per token recomputation adds to the model's (what HFU counts)."""


class NoRecompute(Recompute):
    name: ClassVar[str] = "none"
    layer_forwards: ClassVar[float] = 1.0
    attention_forwards: ClassVar[float] = 1.0

    def extra_forward_s(self, layers_s, attention_forward_s, parts_s=None):
        return 0.0

    def extra_flops_per_token(self, model) -> jax.Array:
        return jnp.zeros(())


# ---------------------------------------------- recomputation by module (Megatron-Core)
# What one layer keeps for backward, by tensor (`Transformer.activation_terms`):
# the per-head Q, K, V (on MLA: the up-projections' outputs), the attention
# output, the FFN's activations (the first GEMM's output and the second's
# input), the attention kernel's own (scores or softmax statistics), the norms'
# inputs, the norms' outputs (the QKV and first FFN GEMMs' inputs), the dropout
# masks and MLA's latents.
ACTIVATION_TERMS = ("qkv", "attention_output", "ffn", "scores", "norms", "norm_outputs",
                    "dropout", "latents")
# The parts of a layer's forward backward may run again, each priced by
# `compute.rerun_parts_s` and counted in FLOPs by `rerun_flops_per_token`.
RERUN_PARTS = ("attention_core", "up_projections", "norms", "norm_requant", "dense_ffn",
               "dense_activation", "router", "permute", "routed_experts", "expert_activation",
               "expert_requant", "shared_experts")
LAYER_KINDS = ("all", "dense", "moe")  # the layers a module is in


class RecomputeModule(Strategy):
    """One of Megatron-Core's `recompute_modules` (`TransformerConfig.
    recompute_modules`, read under `recompute_granularity = "selective"`): in
    the layers of its kind (`layers`: every layer, the dense layers or the MoE
    layers), the activations it stops keeping (`dropped_bytes`, from the
    layer's `ACTIVATION_TERMS`) and the parts of the forward backward runs
    again (`reruns`, of `RERUN_PARTS`). Megatron-Core checkpoints `moe_act`,
    `layernorm` and `mla_up_proj` by discarding their output (freed once its
    consumer has read it, recomputed from the input the layer keeps anyway:
    `discards_output`), the others normally (their input kept, everything
    inside recomputed). A module inside another (`contains`: `moe` holds
    `moe_act` and `shared_experts`) adds nothing beside it."""

    layers: eqx.AbstractClassVar[str]
    reruns: eqx.AbstractClassVar[tuple]
    discards_output: eqx.AbstractClassVar[bool]
    contains: ClassVar[tuple] = ()
    # the module's EP dispatch and combine run again with it
    repeats_exchange: ClassVar[bool] = False

    @abc.abstractmethod
    def dropped_bytes(self, model, terms: dict) -> dict:
        """{term: bytes} of one layer of its kind's `terms` (`Transformer.
        activation_terms`, bytes per layer per micro-batch) it does not keep."""


class CoreAttention(RecomputeModule):
    """`core_attn`: the attention core (scores, softmax) recomputed from the
    stored Q, K, V (Korthikanti et al. 2022's selective recomputation); with a
    fused kernel it keeps only the softmax statistics anyway."""

    name: ClassVar[str] = "core_attn"
    layers: ClassVar[str] = "all"
    reruns: ClassVar[tuple] = ("attention_core",)
    discards_output: ClassVar[bool] = False

    def dropped_bytes(self, model, terms):
        return {"scores": terms["scores"]}


class MlaUpProjection(RecomputeModule):
    """`mla_up_proj`: MLA's up projections and RoPE: the per-head Q, K, V the
    attention core reads, recomputed from the stored latents (MLA only)."""

    name: ClassVar[str] = "mla_up_proj"
    layers: ClassVar[str] = "all"
    reruns: ClassVar[tuple] = ("up_projections",)
    discards_output: ClassVar[bool] = True

    def dropped_bytes(self, model, terms):
        return {"qkv": terms["qkv"]}


class LayerNorm(RecomputeModule):
    """`layernorm`: the input and pre-MLP norms' outputs (the QKV and first FFN
    GEMMs' inputs), recomputed from their stored inputs; in fp8 the GEMMs keep
    the wide input and quantise it again in backward (TE's save-original-input)."""

    name: ClassVar[str] = "layernorm"
    layers: ClassVar[str] = "all"
    reruns: ClassVar[tuple] = ("norms", "norm_requant")
    discards_output: ClassVar[bool] = True

    def dropped_bytes(self, model, terms):
        return {"norm_outputs": terms["norm_outputs"]}


class MoeActivation(RecomputeModule):
    """`moe_act`: the routed experts' activation function: its output (the
    second grouped GEMM's input) recomputed from the first GEMM's stored
    output; in fp8 the GEMM quantises it again in backward."""

    name: ClassVar[str] = "moe_act"
    layers: ClassVar[str] = "moe"
    reruns: ClassVar[tuple] = ("expert_activation", "expert_requant")
    discards_output: ClassVar[bool] = True

    def dropped_bytes(self, model, terms):
        # of the FFN term (6 f gated, 4 f plain, f the routed and shared
        # widths), the second GEMM's input (2 f) of the routed experts' share
        return {"ffn": terms["ffn"] * _expert_share(model, model.top_k) * 2.0
                / ffn_term_elements(model)}


class DenseMlp(RecomputeModule):
    """`mlp`: a dense layer's MLP (MoE layers keep theirs), recomputed from its
    stored input."""

    name: ClassVar[str] = "mlp"
    layers: ClassVar[str] = "dense"
    reruns: ClassVar[tuple] = ("dense_ffn", "dense_activation")
    discards_output: ClassVar[bool] = False

    def dropped_bytes(self, model, terms):
        return {"ffn": terms["ffn"]}


class SharedExperts(RecomputeModule):
    """`shared_experts`: the shared experts' MLP in an MoE layer."""

    name: ClassVar[str] = "shared_experts"
    layers: ClassVar[str] = "moe"
    reruns: ClassVar[tuple] = ("shared_experts",)
    discards_output: ClassVar[bool] = False

    def dropped_bytes(self, model, terms):
        return {"ffn": terms["ffn"] * _expert_share(model, model.shared_experts)}


class MoeBlock(RecomputeModule):
    """`moe`: the whole MoE block (router, dispatch, experts, combine),
    recomputed from its stored input: its all-to-alls run again."""

    name: ClassVar[str] = "moe"
    layers: ClassVar[str] = "moe"
    reruns: ClassVar[tuple] = ("router", "permute", "routed_experts", "expert_activation",
                               "shared_experts")
    discards_output: ClassVar[bool] = False
    contains: ClassVar[tuple] = ("moe_act", "shared_experts")
    repeats_exchange: ClassVar[bool] = True

    def dropped_bytes(self, model, terms):
        return {"ffn": terms["ffn"]}


def _expert_share(model, experts) -> jax.Array:
    """`experts` of the top_k routed + shared experts a token runs through (0
    on a model without them)."""
    return experts / jnp.maximum(model.top_k + model.shared_experts, 1.0)


def ffn_term_elements(model) -> jax.Array:
    """Elements of the FFN term per unit of FFN width (`Transformer.
    activation_terms`): the first GEMM's output (2 f gated, f plain) and the
    second's input (f), 2 bytes each: 6 gated, 4 plain."""
    return 6.0 if model.gated else 4.0


RECOMPUTE_MODULE_CLASSES = (CoreAttention, MlaUpProjection, LayerNorm, MoeActivation, DenseMlp,
                            SharedExperts, MoeBlock)
RECOMPUTE_MODULES = tuple(c.name for c in RECOMPUTE_MODULE_CLASSES)


def recompute_module_names(value, key: str = "training.recompute_modules") -> str:
    """`training.recompute_modules`: "mla_up_proj,mlp" (as a scenario table
    writes it) or a sequence of `RECOMPUTE_MODULES` (Megatron-Core's names),
    written back comma-separated in `RECOMPUTE_MODULES`' order (one spelling a
    set; "" none); an unknown module is a one-line error naming the key."""
    names = tuple(s.strip() for s in value.split(",") if s.strip()) if isinstance(value, str) \
        else tuple(str(v) for v in value)
    for n in names:
        if n not in RECOMPUTE_MODULES:
            raise ValueError(f"{key}={','.join(names)!r}: {n!r} is not one of "
                             f"{', '.join(RECOMPUTE_MODULES)}")
    return ",".join(n for n in RECOMPUTE_MODULES if n in names)


def recompute_modules(value, key: str = "training.recompute_modules") -> tuple:
    """The `RecomputeModule`s named by `value` (`recompute_module_names`), less
    those inside another named one (`RecomputeModule.contains`)."""
    by_name = {c.name: c for c in RECOMPUTE_MODULE_CLASSES}
    names = [n for n in recompute_module_names(value, key).split(",") if n]
    inside = {c for n in names for c in by_name[n].contains}
    return tuple(by_name[n]() for n in names if n not in inside)


def layer_share(module: RecomputeModule, moe):
    """1 in a layer the module is in, 0 elsewhere (`moe`: True for an MoE layer,
    an array of them too)."""
    moe = jnp.asarray(moe)
    if module.layers == "dense":
        return jnp.where(moe, 0.0, 1.0)
    if module.layers == "moe":
        return jnp.where(moe, 1.0, 0.0)
    return jnp.ones(moe.shape)


def rerun_flops_per_token(model, parts) -> jax.Array:
    """Matrix FLOPs per token (the model's convention: GEMMs and attention
    scores; norms, activations, the router and permutes count none) of running
    the layer `parts` (`RERUN_PARTS`) again over the model's layers of each."""
    up = sum(2.0 * k * n * c for k, n, _, c in model.attention.up_projections(model))
    flops = {"attention_core": model.blocks * model.attention_score_flops_per_token(),
             "up_projections": model.blocks * up,
             "dense_ffn": model.dense_blocks * 2.0 * model.dense_ffn_params(),
             "routed_experts": model.moe_blocks * 2.0 * model.top_k * model.expert_params(),
             "shared_experts": (model.moe_blocks * 2.0 * model.shared_experts
                                * model.expert_params())}
    return sum((flops[p] for p in parts if p in flops), jnp.zeros(()))


class SelectiveRecompute(Recompute):
    """Megatron-Core's selective granularity: the `modules` named
    (`training.recompute_modules`, `RECOMPUTE_MODULES`) recomputed in
    backward, each owning what it stops keeping and what it runs again. None
    named: the attention core (Korthikanti et al. 2022; Megatron-Core's
    default `core_attn`), and on MLA DeepSeek-V3's recomputation of the
    up-projected Q, K, V and the norms with it (section 3.2.3: their bytes;
    its time and FLOPs the attention core's, as before the modules)."""

    name: ClassVar[str] = "selective"
    layer_forwards: ClassVar[float] = 1.0
    # Megatron-Core's names, comma-separated (`recompute_module_names`); "" default
    names: str = eqx.field(static=True, default="", converter=recompute_module_names)

    @property
    def attention_forwards(self) -> float:
        return 2.0 if not self.names or "core_attn" in self.names.split(",") else 1.0

    @property
    def keeps_attention_core(self) -> bool:
        return self.attention_forwards == 1.0

    @property
    def moe_forwards(self) -> float:
        return 1.0 + float(any(m.repeats_exchange for m in recompute_modules(self.names)))

    def modules(self, model) -> tuple:
        if self.names:
            return recompute_modules(self.names)
        return (CoreAttention(), *((MlaUpProjection(), LayerNorm())
                                   if model.attention.recomputes_projections else ()))

    def reruns(self) -> tuple:
        if not self.names:
            return ()
        return tuple(p for p in RERUN_PARTS
                     if any(p in m.reruns for m in recompute_modules(self.names)))

    def extra_forward_s(self, layers_s, attention_forward_s, parts_s=None):
        if not self.names:
            return attention_forward_s
        return sum((parts_s[p] for p in self.reruns()), 0.0)

    def extra_flops_per_token(self, model) -> jax.Array:
        if not self.names:
            return model.blocks * model.attention_score_flops_per_token()
        return rerun_flops_per_token(model, self.reruns())


class FullRecompute(Recompute):
    """Every layer's forward run again in backward from its stored input."""

    name: ClassVar[str] = "full"
    layer_forwards: ClassVar[float] = 2.0
    attention_forwards: ClassVar[float] = 2.0
    keeps_layer_activations: ClassVar[bool] = False
    keeps_attention_core: ClassVar[bool] = False

    def extra_forward_s(self, layers_s, attention_forward_s, parts_s=None):
        return layers_s + attention_forward_s

    def extra_flops_per_token(self, model) -> jax.Array:
        return model.forward_flops_per_token() - model.logits_flops_per_token()


RECOMPUTE_CLASSES = (NoRecompute, SelectiveRecompute, FullRecompute)
RECOMPUTES = tuple(c.name for c in RECOMPUTE_CLASSES)


def recompute(value, key: str = "training.recompute") -> Recompute:
    """The recomputation named `value` (or `value` itself if it is a `Recompute`)."""
    return parse(key, value, Recompute, RECOMPUTE_CLASSES)
