"""The sweep runner as a command: SIGKILL then --resume, and 1 vs 2 processes
under jax.distributed, both byte-identical to an uninterrupted one-process run."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from codesign import sweep
from codesign.cli import main

SPEC = """
name = "resume-demo"
target = "collective"
chunk_size = {chunk_size}
[base]
system = "dgx-h100"
[knobs]
algorithm = {{ categories = ["ring", "recursive_doubling"] }}
ranks = [8, 64, 512]
n_bytes = {{ log_grid = ["1KiB", "1GiB", {points}] }}
"""
RESULTS = ("results.csv", "results.json")


def write_spec(folder: Path, *, chunk_size: int, points: int) -> Path:
    path = folder / "spec.toml"
    path.write_text(SPEC.format(chunk_size=chunk_size, points=points))
    return path


def reference(spec: Path, out: Path) -> dict:
    """An uninterrupted run in this process (8 fake devices)."""
    job = sweep.make_job(sweep.load_spec(spec))
    sweep.run(job, out, progress=False)
    sweep.finish_sweep(job, out, plots=False)
    return {name: (out / name).read_bytes() for name in RESULTS}


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "codesign", "sweep", *map(str, args), "--no-plots"]


def test_sigkill_then_resume_gives_identical_files(tmp_path):
    # 2 combos x 3 ranks x 201 sizes = 1206 points in 4-point chunks: 302 chunks
    spec = write_spec(tmp_path, chunk_size=4, points=201)
    want = reference(spec, tmp_path / "reference")
    out = tmp_path / "killed"
    chunks = out / "chunks"
    proc = subprocess.Popen(cli(spec, "--out", out, "--no-progress"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (chunks.is_dir() and any(chunks.glob("*.json"))):
            assert proc.poll() is None, "the sweep ended before writing a chunk"
            assert time.monotonic() < deadline, "no chunk written within 60 s"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    on_disk = sorted(chunks.glob("*.json"))
    assert 0 < len(on_disk) < 302, f"kill landed too late: {len(on_disk)} chunks on disk"
    assert not (out / "results.csv").exists()
    stamps = {p: p.stat().st_mtime_ns for p in on_disk}
    done = subprocess.run(cli(spec, "--out", out, "--resume", "--no-progress"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    computed, skipped = map(int, re.search(r"(\d+) chunks computed, (\d+) from disk",
                                           done.stdout).groups())
    assert (computed, skipped) == (302 - len(on_disk), len(on_disk))
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # nothing recomputed
    for name in RESULTS:
        assert (out / name).read_bytes() == want[name], name


def test_two_processes_give_identical_files(tmp_path):
    spec = write_spec(tmp_path, chunk_size=16, points=21)
    want = reference(spec, tmp_path / "reference")
    out = tmp_path / "two"
    done = subprocess.run(cli(spec, "--out", out, "--processes", 2, "--cpu-devices", 4,
                              "--timeout", 150, "--no-progress"),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr + "".join(
        p.read_text() for p in (out / "logs").glob("*.log"))
    assert "8 chunks computed, 0 from disk" in done.stdout
    logs = [(out / "logs" / f"process-{i}.log").read_text() for i in (0, 1)]
    for i, log in enumerate(logs):  # each process evaluated its half on its 4 devices
        assert f"process {i} of 2 (4 local devices): 4 chunks computed" in log, log
    for name in RESULTS:
        assert (out / name).read_bytes() == want[name], name


def _files(out: Path) -> dict:
    return {name: (out / name).read_bytes() for name in RESULTS}


def _sweep(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "XLA_FLAGS": re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                                             os.environ.get("XLA_FLAGS", "")).strip()}
    return subprocess.run(cli(*args, "--no-progress", "--timeout", 150), capture_output=True,
                          text=True, timeout=180, env=env)


def _counts(stdout: str) -> tuple[int, int]:
    found = re.search(r"(\d+) chunks computed, (\d+) from disk", stdout)
    assert found, stdout
    return int(found[1]), int(found[2])


def test_two_processes_with_chunk_size_grad_and_resume_match_one_process(tmp_path, capsys):
    # 2 x 3 x 9 = 54 points; the spec says 16 points per chunk, the command line 8
    spec = write_spec(tmp_path, chunk_size=16, points=9)
    flags = ("--chunk-size", 8, "--grad", "--cpu-devices", 2)
    one = _sweep(spec, "--out", tmp_path / "one", *flags)
    assert one.returncode == 0, one.stderr
    assert _counts(one.stdout) == (8, 0)
    want = _files(tmp_path / "one")
    assert b"dlog(" in want["results.csv"].splitlines()[0]  # --grad reached the workers
    out = tmp_path / "two"
    two = _sweep(spec, "--out", out, "--processes", 2, *flags)
    assert two.returncode == 0, two.stderr
    assert _counts(two.stdout) == (8, 0)
    assert _files(out) == want
    for path in sorted((out / "chunks").glob("*.json"))[::3]:  # lose 3 of 8 chunks
        path.unlink()
        path.with_suffix(".csv").unlink(missing_ok=True)
    for name in RESULTS:
        (out / name).unlink()
    again = _sweep(spec, "--out", out, "--processes", 2, "--resume", *flags)
    assert again.returncode == 0, again.stderr
    assert _counts(again.stdout) == (3, 5)
    assert _files(out) == want
    # resuming with another chunking or without --grad is refused before any
    # process starts or anything compiles (so asked in this process)
    refused = ("sweep", str(spec), "--out", str(out), "--resume", "--no-progress", "--no-plots")
    assert main([*refused, "--processes", "2", "--chunk-size", "4", "--grad",
                 "--cpu-devices", "2"]) == 2
    assert "another chunk size (chunk_size=8 != 4" in capsys.readouterr().err
    assert main([*refused, "--chunk-size", "8"]) == 2
    assert "another --grad" in capsys.readouterr().err
