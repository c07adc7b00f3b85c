"""Scenario files (TOML) <-> pytrees, with validation that names the key.

A scenario has five tables; explicit keys override a preset:

    [model]       preset, layers, hidden, heads, kv_heads, ffn_hidden, seq_len, vocab,
                  moe_layers, experts, shared_experts, top_k, expert_ffn_hidden,
                  gated, tied_embeddings, attention (mha, mla), attention_kernel
                  (flash, naive), dropout, and for MLA q_lora_rank, kv_lora_rank,
                  qk_head_dim, qk_rope_head_dim, v_head_dim
    [training]    global_batch, micro_batch, moe_imbalance, recompute, dtype (the precision recipe:
                  fp32, fp16, bf16, fp8), tokens, and <part>_dtype overriding one part
                  of the recipe (plan.PRECISION_PARTS)
    [parallel]    tp, pp, dp, cp, ep, interleave, schedule, zero, sequence_parallel,
                  moe_node_limit, dp_bucket_bytes, reshard_after_forward, comm_sm_fraction,
                  zero_shard_size (HSDP), fsdp_prefetch_layers, tp_overlap
    [system]      preset, gpus, scale_up_domain, gpus_per_node, topology (two_tier, clos,
                  rail_only, torus), pod_size and oversubscription (a clos's only),
                  matmul_efficiency, attention_efficiency, hbm_efficiency,
                  kernel_overhead_s, hbm_reserve_bytes, routing (ecmp, spray,
                  adaptive), placement, and for each tier
                  (scale_up_, scale_out_): bandwidth_Bps, latency_s, efficiency, reduction_Bps
    [reliability] every field of `reliability.Reliability`

`system.gpus` and `parallel.dp` determine each other (gpus = dp tp pp cp): give
either. Every numeric key has a domain (`_domains.DOMAINS`: positive, integer,
in (0, 1], within a physical bound); a value outside it, a key of the wrong
type or an unreadable file is a `ValueError` that names the key (or file), the
value and the domain. `check_outputs` rejects an estimate with a non-finite
output or an MFU above 1, and `Scenario.checked` does the domain checks on
traced values (`equinox.error_if`; `step.estimate` calls it). Built-in
scenarios (`BUILTIN`) are TOML files shipped in codesign/scenarios/;
`load(None)` is the default (GPT-3 175B on 1024 A100s).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import tomllib
from importlib import resources
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _checks, _domains, hardware, strategies, workload
from .hardware import System, Tier
from .plan import (
    COMM_SM_FRACTION,
    DEFAULT_PLACEMENT,
    FSDP_PREFETCH_LAYERS,
    MOE_IMBALANCE,
    PRECISION_PARTS,
    Plan,
    data_parallel,
    recipe,
    validate,
)
from .reliability import Reliability
from .units import parse_quantity
from .workload import Transformer

_MODEL_FLOATS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab",
                 "moe_layers", "experts", "shared_experts", "top_k", "expert_ffn_hidden",
                 "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim")
_PLAN_FLOATS_KEYS = ("tp", "pp", "dp", "cp", "ep", "interleave", "moe_node_limit",
                     "dp_bucket_bytes", "comm_sm_fraction", "zero_shard_size",
                     "fsdp_prefetch_layers", "tp_overlap")
_TIER_FIELDS = ("bandwidth_Bps", "latency_s", "efficiency", "reduction_Bps")
_CHIP_FLOATS = ("matmul_efficiency", "attention_efficiency", "hbm_efficiency",
                "kernel_overhead_s", "hbm_reserve_bytes")
_RELIABILITY_FIELDS = tuple(f.name for f in dataclasses.fields(Reliability))

SCHEMA: dict[str, dict[str, type | tuple]] = {
    "model": {"preset": str, **dict.fromkeys(_MODEL_FLOATS, float), "gated": bool,
              "tied_embeddings": bool, "attention": str, "attention_kernel": str,
              "dropout": bool},
    "training": {"global_batch": float, "micro_batch": float, "moe_imbalance": float,
                 "recompute": str, "dtype": str,
                 "tokens": float, **{f"{part}_dtype": str for part in PRECISION_PARTS}},
    "parallel": {**dict.fromkeys(_PLAN_FLOATS_KEYS, float),
                 "schedule": str, "zero": int, "sequence_parallel": bool,
                 "reshard_after_forward": bool},
    "system": {"preset": str, **dict.fromkeys(
        ("gpus", "scale_up_domain", "gpus_per_node", "pod_size", "oversubscription",
         *_CHIP_FLOATS), float),
        **{f"{tier}_{f}": float for tier in ("scale_up", "scale_out") for f in _TIER_FIELDS},
        "topology": str, "placement": str, "routing": str},
    "reliability": dict.fromkeys(_RELIABILITY_FIELDS, float),
}

BUILTIN = ("default", "megatron-8.3b", "megatron-1t", "llama3-405b", "deepseek-v3")


class Scenario(eqx.Module):
    model: Transformer
    plan: Plan
    system: System
    reliability: Reliability
    tokens: jax.Array  # tokens to train on (0 = not set)
    name: str = eqx.field(static=True, default="scenario")

    def checked(self) -> Scenario:
        """This scenario, its leaves guarded by `equinox.branched_error_if`: under
        jit/vmap/grad a knob outside its domain (`_domains.DOMAINS`, integrality
        aside) raises an error naming the key instead of flowing on as NaN."""
        invalid, index, messages = _domains.traced_error(
            {k: _GETTERS[k](self) for k in knobs(self)}, _relations(self.model))
        return eqx.branched_error_if(self, invalid, index, messages)


def _relations(m: Transformer) -> list:
    """The model's rules between keys that keep the step model meaningful, as
    (violated, message) pairs for the traced check (load checks them concretely)."""
    moe = m.moe_layers > 0
    return [(m.moe_layers > m.layers, "model.moe_layers must not exceed model.layers"),
            (m.kv_heads > m.heads, "model.kv_heads must not exceed model.heads"),
            (moe & (m.experts < 1), "model.experts must be at least 1 in an MoE model"),
            (moe & (m.top_k < 1), "model.top_k must be at least 1 in an MoE model"),
            (moe & (m.top_k > m.experts), "model.top_k must not exceed model.experts"),
            (moe & (m.expert_ffn_hidden < 1),
             "model.expert_ffn_hidden must be at least 1 in an MoE model")]


# ----------------------------------------------------------------- knobs
def _path(*names):
    """A getter of the leaf at `scn.<names[0]>.<names[1]>...`."""
    return lambda scn: functools.reduce(getattr, names, scn)


_SYSTEM_FLOATS = ("gpus", "scale_up_domain", "gpus_per_node")
# the topology's own float keys (a Clos's pods): knobs of the scenarios whose
# topology reads them
_TOPOLOGY_FLOATS = ("pod_size", "oversubscription")
_GETTERS = {
    **{f"model.{k}": _path("model", k) for k in _MODEL_FLOATS},
    "training.global_batch": _path("plan", "global_batch"),
    "training.micro_batch": _path("plan", "micro_batch"),
    "training.moe_imbalance": _path("plan", "moe_imbalance"),
    "training.tokens": _path("tokens"),
    **{f"parallel.{k}": _path("plan", k) for k in _PLAN_FLOATS_KEYS},
    **{f"system.{k}": _path("system", k) for k in _SYSTEM_FLOATS},
    **{f"system.{k}": _path("system", "topology", k) for k in _TOPOLOGY_FLOATS},
    **{f"system.{k}": _path("system", "chip", k) for k in _CHIP_FLOATS},
    **{f"system.{tier}_{f}": _path("system", tier, f)
       for tier in ("scale_up", "scale_out") for f in _TIER_FIELDS},
    **{f"reliability.{k}": _path("reliability", k) for k in _RELIABILITY_FIELDS},
}
KNOBS = tuple(_GETTERS)  # every float knob, by its scenario key


def _absent(scn: Scenario) -> frozenset:
    """The topology keys of `KNOBS` that `scn`'s topology does not read."""
    own = scn.system.topology.params()
    return frozenset(f"system.{k}" for k in _TOPOLOGY_FLOATS if k not in own)


