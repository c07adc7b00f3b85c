"""A traced `Program` costed on any `System`: one pure, differentiable JAX function
of the system (`cost`), the program's structure static (numpy arrays).

- a kernel with dots or convolutions: `compute.gemm_time_s` of each GEMM (GEMM
  efficiency by shape, one kernel overhead each, its dtype: the program's);
- every other kernel: memory-bound, `compute.streaming_time_s` of the bytes it
  reads and writes plus one `chip.kernel_overhead_s`;
- a collective: `traffic.cost_on` (the tiers it sees, `auto` over every
  algorithm, hierarchical when it leaves the scale-up domain) for the group its
  replica groups span, placed as the traffic table places a group: ranks
  numbered with the mesh's last axis innermost, a group of an axis `stride`
  ranks apart sharing clip(domain / stride, 1, size) ranks per scale-up domain;
- the schedule: `_graph`'s two in-order streams, the end of each node its
  time plus the latest end of its predecessors (a `lax.scan` over the nodes in
  schedule order); communication is exposed where the compute stream waits.

Scaling: `scale={'dp': 128}` costs the program on a mesh whose `dp` axis has 128
devices instead of the traced size, the other axes as traced. Each device's
kernels and each collective's bytes stay as traced (weak scaling: the per-device
batch is fixed, the global batch grows with the axis; exact for a data-parallel
axis, whose shards do not change with its size); only the groups that span the
axis grow, and so do their placement and tiers.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..model import compute, traffic
from ..model.hardware import System
from ..model.relax import EXACT, smooth_clip, smoothing
from ._trace import Program


class ProgramEstimate(eqx.Module):
    """What one step of a traced program costs on a system (jnp leaves)."""

    step_time_s: jax.Array
    compute_s: jax.Array  # the compute stream's busy time
    gemm_s: jax.Array  # of it: kernels with dots / convolutions
    memory_s: jax.Array  # of it: memory-bound kernels
    communication_s: jax.Array  # every collective's time, summed
    exposed_s: jax.Array  # the compute stream waiting on collectives (step - compute)
    collective_s: jax.Array  # (K,) each collective's time, schedule order
    collective_exposed_s: jax.Array  # (K,) of it, the part the compute stream waits
    collective_start_s: jax.Array  # (K,)
    devices: jax.Array  # the mesh costed (after scaling)

    @property
    def hidden_s(self) -> jax.Array:
        """The communication not exposed: a difference of two sums, clipped at 0 (where
        all of it is exposed they agree but for rounding: issue 46's --scale
        dp=10000000 printed hidden_s = -1.4e-20)."""
        return jnp.maximum(self.communication_s - self.exposed_s, 0.0)

    def breakdown_s(self) -> dict:
        return {"gemm": self.gemm_s, "memory_bound": self.memory_s,
                "exposed_communication": self.exposed_s}


def scaled_sizes(mesh: dict, scale: dict | None) -> tuple[int, ...]:
    """The axis sizes of `mesh` ({axis: devices along it, in order}: a traced
    program's `Program.mesh`) with `scale`'s axes set."""
    scale = dict(scale or {})
    unknown = set(scale) - set(mesh)
    if unknown:
        raise ValueError(f"scale={scale!r}: axis {sorted(unknown)[0]!r} is not an axis of the "
                         f"traced mesh ({', '.join(mesh)})")
    sizes = []
    for a, s in mesh.items():
        v = scale.get(a, s)
        if int(v) != v or v < 1:
            raise ValueError(f"scale={scale!r}: {a}={v!r} must be a positive integer")
        sizes.append(int(v))
    return tuple(sizes)


def _geometry(program: Program, sizes: tuple[int, ...]) -> dict:
    """Per collective (static): ranks, GPUs spanned, innermost stride, and per
    axis the stride and ranks along it (for the ranks inside a domain)."""
    traced = program.axis_sizes
    n_axes = len(sizes)
    strides = np.array([math.prod(sizes[a + 1:]) for a in range(n_axes)], float)
    out = {k: [] for k in ("ranks", "span", "stride", "axis_stride", "axis_ranks")}
    for op in program.collectives:
        extent = np.ones(n_axes)
        if op.collective == "send_recv":
            pair = op.groups[0] if op.groups else (0, 0)
            a, b = (np.array(np.unravel_index(d, traced)) for d in pair)
            distance = float(np.abs(a - b) @ strides) or 1.0
            out["ranks"].append(2.0)
            out["span"].append(2.0 * distance)
            out["stride"].append(distance)
            out["axis_stride"].append(np.array([distance] + [1.0] * (n_axes - 1)))
            out["axis_ranks"].append(np.array([2.0] + [1.0] * (n_axes - 1)))
            continue
        group = op.groups[0] if op.groups else (0,)
        coords = np.array(np.unravel_index(list(group), traced)).T
        for a in range(n_axes):
            g = len(set(coords[:, a]))
            # a group along a whole axis grows with it; a part of an axis stays
            extent[a] = sizes[a] if g == traced[a] else g
        varying = extent > 1
        out["ranks"].append(float(np.prod(extent)))
        out["span"].append(float(np.max(np.where(varying, strides * extent, 1.0))))
        out["stride"].append(float(np.min(np.where(varying, strides, np.inf)))
                             if varying.any() else 1.0)
        out["axis_stride"].append(strides.copy())
        out["axis_ranks"].append(extent)
    return {k: np.array(v, float).reshape(len(program.collectives), -1)
            if k.startswith("axis") else np.array(v, float) for k, v in out.items()}


def _compute_s(program: Program, system: System) -> tuple[jax.Array, jax.Array]:
    """(seconds of each compute op in `graph.compute` order, is-a-GEMM-kernel mask)."""
    ops = [program.ops[i] for i in program.graph.compute]
    is_gemm = np.array([op.kind == "gemm" for op in ops], bool)
    times = jnp.zeros(len(ops))
    rows = [(j, g) for j, op in enumerate(ops) for g in op.gemm]
    for dtype in sorted({g[4] for _, g in rows}):
        mine = [(j, g) for j, g in rows if g[4] == dtype]
        idx = np.array([j for j, _ in mine])
        batch, m, k, n = (np.array([g[i] for _, g in mine], float) for i in range(4))
        times = times.at[idx].add(compute.gemm_time_s(system, m, k, n, dtype, batch))
    moved = np.array([op.bytes for op in ops], float)
    memory = compute.streaming_time_s(system, moved) + system.chip.kernel_overhead_s
    return jnp.where(is_gemm, times, memory), is_gemm


def _collectives_s(program: Program, system: System, sizes, t) -> jax.Array:
    colls = program.collectives
    if not colls:
        return jnp.zeros((0,))
    geo = _geometry(program, sizes)
    domain = system.scale_up_domain
    per_axis = jnp.where(geo["axis_ranks"] > 1,
                         smooth_clip(domain / geo["axis_stride"], 1.0, geo["axis_ranks"], t),
                         1.0)
    inside = jnp.prod(per_axis, axis=1)
    n_bytes = np.array([op.collective_bytes for op in colls], float)
    times = jnp.zeros(len(colls))
    for kind in sorted({op.collective for op in colls}):
        idx = np.array([k for k, op in enumerate(colls) if op.collective == kind])

        def one(n, ranks, ins, span, stride, kind=kind):
            return traffic.cost_on(kind, n, (ranks, ins, span, stride), system, t).time_s

        times = times.at[idx].set(jax.vmap(one)(
            jnp.asarray(n_bytes[idx]), jnp.asarray(geo["ranks"][idx]), inside[idx],
            jnp.asarray(geo["span"][idx]), jnp.asarray(geo["stride"][idx])))
    return times


def _schedule(program: Program, segment_s: jax.Array, collective_s: jax.Array):
    """(start, end) of every node: end = time + latest end of its predecessors."""
    g = program.graph
    w = jnp.where(g.node_is_collective,
                  collective_s[np.where(g.node_is_collective, g.node_index, 0)]
                  if len(collective_s) else 0.0,
                  segment_s[np.where(g.node_is_collective, 0, g.node_index)])

    def node(end, x):
        v, wv, pv = x
        e = wv + jnp.max(end[pv])
        return end.at[v].set(e), e

    _, ends = jax.lax.scan(node, jnp.zeros(g.nodes + 1),
                           (jnp.arange(g.nodes), w, jnp.asarray(g.preds)))
    return ends - w, ends


def cost(program: Program, system: System, scale: dict | None = None, t=EXACT
         ) -> ProgramEstimate:
    """One step of `program` on `system` (a pure JAX function of the system's
    leaves: jit, grad and vmap it), on the traced mesh with `scale`'s axes set to
    their sizes (see the module docstring); `t` (a `relax.Smoothing`) relaxes the
    collectives' `auto` and placement as in the step model (`relax.EXACT`: exact)."""
    t = smoothing(t)
    sizes = scaled_sizes(program.mesh, scale)
    devices = float(math.prod(sizes))
    system = eqx.tree_at(lambda s: s.gpus, system, jnp.asarray(devices, float))
    g = program.graph
    op_s, is_gemm = _compute_s(program, system)
    segment_s = jax.ops.segment_sum(op_s, g.segment_of, num_segments=g.segments)
    coll_s = _collectives_s(program, system, sizes, t)
    start, end = _schedule(program, segment_s, coll_s)
    step_s = jnp.max(end)
    compute_s = jnp.sum(segment_s)
    # the compute stream's idle gaps: before each segment, and after the last
    seg_start, seg_end = start[g.segment_node], end[g.segment_node]
    lo = jnp.concatenate([jnp.zeros(1), seg_end])
    hi = jnp.concatenate([seg_start, step_s[None]])
    c_start, c_end = start[g.collective_node], end[g.collective_node]
    overlap = jnp.maximum(jnp.minimum(c_end[:, None], hi[None]) -
                          jnp.maximum(c_start[:, None], lo[None]), 0.0)
    # each part from non-negative terms, a difference clipped at 0: rounding never
    # prints a negative time (the schedule's step and the compute sum add in other orders)
    gemm_s = jnp.sum(jnp.where(is_gemm, op_s, 0.0))
    memory_s = jnp.sum(jnp.where(is_gemm, 0.0, op_s))
    exposed_s = jnp.maximum(step_s - compute_s, 0.0)
    return ProgramEstimate(step_s, compute_s, gemm_s, memory_s, jnp.sum(coll_s), exposed_s,
                           coll_s, jnp.sum(overlap, axis=1), c_start, jnp.asarray(devices))
