"""Issue 25, "never print a number that is not one": hostile inputs get one line
and an exit code (2 bad input, 3 no feasible answer), never a NaN, an infinity or
an absurd number at exit 0; every output a command prints or writes is checked."""

import json
import math

import jax
import jax.numpy as jnp
import pytest

from codesign import output_checks, scenario, sweep
from codesign.cli import main
from codesign.model import reliability, step


def _line(capsys, *argv, code=2) -> str:
    """The one stderr line of a command that exits `code`."""
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _spec(tmp_path, target: str, knobs: str, base: str = "") -> str:
    path = tmp_path / "s.toml"
    path.write_text(f'target = "{target}"\n[base]\n{base}\n[knobs]\n{knobs}\n')
    return str(path)


# ------------------------------------------------------------ 1. sweep knobs
@pytest.mark.parametrize("target, knobs, words", [
    ("collective", "n_bytes = [nan]", "knobs.n_bytes=nan must be a number in [0,"),
    ("collective", "ranks = [-8]", "knobs.ranks=-8 must be a number in [1, 1e7]"),
    ("collective", "ranks = [0]", "knobs.ranks=0 must be"),
    ("collective", '"scale_up.bandwidth_Bps" = [-1e9]', "knobs.scale_up.bandwidth_Bps=-1e+09"),
    ("collective", '"scale_up.efficiency" = [2.0]', "knobs.scale_up.efficiency=2 must be a "
                                                    "number in (0, 1]"),
    ("collective", '"scale_out.latency_s" = [-1.0]', "knobs.scale_out.latency_s=-1"),
    ("collective", "ranks = { random = [0.5, 8] }", "knobs.ranks=0.5 must be"),
    ("reliability", "gpus = [0]", "knobs.gpus=0 must be"),
    ("reliability", "step_time_s = [0]", "knobs.step_time_s=0 must be a number in (0, 1e9]"),
    ("reliability", "straggler_q = [1.5]", "knobs.straggler_q=1.5 must be a number in [0, 1]"),
    ("ecmp", "overhead = [-1]", "knobs.overhead=-1 must be"),
    ("fabric", "switch_usd = [1e300]", "knobs.switch_usd=1e+300 must be"),
    ("fabric", "stride = [inf]", "knobs.stride=inf must be"),
    ("estimate", '"system.scale_up_bandwidth_Bps" = [1]', "knobs.system.scale_up_bandwidth_Bps=1"),
    ("estimate", '"scale:system.scale_up_bandwidth_Bps" = [1e-9]',
     "system.scale_up_bandwidth_Bps=3e+11 x 1e-09 = 300 must be a number in [1000, 1e15]"),
])
def test_a_sweep_knob_outside_its_domain_is_refused_before_any_work(
        capsys, tmp_path, target, knobs, words):
    line = _line(capsys, "sweep", _spec(tmp_path, target, knobs), "--out", str(tmp_path / "o"))
    assert line.startswith("codesign sweep: error: ") and words in line
    assert not (tmp_path / "o").exists()


def test_a_base_value_outside_its_domain_is_refused(capsys, tmp_path):
    line = _line(capsys, "sweep", _spec(tmp_path, "collective", "ranks = [8]", "n_bytes = 1e30"),
                 "--out", str(tmp_path / "o"))
    assert "base.n_bytes=1e+30 must be a number in [0," in line


@pytest.mark.parametrize("name", list(sweep.TARGETS))
def test_every_float_knob_of_every_target_has_a_domain(name):
    """NaN on any float knob of any target is refused, naming the knob (the
    estimate target's are the scenario keys, `scenario.DOMAINS`; its `scale:`
    factors must be positive)."""
    for knob in sweep.TARGETS[name].float_knobs:
        with pytest.raises(ValueError, match=rf"knobs\.{knob}=nan must be"):
            sweep.parse_spec({"target": name, "knobs": {knob: [math.nan]}})


