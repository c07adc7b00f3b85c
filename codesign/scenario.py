"""Scenario files (TOML) <-> pytrees, with validation that names the key.

A scenario has five tables (`SECTIONS`: [model], [training], [parallel],
[system], [reliability]); explicit keys override a preset (`model.preset`,
`system.preset`; docs/inputs.md lists every key). Each key is declared once,
on the pytree field that holds it (`checks.float_field`,
`checks.static_field`, `checks.strategy_field`: its key, domain or choices,
unit and default; a Tier's fields appear as system.scale_up_* and
system.scale_out_*; a strategy's own fields, a Clos's system.pod_size and
system.oversubscription, are keys of the scenarios whose strategy has them,
`knobs(scn)`). Everything else derives from those declarations: `KEYS` (key
-> field), `SCHEMA` (the tables' keys and types), `KNOBS` and `get_knob` /
`set_knobs` (the float keys), `DOMAINS` (their domains, rendered in
docs/inputs.md), the loader (the fields' own defaults, keyword construction)
and the checks. The strategies (`system.topology`, `system.routing`,
`parallel.schedule`, `training.recompute`) are names in a table, parsed by
`strategies`; a pod key with a topology that does not read it is refused.

`system.gpus` and `parallel.dp` determine each other (gpus = dp tp pp cp): give
either. A value outside its domain, a key of the wrong type or an unreadable
file is a `ValueError` that names the key (or file), the value and the domain.
`output_checks.check_outputs` rejects an estimate with a non-finite or negative output
(and, as the model's fault, one outside its physical range),
and `Scenario.checked` does the domain checks on traced values
(`equinox.error_if`; `step.estimate` calls it). What names a scenario in
output (its name, model and system presets, chip) is `labels`, outside the
pytree. Built-in scenarios (`BUILTIN`) are TOML files shipped in
codesign/scenarios/; `load(None)` is the default (GPT-3 175B on 1024 A100s).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import tomllib
import typing
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import checks, domains, files, presets
from . import chip as chip_lib
from .checks import float_field
from .model import compute, hardware, stacks, strategies, workload
from .model.hardware import MAX_NARROW_PEAK_RATIO, System
from .model.plan import Plan, Precision, check_data_parallel, data_parallel, recipe, validate
from .model.reliability import Reliability
from .model.workload import Transformer
from .units import parse_quantity

BUILTIN = ("default", "megatron-8.3b", "megatron-1t", "llama3-405b", "deepseek-v3")
DEFAULT_SYSTEM = "dgx-a100"  # the system preset of a scenario that names none


class Scenario(eqx.Module):
    """A model, a plan, a system and its reliability, and the tokens to train
    on: the pytree every cost model takes. What names it in output lives
    outside it (`labels`), so renaming a scenario recompiles nothing."""

    model: Transformer
    plan: Plan
    system: System
    reliability: Reliability
    # tokens to train on (0 = not set)
    tokens: jax.Array = float_field("training.tokens", domains.interval(0.0, 1e18),
                                    unit="tokens", default=0.0)
    # the chip's design (`chip.ChipDesign`) of a scenario with a [chip] table, whose
    # system is `chip.to_system` of it (the step model reads the system only); None
    # without one. Its float leaves are the `chip.*` knobs (`CHIP_KNOBS`)
    chip: chip_lib.ChipDesign | None = None

    def checked(self) -> Scenario:
        """This scenario, its leaves guarded by `equinox.branched_error_if`: under
        jit/vmap/grad a knob outside its domain (`DOMAINS`, relaxed as
        `domains.Domain.traced` says) or a broken rule between model keys
        raises an error naming the key instead of flowing on as NaN. One
        comparison of the stacked knobs against arrays of bounds; the first
        offending key (in `KNOBS` order), then rule, names the error; only the
        scenario's own knobs (`knobs`) are checked."""
        absent = _absent(self)
        present = np.asarray([i for i, k in enumerate(_TRACED) if k not in absent])
        values = [get_knob(self, _TRACED[i]) for i in present]
        if all(jnp.ndim(v) == 0 for v in values):
            flat, owner = jnp.stack(values), present
        else:  # array leaves (a stacked batch of scenarios): every element is checked
            flat = jnp.concatenate([jnp.ravel(v) for v in values])
            owner = np.repeat(present, [np.size(v) for v in values])
        lo, hi, lo_open = (x[owner] for x in _TRACED_BOUNDS)
        outside = ~(jnp.where(lo_open, flat > lo, flat >= lo) & (flat <= hi))
        bad = jnp.concatenate([outside, _relations(self)])
        which = np.concatenate([owner, len(_TRACED) + np.arange(len(_RELATION_MESSAGES))])
        return checks.branched_error_if(self, jnp.any(bad), jnp.asarray(which)[jnp.argmax(bad)],
                                         _TRACED_MESSAGES + _RELATION_MESSAGES)


