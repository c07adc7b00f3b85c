"""A sweep spec: the TOML schema (`Spec` and its `Axis`, `PlotSpec`,
`SummarySpec`), parsing and loading with errors that name the key, unit
suffixes through `units.parse_quantity`, dotted keys through
`scenario.flatten`, and the result columns every plot and summary must name."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path, PureWindowsPath

import numpy as np

from .. import scenario, units
from . import _fields as fields
from ._targets import TARGETS

DEFAULT_CHUNK_SIZE = 256
SIGNIFICANT_DIGITS = 12  # merged results: fixed formatting, robust to last-ulp noise
# points in one sweep: 10x the largest real one (a 1M-point grid search), and what the
# merge holds in memory on a 24 GB machine with room to spare (docs/sweeps.md)
MAX_POINTS = 10**7
_SPEC_KEYS = ("name", "title", "description", "target", "base", "knobs", "samples", "seed",
              "outputs", "grad", "chunk_size", "plots", "summary")
_KNOB_KINDS = ("values", "grid", "log_grid", "random", "categories")


def round_significant(value: float) -> float:
    """`value` rounded to `SIGNIFICANT_DIGITS` (grids and draws survive a CSV round trip)."""
    return float(format(float(value), f".{SIGNIFICANT_DIGITS}g"))


@dataclasses.dataclass(frozen=True)
class Axis:
    """One axis of the sweep, the knob `name` over a list of float `values`, a
    `random` range or `categories` (`bundles`: categories that set several keys)."""

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
    """A validated spec: the target, its base, the axes, the outputs, and the
    figures and summaries drawn from the results."""

    name: str
    title: str
    description: str
    target: str
    base: dict
    knobs: tuple[Axis, ...]
    samples: int
    seed: int
    outputs: tuple[str, ...]
    grad_outputs: tuple[str, ...]
    chunk_size: int
    plots: tuple[PlotSpec, ...]
    summaries: tuple[SummarySpec, ...]
    directory: Path  # where relative paths in `base` are resolved

    @property
    def categorical(self) -> tuple[Axis, ...]:
        return tuple(k for k in self.knobs if k.kind == "categories")

    @property
    def floats(self) -> tuple[Axis, ...]:
        return tuple(k for k in self.knobs if k.kind != "categories")


def count_text(n: int) -> str:
    """A count in a message: 1000 as is, 10**12 as 1e12, 2.5 * 10**12 as 2.5e12."""
    if n < 10**6:
        return str(n)
    mantissa, exponent = f"{n:.3e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def point_count(knobs: tuple[Axis, ...], samples: int) -> int:
    """The points of a sweep (each categorical and grid knob's length, times `samples`),
    counted before any is made; past `MAX_POINTS` a ValueError naming the factors."""
    sizes = [(len(k.values), k.name) for k in knobs if k.kind != "random"]
    sizes += [(samples, "samples")] if samples else []
    n = math.prod(size for size, _ in sizes)
    if n > MAX_POINTS:
        factors = " x ".join(f"{count_text(size)} {name}" for size, name in sizes)
        raise ValueError(f"knobs: {count_text(n)} points ({factors}) exceed the cap of "
                         f"{count_text(MAX_POINTS)} points per sweep (MAX_POINTS); coarsen a "
                         "grid, draw fewer samples or split the sweep")
    return n


def _range(name: str, value, field: str, size: bool) -> tuple[float, float, int]:
    n_items = 3 if size else 2
    if not isinstance(value, list) or len(value) != n_items:
        shape = "[low, high, points]" if size else "[low, high]"
        raise ValueError(f"{field}={value!r} must be {shape}")
    low = units.parse_quantity(name, value[0], field=field)
    high = units.parse_quantity(name, value[1], field=field)
    n = fields.integer(value[2], field, 1) if size else 0
    if n > MAX_POINTS:
        raise ValueError(f"{field}={value!r} asks for {count_text(n)} points, past the cap of "
                         f"{count_text(MAX_POINTS)} points per sweep (MAX_POINTS)")
    if not low <= high:
        raise ValueError(f"{field}={value!r} needs low <= high")
    return low, high, n


def _parse_axis(name: str, raw) -> Axis:
    field = f"knobs.{name}"
    if isinstance(raw, list):
        raw = {"values": raw}
    raw = fields.table(raw, field)
    kinds = [k for k in _KNOB_KINDS if k in raw]
    if len(kinds) != 1:
        raise ValueError(f"{field} needs exactly one of {', '.join(_KNOB_KINDS)}; "
                         f"got {sorted(raw)}")
    kind = kinds[0]
    fields.only(raw, (kind, "log") if kind == "random" else (kind,), field)
    value, where = raw[kind], f"{field}.{kind}"
    if kind == "categories" and isinstance(value, list) and value and all(
            isinstance(v, dict) for v in value):
        return _bundle_axis(name, value, where)
    if kind == "categories":
        if (not isinstance(value, list) or not value
                or not all(isinstance(v, (str, int, float)) for v in value)):
            raise ValueError(f"{where}={value!r} must be a non-empty list of values, or of "
                             f"tables {{ label = \"...\", key = value, ... }}")
        if len({str(v) for v in value}) != len(value):
            raise ValueError(f"{where}={value!r} has repeated categories")
        return Axis(name, "categories", tuple(value))
    if kind == "values":
        if not isinstance(value, list) or not value:
            raise ValueError(f"{where}={value!r} must be a non-empty list")
        return Axis(name, "values",
                    tuple(units.parse_quantity(name, v, field=where) for v in value))
    if kind == "random":
        low, high, _ = _range(name, value, where, size=False)
        log = fields.boolean(raw.get("log", False), f"{field}.log")
        if log and not low > 0:
            raise ValueError(f"{where}={value!r} must be positive with log = true")
        return Axis(name, "random", low=low, high=high, log=log)
    low, high, n = _range(name, value, where, size=True)
    if kind == "log_grid":
        if not low > 0:
            raise ValueError(f"{where}={value!r} must be positive for a log grid")
        grid = np.geomspace(low, high, n) if n > 1 else np.array([low])
    else:
        grid = np.linspace(low, high, n)
    return Axis(name, "values", tuple(round_significant(v) for v in grid))


def _bundle_axis(name: str, tables: list, where: str) -> Axis:
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
    return Axis(name, "categories", tuple(labels), bundles=tuple(bundles))


def _is_axis_table(value: dict) -> bool:
    return any(k in value for k in _KNOB_KINDS + ("log",))


def _where(raw, field: str) -> dict:
    """`{column: (values...)}`; nested tables are dotted keys (`parallel.tp = 8`)."""
    flat = scenario.flatten(fields.table(raw, field))
    return {k: tuple(v) if isinstance(v, list) else (v,) for k, v in flat.items()}


def _figure_file(value, field: str) -> str:
    """A figure's file, a path inside the sweep's figures folder (`--figures`, default
    OUT/figures): relative, without `..`, not the folder itself; else a ValueError
    naming `field` (a spec is no licence to write anywhere else)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field}={value!r} must be a file name, e.g. \"loss.png\"")
    parts = Path(value).parts
    if (Path(value).is_absolute() or PureWindowsPath(value).is_absolute()
            or value.startswith("~") or ".." in parts or ".." in PureWindowsPath(value).parts):
        raise ValueError(f"{field}={value!r} must be a relative path inside the figures folder "
                         "(no absolute path, no '..', no '~')")
    if value.endswith(("/", "\\")) or parts[-1:] == (".",) or not parts:
        raise ValueError(f"{field}={value!r} must name a file, e.g. \"loss.png\"")
    return value


