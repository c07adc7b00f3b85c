"""Matplotlib figures used by the CLI, the sweeps and the notebooks.

Every function takes plain arrays / result objects and a path or an Axes, and
returns the Figure; nothing here computes a cost.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402,F401


def collective_times(sizes_bytes, times_s: dict, crossovers: dict, *, auto_s=None,
                     title: str = "", path=None, ax=None):
    """Time against size (log-log), one line per algorithm of a collective.

    `times_s` maps algorithm -> times over `sizes_bytes`; `crossovers` maps
    algorithm -> (bytes, seconds) where its latency term equals its bandwidth
    (+ reduction) term: left of the dot it is latency-bound, right of it
    bandwidth-bound. `auto_s` (optional) is the `auto` choice, drawn dashed.
    """
    fig = ax.figure if ax is not None else plt.figure(figsize=(7.5, 5))
    ax = ax if ax is not None else fig.add_subplot()
    for name, t in times_s.items():
        (line,) = ax.loglog(sizes_bytes, t, label=name, lw=1.5)
        if name in crossovers:
            n_star, t_star = crossovers[name]
            ax.plot([n_star], [t_star], "o", color=line.get_color(), ms=6)
    if auto_s is not None:
        ax.loglog(sizes_bytes, auto_s, "k--", lw=2.5, alpha=0.6, label="auto (soft min)")
    ax.plot([], [], "o", color="gray", label="latency term = bandwidth term")
    ax.set_xlabel("message size n (bytes)")
    ax.set_ylabel("time (s)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig
