"""Matplotlib figures used by the CLI, the sweeps and the notebooks.

Every function takes plain arrays / result objects and a path or an Axes, and
returns the Figure; nothing here computes a cost. A new figure is pyplot's
(a notebook shows it, `plt.show()` draws it) on whatever backend the caller's
matplotlib has: this module chooses none (the `codesign` command draws
off-screen, Agg, choosing it where it saves a figure). The sweep figures
(`sweep_lines`, ...) are written to files and never touch pyplot.
"""

from __future__ import annotations

import matplotlib

from . import files
from .sweep._plots import LINE_STYLES
from .sweep._plots import SWEEP_DPI as SWEEP_DPI
from .sweep._plots import column_label as column_label
from .sweep._plots import column_text as column_text
from .sweep._plots import sweep_best as sweep_best
from .sweep._plots import sweep_heatmap as sweep_heatmap
from .sweep._plots import sweep_lines as sweep_lines
from .sweep._plots import value_text as value_text


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def _figure(ax=None, figsize=(7, 4.5)):
    """(figure, axes): the given axes' figure, or a new one."""
    fig = ax.figure if ax is not None else _pyplot().figure(figsize=figsize)
    return fig, (ax if ax is not None else fig.add_subplot())


def _save(fig, path=None):
    """Write `fig` to `path` (when given) and return it."""
    if path is not None:
        files.write_figure(fig, path, dpi=150, bbox_inches="tight")
    return fig


def _finish(fig, ax, xlabel: str, ylabel: str, title: str, path=None, *, which="major",
            **legend):
    """Axis labels, title, grid and legend (`legend`: its keywords, default
    fontsize 8); then `_save`."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which=which, alpha=0.3)
    ax.legend(**{"fontsize": 8, **legend})
    return _save(fig, path)


def collective_times(sizes_bytes, times_s: dict, crossovers: dict, *, auto_s=None,
                     title: str = "", path=None, ax=None):
    """Time against size (log-log), one line per algorithm of a collective.

    `times_s` maps algorithm -> times over `sizes_bytes`; `crossovers` maps
    algorithm -> (bytes, seconds) where its latency term equals its bandwidth
    (+ reduction) term: left of the dot it is latency-bound, right of it
    bandwidth-bound. `auto_s` (optional) is the `auto` choice, drawn dashed.
    """
    fig = ax.figure if ax is not None else _pyplot().figure(figsize=(7.5, 5),
                                                            layout="constrained")
    ax = ax if ax is not None else fig.add_subplot()
    import numpy as np

    seen: dict[str, object] = {}
    for k, (name, t) in enumerate(times_s.items()):
        twin = next((other for other, u in seen.items()
                     if np.allclose(np.asarray(u, float), np.asarray(t, float), rtol=1e-6)), None)
        seen[name] = t
        (line,) = ax.loglog(sizes_bytes, t, lw=1.5, ls=LINE_STYLES[k % len(LINE_STYLES)],
                            label=name + (f" (= {twin}, drawn over it)" if twin else ""))
        if name in crossovers:
            n_star, t_star = crossovers[name]
            ax.plot([n_star], [t_star], "o", color=line.get_color(), ms=6)
    if auto_s is not None:
        ax.loglog(sizes_bytes, auto_s, "k--", lw=2.5, alpha=0.6, label="auto (soft min)")
    ax.plot([], [], "o", color="gray", label="latency term = bandwidth term")
    return _finish(fig, ax, "message size n (bytes)", "time (s)", title, path)


# ------------------------------------------------------------ sweeps: codesign/sweep/_plots.py


def roofline(rows, path=None, title="network roofline"):
    """Bars of FLOP per byte achieved per dimension, against the tiers' needs."""
    fig, ax = _pyplot().subplots(figsize=(6, 3.5))
    names = [f"{r['dimension']} ({r['tier']})" for r in rows]
    ax.bar(names, [r["flop_per_byte"] for r in rows], color="tab:blue", label="achieved")
    for tier, style in (("scale_up", "--"), ("scale_out", ":")):
        need = [r["needed_flop_per_byte"] for r in rows if r["tier"] == tier]
        if need:
            ax.axhline(need[0], ls=style, color="k", label=f"needed on {tier}")
    ax.set_yscale("log")
    ax.set_ylabel("FLOP per byte on the wire")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path:
        files.write_figure(fig, path, dpi=150)
    return fig


