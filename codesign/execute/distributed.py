"""Several processes on one global mesh: the one launcher (of the `codesign`
command's `bench`, `sweep` and `calibrate compute`), with bounded waits.

Three ways to start:
- N processes on one machine: N worker processes joined through a
  coordinator on 127.0.0.1 (CPU collectives over gloo), each with devices / N
  fake CPU devices;
- on a cluster JAX recognises (SLURM under `srun`, Open MPI under `mpirun`,
  Cloud TPU pods, Kubernetes; see `detect_cluster`) every process starts one
  worker that calls `jax.distributed.initialize()` with no arguments: JAX
  reads the coordinator, the process count and id from the environment;
- anywhere else every host names the coordinator, the process count and its
  own id.
A worker is `BOOTSTRAP`: it joins first, then calls the entry point its
launcher names (`module:function`, given the worker's arguments; the CLI's
is its `main` and the options of its own command line, `forwarded_argv`:
every option that shapes the result, from the parsed arguments). This module
knows no command: its callers say what to run.
A supervisor watches the workers: when one exits with an error the others are
killed and the run ends with one clear line; a worker that has not joined
within the join timeout (plus `JOIN_GRACE_S` to import and start) is killed
too. jax.distributed itself gets the same timeout for joining, for heartbeats
and for shutdown, so no process waits forever on a missing peer (JAX aborts
such a process; the supervisor reports why). Workers die with their
supervisor: on Linux the kernel sends them SIGKILL when it exits
(prctl PR_SET_PDEATHSIG), and everywhere a thread ends a worker whose parent
process has changed (it was re-parented because the supervisor died).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import jax

from .. import procfs

JOINED_MARKER = "codesign: joined as process"
JOINED_ENV = "CODESIGN_JOINED"  # set in a worker once it has joined
MAX_CPU_DEVICES = 4096  # fake CPU devices of one process (100,000 crashed XLA: SIGSEGV)
JOIN_GRACE_S = 30.0  # importing JAX and starting a worker, on top of the join timeout
PARENT_POLL_S = 0.5  # how often a worker checks that its supervisor is alive
MAX_JOIN_TIMEOUT_S = 1_000_000  # jax.distributed holds its timeouts as int32 milliseconds
# A line of the C++ runtime's log (absl): severity E or F, date, time, thread, file:line].
# Once a worker logs one it is failing; what follows (the message's further lines, a
# stack trace) is not relayed, and the supervisor's one line gives the reason.
_ABSL_ERROR = re.compile(r"^[EF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]+\]", re.M)
_FORCE_FLAG = "xla_force_host_platform_device_count"


def open_log(path) -> io.BufferedRandom:
    """A worker's log `path`, created 0600 (or truncated) for reading and writing,
    never through a symbolic link: a link planted at the name is a ValueError."""
    flags = (os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        if os.path.islink(path):
            raise ValueError(f"log {os.fspath(path)!r} is a symbolic link; not writing "
                             "through it") from None
        raise
    return os.fdopen(fd, "w+b")


def joined() -> bool:
    """True in a worker started by `worker_command` (it has joined jax.distributed)."""
    return os.environ.get(JOINED_ENV) == "1"


def configure_cpu_devices(n: int, *, restart: Sequence[str] | None = None) -> None:
    """Fake `n` CPU devices, before any JAX computation.

    Skipped when XLA_FLAGS already forces a device count (the user's choice,
    or tests/conftest.py). It only affects the CPU backend: on a GPU or TPU
    host JAX still computes on the accelerators. If JAX already runs on CPU
    with another count (something computed at import), `restart` (a command
    line: this process's own) replaces this process with it, the count in
    XLA_FLAGS; without one it is an error.
    """
    if not 1 <= n <= MAX_CPU_DEVICES:
        raise ValueError(f"devices={n} must be in [1, {MAX_CPU_DEVICES:,}] (fake CPU devices "
                         "share this machine's cores and memory)")
    if _FORCE_FLAG in os.environ.get("XLA_FLAGS", ""):
        return
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
        return
    except RuntimeError:  # the backend already exists
        pass
    if jax.default_backend() != "cpu" or len(jax.devices("cpu")) == n:
        return
    if restart is not None:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --{_FORCE_FLAG}={int(n)}".strip()
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(restart[0], list(restart), {**os.environ, "XLA_FLAGS": flags})
    raise ValueError(f"devices={n}: JAX already runs on {len(jax.devices('cpu'))} CPU devices; "
                     "set the count before any JAX computation")


def check_coordinator(address: str) -> str:
    host, _, port = str(address).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"coordinator={address!r} must be HOST:PORT, e.g. 10.0.0.1:1234")
    return address


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ clusters JAX detects
@dataclasses.dataclass(frozen=True)
class Cluster:
    """A cluster environment `jax.distributed.initialize()` configures itself from."""

    name: str  # JAX's name: "slurm", "ompi", "gke_tpu", "gce_tpu", "k8s"
    num_processes: int
    process_id: int


def _cluster_kinds() -> list:
    """JAX's cluster detectors (jax/_src/clusters), except opt-in ones (mpi4py)."""
    try:
        from jax._src import clusters
    except ImportError:  # a JAX without them: nothing is detected
        return []
    kinds = getattr(getattr(clusters, "ClusterEnv", None), "_cluster_types", [])
    return [k for k in kinds if not getattr(k, "opt_in_only_method", False)]


def detect_cluster(kinds: Sequence | None = None) -> Cluster | None:
    """The cluster JAX would configure itself from, if it has more than one process.

    Asks JAX's own detectors, in JAX's order, so codesign starts distributed
    exactly when `jax.distributed.initialize()` would find its parameters:
    SLURM (SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID,
    SLURM_LOCALID: a step started by `srun`), Open MPI (OMPI_MCA_orte_hnp_uri:
    started by `mpirun`), Cloud TPU VMs (GCE and GKE) and Kubernetes (with
    the `kubernetes` package). A job of one process, or a detector that cannot
    run here, counts as no cluster.
    """
    for kind in _cluster_kinds() if kinds is None else kinds:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Kubernetes detected, package missing"
                if not kind.is_env_present():
                    continue
                count, index = int(kind.get_process_count()), int(kind.get_process_id())
        except Exception:  # noqa: BLE001  (a metadata server or API out of reach)
            continue
        return Cluster(str(kind.name), count, index) if count > 1 else None
    return None


# ------------------------------------------------------------------ worker command lines
def forwarded_argv(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                   drop: Sequence[str] = (), override: Mapping | None = None) -> list[str]:
    """The command line that parses back to `args` under `parser` (options at
    their default are left out), without the destinations in `drop` and with
    `override` (dest -> value) applied: what a worker is given, so every option
    that shapes the result reaches it, whichever options the command has."""
    override = dict(override or {})
    unknown = set(override) - {a.dest for a in parser._actions}
    if unknown:
        raise ValueError(f"override={sorted(unknown)} names no option of {parser.prog!r}")
    positional: list[str] = []
    optional: list[str] = []
    for action in parser._actions:
        if action.dest in drop or action.dest == argparse.SUPPRESS or action.dest == "help":
            continue
        value = override.get(action.dest, getattr(args, action.dest, action.default))
        if not action.option_strings:
            positional += [str(v) for v in value] if isinstance(value, list) else [str(value)]
            continue
        if value == action.default or value is None:
            continue
        flag = next((s for s in action.option_strings if s.startswith("--")),
                    action.option_strings[0])
        if action.nargs == 0:  # store_true / store_false / store_const
            optional.append(flag)
        elif action.nargs == "?" and value == action.const:
            optional.append(flag)
        elif isinstance(value, list) and isinstance(action, argparse._AppendAction):
            for v in value:
                optional += [flag, str(v)]
        elif isinstance(value, list):
            optional += [flag, *map(str, value)]
        else:
            optional += [flag, str(value)]
    return positional + optional


# A worker joins before anything imports its entry point: jax.distributed.initialize
# must run before the first JAX computation, and a module's import may compute. So
# the worker is `python -c BOOTSTRAP CONFIG ARGS...`: it arranges to die with its
# supervisor, sets the CPU device count and gloo, joins with bounded waits (with
# no coordinator, JAX detects the cluster), prints JOINED_MARKER, then imports
# the entry point's module and exits with what `function(ARGS)` returns.
BOOTSTRAP = """
import json, os, signal, sys, threading, time
cfg = json.loads(sys.argv[1])
parent = cfg["parent_pid"]
if sys.platform.startswith("linux"):
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
def _watch_parent():
    while True:
        if os.getppid() != parent:
            os._exit(70)  # the supervisor died: this worker was re-parented
        time.sleep(cfg["parent_poll_s"])
if os.getppid() != parent:
    os._exit(70)
threading.Thread(target=_watch_parent, daemon=True).start()
import jax
if cfg["devices"] and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    jax.config.update("jax_num_cpu_devices", cfg["devices"])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
t = cfg["timeout_s"]
if cfg["coordinator"]:
    jax.distributed.initialize(cfg["coordinator"], cfg["num_processes"], cfg["process_id"],
                               initialization_timeout=t, heartbeat_timeout_seconds=t,
                               shutdown_timeout_seconds=t)
else:
    jax.distributed.initialize(initialization_timeout=t, heartbeat_timeout_seconds=t,
                               shutdown_timeout_seconds=t)
os.environ[cfg["joined_env"]] = "1"
print(cfg["marker"], jax.process_index(), "of", jax.process_count(), file=sys.stderr, flush=True)
import importlib
module, function = cfg["entry"].split(":")
code = getattr(importlib.import_module(module), function)(sys.argv[2:])
jax.distributed.shutdown()
sys.exit(code)
"""


def worker_command(entry: str, args: Sequence[str], *, coordinator: str | None,
                   num_processes: int, process_id: int, devices: int | None,
                   timeout_s: int) -> list[str]:
    """The command line of one worker: joins, then calls `entry` ("module:function",
    e.g. "codesign.cli:main") with the list `args` and exits with what it returns.

    `coordinator=None`: JAX detects the cluster (`detect_cluster`);
    `num_processes` and `process_id` are then what it will find.
    `devices`: fake CPU devices (None: JAX's default). The worker dies with
    the process that calls this (its supervisor).
    """
    module, _, function = str(entry).partition(":")
    if not (module and function.isidentifier()):
        raise ValueError(f"entry={entry!r} must look like module:function")
    if coordinator is not None:
        check_coordinator(coordinator)
    if not 1 <= timeout_s <= MAX_JOIN_TIMEOUT_S:
        raise ValueError(f"join timeout={timeout_s} s must be in [1, {MAX_JOIN_TIMEOUT_S:,}] s")
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id} must lie in [0, num_processes="
                         f"{num_processes})")
    config = {"coordinator": coordinator, "num_processes": int(num_processes),
              "process_id": int(process_id), "devices": None if devices is None else int(devices),
              "timeout_s": int(timeout_s), "marker": JOINED_MARKER, "joined_env": JOINED_ENV,
              "parent_pid": os.getpid(), "parent_poll_s": PARENT_POLL_S, "entry": str(entry)}
    return [sys.executable, "-c", BOOTSTRAP, json.dumps(config), *map(str, args)]


