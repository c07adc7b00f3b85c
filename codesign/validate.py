"""The honesty table: the model beside every published end-to-end figure we know.

Each `Check` is one published number (a throughput, an iteration time, an MFU,
GPU-hours, a collective's bus bandwidth; the table is `_published_runs.CHECKS`)
with its source, the scenario that
reproduces the published configuration (and the assumptions where the
publication is silent), and whether the figure *calibrates* a model constant
(then the row reproduces it by construction) or is a prediction. A row that is
off stays in, with the reason where we know it.

Rows are evaluated eagerly (no jit): each has its own static structure, and an
eager estimate costs ~0.1 s once JAX's primitives are warm, against seconds
to compile one.
"""

from __future__ import annotations

import dataclasses
import json
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import files, output_checks, presets
from . import scenario as scenario_lib
from . import uncertainty as uncertainty_lib
from ._published_runs import AUTOMODEL_SOURCE as AUTOMODEL_SOURCE
from ._published_runs import BRIDGE_2606_SOURCE as BRIDGE_2606_SOURCE
from ._published_runs import BRIDGE_2608_SOURCE as BRIDGE_2608_SOURCE
from ._published_runs import BRIDGE_26041_SOURCE as BRIDGE_26041_SOURCE
from ._published_runs import BRIDGE_SKILL_SOURCE as BRIDGE_SKILL_SOURCE
from ._published_runs import BRIDGE_SOURCE as BRIDGE_SOURCE
from ._published_runs import CHECKS as CHECKS
from ._published_runs import COLLECTIVE_MEASURES as COLLECTIVE_MEASURES
from ._published_runs import DSV3_STEPS as DSV3_STEPS
from ._published_runs import H100_GEMM_ROWS as H100_GEMM_ROWS
from ._published_runs import MAXTEXT_SOURCE as MAXTEXT_SOURCE
from ._published_runs import MCORE_DSV3_GUIDE_SOURCE as MCORE_DSV3_GUIDE_SOURCE
from ._published_runs import MCORE_DSV3_STEPS_SOURCE as MCORE_DSV3_STEPS_SOURCE
from ._published_runs import MEASURES as MEASURES
from ._published_runs import NUMA_FIT_ROWS as NUMA_FIT_ROWS
from ._published_runs import SETS as SETS
from ._published_runs import TIME_MEASURES as TIME_MEASURES
from ._published_runs import TORCHTITAN_SOURCE as TORCHTITAN_SOURCE
from ._published_runs import Check as Check
from .model import collectives, hardware, stacks, traffic
from .model import step as step_lib
from .model.hardware import System
from .model.plan import Plan
from .model.relax import EXACT
from .model.workload import Transformer


def with_matmul_efficiency(check: Check, matmul_efficiency: float) -> Check:
    """`check` with its system's [system] matmul_efficiency set."""
    return dataclasses.replace(check, tables={**check.tables, "system": {
        **check.tables["system"], "matmul_efficiency": matmul_efficiency}})


def mean_log_error(checks, matmul_efficiency=None) -> float:
    """The mean log of the step-time ratio's inverse over `checks`
    (log(predicted / published) for a rate, its negative for a time: positive
    where the model is too fast), at their own systems or at a [system]
    matmul_efficiency given."""
    logs = []
    for c in checks:
        if matmul_efficiency is not None:
            c = with_matmul_efficiency(c, matmul_efficiency)
        sign = -1.0 if c.measure in TIME_MEASURES else 1.0
        logs.append(sign * math.log(predict(c)[0] / c.published))
    return sum(logs) / len(logs)


