"""The modelled step as a timeline: Chrome trace-event JSON, which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

It is the step model's own step (`step.Step`), laid out, not a second model.
Each pipeline stage shown (every stage up to three, else the first, a middle and
the last) runs its micro-batches in its schedule's own order, an event per
micro-batch's forward and backward per chunk the stage holds, each followed by
the tensor-, context- and expert-parallel communication it leaves exposed
(step's per-micro-batch exposure, shared out in proportion to the pass) and
carrying its share of the compute that hidden communication steals; the gaps
the order leaves are the pipeline bubble; then the data-parallel and pipeline
communication the step leaves exposed, and the optimizer. Communication hidden
under compute is drawn on its own track beside the compute it hides under
(tensor, context, expert and pipeline traffic spread over the passes in
proportion to their compute; the data-parallel reduction under the last
backwards), so hidden and exposed are told apart. The last event of every
stage ends at the step time.

The orders (a stage's list of slots, each one pass or, in DualPipe, an
overlapped forward and backward):

- gpipe: every forward, then every backward (Huang et al. 2019, GPipe).
- 1f1b: p - s - 1 warm-up forwards on stage s of p, one forward one backward,
  the backwards that drain (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's
  `forward_backward_pipelining_without_interleaving`, same file and commit as
  interleaved's below).
- interleaved: v chunks per stage, each 1/v of a micro-batch's forward and
  backward; the chunks of micro-batches in groups of p (all chunk 0 of a group,
  then chunk 1, ...; the last group takes what is left), (p - s - 1) * 2 +
  (v - 1) * p warm-up forward chunks capped at m v, then 1F1B over chunks (the
  k-th backward is the k-th entry's micro-batch in the reverse chunk), then the
  drain: NVIDIA/Megatron-LM, megatron/core/pipeline_parallel/schedules.py,
  `get_pp_rank_microbatches`, `get_schedule_table` and
  `forward_backward_pipelining_with_interleaving` (commit d98e8a64ddf3).
  Where p does not divide m (Megatron refuses groups of p then: the last would
  stall), the whole batch is one group, a size Megatron accepts for m >= p
  (`interleaved_group`); m < p, which Megatron refuses, is drawn by the same rule.
- zero_bubble (ZB-H1; Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR,
  Figure 3): 1F1B's warm-up and steady state with each backward split into B
  (the input gradient, sent on) and W (the weight gradient), stage s deferring
  its first s W's (FIFO) into the drain, where they fill what would be bubble,
  the rest after the last B: sail-sg/zero-bubble-pipeline-parallelism,
  megatron/core/pipeline_parallel/schedules.py, "delay W by rank" (commit
  95212f7000dc, branch zb-h1-quick-start; that branch's variation keeps stage
  0's backwards and some steady-state ones whole, the trace splits every one as
  the paper does: a whole backward is its B then its W, the same time).
- dualpipe (DeepSeek-V3 technical report, 2024, section 3.2.1): stage s holds
  stage s of the pipeline fed from stage 0 and stage p - 1 - s of the one fed
  from stage p - 1, m / 2 micro-batches each (the second direction's numbered
  m / 2 .. m - 1), in `DualPipe.step`'s eight steps (nF0, nF0F1, nB1W1F1 with
  zero-bubble W's, the main nF0B1F1B0 with a forward and a backward of two
  micro-batches overlapped, nB1F1B0, nB1B0, nWB0, nW): deepseek-ai/DualPipe,
  dualpipe/dualpipe.py (commit 3da1bbea5360). An overlapped pair is drawn as
  its forward and its backward back to back (`overlapped_with` in their args);
  the model prices F&B as F + B (DualPipe's gain is the all-to-all it hides,
  which the step's exposed expert traffic already has). Where DualPipe's own
  preconditions fail (p even, m even and m >= 2p, asserted in `step`), ZB-H1's
  order is drawn with DualPipe's bubble (`otherData.order` says which).

Where a backward is split into B and W (zero_bubble; DualPipe's zero-bubble
chunks), each is half the backward's compute, as Qi et al.'s equal F, B and W
assume and as the step model's bubble for them does (ZB-H1 (p-1)(F + B - 2W)
and DualPipe's (p/2 - 1)(F&B + B - 3W) with F = W = t_mb / 3, B = 2 t_mb / 3,
B the whole backward: `strategies.ZeroBubble`, `strategies.DualPipe`); the
backward's exposed communication goes with B (W sends nothing).

Times: every stage's passes are run through the whole pipeline (every stage,
the shown ones and the rest, each pass starting when its stage is free and
the pass it needs, the same micro-batch's on the neighbouring stage, is done;
the sends take no time here: the step's exposed pipeline traffic is drawn
after the passes), which places the gaps each order leaves on each stage. The
model's bubble (`plan.schedule.bubble_s`) then wins: the gaps are scaled so
that they add up to it on every stage. The orders' own gaps add up to the
model's closed forms exactly for 1F1B and GPipe, for interleaved where p
divides m, and for ZB-H1 and DualPipe where a backward is twice a forward (the
model's F = t_mb / 3); elsewhere they differ by the pass lengths (a backward
three times a forward, as with recomputation, leaves ZB-H1's order 1.25 x the
model's bubble on the default scenario at pp 4 and DualPipe's 0.88 x) or by a
batch too small to fill the pipeline (interleaved m < p), and are scaled to
it. So the compute drawn is the step's compute (m x the per-micro-batch time),
the idle drawn is its bubble, and the last event ends at its step time.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import NamedTuple

from .model import strategies
from .model.plan import Plan
from .model.step import Step

TRACKS = ("compute", "tp", "cp", "ep", "pp", "dp", "optimizer")
_PER_MICRO_BATCH = ("tp", "cp", "ep")  # exposed inside each micro-batch (step's per_mb)
_HIDDEN_PER_PASS = ("tp", "cp", "ep", "pp")  # hidden under the passes
US = 1e6  # trace-event times are microseconds
_PASS = {"F": "forward", "B": "backward", "I": "input gradient", "W": "weight gradient"}


class Op(NamedTuple):
    """One pass on one stage: `kind` F (forward), B (whole backward), I (the
    input-gradient half of a split backward) or W (its weight-gradient half) of
    micro-batch `mb` in the stage's chunk `chunk` (interleaved: 0..v-1; DualPipe:
    the direction, 0 fed from stage 0, 1 from the last), `hop` its place on the
    micro-batch's route through the pipeline (0 .. `hops` - 1)."""

    kind: str
    mb: int
    chunk: int
    hop: int


