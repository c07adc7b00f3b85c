"""The persistent compilation cache (`$CODESIGN_CACHE`) hits on a second process run,
and `codesign estimate`'s stored executables (`compiling.compiled(store=...)`) are
read back, for the structure they were compiled for only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def estimate_program(env, *sets) -> dict:
    argv = [sys.executable, "-m", "codesign", "estimate", "--json"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _entries(cache) -> dict:
    """Cache entries -> their modification times (JAX's access-time files aside)."""
    return {p.name: p.stat().st_mtime_ns for p in cache.rglob("*")
            if p.is_file() and not p.name.endswith("-atime")}


def test_second_run_reads_the_persistent_cache(tmp_path):
    env = {**os.environ, "CODESIGN_CACHE": str(tmp_path)}
    first = estimate_program(env)
    written = _entries(tmp_path)
    assert written, "the first run wrote no compiled executable to CODESIGN_CACHE"
    second = estimate_program(env)
    assert _entries(tmp_path) == written  # every executable read back: none added or rewritten
    assert second == first


def test_a_stored_executable_serves_its_own_structure_only(tmp_path):
    """A second structure (another schedule: a static field) gets its own stored
    executable and its own answer, the library's; the first one's is unchanged."""
    from codesign import scenario
    from codesign.model import step

    env = {**os.environ, "CODESIGN_CACHE": str(tmp_path)}
    store = tmp_path / "codesign-executables"
    first = estimate_program(env)
    one = {p.name: p.stat().st_mtime_ns for p in store.glob("*.exe")}
    assert len(one) == 1
    other = estimate_program(env, "parallel.schedule=1f1b", "parallel.interleave=1")
    two = {p.name: p.stat().st_mtime_ns for p in store.glob("*.exe")}
    assert len(two) == 2 and all(two[k] == v for k, v in one.items())
    assert other["step_time_s"] != first["step_time_s"]
    scn = scenario.load(None, ["parallel.schedule=1f1b", "parallel.interleave=1"])  # x64: conftest
    assert other["step_time_s"] == pytest.approx(float(step.estimate(scn).step.step_time_s),
                                                 rel=1e-12)
    # a damaged file is compiled again, and rewritten
    (store / next(iter(one))).write_bytes(b"not an executable")
    assert estimate_program(env) == first
    assert (store / next(iter(one))).read_bytes() != b"not an executable"


def test_a_stored_executable_compiled_over_a_warm_xla_cache_is_whole(tmp_path):
    """With XLA's cache warm but no stored executable (another build wrote the
    cache), the executable stored is compiled afresh: one read back from XLA's
    cache serializes without its kernels: the next run failed with exit 1, and
    later compiled it again on every run."""
    import shutil

    env = {**os.environ, "CODESIGN_CACHE": str(tmp_path)}
    store = tmp_path / "codesign-executables"
    first = estimate_program(env)
    shutil.rmtree(store)
    assert estimate_program(env) == first  # compiled afresh (not read from XLA's cache), stored
    stored = {p.name: p.stat().st_mtime_ns for p in store.glob("*.exe")}
    assert estimate_program(env) == first  # the stored executable read back and run
    # whole: not found wanting, compiled again and written over (`compiling._xla_cache_off`)
    assert {p.name: p.stat().st_mtime_ns for p in store.glob("*.exe")} == stored