_RELATION_MESSAGES = ("model.moe_layers must not exceed model.layers",
                      "model.kv_heads must not exceed model.heads",
                      "model.experts must be at least 1 in an MoE model",
                      "model.top_k must be at least 1 in an MoE model",
                      "model.top_k must not exceed model.experts",
                      "model.expert_ffn_hidden must be at least 1 in an MoE model",
                      # the physical ratio of a chip's two peaks that are keys (vendor
                      # datasheets: an 8-bit peak is 2x the 16-bit one on every GPU so
                      # far, 1x on V100)
                      f"system.peak_fp8_flops_per_s must not exceed {MAX_NARROW_PEAK_RATIO:g} x "
                      "system.peak_flops_per_s (an 8-bit peak is 2x the 16-bit one on every "
                      "chip so far)")


def _relations(scn: Scenario) -> jax.Array:
    """Which of the rules between keys (`_RELATION_MESSAGES`) are broken, as
    one comparison lhs > rhs (the model's four MoE rules only in an MoE model):
    the traced check of what `Transformer.__check_init__` checks concretely,
    and the 8-bit peak's ratio to the 16-bit one (`Chip.__check_init__`'s)."""
    m, chip = scn.model, scn.system.chip
    one = jnp.ones_like(m.layers)
    lhs = jnp.stack(jnp.broadcast_arrays(m.moe_layers, m.kv_heads, one, one, m.top_k, one,
                                         chip.peak_fp8_flops_per_s))
    rhs = jnp.stack(jnp.broadcast_arrays(m.layers, m.heads, m.experts, m.top_k, m.experts,
                                         m.expert_ffn_hidden,
                                         MAX_NARROW_PEAK_RATIO * chip.peak_flops_per_s))
    moe = m.moe_layers > 0
    gate = jnp.stack(jnp.broadcast_arrays(True, True, moe, moe, moe, moe, True))
    return jnp.any((gate & (lhs > rhs)).reshape(len(_RELATION_MESSAGES), -1), axis=1)


# ------------------------------------------------------- the declared keys
SECTIONS = ("model", "training", "parallel", "system", "reliability")
# keys the loader reads that are no field: the presets the other keys override
# keys the loader reads itself: the presets, and the devices a calibrated system's
# tiers were measured on (a label: `SystemLabels.measured_on`)
_LOADER_KEYS = {"model.preset": str, "system.preset": str, "system.measured_on": str}


class Key(NamedTuple):
    """A scenario key: where its field is (attributes from a Scenario), its
    declaration (`checks.Declaration`) and, for a field of one strategy
    class (a Clos's pods), that class: the key exists only where the strategy
    is one."""

    path: tuple[str, ...]
    declaration: checks.Declaration
    owner: type | None = None