Slot = tuple  # of Op: one pass, or DualPipe's overlapped forward and backward


def _gpipe(stage: int, p: int, m: int) -> list[Slot]:
    """GPipe on `stage` of `p`: every forward, then every backward."""
    return ([(Op("F", i, 0, stage),) for i in range(m)]
            + [(Op("B", i, 0, stage),) for i in range(m)])


def _one_f_one_b(stage: int, p: int, m: int) -> list[Slot]:
    """1F1B on `stage` of `p`: p - s - 1 warm-up forwards, one forward one
    backward, the backwards that drain."""
    warm = min(p - stage - 1, m)
    order = [(Op("F", i, 0, stage),) for i in range(warm)]
    f = warm
    for b in range(m):
        if f < m:
            order.append((Op("F", f, 0, stage),))
            f += 1
        order.append((Op("B", b, 0, stage),))
    return order


def interleaved_group(p: int, m: int) -> int:
    """Megatron-Core's `microbatch_group_size_per_vp_stage`: p by default; where
    p does not divide m Megatron refuses it, and the trace takes the whole
    batch as one group (m, which Megatron accepts for m >= p; for m < p it
    refuses every size and the trace draws the same rule)."""
    return p if m % p == 0 else m


def interleaved_table(p: int, m: int, v: int) -> list[tuple[int, int]]:
    """Megatron-Core's `get_schedule_table`: (micro-batch, chunk) of the k-th
    forward chunk a stage runs, chunk 0 of a group's micro-batches, then chunk 1, ..."""
    g = interleaved_group(p, m)
    return [(i, c) for lo in range(0, m, g) for c in range(v) for i in range(lo, min(lo + g, m))]