def test_a_reliability_sweep_that_makes_no_progress_exits_3(capsys, tmp_path):
    """The worst corner of the sweep (here 1,000 s per GPU) is named before any compile."""
    line = _line(capsys, "sweep", _spec(tmp_path, "reliability",
                                        "gpu_mtbf_s = [1000, 1e8]\ngpus = [8, 16384]"),
                 "--out", str(tmp_path / "o"), code=3)
    assert line.startswith("codesign sweep: no feasible answer: the job makes no progress")
    assert "(at gpu_mtbf_s=1000, gpus=16384)" in line and "floor of 0.001" in line


def test_a_sweep_writes_no_number_that_is_not_one(capsys, tmp_path):
    """In-domain extremes (2^70 bytes at 1 kB/s x 1e-300) overflow: one line, exit 2."""
    knobs = ('n_bytes = [1.1805916207174113e21]\n"scale_up.bandwidth_Bps" = [1e3]\n'
             '"scale_up.efficiency" = [1e-300]')
    line = _line(capsys, "sweep", _spec(tmp_path, "collective", knobs), "--out",
                 str(tmp_path / "o"), "--no-plots", "--no-progress")
    assert "the sweep's time_s is not finite at point 0 (n_bytes=" in line
    assert "narrow n_bytes, scale_up.bandwidth_Bps, scale_up.efficiency" in line


def test_the_rail_only_penalty_is_zero_inside_one_domain(capsys, tmp_path):
    """ranks within a scale-up domain: no exchange leaves it (was 0/0 = NaN)."""
    out = tmp_path / "o"
    assert main(["sweep", _spec(tmp_path, "fabric", "ranks = [8, 256]"), "--out", str(out),
                 "--no-plots", "--no-progress"]) == 0
    rows = json.loads((out / "results.json").read_text())
    col = rows["columns"].index("all_to_all_penalty")
    penalties = [r[col] for r in rows["rows"]]
    assert penalties[0] == 0 and penalties[1] > 0


# ------------------------------------------------------- 2. the failure model
@pytest.mark.parametrize("command, key", [
    ("estimate", "reliability.gpu_mtbf_s=1000"),
    ("reliability", "reliability.restart_s=1e9"),
])
def test_a_job_that_makes_no_progress_has_no_answer(capsys, command, key):
    """1,000 s per GPU printed ~1.9e266 days at exit 0; now exit 3 naming the cause."""
    line = _line(capsys, command, "--set", key, code=3)
    assert line.startswith(f"codesign {command}: no feasible answer: the job makes no progress")
    assert "reliability.gpu_mtbf_s, reliability.restart_s" in line and key in line


@pytest.mark.parametrize("output, key", [("time_to_train_s", "reliability.gpu_mtbf_s=1000"),
                                         ("goodput", "reliability.restart_s=1e9"),
                                         ("goodput", "reliability.checkpoint_write_s=1e9")])
def test_sensitivity_prints_no_nan(capsys, output, key):
    """+nan% for 37 knobs before; the floor is checked before anything compiles."""
    line = _line(capsys, "sensitivity", "default", "--output", output, "--set", key, code=3)
    assert "the job makes no progress" in line


@pytest.mark.parametrize("mtbf_s", [1e-3, 1.0, 1000.0])
def test_the_traced_check_covers_the_failure_model(mtbf_s):
    """Under jit and grad an in-range MTBF that gives an infinite time to train, a
    zero goodput or a NaN gradient raises, naming the cause."""
    def goodput(x):
        rel = reliability.Reliability(gpu_mtbf_s=x)
        return reliability.checked(reliability.report(10.0, 16384.0, 6e12, rel)).goodput

    for f in (jax.jit(goodput), jax.grad(goodput)):
        with pytest.raises(Exception, match="the job makes no progress"):
            jax.block_until_ready(f(jnp.asarray(mtbf_s)))
    assert 0.85 < float(jax.jit(goodput)(jnp.asarray(reliability.LLAMA3_GPU_MTBF_S))) < 1


