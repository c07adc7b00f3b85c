"""The points of a spec and how they are cut: categorical combos x a float grid
crossed with seeded random draws (`Points`, each chunk's rows made when it is
evaluated), chunks that never straddle a combo (`Chunk`), and the `Job` that
fixes them with the result columns and the fingerprints of the chunk files and
of the merged results."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math

import numpy as np

from ._spec import Axis, Spec, columns, round_significant
from ._targets import TARGETS

_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Points:
    """Every point of a spec: `combos` (categorical) x `n_float` float rows, made a
    chunk at a time (`float_rows`) from the grid knobs' values and the seeded draws,
    never all at once (a sweep may hold `MAX_POINTS` of them)."""

    categorical: tuple[str, ...]
    combos: tuple[tuple, ...]
    float_names: tuple[str, ...]
    grid: tuple[np.ndarray, ...]  # each grid knob's values, in declaration order
    draws: np.ndarray  # (samples, random knobs); (1, 0) without random knobs
    order: tuple[int, ...]  # where each of float_names is among grid + random knobs

    @property
    def n_float(self) -> int:
        return math.prod(len(g) for g in self.grid) * len(self.draws)

    @property
    def size(self) -> int:
        return len(self.combos) * self.n_float

    def float_rows(self, start: int, stop: int) -> np.ndarray:
        """Float rows [start, stop), (stop - start, len(float_names)) float64: row r is
        grid point r // samples (last grid knob fastest) with draw r % samples."""
        at, draw = np.divmod(np.arange(start, stop), len(self.draws))
        where = np.unravel_index(at, [len(g) for g in self.grid]) if self.grid else ()
        cols = [g[i] for g, i in zip(self.grid, where, strict=True)] + list(self.draws[draw].T)
        if not cols:
            return np.zeros((stop - start, 0))
        return np.stack([cols[j] for j in self.order], axis=1)

    @property
    def floats(self) -> np.ndarray:
        """Every float row at once (for a small sweep; the runner takes `float_rows`)."""
        return self.float_rows(0, self.n_float)


def _draw(rng: np.random.Generator, axis: Axis, n: int) -> np.ndarray:
    if axis.log:
        u = rng.uniform(np.log(axis.low), np.log(axis.high), n)
        return np.array([round_significant(v) for v in np.exp(u)])
    return np.array([round_significant(v) for v in rng.uniform(axis.low, axis.high, n)])


def make_points(spec: Spec) -> Points:
    """The points of `spec`: the grid in declaration order (last knob fastest), each
    grid point crossed with the same `samples` seeded draws of the random knobs."""
    cats = spec.categorical
    combos = tuple(itertools.product(*(k.values for k in cats)))
    grid = [k for k in spec.floats if k.kind == "values"]
    rand = [k for k in spec.floats if k.kind == "random"]
    draws = np.zeros((1, 0))
    if rand:
        rng = np.random.default_rng(spec.seed)
        draws = np.stack([_draw(rng, k, spec.samples) for k in rand], axis=1)
    order = [k.name for k in grid + rand]
    names = tuple(k.name for k in spec.floats)
    return Points(tuple(k.name for k in cats), combos, names,
                  tuple(np.array(k.values, float) for k in grid), draws,
                  tuple(order.index(n) for n in names))


@dataclasses.dataclass(frozen=True)
class Chunk:
    """The unit of work, of evaluation and of the files on disk."""

    id: int
    combo: int
    start: int  # float-point range [start, stop) within the combo
    stop: int


def make_chunks(points: Points, chunk_size: int) -> tuple[Chunk, ...]:
    n = points.n_float
    ranges = [(s, min(s + chunk_size, n)) for s in range(0, n, chunk_size)]
    pairs = itertools.product(range(len(points.combos)), ranges)
    return tuple(Chunk(i, c, s, e) for i, (c, (s, e)) in enumerate(pairs))


@dataclasses.dataclass(frozen=True)
class Job:
    """A spec made concrete: its points, chunks, columns and fingerprint."""

    spec: Spec
    grad_outputs: tuple[str, ...]
    points: Points
    chunks: tuple[Chunk, ...]
    columns: tuple[str, ...]
    fingerprint: str  # of everything the chunk files depend on (chunk_size included)
    results_id: str  # of everything the merged results depend on (not chunking, not processes)


def make_job(spec: Spec, grad: bool | str | None = None) -> Job:
    """`grad`: None/False = values only; True = elasticities of `spec.grad_outputs`;
    an output name = elasticities of that output only."""
    if grad in (None, False):
        grad_outputs: tuple[str, ...] = ()
    elif grad is True:
        grad_outputs = spec.grad_outputs
    elif grad in spec.outputs:
        grad_outputs = (grad,)
    else:
        raise ValueError(f"grad={grad!r} is not one of outputs ({', '.join(spec.outputs)})")
    points = make_points(spec)
    record = {
        "version": _FORMAT_VERSION, "target": spec.target, "base": spec.base,
        "knobs": [dataclasses.asdict(k) for k in spec.knobs], "samples": spec.samples,
        "seed": spec.seed, "outputs": spec.outputs, "grad": grad_outputs,
        "extra": TARGETS[spec.target].fingerprint(spec.base, spec.directory),
    }
    return Job(spec, grad_outputs, points, make_chunks(points, spec.chunk_size),
               columns(spec, grad_outputs),
               _digest({**record, "chunk_size": spec.chunk_size}), _digest(record))


def _digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]