def interleaved_warmup(stage: int, p: int, m: int, v: int) -> int:
    """Megatron-Core's `get_pp_rank_microbatches`: the forward chunks stage s of
    p runs before its first backward, (p - s - 1) * 2 + (v - 1) * group, capped at m v."""
    return min((p - stage - 1) * 2 + (v - 1) * interleaved_group(p, m), m * v)


def _interleaved(stage: int, p: int, m: int, v: int) -> list[Slot]:
    """Megatron's interleaved 1F1B on `stage` of `p` with `v` chunks: warm-up
    forward chunks, then a forward chunk and a backward chunk (the backwards in
    the table's order, chunks reversed), then the drain."""
    table = interleaved_table(p, m, v)
    warm, total = interleaved_warmup(stage, p, m, v), m * v

    def fwd(k):
        i, c = table[k]
        return (Op("F", i, c, c * p + stage),)

    def bwd(k):
        i, c = table[k][0], v - 1 - table[k][1]
        return (Op("B", i, c, c * p + stage),)

    order = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        order += [fwd(warm + k), bwd(k)]
    return order + [bwd(k) for k in range(total - warm, total)]


def _zb_h1(stage: int, p: int, m: int) -> list[Slot]:
    """ZB-H1 on `stage` of `p`: 1F1B's order with each backward an I and a W,
    the stage's first s W's deferred (FIFO), the rest after the last I."""
    order: list[Slot] = []
    pending: deque[int] = deque()
    for (op,) in _one_f_one_b(stage, p, m):
        if op.kind == "F":
            order.append((op,))
            continue
        order.append((op._replace(kind="I"),))
        pending.append(op.mb)
        if len(pending) > stage:
            order.append((Op("W", pending.popleft(), 0, stage),))
    return order + [(Op("W", i, 0, stage),) for i in pending]


def dualpipe_feasible(p: int, m: int) -> bool:
    """DualPipe's own preconditions (`DualPipe.step`): p even, m even, m >= 2p."""
    return p >= 2 and p % 2 == 0 and m % 2 == 0 and m >= 2 * p


