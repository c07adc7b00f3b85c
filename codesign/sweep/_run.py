"""Running a sweep: the loop in which each process evaluates its share of the
missing chunks (every P-th under `jax.distributed`) and writes them, the
progress bar with rate and ETA, and `finish_sweep`, which merges the chunks
into results.csv/json and writes summary.txt and the figures. Process 0 holds
the folder's lock (`_store.claimed`) for the run; every process lists the
chunks on disk (verified) before any writes one."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import jax

from ..progress import Progress
from ._evaluate import Evaluator, chunk_rows
from ._points import Job
from ._report import draw_plots, summarize
from ._store import (
    atomic_write,
    chunks_on_disk,
    claimed,
    csv_lines,
    locked,
    merge,
    own_folder,
    prepare_out_dir,
    results_json,
    write_chunk,
    writing,
)


@dataclasses.dataclass(frozen=True)
class RunResult:
    out_dir: Path
    computed_chunks: int  # evaluated by this process in this run
    skipped_chunks: int  # found on disk (resume)
    points: int  # all points of the sweep
    seconds: float
    recomputed: tuple[str, ...] = ()  # "chunk 000017 changed on disk": found so, computed again


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def run(job: Job, out_dir: str | Path, *, resume: bool = False, progress: bool = False,
        write: bool = True, devices=None, lock: bool = True) -> RunResult:
    """Evaluate the chunks of `job` this process owns and write them; returns once every
    process is done (then process 0 calls `finish_sweep`).

    `progress` draws a bar on stderr (`codesign.progress.Progress`);
    `write=False` evaluates without touching the disk (benchmarks the checkpoint cost);
    `devices` (default: all local devices) is the mesh the batch is sharded over;
    `lock=False`: process 0 does not take `out_dir`'s lock (the launcher of the
    processes holds it for them).
    """
    out_dir = Path(out_dir)
    start = time.perf_counter()
    index, count = jax.process_index(), jax.process_count()
    owner = write and index == 0
    with claimed(job, out_dir) if owner and lock else contextlib.nullcontext():
        if owner:
            prepare_out_dir(job, out_dir, resume)
        _barrier(f"codesign-sweep-prepare-{job.fingerprint}")
        on_disk, changed = chunks_on_disk(job, out_dir) if write and resume else (set(), ())
        _barrier(f"codesign-sweep-listed-{job.fingerprint}")  # before any process writes
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
                     time.perf_counter() - start, changed)


def finish_sweep(job: Job, out_dir: str | Path, *, figures_dir: str | Path | None = None,
                 plots: bool = True) -> dict:
    """Merge the chunks (verified) into results.csv/json, write summary.txt and the
    figures, holding `out_dir`'s lock."""
    out_dir = Path(out_dir)
    with locked(out_dir):
        table = merge(job, out_dir)
        atomic_write(out_dir / "results.csv", csv_lines(table.columns, table.iter_rows()))
        atomic_write(out_dir / "results.json", results_json(job, table))
        summary = summarize(job, table)
        atomic_write(out_dir / "summary.txt", summary)
        figures = []
        if plots:
            figures_dir = Path(figures_dir) if figures_dir else own_folder(out_dir / "figures")
            with writing(figures_dir):
                figures = draw_plots(job, table, figures_dir)
    return {"results_csv": out_dir / "results.csv", "results_json": out_dir / "results.json",
            "summary": summary, "figures": figures, "table": table}
