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
               "--process-id", "0", "--join-timeout", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1, err  # JAX's own log of the abort (absl lines, a stack) is held back
    assert "process 0 of 2 did not join the coordinator at 127.0.0.1:" in err[0]
    assert "join timeout 1 s" in err[0]


ABSL = ("E1202 18:28:10.025535    6247 coordination_service.cc:1549] tasks are unhealthy\n"
        "0\n1\nF1202 18:28:10.026074    6258 client.h:80] Terminating process\n"
        "*** Check failure stack trace: ***\n    @     0x7fa6fd440634  absl::SendToLog()\n")


@pytest.mark.parametrize("code", [0, 3])
def test_the_relayed_stderr_stops_at_the_runtime_s_first_error_line(capfd, code):
    """What follows an absl error line is relayed only if the worker then succeeds;
    a failing one's reason is the one line of the ValueError."""
    worker = [sys.executable, "-c",
              f"import sys; print({distributed.JOINED_MARKER + ' 0 of 1'!r}, file=sys.stderr); "
              f"print('progress 1/2', file=sys.stderr); print({ABSL!r}, file=sys.stderr, end=''); "
              f"sys.exit({code})"]
    if code:
        with pytest.raises(ValueError, match="exited with code 3: Terminating process"):
            distributed.supervise([worker], join_timeout_s=30)
    else:
        distributed.supervise([worker], join_timeout_s=30)
    err = capfd.readouterr().err
    assert err.startswith("progress 1/2\n"), err
    assert ("stack trace" in err) == (code == 0), err


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
    for timeout in ("0", "-1"):
        assert main(["bench", "--processes", "2", "--join-timeout", timeout]) == 2
        assert f"join timeout={timeout} s must be in [1, 1,000,000] s" in capsys.readouterr().err
