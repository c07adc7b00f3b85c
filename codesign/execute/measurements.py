"""Reading calibration measurements: `codesign bench --json` records and
nccl-tests logs as `Measurement`s, every number checked against its domain
(`FIELDS`), every error naming the file and line; which tier and which
collectives.py algorithm model each run (`default_tier`, `model_algorithm`).
`calibrate` fits them."""

from __future__ import annotations

import dataclasses
import json
import math
import re

from .. import checks, domains, files
from ..chip_specs import preset_for_device as preset_for_device
from ..domains import DURATION, MAX_GPUS, MAX_MESSAGE_BYTES, Domain, count
from ..model import collectives
from . import nccl_tests

TIERS = ("scale_up", "scale_out")
LOCAL_RANKS = 8

# the algorithm NCCL runs across nodes (nccl-tests logs do not name it): one ring
# per NIC, pipelined through NVLink and the NICs (docs/collectives.md); all-to-all
# has no rail ring in collectives.py, and is the exchange inside then across
ACROSS_NODES = {"all_reduce": "rail_ring", "reduce_scatter": "rail_ring",
                "all_gather": "rail_ring", "all_to_all": "hierarchical"}
# `nvls`, NCCL's NVLink SHARP family: the switch reduces (`in_network`) inside a node,
# and NVLSTree (`nvls_tree`: NVLS inside, trees across on each GPU's shard) across
NVLS = "nvls"


@dataclasses.dataclass(frozen=True)
class Measurement:
    op: str
    algorithm: str  # the cost-model algorithm fitted (collectives.py name)
    ranks: int
    size_bytes: float
    time_s: float
    tier: str
    source: str
    local_ranks: int = LOCAL_RANKS
    line: int = 0  # of the source file
    devices: tuple[str, ...] = ()  # the device names the source gives (nccl-tests '# Rank')
    ranks_per_host: int = 0  # the most ranks on one host ('# Rank ... on HOST'); 0: not named


def default_tier(ranks: int, local_ranks: int = LOCAL_RANKS) -> str:
    return "scale_up" if ranks <= local_ranks else "scale_out"


def _check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise ValueError(f"tier={tier!r} must be one of {', '.join(TIERS)}")
    return tier


def model_algorithm(op: str, algorithm: str | None, ranks: int,
                    local_ranks: int = LOCAL_RANKS) -> str:
    """The collectives.py algorithm that models a run of `op` by `algorithm`."""
    pairwise = op in ("all_to_all", "send_recv")
    if algorithm is None:  # nccl-tests: NCCL's choice
        if ranks > local_ranks and op in ACROSS_NODES:
            return ACROSS_NODES[op]
        return "direct" if pairwise else "ring"
    if algorithm == "lax":
        return "direct" if pairwise else "ring"
    if algorithm == NVLS:
        across = ranks > local_ranks
        algorithm = "nvls_tree" if across else "in_network"
        if algorithm not in collectives.algorithms(op, hierarchical=True):
            raise ValueError(f"algorithm='nvls' has no cost model for op={op!r}"
                             f"{' across nodes' if across else ''}: NVLS is modelled for "
                             "all-reduce (in a node and across), broadcast and reduce (in a node)")
    valid = collectives.algorithms(op, hierarchical=True)
    if algorithm not in valid:
        raise ValueError(f"algorithm={algorithm!r} has no cost model for op={op!r}; choose "
                         f"one of {', '.join(valid)} or {NVLS}")
    return algorithm


def two_tier(op: str, algorithm: str) -> bool:
    """Whether `algorithm` spans both tiers (hierarchical, rail_ring, rail_tree)."""
    return algorithm not in collectives.algorithms(op)


# the domain of every number read from a measurement file (`domains`, as the scenario keys')
FIELDS = {
    "size_bytes": Domain(0.0, MAX_MESSAGE_BYTES),
    "time_s": dataclasses.replace(DURATION, lo_open=True),
    "ranks": count(MAX_GPUS, lo=2.0),
    "local_ranks": count(MAX_GPUS),
    "wrong": Domain(0.0, math.inf),  # wrong elements (the `error` of nccl-tests 2.0)
}
_WHY = {"ranks": "a collective over fewer than 2 ranks crosses no network"}
_BENCH_KEYS = ("op", "algorithm", "ranks", "size_bytes", "time_s")


