"""`codesign timeline`: the modelled step as Chrome trace-event JSON (issue 48):
the format Perfetto reads, one process per shown pipeline stage, every micro-batch's
forward and backward per chunk in the schedule's own order (1F1B, interleaved,
zero-bubble, DualPipe), the bubble, hidden and exposed communication told apart,
and the last event ending at the step time."""

import functools
import json
from collections import Counter

import pytest

from codesign import scenario as sc
from codesign import timeline
from codesign.cli import main
from codesign.model import step

BACKWARD = ("backward", "input gradient")  # a whole backward, or the half that sends on


def _compute(events: list, pid: int) -> list:
    """Stage `pid`'s compute track in time order, bubbles included."""
    return sorted((e for e in events if e["ph"] == "X" and e["pid"] == pid
                   and e["cat"] == "compute"), key=lambda e: e["ts"])


def _passes(events: list, pid: int) -> list:
    return [e for e in _compute(events, pid) if "bubble" not in e["name"]]


def _check(trace: dict, scn, est=None) -> None:
    est = est or step.estimate(scn)
    events = trace["traceEvents"]
    timed = [e for e in events if e["ph"] == "X"]
    for e in timed:  # trace-event format: complete events in microseconds
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid"} <= set(e), e
        assert e["ts"] >= 0 and e["dur"] > 0 and e["cat"] in timeline.TRACKS, e
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    p, m = int(float(scn.plan.pp)), int(float(scn.plan.micro_batches))
    v = int(float(scn.plan.interleave))
    assert trace["otherData"]["chunks_per_stage"] == v
    assert {pid for pid, _ in names} == set(timeline.shown_stages(p))
    for pid, _ in names:
        mine = [e for e in timed if e["pid"] == pid]
        end = max(e["ts"] + e["dur"] for e in mine) / 1e6
        assert end == pytest.approx(float(est.step.step_time_s), rel=1e-6)
        track = _compute(events, pid)
        for a, b in zip(track, track[1:], strict=False):  # one pass at a time
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6, (a, b)
        passes = _passes(events, pid)
        count = Counter(e["args"]["pass"] for e in passes)
        assert count["forward"] == sum(count[k] for k in BACKWARD) == m * v, count
        assert count["weight gradient"] == count["input gradient"]
        # every chunk of every micro-batch once, its backward after its forward, W after B
        at = {(e["args"]["pass"], e["args"]["micro_batch"], e["args"].get("chunk", 0)): e
              for e in passes}
        assert len(at) == len(passes)
        for (kind, i, c), e in at.items():
            before = {"forward": None, "weight gradient": "input gradient"}.get(kind, "forward")
            if before:
                f = at[(before, i, c)]
                assert e["ts"] >= f["ts"] + f["dur"] - 1e-6, (f, e)
        compute = sum(e["dur"] for e in passes) / 1e6
        assert compute == pytest.approx(float(est.step.compute_s), rel=1e-6)
        bubble = sum(e["dur"] for e in mine if "bubble" in e["name"]) / 1e6
        assert bubble == pytest.approx(float(est.step.bubble_s), rel=1e-6, abs=1e-9)
        for d in ("tp", "dp", "pp"):  # exposed as the step breaks it down
            shown = sum(e["dur"] for e in mine if e["name"] == f"{d} exposed") / 1e6
            assert shown == pytest.approx(float(est.step.exposed_s[d]), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", [None, "deepseek-v3"])
def test_the_timeline_is_the_estimate_laid_out(name):
    scn = sc.load(name)
    _check(timeline.trace(step.estimate(scn).step, scn.plan), scn)


def test_the_command_writes_a_trace_perfetto_reads(tmp_path, capsys):
    out = tmp_path / "default.json"
    assert main(["timeline", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    trace = json.loads(out.read_text())
    assert trace["otherData"]["scenario"] == "default"
    _check(trace, sc.load(None))
    # where every hidden row of the traffic table is drawn: the dp reduction, the sends
    hidden = {e["cat"] for e in trace["traceEvents"] if e.get("args", {}).get("exposed") is False}
    assert {"dp", "pp"} <= hidden


def test_plot_draws_the_trace(tmp_path, capsys):
    out, png = tmp_path / "t.json", tmp_path / "t.png"
    assert main(["timeline", "deepseek-v3", "--out", str(out), "--plot", str(png)]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


# ------------------------------------------------- each schedule in its own order, pp 4


@functools.cache
def _laid_out(schedule: str):
    """The default scenario on 4 stages under `schedule` (v = 2 where interleaved),
    its estimate and its trace: one estimate per schedule."""
    v = 2 if schedule == "interleaved" else 1
    scn = sc.load(None, ("parallel.pp=4", f"parallel.interleave={v}",
                         f"parallel.schedule={schedule}"))
    est = step.estimate(scn)
    return scn, est, timeline.trace(est.step, scn.plan)


def _first(schedule: str, stage: int, n: int) -> list[str]:
    return [e["name"] for e in _passes(_laid_out(schedule)[2]["traceEvents"], stage)[:n]]


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zero_bubble", "dualpipe"])
def test_every_schedule_is_the_estimate_in_its_own_order(schedule):
    scn, est, trace = _laid_out(schedule)
    assert trace["otherData"]["order"] == schedule
    assert int(float(scn.plan.micro_batches)) == 48  # 1536 / dp 32: a finite pipeline
    _check(trace, scn, est)


def test_1f1b_warms_up_with_the_stages_after_it():
    assert _first("1f1b", 0, 7) == ["forward 0", "forward 1", "forward 2", "forward 3",
                                    "backward 0", "forward 4", "backward 1"]
    assert _first("1f1b", 3, 4) == ["forward 0", "backward 0", "forward 1", "backward 1"]


def test_interleaved_runs_megatrons_chunk_order():
    """Stage 0 of 4 with v = 2 warms up with (4-0-1)*2 + (2-1)*4 = 10 forward chunks,
    chunk 0 then chunk 1 of each group of 4 micro-batches; the last stage with 4;
    each backward chunk takes the reverse chunk (Megatron-Core's schedule table)."""
    assert timeline.interleaved_warmup(0, 4, 48, 2) == 10
    assert timeline.interleaved_warmup(0, 4, 3, 2) == 6  # capped at m v
    assert _first("interleaved", 0, 12) == [
        *(f"forward {i} chunk 0" for i in range(4)), *(f"forward {i} chunk 1" for i in range(4)),
        "forward 4 chunk 0", "forward 5 chunk 0", "forward 6 chunk 0", "backward 0 chunk 1"]
    assert _first("interleaved", 3, 7) == [
        *(f"forward {i} chunk 0" for i in range(4)), "forward 0 chunk 1", "backward 0 chunk 1",
        "forward 1 chunk 1"]
    scn, est, trace = _laid_out("interleaved")
    passes = _passes(trace["traceEvents"], 0)
    f = float(est.step.compute_s) / 48 * float(est.step.timing.forward_s) / float(
        est.step.timing.micro_batch_s) / 2  # a forward chunk: half a forward
    assert passes[0]["dur"] / 1e6 == pytest.approx(f, rel=1e-6)


def test_zero_bubble_defers_the_weight_gradients_by_stage():
    """ZB-H1: stage s runs its W's s backwards late; the last stage's first W
    follows its fourth B, its last three fill the drain."""
    assert _first("zero_bubble", 0, 7) == [
        "forward 0", "forward 1", "forward 2", "forward 3", "backward 0 (input)",
        "backward 0 (weights)", "forward 4"]
    assert _first("zero_bubble", 3, 10) == [
        "forward 0", "backward 0 (input)", "forward 1", "backward 1 (input)", "forward 2",
        "backward 2 (input)", "forward 3", "backward 3 (input)", "backward 0 (weights)",
        "forward 4"]
    last = [e["name"] for e in _passes(_laid_out("zero_bubble")[2]["traceEvents"], 3)[-4:]]
    assert last == [f"backward {i} (weights)" for i in (44, 45, 46, 47)]


def test_dualpipe_feeds_both_ends_and_overlaps_pairs():
    """DualPipe: stage 0 and stage 3 each start their own direction at once (the
    second direction's micro-batches 24..47), then pairs of a forward and a
    backward of two micro-batches, drawn back to back (no bubble between, only
    the forward's exposed communication)."""
    assert _first("dualpipe", 0, 9) == [
        "forward 0", "forward 1", "forward 2", "forward 24", "backward 24 (input)",
        "backward 24 (weights)", "forward 25", "forward 3 (with backward 25)",
        "backward 25 (with forward 3)"]
    assert _first("dualpipe", 3, 4) == ["forward 24", "forward 25", "forward 26", "forward 0"]
    trace = _laid_out("dualpipe")[2]
    for stage in timeline.shown_stages(4):
        track = _compute(trace["traceEvents"], stage)
        pairs = [(a, b) for a, b in zip(track, track[1:], strict=False)
                 if "overlapped_with" in a["args"] and a["args"]["pass"] == "forward"]
        assert len(pairs) >= 48 // 2 - 4
        for a, b in pairs:
            assert b["args"]["overlapped_with"] == a["name"].split(" (")[0]
            assert b["args"]["pass"] == "backward" and "bubble" not in b["name"]


def test_dualpipe_outside_its_preconditions_draws_zb_h1():
    assert timeline.dualpipe_feasible(4, 8) and not timeline.dualpipe_feasible(4, 6)
    assert not timeline.dualpipe_feasible(3, 12) and not timeline.dualpipe_feasible(4, 9)


# ----------------------------------------- bounded: a million micro-batches, 128 stages


def _totals(trace: dict, est) -> None:
    """Every shown stage's drawn totals are the step's (compute, bubble, exposed
    communication, the end at the step time), every pass counted once."""
    s = est.step
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    v = trace["otherData"]["chunks_per_stage"]
    for pid in {e["pid"] for e in events}:
        mine = [e for e in events if e["pid"] == pid]
        assert max(e["ts"] + e["dur"] for e in mine) / 1e6 == pytest.approx(
            float(s.step_time_s), rel=1e-6)
        passes = _passes(events, pid)
        assert sum(e["dur"] for e in passes) / 1e6 == pytest.approx(float(s.compute_s), rel=1e-6)
        bubble = sum(e["dur"] for e in mine if "bubble" in e["name"]) / 1e6
        assert bubble == pytest.approx(float(s.bubble_s), rel=1e-6, abs=1e-9)
        for d in ("tp", "dp", "pp"):
            shown = sum(e["dur"] for e in mine if e["name"] == f"{d} exposed") / 1e6
            assert shown == pytest.approx(float(s.exposed_s[d]), rel=1e-6, abs=1e-9)
        forwards = sum(e["args"]["passes"].get("forward", 0) if e["args"]["pass"] == "aggregated"
                       else e["args"]["pass"] == "forward" for e in passes)
        assert forwards == trace["otherData"]["micro_batches"] * v


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zero_bubble", "dualpipe", "gpipe"])
def test_a_million_micro_batches_are_drawn_in_bounded_time_and_size(schedule):
    """The default scenario on 4 stages (as `_laid_out`: its compiled estimate) with
    a batch of 10^6 micro-batches: the steady state aggregated (and said so), the
    trace small, made in well under a second, its totals the step's."""
    import time

    v = 2 if schedule == "interleaved" else 1
    scn = sc.load(None, ("parallel.pp=4", f"parallel.interleave={v}",
                         f"parallel.schedule={schedule}", "training.global_batch=32000000"))
    assert int(float(scn.plan.micro_batches)) == 10**6
    est = step.estimate(scn)
    start = time.perf_counter()
    trace = timeline.trace(est.step, scn.plan)
    assert time.perf_counter() - start < 5.0
    assert trace["otherData"]["order"] == schedule
    assert "1,000,000 micro-batches laid out as" in trace["otherData"]["aggregated"]
    assert len(trace["traceEvents"]) < 5000 and len(json.dumps(trace)) < 2_000_000
    _totals(trace, est)


def test_128_stages_and_a_million_micro_batches_are_bounded(tmp_path, capsys):
    """pp 128 (256 layers, interleaved 2) at 10^6 micro-batches through the command:
    seconds, a small trace, and its text says what it aggregates."""
    import time

    sets = ("model.layers=256", "parallel.pp=128", "training.global_batch=1000000")
    out = tmp_path / "t.json"
    start = time.perf_counter()
    assert main(["timeline", *(a for s in sets for a in ("--set", s)), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "aggregated: 1,000,000 micro-batches laid out as" in text
    trace = json.loads(out.read_text())
    assert trace["otherData"]["pipeline_stages"] == 128 and out.stat().st_size < 2_000_000
    scn = sc.load(None, sets)
    _totals(trace, step.estimate(scn))
    assert time.perf_counter() - start < 60.0  # compiles included; the trace itself ~1 s


def test_an_order_past_what_the_trace_draws_is_one_line(monkeypatch):
    """An order that needs more passes per stage than the trace draws (DRAWN_PASSES:
    32,768, some 8,000 stages interleaved) is refused with the numbers."""
    scn, est, _ = _laid_out("1f1b")
    monkeypatch.setattr(timeline, "DRAWN_PASSES", 64)
    with pytest.raises(ValueError, match=r"the timeline of 1f1b at parallel.pp=4 with 48 "
                                         r"micro-batches needs 96 passes per stage"):
        timeline.trace(est.step, scn.plan)


def test_the_figure_has_a_legend_a_colour_per_pass_and_no_barcode():
    """The Gantt chart: a legend naming each kind of bar, one colour per kind (forward,
    backward, ZB-H1's deferred W, communication, idle), and a stage of more than 24
    micro-batches (48 here) drawn with its steady state as one labelled block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codesign import plots

    fig = plots.timeline(_laid_out("zero_bubble")[2])
    legend = fig.legends[0]
    labels = [t.get_text() for t in legend.get_texts()]
    for words in ("forward", "backward (input gradient)", "weight gradient (W, deferred)",
                  "communication (exposed)", "idle (pipeline bubble)",
                  "steady state, aggregated", "communication (hidden under compute)"):
        assert words in labels, labels
    colours = [tuple(h.get_facecolor()) for h in legend.legend_handles][:len(labels) - 1]
    assert len(set(colours)) == len(colours)  # the hidden one is communication's, lighter
    blocks = [t.get_text() for t in fig.axes[0].texts]
    assert len(blocks) == 3 and all(t.startswith("steady state: ") for t in blocks)
    bars = sum(len(c.get_paths()) for c in fig.axes[0].collections)
    assert bars < 48 * 3 * 3  # not a bar per pass of 48 micro-batches on 3 stages
    plt.close(fig)
