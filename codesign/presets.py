"""The system presets (`codesign presets` lists them): each a `hardware.System`
with its description and the source of every number. The GPU systems are here;
the TPU systems (tori of ICI links) are `_tpu_presets`'. `preset(name)` and
`system(name)` are how the rest of the package and a user read one."""

from __future__ import annotations

from . import checks
from ._amd_presets import mi300x_platform, mi325x_platform, mi355x_platform
from ._tpu_presets import tpu_v4, tpu_v5e, tpu_v5p, tpu_v6e
from .chip_specs import GRACE_C2C_PER_GPU_Bps, PCIE3_X16_Bps, PCIE4_X16_Bps, PCIE5_X16_Bps
from .measured import (
    A100_MATMUL_EFFICIENCY,
    H100_500W_CLOCK_FRACTION,
    H100_BF16_FLOPS_PER_S,
    H100_FP8_FLOPS_PER_S,
    H100_MATMUL_EFFICIENCY,
    H100_TF32_FLOPS_PER_S,
    HOPPER_ATTENTION_EFFICIENCY,
    LATENCY_SOURCE,
    NIC_EFFICIENCY,
    SCALE_OUT_LATENCY_S,
    SCALE_UP_LATENCY_S,
    V100_MATMUL_EFFICIENCY,
    GRAND_TETON_HBM_Bps,
    H100_HBM_Bps,
    H200_HBM_Bps,
    calibrated_efficiency,
)
from .model.hardware import Chip, Preset, System, Tier, gpu_chip, preset_tier
from .units import GB, Gbps


def _dgx_v100() -> Preset:
    hbm_Bps = 0.9e12  # vendor: V100 SXM3 HBM2 0.9 TB/s
    chip_name = "V100-SXM3-32GB"
    chip = gpu_chip(chip_name,
                     125e12,  # vendor: V100 tensor-core peak 125 TFLOP/s
                     125e12,  # no 8-bit tensor-core path on V100: same as fp16
                     32 * GB, hbm_Bps, V100_MATMUL_EFFICIENCY, 15.7e12,  # vendor: 32 GB
                     host_Bps=PCIE3_X16_Bps)  # vendor: PCIe Gen3 x16
    up_bw = 300 * GB / 2  # vendor: NVLink2 via NVSwitch 300 GB/s bidir
    # No nccl-tests figure for DGX-2H: borrow DGX A100's calibrated factor.
    up_eff = calibrated_efficiency(230 * GB, 300 * GB, 2.0e12 / 2)
    return Preset(
        System(chip, 512, 16, preset_tier(up_bw, SCALE_UP_LATENCY_S, up_eff, hbm_Bps),
               # vendor: 8x 100 Gb/s IB per 16-GPU node ("100 GB/s between servers")
               preset_tier(8 * 100 * Gbps / 16, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),
               16),
        "DGX-2H: 16x V100 32 GB on NVSwitch, 8x 100 Gb/s IB per node (Megatron-LM 2019)",
        {"chip": "datasheet (V100)", "scale_up.efficiency": "borrowed from dgx-a100 (assumption)",
         "scale_out": "vendor: 8x100 Gb/s per 16 GPUs", "host_Bps": "PCIe Gen3 x16",
         "latency": LATENCY_SOURCE},
        chip_name,
    )


def _dgx_a100() -> Preset:
    hbm_Bps = 2.0e12  # vendor: A100 80 GB HBM2e 2.0 TB/s
    chip_name = "A100-SXM4-80GB"
    chip = gpu_chip(chip_name, 312e12,  # vendor: 312 TFLOP/s bf16 dense
                     624e12,  # vendor datasheet: int8 dense 624 TOPS (no fp8)
                     80 * GB, hbm_Bps, A100_MATMUL_EFFICIENCY, 156e12,
                     host_Bps=PCIE4_X16_Bps)  # vendor: PCIe Gen4 x16
    up_bw = 600 * GB / 2  # vendor: NVLink3 600 GB/s bidir
    return Preset(
        System(chip, 1024, 8,
               preset_tier(up_bw, SCALE_UP_LATENCY_S,
                     calibrated_efficiency(230 * GB, up_bw, hbm_Bps / 2), hbm_Bps),
               # vendor: 8x HDR 200 Gb/s per node, one per GPU
               preset_tier(200 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),
               8),
        "DGX A100 80 GB: NVLink3 + NVSwitch, 8x HDR 200 Gb/s per node",
        {"chip": "datasheet (A100)", "scale_up.efficiency": "nccl-tests: 8x A100 busbw ~230 GB/s",
         "scale_out.efficiency": "nccl-tests: NDR NIC 46-48 GB/s of 50 (same factor for HDR)",
         "host_Bps": "PCIe Gen4 x16", "latency": LATENCY_SOURCE},
        chip_name,
    )


