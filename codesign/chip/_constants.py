"""The chip model's constants, each declared once with its source (docs/sources.md,
"Chip area, cost and power", has the full citation): process nodes, HBM
generations, PHYs, packaging, power, and the published parts the few fitted
constants are fitted on and checked against. "[T]" marks a third party's
estimate (analysts, press), "ASSUMPTION" our own choice."""

from __future__ import annotations

import dataclasses
import math

from ..units import GB, KiB, MiB


@dataclasses.dataclass(frozen=True)
class Node:
    """A logic process: what a wafer costs and yields, and how dense and how
    frugal its logic is relative to N5 (the node the fits are made on)."""

    name: str
    wafer_usd: float  # one processed 300 mm wafer
    d0_per_cm2: float  # random defect density (negative-binomial yield)
    masks_usd: float  # one mask set (NRE)
    logic_density: float  # logic transistors per mm^2, relative to N5
    energy: float  # energy per operation at iso-speed, relative to N5
    sram_bit_mm2: float  # SRAM bit cell area (LLMCompass's figure, mm^2 per bit)


# Wafer prices and mask sets: LLMCompass (cost_model/supply_chain, from Khan &
# Mann "AI Chips" and IC Knowledge): N7 $9,346 and $10.5 M, N5 $16,988 and
# $18.1 M. N3: $20,000 a wafer [T] (DigiTimes, 2022, as Tom's Hardware and others
# report it); its mask set is ASSUMPTION: N5's scaled by the wafer price ratio.
# N4P (NVIDIA's 4NP) is an N5-family node: N5's wafer price, D0 and masks
# (ASSUMPTION). Defect density: TSMC's symposium figures as AnandTech reports
# them, N7 0.09 per cm^2 three quarters into volume (VLSI 2019), N5 0.10-0.11 at
# its ramp with < 0.10 expected (2020): 0.09 and 0.10; N3 is ASSUMPTION (N5's).
# (LLMCompass takes 0.15 / 0.20, the early-ramp figures.)
# Relative density and energy (TSMC's public node claims): N5 has up to 1.8x
# N7's logic density and 30% less power at iso-speed; N4P 6% more density and
# 22% better power efficiency than N5; N3E 1.6x N5's logic density and 32% less
# power at iso-speed. SRAM bit cells (LLMCompass): N7 1.70e-7, N5 1.25e-7 mm^2
# per bit; N3E's SRAM bit cell did not shrink from N5's (0.021 um^2 both, TSMC
# at IEDM 2022): N5's.
NODES = {
    "n7": Node("n7", 9346.0, 0.09, 10.5e6, 1 / 1.8, 1 / 0.70, 1.70e-7),
    "n5": Node("n5", 16988.0, 0.10, 18.1e6, 1.0, 1.0, 1.25e-7),
    "n4p": Node("n4p", 16988.0, 0.10, 18.1e6, 1.06, 1 / 1.22, 1.25e-7),
    "n3": Node("n3", 20000.0, 0.10, 18.1e6 * 20000.0 / 16988.0, 1.6, 0.68, 1.25e-7),
}

# LLMCompass's CACTI-derived area efficiency of a 512 KiB SRAM macro (its largest
# unit): a cache of B bytes takes 8 B x bit cell / 0.602 mm^2
SRAM_ARRAY_EFFICIENCY = 0.602


@dataclasses.dataclass(frozen=True)
class HbmGeneration:
    """One HBM generation: a stack's interface, its DRAM dies, price, energy and
    the room it takes on the logic die (PHY) and on the interposer."""

    name: str
    die_bytes: float  # one DRAM die of the stack (vendors' GB, as presets count)
    pins: float  # data pins of one stack's interface
    max_pin_bits_per_s: float  # the fastest pin rate shipped or specified
    usd_per_byte: float
    pj_per_bit: float  # DRAM access + interface, per bit moved
    phy_mm2: float  # the logic die's PHY for one stack (does not shrink)
    footprint_mm2: float  # one stack on the interposer
    edge_mm: float  # the edge of the logic die one stack takes


