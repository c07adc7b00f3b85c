"""Hardware as pytrees: a chip, a tier of the network, a system, and cited presets.

Every number is a float leaf, so a cost is differentiable with respect to it.
Bandwidths are bytes per second per GPU in ONE direction (vendors quote NVLink
bidirectionally: we halve it). Peaks are vendor peaks; what is achievable is a
separate efficiency factor, calibrated where the reference gives a measurement
(see `_calibrated_efficiency`).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax

from . import _checks, strategies
from . import protocols as protocols_lib
from ._checks import float_field, strategy_field
from ._chip_specs import COMPUTE_UNITS as COMPUTE_UNITS
from ._chip_specs import COMPUTE_UNITS_BY_CHIP as COMPUTE_UNITS_BY_CHIP
from ._chip_specs import TDP_W as TDP_W
from ._chip_specs import GRACE_C2C_PER_GPU_Bps as GRACE_C2C_PER_GPU_Bps
from ._chip_specs import HOST_Bps as HOST_Bps
from ._chip_specs import PCIE3_X16_Bps as PCIE3_X16_Bps
from ._chip_specs import PCIE4_X16_Bps as PCIE4_X16_Bps
from ._chip_specs import PCIE5_X16_Bps as PCIE5_X16_Bps
from ._domains import (
    BANDWIDTH,
    EFFICIENCY,
    LATENCY,
    MAX_GPUS,
    MIN_BPS,
    POSITIVE,
    UNIT,
    Domain,
    count,
    interval,
)
from ._measured import (
    _LATENCY,
    A100_MATMUL_EFFICIENCY,
    H100_500W_CLOCK_FRACTION,
    H100_BF16_FLOPS_PER_S,
    H100_FP8_FLOPS_PER_S,
    H100_MATMUL_EFFICIENCY,
    H100_TF32_FLOPS_PER_S,
    HBM_EFFICIENCY,
    HOPPER_ATTENTION_EFFICIENCY,
    NIC_EFFICIENCY,
    SCALE_OUT_LATENCY_S,
    SCALE_UP_LATENCY_S,
    V100_MATMUL_EFFICIENCY,
    GRAND_TETON_HBM_Bps,
    H100_HBM_Bps,
    H200_HBM_Bps,
    _calibrated_efficiency,
)
from ._measured import FBGEMM_H100_500W_GEMMS as FBGEMM_H100_500W_GEMMS
from ._measured import FP8_RELATIVE_EFFICIENCY as FP8_RELATIVE_EFFICIENCY
from ._measured import H100_GEMM_MICROBENCHMARK_EFFICIENCY as H100_GEMM_MICROBENCHMARK_EFFICIENCY
from ._measured import H200_GEMMS as H200_GEMMS
from .protocols import Nccl, Protocols
from .strategies import ROUTINGS as ROUTINGS
from .strategies import TOPOLOGIES as TOPOLOGIES
from .strategies import Adaptive, Routing, Topology, TwoTier
from .units import GB, Gbps

# Compute constants shared by every chip unless its preset says otherwise
# (docs/sources.md has each source):
# - HBM_EFFICIENCY (`_measured`, with the other measured and fitted constants).
# - ATTENTION_EFFICIENCY: FlashAttention-2 (Dao 2023) reaches 50-73% of the
#   A100's peak in its kernel benchmarks (forward and backward together nearer
#   the low end); FlashAttention-3 (Shah et al. 2024) up to 75% of H100's in
#   forward. 0.6 over forward + backward is our reading of both: assumption
#   within the published range.
# - KERNEL_OVERHEAD_S: fixed launch + tail cost of one CUDA kernel, a few
#   microseconds (assumption; `codesign calibrate compute` measures it).
# - HBM reserve: 2 GiB for the CUDA context and communicator buffers plus 5% of
#   capacity for allocator fragmentation (assumption).
# - HOST_Bps, COMPUTE_UNITS: a custom chip's host link and GEMM units (`_chip_specs`).
ATTENTION_EFFICIENCY = 0.6
MAX_NARROW_PEAK_RATIO = 4.0  # 8-bit / 16-bit peak: twice the largest any chip has
KERNEL_OVERHEAD_S = 4e-6
HBM_RESERVE_FIXED_BYTES = 2 * 2**30
HBM_RESERVE_FRACTION = 0.05


def default_hbm_reserve_bytes(hbm_bytes):
    """Context and communicator buffers plus allocator fragmentation (assumption)."""
    return HBM_RESERVE_FIXED_BYTES + HBM_RESERVE_FRACTION * hbm_bytes


class Chip(eqx.Module):
    """One accelerator.

    `matmul_efficiency` is the fraction of peak a large, well-shaped GEMM
    achieves; `compute.py` lowers it for small GEMMs (see `compute.gemm_time_s`).
    `attention_efficiency` is the fraction of the 16-bit peak a fused attention
    kernel (FlashAttention) achieves over forward and backward;
    `hbm_efficiency` the fraction of `hbm_Bps` a streaming (memory-bound)
    kernel achieves; `kernel_overhead_s` the fixed cost of one kernel (launch
    and tail); `hbm_reserve_bytes` the HBM a training process cannot use for
    its tensors (CUDA context, communicator buffers, allocator fragmentation);
    `host_Bps` the link between the chip and its host CPU's memory (PCIe, or a
    Grace CPU's NVLink-C2C), per direction: what offloading to host memory
    moves over.
    """

    # dense 16-bit (bf16/fp16) tensor peak, vendor; a [system] key, so a chip that
    # does not exist yet can be described
    peak_flops_per_s: jax.Array = float_field("system.peak_flops_per_s", POSITIVE,
                                              unit="FLOP/s")
    # dense 8-bit peak (fp8, or int8 where no fp8)
    peak_fp8_flops_per_s: jax.Array = float_field("system.peak_fp8_flops_per_s", POSITIVE,
                                                  unit="FLOP/s")
    # HBM capacity per GPU (`hbm_reserve_bytes` follows it unless given)
    hbm_bytes: jax.Array = float_field("system.hbm_bytes", POSITIVE)
    hbm_Bps: jax.Array = float_field("system.hbm_Bps", POSITIVE)
    # large-GEMM fraction of peak
    matmul_efficiency: jax.Array = float_field("system.matmul_efficiency", EFFICIENCY,
                                               default=0.8)
    # board power, vendor figure
    tdp_w: jax.Array = float_field("chip.tdp_w", POSITIVE, scenario=False, default=700.0,
                                   kw_only=True)
    # dense 32-bit matmul peak (TF32 where it exists); default half the 16-bit peak
    peak_fp32_flops_per_s: jax.Array = float_field("chip.peak_fp32_flops_per_s", POSITIVE,
                                                   scenario=False, default=None, kw_only=True)
    # fused attention kernel, fraction of 16-bit peak; default ATTENTION_EFFICIENCY
    attention_efficiency: jax.Array = float_field("system.attention_efficiency", EFFICIENCY,
                                                  default=None, kw_only=True)
    # achieved fraction of hbm_Bps for streaming kernels
    hbm_efficiency: jax.Array = float_field("system.hbm_efficiency", EFFICIENCY,
                                            default=HBM_EFFICIENCY, kw_only=True)
    kernel_overhead_s: jax.Array = float_field("system.kernel_overhead_s", interval(0.0, 1.0),
                                               default=KERNEL_OVERHEAD_S, kw_only=True)
    # HBM not available to the training tensors; default `default_hbm_reserve_bytes`
    hbm_reserve_bytes: jax.Array = float_field("system.hbm_reserve_bytes", interval(0.0, 1e15),
                                               default=None, kw_only=True)
    # the chip's link to its host CPU's memory, per direction; default HOST_Bps
    host_Bps: jax.Array = float_field("system.host_Bps", POSITIVE, default=HOST_Bps,
                                      kw_only=True)
    # the share of the full-power part's sustained clocks a board under a lower
    # power limit keeps (its tensor cores' and attention's throughput; the
    # datasheet peaks, which MFU counts against, stay)
    clock_fraction: jax.Array = float_field("system.clock_fraction", EFFICIENCY, default=1.0,
                                            kw_only=True)
    # units that each run one GEMM tile at a time (SMs; a TPU's MXUs); default
    # COMPUTE_UNITS
    compute_units: jax.Array = float_field("system.compute_units", count(1e6),
                                           default=COMPUTE_UNITS, kw_only=True)

    def __post_init__(self):
        if self.peak_fp32_flops_per_s is None:
            self.peak_fp32_flops_per_s = self.peak_flops_per_s / 2
        if self.attention_efficiency is None:
            self.attention_efficiency = ATTENTION_EFFICIENCY
        if self.hbm_reserve_bytes is None:
            self.hbm_reserve_bytes = default_hbm_reserve_bytes(self.hbm_bytes)


    def __check_init__(self):
        """The physical ratios of the peaks (`scenario._relations` checks them
        traced): an 8-bit peak at most `MAX_NARROW_PEAK_RATIO` x the 16-bit one,
        a 32-bit matrix peak at most the 16-bit one."""
        peak = _checks.concrete(self.peak_flops_per_s)
        if peak is None:
            return
        _checks.check("system.peak_fp8_flops_per_s", self.peak_fp8_flops_per_s,
                      lambda v: v <= MAX_NARROW_PEAK_RATIO * peak,
                      f"must not exceed {MAX_NARROW_PEAK_RATIO:g} x system.peak_flops_per_s="
                      f"{_checks.fmt(peak)} (an 8-bit peak is 2x the 16-bit one on every "
                      "chip so far)")
        fp32 = _checks.concrete(self.peak_fp32_flops_per_s)
        if fp32 is not None and fp32 > peak:
            raise ValueError(f"system.peak_flops_per_s={_checks.fmt(peak)} must not be below "
                             f"the chip's 32-bit matrix peak {_checks.fmt(fp32)} "
                             "(chip.peak_fp32_flops_per_s)")


class Tier(eqx.Module):
    """One level of the network, seen from one GPU.

    The alpha-beta-gamma parameters of a collective on this tier are
    alpha = `latency_s`, beta = 1 / (`bandwidth_Bps` x `efficiency`),
    gamma = 1 / `reduction_Bps`. `in_network_efficiency` > 0 means the switches
    reduce in the network (NVLink SHARP / IB SHARP) at that fraction of
    `bandwidth_Bps`; 0 means they cannot.
    """

    # per GPU, per direction, vendor peak
    bandwidth_Bps: jax.Array = float_field("bandwidth_Bps", BANDWIDTH)
    latency_s: jax.Array = float_field("latency_s", LATENCY)  # per message (alpha)
    # achievable fraction of bandwidth_Bps for ring-like algorithms
    efficiency: jax.Array = float_field("efficiency", EFFICIENCY, default=1.0)
    # bytes reduced per s by the GPU; 1e30 = reduction free (calibrate's folded gamma)
    reduction_Bps: jax.Array = float_field("reduction_Bps", Domain(MIN_BPS, 1e30), default=1e12)
    # 0 = no in-network reduction
    in_network_efficiency: jax.Array = float_field("in_network_efficiency", UNIT, scenario=False,
                                                   default=0.0)

    @property
    def effective_Bps(self) -> jax.Array:
        return self.bandwidth_Bps * self.efficiency


class System(eqx.Module):
    """A training machine: chips, a scale-up domain, a scale-out fabric, pods.

    `scale_up_domain` GPUs share the fast tier (an NVLink domain, a TPU slice);
    the `scale_out` tier joins domains, one NIC (rail) per GPU. `topology`
    (`strategies.Topology`) is how the fabric joins them: a `Clos` carries its
    pods and oversubscription, a `Torus` its shape. `routing`
    (`strategies.Routing`, or its name): `Ecmp` hashes each flow onto one path
    (collisions, see `fabric.group_flow_slowdown`); `Adaptive` / `Spray` spread
    every flow.
    """

    chip: Chip
    gpus: jax.Array = float_field("system.gpus", count(MAX_GPUS), unit="GPUs")
    scale_up_domain: jax.Array = float_field("system.scale_up_domain", count(MAX_GPUS),
                                             unit="GPUs")
    # its keys are system.scale_up_* and system.scale_out_*
    scale_up: Tier = eqx.field(metadata={"prefix": "system.scale_up_"})
    scale_out: Tier = eqx.field(metadata={"prefix": "system.scale_out_"})
    gpus_per_node: jax.Array = float_field("system.gpus_per_node", count(MAX_GPUS), unit="GPUs")
    # its own keys are a Clos's system.pod_size and system.oversubscription
    topology: Topology = strategy_field("system.topology", strategies.as_topology,
                                        strategies.TOPOLOGY_CLASSES, default=TwoTier())
    routing: Routing = strategy_field("system.routing", strategies.routing,
                                      strategies.ROUTING_CLASSES, default=Adaptive())
    # the collective library's protocols (`collectives` costs each, takes the fastest)
    protocols: Protocols = strategy_field("system.protocols", protocols_lib.protocols,
                                          protocols_lib.PROTOCOLS_CLASSES, default=Nccl())

    def __check_init__(self):
        self.topology.check_domain(self.scale_up_domain)


# --------------------------------------------------------------------------- presets
# Sources (docs/sources.md lists each; "vendor" = the chip's or system's
# datasheet, "nccl-tests" = published nccl-tests bus bandwidths):
# - Latency: a "2 us per-hop latency" is the usual figure for the scale-out network and
#   "roughly 20x less bandwidth at 3-5x the latency" leaving the chassis; we take
#   2 us out and 2/4 = 0.5 us inside (the middle of 3-5x). Assumption, calibrate
#   with `codesign calibrate` on a real machine.
# - Reduction speed: the incoming chunk arrives over the link into the reduction
#   kernel, which reads the local operand from HBM and writes the sum: two HBM
#   passes per byte, reduction_Bps = hbm_Bps / 2 (model assumption).
# - Efficiency: published nccl-tests figures where they exist (calibrated by
#   `_calibrated_efficiency`); else borrowed from the same link generation and
#   labelled as such.
# - matmul_efficiency: fitted to Megatron-LM 2019 and Narayanan et al. 2021 (the
#   only throughput figures in the seeds; see A100_MATMUL_EFFICIENCY below), and
#   for H100-class chips to four llm-foundry runs (H100_MATMUL_EFFICIENCY).





# Dense 32-bit matmul peaks (vendor datasheets): V100 15.7 TFLOP/s FP32 (no
# TF32), A100 156 TF32, H100/H800 494.7 TF32, B200/GB200/B300/GB300 half their
# 16-bit peak (TF32); TPUs have no 32-bit matrix unit: three bf16 passes (assumption).
def _gpu_chip(name, bf16, fp8, hbm_bytes, hbm_Bps, matmul_efficiency, fp32,
              attention_efficiency=None, *, host_Bps, clock_fraction=1.0):
    return Chip(bf16, fp8, hbm_bytes, hbm_Bps, matmul_efficiency, tdp_w=TDP_W[name],
                peak_fp32_flops_per_s=fp32, attention_efficiency=attention_efficiency,
                host_Bps=host_Bps, compute_units=COMPUTE_UNITS_BY_CHIP[name],
                clock_fraction=clock_fraction)


def _tier(bandwidth_Bps, latency_s, efficiency, hbm_Bps, in_network_efficiency=0.0):
    return Tier(bandwidth_Bps, latency_s, efficiency, hbm_Bps / 2, in_network_efficiency)


@dataclasses.dataclass(frozen=True)
class Preset:
    system: System
    description: str
    sources: dict  # field -> where its number comes from
    chip: str  # the chip's name (a label: the pytree holds only its numbers)


def _dgx_v100() -> Preset:
    hbm_Bps = 0.9e12  # vendor: V100 SXM3 HBM2 0.9 TB/s
    chip_name = "V100-SXM3-32GB"
    chip = _gpu_chip(chip_name,
                     125e12,  # vendor: V100 tensor-core peak 125 TFLOP/s
                     125e12,  # no 8-bit tensor-core path on V100: same as fp16
                     32 * GB, hbm_Bps, V100_MATMUL_EFFICIENCY, 15.7e12,  # vendor: 32 GB
                     host_Bps=PCIE3_X16_Bps)  # vendor: PCIe Gen3 x16
    up_bw = 300 * GB / 2  # vendor: NVLink2 via NVSwitch 300 GB/s bidir
    # No nccl-tests figure for DGX-2H: borrow DGX A100's calibrated factor.
    up_eff = _calibrated_efficiency(230 * GB, 300 * GB, 2.0e12 / 2)
    return Preset(
        System(chip, 512, 16, _tier(up_bw, SCALE_UP_LATENCY_S, up_eff, hbm_Bps),
               # vendor: 8x 100 Gb/s IB per 16-GPU node ("100 GB/s between servers")
               _tier(8 * 100 * Gbps / 16, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),
               16),
        "DGX-2H: 16x V100 32 GB on NVSwitch, 8x 100 Gb/s IB per node (Megatron-LM 2019)",
        {"chip": "datasheet (V100)", "scale_up.efficiency": "borrowed from dgx-a100 (assumption)",
         "scale_out": "vendor: 8x100 Gb/s per 16 GPUs", "host_Bps": "PCIe Gen3 x16",
         "latency": _LATENCY},
        chip_name,
    )


def _dgx_a100() -> Preset:
    hbm_Bps = 2.0e12  # vendor: A100 80 GB HBM2e 2.0 TB/s
    chip_name = "A100-SXM4-80GB"
    chip = _gpu_chip(chip_name, 312e12,  # vendor: 312 TFLOP/s bf16 dense
                     624e12,  # vendor datasheet: int8 dense 624 TOPS (no fp8)
                     80 * GB, hbm_Bps, A100_MATMUL_EFFICIENCY, 156e12,
                     host_Bps=PCIE4_X16_Bps)  # vendor: PCIe Gen4 x16
    up_bw = 600 * GB / 2  # vendor: NVLink3 600 GB/s bidir
    return Preset(
        System(chip, 1024, 8,
               _tier(up_bw, SCALE_UP_LATENCY_S,
                     _calibrated_efficiency(230 * GB, up_bw, hbm_Bps / 2), hbm_Bps),
               # vendor: 8x HDR 200 Gb/s per node, one per GPU
               _tier(200 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),
               8),
        "DGX A100 80 GB: NVLink3 + NVSwitch, 8x HDR 200 Gb/s per node",
        {"chip": "datasheet (A100)", "scale_up.efficiency": "nccl-tests: 8x A100 busbw ~230 GB/s",
         "scale_out.efficiency": "nccl-tests: NDR NIC 46-48 GB/s of 50 (same factor for HDR)",
         "host_Bps": "PCIe Gen4 x16", "latency": _LATENCY},
        chip_name,
    )


def _h100_chip(name: str, hbm_bytes=80 * GB, hbm_Bps=H100_HBM_Bps, clock_fraction=1.0) -> Chip:
    return _gpu_chip(name, H100_BF16_FLOPS_PER_S, H100_FP8_FLOPS_PER_S, hbm_bytes, hbm_Bps,
                     H100_MATMUL_EFFICIENCY, H100_TF32_FLOPS_PER_S, HOPPER_ATTENTION_EFFICIENCY,
                     host_Bps=PCIE5_X16_Bps,  # vendor: PCIe Gen5 x16
                     clock_fraction=clock_fraction)


def _nvlink4_node(chip: Chip, hbm_Bps) -> System:
    """Eight H100-class GPUs on NVLink4 + NVSwitch (NVLS), one 400 Gb/s NIC each:
    the NVLink efficiency calibrated to DGX H100's nccl-tests ring busbw (~370
    GB/s) with H100's reduction speed, NVLS to its ~480 GB/s, the NIC to NDR's
    46-48 GB/s; the tiers reduce at the chip's `hbm_Bps` / 2."""
    up_bw = 900 * GB / 2  # vendor: NVLink4 900 GB/s bidir
    nvls_eff = 480 * GB / (2 * 7 / 8) / up_bw  # vendor: NVLS all-reduce busbw ~480 GB/s
    return System(chip, 1024, 8,
                  _tier(up_bw, SCALE_UP_LATENCY_S,
                        _calibrated_efficiency(370 * GB, up_bw, H100_HBM_Bps / 2), hbm_Bps,
                        nvls_eff),
                  _tier(400 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),  # NDR
                  8)


