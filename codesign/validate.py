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

import numpy as np

from . import collectives, hardware
from . import scenario as scenario_lib
from . import step as step_lib
from . import uncertainty as uncertainty_lib
from ._published_runs import BRIDGE_SOURCE as BRIDGE_SOURCE
from ._published_runs import CHECKS as CHECKS
from ._published_runs import H100_GEMM_ROWS as H100_GEMM_ROWS
from ._published_runs import MEASURES as MEASURES
from ._published_runs import TIME_MEASURES as TIME_MEASURES
from ._published_runs import Check as Check


def mean_log_error(checks, matmul_efficiency=None) -> float:
    """The mean log(predicted / published) over the rate `checks`, at their own
    systems or at a [system] matmul_efficiency given."""
    logs = []
    for c in checks:
        if matmul_efficiency is not None:
            c = dataclasses.replace(c, tables={**c.tables, "system": {
                **c.tables["system"], "matmul_efficiency": matmul_efficiency}})
        logs.append(math.log(predict(c)[0] / c.published))
    return sum(logs) / len(logs)


def fit_matmul_efficiency(checks, lo=0.3, hi=1.0, iterations=24) -> float:
    """The [system] matmul_efficiency at which the rate `checks` are right on
    average (`mean_log_error` 0). Bisection: a rate rises with the efficiency."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean_log_error(checks, mid) < 0.0 else (lo, mid)
    return 0.5 * (lo + hi)


def _collective(spec) -> float:
    preset, op, algorithm, tier_name, ranks, n_bytes = spec
    system = hardware.system(preset)
    c = collectives.cost(op, algorithm, n_bytes, ranks, getattr(system, tier_name),
                         protocols=system.protocols)
    return float(collectives.busbw_Bps(op, n_bytes, c.time_s, ranks)) / 1e9


def family(check: Check) -> str:
    """The chip family of a check's system (the preset's chip name up to its
    first '-': A100, H100, H800, V100, B200...)."""
    preset = (check.collective[0] if check.collective is not None
              else check.tables["system"]["preset"])
    return hardware.chip_family(hardware.preset(preset).chip)


def predict(check: Check) -> tuple[float, bool, str]:
    """(the model's value of `check.measure`, whether the plan fits in memory,
    "" or why the command line would refuse the estimate: `step.check_outputs`'s
    one-line report of an output outside its physical range)."""
    if check.collective is not None:
        return _collective(check.collective), True, ""
    scn = scenario_lib.from_tables(check.tables)
    est = step_lib.estimate(scn)
    out = step_lib.outputs(est)
    try:
        step_lib.check_outputs(step_lib.asked(est, out))
        refused = ""
    except (ValueError, step_lib.OutputOutOfRange) as e:
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


def summary(rows) -> dict:
    """Median and maximum |error| over the prediction rows (calibration rows
    apart) that have a value: overall, and `by_family` / `by_measure`;
    `calibration` counts the calibration rows, `refused` the rows whose
    estimate is refused or cannot be made, `not_fitting` the plans that do not
    fit memory."""
    predictions = [r for r in rows if not r["calibration"] and math.isfinite(r["error"])]

    def grouped(key):
        groups: dict = {}
        for r in predictions:
            groups.setdefault(r[key], []).append(abs(r["error"]))
        return {k: _stats(v) for k, v in sorted(groups.items())}

    return {**_stats([abs(r["error"]) for r in predictions]),
            "calibration": sum(r["calibration"] for r in rows),
            "refused": sum(bool(r["refused"]) for r in rows),
            "not_fitting": sum(not r["fits_memory"] for r in rows),
            "by_family": grouped("family"), "by_measure": grouped("measure")}


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
    prediction rows (calibration rows and rows without a value apart), of all
    families (`all`) and per chip family (`families`), with their row counts."""
    ratios: dict = {}
    for r in rows:
        if not r["calibration"] and math.isfinite(r["error"]):
            ratios.setdefault(r["family"], []).append(step_time_ratio(r))
    return {"quantile": uncertainty_lib.QUANTILE, "min_rows": uncertainty_lib.MIN_ROWS,
            "all": _spread([x for v in ratios.values() for x in v]),
            "families": {k: _spread(v) for k, v in sorted(ratios.items())}}


def write_uncertainty(rows, path=uncertainty_lib.TABLE) -> dict:
    """Write `uncertainty(rows)` to `path` (the package's table); returns it."""
    table = uncertainty(rows)
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    return table
