"""SI constants and parsers for sizes, bandwidths and times.

GB = 1e9 bytes and GiB = 2**30 bytes; the two are never mixed. Bandwidths are
bytes per second in one direction unless a name says otherwise.
"""

from __future__ import annotations

import math
import re

from .domains import MAX_MESSAGE_BYTES

TOO_LARGE = "a message must be at most 2^70 bytes (1024EiB), the largest the cost model takes"

B = 1.0
KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
PB, EB = 1e15, 1e18
KiB, MiB, GiB, TiB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
PiB, EiB = 2.0**50, 2.0**60
Gbps = 1e9 / 8  # one gigabit per second, in bytes per second
ns, us, ms, s = 1e-9, 1e-6, 1e-3, 1.0
minute, hour, day = 60.0, 3600.0, 86400.0
year = 365.25 * day  # a Julian year

_BYTE_UNITS = {  # up to exa: a number alone (1e30) is any size already
    "B": B, "KB": KB, "MB": MB, "GB": GB, "TB": TB, "PB": PB, "EB": EB,
    "KIB": KiB, "MIB": MiB, "GIB": GiB, "TIB": TiB, "PIB": PiB, "EIB": EiB,
    "K": KiB, "M": MiB, "G": GiB, "T": TiB, "P": PiB, "E": EiB,
}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def parse_bytes(text: str | float | int, *, name: str = "size") -> float:
    """`"64KiB"` -> 65536.0, `"1GB"` -> 1e9, `"8B"` -> 8.0; plain numbers are bytes."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"([-+]?)" + _NUMBER + r"\s*([A-Za-z]*)", str(text).strip())
        unit = m.group(3).upper() if m else None
        if m is None or (unit and unit not in _BYTE_UNITS):
            raise ValueError(
                f"{name}={text!r} is not a size; write e.g. 8B, 64KiB, 1GiB or 1GB"
            )
        value = float(m.group(1) + m.group(2)) * _BYTE_UNITS[unit or "B"]
    if not value >= 0:
        raise ValueError(f"{name}={text!r} must be a non-negative number of bytes")
    return value


def parse_bandwidth(text: str | float | int, *, name: str = "bandwidth") -> float:
    """`"50GB/s"` -> 5e10 bytes/s, `"400Gb/s"` -> 5e10; plain numbers are bytes/s."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(_NUMBER + r"\s*([KMGTPE]?)(B|b)(?:ps|/s)", str(text).strip())
        if m is None:
            raise ValueError(
                f"{name}={text!r} is not a bandwidth; write e.g. 50GB/s or 400Gb/s"
            )
        scale = {"": 1.0, "K": KB, "M": MB, "G": GB, "T": TB, "P": PB, "E": EB}[m.group(2)]
        value = float(m.group(1)) * scale / (8.0 if m.group(3) == "b" else 1.0)
    if not value > 0:
        raise ValueError(f"{name}={text!r} must be a positive bandwidth")
    return value


def parse_size_range(text: str, *, name: str = "sizes") -> list[float]:
    """`"4KiB:64MiB"` -> every power of two from 4 KiB to 64 MiB inclusive."""
    parts = str(text).split(":")
    if len(parts) != 2:
        raise ValueError(f"{name}={text!r} must be MIN:MAX, e.g. 4KiB:64MiB")
    lo, hi = (parse_bytes(p, name=name) for p in parts)
    if lo < 1 or hi < lo:
        raise ValueError(f"{name}={text!r} needs 1 <= MIN <= MAX")
    if not hi <= MAX_MESSAGE_BYTES:  # inf included: the doubling would never end
        raise ValueError(f"{name}={text!r}: {TOO_LARGE}")
    sizes, size = [], lo
    while size <= hi * (1 + 1e-12):
        sizes.append(size)
        size *= 2
    return sizes


def format_bytes(n: float) -> str:
    """Binary-prefixed human form: 65536 -> '64KiB'."""
    for unit, scale in (("EiB", EiB), ("PiB", PiB), ("TiB", TiB), ("GiB", GiB), ("MiB", MiB),
                        ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.4g}B"


# ------------------------------------------------- by the unit a name says
def parse_quantity(name: str, value, *, field: str | None = None) -> float:
    """A float for the key `name` (`*_bytes`, `*_Bps` or plain); strings follow
    the unit the name says ("64KiB", "50GB/s", "1e-6"). `field` names the value
    in the error (default `name`)."""
    field = name if field is None else field
    if isinstance(value, bool):
        raise ValueError(f"{field}={value!r} must be a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        if name.endswith("_bytes"):
            return parse_bytes(value, name=field)
        if name.endswith("_Bps"):
            return parse_bandwidth(value, name=field)
    raise ValueError(f"{field}={value!r} must be a number")


def unit_of(name: str) -> tuple[float, str]:
    """(divisor, unit) a key's numbers are shown in by its name; unit "" = none.

    Bandwidths in GB/s, memory in GB (decimal, like the chips' datasheets),
    other byte counts "bytes" (binary prefixes), times in seconds (time to
    train in days), money in USD, power in W.
    """
    if name.endswith("_Bps"):
        return GB, "GB/s"
    if name.startswith("time_to_train") and name.endswith("_s"):
        return day, "days"
    if "memory" in name and "_bytes" in name:
        return GB, "GB"
    if name.endswith("_bytes") or "_bytes_per_" in name:
        return 1.0, "bytes"
    if name.endswith("_s") and not name.endswith("_per_s"):
        return 1.0, "s"
    if name.endswith("_usd"):
        return 1.0, "USD"
    if name.endswith("_w"):
        return 1.0, "W"
    return 1.0, ""


def format_quantity(name: str, value, digits: int = 4) -> str:
    """A value of the key `name` for people, in the unit `unit_of` gives: bytes
    binary-prefixed, memory and bandwidth in decimal GB, times in s/ms/us (hours
    or days beside them past two minutes), integers without a decimal point."""
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    scale, unit = unit_of(name)
    if unit == "bytes":
        return format_bytes(value)
    if unit in ("s", "days") and value != 0:
        return format_seconds(value)
    if unit in ("GB", "GB/s"):
        return f"{value / scale:.{digits}g} {unit}"
    if value.is_integer() and abs(value) < 1e12:
        return f"{int(value)}"
    return f"{value:.{digits}g}"


def format_seconds(value: float) -> str:
    """Seconds, the unit a `*_s` name says (SI prefixes below 1 s), with the
    hours or days beside them past two minutes: '11,120 s (3.089 h)', '2.044 ms'."""
    if abs(value) >= 1.0:
        text = f"{value:,.0f} s" if abs(value) >= 1e4 else f"{value:.4g} s"
        for unit, scale in (("d", day), ("h", hour), ("min", minute)):
            if abs(value) >= 2 * scale if unit == "min" else abs(value) >= scale:
                return f"{text} ({value / scale:.4g} {unit})"
        return text
    for unit, scale in (("ms", ms), ("us", us), ("ns", ns)):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.4g} s"
