"""Design sweeps: a TOML spec -> points -> sharded, resumable, reproducible evaluation.

A spec (format in `sweeps/README.md`) names a *target* -- a pure jnp function
of float knob values returning a dict of scalar outputs (`TARGETS`) -- a *base*
configuration, the *knobs* with their ranges, the *outputs*, and the *plots*
and *summaries* drawn from the results.

Points. Categorical knobs (algorithm names, presets, schedules) form an outer
Python loop of *combos*, each compiled once; float knobs form a grid (Cartesian
product in declaration order, the last knob fastest) crossed with `samples`
random draws (seeded). Point index = combo x n_float + float index.

Evaluation. Each combo's points are cut into chunks of `chunk_size`; a chunk is
padded to a multiple of the local device count, placed with a `NamedSharding`
over a 1D ("batch",) mesh of the local devices, and evaluated by one jitted
program per combo: `shard_map` over the mesh, each device mapping the point
function over its slice (see `_Evaluator` for why this is not a `vmap`). Under
`jax.distributed` every process lists the chunks still missing and takes every
P-th one. Each chunk is written atomically (temp + fsync +
`os.replace`) as JSON (the record, exact floats) and CSV, so `resume` skips
what is on disk and recomputes nothing. The merged `results.csv` and
`results.json` are sorted by point index, formatted with 12 significant
digits and carry nothing run-dependent: a killed-then-resumed sweep and a 1-
or 2-process sweep give byte-identical files.

Gradients. With `grad`, every point also carries the elasticities
d log y / d log x of the chosen outputs with respect to every float knob
(forward-mode Jacobian), named `dlog(y)/dlog(x)`: a sensitivity map.
"""

from __future__ import annotations

import abc
import csv
import dataclasses
import hashlib
import io
import itertools
import json
import math
import os
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import collectives, hardware, scenario, units
from .relax import safe_div

DEFAULT_CHUNK_SIZE = 256
SIGNIFICANT_DIGITS = 12  # merged results: fixed formatting, robust to last-ulp noise
_FORMAT_VERSION = 1
_SPEC_KEYS = ("name", "title", "description", "target", "base", "knobs", "samples", "seed",
              "outputs", "grad", "chunk_size", "plots", "summary")
_KNOB_KINDS = ("values", "grid", "log_grid", "random", "categories")


# =========================================================================== values


def round_significant(value: float) -> float:
    """`value` rounded to `SIGNIFICANT_DIGITS` (grids and draws survive a CSV round trip)."""
    return float(format(float(value), f".{SIGNIFICANT_DIGITS}g"))


def _format(value: Any) -> str:
    if isinstance(value, float):
        return format(value, f".{SIGNIFICANT_DIGITS}g")
    return str(value)


# =========================================================================== spec


@dataclasses.dataclass(frozen=True)
class Knob:
    """One swept knob: a list of float `values`, a `random` range, or `categories`."""

    name: str
    kind: str  # "values" | "random" | "categories"
    values: tuple = ()  # floats, categories, or the labels of `bundles`
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    bundles: tuple = ()  # categories that set several keys: one dict per label


@dataclasses.dataclass(frozen=True)
class PlotSpec:
    """One figure. kind: "line" (y against x per series), "heatmap" (value on an
    x-by-y grid) or "best" (which `over` category minimises/maximises `value`
    on an x-by-y grid)."""

    file: str
    kind: str
    x: str
    y: tuple[str, ...]
    value: str | None
    series: tuple[str, ...]
    facet: str | None
    over: str | None
    goal: str
    where: dict
    logx: bool
    logy: bool
    title: str
    xlabel: str | None
    ylabel: str | None
    hlines: tuple[tuple[float, str], ...]


@dataclasses.dataclass(frozen=True)
class SummarySpec:
    """One line group of `summary.txt`. kind: "table" (the selected rows),
    "best" (the winning `over` category per group, as runs along `x`),
    "ratio" (`value` where `numerator` over `value` where `denominator`, per
    `by` group), "spread" (min, max and max/min of `value` per `by` group)."""

    kind: str
    label: str
    where: dict
    columns: tuple[str, ...]
    by: tuple[str, ...]
    x: str | None
    over: str | None
    value: str | None
    goal: str
    numerator: dict
    denominator: dict


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    title: str
    description: str
    target: str
    base: dict
    knobs: tuple[Knob, ...]
    samples: int
    seed: int
    outputs: tuple[str, ...]
    grad_outputs: tuple[str, ...]
    chunk_size: int
    plots: tuple[PlotSpec, ...]
    summaries: tuple[SummarySpec, ...]
    directory: Path  # where relative paths in `base` are resolved

    @property
    def categorical(self) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs if k.kind == "categories")

    @property
    def floats(self) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs if k.kind != "categories")