def calibrate_matmul_efficiency(model: Transformer, plan: Plan, system: System,
                                target_flops_per_s_per_gpu: float, *, hardware: bool = True,
                                iterations: int = 40) -> float:
    """The `chip.matmul_efficiency` at which `step` reports the target per-GPU
    throughput (hardware FLOPs, or model FLOPs when `hardware=False`). Bisection:
    throughput rises monotonically with the efficiency."""
    run = jax.jit(lambda e: step_lib.step(model, plan, eqx.tree_at(
        lambda s: s.chip.matmul_efficiency, system, e)))

    def throughput(e):
        r = run(jnp.asarray(e))
        return float(r.hardware_flops_per_s_per_gpu if hardware
                     else r.model_flops_per_s_per_gpu)

    lo, hi = 1e-3, 1.0
    if throughput(hi) < target_flops_per_s_per_gpu:
        raise ValueError(f"target={target_flops_per_s_per_gpu:g} FLOP/s per GPU is out of "
                         "reach even at matmul_efficiency=1")
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if throughput(mid) < target_flops_per_s_per_gpu else (lo, mid)
    return 0.5 * (lo + hi)


def fit_matmul_efficiency(checks, start=0.6, lo=0.05, hi=1.0, tolerance=1e-5,
                          iterations=16) -> float:
    """The [system] matmul_efficiency at which `checks` are right on average
    (`mean_log_error` 0): secant steps in log efficiency from `start` (a
    compute-bound rate moves in proportion to the efficiency: the first step
    assumes so), kept inside [lo, hi]."""
    x0, f0 = math.log(start), mean_log_error(checks, start)
    x1 = min(max(x0 - f0, math.log(lo)), math.log(hi))
    for _ in range(iterations):
        f1 = mean_log_error(checks, math.exp(x1))
        if abs(f1) < tolerance or f1 == f0:
            break
        x0, f0, x1 = x1, f1, min(max(x1 - f1 * (x1 - x0) / (f1 - f0), math.log(lo)),
                                 math.log(hi))
    return math.exp(x1)


# The constants fitted to end-to-end rows (DESIGN's rule: one per chip family
# and mechanism, on at most a third of its rows): the sustained matmul
# efficiencies, each carried by the presets of its chip and those that borrow it.
FITTED = {"H100-class matmul_efficiency": hardware.H100_MATMUL_EFFICIENCY,
          "A100 matmul_efficiency": hardware.A100_MATMUL_EFFICIENCY,
          "V100 matmul_efficiency": hardware.V100_MATMUL_EFFICIENCY}


def fit_numa_unbound_factor(checks=CHECKS, lo=1.0, hi=4.0, iterations=14) -> float:
    """The `stacks.NUMA_UNBOUND_FACTOR` at which the model's ratio of the two
    `NUMA_FIT_ROWS` (unbound, then bound: a rate each) is the published one:
    the unbound row's host seconds per call set to the bound host's x the
    factor. Bisection: the unbound row slows as the factor grows."""
    unbound, bound = (next(c for c in checks if c.name == n) for n in NUMA_FIT_ROWS)
    target = bound.published / unbound.published
    scn = scenario_lib.from_tables(bound.tables)
    per_call = stacks.host_call_s(scn.plan.stack.host_launch_s, scn.plan.host, True)
    at_bound = predict(bound)[0]
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        tables = {**unbound.tables, "training": {**unbound.tables["training"],
                                                 "host_launch_s": per_call * mid}}
        ratio = at_bound / predict(dataclasses.replace(unbound, tables=tables))[0]
        lo, hi = (mid, hi) if ratio < target else (lo, mid)
    return 0.5 * (lo + hi)


def carries(check: Check, value: float) -> bool:
    """Whether `check`'s system carries the fitted constant `value`: its
    preset's chip has that matmul efficiency and the row does not set its own."""
    if check.collective is not None or "matmul_efficiency" in check.tables["system"]:
        return False
    chip = presets.preset(check.tables["system"]["preset"]).system.chip
    return abs(float(chip.matmul_efficiency) - value) < 1e-12


