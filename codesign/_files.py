"""Reading an input file the user named: one helper, with a size cap, whose
errors are one line naming the file (a directory, a device or pipe that never
ends, a file too big, one that cannot be read)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .units import format_bytes

TOML_LIMIT_BYTES = 16 * 2**20  # scenarios, systems, sweep specs: a few KiB each
LOG_LIMIT_BYTES = 1024 * 2**20  # bench output and nccl-tests logs


def read_bytes(path: str | Path, what: str, limit: int = TOML_LIMIT_BYTES) -> bytes:
    """The bytes of the file `path` (`what` names it: "scenario file"), at most
    `limit` of them; anything else is a one-line error naming `what` and the path:
    FileNotFoundError when it does not exist, ValueError when it is a directory,
    cannot be read or holds more than `limit` bytes (a stream such as /dev/zero is
    read up to the cap, so a pipe of a small file still works)."""
    name = f"{what} {str(path)!r}"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} does not exist") from None
    except OSError as e:
        raise ValueError(f"{name} cannot be read: {e.strerror or e}") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{name} is a directory; name a file")
    fifo = stat.S_ISFIFO(mode)
    try:
        # a named pipe is opened without waiting for a writer (none: it reads as empty
        # at once instead of blocking forever), then read as any file
        fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if fifo else 0))
        if fifo:
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"{name} cannot be read: {e.strerror or e}") from None
    if len(data) > limit:
        kind = "is larger" if stat.S_ISREG(mode) else "is not a regular file and gives more"
        raise ValueError(f"{name} {kind} than {format_bytes(limit)}; is it the right file?")
    return data


def read_text(path: str | Path, what: str, limit: int = TOML_LIMIT_BYTES) -> str:
    """`read_bytes` decoded as UTF-8; bytes that are not UTF-8 are a ValueError naming
    the file, the line and the byte."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (line {line}, byte {e.start}: "
                         f"{e.reason}); is it the right file?") from None