# ------------------------------------------------- stragglers and checkpoints (reliability)
def straggler_step_times(participants, curves: dict, *, monte_carlo=None, path=None, ax=None,
                         title="synchronous step time against participants"):
    """Mean (solid) and p99 (dotted) step time over participants, one colour per curve.

    `curves` maps label -> (mean, p99) arrays over `participants`;
    `monte_carlo` (optional) maps label -> (participants, means) drawn as dots.
    """
    fig, ax = _figure(ax)
    for label, (mean, p99) in curves.items():
        (line,) = ax.semilogx(participants, mean, lw=1.8, label=f"{label}: mean")
        ax.semilogx(participants, p99, ":", lw=1.5, color=line.get_color(), label=f"{label}: p99")
        if monte_carlo and label in monte_carlo:
            ax.plot(*monte_carlo[label], "o", ms=5, color=line.get_color())
    if monte_carlo:
        ax.plot([], [], "o", color="gray", label="Monte Carlo mean")
    return _finish(fig, ax, "participants p", "step time / straggler-free step time", title,
                   path, fontsize=7, ncol=2)


def checkpoint_tradeoff(intervals_s, fraction, marks: dict, *, label=None, path=None, ax=None,
                        title="effective training time against checkpoint interval"):
    """Effective training time fraction over the checkpoint interval (log x), with
    `marks` label -> (interval_s, fraction) drawn as points (e.g. Young, Daly).
    Call again with the same `ax` to overlay another curve (`label` names it)."""
    fig, ax = _figure(ax)
    (line,) = ax.semilogx(intervals_s, fraction, lw=1.8, label=label)
    for (name, (tau, f)), marker in zip(marks.items(), "o^sv", strict=False):
        ax.plot([tau], [f], marker, ms=7, color=line.get_color(), mfc="white" if marker == "o"
                else line.get_color(), label=f"{name}: {tau:,.0f} s, {f:.2%}")
    return _finish(fig, ax, "checkpoint interval (s of work)",
                   "effective training time fraction", title, path, which="both")


# ------------------------------------------------------- measured collectives (execute/)
def measured_busbw(series: dict, *, title: str = "", path=None, ax=None):
    """nccl-tests busbw against size, one line per run: `series` maps a label to
    (sizes_bytes, busbw_Bps), e.g. from `codesign bench` records."""
    fig, ax = _figure(ax)
    for label, (sizes, busbw) in series.items():
        ax.loglog(sizes, [b / 1e9 for b in busbw], "o-", ms=3, lw=1.5, label=label)
    return _finish(fig, ax, "size (bytes)", "busbw (GB/s)", title, path)


def predicted_vs_measured(sizes_bytes, measured_s, predicted_s, held_out, *, title: str = "",
                          path=None, ax=None):
    """Measured times (dots; held-out sizes hollow) and the fitted model (line)."""
    fig, ax = _figure(ax)
    order = sorted(range(len(sizes_bytes)), key=lambda i: sizes_bytes[i])
    ax.loglog([sizes_bytes[i] for i in order], [predicted_s[i] for i in order], "-", lw=1.5,
              label="fitted model")
    fit = [i for i in order if not held_out[i]]
    out = [i for i in order if held_out[i]]
    ax.loglog([sizes_bytes[i] for i in fit], [measured_s[i] for i in fit], "o", ms=5,
              label="measured (fitted)")
    ax.loglog([sizes_bytes[i] for i in out], [measured_s[i] for i in out], "o", ms=7,
              mfc="none", label="measured (held out)")
    return _finish(fig, ax, "size (bytes)", "time (s)", title, path)


# ------------------------------------------------------------ co-design (codesign.optimize)
def pareto(cost_usd, time_s, front_cost_usd=(), front_time_s=(), *, grid_front=None,
           title="time to train against cost to train", path=None, ax=None):
    """Every evaluated design as a dot (cost, time), the gradient method's
    Pareto front as a line with markers, and optionally the grid's exact front
    (`grid_front` = (costs, times)) dashed. Dollars in millions, days."""
    import numpy as np

    fig, ax = _figure(ax)
    ax.scatter(np.asarray(cost_usd) / 1e6, np.asarray(time_s) / 86400, s=4, alpha=0.25,
               color="gray", label="grid designs (feasible)")
    if grid_front is not None:
        c, t = grid_front
        ax.plot(np.asarray(c) / 1e6, np.asarray(t) / 86400, "k--", lw=1.2, label="grid front")
    if len(front_cost_usd):
        ax.plot(np.asarray(front_cost_usd) / 1e6, np.asarray(front_time_s) / 86400, "o-",
                color="tab:red", ms=5, label="gradient front (one run per budget)")
    return _finish(fig, ax, "cost to train (million USD)", "time to train (days)", title, path)