def _table(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{field}={value!r} must be a table")
    return value


def _strings(value, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field}={value!r} must be a name or a list of names")
    return tuple(value)


def _int(value, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}={value!r} must be an integer >= {minimum}")
    return value


def _bool(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} must be true or false")
    return value


def _only(table: dict, allowed: tuple[str, ...], field: str) -> None:
    for key in table:
        if key not in allowed:
            raise ValueError(f"{field}.{key} is not a known key; use {', '.join(allowed)}")


def _range(name: str, value, field: str, size: bool) -> tuple[float, float, int]:
    n_items = 3 if size else 2
    if not isinstance(value, list) or len(value) != n_items:
        shape = "[low, high, points]" if size else "[low, high]"
        raise ValueError(f"{field}={value!r} must be {shape}")
    low = units.parse_quantity(name, value[0], field=field)
    high = units.parse_quantity(name, value[1], field=field)
    n = _int(value[2], field, 1) if size else 0
    if not low <= high:
        raise ValueError(f"{field}={value!r} needs low <= high")
    return low, high, n


def _parse_knob(name: str, raw) -> Knob:
    field = f"knobs.{name}"
    if isinstance(raw, list):
        raw = {"values": raw}
    raw = _table(raw, field)
    kinds = [k for k in _KNOB_KINDS if k in raw]
    if len(kinds) != 1:
        raise ValueError(f"{field} needs exactly one of {', '.join(_KNOB_KINDS)}; "
                         f"got {sorted(raw)}")
    kind = kinds[0]
    _only(raw, (kind, "log") if kind == "random" else (kind,), field)
    value, where = raw[kind], f"{field}.{kind}"
    if kind == "categories" and isinstance(value, list) and value and all(
            isinstance(v, dict) for v in value):
        return _bundle_knob(name, value, where)
    if kind == "categories":
        if (not isinstance(value, list) or not value
                or not all(isinstance(v, (str, int, float)) for v in value)):
            raise ValueError(f"{where}={value!r} must be a non-empty list of values, or of "
                             f"tables {{ label = \"...\", key = value, ... }}")
        if len({str(v) for v in value}) != len(value):
            raise ValueError(f"{where}={value!r} has repeated categories")
        return Knob(name, "categories", tuple(value))
    if kind == "values":
        if not isinstance(value, list) or not value:
            raise ValueError(f"{where}={value!r} must be a non-empty list")
        return Knob(name, "values", tuple(units.parse_quantity(name, v, field=where) for v in value))
    if kind == "random":
        low, high, _ = _range(name, value, where, size=False)
        log = _bool(raw.get("log", False), f"{field}.log")
        if log and not low > 0:
            raise ValueError(f"{where}={value!r} must be positive with log = true")
        return Knob(name, "random", low=low, high=high, log=log)
    low, high, n = _range(name, value, where, size=True)
    if kind == "log_grid":
        if not low > 0:
            raise ValueError(f"{where}={value!r} must be positive for a log grid")
        grid = np.geomspace(low, high, n) if n > 1 else np.array([low])
    else:
        grid = np.linspace(low, high, n)
    return Knob(name, "values", tuple(round_significant(v) for v in grid))


def _bundle_knob(name: str, tables: list, where: str) -> Knob:
    """Categories that each set several keys: `[{ label = "1f1b", parallel.schedule = "1f1b",
    parallel.interleave = 1 }, ...]`; the result column `name` holds the label."""
    labels, bundles = [], []
    for i, table in enumerate(tables):
        label = table.get("label")
        if not isinstance(label, str):
            raise ValueError(f"{where}[{i}].label={label!r} must be a string")
        flat = scenario.flatten({k: v for k, v in table.items() if k != "label"})
        if not flat:
            raise ValueError(f"{where}[{i}] sets no key besides its label")
        labels.append(label)
        bundles.append(flat)
    if len(set(labels)) != len(labels):
        raise ValueError(f"{where} has repeated labels {labels}")
    return Knob(name, "categories", tuple(labels), bundles=tuple(bundles))


def _is_knob_table(value: dict) -> bool:
    return any(k in value for k in _KNOB_KINDS + ("log",))


def _where(raw, field: str, prefix: str = "") -> dict:
    """`{column: value or [values]}`; nested tables are dotted keys (`parallel.tp = 8`)."""
    out = {}
    for k, v in _table(raw, field).items():
        if isinstance(v, dict):
            out.update(_where(v, f"{field}.{k}", f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = tuple(v) if isinstance(v, list) else (v,)
    return out


_PLOT_KEYS = ("file", "kind", "x", "y", "value", "series", "facet", "over", "goal", "where",
              "logx", "logy", "title", "xlabel", "ylabel", "hlines")


def _parse_plot(raw, i: int, name: str) -> PlotSpec:
    field = f"plots[{i}]"
    raw = _table(raw, field)
    _only(raw, _PLOT_KEYS, field)
    kind = raw.get("kind", "line")
    if kind not in ("line", "heatmap", "best"):
        raise ValueError(f"{field}.kind={kind!r} must be line, heatmap or best")
    for key in ("x", "y") + (("value",) if kind != "line" else ()) + (
            ("over",) if kind == "best" else ()):
        if key not in raw:
            raise ValueError(f"{field}.{key} is required for kind={kind!r}")
    goal = raw.get("goal", "min")
    if goal not in ("min", "max"):
        raise ValueError(f"{field}.goal={goal!r} must be min or max")
    hlines = []
    for j, line in enumerate(raw.get("hlines", [])):
        if not (isinstance(line, list) and len(line) == 2 and isinstance(line[1], str)):
            raise ValueError(f"{field}.hlines[{j}]={line!r} must be [value, \"label\"]")
        hlines.append((units.parse_quantity(raw["y"] if isinstance(raw["y"], str) else "",
                                   line[0], field=f"{field}.hlines[{j}]"), line[1]))
    facet = raw.get("facet")
    if facet is not None and not isinstance(facet, str):
        raise ValueError(f"{field}.facet={facet!r} must be a column name")
    return PlotSpec(
        file=str(raw.get("file", f"{name}-{i}.png")), kind=kind,
        x=_strings(raw["x"], f"{field}.x")[0],
        y=_strings(raw["y"], f"{field}.y"), value=raw.get("value"),
        series=_strings(raw.get("series", []), f"{field}.series"), facet=facet,
        over=raw.get("over"), goal=goal, where=_where(raw.get("where", {}), f"{field}.where"),
        logx=_bool(raw.get("logx", False), f"{field}.logx"),
        logy=_bool(raw.get("logy", False), f"{field}.logy"),
        title=str(raw.get("title", "")), xlabel=raw.get("xlabel"), ylabel=raw.get("ylabel"),
        hlines=tuple(hlines))


_SUMMARY_KEYS = ("kind", "label", "where", "columns", "by", "x", "over", "value", "goal",
                 "numerator", "denominator")
_SUMMARY_NEEDS = {"table": (), "best": ("over", "value"), "ratio": ("value", "numerator",
                                                                     "denominator"),
                  "spread": ("value",)}


def _parse_summary(raw, i: int) -> SummarySpec:
    field = f"summary[{i}]"
    raw = _table(raw, field)
    _only(raw, _SUMMARY_KEYS, field)
    kind = raw.get("kind", "table")
    if kind not in _SUMMARY_NEEDS:
        raise ValueError(f"{field}.kind={kind!r} must be one of {', '.join(_SUMMARY_NEEDS)}")
    for key in _SUMMARY_NEEDS[kind]:
        if key not in raw:
            raise ValueError(f"{field}.{key} is required for kind={kind!r}")
    goal = raw.get("goal", "min")
    if goal not in ("min", "max"):
        raise ValueError(f"{field}.goal={goal!r} must be min or max")
    return SummarySpec(
        kind=kind, label=str(raw.get("label", kind)),
        where=_where(raw.get("where", {}), f"{field}.where"),
        columns=_strings(raw.get("columns", []), f"{field}.columns"),
        by=_strings(raw.get("by", []), f"{field}.by"), x=raw.get("x"), over=raw.get("over"),
        value=raw.get("value"), goal=goal,
        numerator=_where(raw.get("numerator", {}), f"{field}.numerator"),
        denominator=_where(raw.get("denominator", {}), f"{field}.denominator"))


def parse_spec(raw: dict, *, name: str = "sweep", directory: Path | str = ".") -> Spec:
    """A validated `Spec` from the parsed TOML `raw`; errors name the key."""
    _only(raw, _SPEC_KEYS, "spec")
    target_name = raw.get("target")
    if target_name not in TARGETS:
        raise ValueError(f"target={target_name!r} is unknown; choose one of "
                         f"{', '.join(TARGETS)}")
    target = TARGETS[target_name]
    base = _table(raw.get("base", {}), "base")
    knobs_raw = scenario.flatten(_table(raw.get("knobs", {}), "knobs"),
                                  is_leaf=_is_knob_table)
    knobs = tuple(_parse_knob(k, v) for k, v in knobs_raw.items())
    directory = Path(directory)
    target.check(base, knobs, directory)
    random_knobs = [k for k in knobs if k.kind == "random"]
    samples = _int(raw.get("samples", 0), "samples", 1 if random_knobs else 0)
    if samples and not random_knobs:
        raise ValueError(f"samples={samples} needs at least one knob with random = [low, high]")
    available = target.outputs(base, directory)
    outputs = _strings(raw.get("outputs", list(available)), "outputs")
    for o in outputs:
        if o not in available:
            raise ValueError(f"outputs: {o!r} is not an output of target {target_name!r}; "
                             f"choose from {', '.join(available)}")
    grad = _table(raw.get("grad", {}), "grad")
    _only(grad, ("outputs",), "grad")
    grad_outputs = _strings(grad.get("outputs", list(outputs)), "grad.outputs")
    for o in grad_outputs:
        if o not in outputs:
            raise ValueError(f"grad.outputs: {o!r} is not one of outputs ({', '.join(outputs)})")
    plots_raw = raw.get("plots", [])
    summary_raw = raw.get("summary", [])
    if not isinstance(plots_raw, list) or not isinstance(summary_raw, list):
        raise ValueError("plots and summary must be arrays of tables ([[plots]], [[summary]])")
    spec_name = str(raw.get("name", name))
    spec = Spec(
        name=spec_name, title=str(raw.get("title", spec_name)),
        description=str(raw.get("description", "")), target=target_name, base=base,
        knobs=knobs, samples=samples, seed=_int(raw.get("seed", 0), "seed", 0),
        outputs=outputs, grad_outputs=grad_outputs,
        chunk_size=_int(raw.get("chunk_size", DEFAULT_CHUNK_SIZE), "chunk_size", 1),
        plots=tuple(_parse_plot(p, i, spec_name) for i, p in enumerate(plots_raw)),
        summaries=tuple(_parse_summary(s, i) for i, s in enumerate(summary_raw)),
        directory=directory)
    _check_columns(spec)
    return spec


def load_spec(path: str | Path) -> Spec:
    """Read and validate the spec at `path` (relative paths in it resolve next to it)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"spec {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"spec {str(path)!r} is not valid TOML: {e}") from None
    return parse_spec(raw, name=path.stem, directory=path.parent)


def elasticity_column(output: str, knob: str) -> str:
    return f"dlog({output})/dlog({knob})"


def columns(spec: Spec, grad_outputs: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The result columns: index, categorical knobs, float knobs, outputs, elasticities."""
    floats = tuple(k.name for k in spec.floats)
    grads = tuple(elasticity_column(o, k) for o in grad_outputs for k in floats)
    return ("index",) + tuple(k.name for k in spec.categorical) + floats + spec.outputs + grads


def _check_columns(spec: Spec) -> None:
    known = set(columns(spec))
    elastic = set(columns(spec, spec.outputs)) - known

    def need(name, field):
        if name is not None and name not in known and name not in elastic:
            raise ValueError(f"{field}={name!r} is not a result column; choose from "
                             f"{', '.join(sorted(known))} (or dlog(y)/dlog(x) with --grad)")

    for i, p in enumerate(spec.plots):
        for key in ("x", "value", "facet", "over"):
            need(getattr(p, key), f"plots[{i}].{key}")
        for name in p.y + p.series + tuple(p.where):
            need(name, f"plots[{i}]")
    for i, s in enumerate(spec.summaries):
        for key in ("x", "over", "value"):
            need(getattr(s, key), f"summary[{i}].{key}")
        for name in (s.columns + s.by + tuple(s.where) + tuple(s.numerator)
                     + tuple(s.denominator)):
            need(name, f"summary[{i}]")


# =========================================================================== points


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


def _draw(rng: np.random.Generator, knob: Knob, n: int) -> np.ndarray:
    if knob.log:
        u = rng.uniform(np.log(knob.low), np.log(knob.high), n)
        return np.array([round_significant(v) for v in np.exp(u)])
    return np.array([round_significant(v) for v in rng.uniform(knob.low, knob.high, n)])


def make_points(spec: Spec) -> Points:
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
class Plan:
    """A spec made concrete: its points, chunks, columns and fingerprint."""

    spec: Spec
    grad_outputs: tuple[str, ...]
    points: Points
    chunks: tuple[Chunk, ...]
    columns: tuple[str, ...]
    fingerprint: str  # of everything the chunk files depend on (chunk_size included)
    results_id: str  # of everything the merged results depend on (not chunking, not processes)


def make_plan(spec: Spec, grad: bool | str | None = None) -> Plan:
    """`grad`: None/False = values only; True = elasticities of `spec.grad_outputs`;
    an output name = elasticities of that output only."""
    if grad in (None, False):
        grad_outputs: tuple[str, ...] = ()
    elif grad is True:
        grad_outputs = spec.grad_outputs
    elif grad in spec.outputs:
        grad_outputs = (grad,)
    else:
        raise ValueError(f"--grad {grad!r} is not one of outputs ({', '.join(spec.outputs)})")
    points = make_points(spec)
    record = {
        "version": _FORMAT_VERSION, "target": spec.target, "base": spec.base,
        "knobs": [dataclasses.asdict(k) for k in spec.knobs], "samples": spec.samples,
        "seed": spec.seed, "outputs": spec.outputs, "grad": grad_outputs,
        "extra": TARGETS[spec.target].fingerprint(spec.base, spec.directory),
    }
    return Plan(spec, grad_outputs, points, make_chunks(points, spec.chunk_size),
                columns(spec, grad_outputs),
                _digest({**record, "chunk_size": spec.chunk_size}), _digest(record))


def _digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


# =========================================================================== targets


PointFn = Callable[[dict], dict]  # float knob values (jnp scalars) -> outputs (jnp scalars)


class Target(abc.ABC):
    """A pure jnp function of knob values, configured by a spec's `base`."""

    name: str
    description: str

    @abc.abstractmethod
    def float_knobs(self, base: dict, directory: Path) -> tuple[str, ...]:
        """The names a float knob may take."""

    @abc.abstractmethod
    def categorical_knobs(self, base: dict, directory: Path) -> tuple[str, ...]:
        """The names a categorical knob may take."""

    @abc.abstractmethod
    def outputs(self, base: dict, directory: Path) -> tuple[str, ...]:
        """The outputs the point function returns."""

    @abc.abstractmethod
    def build(self, settings: dict, directory: Path) -> PointFn:
        """The point function for `settings` (base with the combo's categories)."""

    def base_keys(self, base: dict, directory: Path) -> tuple[str, ...]:
        return self.float_knobs(base, directory) + self.categorical_knobs(base, directory)

    def fingerprint(self, base: dict, directory: Path) -> str:
        """Anything outside the spec the results depend on (e.g. a scenario file)."""
        return ""

    def check(self, base: dict, knobs: tuple[Knob, ...], directory: Path) -> None:
        _only(base, self.base_keys(base, directory), "base")
        floats, cats = self.float_knobs(base, directory), self.categorical_knobs(base, directory)
        for k in knobs:
            allowed = cats if k.kind == "categories" else floats
            for key in {key for bundle in k.bundles for key in bundle}:
                if key not in cats:
                    raise ValueError(f"knobs.{k.name}.categories: {key!r} is not a categorical "
                                     f"knob of target {self.name!r}; choose from "
                                     f"{', '.join(cats)}")
            if k.name not in allowed and not k.bundles:
                what = "categorical" if k.kind == "categories" else "float"
                raise ValueError(f"knobs.{k.name} is not a {what} knob of target {self.name!r}; "
                                 f"choose from {', '.join(allowed)}")


def _settings(base: dict, knobs: tuple[Knob, ...], combo: tuple) -> dict:
    """`base` with one combo of the categorical `knobs` (a bundle sets all its keys)."""
    out = dict(base)
    for knob, value in zip(knobs, combo, strict=True):
        if knob.bundles:
            out.update(knob.bundles[knob.values.index(value)])
        else:
            out[knob.name] = value
    return out


def all_settings(base: dict, knobs: tuple[Knob, ...]):
    """The settings of every combo of the categorical knobs among `knobs`."""
    cats = tuple(k for k in knobs if k.kind == "categories")
    for combo in itertools.product(*(k.values for k in cats)):
        yield _settings(base, cats, combo)


def _tier_leaf(system: hardware.System, knob: str, value) -> hardware.System:
    tier_name, leaf = knob.split(".")
    return eqx.tree_at(lambda s: getattr(getattr(s, tier_name), leaf), system,
                       jnp.asarray(value, dtype=float))


class CollectiveTarget(Target):
    """One collective on a preset system (`collectives.cost`).

    base/categories: `system` (preset), `op`, `algorithm` (or "auto"), `tier`:
    "system" (flat algorithms on the fast tier while ranks fit the scale-up
    domain, on the scale-out tier beyond; `hierarchical` spans both with
    `local_ranks` per domain), "scale_up" or "scale_out" (one tier alone).
    Float knobs: `n_bytes`, `ranks`, `local_ranks` (default: the system's
    scale-up domain) and the tiers' `bandwidth_Bps`, `latency_s`, `efficiency`.
    """

    name = "collective"
    description = "time, algbw and busbw of one collective (op, algorithm, bytes, ranks, tier)"
    _TIER_KNOBS = tuple(f"{t}.{leaf}" for t in ("scale_up", "scale_out")
                        for leaf in ("bandwidth_Bps", "latency_s", "efficiency"))
    _FLOATS = ("n_bytes", "ranks", "local_ranks") + _TIER_KNOBS
    _CATEGORIES = ("system", "op", "algorithm", "tier")
    _OUTPUTS = ("time_s", "latency_s", "bandwidth_s", "reduction_s", "algbw_Bps", "busbw_Bps",
                "bus_factor", "latency_share")
    _DEFAULTS = {"system": "dgx-h100", "op": "all_reduce", "algorithm": "ring",
                 "tier": "system", "n_bytes": units.GiB, "ranks": 8.0}

    def float_knobs(self, base, directory):
        return self._FLOATS

    def categorical_knobs(self, base, directory):
        return self._CATEGORIES

    def outputs(self, base, directory):
        return self._OUTPUTS

    def check(self, base, knobs, directory):
        super().check(base, knobs, directory)
        for settings in all_settings(base, knobs):  # fail before any compile
            self._static(settings)

    def _static(self, settings: dict):
        s = {**self._DEFAULTS, **settings}
        system = hardware.system(str(s["system"]))
        op = str(s["op"])
        if s["tier"] not in ("system", "scale_up", "scale_out"):
            raise ValueError(f"tier={s['tier']!r} must be system, scale_up or scale_out")
        names = collectives.algorithms(op, hierarchical=s["tier"] == "system") + ("auto",)
        if s["algorithm"] not in names:
            raise ValueError(f"algorithm={s['algorithm']!r} is not defined for op={op!r} on "
                             f"tier={s['tier']!r}; choose one of {', '.join(names)}")
        floats = {k: units.parse_quantity(k, s[k], field=f"base.{k}") for k in self._FLOATS if k in s}
        return system, op, str(s["algorithm"]), s["tier"], floats

    def build(self, settings, directory):
        system0, op, algorithm, tier_mode, constants = self._static(settings)
        local_default = float(system0.scale_up_domain)

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            system = system0
            for k in self._TIER_KNOBS:
                if k in v:
                    system = _tier_leaf(system, k, v[k])
            n, p = jnp.asarray(v["n_bytes"], float), jnp.asarray(v["ranks"], float)
            if tier_mode == "system":
                c = collectives.cost(op, algorithm, n, p, system.scale_up, outer=system.scale_out,
                                     local_ranks=v.get("local_ranks", local_default))
            else:
                c = collectives.cost(op, algorithm, n, p, getattr(system, tier_mode))
            return {"time_s": c.time_s, "latency_s": c.latency_s, "bandwidth_s": c.bandwidth_s,
                    "reduction_s": c.reduction_s,
                    "algbw_Bps": collectives.algbw_Bps(n, c.time_s),
                    "busbw_Bps": collectives.busbw_Bps(op, n, c.time_s, p),
                    "bus_factor": collectives.bus_factor(op, p),
                    "latency_share": safe_div(c.latency_s, c.time_s)}

        return point


def _replace(module, values: dict, names: tuple[str, ...]):
    """`module` with the float leaves `names` found in `values` replaced (traced or not)."""
    for name in names:
        if name in values:
            module = eqx.tree_at(lambda m, n=name: getattr(m, n), module,
                                 jnp.asarray(values[name], dtype=float))
    return module


def _constants(settings: dict, floats: tuple[str, ...]) -> dict:
    return {k: units.parse_quantity(k, settings[k], field=f"base.{k}") for k in floats if k in settings}


class ReliabilityTarget(Target):
    """Stragglers, failures and checkpoints of a job (`reliability.report`).

    Float knobs: `step_time_s` (the healthy median step), `gpus`,
    `participants` (ranks the step waits for; default `gpus`),
    `checkpoint_bytes`, and every field of `reliability.Reliability`
    (straggler_q, straggler_slowdown, straggler_sigma, gpu_mtbf_s, restart_s,
    checkpoint_write_s, ...). Defaults: 10 s steps, 16,384 GPUs, a 6 TB
    checkpoint (a Llama-3-405B-like run) and the `Reliability` defaults.
    """

    name = "reliability"
    description = "stragglers (1-(1-q)^p, max of p draws), failures, checkpoints, goodput"
    _DEFAULTS = {"step_time_s": 10.0, "gpus": 16384.0, "checkpoint_bytes": 6e12}
    _OUTPUTS = ("p_step_delayed", "expected_step_time_s", "step_time_p50_s", "step_time_p99_s",
                "straggler_slowdown_factor", "mtbf_s", "checkpoint_write_s",
                "checkpoint_interval_s", "young_interval_s", "restart_downtime_s",
                "effective_training_time_fraction", "goodput")

    def _fields(self) -> tuple[str, ...]:
        from .reliability import Reliability

        return tuple(f.name for f in dataclasses.fields(Reliability))

    def float_knobs(self, base, directory):
        return ("step_time_s", "gpus", "participants", "checkpoint_bytes") + self._fields()

    def categorical_knobs(self, base, directory):
        return ()

    def outputs(self, base, directory):
        return self._OUTPUTS

    def build(self, settings, directory):
        from . import reliability as R

        constants = {**self._DEFAULTS, **_constants(settings, self.float_knobs({}, None))}
        fields = self._fields()

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            rel = _replace(R.Reliability(), v, fields)
            rep = R.report(v["step_time_s"], v["gpus"], v["checkpoint_bytes"], rel,
                           participants=v.get("participants"))
            return {"p_step_delayed": rep.p_step_delayed,
                    "expected_step_time_s": rep.expected_step_time_s,
                    "step_time_p50_s": rep.step_time_p50_s,
                    "step_time_p99_s": rep.step_time_p99_s,
                    "straggler_slowdown_factor": rep.expected_step_time_s / v["step_time_s"],
                    "mtbf_s": rep.mtbf_s, "checkpoint_write_s": rep.checkpoint_write_s,
                    "checkpoint_interval_s": rep.checkpoint_interval_s,
                    "young_interval_s": R.young_interval_s(rep.checkpoint_write_s, rep.mtbf_s),
                    "restart_downtime_s": rep.restart_downtime_s,
                    "effective_training_time_fraction": rep.effective_training_time_fraction,
                    "goodput": rep.goodput}

        return point


class EcmpTarget(Target):
    """k elephant flows hashed onto m equal-cost links (`fabric.flow_slowdown`).

    Float knobs: `k_flows`, `m_links`, `overhead` (of spraying/adaptive
    routing); categorical: `routing` (ecmp, spray, adaptive). Traced, the
    expected maximum load is `fabric`'s differentiable Poisson form (within
    ~1% of the exact balls-into-bins value for the sizes swept here).
    """

    name = "ecmp"
    description = "ECMP hash collisions: busiest-link load and slowdown of k flows on m links"
    _FLOATS = ("k_flows", "m_links", "overhead")
    _OUTPUTS = ("expected_max_load", "ideal_load", "slowdown", "bandwidth_fraction")
    _DEFAULTS = {"k_flows": 8.0, "m_links": 8.0, "overhead": 0.0, "routing": "ecmp"}

    def float_knobs(self, base, directory):
        return self._FLOATS

    def categorical_knobs(self, base, directory):
        return ("routing",)

    def outputs(self, base, directory):
        return self._OUTPUTS

    def check(self, base, knobs, directory):
        from .fabric import ROUTINGS

        super().check(base, knobs, directory)
        routings = [base.get("routing", "ecmp")] + [
            r for k in knobs if k.kind == "categories" for r in k.values]
        for r in routings:
            if r not in ROUTINGS:
                raise ValueError(f"routing={r!r} is not one of {', '.join(ROUTINGS)}")

    def build(self, settings, directory):
        from . import fabric

        routing = settings.get("routing", self._DEFAULTS["routing"])
        constants = {**self._DEFAULTS, **_constants(settings, self._FLOATS)}

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            k, m = jnp.asarray(v["k_flows"], float), jnp.asarray(v["m_links"], float)
            slow = fabric.flow_slowdown(k, m, routing, v["overhead"])
            ideal = jnp.maximum(k / m, 1.0)
            return {"expected_max_load": slow * ideal, "ideal_load": ideal, "slowdown": slow,
                    "bandwidth_fraction": 1.0 / slow}

        return point


class FabricTarget(Target):
    """Parts, cost and power of a scale-out fabric (`fabric.inventory`), with the
    rail-only savings and MoE all-to-all penalty (`fabric.rail_only_*`), and the
    scale-up bandwidth a group sees on a torus or a switch (`fabric.scale_up_tier`).

    Categorical: `system` (preset), `topology` (two_tier, clos, rail_only, torus).
    Float knobs: `gpus`, `scale_up_domain`, `pod_size`, `oversubscription`, every
    `fabric.Prices` field (switch_radix, switch_usd, ...), `n_bytes` and `ranks`
    of the all-to-all, `group_size` and `stride` of the scale-up group.
    """

    name = "fabric"
    description = "fabric inventory (switches, optics, cost, power) per topology; rail-only penalty"
    _SYSTEM = ("gpus", "scale_up_domain", "pod_size", "oversubscription")
    _OUTPUTS = ("switches", "transceivers", "cables", "network_cost_usd", "network_power_w",
                "cost_usd", "power_w", "cost_per_gpu_usd", "power_per_gpu_w",
                "rail_only_cost_saving", "rail_only_power_saving", "all_to_all_penalty",
                "scale_up_group_Bps")
    _DEFAULTS = {"system": "dgx-h100", "n_bytes": 64 * units.MiB, "ranks": 256.0,
                 "group_size": 8.0, "stride": 1.0}

    def _prices(self) -> tuple[str, ...]:
        from .fabric import Prices

        return tuple(f.name for f in dataclasses.fields(Prices))

    def float_knobs(self, base, directory):
        return self._SYSTEM + self._prices() + ("n_bytes", "ranks", "group_size", "stride")

    def categorical_knobs(self, base, directory):
        return ("system", "topology")

    def outputs(self, base, directory):
        return self._OUTPUTS

    def check(self, base, knobs, directory):
        super().check(base, knobs, directory)
        for settings in all_settings(base, knobs):
            self._system(settings)

    def _system(self, settings) -> hardware.System:
        from .fabric import with_topology

        system = hardware.system(str(settings.get("system", self._DEFAULTS["system"])))
        topology = settings.get("topology", system.topology)
        if topology not in hardware.TOPOLOGIES:
            raise ValueError(f"topology={topology!r} is not one of "
                             f"{', '.join(hardware.TOPOLOGIES)}")
        return with_topology(system, topology)

    def build(self, settings, directory):
        from . import fabric

        system0 = self._system(settings)
        constants = {**self._DEFAULTS, **_constants(settings, self.float_knobs({}, None))}
        prices_fields = self._prices()
        shape = fabric.system_torus_shape(system0) if system0.topology == "torus" else None
        prices0 = fabric.default_prices()  # outside the trace: it is cached

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            system = _replace(system0, v, self._SYSTEM)
            prices = _replace(prices0, v, prices_fields)
            inv = fabric.inventory(system, prices)
            cost_saving, power_saving = fabric.rail_only_saving(system, prices)
            n, p = jnp.asarray(v["n_bytes"], float), jnp.asarray(v["ranks"], float)
            group = fabric.scale_up_tier(system, v["group_size"], v["stride"], shape=shape)
            return {"switches": inv.leaf_switches + inv.spine_switches + inv.core_switches
                    + inv.ocs_switches, "transceivers": inv.transceivers, "cables": inv.cables,
                    "network_cost_usd": inv.network_cost_usd,
                    "network_power_w": inv.network_power_w, "cost_usd": inv.cost_usd,
                    "power_w": inv.power_w, "cost_per_gpu_usd": inv.cost_per_gpu_usd,
                    "power_per_gpu_w": inv.power_per_gpu_w,
                    "rail_only_cost_saving": cost_saving, "rail_only_power_saving": power_saving,
                    "all_to_all_penalty": fabric.rail_only_all_to_all_penalty(system, n, p),
                    "scale_up_group_Bps": group.bandwidth_Bps}

        return point


class EstimateTarget(Target):
    """The whole step model of a scenario (`step.outputs(step.estimate(scn))`).

    base: `scenario` (a built-in name or a TOML path, relative to the spec;
    default: the default scenario), `overrides` (["section.key=value", ...]),
    and scenario tables ([base.parallel] tp = 8, ...). Float knobs are the
    scenario's float keys (`scenario.KNOBS`: parallel.tp, training.global_batch,
    system.scale_out_bandwidth_Bps, ...), set by `scenario.set_knobs` under
    trace, unvalidated (relaxed), or scaled from the combo's own value
    (`scale:system.scale_up_bandwidth_Bps = [0.5, 1, 2]`: a what-if that means
    the same across presets, and at 1 the elasticity with respect to the knob
    itself); categorical knobs are any scenario key
    (system.preset, parallel.schedule, or a validated integer like parallel.tp),
    loaded and validated once per combo (`scenario` itself may be one). Outputs: `step.outputs` plus
    `bubble_fraction` (bubble / (compute + bubble)), `exposed_comm_fraction`
    (exposed communication / step time), `micro_batches`, and the network
    roofline of `step.roofline` in traceable form: per dimension the bytes one
    GPU puts on its link per step (`wire_bytes_tp`, ...) and the hardware FLOPs
    per such byte (`flop_per_byte_tp`, ...; 0 = no traffic), against the FLOP
    per byte each tier needs to stay compute-bound (peak / bandwidth per
    direction: `scale_up_needed_flop_per_byte`, `scale_out_needed_flop_per_byte`).
    """

    name = "estimate"
    description = "the step model of a scenario: step time, MFU, memory, breakdown, goodput"
    _DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
    _EXTRA = (("bubble_fraction", "exposed_comm_fraction", "micro_batches",
               "scale_up_needed_flop_per_byte", "scale_out_needed_flop_per_byte")
              + tuple(f"wire_bytes_{d}" for d in _DIMENSIONS)
              + tuple(f"flop_per_byte_{d}" for d in _DIMENSIONS))

    def float_knobs(self, base, directory):
        from .scenario import KNOBS

        return KNOBS + tuple(f"scale:{k}" for k in KNOBS)

    def categorical_knobs(self, base, directory):
        from .scenario import SCHEMA

        return ("scenario",) + tuple(f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys)

    def base_keys(self, base, directory):
        from .scenario import SCHEMA

        return ("scenario", "overrides") + tuple(SCHEMA)

    def _source(self, base: dict, directory: Path) -> str | None:
        from .scenario import BUILTIN

        source = base.get("scenario")
        if source is None or source in BUILTIN:
            return source
        return str(Path(directory) / str(source))

    def fingerprint(self, base, directory):
        source = self._source(base, directory)
        if source is None or not Path(source).is_file():
            return ""
        return hashlib.sha256(Path(source).read_bytes()).hexdigest()

    def _scenario(self, settings: dict, directory: Path):
        from . import scenario

        overrides = settings.get("overrides", [])
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise ValueError(f"base.overrides={overrides!r} must be a list of "
                             f"\"section.key=value\" strings")
        items = list(overrides)
        for section in scenario.SCHEMA:
            for key, value in _table(settings.get(section, {}), f"base.{section}").items():
                items.append((section, key, value))
        for name, value in settings.items():
            if "." in name and name.split(".", 1)[0] in scenario.SCHEMA:  # section.key
                section, key = name.split(".", 1)
                items.append((section, key, value))
        return scenario.load(self._source(settings, directory), items)

    def outputs(self, base, directory):
        from . import fabric, step

        fabric.default_prices()  # cached: build it outside the trace below, never inside
        scn = self._scenario(base, directory)
        keys = jax.eval_shape(lambda s: step.outputs(step.estimate(s)), scn)
        return tuple(keys) + self._EXTRA

    def check(self, base, knobs, directory):
        super().check(base, knobs, directory)
        for settings in all_settings(base, knobs):
            self._scenario(settings, directory)

    def build(self, settings, directory):
        from . import fabric, scenario, step

        fabric.default_prices()  # cached: build it outside the trace, never inside
        scn0 = self._scenario(settings, directory)

        def point(knobs: dict) -> dict:
            values = {k: v for k, v in knobs.items() if not k.startswith("scale:")}
            for k, factor in knobs.items():
                if k.startswith("scale:"):
                    name = k.removeprefix("scale:")
                    base = values.get(name, scenario.get_knob(scn0, name))
                    values[name] = base * factor
            scn = scenario.set_knobs(scn0, values) if values else scn0
            est = step.estimate(scn)
            s = est.step
            comm = sum(s.exposed_s.values())
            peak = step.peak_flops_per_s(scn.system, scn.plan.dtype)
            flops = s.hardware_flops_per_step / s.gpus
            wire = {d: jnp.zeros(()) for d in self._DIMENSIONS}
            for row in s.traffic:
                wire[row.dimension] = wire[row.dimension] + step.wire_bytes_per_gpu(row)
            return {**step.outputs(est),
                    "bubble_fraction": safe_div(s.bubble_s, s.bubble_s + s.compute_s),
                    "exposed_comm_fraction": safe_div(comm, s.step_time_s),
                    "micro_batches": scn.plan.micro_batches,
                    "scale_up_needed_flop_per_byte": peak / scn.system.scale_up.bandwidth_Bps,
                    "scale_out_needed_flop_per_byte": peak / scn.system.scale_out.bandwidth_Bps,
                    **{f"wire_bytes_{d}": b for d, b in wire.items()},
                    **{f"flop_per_byte_{d}": safe_div(flops, b) for d, b in wire.items()}}

        return point


TARGETS: dict[str, Target] = {t.name: t for t in (CollectiveTarget(), ReliabilityTarget(),
                                                  EcmpTarget(), FabricTarget(),
                                                  EstimateTarget())}


# =========================================================================== evaluation


def point_function(plan: Plan, combo: int) -> Callable[[jax.Array], jax.Array]:
    """x (n_float_knobs,) -> [outputs..., elasticities...] for one combo of `plan`."""
    spec, pts = plan.spec, plan.points
    settings = _settings(spec.base, spec.categorical, pts.combos[combo])
    fn = TARGETS[spec.target].build(settings, spec.directory)
    names, outputs = pts.float_names, spec.outputs

    def values(x):
        out = fn({n: x[i] for i, n in enumerate(names)})
        return jnp.stack([jnp.reshape(jnp.asarray(out[o], dtype=float), ()) for o in outputs])

    if not plan.grad_outputs or not names:
        return values
    rows = np.array([outputs.index(o) for o in plan.grad_outputs])

    def with_elasticities(x):
        jac, y = jax.jacfwd(lambda x: (values(x), values(x)), has_aux=True)(x)
        elasticity = safe_div(jac[rows, :] * x[None, :], y[rows, None])
        return jnp.concatenate([y, elasticity.reshape(-1)])

    return with_elasticities


class _Evaluator:
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

    def __init__(self, plan: Plan, devices=None):
        self.plan = plan
        self.devices = list(devices if devices is not None else jax.local_devices())
        self.mesh = Mesh(np.array(self.devices), ("batch",))
        self.sharding = NamedSharding(self.mesh, PartitionSpec("batch"))
        n_float, d = len(plan.points.floats), len(self.devices)
        self.padded = -(-max(min(plan.spec.chunk_size, n_float), 2 * d) // d) * d
        self._compiled: dict[int, tuple[Callable, tuple]] = {}

    def _compile(self, combo: int) -> tuple[Callable, tuple]:
        fn = point_function(self.plan, combo)
        closed = jax.make_jaxpr(fn)(jnp.zeros(len(self.plan.points.float_names)))
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
        x = self.plan.points.floats[chunk.start:chunk.stop]
        pad = self.padded - len(x)  # repeat the last point: finite, then dropped
        x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)]) if pad else x
        out = program(jax.device_put(x, self.sharding), *consts)
        return np.asarray(jax.device_get(out))[:chunk.stop - chunk.start]


def chunk_rows(plan: Plan, chunk: Chunk, values: np.ndarray) -> list[list]:
    pts = plan.points
    combo = list(pts.combos[chunk.combo])
    base = chunk.combo * len(pts.floats)
    return [[base + i] + combo + [float(v) for v in pts.floats[i]] + [float(v) for v in row]
            for i, row in zip(range(chunk.start, chunk.stop), values, strict=True)]


# =========================================================================== files


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _csv_text(header, rows) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_format(v) for v in row] for row in rows])
    return buf.getvalue()


