"""The persistent compilation cache (`$CODESIGN_CACHE`) hits on a second process run."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _estimate(env) -> dict:
    proc = subprocess.run([sys.executable, "-m", "codesign", "estimate", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _entries(cache) -> dict:
    """Cache entries -> their modification times (JAX's access-time files aside)."""
    return {p.name: p.stat().st_mtime_ns for p in cache.rglob("*")
            if p.is_file() and not p.name.endswith("-atime")}


def test_second_run_reads_the_persistent_cache(tmp_path):
    env = {**os.environ, "CODESIGN_CACHE": str(tmp_path)}
    first = _estimate(env)
    written = _entries(tmp_path)
    assert written, "the first run wrote no compiled executable to CODESIGN_CACHE"
    second = _estimate(env)
    assert _entries(tmp_path) == written  # every executable read back: none added or rewritten
    assert second == first