# - Dies: HBM3 16 Gb (2 GB), HBM3e 24 Gb (3 GB), HBM4 24 / 32 Gb (JEDEC: 3 GB
#   taken); 4- to 16-high stacks (JEDEC HBM4: 4, 8, 12 and 16-high).
# - Interface: 1,024 pins (HBM3, HBM3e), 2,048 (HBM4, JEDEC JESD270-4); pin rate
#   HBM3 6.4 Gb/s (JEDEC: 819 GB/s per stack), HBM3e 9.6 Gb/s (~1.2 TB/s per
#   stack, vendors), HBM4 11 Gb/s (Micron's samples, "over 11 Gbps", above
#   JEDEC's 8 Gb/s = 2 TB/s).
# - Price [T]: analysts' HBM cost per part: H100 $1,400 for 80 GB ($17.5/GB),
#   MI300X $2,900 for 192 GB ($15.1/GB), B200 $2,900 for 192 GB ($15.1/GB). HBM3
#   the mean of the first two ($16.3/GB), HBM3e B200's (within the $300-370 per
#   24 GB stack [T] = $12.5-15.4/GB), HBM4 "more than 50% above HBM3e" per
#   stack [T]: 1.5x HBM3e's per GB at equal capacity (the bound; ASSUMPTION).
# - Energy: 3.9 pJ/bit, O'Connor et al. (MICRO 2017) for HBM2, taken for HBM3 and
#   HBM3e (ASSUMPTION; third-party figures of 7-9 pJ/bit for HBM3e conflict);
#   HBM4 25-30% below HBM3e (industry target [T]): 2.8.
# - PHY: LLMCompass's HBM2e PHY, 10.45 mm^2 per 1,024-bit stack, taken for HBM3
#   and HBM3e; HBM4 twice it, for twice the width (ASSUMPTION).
# - Footprint: ~11 x 11 mm per HBM3 / HBM3e stack (ASSUMPTION, JEDEC outline
#   order); HBM4's "larger physical footprint" (JEDEC): 11 x 13 mm (ASSUMPTION).
#   Edge, the logic die's shoreline one stack takes: H100 places three stack
#   sites along each ~32 mm long edge of its die, at most 10.7 mm each: 10.5 mm
#   for every generation (ASSUMPTION; NVIDIA's Rubin places 8 HBM4 stacks around
#   two reticle-sized dies, as B200 its 8 HBM3e).
HBM_GENERATIONS = {
    "hbm3": HbmGeneration("hbm3", 2 * GB, 1024.0, 6.4e9, (1400 / 80 + 2900 / 192) / 2 / GB,
                          3.9, 10.45, 121.0, 10.5),
    "hbm3e": HbmGeneration("hbm3e", 3 * GB, 1024.0, 9.6e9, 2900 / 192 / GB, 3.9, 10.45,
                           121.0, 10.5),
    "hbm4": HbmGeneration("hbm4", 3 * GB, 2048.0, 11e9, 1.5 * 2900 / 192 / GB, 2.8, 20.9,
                          143.0, 10.5),
}
MIN_STACK_HEIGHT, MAX_STACK_HEIGHT = 4.0, 16.0

# Scale-up SerDes: NVLink4's PHY, 0.965 mm^2 per link (LLMCompass) of 25 GB/s per
# direction (2 lanes of 100 Gb/s: NVIDIA), so mm^2 per B/s of one direction;
# 5.5 pJ per bit of a 112G PAM4 SerDes [T], paid on each bit sent and each bit
# received. Other links (NVLink5, xGMI) are costed alike (ASSUMPTION).
SERDES_LANE_Bps = 25e9 / 2  # one 100 Gb/s lane, one direction
SERDES_MM2_PER_Bps = 0.965 / 25e9
SERDES_PJ_PER_BIT = 5.5
# The host's PCIe Gen5 x16 (the NIC shares it behind a PCIe switch, as in DGX
# and the AMD platforms): LLMCompass's PCIe5 PHY, 0.64 mm^2 per lane.
PCIE_PHY_MM2 = 16 * 0.64

# Packaging and yield
WAFER_DIAMETER_MM = 300.0
YIELD_ALPHA = 3.0  # negative-binomial clustering (LLMCompass)
RETICLE_MM2 = 26.0 * 33.0  # 858 mm^2: the exposure field
RETICLE_ASPECT = 33.0 / 26.0  # a die is taken as the reticle's shape
INTERPOSER_PER_SILICON = 1.1  # interposer area / what sits on it (Chiplet Actuary)
# the largest interposer: TSMC's announced 9.5-reticle CoWoS (2027), ASSUMPTION as
# the physical bound; CoWoS-S reaches ~3.3 reticles, above it CoWoS-L (one price)
MAX_INTERPOSER_MM2 = 9.5 * RETICLE_MM2
COWOS_S_MAX_MM2 = 3.3 * RETICLE_MM2
# Final test per package [T]: the mean of the analysts' H100 ($920) and MI300X
# ($600) test figures (ASSUMPTION: independent of the part's size)
TEST_USD = (920.0 + 600.0) / 2

