"""What a sweep folder guarantees against hostile use (issue 25): another job into it
is refused before anything is written, a second writer is refused while the lock is
held, a chunk changed on disk is recomputed, a disk error is one line naming the
path at exit 2 with the finished chunks kept, and a sweep past MAX_POINTS is refused
before any point is made."""

import errno
import fcntl
import itertools
import json
import os
import subprocess
import sys

import pytest

from codesign import sweep
from codesign.cli import main
from codesign.sweep import _spec, _store

SPEC = """
name = "{name}"
target = "collective"
chunk_size = 4
[base]
system = "dgx-h100"
op = "all_reduce"
[knobs]
algorithm = {{ categories = ["ring", "tree"] }}
ranks = [8, {ranks}]
n_bytes = {{ log_grid = ["1KiB", "1MiB", 5] }}
"""  # 2 x 2 x 5 = 20 points: 6 chunks (4 + 4 + 2 per algorithm)
CHUNKS = 6


def spec_file(tmp_path, name="a", ranks=64):
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, ranks=ranks))
    return path


def sweep_cli(capsys, spec, out, *flags) -> tuple[int, str, str]:
    rc = main(["sweep", str(spec), "--out", str(out), "--no-plots", "--no-progress", *flags])
    got = capsys.readouterr()
    return rc, got.out, got.err


