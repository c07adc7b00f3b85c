"""Matplotlib figures used by the CLI, the sweeps and the notebooks.

Every function takes plain arrays / result objects and a path or an Axes, and
returns the Figure; nothing here computes a cost.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402,F401
