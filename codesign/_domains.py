"""The domain of every numeric scenario key: one table, checked on every input path.

A domain is an interval [lo, hi] (lo excluded when `lo_open`), optionally
integers only. Bounds are physical or generous practical limits (10 million
GPUs, 1 PB/s links, 1 s latencies): a value outside is a typo or a unit slip,
and inside them every output of the model stays a finite float64. Adding a
scenario key is one line in `DOMAINS`; `tests/test_validation.py` fails when a
float key of `scenario.SCHEMA` has none.

Concrete values are checked with `check` (a `ValueError` naming the key, the
value and the domain); traced values (inside jit/vmap/grad) by `traced_error`,
which relaxes counts (integrality ignored; a count of at least 1 need only be
positive, as the optimiser and finite differences use it), allows
`TRACED_SLACK` beyond a nonzero bound, and skips the keys in `RELATIONAL`
(derived or constrained elsewhere).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

MAX_GPUS = 1e7  # any count of GPUs or ranks
MAX_WIDTH = 1e8  # hidden sizes, sequence lengths, vocabularies
MIN_BPS, MAX_BPS = 1e3, 1e15  # 1 KB/s .. 1 PB/s per direction
MAX_LATENCY_S = 1.0


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
        """Elementwise membership of a NumPy value (NaN and inf are outside)."""
        v = np.asarray(v, dtype=float)
        with np.errstate(invalid="ignore"):
            inside = (v > self.lo) if self.lo_open else (v >= self.lo)
            inside = inside & (v <= self.hi) & np.isfinite(v)
            if self.integer:
                inside = inside & (v == np.round(v))
        return inside

    def ok_traced(self, v):
        """Membership of a jnp value with counts relaxed (as the optimiser and finite
        differences use them): integrality ignored, and a count of at least 1 need
        only be positive."""
        lo, hi = self.lo * (1 - TRACED_SLACK), self.hi * (1 + TRACED_SLACK)
        if self.integer and self.lo >= 1:
            inside = v > 0
        else:
            inside = (v > lo) if self.lo_open else (v >= lo)
        return inside & (v <= hi) & jnp.isfinite(v)

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        return f"{kind} in {'(' if self.lo_open else '['}{_g(self.lo)}, {_g(self.hi)}]"

    def clip(self, lo: float, hi: float) -> tuple[float, float]:
        """[lo, hi] intersected with the domain (for default optimiser ranges)."""
        return max(lo, self.lo), min(hi, self.hi)


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

# key -> domain; docs/inputs.md renders this table (`table_markdown`)
DOMAINS: dict[str, Domain] = {
    "model.layers": count(1e4),
    "model.hidden": count(MAX_WIDTH),
    "model.heads": count(1e5),
    "model.kv_heads": count(1e5),
    "model.ffn_hidden": count(MAX_WIDTH),
    "model.seq_len": count(MAX_WIDTH),
    "model.vocab": count(MAX_WIDTH),
    "model.moe_layers": count(1e4, lo=0.0),
    "model.experts": count(1e5, lo=0.0),
    "model.shared_experts": count(1e4, lo=0.0),
    "model.top_k": count(1e5, lo=0.0),
    "model.expert_ffn_hidden": count(MAX_WIDTH, lo=0.0),
    **{f"model.{k}": count(MAX_WIDTH, lo=0.0) for k in (
        "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim")},
    "training.global_batch": count(1e9),
    "training.micro_batch": count(1e9),
    "training.tokens": interval(0.0, 1e18),
    "training.moe_imbalance": interval(1.0, 1e3),  # busiest expert rank / mean
    "parallel.tp": count(MAX_GPUS),
    "parallel.pp": count(MAX_GPUS),
    "parallel.dp": count(MAX_GPUS),
    "parallel.cp": count(MAX_GPUS),
    "parallel.ep": count(MAX_GPUS),
    "parallel.interleave": count(1e4),
    "parallel.moe_node_limit": count(MAX_GPUS, lo=0.0),
    "parallel.dp_bucket_bytes": interval(1.0, 1e15),
    "parallel.comm_sm_fraction": Domain(0.0, 0.99),  # below 1: some SMs compute
    "parallel.zero_shard_size": count(MAX_GPUS, lo=0.0),  # 0 = shard over the whole group
    "parallel.fsdp_prefetch_layers": count(1e4, lo=0.0),
    "parallel.tp_overlap": UNIT,
    "system.gpus": count(MAX_GPUS),
    "system.scale_up_domain": count(MAX_GPUS),
    "system.gpus_per_node": count(MAX_GPUS),
    "system.pod_size": interval(1.0, 1e9),  # 1e9 = one pod, no oversubscription
    "system.oversubscription": interval(1.0, 1e3),
    "system.matmul_efficiency": EFFICIENCY,
    "system.attention_efficiency": EFFICIENCY,
    "system.hbm_efficiency": EFFICIENCY,
    "system.kernel_overhead_s": interval(0.0, 1.0),
    "system.hbm_reserve_bytes": interval(0.0, 1e15),
    **{f"system.{tier}_{field}": domain for tier in ("scale_up", "scale_out")
       for field, domain in (("bandwidth_Bps", BANDWIDTH), ("latency_s", LATENCY),
                             ("efficiency", EFFICIENCY),
                             # 1e30 = reduction free (calibrate's folded gamma)
                             ("reduction_Bps", Domain(MIN_BPS, 1e30)))},
    "reliability.straggler_q": UNIT,
    "reliability.straggler_slowdown": interval(1.0, 1e3),
    "reliability.straggler_sigma": interval(0.0, 5.0),
    "reliability.gpu_mtbf_s": Domain(0.0, 1e12, lo_open=True),
    **{f"reliability.share_{c}": UNIT
       for c in ("gpu", "hbm", "nic", "switch_cable", "host", "software")},
    "reliability.checkpoint_write_s": DURATION,
    "reliability.storage_Bps": BANDWIDTH,
    "reliability.restart_s": DURATION,
    "reliability.checkpoint_interval_s": DURATION,
    "reliability.spare_fraction": UNIT,
    "reliability.replacement_s": DURATION,
    "reliability.dual_homed": UNIT,
    "reliability.tor_share": UNIT,
}

# constrained by other keys, not by a fixed domain, when traced: dp follows
# gpus / (tp pp cp) in `scenario.set_knobs` and the optimiser keeps dp >= 1 as
# a constraint it may cross while it searches
RELATIONAL = ("parallel.dp",)


def _fmt(v) -> str:
    v = np.asarray(v)
    return f"{v.item():g}" if v.size == 1 else np.array2string(v)


def check(key: str, value) -> None:
    """Raise `ValueError("{key}={value} must be {domain}")` when `value` is outside."""
    if key in DOMAINS:
        check_in(key, value, DOMAINS[key])


def check_in(name: str, value, domain: Domain) -> None:
    """Raise `ValueError("{name}={value} must be {domain}")` when `value` is outside."""
    v = np.asarray(value, dtype=float)
    if not np.all(domain.ok(v)):
        raise ValueError(f"{name}={_fmt(v)} must be {domain.describe()}")


def check_range(key: str, lo: float, hi: float) -> None:
    """An optimiser range LO:HI of `key` must lie in its domain."""
    domain = DOMAINS.get(key)
    if domain is None:
        return
    interval = dataclasses.replace(domain, integer=False)  # integrality: the optimiser's
    for v in (lo, hi):
        if not interval.ok(v):
            raise ValueError(f"bounds {key}={lo:g}:{hi:g}: {key} must be "
                             f"{domain.describe()}")


def traced_error(values: dict, relations=()):
    """(invalid, index, messages) over `values` ({key: jnp scalar or array}) and
    `relations` ((violated, message) pairs): the inputs of
    `equinox.branched_error_if` (the first offending key wins)."""
    keys = [k for k in values if k in DOMAINS and k not in RELATIONAL]
    bad = [~jnp.all(DOMAINS[k].ok_traced(values[k])) for k in keys]
    messages = [f"{k} must be {DOMAINS[k].describe()} (a traced value is outside)"
                for k in keys]
    bad += [jnp.any(violated) for violated, _ in relations]
    messages += [message for _, message in relations]
    bad = jnp.stack(bad)
    return jnp.any(bad), jnp.argmax(bad), tuple(messages)


def table_markdown() -> str:
    """The table of domains in docs/inputs.md: one row per distinct domain, its keys listed."""
    groups: dict[str, list[str]] = {}
    for key, domain in DOMAINS.items():
        groups.setdefault(domain.describe(), []).append(key)
    rows = ["| domain | keys |", "|---|---|"]
    rows += [f"| {d} | {', '.join(f'`{k}`' for k in keys)} |" for d, keys in groups.items()]
    return "\n".join(rows)
