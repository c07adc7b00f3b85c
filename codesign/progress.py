"""The one progress bar of long runs (a sweep's chunks, the streamed grid's
points, a benchmark's steps), on stderr: never on stdout, which carries the
answer. The library draws it only when its caller asks (`progress=True`)."""

from __future__ import annotations

import math
import sys
import time


class Progress:
    """`name [#####.....] 12/40 chunks 3,072/10,240 points 1.2e+03 points/s ETA 0:07`
    on `stream` (stderr): redrawn in place on a terminal (at most every 0.1 s),
    a line every 10 s otherwise, the last one on `close`. With `chunks` = 0
    the bar follows the points alone (`name [#####.....] 3,072/10,240 points ...`);
    `unit` names what is counted ("points", or e.g. "steps", "kernels")."""

    def __init__(self, name: str, chunks: int, points: int, *, enabled: bool = True,
                 stream=None, unit: str = "points"):
        self.name, self.total_chunks, self.total_points = name, chunks, points
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self.chunks = self.points = self.skipped_points = 0
        self._last = -math.inf

    def skip(self, chunks: int, points: int) -> None:
        self.chunks += chunks
        self.points += points
        self.skipped_points += points

    def update(self, chunks: int, points: int) -> None:
        self.chunks += chunks
        self.points += points
        self._draw(final=False)

    def set(self, chunks: int, points: int) -> None:
        self.chunks, self.points = chunks, points
        self._draw(final=False)

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = (self.points - self.skipped_points) / elapsed
        left = self.total_points - self.points
        eta = f"{int(left / rate) // 60}:{int(left / rate) % 60:02d}" if rate > 0 else "?"
        done, total = ((self.chunks, self.total_chunks) if self.total_chunks
                       else (self.points, self.total_points))
        filled = int(20 * done / max(total, 1))
        chunks = f"{self.chunks}/{self.total_chunks} chunks " if self.total_chunks else ""
        return (f"{self.name} [{'#' * filled}{'.' * (20 - filled)}] {chunks}"
                f"{self.points:,}/{self.total_points:,} {self.unit} {rate:,.0f} {self.unit}/s "
                f"ETA {eta}")

    def _draw(self, final: bool) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not final and now - self._last < (0.1 if self.tty else 10.0):
            return
        self._last = now
        end = "\n" if final or not self.tty else ""
        print(("\r" if self.tty else "") + self.line(), end=end, file=self.stream, flush=True)

    def close(self) -> None:
        self._draw(final=True)