def _field(name: str, key: str, value) -> float:
    """`value` of the field `key` (a JSON or nccl-tests number) as a float, checked
    against `FIELDS[key]`; `name` says where it was read ("FILE line 3: size_bytes")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r} must be a number")
    try:
        v = float(value)
    except OverflowError:  # an integer past float64
        v = math.inf
    try:
        domains.check_in(name, v, FIELDS[key])
    except ValueError as e:
        raise ValueError(f"{e}{': ' + _WHY[key] if key in _WHY else ''}") from None
    return v


def _json_records(text: str, path: str) -> list[tuple[int, object]]:
    """(line, value) of each record of `codesign bench --json` output: JSON values
    one after another (JSON lines), or one array of them; a syntax error names the
    file, its line and column."""
    decoder, space = json.JSONDecoder(), re.compile(r"[ \t\n\r]*")
    out, pos = [], space.match(text).end()
    line, counted = 1, 0  # the line of `counted`, counted forward (not from 0 each time)

    def line_at(p: int) -> int:
        nonlocal line, counted
        line, counted = line + text.count("\n", counted, p), p
        return line

    array = text.startswith("[", pos)
    if array:
        pos = space.match(text, pos + 1).end()
    try:
        while pos < len(text) and not (array and text.startswith("]", pos)):
            value, end = decoder.raw_decode(text, pos)
            out.append((line_at(pos), value))
            pos = space.match(text, end).end()
            if array and text.startswith(",", pos):
                pos = space.match(text, pos + 1).end()
            elif array and not text.startswith("]", pos):
                raise json.JSONDecodeError("Expecting ',' or ']' after a record", text, pos)
        if array:
            if not text.startswith("]", pos):
                raise json.JSONDecodeError("Expecting ']' at the end of the array", text, pos)
            pos = space.match(text, pos + 1).end()
            if pos < len(text):
                raise json.JSONDecodeError("Extra data after the array", text, pos)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {e.lineno} column {e.colno}: not JSON ({e.msg})") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise ValueError(f"{path} line {line_at(pos)}: {e}") from None
    except RecursionError:  # arrays or objects nested thousands deep: no record is
        raise ValueError(f"{path} line {line_at(pos)}: nested too deep "
                         "to be a record of `codesign bench --json`") from None
    return out


def _hierarchical_local(where: str, mesh, ranks: int, default: int) -> int:
    """GPUs per node of a hierarchical bench run on a NODESxLOCAL mesh (`default`
    for a 1D one)."""
    parts = str(mesh).split("x")
    if len(parts) != 2:
        return default
    if not all(p.isdigit() for p in parts) or int(parts[0]) * int(parts[1]) != ranks:
        raise ValueError(f"{where}: mesh={mesh!r} must be NODESxLOCAL with NODES*LOCAL = "
                         f"ranks={ranks}")
    return int(_field(f"{where}: mesh={mesh!r} gives local_ranks", "local_ranks",
                      int(parts[1])))


def _bench_measurements(path: str, text: str, tier: str | None, algorithm: str | None,
                        local_ranks: int) -> list[Measurement]:
    out = []
    for line, r in _json_records(text, path):
        where = f"{path} line {line}"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: a record must be a JSON object with "
                             f"{', '.join(_BENCH_KEYS)} (`codesign bench --json` output), "
                             f"not {type(r).__name__} {json.dumps(r)[:40]}")
        missing = set(_BENCH_KEYS) - set(r)
        if missing:
            raise ValueError(f"{where}: the record lacks {', '.join(sorted(missing))}; "
                             "expected `codesign bench --json` output")
        if _field(f"{where}: wrong", "wrong", r.get("wrong", 0)) > 0:
            continue
        p = int(_field(f"{where}: ranks", "ranks", r["ranks"]))
        size = _field(f"{where}: size_bytes", "size_bytes", r["size_bytes"])
        time = _field(f"{where}: time_s", "time_s", r["time_s"])
        checks.one_of(f"{where}: op", r["op"], collectives.OPS)
        try:
            alg = model_algorithm(r["op"], algorithm or r["algorithm"], p, local_ranks)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        local = (_hierarchical_local(where, r.get("mesh", ""), p, local_ranks)
                 if two_tier(r["op"], alg) else local_ranks)
        device = r.get("device")  # the devices' kind (`codesign bench` writes it)
        out.append(Measurement(r["op"], alg, p, size, time, tier or default_tier(p, local_ranks),
                               path, local, line,
                               (device,) if isinstance(device, str) and device else ()))
    return out


def _nccl_measurements(path: str, text: str, tier: str | None, algorithm: str | None,
                       op: str | None, ranks: int | None,
                       local_ranks: int) -> list[Measurement]:
    log = nccl_tests.parse(text, source=path, op=op, ranks=ranks)
    if ranks is None:
        _field(f"{path}: its '#  Rank' lines count ranks", "ranks", log.ranks)
    alg = model_algorithm(log.op, algorithm, log.ranks, local_ranks)
    per_host = log.ranks_per_host if log.ranks_per_host <= log.ranks else 0  # (--ranks)
    out = []
    for r in log.rows:
        where = f"{path} line {r.line}"
        # N/A: nccl-tests -c 0 did not check the results
        if not math.isnan(r.wrong) and _field(f"{where}: #wrong", "wrong", r.wrong) > 0:
            continue
        size = _field(f"{where}: size_bytes", "size_bytes", r.size_bytes)
        time = _field(f"{where}: time_s", "time_s", r.time_s)
        out.append(Measurement(log.op, alg, int(log.ranks), size, time,
                               tier or default_tier(log.ranks, local_ranks), path, local_ranks,
                               r.line, log.devices, per_host))
    return out


def load(path: str, *, tier: str | None = None, algorithm: str | None = None,
         op: str | None = None, ranks: int | None = None,
         local_ranks: int = LOCAL_RANKS) -> list[Measurement]:
    """Measurements from one file: `codesign bench --json` output or an nccl-tests log.
    Sizes whose results were wrong are dropped; every number read is checked
    against its domain (`FIELDS`): a bad one is a one-line error naming the file,
    the line, the field and the value."""
    if tier is not None:
        _check_tier(tier)
    _field("`local_ranks`", "local_ranks", local_ranks)
    if ranks is not None:
        _field("`ranks`", "ranks", ranks)
    text = files.read_text(path, "measurement file", files.LOG_LIMIT_BYTES)
    if text.lstrip().startswith(("{", "[")):
        out = _bench_measurements(path, text, tier, algorithm, local_ranks)
    elif nccl_tests.looks_like_nccl_tests(text):
        out = _nccl_measurements(path, text, tier, algorithm, op, ranks, local_ranks)
    else:
        raise ValueError(f"{path}: neither `codesign bench --json` output nor an nccl-tests log")
    if not out:
        raise ValueError(f"{path}: no usable measurements (all wrong, or empty)")
    return out