def _h100_chip(name: str, hbm_bytes=80 * GB, hbm_Bps=H100_HBM_Bps, clock_fraction=1.0) -> Chip:
    return gpu_chip(name, H100_BF16_FLOPS_PER_S, H100_FP8_FLOPS_PER_S, hbm_bytes, hbm_Bps,
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
                  preset_tier(up_bw, SCALE_UP_LATENCY_S,
                        calibrated_efficiency(370 * GB, up_bw, H100_HBM_Bps / 2), hbm_Bps,
                        nvls_eff),
                  preset_tier(400 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),  # NDR
                  8)


def _dgx_h100() -> Preset:
    chip_name = "H100-SXM5-80GB"
    return Preset(
        _nvlink4_node(_h100_chip(chip_name), H100_HBM_Bps),
        "DGX H100: NVLink4 + NVSwitch (NVLS), 8x NDR 400 Gb/s per node",
        {"chip": "datasheet (H100)", "scale_up.efficiency": "nccl-tests: ring busbw ~370 GB/s",
         "scale_up.in_network_efficiency": "nccl-tests: NVLS busbw ~480 GB/s",
         "scale_out.efficiency": "nccl-tests: NDR NIC 46-48 GB/s", "host_Bps": "PCIe Gen5 x16",
         "latency": LATENCY_SOURCE},
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
         "host_Bps": "PCIe Gen5 x16", "latency": LATENCY_SOURCE},
        chip_name,
    )


def _dgx_h200() -> Preset:
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100's tensor cores and peaks
    # (989 TFLOP/s bf16, 1,979 fp8, 494.7 TF32 dense; the datasheet quotes them
    # with sparsity, twice these), 141 GB HBM3e at 4.8 TB/s, NVLink4 900 GB/s;
    # DGX H200: 8x ConnectX-7 400 Gb/s NDR, one per GPU. No nccl-tests figure for
    # DGX H200 here: DGX H100's factors (same NVLink4 and NVSwitch)
    chip_name = "H200-SXM-141GB"
    chip = gpu_chip(chip_name, H100_BF16_FLOPS_PER_S, H100_FP8_FLOPS_PER_S, 141 * GB,
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
         "latency": LATENCY_SOURCE},
        chip_name,
    )


def _h800() -> Preset:
    hbm_Bps = H100_HBM_Bps
    up_bw = 400 * GB / 2  # vendor: H800 NVLink 400 GB/s bidir nominal
    chip_name = "H800"
    return Preset(
        System(_h100_chip(chip_name), 2048, 8,
               # DeepSeek-V3: ~160 GB/s achieved over NVLink
               preset_tier(up_bw, SCALE_UP_LATENCY_S, 160 * GB / up_bw, hbm_Bps),
               # DeepSeek-V3: IB 50 GB/s per GPU (taken as achieved: ratio 3.2x)
               preset_tier(50 * GB, SCALE_OUT_LATENCY_S, 1.0, hbm_Bps),
               8),
        "H800 nodes as DeepSeek-V3 describes them: NVLink ~160 GB/s, IB 50 GB/s per GPU",
        {"chip": "datasheet (H800)", "scale_up": "DeepSeek-V3: 160 GB/s achieved",
         "scale_out": "DeepSeek-V3: 50 GB/s", "host_Bps": "PCIe Gen5 x16 (H100's)",
         "latency": LATENCY_SOURCE},
        chip_name,
    )