def chunk_path(out_dir: Path, chunk: Chunk) -> Path:
    return Path(out_dir) / "chunks" / f"{chunk.id:06d}.json"


def write_chunk(plan: Plan, out_dir: Path, chunk: Chunk, rows: list[list]) -> None:
    """CSV first, then the JSON record whose presence marks the chunk done."""
    path = chunk_path(out_dir, chunk)
    _atomic_write(path.with_suffix(".csv"), _csv_text(plan.columns, rows))
    record = {"fingerprint": plan.fingerprint, "chunk": chunk.id, "columns": plan.columns,
              "rows": rows}
    _atomic_write(path, json.dumps(record))


def read_chunk(plan: Plan, out_dir: Path, chunk: Chunk) -> list[list] | None:
    """The rows of `chunk` on disk, or None when absent or not this plan's."""
    try:
        record = json.loads(chunk_path(out_dir, chunk).read_text())
    except (OSError, ValueError):
        return None
    ok = (record.get("fingerprint") == plan.fingerprint and record.get("chunk") == chunk.id
          and len(record.get("rows", ())) == chunk.stop - chunk.start)
    return record["rows"] if ok else None


def _what_differs(manifest: dict, plan: Plan) -> str:
    """What makes the sweep described by `manifest` (manifest.json) differ from `plan`."""
    grad = list(plan.grad_outputs)
    if "grad" in manifest and manifest["grad"] != grad:
        return f"another --grad (outputs {manifest['grad']} != {grad})"
    if manifest.get("results_id") == plan.results_id:
        return (f"another chunk size (chunk_size={manifest.get('chunk_size')} != "
                f"{plan.spec.chunk_size}; --chunk-size or the spec's chunk_size)")
    return (f"another spec (its points, knobs, base or outputs: fingerprint "
            f"{manifest.get('fingerprint')} != {plan.fingerprint})")


