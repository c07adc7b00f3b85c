"""The AMD Instinct presets: eight MI300X, MI325X or MI355X GPUs on one
universal baseboard, each joined to the other seven by its own Infinity
Fabric (xGMI) link (a full mesh, no switch), one 400 Gb/s NIC per GPU out of
the node, RCCL's collectives. `presets` lists them with the other GPU presets;
docs/sources.md has every number's source."""

from __future__ import annotations

from .chip_specs import PCIE5_X16_Bps
from .measured import (
    H100_MATMUL_EFFICIENCY,
    HOPPER_ATTENTION_EFFICIENCY,
    LATENCY_SOURCE,
    NIC_EFFICIENCY,
    SCALE_OUT_LATENCY_S,
    SCALE_UP_LATENCY_S,
)
from .model.hardware import Preset, System, gpu_chip, preset_tier
from .units import GB, Gbps

# Peak matrix throughput = compute units x peak engine clock x FLOPs per clock
# per CU (AMD's CDNA 3 and CDNA 4 whitepapers and product specifications; AMD
# quotes the dense peaks and twice them "with structured sparsity"):
# - CDNA 3 (MI300X, MI325X): 304 CUs at 2,100 MHz; per CU per clock 2,048 dense
#   FP16/BF16 FLOPs, 4,096 FP8, 1,024 TF32: 1,307.4 / 2,614.9 / 653.7 TFLOP/s.
# - CDNA 4 (MI355X): 256 CUs at 2,400 MHz; per CU per clock 4,096 FP16/BF16,
#   8,192 FP8 (AMD at ISSCC 2026: "from 4,096 FLOPS per clock to 8,192"), 16,384
#   MXFP6 and MXFP4 (the same rate), 256 FP32 matrix (CDNA 4 has no TF32):
#   2.5166 / 5.0332 / 10.066 PFLOP/s and 157.3 TFLOP/s.
CDNA3_CUS, CDNA3_CLOCK_HZ = 304, 2.1e9
CDNA4_CUS, CDNA4_CLOCK_HZ = 256, 2.4e9
CDNA3_FLOPS_PER_CLOCK_PER_CU = {"bf16": 2048, "fp8": 4096, "tf32": 1024}
CDNA4_FLOPS_PER_CLOCK_PER_CU = {"bf16": 4096, "fp8": 8192, "mxfp6": 16384, "mxfp4": 16384,
                                "fp32": 256}


def _peaks(cus, clock_hz, per_clock: dict) -> dict:
    """Dense peak FLOP/s by width: CUs x clock x FLOPs per clock per CU."""
    return {k: cus * clock_hz * v for k, v in per_clock.items()}


CDNA3_PEAKS = _peaks(CDNA3_CUS, CDNA3_CLOCK_HZ, CDNA3_FLOPS_PER_CLOCK_PER_CU)
CDNA4_PEAKS = _peaks(CDNA4_CUS, CDNA4_CLOCK_HZ, CDNA4_FLOPS_PER_CLOCK_PER_CU)

# Infinity Fabric (xGMI) between the eight GPUs of a platform: every GPU has 7
# links, one to each peer (a full mesh). MI300X / MI325X: 128 GB/s per link
# both directions (AMD's MI300X and MI325X specifications: 7 links, 896 GB/s
# aggregate), 64 GB/s per direction ("rated up to 64 GB/s for each
# point-to-point link", AMD's ROCm blog "Understanding RCCL Bandwidth and xGMI
# Performance on AMD Instinct MI300X", 2025); MI355X: 153.6 GB/s per link both
# directions (1,075 GB/s aggregate, AMD's MI355X specifications). Per GPU per
# direction, as every tier here: 7 x 64 = 448 GB/s and 7 x 76.8 = 537.6 GB/s.
XGMI_LINKS = 7
MI300X_XGMI_LINK_Bps = 128 * GB / 2
MI355X_XGMI_LINK_Bps = 153.6 * GB / 2
# The same blog: CRC and protocol overhead leave "approximately 48 GB/s per
# link" usable, 75% of the 64 GB/s: the scale-up tier's efficiency (MI355X's
# links the same share: assumption).
XGMI_USABLE_LINK_Bps = 48 * GB
XGMI_EFFICIENCY = XGMI_USABLE_LINK_Bps / MI300X_XGMI_LINK_Bps