def _dgx_h100() -> Preset:
    chip_name = "H100-SXM5-80GB"
    return Preset(
        _nvlink4_node(_h100_chip(chip_name), H100_HBM_Bps),
        "DGX H100: NVLink4 + NVSwitch (NVLS), 8x NDR 400 Gb/s per node",
        {"chip": "datasheet (H100)", "scale_up.efficiency": "nccl-tests: ring busbw ~370 GB/s",
         "scale_up.in_network_efficiency": "nccl-tests: NVLS busbw ~480 GB/s",
         "scale_out.efficiency": "nccl-tests: NDR NIC 46-48 GB/s", "host_Bps": "PCIe Gen5 x16",
         "latency": _LATENCY},
        chip_name,
    )


def _grand_teton_h100() -> Preset:
    # Meta's Grand Teton H100 servers, as torchtitan's benchmark page describes
    # them: 8 H100 SXM5 with 96 GB of HBM2e at 2.4 TB/s, the default 500 W power
    # limit, NVLink4 + NVSwitch, a 400 Gb/s RDMA NIC per GPU. Sustained clocks:
    # H100_500W_CLOCK_FRACTION (FBGEMM at 500 W against our 700 W H200); the
    # NVLink and NIC efficiencies dgx-h100's
    chip_name = "H100-SXM5-96GB-500W"
    chip = _h100_chip(chip_name, 96 * GB, GRAND_TETON_HBM_Bps, H100_500W_CLOCK_FRACTION)
    return Preset(
        _nvlink4_node(chip, GRAND_TETON_HBM_Bps),
        "Grand Teton H100: 8x H100 96 GB HBM2e at 500 W, NVLink4 + NVSwitch, 400 Gb/s per GPU "
        "(torchtitan's benchmarks)",
        {"chip": "torchtitan's benchmark page: H100 96 GB HBM2e 2.4 TB/s at 500 W",
         "clock_fraction": "FBGEMM's 500 W H100 GEMMs against our 700 W H200's",
         "scale_up.efficiency": "borrowed from dgx-h100 (assumption)",
         "scale_out": "torchtitan: 400 Gb/s RDMA per GPU (NDR's factor)",
         "host_Bps": "PCIe Gen5 x16", "latency": _LATENCY},
        chip_name,
    )


