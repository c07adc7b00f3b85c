"""The modelled step as a timeline: Chrome trace-event JSON, which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

It is the step model's own step (`step.Step`), laid out, not a second model:
the slowest stage's micro-batches, each a forward and a backward with the
tensor-, context- and expert-parallel communication they expose at their end
(and the compute that hidden communication steals, spread over them), in 1F1B
order (warm-up forwards, one forward one backward, the backwards that drain);
the pipeline bubble split between the stage's fill (stage s waits s / (p - 1)
of it) and its drain (the rest); then the data-parallel and pipeline
communication the step leaves exposed, and the optimizer. Communication hidden
under compute is drawn on its own track beside the compute it hides under
(tensor, context, expert and pipeline traffic spread over the micro-batches;
data-parallel reduction under the last backwards), so hidden and exposed are
told apart. A process per pipeline stage shown (every stage up to three, else
the first, a middle and the last): the model costs one stage, so they differ
only in where their bubble falls. The last event ends at the step time.
Interleaved, zero-bubble and DualPipe schedules keep their own bubble (the
model's) in this 1F1B order.
"""

from __future__ import annotations

import math

from .plan import Plan
from .step import Step

TRACKS = ("compute", "tp", "cp", "ep", "pp", "dp", "optimizer")
_PER_MICRO_BATCH = ("tp", "cp", "ep")  # exposed inside each micro-batch (step's per_mb)
US = 1e6  # trace-event times are microseconds


def _order(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """1F1B on `stage` of `stages`: (kind "F" / "B", micro-batch) in order."""
    warm = min(stages - stage - 1, micro_batches)
    order = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < micro_batches:
        if f < micro_batches:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order


def shown_stages(stages: int) -> list[int]:
    """Every stage up to three, else the first, a middle and the last."""
    return list(range(stages)) if stages <= 3 else [0, stages // 2, stages - 1]


def trace(step: Step, plan: Plan) -> dict:
    """The trace-event JSON object of `step` (concrete values) under `plan`."""
    m = max(int(round(float(plan.micro_batches))), 1)
    p = max(int(round(float(plan.pp))), 1)
    exposed = {k: float(v) for k, v in step.exposed_s.items()}
    hidden = {d: 0.0 for d in TRACKS}
    for r in step.traffic:
        hidden[r.dimension] = hidden.get(r.dimension, 0.0) + float(r.time_s - r.exposed_s)
    timing = step.timing
    f_s, b_s = float(timing.forward_s), float(timing.backward_s)
    share = f_s / (f_s + b_s) if f_s + b_s > 0 else 0.5
    stolen = float(step.compute_s) - m * (f_s + b_s)  # compute lost to hidden communication
    pass_s = {"F": f_s + stolen / m * share, "B": b_s + stolen / m * (1.0 - share)}
    part = {"F": share, "B": 1.0 - share}
    bubble, tail = float(step.bubble_s), ("dp", "pp")
    events = []

    def add(pid, track, name, start, dur, **args):
        if dur > 0:
            events.append({"name": name, "cat": track, "ph": "X", "ts": start * US,
                           "dur": dur * US, "pid": pid, "tid": TRACKS.index(track),
                           "args": {k: v for k, v in args.items() if v is not None}})
        return start + dur

    for stage in shown_stages(p):
        events.append({"name": "process_name", "ph": "M", "pid": stage,
                       "args": {"name": f"pipeline stage {stage} of {p}"}})
        events += [{"name": "thread_name", "ph": "M", "pid": stage, "tid": i,
                    "args": {"name": track}} for i, track in enumerate(TRACKS)]
        fill = bubble * stage / (p - 1) if p > 1 else 0.0
        t = add(stage, "compute", "bubble (pipeline fill)", 0.0, fill)
        for kind, i in _order(stage, p, m):
            start = t
            t = add(stage, "compute", f"{'forward' if kind == 'F' else 'backward'} {i}", t,
                    pass_s[kind], micro_batch=i)
            for d in ("tp", "cp", "ep", "pp"):  # hidden under this pass, spread evenly
                add(stage, d, f"{d} hidden", start, hidden.get(d, 0.0) / m * part[kind],
                    exposed=False)
            for d in _PER_MICRO_BATCH:
                t = add(stage, d, f"{d} exposed", t, exposed.get(d, 0.0) / m * part[kind],
                        exposed=True, micro_batch=i)
        # the data-parallel reduction hides under the last backwards
        add(stage, "dp", "dp hidden", max(t - hidden["dp"], fill), min(hidden["dp"], t - fill),
            exposed=False)
        t = add(stage, "compute", "bubble (pipeline drain)", t, bubble - fill)
        for d in tail:
            t = add(stage, d, f"{d} exposed", t, exposed.get(d, 0.0), exposed=True)
        t = add(stage, "optimizer", "optimizer", t, float(step.optimizer_s))
        if not math.isclose(t, float(step.step_time_s), rel_tol=1e-6, abs_tol=1e-12):
            raise ArithmeticError(f"the timeline of stage {stage} ends at {t:.9g} s, not at "
                                  f"the step time {float(step.step_time_s):.9g} s")
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"step_time_s": float(step.step_time_s), "micro_batches": m,
                          "pipeline_stages": p, "schedule": plan.schedule.name}}