def snapshot(folder) -> dict:
    """Every file under `folder`: its bytes and modification time."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    return err.strip()


def test_another_spec_into_a_sweep_folder_is_refused_and_touches_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    a, b = spec_file(tmp_path, "a"), spec_file(tmp_path, "b", ranks=32)
    assert sweep_cli(capsys, a, out)[0] == 0
    before = snapshot(out)
    for flags in ((), ("--resume",), ("--chunk-size", "2")):
        spec = a if flags[:1] == ("--chunk-size",) else b
        rc, stdout, err = sweep_cli(capsys, spec, out, *flags)
        assert (rc, stdout) == (2, "")
        line = one_line(err)
        assert line.startswith(f"codesign sweep: error: out_dir={str(out)!r} holds the sweep 'a' "
                               "with another "), line
        assert line.endswith("; choose another --out (or remove the folder to start over)")
        assert snapshot(out) == before
    rc, stdout, _ = sweep_cli(capsys, a, out, "--resume")
    assert rc == 0 and f"0 chunks computed, {CHUNKS} from disk" in stdout
    assert (out / "results.csv").read_bytes() == before[out / "results.csv"][0]


def test_a_second_writer_is_refused_while_the_lock_is_held(tmp_path, capsys):
    out = tmp_path / "out"
    spec = spec_file(tmp_path)
    assert sweep_cli(capsys, spec, out)[0] == 0
    fd = os.open(out / _store.LOCK_FILE, os.O_RDWR)
    try:  # another writer, as `_store.locked` holds it
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.write(fd, b"pid 4242 on host elsewhere since noon\n")
        before = snapshot(out)
        for flags in ((), ("--resume",), ("--processes", "2")):
            rc, stdout, err = sweep_cli(capsys, spec, out, *flags)
            assert (rc, stdout) == (2, "")
            assert one_line(err) == (
                f"codesign sweep: error: out_dir={str(out)!r} is in use by another sweep "
                "(pid 4242 on host elsewhere since noon); wait for it to end or choose "
                "another --out")
            assert snapshot(out) == before
        # the workers of a launcher that holds the lock write without taking it
        job = sweep.make_job(sweep.load_spec(spec))
        assert sweep.run(job, out, resume=True, lock=False).skipped_chunks == CHUNKS
        with pytest.raises(ValueError, match="is in use by another sweep"):
            sweep.run(job, out, resume=True)
    finally:
        os.close(fd)
    with _store.locked(out), _store.locked(out):  # re-entrant in one process
        assert sweep.run(job, out, resume=True).skipped_chunks == CHUNKS


def test_a_killed_holder_leaves_the_folder_free(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print(flush=True); "
         "time.sleep(60)", str(out / _store.LOCK_FILE)], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()  # it holds the lock
        assert sweep_cli(capsys, spec_file(tmp_path), out)[0] == 2
        holder.kill()
        holder.wait(timeout=10)
    finally:
        holder.kill()
        holder.stdout.close()
    rc, stdout, err = sweep_cli(capsys, spec_file(tmp_path), out)
    assert (rc, err) == (0, "") and f"{CHUNKS} chunks computed" in stdout


def test_a_chunk_changed_on_disk_is_recomputed_on_resume_and_refused_at_merge(tmp_path,
                                                                              capsys):
    out = tmp_path / "out"
    spec = spec_file(tmp_path)
    assert sweep_cli(capsys, spec, out)[0] == 0
    want = (out / "results.csv").read_bytes()
    chunk = out / "chunks" / "000001.json"
    record = json.loads(chunk.read_text())
    assert record["sha256"] == _store.rows_sha256(record["rows"])
    record["rows"][0][2] = 24.0  # ranks 8 -> 24 in one row: still valid JSON
    chunk.write_text(json.dumps(record))
    truncated = out / "chunks" / "000004.json"
    truncated.write_text(truncated.read_text()[:50])
    old_format = out / "chunks" / "000005.json"  # no checksum: cannot be trusted
    record = json.loads(old_format.read_text())
    del record["sha256"]
    old_format.write_text(json.dumps(record))
    job = sweep.make_job(sweep.load_spec(spec))
    with pytest.raises(ValueError, match=r"^sweep 'a' in .*: chunk 000001 changed on disk; "
                                         r"rerun with `resume` to compute it again$"):
        sweep.finish_sweep(job, out, plots=False)
    rc, stdout, err = sweep_cli(capsys, spec, out, "--resume")
    assert rc == 0 and f"3 chunks computed, {CHUNKS - 3} from disk" in stdout
    assert err.splitlines() == ["codesign sweep: chunk 000001 changed on disk; recomputed",
                                "codesign sweep: chunk 000004 changed on disk (not JSON); "
                                "recomputed",
                                "codesign sweep: chunk 000005 has no checksum (an older "
                                "codesign wrote it); recomputed"]
    assert (out / "results.csv").read_bytes() == want
    assert sweep_cli(capsys, spec, out, "--resume")[2] == ""  # all verified now


def test_a_full_disk_is_one_line_naming_the_file_and_keeps_the_chunks(tmp_path, capsys,
                                                                       monkeypatch):
    out = tmp_path / "out"
    spec = spec_file(tmp_path)
    fsync, calls = os.fsync, itertools.count(1)

    def full_after_five(fd):  # the manifest, then chunks 0 and 1 (CSV + JSON each)
        if next(calls) > 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", full_after_five)
    rc, stdout, err = sweep_cli(capsys, spec, out)
    assert (rc, stdout) == (2, "")
    assert one_line(err) == (f"codesign sweep: error: cannot write "
                             f"{str(out / 'chunks' / '000002.csv')!r}: No space left on device")
    assert sorted(p.name for p in (out / "chunks").iterdir()) == [
        "000000.csv", "000000.json", "000001.csv", "000001.json"]  # no temp file left
    monkeypatch.setattr(os, "fsync", fsync)
    rc, stdout, err = sweep_cli(capsys, spec, out, "--resume")
    assert (rc, err) == (0, "") and f"{CHUNKS - 2} chunks computed, 2 from disk" in stdout


def test_a_read_only_folder_is_one_line_naming_the_file(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    out = tmp_path / "out"
    spec = spec_file(tmp_path)
    assert sweep_cli(capsys, spec, out)[0] == 0
    before = snapshot(out)
    out.chmod(0o555)
    try:
        rc, _, err = sweep_cli(capsys, spec, out, "--resume")
    finally:
        out.chmod(0o755)
    assert rc == 2 and one_line(err) == (f"codesign sweep: error: cannot write "
                                         f"{str(out / 'manifest.json')!r}: Permission denied")
    del before[out / _store.LOCK_FILE]  # a file of its own: written by whoever holds the lock
    assert {p: v for p, v in snapshot(out).items() if p.name != _store.LOCK_FILE} == before


def test_an_out_that_is_not_a_folder_is_one_line(tmp_path, capsys):
    spec = spec_file(tmp_path)
    file = tmp_path / "file"
    file.write_text("mine\n")
    rc, _, err = sweep_cli(capsys, spec, file)
    assert rc == 2 and one_line(err) == (f"codesign sweep: error: --out {str(file)!r} is a "
                                         "file, not a folder; name a folder")
    rc, _, err = sweep_cli(capsys, spec, file / "sub")
    assert rc == 2 and one_line(err) == (f"codesign sweep: error: cannot write "
                                         f"{str(file / 'sub')!r}: Not a directory")
    job = sweep.make_job(sweep.load_spec(spec))
    with pytest.raises(ValueError, match=r"out_dir=.*file' is a file, not a folder"):
        sweep.run(job, file)
    assert file.read_text() == "mine\n"


def test_points_past_the_cap_are_refused_before_any_is_made(tmp_path, capsys):
    spec = tmp_path / "big.toml"
    spec.write_text('target = "collective"\n[knobs]\nranks = { grid = [8, 64, 1000000] }\n'
                    'n_bytes = { log_grid = ["1KiB", "1MiB", 1000000] }\n')
    rc, _, err = sweep_cli(capsys, spec, tmp_path / "out")  # made, 1e12 points: MemoryError
    assert rc == 2 and one_line(err) == (
        "codesign sweep: error: knobs: 1e12 points (1e6 ranks x 1e6 n_bytes) exceed the cap "
        "of 1e7 points per sweep (MAX_POINTS); coarsen a grid, draw fewer samples or split "
        "the sweep")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"knobs\.ranks\.grid=\[8, 64, 1000000000000\] asks "
                                         r"for 1e12 points, past the cap of 1e7"):
        sweep.parse_spec({"target": "collective", "knobs": {"ranks": {"grid": [8, 64, 10**12]}}})
    with pytest.raises(ValueError, match=r"1e8 points \(2 algorithm x 5e7 samples\)"):
        sweep.parse_spec({"target": "collective", "samples": 5 * 10**7, "knobs": {
            "algorithm": {"categories": ["ring", "tree"]}, "ranks": {"random": [8, 64]}}})
    # the cap itself is a sweep; its points are made a chunk at a time
    at_cap = sweep.make_job(sweep.parse_spec({"target": "collective", "chunk_size": 10**5,
                                              "knobs": {"ranks": {"grid": [8, 64, 1000]},
                                                        "n_bytes": {"grid": [1, 2, 10**4]}}}))
    assert at_cap.points.size == _spec.MAX_POINTS
    assert at_cap.points.float_rows(_spec.MAX_POINTS - 1, _spec.MAX_POINTS).tolist() == [
        [64.0, 2.0]]


def test_points_made_a_chunk_at_a_time_are_the_grid_crossed_with_the_draws():
    raw = {"target": "collective", "samples": 3, "seed": 1,
           "knobs": {"n_bytes": {"random": ["1KiB", "1MiB"]}, "ranks": [8, 16, 32],
                     "local_ranks": [4, 8]}}
    pts = sweep.make_points(sweep.parse_spec(raw))
    draws = pts.draws[:, 0]
    want = [[n, r, lr] for r, lr in itertools.product([8, 16, 32], [4, 8]) for n in draws]
    assert pts.n_float == 18 and pts.floats.tolist() == want
    assert pts.float_rows(5, 11).tolist() == want[5:11]


def test_a_manifest_or_chunk_nested_past_python_s_stack_is_one_line(tmp_path, capsys):
    """A chunk nested 100,000 deep is changed on disk (not JSON), a manifest so
    nested one line naming it: never a RecursionError."""
    spec = spec_file(tmp_path)
    done = tmp_path / "done"
    assert sweep_cli(capsys, spec, done)[0] == 0
    job = sweep.make_job(sweep.load_spec(spec))
    chunk = job.chunks[1]
    _store.chunk_path(done, chunk).write_text("[" * 100_000)
    with pytest.raises(_store.ChangedChunk, match="changed on disk \\(not JSON\\)"):
        _store.read_chunk(job, done, chunk)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("[" * 100_000)
    rc, _, err = sweep_cli(capsys, spec_file(tmp_path), out)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "its manifest.json cannot be read (nested too deep)" in err


def test_an_edited_chunk_csv_is_written_again_from_its_verified_record(tmp_path, capsys):
    spec = spec_file(tmp_path)
    out = tmp_path / "out"
    assert sweep_cli(capsys, spec, out)[0] == 0
    csv_copy = out / "chunks" / "000002.csv"
    want = csv_copy.read_text()
    csv_copy.write_text(want.replace(",", ";"))
    (out / "chunks" / "000003.csv").unlink()
    rc, stdout, err = sweep_cli(capsys, spec, out, "--resume")
    assert (rc, err) == (0, "") and f"{CHUNKS} from disk" in stdout
    assert csv_copy.read_text() == want and (out / "chunks" / "000003.csv").exists()
