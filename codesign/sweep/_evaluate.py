"""Evaluation: the point function of one combo (values, and with `grad` the
elasticities d log y / d log x by a forward-mode Jacobian), the sharded
evaluator that runs a chunk on a 1D mesh of the local devices with results
independent of the layout, and the rows a chunk gives."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..model.relax import safe_div
from ._points import Chunk, Job
from ._target import combo_settings
from ._targets import TARGETS


def point_function(job: Job, combo: int) -> Callable[[jax.Array], jax.Array]:
    """x (n_float_knobs,) -> [outputs..., elasticities...] for one combo of `job`."""
    spec, pts = job.spec, job.points
    settings = combo_settings(spec.base, spec.categorical, pts.combos[combo])
    fn = TARGETS[spec.target].build(settings, spec.directory)
    names, outputs = pts.float_names, spec.outputs

    def values(x):
        out = fn({n: x[i] for i, n in enumerate(names)})
        return jnp.stack([jnp.reshape(jnp.asarray(out[o], dtype=float), ()) for o in outputs])

    if not job.grad_outputs or not names:
        return values
    rows = np.array([outputs.index(o) for o in job.grad_outputs])

    def with_elasticities(x):
        jac, y = jax.jacfwd(lambda x: (values(x), values(x)), has_aux=True)(x)
        elasticity = safe_div(jac[rows, :] * x[None, :], y[rows, None])
        return jnp.concatenate([y, elasticity.reshape(-1)])

    return with_elasticities


class Evaluator:
    """One jitted program per combo over a 1D ("batch",) mesh of the local devices:
    `shard_map` hands each device its slice of the chunk and the device maps the
    point function over it (`lax.map`: one compiled per-point program in a loop).

    Bitwise reproducibility across layouts (the merged files must not depend on
    how many devices or processes ran them) takes three measures, each found
    necessary by measurement on XLA:CPU:
    - not `vmap`: a vectorised program's last bits depend on where a point falls
      in the vector (751 of 2,400 values differed by an ulp between 1 and 2
      devices); a per-point program does not, at about the same speed;
    - the arrays the point function closes over (preset numbers) are passed as
      arguments, not baked in as constants: XLA folds constants differently in
      a one-device and in a partitioned program (167 of 4,096 values differed);
    - every device maps over at least 2 points (a 1-trip loop is inlined and
      compiled differently).
    """

    def __init__(self, job: Job, devices=None):
        self.job = job
        self.devices = list(devices if devices is not None else jax.local_devices())
        self.mesh = Mesh(np.array(self.devices), ("batch",))
        self.sharding = NamedSharding(self.mesh, PartitionSpec("batch"))
        n_float, d = job.points.n_float, len(self.devices)
        self.padded = -(-max(min(job.spec.chunk_size, n_float), 2 * d) // d) * d
        self._compiled: dict[int, tuple[Callable, tuple]] = {}

    def _compile(self, combo: int) -> tuple[Callable, tuple]:
        fn = point_function(self.job, combo)
        closed = jax.make_jaxpr(fn)(jnp.zeros(len(self.job.points.float_names)))
        consts = tuple(np.asarray(c) for c in closed.consts)

        def per_device(xs, *consts):
            one = lambda x: jax.core.eval_jaxpr(closed.jaxpr, list(consts), x)[0]  # noqa: E731
            return jax.lax.map(one, xs)

        batch, replicated = PartitionSpec("batch"), PartitionSpec()
        program = jax.jit(jax.shard_map(
            per_device, mesh=self.mesh, in_specs=(batch,) + (replicated,) * len(consts),
            out_specs=batch, check_vma=False))
        return program, consts

    def __call__(self, chunk: Chunk) -> np.ndarray:
        if chunk.combo not in self._compiled:
            self._compiled[chunk.combo] = self._compile(chunk.combo)
        program, consts = self._compiled[chunk.combo]
        x = self.job.points.float_rows(chunk.start, chunk.stop)
        pad = self.padded - len(x)  # repeat the last point: finite, then dropped
        x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)]) if pad else x
        out = program(jax.device_put(x, self.sharding), *consts)
        return np.asarray(jax.device_get(out))[:chunk.stop - chunk.start]


def chunk_rows(job: Job, chunk: Chunk, values: np.ndarray) -> list[list]:
    """The result rows of a chunk: point index, categories, float knobs, then the
    values (outputs and elasticities); a value that is not finite is a ValueError
    naming its column and the point, before anything is written."""
    pts = job.points
    combo = list(pts.combos[chunk.combo])
    base = chunk.combo * pts.n_float
    floats = pts.float_rows(chunk.start, chunk.stop).tolist()
    bad = np.argwhere(~np.isfinite(values))
    if len(bad):
        i, j = (int(v) for v in bad[0])
        at = ", ".join(f"{n}={v:g}" for n, v in zip(pts.float_names, floats[i], strict=True))
        name = job.columns[len(job.columns) - values.shape[1] + j]
        raise ValueError(f"the sweep's {name} is not finite at point {base + chunk.start + i}"
                         f" ({at or 'the base values'}): an input is beyond what the model "
                         f"can represent; narrow {', '.join(pts.float_names) or 'the base'}")
    return [[base + i] + combo + x + [float(v) for v in row]
            for i, x, row in zip(range(chunk.start, chunk.stop), floats, values, strict=True)]
