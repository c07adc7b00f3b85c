"""Vendor figures per chip that the presets read (docs/sources.md has each
source): the host link, the GEMM compute units, the board power; the
measured and fitted constants are `measured`'s. `hardware` re-exports them."""

from __future__ import annotations

from .units import GB

# HOST_Bps: one GPU's link to its host CPU's memory, one direction, where a
# preset does not say: PCIe Gen5 x16 (PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes,
# 128b/130b, ~63 GB/s per direction; we take 64e9). PCIe 3.0 and 4.0 run at
# 8 and 16 GT/s per lane: ~15.8 and ~31.5 GB/s per direction at x16 (16e9,
# 32e9).
PCIE3_X16_Bps = 16e9
PCIE4_X16_Bps = 32e9
PCIE5_X16_Bps = 64e9
HOST_Bps = PCIE5_X16_Bps
COMPUTE_UNITS = 132.0  # a custom chip's: H100 SXM5's SMs

# Board power (vendor datasheets): V100 SXM3 450 W (DGX-2H), A100 SXM4 400 W,
# H100/H800 SXM5 700 W (Meta's Grand Teton H100s run at 500 W: torchtitan's
# and FBGEMM's benchmarks), H200 SXM up to 700 W, B200 1000 W (DGX B200), GB200
# 1200 W per GPU (a 2,700 W superchip less its CPU: assumption), GB300 1400 W
# per GPU (NVIDIA's Blackwell Ultra figures at Hot Chips 2025, as Tom's
# Hardware tabulates them), B300 1100 W in HGX/DGX B300 (a cloud provider's
# per-GPU table, Verda; no NVIDIA datasheet found: assumption), AMD Instinct
# MI300X 750 W, MI325X 1000 W, MI355X 1400 W total board power (AMD's product
# specifications; the MI350X is the 1000 W air-cooled part), TPU v4 192 W
# (Jouppi et al. 2023, peak), TPU v5p 350 W, v5e 200 W, v6e 300 W (not published:
# assumptions).
# Units running GEMM tiles (vendor architecture whitepapers): V100 80 SMs, A100
# 108, H100 / H200 / H800 SXM5 132, B200 148 per GPU (GB200's GPU the same);
# Blackwell Ultra 160 (NVIDIA's Blackwell Ultra figures at Hot Chips 2025, the
# enabled count of B300 / GB300 as that: assumption); AMD Instinct MI300X and
# MI325X 304 compute units (38 per XCD), MI355X 256 (32 per XCD: AMD's ROCm GPU
# specifications table); TPU v4 and v5p 2
# TensorCores x 4 MXUs (TPU v4 paper; v5p's system architecture documentation),
# v5e 1 x 4, v6e 1 x 2 of 256 x 256 (Google Cloud's v5e and v6e documentation).
COMPUTE_UNITS_BY_CHIP = {"V100-SXM3-32GB": 80.0, "A100-SXM4-80GB": 108.0,
                         "H100-SXM5-80GB": 132.0, "H100-SXM5-96GB-500W": 132.0,
                         "H200-SXM-141GB": 132.0, "H800": 132.0,
                         "B200": 148.0, "GB200": 148.0, "B300": 160.0, "GB300": 160.0,
                         "MI300X": 304.0, "MI325X": 304.0, "MI355X": 256.0,
                         "tpu-v4": 8.0, "tpu-v5p": 8.0, "tpu-v5e": 4.0, "tpu-v6e": 2.0}
TDP_W = {"V100-SXM3-32GB": 450.0, "A100-SXM4-80GB": 400.0, "H100-SXM5-80GB": 700.0,
         "H100-SXM5-96GB-500W": 500.0,
         "H200-SXM-141GB": 700.0, "H800": 700.0, "B200": 1000.0, "GB200": 1200.0,
         "B300": 1100.0, "GB300": 1400.0, "MI300X": 750.0, "MI325X": 1000.0,
         "MI355X": 1400.0, "tpu-v4": 192.0, "tpu-v5p": 350.0,
         "tpu-v5e": 200.0, "tpu-v6e": 300.0}

