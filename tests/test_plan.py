"""The structural rules of a plan (`plan.RULES`): `validate` and the vmapped
predicates agree, and `validate` names the field and value of the first
broken rule in one line."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import scenario as sc
from codesign.model import plan

SCN = sc.load(None)


def _with(p: plan.Plan, **values) -> plan.Plan:
    for field, value in values.items():
        p = eqx.tree_at(lambda q, f=field: getattr(q, f), p, jnp.asarray(value, dtype=float))
    return p


def _all_rules(scn) -> jax.Array:
    return jnp.all(jnp.stack([jnp.asarray(r.holds(scn.model, scn.plan, scn.system))
                              for r in plan.RULES]))


def test_every_rule_holds_exactly_where_validate_accepts():
    """The rules (vmapped, the optimiser's `structurally_feasible`) hold
    exactly where `plan.validate` accepts with dp >= 1: the rows validate
    skips (an integral dp, divisors of the GPU count, whole domains of whole
    nodes) follow from its own on a loaded scenario."""
    rng = np.random.default_rng(0)
    names = ("parallel.tp", "parallel.pp", "parallel.cp", "training.micro_batch",
             "parallel.interleave", "training.global_batch")
    pts = np.stack([rng.choice([1, 2, 3, 4, 8, 16], 120), rng.choice([1, 2, 4, 8, 12, 64], 120),
                    rng.choice([1, 2, 3, 4], 120), rng.choice([1, 2, 3, 4], 120),
                    rng.choice([1, 2, 3, 13], 120), rng.choice([1536, 1024, 96], 120)],
                   axis=1).astype(float)

    def scenario(x):
        return sc.set_knobs(SCN, dict(zip(names, x, strict=True)))

    fast = np.asarray(jax.jit(jax.vmap(lambda x: _all_rules(scenario(x))))(jnp.asarray(pts)))
    for x, ok in zip(pts, fast, strict=True):
        s = scenario(x)
        try:
            plan.validate(s.plan, s.model, s.system.gpus)
            valid = float(s.plan.dp) >= 1
        except ValueError:
            valid = False
        assert ok == valid, dict(zip(names, x, strict=True))
    assert 0 < fast.sum() < len(fast)  # both outcomes occur


@pytest.mark.parametrize("overrides,gpus,message", [
    ({}, 1000.0, "system.gpus=1000 must equal dp*tp*pp*cp=16*8*8*1=1024"),
    ({"tp": 64.0}, None, "parallel.tp=64 must divide model.heads=96"),
    ({"cp": 5.0}, None, "parallel.cp=5 must divide model.seq_len=2048"),
    ({"ep": 3.0}, None, "parallel.ep=3 x parallel.etp=8 must divide tp*cp*dp=128 (the "
     "experts' mesh folds over attention's)"),
    ({"ep": 32.0, "etp": 1.0}, None, "parallel.ep=32 needs an MoE model (model.moe_layers > 0)"),
    ({"zero_shard_size": 3.0}, None, "parallel.zero_shard_size=3 must divide dp*cp=16"),
    ({"ep": 2.0}, None, "parallel.ep=2 needs an MoE model (model.moe_layers > 0)"),
    ({"micro_batch": 5.0}, None, "dp*micro_batch=80 must divide training.global_batch=1536"),
    ({"interleave": 13.0}, None, "parallel.pp=8 x parallel.interleave=13 = 104 must not "
     "exceed model.layers=96"),
])
def test_validate_names_the_first_broken_rule(overrides, gpus, message):
    p = _with(SCN.plan, **overrides)
    with pytest.raises(ValueError) as e:
        plan.validate(p, SCN.model, p.gpus if gpus is None else gpus)
    assert str(e.value) == message


def test_validate_interleave_needs_its_schedule():
    p = plan.Plan(16, 8, 8, global_batch=1536, interleave=2, schedule="1f1b")
    with pytest.raises(ValueError, match=r"^parallel.interleave=2 needs "
                       r"parallel.schedule='interleaved' \(got '1f1b'\)$"):
        plan.validate(p, SCN.model, 1024.0)

