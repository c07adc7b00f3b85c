"""codesign: differentiable cost models and real collectives for co-designing
distributed training systems.

Importing codesign enables float64 in JAX (`jax_enable_x64`): step times span
microseconds to months and gradients are checked against finite differences.
"""

import jax

jax.config.update("jax_enable_x64", True)

from . import units as units  # noqa: E402
from .hardware import Chip as Chip, System as System, Tier as Tier  # noqa: E402
from .hardware import preset as preset, system as system  # noqa: E402

__version__ = "0.1.0"
