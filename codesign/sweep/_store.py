"""What a sweep keeps on disk: chunk files (a JSON record with exact floats,
and a CSV) written atomically (temp + fsync + `os.replace`), the manifest that
refuses to resume another job, and the merge of the chunks into a `Table`,
results.csv and results.json, sorted by point and rounded to
`SIGNIFICANT_DIGITS` so that they carry nothing run-dependent."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ._points import Chunk, Job
from ._spec import SIGNIFICANT_DIGITS, round_significant


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return format(value, f".{SIGNIFICANT_DIGITS}g")
    return str(value)


def csv_text(header, rows) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_format(v) for v in row] for row in rows])
    return buf.getvalue()


def chunk_path(out_dir: Path, chunk: Chunk) -> Path:
    return Path(out_dir) / "chunks" / f"{chunk.id:06d}.json"


def write_chunk(job: Job, out_dir: Path, chunk: Chunk, rows: list[list]) -> None:
    """CSV first, then the JSON record whose presence marks the chunk done."""
    path = chunk_path(out_dir, chunk)
    atomic_write(path.with_suffix(".csv"), csv_text(job.columns, rows))
    record = {"fingerprint": job.fingerprint, "chunk": chunk.id, "columns": job.columns,
              "rows": rows}
    atomic_write(path, json.dumps(record))


def read_chunk(job: Job, out_dir: Path, chunk: Chunk) -> list[list] | None:
    """The rows of `chunk` on disk, or None when absent or not this job's."""
    try:
        record = json.loads(chunk_path(out_dir, chunk).read_text())
    except (OSError, ValueError):
        return None
    ok = (record.get("fingerprint") == job.fingerprint and record.get("chunk") == chunk.id
          and len(record.get("rows", ())) == chunk.stop - chunk.start)
    return record["rows"] if ok else None


def _what_differs(manifest: dict, job: Job) -> str:
    """What makes the sweep described by `manifest` (manifest.json) differ from `job`."""
    grad = list(job.grad_outputs)
    if "grad" in manifest and manifest["grad"] != grad:
        return f"another `grad` (outputs {manifest['grad']} != {grad})"
    if manifest.get("results_id") == job.results_id:
        return (f"another chunk size (chunk_size={manifest.get('chunk_size')} != "
                f"{job.spec.chunk_size}; choose `chunk_size`)")
    return (f"another spec (its points, knobs, base or outputs: fingerprint "
            f"{manifest.get('fingerprint')} != {job.fingerprint})")


def prepare_out_dir(job: Job, out_dir: Path, resume: bool) -> None:
    """Create `out_dir`; without `resume` drop old chunks; with it, insist on the same job."""
    out_dir = Path(out_dir)
    chunks_dir = out_dir / "chunks"
    chunks_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / "manifest.json"
    if resume and manifest.exists():
        old = json.loads(manifest.read_text())
        if old.get("fingerprint") != job.fingerprint:
            raise ValueError(f"out_dir={str(out_dir)!r} holds a sweep with "
                             f"{_what_differs(old, job)}; rerun without `resume` or choose "
                             "another `out_dir`")
    for path in chunks_dir.iterdir():
        if path.name.startswith(".") or not resume:
            path.unlink()
    if not resume:
        for name in ("results.csv", "results.json", "summary.txt"):
            (out_dir / name).unlink(missing_ok=True)
    info = {"name": job.spec.name, "target": job.spec.target, "fingerprint": job.fingerprint,
            "results_id": job.results_id, "chunk_size": job.spec.chunk_size,
            "grad": list(job.grad_outputs),
            "points": job.points.size, "chunks": len(job.chunks), "columns": job.columns}
    atomic_write(manifest, json.dumps(info, indent=1) + "\n")


@dataclasses.dataclass(frozen=True)
class Table:
    """Merged results: column name -> array (float64, or object for categories)."""

    columns: tuple[str, ...]
    data: dict

    def __len__(self) -> int:
        return len(self.data["index"]) if self.columns else 0

    def select(self, mask: np.ndarray) -> Table:
        return Table(self.columns, {k: v[mask] for k, v in self.data.items()})

    def rows(self) -> list[list]:
        return [[item(self.data[c][i]) for c in self.columns] for i in range(len(self))]


def item(value):
    return value.item() if isinstance(value, np.generic) else value


def _table_from_rows(job: Job, rows: list[list]) -> Table:
    cats = set(job.points.categorical)
    data = {}
    for j, name in enumerate(job.columns):
        col = [r[j] for r in rows]
        data[name] = np.array(col, dtype=object) if name in cats else np.array(col, dtype=float)
    return Table(job.columns, data)


def merge(job: Job, out_dir: str | Path) -> Table:
    """All chunk rows of `job` in point order, rounded to `SIGNIFICANT_DIGITS`."""
    rows = []
    for chunk in job.chunks:
        got = read_chunk(job, Path(out_dir), chunk)
        if got is None:
            raise ValueError(f"chunk {chunk.id} of sweep {job.spec.name!r} is missing in "
                             f"{str(out_dir)!r}; rerun with `resume`")
        rows.extend(got)
    rows.sort(key=lambda r: r[0])
    cats = len(job.points.categorical)
    rows = [[int(r[0])] + r[1:1 + cats] + [round_significant(v) for v in r[1 + cats:]]
            for r in rows]
    return _table_from_rows(job, rows)


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def results_json(job: Job, table: Table) -> str:
    lines = ["{", f' "name": {json.dumps(job.spec.name)},',
             f' "target": {json.dumps(job.spec.target)},',
             f' "results_id": {json.dumps(job.results_id)},',
             f' "columns": {json.dumps(list(table.columns))},', ' "rows": [']
    rows = table.rows()
    lines += [" " + json.dumps([_json_value(v) for v in r]) + ("," if i < len(rows) - 1 else "")
              for i, r in enumerate(rows)]
    return "\n".join(lines + [" ]", "}"]) + "\n"
