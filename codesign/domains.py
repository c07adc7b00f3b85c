"""Domains of numeric inputs: the vocabulary each field declaration uses.

A domain is an interval [lo, hi] (lo excluded when `lo_open`), optionally
integers only. Bounds are physical or generous practical limits (10 million
GPUs, 1 PB/s links, 1 s latencies): a value outside is a typo or a unit slip,
and inside them every output of the model stays a finite float64. Each field
of an input Module names its domain in its declaration (`checks.float_field`);
`scenario.DOMAINS` collects those of the scenario keys.

Concrete values are checked with `check_in` (a `ValueError` naming the key,
the value and the domain); traced values (inside jit/vmap/grad) against
`traced_bounds`, which relax counts (integrality ignored; a count of at least
1 need only be positive, as the optimiser and finite differences use it) and
allow `TRACED_SLACK` beyond a nonzero bound.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

MAX_GPUS = 1e7  # any count of GPUs or ranks
MAX_WIDTH = 1e8  # hidden sizes, sequence lengths, vocabularies
MIN_BPS, MAX_BPS = 1e3, 1e15  # 1 KB/s .. 1 PB/s per direction
MAX_LATENCY_S = 1.0
# one collective's message: 2^70 bytes (1024 EiB), beyond any step's traffic, where every
# cost term stays finite (past ~1e307 bytes they overflow to inf and NaN)
MAX_MESSAGE_BYTES = 2.0**70


# relative slack of the traced checks at the bounds, so that finite differences
# (and relaxed optimiser steps) at a value on a bound do not trip them
TRACED_SLACK = 1e-3


@dataclasses.dataclass(frozen=True)
class Domain:
    lo: float
    hi: float
    lo_open: bool = False
    integer: bool = False

    def ok(self, v) -> np.ndarray:
        """Elementwise membership of a NumPy value (NaN and inf are outside;
        a subnormal value counts as 0, as the traced check sees it)."""
        v = flushed(v)
        with np.errstate(invalid="ignore"):
            inside = (v > self.lo) if self.lo_open else (v >= self.lo)
            inside = inside & (v <= self.hi) & np.isfinite(v)
            if self.integer:
                inside = inside & (v == np.round(v))
        return inside

    def traced(self) -> tuple[float, float, bool]:
        """(lo, hi, lo_open) of the traced check: counts relaxed (integrality
        ignored, a count of at least 1 need only be positive), `TRACED_SLACK`
        beyond the bounds."""
        if self.integer and self.lo >= 1:
            return 0.0, self.hi * (1 + TRACED_SLACK), True
        return self.lo * (1 - TRACED_SLACK), self.hi * (1 + TRACED_SLACK), self.lo_open

    def ok_traced(self, v) -> np.ndarray:
        """Membership of a value under the traced check's relaxation (`traced`), as
        XLA on CPU compares it: subnormal values flushed to zero."""
        lo, hi, lo_open = self.traced()
        v = flushed(v)
        with np.errstate(invalid="ignore"):
            return ((v > lo) if lo_open else (v >= lo)) & (v <= hi)

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if math.isinf(self.hi):
            return f"{kind} {'>' if self.lo_open else '>='} {_g(self.lo)}"
        return f"{kind} in {'(' if self.lo_open else '['}{_g(self.lo)}, {_g(self.hi)}]"

    def clip(self, lo: float, hi: float) -> tuple[float, float]:
        """[lo, hi] intersected with the domain (for default optimiser ranges)."""
        return max(lo, self.lo), min(hi, self.hi)


def flushed(v) -> np.ndarray:
    """`v` as a float array with subnormal values flushed to zero, as XLA on CPU
    compares them: the concrete and the traced checks then agree on a value
    like 1e-310 (it counts as 0)."""
    v = np.asarray(v, dtype=float)
    return np.where(np.abs(v) < np.finfo(v.dtype).tiny, 0.0, v)


def _g(x: float) -> str:
    """1e7 as "1e7", 1000 as "1000", 0.5 as "0.5"."""
    if abs(x) >= 1e4 and math.log10(abs(x)) == round(math.log10(abs(x))):
        text = f"{x:.0e}"
    else:
        text = f"{x:g}" if x != math.floor(x) or abs(x) >= 1e6 else f"{int(x)}"
    return text.replace("e+0", "e").replace("e+", "e")


def count(hi: float, lo: float = 1.0) -> Domain:
    return Domain(lo, hi, integer=True)


def interval(lo: float, hi: float) -> Domain:
    return Domain(lo, hi)


UNIT = Domain(0.0, 1.0)  # a fraction or probability
EFFICIENCY = Domain(0.0, 1.0, lo_open=True)  # achieved over peak
BANDWIDTH = Domain(MIN_BPS, MAX_BPS)
LATENCY = Domain(0.0, MAX_LATENCY_S)
DURATION = Domain(0.0, 1e9)  # seconds: up to ~30 years
POSITIVE = Domain(0.0, math.inf, lo_open=True)  # a vendor figure (peaks, capacities, power)


def _number(x) -> str:
    """One number as short as it reads back exactly: `:g` (8, 1e7, 0.5) where
    that round-trips, else Python's shortest round-trip form (1.0000001, not 1)."""
    text = f"{x:g}"
    try:
        exact = float(text) == x or not math.isfinite(x)
    except (TypeError, ValueError, OverflowError):
        return str(x)
    return text if exact else repr(float(x))


