"""Pipeline layouts (`parallel.pipeline_layout`, Megatron-Core's grammar): the
parse, the checks against the model and plan, the ranks' counts, and the step
costed by its heaviest rank."""

import math

import jax
import pytest

from codesign import scenario
from codesign.model import compute, memory, relax, stage, step

SMALL = {"model": {"layers": 6, "hidden": 512, "heads": 8, "ffn_hidden": 2048,
                   "seq_len": 1024, "vocab": 32000, "tied_embeddings": False},
         "training": {"global_batch": 16, "micro_batch": 1, "host_launch_s": 0.0},
         "parallel": {"pp": 2}, "system": {"preset": "dgx-h100", "gpus": 16}}


def _small(layout: str = "", parallel=(), **model):
    data = {k: dict(v) for k, v in SMALL.items()}
    data["model"].update(model)
    data["parallel"].update(parallel)
    if layout:
        data["parallel"]["pipeline_layout"] = layout
    return scenario.from_tables(data)


# jitted: a small estimate compiles faster than it runs eagerly, and a jitted
# layout is what `codesign estimate` costs (the plan's counts traced)
estimate_program = jax.jit(lambda scn: step.estimate(scn, check=False))


def _counts(text):
    return [tuple(st[c] for c in "EtmL") for st in stage.parse_layout(text).stages]


def test_grammar_matches_megatron_examples():
    # Megatron-Core's docstring: "Ettt|(tt|)*29,m|L" -> [[E,t,t,t]] + [[t,t]]*29 + [[m],[L]]
    assert _counts("Ettt|(tt|)*29,m|L") == [(1, 3, 0, 0)] + [(0, 2, 0, 0)] * 29 \
        + [(0, 0, 1, 0), (0, 0, 0, 1)]
    assert _counts("Et*3|(tt|)*29,m|L") == _counts("Ettt|(tt|)*29,m|L")
    # Megatron-Bridge's DeepSeek-V3 layout for pp 16
    dsv3 = _counts("Et*4|(t*4|)*14tmL")
    assert dsv3 == [(1, 4, 0, 0)] + [(0, 4, 0, 0)] * 14 + [(0, 1, 1, 1)]
    assert sum(c[1] for c in dsv3) == 61
    # the unrolling's own examples: (|ab)*2 -> |ab|ab, an empty first stage
    assert _counts("E(|t)*2|L") == [(1, 0, 0, 0), (0, 1, 0, 0), (0, 1, 0, 0), (0, 0, 0, 1)]


@pytest.mark.parametrize("text, token", [
    ("Etx|L", "'x'"), ("tE|L", "begin with the embedding"), ("Et|Lt", "end with the loss"),
    ("Et|mt|L", "after an MTP layer"), ("E(t)*0|L", "repeats a group 0 times"),
    ("Et*|L", "'*'"), ("", "empty"), ("Et|(t|L", "'(t'")])
def test_grammar_errors_name_the_key_and_token(text, token):
    with pytest.raises(ValueError, match="parallel.pipeline_layout") as err:
        stage.parse_layout(text)
    assert token in str(err.value)


def test_layout_checked_against_model_and_plan():
    assert stage.check_layout("Et*3|t*3L", 6, 0, 2, 1) is None
    assert "model.layers=7" in stage.check_layout("Et*3|t*3L", 7, 0, 2, 1)
    assert "model.mtp_layers=1" in stage.check_layout("Et*3|t*3L", 6, 1, 2, 1)
    assert "2 x 2 = 4" in stage.check_layout("Et*3|t*3L", 6, 0, 2, 2)
    # the MTP layer on a rank's last virtual stage: stage 3 of pp 2 x v 2, not stage 1
    assert stage.check_layout("Ett|t|tt|tmL", 6, 1, 2, 2) is None
    assert "last virtual stage" in stage.check_layout("Ettt|tttm||L", 6, 1, 2, 2)
    with pytest.raises(ValueError, match=r"parallel.pipeline_layout='Et\*2\|t\*3L' places 5"):
        _small("Et*2|t*3L")
    with pytest.raises(ValueError, match="parallel.pipeline_layout='Et|t|t|t|t|tL' has 6 "):
        _small("Et|t|t|t|t|tL")


