"""The one launcher: worker command lines, clusters JAX detects, workers that die
with their supervisor."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codesign import procfs
from codesign.execute import distributed

REPO = Path(__file__).resolve().parents[1]
BENCH = ["--op", "all_reduce", "--algorithm", "hierarchical", "--mesh", "2x4",
         "--sizes", "1KiB:2KiB", "--iters", "2", "--warmup", "1", "--json", "--no-progress"]
KEYS = ("op", "algorithm", "ranks", "mesh", "size_bytes", "count", "wrong", "checksum")


def _parser():
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("spec")
    p.add_argument("files", nargs="*")
    p.add_argument("--out")
    p.add_argument("--chunk-size", type=int)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--grad", nargs="?", const=True, default=None)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--hidden", help=argparse.SUPPRESS)
    return p


@pytest.mark.parametrize("argv", [
    ["s.toml"],
    ["s.toml", "a", "b", "--chunk-size", "32", "--resume", "--grad"],
    ["s.toml", "--grad", "step_s", "--iters", "3", "--set", "x=1", "--set", "y=2",
     "--hidden", "h"],
])
def test_forwarded_argv_parses_back_to_the_same_arguments(argv):
    parser = _parser()
    args = parser.parse_args([*argv, "--processes", "2"])
    forwarded = distributed.forwarded_argv(parser, args, drop=("processes",))
    assert "--processes" not in forwarded
    again = vars(parser.parse_args(forwarded))
    assert again == {**vars(args), "processes": 1}


def test_forwarded_argv_applies_overrides_and_rejects_unknown_ones():
    parser = _parser()
    args = parser.parse_args(["s.toml", "--chunk-size", "8"])
    forwarded = distributed.forwarded_argv(parser, args, override={"resume": True, "out": "o"})
    assert parser.parse_args(forwarded).resume and "--out" in forwarded
    assert forwarded[forwarded.index("--chunk-size") + 1] == "8"
    with pytest.raises(ValueError, match="names no option"):
        distributed.forwarded_argv(parser, args, override={"chunks": 3})


SLURM = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")


def _slurm_env(process_id: int, tasks: int, port: int) -> dict:
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "127.0.0.1",
            "SLURM_NTASKS": str(tasks), "SLURM_PROCID": str(process_id),
            "SLURM_LOCALID": str(process_id), "JAX_COORDINATOR_PORT": str(port)}


def test_detect_cluster_reads_slurm_like_jax(monkeypatch):
    for k in SLURM:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("OMPI_MCA_orte_hnp_uri", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert distributed.detect_cluster() is None
    for k, v in _slurm_env(1, 2, 1234).items():
        monkeypatch.setenv(k, v)
    assert distributed.detect_cluster() == distributed.Cluster("slurm", 2, 1)
    monkeypatch.setenv("SLURM_NTASKS", "1")  # one task: nothing to join
    assert distributed.detect_cluster() is None
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.delenv("SLURM_STEP_NODELIST")  # a batch script, not an srun step
    assert distributed.detect_cluster() is None


def _clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                              env.get("XLA_FLAGS", "")).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **(extra or {})}


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _run_together(commands, envs, timeout_s=150):
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=REPO) for c, e in zip(commands, envs, strict=True)]
    try:
        return [p.communicate(timeout=timeout_s) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_simulated_slurm_job_starts_without_flags_and_matches_two_local_processes():
    local = subprocess.run([sys.executable, "-m", "codesign", "bench", *BENCH, "--processes",
                            "2"], env=_clean_env(), capture_output=True, text=True,
                           timeout=150, cwd=REPO)
    assert local.returncode == 0, local.stderr
    port = distributed.free_port()
    cmd = [sys.executable, "-m", "codesign", "bench", *BENCH, "--devices", "4"]
    results = _run_together([cmd, cmd], [_clean_env(_slurm_env(i, 2, port)) for i in (0, 1)])
    for _out, err, rc in results:
        assert rc == 0, err
    first, second = (_records(r[0]) for r in results)
    want = _records(local.stdout)
    assert len(want) == 2 and [r["ranks"] for r in first] == [8, 8]
    assert [{k: r[k] for k in KEYS} for r in first] == [{k: r[k] for k in KEYS} for r in want]
    assert second == []  # only process 0 prints


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_no_worker_outlives_a_killed_supervisor():
    # a bench that would run for hours: only the supervisor's death can end it
    parent = subprocess.Popen([sys.executable, "-m", "codesign", "bench", "--sizes", "1KiB:1KiB",
                               "--iters", "100000000", "--processes", "2", "--no-progress"],
                              env=_clean_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2:
            assert parent.poll() is None, "the bench ended before starting its workers"
            assert time.monotonic() < deadline, "no 2 workers within 60 s"
            time.sleep(0.05)
            workers = procfs.children(parent.pid)
        time.sleep(3.0)  # let them import JAX and join
        assert len(workers) == 2 and all(_alive(w) for w in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = [w for w in workers if _alive(w)]
        assert survivors == [], f"workers {survivors} outlived their supervisor"
    finally:
        parent.kill()
        parent.wait()
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def test_version_names_codesign_jax_backend_and_devices(capsys):
    import jax

    from codesign import __version__
    from codesign.cli import main

    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"codesign {__version__}; jax {jax.__version__}")
    assert f"backend {jax.default_backend()}: {len(jax.devices())} x " in line
