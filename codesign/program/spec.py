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
import inspect
import math
import sys
from pathlib import Path

from . import _user

# the dtypes an [[args]] array may have, and the bytes of one element of each
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "int64": 8, "uint32": 4,
          "bool": 1}
# The largest array (global, before sharding) a spec or a builder may declare:
# 1 TiB, five times the largest one array of a 405B-parameter model (one of its
# layers' stacked MLP weights, 126 x 16,384 x 53,248 in bf16: 0.2 TiB). Nothing is
# allocated, but XLA checks extents with an abort, not an exception: a 1e12 x 1e12
# shape kills the process (SIGABRT, "overflow in static extent product"), so
# extents are checked before tracing.
MAX_ARRAY_BYTES = 2**40
ARGS_KEYS = ("shape", "dtype", "sharding")


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
    """`"dp=2,tp=4"` -> {'dp': 2, 'tp': 4} (order kept); an empty text or an axis
    named twice is a one-line error naming `key` (the flag)."""
    if not str(text).strip():
        raise ValueError(f"{key} is empty; give AXIS=SIZE pairs (e.g. dp=2,tp=4), or leave "
                         f"{key} out for the spec's")
    out = {}
    for part in str(text).split(","):
        axis, _, value = part.partition("=")
        axis, value = axis.strip(), value.strip()
        if not axis or not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise ValueError(f"{key}={text!r}: {part.strip()!r} must be AXIS=SIZE with a "
                             "positive integer size (e.g. dp=2,tp=4)")
        if axis in out:
            raise ValueError(f"{key}={text!r}: axis {axis!r} is given twice")
        out[axis] = int(value)
    return out


def check_extent(shape, itemsize: int, what: str, least: int = 1) -> None:
    """A one-line ValueError naming `what` unless `shape` is integers of at least
    `least` (a spec's: positive) whose array of `itemsize`-byte elements is at most
    `MAX_ARRAY_BYTES`."""
    dims = list(shape) if isinstance(shape, (list, tuple)) else None
    if dims is None or not all(isinstance(d, int) and not isinstance(d, bool) and d >= least
                               for d in dims):
        kind = "positive" if least == 1 else f"at least {least}"
        raise ValueError(f"{what}={_user.describe_value(shape)} must be a list of {kind} "
                         "integers")
    n_bytes = math.prod(dims) * itemsize
    if n_bytes > MAX_ARRAY_BYTES:
        raise ValueError(f"{what}={_user.describe_value(shape)} holds {n_bytes:.3g} bytes, "
                         "past the 2**40 (1 TiB) a traced array may have "
                         "(codesign.program.spec.MAX_ARRAY_BYTES)")


def _arg(i: int, a) -> None:
    """One [[args]] table: known keys, a dtype of `DTYPES`, a bounded shape, a
    sharding of at most one axis name (or "") per dimension."""
    if not isinstance(a, dict) or "shape" not in a:
        raise ValueError(f"args[{i}] must be a table with shape = [...]")
    for key in a:
        if key not in ARGS_KEYS:
            raise ValueError(f"args[{i}].{key} is unknown; keys are {', '.join(ARGS_KEYS)}")
    dtype = a.get("dtype", "float32")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"args[{i}].dtype={dtype!r}; choose one of {', '.join(DTYPES)}")
    check_extent(a["shape"], DTYPES[dtype], f"args[{i}].shape")
    sharding = a.get("sharding", [])
    if not isinstance(sharding, list) or not all(isinstance(s, str) for s in sharding):
        raise ValueError(f"args[{i}].sharding={sharding!r} must be a list of mesh axis "
                         'names ("" for a dimension not split)')
    if len(sharding) > len(a["shape"]):
        raise ValueError(f"args[{i}].sharding={sharding!r} names more dimensions than "
                         f"shape={a['shape']!r}")


def load(path: str | None) -> Spec:
    """The spec file at `path` (None: an empty spec), read as `codesign estimate`
    reads a scenario (`scenario.read_toml`: size and nesting capped, errors name
    the file), each key checked."""
    from .. import scenario

    data = scenario.read_toml(path, what="spec") if path else {}
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
        _arg(i, a)
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system={system!r} must be a preset name or a TOML path")
    return Spec(mesh, scale, config, tuple(args), system)


