"""Read the text output of NVIDIA's nccl-tests (all_reduce_perf and friends).

The standard format (nccl-tests 2.x) is a comment header, a column header
(out-of-place columns, then the same four in-place; cut here)

    #       size         count      type   redop    root     time   algbw   busbw #wrong ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)        ...

then one line per size with the out-of-place columns followed by the in-place
ones (older versions lack redop/root, or print `error` instead of `#wrong`;
some tests print N/A in place; `-c 0`, no data check, prints N/A under #wrong).
Times are microseconds, bandwidths GB/s (1e9 bytes/s). We keep the
out-of-place columns: the in-place ones reuse the input buffer and are not
what a training step sees. A token that is not a number (or N/A) is an error
naming the file, the line and the column; the values are as printed (their
domains are checked where they are used, `calibrate.load`).

The test (hence the op) comes from the `--op` argument, else from a
`*_perf` name in the text (the command line, or "# Collective test starting:
all_reduce_perf" in recent versions), else from the file name. The rank count
is the number of "#  Rank  N Group ..." lines; `devices` are the device names
those lines end with ("... device  0 [0x18] NVIDIA H100 80GB HBM3"), which
`calibrate` maps to a system preset (the NICs' line rate it checks against);
`hosts` are the host names they give ("... on dgx-h100-01 device ..."), one per
rank line (how many GPUs share a node's NICs).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re

from .. import files

# test binary -> op name in collectives.py
PERF_OPS = {
    "all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter", "alltoall_perf": "all_to_all",
    "sendrecv_perf": "send_recv", "broadcast_perf": "broadcast", "reduce_perf": "reduce",
}
_OP_ALIASES = {**{k.removesuffix("_perf"): v for k, v in PERF_OPS.items()},
               **{v: v for v in PERF_OPS.values()}}


@dataclasses.dataclass(frozen=True)
class NcclRow:
    size_bytes: float  # as printed (an integer; inf past float64)
    count: float
    dtype: str
    time_s: float  # out-of-place
    algbw_Bps: float
    busbw_Bps: float
    wrong: float  # #wrong (or the old `error` column); NaN: N/A, not checked
    line: int = 0  # 1-based line of the text


@dataclasses.dataclass(frozen=True)
class NcclLog:
    op: str
    ranks: int
    rows: tuple[NcclRow, ...]
    source: str
    devices: tuple[str, ...] = ()  # the distinct device names of the '# Rank' lines
    hosts: tuple[str, ...] = ()  # the host of each '# Rank' line, when every one names it

    @property
    def ranks_per_host(self) -> int:
        """The most ranks on one host (0 when the '# Rank' lines do not name hosts)."""
        return max(collections.Counter(self.hosts).values(), default=0)


def _op_from(text: str, source: str, op: str | None) -> str:
    if op is not None:
        name = str(op).replace("-", "_")
        if name not in _OP_ALIASES:
            raise ValueError(f"op={op!r} is not an nccl-tests collective; choose one of "
                             f"{', '.join(sorted(set(_OP_ALIASES.values())))}")
        return _OP_ALIASES[name]
    base = os.path.basename(source).lower()
    for candidate in (text, base):
        for name in re.findall(r"[a-z_]+_perf", candidate):
            if name in PERF_OPS:
                return PERF_OPS[name]
    for alias in sorted(_OP_ALIASES, key=len, reverse=True):  # all_reduce before reduce
        if alias in base:
            return _OP_ALIASES[alias]
    raise ValueError(f"{source}: cannot tell which nccl-tests collective this is (no *_perf "
                     "name in the text or file name); pass `op`")


_RANK = re.compile(r"#\s+Rank\s+\d+\s+(Group|Pid)")
_DEVICE = re.compile(r"\sdevice\s+\d+\s+\[[^\]]*\]\s+(\S.*?)\s*$")
_HOST = re.compile(r"\son\s+(\S+)\s+device\s")


def _columns(lines: list[str], source: str) -> list[str]:
    for line in lines:
        tokens = line.lstrip("#").split()
        if line.startswith("#") and "size" in tokens and "time" in tokens:
            return tokens
    raise ValueError(f"{source}: no nccl-tests column header ('# size count type ... time "
                     "algbw busbw') found")


def _number(token: str, source: str, line: int, column: str) -> float:
    """The number `token` of `column` on `line`: N/A is NaN; anything else that is
    not a number is a one-line error naming the file, the line and the column."""
    if token == "N/A":
        return float("nan")
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"{source} line {line}: {column}={token!r} is not a number") from None


def parse(text: str, *, source: str = "<text>", op: str | None = None,
          ranks: int | None = None) -> NcclLog:
    """Parse one nccl-tests output; `op` and `ranks` override what the text says."""
    lines = text.splitlines()
    names = _columns(lines, source)
    t = names.index("time")  # the first time column is out-of-place
    wrong_name = next((n for n in names[t:] if n in ("#wrong", "error")), None)
    if "algbw" not in names[t:] or "busbw" not in names[t:] or wrong_name is None:
        raise ValueError(f"{source}: column header {' '.join(names)!r} lacks algbw, busbw "
                         "or #wrong after time")
    at = {"size": names.index("size"), "count": names.index("count"), "time": t,
          **{n: names.index(n, t) for n in ("algbw", "busbw", wrong_name)}}
    rows = []
    for n, line in enumerate(lines, 1):
        tokens = line.split()
        if line.startswith("#") or len(tokens) != len(names) or not tokens[0].isdigit():
            continue
        v = {column: _number(tokens[i], source, n, column) for column, i in at.items()}
        rows.append(NcclRow(v["size"], v["count"], tokens[names.index("type")],
                            v["time"] * 1e-6, v["algbw"] * 1e9, v["busbw"] * 1e9,
                            v[wrong_name], n))
    if not rows:
        raise ValueError(f"{source}: no result lines under the nccl-tests column header")
    rank_lines = [ln for ln in lines if _RANK.match(ln)]
    if ranks is None:
        ranks = len(rank_lines)
        if ranks == 0:
            raise ValueError(f"{source}: no '#  Rank N Group ...' lines to count ranks from; "
                             "pass `ranks`")
    devices = tuple(dict.fromkeys(m.group(1) for ln in rank_lines
                                  for m in [_DEVICE.search(ln)] if m))
    hosts = tuple(m.group(1) for ln in rank_lines for m in [_HOST.search(ln)] if m)
    if len(hosts) != len(rank_lines):
        hosts = ()
    return NcclLog(_op_from(text, source, op), ranks, tuple(rows), source, devices, hosts)


def read(path: str, *, op: str | None = None, ranks: int | None = None) -> NcclLog:
    text = files.read_text(path, "nccl-tests log", files.LOG_LIMIT_BYTES)
    return parse(text, source=path, op=op, ranks=ranks)


def looks_like_nccl_tests(text: str) -> bool:
    return any(ln.startswith("#") and " busbw" in ln for ln in text.splitlines()[:200])