def cross_validate(checks=CHECKS, rows=None) -> tuple[list[dict], list[str]]:
    """Each source set predicted with every constant it helped fit refitted
    without it: its calibration rows of a constant left out, the constant is
    fitted on that constant's other calibration rows, or, where none are
    left, on the other sets' rows of the same chip family (a leave-one-set-out
    fit); where no other set has such rows, the set's rows that carry it get
    no cross-validated value ("only this set fits it"). Returns `run`'s rows
    with `cross_error` (NaN for rows without one: collectives, and constants
    only their own set fits) and `cross_note`, and one line per refit."""
    rows = run(checks) if rows is None else rows
    out = [{**r, "cross_error": float("nan") if r["calibration"] else r["error"],
            "cross_note": ""} for r in rows]
    notes = []
    # the fitted constant each check carries (None: none), found once
    carried = [next((v for v in FITTED.values() if carries(c, v)), None) for c in checks]
    for source in dict.fromkeys(c.source for c in checks):
        refit = {}  # fitted value -> its value without this set (None: none)
        for label, value in FITTED.items():
            carriers = [c for c, v in zip(checks, carried, strict=True) if v == value]
            # the rows that set it (not the NUMA factor's, which set another constant)
            setters = [c for c in carriers if c.calibration and c.name not in NUMA_FIT_ROWS]
            if not any(c.source == source for c in setters):
                continue
            on = [c for c in setters if c.source != source]
            families = {family(c) for c in setters}
            if not on:
                on = [c for c in carriers if c.source != source and not c.calibration
                      and family(c) in families]
            if not on:
                refit[value] = None
                notes.append(f"{label}: only {source} fits it")
                continue
            refit[value] = fit_matmul_efficiency(on, start=value)
            notes.append(f"{label}: {value:.4g} -> {refit[value]:.4g} without {source} "
                         f"(fitted on {len(on)} rows of {', '.join(sorted(families))})")
        for i, (c, value) in enumerate(zip(checks, carried, strict=True)):
            if c.source != source or value not in refit:
                continue
            if refit[value] is None:
                out[i]["cross_error"] = float("nan")
                out[i]["cross_note"] = "only its own set fits its constant"
                continue
            note = f"matmul_efficiency {refit[value]:.4g} without its set"
            try:
                predicted = predict(with_matmul_efficiency(c, refit[value]))[0]
            except ValueError as e:  # no value: NaN, and the note says why
                predicted, note = float("nan"), f"{note}; refused: {e}"
            out[i]["cross_error"] = predicted / c.published - 1.0
            out[i]["cross_note"] = note
    # the NUMA factor: only its own set (the DeepSeek-V3 log) fits it, so its rows
    # that carry it (unbound ranks) get no cross-validated value
    numa = {next(c for c in checks if c.name == n).source for n in NUMA_FIT_ROWS
            if any(c.name == n for c in checks)}
    for i, c in enumerate(checks):
        if c.source in numa and c.tables.get("training", {}).get("numa_binding") is False:
            out[i]["cross_error"] = float("nan")
            out[i]["cross_note"] = "only its own set fits its constant (NUMA_UNBOUND_FACTOR)"
    if numa:
        notes.append(f"NUMA_UNBOUND_FACTOR: only {', '.join(sorted(numa))} fits it")
    return out, notes


def cross_summary(rows) -> dict:
    """`summary`'s statistics of `cross_error` (every row with one, the
    refitted calibration rows included), and per source set the in-sample and
    cross-validated median |error|."""
    valued = [r for r in rows if math.isfinite(r["cross_error"])]
    runs = [r for r in valued if r["measure"] not in COLLECTIVE_MEASURES]
    by_set = {}
    for source in dict.fromkeys(r["source"] for r in rows):
        mine = [r for r in rows if r["source"] == source]
        inside = [abs(r["error"]) for r in mine
                  if not r["calibration"] and math.isfinite(r["error"])]
        crossed = [abs(r["cross_error"]) for r in mine if math.isfinite(r["cross_error"])]
        by_set[source] = {"in_sample": _stats(inside), "cross_validated": _stats(crossed)}
    return {**_stats([abs(r["cross_error"]) for r in runs]),
            "by_family": _grouped(runs, "family", "cross_error"),
            "by_measure": _grouped(valued, "measure", "cross_error"), "by_set": by_set}


