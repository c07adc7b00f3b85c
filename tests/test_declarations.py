"""Each scenario key is declared once, on its pytree field, and everything else
(schema, knobs, domains, integer knobs, loader defaults, checks) derives from
the declarations; labels live outside the pytrees, so a rename compiles nothing."""

import dataclasses

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from codesign import checks, domains, optimize
from codesign import scenario as sc
from codesign.model import attention, step, strategies, workload
from codesign.model.hardware import System, Tier
from codesign.model.plan import Plan, Precision
from codesign.model.reliability import Reliability


def _declared_fields(cls):
    """Every declared field of `cls` and the Modules it holds, as (path, Declaration)."""
    return list(sc.declarations(cls))


def test_every_key_has_exactly_one_declaration():
    found = [key for key, _ in sc.declarations(sc.Scenario)]
    assert len(found) == len(set(found)) == len(sc.KEYS)
    # the tiers are declared once and appear under both prefixes
    tier_keys = {checks.declaration(f).key for f in dataclasses.fields(Tier)
                 if checks.declaration(f).scenario}
    for prefix in ("system.scale_up_", "system.scale_out_"):
        assert {prefix + k for k in tier_keys} <= set(sc.KEYS)


def test_schema_knobs_domains_and_integer_knobs_are_derived():
    loader_only = {f"{s}.{k}" for s, keys in sc.SCHEMA.items() for k in keys} - set(sc.KEYS)
    assert loader_only == {"model.preset", "system.preset", "system.measured_on"}
    for key, where in sc.KEYS.items():
        section, name = key.split(".", 1)
        decl = where.declaration
        assert sc.SCHEMA[section][name] is decl.kind, key
        if decl.kind is float:
            assert key in sc.KNOBS and sc.DOMAINS[key] is decl.domain, key
            assert (key in optimize.INTEGER_KNOBS) == decl.domain.integer, key
        else:
            assert key not in sc.DOMAINS, key
    assert set(sc.DOMAINS) == set(sc.KNOBS)
    # the resolved disagreements: one answer each
    assert {"parallel.zero_shard_size", "parallel.fsdp_prefetch_layers",
            "model.q_lora_rank", "model.v_head_dim"} <= optimize.INTEGER_KNOBS
    assert "system.pod_size" not in optimize.INTEGER_KNOBS
    assert sc.DOMAINS["parallel.comm_sm_fraction"].hi == 0.99


def test_strategies_are_declared_once_with_their_own_keys():
    """The strategy keys are names in a table (choices: the classes' names);
    a Clos's pods are declared once, on Clos, reachable via system.topology, and
    knobs only of the scenarios whose topology is a Clos."""
    for key, classes in (("system.topology", strategies.TOPOLOGY_CLASSES),
                         ("system.routing", strategies.ROUTING_CLASSES),
                         ("parallel.schedule", strategies.SCHEDULE_CLASSES),
                         ("training.recompute", strategies.RECOMPUTE_CLASSES),
                         ("model.attention_kernel", attention.ATTENTION_KERNEL_CLASSES),
                         ("model.attention", attention.ATTENTION_CLASSES)):
        decl = sc.KEYS[key].declaration
        assert decl.kind is str and decl.choices == tuple(c.name for c in classes), key
    for key in ("system.pod_size", "system.oversubscription"):
        where = sc.KEYS[key]
        assert where.path == ("system", "topology", key.split(".")[1])
        assert where.owner is strategies.Clos and key in sc.KNOBS
        assert key not in sc.knobs(sc.load(None))  # a two-tier fabric has no pods
        assert key in sc.knobs(sc.load("llama3-405b"))  # its Clos has
    assert {f.name for f in dataclasses.fields(System)}.isdisjoint(
        {"pod_size", "oversubscription", "torus_shape"})  # the topology carries them


def test_a_new_declared_field_appears_in_the_derived_tables():
    class Extra(eqx.Module):
        knob_s: jax.Array = checks.float_field("training.extra_knob_s", domains.UNIT,
                                                default=0.5)
        mode: str = checks.static_field("training.extra_mode", str, choices=("a", "b"),
                                         default="a")
        plain: jax.Array = checks.float_field(default=1.0)  # declares nothing

    class Holder(eqx.Module):
        extra: Extra
        tier: Tier = eqx.field(metadata={"prefix": "system.side_"})

    keys = sc.declared_keys(Holder)
    assert keys["training.extra_knob_s"].path == ("extra", "knob_s")
    assert keys["training.extra_knob_s"].declaration.unit == "s"  # from the key's name
    assert keys["training.extra_mode"].declaration.choices == ("a", "b")
    assert keys["system.side_bandwidth_Bps"].path == ("tier", "bandwidth_Bps")
    assert "plain" not in {w.path[-1] for w in keys.values()}
    with pytest.raises(ValueError, match=r"training.extra_knob_s=2 must be a number in \[0, 1\]"):
        Extra(knob_s=2.0)
    with pytest.raises(ValueError, match="training.extra_mode='c' is not one of a, b"):
        Extra(mode="c")

    class Twice(eqx.Module):
        a: Extra
        b: Extra

    with pytest.raises(TypeError, match="training.extra_knob_s is declared twice"):
        sc.declared_keys(Twice)


