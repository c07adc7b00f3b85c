"""The newcomer frictions of the pages and the CLI's text (issue 56 item 7):
integers as integers, durations in their largest sensible unit, parameter counts
with their convention, integer knobs' sensitivities at their neighbours, what
would make a plan fit, and the outputs written safely."""

from __future__ import annotations

import pytest

from codesign import optimize
from codesign import scenario as sc
from codesign.cli import _text


@pytest.mark.parametrize("n,text", [(1536.0, "1,536"), (16, "16"), (2.5e6, "2,500,000"),
                                    (2.5, "2.5"), (0.0, "0")])
def test_a_count_is_an_integer_with_thousands_separators(n, text):
    assert _text.format_count(n) == text


@pytest.mark.parametrize("seconds,text", [
    (0.412, "0.412 s"), (42.0, "42.0 s"), (59.9, "59.9 s"), (60.0, "1.0 min"),
    (700.0, "11.7 min"), (3600.0, "1.0 h"), (9360.0, "2.6 h"), (86400.0, "1.0 days"),
    (24.5 * 86400, "24.5 days")])
def test_a_duration_is_in_its_largest_sensible_unit_never_zero_days(seconds, text):
    assert _text.format_duration(seconds) == text


def test_a_duration_range_takes_its_upper_ends_unit():
    assert _text.format_duration_range(3000.0, 7200.0) == "0.8-2.0 h"
    assert _text.format_duration_range(20.0 * 86400, 24.2 * 86400) == "20.0-24.2 days"


HF = __import__("pathlib").Path(__file__).parent / "fixtures" / "import" / "hf"