def _collective(spec) -> float:
    """A collective row's value: busbw (GB/s) on one tier, or, with no tier
    named, the seconds of one over nodes of the preset's GPUs a node, on both
    tiers (`traffic.cost_on`)."""
    preset, op, algorithm, tier_name, ranks, n_bytes = spec
    system = presets.system(preset)
    if tier_name is None:
        per_node = float(system.gpus_per_node)
        geometry = (float(ranks), per_node, float(ranks), 1.0)
        return float(traffic.cost_on(op, float(n_bytes), geometry, system, EXACT,
                                     algorithm).time_s)
    c = collectives.cost(op, algorithm, n_bytes, ranks, getattr(system, tier_name),
                         protocols=system.protocols)
    return float(collectives.busbw_Bps(op, n_bytes, c.time_s, ranks)) / 1e9


def family(check: Check) -> str:
    """The chip family of a check's system (the preset's chip name up to its
    first '-': A100, H100, H800, V100, B200...)."""
    preset = (check.collective[0] if check.collective is not None
              else check.tables["system"]["preset"])
    return hardware.chip_family(presets.preset(preset).chip)


def predict(check: Check) -> tuple[float, bool, str]:
    """(the model's value of `check.measure`, whether the plan fits in memory,
    "" or why the command line would refuse the estimate: `output_checks.check_outputs`'s
    one-line report of an output outside its physical range)."""
    if check.collective is not None:
        return _collective(check.collective), True, ""
    scn = scenario_lib.from_tables(check.tables)
    est = step_lib.estimate(scn)
    out = step_lib.outputs(est)
    try:
        output_checks.check_outputs(step_lib.asked(est, out))
        refused = ""
    except (ValueError, output_checks.OutputOutOfRange) as e:
        refused = str(e)
    fits = bool(out["fits_memory"])
    gpus = float(scn.system.gpus)
    if check.measure == "aggregate_hardware_pflops":
        return float(out["hardware_tflops_per_gpu"]) * gpus / 1e3, fits, refused
    if check.measure == "tokens_per_s_per_gpu":
        return float(out["tokens_per_s"]) / gpus, fits, refused
    return float(out[check.measure]), fits, refused


def run(checks=CHECKS) -> list[dict]:
    """Every check as a row: name, source, measure, family, published,
    predicted, error (predicted / published - 1), calibration, fits_memory,
    refused ("" or the reason the estimate is refused, or cannot be made:
    then predicted and error are NaN), note."""
    rows = []
    for c in checks:
        try:
            predicted, fits, refused = predict(c)
        except ValueError as e:  # the row cannot be evaluated: counted, never hidden
            predicted, fits, refused = float("nan"), False, str(e)
        rows.append({"name": c.name, "source": c.source, "measure": c.measure,
                     "family": family(c), "published": c.published, "predicted": predicted,
                     "error": predicted / c.published - 1.0, "calibration": c.calibration,
                     "fits_memory": fits, "refused": refused, "note": c.note})
    return rows


def _stats(errors) -> dict:
    errors = sorted(errors)
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2 if n else float("nan")
    return {"predictions": n, "median_abs_error": median,
            "max_abs_error": errors[-1] if n else float("nan")}


def _grouped(rows, key, error="error") -> dict:
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[key], []).append(abs(r[error]))
    return {k: _stats(v) for k, v in sorted(groups.items())}


def summary(rows) -> dict:
    """Median and maximum |error| over the prediction rows (calibration rows
    apart) that have a value: overall and `by_family` over the training runs,
    `by_measure` over every row (the collectives' measures,
    `COLLECTIVE_MEASURES`, too); `calibration` counts the calibration rows,
    `refused` the rows whose estimate is refused or cannot be made,
    `not_fitting` the plans that do not fit memory."""
    predictions = [r for r in rows if not r["calibration"] and math.isfinite(r["error"])]
    runs = [r for r in predictions if r["measure"] not in COLLECTIVE_MEASURES]
    return {**_stats([abs(r["error"]) for r in runs]),
            "calibration": sum(r["calibration"] for r in rows),
            "refused": sum(bool(r["refused"]) for r in rows),
            "not_fitting": sum(not r["fits_memory"] for r in rows),
            "by_family": _grouped(runs, "family"), "by_measure": _grouped(predictions, "measure")}


