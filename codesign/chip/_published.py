"""The model beside the published parts: die area, cost to make and board power
at full load of H100 SXM5, B200 and MI300X against their vendors' and the
analysts' figures (`_constants.PUBLISHED`). docs/chip.md's table is
`checks_markdown()`'s text; tests/test_chip_model.py holds the two equal."""

from __future__ import annotations

import dataclasses

from . import _constants as k
from . import _model
from ._design import published_design


@dataclasses.dataclass(frozen=True)
class Check:
    part: str
    what: str  # "area", "cost", "power"
    model: float
    published: float
    band: float  # the relative error allowed

    @property
    def error(self) -> float:
        return self.model / self.published - 1.0

    @property
    def within(self) -> bool:
        return abs(self.error) <= self.band


def checks() -> list[Check]:
    """One row per part and figure: the model's value, the published one, the band."""
    rows = []
    for p in k.PUBLISHED:
        d = published_design(p.name)
        rows += [Check(p.name, "area", float(_model.area_mm2(d)), p.area_mm2, k.AREA_BAND),
                 Check(p.name, "cost", float(_model.cost_usd(d)), p.cost_usd, k.COST_BAND),
                 Check(p.name, "power", float(_model.board_power_w(d)), p.board_power_w,
                       k.POWER_BAND)]
    return rows


_UNITS = {"area": ("logic silicon", "mm²", "{:,.0f}"), "cost": ("cost to make", "$", "{:,.0f}"),
          "power": ("board power, full load", "W", "{:,.0f}")}


def checks_markdown() -> str:
    """The table of `checks()` as docs/chip.md shows it."""
    lines = ["| part | figure | model | published | error | band |", "|---|---|---|---|---|---|"]
    for c in checks():
        label, unit, form = _UNITS[c.what]
        lines.append(f"| {c.part} | {label} ({unit}) | {form.format(c.model)} | "
                     f"{form.format(c.published)} | {c.error:+.1%} | ±{c.band:.0%} |")
    return "\n".join(lines)