# ------------------------------------------------------------ one estimate (codesign estimate)
def estimate_breakdown(breakdown_s: dict, memory_bytes: dict, capacity_bytes: float, *,
                       title: str = "", path=None, dpi: int = 150):
    """Two panels: the step time by part (horizontal bars, seconds, with each
    part's share) and the memory per GPU by part (one stacked bar, GiB) against
    the HBM capacity (a dashed line). `breakdown_s` and `memory_bytes` map a
    part's name to its value."""
    fig, (left, right) = _pyplot().subplots(1, 2, figsize=(11, 4.2),
                                            gridspec_kw={"width_ratios": [2.2, 1]})
    names = list(breakdown_s)
    times = [float(breakdown_s[k]) for k in names]
    total = sum(times)
    bars = left.barh(names, times, color="tab:blue")
    for bar, t in zip(bars, times, strict=True):
        share = t / total if total > 0 else 0.0
        left.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {t:.3g} s ({share:.0%})",
                  va="center", fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("time per step (s)")
    left.set_title(f"step time {total:.3g} s by part")
    left.set_xlim(0, max(times + [1e-12]) * 1.35)
    left.grid(True, axis="x", alpha=0.3)
    _memory_panel(right, memory_bytes, capacity_bytes)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        files.write_figure(fig, path, dpi=dpi, bbox_inches="tight")
    return fig


