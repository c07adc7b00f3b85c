"""What a sweep reports from its merged `Table`: summary.txt, one block per
[[summary]] of the spec (the selected rows, the winning category along x, a
ratio, a spread), values written by `units.format_quantity`; and the figures
of its [[plots]] (drawn by `_plots`, imported only when drawing)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from .. import units
from ._points import Job
from ._spec import SummarySpec
from ._store import Table, item


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
        keys.setdefault(tuple(item(table.data[b][i]) for b in by), []).append(i)
    return [(k, np.array(v)) for k, v in keys.items()]


def _label(names: tuple[str, ...], key: tuple) -> str:
    return ", ".join(f"{n}={units.format_quantity(n, v)}"
                     for n, v in zip(names, key, strict=True)) or "all"


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
            winner = units.format_quantity(s.over, item(sub.data[s.over][j]))
            if runs and runs[-1][0] == winner:
                runs[-1][2] = xkey
            else:
                runs.append([winner, xkey, xkey])
        if s.x:
            x_text = functools.partial(units.format_quantity, s.x)
            parts = [f"{w} for {s.x} {x_text(a[0])}..{x_text(b[0])}" if a != b
                     else f"{w} at {s.x}={x_text(a[0])}" for w, a, b in runs]
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


def summarize(job: Job, table: Table) -> str:
    """summary.txt: one block per [[summary]] of the spec."""
    out = [f"# {job.spec.title}", f"# {job.points.size} points, target {job.spec.target}"]
    known = set(table.columns)
    for i, s in enumerate(job.spec.summaries):
        field = f"summary[{i}]"
        used = {s.x, s.over, s.value, *s.by, *s.columns}
        if not used <= known | {None}:
            out += ["", f"## {s.label}", "(needs --grad)"]
            continue
        t = table.select(mask(table, s.where, field))
        out += ["", f"## {s.label}"]
        if s.kind == "table":
            cols = s.columns or table.columns
            out += [", ".join(f"{c}={units.format_quantity(c, item(t.data[c][i]))}" for c in cols)
                    for i in range(len(t))]
        elif s.kind == "best":
            out += _best_lines(s, t)
        elif s.kind == "ratio":
            for key, rows in _groups(t, s.by):
                num = _one(t, rows, s.numerator, f"{field}.numerator", s.value)
                den = _one(t, rows, s.denominator, f"{field}.denominator", s.value)
                out.append(f"{_label(s.by, key)}: {units.format_quantity(s.value, num)} / "
                           f"{units.format_quantity(s.value, den)} = {_ratio(num, den):.4g}")
        else:  # spread
            for key, rows in _groups(t, s.by):
                v = t.data[s.value][rows]
                lo, hi = float(np.min(v)), float(np.max(v))
                out.append(f"{_label(s.by, key)}: min {units.format_quantity(s.value, lo)}, max "
                           f"{units.format_quantity(s.value, hi)}, max/min {_ratio(hi, lo):.4g}")
    return "\n".join(out) + "\n"


def _ratio(a: float, b: float) -> float:
    return a / b if b != 0 else math.inf


def figure_path(figures_dir: Path, file: str, field: str) -> Path:
    """Where a spec's figure `file` (relative, without `..`: `_spec._figure_file`)
    is written: inside `figures_dir`, its folders made; a folder on the way that is
    a link leading out of `figures_dir` is a ValueError naming `field`."""
    path = figures_dir / file
    path.parent.mkdir(parents=True, exist_ok=True)
    inside = figures_dir.resolve()
    if not path.parent.resolve().is_relative_to(inside):
        raise ValueError(f"{field}={file!r} leads out of the figures folder "
                         f"{str(figures_dir)!r} (through a link); name a file inside it")
    return path


def draw_plots(job: Job, table: Table, figures_dir: Path) -> list[Path]:
    """Every [[plots]] of the spec whose columns exist (elasticities need --grad)."""
    from . import _plots as plots

    figures_dir.mkdir(parents=True, exist_ok=True)
    written = []
    known = set(table.columns)
    for i, p in enumerate(job.spec.plots):
        used = {p.x, p.value, p.facet, p.over, *p.y, *p.series, *p.where} - {None}
        if not used <= known:
            continue
        t = table.select(mask(table, p.where, f"plots[{i}]"))
        path = figure_path(figures_dir, p.file, f"plots[{i}].file")
        common = dict(facet=p.facet, logx=p.logx, logy=p.logy, title=p.title or job.spec.title,
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