def _b200_chip(name, bf16, fp8, hbm_bytes, host_Bps) -> Chip:
    """A Blackwell (B200, GB200) or Blackwell Ultra (B300, GB300) GPU: both
    8 TB/s HBM3e, TF32 half the 16-bit peak, H100's efficiencies."""
    return gpu_chip(name, bf16, fp8, hbm_bytes, 8e12,  # vendor: 8 TB/s
                     H100_MATMUL_EFFICIENCY, bf16 / 2,  # borrowed from H100 (assumption)
                     HOPPER_ATTENTION_EFFICIENCY, host_Bps=host_Bps)


def _nvlink5_tier(hbm_Bps: float) -> Tier:
    up_bw = 1800 * GB / 2  # vendor: NVLink5 1.8 TB/s bidir
    # No nccl-tests figure for NVLink5: borrow DGX H100's ring factor.
    eff = calibrated_efficiency(370 * GB, 450 * GB, H100_HBM_Bps / 2)
    nvls = 480 * GB / (2 * 7 / 8) / (450 * GB)  # likewise from DGX H100 NVLS
    return preset_tier(up_bw, SCALE_UP_LATENCY_S, eff, hbm_Bps, nvls)


def _dgx_b200() -> Preset:
    chip_name = "B200"
    chip = _b200_chip(chip_name, 2.25e15,  # vendor: ~2.25 PFLOP/s dense 16-bit
                      4.5e15,  # vendor datasheet: fp8 dense ~4.5 PFLOP/s
                      180 * GB,  # vendor: 180-192 GB
                      PCIE5_X16_Bps)  # vendor: Xeon 8570 hosts, PCIe Gen5 x16
    return Preset(
        System(chip, 1024, 8, _nvlink5_tier(8e12),
               preset_tier(400 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),  # vendor
               8),
        "DGX B200: NVLink5, 8x 400 Gb/s per node",
        {"chip": "datasheet (B200)", "scale_up.efficiency": "borrowed from dgx-h100 (assumption)",
         "exp_per_s": "vendor (Blackwell Ultra blog's table, SFU EX2): 5 TeraExponentials/s",
         "scale_out": "vendor: 8x 400 Gb/s", "host_Bps": "PCIe Gen5 x16",
         "latency": LATENCY_SOURCE},
        chip_name,
        {"fp4": 72e15 / 8},  # vendor (HGX B200): FP4 144 PF sparse per 8 GPUs, halved
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
               preset_tier(400 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),
               4),  # 4 GPUs per compute tray
        "GB200 NVL72: 72-GPU NVLink5 scale-up domain, 400 Gb/s per GPU out",
        {"chip": "datasheet (GB200)", "scale_up_domain": "vendor: 72 GPUs",
         "exp_per_s": "vendor (Blackwell Ultra blog's table, SFU EX2): 5 TeraExponentials/s",
         "scale_up.efficiency": "borrowed from dgx-h100 (assumption)",
         "host_Bps": "NVLink-C2C 900 GB/s bidir shared by 2 GPUs (split: assumption)",
         "latency": LATENCY_SOURCE},
        chip_name,
        {"fp4": 720e15 / 72},  # vendor: FP4 1,440 PF sparse per rack, halved
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
# GB200 borrow them (assumption: no Blackwell Ultra measurement). Where Blackwell
# Ultra differs from Blackwell in the vendor's figures: dense FP4 (NVFP4) 15
# PFLOP/s per GPU against 10 (GB300 NVL72 1,080 PF dense per rack, GB200 NVL72
# 1,440 PF sparse = 720 dense; HGX B300 108 PF dense per 8 GPUs against HGX
# B200's 72), 288 GB against 186-192, 800 Gb/s ConnectX-8 against 400 Gb/s,
# 1400 W against 1200 W (GB300), and twice the SFU rate for the exponentials of
# attention's softmax (10.7 against 5 TeraExponentials/s, "Inside NVIDIA
# Blackwell Ultra"'s table); dense BF16 and FP8 are unchanged (both racks: 360
# and 720 PF sparse). The FP4 peaks are `Preset.other_peaks_flops_per_s["fp4"]`,
# which the preset writes into `Chip.peak_fp4_flops_per_s` (the
# `training.fp8_recipe = "nvfp4"` GEMMs' peak); the exponential rates are
# `Chip.exp_per_s` (`chip_specs.EXP_PER_S`), every Blackwell part's attention
# efficiency read at Blackwell's rate (`attention_exp_per_s`): a fused
# attention kernel on Blackwell Ultra spends half of Blackwell's time on its
# exponentials (`attention.FlashAttention`). Clocks under the higher power limit
# are not modelled (no sustained-clock figure for either part).
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
               preset_tier(800 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),
               8),
        "DGX B300: 8x Blackwell Ultra 288 GB, NVLink5, 8x ConnectX-8 800 Gb/s per node",
        {"chip": "HGX B300 specifications (per 8 GPUs; sparse halved), Blackwell Ultra blog",
         "matmul_efficiency": "H100's, borrowed as dgx-b200 does (assumption)",
         "attention_efficiency": "FA2 on Hopper, borrowed as dgx-b200 does (assumption)",
         "scale_up.efficiency": "borrowed from dgx-h100 as dgx-b200 does (assumption)",
         "scale_out": "vendor: 8x ConnectX-8 800 Gb/s",
         "scale_out.efficiency": "nccl-tests NDR factor (every NIC generation)",
         "host_Bps": "PCIe Gen5 x16 (host CPUs' generation; assumption)",
         "tdp_w": "1100 W, third-party figure (assumption)", "latency": LATENCY_SOURCE,
         "fp4": "vendor (HGX B300): FP4 108 PF dense per 8 GPUs (the nvfp4 recipe's peak)",
         "exp_per_s": "vendor (Blackwell Ultra blog's table, SFU EX2): 10.7 "
                      "TeraExponentials/s, twice Blackwell's 5; the attention "
                      "efficiency read at Blackwell's rate"},
        chip_name,
        {"fp4": 108e15 / 8},  # vendor (HGX B300): FP4 144 PF sparse | 108 PF dense per 8 GPUs
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
               preset_tier(800 * Gbps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, 8e12),
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
         "tdp_w": "1400 W, NVIDIA at Hot Chips 2025", "latency": LATENCY_SOURCE,
         "fp4": "vendor: FP4 1,080 PF dense per rack, 1.5x GB200's (the nvfp4 recipe's peak)",
         "exp_per_s": "vendor (Blackwell Ultra blog's table, SFU EX2): 10.7 "
                      "TeraExponentials/s, twice Blackwell's 5; the attention "
                      "efficiency read at Blackwell's rate"},
        chip_name,
        {"fp4": 1080e15 / 72},  # vendor: FP4 1,440 PF sparse | 1,080 PF dense per rack
    )



_PRESETS = {
    "dgx-v100": _dgx_v100, "dgx-a100": _dgx_a100, "dgx-h100": _dgx_h100,
    "grand-teton-h100": _grand_teton_h100, "dgx-h200": _dgx_h200, "h800": _h800,
    "dgx-b200": _dgx_b200, "gb200-nvl72": _gb200_nvl72,
    "dgx-b300": _dgx_b300, "gb300-nvl72": _gb300_nvl72, "mi300x-platform": mi300x_platform,
    "mi325x-platform": mi325x_platform, "mi355x-platform": mi355x_platform,
    "tpu-v4": tpu_v4, "tpu-v5p": tpu_v5p, "tpu-v5e": tpu_v5e, "tpu-v6e": tpu_v6e,
}
PRESET_NAMES = tuple(_PRESETS)


def preset(name: str) -> Preset:
    """The preset `name` (see `PRESET_NAMES`) with its description and sources."""
    checks.known("system preset", name, PRESET_NAMES)
    return _PRESETS[name]()


def system(name: str) -> System:
    """The `System` of preset `name`."""
    return preset(name).system


