"""What a sweep keeps on disk, and what it guarantees about it:

- one writer: `locked` holds an exclusive `flock` on OUT/.lock (recording
  pid, host and start) for a run's life, released by the OS when the process
  ends, crash included; a second writer is refused at once, naming the holder;
- one job: manifest.json names the job's fingerprint, and a run of another job
  into the folder is refused (`prepare_out_dir`) before anything is written;
- checked chunks: each chunk record (JSON, exact floats; beside it a CSV) is
  written atomically (temp + fsync + `os.replace`) with the sha256 of its rows,
  verified wherever a chunk is read; a chunk changed on disk is `ChangedChunk`;
- disk errors (read-only, full, not a folder, permission) are one line naming
  the path (`writing`), and leave the finished chunks in place;
- the merge of the chunks into a `Table`, results.csv and results.json, one
  chunk at a time, sorted by point and rounded to `SIGNIFICANT_DIGITS` so that
  they carry nothing run-dependent."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import io
import itertools
import json
import math
import os
import socket
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import files
from ._points import Chunk, Job
from ._spec import SIGNIFICANT_DIGITS, round_significant

LOCK_FILE = ".lock"
_HELD: set[str] = set()  # the folders whose lock this process holds (`locked` is re-entrant)
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a filesystem without flock


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OSError while writing `path` as one line naming it (a full disk names no file)."""
    try:
        yield
    except OSError as e:
        raise ValueError(f"cannot write {str(path)!r}: {e.strerror or e}") from None


def atomic_write(path: Path, text: str | Iterable[str]) -> None:
    """`text` (or its pieces, written as they come) into `path`: `files.write_file`
    (a temp file made O_EXCL|O_NOFOLLOW, fsync, `os.replace`; on any error the temp
    file goes and `path` is as it was; a link at `path` is refused, never followed)."""
    with writing(path):
        files.write_file(path, text, flag=f"{path.name} of the sweep folder")


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 400, 0).decode(errors="replace").strip() or "no record of it"
    except OSError:
        return "no record of it"


def own_folder(path: Path) -> Path:
    """`path`, a folder of the sweep's own in its folder (chunks/, figures/), if it is
    no symbolic link: one planted there would send the sweep's files, and the
    removal of old chunks, elsewhere; a ValueError naming it."""
    if path.is_symlink():
        raise ValueError(f"{str(path)!r} is a symbolic link; a sweep writes its own folders "
                         "only: remove the link")
    return path


def _open_lock(path: Path) -> int:
    """The descriptor of the lock file `path` (made if absent), opened without
    following a link: a link or anything but a plain file of one name planted
    there is a ValueError naming it, and its target is left as it was."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise ValueError(f"{str(path)!r} is a symbolic link; a sweep folder's lock is a plain "
                             "file: remove the link") from None
        raise ValueError(f"cannot write {str(path)!r}: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise ValueError(f"{str(path)!r} is not a plain file of its own (a device, a pipe or a "
                         "hard link to another file); remove it")
    return fd


@contextlib.contextmanager
def locked(out_dir: str | Path) -> Iterator[None]:
    """Hold the lock of `out_dir` (made if absent) while the block runs: one writer per
    sweep folder. Another process holding it is a ValueError naming it (pid, host,
    since when). Re-entrant in one process; skipped where the filesystem has no flock."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir={str(out_dir)!r} is a file, not a folder; name a folder")
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    key = str(out_dir.resolve())
    if key in _HELD:
        yield
        return
    path = out_dir / LOCK_FILE
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"out_dir={str(out_dir)!r} is in use by another sweep "
                             f"({_holder(fd)}); wait for it to end or choose another "
                             "`out_dir`") from None
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                raise ValueError(f"cannot lock {str(path)!r}: {e.strerror or e}") from None
        since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        with writing(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} since "
                          f"{since}\n".encode(), 0)
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
    finally:
        os.close(fd)  # releases the flock


def _format(value: Any) -> str:
    if isinstance(value, float):
        return format(value, f".{SIGNIFICANT_DIGITS}g")
    return str(value)


