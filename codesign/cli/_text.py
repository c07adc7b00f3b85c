"""English for the commands: elasticities as sentences, in the words of
`codesign._words` (the one vocabulary of key names)."""

from __future__ import annotations

from .._words import words


def describe_elasticity(knob: str, e: float, output: str = "step time", pct: float = 10.0,
                        value: float | None = None) -> str:
    """'+10% scale-out bandwidth per accelerator gives -1.9% step time'
    (constant elasticity: (1 + p)^e - 1)."""
    if value == 0:
        return f"{words(knob)} is 0 (unset): no local effect"
    change = ((1 + pct / 100) ** e - 1) * 100
    return f"+{pct:g}% {words(knob)} gives {change:+.2f}% {output}"
