"""Sweep figures (codesign.sweep): lines, heatmaps and best-of panels over a
result table, with human axis labels in the unit each column names.
`codesign.plots` re-exports the public names."""

from __future__ import annotations

import textwrap

import matplotlib
import numpy as np
from matplotlib.colors import ListedColormap, LogNorm, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
)

from .. import files, units
from ..words import ELASTICITY as _ELASTICITY
from ..words import words as column_text

# A sweep table is a dict column -> array (float, or object for categories).

SWEEP_DPI = 160

def _elasticity_of(columns) -> str | None:
    """The output every one of `columns` is an elasticity of, or None."""
    found = [_ELASTICITY.fullmatch(c) for c in columns]
    outputs = {m.group(1) for m in found} if all(found) else set()
    return outputs.pop() if len(outputs) == 1 else None


def column_label(name: str) -> str:
    """An axis label: meaning and unit, `breakdown_tp_s` -> "exposed TP time per step (s)"."""
    text = column_text(name)
    unit = "" if name.startswith(("dlog(", "scale:")) else units.unit_of(name)[1]
    return f"{text} ({unit})" if unit else text


def value_text(name: str, value) -> str:
    """One value of a column for a legend or panel title: "50 GB/s", "1MiB", "0.001"."""
    if not isinstance(value, float):
        return str(value)
    scale, unit = units.unit_of(name)
    if unit == "bytes":
        return units.format_bytes(value)
    text = f"{value / scale:.4g}"
    return f"{text} {unit}" if unit else text


def _sweep_tick(name: str, value: float) -> str:
    """A tick label in the unit of `column_label(name)` (bytes binary-prefixed)."""
    scale, unit = units.unit_of(name)
    if unit == "bytes":
        return units.format_bytes(value)
    if unit == "USD" and abs(value) >= 1e3:
        for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= div:
                return f"${value / div:.3g}{suffix}"
    v = value / scale
    if float(v).is_integer() and abs(v) < 1e7:
        return f"{int(v):,}"
    if v != 0 and (abs(v) >= 1e7 or abs(v) < 1e-3):
        return f"{v:.2g}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:.4g}"


def _sweep_axis_formatter(ax_axis, name: str, log: bool, values=(), grid=False) -> None:
    """Ticks in the column's unit; a log axis over a few `grid` values ticks exactly those."""

    values = np.unique(np.asarray(values, dtype=float)) if len(values) else np.array([])
    values = values[np.isfinite(values) & (values > 0)] if log else values
    if grid and log and 1 < len(values) <= 9:
        kept = [values[0]]  # grid values at least 0.2 decades apart, so labels don't collide
        for v in values[1:]:
            if np.log10(v / kept[-1]) >= 0.2:
                kept.append(v)
        ax_axis.set_major_locator(FixedLocator(kept))
        ax_axis.set_minor_formatter(NullFormatter())
    elif name.endswith("_bytes") and log:  # powers of 2 (1KiB, 32KiB, 1MiB, ...)
        ax_axis.set_major_locator(LogLocator(base=32.0, numticks=12))
        ax_axis.set_minor_formatter(NullFormatter())
    elif log:
        span = np.log10(values.max() / values.min()) if len(values) > 1 else 9.0
        if span < 2:  # under two decades: label 1, 2, 5 x 10^k, not only the powers of 10
            ax_axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
        ax_axis.set_minor_formatter(NullFormatter())
    ax_axis.set_major_formatter(FuncFormatter(lambda v, _: _sweep_tick(name, v)))