def knobs(scn: Scenario) -> tuple:
    """The float knobs of `scn`: `KNOBS` less the topology keys its topology
    does not read (a Clos's pod_size and oversubscription)."""
    absent = _absent(scn)
    return tuple(k for k in KNOBS if k not in absent)


def get_knob(scn: Scenario, name: str) -> jax.Array:
    """The value of the float knob `name` (a scenario key, `KNOBS`) in `scn`."""
    if name not in _GETTERS:
        raise ValueError(f"knob {name!r} is unknown; knobs are scenario keys such as "
                         "system.scale_out_bandwidth_Bps, parallel.tp, training.micro_batch")
    if name in _absent(scn):
        raise ValueError(f"{name} is not a knob of topology {scn.system.topology.name}: only "
                         f"{strategies.readers(name.split('.', 1)[1])} reads it")
    return _GETTERS[name](scn)


def set_knobs(scn: Scenario, values: dict) -> Scenario:
    """A copy of `scn` with the float knobs in `values` replaced (jit/vmap/grad safe).

    Unless `parallel.dp` is among them, dp follows as system.gpus / (tp pp cp);
    if it is, system.gpus follows as dp tp pp cp.
    """
    for name, value in values.items():
        get_knob(scn, name)
        scn = eqx.tree_at(_GETTERS[name], scn, jnp.asarray(value, dtype=float))
    p = scn.plan
    if "parallel.dp" in values:
        scn = eqx.tree_at(lambda s: s.system.gpus, scn, p.dp * p.tp * p.pp * p.cp)
    else:
        scn = eqx.tree_at(lambda s: s.plan.dp, scn,
                          data_parallel(scn.system.gpus, p.tp, p.pp, p.cp))
    return scn