def _dualpipe(stage: int, p: int, m: int) -> list[Slot]:
    """`DualPipe.step`'s eight steps on `stage` of `p` (phase 0 is the
    direction the stage is nearer the start of; `dualpipe_feasible` holds)."""
    half, n = p // 2, m // 2
    h = min(stage, p - 1 - stage)
    second = stage >= half
    is_middle = stage in (half - 1, half)
    made = {"F": [0, 0], "B": [0, 0]}
    weights: deque[Op] = deque()

    def op(kind, phase, zb=False):
        d = phase ^ second  # 0: fed from stage 0, 1: fed from stage p - 1
        k = made["F" if kind == "F" else "B"][d]
        made["F" if kind == "F" else "B"][d] += 1
        o = Op("I" if zb else kind, d * n + k, d, stage if d == 0 else p - 1 - stage)
        if zb:
            weights.append(Op("W", o.mb, o.chunk, o.hop))
        return o

    def one(kind, phase, zb=False):
        return (op(kind, phase, zb),)

    def pair(phase0, phase1):
        return (op("F", phase0), op("B", phase1))

    order = [one("F", 0) for _ in range((half - h - 1) * 2)]  # 1: nF0
    for _ in range(h + 1):  # 2: nF0F1
        order += [one("F", 0), one("F", 1)]
    for _ in range(half - h - 1):  # 3: nB1W1F1
        order += [one("B", 1, zb=True), (weights.popleft(),), one("F", 1)]
    for i in range(n - p + h + 1):  # 4: nF0B1F1B0
        if i == 0 and is_middle:  # not overlapped, to shrink the bubble
            order += [one("F", 0), one("B", 1)]
        else:
            order.append(pair(0, 1))
        order.append(pair(1, 0))
    for _ in range(half - h - 1):  # 5: nB1F1B0
        order += [one("B", 1), pair(1, 0)]
    zb = False
    for i in range(h + 1):  # 6: nB1B0, the second half zero-bubble
        zb = zb or (i == (h + 1) // 2 and h % 2 == 1)
        order.append(one("B", 1, zb))
        zb = zb or (i == (h + 1) // 2 and h % 2 == 0)
        order.append(one("B", 0, zb))
    for _ in range(half - h - 1):  # 7: nWB0
        order += [(weights.popleft(),), one("B", 0, zb=True)]
    return order + [(w,) for w in weights]  # 8: nW


def _order(plan: Plan, p: int, m: int):
    """(the order's name, chunks per stage, stage -> that stage's slots for a given
    number of micro-batches) of `plan`'s schedule at `p` stages and `m` micro-batches."""
    schedule = plan.schedule
    if isinstance(schedule, strategies.Interleaved):
        v = max(int(round(float(plan.interleave))), 1)
        return schedule.name, v, lambda s, mb: _interleaved(s, p, mb, v)
    if isinstance(schedule, strategies.DualPipe) and dualpipe_feasible(p, m):
        return schedule.name, 1, lambda s, mb: _dualpipe(s, p, mb)
    if isinstance(schedule, (strategies.ZeroBubble, strategies.DualPipe)):
        return strategies.ZeroBubble.name, 1, lambda s, mb: _zb_h1(s, p, mb)
    if isinstance(schedule, strategies.GPipe):
        return schedule.name, 1, lambda s, mb: _gpipe(s, p, mb)
    return strategies.OneFOneB.name, 1, lambda s, mb: _one_f_one_b(s, p, mb)


def orders(plan: Plan, p: int, m: int) -> tuple[str, int, list[list[Slot]]]:
    """(the order's name, chunks per stage, every stage's slots) for `plan`'s schedule."""
    name, v, make = _order(plan, p, m)
    return name, v, [make(s, m) for s in range(p)]


# Bounds on the work of a trace (its time and memory do not grow with the
# micro-batches): a step of more than FULL_PASSES forward chunks per stage, or of
# more than SIMULATED_PASSES passes over all stages, is laid out with fewer
# micro-batches (`simulated_micro_batches`: EDGE_MICRO_BATCHES at each end and a
# steady state between) and drawn with the first and last EDGE_MICRO_BATCHES in
# full and the steady state between as one aggregated event per stage, holding the
# compute, communication and idle of every micro-batch it stands for; a step of
# more than SIMULATED_PASSES passes even so is not simulated (`_unsimulated_idle`).
EDGE_MICRO_BATCHES = 16
FULL_PASSES = 1024  # forward chunks per stage, m v (megatron-1t: 512)
SIMULATED_PASSES = 2**18  # passes of every stage simulated, 2 p m v (~1.5 s)
DRAWN_PASSES = 2**15  # passes per stage past which no trace is drawn


def simulated_micro_batches(order: str, p: int, m: int, v: int) -> int:
    """The micro-batches the trace lays out: all `m` where that is within
    FULL_PASSES and SIMULATED_PASSES, else the fewest that keep the order's shape
    with EDGE_MICRO_BATCHES at each end and a steady state between (even, at
    least 2p, as DualPipe needs; interleaved: a multiple of p where p divides m,
    else not), if fewer."""
    if m * v <= FULL_PASSES and 2 * p * m * v <= SIMULATED_PASSES:
        return m
    # the edges, the warm-up and drain (up to p - 1 forwards), and a steady state longer
    # than the warm-up, so that its run holds most of each pass kind (`_Layout.aggregated`)
    least = 2 * (2 * EDGE_MICRO_BATCHES + p + 1)
    if order == strategies.Interleaved.name:
        if m % p == 0:
            least = -(-least // p) * p
        elif least % p == 0:
            least += 1
    return min(least, m)


def _unsimulated_idle(slots: int, stage: int, p: int, bubble: float) -> list[float]:
    """The idle before each of `slots` slots and after the last, where the order is
    not simulated: the model's bubble as the pipeline's fill (stage s of p waits
    s / (p - 1) of it before its first pass) and its drain (the rest)."""
    fill = bubble * stage / (p - 1) if p > 1 else 0.0
    return [fill] + [0.0] * (slots - 1) + [bubble - fill] if slots else [bubble]


def _needs(op: Op, hops: int) -> list[tuple[str, int, int]]:
    """What `op` waits for: a forward the previous hop's forward, a backward
    (or its input-gradient half) the next hop's and its own forward, a W its I."""
    if op.kind == "F":
        return [("F", op.mb, op.hop - 1)] if op.hop > 0 else []
    if op.kind == "W":
        return [("B", op.mb, op.hop)]
    after = [("F", op.mb, op.hop)]
    return after + ([("B", op.mb, op.hop + 1)] if op.hop < hops - 1 else [])


def simulate(slots: list[list[Slot]], length: dict, hops: int) -> list[list[tuple]]:
    """(start, end) of every stage's every slot: each starts when its stage is
    free and every pass it needs is done (a slot's passes are done at its end);
    `length[kind]` the time of a pass, `hops` the stages of a micro-batch's route."""
    done: dict = {}
    free, nxt = [0.0] * len(slots), [0] * len(slots)
    spans: list[list[tuple]] = [[] for _ in slots]
    moved = True
    while moved:
        moved = False
        for s, order in enumerate(slots):
            while nxt[s] < len(order):
                needs = [d for op in order[nxt[s]] for d in _needs(op, hops)]
                if any(d not in done for d in needs):
                    break
                start = max([free[s]] + [done[d] for d in needs])
                free[s] = start + sum(length[op.kind] for op in order[nxt[s]])
                for op in order[nxt[s]]:
                    done[("F" if op.kind == "F" else op.kind.replace("I", "B"),
                          op.mb, op.hop)] = free[s]
                spans[s].append((start, free[s]))
                nxt[s] += 1
                moved = True
    if any(len(sp) < len(order) for sp, order in zip(spans, slots, strict=True)):
        raise ArithmeticError("the pipeline order deadlocks: a pass waits on one never run")
    return spans


def gaps(spans: list[tuple], makespan: float) -> list[float]:
    """The idle time before each (start, end) slot and after the last (to
    `makespan`), specks below 1e-9 of the makespan (float noise) dropped."""
    raw = [b - a for a, b in zip([0.0] + [e for _, e in spans],
                                 [s for s, _ in spans] + [makespan], strict=True)]
    return [g if g > 1e-9 * makespan else 0.0 for g in raw]


def scaled(idle: list[float], bubble: float) -> list[float]:
    """The order's gaps scaled to add up to the model's `bubble` (the model's
    number wins); where the order leaves none, the bubble is the drain."""
    total = sum(idle)
    if total > 0:
        return [g * bubble / total for g in idle]
    return [0.0] * (len(idle) - 1) + [bubble]


def gap_names(order: list[Slot]) -> list[str]:
    """The name of the gap before each slot: the pipeline's fill up to the
    stage's first backward, its drain after its last forward, else the steady
    state's."""
    kinds = [{op.kind for op in slot} for slot in order]
    first_b = next((k for k, ks in enumerate(kinds) if ks & {"B", "I"}), len(order))
    last_f = max((k for k, ks in enumerate(kinds) if "F" in ks), default=-1)
    return [("bubble (pipeline fill)" if k <= first_b else "bubble (pipeline drain)"
             if k > last_f else "bubble (steady state)") for k in range(len(order))]


def shown_stages(stages: int) -> list[int]:
    """Every stage up to three, else the first, a middle and the last."""
    return list(range(stages)) if stages <= 3 else [0, stages // 2, stages - 1]


def _name(op: Op, v: int, partner: Op | None = None) -> str:
    """An event's name: the pass, the micro-batch, the chunk where v > 1, the
    overlapped partner in DualPipe."""
    base = {"F": "forward", "B": "backward", "I": "backward", "W": "backward"}[op.kind]
    name = f"{base} {op.mb}" + (f" chunk {op.chunk}" if v > 1 else "")
    name += {"I": " (input)", "W": " (weights)"}.get(op.kind, "")
    if partner is not None:
        name += f" (with {'forward' if partner.kind == 'F' else 'backward'} {partner.mb})"
    return name


def pass_times(step: Step, m: int, v: int) -> tuple[dict, dict]:
    """By pass kind (F, B, I, W): its compute, a micro-batch's forward or
    backward over v chunks (I and W half a backward each) with its share of the
    compute hidden communication steals, and the share of a micro-batch's
    exposed tensor-, context- and expert-parallel traffic drawn after it (a
    forward's by the forward's share of the compute, W none)."""
    f_s, b_s = float(step.timing.forward_s), float(step.timing.backward_s)
    share = f_s / (f_s + b_s) if f_s + b_s > 0 else 0.5
    stolen = float(step.compute_s) - m * (f_s + b_s)  # compute lost to hidden communication
    f, b = f_s + stolen / m * share, b_s + stolen / m * (1.0 - share)
    compute = {"F": f / v, "B": b / v, "I": b / 2, "W": b / 2}
    return compute, {"F": share / v, "B": (1.0 - share) / v, "I": 1.0 - share, "W": 0.0}


class _Layout(NamedTuple):
    """How a step too long to draw in full is drawn (`trace`): laid out with `m_sim`
    of its `m` micro-batches (DualPipe: `n_sim` of `n` per direction), each end's
    `edge` drawn in full, the middle's longest run of slots aggregated."""

    m: int
    m_sim: int
    edge: int
    dual: bool

    @property
    def n(self) -> int:
        return self.m // 2

    @property
    def n_sim(self) -> int:
        return self.m_sim // 2

    def index(self, op: Op) -> tuple[int, int]:
        """(op's place among its direction's micro-batches, how many there are)."""
        if self.dual:
            return op.mb - op.chunk * self.n_sim, self.n_sim
        return op.mb, self.m_sim

    def middle(self, op: Op) -> bool:
        i, count = self.index(op)
        return self.edge <= i < count - self.edge

    def full_mb(self, op: Op, after: bool) -> int:
        """op's micro-batch in the whole step: those after the aggregated run, but
        the first `edge`, moved on by the micro-batches it stands for."""
        i, count = self.index(op)
        shift = (self.n - self.n_sim if self.dual else self.m - self.m_sim) \
            if after and i >= self.edge else 0
        return (op.chunk * self.n if self.dual else 0) + i + shift

    def runs(self, order: list[Slot]) -> list[range]:
        """The runs of consecutive slots whose every pass is of a middle micro-batch."""
        found, start = [], None
        for k, slot in enumerate([*order, ()]):
            inside = bool(slot) and all(self.middle(op) for op in slot)
            if inside and start is None:
                start = k
            elif not inside and start is not None:
                found.append(range(start, k))
                start = None
        return found

    def extra(self, order: list[Slot], v: int) -> dict[tuple[str, int], int]:
        """(pass kind, chunk) -> how many such passes the micro-batches not laid out
        hold: one forward and one backward (split: an I and a W) per chunk each."""
        n = self.n - self.n_sim if self.dual else self.m - self.m_sim
        split = any(op.kind == "W" for slot in order for op in slot) and not any(
            op.kind == "B" for slot in order for op in slot)
        kinds = ("F", "I", "W") if split else ("F", "B")
        return {(kind, c): n for c in range(2 if self.dual else v) for kind in kinds}

    def aggregated(self, order: list[Slot], v: int) -> dict[int, dict]:
        """The runs drawn aggregated (`runs`; by the index of their first slot): each
        pass kind's extra passes (`extra`) go to the run holding most of that kind
        (the longest where none does); -> {first slot: {"run": range, "extra": {...}}}."""
        runs = self.runs(order)
        if not runs:
            raise ArithmeticError("no steady state to aggregate the micro-batches into")
        longest = max(runs, key=len)
        out: dict[int, dict] = {}
        for key, count in self.extra(order, v).items():
            held = [sum(1 for k in r for op in order[k] if (op.kind, op.chunk) == key)
                    for r in runs]
            home = runs[held.index(max(held))] if max(held) > 0 else longest
            out.setdefault(home.start, {"run": home, "extra": {}})["extra"][key] = count
        return out


def trace(step: Step, plan: Plan) -> dict:
    """The trace-event JSON object of `step` (concrete values) under `plan`. Its
    size and the work to make it are bounded whatever the micro-batches and the
    stages (`simulated_micro_batches`; `otherData.aggregated` says what is
    aggregated); a step whose order cannot be drawn within DRAWN_PASSES passes
    per stage is a ValueError naming it."""
    m = max(int(round(float(plan.micro_batches))), 1)
    p = max(int(round(float(plan.pp))), 1)
    order_name, v, make = _order(plan, p, m)
    dual = order_name == strategies.DualPipe.name
    m_sim = simulated_micro_batches(order_name, p, m, v)
    if 2 * m_sim * v > DRAWN_PASSES:
        raise ValueError(f"the timeline of {order_name} at parallel.pp={p} with "
                         f"{m:,} micro-batches needs {2 * m_sim * v:,} passes per stage to show "
                         f"its order, more than the trace draws ({DRAWN_PASSES:,}); fewer "
                         "stages or interleaved chunks draw it")
    layout = _Layout(m, m_sim, EDGE_MICRO_BATCHES, dual) if m_sim < m else None
    exposed = {k: float(val) for k, val in step.exposed_s.items()}
    hidden = {d: 0.0 for d in TRACKS}
    for r in step.traffic:
        hidden[r.dimension] = hidden.get(r.dimension, 0.0) + float(r.time_s - r.exposed_s)
    compute_s = float(step.compute_s)
    compute, part = pass_times(step, m, v)
    per_mb = sum(exposed.get(d, 0.0) for d in _PER_MICRO_BATCH) / m
    length = {k: compute[k] + per_mb * part[k] for k in compute}
    bubble, tail = float(step.bubble_s), ("dp", "pp")
    shown = shown_stages(p)
    simulated = 2 * p * m_sim * v <= SIMULATED_PASSES
    if simulated:
        slots = [make(s, m_sim) for s in range(p)]
        spans = simulate(slots, length, p * v)
        makespan = max((sp[-1][1] for sp in spans if sp), default=0.0)
    else:  # too many stages to run every one: the shown stages' orders, gaps not simulated
        slots = {s: make(s, m_sim) for s in shown}
    events = []

    def add(pid, track, name, start, dur, **args):
        if dur > 0:
            events.append({"name": name, "cat": track, "ph": "X", "ts": start * US,
                           "dur": dur * US, "pid": pid, "tid": TRACKS.index(track),
                           "args": {k: val for k, val in args.items() if val is not None}})
        return start + dur

    def hidden_under(stage, start, c):
        for d in _HIDDEN_PER_PASS:  # hidden under this compute, by its share
            add(stage, d, f"{d} hidden", start, hidden.get(d, 0.0) * c / compute_s
                if compute_s > 0 else 0.0, exposed=False)

    def aggregate(stage, t, run_slots, extra, inner_idle):
        """The run's passes and the `extra` ones ((kind, chunk) -> count) of the
        micro-batches not laid out, as one event per track."""
        ops = [op.kind for slot in run_slots for op in slot]
        kinds = Counter(ops)
        for (kind, _), n in extra.items():
            kinds[kind] += n
        count = {"forward": kinds["F"], "backward": kinds["B"] + kinds["I"],
                 "weight gradient": kinds["W"]}
        c = sum(compute[kind] * n for kind, n in kinds.items())
        share = sum(part[kind] * n for kind, n in kinds.items())
        unit = " chunks" if v > 1 else ""
        words = ", ".join(f"{n:,} {k}{unit}" for k, n in count.items() if n)
        start = t
        t = add(stage, "compute", f"steady state: {words} (aggregated)", t, c,
                **{"pass": "aggregated"}, passes={k: n for k, n in count.items() if n},
                micro_batches=count["forward"] // v)
        hidden_under(stage, start, c)
        for d in _PER_MICRO_BATCH:
            t = add(stage, d, f"{d} exposed", t, exposed.get(d, 0.0) / m * share, exposed=True,
                    aggregated=True)
        return add(stage, "compute", "bubble (steady state, aggregated)", t, inner_idle)

    def full(op, k, ends):
        """op at slot `k` as the whole step numbers it (`_Layout.full_mb`): after the
        run its kind's extra passes went to (`ends`; a split backward's I and W where
        the B's went), moved on by them."""
        if layout is None:
            return op
        end = ends.get((op.kind, op.chunk), ends.get(("B", op.chunk), max(ends.values())))
        return op._replace(mb=layout.full_mb(op, k >= end))

    for stage in shown:
        events.append({"name": "process_name", "ph": "M", "pid": stage,
                       "args": {"name": f"pipeline stage {stage} of {p}"}})
        events += [{"name": "thread_name", "ph": "M", "pid": stage, "tid": i,
                    "args": {"name": track}} for i, track in enumerate(TRACKS)]
        order = slots[stage]
        idle = (scaled(gaps(spans[stage], makespan), bubble) if simulated
                else _unsimulated_idle(len(order), stage, p, bubble))
        homes = layout.aggregated(order, v) if layout is not None else {}
        ends = {}  # (kind, chunk) -> the end of the run its extra passes went to
        for home in homes.values():
            ends |= dict.fromkeys(home["extra"], home["run"].stop)
        t, first = 0.0, None
        names = gap_names(order)
        k = 0
        while k < len(order):
            t = add(stage, "compute", names[k], t, idle[k])
            first = t if first is None else first
            if k in homes:
                run = homes[k]["run"]
                t = aggregate(stage, t, order[run.start:run.stop], homes[k]["extra"],
                              sum(idle[run.start + 1:run.stop]))
                k = run.stop
                continue
            slot = order[k]
            for op in slot:
                partner = next((o for o in slot if o is not op), None) if dual else None
                op, partner = full(op, k, ends), partner and full(partner, k, ends)
                start = t
                t = add(stage, "compute", _name(op, v, partner), t, compute[op.kind],
                        micro_batch=op.mb, chunk=op.chunk if v > 1 else None,
                        direction=op.chunk if dual else None, **{"pass": _PASS[op.kind]},
                        overlapped_with=_name(partner, v) if partner else None)
                hidden_under(stage, start, compute[op.kind])
                for d in _PER_MICRO_BATCH:
                    t = add(stage, d, f"{d} exposed", t, exposed.get(d, 0.0) / m * part[op.kind],
                            exposed=True, micro_batch=op.mb)
            k += 1
        # the data-parallel reduction hides under the last backwards
        first = t if first is None else first
        add(stage, "dp", "dp hidden", max(t - hidden["dp"], first), min(hidden["dp"], t - first),
            exposed=False)
        t = add(stage, "compute", "bubble (pipeline drain)", t, idle[-1])
        for d in tail:
            t = add(stage, d, f"{d} exposed", t, exposed.get(d, 0.0), exposed=True)
        t = add(stage, "optimizer", "optimizer", t, float(step.optimizer_s))
        if not math.isclose(t, float(step.step_time_s), rel_tol=1e-6, abs_tol=1e-12):
            raise ArithmeticError(f"the timeline of stage {stage} ends at {t:.9g} s, not at "
                                  f"the step time {float(step.step_time_s):.9g} s")
    other = {"step_time_s": float(step.step_time_s), "micro_batches": m,
             "pipeline_stages": p, "schedule": plan.schedule.name,
             "order": order_name, "chunks_per_stage": v}
    if layout is not None:
        other["aggregated"] = (
            f"{m:,} micro-batches laid out as {m_sim} (the first and last "
            f"{EDGE_MICRO_BATCHES} and a steady state between); the steady state drawn as one "
            "event per stage and track that holds the compute, communication and idle of "
            "every micro-batch it stands for (its args count the passes)")
    if not simulated:
        other["gaps"] = (f"not simulated ({p} stages): the bubble drawn as the pipeline's fill "
                         "before the first pass and its drain after the last")
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