def test_rank_counts_interleave_and_dense_first():
    # pp 2 x v 2: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3; the first
    # 3 of the 6 layers dense (dense, MoE, MTP, E, L)
    lay = stage.parse_layout("Ett|t|tt|tmL")
    assert stage.rank_counts(lay, 2, 3) == [(2, 2, 0, 1, 0), (1, 1, 1, 0, 1)]
    # the same in jnp (`shapes`, what the step costs): rank 1 of pp 2
    scn = _small("Ett|t|tt|tmL", {"interleave": 2, "schedule": "interleaved"}, moe_layers=3,
                 experts=8, top_k=2, mtp_layers=1, expert_ffn_hidden=512)
    ranks, valid = stage.shapes(scn.model, scn.plan)
    got = [(float(ranks.dense_layers_on_stage[i]), float(ranks.moe_layers_on_stage[i]),
            float(ranks.mtp_layers_on_stage[i]), float(ranks.head_passes[i]))
           for i in range(len(valid)) if valid[i]]
    # the MTP block an MoE block; the head's pass and the MTP depth's on rank 1
    assert got == [(2.0, 2.0, 0.0, 0.0), (1.0, 2.0, 1.0, 2.0)]


def test_default_is_the_even_split():
    scn = _small()
    assert scn.plan.pipeline_layout == ""
    sh = stage.shape(scn.model, scn.plan)
    assert float(sh.layers_on_stage) == 3.0 and float(sh.head_passes) == 1.0
    assert sh.embedding_params is None


def test_even_layout_reproduces_the_even_split():
    """With the head on the last of two even stages (untied embeddings), the
    layout's heaviest rank is the even split's stage: the same step and memory."""
    even = estimate_program(_small())
    laid = estimate_program(_small("Et*3|t*3L"))
    for a, b in ((even.step.step_time_s, laid.step.step_time_s),
                 (even.step.memory.total_bytes, laid.step.memory.total_bytes),
                 (even.step.exposed_s["dp"], laid.step.exposed_s["dp"])):
        assert math.isclose(float(a), float(b), rel_tol=1e-9)


def test_short_last_stage_costed_by_its_heaviest_rank():
    """Compute is linear in the rank's layers and head passes (a layer's a, the
    head's b): ranks (4 t) and (2 t + L) give a and b, from which the layout
    (3 t | 3 t + L) costs 3a + b; each layout's step runs at its slowest rank's
    pace and holds its fullest rank's bytes."""
    scn = _small("Et*4|t*2L")
    m, p, s = scn.model, scn.plan, scn.system
    ranks, valid = stage.shapes(m, p)
    # every (pp, rank) cut of 2 stages: pp 1 (both), pp 2 rank 0, pp 2 rank 1
    assert [float(x) for x in ranks.layers_on_stage] == [6.0, 4.0, 2.0]
    assert [bool(x) for x in valid] == [False, True, True]
    first, last = stage.pick(ranks, 1), stage.pick(ranks, 2)
    assert float(last.head_passes) == 1.0 and float(first.head_passes) == 0.0
    fa = compute.timing(m, p, s, relax.EXACT, first).forward_s
    fb = compute.timing(m, p, s, relax.EXACT, last).forward_s
    a, b = fa / 4.0, fb - fa / 2.0
    est = estimate_program(scn)
    assert math.isclose(float(est.step.timing.forward_s), max(float(fa), float(fb)),
                        rel_tol=1e-12)
    mems = [float(memory.memory(m, p, s, relax.EXACT, r).total_bytes) for r in (first, last)]
    assert math.isclose(float(est.step.memory.total_bytes), max(mems), rel_tol=1e-12)
    other = _small("Et*3|t*3L")
    forward = estimate_program(other).step.timing.forward_s
    assert math.isclose(float(forward), float(3.0 * a + b), rel_tol=1e-9)


def test_deepseek_v3_mtp_on_its_short_last_stage():
    """DeepSeek-V3 with its MTP module (`model.mtp_layers` = 1, as the imported
    config.json has it) and Megatron-Bridge's pp-16 layout fits; the MTP block
    and its head ride on the last stage's single layer."""
    layout = "Et*4|(t*4|)*14tmL"
    mtp = estimate_program(scenario.load("deepseek-v3", overrides=(
        "model.mtp_layers=1", f"parallel.pipeline_layout={layout}")))
    assert float(mtp.step.memory.total_bytes) <= float(mtp.step.memory.capacity_bytes)
    builtin = estimate_program(scenario.load("deepseek-v3"))
    ratio = float(mtp.step.step_time_s) / float(builtin.step.step_time_s)
    # the built-in even split puts the output head on a 4-layer stage; the
    # layout's heaviest rank is its last (1 layer, the MTP block, two head passes)
    assert 0.85 < ratio < 1.0


@pytest.mark.parametrize("layout, says", [
    ("Etx|L", "'x' is not a layer"),
    ("Et*4|(t*4|)*14tmL", "places 1 MTP layers 'm', model.mtp_layers=0"),
    ("Et*61L", "has 1 stages, parallel.pp x parallel.interleave = 16 x 1 = 16")])
def test_cli_refuses_a_bad_layout_in_one_line(capsys, layout, says):
    from codesign.cli import main
    assert main(["estimate", "deepseek-v3", "--set", f"parallel.pipeline_layout={layout}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "parallel.pipeline_layout=" in err and says in err