# a value echoed in a message is shown whole up to this many characters (a long
# path fits), else its first _SHOWN_HEAD and its length
MAX_SHOWN_CHARS = 200
_SHOWN_HEAD = 40
_LONG_WORD = re.compile(rf"[^\s='\"]{{{MAX_SHOWN_CHARS + 1},}}")  # not quotes, =


def shown(text: str) -> str:
    """`text` (a value a message echoes), whole if short, else its first 40
    characters and its length: a 100,000-character value is not echoed whole."""
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_HEAD]}... ({len(text):,} characters)"


def shown_words(message: str) -> str:
    """`message` with every run of more than `MAX_SHOWN_CHARS` characters
    without blanks, quotes or "=" (a value it echoes) `shown`: what the command
    prints."""
    return _LONG_WORD.sub(lambda m: shown(m.group(0)), message)


def fmt(v) -> str:
    """A value for a message: a number at full precision (`_number`), an array by
    NumPy, a subnormal one flagged; long text elided (`shown`)."""
    v = np.asarray(v)
    text = _number(v.item()) if v.size == 1 else shown(np.array2string(v))
    subnormal = (v != 0) & (flushed(v) == 0) if v.dtype.kind == "f" else False
    return text + (" (a subnormal number, which counts as 0)" if np.any(subnormal) else "")


def check_in(name: str, value, domain: Domain) -> None:
    """Raise `ValueError("{name}={value} must be {domain}")` when `value` is outside."""
    v = np.asarray(value, dtype=float)
    if not np.all(domain.ok(v)):
        raise ValueError(f"{name}={fmt(v)} must be {domain.describe()}")


def check_range(key: str, domain: Domain, lo: float, hi: float) -> None:
    """An optimiser range LO:HI of `key` must lie in its domain (integrality aside:
    that is the optimiser's)."""
    interval = dataclasses.replace(domain, integer=False)
    for v in (lo, hi):
        if not interval.ok(v):
            raise ValueError(f"bounds {key}={lo:g}:{hi:g}: {key} must be "
                             f"{domain.describe()}")


def traced_bounds(domains) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, lo_open) arrays of the traced checks of `domains` (a sequence)."""
    lo, hi, lo_open = zip(*(d.traced() for d in domains), strict=True)
    return np.asarray(lo), np.asarray(hi), np.asarray(lo_open)


def table_markdown(domains: dict, units: dict) -> str:
    """The table of domains in docs/inputs.md: one row per distinct domain and
    unit, its keys listed (`domains`: {key: Domain}, `units`: {key: unit})."""
    groups: dict[tuple, list[str]] = {}
    for key, domain in domains.items():
        groups.setdefault((domain.describe(), units[key]), []).append(key)
    rows = ["| domain | unit | keys |", "|---|---|---|"]
    rows += [f"| {d} | {u} | {', '.join(f'`{k}`' for k in keys)} |"
             for (d, u), keys in groups.items()]
    return "\n".join(rows)
