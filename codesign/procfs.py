"""What Linux's /proc says about a process (no JAX, so the hostile-case harness
can use it before it forks): its children, whether it is stopped, and how much
memory it may still take. Off Linux they answer as for a process with no
children, not stopped, and no known memory bound."""

from __future__ import annotations

import re
import resource
from pathlib import Path


def _stat_fields(stat_text: str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    return stat_text.rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _stat_fields(stat.read_text())
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def stopped(pid: int) -> bool:
    """Whether `pid` is stopped (SIGSTOP, a debugger: state T or t)."""
    try:
        return _stat_fields(Path(f"/proc/{pid}/stat").read_text())[0] in ("T", "t")
    except OSError:
        return False


def _kib(text: str, field: str) -> int | None:
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return None if m is None else int(m.group(1)) * 1024


def available_memory_bytes() -> int | None:
    """The memory this process may still allocate: the machine's available memory
    (MemAvailable), less where this process's address-space limit (RLIMIT_AS,
    `ulimit -v`) comes first; None where neither is known."""
    try:
        bounds = [_kib(Path("/proc/meminfo").read_text(), "MemAvailable")]
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            used = _kib(Path("/proc/self/status").read_text(), "VmSize") or 0
            bounds.append(max(limit - used, 0))
    except OSError:
        return None
    known = [b for b in bounds if b is not None]
    return min(known) if known else None
