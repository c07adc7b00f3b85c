"""`codesign validate`: the model beside every published end-to-end figure we know.

One row per published figure (codesign/validate.py has each one's source and
the scenario that reproduces it): the published value, the model's
prediction and the relative error. Rows marked `calibration` set a model
constant and reproduce it by construction; the median and maximum error are
over the others, overall, per chip family and per measure. A row that is off
stays in, with the reason where known; a row whose estimate the model refuses
(an output outside its physical range) is marked and counted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys

from .. import report, validate
from . import _output


def add_arguments(parser, name) -> None:
    _output.add_format(parser, "the rows as CSV",
                       "a JSON list of rows (name, source, measure, family, published, "
                       "predicted, error, calibration, fits_memory, refused, note)")
    parser.add_argument("--cross", action="store_true",
                        help="cross-validate: predict each source set with the constants it "
                        "helped fit refitted without it, and summarise those errors beside "
                        "the in-sample ones (rows gain cross_error and cross_note)")
    _output.add_output_arguments(parser, "the error of every row (predicted / published - 1), "
                                         "grouped by chip family")
    # the maintainer's: rewrite codesign/uncertainty.json (estimate's intervals)
    parser.add_argument("--write-uncertainty", action="store_true", help=argparse.SUPPRESS)


def _stats_line(label: str, s: dict) -> str:
    return (f"  {label:<25} {s['predictions']:>3} predictions: median |error| "
            f"{s['median_abs_error']:6.1%}, max {s['max_abs_error']:6.1%}")


def _share(x: float, width: int) -> str:
    """A fraction as a percentage, or '-' where there is none (no rows)."""
    return f"{x:>{width}.1%}" if math.isfinite(x) else f"{'-':>{width}}"


def _table(rows) -> None:
    print(f"{'check':<70} {'measure':<24} {'published':>10} {'predicted':>10} {'error':>7}")
    for r in rows:
        flags = (" calibration" if r["calibration"] else "") + (
            "" if r["fits_memory"] else " (does not fit)") + (
            " REFUSED" if r["refused"] else "")
        print(f"{r['name']:<70} {r['measure']:<24} {r['published']:>10.4g} "
              f"{r['predicted']:>10.4g} {r['error']:>+7.1%}{flags}")
    s = validate.summary(rows)
    print(f"\n{len(rows)} rows: {s['calibration']} calibration, {s['refused']} refused "
          f"(the estimate is outside its physical range or cannot be made), "
          f"{s['not_fitting']} plans that do not fit memory")
    print(_stats_line("all", s))
    for title, key in (("chip family", "by_family"), ("measure", "by_measure")):
        print(f"by {title}:")
        for k, v in s[key].items():
            print(_stats_line(k, v))
    print("sources, notes and reasons: codesign validate --json; each set predicted with "
          "the constants it helped fit refitted without it: codesign validate --cross")


def _cross(rows, notes) -> None:
    s, inside = validate.cross_summary(rows), validate.summary(rows)
    print("\ncross-validated: each source set predicted with the constants it helped fit "
          "refitted without it")
    for line in notes:
        print(f"  {line}")
    print(f"  {'set':<60} {'rows':>4} {'in-sample':>9} {'cross-validated':>15} {'max':>7}")
    for source, v in s["by_set"].items():
        c = v["cross_validated"]
        print(f"  {source[:60]:<60} {c['predictions']:>4} "
              f"{_share(v['in_sample']['median_abs_error'], 9)} "
              f"{_share(c['median_abs_error'], 15)} {_share(c['max_abs_error'], 7)}")
    print(_stats_line("all", s) + f"  (in-sample {inside['median_abs_error']:.1%})")
    for title, key in (("chip family", "by_family"), ("measure", "by_measure")):
        print(f"by {title}:")
        for k, v in s[key].items():
            print(_stats_line(k, v))


NO_VALUE = "reason"  # the column that says why a row's number is missing (null, empty)


def _why(r: dict, key: str) -> str:
    """Why row `r` has no number for `key` (NaN in `validate`'s rows)."""
    if key in ("predicted", "error") or (key == "cross_error" and r.get("refused")):
        return f"refused: {r['refused']}" if r.get("refused") else "no prediction"
    note = r.get("cross_note", "")
    if "refused:" in note:
        return f"refused with the refitted constant: {note.split('refused:', 1)[1].strip()}"
    if note.startswith("only its own set"):
        return (f"no other source set has rows of its chip family ({r['family']}) to refit its "
                "constant on without this one")
    if note:
        return note
    return ("a calibration row: it sets a constant of the model, so it has no prediction "
            "made without it" if r["calibration"] else "no cross-validated prediction")


def finite_rows(rows: list[dict]) -> list[dict]:
    """The rows as `--json` and `--csv` write them: a number the model has none for
    (NaN: a refused row, a cross-validated error of a calibration row or of a
    constant only its own set fits) is null (an empty cell), and the `reason`
    column says why, per key ("" where every number is there)."""
    out = []
    for r in rows:
        missing = [k for k, v in r.items() if isinstance(v, float) and not math.isfinite(v)]
        why: dict = {}  # reason -> the keys it explains, in order
        for k in missing:
            why.setdefault(_why(r, k), []).append(k)
        shown = {k: (None if k in missing else v) for k, v in r.items()}
        out.append({**shown, NO_VALUE: "; ".join(f"{', '.join(keys)}: {reason}"
                                                 for reason, keys in why.items())})
    return out


def run(args, name) -> int:
    rows = validate.run()
    if args.write_uncertainty:
        validate.write_uncertainty(rows)
    notes = []
    if args.cross:
        rows, notes = validate.cross_validate(rows=rows)
    if args.json:
        print(json.dumps(finite_rows(rows), indent=1, allow_nan=False))
    elif args.csv:
        shown = finite_rows(rows)
        writer = csv.DictWriter(sys.stdout, fieldnames=list(shown[0]))
        writer.writeheader()
        writer.writerows(shown)
    else:
        _table(rows)
        if args.cross:
            _cross(rows, notes)
    if args.plot or args.report:
        _output.write(args, _output.plots().validation_errors(
            rows, band=BAND, title="codesign validate: the model's error on every published "
                                  "figure"),
            lambda fig: _page(rows, fig, args.cross))
    return 0


BAND = 0.1  # the figure's band around no error (+-10%)


def _flags(r: dict) -> str:
    """A row's marks, as the table prints them."""
    return ", ".join(f for f, on in (("calibration", r["calibration"]),
                                     ("does not fit", not r["fits_memory"]),
                                     ("REFUSED", bool(r["refused"]))) if on)


def _stats_rows(groups: dict) -> list[dict]:
    return [{"group": k, "predictions": v["predictions"],
             "median": _share(v["median_abs_error"], 0).strip(),
             "max": _share(v["max_abs_error"], 0).strip()} for k, v in groups.items()]


def _signed(x: float) -> str:
    """An error as the table prints it (+3.2%), n/a where there is none (a refused row)."""
    return f"{x:+.1%}" if math.isfinite(x) else "n/a"


def _page(rows, fig, cross: bool) -> str:
    """validate's page: the errors' `fig`, the statistics per chip family and
    measure (`validate.summary`), and every row."""
    s = validate.summary(rows)
    stats = {"group": "", "predictions": "predictions", "median": "median |error|",
             "max": "max |error|"}
    columns = {"name": "check", "measure": "measure", "family": "family",
               "published": "published", "predicted": "predicted", "error": "error",
               **({"cross_error": "cross-validated error"} if cross else {}), "flags": ""}
    shown = [{**r, "error": _signed(r["error"]), "flags": _flags(r),
              **({"cross_error": _signed(r["cross_error"])} if cross else {})} for r in rows]
    return report.page("codesign validate", [
        report.section("Error per row", report.figure(
            fig, f"predicted / published - 1 of every row, grouped by chip family, a colour per "
                 f"measure; the band is +-{BAND:.0%}; calibration rows (each fits a constant) "
                 "hollow")),
        report.section("By chip family", report.table(
            _stats_rows({"all": s, **s["by_family"]}), stats)),
        report.section("By measure", report.table(_stats_rows(s["by_measure"]), stats)),
        report.section("Rows", report.paragraph(
            f"{len(rows)} rows: {s['calibration']} calibration, {s['refused']} refused, "
            f"{s['not_fitting']} plans that do not fit memory; sources, notes and reasons: "
            "codesign validate --json"), report.table(shown, columns))],
        lines=(_output.made_by("codesign validate" + (" --cross" if cross else "")),))
