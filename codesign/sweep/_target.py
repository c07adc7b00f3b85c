"""The `Target` of a sweep, a NamedTuple of the names a knob may take and of
pure functions (optax's `GradientTransformation` pattern), and what every
target shares: the check of a spec's base and axes, the settings of each
combo of categories, and the replacement of float leaves by knob values."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .. import checks, units
from .. import domains as domains_module
from . import _fields as fields

PointFn = Callable[[dict], dict]  # float knob values (jnp scalars) -> outputs (jnp scalars)


class Target(NamedTuple):
    """A pure jnp function of knob values, configured by a spec's `base`.

    `float_knobs` and `categorical_knobs` are the names an axis may take;
    `outputs(base, directory)` what the point function returns;
    `check(base, axes, directory)` raises a ValueError naming the key;
    `build(settings, directory)` is the point function for `settings` (the base
    with one combo's categories); `fingerprint(base, directory)` is anything
    outside the spec the results depend on (e.g. a scenario file), or "".
    """

    name: str
    description: str
    float_knobs: tuple[str, ...]
    categorical_knobs: tuple[str, ...]
    outputs: Callable[[dict, Path], tuple[str, ...]]
    check: Callable[[dict, tuple, Path], None]
    build: Callable[[dict, Path], PointFn]
    fingerprint: Callable[[dict, Path], str]


def check_axes(target: str, base: dict, axes: tuple, floats: tuple[str, ...],
               categories: tuple[str, ...], base_keys: tuple[str, ...] | None = None) -> None:
    """`base` holds only `base_keys` (default: the knobs); every axis names a knob of
    its kind, and every key a bundle of categories sets is a categorical knob."""
    fields.only(base, floats + categories if base_keys is None else base_keys, "base")
    for k in axes:
        allowed = categories if k.kind == "categories" else floats
        for key in {key for bundle in k.bundles for key in bundle}:
            if key not in categories:
                raise ValueError(f"knobs.{k.name}.categories: {key!r} is not a categorical "
                                 f"knob of target {target!r}; choose from "
                                 f"{', '.join(categories)}")
        if k.name not in allowed and not k.bundles:
            what = "categorical" if k.kind == "categories" else "float"
            raise ValueError(f"knobs.{k.name} is not a {what} knob of target {target!r}; "
                             f"choose from {', '.join(allowed)}")


def combo_settings(base: dict, axes: tuple, combo: tuple) -> dict:
    """`base` with one combo of the categorical `axes` (a bundle sets all its keys)."""
    out = dict(base)
    for axis, value in zip(axes, combo, strict=True):
        if axis.bundles:
            out.update(axis.bundles[axis.values.index(value)])
        else:
            out[axis.name] = value
    return out


def all_settings(base: dict, axes: tuple):
    """The settings of every combo of the categorical axes among `axes`."""
    cats = tuple(k for k in axes if k.kind == "categories")
    for combo in itertools.product(*(k.values for k in cats)):
        yield combo_settings(base, cats, combo)


def make_check(target: str, floats, categories, each_combo=None, base_keys=None,
               domains=None):
    """The `check` of a target: `check_axes`, the float knobs against `domains`
    (`check_domains`), then `each_combo(settings, directory)` for every combo,
    so that a bad value or category fails before any compile."""

    def check(base: dict, axes: tuple, directory: Path) -> None:
        check_axes(target, base, axes, floats, categories, base_keys)
        if domains is not None:
            check_domains(base, axes, domains)
        if each_combo is not None:
            for settings in all_settings(base, axes):
                each_combo(settings, directory)

    return check


def fixed_outputs(outputs: tuple[str, ...]):
    return lambda base, directory: outputs


def no_fingerprint(base: dict, directory: Path) -> str:
    return ""


def declared_domains(cls) -> dict:
    """{field name: declared domain} of the float fields of `cls` that declare one
    (`checks.float_field`): the domains the scenario keys use."""
    out = {}
    for f in dataclasses.fields(cls):
        decl = checks.declaration(f)
        if decl is not None and decl.domain is not None:
            out[f.name] = decl.domain
    return out


def relaxed(domain: domains_module.Domain) -> domains_module.Domain:
    """`domain` without integrality: a sweep evaluates the relaxed model, so an
    integer knob may take the values between integers a log grid gives."""
    return dataclasses.replace(domain, integer=False)


def axis_values(axis) -> tuple:
    """The values a float axis takes that bound it: all of a list or grid, the
    two ends of a random range."""
    return axis.values if axis.kind == "values" else (axis.low, axis.high)


def check_domains(base: dict, axes: tuple, domains: dict) -> None:
    """Every float knob `domains` names, in `base` and on every float axis (each
    value of a list or grid, both ends of a random range), lies in its domain
    (`relaxed`): else a one-line ValueError naming the axis and the value,
    before anything compiles."""
    for name, domain in domains.items():
        if name in base:
            value = units.parse_quantity(name, base[name], field=f"base.{name}")
            domains_module.check_in(f"base.{name}", value, relaxed(domain))
    for axis in axes:
        if axis.kind != "categories" and axis.name in domains:
            values = np.asarray(axis_values(axis), dtype=float)
            bad = values[~relaxed(domains[axis.name]).ok(values)]  # all at once
            if bad.size:
                domains_module.check_in(f"knobs.{axis.name}", bad[0], relaxed(domains[axis.name]))


def replace_leaves(module, values: dict, names: tuple[str, ...]):
    """`module` with the float leaves `names` found in `values` replaced (traced or not)."""
    for name in names:
        if name in values:
            module = eqx.tree_at(lambda m, n=name: getattr(m, n), module,
                                 jnp.asarray(values[name], dtype=float))
    return module


def constants(settings: dict, floats: tuple[str, ...]) -> dict:
    """The float knobs `settings` sets, parsed by the unit their names carry."""
    return {k: units.parse_quantity(k, settings[k], field=f"base.{k}")
            for k in floats if k in settings}


def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))