def prepare_out_dir(plan: Plan, out_dir: Path, resume: bool) -> None:
    """Create `out_dir`; without `resume` drop old chunks; with it, insist on the same plan."""
    out_dir = Path(out_dir)
    chunks_dir = out_dir / "chunks"
    chunks_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / "manifest.json"
    if resume and manifest.exists():
        old = json.loads(manifest.read_text())
        if old.get("fingerprint") != plan.fingerprint:
            raise ValueError(f"--out {str(out_dir)!r} holds a sweep with {_what_differs(old, plan)}"
                             f"; rerun without --resume or choose another --out")
    for path in chunks_dir.iterdir():
        if path.name.startswith(".") or not resume:
            path.unlink()
    if not resume:
        for name in ("results.csv", "results.json", "summary.txt"):
            (out_dir / name).unlink(missing_ok=True)
    info = {"name": plan.spec.name, "target": plan.spec.target, "fingerprint": plan.fingerprint,
            "results_id": plan.results_id, "chunk_size": plan.spec.chunk_size,
            "grad": list(plan.grad_outputs),
            "points": plan.points.size, "chunks": len(plan.chunks), "columns": plan.columns}
    _atomic_write(manifest, json.dumps(info, indent=1) + "\n")


# =========================================================================== progress


class Progress:
    """`name [#####.....] 12/40 chunks 3,072/10,240 points 1.2e+03 points/s ETA 0:07`."""

    def __init__(self, name: str, chunks: int, points: int, *, enabled: bool = True,
                 stream=None):
        self.name, self.total_chunks, self.total_points = name, chunks, points
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self.chunks = self.points = self.skipped_points = 0
        self._last = -math.inf

    def skip(self, chunks: int, points: int) -> None:
        self.chunks += chunks
        self.points += points
        self.skipped_points += points

    def update(self, chunks: int, points: int) -> None:
        self.chunks += chunks
        self.points += points
        self._draw(final=False)

    def set(self, chunks: int, points: int) -> None:
        self.chunks, self.points = chunks, points
        self._draw(final=False)

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = (self.points - self.skipped_points) / elapsed
        left = self.total_points - self.points
        eta = f"{int(left / rate) // 60}:{int(left / rate) % 60:02d}" if rate > 0 else "?"
        filled = int(20 * self.chunks / max(self.total_chunks, 1))
        return (f"{self.name} [{'#' * filled}{'.' * (20 - filled)}] "
                f"{self.chunks}/{self.total_chunks} chunks {self.points:,}/{self.total_points:,}"
                f" points {rate:,.0f} points/s ETA {eta}")

    def _draw(self, final: bool) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not final and now - self._last < (0.1 if self.tty else 10.0):
            return
        self._last = now
        end = "\n" if final or not self.tty else ""
        print(("\r" if self.tty else "") + self.line(), end=end, file=self.stream, flush=True)

    def close(self) -> None:
        self._draw(final=True)


