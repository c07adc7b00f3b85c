"""What Linux's /proc says about a process (no JAX, so the hostile-case harness
can use it before it forks): its children and whether it is stopped. Off Linux
both answer as for a process with none and not stopped."""

from __future__ import annotations

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
