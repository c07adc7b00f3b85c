"""The sweep runner in one process: spec parsing and errors, points, evaluation
against the cost functions it wraps, elasticities, sharding, resume, summaries."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import presets, scenario, sweep, units
from codesign.cli import main
from codesign.model import collectives, network_roofline, reliability, step

SMALL = {
    "name": "small",
    "target": "collective",
    "chunk_size": 8,
    "base": {"system": "dgx-h100", "op": "all_reduce"},
    "knobs": {"algorithm": {"categories": ["ring", "tree"]},
              "ranks": {"values": [8, 64]},
              "n_bytes": {"log_grid": ["1KiB", "1GiB", 11]}},
    "summary": [{"kind": "best", "label": "fastest", "by": ["ranks"], "x": "n_bytes",
                 "over": "algorithm", "value": "time_s"},
                {"kind": "ratio", "label": "tree/ring", "by": ["ranks"], "value": "time_s",
                 "where": {"n_bytes": "1GiB"}, "numerator": {"algorithm": "tree"},
                 "denominator": {"algorithm": "ring"}}],
}


def job_of(raw=SMALL, grad=None, **changes):
    return sweep.make_job(sweep.parse_spec({**raw, **changes}), grad)


def run_and_merge(job, out, **kw):
    sweep.run(job, out, **kw)
    return sweep.finish_sweep(job, out, plots=False)


def test_points_cover_the_grid_in_declaration_order():
    job = job_of()
    pts = job.points
    assert pts.combos == (("ring",), ("tree",))
    assert pts.float_names == ("ranks", "n_bytes")
    assert pts.size == 2 * 2 * 11
    # log grid of powers of two is exact (1 KiB x 2^(2k))
    assert list(pts.floats[:11, 1]) == [1024.0 * 4**k for k in range(11)]
    assert list(pts.floats[::11, 0]) == [8.0, 64.0]
    # chunks never straddle a combo: 22 float points per combo -> 8 + 8 + 6
    assert [(c.combo, c.stop - c.start) for c in job.chunks] == [(0, 8), (0, 8), (0, 6),
                                                                  (1, 8), (1, 8), (1, 6)]


def test_bundle_categories_set_several_keys(tmp_path):
    raw = {"target": "collective", "base": {"tier": "scale_out"},
           "knobs": {"collective": {"categories": [
               {"label": "ar", "op": "all_reduce", "algorithm": "ring"},
               {"label": "a2a", "op": "all_to_all", "algorithm": "direct"}]},
               "ranks": [16.0]}}
    table = run_and_merge(sweep.make_job(sweep.parse_spec(raw)), tmp_path)["table"]
    assert list(table.data["collective"]) == ["ar", "a2a"]
    system = presets.system("dgx-h100")
    for i, (op, alg) in enumerate((("all_reduce", "ring"), ("all_to_all", "direct"))):
        want = collectives.cost(op, alg, units.GiB, 16.0, system.scale_out,
                                protocols=system.protocols).time_s
        assert table.data["time_s"][i] == pytest.approx(float(want), rel=1e-11)
    bad = {**raw, "knobs": {"c": {"categories": [{"label": "x", "colour": "red"}]}}}
    with pytest.raises(ValueError, match=r"knobs\.c\.categories: 'colour' is not a categorical"):
        sweep.parse_spec(bad)


def test_random_knobs_are_seeded_and_crossed_with_the_grid():
    raw = {"target": "collective", "samples": 5, "seed": 3,
           "knobs": {"ranks": [8, 16], "n_bytes": {"random": ["1KiB", "1MiB"], "log": True}}}
    a, b = sweep.make_points(sweep.parse_spec(raw)), sweep.make_points(sweep.parse_spec(raw))
    assert np.array_equal(a.floats, b.floats)
    assert a.floats.shape == (10, 2)
    assert np.all((a.floats[:, 1] >= 1024) & (a.floats[:, 1] <= 2**20))
    assert np.array_equal(a.floats[:5, 1], a.floats[5:, 1])  # same draws for every grid point
    c = sweep.make_points(sweep.parse_spec({**raw, "seed": 4}))
    assert not np.array_equal(a.floats, c.floats)


def test_values_match_the_cost_functions(tmp_path):
    job = job_of()
    table = run_and_merge(job, tmp_path)["table"]
    system = presets.system("dgx-h100")
    d = table.data
    for alg in ("ring", "tree"):
        rows = d["algorithm"] == alg
        p, n = d["ranks"][rows], d["n_bytes"][rows]
        want = collectives.cost("all_reduce", alg, n, p, system.scale_up,
                                outer=system.scale_out, local_ranks=8.0,
                                protocols=system.protocols).time_s  # the system's: NCCL's
        np.testing.assert_allclose(d["time_s"][rows], want, rtol=1e-11)
        busbw = collectives.busbw_Bps("all_reduce", n, want, p)
        np.testing.assert_allclose(d["busbw_Bps"][rows], busbw, rtol=1e-11)
    assert list(d["index"]) == list(range(44))


def test_elasticities_are_the_closed_forms_and_the_autodiff(tmp_path):
    """Without protocols (the alpha-beta table alone): the closed forms' elasticities."""
    job = job_of(grad=True, base={**SMALL["base"], "protocols": "alpha_beta"})
    table = run_and_merge(job, tmp_path)["table"]
    d = table.data
    ring = d["algorithm"] == "ring"
    # bandwidth term is linear in n, latency term does not depend on n
    assert np.allclose(d["dlog(bandwidth_s)/dlog(n_bytes)"], 1.0, rtol=1e-9)
    assert np.allclose(d["dlog(latency_s)/dlog(n_bytes)"], 0.0, atol=1e-12)
    # ring latency 2(p-1) alpha: elasticity in p is p / (p - 1)
    p = d["ranks"][ring]
    assert np.allclose(d["dlog(latency_s)/dlog(ranks)"][ring], p / (p - 1), rtol=1e-9)
    # total time: against jax.grad in log space
    system = presets.system("dgx-h100")
    i = int(np.flatnonzero(ring & (d["ranks"] == 64))[5])
    log_t = lambda log_n: jnp.log(collectives.cost(  # noqa: E731
        "all_reduce", "ring", jnp.exp(log_n), 64.0, system.scale_up, outer=system.scale_out,
        local_ranks=8.0).time_s)
    want = float(jax.grad(log_t)(jnp.log(d["n_bytes"][i])))
    assert d["dlog(time_s)/dlog(n_bytes)"][i] == pytest.approx(want, rel=1e-9)