_PLOT_KEYS = ("file", "kind", "x", "y", "value", "series", "facet", "over", "goal", "where",
              "logx", "logy", "title", "xlabel", "ylabel", "hlines")


def _parse_plot(raw, i: int, name: str) -> PlotSpec:
    field = f"plots[{i}]"
    raw = fields.table(raw, field)
    fields.only(raw, _PLOT_KEYS, field)
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
        file=_figure_file(raw.get("file", f"{name}-{i}.png"), f"{field}.file"), kind=kind,
        x=fields.strings(raw["x"], f"{field}.x")[0],
        y=fields.strings(raw["y"], f"{field}.y"), value=raw.get("value"),
        series=fields.strings(raw.get("series", []), f"{field}.series"), facet=facet,
        over=raw.get("over"), goal=goal, where=_where(raw.get("where", {}), f"{field}.where"),
        logx=fields.boolean(raw.get("logx", False), f"{field}.logx"),
        logy=fields.boolean(raw.get("logy", False), f"{field}.logy"),
        title=str(raw.get("title", "")), xlabel=raw.get("xlabel"), ylabel=raw.get("ylabel"),
        hlines=tuple(hlines))


_SUMMARY_KEYS = ("kind", "label", "where", "columns", "by", "x", "over", "value", "goal",
                 "numerator", "denominator")
