"""Running a sweep: the loop in which each process evaluates its share of the
missing chunks (every P-th under `jax.distributed`) and writes them, the
progress bar with rate and ETA, and `finish_sweep`, which merges the chunks
into results.csv/json and writes summary.txt and the figures."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax

from .._progress import Progress
from ._evaluate import Evaluator, chunk_rows
from ._points import Job
from ._report import draw_plots, summarize
from ._store import (
    atomic_write,
    csv_text,
    merge,
    prepare_out_dir,
    read_chunk,
    results_json,
    write_chunk,
)


@dataclasses.dataclass(frozen=True)
class RunResult:
    out_dir: Path
    computed_chunks: int  # evaluated by this process in this run
    skipped_chunks: int  # found on disk (resume)
    points: int  # all points of the sweep
    seconds: float


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def run(job: Job, out_dir: str | Path, *, resume: bool = False, progress: bool = False,
        write: bool = True, devices=None) -> RunResult:
    """Evaluate the chunks of `job` this process owns and write them; returns once every
    process is done (then process 0 calls `finish_sweep`).

    `progress` draws a bar on stderr (`codesign._progress.Progress`);
    `write=False` evaluates without touching the disk (benchmarks the checkpoint cost);
    `devices` (default: all local devices) is the mesh the batch is sharded over.
    """
    out_dir = Path(out_dir)
    start = time.perf_counter()
    index, count = jax.process_index(), jax.process_count()
    if write and index == 0:
        prepare_out_dir(job, out_dir, resume)
    _barrier(f"codesign-sweep-prepare-{job.fingerprint}")
    on_disk = {c.id for c in job.chunks
               if write and resume and read_chunk(job, out_dir, c) is not None}
    missing = [c for c in job.chunks if c.id not in on_disk]
    mine = missing[index::count]
    bar = Progress(job.spec.name, len(job.chunks) - len(missing) + len(mine),
                   sum(c.stop - c.start for c in job.chunks if c.id in on_disk)
                   + sum(c.stop - c.start for c in mine), enabled=progress)
    bar.skip(len(on_disk), sum(c.stop - c.start for c in job.chunks if c.id in on_disk))
    evaluate = Evaluator(job, devices)
    for chunk in mine:
        rows = chunk_rows(job, chunk, evaluate(chunk))
        if write:
            write_chunk(job, out_dir, chunk, rows)
        bar.update(1, len(rows))
    bar.close()
    _barrier(f"codesign-sweep-done-{job.fingerprint}")
    return RunResult(out_dir, len(mine), len(on_disk), job.points.size,
                     time.perf_counter() - start)


def finish_sweep(job: Job, out_dir: str | Path, *, figures_dir: str | Path | None = None,
                 plots: bool = True) -> dict:
    """Merge the chunks into results.csv/json, write summary.txt and the figures."""
    out_dir = Path(out_dir)
    table = merge(job, out_dir)
    atomic_write(out_dir / "results.csv", csv_text(table.columns, table.rows()))
    atomic_write(out_dir / "results.json", results_json(job, table))
    summary = summarize(job, table)
    atomic_write(out_dir / "summary.txt", summary)
    figures = []
    if plots:
        figures = draw_plots(job, table, Path(figures_dir) if figures_dir else out_dir / "figures")
    return {"results_csv": out_dir / "results.csv", "results_json": out_dir / "results.json",
            "summary": summary, "figures": figures, "table": table}
