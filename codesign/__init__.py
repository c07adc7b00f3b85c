"""codesign: differentiable cost models and real collectives for co-designing
distributed training systems.

Importing codesign enables float64 in JAX (`jax_enable_x64`): step times span
microseconds to months and gradients are checked against finite differences.
"""

import jax

jax.config.update("jax_enable_x64", True)

# ruff: noqa: E402
from . import collectives as collectives
from . import units as units
from .hardware import Chip as Chip
from .hardware import System as System
from .hardware import Tier as Tier
from .plan import Plan as Plan
from .scenario import Scenario as Scenario
from .scenario import load as load
from .scenario import set_knobs as set_knobs
from .step import estimate as estimate
from .step import outputs as outputs
from .workload import Transformer as Transformer

__version__ = "0.1.0"