def declarations(cls: type, path: tuple = (), prefix: str = "", owner: type | None = None):
    """(scenario key, Key) of every declared scenario field of `cls` and of the
    Modules it holds (a sub-Module field's metadata `prefix` prefixes its keys:
    the tiers' system.scale_up_* and system.scale_out_*; a strategy field is
    followed by the fields of each of its classes), in field order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        decl = checks.declaration(f)
        if decl is not None:
            if decl.scenario:
                yield prefix + decl.key, Key((*path, f.name), decl, owner)
            for variant in decl.variants:
                yield from declarations(variant, (*path, f.name), prefix, variant)
        elif isinstance(hints.get(f.name), type) and issubclass(hints[f.name], eqx.Module):
            yield from declarations(hints[f.name], (*path, f.name),
                                    prefix + f.metadata.get("prefix", ""), owner)


def declared_keys(cls: type) -> dict[str, Key]:
    """{scenario key: Key} of `declarations(cls)`; a key declared twice is an error."""
    out: dict[str, Key] = {}
    for key, where in declarations(cls):
        if key in out:
            raise TypeError(f"scenario key {key} is declared twice: at "
                            f"{'.'.join(out[key].path)} and {'.'.join(where.path)}")
        out[key] = where
    return out


KEYS = declared_keys(Scenario)
_BY_SECTION = sorted(KEYS, key=lambda k: SECTIONS.index(k.split(".", 1)[0]))  # stable
SCHEMA: dict[str, dict[str, type]] = {s: {} for s in SECTIONS}
for _key, _kind in (*_LOADER_KEYS.items(), *((k, KEYS[k].declaration.kind) for k in _BY_SECTION)):
    _section, _name = _key.split(".", 1)
    SCHEMA[_section][_name] = _kind
KNOBS = tuple(k for k in _BY_SECTION if KEYS[k].declaration.kind is float)  # every float knob
DOMAINS: dict[str, domains.Domain] = {k: KEYS[k].declaration.domain for k in KNOBS}
# constrained by other keys, not by a fixed domain, when traced: dp follows
# gpus / (tp pp cp) in `set_knobs` and the optimiser keeps dp >= 1 as a
# constraint it may cross while it searches
RELATIONAL = ("parallel.dp",)
_TRACED = tuple(k for k in KNOBS if k not in RELATIONAL)
_TRACED_BOUNDS = domains.traced_bounds([DOMAINS[k] for k in _TRACED])
_TRACED_MESSAGES = tuple(f"{k} must be {DOMAINS[k].describe()} (a traced value is outside)"
                         for k in _TRACED)


def check(key: str, value) -> None:
    """Raise `ValueError("{key}={value} must be {domain}")` when the value of the
    float key `key` is outside its domain."""
    if key in DOMAINS:
        domains.check_in(key, value, DOMAINS[key])


def domains_markdown() -> str:
    """docs/inputs.md's table of the domains of every float key."""
    return domains.table_markdown(DOMAINS, {k: KEYS[k].declaration.unit for k in DOMAINS})


# ----------------------------------------------------------------- knobs
def _getter(key: str):
    """A getter of the leaf of `key` in a Scenario."""
    return lambda scn: functools.reduce(getattr, KEYS[key].path, scn)


def _absent(scn: Scenario) -> frozenset:
    """The keys of strategy classes (`Key.owner`: a Clos's pods) that `scn`'s
    strategies are not."""
    return frozenset(k for k, w in KEYS.items() if w.owner is not None
                     and not isinstance(functools.reduce(getattr, w.path[:-1], scn), w.owner))


def knobs(scn: Scenario) -> tuple:
    """The float knobs of `scn`: `KNOBS` less the keys of strategies it does not
    use (a Clos's pod_size and oversubscription, without a Clos) and, with a
    [chip] table, the system keys its design sets (`_SET_BY_CHIP`) other than
    those that stand for a chip knob (`CHIP_ALIASES`)."""
    absent = _absent(scn)
    if scn.chip is not None:
        absent |= {f"system.{k}" for k in _SET_BY_CHIP} - set(CHIP_ALIASES)
    return tuple(k for k in KNOBS if k not in absent)


def get_knob(scn: Scenario, name: str) -> jax.Array:
    """The value of one float knob of a scenario.

    Args:
        scn: the `Scenario`.
        name: a scenario key (`knobs(scn)`, e.g. `system.scale_out_bandwidth_Bps`)
            or a `chip.*` key of a scenario with a [chip] table (`CHIP_KNOBS`).

    Returns:
        the knob's value, a jnp scalar in the unit its name says (`*_Bps`,
        `*_s`, `*_bytes`; counts and fractions unitless). An unknown name, or a
        key the scenario's topology does not read, raises a ValueError naming it.
    """
    if name in CHIP_KNOBS:
        return getattr(_design_of(scn, name), name.split(".", 1)[1])
    if name not in DOMAINS:
        raise ValueError(f"knob {name!r} is unknown; knobs are scenario keys such as "
                         "system.scale_out_bandwidth_Bps, parallel.tp, training.micro_batch")
    if name in _absent(scn):
        raise ValueError(f"{name} is not a knob of topology {scn.system.topology.name}: only "
                         f"{strategies.readers(KEYS[name].path[-1])} reads it")
    return _getter(name)(scn)


