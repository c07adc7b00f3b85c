"""The chip's area, cost and power model (docs/chip.md).

A `ChipDesign` holds one accelerator's design variables as float leaves
(dense BF16 FLOP/s, the 8-bit ratio, SRAM, HBM stacks, their height and pin
rate, scale-up and NIC bandwidth, dies, margin, volume, NRE) and two static
choices (process node, HBM generation). Pure jnp functions of it give its
silicon area (`area_mm2`), cost to make (`cost_usd`), price (`price_usd`) and
board power at the utilisations the step model computes (`board_power_w`);
`to_chip` / `to_system` / `to_assumptions` put it in the step model's and the
economics' terms, so a design replaces a preset's chip in a scenario.
`checks()` sets the model beside H100 SXM5, B200 and MI300X.
"""

from ._constants import HBM_GENERATIONS as HBM_GENERATIONS
from ._constants import NODES as NODES
from ._constants import PUBLISHED as PUBLISHED
from ._constants import HbmGeneration as HbmGeneration
from ._constants import Node as Node
from ._constants import PublishedPart as PublishedPart
from ._convert import Ownership as Ownership
from ._convert import to_assumptions as to_assumptions
from ._convert import to_chip as to_chip
from ._convert import to_system as to_system
from ._convert import usd_per_gpu_hour as usd_per_gpu_hour
from ._design import PART_OF_PRESET_CHIP as PART_OF_PRESET_CHIP
from ._design import PHYSICAL_LIMITS as PHYSICAL_LIMITS
from ._design import ChipDesign as ChipDesign
from ._design import physical_limits as physical_limits
from ._design import published_design as published_design
from ._model import Area as Area
from ._model import Cost as Cost
from ._model import Fitted as Fitted
from ._model import Power as Power
from ._model import area as area
from ._model import area_mm2 as area_mm2
from ._model import board_power_w as board_power_w
from ._model import cost as cost
from ._model import cost_usd as cost_usd
from ._model import die_mm2 as die_mm2
from ._model import die_yield as die_yield
from ._model import dies_per_wafer as dies_per_wafer
from ._model import fitted as fitted
from ._model import hbm_Bps as hbm_Bps
from ._model import hbm_bytes as hbm_bytes
from ._model import interposer_mm2 as interposer_mm2
from ._model import max_hbm_stacks as max_hbm_stacks
from ._model import nre_usd as nre_usd
from ._model import package_kind as package_kind
from ._model import power as power
from ._model import price_usd as price_usd
from ._model import scale_up_lanes as scale_up_lanes
from ._published import Check as Check
from ._published import checks as checks
from ._published import checks_markdown as checks_markdown

__all__ = [
    # design and its choices
    "ChipDesign", "Node", "NODES", "HbmGeneration", "HBM_GENERATIONS", "published_design",
    "PublishedPart", "PUBLISHED", "PART_OF_PRESET_CHIP", "PHYSICAL_LIMITS", "physical_limits",
    # area
    "Area", "area", "area_mm2", "die_mm2", "interposer_mm2", "max_hbm_stacks", "hbm_bytes",
    "hbm_Bps", "scale_up_lanes",
    # cost
    "Cost", "cost", "cost_usd", "dies_per_wafer", "die_yield", "nre_usd", "price_usd",
    "package_kind",
    # power
    "Power", "power", "board_power_w",
    # the step model's and economics' terms
    "to_chip", "to_system", "Ownership", "usd_per_gpu_hour", "to_assumptions",
    # fits and checks
    "Fitted", "fitted", "Check", "checks", "checks_markdown",
]
