"""codesign: differentiable cost models and real collectives for co-designing
distributed training systems.

Importing codesign changes no JAX setting. The models compute in the
precision JAX is set to; the `codesign` command turns on float64 for its own
process, and a library user gets the same numbers with
`jax.config.update("jax_enable_x64", True)` before building a scenario (or by
working inside `with jax.enable_x64(True):`). In float32 the built-in scenarios'
outputs agree to 1e-4 relative (tests/test_public_api.py).
"""

import importlib

from . import chip as chip
from . import output_checks as output_checks
from . import presets as presets
from . import scenario as scenario
from . import uncertainty as uncertainty
from . import units as units

# The modules, each a namespace with one job (README.md, "Layout"). Those that
# pull in matplotlib, optax or the execution path load on first use (`__getattr__`),
# so that `import codesign` and every command start fast.
from .model import attention as attention
from .model import collectives as collectives
from .model import economics as economics
from .model import fabric as fabric
from .model import hardware as hardware
from .model import network_roofline as network_roofline
from .model import overlap as overlap
from .model import plan as plan
from .model import relax as relax
from .model import reliability as reliability
from .model import stage as stage
from .model import step as step
from .model import strategies as strategies
from .model import traffic as traffic
from .model import workload as workload

# The names most programs need.
from .model.economics import Assumptions as Assumptions
from .model.fabric import Prices as Prices
from .model.hardware import Chip as Chip
from .model.hardware import System as System
from .model.hardware import Tier as Tier
from .model.network_roofline import roofline as roofline
from .model.plan import Plan as Plan
from .model.plan import Precision as Precision
from .model.reliability import Reliability as Reliability
from .model.step import Estimate as Estimate
from .model.step import estimate as estimate
from .model.step import outputs as outputs
from .model.workload import Transformer as Transformer
from .scenario import Scenario as Scenario
from .scenario import get_knob as get_knob
from .scenario import labels as labels
from .scenario import load as load
from .scenario import set_knobs as set_knobs

__version__ = "0.1.0"
_ON_FIRST_USE = ("execute", "optimize", "plots", "program", "sweep", "validate")

__all__ = [
    # modules
    "attention", "chip", "collectives", "economics", "execute", "fabric", "hardware",
    "network_roofline",
    "optimize", "output_checks", "overlap", "plan", "plots", "presets", "program",
    "relax", "reliability", "scenario", "stage", "step", "strategies", "sweep", "traffic",
    "uncertainty", "units", "validate", "workload",
    # inputs
    "Chip", "Tier", "System", "Transformer", "Plan", "Precision", "Reliability", "Prices",
    "Assumptions", "Scenario", "load", "labels", "get_knob", "set_knobs",
    # models
    "Estimate", "estimate", "outputs", "roofline",
]


def __getattr__(name: str):
    if name in _ON_FIRST_USE:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