def set_knobs(scn: Scenario, values: dict) -> Scenario:
    """A copy of `scn` with float knobs replaced (jit/vmap/grad safe).

    Unless `parallel.dp` is among them, dp follows as system.gpus / (tp pp cp);
    if it is, system.gpus follows as dp tp pp cp. On a scenario with a [chip]
    table, a `chip.*` knob sets the design and the system follows it
    (`chip.to_system`); the system keys the design sets are its fields
    (`CHIP_ALIASES`: system.scale_out_bandwidth_Bps is chip.nic_Bps) or refused.

    Args:
        scn: the `Scenario`.
        values: {knob name (as `get_knob`'s): value in the knob's unit}; the
            values may be traced (the knobs a gradient or a grid varies).

    Returns:
        the new `Scenario` (`scn` is not changed).
    """
    values = {_chip_alias(scn, name): value for name, value in values.items()}
    for name, value in values.items():
        get_knob(scn, name)
        if name in CHIP_KNOBS:
            scn = eqx.tree_at(lambda s, n=name: getattr(s.chip, n.split(".", 1)[1]), scn,
                              jnp.asarray(value, dtype=float))
        else:
            scn = eqx.tree_at(_getter(name), scn, jnp.asarray(value, dtype=float))
    if any(name in CHIP_KNOBS for name in values):
        scn = eqx.tree_at(lambda s: s.system, scn, chip_lib.to_system(scn.chip, scn.system))
    p = scn.plan
    if "parallel.dp" in values:
        scn = eqx.tree_at(lambda s: s.system.gpus, scn, p.dp * p.tp * p.pp * p.cp)
    else:
        scn = eqx.tree_at(lambda s: s.plan.dp, scn,
                          data_parallel(scn.system.gpus, p.tp, p.pp, p.cp))
    return scn


# ------------------------------------------------------------- chip knobs
# the float fields of `chip.ChipDesign` (declared there: `CHIP_KEYS`), knobs of a
# scenario with a [chip] table; the system keys the design sets that are one of
# its fields under another name (the others, `_SET_BY_CHIP`, follow from several)
CHIP_ALIASES = {"system.scale_out_bandwidth_Bps": "chip.nic_Bps",
                "system.scale_up_bandwidth_Bps": "chip.scale_up_Bps",
                "system.peak_flops_per_s": "chip.peak_flops_per_s"}


def _design_of(scn: Scenario, name: str) -> chip_lib.ChipDesign:
    if scn.chip is None:
        raise ValueError(f"{name} is a knob of a scenario with a [chip] table (docs/chip.md); "
                         "this one has none: give one, e.g. --set chip.part='H100 SXM5'")
    return scn.chip


def _chip_alias(scn: Scenario, name: str) -> str:
    """The `chip.*` knob a system key is on a scenario with a [chip] table
    (`CHIP_ALIASES`); a system key the design sets from several fields is refused."""
    if scn.chip is None or not name.startswith("system."):
        return name
    if name in CHIP_ALIASES:
        return CHIP_ALIASES[name]
    if name.split(".", 1)[1] in _SET_BY_CHIP:
        raise ValueError(f"{name} follows from the [chip] table's design (chip.to_system): "
                         "vary its chip.* knobs instead")
    return name


def chip_domain(name: str) -> domains.Domain:
    """The domain of the `chip.*` knob `name` (its `chip.ChipDesign` field's)."""
    return CHIP_KEYS[name].domain


# ----------------------------------------------------------------- loading
def _builtin_path(name: str):
    return resources.files("codesign") / "scenarios" / f"{name}.toml"


MAX_TOML_DEPTH = files.MAX_DEPTH  # tables and arrays nested in a scenario or system file


def read_toml(path: Path, what: str = "scenario") -> dict:
    """The tables of a TOML file; a file that cannot be read, decoded or parsed,
    that nests tables or arrays more than `MAX_TOML_DEPTH` levels deep or holds
    an integer too long for any configuration, is a one-line `ValueError`
    naming it (`files.parse_toml`, the importers' parser too)."""
    text = files.read_text(path, f"{what} file")  # at most files.TOML_LIMIT_BYTES
    return files.parse_toml(text, f"{what} file {str(path)!r}")


def read(source: str | Path | None) -> dict:
    """The raw tables of a scenario: a path, a built-in name, or None (default)."""
    name = "default" if source is None else str(source)
    if name in BUILTIN:
        return tomllib.loads(_builtin_path(name).read_text())
    path = Path(name)
    if not path.exists():
        raise FileNotFoundError(f"scenario {name!r} is neither a file nor a built-in "
                                f"scenario ({', '.join(BUILTIN)})")
    return read_toml(path)


