"""Checks of one value of a parsed TOML spec (a table, a list of names, an
integer, a boolean, the keys a table may hold); each error names the field
and the value, so a bad spec fails in one line before anything is compiled."""

from __future__ import annotations


def table(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{field}={value!r} must be a table")
    return value


def strings(value, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field}={value!r} must be a name or a list of names")
    return tuple(value)


def integer(value, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}={value!r} must be an integer >= {minimum}")
    return value


def boolean(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} must be true or false")
    return value


def only(raw: dict, allowed: tuple[str, ...], field: str) -> None:
    for key in raw:
        if key not in allowed:
            raise ValueError(f"{field}.{key} is not a known key; use {', '.join(allowed)}")