# The special-function units' exponential rate per GPU (MUFU.EX2, what a fused
# attention kernel's softmax runs on): NVIDIA's Blackwell Ultra comparison table
# ("Inside NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era",
# "Attention acceleration (SFU EX2)"; read here in Verda's per-GPU reproduction):
# 5 TeraExponentials/s for B200 and GB200, 10.7 for B300 and GB300 (NVIDIA,
# "Making Softmax More Efficient with NVIDIA Blackwell Ultra": twice Blackwell's
# SFU throughput). Every Blackwell and Blackwell Ultra preset's attention
# efficiency (Hopper's, borrowed) is read at Blackwell's rate
# (ATTENTION_EXP_PER_S): the exponentials cost Blackwell Ultra half of their
# time on Blackwell, and nothing changes on Blackwell. Other chips state no rate
# here (Hopper's 3.9e12 in FlashAttention-3 is inside its measured efficiency):
# no exponential term.
BLACKWELL_EXP_PER_S = 5e12
BLACKWELL_ULTRA_EXP_PER_S = 10.7e12
EXP_PER_S = {"B200": BLACKWELL_EXP_PER_S, "GB200": BLACKWELL_EXP_PER_S,
             "B300": BLACKWELL_ULTRA_EXP_PER_S, "GB300": BLACKWELL_ULTRA_EXP_PER_S}
ATTENTION_EXP_PER_S = dict.fromkeys(EXP_PER_S, BLACKWELL_EXP_PER_S)

# One chip's link to its host CPU's memory (`Chip.host_Bps`), per direction:
# the GPU's PCIe generation at x16 (vendor datasheets: V100 PCIe Gen3, A100
# Gen4, H100 / H200 / H800 Gen5; DGX B200's Xeon 8570 hosts are PCIe Gen5).
# Blackwell Ultra supports PCIe Gen6 (NVIDIA, Hot Chips 2025) but DGX B300's
# Xeon 6776P hosts are PCIe Gen5: the link runs at Gen5 x16 (assumption: a full
# x16 per GPU). TPU v4: PCIe Gen3 x16 (Google's TPU v4 documentation); TPU
# v5p's is not published: Gen4 x16 (assumption). A Grace Blackwell superchip
# joins its Grace CPU to its two GPUs by NVLink-C2C, 900 GB/s bidirectional
# (NVIDIA Grace Blackwell datasheet), which we read as shared by the two:
# 900e9 B/s / 2 directions / 2 GPUs = 225e9 B/s per GPU per direction (the
# even split is our reading: assumption); GB300 keeps GB200's Grace and
# NVLink-C2C (assumption). AMD Instinct MI300X, MI325X and MI355X: PCIe Gen5
# x16 to the host (AMD's product specifications).
GRACE_C2C_PER_GPU_Bps = 900 * GB / 2 / 2


# the system preset of a device kind (a measurement's, a log's '# Rank' line) where it
# is obvious; longest fragments first ("GB200" before "B200")
DEVICE_PRESETS = (("GB300", "gb300-nvl72"), ("B300", "dgx-b300"), ("GB200", "gb200-nvl72"),
                  ("B200", "dgx-b200"), ("H800", "h800"),
                  ("H200", "dgx-h200"), ("H100", "dgx-h100"), ("A100", "dgx-a100"),
                  ("V100", "dgx-v100"), ("MI355X", "mi355x-platform"),
                  ("MI325X", "mi325x-platform"), ("MI300X", "mi300x-platform"),
                  ("TPU v5p", "tpu-v5p"), ("TPU v4", "tpu-v4"))


def preset_for_device(device_kind: str) -> str | None:
    """The system preset of a device kind where it is obvious (e.g. "NVIDIA H100 80GB
    HBM3" -> dgx-h100), else None."""
    kind = device_kind.upper()
    for fragment, preset in DEVICE_PRESETS:
        if fragment.upper() in kind:
            return preset
    return None
