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

from .. import validate
from . import _output


def add_arguments(parser, name) -> None:
    _output.add_format(parser, "the rows as CSV",
                       "a JSON list of rows (name, source, measure, family, published, "
                       "predicted, error, calibration, fits_memory, refused, note)")
    parser.add_argument("--cross", action="store_true",
                        help="cross-validate: predict each source set with the constants it "
                        "helped fit refitted without it, and summarise those errors beside "
                        "the in-sample ones (rows gain cross_error and cross_note)")
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


def run(args, name) -> int:
    rows = validate.run()
    if args.write_uncertainty:
        validate.write_uncertainty(rows)
    notes = []
    if args.cross:
        rows, notes = validate.cross_validate(rows=rows)
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    else:
        _table(rows)
        if args.cross:
            _cross(rows, notes)
    return 0
