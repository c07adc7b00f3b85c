"""Several processes joined by jax.distributed (gloo on CPU): same results, bounded failures."""

import json
import os
import sys

import pytest

from codesign.cli import main
from codesign.execute import distributed

BENCH = ["--op", "all_reduce", "--algorithm", "hierarchical", "--mesh", "2x4",
         "--sizes", "1KiB:2KiB", "--iters", "2", "--warmup", "1", "--json", "--no-progress"]


def _records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_two_processes_of_four_devices_match_one_process_of_eight(capsys):
    assert main(["bench", *BENCH]) == 0
    single = _records(capsys.readouterr().out)
    assert main(["bench", *BENCH, "--processes", "2", "--join-timeout", "60"]) == 0
    multi = _records(capsys.readouterr().out)
    keys = ("op", "algorithm", "ranks", "mesh", "size_bytes", "count", "wrong", "checksum")
    assert [{k: r[k] for k in keys} for r in multi] == [{k: r[k] for k in keys} for r in single]
    assert [r["wrong"] for r in multi] == [0, 0] and len(multi) == 2


def test_a_process_that_never_joins_ends_the_run_with_a_clear_error(capsys):
    port = distributed.free_port()  # nobody else will ever join: process 1 does not exist
    rc = main(["bench", *BENCH, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
               "--process-id", "0", "--join-timeout", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert "process 0 of 2 did not join the coordinator at 127.0.0.1:" in err[-1]
    assert "join timeout 3 s" in err[-1]


def test_supervisor_kills_the_others_when_one_fails(tmp_path):
    pid_file, woke = tmp_path / "sleeper.pid", tmp_path / "sleeper.woke"
    sleeper = [sys.executable, "-c",
               f"import os, sys, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
               f"print({distributed.JOINED_MARKER + ' 0 of 2'!r}, file=sys.stderr, flush=True); "
               f"time.sleep(120); open({str(woke)!r}, 'w').write('slept to the end')"]
    failing = [sys.executable, "-c",
               f"import sys, time; print({distributed.JOINED_MARKER + ' 1 of 2'!r}, "
               "file=sys.stderr, flush=True); time.sleep(1); "
               "print('RuntimeError: gloo connection reset', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(ValueError, match="process 1 of 2 exited with code 3: RuntimeError: gloo"):
        distributed.supervise([sleeper, failing], join_timeout_s=30, relay_stderr_of=None)
    assert not woke.exists()  # killed, not waited for (no clock involved)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_stopped_worker_is_blamed_not_the_survivor(tmp_path):
    """Worker 0 stops itself (SIGSTOP) after joining; worker 1, whose peer stopped
    answering, fails: the report names process 0, and both are killed."""
    pid_file = tmp_path / "stopped.pid"
    stopped = [sys.executable, "-c",
               f"import os, signal, sys; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
               f"print({distributed.JOINED_MARKER + ' 0 of 2'!r}, file=sys.stderr, flush=True); "
               "os.kill(os.getpid(), signal.SIGSTOP)"]
    survivor = [sys.executable, "-c",
                f"import sys, time; print({distributed.JOINED_MARKER + ' 1 of 2'!r}, "
                "file=sys.stderr, flush=True); time.sleep(1); "
                "print('RuntimeError: heartbeat timeout', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(ValueError, match=r"process 0 of 2 was stopped \(SIGSTOP or a debugger\)"
                                         r" and stopped answering, so process 1 exited with "
                                         r"code 3: RuntimeError: heartbeat timeout"):
        distributed.supervise([stopped, survivor], join_timeout_s=30, relay_stderr_of=None)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_failure_reason_prefers_fatal_lines():
    stderr = ("I0101 starting\n"
              "F1130 04:31:33.904754    9398 client.h:80] Terminating process because the JAX "
              "distributed service detected fatal errors. DEADLINE_EXCEEDED\n"
              "*** Check failure stack trace: ***\n    @     0x7f9b  nanobind::func\n")
    assert distributed.failure_reason(stderr).startswith("Terminating process because")
    assert distributed.failure_reason("") == "no output"


def test_coordinator_and_launcher_arguments_are_checked(capsys):
    assert main(["bench", "--coordinator", "localhost", "--num-processes", "2",
                 "--process-id", "0"]) == 2
    assert "coordinator='localhost' must be HOST:PORT" in capsys.readouterr().err
    assert main(["bench", "--processes", "3"]) == 2
    assert "processes=3 must divide devices=8" in capsys.readouterr().err
    assert main(["bench", "--coordinator", "127.0.0.1:1234"]) == 2
    assert "--coordinator needs --num-processes and --process-id" in capsys.readouterr().err