def _sweep_panels(table: dict, facet, n_extra_rows: int = 0):
    n = len(next(iter(table.values()))) if table else 0
    if facet is None:
        keys, masks = [None], [np.ones(n, dtype=bool)]
    else:
        col = table[facet]
        keys = list(dict.fromkeys(col.tolist()))
        masks = [col == k for k in keys]
    ncols = 2 if len(keys) == 4 else min(len(keys), 3)
    nrows = -(-len(keys) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 4.0 * nrows + n_extra_rows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    titles = [None if k is None else f"{column_text(facet)}: {value_text(facet, k)}"
              for k in keys]
    return fig, list(zip(axes.flat, titles, masks, strict=False))


def _sweep_save(fig, title: str, path, *, legend_below: bool = False):
    width = int(fig.get_figwidth() * 12)  # characters that fit at 11 pt
    fig.suptitle("\n".join(textwrap.wrap(title, width)), fontsize=11)
    fig.tight_layout(rect=(0, 0.1 if legend_below else 0, 1, 1))
    if path is not None:
        files.write_figure(fig, path, dpi=SWEEP_DPI)
    return fig


def _sweep_short(y: str, ys) -> str:
    """A legend name for column `y` among `ys`: "wrt <knob>" when every y column is an
    elasticity of the same output, else the column's label."""
    if _elasticity_of(ys) is not None:
        return "wrt " + column_text(_ELASTICITY.fullmatch(y).group(2))
    return column_label(y)


def _common_label(ys) -> str:
    """A y label for several columns: the shared unit, or the elasticity's output."""
    output = _elasticity_of(ys)
    if output is not None:
        return f"elasticity of {column_text(output)}"
    shown = {units.unit_of(y)[1] for y in ys}
    if shown == {"s"}:
        return "time (s)"
    if shown == {"GB/s"}:
        return "bandwidth (GB/s)"
    return ", ".join(column_label(y) for y in ys)


def _same_curve(a, b) -> bool:
    (xa, ya), (xb, yb) = a, b
    return (len(xa) == len(xb) and np.allclose(xa, xb, rtol=1e-9, atol=0)
            and np.allclose(ya, yb, rtol=1e-6, atol=0, equal_nan=True))


_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")
LINE_STYLES = ("-", "--", ":", "-.")


def sweep_lines(table: dict, *, x: str, ys, series=(), facet=None, logx=False, logy=False,
                title="", xlabel=None, ylabel=None, hlines=(), path=None):
    """Lines of each `ys` column against `x`: a colour and marker per `series` group, a
    line style per y column, a panel per `facet` value. Series drawn on top of an
    identical earlier one are named "(= that one)" in the legend, and each series
    has its own marker (and, with one y column, line style) so none hides another."""

    fig, panels = _sweep_panels(table, facet)
    for ax, panel_title, m in panels:
        groups = {}
        for i in np.flatnonzero(m):
            groups.setdefault(tuple(table[s][i] for s in series), []).append(i)
        handles = []
        by_y = len(groups) == 1 and len(ys) > 1  # one group: a colour per y column
        drawn: list[tuple] = []  # (group, y, curve, legend name)
        for g, (key, rows) in enumerate(groups.items()):
            rows = np.array(rows)
            rows = rows[np.argsort(table[x][rows], kind="stable")]
            name = ", ".join(value_text(s, k) for s, k in zip(series, key, strict=True))
            name = name or _sweep_short(ys[0], ys)
            twins = []
            for j, y in enumerate(ys):
                curve = (np.asarray(table[x][rows], float), np.asarray(table[y][rows], float))
                twin = next((n for k, yk, c, n in drawn
                             if yk == y and k != key and _same_curve(c, curve)), None)
                if twin is not None and twin not in twins:
                    twins.append(twin)
                color = f"C{(j if by_y else g) % 10}"
                marker = _MARKERS[(j if by_y else g) % len(_MARKERS)]
                style = LINE_STYLES[(g if len(ys) == 1 else j) % len(LINE_STYLES)]
                label = _sweep_short(y, ys) if by_y else name
                drawn.append((key, y, curve, label))
                ax.plot(curve[0], curve[1], marker=marker, ms=4, lw=1.5, color=color,
                        ls=style, mfc="none" if g % 2 else color, label=label,
                        zorder=2 + g)
            if not by_y:
                shown = name + "".join(f" (= {t})" for t in twins)
                handles.append(Line2D([], [], color=f"C{g % 10}", lw=1.5,
                                      ls=LINE_STYLES[g % len(LINE_STYLES)] if len(ys) == 1 else "-",
                                      marker=_MARKERS[g % len(_MARKERS)], ms=4,
                                      mfc="none" if g % 2 else f"C{g % 10}", label=shown))
        if by_y:
            handles = ax.get_legend_handles_labels()[0]
        elif len(ys) > 1:
            handles += [Line2D([], [], color="k", lw=1.2, ls=LINE_STYLES[j % len(LINE_STYLES)],
                               label=_sweep_short(y, ys)) for j, y in enumerate(ys)]
        if len(handles) > 1 or series:
            legend_title = ", ".join(column_text(s) for s in series) if series and not by_y \
                else None
            ax.legend(handles=handles, fontsize=7, title=legend_title, title_fontsize=7)
        for value, label in hlines:
            ax.axhline(value, color="gray", ls=":", lw=1.2)
            ax.annotate(label, (0.02, value), xycoords=("axes fraction", "data"),
                        fontsize=7, color="gray", va="bottom")
        ax.set_xscale("log" if logx else "linear")
        ax.set_yscale("log" if logy else "linear")
        _sweep_axis_formatter(ax.xaxis, x, logx, table[x][m], grid=True)
        _sweep_axis_formatter(ax.yaxis, ys[0], logy,
                              np.concatenate([np.asarray(table[y][m], float) for y in ys]))
        ticks = [_sweep_tick(x, v) for v in ax.get_xticks()]
        if len(ticks) > 5 and sum(map(len, ticks)) > 30:  # long labels would touch
            ax.tick_params(axis="x", labelrotation=30)
        ax.set_xlabel(xlabel or column_label(x))
        ax.set_ylabel(ylabel or (column_label(ys[0]) if len(ys) == 1 else _common_label(ys)))
        if panel_title:
            ax.set_title(panel_title, fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    return _sweep_save(fig, title, path)


def _sweep_grid(table: dict, rows, x: str, y: str):
    xs = np.unique(table[x][rows])
    ys = np.unique(table[y][rows])
    return xs, ys, np.searchsorted(xs, table[x][rows]), np.searchsorted(ys, table[y][rows])


def _grid_axes(ax, xs, ys, x: str, y: str, *, xlabel, ylabel, logx, logy, title) -> None:
    """Ticks at (at most 8 of) the grid's distinct values, labels and panel title."""
    for values, name, set_ticks, set_labels in ((xs, x, ax.set_xticks, ax.set_xticklabels),
                                                (ys, y, ax.set_yticks, ax.set_yticklabels)):
        step = max(1, -(-len(values) // 8))
        idx = np.arange(0, len(values), step)
        set_ticks(idx)
        set_labels([_sweep_tick(name, float(values[i])) for i in idx], fontsize=7)
    ax.set_xlabel((xlabel or column_label(x)) + (", log-spaced" if logx else ""))
    ax.set_ylabel((ylabel or column_label(y)) + (", log-spaced" if logy else ""))
    if title:
        ax.set_title(title, fontsize=9)


def _annotate_cells(ax, grid, norm, cmap) -> None:
    """Each cell's value, in black or white against its colour (small grids only)."""
    if grid.size > 120:
        return
    colormap = matplotlib.colormaps[cmap]
    for (i, j), v in np.ndenumerate(grid):
        if not np.isfinite(v):
            continue
        level = norm(v)
        r, g, b, _ = colormap(float(level))
        ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
        ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6, color=ink)


def sweep_heatmap(table: dict, *, x: str, y: str, value: str, facet=None, logx=False,
                  logy=False, title="", xlabel=None, ylabel=None, path=None):
    """`value` on the x-by-y grid of distinct values (cells in rank order, each
    labelled with its value on small grids), a panel per facet.

    Values of both signs get a diverging map centred on 0 (elasticities); positive
    values spanning more than 100x get a log colour scale.
    """

    fig, panels = _sweep_panels(table, facet)
    scale = units.unit_of(value)[0]
    for ax, panel_title, m in panels:
        rows = np.flatnonzero(m)
        xs, ys, xi, yi = _sweep_grid(table, rows, x, y)
        grid = np.full((len(ys), len(xs)), np.nan)
        grid[yi, xi] = np.asarray(table[value][rows], float) / scale
        finite = grid[np.isfinite(grid)]
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        if lo < 0 < hi:
            norm, cmap = TwoSlopeNorm(0.0, lo, hi), "RdBu_r"
        elif lo > 0 and hi / lo > 100:
            norm, cmap = LogNorm(lo, hi), "viridis"
        else:
            norm, cmap = None, "viridis"
        image = ax.imshow(grid, origin="lower", aspect="auto", norm=norm, cmap=cmap,
                          interpolation="nearest")
        _annotate_cells(ax, grid, image.norm, cmap)
        fig.colorbar(image, ax=ax, shrink=0.85).set_label(column_label(value), fontsize=8)
        _grid_axes(ax, xs, ys, x, y, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy,
                   title=panel_title)
    return _sweep_save(fig, title, path)


def sweep_best(table: dict, *, x: str, y: str, value: str, over: str, goal="min", facet=None,
               logx=False, logy=False, title="", xlabel=None, ylabel=None, path=None):
    """Which category of `over` minimises (or maximises) `value` in each x-by-y cell."""

    names = list(dict.fromkeys(table[over].tolist()))
    colors = matplotlib.colormaps["tab10"].colors[:len(names)]
    fig, panels = _sweep_panels(table, facet)
    for ax, panel_title, m in panels:
        rows = np.flatnonzero(m)
        xs, ys, xi, yi = _sweep_grid(table, rows, x, y)
        best = np.full((len(ys), len(xs)), np.inf if goal == "min" else -np.inf)
        winner = np.full((len(ys), len(xs)), np.nan)
        for r, i, j in zip(rows, yi, xi, strict=True):
            v = table[value][r]
            if (v < best[i, j]) if goal == "min" else (v > best[i, j]):
                best[i, j], winner[i, j] = v, names.index(table[over][r])
        ax.imshow(winner, origin="lower", aspect="auto", cmap=ListedColormap(colors),
                  vmin=-0.5, vmax=len(names) - 0.5, interpolation="nearest")
        _grid_axes(ax, xs, ys, x, y, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy,
                   title=panel_title)
    lowest = "lowest" if goal == "min" else "highest"
    fig.legend(handles=[Patch(color=c, label=n) for c, n in zip(colors, names, strict=True)],
               fontsize=8, loc="lower center", ncol=min(len(names), 5),
               title=f"{column_text(over)} with the {lowest} {column_text(value)}",
               title_fontsize=8, bbox_to_anchor=(0.5, 0.0))
    return _sweep_save(fig, title, path, legend_below=True)