_SUMMARY_NEEDS = {"table": (), "best": ("over", "value"), "ratio": ("value", "numerator",
                                                                     "denominator"),
                  "spread": ("value",)}


def _parse_summary(raw, i: int) -> SummarySpec:
    field = f"summary[{i}]"
    raw = fields.table(raw, field)
    fields.only(raw, _SUMMARY_KEYS, field)
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
        columns=fields.strings(raw.get("columns", []), f"{field}.columns"),
        by=fields.strings(raw.get("by", []), f"{field}.by"), x=raw.get("x"), over=raw.get("over"),
        value=raw.get("value"), goal=goal,
        numerator=_where(raw.get("numerator", {}), f"{field}.numerator"),
        denominator=_where(raw.get("denominator", {}), f"{field}.denominator"))


def parse_spec(raw: dict, *, name: str = "sweep", directory: Path | str = ".") -> Spec:
    """A validated `Spec` from the parsed TOML `raw`; errors name the key."""
    fields.only(raw, _SPEC_KEYS, "spec")
    target_name = raw.get("target")
    if target_name not in TARGETS:
        raise ValueError(f"target={target_name!r} is unknown; choose one of "
                         f"{', '.join(TARGETS)}")
    target = TARGETS[target_name]
    base = fields.table(raw.get("base", {}), "base")
    knobs_raw = scenario.flatten(fields.table(raw.get("knobs", {}), "knobs"),
                                 is_leaf=_is_axis_table)
    knobs = tuple(_parse_axis(k, v) for k, v in knobs_raw.items())
    directory = Path(directory)
    target.check(base, knobs, directory)
    random_knobs = [k for k in knobs if k.kind == "random"]
    samples = fields.integer(raw.get("samples", 0), "samples", 1 if random_knobs else 0)
    if samples and not random_knobs:
        raise ValueError(f"samples={samples} needs at least one knob with random = [low, high]")
    point_count(knobs, samples)
    available = target.outputs(base, directory)
    outputs = fields.strings(raw.get("outputs", list(available)), "outputs")
    for o in outputs:
        if o not in available:
            raise ValueError(f"outputs: {o!r} is not an output of target {target_name!r}; "
                             f"choose from {', '.join(available)}")
    grad = fields.table(raw.get("grad", {}), "grad")
    fields.only(grad, ("outputs",), "grad")
    grad_outputs = fields.strings(grad.get("outputs", list(outputs)), "grad.outputs")
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
        knobs=knobs, samples=samples, seed=fields.integer(raw.get("seed", 0), "seed", 0),
        outputs=outputs, grad_outputs=grad_outputs,
        chunk_size=fields.integer(raw.get("chunk_size", DEFAULT_CHUNK_SIZE), "chunk_size", 1),
        plots=tuple(_parse_plot(p, i, spec_name) for i, p in enumerate(plots_raw)),
        summaries=tuple(_parse_summary(s, i) for i, s in enumerate(summary_raw)),
        directory=directory)
    _check_columns(spec)
    return spec


def load_spec(path: str | Path) -> Spec:
    """Read and validate the spec at `path` (relative paths in it resolve next to it)."""
    path = Path(path)
    raw = scenario.read_toml(path, "spec")  # bounded size and depth
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
                             f"{', '.join(sorted(known))} (or dlog(y)/dlog(x) with `grad`)")

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