def _dgx_h200() -> Preset:
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100's tensor cores and peaks
    # (989 TFLOP/s bf16, 1,979 fp8, 494.7 TF32 dense; the datasheet quotes them
    # with sparsity, twice these), 141 GB HBM3e at 4.8 TB/s, NVLink4 900 GB/s;
    # DGX H200: 8x ConnectX-7 400 Gb/s NDR, one per GPU. No nccl-tests figure for
    # DGX H200 here: DGX H100's factors (same NVLink4 and NVSwitch)
    chip_name = "H200-SXM-141GB"
    chip = _gpu_chip(chip_name, H100_BF16_FLOPS_PER_S, H100_FP8_FLOPS_PER_S, 141 * GB,
                     H200_HBM_Bps,
                     H100_MATMUL_EFFICIENCY,  # H100-class (see above)
                     H100_TF32_FLOPS_PER_S, HOPPER_ATTENTION_EFFICIENCY,
                     host_Bps=PCIE5_X16_Bps)  # vendor: PCIe Gen5 x16
    return Preset(
        _nvlink4_node(chip, H200_HBM_Bps),
        "DGX H200: 8x H200 141 GB HBM3e, NVLink4 + NVSwitch (NVLS), 8x NDR 400 Gb/s per node",
        {"chip": "datasheet (H200 SXM)",
         "matmul_efficiency": "H100's, fitted to llm-foundry's H100 runs (borrowed)",
         "scale_up.efficiency": "borrowed from dgx-h100 (assumption)",
         "scale_out.efficiency": "nccl-tests: NDR NIC 46-48 GB/s", "host_Bps": "PCIe Gen5 x16",
         "latency": _LATENCY},
        chip_name,
    )


