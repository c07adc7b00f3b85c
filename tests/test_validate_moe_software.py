"""validate's rows of the software that runs MoE (issue 54 item 9): Megatron-Bridge
26.04.01-26.08 on GB200, the matched Qwen3-30B-A3B runs on 16 H100, NeMo Automodel's
DeepEP against HybridEP, and Megatron-Core's DeepSeek-V3 log on 256 GB200 as rows of
one plan whose software changes. The rows are predictions (nothing is fitted
to them but the NUMA factor, on two of the log's rows): these tests check that
they load with their sources and their releases' flags, and that the log's
table is what the rows compute, not what it should be."""

import math

import pytest

from codesign import validate

# the sets and their row counts (public-runs-4's 15 rows and the log's 12 steps
# before its last, which is the guide's row)
COUNTS = {"bridge_26041_gb200": 1, "bridge_2606_gb200": 3, "bridge_2608_gb200": 4,
          "bridge_skill_h100": 2, "automodel_h100": 4, "mcore_dsv3_gb200_guide": 1,
          "mcore_dsv3_gb200_steps": 12}
# the log's published model TFLOP/s/GPU, step by step (section 3's table)
LOG = (494.46, 529.55, 540.00, 566.07, 610.71, 663.27, 691.49, 762.12, 797.67, 829.93,
       943.56, 956.21, 970.01)


def _tables(name):
    return next(c.tables for c in validate.CHECKS if c.name == name)


def test_the_new_sets_load_each_row_with_its_source_and_a_finite_error(validate_rows):
    new = [r for name in COUNTS for r in validate.set_rows(validate_rows, name)]
    assert {n: len(validate.set_rows(validate_rows, n)) for n in COUNTS} == COUNTS
    assert len(new) == 27 and len({r["name"] for r in new}) == 27
    for r in new:
        assert " at " in r["source"] and r["note"], r["name"]  # repository at a commit
        # predictions, but for the two rows that fit the NUMA factor
        assert r["calibration"] == (r["name"] in validate.NUMA_FIT_ROWS), r["name"]
        assert not r["refused"], r["name"]
        assert math.isfinite(r["predicted"]) and math.isfinite(r["error"]), r["name"]
    assert {r["family"] for r in new} == {"GB200", "H100"}
    # the sources name their repository and commit, none the project's own folders
    for source in (validate.SETS[n] for n in COUNTS):
        assert "shared" not in source and "/work" not in source


def test_the_same_plan_runs_each_releases_flags():
    """Qwen3-30B-A3B on 8 GB200 in 25.11 (HybridEP, TE graphs over the router and
    preprocessing) and 26.08 (PR #4211: full-iteration graphs over padded experts
    at capacity 1.5, router fusion, EP overlap): one plan, two flag sets."""
    old = _tables("Megatron-Bridge 25.11 Qwen3-30B-A3B FP8 on 8 GB200 (tp 1, pp 1, ep 8, mbs 4)")
    new = _tables("Megatron-Bridge 26.08 Qwen3-30B-A3B MXFP8 on 8 GB200 (tp 1, pp 1, ep 8, "
                  "mbs 4)")
    plan = ("global_batch", "micro_batch", "dtype")
    assert {k: old["training"][k] for k in plan} == {k: new["training"][k] for k in plan}
    assert (old["parallel"]["ep"], old["system"]) == (new["parallel"]["ep"], new["system"])
    assert old["training"]["cuda_graphs"] == "partial"
    assert new["training"]["cuda_graphs"] == "full_iteration"
    assert new["training"]["moe_pad_experts"] and new["training"]["moe_capacity_factor"] == 1.5
    assert new["training"]["moe_router_fusion"] and new["parallel"]["ep_overlap"]
    assert not new["training"]["host_syncs"] and old["training"]["host_syncs"]
    assert "moe_router_fusion" not in old["training"] and "ep_overlap" not in old["parallel"]


def test_the_matched_h100_runs_keep_their_published_order(validate_rows):
    """Each matched pair on H100 differs in one flag; the model orders each pair
    as published: EP overlap on faster than off (Megatron-Bridge, 16 GPUs),
    HybridEP faster than DeepEP (NeMo Automodel, 8 and 16 GPUs)."""
    pairs = [validate.set_rows(validate_rows, "bridge_skill_h100")]
    auto = validate.set_rows(validate_rows, "automodel_h100")
    pairs += [[r for r in auto if f"on {n} H100" in r["name"]] for n in (8, 16)]
    for a, b in pairs:
        assert len({a["name"], b["name"]}) == 2
        assert (a["published"] > b["published"]) == (a["predicted"] > b["predicted"]), a["name"]