# =========================================================================== run


@dataclasses.dataclass(frozen=True)
class RunResult:
    out_dir: Path
    computed_chunks: int  # evaluated by this process in this run
    skipped_chunks: int  # found on disk (resume)
    points: int  # all points of the sweep
    seconds: float


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def run(plan: Plan, out_dir: str | Path, *, resume: bool = False, progress: bool = True,
        write: bool = True, devices=None) -> RunResult:
    """Evaluate the chunks of `plan` this process owns and write them; returns once every
    process is done (then process 0 calls `finish_sweep`).

    `write=False` evaluates without touching the disk (benchmarks the checkpoint cost);
    `devices` (default: all local devices) is the mesh the batch is sharded over.
    """
    out_dir = Path(out_dir)
    start = time.perf_counter()
    index, count = jax.process_index(), jax.process_count()
    if write and index == 0:
        prepare_out_dir(plan, out_dir, resume)
    _barrier(f"codesign-sweep-prepare-{plan.fingerprint}")
    on_disk = {c.id for c in plan.chunks
               if write and resume and read_chunk(plan, out_dir, c) is not None}
    missing = [c for c in plan.chunks if c.id not in on_disk]
    mine = missing[index::count]
    bar = Progress(plan.spec.name, len(plan.chunks) - len(missing) + len(mine),
                   sum(c.stop - c.start for c in plan.chunks if c.id in on_disk)
                   + sum(c.stop - c.start for c in mine), enabled=progress)
    bar.skip(len(on_disk), sum(c.stop - c.start for c in plan.chunks if c.id in on_disk))
    evaluate = _Evaluator(plan, devices)
    for chunk in mine:
        rows = chunk_rows(plan, chunk, evaluate(chunk))
        if write:
            write_chunk(plan, out_dir, chunk, rows)
        bar.update(1, len(rows))
    bar.close()
    _barrier(f"codesign-sweep-done-{plan.fingerprint}")
    return RunResult(out_dir, len(mine), len(on_disk), plan.points.size,
                     time.perf_counter() - start)