def _h800() -> Preset:
    hbm_Bps = H100_HBM_Bps
    up_bw = 400 * GB / 2  # vendor: H800 NVLink 400 GB/s bidir nominal
    chip_name = "H800"
    return Preset(
        System(_h100_chip(chip_name), 2048, 8,
               # DeepSeek-V3: ~160 GB/s achieved over NVLink
               _tier(up_bw, SCALE_UP_LATENCY_S, 160 * GB / up_bw, hbm_Bps),
               # DeepSeek-V3: IB 50 GB/s per GPU (taken as achieved: ratio 3.2x)
               _tier(50 * GB, SCALE_OUT_LATENCY_S, 1.0, hbm_Bps),
               8),
        "H800 nodes as DeepSeek-V3 describes them: NVLink ~160 GB/s, IB 50 GB/s per GPU",
        {"chip": "datasheet (H800)", "scale_up": "DeepSeek-V3: 160 GB/s achieved",
         "scale_out": "DeepSeek-V3: 50 GB/s", "host_Bps": "PCIe Gen5 x16 (H100's)",
         "latency": _LATENCY},
        chip_name,
    )


def _b200_chip(name, bf16, fp8, hbm_bytes, host_Bps) -> Chip:
    """A Blackwell (B200, GB200) or Blackwell Ultra (B300, GB300) GPU: both
    8 TB/s HBM3e, TF32 half the 16-bit peak, H100's efficiencies."""
    return _gpu_chip(name, bf16, fp8, hbm_bytes, 8e12,  # vendor: 8 TB/s
                     H100_MATMUL_EFFICIENCY, bf16 / 2,  # borrowed from H100 (assumption)
                     HOPPER_ATTENTION_EFFICIENCY, host_Bps=host_Bps)