def test_the_deepseek_log_is_one_plan_and_its_table_is_computed(validate_rows):
    table = validate.software_steps(validate_rows)
    assert [t["step"] for t in table] == list(range(1, 14))
    assert [t["published"] for t in table] == pytest.approx(LOG)
    checks = [c for c in validate.CHECKS if c.source in (validate.MCORE_DSV3_STEPS_SOURCE,
                                                         validate.MCORE_DSV3_GUIDE_SOURCE)]
    # one plan: the model, the GPUs and the parallel sizes never change
    for c in checks:
        assert (c.tables["model"], c.tables["system"]) == (checks[0].tables["model"],
                                                           checks[0].tables["system"])
        assert {k: c.tables["parallel"][k] for k in ("tp", "pp", "ep", "interleave")} == {
            "tp": 1, "pp": 8, "ep": 32, "interleave": 4}
    for before, t, c, c0 in zip([None, *table], table, checks, [None, *checks], strict=False):
        assert t["error"] == pytest.approx(t["predicted"] / t["published"] - 1.0)
        if before is None:
            continue
        assert t["published_change"] > 0  # every step of the log is faster
        same = (c.tables == c0.tables)
        assert same == (t["keys"] is None), t["label"]  # a step without a key changes nothing
        if t["keys"] is None:
            assert t["predicted"] == before["predicted"] and t["sign"] == "no mechanism"
            assert t["needs"], t["label"]  # what a mechanism for it would need
        else:
            moved = t["predicted_change"]
            assert t["sign"] == ("flat" if moved == 0 else "match" if moved > 0 else "opposite")
    with pytest.raises(ValueError, match="steps of the DeepSeek-V3 log"):
        validate.software_steps(validate_rows[:10])


def test_the_numa_factor_is_fitted_on_two_named_gb200_rows(validate_rows):
    """`stacks.NUMA_UNBOUND_FACTOR`, the one constant fitted for NUMA binding,
    comes from steps 7 and 8 of the DeepSeek-V3 log (bindpcie alone): at it the
    model's ratio of the two rows is the published 762.12 / 691.49; 2 rows, at
    most a third of the GB200 family's rows (DESIGN.md's rule), marked calibration."""
    from codesign.model import stacks

    assert len(validate.NUMA_FIT_ROWS) == 2
    fit = [r for r in validate_rows if r["name"] in validate.NUMA_FIT_ROWS]
    assert [r["name"] for r in fit] == list(validate.NUMA_FIT_ROWS)
    gb200 = [r for r in validate_rows if r["family"] == "GB200"]
    assert all(r["family"] == "GB200" and r["calibration"] for r in fit)
    assert 3 * len(fit) <= len(gb200)
    unbound, bound = fit
    assert bound["published"] / unbound["published"] == pytest.approx(762.12 / 691.49)
    assert bound["predicted"] / unbound["predicted"] == pytest.approx(762.12 / 691.49, rel=1e-3)
    assert stacks.NUMA_UNBOUND_FACTOR > 1.0
    tables = [c.tables["training"] for c in validate.CHECKS if c.name in validate.NUMA_FIT_ROWS]
    assert [t["numa_binding"] for t in tables] == [False, True]  # the step's one key


def test_cross_validation_leaves_the_numa_factors_rows_without_a_value(validate_rows):
    """Only the log's set fits the NUMA factor: its rows with unbound ranks
    (steps 1-7) get no cross-validated value; the bound ones keep theirs, and the
    two fit rows set no matmul efficiency (nothing is refitted on them)."""
    checks = [c for c in validate.CHECKS if c.source == validate.MCORE_DSV3_STEPS_SOURCE]
    names = {c.name for c in checks}
    rows, notes = validate.cross_validate(checks, [r for r in validate_rows
                                                   if r["name"] in names])
    for c, r in zip(checks, rows, strict=True):
        unbound = c.tables["training"]["numa_binding"] is False
        assert math.isnan(r["cross_error"]) == (unbound or c.calibration), c.name
        if unbound:
            assert "NUMA_UNBOUND_FACTOR" in r["cross_note"]
    assert not any("matmul_efficiency" in n for n in notes)
    assert any(n.startswith("NUMA_UNBOUND_FACTOR: only") for n in notes)
