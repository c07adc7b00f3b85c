"""`codesign program`'s inputs: MODULE:FUNCTION and the spec file (TOML).

```toml
system = "dgx-h100"     # optional: a preset or system TOML (--system wins)

[mesh]                  # the traced mesh, axes in order, the last innermost
dp = 2
tp = 4

[scale]                 # optional: cost on more devices along these axes
dp = 512

[config]                # optional: keyword arguments of a builder FUNCTION
hidden = 256

[[args]]                # optional: FUNCTION is the step itself, on these arrays
shape = [16, 128]
dtype = "int32"
sharding = ["dp", ""]   # a mesh axis (or "") per dimension
```

Without `[[args]]` FUNCTION is a builder: `FUNCTION(mesh, **config)` returns
`(step, args, in_shardings, out_shardings)` (codesign/program/examples.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import tomllib
from pathlib import Path

from .. import _files

DTYPES = ("float32", "bfloat16", "float16", "int32", "int64", "uint32", "bool")


@dataclasses.dataclass(frozen=True)
class Spec:
    mesh: dict
    scale: dict
    config: dict
    args: tuple  # ({'shape': [...], 'dtype': str, 'sharding': [...]}, ...)
    system: str | None


def _axes(table, key: str) -> dict:
    if not isinstance(table, dict):
        raise ValueError(f"{key} must be a table of AXIS = SIZE, got {table!r}")
    out = {}
    for axis, size in table.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{key}.{axis}={size!r} must be a positive integer")
        out[str(axis)] = size
    return out


def parse_axes(text: str, key: str) -> dict:
    """`"dp=2,tp=4"` -> {'dp': 2, 'tp': 4} (order kept)."""
    out = {}
    for part in str(text).split(","):
        axis, _, value = part.partition("=")
        if not axis.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"{key}={text!r}: {part.strip()!r} must be AXIS=SIZE with a "
                             "positive integer size (e.g. dp=2,tp=4)")
        out[axis.strip()] = int(value)
    return out


def load(path: str | None) -> Spec:
    data = tomllib.loads(_files.read_text(path, "--spec")) if path else {}
    known = {"mesh", "scale", "config", "args", "system"}
    for key in data:
        if key not in known:
            raise ValueError(f"spec key {key!r} is unknown; keys are {', '.join(sorted(known))}")
    mesh = _axes(data.get("mesh", {}), "mesh")
    scale = _axes(data.get("scale", {}), "scale")
    config = data.get("config", {})
    if not isinstance(config, dict):
        raise ValueError(f"config must be a table, got {config!r}")
    args = data.get("args", [])
    if not isinstance(args, list):
        raise ValueError("args must be an array of tables ([[args]])")
    for i, a in enumerate(args):
        if not isinstance(a, dict) or "shape" not in a:
            raise ValueError(f"args[{i}] must be a table with shape = [...]")
        if not all(isinstance(d, int) and d >= 0 for d in a["shape"]):
            raise ValueError(f"args[{i}].shape={a['shape']!r} must be non-negative integers")
        if a.get("dtype", "float32") not in DTYPES:
            raise ValueError(f"args[{i}].dtype={a.get('dtype')!r}; choose one of "
                             f"{', '.join(DTYPES)}")
        sharding = a.get("sharding", [])
        if len(sharding) > len(a["shape"]):
            raise ValueError(f"args[{i}].sharding={sharding!r} names more dimensions than "
                             f"shape={a['shape']!r}")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system={system!r} must be a preset name or a TOML path")
    return Spec(mesh, scale, config, tuple(args), system)


def function(target: str):
    """The object MODULE:FUNCTION names (MODULE dotted, or a path to a .py file)."""
    module_name, sep, name = str(target).rpartition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"MODULE:FUNCTION={target!r} must name a module and a function, "
                         "e.g. codesign.program.examples:transformer or model.py:step")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise FileNotFoundError(f"MODULE:FUNCTION={target!r}: no file {module_name!r}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"MODULE:FUNCTION={target!r}: cannot import {module_name!r} "
                             f"({e})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"MODULE:FUNCTION={target!r}: {module_name} has no function {name!r}")
    return fn


def arrays(spec: Spec, mesh):
    """(ShapeDtypeStructs, NamedShardings) of the spec's [[args]]."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    structs, shardings = [], []
    for i, a in enumerate(spec.args):
        names = [s or None for s in a.get("sharding", [])]
        for s in names:
            if s is not None and s not in mesh.axis_names:
                raise ValueError(f"args[{i}].sharding names axis {s!r}, not in the mesh "
                                 f"({', '.join(mesh.axis_names)})")
        structs.append(jax.ShapeDtypeStruct(tuple(a["shape"]), jnp.dtype(a.get("dtype",
                                                                                "float32"))))
        shardings.append(NamedSharding(mesh, P(*names)))
    return tuple(structs), tuple(shardings)