def _nvlink5_tier(hbm_Bps: float) -> Tier:
    up_bw = 1800 * GB / 2  # vendor: NVLink5 1.8 TB/s bidir
    # No nccl-tests figure for NVLink5: borrow DGX H100's ring factor.
    eff = _calibrated_efficiency(370 * GB, 450 * GB, H100_HBM_Bps / 2)
    nvls = 480 * GB / (2 * 7 / 8) / (450 * GB)  # likewise from DGX H100 NVLS
    return _tier(up_bw, SCALE_UP_LATENCY_S, eff, hbm_Bps, nvls)


def _dgx_b200() -> Preset:
    chip_name = "B200"
    chip = _b200_chip(chip_name, 2.25e15,  # vendor: ~2.25 PFLOP/s dense 16-bit
                      4.5e15,  # vendor datasheet: fp8 dense ~4.5 PFLOP/s
                      180 * GB,  # vendor: 180-192 GB
                      PCIE5_X16_Bps)  # vendor: Xeon 8570 hosts, PCIe Gen5 x16
    return Preset(
        System(chip, 1024, 8, _nvlink5_tier(8e12),
               _tier(400 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),  # vendor
               8),
        "DGX B200: NVLink5, 8x 400 Gb/s per node",
        {"chip": "datasheet (B200)", "scale_up.efficiency": "borrowed from dgx-h100 (assumption)",
         "scale_out": "vendor: 8x 400 Gb/s", "host_Bps": "PCIe Gen5 x16", "latency": _LATENCY},
        chip_name,
    )