# ----------------------------------------------------------------- loading
def _builtin_path(name: str):
    return resources.files("codesign") / "scenarios" / f"{name}.toml"


def read_toml(path: Path, what: str = "scenario") -> dict:
    """The tables of a TOML file; a file that cannot be read, decoded or parsed is
    a one-line `ValueError` naming it."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} file {str(path)!r} is not UTF-8 text (byte {e.start}: "
                         f"{e.reason}); is it a TOML file?") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{what} file {str(path)!r} is not valid TOML: {e}") from None
    except OSError as e:
        raise ValueError(f"{what} file {str(path)!r} cannot be read: "
                         f"{e.strerror or e}") from None


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
                             f" must be {_domains.DOMAINS[name].describe()}")
        _domains.check(name, float(value))
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
            out.setdefault(section, {})[key] = _coerce(section, key, value)
    for item in overrides or ():
        section, key, value = parse_override(item) if isinstance(item, str) else item
        out.setdefault(section, {})[key] = _coerce(section, key, value)
    return out


def _tier(name: str, **kw) -> Tier:
    """A Tier whose errors name the scenario key (system.scale_out_bandwidth_Bps=...)."""
    try:
        return Tier(**kw)
    except ValueError as e:
        raise ValueError(f"system.{name}_{e}") from None


def _topology(t: dict, base: System, domain, late: frozenset) -> strategies.Topology:
    """The topology of a [system] table: `system.topology` parsed (default: the
    preset's) with its own keys (a Clos's pod_size and oversubscription), for a
    scale-up domain of `domain` GPUs (a torus takes its shape from it).

    A topology key its topology does not read is refused (a one-line
    ValueError naming the key and the topology), unless it was given in an
    earlier layer than the topology itself (preset < scenario or system file <
    `--set` overrides, the keys in `late`): `--set system.topology=rail_only` on
    a scenario whose Clos has pods replaces that Clos, pods and all."""
    layer = lambda k: 2 if k in late else 1  # noqa: E731 - where key k was given
    cls = strategies.topology_class(t["topology"]) if "topology" in t else type(base.topology)
    top = layer("topology") if "topology" in t else 0
    reads = strategies.float_params(cls)
    params = {k: t[k] for k in _TOPOLOGY_FLOATS
              if k in t and (k in reads or layer(k) >= top)}
    if cls is type(base.topology):
        if not params and float(domain) == float(base.scale_up_domain):
            return base.topology  # the preset's own (a TPU's cited torus shape)
        params = {**base.topology.params(), **params}
    return cls.of(domain, **params)


def _system(t: dict, late: frozenset = frozenset()) -> System:
    if "preset" in t and Path(str(t["preset"])).suffix == ".toml":
        raise ValueError(f"system.preset={t['preset']!r}: pass a system file with --system")
    base = hardware.system(t.get("preset", "dgx-a100"))
    tiers = {}
    for tier in ("scale_up", "scale_out"):
        old: Tier = getattr(base, tier)
        kw = {f: t.get(f"{tier}_{f}", getattr(old, f)) for f in _TIER_FIELDS}
        tiers[tier] = _tier(tier, **kw, in_network_efficiency=old.in_network_efficiency)
    chip = base.chip
    for k in _CHIP_FLOATS:
        if k in t:
            chip = eqx.tree_at(lambda c, k=k: getattr(c, k), chip, _checks.as_float(t[k]))
    type(chip).__check_init__(chip)
    domain = t.get("scale_up_domain", base.scale_up_domain)
    return System(chip, t.get("gpus", base.gpus), domain, tiers["scale_up"], tiers["scale_out"],
                  t.get("gpus_per_node", base.gpus_per_node),
                  topology=_topology(t, base, domain, late), name=base.name,
                  routing=t.get("routing", base.routing))


def _model(t: dict) -> Transformer:
    base = workload.model(t["preset"]) if "preset" in t else None
    if base is None:
        missing = [k for k in ("layers", "hidden", "heads", "seq_len", "vocab") if k not in t]
        if missing:
            keys = ", ".join("model." + k for k in missing)
            raise ValueError(f"[model] needs a preset or {keys}")
    get = lambda k: t.get(k, getattr(base, k) if base is not None else None)  # noqa: E731
    statics = {"gated": False, "tied_embeddings": True, "attention": "mha",
               "attention_kernel": "flash", "dropout": False}
    return Transformer(
        get("layers"), get("hidden"), get("heads"), get("seq_len"), get("vocab"),
        kv_heads=get("kv_heads"), ffn_hidden=get("ffn_hidden"),
        **{k: get(k) or 0 for k in _MODEL_FLOATS[7:]},
        **{k: t.get(k, getattr(base, k) if base is not None else v)
           for k, v in statics.items()},
        name=base.name if base is not None else "custom")


def _plan(tr: dict, pa: dict, system: System, placement: str | None) -> Plan:
    tp, pp, cp = pa.get("tp", 1.0), pa.get("pp", 1.0), pa.get("cp", 1.0)
    if "dp" in pa:
        dp = pa["dp"]
    else:
        dp = data_parallel(float(system.gpus), tp, pp, cp)
        if dp != int(dp) or dp < 1:
            raise ValueError(f"system.gpus={float(system.gpus):g} is not a multiple of "
                             f"tp*pp*cp={tp * pp * cp:g}; set parallel.dp or system.gpus")
    micro = tr.get("micro_batch", 1.0)
    order = tuple(s.strip() for s in placement.split(",")) if placement else DEFAULT_PLACEMENT
    return Plan(dp, tp, pp, cp, pa.get("ep", 1.0), micro, tr.get("global_batch", dp * micro),
                pa.get("interleave", 1.0), pa.get("moe_node_limit", 0.0),
                pa.get("dp_bucket_bytes", 25 * 2.0**20),
                tr.get("moe_imbalance", MOE_IMBALANCE),
                pa.get("comm_sm_fraction", COMM_SM_FRACTION), pa.get("zero_shard_size", 0.0),
                pa.get("fsdp_prefetch_layers", FSDP_PREFETCH_LAYERS), pa.get("tp_overlap", 0.0),
                schedule=pa.get("schedule", "interleaved" if pa.get("interleave", 1) > 1
                                else "1f1b"),
                zero=pa.get("zero", 0), sequence_parallel=pa.get("sequence_parallel", False),
                recompute=tr.get("recompute", "none"),
                reshard_after_forward=pa.get("reshard_after_forward", True),
                dtype=tr.get("dtype", "bf16"), placement=order,
                precision=recipe(tr.get("dtype", "bf16"), **{
                    part: tr[f"{part}_dtype"] for part in PRECISION_PARTS
                    if f"{part}_dtype" in tr}))


def from_tables(tables: dict, overrides=(), name: str = "scenario") -> Scenario:
    """Build and validate a Scenario from raw TOML tables plus `section.key=value` overrides."""
    t = _merge(tables, overrides)
    items = (parse_override(o) if isinstance(o, str) else o for o in overrides or ())
    system = _system(t["system"], frozenset(k for section, k, _ in items if section == "system"))
    if "dp" in t["parallel"] and "gpus" not in t["system"]:
        pa = t["parallel"]
        gpus = pa["dp"] * pa.get("tp", 1.0) * pa.get("pp", 1.0) * pa.get("cp", 1.0)
        if not _domains.DOMAINS["system.gpus"].ok(gpus):
            raise ValueError(f"system.gpus=dp*tp*pp*cp={gpus:g} must be "
                             f"{_domains.DOMAINS['system.gpus'].describe()}")
        system = eqx.tree_at(lambda s: s.gpus, system, _checks.as_float(gpus))
        System.__check_init__(system)
    model = _model(t["model"])
    plan = _plan(t["training"], t["parallel"], system, t["system"].get("placement"))
    validate(plan, model, system.gpus)
    reliability = Reliability(**t["reliability"])
    tokens = t["training"].get("tokens", 0.0)
    _checks.non_negative("training.tokens", tokens)
    return Scenario(model, plan, system, reliability, _checks.as_float(tokens), name)


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
    return extra


def system(spec: str, default_preset: str = "dgx-a100") -> System:
    """A System from a preset name or a system TOML file alone (no scenario):
    what `codesign collective --system` takes. A file without `preset` builds
    on `default_preset`."""
    table = {"preset": default_preset, **system_table(spec)}
    return _system(_merge({"system": table}, ())["system"])


def load(source: str | Path | None = None, overrides=(), system: str | None = None) -> Scenario:
    """A scenario from a path or built-in name (None: the default), with
    `section.key=value` overrides and an optional `system` preset name or
    system TOML file (e.g. written by `codesign calibrate --out`)."""
    tables = read(source)
    if not isinstance(tables.get("system", {}), dict):
        raise ValueError(f"system={tables['system']!r} must be a table ([system])")
    if system is not None:
        tables = {**tables, "system": {**tables.get("system", {}), **system_table(system)}}
    name = "default" if source is None else str(source)
    name = name if name in BUILTIN else Path(name).stem
    return from_tables(tables, overrides, name)


# ----------------------------------------------------------------- outputs
# output -> the inputs it follows from most directly (named when it is not finite)
_LIKELY_INPUTS = {
    "time_to_train_s": "training.tokens, reliability.gpu_mtbf_s, reliability.restart_s, "
                       "system.gpus",
    "gpu_hours": "training.tokens, reliability.gpu_mtbf_s, system.gpus",
    "goodput": "reliability.gpu_mtbf_s, reliability.restart_s, reliability.straggler_*, "
               "system.gpus",
    "effective_training_time_fraction": "reliability.gpu_mtbf_s, reliability.restart_s, "
                                        "reliability.checkpoint_write_s, system.gpus",
    "mtbf_s": "reliability.gpu_mtbf_s, system.gpus",
    "fabric_cost_usd": "system.gpus, system.pod_size, system.oversubscription, "
                       "system.scale_out_bandwidth_Bps, system.scale_up_bandwidth_Bps, "
                       "system.scale_up_domain",
    "fabric_power_w": "system.gpus, system.pod_size, system.oversubscription, "
                      "system.scale_out_bandwidth_Bps",
}
_STEP_INPUTS = ("model sizes, training.global_batch, training.micro_batch, parallel.*, "
                "system bandwidths, latencies and efficiencies")


def check_outputs(out: dict, overrides=()) -> None:
    """Raise a one-line `ValueError` if an estimate's outputs ({key: scalar}, as
    `step.outputs`) hold a non-finite number or an MFU/HFU above 1, naming the
    output, the inputs it follows from, and the `--set` overrides given."""
    given = [o if isinstance(o, str) else f"{o[0]}.{o[1]}={o[2]!r}" for o in overrides]
    hint = f" (overrides: {', '.join(given)})" if given else ""
    for key, value in out.items():
        v = _checks.concrete(value)
        if v is None:
            continue
        negative = bool(np.any(v <= 0)) if key == "step_time_s" else bool(np.any(v < 0))
        if negative and bool(np.all(np.isfinite(v))):
            raise ValueError(f"the estimate's {key}={_checks.fmt(v)} is impossible (a negative "
                             f"or zero quantity); check {_LIKELY_INPUTS.get(key, _STEP_INPUTS)}"
                             f"{hint}")
        if not bool(np.all(np.isfinite(v))):
            inputs = _LIKELY_INPUTS.get(key, _STEP_INPUTS)
            raise ValueError(f"the estimate's {key}={_checks.fmt(v)} is not finite: an input is "
                             f"beyond what the model can represent; check {inputs}{hint}")
        if key in ("mfu", "hfu") and bool(np.any(v > 1.0 + 1e-9)):
            raise ValueError(f"the estimate's {key}={_checks.fmt(v)} exceeds 1 (more FLOP/s than "
                             f"the chip's peak): check system.matmul_efficiency and the "
                             f"model and plan keys{hint}")