def test_import_out_never_overwrites_its_own_input_nor_follows_a_link(tmp_path, capsys):
    import os
    import shutil

    from codesign.cli import main

    config = tmp_path / "config.json"
    shutil.copy(sorted(HF.glob("*.json"))[0], config)
    before = config.read_bytes()
    assert main(["import", "hf", str(config), "--out", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and config.read_bytes() == before
    target = tmp_path / "elsewhere.toml"
    target.write_text("kept\n")
    os.symlink(target, tmp_path / "link.toml")
    assert main(["import", "hf", str(config), "--out", str(tmp_path / "link.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "link" in err and target.read_text() == "kept\n"
    out = tmp_path / "scenario.toml"
    assert main(["import", "hf", str(config), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n" and "[model]" in out.read_text()


def test_a_worker_log_is_created_0600_and_a_planted_link_is_refused(tmp_path):
    import os
    import stat

    from codesign.execute import distributed

    log = tmp_path / "worker0.log"
    with distributed.open_log(log) as f:
        f.write(b"x")
        f.seek(0)
        assert f.read() == b"x"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    victim = tmp_path / "victim"
    victim.write_text("kept")
    os.symlink(victim, tmp_path / "worker1.log")
    with pytest.raises(ValueError, match="worker1.log' is a symbolic link"):
        distributed.open_log(tmp_path / "worker1.log")
    assert victim.read_text() == "kept"


def _imported_model(tmp_path, name):
    from codesign import scenario
    from codesign.cli import main

    out = tmp_path / f"{name}.toml"
    assert main(["import", "hf", str(HF / f"{name}.json"), "--out", str(out)]) == 0
    return scenario.load(str(out)).model


def test_parameter_counts_say_their_conventions(tmp_path, capsys):
    """Qwen3-30B-A3B: 30.5B total, 3.3B activated (its model card) counts the
    untied input embedding (151,936 x 2,048); without it 3.03B. DeepSeek-V3 with
    its MTP depth: 671B + the MTP block (an MoE block and its 2h x h projection)."""
    from codesign.cli.estimate import parameters_words
    from codesign.model import workload

    qwen = _imported_model(tmp_path, "qwen3-30b-a3b")
    c = workload.parameter_counts(qwen)
    assert not c.tied and c.input_embedding == 151_936 * 2_048 and c.mtp == 0
    assert c.active == pytest.approx(3.03e9, rel=0.01)
    assert c.active + c.input_embedding == pytest.approx(3.34e9, rel=0.01)
    assert c.total == pytest.approx(30.5e9, rel=0.01)
    assert parameters_words(qwen) == ("30.5B total (3.03B active per token without the input "
                                      "embedding, 3.34B with it)")
    capsys.readouterr()

    import equinox as eqx
    import jax.numpy as jnp

    from codesign import scenario

    dsv3 = scenario.load("deepseek-v3", ["model.mtp_layers=1"]).model
    c = workload.parameter_counts(dsv3)
    h = float(dsv3.hidden)
    block = (float(dsv3.attention_params()) + float(dsv3.experts + dsv3.shared_experts)
             * float(dsv3.expert_params()) + h * float(dsv3.experts))
    assert c.mtp == pytest.approx(block + 2 * h * h, rel=1e-9)
    plain = eqx.tree_at(lambda m: m.mtp_layers, dsv3, jnp.zeros_like(dsv3.mtp_layers))
    assert c.total - c.mtp == pytest.approx(float(plain.params()), rel=1e-12)
    assert parameters_words(dsv3).startswith(f"683B total incl. the MTP module's "
                                             f"{c.mtp / 1e9:.3g}B")


def test_validate_draws_each_rows_error_grouped_by_family_with_the_band():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codesign import plots

    rows = [{"name": f"r{i}", "family": fam, "measure": m, "error": e, "calibration": i == 0}
            for i, (fam, m, e) in enumerate([("A100", "mfu", 0.05), ("A100", "mfu", -0.2),
                                             ("tpu", "step_time_s", 0.3),
                                             ("tpu", "mfu", float("nan"))])]
    fig = plots.validation_errors(rows, band=0.1)
    ax = fig.axes[0]
    dots = [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.lines
            if line.get_marker() == "o"]
    # grouped by family, by error within one: A100's -20% then +5%, then tpu's +30%
    assert dots == [(pytest.approx(-20.0), 0), (pytest.approx(5.0), 1), (pytest.approx(30.0), 2)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r1", "r0", "r2"]
    band = [p for p in ax.patches if p.get_x() == pytest.approx(-10.0)]
    assert band and band[0].get_width() == pytest.approx(20.0)
    assert {t.get_text() for t in ax.texts} == {"A100 (2)", "tpu (1)"}
    plt.close(fig)


def test_an_integer_knobs_sensitivity_is_the_exact_change_at_its_next_values(capsys):
    """tp 8 of the default scenario: the next admissible values are 4 and 16
    (heads 96, 1,024 GPUs, pp 8); each change is the one `codesign estimate`
    gives at that value, and tp 4 does not fit in memory."""
    import json
    import re

    from codesign.cli import main

    def step(*sets):
        assert main(["estimate", *(w for s in sets for w in ("--set", s))]) == 0
        text = capsys.readouterr().out
        return float(re.search(r"^step time +([\d.]+) s", text, re.M).group(1)), text

    assert main(["sensitivity", "--knob", "parallel.tp", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["integer_steps"]["parallel.tp"]
    assert steps["value"] == 8 and steps["down"]["value"] == 4 and steps["up"]["value"] == 16
    here, _ = step()
    up, _ = step("parallel.tp=16")
    down, text = step("parallel.tp=4")
    assert steps["up"]["change"] == pytest.approx(up / here - 1, abs=2e-4)
    assert steps["down"]["change"] == pytest.approx(down / here - 1, abs=2e-4)
    assert "DOES NOT FIT" in text and steps["down"]["fits_memory"] is False
    assert main(["sensitivity", "--knob", "parallel.tp"]) == 0
    line = next(r for r in capsys.readouterr().out.splitlines() if "parallel.tp" in r)
    assert (f"8 -> 4 gives {steps['down']['change'] * 100:+.2f}% step time (does not fit "
            f"memory); 8 -> 16 gives {steps['up']['change'] * 100:+.2f}% step time") in line


def test_a_plan_that_does_not_fit_says_what_one_change_would_make_it_fit(capsys):
    """tp 4 on the default scenario needs 96GiB of an 80GB GPU: tp back at 8 is
    the default itself (its step time exactly), ZeRO 1 shards the optimizer
    state and fits; twice the GPUs (dp x2, ZeRO 0) shards nothing and does not."""
    import json
    import re

    from codesign.cli import main

    assert main(["estimate"]) == 0
    default = float(re.search(r"^step time +([\d.]+) s", capsys.readouterr().out, re.M).group(1))
    assert main(["estimate", "--set", "parallel.tp=4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits_memory"] is False
    options = {o["set"]: o for o in out["fit_options"]}
    assert options["parallel.tp=8"]["fits_memory"] is True
    assert options["parallel.tp=8"]["step_time_s"] == pytest.approx(default, abs=5e-4)
    assert options["parallel.zero=1"]["fits_memory"] is True
    gpus = options["system.gpus=2048"]
    assert gpus["fits_memory"] is False and gpus["gpus"] == 2048
    assert gpus["memory_bytes_per_gpu"] == pytest.approx(out["memory_bytes_per_gpu"], rel=0.02)
    fitting = [o for o in out["fit_options"] if o.get("fits_memory")]
    assert fitting == out["fit_options"][: len(fitting)]  # those that fit first, cheapest first
    cost = [o["step_time_s"] * o["gpus"] for o in fitting]
    assert cost == sorted(cost)
    assert all(o["memory_bytes_per_gpu"] <= o["memory_capacity_bytes"] for o in fitting)
    assert main(["estimate"]) == 0 and "what would make it fit" not in capsys.readouterr().out


def test_a_page_cell_writes_a_whole_number_as_an_integer():
    from codesign import report

    assert [report.cell(v) for v in (16384.0, 1536.0, 0.0, 1.23456789, 3e12, float("inf"))] == [
        "16,384", "1,536", "0", "1.235", "3e+12", "n/a"]


def test_neighbours_stay_bounded_on_a_billion_sequence_batch():
    """An integer knob's next admissible values are sought within NEIGHBOUR_SPAN of
    its value (a 1e9-sequence batch gives the micro-batch count a default range of
    billions: no array of that size), and bounds spanning more than
    MAX_INTEGER_VALUES integers are refused naming the knob."""
    from codesign.optimize import _problem

    scn = sc.load(None, ["training.global_batch=1e9"])
    down, up = optimize.neighbours(scn, "parallel.tp")
    assert (down, up) == (4.0, 16.0)  # tp 8 among the divisors of the heads
    with pytest.raises(ValueError, match=r"bounds training\.micro_batch=1:1e\+07 span"):
        _problem.admissible_values(scn, "training.micro_batch", 1, 1e7, ("training.micro_batch",))