def test_devices_and_chunking_do_not_change_the_result_files(tmp_path):
    a = job_of()
    b = job_of(chunk_size=5)
    run_and_merge(a, tmp_path / "a")
    run_and_merge(b, tmp_path / "b", devices=jax.local_devices()[:1])
    assert a.results_id == b.results_id and a.fingerprint != b.fingerprint
    for name in ("results.csv", "results.json", "summary.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_resume_computes_only_what_is_missing(tmp_path):
    job = job_of()
    run_and_merge(job, tmp_path)
    before = (tmp_path / "results.csv").read_bytes()
    chunk_files = sorted((tmp_path / "chunks").glob("*.json"))
    assert len(chunk_files) == 6
    for path in chunk_files[1:3]:
        path.unlink()
    kept = chunk_files[0].stat().st_mtime_ns
    result = sweep.run(job, tmp_path, resume=True, progress=False)
    assert (result.computed_chunks, result.skipped_chunks) == (2, 4)
    assert chunk_files[0].stat().st_mtime_ns == kept
    sweep.finish_sweep(job, tmp_path, plots=False)
    assert (tmp_path / "results.csv").read_bytes() == before
    # a different spec in the same folder is refused, naming the way out
    other = job_of(knobs={**SMALL["knobs"], "ranks": {"values": [8, 32]}})
    with pytest.raises(ValueError, match="another spec.*; choose another `out_dir`"):
        sweep.run(other, tmp_path, resume=True)


def test_summary_best_and_ratio_follow_the_table(tmp_path):
    done = run_and_merge(job_of(), tmp_path)
    t, text = done["table"], done["summary"]
    for p in (8.0, 64.0):
        rows = t.data["ranks"] == p
        winners = []
        for n in np.unique(t.data["n_bytes"][rows]):
            sel = rows & (t.data["n_bytes"] == n)
            winners.append(t.data["algorithm"][sel][np.argmin(t.data["time_s"][sel])])
        assert f"ranks={p:.4g}: {winners[0]} for n_bytes 1KiB.." in text
        tree = t.data["time_s"][rows & (t.data["algorithm"] == "tree")][-1]
        ring = t.data["time_s"][rows & (t.data["algorithm"] == "ring")][-1]
        assert f"= {tree / ring:.4g}" in text


def test_plots_are_written(tmp_path):
    raw = {**SMALL, "plots": [
        {"file": "lines.png", "x": "n_bytes", "y": "time_s", "series": "algorithm",
         "facet": "ranks", "logx": True, "logy": True},
        {"kind": "best", "file": "best.png", "x": "n_bytes", "y": "ranks", "value": "time_s",
         "over": "algorithm"},
        {"kind": "heatmap", "file": "grad.png", "x": "n_bytes", "y": "ranks",
         "value": "dlog(time_s)/dlog(ranks)"}]}
    job = sweep.make_job(sweep.parse_spec(raw))
    sweep.run(job, tmp_path, progress=False)
    done = sweep.finish_sweep(job, tmp_path)
    # the elasticity map needs --grad: skipped, not an error
    assert [p.name for p in done["figures"]] == ["lines.png", "best.png"]
    assert all(p.stat().st_size > 1000 for p in done["figures"])


def test_plot_labels_read_without_a_caption(tmp_path):
    from matplotlib.image import imread

    from codesign import plots

    assert plots.column_label("breakdown_tp_s") == "exposed TP time per step (s)"
    assert plots.column_label("system.scale_out_bandwidth_Bps") == \
        "scale-out bandwidth per accelerator (GB/s)"
    assert plots.column_label("memory_bytes_per_gpu") == "memory per accelerator (GB)"
    assert plots.column_label("dlog(step_time_s)/dlog(parallel.tp)") == \
        "d log(step time) / d log(TP width)"
    assert plots.value_text("system.scale_out_bandwidth_Bps", 5e10) == "50 GB/s"
    # two identical series: the second is drawn over the first and named in the legend
    table = {"x": np.array([1.0, 2.0, 1.0, 2.0]), "step_time_s": np.array([1.0, 2.0, 1.0, 2.0]),
             "schedule": np.array(["1f1b", "1f1b", "gpipe", "gpipe"], dtype=object)}
    fig = plots.sweep_lines(table, x="x", ys=["step_time_s"], series=["schedule"],
                            title="t", path=tmp_path / "f.png")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["1f1b", "gpipe (= 1f1b)"]
    assert fig.axes[0].get_ylabel() == "step time (s)"
    height, width = imread(tmp_path / "f.png").shape[:2]
    assert width >= 5.2 * plots.SWEEP_DPI - 1 and plots.SWEEP_DPI >= 150


def test_run_draws_progress_on_stderr_only_when_asked(tmp_path, capsys):
    job = job_of()
    chunks, points = len(job.chunks), job.points.size
    sweep.run(job, tmp_path / "quiet")  # the library is quiet by default
    assert capsys.readouterr() == ("", "")
    sweep.run(job, tmp_path / "loud", progress=True)
    out, err = capsys.readouterr()
    line = err.strip().splitlines()[-1]
    assert out == "" and line.startswith(f"small [{'#' * 20}] {chunks}/{chunks} chunks "
                                         f"{points}/{points} points ")
    assert re.search(r" [1-9][0-9,]* points/s ETA 0:00$", line), line
    sweep.run(job, tmp_path / "loud", resume=True, progress=True)  # every chunk on disk
    assert capsys.readouterr().err.strip().endswith(
        f"{chunks}/{chunks} chunks {points}/{points} points 0 points/s ETA ?")


def test_reliability_and_ecmp_targets_match_their_modules(tmp_path):
    raw = {"target": "reliability", "outputs": ["p_step_delayed", "mtbf_s"],
           "knobs": {"straggler_q": [0.01], "gpus": [100.0, 1000.0]}}
    table = run_and_merge(sweep.make_job(sweep.parse_spec(raw)), tmp_path / "r")["table"]
    assert table.data["p_step_delayed"] == pytest.approx(1 - 0.99 ** np.array([100, 1000]))
    assert table.data["p_step_delayed"][0] == pytest.approx(0.634, abs=1e-3)  # 63%
    assert table.data["mtbf_s"] == pytest.approx(
        reliability.LLAMA3_GPU_MTBF_S / np.array([100, 1000]), rel=1e-11)
    raw = {"target": "ecmp", "knobs": {"routing": {"categories": ["ecmp", "spray"]},
                                       "k_flows": [8.0], "m_links": [8.0]}}
    table = run_and_merge(sweep.make_job(sweep.parse_spec(raw)), tmp_path / "e")["table"]
    exact = 2.597232818603513  # E[max] of 8 balls in 8 bins (codesign.model._ecmp._max_load_exact)
    assert table.data["slowdown"][0] == pytest.approx(exact, rel=0.01)
    assert table.data["slowdown"][1] == 1.0


@pytest.mark.parametrize("change, message", [
    ({"colour": 1}, r"spec\.colour is not a known key"),
    ({"target": "nope"}, r"target='nope' is unknown"),
    ({"knobs": {"bogus": [1, 2]}}, r"knobs\.bogus is not a float knob"),
    ({"knobs": {"ranks": {"values": [8], "grid": [1, 2, 3]}}}, r"knobs\.ranks needs exactly one"),
    ({"knobs": {"n_bytes": {"log_grid": [0, 10, 3]}}}, r"knobs\.n_bytes\.log_grid=.*positive"),
    ({"knobs": {"n_bytes": {"grid": [10, 1, 3]}}}, r"knobs\.n_bytes\.grid=.*low <= high"),
    ({"knobs": {"n_bytes": ["64 parsecs"]}}, r"knobs\.n_bytes\.values=.*not a size"),
    ({"knobs": {"algorithm": {"categories": ["ringg"]}}}, r"algorithm='ringg' is not defined"),
    ({"knobs": {"ranks": {"random": [1, 8]}}}, r"samples=0 must be an integer >= 1"),
    ({"outputs": ["speed"]}, r"outputs: 'speed' is not an output"),
    ({"chunk_size": 0}, r"chunk_size=0 must be an integer >= 1"),
    ({"plots": [{"x": "n_bytes", "y": "speed"}]}, r"plots\[0\]=.*'speed' is not a result column"),
    ({"summary": [{"kind": "median"}]}, r"summary\[0\]\.kind='median'"),
    ({"base": {"system": "cray-1"}}, r"system preset 'cray-1' is unknown"),
])
def test_bad_specs_name_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        sweep.parse_spec({**SMALL, **change})


def test_estimate_target_names_bad_scenario_keys():
    base = {"target": "estimate", "base": {"scenario": "default"}}
    with pytest.raises(ValueError, match=r"knobs\.parallel\.bogus is not a float knob"):
        sweep.parse_spec({**base, "knobs": {"parallel": {"bogus": [1, 2]}}})
    with pytest.raises(ValueError, match=r"parallel\.schedule='sideways'"):
        sweep.parse_spec({**base, "knobs": {"parallel": {"schedule": {
            "categories": ["sideways"]}}}})


@pytest.mark.parametrize("knobs, message", [
    ({"parallel": {"tp": [8, 16]}},
     r"^knobs at parallel\.tp=16: parallel\.tp=16 must divide model\.kv_heads=8$"),
    ({"parallel": {"pp": [16, 12]}, "system": {"gpus": [16384]}},
     r"^knobs at parallel\.pp=12, system\.gpus=16384: system\.gpus=16384 is not a multiple "
     r"of tp\*pp\*cp=96"),
])
def test_estimate_target_refuses_the_plans_estimate_refuses(knobs, message):
    """A listed plan axis point that `codesign estimate --set` refuses fails the
    spec in its one line, naming the point, before anything compiles; a random
    range is a relaxed knob and passes."""
    base = {"target": "estimate", "base": {"scenario": "llama3-405b"}}
    with pytest.raises(ValueError, match=message):
        sweep.parse_spec({**base, "knobs": knobs})
    sweep.parse_spec({**base, "samples": 4,
                      "knobs": {"parallel": {"tp": {"random": [1, 64]}}}})


def test_estimate_roofline_columns_are_step_roofline():
    """network_roofline.roofline traces (its tier is a jnp boolean), and the estimate target's
    roofline columns are its values: a dimension that crosses domains is judged on
    the bytes it sends over the slow tier, not on every wire byte."""
    dp_first = {"placement": "dp,cp,ep,tp,pp"}  # DP 128 spans the 8-GPU domains
    scn = scenario.load("llama3-405b", [("system", k, v) for k, v in dp_first.items()])
    est = step.estimate(scn)
    need = network_roofline.needed_flop_per_byte(scn.system, scn.plan.dtype)
    eager = network_roofline.roofline(est.step, scn.system, scn.plan.dtype)["dp"]
    dp = jax.jit(network_roofline.roofline, static_argnums=2)(est.step, scn.system,
                                                               scn.plan.dtype)["dp"]
    assert bool(dp["scale_out"]) and float(dp["bytes"]) < float(dp["wire_bytes"])
    assert float(dp["needed_flop_per_byte"]) == float(need["scale_out"])
    assert float(dp["flop_per_byte"]) == pytest.approx(
        float(est.step.hardware_flops_per_step / est.step.gpus / dp["bytes"]), rel=1e-12)
    assert float(eager["flop_per_byte"]) == pytest.approx(float(dp["flop_per_byte"]), rel=1e-12)
    spec = sweep.parse_spec({
        "target": "estimate", "base": {"scenario": "llama3-405b", "system": dp_first},
        "knobs": {"system.scale_out_bandwidth_Bps": [float(scn.system.scale_out.bandwidth_Bps)]},
        "outputs": ["flop_per_byte_dp", "wire_bytes_dp", "scale_out_needed_flop_per_byte"]})
    values = sweep.point_function(sweep.make_job(spec), 0)(jnp.array(spec.knobs[0].values))
    np.testing.assert_allclose(values, [eager["flop_per_byte"], eager["wire_bytes"],
                                        need["scale_out"]], rtol=1e-12)


def test_cli_bad_spec_is_one_line_and_exit_2(tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text('target = "collective"\n[knobs]\nranks = { grid = [1, 2] }\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "knobs.ranks.grid=[1, 2] must be [low, high, points]" in err
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2


def test_fabric_target_pods_need_a_clos_combo():
    """The fabric target's pod_size / oversubscription configure its clos combos;
    set where no combo is a Clos they are refused, not ignored."""
    base = {"target": "fabric", "base": {"system": "dgx-h100", "pod_size": 3072}}
    with pytest.raises(ValueError, match=r"pod_size is set but no topology of the sweep "
                                         r"reads it: only clos does"):
        sweep.parse_spec({**base, "knobs": {"topology": {"categories": ["two_tier",
                                                                        "rail_only"]}}})
    with pytest.raises(ValueError, match=r"topology='ring' is not one of"):
        sweep.parse_spec({**base, "knobs": {"topology": {"categories": ["ring"]}}})
    sweep.parse_spec({**base, "knobs": {"topology": {"categories": ["two_tier", "clos"]}}})