def test_the_loader_takes_each_default_from_its_declaration():
    scn = sc.from_tables({"model": {"preset": "llama3-8b"}, "system": {"gpus": 1}})
    checked = 0
    for cls, module in ((Plan, scn.plan), (Reliability, scn.reliability), (sc.Scenario, scn)):
        for f in dataclasses.fields(cls):
            decl = checks.declaration(f)
            if decl is None or f.default is None or f.default is dataclasses.MISSING:
                continue
            if f.name == "schedule":  # the loader's rule: interleaved when interleave > 1
                continue
            value = getattr(module, f.name)
            assert (float(value) if decl.kind is float else value) == f.default, f.name
            checked += 1
    assert checked > 30
    assert scn.plan.precision == Precision(**{f.name: getattr(scn.plan.precision, f.name)
                                              for f in dataclasses.fields(Precision)})


def test_module_checks_read_the_declared_domains():
    with pytest.raises(ValueError, match=r"^parallel.tp=0 must be an integer in \[1, 1e7\]$"):
        Plan(tp=0.0)
    with pytest.raises(ValueError, match=r"^parallel.comm_sm_fraction=0.995 must be a number in "
                                         r"\[0, 0.99\]$"):
        Plan(comm_sm_fraction=0.995)
    with pytest.raises(ValueError, match=r"^parallel.schedule='pipedream' is not one of"):
        Plan(schedule="pipedream")
    with pytest.raises(ValueError, match=r"^system.pod_size=0.5 must be a number in \[1, 1e9\]$"):
        strategies.Clos(pod_size=0.5)


def test_the_traced_check_is_one_vectorised_comparison():
    base = sc.load(None)
    eqns = jax.make_jaxpr(lambda s: s.checked())(base).jaxpr.eqns
    assert len(eqns) < 40, len(eqns)  # 497 with one comparison chain per key
    bad = sc.set_knobs(base, {"system.scale_out_latency_s": 2.0, "reliability.straggler_q": 3.0})
    with pytest.raises(Exception, match="system.scale_out_latency_s must be a number in "
                                        r"\[0, 1\] \(a traced value is outside\)"):
        jax.block_until_ready(jax.jit(lambda s: s.checked())(bad))
    moe = sc.set_knobs(sc.load("deepseek-v3"), {"model.top_k": 300.0})
    with pytest.raises(Exception, match="model.top_k must not exceed model.experts"):
        jax.block_until_ready(jax.jit(lambda s: s.checked())(moe))


def test_a_transformer_builds_under_jit_with_traced_counts():
    def params(layers, heads):
        return workload.Transformer(layers, 4096.0, heads, 8192.0, 128256.0,
                                    kv_heads=8.0).params()

    eager = float(params(32.0, 32.0))
    assert float(jax.jit(params)(32.0, 32.0)) == pytest.approx(eager)


LLAMA = ('[model]\npreset = "llama3-8b"\n')
LLAMA_SPELLED_OUT = ('[model]\nlayers = 32\nhidden = 4096\nheads = 32\nkv_heads = 8\n'
                     'ffn_hidden = 14336\nseq_len = 8192\nvocab = 128256\ngated = true\n'
                     'tied_embeddings = false\n')
COMMON = ('[parallel]\ntp = 8\n[training]\nglobal_batch = 16\n'
          '[system]\npreset = "dgx-h100"\ngpus = 16\n')


def test_scenarios_that_differ_only_in_labels_compile_once(tmp_path):
    a, b = tmp_path / "first.toml", tmp_path / "second.toml"
    a.write_text(LLAMA + COMMON)
    b.write_text(LLAMA_SPELLED_OUT + COMMON)
    la, lb = sc.labels(str(a)), sc.labels(str(b))
    assert (la.scenario, la.model) == ("first", "llama3-8b")
    assert (lb.scenario, lb.model) == ("second", "custom")
    assert la.system == lb.system == sc.SystemLabels("dgx-h100", "H100-SXM5-80GB")
    once = jax.jit(chex.assert_max_traces(lambda s: step.outputs(step.estimate(s)), n=1))
    out_a = once(sc.load(str(a)))
    out_b = once(sc.load(str(b)))  # a second trace would raise
    assert float(out_a["step_time_s"]) == float(out_b["step_time_s"])
    assert jnp.isfinite(out_a["mfu"])