def _memory_panel(ax, memory_bytes: dict, capacity_bytes: float) -> None:
    """One stacked bar of the memory per GPU by part (GiB = 2^30 bytes, the unit
    of the CLI's tables) against the HBM capacity (a dashed line), titled with
    the total and whether it fits."""
    from .units import GiB

    bottom = 0.0
    colors = matplotlib.colormaps["tab10"].colors
    for i, (k, v) in enumerate(memory_bytes.items()):
        gib = float(v) / GiB
        ax.bar(["memory per GPU"], [gib], bottom=bottom, color=colors[i % len(colors)],
               label=f"{k} {gib:.4g} GiB")
        bottom += gib
    capacity_gib = float(capacity_bytes) / GiB
    ax.axhline(capacity_gib, color="k", ls="--", label=f"capacity {capacity_gib:.4g} GiB")
    ax.set_ylabel("memory per GPU (GiB = 2^30 bytes)")
    ax.set_ylim(0, max(bottom, capacity_gib) * 1.15)
    fits = "fits" if bottom <= capacity_gib else "DOES NOT FIT"
    ax.set_title(f"memory {bottom:.4g} of {capacity_gib:.4g} GiB ({fits})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))


def memory_per_gpu(memory_bytes: dict, capacity_bytes: float, *, title: str = "", path=None):
    """The memory per GPU by part (one stacked bar, GiB) against the HBM capacity
    (a dashed line): the right panel of `estimate_breakdown` on its own."""
    fig, ax = _pyplot().subplots(figsize=(5, 4.2))
    _memory_panel(ax, memory_bytes, capacity_bytes)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def step_stack(breakdown_s: dict, *, interval_s=None, title: str = "", path=None):
    """The step time as one horizontal bar stacked from its parts (`breakdown_s`:
    a part's name -> seconds, in the order given; parts of zero time are left
    out, each other's seconds and share in the legend), with the estimate's
    interval `interval_s` = (lo, hi) as a bracket from lo to hi above the bar (wherever it
    lies: below the estimate where validate's rows ran faster than predicted) when given."""
    fig, ax = _pyplot().subplots(figsize=(10, 2.9))
    total = sum(float(v) for v in breakdown_s.values())
    colors = matplotlib.colormaps["tab10"].colors
    left = 0.0
    for i, (k, v) in enumerate(breakdown_s.items()):
        t = float(v)
        if t <= 0:
            continue
        share = t / total if total > 0 else 0.0
        ax.barh([0], [t], left=left, height=0.5, color=colors[i % len(colors)],
                edgecolor="white", linewidth=0.5, label=f"{k} {t:.3g} s ({share:.1%})")
        left += t
    if interval_s is not None:  # a bracket from lo to hi, wherever it lies (below the
        lo, hi = sorted(float(v) for v in interval_s)  # estimate: the rows ran faster)
        y = 0.4
        ax.plot([lo, hi], [y, y], color="k", lw=1.5,
                label=f"interval {lo:.3g}-{hi:.3g} s ({lo / total if total else 0:.2f}-"
                      f"{hi / total if total else 0:.2f} x the estimate)")
        ax.vlines([lo, hi], y - 0.08, y + 0.08, color="k", lw=1.5)
        ax.plot([total], [y], "kv", ms=6, label=f"estimate {total:.3g} s")
    ax.set_yticks([])
    ax.set_ylim(-0.6, 0.6)
    ax.set_xlim(0, max([total] + ([] if interval_s is None else [float(v) for v in interval_s]))
                * 1.04)
    ax.set_xlabel("time per step (s)")
    ax.set_title(title or f"step time {total:.3g} s by part")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    fig.tight_layout()
    return _save(fig, path)


def elasticity_bars(elasticities: dict, *, output: str = "step time", title: str = "",
                    path=None):
    """Elasticities d log(output) / d log(knob) as horizontal bars, in the order
    given (the first on top), red where raising the knob raises `output` (its
    words, e.g. "step time"), blue where it lowers it; each bar labelled."""
    names = list(elasticities)
    values = [float(elasticities[k]) for k in names]
    fig, ax = _pyplot().subplots(figsize=(8, 0.3 * len(names) + 1.4))
    bars = ax.barh(names, values, color=["tab:red" if v > 0 else "tab:blue" for v in values])
    for bar, v in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:+.3g} ",
                va="center", ha="left" if v >= 0 else "right", fontsize=7)
    ax.axvline(0, color="k", lw=0.8)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    reach = max([abs(v) for v in values] + [1e-12]) * 1.3
    ax.set_xlim(-reach, reach)
    ax.set_xlabel(f"elasticity d log({output}) / d log(knob)")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def pareto_points(x, y, front, *, xlabel: str, ylabel: str, title: str = "", path=None):
    """Designs as points (`x`, `y`: two metrics, each minimised as drawn), the
    non-dominated ones (`front`: their indices, sorted by x) joined as a step line."""
    import numpy as np

    x, y, front = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(front)
    fig, ax = _pyplot().subplots(figsize=(7, 4.2))
    ax.scatter(x, y, s=12, color="0.7", label=f"{len(x):,} feasible designs")
    ax.step(x[front], y[front], where="post", color="#2f5d9b", lw=1.2)
    ax.scatter(x[front], y[front], s=28, color="#2f5d9b", zorder=3,
               label=f"the Pareto front ({len(front)})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    if path is not None:
        files.write_figure(fig, path, dpi=150, bbox_inches="tight")
    return fig


def validation_errors(rows, *, band: float = 0.1, title: str = "", path=None):
    """The model's error on each published figure, one dot per row at
    (predicted / published - 1) in %, the rows grouped by chip family (a
    labelled block each, its rows by error) with a band of +-`band` around 0
    (`rows`: `validate.run`'s dicts: name, family, measure, error, calibration;
    a colour per measure, calibration rows hollow). Rows without a prediction
    (NaN: refused) are left out. Predicted against published on log axes spans
    eight decades, where no error shows: this draws the errors themselves."""
    import numpy as np

    rows = [r for r in rows if np.isfinite(r["error"])]
    families = sorted({r["family"] for r in rows})
    measures = sorted({r["measure"] for r in rows})
    colors = matplotlib.colormaps["tab10"].colors
    color = {m: colors[i % len(colors)] for i, m in enumerate(measures)}
    ordered, blocks = [], []  # (family, first row, last row) of each block
    for family in families:
        mine = sorted((r for r in rows if r["family"] == family), key=lambda r: r["error"])
        blocks.append((family, len(ordered), len(ordered) + len(mine) - 1))
        ordered += mine
    fig, ax = _pyplot().subplots(figsize=(11, 0.16 * len(ordered) + 2.2))
    ax.axvspan(-band * 100, band * 100, color="#b9cde5", zorder=0)
    ax.axvline(0, color="k", lw=0.8)
    for y, r in enumerate(ordered):
        c = color[r["measure"]]
        ax.plot([r["error"] * 100], [y], "o", ms=4, color=c, mfc="none" if r["calibration"] else c)
    for i, (family, first, last) in enumerate(blocks):
        if i % 2:
            ax.axhspan(first - 0.5, last + 0.5, color="0.94", zorder=-1)
        ax.text(1.01, (first + last) / 2, f"{family} ({last - first + 1})", va="center",
                transform=ax.get_yaxis_transform(), fontsize=8)
    ax.set_yticks(range(len(ordered)))
    ax.set_yticklabels([r["name"] for r in ordered], fontsize=5)
    ax.set_ylim(len(ordered) - 0.5, -0.5)
    reach = max([abs(r["error"]) * 100 for r in ordered] + [band * 150])
    ax.set_xlim(-reach * 1.05, reach * 1.05)
    ax.set_xlabel("error: predicted / published - 1 (%)")
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=color[m], label=m) for m in measures]
    handles += [Line2D([], [], ls="", marker="o", mfc="none", color="0.3",
                       label="calibration row (fits a constant)"),
                Line2D([], [], color="#b9cde5", lw=6, label=f"+-{band:.0%}")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.17, 1.0))
    ax.set_title(title or f"error per row, {len(ordered)} rows")
    fig.tight_layout()
    return _save(fig, path)


