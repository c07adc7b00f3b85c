"""The program's schedule as static data: the ops of `_hlo_ops` cut into the nodes a
critical-path computation walks, with numpy arrays for everything the costing reads.

Two streams run the program, in the compiled module's schedule order (its text
order): one runs the compute kernels one after another, the other the collectives
one after another. A compute kernel waits for the collectives it reads; a
collective waits for the compute kernels and collectives it reads. An XLA async
pair (`-start` / `-done`) is one collective issued at its start; on XLA:CPU there
are none, and a collective is then overlappable with every compute kernel that
does not depend on it, by the data dependencies alone.

Because the compute stream runs in order, a kernel's compute inputs are done by
the time the kernel before it is: only its collective inputs can hold it. So the
compute stream is cut into `segments` of consecutive kernels, a new one at each
kernel that reads a collective (a wait) and after each kernel a collective reads
(an issue point); a segment's time is the sum of its kernels'. The nodes are the
segments and the collectives, in schedule order (a topological order), each with
at most `width` predecessors (padded with the sentinel `nodes`, whose end is 0).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from . import _hlo_ops


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    compute: np.ndarray  # indices of the compute ops (gemm, memory) in schedule order
    segment_of: np.ndarray  # segment of each compute op (same length)
    segments: int
    collective: np.ndarray  # indices of the collective ops in schedule order
    node_is_collective: np.ndarray  # (V,) bool, in node order
    node_index: np.ndarray  # (V,) segment id or collective number (position in `collective`)
    preds: np.ndarray  # (V, width) int, predecessors by node number; V = none
    segment_node: np.ndarray  # (S,) node number of each segment
    collective_node: np.ndarray  # (K,) node number of each collective

    @property
    def nodes(self) -> int:
        return len(self.node_index)


def build(ops: list[_hlo_ops.Op]) -> Graph:
    n = len(ops)
    # (latest compute op, collectives) each value depends on, seen through free ops
    latest = np.full(n, -1)
    colls: list[frozenset] = [frozenset()] * n
    waits: list[frozenset] = [frozenset()] * n  # a compute op's collective inputs
    issue = set()  # compute ops some collective reads last
    for i, op in enumerate(ops):
        lat = max((latest[d] for d in op.operands), default=-1)
        cs = frozenset(itertools.chain.from_iterable(colls[d] for d in op.operands))
        if op.kind == "free":
            latest[i], colls[i] = lat, cs
        elif op.kind == "collective":
            latest[i], colls[i] = lat, frozenset({i})
            waits[i] = cs
            if lat >= 0:
                issue.add(int(lat))
        else:
            latest[i], colls[i] = i, frozenset()
            waits[i] = cs
    compute = np.array([i for i, op in enumerate(ops) if op.kind in ("gemm", "memory")], int)
    collective = np.array([i for i, op in enumerate(ops) if op.kind == "collective"], int)
    segment_of = np.zeros(len(compute), int)
    seg, cut_after, first = -1, True, []
    for j, i in enumerate(compute):
        if cut_after or waits[i]:
            seg += 1
            first.append(int(i))
        segment_of[j] = seg
        cut_after = int(i) in issue
    segments = seg + 1
    seg_by_op = dict(zip(compute.tolist(), segment_of.tolist(), strict=True))
    coll_number = {int(i): k for k, i in enumerate(collective)}
    # nodes in schedule order: a segment at its first op, a collective at itself
    events = sorted([(f, 0, s) for s, f in enumerate(first)]
                    + [(int(i), 1, k) for k, i in enumerate(collective)])
    node_is_collective = np.array([e[1] == 1 for e in events], bool)
    node_index = np.array([e[2] for e in events], int)
    segment_node = np.zeros(segments, int)
    collective_node = np.zeros(len(collective), int)
    for v, (_, is_coll, k) in enumerate(events):
        (collective_node if is_coll else segment_node)[k] = v
    preds: list[list[int]] = []
    for pos, is_coll, k in events:
        p = set()
        if is_coll:
            if k > 0:
                p.add(int(collective_node[k - 1]))  # the collective stream runs in order
            if latest[pos] >= 0:
                p.add(int(segment_node[seg_by_op[int(latest[pos])]]))
            p |= {int(collective_node[coll_number[c]]) for c in waits[pos]}
        else:
            if k > 0:
                p.add(int(segment_node[k - 1]))  # the compute stream runs in order
            p |= {int(collective_node[coll_number[c]]) for c in waits[pos]}
        preds.append(sorted(p))
    nodes = len(events)
    width = max((len(p) for p in preds), default=0) or 1
    table = np.full((nodes, width), nodes, int)
    for v, p in enumerate(preds):
        if any(q >= v for q in p):
            raise AssertionError("the HLO schedule is not a topological order")
        table[v, :len(p)] = p
    return Graph(compute, segment_of, segments, collective, node_is_collective, node_index,
                 table, segment_node, collective_node)
