"""codesign: differentiable cost models and real collectives for co-designing
distributed training systems.

Importing codesign changes no JAX setting. The models compute in the
precision JAX is set to; the `codesign` command turns on float64 for its own
process, and a library user gets the same numbers with
`jax.config.update("jax_enable_x64", True)` before building a scenario (or by
working inside `with jax.enable_x64(True):`). In float32 the built-in scenarios'
outputs agree to 1e-4 relative (tests/test_public_api.py).
"""

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