def calibration_busbw(tiers: dict, *, title: str = "", path=None):
    """nccl-tests' bus bandwidth against message size, one panel per tier:
    `tiers` maps a tier to its runs, label -> (sizes_bytes, measured busbw,
    fitted model's busbw, held_out) over the run's sizes (B/s; held_out bools).
    Measured sizes are dots (held-out ones hollow), the fitted alpha-beta(-gamma)
    model a line through its value at each size, one colour per run."""
    import numpy as np

    fig, axes = _pyplot().subplots(1, len(tiers), figsize=(6.5 * len(tiers), 4.5),
                                   squeeze=False)
    colors = matplotlib.colormaps["tab10"].colors
    for ax, (tier, runs) in zip(axes.flat, tiers.items(), strict=True):
        for i, (label, (sizes, measured, model, held_out)) in enumerate(runs.items()):
            order = np.argsort(sizes)
            sizes, measured, model, held = (np.asarray(a)[order] for a in
                                            (sizes, measured, model, held_out))
            c = colors[i % len(colors)]
            ax.semilogx(sizes, model / 1e9, "-", lw=1.5, color=c, label=f"{label}: model")
            ax.plot(sizes[~held], measured[~held] / 1e9, "o", ms=5, color=c)
            ax.plot(sizes[held], measured[held] / 1e9, "o", ms=7, mfc="none", color=c)
        ax.plot([], [], "o", ms=5, color="0.3", label="measured (fitted)")
        ax.plot([], [], "o", ms=7, mfc="none", color="0.3", label="measured (held out)")
        _finish(fig, ax, "message size (bytes)", "bus bandwidth (GB/s)", tier, fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


# the timeline's colours: a pass kind on the compute track (`timeline._PASS`), then
# communication (exposed solid, hidden hatched), the optimizer, idle, an aggregate
TIMELINE_COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "input gradient": "#dd8452",
                   "weight gradient": "#55a868", "communication": "#c44e52",
                   "optimizer": "#8172b3", "idle": "0.82", "aggregated": "#937860"}
TIMELINE_EDGE_MICRO_BATCHES = 8  # the figure draws the first and last 8 micro-batches of a
TIMELINE_MICRO_BATCHES = 24  # stage of more than 24 in full, the steady state between as one


def _timeline_window(events: list) -> tuple[float, float, int] | None:
    """(start, end, passes) of one stage's steady state the figure draws as one
    block: the compute events of its micro-batches but the first and last
    TIMELINE_EDGE_MICRO_BATCHES (and any the trace aggregated), where the stage
    has more than TIMELINE_MICRO_BATCHES; None where it has fewer."""
    passes = [e for e in events if e["cat"] == "compute" and "bubble" not in e["name"]]
    batches = sorted({e["args"]["micro_batch"] for e in passes if "micro_batch" in e["args"]})
    aggregated = [e for e in passes if e["args"].get("pass") == "aggregated"]
    if len(batches) <= TIMELINE_MICRO_BATCHES and not aggregated:
        return None
    edge = TIMELINE_EDGE_MICRO_BATCHES
    middle = set(batches[edge:len(batches) - edge]) if len(batches) > 2 * edge else set()
    inside = [e for e in passes if e["args"].get("micro_batch") in middle] + aggregated
    if not inside:
        return None
    start = min(e["ts"] for e in inside)
    end = max(e["ts"] + e["dur"] for e in inside)
    count = sum(sum(e["args"].get("passes", {}).values()) or 1 for e in passes
                if start <= e["ts"] < end)
    return start, end, count


