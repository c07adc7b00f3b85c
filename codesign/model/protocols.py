"""The wire protocols of a collective library, as strategies (`Strategy` and
`parse` from `strategies`): `collectives` costs every algorithm once per
protocol and runs it in the fastest. `Nccl`'s LL / LL128 / Simple, each with
its base latency per collective, per-step latency and bandwidth share (NCCL's
tuning model); `AlphaBeta`: one protocol, the tier's alpha and beta alone. A
name is parsed once, by `protocols` (the scenario key `system.protocols`).
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx

from .strategies import Strategy, parse


class Protocols(Strategy):
    """The wire protocols a collective library chooses among for each message.

    Protocol q of an algorithm of family f (`_collective_rows._Row.family`:
    "ring", "tree", "nvls") costs

        base_s[f][q] + scale_up_step[q] x (its steps' alpha on the scale-up tier;
                       scale_up_step_across[q] once the group spans domains)
          + scale_out_step[f][q] x (its steps' alpha on the scale-out tier, also
                                    a flat algorithm's once it leaves the domain)
          + (its bytes' beta terms) / bandwidth_share[q] + (its reduction)

    so a tier's `latency_s` is the per-step latency of the protocol whose
    ratios are 1 (Simple's, for NCCL). A base of None: the family cannot run
    that protocol. Every cost vanishes at one rank (the base counts min(log2 p, 1)).
    """

    protocol_names: eqx.AbstractClassVar[tuple[str, ...]]
    base_s: eqx.AbstractClassVar[dict]  # family -> seconds per collective, per protocol
    scale_up_step: eqx.AbstractClassVar[tuple[float, ...]]
    scale_up_step_across: eqx.AbstractClassVar[tuple[float, ...]]
    scale_out_step: eqx.AbstractClassVar[dict]  # family -> ratio per protocol
    bandwidth_share: eqx.AbstractClassVar[tuple[float, ...]]
    # op -> the algorithms the library runs, `auto`'s candidates (None: every
    # algorithm `collectives` defines; a named algorithm is costed either way)
    runs: eqx.AbstractClassVar[dict | None]


class Nccl(Protocols):
    """NCCL's three protocols, with the constants of its tuning model
    (src/graph/tuning.cc, NCCL 2.18-2.28: baseLat, hwLat, the LL / LL128
    bandwidth factors). LL: 8-byte stores of 4 data bytes and a flag, the lowest
    latency at a quarter of the bandwidth; LL128: 120 of every 128 bytes (0.92);
    Simple: the full bandwidth, the highest latency. Base latencies (us,
    LL / LL128 / Simple): Ring 6.6 / 14 / 8.4, Tree 6.8 / 14 / 8.4, NVLS
    Simple only, 25 (NCCL's NVLS hwLat on NVLink, which has base 0). Per-step
    latencies (hwLat): NVLink 0.6 / 1.9 / 3.4 us (Ring's), the LL step x 1.8
    once a communicator spans nodes (NCCL: intraLat *= 1.8 for LL when nNodes
    > 1); network Ring 2.7 / 4.0 / 14 us, Tree 5.0 / 8.5 / 14 us, NVLSTree 14 us;
    read as ratios to Simple's (a tier's `latency_s`). Not modelled: the
    "plateau" x 1.9 of a multi-node Simple ring all-reduce, PAT's own
    constants (it takes the ring's), and the per-architecture caps on LL / LL128
    bandwidth."""

    name: ClassVar[str] = "nccl"
    protocol_names: ClassVar[tuple[str, ...]] = ("LL", "LL128", "Simple")
    base_s: ClassVar[dict] = {"ring": (6.6e-6, 14.0e-6, 8.4e-6),
                              "tree": (6.8e-6, 14.0e-6, 8.4e-6),
                              "nvls": (None, None, 25.0e-6)}
    scale_up_step: ClassVar[tuple[float, ...]] = (0.6 / 3.4, 1.9 / 3.4, 1.0)
    scale_up_step_across: ClassVar[tuple[float, ...]] = (1.8 * 0.6 / 3.4, 1.9 / 3.4, 1.0)
    scale_out_step: ClassVar[dict] = {"ring": (2.7 / 14.0, 4.0 / 14.0, 1.0),
                                      "tree": (5.0 / 14.0, 8.5 / 14.0, 1.0),
                                      "nvls": (1.0, 1.0, 1.0)}  # Simple only
    bandwidth_share: ClassVar[tuple[float, ...]] = (0.25, 0.92, 1.0)
    # NCCL's algorithms (src/device and tuning.cc: Ring, Tree, NVLS, NVLSTree,
    # PAT; CollNet not modelled) as `collectives` defines them: a ring or tree
    # inside a domain, and across domains the rail ring (NCCL's rings enter and
    # leave a node on each GPU's own NIC), the rail tree (intra-node chains under
    # an inter-node tree) and NVLSTree; reduce-scatter and all-gather by ring,
    # rail ring, and PAT (NCCL 2.23's Parallel Aggregated Trees, log2 p steps
    # with one GPU per node) costed as recursive halving / doubling; all-to-all,
    # send / receive by direct peer-to-peer sends; broadcast and reduce by ring.
    # Recursive doubling and halving-doubling all-reduces and the sequential
    # hierarchical forms are not NCCL's: `auto` does not pick them here.
    runs: ClassVar[dict | None] = {
        "all_reduce": ("ring", "tree", "in_network", "rail_ring", "rail_tree", "nvls_tree"),
        "reduce_scatter": ("ring", "recursive_doubling", "rail_ring"),
        "all_gather": ("ring", "recursive_doubling", "rail_ring"),
        "all_to_all": ("direct",),
        "broadcast": ("ring",),
        "reduce": ("ring",),
        "send_recv": ("direct",),
    }


class AlphaBeta(Protocols):
    """One protocol and no base latency: the tier's alpha, beta and gamma alone
    (a torus's ICI, a fabric measured by `calibrate`)."""

    name: ClassVar[str] = "alpha_beta"
    protocol_names: ClassVar[tuple[str, ...]] = ("alpha_beta",)
    base_s: ClassVar[dict] = {"ring": (0.0,), "tree": (0.0,), "nvls": (0.0,)}
    scale_up_step: ClassVar[tuple[float, ...]] = (1.0,)
    scale_up_step_across: ClassVar[tuple[float, ...]] = (1.0,)
    scale_out_step: ClassVar[dict] = {"ring": (1.0,), "tree": (1.0,), "nvls": (1.0,)}
    bandwidth_share: ClassVar[tuple[float, ...]] = (1.0,)
    runs: ClassVar[dict | None] = None


PROTOCOLS_CLASSES = (Nccl, AlphaBeta)
PROTOCOLS = tuple(c.name for c in PROTOCOLS_CLASSES)


def protocols(value, key: str = "system.protocols") -> Protocols:
    """The protocols named `value` (or `value` itself if it is a `Protocols`)."""
    return parse(key, value, Protocols, PROTOCOLS_CLASSES)
