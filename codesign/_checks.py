"""Input checks that name the field and its value (shared by every module)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def concrete(value) -> np.ndarray | None:
    """The value as a NumPy array, or None when it is traced: the checks of this
    module are then skipped, and `scenario.Scenario.checked` (called by
    `step.estimate`) raises through `equinox.error_if` instead."""
    if isinstance(value, jax.core.Tracer):
        return None
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, jax.errors.ConcretizationTypeError):
        return None


def fmt(value: np.ndarray) -> str:
    return f"{value.item():g}" if value.size == 1 else np.array2string(value)


def check(name: str, value, ok, requirement: str) -> None:
    """Raise `ValueError("{name}={value} {requirement}")` unless `ok(value)` holds."""
    v = concrete(value)
    if v is None:
        return
    if not np.all(np.isfinite(v)) or not np.all(ok(v)):
        raise ValueError(f"{name}={fmt(v)} {requirement}")


def positive(name: str, value) -> None:
    check(name, value, lambda v: v > 0, "must be positive")


def non_negative(name: str, value) -> None:
    check(name, value, lambda v: v >= 0, "must be non-negative")


def at_least_one(name: str, value) -> None:
    check(name, value, lambda v: v >= 1, "must be at least 1")


def fraction(name: str, value) -> None:
    check(name, value, lambda v: (v >= 0) & (v <= 1), "must lie in [0, 1]")


def known(what: str, name: str, names) -> None:
    """`name` is one of `names` (a preset, a target...), or a one-line error."""
    if name not in names:
        raise ValueError(f"{what} {name!r} is unknown; choose one of {', '.join(names)}")


def as_float(value) -> jax.Array:
    """A float leaf: knobs are floats so they are differentiable (exact at integers)."""
    return jnp.asarray(value, dtype=float)


def float_field(**kwargs):
    """A dataclass field of an `eqx.Module` stored as a float leaf (`as_float`):
    what every knob of a hardware, plan, reliability or price module is."""
    return eqx.field(converter=as_float, **kwargs)