# Power
# the idle share of full-load board power (an idle H100 SXM draws ~10% of its
# 700 W: ASSUMPTION, order of nvidia-smi idle readings)
STATIC_FRACTION = 0.10
# the most a board carries: 1,400 W, the highest shipping board power (GB300,
# MI355X: `chip_specs.TDP_W`), liquid-cooled
MAX_BOARD_POWER_W = 1400.0


@dataclasses.dataclass(frozen=True)
class PublishedPart:
    """A shipping part as its vendor and the analysts describe it: the design
    variables (vendor specs) and the published figures the model is checked
    against (area, board power, cost to make, packaging cost)."""

    name: str
    node: str
    hbm: str
    peak_flops_per_s: float
    sram_bytes: float
    hbm_stacks: float
    hbm_stack_height: float
    hbm_Bps: float
    scale_up_Bps: float  # per direction
    nic_Bps: float  # per direction
    dies: float
    # published figures
    area_mm2: float  # logic silicon, all dies
    board_power_w: float
    cost_usd: float  # [T] cost to make
    packaging_usd: float  # [T]
    gross_margin: float
    note: str


# Vendor figures (whitepapers, datasheets) and analysts' [T] estimates:
# - H100 SXM5: 989 TFLOP/s dense BF16, 80 GB HBM3 in 5 stacks (8-high 16 Gb) at
#   3.35 TB/s, NVLink4 900 GB/s bidirectional, one 400 Gb/s NIC, 814 mm^2 on 4N
#   (N5 family), 700 W; SRAM 132 SMs x (256 KB registers + 256 KB L1/shared) +
#   50 MB L2 (H100 whitepaper); cost ~$3,320, packaging ~$750 [T]; NVIDIA's
#   gross margin ~75% (its FY2025 reports).
# - B200: 2.25 PFLOP/s dense, 192 GB HBM3e in 8 stacks (8-high 24 Gb) at 8 TB/s,
#   NVLink5 1.8 TB/s bidirectional, 400 Gb/s NIC, 2 x ~800 mm^2 on 4NP, 1,000 W;
#   SRAM 148 SMs x 512 KB (registers as Hopper's: ASSUMPTION) + 126 MB L2 (Chips
#   and Cheese); cost ~$6,400, packaging ~$1,100 [T].
# - MI300X: 1,307 TFLOP/s dense (`_amd_presets.CDNA3_PEAKS`), 192 GB HBM3 in 8
#   stacks (12-high 16 Gb) at 5.3 TB/s, 7 xGMI links of 64 GB/s per direction,
#   1,725 mm^2 of chiplets (8 XCDs on N5, 4 IODs on N6: all taken as N5), 750 W;
#   SRAM 304 CUs x (512 KB VGPR + 64 KB LDS + 32 KB L1) + 8 x 4 MB L2 + 256 MB
#   Infinity Cache (CDNA 3 whitepaper); cost ~$5,300, packaging ~$1,200 [T]; AMD's
#   gross margin ~53% (its 2024 non-GAAP reports).
PUBLISHED = (
    PublishedPart("H100 SXM5", "n5", "hbm3", 989e12, 132 * 512 * KiB + 50 * MiB, 5.0, 8.0,
                  3.35e12, 450 * GB, 50 * GB, 1.0, 814.0, 700.0, 3320.0, 750.0, 0.75,
                  "TSMC 4N, CoWoS-S"),
    PublishedPart("B200", "n4p", "hbm3e", 2.25e15, 148 * 512 * KiB + 126 * MiB, 8.0, 8.0,
                  8e12, 900 * GB, 50 * GB, 2.0, 2 * 800.0, 1000.0, 6400.0, 1100.0, 0.75,
                  "TSMC 4NP, CoWoS-L"),
    PublishedPart("MI300X", "n5", "hbm3", 304 * 2.1e9 * 2048, 304 * 608 * KiB + 32 * MiB
                  + 256 * MiB, 8.0, 12.0, 5.3e12, 7 * 64 * GB, 50 * GB, 12.0, 1725.0, 750.0,
                  5300.0, 1200.0, 0.53, "N5 XCDs + N6 IODs (as N5), CoWoS-S"),
)

# the band the model's cost to make must fall in: third-party cost figures
# disagree by tens of percent (ASSUMPTION: +-20% of each analysts' figure)
COST_BAND = 0.20
# the bands of area and board power (the task's acceptance bounds)
AREA_BAND = POWER_BAND = 0.15


def wafer_area_mm2() -> float:
    return math.pi * (WAFER_DIAMETER_MM / 2) ** 2