# Large-GEMM efficiency. Public microbenchmark: Stas Bekman's Maximum
# Achievable Matmul FLOPS table (ml-engineering, "Accelerators", BF16, version 2
# of mamf-finder: a brute-force search over shapes, mean of 100 matmuls after 50
# warm-ups), H100 SXM 794.5 TFLOP/s (torch 2.7.0+cu126), MI300X 668.4 (torch
# 2.5.1, ROCm 6.3, PYTORCH_TUNABLEOP_ENABLED=1), MI325X 784.9 (1000 W, torch
# 2.6.0, ROCm 6.2.4, tunable ops). Each over its datasheet peak (989, 1,307.4,
# 1,307.4: the table rounds AMD's to 1,300): H100 0.803, MI300X 0.511, MI325X
# 0.600. What a training step sustains is not in a microbenchmark: H100's
# sustained efficiency (`H100_MATMUL_EFFICIENCY`, fitted to llm-foundry's runs)
# scaled by the chip's MAMF share over H100's (assumption: the sustained /
# burst ratio is H100's). MI355X (CDNA 4) has no MAMF row: MI325X's
# (assumption, a comparable family: the nearest CDNA part measured). Nothing
# fitted to an end-to-end run on an AMD part.
H100_MAMF_FLOPS_PER_S = 794.5e12
MI300X_MAMF_FLOPS_PER_S = 668.4e12
MI325X_MAMF_FLOPS_PER_S = 784.9e12


def _sustained(mamf_flops_per_s, peak_flops_per_s, h100_peak=989e12) -> float:
    """H100's sustained matmul efficiency x (this chip's MAMF share / H100's)."""
    return H100_MATMUL_EFFICIENCY * (mamf_flops_per_s / peak_flops_per_s) / (
        H100_MAMF_FLOPS_PER_S / h100_peak)


MI300X_MATMUL_EFFICIENCY = _sustained(MI300X_MAMF_FLOPS_PER_S, CDNA3_PEAKS["bf16"])
MI325X_MATMUL_EFFICIENCY = _sustained(MI325X_MAMF_FLOPS_PER_S, CDNA3_PEAKS["bf16"])
MI355X_MATMUL_EFFICIENCY = MI325X_MATMUL_EFFICIENCY  # borrowed (assumption)

# RCCL's own tuning model (ROCm/rccl src/graph/tuning.cc and rome_models.cc,
# 2024-10 snapshot): an 8-GPU all-to-all xGMI platform (rome_model_84 / 87:
# nLinks 7, every pair connected) selects tuning model 5. As data: `collectives`
# costs these platforms with NCCL's protocols (`protocols.Nccl`, the tiers'
# NCCL latencies: assumption), which differ from these.
RCCL = {
    "library": "RCCL (ROCm's fork of NCCL)",
    "algorithms": ("Ring", "Tree (not Simple on one gfx94x node)", "CollNet", "MSCCL"),
    "protocols": ("LL", "Simple"),  # tuning model 5 gives LL128 no bandwidth or latency
    "base_latency_us": {"Ring": {"LL": 12.0, "Simple": 17.0},
                        "Tree": {"LL": 12.0, "Simple": 17.0}},
    "xgmi_step_latency_us": {"Ring": {"LL": 0.8, "Simple": 2.1},
                             "Tree": {"LL": 0.9, "Simple": 2.3}},
    "network_step_latency_us": {"Ring": {"LL": 9.5, "Simple": 320.0},
                                "Tree": {"LL": 10.5, "Simple": 25.0}},
    "source": "ROCm/rccl src/graph/tuning.cc tuning_model_5, rome_models.cc (tuning=5)",
    "costed_as": "NCCL's protocols and latencies (assumption; a full-mesh topology and "
                 "RCCL's constants are not modelled: docs/sources.md)",
}


def _mesh_node(chip, hbm_Bps, link_Bps, nic_Bps=400 * Gbps) -> System:
    """Eight GPUs on one baseboard, each with `XGMI_LINKS` links of `link_Bps` per
    direction to its peers, one NIC each out of the node. The scale-up tier is
    the seven links together (what a collective over all eight drives); the
    tiers reduce at the chip's `hbm_Bps` / 2."""
    return System(chip, 1024, 8,
                  preset_tier(XGMI_LINKS * link_Bps, SCALE_UP_LATENCY_S, XGMI_EFFICIENCY, hbm_Bps),
                  preset_tier(nic_Bps, SCALE_OUT_LATENCY_S, NIC_EFFICIENCY, hbm_Bps),
                  8)


