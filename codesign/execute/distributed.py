"""Several processes on one global mesh: jax.distributed with bounded waits.

On one machine `codesign bench --processes N` starts N worker processes joined
through a coordinator on 127.0.0.1 (CPU collectives over gloo), each with
devices / N fake CPU devices. On a GPU or TPU cluster every host runs
`codesign bench --coordinator HOST:PORT --num-processes N --process-id I`,
which starts one worker there. A worker is `BOOTSTRAP`: it joins first, then
runs the codesign command.
Either way a supervisor watches the workers: when one exits with an error the
others are killed and the run ends with one clear line; a worker that has not
joined within the join timeout (plus `JOIN_GRACE_S` to import and start) is
killed too. jax.distributed itself gets the same timeout for joining, for
heartbeats and for shutdown, so no process waits forever on a missing peer
(JAX aborts such a process; the supervisor reports why).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import jax

JOINED_MARKER = "codesign: joined as process"
JOIN_GRACE_S = 30.0  # importing JAX and starting a worker, on top of the join timeout
_FORCE_FLAG = "xla_force_host_platform_device_count"


def configure_cpu_devices(n: int, *, reexec: bool = False) -> None:
    """Fake `n` CPU devices, before any JAX computation.

    Skipped when XLA_FLAGS already forces a device count (the user's choice,
    or tests/conftest.py). It only affects the CPU backend: on a GPU or TPU
    host JAX still computes on the accelerators. If JAX already runs on CPU
    with another count (something computed at import), `reexec=True` restarts
    this command with the count in XLA_FLAGS; otherwise it is an error.
    """
    if n < 1:
        raise ValueError(f"devices={n} must be at least 1")
    if _FORCE_FLAG in os.environ.get("XLA_FLAGS", ""):
        return
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
        return
    except RuntimeError:  # the backend already exists
        pass
    if jax.default_backend() != "cpu" or len(jax.devices("cpu")) == n:
        return
    if reexec:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --{_FORCE_FLAG}={int(n)}".strip()
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "codesign", *sys.argv[1:]],
                  {**os.environ, "XLA_FLAGS": flags})
    raise ValueError(f"devices={n}: JAX already runs on {len(jax.devices('cpu'))} CPU devices; "
                     "set the count before any JAX computation")


def check_coordinator(address: str) -> str:
    host, _, port = str(address).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"coordinator={address!r} must be HOST:PORT, e.g. 10.0.0.1:1234")
    return address


# A worker joins before anything imports codesign: jax.distributed.initialize must
# run before the first JAX computation, and a module's import may compute. So the
# worker is `python -c BOOTSTRAP CONFIG ARGS...`: it sets the CPU device count and
# gloo, joins with bounded waits, prints JOINED_MARKER, then runs `codesign ARGS`.
BOOTSTRAP = """
import json, os, sys
import jax
cfg = json.loads(sys.argv[1])
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    jax.config.update("jax_num_cpu_devices", cfg["devices"])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
t = cfg["timeout_s"]
jax.distributed.initialize(cfg["coordinator"], cfg["num_processes"], cfg["process_id"],
                           initialization_timeout=t, heartbeat_timeout_seconds=t,
                           shutdown_timeout_seconds=t)
print(cfg["marker"], cfg["process_id"], "of", cfg["num_processes"], file=sys.stderr, flush=True)
from codesign.cli import main
code = main(sys.argv[2:])
jax.distributed.shutdown()
sys.exit(code)
"""


def worker_command(args: Sequence[str], *, coordinator: str, num_processes: int,
                   process_id: int, devices: int, timeout_s: int) -> list[str]:
    """The command line of one worker: joins, then runs `codesign *args`."""
    check_coordinator(coordinator)
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id} must lie in [0, num_processes="
                         f"{num_processes})")
    config = {"coordinator": coordinator, "num_processes": int(num_processes),
              "process_id": int(process_id), "devices": int(devices),
              "timeout_s": int(timeout_s), "marker": JOINED_MARKER}
    return [sys.executable, "-c", BOOTSTRAP, json.dumps(config), *args]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


def failure_reason(stderr: str) -> str:
    """The most telling line of a dead worker's stderr (absl fatal, Python error)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("@") and JOINED_MARKER not in ln]
    for ln in reversed(lines):
        fatal = re.match(r"F\d{4} [\d:.]+\s+\d+ [^\]]+\] (.*)", ln)
        if fatal:
            return fatal.group(1)[:300]
    for ln in reversed(lines):
        if re.search(r"(Error|error|Exception)\b", ln):
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the worker and its children
        except ProcessLookupError:
            pass
        proc.wait()


def _read(f) -> str:
    f.flush()
    f.seek(0)
    return f.read().decode(errors="replace")


def supervise(commands: Sequence[Sequence[str]], *, join_timeout_s: float,
              coordinator: str = "", env: dict | None = None, relay_stderr_of: int | None = 0,
              process_ids: Sequence[int] | None = None, num_processes: int | None = None,
              poll_s: float = 0.05) -> list[Finished]:
    """Run worker `commands` together; return their outputs once all exit 0.

    Raises ValueError (and kills every other worker) as soon as one exits with
    an error, or when one has not printed `JOINED_MARKER` within
    `join_timeout_s + JOIN_GRACE_S`. The stderr of worker `relay_stderr_of`
    (its progress bar) is copied to this process's stderr as it arrives.
    Errors name worker i as `process process_ids[i] of num_processes` (default:
    its position among `commands`).
    """
    n = len(commands)
    ids = list(range(n)) if process_ids is None else list(process_ids)
    total = n if num_processes is None else num_processes
    files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in commands]
    procs = [subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env, start_new_session=True)
             for cmd, (out, err) in zip(commands, files, strict=True)]
    start, relayed, joined = time.monotonic(), 0, [False] * n
    try:
        while True:
            for i, (proc, (_, err)) in enumerate(zip(procs, files, strict=True)):
                text = None
                if not joined[i]:
                    text = _read(err)
                    joined[i] = JOINED_MARKER in text
                if i == relay_stderr_of:
                    text = _read(err) if text is None else text
                    new = text[relayed:].replace(f"{JOINED_MARKER} {ids[i]} of {total}\n", "")
                    relayed = len(text)
                    sys.stderr.write(new)
                    sys.stderr.flush()
                rc = proc.poll()
                if rc not in (None, 0):
                    stderr = _read(err)
                    where = f" at {coordinator}" if coordinator else ""
                    if JOINED_MARKER not in stderr:
                        raise ValueError(
                            f"process {ids[i]} of {total} did not join the coordinator{where} "
                            f"(exit code {rc} after {time.monotonic() - start:.0f} s, join "
                            f"timeout {join_timeout_s:g} s): {failure_reason(stderr)}")
                    raise ValueError(f"process {ids[i]} of {total} exited with code {rc}: "
                                     f"{failure_reason(stderr)}")
                if not joined[i] and time.monotonic() - start > join_timeout_s + JOIN_GRACE_S:
                    raise ValueError(f"process {ids[i]} of {total} did not join the coordinator "
                                     f"within {join_timeout_s + JOIN_GRACE_S:g} s; stopped "
                                     "every process")
            if all(p.poll() == 0 for p in procs):
                return [Finished(0, _read(out), _read(err)) for out, err in files]
            time.sleep(poll_s)
    finally:
        for proc in procs:
            _kill(proc)
        for out, err in files:
            out.close()
            err.close()
