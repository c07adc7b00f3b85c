"""`codesign timeline`: the modelled step as Chrome trace-event JSON (issue 48):
the format Perfetto reads, one process per shown pipeline stage, every micro-batch's
forward and backward, the bubble, hidden and exposed communication told apart,
and the last event ending at the step time."""

import json

import pytest

from codesign import scenario as sc
from codesign import step, timeline
from codesign.cli import main


def _check(trace: dict, scn) -> None:
    est = step.estimate(scn)
    events = trace["traceEvents"]
    timed = [e for e in events if e["ph"] == "X"]
    for e in timed:  # trace-event format: complete events in microseconds
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid"} <= set(e), e
        assert e["ts"] >= 0 and e["dur"] > 0 and e["cat"] in timeline.TRACKS, e
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    p, m = int(float(scn.plan.pp)), int(float(scn.plan.micro_batches))
    assert {pid for pid, _ in names} == set(timeline.shown_stages(p))
    for pid, _ in names:
        mine = [e for e in timed if e["pid"] == pid]
        end = max(e["ts"] + e["dur"] for e in mine) / 1e6
        assert end == pytest.approx(float(est.step.step_time_s), rel=1e-6)
        passes = [e["name"] for e in mine if e["cat"] == "compute" and "bubble" not in e["name"]]
        assert sorted(passes) == sorted([f"forward {i}" for i in range(m)]
                                        + [f"backward {i}" for i in range(m)])
        # a micro-batch's backward never starts before its forward ends
        at = {e["name"]: e for e in mine if e["cat"] == "compute"}
        for i in range(m):
            f, b = at[f"forward {i}"], at[f"backward {i}"]
            assert b["ts"] >= f["ts"] + f["dur"] - 1e-6
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
