"""`trace`: lower and compile a user's jitted step for a mesh of fake (or real)
devices and read its compiled HLO into a `Program` (static data: numpy arrays)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from . import _graph, _hlo_ops, _user

# The most devices a program is traced for (measured, jax 0.10.2 on a shared
# 2-core machine: the 2-layer audit transformer compiles for 64, 256 and 1,024
# fake CPU devices in 2.9, 2.7 and 4.5 s; for 4,096, XLA:CPU refuses to compile,
# "Multiprocess computations aren't implemented on the CPU backend"). A larger
# machine is costed by scaling the data axis of a smaller trace (`cost(..., scale=)`).
MAX_TRACE_DEVICES = 1024
# The largest array a traced step may make (global, before sharding): XLA counts an
# array's bytes in an int64 and aborts the process past it (SIGABRT, "overflow in
# static extent product", measured: f32[2**31, 2**30] aborts, f32[2**30, 2**30]
# and sixteen live f32[2**28, 2**30] compile on CPU, jax 0.10.2); 2**60 leaves 8x.
# The step's inputs are bounded tighter (`spec.MAX_ARRAY_BYTES`).
MAX_TRACED_BYTES = 2**60


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """A compiled step as data: every kernel and collective of its entry
    computation (`ops`, schedule order), its schedule graph (`graph`), the mesh
    it was traced on, and XLA's own whole-module cost analysis."""

    name: str
    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    ops: tuple[_hlo_ops.Op, ...]
    graph: _graph.Graph
    xla_cost: dict  # compiled.cost_analysis() totals ({} where the backend has none)
    has_async: bool  # async collective pairs in the HLO (GPU/TPU); none on XLA:CPU
    hlo_text: str = dataclasses.field(repr=False, default="")

    @property
    def mesh(self) -> dict:
        """{axis: devices along it}, in the mesh's order."""
        return dict(zip(self.axis_names, self.axis_sizes, strict=True))

    @property
    def devices(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def collectives(self) -> tuple[_hlo_ops.Op, ...]:
        return tuple(self.ops[i] for i in self.graph.collective)

    @property
    def flops(self) -> float:
        """FLOPs per device by own counting (dots, convolutions, element-wise)."""
        return float(sum(op.flops for op in self.ops))

    @property
    def gemm_flops(self) -> float:
        return float(sum(op.flops for op in self.ops if op.kind == "gemm"))

    def axes(self, op: _hlo_ops.Op) -> tuple[str, ...]:
        """The mesh axes a collective's groups vary along."""
        return group_axes(op.groups, self.axis_sizes, self.axis_names)

    def counts(self) -> dict:
        """{kind: ops of that kind}."""
        return dict(Counter(op.kind for op in self.ops))


def group_axes(groups, sizes, names) -> tuple[str, ...]:
    varying = set()
    for g in groups:
        coords = np.array(np.unravel_index(list(g), sizes)).T
        varying |= {a for a in range(len(sizes)) if len(set(coords[:, a])) > 1}
    return tuple(names[a] for a in sorted(varying))


def from_hlo(text: str, axis_names, axis_sizes, name: str = "program",
             xla_cost: dict | None = None) -> Program:
    """A `Program` from compiled HLO text for a mesh (device id i = position i
    of the mesh's devices, row-major)."""
    sizes = tuple(int(s) for s in axis_sizes)
    ops = _hlo_ops.ops(text, math.prod(sizes))
    for op in ops:
        for g in op.groups:
            if any(not 0 <= d < math.prod(sizes) for d in g):
                raise ValueError(f"{op.name}: device ids {g} exceed the mesh of "
                                 f"{math.prod(sizes)} devices")
    return Program(name, tuple(axis_names), sizes, tuple(ops), _graph.build(ops),
                   dict(xla_cost or {}), any(op.is_async for op in ops), text)


def check_devices(n: int, available: int | None = None) -> None:
    """A one-line error past the trace cap or the devices JAX sees."""
    if n > MAX_TRACE_DEVICES:
        raise ValueError(f"mesh of {n} devices exceeds the trace cap of {MAX_TRACE_DEVICES} "
                         "(codesign.program.MAX_TRACE_DEVICES): trace on fewer devices and "
                         "cost on more by scaling the data axis (scale=, --scale)")
    available = len(jax.devices()) if available is None else available
    if n > available:
        raise ValueError(f"mesh of {n} devices needs {n} devices; JAX sees {available} (on "
                         f"CPU set XLA_FLAGS=--xla_force_host_platform_device_count={n} "
                         "before JAX starts, or `codesign program --devices`)")


def _named(tree, mesh):
    """PartitionSpecs in a pytree of shardings -> NamedSharding on `mesh`."""
    if tree is None:
        return None
    return jax.tree.map(lambda s: NamedSharding(mesh, s) if isinstance(s, P) else s, tree,
                        is_leaf=lambda x: isinstance(x, P) or x is None)


def compile_text(fn, *args, mesh, in_shardings=None, out_shardings=None,
                 compiler_options=None):
    """(compiled HLO text, XLA cost totals) of `fn` on `args` for `mesh`. JAX traces
    `fn` (the user's step) inside `_user.running`: whatever fails there, in the
    step or in JAX on what the step and its shardings are, is the user's error,
    a one-line ValueError naming the step's file and function; so is a step that
    returns nothing or makes an array XLA would abort on (`check_extents`)."""
    check_devices(int(mesh.devices.size))
    where = _user.location(fn)
    with _user.running(where), jax.set_mesh(mesh):
        if hasattr(fn, "lower") and in_shardings is None and out_shardings is None:
            jitted = fn
        else:
            kwargs = {}
            if in_shardings is not None:
                kwargs["in_shardings"] = _named(in_shardings, mesh)
            if out_shardings is not None:
                kwargs["out_shardings"] = _named(out_shardings, mesh)
            jitted = jax.jit(getattr(fn, "__wrapped__", fn), **kwargs)
        # traced, its arrays checked before XLA compiles them (a jit-like object
        # without `trace` is lowered at once)
        staged = jitted.trace(*args) if hasattr(jitted, "trace") else jitted.lower(*args)
    if not jax.tree.leaves(staged.out_info):
        raise _user.UserError(f"{where}: returned no arrays (None); a step returns what it "
                              "computes (the loss, the updated parameters)")
    if hasattr(staged, "jaxpr"):
        check_extents(staged.jaxpr, where)
    with _user.running(where), jax.set_mesh(mesh):
        lowered = staged.lower() if hasattr(staged, "jaxpr") else staged
        compiled = lowered.compile(compiler_options) if compiler_options else lowered.compile()
    return compiled.as_text(), _hlo_ops.cost_analysis_totals(compiled)


def _subjaxprs(value):
    """The jaxprs in an equation's parameter (a scan's body, a cond's branches)."""
    if hasattr(value, "eqns"):
        return [value]
    if hasattr(getattr(value, "jaxpr", None), "eqns"):
        return [value.jaxpr]
    if isinstance(value, (tuple, list)):
        return [j for v in value for j in _subjaxprs(v)]
    return []


def check_extents(jaxpr, where: str) -> None:
    """Every array the traced step makes (in loops and branches too) at most
    `MAX_TRACED_BYTES`: past 2**63 bytes XLA aborts the process as it compiles
    ("overflow in static extent product"), which no exception handler sees."""
    todo = [getattr(jaxpr, "jaxpr", jaxpr)]
    while todo:
        for eqn in todo.pop().eqns:
            for var in eqn.outvars:
                _check_aval(getattr(var, "aval", None), eqn, where)
            for value in eqn.params.values():
                todo.extend(_subjaxprs(value))


def _check_aval(aval, eqn, where: str) -> None:
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or not hasattr(dtype, "itemsize") or not all(
            isinstance(d, int) for d in shape):
        return
    n_bytes = math.prod(shape) * dtype.itemsize
    if n_bytes > MAX_TRACED_BYTES:
        raise _user.UserError(f"{where}: makes a {dtype} array of shape {tuple(shape)} "
                              f"({eqn.primitive}): {n_bytes:.3g} bytes, past the 2**60 XLA "
                              "is given (codesign.program._trace.MAX_TRACED_BYTES)")


def trace(fn, *args, mesh, in_shardings=None, out_shardings=None,
          name: str | None = None, compiler_options: dict | None = None) -> Program:
    """Lower and compile `fn(*args)` (a function or a `jax.jit` of one) for `mesh`
    (a `jax.sharding.Mesh`; at most `MAX_TRACE_DEVICES` devices) and read its
    compiled, partitioned HLO into a `Program`. `args` may be
    `jax.ShapeDtypeStruct`s; shardings are NamedShardings or PartitionSpecs on
    `mesh` (pytrees matching the arguments / outputs). The HLO read is what XLA
    compiles with its flags (XLA_FLAGS) and `compiler_options` (e.g.
    {'xla_cpu_use_fusion_emitters': True} pins XLA:CPU's default fusions where
    XLA_FLAGS turns them off, as tests/conftest.py does)."""
    text, totals = compile_text(fn, *args, mesh=mesh, in_shardings=in_shardings,
                                out_shardings=out_shardings, compiler_options=compiler_options)
    label = name or getattr(fn, "__name__", None) or "program"
    return from_hlo(text, mesh.axis_names, tuple(mesh.devices.shape), label, totals)