def local_env(extra: Mapping | None = None) -> dict:
    """The environment of local (one machine, N processes) workers: JAX on CPU unless the user
    chose a platform, and no inherited forced CPU device count (each worker fakes
    its share)."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                   os.environ.get("XLA_FLAGS", "")).strip()
    return {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
            "XLA_FLAGS": flags, **(extra or {})}


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
              logs: Sequence[str | Path] | None = None, timeout_s: float | None = None,
              on_poll: Callable[[], None] | None = None,
              poll_s: float = 0.05) -> list[Finished]:
    """Run worker `commands` together; return their outputs once all exit 0.

    Raises ValueError (and kills every other worker) as soon as one exits with
    an error, when one has not printed `JOINED_MARKER` within
    `join_timeout_s + JOIN_GRACE_S`, or when `timeout_s` (if given) has
    passed. The stderr of worker `relay_stderr_of` (its progress bar) is
    copied to this process's stderr as it arrives, up to the first error line
    of the C++ runtime's log (the rest is held back, and written only if the
    worker then succeeds: a failure is reported in one line). With `logs`, worker i's
    stdout and stderr both go to the file logs[i] (and `Finished.stdout` holds
    both). `on_poll` is called every `poll_s` seconds while they run.
    Errors name worker i as `process process_ids[i] of num_processes` (default:
    its position among `commands`).
    """
    n = len(commands)
    ids = list(range(n)) if process_ids is None else list(process_ids)
    total = n if num_processes is None else num_processes
    if logs is not None:
        files = [(f, f) for f in (open_log(p) for p in logs)]
    else:
        files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in commands]
    start, relayed, withheld, joined_ = time.monotonic(), 0, "", [False] * n
    procs = []
    try:
        for cmd, (out, err) in zip(commands, files, strict=True):
            procs.append(subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        while True:
            for i, (proc, (_, err)) in enumerate(zip(procs, files, strict=True)):
                text = None
                if not joined_[i]:
                    text = _read(err)
                    joined_[i] = JOINED_MARKER in text
                if i == relay_stderr_of:
                    text = _read(err) if text is None else text
                    end = max(text.rfind("\n"), text.rfind("\r")) + 1  # whole lines (or bars)
                    new = text[relayed:end].replace(f"{JOINED_MARKER} {ids[i]} of {total}\n", "")
                    relayed = max(relayed, end)
                    error = _ABSL_ERROR.search(new)
                    if withheld or error:
                        cut = 0 if withheld else error.start()
                        new, withheld = new[:cut], withheld + new[cut:]
                    sys.stderr.write(new)
                    sys.stderr.flush()
                rc = proc.poll()
                if rc not in (None, 0):
                    stderr = _read(err)
                    where = f" at {coordinator}" if coordinator else ""
                    log = f" (log: {logs[i]})" if logs is not None else ""
                    stopped = [j for j, p in enumerate(procs) if j != i and procfs.stopped(p.pid)]
                    if stopped:  # the survivor's error is the stopped one's fault
                        raise ValueError(
                            f"process {ids[stopped[0]]} of {total} was stopped (SIGSTOP or a "
                            f"debugger) and stopped answering, so process {ids[i]} exited "
                            f"with code {rc}: {failure_reason(stderr)}{log}; stopped every "
                            "process")
                    if JOINED_MARKER not in stderr:
                        raise ValueError(
                            f"process {ids[i]} of {total} did not join the coordinator{where} "
                            f"(exit code {rc} after {time.monotonic() - start:.0f} s, join "
                            f"timeout {join_timeout_s:g} s): {failure_reason(stderr)}{log}")
                    raise ValueError(f"process {ids[i]} of {total} exited with code {rc}: "
                                     f"{failure_reason(stderr)}{log}")
                if not joined_[i] and time.monotonic() - start > join_timeout_s + JOIN_GRACE_S:
                    raise ValueError(f"process {ids[i]} of {total} did not join the coordinator "
                                     f"within {join_timeout_s + JOIN_GRACE_S:g} s; stopped "
                                     "every process")
            if all(p.poll() == 0 for p in procs):
                if relay_stderr_of is not None:  # the last partial line, and what was held
                    sys.stderr.write(withheld + _read(files[relay_stderr_of][1])[relayed:])
                    sys.stderr.flush()
                return [Finished(0, _read(out), "" if out is err else _read(err))
                        for out, err in files]
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                held = [ids[j] for j, p in enumerate(procs) if procfs.stopped(p.pid)]
                why = f" (process {held[0]} of {total} was stopped: SIGSTOP or a debugger)" \
                    if held else ""
                raise ValueError(f"timeout={timeout_s:g} s passed before the {n} process(es) "
                                 f"finished{why}; stopped every process")
            if on_poll is not None:
                on_poll()
            time.sleep(poll_s)
    finally:
        for proc in procs:
            _kill(proc)
        for out, err in files:
            out.close()
            if err is not out:
                err.close()
