"""Error bars of an estimate, from the spread of `codesign validate`'s errors.

Every prediction row of `validate` (a published figure the model did not
calibrate on) becomes a *step-time ratio* r = true / predicted step time: a
rate measure (tokens/s, TFLOP/s, MFU) with error e = predicted / published - 1
says the true step time is the predicted one x (1 + e); a time measure
(seconds per step, GPU-hours) says it is the predicted one / (1 + e). The
`QUANTILE` and 1 - `QUANTILE` percentiles of r over a chip family's rows
(linear interpolation, numpy's default) scale an estimate into its interval;
a family with fewer than `MIN_ROWS` rows (or none: H200, B200, TPUs) takes
all the rows of every family.

Running `validate` takes ~15 s, so its table is stored in the package
(`TABLE`, written by `validate.uncertainty` through the maintainer's
`codesign validate --write-uncertainty`; a test regenerates it and fails when
it is stale). What it does not cover: errors in configurations unlike the
published runs (other scales, chips, schedules), the user's own constants
(a calibrated system file is scaled by the preset family's spread), and
failures (the expected step and time to train are scaled by the same ratio).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import NamedTuple

QUANTILE = 0.16  # the lower end's percentile; the upper is 1 - QUANTILE (a 68% interval)
MIN_ROWS = 5  # a chip family with fewer prediction rows takes every family's rows
TABLE = Path(__file__).with_name("uncertainty.json")


class Interval(NamedTuple):
    """An estimate's interval: `lo` and `hi` (the value's unit), the lower
    end's `quantile` (the upper is 1 - quantile), the scenario's chip `family`,
    and the `rows` of validate it comes from: those of `rows_family`, or every
    family's when that is "all" (`family` has fewer than `MIN_ROWS`: then
    `family_rows` says how many it has)."""

    lo: float
    hi: float
    quantile: float
    family: str
    rows: int
    rows_family: str
    family_rows: int

    @property
    def coverage(self) -> float:
        """The share of validate's rows between the ends (0.68)."""
        return 1.0 - 2.0 * self.quantile


@functools.cache
def table(path: Path = TABLE) -> dict:
    """The stored table: {quantile, min_rows, all, families}, each entry
    {rows, ratio_lo, ratio_hi} (see `validate.uncertainty`)."""
    return json.loads(Path(path).read_text())


def ratio_interval(family: str, tab: dict | None = None) -> Interval:
    """The interval of the step-time ratio (true / predicted) of chip `family`."""
    tab = table() if tab is None else tab
    own = tab["families"].get(family)
    family_rows = own["rows"] if own else 0
    entry, source = (own, family) if family_rows >= tab["min_rows"] else (tab["all"], "all")
    return Interval(entry["ratio_lo"], entry["ratio_hi"], tab["quantile"], family,
                    entry["rows"], source, family_rows)


def interval(family: str, value_s: float, tab: dict | None = None) -> Interval:
    """The interval of an estimated time `value_s` (a step time, a time to
    train) on chip `family` (`hardware.chip_family`)."""
    r = ratio_interval(family, tab)
    value_s = float(value_s)
    return r._replace(lo=value_s * r.lo, hi=value_s * r.hi)
