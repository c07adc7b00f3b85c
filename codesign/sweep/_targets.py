"""The five sweep targets, each made by a small factory returning a `Target`
(`_target.py`), and `TARGETS` by name: one collective, reliability, ECMP
collisions, a fabric's inventory, and the step model of a scenario. A target
checks a spec's base and axes before anything compiles (every float knob's
values against its domain: the declared domain of the field it sets, as the
scenario keys use them, or the target's own), builds the point function of one
combo (float knob values as jnp scalars -> a dict of scalar outputs; the
values of a chunk are checked finite in `_evaluate.chunk_rows`) and
fingerprints what outside the spec its results depend on."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import domains as domains_module
from .. import files, presets, scenario, units
from ..model import (
    collectives,
    economics,
    fabric,
    hardware,
    network_roofline,
    plan,
    reliability,
    step,
    strategies,
)
from ..model import protocols as protocols_lib
from ..model.relax import safe_div
from . import _fields as fields
from . import _target as target
from ._target import PointFn, Target

# ------------------------------------------------------------------ collective

_TIER_KNOBS = tuple(f"{t}.{leaf}" for t in ("scale_up", "scale_out")
                    for leaf in ("bandwidth_Bps", "latency_s", "efficiency"))
# the domains of the targets' own knobs; the others are the declared domains of the
# fields they set (`target.declared_domains`), as the scenario keys use them
_MESSAGE = domains_module.interval(0.0, domains_module.MAX_MESSAGE_BYTES)  # as `collective --bytes`
_RANKS = domains_module.count(domains_module.MAX_GPUS)  # ranks, GPUs, flows, links, strides
_SYSTEM = target.declared_domains(hardware.System)  # gpus, scale_up_domain
_TIER = target.declared_domains(hardware.Tier)
_COLLECTIVE_DEFAULTS = {"system": "dgx-h100", "op": "all_reduce", "algorithm": "ring",
                        "tier": "system", "n_bytes": units.GiB, "ranks": 8.0}


def _tier_leaf(system: hardware.System, knob: str, value) -> hardware.System:
    tier_name, leaf = knob.split(".")
    return eqx.tree_at(lambda s: getattr(getattr(s, tier_name), leaf), system,
                       jnp.asarray(value, dtype=float))


def collective_target() -> Target:
    """One collective on a preset system (`collectives.cost`).

    base/categories: `system` (preset), `op`, `algorithm` (or "auto"), `tier`:
    "system" (flat algorithms on the fast tier while ranks fit the scale-up
    domain, on the scale-out tier beyond; `hierarchical` spans both with
    `local_ranks` per domain), "scale_up" or "scale_out" (one tier alone),
    `protocols` ("nccl", "alpha_beta"; default the system's `system.protocols`).
    Float knobs: `n_bytes`, `ranks`, `local_ranks` (default: the system's
    scale-up domain) and the tiers' `bandwidth_Bps`, `latency_s`, `efficiency`.
    """
    floats = ("n_bytes", "ranks", "local_ranks") + _TIER_KNOBS
    categories = ("system", "op", "algorithm", "tier", "protocols")
    outputs = ("time_s", "latency_s", "bandwidth_s", "reduction_s", "algbw_Bps", "busbw_Bps",
               "bus_factor", "latency_share")

    def static(settings: dict, directory: Path | None = None):
        s = {**_COLLECTIVE_DEFAULTS, **settings}
        system = presets.system(str(s["system"]))
        op = str(s["op"])
        if s["tier"] not in ("system", "scale_up", "scale_out"):
            raise ValueError(f"tier={s['tier']!r} must be system, scale_up or scale_out")
        names = collectives.algorithms(op, hierarchical=s["tier"] == "system") + ("auto",)
        if s["algorithm"] not in names:
            raise ValueError(f"algorithm={s['algorithm']!r} is not defined for op={op!r} on "
                             f"tier={s['tier']!r}; choose one of {', '.join(names)}")
        protocols = protocols_lib.protocols(s.get("protocols", system.protocols), key="protocols")
        return (system, op, str(s["algorithm"]), s["tier"], protocols,
                target.constants(s, floats))

    def build(settings: dict, directory: Path) -> PointFn:
        system0, op, algorithm, tier_mode, protocols, constants = static(settings)
        local_default = float(system0.scale_up_domain)

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            system = system0
            for k in _TIER_KNOBS:
                if k in v:
                    system = _tier_leaf(system, k, v[k])
            n, p = jnp.asarray(v["n_bytes"], float), jnp.asarray(v["ranks"], float)
            if tier_mode == "system":
                c = collectives.cost(op, algorithm, n, p, system.scale_up, outer=system.scale_out,
                                     local_ranks=v.get("local_ranks", local_default),
                                     protocols=protocols)
            else:
                c = collectives.cost(op, algorithm, n, p, getattr(system, tier_mode),
                                     protocols=protocols)
            return {"time_s": c.time_s, "latency_s": c.latency_s, "bandwidth_s": c.bandwidth_s,
                    "reduction_s": c.reduction_s,
                    "algbw_Bps": collectives.algbw_Bps(n, c.time_s),
                    "busbw_Bps": collectives.busbw_Bps(op, n, c.time_s, p),
                    "bus_factor": collectives.bus_factor(op, p),
                    "latency_share": safe_div(c.latency_s, c.time_s)}

        return point

    domains = {"n_bytes": _MESSAGE, "ranks": _RANKS, "local_ranks": _RANKS,
               **{k: _TIER[k.split(".")[1]] for k in _TIER_KNOBS}}
    return Target("collective", "time, algbw and busbw of one collective (op, algorithm, "
                  "bytes, ranks, tier)", floats, categories, target.fixed_outputs(outputs),
                  target.make_check("collective", floats, categories, static,
                                    domains=domains), build,
                  target.no_fingerprint)


# ------------------------------------------------------------------ reliability

_RELIABILITY_DEFAULTS = {"step_time_s": 10.0, "gpus": 16384.0, "checkpoint_bytes": 6e12}
_RELIABILITY_DOMAINS = {
    "step_time_s": domains_module.Domain(0.0, domains_module.DURATION.hi, lo_open=True),
    "gpus": _SYSTEM["gpus"], "participants": _SYSTEM["gpus"],
    "checkpoint_bytes": domains_module.interval(0.0, 1e21),  # 1 ZB: beyond any cluster's storage
    **target.declared_domains(reliability.Reliability)}
# knobs the failure model reads (`reliability.failures`): not the stragglers'
_FAILURE_KNOBS = ("gpus", "checkpoint_bytes") + tuple(
    f for f in target.field_names(reliability.Reliability) if not f.startswith("straggler_"))


def _check_progress(base: dict, axes: tuple, floats: tuple) -> None:
    """The failure model's floor (`reliability.check_progress`) at every point of
    the sweep, before any compile: the effective training time is monotone in
    each knob the failure model reads (unimodal in the checkpoint interval), so
    its least over the sweep is at a corner of the box of their ranges; a
    `reliability.NoProgress` names the worst corner."""
    v = {**_RELIABILITY_DEFAULTS, **target.constants(base, floats)}
    ranges = {a.name: (min(target.axis_values(a)), max(target.axis_values(a)))
              for a in axes if a.kind != "categories" and a.name in _FAILURE_KNOBS}
    corners = list(itertools.product(*ranges.values())) or [()]
    for i, name in enumerate(ranges):
        v[name] = jnp.asarray([c[i] for c in corners], dtype=float)
    rel = target.replace_leaves(reliability.Reliability(), v,
                                target.field_names(reliability.Reliability))
    mtbf, delta, _, downtime, effective = reliability.failures(
        jnp.asarray(v["gpus"], dtype=float), jnp.asarray(v["checkpoint_bytes"], dtype=float),
        rel)
    effective = jnp.broadcast_to(effective, (len(corners),))
    worst = int(jnp.argmin(jnp.where(jnp.isnan(effective), -jnp.inf, effective)))
    at = ", ".join(f"{name}={domains_module.fmt(c)}" for name, c in zip(ranges, corners[worst],
                                                                  strict=True))
    pick = lambda x: jnp.broadcast_to(x, (len(corners),))[worst]  # noqa: E731
    reliability.check_progress(pick(effective), pick(mtbf), f" (at {at})" if at else "",
                               ("gpu_mtbf_s", "restart_s", "checkpoint_write_s", "gpus"),
                               downtime_s=pick(downtime), write_s=pick(delta))


def reliability_target() -> Target:
    """Stragglers, failures and checkpoints of a job (`reliability.report`).

    Float knobs: `step_time_s` (the healthy median step), `gpus`,
    `participants` (ranks the step waits for; default `gpus`),
    `checkpoint_bytes`, and every field of `reliability.Reliability`
    (straggler_q, straggler_slowdown, straggler_sigma, gpu_mtbf_s, restart_s,
    checkpoint_write_s, ...). Defaults: 10 s steps, 16,384 GPUs, a 6 TB
    checkpoint (a Llama-3-405B-like run) and the `Reliability` defaults.
    """
    reliability_fields = target.field_names(reliability.Reliability)
    floats = ("step_time_s", "gpus", "participants", "checkpoint_bytes") + reliability_fields
    outputs = ("p_step_delayed", "expected_step_time_s", "step_time_p50_s", "step_time_p99_s",
               "straggler_slowdown_factor", "mtbf_s", "checkpoint_write_s",
               "checkpoint_interval_s", "young_interval_s", "restart_downtime_s",
               "effective_training_time_fraction", "goodput")

    def build(settings: dict, directory: Path) -> PointFn:
        constants = {**_RELIABILITY_DEFAULTS, **target.constants(settings, floats)}

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            rel = target.replace_leaves(reliability.Reliability(), v, reliability_fields)
            rep = reliability.report(v["step_time_s"], v["gpus"], v["checkpoint_bytes"], rel,
                                     participants=v.get("participants"))
            return {"p_step_delayed": rep.p_step_delayed,
                    "expected_step_time_s": rep.expected_step_time_s,
                    "step_time_p50_s": rep.step_time_p50_s,
                    "step_time_p99_s": rep.step_time_p99_s,
                    "straggler_slowdown_factor": rep.expected_step_time_s / v["step_time_s"],
                    "mtbf_s": rep.mtbf_s, "checkpoint_write_s": rep.checkpoint_write_s,
                    "checkpoint_interval_s": rep.checkpoint_interval_s,
                    "young_interval_s": reliability.young_interval_s(rep.checkpoint_write_s,
                                                                     rep.mtbf_s),
                    "restart_downtime_s": rep.restart_downtime_s,
                    "effective_training_time_fraction": rep.effective_training_time_fraction,
                    "goodput": rep.goodput}

        return point

    def check(base: dict, axes: tuple, directory: Path) -> None:
        target.make_check("reliability", floats, (), domains=_RELIABILITY_DOMAINS)(
            base, axes, directory)
        _check_progress(base, axes, floats)

    return Target("reliability", "stragglers (1-(1-q)^p, max of p draws), failures, "
                  "checkpoints, goodput", floats, (), target.fixed_outputs(outputs),
                  check, build, target.no_fingerprint)


# ------------------------------------------------------------------ ecmp

_ECMP_DEFAULTS = {"k_flows": 8.0, "m_links": 8.0, "overhead": 0.0, "routing": "ecmp"}


def ecmp_target() -> Target:
    """k elephant flows hashed onto m equal-cost links (`fabric.flow_slowdown`).

    Float knobs: `k_flows`, `m_links`, `overhead` (of spraying/adaptive
    routing); categorical: `routing` (ecmp, spray, adaptive). Traced, the
    expected maximum load is `fabric`'s differentiable Poisson form (within
    ~1% of the exact balls-into-bins value for the sizes swept here).
    """
    floats, categories = ("k_flows", "m_links", "overhead"), ("routing",)
    outputs = ("expected_max_load", "ideal_load", "slowdown", "bandwidth_fraction")

    domains = {"k_flows": _RANKS, "m_links": _RANKS,
               "overhead": domains_module.interval(0.0, 1e3)}  # extra time of spreading, x 1

    def check(base: dict, axes: tuple, directory: Path) -> None:
        target.check_axes("ecmp", base, axes, floats, categories)
        target.check_domains(base, axes, domains)
        routings = [base.get("routing", "ecmp")] + [
            r for k in axes if k.kind == "categories" for r in k.values]
        for r in routings:
            strategies.routing(r, "routing")

    def build(settings: dict, directory: Path) -> PointFn:
        routing = strategies.routing(settings.get("routing", _ECMP_DEFAULTS["routing"]),
                                     "routing")
        constants = {**_ECMP_DEFAULTS, **target.constants(settings, floats)}

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            k, m = jnp.asarray(v["k_flows"], float), jnp.asarray(v["m_links"], float)
            slow = routing.flow_slowdown(k, m, v["overhead"])
            ideal = jnp.maximum(k / m, 1.0)
            return {"expected_max_load": slow * ideal, "ideal_load": ideal, "slowdown": slow,
                    "bandwidth_fraction": 1.0 / slow}

        return point

    return Target("ecmp", "ECMP hash collisions: busiest-link load and slowdown of k flows "
                  "on m links", floats, categories, target.fixed_outputs(outputs), check, build,
                  target.no_fingerprint)


# ------------------------------------------------------------------ fabric

_FABRIC_SYSTEM = ("gpus", "scale_up_domain")
_FABRIC_TOPOLOGY = ("pod_size", "oversubscription")  # read by the topologies that have pods
_FABRIC_DEFAULTS = {"system": "dgx-h100", "n_bytes": 64 * units.MiB, "ranks": 256.0,
                    "group_size": 8.0, "stride": 1.0}


def _fabric_system(settings: dict, directory: Path | None = None) -> hardware.System:
    system = presets.system(str(settings.get("system", _FABRIC_DEFAULTS["system"])))
    if "topology" in settings:
        cls = strategies.topology_class(settings["topology"], "topology")
        if cls is not type(system.topology):
            system = fabric.with_topology(system, cls.of(system.scale_up_domain))
    return system


# `fabric.Prices` checks its own rules (radix >= 4, prices and powers >= 0); a sweep's
# values also stay below bounds where every total stays finite (parts for 1e7 GPUs)
_PRICES = {name: domains_module.interval(4.0, 1e6) if name == "switch_radix"
           else domains_module.Domain(0.0, 1e6, lo_open=True) if name == "ocs_radix"
           else domains_module.interval(0.0, 1e7 if name.endswith("_w") else 1e9)
           for name in target.field_names(fabric.Prices)}
_FABRIC_DOMAINS = {**{k: _SYSTEM[k] for k in _FABRIC_SYSTEM},
                   **{k: v for k, v in target.declared_domains(strategies.Clos).items()
                      if k in _FABRIC_TOPOLOGY}, **_PRICES,
                   "n_bytes": _MESSAGE, "ranks": _RANKS, "group_size": _RANKS, "stride": _RANKS}


def _fabric_check(floats: tuple, categories: tuple):
    """The fabric target's check: the axes and their values, every combo's system,
    and a pod knob (base or axis) only where some combo's topology reads it: the
    pods configure the Clos combos of a sweep (rail-only and two-tier ones have none)."""

    def check(base: dict, axes: tuple, directory: Path) -> None:
        target.make_check("fabric", floats, categories, _fabric_system,
                          domains=_FABRIC_DOMAINS)(base, axes, directory)
        reads = {k for settings in target.all_settings(base, axes)
                 for k in _fabric_system(settings).topology.params()}
        for k in _FABRIC_TOPOLOGY:
            if (k in base or any(a.name == k for a in axes)) and k not in reads:
                raise ValueError(f"{k} is set but no topology of the sweep reads it: only "
                                 f"{strategies.readers(k)} does (add it to the categories)")

    return check


def fabric_target() -> Target:
    """Parts, cost and power of a scale-out fabric (`fabric.inventory`), with the
    rail-only savings and MoE all-to-all penalty (`fabric.rail_only_*`), and the
    scale-up bandwidth a group sees on a torus or a switch (`fabric.scale_up_tier`).

    Categorical: `system` (preset), `topology` (two_tier, clos, rail_only, torus).
    Float knobs: `gpus`, `scale_up_domain`, `pod_size` and `oversubscription`
    (of the clos combos; refused when no combo is a Clos), every
    `fabric.Prices` field (switch_radix, switch_usd, ...), `n_bytes` and `ranks`
    of the all-to-all, `group_size` and `stride` of the scale-up group.
    """
    prices_fields = target.field_names(fabric.Prices)
    floats = (_FABRIC_SYSTEM + _FABRIC_TOPOLOGY + prices_fields
              + ("n_bytes", "ranks", "group_size", "stride"))
    categories = ("system", "topology")
    outputs = ("switches", "transceivers", "cables", "network_cost_usd", "network_power_w",
               "cost_usd", "power_w", "cost_per_gpu_usd", "power_per_gpu_w",
               "rail_only_cost_saving", "rail_only_power_saving", "all_to_all_penalty",
               "scale_up_group_Bps", "fabric_cost_usd", "fabric_power_w")

    def build(settings: dict, directory: Path) -> PointFn:
        system0 = _fabric_system(settings)
        constants = {**_FABRIC_DEFAULTS, **target.constants(settings, floats)}
        prices0 = fabric.default_prices()  # outside the trace: it is cached
        assumptions = economics.default_assumptions()

        def point(knobs: dict) -> dict:
            v = {**constants, **knobs}
            system = target.replace_leaves(system0, v, _FABRIC_SYSTEM)
            own = tuple(system.topology.params())  # a Clos's pods
            if own:
                system = eqx.tree_at(lambda s: s.topology, system,
                                     target.replace_leaves(system.topology, v, own))
            prices = target.replace_leaves(prices0, v, prices_fields)
            inv = fabric.inventory(system, prices)
            cost_saving, power_saving = fabric.rail_only_saving(system, prices)
            n, p = jnp.asarray(v["n_bytes"], float), jnp.asarray(v["ranks"], float)
            group = fabric.scale_up_tier(system, v["group_size"], v["stride"])
            return {"switches": inv.leaf_switches + inv.spine_switches + inv.core_switches
                    + inv.ocs_switches, "transceivers": inv.transceivers, "cables": inv.cables,
                    "network_cost_usd": inv.network_cost_usd,
                    "network_power_w": inv.network_power_w, "cost_usd": inv.cost_usd,
                    "power_w": inv.power_w, "cost_per_gpu_usd": inv.cost_per_gpu_usd,
                    "power_per_gpu_w": inv.power_per_gpu_w,
                    "rail_only_cost_saving": cost_saving, "rail_only_power_saving": power_saving,
                    # no penalty while the ranks fit in one domain: nothing leaves it
                    "all_to_all_penalty": jnp.where(
                        p > system.scale_up_domain,
                        fabric.rail_only_all_to_all_penalty(system, n, p), 0.0),
                    "scale_up_group_Bps": group.bandwidth_Bps,
                    "fabric_cost_usd": economics.fabric_capex_usd(system, inv, assumptions),
                    "fabric_power_w": economics.fabric_power_w(system, inv, assumptions)}

        return point

    return Target("fabric", "fabric inventory (switches, optics, cost, power) per topology; "
                  "rail-only penalty", floats, categories, target.fixed_outputs(outputs),
                  _fabric_check(floats, categories), build,
                  target.no_fingerprint)


# ------------------------------------------------------------------ estimate

_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
_ESTIMATE_EXTRA = (("bubble_fraction", "exposed_comm_fraction", "micro_batches",
                    "scale_up_needed_flop_per_byte", "scale_out_needed_flop_per_byte")
                   + tuple(f"wire_bytes_{d}" for d in _DIMENSIONS)
                   + tuple(f"flop_per_byte_{d}" for d in _DIMENSIONS))


def _scenario_source(base: dict, directory: Path) -> str | None:
    source = base.get("scenario")
    if source is None or source in scenario.BUILTIN:
        return source
    return str(Path(directory) / str(source))


def _scenario_fingerprint(base: dict, directory: Path) -> str:
    source = _scenario_source(base, directory)
    if source is None or not Path(source).is_file():
        return ""
    return hashlib.sha256(files.read_bytes(source, "scenario file")).hexdigest()


def _scenario(settings: dict, directory: Path) -> scenario.Scenario:
    """The scenario of `settings`: its source, `overrides`, tables and dotted keys."""
    overrides = settings.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ValueError(f"base.overrides={overrides!r} must be a list of "
                         f"\"section.key=value\" strings")
    items = list(overrides)
    for section in scenario.SCHEMA:
        for key, value in fields.table(settings.get(section, {}), f"base.{section}").items():
            items.append((section, key, value))
    for name, value in settings.items():
        if "." in name and name.split(".", 1)[0] in scenario.SCHEMA:  # section.key
            section, key = name.split(".", 1)
            items.append((section, key, value))
    return scenario.load(_scenario_source(settings, directory), items)


def _check_scaled(scn: scenario.Scenario, axis, axes: tuple) -> None:
    """A `scale:KEY` axis: its factors positive, and KEY's value (the combo's, or
    the ends of KEY's own axis) times each end of them inside KEY's domain."""
    name = axis.name.removeprefix("scale:")
    factors = target.axis_values(axis)
    for f in factors:
        domains_module.check_in(f"knobs.{axis.name}", f, domains_module.POSITIVE)
    own = [a for a in axes if a.name == name and a.kind != "categories"]
    values = target.axis_values(own[0]) if own else (float(scenario.get_knob(scn, name)),)
    domain = target.relaxed(scenario.DOMAINS[name])
    for value, f in ((min(values), min(factors)), (max(values), max(factors))):
        if not domain.ok(value * f):
            raise ValueError(f"knobs.{axis.name}={domains_module.fmt(f)}: {name}="
                             f"{domains_module.fmt(value)} x {domains_module.fmt(f)} = "
                             f"{domains_module.fmt(value * f)} must be {domain.describe()}")


# the float keys the plan's rules read (with dp, which follows from them)
_PLAN_KEYS = frozenset(k for r in plan.RULES if r.message is not None for k in r.reads) | {
    "system.gpus", *plan.DP_FROM}


def _check_plans(scn: scenario.Scenario, axes: tuple) -> None:
    """Every point of the listed float axes that the plan rules read (tp, pp,
    gpus, global batch, ...: the others cannot break a rule) is a plan
    `codesign estimate --set` would take: dp a whole number >= 1 and every rule
    of `plan.RULES` that `plan.validate` checks, evaluated on all the points at
    once; the first that fails raises what `estimate` says of it, naming the
    point. Random ranges are relaxed knobs and are not checked."""
    grid = [a for a in axes if a.kind == "values" and a.name in _PLAN_KEYS]
    if not grid:
        return
    columns = [c.ravel() for c in np.meshgrid(*(np.asarray(a.values, dtype=float)
                                                for a in grid), indexing="ij")]
    s = scenario.set_knobs(scn, {a.name: c for a, c in zip(grid, columns, strict=True)})
    m, p, sy = jax.tree.map(np.asarray, (s.model, s.plan, s.system))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (p.dp == np.round(p.dp)) & (p.dp >= 1.0)
        for rule in plan.RULES:
            if rule.message is not None:
                ok = ok & np.asarray(rule.holds(m, p, sy))
    bad = np.flatnonzero(~np.broadcast_to(ok, columns[0].shape))
    if not bad.size:
        return
    point = {a.name: float(c[bad[0]]) for a, c in zip(grid, columns, strict=True)}
    one = scenario.set_knobs(scn, point)
    try:
        if "parallel.dp" not in point:
            plan.check_data_parallel(one.system.gpus, one.plan.tp, one.plan.pp, one.plan.cp)
        plan.validate(one.plan, one.model, one.system.gpus)
    except ValueError as e:
        at = ", ".join(f"{k}={domains_module.fmt(v)}" for k, v in point.items())
        raise ValueError(f"knobs at {at}: {e}") from None


def _estimate_check(floats: tuple, categories: tuple, base_keys: tuple):
    """The estimate target's check: the axes, the plain float knobs' values
    against `scenario.DOMAINS`, every combo's scenario (loaded and validated),
    every plan its listed axes make (`_check_plans`), and the scaled values of
    every `scale:` axis in each."""
    plain = target.make_check("estimate", floats, categories, None, base_keys,
                              domains=scenario.DOMAINS)

    def check(base: dict, axes: tuple, directory: Path) -> None:
        plain(base, axes, directory)
        scaled = [a for a in axes if a.kind != "categories" and a.name.startswith("scale:")]
        for settings in target.all_settings(base, axes):
            scn = _scenario(settings, directory)
            _check_plans(scn, axes)
            for axis in scaled:
                _check_scaled(scn, axis, axes)

    return check


def _estimate_outputs(base: dict, directory: Path) -> tuple[str, ...]:
    fabric.default_prices()  # cached: build it outside the trace below, never inside
    scn = _scenario(base, directory)
    keys = jax.eval_shape(lambda s: step.outputs(step.estimate(s)), scn)
    return tuple(keys) + _ESTIMATE_EXTRA


def _estimate_build(settings: dict, directory: Path) -> PointFn:
    fabric.default_prices()  # cached: build it outside the trace, never inside
    scn0 = _scenario(settings, directory)

    def point(knobs: dict) -> dict:
        values = {k: v for k, v in knobs.items() if not k.startswith("scale:")}
        for k, factor in knobs.items():
            if k.startswith("scale:"):
                name = k.removeprefix("scale:")
                values[name] = values.get(name, scenario.get_knob(scn0, name)) * factor
        scn = scenario.set_knobs(scn0, values) if values else scn0
        est = step.estimate(scn)
        s = est.step
        need = network_roofline.needed_flop_per_byte(scn.system, scn.plan.dtype)
        roof = network_roofline.roofline(s, scn.system, scn.plan.dtype)
        none = {"wire_bytes": jnp.zeros(()), "flop_per_byte": jnp.zeros(())}
        roof = {d: roof.get(d, none) for d in _DIMENSIONS}
        return {**step.outputs(est),
                "bubble_fraction": safe_div(s.bubble_s, s.bubble_s + s.compute_s),
                "exposed_comm_fraction": safe_div(sum(s.exposed_s.values()), s.step_time_s),
                "micro_batches": scn.plan.micro_batches,
                "scale_up_needed_flop_per_byte": need["scale_up"],
                "scale_out_needed_flop_per_byte": need["scale_out"],
                **{f"wire_bytes_{d}": r["wire_bytes"] for d, r in roof.items()},
                **{f"flop_per_byte_{d}": r["flop_per_byte"] for d, r in roof.items()}}

    return point


def estimate_target() -> Target:
    """The whole step model of a scenario (`step.outputs(step.estimate(scn))`).

    base: `scenario` (a built-in name or a TOML path, relative to the spec;
    default: the default scenario), `overrides` (["section.key=value", ...]),
    and scenario tables ([base.parallel] tp = 8, ...). Float knobs are the
    scenario's float keys (`scenario.KNOBS`: parallel.tp, training.global_batch,
    system.scale_out_bandwidth_Bps, ...), set by `scenario.set_knobs` under
    trace (relaxed: integrality aside, each value inside the key's domain), or
    scaled from the combo's own value (`scale:system.scale_up_bandwidth_Bps =
    [0.5, 1, 2]`: a what-if that means the same across presets, and at 1 the
    elasticity with respect to the knob itself; the scaled values inside the
    key's domain); categorical knobs are any scenario key
    (system.preset, parallel.schedule, or a validated integer like parallel.tp),
    loaded and validated once per combo (`scenario` itself may be one). Outputs:
    `step.outputs` plus `bubble_fraction` (bubble / (compute + bubble)),
    `exposed_comm_fraction` (exposed communication / step time), `micro_batches`,
    and the network roofline of `network_roofline.roofline`: per dimension the bytes one GPU
    puts on its link per step (`wire_bytes_tp`, ...) and the hardware FLOPs per
    byte on the tier that judges it (`flop_per_byte_tp`, ...: the slow-tier
    bytes of a dimension that crosses domains; 0 = no traffic), against the FLOP
    per byte each tier needs to stay compute-bound (`network_roofline.needed_flop_per_byte`,
    peak / bandwidth per direction: `scale_up_needed_flop_per_byte`,
    `scale_out_needed_flop_per_byte`).
    """
    floats = scenario.KNOBS + tuple(f"scale:{k}" for k in scenario.KNOBS)
    categories = ("scenario",) + tuple(f"{s}.{k}" for s, keys in scenario.SCHEMA.items()
                                       for k in keys)
    base_keys = ("scenario", "overrides") + tuple(scenario.SCHEMA)
    return Target("estimate", "the step model of a scenario: step time, MFU, memory, "
                  "breakdown, goodput", floats, categories, _estimate_outputs,
                  _estimate_check(floats, categories, base_keys),
                  _estimate_build, _scenario_fingerprint)


# every target's outputs checked: none is written that is not a finite number
TARGETS: dict[str, Target] = {t.name: t for t in (
    collective_target(), reliability_target(), ecmp_target(), fabric_target(),
    estimate_target())}