def csv_lines(header, rows: Iterable[list], batch: int = 4096) -> Iterator[str]:
    """The CSV text of `header` and `rows`, a batch of rows at a time."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    rows = iter(rows)
    while True:
        writer.writerows([[_format(v) for v in row] for row in itertools.islice(rows, batch)])
        text = buf.getvalue()
        if not text:
            return
        yield text
        buf.seek(0)
        buf.truncate()


def chunk_path(out_dir: Path, chunk: Chunk) -> Path:
    return Path(out_dir) / "chunks" / f"{chunk.id:06d}.json"


def rows_sha256(rows: list[list]) -> str:
    """The checksum of a chunk's rows: sha256 of their JSON (exact floats)."""
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def write_chunk(job: Job, out_dir: Path, chunk: Chunk, rows: list[list]) -> None:
    """CSV first, then the JSON record whose presence marks the chunk done."""
    path = chunk_path(out_dir, chunk)
    atomic_write(path.with_suffix(".csv"), csv_lines(job.columns, rows))
    record = {"fingerprint": job.fingerprint, "chunk": chunk.id, "columns": job.columns,
              "sha256": rows_sha256(rows), "rows": rows}
    atomic_write(path, json.dumps(record))


class ChangedChunk(ValueError):
    """A chunk file that is there but not what was written: unreadable, not JSON,
    another job's or chunk's record, or rows whose sha256 is not the recorded one."""

    def __init__(self, chunk: Chunk, why: str):
        super().__init__(f"chunk {chunk.id:06d} {why}")
        self.chunk = chunk


def read_chunk(job: Job, out_dir: Path, chunk: Chunk) -> list[list] | None:
    """The rows of `chunk` on disk, verified; None when absent, `ChangedChunk` when
    the file is there but does not hold what this job wrote."""
    try:
        text = chunk_path(out_dir, chunk).read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ChangedChunk(chunk, f"is unreadable ({getattr(e, 'strerror', None) or e})") \
            from None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # (nested past Python's stack: not ours either)
        raise ChangedChunk(chunk, "changed on disk (not JSON)") from None
    rows = record.get("rows") if isinstance(record, dict) else None
    ok = (isinstance(rows, list) and record.get("fingerprint") == job.fingerprint
          and record.get("chunk") == chunk.id and len(rows) == chunk.stop - chunk.start)
    if ok and "sha256" not in record:
        raise ChangedChunk(chunk, "has no checksum (an older codesign wrote it)")
    if not ok or record["sha256"] != rows_sha256(rows):
        raise ChangedChunk(chunk, "changed on disk")
    return rows


def _restore_csv(job: Job, path: Path, rows: list[list]) -> None:
    """The chunk's CSV (a readable copy of its verified record) written again
    from the record when it is missing or differs from it (edited on disk); on
    resume only (`chunks_on_disk`), not on every merge."""
    want = "".join(csv_lines(job.columns, rows))
    try:
        if path.read_text() == want:
            return
    except (OSError, UnicodeDecodeError):
        pass
    atomic_write(path, [want])


def chunks_on_disk(job: Job, out_dir: Path) -> tuple[set[int], tuple[str, ...]]:
    """The ids of the chunks of `job` on disk and verified, and a line for each chunk
    file there that is not (`ChangedChunk`): those are computed again."""
    done, changed = set(), []
    for chunk in job.chunks:
        try:
            rows = read_chunk(job, out_dir, chunk)
            if rows is not None:
                _restore_csv(job, chunk_path(out_dir, chunk).with_suffix(".csv"), rows)
                done.add(chunk.id)
        except ChangedChunk as e:
            changed.append(str(e))
    return done, tuple(changed)


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


def _manifest(out_dir: Path) -> dict | None:
    """The manifest.json of `out_dir`, None when there is none; unreadable, a ValueError."""
    path = out_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        why = getattr(e, "strerror", None) or (
            "nested too deep" if isinstance(e, RecursionError) else "not JSON")
        raise ValueError(f"out_dir={str(out_dir)!r}: its manifest.json cannot be read ({why}); "
                         "remove the folder or choose another `out_dir`") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"out_dir={str(out_dir)!r}: its manifest.json is not a sweep's; "
                         "remove the folder or choose another `out_dir`")
    return manifest


def check_out_dir(job: Job, out_dir: Path) -> dict | None:
    """The manifest of `out_dir` (None: none there) when it is `job`'s; a folder holding
    another job is a ValueError saying what differs. Reads only."""
    out_dir = Path(out_dir)
    old = _manifest(out_dir) if out_dir.is_dir() else None
    if old is not None and old.get("fingerprint") != job.fingerprint:
        raise ValueError(f"out_dir={str(out_dir)!r} holds the sweep {old.get('name')!r} with "
                         f"{_what_differs(old, job)}; choose another `out_dir` (or remove "
                         "the folder to start over)")
    return old