def test_step_estimate_checks_the_failure_model():
    scn = scenario.load(None, ["reliability.gpu_mtbf_s=1e-3"])
    with pytest.raises(Exception, match="the job makes no progress"):
        step.estimate(scn)
    out = step.outputs(step.estimate(scn, check=False))
    with pytest.raises(reliability.NoProgress, match="would be 0 of the wall time"):
        output_checks.check_outputs(out)


@pytest.mark.parametrize("key", ["system.peak_flops_per_s", "system.matmul_efficiency"])
def test_the_traced_check_covers_the_step_model_at_the_ends_of_a_domain(key):
    """A peak or an efficiency of 1e-300 is in its domain (positive); under jit,
    vmap and grad the step it gives overflows to inf, and the estimate raises
    instead of returning inf, NaN or a NaN gradient."""
    import codesign

    scn = codesign.load(None)

    def time_to_train(v):
        # a 16-bit peak takes the 8-bit one along (their ratio is checked)
        with_fp8 = {"system.peak_fp8_flops_per_s": 2.0 * v} if "peak" in key else {}
        return codesign.estimate(codesign.set_knobs(scn, {key: v, **with_fp8})).time_to_train_s

    ends = jnp.asarray([1e-300, 0.5])
    for f in (jax.jit(jax.vmap(time_to_train)), jax.jit(jax.vmap(jax.grad(time_to_train)))):
        with pytest.raises(Exception, match="the estimate is not finite"):
            jax.block_until_ready(f(ends))
    assert math.isfinite(float(jax.jit(time_to_train)(jnp.asarray(0.5))))


def test_a_component_that_never_fails_has_no_mtbf(capsys):
    """share 0: null (text: never), not gpu_mtbf / 1e-300 ~ 1e300 hours."""
    assert main(["reliability", "--set", "reliability.share_nic=0", "--set",
                 "reliability.share_host=0.109", "--json"]) == 0
    mtbf = json.loads(capsys.readouterr().out)["component_mtbf_s"]
    assert mtbf["nic"] is None and all(v > 0 for k, v in mtbf.items() if k != "nic")


def test_collective_checks_what_it_prints(capsys, tmp_path):
    system = tmp_path / "slow.toml"
    system.write_text('[system]\npreset = "dgx-h100"\nscale_up_bandwidth_Bps = 1e3\n'
                      "scale_up_efficiency = 1e-300\n")
    line = _line(capsys, "collective", "all_reduce", "--ranks", "8", "--bytes", "1EiB",
                 "--algorithm", "ring", "--system", str(system))
    assert "time_s=inf is not finite" in line


def test_an_infeasible_optimum_prints_no_nan(capsys):
    """The grid's infeasible 'best' has no objective value: n/a (null in JSON), not nan."""
    argv = ["optimize", "default", "--method", "grid", "--vary",
            "system.scale_out_bandwidth_Bps", "--grid-points", "2", "--max-gpus", "1",
            "--no-progress"]
    assert main(argv) == 3
    out = capsys.readouterr().out
    assert "= n/a   NOT FEASIBLE" in out and "nan" not in out.lower()
    assert main([*argv, "--json"]) == 3
    text = capsys.readouterr().out
    assert json.loads(text)["objective"]["value"] is None and "NaN" not in text


# ------------------------------------------------------------ 3. load bounds
@pytest.mark.parametrize("argv, words", [
    (["--grid-points", "1000000000", "--vary",
      "system.scale_out_bandwidth_Bps,system.scale_up_bandwidth_Bps"],
     "the grid has 1,000,000,000,000,000,000 points (grid_points=1000000000 over 2 knobs), "
     "above the cap max_points=1,000,000,000; narrow --bounds or lower --grid-points"),
    (["--grid-points", "2000000", "--vary", "system.scale_out_bandwidth_Bps"],
     "grid_points=2,000,000 values per continuous knob is above the cap of 1,000,000"),
])
def test_a_grid_past_its_cap_is_refused_before_it_is_built(capsys, argv, words):
    line = _line(capsys, "optimize", "default", "--method", "grid", *argv)
    assert words in line