# =========================================================================== merge


@dataclasses.dataclass(frozen=True)
class Table:
    """Merged results: column name -> array (float64, or object for categories)."""

    columns: tuple[str, ...]
    data: dict

    def __len__(self) -> int:
        return len(self.data["index"]) if self.columns else 0

    def select(self, mask: np.ndarray) -> Table:
        return Table(self.columns, {k: v[mask] for k, v in self.data.items()})

    def rows(self) -> list[list]:
        return [[_item(self.data[c][i]) for c in self.columns] for i in range(len(self))]


def _item(value):
    return value.item() if isinstance(value, np.generic) else value


def _table_from_rows(plan: Plan, rows: list[list]) -> Table:
    cats = set(plan.points.categorical)
    data = {}
    for j, name in enumerate(plan.columns):
        col = [r[j] for r in rows]
        data[name] = np.array(col, dtype=object) if name in cats else np.array(col, dtype=float)
    return Table(plan.columns, data)


def merge(plan: Plan, out_dir: str | Path) -> Table:
    """All chunk rows of `plan` in point order, rounded to `SIGNIFICANT_DIGITS`."""
    rows = []
    for chunk in plan.chunks:
        got = read_chunk(plan, Path(out_dir), chunk)
        if got is None:
            raise ValueError(f"chunk {chunk.id} of sweep {plan.spec.name!r} is missing in "
                             f"{str(out_dir)!r}; rerun with --resume")
        rows.extend(got)
    rows.sort(key=lambda r: r[0])
    cats = len(plan.points.categorical)
    rows = [[int(r[0])] + r[1:1 + cats] + [round_significant(v) for v in r[1 + cats:]]
            for r in rows]
    return _table_from_rows(plan, rows)


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def results_json(plan: Plan, table: Table) -> str:
    lines = ["{", f' "name": {json.dumps(plan.spec.name)},',
             f' "target": {json.dumps(plan.spec.target)},',
             f' "results_id": {json.dumps(plan.results_id)},',
             f' "columns": {json.dumps(list(table.columns))},', ' "rows": [']
    rows = table.rows()
    lines += [" " + json.dumps([_json_value(v) for v in r]) + ("," if i < len(rows) - 1 else "")
              for i, r in enumerate(rows)]
    return "\n".join(lines + [" ]", "}"]) + "\n"