@contextlib.contextmanager
def claimed(job: Job, out_dir: str | Path) -> Iterator[None]:
    """`locked(out_dir)` for `job`: a folder holding another job is refused first, with
    nothing written (not even the lock file)."""
    check_out_dir(job, Path(out_dir))
    with locked(out_dir):
        yield


def prepare_out_dir(job: Job, out_dir: Path, resume: bool) -> None:
    """Make `out_dir` this job's: a folder holding another job is refused before
    anything is written (`check_out_dir`); without `resume` this job's old chunks and
    results go. The caller holds `claimed(job, out_dir)`."""
    out_dir = Path(out_dir)
    old = check_out_dir(job, out_dir)
    chunks_dir = own_folder(out_dir / "chunks")
    with writing(chunks_dir):
        chunks_dir.mkdir(parents=True, exist_ok=True)
        for path in chunks_dir.iterdir():
            if path.name.startswith(".") or (old is not None and not resume):
                path.unlink()
        if old is not None and not resume:
            for name in ("results.csv", "results.json", "summary.txt"):
                (out_dir / name).unlink(missing_ok=True)
    info = {"name": job.spec.name, "target": job.spec.target, "fingerprint": job.fingerprint,
            "results_id": job.results_id, "chunk_size": job.spec.chunk_size,
            "grad": list(job.grad_outputs),
            "points": job.points.size, "chunks": len(job.chunks), "columns": job.columns}
    atomic_write(out_dir / "manifest.json", json.dumps(info, indent=1) + "\n")


@dataclasses.dataclass(frozen=True)
class Table:
    """Merged results: column name -> array (float64, or object for categories)."""

    columns: tuple[str, ...]
    data: dict

    def __len__(self) -> int:
        return len(self.data["index"]) if self.columns else 0

    def select(self, mask: np.ndarray) -> Table:
        return Table(self.columns, {k: v[mask] for k, v in self.data.items()})

    def iter_rows(self) -> Iterator[list]:
        return ([item(self.data[c][i]) for c in self.columns] for i in range(len(self)))

    def rows(self) -> list[list]:
        return list(self.iter_rows())


def item(value):
    return value.item() if isinstance(value, np.generic) else value


def merge(job: Job, out_dir: str | Path) -> Table:
    """All chunk rows of `job` in point order (the chunks' order), rounded to
    `SIGNIFICANT_DIGITS`, read and verified one chunk at a time into the columns."""
    out_dir = Path(out_dir)
    cats = range(1, 1 + len(job.points.categorical))
    data = {name: np.empty(job.points.size, dtype=object if j in cats else float)
            for j, name in enumerate(job.columns)}
    for chunk in job.chunks:
        try:
            rows = read_chunk(job, out_dir, chunk)
        except ChangedChunk as e:
            raise ValueError(f"sweep {job.spec.name!r} in {str(out_dir)!r}: {e}; rerun with "
                             "`resume` to compute it again") from None
        if rows is None:
            raise ValueError(f"chunk {chunk.id:06d} of sweep {job.spec.name!r} is missing in "
                             f"{str(out_dir)!r}; rerun with `resume`")
        at = chunk.combo * job.points.n_float + chunk.start
        for j, name in enumerate(job.columns):
            column = [r[j] for r in rows]  # the index, a category, or a number to round
            exact = j == 0 or j in cats
            data[name][at:at + len(rows)] = column if exact else list(map(round_significant,
                                                                          column))
    return Table(job.columns, data)


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def results_json(job: Job, table: Table) -> Iterator[str]:
    """results.json, a line at a time."""
    yield "\n".join(["{", f' "name": {json.dumps(job.spec.name)},',
                     f' "target": {json.dumps(job.spec.target)},',
                     f' "results_id": {json.dumps(job.results_id)},',
                     f' "columns": {json.dumps(list(table.columns))},', ' "rows": [\n'])
    last = len(table) - 1
    for i, r in enumerate(table.iter_rows()):
        yield " " + json.dumps([_json_value(v) for v in r]) + (",\n" if i < last else "\n")
    yield " ]\n}\n"
