"""Every instruction of a compiled (post-SPMD, scheduled) HLO module as an `Op`:
what it computes (FLOPs by own counting, bytes its kernel reads and writes), the
GEMM shape of a dot or convolution, the collective it is (bytes, replica groups),
and the instructions it reads.

Only the entry computation's instructions run as kernels; a fusion is one kernel,
its FLOPs counted over the instructions of the computation it calls (a dot:
2 x output elements x contracted elements; a convolution: 2 x output elements x
window elements x input features per group; an element-wise or reduction
instruction: one FLOP per output (reduce: input) element; data movement: none).
Its bytes are XLA's for a fusion: its operands read once and its outputs written
once.

XLA:CPU artefacts are read at the width the program asked for. XLA:CPU computes a
bf16 dot in f32 and reduces a bf16 all-reduce in f32 (`to_apply=...promoted`): it
inserts a fusion made only of `convert` / `bitcast` / `reshape` that widens a
float value, and narrows the result back. Such a conversion fusion is `free` (a
GPU compiler fuses a convert into its producer or consumer, and runs a bf16 dot
or all-reduce as bf16), and a value that passed through it keeps its original
width: the dot's GEMM dtype and the collective's bytes are those of the narrowest
float the value had.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

from ..execute import hlo

KINDS = ("free", "gemm", "memory", "collective")  # how an op is costed
# opcodes that launch no kernel (tuples, views, ids, constants, parameters)
FREE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast",
                  "partition-id", "replica-id", "after-all", "opt-barrier", "iota",
                  "add-dependency", "domain"})
# opcodes that only move or reinterpret data: no FLOPs (their bytes still count)
MOVES = frozenset({"copy", "transpose", "reshape", "broadcast", "slice", "dynamic-slice",
                   "dynamic-update-slice", "concatenate", "pad", "gather", "scatter", "reverse",
                   "convert", "bitcast-convert", "copy-start", "copy-done", "parameter",
                   "constant", "get-tuple-element", "tuple", "bitcast", "iota"})
_CONVERSION = frozenset({"parameter", "convert", "bitcast", "reshape"})
COLLECTIVE_OPS = {"all-reduce": "all_reduce", "all-gather": "all_gather",
                  "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all",
                  "collective-permute": "send_recv"}
FLOAT_WIDTH = {"f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3": 1,
               "bf16": 2, "f16": 2, "f32": 4, "f64": 8}
GEMM_DTYPE = {1: "fp8", 2: "bf16", 4: "fp32", 8: "fp32"}  # plan.DTYPE_BYTES names by width
_WIDTH_OF = {"fp8": 1, "bf16": 2, "fp32": 4}
_HEAD = re.compile(r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*")
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*\(.*\{\s*$")


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    type: str  # the result type text
    opcode: str
    operands: tuple[str, ...]
    attrs: str  # everything after the operand list
    inner: str = ""  # the text inside the operand brackets (a parameter's number)


@dataclasses.dataclass(frozen=True)
class Op:
    """One entry-computation instruction, costed as `kind`."""

    name: str
    opcode: str
    kind: str  # one of KINDS
    flops: float
    bytes: float  # read + written by its kernel (at the program's widths)
    gemm: tuple  # ((batch, m, k, n, dtype), ...) of each dot / convolution it runs
    operands: tuple[int, ...]  # positions of the ops it reads (earlier in the schedule)
    op_name: str  # metadata op_name (which JAX operation it came from)
    collective: str = ""  # collectives.OPS name, for kind == "collective"
    collective_bytes: float = 0.0  # nccl-tests size of all its buffers
    groups: tuple = ()  # replica groups (device ids); a permute's (source, target) pairs
    is_async: bool = False  # an async -start (its -done is a free op reading it)
    buffers: tuple = ()  # a collective's logical buffers: ((elements, bytes), ...)


def _matching(text: str, start: int) -> int:
    """Index one past the bracket closing text[start] (round brackets)."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] == "("
        depth -= text[i] == ")"
        if depth == 0:
            return i + 1
    raise ValueError(f"unbalanced parentheses in HLO: {text[start:start + 80]!r}")


def parse_instruction(line: str) -> Instruction | None:
    m = _HEAD.match(line)
    if not m:
        return None
    rest = line[m.end():]
    rest = re.sub(r"/\*.*?\*/", "", rest)
    if rest.startswith("("):
        end = _matching(rest, 0)
        type_text, rest = rest[:end], rest[end:].lstrip()
    else:
        type_text, _, rest = rest.partition(" ")
    op = re.match(r"([\w\-]+)\(", rest)
    if not op:
        return None
    end = _matching(rest, op.end() - 1)
    inner, attrs = rest[op.end():end - 1], rest[end:]
    operands = tuple(re.findall(r"%([\w.\-]+)", inner))
    if not operands and inner.strip() and op.group(1) not in ("constant", "parameter"):
        operands = tuple(t.strip().split()[-1].lstrip("%") for t in inner.split(",")
                         if t.strip() and not t.strip()[0].isdigit())
    return Instruction(m.group("name"), type_text, op.group(1), operands, attrs, inner)


def computations(text: str) -> tuple[str, dict]:
    """(entry name, {computation name: [Instruction, ...]}) of an HLO module's text."""
    comps: dict = {}
    entry, current = None, None
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head and "=" not in line.split("(")[0]:
            current = head.group("name")
            comps[current] = []
            if head.group("entry"):
                entry = current
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is not None:
            ins = parse_instruction(line)
            if ins is not None:
                comps[current].append(ins)
    if entry is None:
        raise ValueError("the HLO text has no ENTRY computation: pass compiled.as_text()")
    return entry, comps


def _buffers(type_text: str) -> list[hlo.Buffer]:
    return [b for p in hlo._split_tuple(type_text) for b in hlo._arrays(p)]


def _elements(type_text: str) -> int:
    return sum(b.elements for b in _buffers(type_text))


def _dims(attrs: str, key: str) -> tuple[int, ...]:
    m = re.search(rf"{key}=\{{([\d,]*)\}}", attrs)
    return tuple(int(v) for v in m.group(1).split(",") if v) if m else ()


def _gemm_of_dot(ins: Instruction, types: dict, width: int) -> tuple:
    lhs, rhs = (_buffers(types[o])[0].dims for o in ins.operands[:2])
    lc, rc = _dims(ins.attrs, "lhs_contracting_dims"), _dims(ins.attrs, "rhs_contracting_dims")
    lb, rb = _dims(ins.attrs, "lhs_batch_dims"), _dims(ins.attrs, "rhs_batch_dims")
    batch = math.prod(lhs[d] for d in lb)
    k = math.prod(lhs[d] for d in lc)
    m = math.prod(v for d, v in enumerate(lhs) if d not in lc and d not in lb)
    n = math.prod(v for d, v in enumerate(rhs) if d not in rc and d not in rb)
    return (batch, m, k, n, GEMM_DTYPE.get(width, "fp32"))


def _gemm_of_convolution(ins: Instruction, types: dict, width: int) -> tuple:
    """Implicit GEMM: m = output positions, k = window x input features per group,
    n = output features (per group, `batch` groups)."""
    out = _buffers(ins.type)[0].dims
    kernel = _buffers(types[ins.operands[1]])[0].dims
    labels = re.search(r"dim_labels=\w+_(\w+)->(\w+)", ins.attrs)
    groups = int(re.search(r"feature_group_count=(\d+)", ins.attrs).group(1)) \
        if "feature_group_count=" in ins.attrs else 1
    kl, ol = (labels.group(1), labels.group(2)) if labels else ("", "")
    n_out = out[ol.index("f")] if "f" in ol else out[-1]
    window = math.prod(v for d, v in enumerate(kernel) if kl and kl[d] not in "io")
    k_in = kernel[kl.index("i")] if "i" in kl else 1
    m = math.prod(out) // max(n_out, 1)
    return (groups, m, window * k_in, n_out // groups, GEMM_DTYPE.get(width, "fp32"))


def _flops(ins: Instruction, types: dict) -> float:
    if ins.opcode in MOVES or ins.opcode in FREE:
        return 0.0
    if ins.opcode in ("reduce", "reduce-window"):
        return float(sum(_elements(types[o]) for o in ins.operands[: len(ins.operands) // 2]))
    return float(_elements(ins.type))


def _own_width(type_text: str) -> int:
    return min((FLOAT_WIDTH[b.dtype] for b in _buffers(type_text) if b.dtype in FLOAT_WIDTH),
               default=0)


def program_width(ins: Instruction, widths: dict, conversion: bool = False) -> int:
    """The float width (bytes) of `ins`'s value in the program: JAX's promotion, an
    operation's result as wide as its widest float operand (constants, the
    compiler's choice, and values made from them alone, left out), never wider
    than its HLO type; a conversion
    (`convert`, a conversion fusion) narrows but never widens (XLA:CPU's widening
    of bf16 is not the program's). 0: not a float."""
    own = _own_width(ins.type)
    if not own:
        return 0
    operands = [widths[o] for o in ins.operands if widths.get(o)]
    if not operands:  # made from constants, ids or integers only: constant-like
        return own if ins.opcode == "parameter" else 0
    if conversion or ins.opcode == "convert":
        return min(own, min(operands))
    return min(own, max(operands))


def _widths(comp: list[Instruction], outer: dict | None = None) -> dict:
    """{name: program width} of a computation's values (`program_width`);
    `outer`: its parameters' widths (the values outside a fusion)."""
    width: dict = {}
    for ins in comp:
        if ins.opcode == "constant":
            width[ins.name] = 0  # left out of the promotion
        elif ins.opcode == "parameter" and outer and ins.name in outer:
            own = _own_width(ins.type)
            width[ins.name] = min(own, outer[ins.name]) if outer[ins.name] else 0
        else:
            width[ins.name] = program_width(ins, width)
    return width


def _fused(comps: dict, ins: Instruction, operand_widths: list[int]):
    """(FLOPs, GEMMs, is a pure conversion) of a fusion or call."""
    called = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
    body = comps.get(called.group(1), []) if called else []
    # a parameter's width is its operand's (the value outside the fusion)
    outer = {i.name: operand_widths[int(i.inner)] for i in body if i.opcode == "parameter"
             and i.inner.strip().isdigit() and int(i.inner) < len(operand_widths)}
    types = {i.name: i.type for i in body}
    widths = _widths(body, outer)
    flops, gemms = 0.0, []
    for i in body:
        if i.opcode == "dot":
            gemm = _gemm_of_dot(i, types, _narrowest(widths, i.operands[:2]))
            gemms.append(gemm)
            flops += 2.0 * gemm[0] * gemm[1] * gemm[2] * gemm[3]
        elif i.opcode == "convolution":
            gemm = _gemm_of_convolution(i, types, _narrowest(widths, i.operands[:2]))
            gemms.append(gemm)
            flops += 2.0 * gemm[0] * gemm[1] * gemm[2] * gemm[3]
        elif i.opcode in ("fusion", "call"):
            f, g, _ = _fused(comps, i, [widths.get(o, 0) for o in i.operands])
            flops, gemms = flops + f, gemms + list(g)
        else:
            flops += _flops(i, types)
    conversion = bool(body) and all(i.opcode in _CONVERSION for i in body)
    return flops, tuple(gemms), conversion


def _narrowest(widths: dict, names) -> int:
    """A GEMM's width: its operands' promoted (widest) program width."""
    ws = [widths.get(n, 0) for n in names if widths.get(n, 0)]
    return max(ws) if ws else 4


def _width_bytes(type_text: str, width: int) -> float:
    """Bytes of a value at its program width (`width`, 0: as typed)."""
    total = 0.0
    for b in _buffers(type_text):
        size = hlo.DTYPE_BYTES.get(b.dtype, 4)
        if width and b.dtype in FLOAT_WIDTH:
            size = min(size, width)
        total += b.elements * size
    return total


def ops(text: str, num_devices: int) -> list[Op]:
    """Every instruction of the entry computation of compiled HLO `text`, in
    schedule order (a compiled module is scheduled: its text order is the order
    its kernels are issued)."""
    entry, comps = computations(text)
    body = comps[entry]
    index = {ins.name: i for i, ins in enumerate(body)}
    types = {ins.name: ins.type for ins in body}
    width: dict = {}
    out: list[Op] = []
    for ins in body:
        deps = tuple(index[o] for o in ins.operands if o in index)
        meta = re.search(r'op_name="([^"]*)"', ins.attrs)
        op_name = meta.group(1) if meta else ""
        base = ins.opcode.removesuffix("-start")
        if base in COLLECTIVE_OPS:
            widths = [width.get(o, 0) for o in ins.operands]
            width[ins.name] = program_width(ins, width)
            out.append(_collective(ins, base, deps, op_name, widths, num_devices))
            continue
        if ins.opcode == "constant":
            width[ins.name] = 0
            out.append(Op(ins.name, ins.opcode, "free", 0.0, 0.0, (), deps, op_name))
            continue
        if ins.opcode == "get-tuple-element" and ins.operands:
            width[ins.name] = _element_width(ins, width, body, index)
            out.append(Op(ins.name, ins.opcode, "free", 0.0, 0.0, (), deps, op_name))
            continue
        if ins.opcode.endswith("-done") or ins.opcode in FREE:
            width[ins.name] = program_width(ins, width)
            out.append(Op(ins.name, ins.opcode, "free", 0.0, 0.0, (), deps, op_name))
            continue
        operand_widths = [width.get(o, 0) for o in ins.operands]
        library = _library_gemm(ins, types, width)
        if library is not None:  # XLA:GPU's cuBLAS / cuBLASLt GEMM
            flops, gemms, conversion = 2.0 * math.prod(library[:4]), (library,), False
        elif ins.opcode in ("fusion", "call", "custom-call"):
            flops, gemms, conversion = _fused(comps, ins, operand_widths)
        elif ins.opcode == "dot":
            gemms = (_gemm_of_dot(ins, types, _narrowest(width, ins.operands[:2])),)
            flops, conversion = 2.0 * math.prod(gemms[0][:4]), False
        elif ins.opcode == "convolution":
            gemms = (_gemm_of_convolution(ins, types, _narrowest(width, ins.operands[:2])),)
            flops, conversion = 2.0 * math.prod(gemms[0][:4]), False
        elif ins.opcode == "while":
            flops, moved, gemms = _loop(comps, ins)
            width[ins.name] = program_width(ins, width)  # its state, promoted
            out.append(Op(ins.name, ins.opcode, "gemm" if gemms else "memory", flops, moved,
                          gemms, deps, op_name))
            continue
        elif ins.opcode == "conditional":
            raise ValueError(f"HLO instruction {ins.name} is a conditional: branches are not "
                             "costed; trace a program without lax.cond / lax.switch")
        else:
            flops, gemms, conversion = _flops(ins, types), (), ins.opcode == "convert"
        width[ins.name] = program_width(ins, width, conversion)
        if conversion:
            out.append(Op(ins.name, ins.opcode, "free", 0.0, 0.0, (), deps, op_name))
            continue
        if gemms:  # XLA:CPU writes a bf16 dot's result in f32 and narrows it after
            width[ins.name] = min(w for w in (width[ins.name] or 4,
                                              max(_WIDTH_OF[g[4]] for g in gemms)))
        read = sum(_width_bytes(types[o], width.get(o, 0)) for o in ins.operands if o in types)
        written = _width_bytes(ins.type, width[ins.name])
        out.append(Op(ins.name, ins.opcode, "gemm" if gemms else "memory", flops,
                      read + written, gemms, deps, op_name))
    return out


def _library_gemm(ins: Instruction, types: dict, width: dict) -> tuple | None:
    """The GEMM of a library call XLA:GPU emits for a dot (`__cublas$gemm`,
    `__cublas$lt$matmul`): its dot dimension numbers are in the backend config."""
    if ins.opcode != "custom-call":
        return None
    target = re.search(r'custom_call_target="([^"]+)"', ins.attrs)
    if not target or not re.search(r"gemm|matmul", target.group(1), re.IGNORECASE) \
            or "dot_dimension_numbers" not in ins.attrs or len(ins.operands) < 2:
        return None

    def dims(key):
        m = re.search(rf'"{key}":\[([^\]]*)\]', ins.attrs)
        return "{" + ",".join(v.strip(' "') for v in m.group(1).split(",") if v.strip()) \
            + "}" if m else "{}"

    attrs = ", ".join(f"{short}={dims(long)}" for short, long in (
        ("lhs_contracting_dims", "lhs_contracting_dimensions"),
        ("rhs_contracting_dims", "rhs_contracting_dimensions"),
        ("lhs_batch_dims", "lhs_batch_dimensions"), ("rhs_batch_dims", "rhs_batch_dimensions")))
    dot = Instruction(ins.name, ins.type, "dot", ins.operands[:2], attrs)
    return _gemm_of_dot(dot, types, _narrowest(width, ins.operands[:2]))


def _root(comps: dict, ins: Instruction) -> Instruction:
    """The instruction a fusion's computation returns (`ins` itself otherwise)."""
    called = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
    if ins.opcode != "fusion" or not called or not comps.get(called.group(1)):
        return ins
    return comps[called.group(1)][-1]


def _loop(comps: dict, ins: Instruction) -> tuple:
    """(FLOPs, bytes, GEMMs) of a `while` with a known trip count: its body's
    kernels `n` times, as one kernel (XLA:CPU expands a scatter into such a loop,
    one row an iteration; a GPU runs it as one kernel). A dynamic-update-slice
    moves its update, not the buffer it updates in place; a dynamic-slice its slice."""
    trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', ins.attrs)
    body = re.search(r"body=%?([\w.\-]+)", ins.attrs)
    if not trip or not body:
        raise ValueError(f"HLO instruction {ins.name} is a while loop without a known trip "
                         "count: unroll it (a Python for, or jax.lax.associative_scan for a "
                         "recurrence) and trace again")
    n, flops, moved, gemms = int(trip.group(1)), 0.0, 0.0, []
    instructions = comps.get(body.group(1), [])
    types = {i.name: i.type for i in instructions}
    for i in instructions:
        if i.opcode.removesuffix("-start") in COLLECTIVE_OPS:
            raise ValueError(f"HLO while loop {ins.name} runs collectives: loops of "
                             "collectives are not costed; unroll the loop and trace again")
        if i.opcode in FREE or i.opcode == "constant":
            continue
        if i.opcode in ("fusion", "call"):
            f, g, _ = _fused(comps, i, [0] * len(i.operands))
        else:
            f, g = _flops(i, types), ()
        root = _root(comps, i)
        if root.opcode == "dynamic-update-slice":
            update = root.operands[1] if len(root.operands) > 1 else None
            fused = {x.name: x.type for x in comps.get(
                re.search(r"calls=%?([\w.\-]+)", i.attrs).group(1), [])} \
                if i.opcode == "fusion" else types
            size = _width_bytes(fused.get(update, ""), 0) if update else 0.0
            b = 2.0 * size
        elif root.opcode == "dynamic-slice":
            b = 2.0 * _width_bytes(i.type, 0)
        else:
            b = sum(_width_bytes(types[o], 0) for o in i.operands if o in types) \
                + _width_bytes(i.type, 0)
        flops, moved = flops + f, moved + b
        gemms += [(x[0] * n,) + tuple(x[1:]) for x in g]
    return n * flops, n * moved, tuple(gemms)


def _element_width(ins: Instruction, width: dict, body, index) -> int:
    """A get-tuple-element's width: the tuple element's (a collective's operand i)."""
    source = body[index[ins.operands[0]]] if ins.operands[0] in index else None
    m = re.search(r"index=(\d+)", ins.attrs)
    own = _own_width(ins.type)
    if source is not None and m and source.opcode in COLLECTIVE_OPS \
            and int(m.group(1)) < len(source.operands):
        w = width.get(source.operands[int(m.group(1))], 0)
        return min(own, w) if own and w else own
    w = width.get(ins.operands[0], 0)
    return min(own, w) if own and w else own


def _collective(ins: Instruction, base: str, deps, op_name, widths: list[int],
                num_devices) -> Op:
    """A collective; its buffers at their operands' program widths (`widths`)."""
    if base == "collective-permute":
        pairs = hlo._attribute_value(ins.attrs, "source_target_pairs")
        groups = hlo._braces(pairs) if pairs else ()
    else:
        value = hlo._attribute_value(ins.attrs, "replica_groups")
        groups = hlo.parse_replica_groups(value if value is not None else "{}", num_devices)
    size = 2 if base == "collective-permute" else max((len(g) for g in groups), default=1)
    start = ins.opcode.endswith("-start")
    buffers = hlo._logical_buffers(base, start, ins.type, size)
    per_buffer = len(widths) == len(buffers) and not start
    sized = []
    for i, b in enumerate(buffers):
        element = hlo.DTYPE_BYTES.get(b.dtype, 4)
        w = widths[i] if per_buffer else max((x for x in widths if x), default=0)
        if w and b.dtype in FLOAT_WIDTH:
            element = min(element, w)
        sized.append((b.elements, float(b.elements * element)))
    n_bytes = sum(x for _, x in sized)
    return Op(ins.name, ins.opcode, "collective", 0.0, 2.0 * n_bytes, (), deps, op_name,
              COLLECTIVE_OPS[base], n_bytes, tuple(groups), start, tuple(sized))


def cost_analysis_totals(compiled) -> dict:
    """XLA's own cost analysis of the whole module (`compiled.cost_analysis()`):
    {'flops', 'bytes_accessed'} where it reports them (XLA gives totals, not one
    figure per instruction, through JAX)."""
    try:
        ca = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - a backend without cost analysis
        return {}
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else {}
    out = {}
    for key, name in (("flops", "flops"), ("bytes accessed", "bytes_accessed")):
        if isinstance(ca, dict) and key in ca:
            out[name] = float(ca[key])
    return json.loads(json.dumps(out))
