"""Read the collectives out of compiled HLO text (`jit(f).lower(...).compile().as_text()`).

One `HloCollective` per instruction of kind all-reduce, all-gather,
reduce-scatter, all-to-all or collective-permute (the async `-start` forms of
GPU/TPU programs count once; `-done` is skipped). XLA's combiners merge
several logical collectives into one instruction with a tuple result: each
tuple element is kept as one `buffers` entry.

Replica groups come in three spellings, all handled:
- explicit: `replica_groups={{0,1,2,3},{4,5,6,7}}` (`{}` = every device);
- iota: `replica_groups=[4,2]<=[2,4]T(1,0)` = iota(8).reshape(2,4)
  .transpose(1,0).reshape(4,2), one group per row (`[2,4]<=[8]` without T);
- mesh axes: `replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}` = the
  devices that differ only along the listed axes of iota(8).reshape(2,4); with
  `, device_ids=([4,2]T(1,0))` before the braces the mesh holds those ids
  (iota(8).reshape(4,2).transpose(1,0)) instead of 0..7.
collective-permute has `source_target_pairs={{0,1},{1,2}}` instead.

Device ids are positions in the program's device assignment, which for a
jit over a `Mesh` is `mesh.devices.flat`: `attribute` maps them to mesh
coordinates and names the axes a collective runs over.

Bytes follow nccl-tests' "size" (as `collectives.py` does): the buffer of an
all-reduce, all-to-all or permute; the whole output of an all-gather; the
whole input of a reduce-scatter (its output times the group size).
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
               "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
               "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3": 1}
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>.+?)\s+"
    r"(?P<kind>all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
    r"(?P<start>-start)?\((?P<rest>.*)$")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")


@dataclasses.dataclass(frozen=True)
class Buffer:
    dtype: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def bytes(self) -> int:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"HLO element type {self.dtype!r} has no known size")
        return self.elements * DTYPE_BYTES[self.dtype]


@dataclasses.dataclass(frozen=True)
class HloCollective:
    name: str
    kind: str  # one of KINDS (async -start folded in)
    buffers: tuple[Buffer, ...]  # per logical collective: its nccl-tests-size buffer
    groups: tuple[tuple[int, ...], ...]  # replica groups; permute: (source, target) pairs
    op_name: str  # metadata op_name: which jax operation it came from

    @property
    def group_size(self) -> int:
        return 2 if self.kind == "collective-permute" else max(len(g) for g in self.groups)

    @property
    def bytes(self) -> int:
        return sum(b.bytes for b in self.buffers)

    @property
    def elements(self) -> int:
        return sum(b.elements for b in self.buffers)


# ------------------------------------------------------------------ replica groups
def _braces(text: str) -> tuple[tuple[int, ...], ...]:
    inner = text.strip()[1:-1].strip()
    if not inner:
        return ()
    return tuple(tuple(int(v) for v in g.split(",") if v.strip())
                 for g in re.findall(r"\{([^{}]*)\}", inner))


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _device_ids(spec: str | None, n: int, text: str) -> np.ndarray:
    """The device order of a mesh-style group: `[2,4]T(1,0)` (an iota, transposed),
    `0,4,1,5,...` (explicit) or None (0..n-1)."""
    if spec is None:
        return np.arange(n)
    iota = re.fullmatch(r"\s*\[([\d,]+)\](?:T\(([\d,]+)\))?\s*", spec)
    if iota:
        ids = np.arange(n).reshape(_ints(iota.group(1)))
        ids = ids.transpose(_ints(iota.group(2))) if iota.group(2) else ids
    else:
        ids = np.array(_ints(spec.replace("[", "").replace("]", "")))
    if ids.size != n:
        raise ValueError(f"replica_groups={text!r}: device_ids list {ids.size} devices, the "
                         f"mesh {n}")
    return ids.reshape(-1)


def parse_replica_groups(text: str, num_devices: int | None = None
                         ) -> tuple[tuple[int, ...], ...]:
    """The groups of device ids of a `replica_groups=` value (any of the 3 spellings).
    `{}` means one group of every device (needs num_devices)."""
    text = text.strip()
    iota = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    if iota:
        shape, dims = _ints(iota.group(1)), _ints(iota.group(2))
        ids = np.arange(math.prod(dims)).reshape(dims)
        if iota.group(3):
            ids = ids.transpose(_ints(iota.group(3)))
        return tuple(tuple(int(v) for v in row) for row in ids.reshape(shape[0], -1))
    mesh = re.fullmatch(r"mesh\[(.*?)\](?:,\s*device_ids=\((.*?)\))?\s*\{(.*?)\}", text)
    if mesh:
        axes = re.findall(r"'([^']+)'\s*=\s*(\d+)", mesh.group(1))
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        listed = re.findall(r"'([^']+)'", mesh.group(3))
        unknown = set(listed) - set(names)
        if unknown:
            raise ValueError(f"replica_groups={text!r} names axes {sorted(unknown)} that are "
                             "not in its mesh")
        ids = _device_ids(mesh.group(2), math.prod(sizes), text).reshape(sizes)
        inside = [names.index(a) for a in listed]
        outside = [i for i in range(len(names)) if i not in inside]
        ids = ids.transpose(outside + inside)
        return tuple(tuple(int(v) for v in row)
                     for row in ids.reshape(-1, math.prod(sizes[i] for i in inside)))
    if text.startswith("{"):
        groups = _braces(text)
        if groups:
            return groups
        if num_devices is None:
            raise ValueError("replica_groups={} means every device: pass num_devices")
        return (tuple(range(num_devices)),)
    raise ValueError(f"replica_groups={text!r} is in no format this parser knows "
                     "({{...}}, [G,S]<=[dims]T(perm), mesh[...] {axes})")


def _attribute_value(rest: str, key: str) -> str | None:
    """The value of `key=` in an instruction's attribute list (balanced braces)."""
    at = rest.find(f"{key}=")
    if at < 0:
        return None
    value = rest[at + len(key) + 1:]
    if value.startswith("mesh["):
        return value[: value.find("}") + 1]
    if value.startswith("["):  # iota: [..]<=[..] and maybe T(..)
        return re.match(r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?", value).group(0)
    depth = 0
    for i, ch in enumerate(value):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return value[: i + 1]
    raise ValueError(f"unbalanced braces after {key}= in HLO: {value[:80]!r}")


# ------------------------------------------------------------------ result types
def _split_tuple(text: str) -> list[str]:
    """Top-level elements of a tuple type `(a, (b, c), d)`; a non-tuple is one element."""
    text = re.sub(r"/\*.*?\*/", "", text).strip()
    if not text.startswith("("):
        return [text]
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 1:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:-1].strip())
    return [p for p in parts if p]


