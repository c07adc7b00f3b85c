"""The points of a spec and how they are cut: categorical combos x a float grid
crossed with seeded random draws (`Points`), chunks that never straddle a
combo (`Chunk`), and the `Job` that fixes them with the result columns and
the fingerprints of the chunk files and of the merged results."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json

import numpy as np

from ._spec import Axis, Spec, columns, round_significant
from ._targets import TARGETS

_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Points:
    """Every point of a spec: `combos` (categorical) x `floats` rows."""

    categorical: tuple[str, ...]
    combos: tuple[tuple, ...]
    float_names: tuple[str, ...]
    floats: np.ndarray  # (n_float, len(float_names)) float64

    @property
    def size(self) -> int:
        return len(self.combos) * len(self.floats)


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
    g = np.array(list(itertools.product(*(k.values for k in grid))), float).reshape(-1, len(grid))
    if rand:
        rng = np.random.default_rng(spec.seed)
        draws = np.stack([_draw(rng, k, spec.samples) for k in rand], axis=1)
        floats = np.concatenate([np.repeat(g, len(draws), axis=0),
                                 np.tile(draws, (len(g), 1))], axis=1)
    else:
        floats = g
    order = [k.name for k in grid + rand]
    names = tuple(k.name for k in spec.floats)
    floats = floats[:, [order.index(n) for n in names]] if names else floats
    return Points(tuple(k.name for k in cats), combos, names, np.ascontiguousarray(floats))


@dataclasses.dataclass(frozen=True)
class Chunk:
    """The unit of work, of evaluation and of the files on disk."""

    id: int
    combo: int
    start: int  # float-point range [start, stop) within the combo
    stop: int


def make_chunks(points: Points, chunk_size: int) -> tuple[Chunk, ...]:
    n = len(points.floats)
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