def function(target: str):
    """The object MODULE:FUNCTION names (MODULE dotted, or a path to a .py file). The
    module runs inside `_user.running`: what its import raises is the user's error
    (`<file>:<module>: ...`); a module that is not there is codesign's (cannot
    import)."""
    module_name, sep, name = str(target).rpartition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"MODULE:FUNCTION={target!r} must name a module and a function, "
                         "e.g. codesign.program.examples:transformer or model.py:step")
    module = _module_file(module_name, target) if module_name.endswith(".py") else \
        _module_dotted(module_name, target)
    with _user.running(f"{module_name}:<module>"):  # a module's __getattr__ is its code
        fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"MODULE:FUNCTION={target!r}: {module_name} has no function {name!r}")
    if inspect.isclass(fn):
        raise ValueError(f"{_user.location(fn)}: is a class, not a function; MODULE:FUNCTION "
                         "names a builder or the step function itself")
    return fn


def _module_file(module_name: str, target: str):
    """The module of a .py file, executed inside the user boundary (and left out of
    `sys.modules` when it fails)."""
    path = Path(module_name)
    if not path.is_file():
        raise FileNotFoundError(f"MODULE:FUNCTION={target!r}: no file {module_name!r}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    added = sys.modules.setdefault(path.stem, module) is module
    try:
        with _user.running(f"{module_name}:<module>"):
            spec.loader.exec_module(module)
    except BaseException:
        if added:
            sys.modules.pop(path.stem, None)
        raise
    return module


def _module_dotted(module_name: str, target: str):
    """A dotted module imported inside the user boundary; the module (or a package
    above it) not being there is a bad MODULE:FUNCTION, anything else the user's."""
    try:
        with _user.running(f"{module_name}:<module>"):
            return importlib.import_module(module_name)
    except _user.UserError as e:
        missing = getattr(e.__cause__, "name", None)
        if isinstance(e.__cause__, ModuleNotFoundError) and missing and (
                module_name == missing or module_name.startswith(missing + ".")):
            raise ValueError(f"MODULE:FUNCTION={target!r}: cannot import {module_name!r} "
                             f"({e.__cause__})") from None
        raise


def _takes(fn, args: tuple, kwargs: dict, what: str) -> None:
    """A one-line ValueError (`what`: the inputs, as the spec names them) when `fn`'s
    signature cannot take `args` and `kwargs`: a spec that does not fit the
    function, told apart from a TypeError raised inside it."""
    try:
        signature = inspect.signature(fn)
    except Exception:  # noqa: BLE001 - none to read (a builtin, a hostile object): the call says
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise ValueError(f"{_user.location(fn)} does not take {what}: {e}") from None


def build(fn, mesh, config: dict):
    """`fn(mesh, **config)` (the user's builder, inside the user boundary), checked to
    be (step, args, in_shardings, out_shardings) with a function for step, a tuple
    or list for args and every array in it within `MAX_ARRAY_BYTES`."""
    _takes(fn, (mesh,), config, f"the mesh and the spec's [config] {sorted(config)}")
    where = _user.location(fn)
    built = _user.call(where, fn, mesh, **config)
    if not isinstance(built, (tuple, list)) or len(built) != 4:
        raise ValueError(f"{where}: returned {_kind(built)}; a builder returns (step, args, "
                         "in_shardings, out_shardings), or give [[args]] in the spec and name "
                         "the step")
    step, step_args, ins, outs = built
    if not callable(step) or inspect.isclass(step):
        raise ValueError(f"{where}: returned a step that is {_kind(step)}, not a function")
    if not isinstance(step_args, (tuple, list)):
        raise ValueError(f"{where}: returned args that are {_kind(step_args)}, not a tuple of "
                         "the step's arguments")
    for i, (shape, itemsize) in enumerate(_extents(step_args, where)):
        check_extent(shape, itemsize, f"{where}: returned args, array {i}: shape", least=0)
    return step, tuple(step_args), ins, outs


def check_args(fn, structs: tuple) -> None:
    """The step `fn` must take the spec's [[args]] arrays, one positional each."""
    _takes(fn, tuple(structs), {}, f"the spec's {len(structs)} [[args]] arrays")


def _kind(value) -> str:
    """A value in a message: its type, and the value itself when short."""
    text = _user.describe_value(value)
    return f"{text} ({type(value).__name__})"


def _extents(tree, where: str) -> list:
    """(shape, bytes per element) of every array in the builder's args (its pytree
    flattened inside the user boundary: the user's types flatten themselves)."""
    import jax

    with _user.running(where):
        out = []
        for leaf in jax.tree.leaves(tree):
            shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
            if shape is not None and hasattr(dtype, "itemsize"):
                out.append(([int(d) for d in shape], int(dtype.itemsize)))
        return out


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
