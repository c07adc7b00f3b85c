"""`codesign validate`: the model beside every published end-to-end figure we know.

One row per published figure (codesign/validate.py has each one's source and
the scenario that reproduces it): the published value, the model's
prediction and the relative error. Rows marked `calibration` set a model
constant and reproduce it by construction; the median and maximum error are
over the others. A row that is off stays in, with the reason where known.
"""

from __future__ import annotations

import csv
import json
import sys

from .. import validate
from . import _output


def add_arguments(parser, name) -> None:
    _output.add_format(parser, "the rows as CSV",
                       "a JSON list of rows (name, source, measure, published, predicted, "
                       "error, calibration, fits_memory, note)")


def _table(rows) -> None:
    print(f"{'check':<58} {'measure':<25} {'published':>10} {'predicted':>10} {'error':>7}")
    for r in rows:
        flags = (" calibration" if r["calibration"] else "") + (
            "" if r["fits_memory"] else " (does not fit)")
        print(f"{r['name']:<58} {r['measure']:<25} {r['published']:>10.4g} "
              f"{r['predicted']:>10.4g} {r['error']:>+7.1%}{flags}")
    s = validate.summary(rows)
    print(f"\n{s['predictions']} predictions: median |error| {s['median_abs_error']:.1%}, "
          f"max {s['max_abs_error']:.1%}; sources and notes: codesign validate --json")


def run(args, name) -> int:
    rows = validate.run()
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    else:
        _table(rows)
    return 0