def _gb200_nvl72() -> Preset:
    chip_name = "GB200"
    chip = _b200_chip(chip_name, 2.5e15,  # vendor: ~2.5 PFLOP/s dense 16-bit
                      5e15,  # vendor datasheet: fp8 dense ~5 PFLOP/s
                      186 * GB,  # vendor: ~186 GB
                      GRACE_C2C_PER_GPU_Bps)  # NVLink-C2C 900 GB/s bidir / 2 GPUs, halved
    return Preset(
        System(chip, 1152, 72, _nvlink5_tier(8e12),
               # vendor: 400-800 Gb/s per GPU; we take 400 Gb/s (ConnectX-7 class)
               _tier(400 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),
               4),  # 4 GPUs per compute tray
        "GB200 NVL72: 72-GPU NVLink5 scale-up domain, 400 Gb/s per GPU out",
        {"chip": "datasheet (GB200)", "scale_up_domain": "vendor: 72 GPUs",
         "scale_up.efficiency": "borrowed from dgx-h100 (assumption)",
         "host_Bps": "NVLink-C2C 900 GB/s bidir shared by 2 GPUs (split: assumption)",
         "latency": _LATENCY},
        chip_name,
    )


# Blackwell Ultra (B300 in HGX/DGX B300, GB300 in GB300 NVL72). Dense peaks are
# the vendor's sparse figures halved. GB300 NVL72 (NVIDIA GB300 NVL72
# specifications, per 72-GPU rack): FP8 720 PFLOP/s sparse, BF16 360 sparse,
# 20-21 TB HBM3e at 576 TB/s, one ConnectX-8 800 Gb/s SuperNIC per GPU: per GPU
# 2.5e15 BF16 and 5e15 FP8 dense, 576/72 = 8 TB/s. HGX B300 (NVIDIA HGX B300
# specifications, per 8 GPUs): FP8 72 PFLOP/s sparse, BF16 36 sparse, up to
# 2.3 TB HBM3e, 8x ConnectX-8 800 Gb/s (1.6 TB/s networking, both directions):
# per GPU 2.25e15 BF16, 4.5e15 FP8 dense. Both: 288 GB HBM3e per GPU at up to
# 8 TB/s (NVIDIA technical blog, "Inside NVIDIA Blackwell Ultra"; 2.3 TB / 8 and
# 20.7 TB / 72 agree; a cloud provider lists 270 GB (B300) and 279 GB (GB300)
# visible, near the 271.5 GB the default reserve, 2 GiB + 5%, leaves to the
# tensors). NVLink5 1.8 TB/s per GPU, as B200's (HGX B300 specifications).
# Tensor-core efficiencies and the NVLink5 tier's are borrowed exactly as B200 /
# GB200 borrow them (assumption: no Blackwell Ultra measurement).
BLACKWELL_ULTRA_HBM_BYTES = 288 * GB


