"""The persistent compilation cache (`$CODESIGN_CACHE`) hits on a second process run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest


def _estimate(env) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "codesign", "estimate", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return time.perf_counter() - t0, json.loads(proc.stdout)


def _entries(cache) -> dict:
    """Cache entries -> their modification times (JAX's access-time files aside)."""
    return {p.name: p.stat().st_mtime_ns for p in cache.rglob("*")
            if p.is_file() and not p.name.endswith("-atime")}


@pytest.mark.xfail(strict=True, reason="known bug, open: JAX writes no persistent cache entry "
                   "for the estimate's program because Scenario.checked's eqx.error_if is a "
                   "host callback ('Not writing persistent cache entry ... because it uses "
                   "host callbacks'), so every run compiles again")
def test_second_run_reads_the_persistent_cache(tmp_path):
    env = {**os.environ, "CODESIGN_CACHE": str(tmp_path)}
    first_s, first = _estimate(env)
    written = _entries(tmp_path)
    assert written, "the first run wrote no compiled executable to CODESIGN_CACHE"
    second_s, second = _estimate(env)
    assert _entries(tmp_path) == written  # every executable read back: none added or rewritten
    assert second == first
    assert second_s <= 1.2 * first_s, (first_s, second_s)