def flatten(tree: dict, prefix: str = "", is_leaf=lambda table: False) -> dict:
    """Nested tables -> dotted keys: `{"parallel": {"tp": 8}}` -> `{"parallel.tp": 8}`;
    a table for which `is_leaf` is true stays one value."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and not is_leaf(value):
            out.update(flatten(value, f"{prefix}{key}.", is_leaf))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_override(text: str) -> tuple[str, str, object]:
    """`"parallel.tp=8"` -> ("parallel", "tp", 8)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ValueError(f"--set {text!r} must look like section.key=value")
    key, raw = text.split("=", 1)
    section, name = key.strip().split(".", 1)
    raw = raw.strip()
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = {"true": True, "false": False}.get(raw.lower(), raw)
    return section, name, value


def _coerce(section: str, key: str, value):
    if section not in SCHEMA:
        raise ValueError(f"[{section}] is not a scenario table; tables are "
                         f"{', '.join(SCHEMA)}")
    if key not in SCHEMA[section]:
        raise ValueError(f"{section}.{key} is not a known key of [{section}]")
    kind = SCHEMA[section][key]
    if kind is float:
        name = f"{section}.{key}"
        if isinstance(value, str):
            value = parse_quantity(name, value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}={value!r} must be a number")
        if isinstance(value, int) and abs(value) > 1e300:  # beyond float64
            digits = str(abs(value))
            raise ValueError(f"{name}={'-' if value < 0 else ''}{digits[0]}e+{len(digits) - 1}"
                             f" must be {DOMAINS[name].describe()}")
        check(name, float(value))
        return float(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{section}.{key}={value!r} must be an integer")
        return value
    if not isinstance(value, kind):
        raise ValueError(f"{section}.{key}={value!r} must be a {kind.__name__}")
    return value


def _merge(tables: dict, overrides) -> dict:
    out = {s: {} for s in SCHEMA}
    for section, body in tables.items():
        if not isinstance(body, dict):
            raise ValueError(f"{section}={body!r} must be a table ([{section}])")
        for key, value in body.items():
            out.setdefault(section, {})[key] = _coerce_any(section, key, value)
    for item in overrides or ():
        section, key, value = parse_override(item) if isinstance(item, str) else item
        out.setdefault(section, {})[key] = _coerce_any(section, key, value)
    return out


def _coerce_any(section: str, key: str, value):
    return _coerce_chip(key, value) if section == CHIP_SECTION else _coerce(section, key, value)


# ----------------------------------------------------------------- the [chip] table
# A chip's design variables (`chip.ChipDesign`, docs/chip.md) as a table of a
# scenario, read when loading and kept as `Scenario.chip` (its float fields are
# the optimiser's `chip.*` knobs, `CHIP_KNOBS`; the step model reads the system): given, the
# system's peaks, HBM capacity and bandwidth, board power and link bandwidths
# are the design's (`chip.to_system`), the design built on the published part
# of the system preset's chip (`chip.PART_OF_PRESET_CHIP`) or of `chip.part`.
# Without a [chip] table nothing of this runs.
CHIP_SECTION = "chip"
CHIP_KEYS = {d.key: d for d in (checks.declaration(f)
                                for f in dataclasses.fields(chip_lib.ChipDesign))
             if d is not None}
CHIP_KNOBS = tuple(k for k, d in CHIP_KEYS.items() if d.kind is float)
CHIP_CHOICES = tuple(k for k, d in CHIP_KEYS.items() if d.kind is not float)
# the [system] keys a [chip] table sets: given beside one, refused
_SET_BY_CHIP = ("peak_flops_per_s", "peak_fp8_flops_per_s", "peak_fp32_flops_per_s", "hbm_bytes",
                "hbm_Bps", "hbm_reserve_bytes", "scale_up_bandwidth_Bps",
                "scale_out_bandwidth_Bps", "scale_up_reduction_Bps", "scale_out_reduction_Bps")


def _coerce_chip(key: str, value):
    """One value of the [chip] table, checked against its `ChipDesign` field's
    declaration (a number in its domain, or one of its choices); `chip.part`
    names the published part the design builds on."""
    name = f"{CHIP_SECTION}.{key}"
    if name == "chip.part":
        if not isinstance(value, str):
            raise ValueError(f"chip.part={value!r} must be a str")
        checks.one_of(name, value, tuple(p.name for p in chip_lib.PUBLISHED))
        return value
    if name not in CHIP_KEYS:
        raise ValueError(f"{name} is not a known key of [chip]; keys are chip.part, "
                         f"{', '.join(CHIP_KEYS)}")
    decl = CHIP_KEYS[name]
    if decl.kind is not float:
        if not isinstance(value, str):
            raise ValueError(f"{name}={value!r} must be a str")
        checks.one_of(name, value, decl.choices)
        return value
    if isinstance(value, str):
        value = parse_quantity(name, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r} must be a number")
    if isinstance(value, int) and abs(value) > 1e300:  # beyond float64
        raise ValueError(f"{name}={'-' if value < 0 else ''}{str(abs(value))[0]}e+"
                         f"{len(str(abs(value))) - 1} must be {decl.domain.describe()}")
    domains.check_in(name, float(value), decl.domain)
    return float(value)


def _chip_design(t: dict) -> chip_lib.ChipDesign:
    """The [chip] table's design, on the published part of the system preset's
    chip or of `chip.part`."""
    both = [f"system.{k}" for k in _SET_BY_CHIP if k in t["system"]]
    if both:
        raise ValueError(f"{both[0]} is set by the [chip] table's design; give one of them")
    table = dict(t[CHIP_SECTION])
    preset = t["system"].get("preset", DEFAULT_SYSTEM)
    part = table.pop("part", None) or chip_lib.PART_OF_PRESET_CHIP.get(
        presets.preset(preset).chip)
    if part is None:
        raise ValueError(f"[chip] on system.preset={preset!r}: its chip has no published "
                         "design to build on; set chip.part to one of "
                         f"{', '.join(p.name for p in chip_lib.PUBLISHED)}")
    return dataclasses.replace(chip_lib.published_design(part), **table)


def _given(cls: type, t: dict, prefix: str = "") -> dict:
    """{field: value} of the declared scenario keys of `cls`'s own fields that
    the merged tables `t` set (a Tier's keys under `prefix`)."""
    out = {}
    for f in dataclasses.fields(cls):
        decl = checks.declaration(f)
        if decl is not None and decl.scenario:
            section, name = (prefix + decl.key).split(".", 1)
            if name in t.get(section, {}):
                out[f.name] = t[section][name]
    return out


def _updated(module: eqx.Module, t: dict, prefix: str = "", **fixed) -> eqx.Module:
    """`module` (a preset) with the keys the tables `t` set, in it and in the
    Modules it holds, and the fields `fixed`; rebuilt, so its checks run on the
    result."""
    changes = {**_given(type(module), t, prefix), **fixed}
    for f in dataclasses.fields(module):
        sub = getattr(module, f.name)
        if checks.declaration(f) is None and isinstance(sub, eqx.Module):
            new = _updated(sub, t, prefix + f.metadata.get("prefix", ""))
            if new is not sub:
                changes[f.name] = new
    if all(changes[k] is getattr(module, k) for k in changes):
        return module
    return dataclasses.replace(module, **changes)


def _default(cls: type, name: str):
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


# {field: its name in [system]} of the topologies' own keys (a Clos's pods)
_TOPOLOGY_KEYS = {w.path[-1]: k.split(".", 1)[1] for k, w in KEYS.items()
                  if w.path[:-1] == ("system", "topology")}


def _topology(t: dict, base: System, domain, late: frozenset) -> strategies.Topology:
    """The topology of a [system] table `t`: `system.topology` parsed (default:
    the preset's) with its own keys (a Clos's pod_size and oversubscription),
    for a scale-up domain of `domain` GPUs (a torus takes its shape from it).

    A topology key its topology does not read is refused (a one-line
    ValueError naming the key and the topology), unless it was given in an
    earlier layer than the topology itself (preset < scenario or system file <
    `--set` overrides, the keys in `late`): `--set system.topology=rail_only` on
    a scenario whose Clos has pods replaces that Clos, pods and all."""
    layer = lambda k: 2 if k in late else 1  # noqa: E731 - where key k was given
    cls = strategies.topology_class(t["topology"]) if "topology" in t else type(base.topology)
    top = layer("topology") if "topology" in t else 0
    reads = strategies.float_params(cls)
    params = {f: t[k] for f, k in _TOPOLOGY_KEYS.items()
              if k in t and (f in reads or layer(k) >= top)}
    if cls is type(base.topology):
        if not params and float(domain) == float(base.scale_up_domain):
            return base.topology  # the preset's own (a TPU's cited torus shape)
        params = {**base.topology.params(), **params}
    return cls.of(domain, **params)


def _system(t: dict, late: frozenset = frozenset()) -> System:
    """The System of the merged tables `t` (`late`: the [system] keys `--set` gave)."""
    preset = t["system"].get("preset", DEFAULT_SYSTEM)
    if Path(str(preset)).suffix == ".toml":
        raise ValueError(f"system.preset={preset!r}: pass a system file with --system")
    base = presets.system(preset)
    if "hbm_bytes" in t["system"] and "hbm_reserve_bytes" not in t["system"]:
        # the reserve is the default's for the capacity given, not the preset's
        base = eqx.tree_at(lambda s: s.chip.hbm_reserve_bytes, base, jnp.asarray(
            hardware.default_hbm_reserve_bytes(float(t["system"]["hbm_bytes"]))))
    if "attention_efficiency" in t["system"]:
        # an efficiency given for this chip holds at its own exponential rate, not
        # at the rate of the part its preset borrowed one from (`Chip.attention_exp_per_s`)
        base = eqx.tree_at(lambda s: s.chip.attention_exp_per_s, base, base.chip.exp_per_s)
    if "peak_flops_per_s" in t["system"]:
        # the 8-, 32- and 4-bit peaks follow a 16-bit peak given without them, in the
        # preset's ratios (a chip's peaks scale with its clock and units together)
        scale = float(t["system"]["peak_flops_per_s"]) / float(base.chip.peak_flops_per_s)
        follow = [f for f, given in (("peak_fp8_flops_per_s", "peak_fp8_flops_per_s"),
                                     ("peak_fp32_flops_per_s", None),
                                     ("peak_fp4_flops_per_s", None))
                  if given not in t["system"]]
        base = eqx.tree_at(lambda s: [getattr(s.chip, f) for f in follow], base,
                           [jnp.asarray(getattr(base.chip, f) * scale) for f in follow])
    domain = t["system"].get("scale_up_domain", base.scale_up_domain)
    return _updated(base, t, topology=_topology(t["system"], base, domain, late))


def _model(t: dict) -> Transformer:
    if "preset" in t["model"]:
        return _updated(workload.model(t["model"]["preset"]), t)
    given = _given(Transformer, t)
    required = [f.name for f in dataclasses.fields(Transformer)
                if f.default is dataclasses.MISSING]
    missing = [k for k in required if k not in given]
    if missing:
        raise ValueError(f"[model] needs a preset or {', '.join('model.' + k for k in missing)}")
    return Transformer(**given)


def _plan(t: dict, gpus: float) -> Plan:
    given = _given(Plan, t)
    get = lambda k: given.get(k, _default(Plan, k))  # noqa: E731
    if "dp" not in given:
        given["dp"] = check_data_parallel(gpus, get("tp"), get("pp"), get("cp"))
    given.setdefault("schedule", "interleaved" if get("interleave") > 1 else "1f1b")
    given.setdefault("host", stacks.preset_host(t["system"].get("preset")))  # its CPU
    return Plan(**given, precision=recipe(get("dtype"), **_given(Precision, t)))


def from_tables(tables: dict, overrides=()) -> Scenario:
    """Build and validate a Scenario from raw TOML tables plus `section.key=value` overrides."""
    t = _merge(tables, overrides)
    items = (parse_override(o) if isinstance(o, str) else o for o in overrides or ())
    late = frozenset(k for section, k, _ in items if section == "system")
    pa = t["parallel"]
    if "dp" in pa and "gpus" not in t["system"]:  # gpus follows dp
        gpus = pa["dp"] * pa.get("tp", 1.0) * pa.get("pp", 1.0) * pa.get("cp", 1.0)
        if not DOMAINS["system.gpus"].ok(gpus):
            raise ValueError(f"system.gpus=dp*tp*pp*cp={gpus:g} must be "
                             f"{DOMAINS['system.gpus'].describe()}")
        t["system"]["gpus"] = gpus
    system = _system(t, late)
    design = None
    if t.get(CHIP_SECTION):
        design = _chip_design(t)
        system = chip_lib.to_system(design, system)
    model = _model(t)
    plan = _plan(t, float(system.gpus))
    validate(plan, model, system.gpus)
    compute.check_fp4(plan, system)
    return Scenario(model=model, plan=plan, system=system,
                    reliability=Reliability(**_given(Reliability, t)), **_given(Scenario, t),
                    chip=design)


def system_table(system: str) -> dict:
    """The `[system]` keys of `--system`: a preset name, or a system TOML file
    (e.g. written by `codesign calibrate --out`) holding only a [system] table."""
    if Path(system).suffix != ".toml":
        return {"preset": system}
    if not Path(system).exists():
        raise FileNotFoundError(f"system file {system!r} does not exist")
    extra = read_toml(Path(system), "system")
    others = sorted(set(extra) - {"system"})
    if others:
        raise ValueError(f"system file {system!r} may hold only a [system] table; it "
                         f"also has {', '.join(f'[{o}]' for o in others)} (pass a "
                         "scenario file as the scenario argument instead)")
    extra = extra.get("system", {})
    if not isinstance(extra, dict):
        raise ValueError(f"system file {system!r}: system must be a table")
    if not extra:  # an empty file, or an empty [system]: it would change nothing
        raise ValueError(f"system file {system!r} sets no [system] key; give at least one "
                         f'(e.g. [system] preset = "{DEFAULT_SYSTEM}", or the tiers '
                         "`codesign calibrate --out` writes)")
    return extra


def system(spec: str, default_preset: str = DEFAULT_SYSTEM) -> System:
    """A System from a preset name or a system TOML file alone (no scenario):
    what `codesign collective --system` takes. A file without `preset` builds
    on `default_preset`."""
    return _system(_merge({"system": _system_only(spec, default_preset)}, ()))


def _system_only(spec: str, default_preset: str) -> dict:
    return {"preset": default_preset, **system_table(spec)}


def _tables(source: str | Path | None, system: str | None) -> dict:
    """The raw tables of a scenario (`read`) with `system`'s [system] keys over its own."""
    tables = read(source)
    if not isinstance(tables.get("system", {}), dict):
        raise ValueError(f"system={tables['system']!r} must be a table ([system])")
    if system is not None:
        tables = {**tables, "system": {**tables.get("system", {}), **system_table(system)}}
    return tables


def load(source: str | Path | None = None, overrides=(), system: str | None = None) -> Scenario:
    """A scenario from a path or built-in name, with overrides and a system.

    Args:
        source: a scenario TOML file's path or a built-in name (`BUILTIN`);
            None: the built-in default.
        overrides: `section.key=value` strings, applied in order over the file.
        system: a system preset name (`codesign presets`) or a system TOML file
            (e.g. written by `codesign calibrate --out`); None: the scenario's.

    Returns:
        the checked `Scenario` (a pytree of float leaves in SI units). What names
        it in output is `labels` (same arguments). Bad input raises a ValueError
        naming the key and value.
    """
    return from_tables(_tables(source, system), overrides)


# ----------------------------------------------------------------- labels
class SystemLabels(NamedTuple):
    """What names a system in output: its preset and that preset's chip, and the
    devices its tiers were measured on where `codesign calibrate` wrote them."""

    preset: str
    chip: str
    measured_on: str | None = None


class Labels(NamedTuple):
    """What names a scenario in output, derived from its tables and preset
    names and kept out of the pytree (renaming a scenario recompiles nothing)."""

    scenario: str  # the built-in name, or the file's stem
    model: str  # the model preset, or "custom"
    system: SystemLabels


def _system_labels(table: dict) -> SystemLabels:
    preset = table.get("preset", DEFAULT_SYSTEM)
    return SystemLabels(preset, presets.preset(preset).chip, table.get("measured_on"))


def labels(source: str | Path | None = None, overrides=(), system: str | None = None) -> Labels:
    """The names of the scenario `load(source, overrides, system)` returns.

    Args:
        source, overrides, system: as `load`'s.

    Returns:
        `Labels`: the scenario's name, the model preset's and the system's
        (preset, chip, topology), for output.
    """
    t = _merge(_tables(source, system), overrides)
    name = "default" if source is None else str(source)
    return Labels(name if name in BUILTIN else Path(name).stem,
                  t["model"].get("preset", "custom"), _system_labels(t["system"]))


def system_labels(spec: str, default_preset: str = DEFAULT_SYSTEM) -> SystemLabels:
    """The labels of the System `system(spec, default_preset)` returns."""
    return _system_labels(_merge({"system": _system_only(spec, default_preset)}, ())["system"])