def _dgx_b300() -> Preset:
    chip_name = "B300"
    chip = _b200_chip(chip_name, 36e15 / 8 / 2,  # vendor (HGX B300): BF16 36 PF sparse / 8 GPUs
                      72e15 / 8 / 2,  # vendor (HGX B300): FP8 72 PF sparse / 8 GPUs
                      BLACKWELL_ULTRA_HBM_BYTES,  # vendor: 288 GB (2.3 TB per 8 GPUs)
                      PCIE5_X16_Bps)  # Xeon 6776P hosts: PCIe Gen5 x16 (assumption: x16 each)
    return Preset(
        System(chip, 1024, 8, _nvlink5_tier(8e12),
               # vendor: 8x ConnectX-8 800 Gb/s per node, one per GPU
               _tier(800 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),
               8),
        "DGX B300: 8x Blackwell Ultra 288 GB, NVLink5, 8x ConnectX-8 800 Gb/s per node",
        {"chip": "HGX B300 specifications (per 8 GPUs; sparse halved), Blackwell Ultra blog",
         "matmul_efficiency": "H100's, borrowed as dgx-b200 does (assumption)",
         "attention_efficiency": "FA2 on Hopper, borrowed as dgx-b200 does (assumption)",
         "scale_up.efficiency": "borrowed from dgx-h100 as dgx-b200 does (assumption)",
         "scale_out": "vendor: 8x ConnectX-8 800 Gb/s",
         "scale_out.efficiency": "nccl-tests NDR factor (every NIC generation)",
         "host_Bps": "PCIe Gen5 x16 (host CPUs' generation; assumption)",
         "tdp_w": "1100 W, third-party figure (assumption)", "latency": _LATENCY},
        chip_name,
    )