def _timeline_style(e: dict) -> str:
    """An event's class in the figure's legend (`TIMELINE_COLORS`)."""
    if "bubble" in e["name"]:
        return "idle"
    if e["cat"] == "compute":
        return e["args"].get("pass", "forward")
    return "optimizer" if e["cat"] == "optimizer" else "communication"


def timeline(trace: dict, *, title: str = "", path=None, dpi: int = 150):
    """The trace of `timeline.trace` as a Gantt chart: a row per (pipeline stage,
    track), a bar per event, coloured by what it is (forward, backward, the
    weight gradients ZB-H1 defers, communication exposed solid and hidden
    hatched, the optimizer, the bubble grey; a legend says which), time in
    seconds. A stage of more than TIMELINE_MICRO_BATCHES micro-batches (or one
    the trace aggregated) is drawn with its first and last
    TIMELINE_EDGE_MICRO_BATCHES in full and its steady state as one labelled
    block per track, which a bar per pass would turn into a barcode."""
    from matplotlib.patches import Patch

    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
              if e["name"] == "thread_name"}
    used = sorted({(e["pid"], e["tid"]) for e in events})
    row = {key: i for i, key in enumerate(used)}
    fig, ax = _pyplot().subplots(figsize=(12, 0.32 * len(used) + 2.0))
    windows = {pid: _timeline_window([e for e in events if e["pid"] == pid]) for pid in names}
    bars: dict = {}  # (row, style, hidden) -> [(start, width)]: one collection each
    blocks: dict = {}  # row -> (start, end) of its aggregated block
    for e in events:
        window, y = windows.get(e["pid"]), row[(e["pid"], e["tid"])]
        if window is not None and window[0] <= e["ts"] < window[1]:
            lo, hi = blocks.get(y, (window[0], window[1]))
            blocks[y] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
            continue
        key = (y, _timeline_style(e), e.get("args", {}).get("exposed") is False)
        bars.setdefault(key, []).append((e["ts"] / 1e6, e["dur"] / 1e6))
    for (y, style, hidden), spans in bars.items():
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=TIMELINE_COLORS[style],
                       alpha=0.35 if hidden else 1.0, hatch="//" if hidden else None,
                       edgecolors="white" if not hidden else "face", linewidth=0.2)
    for y, (lo, hi) in blocks.items():
        ax.broken_barh([(lo / 1e6, (hi - lo) / 1e6)], (y - 0.4, 0.8),
                       facecolors=TIMELINE_COLORS["aggregated"], alpha=0.45, hatch="..",
                       edgecolors="face", linewidth=0.2)
        pid, tid = used[y]
        if tracks[(pid, tid)] == "compute":
            ax.text((lo + hi) / 2e6, y, f"steady state: {windows[pid][2]:,} passes",
                    ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(used)))
    ax.set_yticklabels([f"{names[p].replace('pipeline ', '')}: {tracks[(p, t)]}"
                        for p, t in used], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time in the step (s)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title or f"step {trace['otherData']['step_time_s']:.3g} s")
    shown = {_timeline_style(e) for e in events} | ({"aggregated"} if blocks else set())
    words = {"forward": "forward", "backward": "backward", "input gradient":
             "backward (input gradient)", "weight gradient": "weight gradient (W, deferred)",
             "communication": "communication (exposed)", "optimizer": "optimizer",
             "idle": "idle (pipeline bubble)", "aggregated": "steady state, aggregated"}
    handles = [Patch(facecolor=TIMELINE_COLORS[k], label=words[k]) for k in words
               if k in shown and not (k == "input gradient" and "backward" in shown)]
    if any(e.get("args", {}).get("exposed") is False for e in events):
        handles.append(Patch(facecolor=TIMELINE_COLORS["communication"], alpha=0.35, hatch="//",
                             label="communication (hidden under compute)"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.2 * -(-len(handles) // 4) / fig.get_figheight(), 1, 1))
    if path is not None:
        files.write_figure(fig, path, dpi=dpi, bbox_inches="tight")
    return fig
