"""The TPU presets: chips on a torus of ICI links (3D for v4 and v5p, 2D for
v5e and v6e), a data-centre network beside it, XLA's collectives costed on the
bare alpha-beta table. `presets` lists them with the GPU presets."""

from __future__ import annotations

from .chip_specs import PCIE3_X16_Bps, PCIE4_X16_Bps, PCIE5_X16_Bps
from .measured import (
    A100_MATMUL_EFFICIENCY,
    DCN_LATENCY_S,
    ICI_LATENCY_S,
    NIC_EFFICIENCY,
    TPU_LATENCY_SOURCE,
)
from .model.hardware import Preset, System, gpu_chip, preset_tier
from .model.protocols import AlphaBeta
from .model.strategies import Torus
from .units import GB, Gbps, KiB


def _tpu(name, bf16, int8, hbm_bytes, hbm_Bps, link_Bps, shape, host_Bps,
         dcn_Bps=200 * Gbps / 4, chips_per_host=4) -> System:
    # A 3D torus of `shape` chips: 6 nearest-neighbour ICI links per chip; a
    # collective on the torus drives all of them, so the per-chip bandwidth is
    # 6 x per-link (a 2D torus is shape (x, y, 1): a group spanning both of its
    # dimensions drives its 4 links, 2 x per-link a dimension as in 3D).
    chip = gpu_chip(name, bf16, int8, hbm_bytes, hbm_Bps, A100_MATMUL_EFFICIENCY, bf16 / 3,
                     host_Bps=host_Bps)
    ici = preset_tier(6 * link_Bps, ICI_LATENCY_S, 1.0, hbm_Bps)
    # The data-centre network beside the torus, per chip (`dcn_Bps`): where the vendor
    # tables are silent, an assumption of 200 Gb/s per 4-chip host, labelled as such.
    dcn = preset_tier(dcn_Bps, DCN_LATENCY_S, NIC_EFFICIENCY, hbm_Bps)
    torus = Torus(shape)
    return System(chip, torus.chips, torus.chips, ici, dcn, chips_per_host, topology=torus,
                  protocols=AlphaBeta())


def tpu_v4() -> Preset:
    return Preset(
        _tpu("tpu-v4", 275e12, 275e12,  # vendor: 275 TFLOP/s bf16; int8 peak is the same
             32 * KiB**3, 1.2e12,  # vendor: 32 GiB, 1.2 TB/s
             # vendor: ICI ~4.5e10 B/s per link one way; 64 cubes of 4x4x4 chips joined
             # by optical circuit switches into a 16x16x16 pod (Jouppi et al., ISCA 2023)
             4.5e10, (16, 16, 16),
             PCIE3_X16_Bps),  # vendor: PCIe Gen3 x16 to the host
        "TPU v4: 3D torus ICI (6 links x 45 GB/s), 4096-chip pod, 4 chips per host",
        {"chip": "datasheet (TPU v4)", "scale_up": "vendor: 6 links x 4.5e10 B/s",
         "scale_out": "assumption: 200 Gb/s per host", "host_Bps": "PCIe Gen3 x16",
         "latency": TPU_LATENCY_SOURCE},
        "tpu-v4",
    )


def tpu_v5p() -> Preset:
    return Preset(
        _tpu("tpu-v5p", 459e12, 918e12,  # vendor: 459 TFLOP/s bf16; datasheet int8 918 TOPS
             95 * GB, 2.76e12,  # vendor: 95 GB, 2.76 TB/s
             # vendor: ICI ~9e10 B/s per link one way; the largest slice, 16x20x28 =
             # 8,960 chips (Google Cloud TPU v5p documentation)
             9e10, (16, 20, 28),
             PCIE4_X16_Bps),  # not published: PCIe Gen4 x16 (assumption)
        "TPU v5p: 3D torus ICI (6 links x 90 GB/s), 8960-chip pod, 4 chips per host",
        {"chip": "datasheet (TPU v5p)", "scale_up": "vendor: 6 links x 9e10 B/s",
         "scale_out": "assumption: 200 Gb/s per host",
         "host_Bps": "assumption: PCIe Gen4 x16", "latency": TPU_LATENCY_SOURCE},
        "tpu-v5p",
    )


def tpu_v5e() -> Preset:
    return Preset(
        # vendor (Google Cloud TPU v5e documentation): 197 TFLOP/s bf16, 393 TOPS int8,
        # 16 GB of HBM2 at 819 GB/s; ICI 400 GB/s bidirectional per chip over 4 ports
        # (50 GB/s a link one way); a 256-chip pod as a 16 x 16 2D torus; 8 chips and
        # 2 x 100 Gb/s of NIC per host
        _tpu("tpu-v5e", 197e12, 393e12, 16 * GB, 819e9, 50e9, (16, 16, 1),
             PCIE4_X16_Bps,  # not published: PCIe Gen4 x16 (assumption)
             dcn_Bps=2 * 100 * Gbps / 8, chips_per_host=8),
        "TPU v5e: 2D torus ICI (4 links x 50 GB/s), 256-chip pod, 8 chips per host",
        {"chip": "Google Cloud TPU v5e documentation", "scale_up": "vendor: 400 GB/s "
         "bidirectional ICI per chip, 4 ports", "scale_out": "vendor: 2 x 100 Gb/s per "
         "8-chip host", "host_Bps": "assumption: PCIe Gen4 x16", "latency": TPU_LATENCY_SOURCE},
        "tpu-v5e",
    )


def tpu_v6e() -> Preset:
    return Preset(
        # vendor (Google Cloud TPU v6e documentation): 918 TFLOP/s bf16, 1,836 TOPS
        # int8, 32 GB of HBM at 1,638 GB/s; ICI 800 GB/s bidirectional per chip over 4
        # ports (100 GB/s a link one way); a 256-chip pod as a 2D torus; 8 chips a host,
        # each on PCIe Gen5
        _tpu("tpu-v6e", 918e12, 1836e12, 32 * GB, 1638e9, 100e9, (16, 16, 1),
             PCIE5_X16_Bps, chips_per_host=8),
        "TPU v6e (Trillium): 2D torus ICI (4 links x 100 GB/s), 256-chip pod, 8 chips per "
        "host",
        {"chip": "Google Cloud TPU v6e documentation", "scale_up": "vendor: 800 GB/s "
         "bidirectional ICI per chip, 4 ports", "scale_out": "assumption: 200 Gb/s per 4 "
         "chips", "host_Bps": "vendor: PCIe Gen5", "latency": TPU_LATENCY_SOURCE},
        "tpu-v6e",
    )
