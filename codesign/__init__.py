"""codesign: differentiable cost models and real collectives for co-designing
distributed training systems.

Importing codesign changes no JAX setting. The models compute in the
precision JAX is set to; the `codesign` command turns on float64 for its own
process, and a library user gets the same numbers with
`jax.config.update("jax_enable_x64", True)` before building a scenario (or by
working inside `with jax.enable_x64(True):`). In float32 the built-in scenarios'
outputs agree to 1e-4 relative (tests/test_public_api.py).

Every name below loads on first use (`__getattr__`): `import codesign` imports
neither JAX nor a model module, so that a command loads only what it runs
(`python -X importtime -c "import codesign"`: about 1 ms of the package's own).
"""

import importlib
import importlib.util

__version__ = "0.1.0"

# The modules, each a namespace with one job (README.md, "Layout"): name -> module.
_MODULES = {
    "chip": "chip", "output_checks": "output_checks", "presets": "presets",
    "scenario": "scenario", "uncertainty": "uncertainty", "units": "units",
    "execute": "execute", "optimize": "optimize", "plots": "plots", "program": "program",
    "sweep": "sweep", "validate": "validate",
    **{m: f"model.{m}" for m in (
        "attention", "collectives", "economics", "fabric", "hardware", "network_roofline",
        "overlap", "plan", "relax", "reliability", "stage", "step", "strategies", "traffic",
        "workload")},
}
# The names most programs need: name -> the module that defines it.
_NAMES = {
    "Assumptions": "model.economics", "Prices": "model.fabric", "Chip": "model.hardware",
    "System": "model.hardware", "Tier": "model.hardware", "roofline": "model.network_roofline",
    "Plan": "model.plan", "Precision": "model.plan", "Reliability": "model.reliability",
    "Estimate": "model.step", "estimate": "model.step", "outputs": "model.step",
    "Transformer": "model.workload", "Scenario": "scenario", "get_knob": "scenario",
    "labels": "scenario", "load": "scenario", "set_knobs": "scenario",
}

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
    """A public name (`__all__`) or any submodule, imported on first use and kept."""
    if name in _NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    elif name in _MODULES:
        value = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f"{__name__}.{name}")  # codesign.model, .compiling, ...
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
