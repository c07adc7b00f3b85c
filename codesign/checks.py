"""Field declarations and the input checks that name the field and its value.

Every input field of a Module is declared once, on its dataclass field
(`float_field`, `static_field`, `strategy_field`): its scenario key, domain
(`domains.Domain`) or choices, unit and default live in the field's metadata
(`declaration`).
Every construction checks the field's concrete value against them (the
field's converter), and `scenario` derives its schema, knobs, domains, loader
and traced check from them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .domains import Domain, fmt

# The messages codesign's own traced checks raise with (`error_if`,
# `branched_error_if`). Under jax.jit, equinox raises them inside a
# pure_callback, and JAX logs every exception a callback raises, traceback and
# all, to stderr before the caller gets it: a record of one of ours is dropped
# (the error itself still reaches the caller), every other record passes.
_OWN_MESSAGES: set[str] = set()


class _OwnTracedErrors(logging.Filter):
    """Drops JAX's log record of a callback exception that is one of codesign's
    traced checks (its message's first line is one of `_OWN_MESSAGES`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or str(error).split("\n", 1)[0] not in _OWN_MESSAGES


logging.getLogger("jax._src.callback").addFilter(_OwnTracedErrors())


def error_if(x, pred, message: str):
    """`equinox.error_if` for one of codesign's own checks (see `_OWN_MESSAGES`);
    evaluated on the host when `pred` is concrete (`branched_error_if`)."""
    return branched_error_if(x, pred, 0, (message,))


def branched_error_if(x, pred, index, messages):
    """`equinox.branched_error_if` for codesign's own checks (see `_OWN_MESSAGES`).
    Outside a trace (`pred` and `index` concrete: eager evaluation) the check
    runs on the host and raises the same `equinox.EquinoxRuntimeError` naming
    `messages[index]`, instead of compiling a program per call as equinox does
    eagerly (three per eager estimate, half of `codesign validate`'s compiles)."""
    _OWN_MESSAGES.update(messages)
    fired, which = concrete(pred), concrete(index)
    if fired is None or which is None:
        return eqx.branched_error_if(x, pred, index, messages)
    if np.any(fired):
        raise eqx.EquinoxRuntimeError(f"{_TRACED_PREFIX}{messages[int(which)]}")
    return x


# what equinox's message holds before a traced check's own line under jit, written
# the same eagerly (`branched_error_if`), so that `cli._TRACED` reads both alike
_TRACED_PREFIX = "equinox.EquinoxRuntimeError: "


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


def one_of(name: str, value, options) -> None:
    if value not in options:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(str, options))}")


def as_float(value) -> jax.Array:
    """A float leaf: knobs are floats so they are differentiable (exact at integers)."""
    return jnp.asarray(value, dtype=float)


# ------------------------------------------------------------- declarations
_UNITS = (("_Bps", "B/s"), ("_bytes", "bytes"), ("_s", "s"))  # what a key's name says


@dataclasses.dataclass(frozen=True)
class Declaration:
    """One input field: what errors call it and, when `scenario`, its scenario
    key (a `Tier`'s keys are relative: `System` prefixes them); its domain
    (float fields) or choices; its type in a scenario table; its unit."""

    key: str
    kind: type  # float, or the static field's type in a TOML table (bool, int, str)
    domain: Domain | None = None
    choices: tuple | None = None
    unit: str = ""
    scenario: bool = True  # False: checked, but not a scenario key (a chip's peaks)
    # a strategy field's classes (`strategies`): their own declared fields are keys too
    variants: tuple = ()


def declaration(field: dataclasses.Field) -> Declaration | None:
    """The declaration of a dataclass field (None: the field declares nothing)."""
    return field.metadata.get("declaration")


def _checked(decl: Declaration, convert, value):
    """`convert(value)`, checked against `decl`: a concrete float outside its
    domain, or a static value outside its choices, is a one-line `ValueError`
    naming the key and the value (traced values are skipped)."""
    value = convert(value)
    if decl.domain is not None:
        v = concrete(value)
        if v is not None and not np.all(decl.domain.ok(v)):
            raise ValueError(f"{decl.key}={fmt(v)} must be {decl.domain.describe()}")
    elif decl.choices is not None:
        one_of(decl.key, value, decl.choices)
    return value


def float_field(key: str | None = None, domain: Domain | None = None, *,
                unit: str | None = None, scenario: bool = True, **kwargs):
    """A dataclass field of an `eqx.Module` stored as a float leaf (`as_float`):
    what every knob of a hardware, plan, reliability or price module is. With
    `key` it is declared: its scenario key (or, with `scenario=False`, the name
    its errors use), its domain and unit (default: what the key's name says,
    `*_s`, `*_bytes`, `*_Bps`), and every construction checks a concrete value
    against the domain; `kwargs` go to `eqx.field` (default, kw_only)."""
    if key is None:
        return eqx.field(converter=as_float, **kwargs)
    if unit is None:
        unit = next((u for suffix, u in _UNITS if key.endswith(suffix)), "")
    decl = Declaration(key, float, domain=domain, unit=unit, scenario=scenario)
    return eqx.field(converter=functools.partial(_checked, decl, as_float),
                     metadata={"declaration": decl}, **kwargs)


def static_field(key: str, kind: type, *, choices: tuple | None = None,
                 converter=lambda value: value, **kwargs):
    """A static (structural) field declared with its scenario key, its type in a
    scenario table and the values it may take (checked on every construction,
    after `converter`); `kwargs` go to `eqx.field`."""
    decl = Declaration(key, kind, choices=None if choices is None else tuple(choices))
    return eqx.field(static=True, converter=functools.partial(_checked, decl, converter),
                     metadata={"declaration": decl}, **kwargs)


def strategy_field(key: str, parse, variants: tuple, **kwargs):
    """A strategy field (`strategies`): a pytree of one of the classes
    `variants`, or what `parse(value, key=key)` makes of a name (it raises the
    one-line error naming the key and the choices). Declared with its scenario
    key, a name in a scenario table (choices: the classes' names, of their type:
    a ZeRO stage's is its number); each class's own declared fields are
    scenario keys too (a Clos's system.pod_size). `kwargs` go to `eqx.field`."""
    names = tuple(c.name for c in variants)
    decl = Declaration(key, type(names[0]), choices=names, variants=tuple(variants))
    return eqx.field(converter=functools.partial(parse, key=key),
                     metadata={"declaration": decl}, **kwargs)
