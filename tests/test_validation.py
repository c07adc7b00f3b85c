"""Bad input never crashes or lies: the domain table, one-line errors, exit codes,
traced checks, and a property test over `--set` strings, scenario tables and
traced knob values (thousands of examples, one compilation each)."""

import functools
import logging
import math
import os

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from codesign import domains, output_checks
from codesign import scenario as sc
from codesign.cli import _traced_message, main
from codesign.model import step

logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)  # traced errors: ours

FLOAT_KEYS = tuple(f"{s}.{k}" for s, keys in sc.SCHEMA.items()
                   for k, kind in keys.items() if kind is float)
ALL_KEYS = tuple(f"{s}.{k}" for s, keys in sc.SCHEMA.items() for k in keys)
BASE = sc.load(None)
TRACED_KNOBS = tuple(k for k in sc.knobs(BASE) if k not in sc.RELATIONAL)
# Examples per property test: sized for the 4-minute suite; a thorough run
# multiplies them (CODESIGN_PROPERTY_SCALE=10 pytest tests/test_validation.py).
SCALE = float(os.environ.get("CODESIGN_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, round(n * SCALE))


PROPERTY = settings(max_examples=examples(500), deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ the table
def test_every_float_key_and_knob_has_a_domain():
    assert set(FLOAT_KEYS) <= set(sc.DOMAINS), set(FLOAT_KEYS) - set(sc.DOMAINS)
    assert set(sc.KNOBS) <= set(sc.DOMAINS)
    assert set(sc.DOMAINS) <= set(FLOAT_KEYS), "a domain for a key the schema lacks"


def test_every_builtin_scenario_lies_inside_the_domains():
    for name in sc.BUILTIN:
        scn = sc.load(name)
        for key in sc.knobs(scn):
            sc.check(key, sc.get_knob(scn, key))


def test_domain_membership_and_description():
    d = sc.DOMAINS["parallel.tp"]
    assert d.describe() == "an integer in [1, 1e7]"
    assert list(d.ok([0, 1, 2.5, 8, 1e7, 2e7, np.nan, np.inf])) == \
        [False, True, False, True, True, False, False, False]
    e = sc.DOMAINS["system.matmul_efficiency"]
    assert e.describe() == "a number in (0, 1]"
    assert list(e.ok([0.0, 1e-9, 1.0, 1.0000001])) == [False, True, True, False]
    assert sc.DOMAINS["system.scale_up_bandwidth_Bps"].clip(1e2, 1e16) == (1e3, 1e15)
    assert "| an integer in [1, 1e7] |" in sc.domains_markdown()


# ------------------------------------------------------------------ the CLI
CARELESS = [
    (["estimate", "--set", "parallel.tp=0"], "parallel.tp=0 must be an integer in [1, 1e7]"),
    (["estimate", "--set", "parallel.pp=0"], "parallel.pp=0 must be an integer"),
    (["estimate", "--set", "parallel.cp=0"], "parallel.cp=0 must be an integer"),
    (["estimate", "--set", "parallel.tp=-8"], "parallel.tp=-8 must be an integer"),
    (["estimate", "--set", "system.matmul_efficiency=0"],
     "system.matmul_efficiency=0 must be a number in (0, 1]"),
    (["estimate", "--set", "system.matmul_efficiency=7"], "system.matmul_efficiency=7"),
    (["estimate", "--set", "training.global_batch=1e308"], "training.global_batch=1e+308"),
    (["estimate", "--set", "system.scale_up_bandwidth_Bps=1e-300"],
     "system.scale_up_bandwidth_Bps=1e-300 must be a number in [1000, 1e15]"),
    (["estimate", "--set", "system.scale_out_latency_s=1e300"],
     "system.scale_out_latency_s=1e+300 must be a number in [0, 1]"),
    (["estimate", "--set", "model.experts=1e308"], "model.experts=1e+308"),
    (["estimate", "--set", "system.scale_out_bandwidth_Bps=-1"],
     "system.scale_out_bandwidth_Bps=-1"),
    (["estimate", "--set", "system.scale_up_efficiency=-0.5"], "system.scale_up_efficiency=-0.5"),
    (["estimate", "--set", "model.layers=" + "9" * 400], "model.layers=9e+399"),
    (["estimate", "llama3-405b", "--set", "parallel.interleave=8"],
     "parallel.pp=16 x parallel.interleave=8 = 128 must not exceed model.layers=126"),
    (["reliability", "default", "--set", "reliability.gpu_mtbf_s=0"],
     "reliability.gpu_mtbf_s=0 must be a number in (0, 1e12]"),
    (["optimize", "--vary", "system.scale_out_bandwidth_Bps", "--bounds",
      "system.scale_out_bandwidth_Bps=1:1e20"], "bounds system.scale_out_bandwidth_Bps=1:1e+20"),
]


@pytest.mark.parametrize("argv,named", CARELESS)
def test_careless_input_is_one_line_and_exit_2(capsys, argv, named):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and "\n" not in err, err
    assert err.startswith(f"codesign {argv[0]}: error: ") and named in err, err


def test_binary_and_directory_files_are_named(capsys, tmp_path):
    blob = tmp_path / "blob.toml"
    blob.write_bytes(bytes(range(256)))
    with pytest.raises(ValueError, match="scenario file '.*blob.toml' is not UTF-8 text"):
        sc.load(str(blob))
    assert main(["estimate", str(blob)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "blob.toml" in err
    assert main(["estimate", "--system", str(blob)]) == 2
    assert "system file" in capsys.readouterr().err
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    assert main(["estimate", str(folder)]) == 2
    assert "folder.toml" in capsys.readouterr().err


def test_a_whole_scenario_as_system_file_is_rejected(tmp_path):
    f = tmp_path / "whole.toml"
    f.write_text('[model]\npreset = "llama3-8b"\n[system]\nscale_out_latency_s = 3e-6\n')
    with pytest.raises(ValueError, match=r"may hold only a \[system\] table; it also has "
                                         r"\[model\]"):
        sc.load(None, system=str(f))
    ok = tmp_path / "system.toml"
    ok.write_text("[system]\nscale_out_latency_s = 3e-6\n")
    assert float(sc.load(None, system=str(ok)).system.scale_out.latency_s) == 3e-6


def test_estimate_names_the_system_it_used(capsys, tmp_path):
    import json

    ok = tmp_path / "sys.toml"
    ok.write_text("[system]\nscale_out_bandwidth_Bps = 50e9\n")
    assert main(["estimate", "--system", str(ok), "--json"]) == 0
    system = json.loads(capsys.readouterr().out)["system"]
    assert system["preset"] == "dgx-a100" and system["chip"] == "A100-SXM4-80GB"
    assert system["source"] == str(ok) and system["scale_out"]["bandwidth_Bps"] == 50e9
    assert main(["estimate", "--system", "dgx-h100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("system dgx-h100 (from dgx-h100): H100-SXM5-80GB; scale-up 8 GPUs")


def test_internal_faults_are_one_line_exit_1_with_a_traceback_on_request(
        capsys, monkeypatch):
    from codesign.cli import estimate as cli_estimate

    def broken(args, name):
        raise TypeError("unsupported operand\nsecond line")

    monkeypatch.setattr(cli_estimate, "run", broken)
    monkeypatch.delenv("CODESIGN_DEBUG", raising=False)
    assert main(["estimate"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("codesign estimate: internal error: TypeError: unsupported operand")
    assert "please report it" in err
    monkeypatch.setenv("CODESIGN_DEBUG", "1")
    assert main(["estimate"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes: 0 an answer; 2 bad input" in out and "3 valid input without" in out


def test_optimize_with_nothing_feasible_exits_3(capsys):
    argv = ["optimize", "--vary", "parallel.tp", "--method", "grid", "--no-progress",
            "--budget-usd", "1", "--set", "training.tokens=1e9"]
    assert main(argv) == 3
    captured = capsys.readouterr()
    assert "NOT FEASIBLE" in captured.out and "exit code 3" in captured.err


def test_outputs_that_are_not_finite_or_above_peak_are_errors():
    est = step.outputs(jax.jit(step.estimate)(BASE))
    output_checks.check_outputs(est)
    with pytest.raises(ValueError, match=r"time_to_train_s=inf is not finite.*gpu_mtbf_s"
                                         r".*\(overrides: x.y=1\)"):
        output_checks.check_outputs({**est, "time_to_train_s": jnp.inf}, ["x.y=1"])
    with pytest.raises(output_checks.OutputOutOfRange, match="mfu_gemm_peak=1.5 exceeds 1"):
        output_checks.check_outputs({**est, "mfu_gemm_peak": jnp.asarray(1.5)})


# ------------------------------------------------------------------ traced checks
def test_traced_knobs_outside_their_domain_raise_under_jit_vmap_and_grad():
    def step_time(e):
        scn = sc.set_knobs(BASE, {"system.matmul_efficiency": e})
        return step.estimate(scn).step.step_time_s

    assert float(jax.jit(step_time)(0.5)) > 0
    for bad in (0.0, 7.0, jnp.nan):
        with pytest.raises(Exception, match="system.matmul_efficiency must be a number in"):
            jax.jit(step_time)(bad)
    with pytest.raises(Exception, match="system.matmul_efficiency must be"):
        jax.jit(jax.vmap(step_time))(jnp.array([0.5, 2.0]))
    with pytest.raises(Exception, match="system.matmul_efficiency must be"):
        jax.jit(jax.grad(step_time))(-1.0)
    g = jax.jit(jax.grad(step_time))(0.5)
    chex.assert_tree_all_finite(g)
    assert float(g) < 0  # a better GEMM efficiency shortens the step


def test_concrete_checks_say_so_when_skipped_under_trace():
    from codesign import checks

    assert checks.concrete(jnp.ones(2)) is not None
    seen = []
    jax.jit(lambda x: seen.append(checks.concrete(x)) or x)(1.0)
    assert seen == [None]  # skipped: Scenario.checked covers traced scenarios


# ------------------------------------------------------------------ properties
@functools.cache
def _outputs_of_scenario():
    """outputs(estimate(scn)), jitted once; a recompile fails the test."""
    return jax.jit(chex.assert_max_traces(lambda s: step.outputs(step.estimate(s)), n=1))


@functools.cache
def _outputs_of_knobs():
    """outputs(estimate(set_knobs(BASE, values))) over every traced knob at once."""
    def f(values):
        return step.outputs(step.estimate(sc.set_knobs(BASE, values)))
    return jax.jit(chex.assert_max_traces(f, n=1))


def _assert_answer_or_one_line_error(evaluate):
    """`evaluate()` returns finite outputs with MFU/HFU <= 1 against the GEMMs'
    peak, or raises a one-line ValueError."""
    try:
        out = evaluate()
    except ValueError as e:
        traced = _traced_message(e)  # under jit: the failure model's floor (`reliability.checked`)
        if traced is not None:
            assert traced.startswith("the job makes no progress"), traced
            return "no progress"
        text = str(e)
        assert text and "\n" not in text and "=" in text, text
        return "error"
    out = jax.tree.map(np.asarray, out)
    chex.assert_tree_all_finite(out)
    assert out["mfu_gemm_peak"] <= 1 and out["hfu_gemm_peak"] <= 1 and out["step_time_s"] > 0
    return "answer"


def _numbers(key, big=10**400):
    """Any float, any integer (up to `big`), and values near the key's domain and its edges."""
    d = sc.DOMAINS.get(key, domains.Domain(0.0, 1.0))
    edges = [d.lo, d.hi, d.lo * (1 - 1e-12), d.hi * (1 + 1e-12), -d.hi, 0.0, 1.0]
    inside = (st.integers(int(d.lo), int(min(d.hi, 2**20))) if d.integer
              else st.floats(d.lo, d.hi, exclude_min=d.lo_open))
    powers = st.integers(0, 14).map(lambda k: float(2**k))
    here = float(sc.get_knob(BASE, key)) if key in sc.knobs(BASE) else 1.0
    near = st.integers(-3, 3).map(lambda k: here * 2.0**k)  # keeps divisibility often
    return st.one_of(st.floats(), st.integers(-big, big), st.sampled_from(edges),
                     inside, powers, near, near)


def _value(key):
    kind = sc.SCHEMA.get(key.split(".", 1)[0], {}).get(key.split(".", 1)[-1], float)
    junk = st.one_of(st.text(max_size=8), st.booleans(), st.none(),
                     st.lists(st.integers(), max_size=2))
    if kind is float:
        return st.one_of(_numbers(key), junk)
    return st.one_of(junk, _numbers(key), st.sampled_from(
        ["1f1b", "interleaved", "gpipe", "full", "fp8", "dgx-h100", "llama3-8b", "clos",
         "tp,cp,ep,dp,pp", "0", "3"]))


def _text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value)


KEYS = st.one_of(st.sampled_from(ALL_KEYS),
                 st.sampled_from(["model.widht", "nosuch.key", "system", "=", "a.b.c"]))
OVERRIDE = KEYS.flatmap(lambda k: _value(k).map(lambda v: f"{k}={_text(v)}"))


@PROPERTY
@given(st.lists(OVERRIDE, min_size=1, max_size=3))
def test_property_set_strings_answer_or_name_the_key(overrides):
    """Any `--set` strings on the default scenario: a finite answer or one line."""
    try:
        scn = sc.load(None, overrides)
    except ValueError as e:
        assert str(e) and "\n" not in str(e), str(e)
        event("load error")
        return
    if jax.tree.structure(scn) != jax.tree.structure(BASE):
        event("loaded, structure changed")
        return  # a string or bool key changed the static structure: checked at load level
    event(_assert_answer_or_one_line_error(
        lambda: output_checks.check_outputs(out := _outputs_of_scenario()(scn), overrides) or out))


def test_a_subnormal_value_counts_as_zero_in_the_concrete_and_the_traced_check():
    """1e-310 is > 0 to NumPy but 0 to XLA on CPU: refused on load, one line, rather
    than loading and then tripping the traced check under jit (a bug, fixed)."""
    with pytest.raises(ValueError, match=r"^system.matmul_efficiency=1e-310 \(a subnormal") as e:
        sc.load(None, ["system.matmul_efficiency=1e-310"])
    assert "\n" not in str(e.value)
    domain = sc.DOMAINS["system.matmul_efficiency"]
    assert not domain.ok(1e-310) and not domain.ok_traced(1e-310) and domain.ok(1e-300)


SECTION = st.sampled_from(tuple(sc.SCHEMA) + ("extra",))
TABLES = st.dictionaries(SECTION, st.one_of(
    st.lists(st.sampled_from(ALL_KEYS)).map(lambda _: {}),
    st.builds(lambda pairs: dict(pairs), st.lists(st.sampled_from(ALL_KEYS).flatmap(
        lambda k: st.tuples(st.just(k.split(".", 1)[1]), _value(k))), max_size=4)),
    st.integers(), st.text(max_size=4)), max_size=5)


@settings(PROPERTY, max_examples=examples(250))
@given(TABLES, st.booleans())
def test_property_scenario_tables_load_or_name_the_key(tables, with_preset):
    """Any tables (missing, extra, wrong types, any values): a Scenario or one line."""
    if with_preset and isinstance(tables.get("model"), dict):
        tables["model"].setdefault("preset", "llama3-8b")
    try:
        scn = sc.from_tables(tables)
    except ValueError as e:
        assert str(e) and "\n" not in str(e), str(e)
        event("error")
        return
    event("loaded")
    assert isinstance(scn, sc.Scenario)
    for key in sc.knobs(scn):
        sc.check(key, sc.get_knob(scn, key))  # everything loaded lies in its domain


KNOB_VALUES = st.dictionaries(st.sampled_from(TRACED_KNOBS), st.floats(), max_size=4).flatmap(
    lambda d: st.fixed_dictionaries({k: _numbers(k, big=10**300).map(float) for k in d}))


@settings(PROPERTY, max_examples=examples(400))
@given(KNOB_VALUES)
def test_property_traced_knobs_answer_or_raise_naming_the_key(values):
    """Floats from the whole range through `set_knobs` on one compiled estimate:
    inside their domains a finite answer (or a ValueError naming the output);
    outside, the traced check raises and names a key."""
    full = {k: np.asarray(sc.get_knob(BASE, k), dtype=np.float64) for k in TRACED_KNOBS}
    full.update({k: np.asarray(v, dtype=np.float64) for k, v in values.items()})
    outside = [k for k, v in values.items()
               if not sc.DOMAINS[k].ok_traced(np.asarray(v))]
    try:
        out = _outputs_of_knobs()(full)
    except Exception as e:  # noqa: BLE001 - what a traced check raises depends on the transform
        message = _traced_message(e)
        assert message is not None, str(e)[:300]
        assert any(message.startswith(f"{k} must be") for k in outside) if outside \
            else message.startswith(("model.", "system.peak_fp8_flops_per_s must not exceed",
                                     "the job makes no progress",
                                     "the estimate is not finite")), message
        event("traced error: " + ("domain" if outside else "relation, no progress or overflow"))
        return
    assert not outside, f"{outside} outside their domains went through"
    event(_assert_answer_or_one_line_error(lambda: output_checks.check_outputs(out) or out))


def test_the_guard_threads_every_leaf():
    """`Scenario.checked` returns the scenario with its leaves guarded (same structure)."""
    checked = BASE.checked()
    assert jax.tree.structure(checked) == jax.tree.structure(BASE)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(eqx.filter(checked,
               eqx.is_array)), jax.tree.leaves(eqx.filter(BASE, eqx.is_array)), strict=True))


def test_docs_render_the_domain_table_and_the_exit_codes():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "inputs.md").read_text()
    assert "## Exit codes and input domains" in page
    assert sc.domains_markdown() in page, "docs/inputs.md's domain table is stale: re-render it"