def finish_sweep(plan: Plan, out_dir: str | Path, *, figures_dir: str | Path | None = None,
                 plots: bool = True) -> dict:
    """Merge the chunks into results.csv/json, write summary.txt and the figures."""
    out_dir = Path(out_dir)
    table = merge(plan, out_dir)
    _atomic_write(out_dir / "results.csv", _csv_text(table.columns, table.rows()))
    _atomic_write(out_dir / "results.json", results_json(plan, table))
    summary = summarize(plan, table)
    _atomic_write(out_dir / "summary.txt", summary)
    figures = []
    if plots:
        figures = draw_plots(plan, table, Path(figures_dir) if figures_dir else out_dir / "figures")
    return {"results_csv": out_dir / "results.csv", "results_json": out_dir / "results.json",
            "summary": summary, "figures": figures, "table": table}


# =========================================================================== summaries


def mask(table: Table, where: dict, field: str) -> np.ndarray:
    """Rows whose columns equal the `where` values (numbers to 1e-9 relative)."""
    keep = np.ones(len(table), dtype=bool)
    for name, wanted in where.items():
        if name not in table.data:
            raise ValueError(f"{field}.where names {name!r}, not a result column")
        col = table.data[name]
        if col.dtype == object:
            keep &= np.isin(col.astype(str), [str(w) for w in wanted])
        else:
            values = [units.parse_quantity(name, w, field=f"{field}.where.{name}") for w in wanted]
            keep &= np.any([np.isclose(col, v, rtol=1e-9, atol=0) for v in values], axis=0)
    return keep


