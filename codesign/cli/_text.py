"""English for the commands: elasticities as sentences, in the words of
`codesign.words` (the one vocabulary of key names)."""

from __future__ import annotations

from ..words import words


def describe_elasticity(knob: str, e: float, output: str = "step time", pct: float = 10.0,
                        value: float | None = None) -> str:
    """'+10% scale-out bandwidth per accelerator gives -1.9% step time'
    (constant elasticity: (1 + p)^e - 1)."""
    if value == 0:
        return f"{words(knob)} is 0 (unset): no local effect"
    change = ((1 + pct / 100) ** e - 1) * 100
    return f"+{pct:g}% {words(knob)} gives {change:+.2f}% {output}"


def format_count(n) -> str:
    """A whole number as an integer with thousands separators (1,536, never
    1.536e+03); a fractional one (a relaxed knob) to 4 significant digits."""
    n = float(n)
    if n == round(n) and abs(n) < 1e18:
        return f"{n:,.0f}"
    return f"{n:,.4g}"


# (unit, seconds, where it starts): a duration in the largest unit of which it is
# at least one (days from one day, hours from one hour, minutes from one minute)
_DURATION_UNITS = (("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0))


def duration_unit(seconds: float) -> tuple[str, float]:
    """(unit, seconds per unit) of the largest unit `seconds` holds at least once
    (seconds below one)."""
    for unit, scale in _DURATION_UNITS:
        if abs(float(seconds)) >= scale:
            return unit, scale
    return "s", 1.0


def format_duration(seconds: float, unit_of: float | None = None) -> str:
    """`seconds` in the largest sensible unit, one decimal: "24.5 days", "5.3 h",
    "12.0 min", "42.1 s" (below 10 s three significant digits: "0.412 s"), never
    "0.0 days"; `unit_of` picks the unit of another duration (a range's upper end)."""
    unit, scale = duration_unit(seconds if unit_of is None else unit_of)
    v = float(seconds) / scale
    return f"{v:.3g} {unit}" if unit == "s" and abs(v) < 10 else f"{v:.1f} {unit}"


def format_duration_range(lo: float, hi: float) -> str:
    """"20.0-24.2 days": both ends in the upper end's unit."""
    return f"{format_duration(lo, hi).rsplit(' ', 1)[0]}-{format_duration(hi)}"


def describe_steps(knob: str, entry: dict, output: str = "step time") -> str:
    """An integer knob at its next admissible values (`optimize._sensitivity.
    integer_steps`): "TP width 8 -> 4 gives -7.55% step time (does not fit
    memory); 8 -> 16 gives +24.73% step time"; a way without one says so."""
    v = format_count(entry["value"])
    parts = []
    for way in ("down", "up"):
        end = entry[way]
        if "none" in end:
            parts.append(f"none {'below' if way == 'down' else 'above'}")
            continue
        fits = "" if end["fits_memory"] else " (does not fit memory)"
        parts.append(f"{v} -> {format_count(end['value'])} gives {end['change'] * 100:+.2f}% "
                     f"{output}{fits}")
    return f"{words(knob)} " + "; ".join(parts)