def _gb300_nvl72() -> Preset:
    chip_name = "GB300"
    chip = _b200_chip(chip_name, 360e15 / 72 / 2,  # vendor: BF16 360 PF sparse per rack
                      720e15 / 72 / 2,  # vendor: FP8 720 PF sparse per rack
                      BLACKWELL_ULTRA_HBM_BYTES,  # vendor: 288 GB (20.7 TB per rack)
                      GRACE_C2C_PER_GPU_Bps)  # NVLink-C2C 900 GB/s bidir / 2 GPUs, halved
    return Preset(
        System(chip, 1152, 72, _nvlink5_tier(8e12),
               # vendor: one ConnectX-8 800 Gb/s SuperNIC per GPU (72 per rack)
               _tier(800 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),
               4),  # 4 GPUs per compute tray, as gb200-nvl72
        "GB300 NVL72: 72 Blackwell Ultra 288 GB in one NVLink5 domain, 800 Gb/s per GPU out",
        {"chip": "GB300 NVL72 specifications (per rack; sparse halved), Blackwell Ultra blog",
         "scale_up_domain": "vendor: 72 GPUs",
         "matmul_efficiency": "H100's, borrowed as gb200-nvl72 does (assumption)",
         "attention_efficiency": "FA2 on Hopper, borrowed as gb200-nvl72 does (assumption)",
         "scale_up.efficiency": "borrowed from dgx-h100 as gb200-nvl72 does (assumption)",
         "scale_out": "vendor: one ConnectX-8 800 Gb/s per GPU",
         "scale_out.efficiency": "nccl-tests NDR factor (every NIC generation)",
         "host_Bps": "NVLink-C2C 900 GB/s bidir shared by 2 GPUs (split: assumption)",
         "tdp_w": "1400 W, NVIDIA at Hot Chips 2025", "latency": _LATENCY},
        chip_name,
    )


# the TPU systems (3D and 2D tori of ICI links) are `_tpu_presets`': they build on
# the helpers above, so they are imported once these exist
from ._tpu_presets import _tpu_v4, _tpu_v5e, _tpu_v5p, _tpu_v6e  # noqa: E402

_PRESETS = {
    "dgx-v100": _dgx_v100, "dgx-a100": _dgx_a100, "dgx-h100": _dgx_h100,
    "grand-teton-h100": _grand_teton_h100, "dgx-h200": _dgx_h200, "h800": _h800,
    "dgx-b200": _dgx_b200, "gb200-nvl72": _gb200_nvl72,
    "dgx-b300": _dgx_b300, "gb300-nvl72": _gb300_nvl72, "tpu-v4": _tpu_v4, "tpu-v5p": _tpu_v5p,
    "tpu-v5e": _tpu_v5e, "tpu-v6e": _tpu_v6e,
}
PRESET_NAMES = tuple(_PRESETS)


def preset(name: str) -> Preset:
    """The preset `name` (see `PRESET_NAMES`) with its description and sources."""
    _checks.known("system preset", name, PRESET_NAMES)
    return _PRESETS[name]()


def system(name: str) -> System:
    """The `System` of preset `name`."""
    return preset(name).system


def chip_family(chip: str) -> str:
    """The family of a chip name: up to its first '-' ("H100-SXM5-80GB" ->
    "H100"; A100, H800, V100, B200, tpu...), what `codesign validate` groups
    its rows by and `codesign.uncertainty` takes the spread of."""
    return chip.split("-")[0]
