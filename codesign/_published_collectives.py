"""The published figures of one collective `codesign validate` sets the model
beside: nccl-tests bus bandwidths that calibrate the tiers' efficiencies, and
all-reduce times from public multi-node nccl-tests logs (predictions)."""

from __future__ import annotations

from ._figures import Check


def nccl_vendor(name, preset, algorithm, tier, ranks, busbw_GBps, note):
    """A published nccl-tests bus bandwidth of an 8 GiB all-reduce (a calibration row)."""
    return Check(name, "nccl-tests (vendor figures)", "busbw_GBps", busbw_GBps,
                 collective=(preset, "all_reduce", algorithm, tier, ranks, 8 * 2**30),
                 calibration=True, note=note)


# Public nccl-tests all_reduce_perf logs across nodes (8 GPUs and 8 NICs a node,
# NCCL's defaults): the out-of-place time at 8 KiB, 1 MiB, 64 MiB and 1 GiB, as
# printed; each log re-stated with its provenance under tests/fixtures/nccl/public.
_NCCL_LOGS = {
    "nccl-tests-309-qoofyk-2": ("NVIDIA/nccl-tests issue 309 (qoofyk, 2025-05-20): Dell "
                                "XE9680, 2 x 8 H100, 8 CX-7 400 Gb/s IB per node, NCCL 2.26.2"),
    "nccl-tests-309-qoofyk-4": ("NVIDIA/nccl-tests issue 309 (qoofyk, 2025-05-23): 4 x 8 H100, "
                                "8 GPU-NIC pairs per node, NCCL 2.26.2"),
    "nccl-tests-309-gj-aion": ("NVIDIA/nccl-tests issue 309 (gj-aion, 2025-06-18): H100 nodes on "
                               "400 Gb/s IB, NCCL's defaults"),
    "oci-hpc-oke": ("oracle-quickstart/oci-hpc-oke README.md at 001cbb9b: 2 x 8 A100-SXM4-40GB "
                    "on OCI RDMA (16 VFs a node; link speed not stated)"),
}
_NCCL_LOGS_NOTE = ("NCCL's defaults (auto algorithm and protocol); the model costs the "
                   "all-reduce two-tier over the nodes (`traffic.cost_on`, 8 GPUs a domain)")


def nccl_log(log, preset, nodes, n_bytes, time_us):
    """A nccl-tests all-reduce time across `nodes` nodes of 8 GPUs (a prediction)."""
    size = f"{n_bytes / 2**30:g} GiB" if n_bytes >= 2**30 else (
        f"{n_bytes / 2**20:g} MiB" if n_bytes >= 2**20 else f"{n_bytes / 2**10:g} KiB")
    chip = "A100" if "a100" in preset else "H100"
    return Check(f"nccl-tests all-reduce {size}, {nodes} x 8 {chip} ({log})", _NCCL_LOGS[log],
                 "all_reduce_s", time_us * 1e-6,
                 collective=(preset, "all_reduce", "auto", None, nodes * 8, n_bytes),
                 note=_NCCL_LOGS_NOTE)