def _sources(chip: str, matmul: str, link: str) -> dict:
    return {"chip": f"AMD {chip} specifications (dense peaks: CUs x clock x FLOPs per clock)",
            "matmul_efficiency": matmul,
            "attention_efficiency": "FA2 on Hopper, borrowed (assumption: no AMD measurement)",
            "scale_up": f"AMD: 7 Infinity Fabric links per GPU, {link} per link both ways "
                        "(a full mesh, costed as a switched domain: assumption)",
            "scale_up.efficiency": "AMD ROCm blog: ~48 of 64 GB/s per xGMI link usable",
            "scale_out": "reference platform: one 400 Gb/s NIC per GPU",
            "scale_out.efficiency": "nccl-tests NDR factor (every NIC generation)",
            "protocols": "NCCL's (RCCL's tuning model 5 is data on the preset: assumption)",
            "host_Bps": "PCIe Gen5 x16", "latency": LATENCY_SOURCE}


def _platform(chip_name: str, peaks: dict, wide: str, hbm_bytes: float, hbm_Bps: float,
              matmul_efficiency: float, link_Bps: float, description: str, matmul_source: str,
              link_both_ways: str, other_peaks: dict | None = None) -> Preset:
    """An 8-GPU Instinct platform (`_mesh_node`): the chip's dense peaks
    (`peaks`, its 32-bit one under `wide`), HBM, the matmul efficiency and its
    source, the xGMI link rate; attention borrowed from Hopper (assumption), host
    link PCIe Gen5 x16 (vendor)."""
    chip = gpu_chip(chip_name, peaks["bf16"], peaks["fp8"], hbm_bytes, hbm_Bps,
                     matmul_efficiency, peaks[wide], HOPPER_ATTENTION_EFFICIENCY,
                     host_Bps=PCIE5_X16_Bps)
    return Preset(_mesh_node(chip, hbm_Bps, link_Bps), description,
                  _sources(chip_name, matmul_source, link_both_ways), chip_name,
                  other_peaks or {}, collective_library=RCCL)


def mi300x_platform() -> Preset:
    return _platform(  # vendor: 192 GB HBM3 at 5.3 TB/s
        "MI300X", CDNA3_PEAKS, "tf32", 192 * GB, 5.3e12, MI300X_MATMUL_EFFICIENCY,
        MI300X_XGMI_LINK_Bps,
        "AMD Instinct MI300X platform: 8x MI300X 192 GB, Infinity Fabric full mesh "
        "(7 x 64 GB/s per GPU per direction), 8x 400 Gb/s per node, RCCL",
        "H100's x MAMF share 0.511 / H100's 0.803 (microbenchmark, transfer: assumption)",
        "128 GB/s")


def mi325x_platform() -> Preset:
    return _platform(  # vendor: 256 GB HBM3E at 6 TB/s; MI300X's compute
        "MI325X", CDNA3_PEAKS, "tf32", 256 * GB, 6.0e12, MI325X_MATMUL_EFFICIENCY,
        MI300X_XGMI_LINK_Bps,
        "AMD Instinct MI325X platform: 8x MI325X 256 GB HBM3E, Infinity Fabric full mesh "
        "(7 x 64 GB/s per GPU per direction), 8x 400 Gb/s per node, RCCL",
        "H100's x MAMF share 0.600 / H100's 0.803 (microbenchmark, transfer: assumption)",
        "128 GB/s")


def mi355x_platform() -> Preset:
    return _platform(  # vendor: 288 GB HBM3E at 8 TB/s
        "MI355X", CDNA4_PEAKS, "fp32", 288 * GB, 8.0e12, MI355X_MATMUL_EFFICIENCY,
        MI355X_XGMI_LINK_Bps,
        "AMD Instinct MI355X platform: 8x MI355X 288 GB HBM3E (1400 W), Infinity Fabric "
        "full mesh (7 x 76.8 GB/s per GPU per direction), 8x 400 Gb/s per node, RCCL",
        "MI325X's, borrowed (assumption: no CDNA 4 measurement)", "153.6 GB/s",
        {"mxfp6": CDNA4_PEAKS["mxfp6"], "mxfp4": CDNA4_PEAKS["mxfp4"]})  # vendor: ~10 PF each
