"""Hardware as pytrees: a chip, a tier of the network, a system (the cited presets
built from them are `presets`').

Every number is a float leaf, so a cost is differentiable with respect to it.
Bandwidths are bytes per second per GPU in ONE direction (vendors quote NVLink
bidirectionally: we halve it). Peaks are vendor peaks; what is achievable is a
separate efficiency factor, calibrated where the reference gives a measurement
(see `calibrated_efficiency`).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import checks
from ..checks import float_field, strategy_field
from ..chip_specs import ATTENTION_EXP_PER_S as ATTENTION_EXP_PER_S
from ..chip_specs import COMPUTE_UNITS as COMPUTE_UNITS
from ..chip_specs import COMPUTE_UNITS_BY_CHIP as COMPUTE_UNITS_BY_CHIP
from ..chip_specs import EXP_PER_S as EXP_PER_S
from ..chip_specs import TDP_W as TDP_W
from ..chip_specs import GRACE_C2C_PER_GPU_Bps as GRACE_C2C_PER_GPU_Bps
from ..chip_specs import HOST_Bps as HOST_Bps
from ..chip_specs import PCIE3_X16_Bps as PCIE3_X16_Bps
from ..chip_specs import PCIE4_X16_Bps as PCIE4_X16_Bps
from ..chip_specs import PCIE5_X16_Bps as PCIE5_X16_Bps
from ..domains import (
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
from ..measured import A100_MATMUL_EFFICIENCY as A100_MATMUL_EFFICIENCY
from ..measured import FBGEMM_H100_500W_GEMMS as FBGEMM_H100_500W_GEMMS
from ..measured import FP8_RELATIVE_EFFICIENCY as FP8_RELATIVE_EFFICIENCY
from ..measured import H100_GEMM_MICROBENCHMARK_EFFICIENCY as H100_GEMM_MICROBENCHMARK_EFFICIENCY
from ..measured import H100_MATMUL_EFFICIENCY as H100_MATMUL_EFFICIENCY
from ..measured import H200_GEMMS as H200_GEMMS
from ..measured import HBM_EFFICIENCY
from ..measured import HOPPER_ATTENTION_EFFICIENCY as HOPPER_ATTENTION_EFFICIENCY
from ..measured import NIC_EFFICIENCY as NIC_EFFICIENCY
from ..measured import SCALE_OUT_LATENCY_S as SCALE_OUT_LATENCY_S
from ..measured import SCALE_UP_LATENCY_S as SCALE_UP_LATENCY_S
from ..measured import V100_MATMUL_EFFICIENCY as V100_MATMUL_EFFICIENCY
from ..measured import calibrated_efficiency as calibrated_efficiency
from . import protocols as protocols_lib
from . import strategies
from .protocols import Nccl, Protocols
from .strategies import ROUTINGS as ROUTINGS
from .strategies import TOPOLOGIES as TOPOLOGIES
from .strategies import Adaptive, Routing, Topology, TwoTier

# Compute constants shared by every chip unless its preset says otherwise
# (docs/sources.md has each source):
# - HBM_EFFICIENCY (`measured`, with the other measured and fitted constants).
# - ATTENTION_EFFICIENCY: FlashAttention-2 (Dao 2023) reaches 50-73% of the
#   A100's peak in its kernel benchmarks (forward and backward together nearer
#   the low end); FlashAttention-3 (Shah et al. 2024) up to 75% of H100's in
#   forward. 0.6 over forward + backward is our reading of both: assumption
#   within the published range.
# - KERNEL_OVERHEAD_S: fixed launch + tail cost of one CUDA kernel, a few
#   microseconds (assumption; `codesign calibrate compute` measures it).
# - HBM reserve: 2 GiB for the CUDA context and communicator buffers plus 5% of
#   capacity for allocator fragmentation (assumption).
# - HOST_Bps, COMPUTE_UNITS: a custom chip's host link and GEMM units (`chip_specs`).
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
    moves over. `exp_per_s` the rate of the special-function units that
    compute the softmax's exponentials (0: not stated), `attention_exp_per_s`
    the rate at which `attention_efficiency` holds (a borrowed efficiency
    holds at the lender's rate): a fused kernel's exponentials cost
    1 / exp_per_s - 1 / attention_exp_per_s each beyond the efficiency
    (`attention.FlashAttention`).
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
    # dense FP4 (NVFP4) tensor peak, vendor; 0 on a chip without one (the
    # `training.fp8_recipe = "nvfp4"` GEMMs run at it and are refused at 0)
    peak_fp4_flops_per_s: jax.Array = float_field("chip.peak_fp4_flops_per_s",
                                                  interval(0.0, 1e20), scenario=False,
                                                  default=0.0, kw_only=True, unit="FLOP/s")
    # the special-function units' exponential rate per GPU (MUFU.EX2: the
    # softmax's exponentials in a fused attention kernel), vendor; 0 where no
    # figure is stated (attention then has no exponential term: `attention.FlashAttention`)
    exp_per_s: jax.Array = float_field("chip.exp_per_s", interval(0.0, 1e20), scenario=False,
                                       default=0.0, kw_only=True, unit="1/s")
    # the exponential rate `attention_efficiency` holds at: the rate of the chip
    # whose attention efficiency this one's is (itself, or the part it borrows
    # it from); 0 = `exp_per_s` (the chip's own)
    attention_exp_per_s: jax.Array = float_field("chip.attention_exp_per_s",
                                                 interval(0.0, 1e20), scenario=False,
                                                 default=0.0, kw_only=True, unit="1/s")
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
        peak = checks.concrete(self.peak_flops_per_s)
        if peak is None:
            return
        checks.check("system.peak_fp8_flops_per_s", self.peak_fp8_flops_per_s,
                      lambda v: v <= MAX_NARROW_PEAK_RATIO * peak,
                      f"must not exceed {MAX_NARROW_PEAK_RATIO:g} x system.peak_flops_per_s="
                      f"{checks.fmt(peak)} (an 8-bit peak is 2x the 16-bit one on every "
                      "chip so far)")
        fp32 = checks.concrete(self.peak_fp32_flops_per_s)
        if fp32 is not None and fp32 > peak:
            raise ValueError(f"system.peak_flops_per_s={checks.fmt(peak)} must not be below "
                             f"the chip's 32-bit matrix peak {checks.fmt(fp32)} "
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
#   `calibrated_efficiency`); else borrowed from the same link generation and
#   labelled as such.
# - matmul_efficiency: fitted to Megatron-LM 2019 and Narayanan et al. 2021 (the
#   only throughput figures in the seeds; see A100_MATMUL_EFFICIENCY below), and
#   for H100-class chips to four llm-foundry runs (H100_MATMUL_EFFICIENCY).





# Dense 32-bit matmul peaks (vendor datasheets): V100 15.7 TFLOP/s FP32 (no
# TF32), A100 156 TF32, H100/H800 494.7 TF32, B200/GB200/B300/GB300 half their
# 16-bit peak (TF32); TPUs have no 32-bit matrix unit: three bf16 passes (assumption).
def gpu_chip(name, bf16, fp8, hbm_bytes, hbm_Bps, matmul_efficiency, fp32,
              attention_efficiency=None, *, host_Bps, clock_fraction=1.0):
    """A preset GPU's `Chip` from its datasheet numbers (16-bit, 8-bit and 32-bit
    dense peaks in FLOP/s, HBM bytes and B/s), its measured matmul and attention
    efficiencies and host link; its power, compute units and exponential rates
    from the tables above, by `name`."""
    return Chip(bf16, fp8, hbm_bytes, hbm_Bps, matmul_efficiency, tdp_w=TDP_W[name],
                peak_fp32_flops_per_s=fp32, attention_efficiency=attention_efficiency,
                host_Bps=host_Bps, compute_units=COMPUTE_UNITS_BY_CHIP[name],
                clock_fraction=clock_fraction, exp_per_s=EXP_PER_S.get(name, 0.0),
                attention_exp_per_s=ATTENTION_EXP_PER_S.get(name, 0.0))


def preset_tier(bandwidth_Bps, latency_s, efficiency, hbm_Bps, in_network_efficiency=0.0):
    """A preset's `Tier`: its reductions run at half the HBM bandwidth `hbm_Bps`
    (read two operands, write one: an assumption, docs/sources.md)."""
    return Tier(bandwidth_Bps, latency_s, efficiency, hbm_Bps / 2, in_network_efficiency)


@dataclasses.dataclass(frozen=True)
class Preset:
    system: System
    description: str
    sources: dict  # field -> where its number comes from
    chip: str  # the chip's name (a label: the pytree holds only its numbers)
    # the vendor's dense peaks of the chip's other widths (FP6, FP4), FLOP/s by
    # name: data for `codesign presets`, not a knob; "fp4" (NVFP4) is also the
    # chip's `peak_fp4_flops_per_s` (`__post_init__`), MXFP4 / MXFP6 stay data
    other_peaks_flops_per_s: dict = dataclasses.field(default_factory=dict)
    # the collective library the platform runs where it is not NCCL (its
    # algorithms, protocols and tuning-model constants, as data; what `collectives`
    # costs is `system.protocols`): None for NCCL and XLA
    collective_library: dict | None = None

    def __post_init__(self):
        # the vendor's FP4 (NVFP4) peak, declared in other_peaks_flops_per_s, is
        # the chip's `peak_fp4_flops_per_s` (MXFP4 / MXFP6 stay data)
        fp4 = self.other_peaks_flops_per_s.get("fp4")
        if fp4 is not None:
            object.__setattr__(self, "system", eqx.tree_at(
                lambda s: s.chip.peak_fp4_flops_per_s, self.system, jnp.asarray(float(fp4))))


def chip_family(chip: str) -> str:
    """The family of a chip name: up to its first '-' ("H100-SXM5-80GB" ->
    "H100"; A100, H800, V100, B200, tpu...), what `codesign validate` groups
    its rows by and `codesign.uncertainty` takes the spread of."""
    return chip.split("-")[0]
