"""What a machine's links carry, held against a calibration (`calibrate.fit`).

After the fit (`check_line_rate`; the command line runs it with
`calibrate.check_holdout`): a fitted bandwidth above what the machine's links
carry is an `UnphysicalFit`. The bounds, per GPU and direction: scale_up, the
links' `bandwidth_Bps` (the vendor peak); scale_out, the GPU's share of its
node's NICs (`nic_rate_Bps`: NCCL runs a channel per NIC, so a ring's busbw
across nodes approaches the node's NIC aggregate, K NICs x their rate, for G
GPUs, and each of the model's g rails then carries K x rate / G); an
in-network fit, the same rate (its busbw = 2(p-1)/p algbw may exceed the links,
its algbw may not), on links whose switches reduce (`in_network_efficiency` >
0). `fit_within_line_rate` (what the command line runs) fits a link again with
its bandwidth held to its bound when the free fit is above it but the runs'
busbw is not above what the links carry (the other tier of a two-tier model set
every time, so the data bound that link only from below), and keeps it when it
holds its sizes out within `calibrate.MAX_HOLDOUT_ERROR`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import collectives
from ..model.hardware import System, Tier
from .calibrate import (
    FIT_STEPS,
    IN_NETWORK,
    MAX_HOLDOUT_ERROR,
    Calibration,
    Measurement,
    UnphysicalFit,
    fit,
    fit_key,
)

_LINKS = {"scale_up": "scale-up links (NVLink or ICI)", "scale_out": "NICs"}


def nic_rate_Bps(system: System, ranks_per_host: int) -> float:
    """The most a GPU's share of its node's NICs carries, per direction: the node's
    NIC aggregate (`gpus_per_node` x the per-GPU `scale_out.bandwidth_Bps`, one
    400 Gb/s NIC per GPU on a DGX H100: 8 x 50 GB/s) over the GPUs of the node
    that use them (`ranks_per_host`, at most the node's). NCCL runs a channel per
    NIC, so a ring across nodes moves each node's 2(p-1)/p n bytes through all
    of them at once: busbw up to the aggregate, g x this per rail of g GPUs."""
    per_node = float(system.gpus_per_node)
    return float(system.scale_out.bandwidth_Bps) * per_node / min(ranks_per_host, per_node)


def _runs_of(calibration: Calibration, key: str) -> list[Measurement]:
    return [p.measurement for p in calibration.predictions if fit_key(p.measurement) == key]


def _gpus_per_node(ms: Sequence[Measurement], system: System) -> int:
    """The GPUs of a node that share its NICs in these runs: the most ranks a log's
    '# Rank' lines put on one host (else --local-ranks), at most the node's."""
    return min(max(m.ranks_per_host or m.local_ranks for m in ms), int(system.gpus_per_node))


def line_rate_Bps(calibration: Calibration, key: str, system: System) -> float:
    """The most the fit `key`'s bandwidth may be on `system` (per GPU, per
    direction): scale_up, the links' `bandwidth_Bps`; scale_out, `nic_rate_Bps`;
    an in-network fit, its tier's."""
    t = key.removesuffix(IN_NETWORK)
    if t == "scale_out":
        return nic_rate_Bps(system, _gpus_per_node(_runs_of(calibration, key), system))
    return float(getattr(system, t).bandwidth_Bps)


def check_line_rate(calibration: Calibration, system: System, name: str) -> None:
    """An `UnphysicalFit` for a fitted bandwidth above what the tier's links in
    `system` carry (`line_rate_Bps`; `name` says which system): scale_up, the
    links' `bandwidth_Bps` (per GPU, per direction, the vendor peak); scale_out,
    the GPU's share of its node's NICs (`nic_rate_Bps`, the ranks per host the
    logs' '# Rank' lines give, else --local-ranks); an in-network fit (NVLS /
    SHARP), its tier's rate (each GPU sends its n bytes into the switch and
    receives the n reduced ones once: busbw = 2(p-1)/p algbw may exceed the
    link, algbw may not), on a tier whose switches reduce
    (`in_network_efficiency` > 0). More than the wires carry is a misread log
    (nodes of another size, another machine) or the wrong algorithm."""
    for key, f in calibration.tiers.items():
        t = key.removesuffix(IN_NETWORK)
        ms = _runs_of(calibration, key)
        links = getattr(system, t)
        line_rate = line_rate_Bps(calibration, key, system)
        per_node = ""
        if t == "scale_out":
            gpus = _gpus_per_node(ms, system)
            per_node = (f": {gpus} GPUs per node would move {gpus * f.bandwidth_Bps / 1e9:.1f} "
                        f"GB/s through its {float(system.gpus_per_node):g} x "
                        f"{float(links.bandwidth_Bps) / 1e9:.1f} GB/s of NICs")
        what = (f"the fit of {', '.join(sorted({m.source for m in ms}))} "
                f"({', '.join(sorted({m.algorithm for m in ms}))}) gives {t}")
        fix = "check --system (the machine), --local-ranks (GPUs per node) and --algorithm"
        if key != t and not float(links.in_network_efficiency) > 0:
            raise UnphysicalFit(f"{what} in-network (NVLS/SHARP) reduction, which the "
                                f"{_LINKS[t]} of {name} do not have: {fix}")
        if f.bandwidth_Bps > line_rate:
            kind = " in-network (NVLS/SHARP)" if key != t else ""
            raise UnphysicalFit(
                f"{what}{kind} bandwidth {f.bandwidth_Bps / 1e9:.1f} GB/s per GPU, above the "
                f"{line_rate / 1e9:.1f} GB/s line rate of the {_LINKS[t]} of {name}{per_node}; "
                f"{fix}{_hint(key, ms, links, _busbw_over(calibration, key, system))}")


def busbw_bound_Bps(calibration: Calibration, key: str, system: System) -> float:
    """The most busbw a ring-like run of the link fit `key` may report on `system`:
    the links' rate inside a node, the node's NIC aggregate across nodes
    (`gpus` x `nic_rate_Bps`: K NICs x their rate, see the module doc)."""
    rate = line_rate_Bps(calibration, key, system)
    if key == "scale_out":
        return rate * _gpus_per_node(_runs_of(calibration, key), system)
    return rate


def _busbw_over(calibration: Calibration, key: str, system: System) -> bool:
    """Whether a run of `key` reports a busbw (nccl-tests') above `busbw_bound_Bps`."""
    bound = busbw_bound_Bps(calibration, key, system)
    return any(float(collectives.busbw_Bps(m.op, m.size_bytes, m.time_s, m.ranks)) > bound
               for m in _runs_of(calibration, key))


def fit_within_line_rate(measurements: Sequence[Measurement], system: System, name: str, *,
                         prior: System | None = None, holdout_every: int = 3,
                         steps: int = FIT_STEPS,
                         max_error: float = MAX_HOLDOUT_ERROR) -> Calibration:
    """`fit`, checked by `check_line_rate`. A link fit above its line rate whose
    runs' busbw stays within what the links carry (`busbw_bound_Bps`) is fitted
    again with its bandwidth held to at most the line rate: where a two-tier
    model's other stream sets every time (the NVLink side of a 2-node rail ring
    on the prior's tier), the data bound the NIC only from below, and the free
    fit drifts above the wire. The bounded fit is kept when it holds its sizes
    out within `max_error` (its `ceiling_Bps` says so); otherwise, and for runs
    that report more busbw than the links carry, the `UnphysicalFit` stands."""
    result = fit(measurements, prior=prior, holdout_every=holdout_every, steps=steps)
    try:
        check_line_rate(result, system, name)
        return result
    except UnphysicalFit as refused:
        over = {k: line_rate_Bps(result, k, system) for k, f in result.tiers.items()
                if not f.in_network and f.bandwidth_Bps > line_rate_Bps(result, k, system)}
        if not over or any(_busbw_over(result, k, system) for k in over):
            raise
        bounded = fit(measurements, prior=prior, holdout_every=holdout_every, steps=steps,
                      ceilings={k: rate * (1.0 - 1e-6) for k, rate in over.items()})
        if max(bounded.tiers[k].holdout_error for k in over) > max_error:
            raise refused from None
    check_line_rate(bounded, system, name)
    return bounded


def _hint(key: str, ms: Sequence[Measurement], links: Tier, busbw_over: bool) -> str:
    """Why a fit of these runs may read above the line rate: an NVLS all-reduce
    fitted as a ring, GPUs per node that the log's hosts contradict, or a 2-node
    log of NCCL's default (tree) algorithm."""
    if key == "scale_up" and busbw_over and float(links.in_network_efficiency) > 0 and any(
            m.op == "all_reduce" for m in ms):
        return (" (--algorithm nvls if NCCL ran NVLink SHARP, whose busbw may reach "
                "2(p-1)/p x the links')")
    hosts = {(m.ranks_per_host, m.local_ranks) for m in ms
             if m.ranks_per_host and m.ranks_per_host != m.local_ranks}
    if key == "scale_out" and hosts:
        per_host, local = max(hosts)
        return (f" (the log's '# Rank' lines put {per_host} GPUs on each host, "
                f"--local-ranks {local})")
    if key == "scale_out" and busbw_over and any(
            m.ranks == 2 * (m.ranks_per_host or m.local_ranks) for m in ms):
        return (" (NCCL's default tree on 2 nodes reports busbw above the NICs; a log run "
                "with NCCL_ALGO=Ring measures the fabric)")
    return ""