def step_time_ratio(row: dict) -> float:
    """The true / predicted step time a row says: (1 + error) for a rate
    measure (the model's rate is too high by that factor), 1 / (1 + error) for
    a time measure (`TIME_MEASURES`)."""
    one_plus = 1.0 + row["error"]
    return 1.0 / one_plus if row["measure"] in TIME_MEASURES else one_plus


def _spread(ratios: list[float]) -> dict:
    q = uncertainty_lib.QUANTILE
    lo, hi = np.quantile(np.asarray(ratios, dtype=np.float64), [q, 1.0 - q])
    # 6 significant digits: the stored table does not change with the last bits
    return {"rows": len(ratios), "ratio_lo": float(f"{lo:.6g}"),
            "ratio_hi": float(f"{hi:.6g}")}


def uncertainty(rows) -> dict:
    """The table `codesign.uncertainty` reads (stored as its `TABLE`): the
    `QUANTILE` and 1 - `QUANTILE` percentiles of `step_time_ratio` over the
    prediction rows of training runs (calibration rows, rows without a value,
    the collectives' rows and the intermediate steps of Megatron-Core's
    DeepSeek-V3 log apart: one plan counts once, as the guide's final row), of
    all families (`all`) and per chip family (`families`), with their row counts."""
    ratios: dict = {}
    for r in rows:
        if (not r["calibration"] and math.isfinite(r["error"])
                and r["measure"] not in COLLECTIVE_MEASURES
                and r["source"] != SETS["mcore_dsv3_gb200_steps"]):
            ratios.setdefault(r["family"], []).append(step_time_ratio(r))
    return {"quantile": uncertainty_lib.QUANTILE, "min_rows": uncertainty_lib.MIN_ROWS,
            "all": _spread([x for v in ratios.values() for x in v]),
            "families": {k: _spread(v) for k, v in sorted(ratios.items())}}


def write_uncertainty(rows, path=uncertainty_lib.TABLE) -> dict:
    """Write `uncertainty(rows)` to `path` (the package's table); returns it."""
    table = uncertainty(rows)
    files.write_file(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    return table


def set_rows(rows, name: str) -> list[dict]:
    """The rows of the set `name` (a key of `SETS`)."""
    return [r for r in rows if r["source"] == SETS[name]]


def software_steps(rows) -> list[dict]:
    """Megatron-Core's DeepSeek-V3 log on 256 GB200 as `run`'s rows of one plan
    whose software changes (the `mcore_dsv3_gb200_steps` set, then the guide's
    last row): per step its `label`, `published` and `predicted` model
    TFLOP/s/GPU and `error`; `keys`, what the step sets (None: no key expresses
    it, then `needs` says what a mechanism for it would need); the published
    and predicted change from the step before (`published_change`,
    `predicted_change`: relative, NaN at the first step) and `sign`: "match"
    where the prediction moves with the published sign, "opposite" where it
    moves against it, "flat" where a step with keys leaves it unchanged, "no
    mechanism" where no key expresses the step."""
    mine = set_rows(rows, "mcore_dsv3_gb200_steps") + set_rows(rows, "mcore_dsv3_gb200_guide")
    if len(mine) != len(DSV3_STEPS):
        raise ValueError(f"rows hold {len(mine)} steps of the DeepSeek-V3 log, not "
                         f"{len(DSV3_STEPS)}: pass validate.run()'s rows")
    out = []
    for i, ((label, published, keys, needs), r) in enumerate(zip(DSV3_STEPS, mine,
                                                                 strict=True)):
        nan = float("nan")
        before = mine[i - 1] if i else None
        dp = published / before["published"] - 1.0 if before else nan
        dq = r["predicted"] / before["predicted"] - 1.0 if before else nan
        if keys is None:
            sign = "no mechanism"
        elif before is None:
            sign = ""
        elif dq == 0.0:
            sign = "flat"
        else:
            sign = "match" if (dq > 0) == (dp > 0) else "opposite"
        out.append({"step": i + 1, "label": label, "published": r["published"],
                    "predicted": r["predicted"], "error": r["error"], "keys": keys,
                    "needs": needs, "published_change": dp, "predicted_change": dq,
                    "sign": sign})
    return out