@pytest.mark.parametrize("text", [
    "a = " + "[" * 5000 + "]" * 5000,  # a RecursionError in the parser before
    "[system]\nx = " + "{a = " * 5000 + "1" + "}" * 5000,
    "[" + ".".join(["a"] * 40) + "]\nx = 1",
])
@pytest.mark.parametrize("flag", ["", "--system"])
def test_a_toml_nested_too_deep_is_refused(capsys, tmp_path, text, flag):
    path = tmp_path / "deep.toml"
    path.write_text(text + "\n")
    line = _line(capsys, "estimate", *([flag] if flag else []), str(path))
    what = "system file" if flag else "scenario file"
    assert f"{what} '{path}'" in line  # (then the key where it has one)
    assert "nests tables or arrays more than 32 levels deep" in line


def test_dev_zero_as_a_scenario_is_refused_quickly(capsys):
    line = _line(capsys, "estimate", "/dev/zero")
    assert "scenario file '/dev/zero' is not a regular file and gives more than 16MiB" in line


# --------------------------------------------------------------- 4. messages
def test_a_value_is_printed_at_full_precision(capsys):
    line = _line(capsys, "estimate", "--set", "system.matmul_efficiency=1.0000001")
    assert "system.matmul_efficiency=1.0000001 must be a number in (0, 1]" in line


def test_a_long_value_is_elided(capsys):
    line = _line(capsys, "estimate", "--set", "system.placement=" + "a" * 100_000)
    assert "system.placement='" + "a" * 40 + "... (100,000 characters)'" in line
    assert len(line) < 300


@pytest.mark.parametrize("value", ["", " ", ","])
def test_an_empty_placement_is_refused_naming_the_field(capsys, value):
    line = _line(capsys, "estimate", "--set", f"system.placement={value}")
    assert "system.placement=" in line and "must order each of tp,cp,ep,dp,pp" in line