def _arrays(text: str) -> list[Buffer]:
    return [Buffer(d, tuple(_ints(s))) for d, s in _ARRAY.findall(text) if d in DTYPE_BYTES]


def _logical_buffers(kind: str, start: bool, result_type: str, group: int) -> list[Buffer]:
    """The nccl-size buffers of one instruction from its result type."""
    parts = _split_tuple(result_type)
    if start and kind == "all-gather":  # (operands, outputs)
        outputs = parts[len(parts) // 2:] if len(parts) > 1 else parts
        buffers = [b for p in outputs for b in _arrays(p)]
    elif start and kind == "collective-permute":  # (input, output, contexts...)
        buffers = _arrays(parts[0])[:1]
    else:
        buffers = [b for p in parts for b in _arrays(p)]
    if kind == "reduce-scatter":  # result is one shard: the input is `group` of them
        buffers = [Buffer(b.dtype, (group,) + b.dims) for b in buffers]
    return buffers


def parse(hlo_text: str, num_devices: int | None = None) -> list[HloCollective]:
    """Every collective instruction of an HLO module, in text order."""
    out = []
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        kind, rest, start = m.group("kind"), m.group("rest"), bool(m.group("start"))
        if kind == "collective-permute":
            pairs = _attribute_value(rest, "source_target_pairs")
            groups = _braces(pairs) if pairs else ()
        else:
            value = _attribute_value(rest, "replica_groups")
            groups = parse_replica_groups(value if value is not None else "{}", num_devices)
        size = 2 if kind == "collective-permute" else max((len(g) for g in groups), default=1)
        op = re.search(r'op_name="([^"]*)"', rest)
        out.append(HloCollective(m.group("name"), kind,
                                 tuple(_logical_buffers(kind, start, m.group("type"), size)),
                                 groups, op.group(1) if op else ""))
    return out


# ------------------------------------------------------------------ attribution
def attribute(collective: HloCollective, axis_names: tuple[str, ...],
              axis_sizes: tuple[int, ...]) -> str:
    """The mesh axes a collective runs over ('tp', 'dp', 'dp+tp', ...; '-' for none):
    those along which the device coordinates differ inside its groups. Device id
    i is position i of the mesh's devices in row-major order."""
    n = math.prod(axis_sizes)
    varying = set()
    for group in collective.groups:
        if any(not 0 <= d < n for d in group):
            raise ValueError(f"{collective.name}: device ids {group} exceed the mesh of {n}")
        coords = np.array(np.unravel_index(list(group), axis_sizes)).T
        varying |= {axis_names[a] for a in range(len(axis_names))
                    if len(set(coords[:, a])) > 1}
    return "+".join(a for a in axis_names if a in varying) or "-"