def _groups(table: Table, by: tuple[str, ...]) -> list[tuple[tuple, np.ndarray]]:
    """(key, row indices) in order of first appearance."""
    keys: dict[tuple, list[int]] = {}
    for i in range(len(table)):
        keys.setdefault(tuple(_item(table.data[b][i]) for b in by), []).append(i)
    return [(k, np.array(v)) for k, v in keys.items()]


def _label(names: tuple[str, ...], key: tuple) -> str:
    return ", ".join(f"{n}={units.format_quantity(n, v)}" for n, v in zip(names, key, strict=True)) or "all"


def _best_lines(s: SummarySpec, t: Table) -> list[str]:
    by = tuple(b for b in s.by if b != s.x)
    pick = np.argmin if s.goal == "min" else np.argmax
    lines = []
    for key, rows in _groups(t, by):
        sub = t.select(rows)
        along = (s.x,) if s.x else ()
        runs: list[list] = []
        for xkey, idx in _groups(sub, along):
            j = idx[pick(sub.data[s.value][idx])]
            winner = units.format_quantity(s.over, _item(sub.data[s.over][j]))
            if runs and runs[-1][0] == winner:
                runs[-1][2] = xkey
            else:
                runs.append([winner, xkey, xkey])
        if s.x:
            parts = [f"{w} for {s.x} {units.format_quantity(s.x, a[0])}..{units.format_quantity(s.x, b[0])}" if a != b
                     else f"{w} at {s.x}={units.format_quantity(s.x, a[0])}" for w, a, b in runs]
        else:
            parts = [runs[0][0]] if runs else []
        lines.append(f"{_label(by, key)}: " + " | ".join(parts))
    return lines


def _one(t: Table, rows: np.ndarray, where: dict, field: str, value: str) -> float:
    sub = t.select(rows)
    hit = np.flatnonzero(mask(sub, where, field))
    if len(hit) != 1:
        raise ValueError(f"{field} selects {len(hit)} rows in a group; it must select exactly "
                         f"one (add columns to `by` or `where`)")
    return float(sub.data[value][hit[0]])


def summarize(plan: Plan, table: Table) -> str:
    """summary.txt: one block per [[summary]] of the spec."""
    out = [f"# {plan.spec.title}", f"# {plan.points.size} points, target {plan.spec.target}"]
    known = set(table.columns)
    for i, s in enumerate(plan.spec.summaries):
        field = f"summary[{i}]"
        used = {s.x, s.over, s.value, *s.by, *s.columns}
        if not used <= known | {None}:
            out += ["", f"## {s.label}", "(needs --grad)"]
            continue
        t = table.select(mask(table, s.where, field))
        out += ["", f"## {s.label}"]
        if s.kind == "table":
            cols = s.columns or table.columns
            out += [", ".join(f"{c}={units.format_quantity(c, _item(t.data[c][i]))}" for c in cols)
                    for i in range(len(t))]
        elif s.kind == "best":
            out += _best_lines(s, t)
        elif s.kind == "ratio":
            for key, rows in _groups(t, s.by):
                num = _one(t, rows, s.numerator, f"{field}.numerator", s.value)
                den = _one(t, rows, s.denominator, f"{field}.denominator", s.value)
                out.append(f"{_label(s.by, key)}: {units.format_quantity(s.value, num)} / "
                           f"{units.format_quantity(s.value, den)} = {safe_ratio(num, den):.4g}")
        else:  # spread
            for key, rows in _groups(t, s.by):
                v = t.data[s.value][rows]
                lo, hi = float(np.min(v)), float(np.max(v))
                out.append(f"{_label(s.by, key)}: min {units.format_quantity(s.value, lo)}, max "
                           f"{units.format_quantity(s.value, hi)}, max/min {safe_ratio(hi, lo):.4g}")
    return "\n".join(out) + "\n"


def safe_ratio(a: float, b: float) -> float:
    return a / b if b != 0 else math.inf


# =========================================================================== plots


def draw_plots(plan: Plan, table: Table, figures_dir: Path) -> list[Path]:
    """Every [[plots]] of the spec whose columns exist (elasticities need --grad)."""
    from . import plots

    figures_dir.mkdir(parents=True, exist_ok=True)
    written = []
    known = set(table.columns)
    for i, p in enumerate(plan.spec.plots):
        used = {p.x, p.value, p.facet, p.over, *p.y, *p.series, *p.where} - {None}
        if not used <= known:
            continue
        t = table.select(mask(table, p.where, f"plots[{i}]"))
        path = figures_dir / p.file
        common = dict(facet=p.facet, logx=p.logx, logy=p.logy, title=p.title or plan.spec.title,
                      xlabel=p.xlabel, ylabel=p.ylabel, path=path)
        if p.kind == "line":
            plots.sweep_lines(t.data, x=p.x, ys=p.y, series=p.series, hlines=p.hlines, **common)
        elif p.kind == "heatmap":
            plots.sweep_heatmap(t.data, x=p.x, y=p.y[0], value=p.value, **common)
        else:
            plots.sweep_best(t.data, x=p.x, y=p.y[0], value=p.value, over=p.over, goal=p.goal,
                             **common)
        written.append(path)
    return written