def test_a_sweep_spec_nested_too_deep_is_refused(capsys, tmp_path):
    """A RecursionError (exit 1) before: the spec is read as scenario files are."""
    path = tmp_path / "deep.toml"
    path.write_text('target = "collective"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    line = _line(capsys, "sweep", str(path), "--out", str(tmp_path / "o"))
    assert f"spec file '{path}' nests tables or arrays more than 32 levels deep" in line


def test_a_sweep_that_makes_no_progress_has_no_feasible_answer(capsys, tmp_path):
    """The traced floor of the failure model inside an estimate sweep: exit 3, as
    `estimate` gives, not 2."""
    spec = _spec(tmp_path, "estimate", '"reliability.gpu_mtbf_s" = [1.0]',
                 base='scenario = "default"')
    line = _line(capsys, "sweep", spec, "--out", str(tmp_path / "o"), "--no-plots",
                 "--no-progress", code=3)
    assert line.startswith("codesign sweep: no feasible answer: the job makes no progress")


def test_a_size_range_to_infinity_is_refused(capsys):
    """`--sweep 1B:1e400` doubled until memory ran out (MemoryError, exit 1) before."""
    line = _line(capsys, "collective", "all_reduce", "--ranks", "8", "--sweep", "1B:1e400")
    assert "--sweep='1B:1e400': a message must be at most 2^70 bytes" in line


def test_a_file_name_too_long_is_one_line(capsys):
    line = _line(capsys, "estimate", "x" * 300)
    assert line.endswith("... (300 characters)': File name too long")


def test_a_measurement_file_nested_too_deep_is_refused(capsys, tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 5000 + "]" * 5000 + "\n")
    line = _line(capsys, "calibrate", str(path))
    assert line.endswith("deep.jsonl line 1: nested too deep to be a record of "
                         "`codesign bench --json`")


def test_the_audit_prints_no_ratio_of_nothing():
    """Nothing predicted and nothing found is 0, something found against nothing
    predicted no ratio (`audit --mesh tp=3` printed +nan% before)."""
    from codesign.execute import audit

    assert audit._relative(0.0, 0.0) == 0.0 and audit._relative(5.0, 0.0) is None
    assert audit._pct(None) == "n/a" and audit._pct(0.25) == "+25.0%"


def test_a_named_pipe_without_a_writer_is_read_as_empty_not_waited_on(tmp_path):
    """Opening a FIFO for reading waited for a writer forever (the harness's timeout)."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "s.toml"
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-m", "codesign", "estimate", str(fifo)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr


def test_a_descent_past_the_memory_bound_is_refused(capsys):
    """`--starts 1e9` was a MemoryError (exit 1)."""
    line = _line(capsys, "optimize", "--vary", "parallel.tp", "--starts", "1000000000")
    assert "starts x steps at most 2,000,000" in line


def test_too_many_fake_devices_are_refused(capsys):
    """`bench --devices 100000` crashed XLA (SIGSEGV)."""
    line = _line(capsys, "bench", "--devices", "100000", "--iters", "1")
    assert "devices=100000 must be in [1, 4,096]" in line


def test_bench_past_this_machine_s_memory_is_refused_before_it_allocates(capsys):
    """`bench --sizes 1B:1EiB` was a MemoryError (exit 1) on fake devices."""
    line = _line(capsys, "bench", "--sizes", "1B:1EiB", "--devices", "2", "--iters", "1",
                 "--no-progress")
    assert "sizes up to 1EiB over 8 ranks need about" in line  # conftest fakes 8
    assert "of host memory at once" in line and "choose smaller --sizes" in line


def test_the_host_memory_of_a_bench_run_counts_every_size():
    from codesign.execute import bench

    one = bench.host_memory_bytes("all_reduce", 8, [2**20])
    # float32: input 4 B, expected int64 8 B and output 4 B per element, plus the
    # temporaries of the pattern (3 x 8 B) and the cast (4 B)
    assert one == 8 * 2**18 * (4 + 12 + 28)
    assert bench.host_memory_bytes("all_reduce", 8, [2**20, 2**20]) == 8 * 2**18 * (2 * 16 + 28)
    # all-gather's size is its whole output: 2^18 input elements, 8 x as many out
    assert bench.host_memory_bytes("all_gather", 8, [2**20]) == 2**18 * (4 + 8 * 12 + 28)
    bench.check_memory("all_reduce", 8, [2**20], "float32", None)  # unknown: not checked
    with pytest.raises(ValueError, match="this process can take 1KiB"):
        bench.check_memory("all_reduce", 8, [2**20], "float32", 1024)


def test_the_library_prints_nothing_when_its_own_traced_check_fires(capfd, caplog):
    """Under jax.jit a knob outside its domain raises codesign's own error
    (through equinox, inside a callback) with nothing logged or printed: JAX's
    log record of that callback exception is dropped (`checks._OwnTracedErrors`);
    another callback's exception is still logged."""
    import logging

    caplog.set_level(logging.ERROR, logger="jax._src.callback")  # (the CLI raises it)
    bad = scenario.set_knobs(scenario.load(None), {"parallel.tp": -3.0})
    with pytest.raises(Exception, match="parallel.tp"):
        jax.jit(lambda s: step.estimate(s).step.step_time_s)(bad)
    assert capfd.readouterr().err == ""
    assert not [r for r in caplog.records if r.name == "jax._src.callback"]

    def fails(x):
        raise RuntimeError("not codesign's")

    with pytest.raises(Exception, match="not codesign's"):
        jax.jit(lambda x: jax.pure_callback(fails, jax.ShapeDtypeStruct((), x.dtype), x))(
            jnp.ones(()))
    assert [r for r in caplog.records if r.name == "jax._src.callback"]
