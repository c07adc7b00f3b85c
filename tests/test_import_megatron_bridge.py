"""`codesign import megatron-bridge`: Megatron-Bridge recipes restated from the source,
with YAML override files and `key=value` words applied over them in order, to
scenarios that load and estimate (tests/fixtures/import/megatron_bridge: override
files of the Megatron-Bridge repository)."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import equinox as eqx
import pytest

from codesign import importers, scenario
from codesign.cli import main
from codesign.importers._bridge_recipes import PERF
from codesign.importers.megatron import SOFTWARE_FLAGS
from codesign.importers.megatron_bridge import ALIASES, RECIPES, _pairs, megatron_bridge_words
from codesign.model import workload

FIXTURES = Path(__file__).parent / "fixtures" / "import"
BRIDGE = FIXTURES / "megatron_bridge"
ALIAS_CHAIN = [(chr(97 + i), chr(98 + i)) for i in range(19)]  # b: [*a, *a], c: [*b, *b], ...


def _scenario(imported: importers.Imported) -> scenario.Scenario:
    """What `codesign estimate` reads of the TOML the import writes."""
    return scenario.from_tables(tomllib.loads(imported.toml("test")))


def _model_differences(a: scenario.Scenario, b: scenario.Scenario) -> set:
    """The model fields two scenarios differ in."""
    return {f.name for f in dataclasses.fields(a.model)
            if not bool(eqx.tree_equal(getattr(a.model, f.name), getattr(b.model, f.name)))}


def _yaml(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------ the recipes
@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_imports_to_a_scenario_that_loads(name):
    imported = megatron_bridge_words([name])
    text = imported.toml("test")
    assert tomllib.loads(text) == imported.tables  # what is written is what was read
    scn = _scenario(imported)
    gpus = int(name.split("gpu_")[0].rsplit("_", 1)[1])
    assert float(scn.system.gpus) == gpus  # the recipe's, said
    assert imported.assumed["system.gpus"].startswith(f"system.gpus = {gpus}: the recipe's")
    assert imported.tables["training"]["stack"] == "megatron"
    if not name.startswith(PERF):
        assert imported.ignored == ()  # the recipe's every key is read
    else:  # a perf recipe's software settings the model has no key for are named, with why
        given = {k for k, _ in _pairs(RECIPES[name], "")}
        unkeyed = {sw.key for sw in SOFTWARE_FLAGS.values() if sw.scenario is None}
        named = {i.split("=")[0] for i in imported.ignored if " (" in i}
        assert given & unkeyed <= named


def test_legacy_names_are_their_recipes():
    for alias, name in ALIASES.items():
        assert megatron_bridge_words([alias]).tables == megatron_bridge_words([name]).tables


def test_recipe_values_are_the_sources():
    """Spot checks against the recipe functions (llama3.py, qwen3_moe.py,
    deepseek_v3.py, gpt_oss.py at the importer's commit)."""
    imp = megatron_bridge_words(["llama3_70b_pretrain_config"])
    p, t = imp.tables["parallel"], imp.tables["training"]
    assert (p["tp"], p["pp"], p["cp"], p["interleave"], p["schedule"]) == \
        (4, 4, 2, 5, "interleaved")
    assert (p["sequence_parallel"], p["tp_overlap"], p["zero"]) == (True, 1.0, 1)
    assert (t["global_batch"], t["micro_batch"], t["dtype"]) == (512, 1, "bf16")
    # the mock-data NullTokenizer: 32,000 + its end-of-document token, padded to 128 x tp 4
    assert imp.tables["model"]["vocab"] == 32256 and "NullTokenizer" in imp.assumed["model.vocab"]
    fp8 = megatron_bridge_words(["llama3_8b_low_precision_pretrain_config"]).tables["training"]
    assert (fp8["dtype"], fp8["global_batch"]) == ("fp8", 768)
    moe = megatron_bridge_words(["qwen3_30b_a3b_pretrain_config"]).tables
    assert (moe["parallel"]["ep"], moe["parallel"]["tp"], moe["training"]["grad_reduce_dtype"]) \
        == (16, 1, "bf16")
    big = megatron_bridge_words(["qwen3_235b_a22b_pretrain_config"]).tables["parallel"]
    assert (big["tp"], big["pp"], big["cp"], big["ep"]) == (4, 16, 2, 8)
    ds = megatron_bridge_words(["deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config"]).tables
    assert (ds["parallel"]["pp"], ds["parallel"]["ep"], ds["training"]["recompute"]) == \
        (8, 32, "full")
    assert ds["model"]["vocab"] == 33280  # 32,001 up to 1280 x tp 2 (the bridge's padding)
    oss = megatron_bridge_words(["gpt_oss_20b_pretrain_config"]).tables["model"]
    assert (oss["window_layers"], oss["window"], oss["attention_sinks"]) == (12, 127, True)


@pytest.mark.parametrize("recipe, other", [
    ("llama3_8b_pretrain_config", ("preset", "llama3-8b")),
    ("llama3_70b_pretrain_config", ("preset", "llama3-70b")),
    ("llama31_405b_pretrain_config", ("preset", "llama3-405b")),
    ("deepseek_v3_pretrain_config", ("preset", "deepseek-v3")),
    ("qwen3_32b_pretrain_config", ("hf", "qwen3-32b.json")),
    ("qwen3_30b_a3b_pretrain_config", ("hf", "qwen3-30b-a3b.json")),
    ("gpt_oss_120b_pretrain_config", ("hf", "gpt-oss-120b.json")),
])
def test_restated_shapes_are_the_checkpoints(recipe, other):
    """The shapes restated from the checkpoints' config.json are codesign's
    presets and the hf importer's models of the same configs, but the vocabulary
    (the recipe's tokenizer, padded), the sequence, DeepSeek-V3's MTP layer (the
    recipe's) and GPT-OSS's window (the bridge's sliding_window - 1)."""
    scn = _scenario(megatron_bridge_words([recipe]))
    kind, name = other
    if kind == "preset":
        tables = {"model": {"preset": name}, "system": {"gpus": float(scn.system.gpus)},
                  "parallel": {"tp": float(scn.plan.tp), "pp": float(scn.plan.pp),
                               "cp": float(scn.plan.cp), "ep": float(scn.plan.ep),
                               "etp": float(scn.plan.etp)}}
        ref = scenario.from_tables(tables)
        assert workload.model(name).layers == ref.model.layers
    else:
        ref = _scenario(importers.from_file("hf", FIXTURES / "hf" / name))
    assert _model_differences(scn, ref) <= {"vocab", "seq_len", "mtp_layers", "window"}


# ------------------------------------------------------------------ overrides
def test_yaml_and_words_apply_in_order_later_winning(tmp_path):
    four = _yaml(tmp_path, "four.yaml", "model:\n  tensor_model_parallel_size: 4\n"
                 "train:\n  global_batch_size: 64\n")
    words = ["llama3_8b_pretrain_config", four, "model.tensor_model_parallel_size=2"]
    imp = megatron_bridge_words(words)
    assert imp.tables["parallel"]["tp"] == 2 and imp.tables["training"]["global_batch"] == 64
    assert imp.where == f"llama3_8b_pretrain_config + {four} + the command line"
    imp = megatron_bridge_words([words[0], words[2], words[1]])
    assert imp.tables["parallel"]["tp"] == 4
    # run_recipe.py's flags and --config-file / --recipe, in the same order
    imp = megatron_bridge_words(["--recipe", "llama3_8b_pretrain_config", "-tp", "8",
                                 "--config-file", four, "--mode", "pretrain", "-gb", "128",
                                 "--dataset", "mock"])
    assert (imp.tables["parallel"]["tp"], imp.tables["training"]["global_batch"]) == (4, 128)
    assert imp.ignored == ("--dataset",)
    assert _scenario(imp).plan.tp == 4.0
    # the recipe's 2 GPUs do not hold tp 4 x cp 2: the fewest that do, said
    assert imp.tables["system"]["gpus"] == 8 and "do not hold" in imp.assumed["system.gpus"]


def test_precision_and_sharding_overrides():
    base = "llama3_8b_pretrain_config"
    imp = megatron_bridge_words([base, "mixed_precision=bf16_with_mxfp8_mixed"])
    assert imp.tables["training"]["dtype"] == "fp8" and "MXFP8" in imp.assumed["training.dtype"]
    imp = megatron_bridge_words([base, "mixed_precision.fp8=hybrid"])
    assert imp.tables["training"]["dtype"] == "fp8" and "training.dtype" not in imp.assumed
    # a field of the recipe named: its fields, that one replaced (bf16 reduced in bf16)
    t = megatron_bridge_words([base, "mixed_precision.grad_reduce_in_fp32=false"]).tables
    assert (t["training"]["dtype"], t["training"]["grad_reduce_dtype"]) == ("bf16", "bf16")
    # the mixed-precision config's reduction overwrites the DDP config's (its setup)
    t = megatron_bridge_words([base, "ddp.grad_reduce_in_fp32=false"]).tables
    assert t["training"]["grad_reduce_dtype"] == "fp32"
    t = megatron_bridge_words([base, "ddp.use_megatron_fsdp=true"]).tables
    assert t["parallel"]["zero"] == 0  # the Llama recipes' strategy: no_shard
    t = megatron_bridge_words(["qwen3_8b_pretrain_config", "dist.use_megatron_fsdp=true"]).tables
    assert t["parallel"]["zero"] == 3  # _pretrain_common's optim_grads_params
    t = megatron_bridge_words([base, "model.recompute_granularity=selective",
                               "+model.cpu_offloading=true",
                               "model.cpu_offloading_num_layers=2"]).tables
    assert (t["training"]["recompute"], t["training"]["offload_layers"]) == ("selective", 2)
    imp = megatron_bridge_words([base, "tokenizer.tokenizer_type=HuggingFaceTokenizer",
                                 "tokenizer.tokenizer_model=meta-llama/Meta-Llama-3-8B"])
    assert imp.tables["model"]["vocab"] == 128256 and "128256" in imp.assumed["model.vocab"]


def test_gpus_and_system_are_the_commands():
    imp = megatron_bridge_words(["llama3_70b_pretrain_config"], gpus=64,
                                system={"preset": "dgx-a100"})
    assert imp.tables["system"] == {"preset": "dgx-a100", "gpus": 64}
    assert "system.gpus" not in imp.assumed and "system.preset" not in imp.assumed
    assert float(_scenario(imp).plan.dp) == 2.0


def test_unread_keys_are_listed_as_ignored():
    imp = megatron_bridge_words(["qwen3_8b_pretrain_config", "optimizer.lr=1e-4",
                                 "model.gradient_accumulation_fusion=false",
                                 "mixed_precision.fp8_margin=0"])
    assert imp.ignored == ("mixed_precision.fp8_margin", "model.gradient_accumulation_fusion",
                           "optimizer.lr")
    assert "# ignored (not read by codesign): " in imp.toml("test")


# ------------------------------------------------------------------ real override files
@pytest.mark.parametrize("recipe, name, expected, ignored", [
    ("llama3_8b_pretrain_config", "quantized_llama3_8b_pretrain_override_example.yaml",
     {"tp": 1, "cp": 1, "global_batch": 8, "tokens": 20 * 8 * 8192},
     {"model.gradient_accumulation_fusion", "checkpoint.pretrained_checkpoint"}),
    ("llama3_8b_pretrain_config", "llama3_8b_pretrain_override_example.yaml",
     {"seq_len": 4096, "global_batch": 8, "micro_batch": 1, "cp": 2},
     {"optimizer.lr", "profiling._target_", "rng.seed"}),
    ("qwen3_30b_a3b_pretrain_config", "qwen3_moe_30b_a3b_pretrain_override_example.yaml",
     {"tp": 4, "pp": 2, "ep": 4, "etp": 1, "sequence_parallel": True, "global_batch": 256,
      "micro_batch": 2},
     {"mixed_precision.dtype", "optimizer.lr", "train.eval_interval"}),
])
def test_real_bridge_override_files_import_with_a_recipe(recipe, name, expected, ignored):
    """Override files from the Megatron-Bridge repository hold no model shape:
    with a recipe they import, and load."""
    imp = megatron_bridge_words([recipe, str(BRIDGE / name)])
    values = {k: v for body in imp.tables.values() for k, v in body.items()}
    assert {k: values[k] for k in expected} == expected
    assert ignored <= set(imp.ignored)
    assert float(_scenario(imp).system.gpus) >= 1


def test_an_imported_recipe_round_trips_to_an_estimate(capsys, tmp_path):
    imp = megatron_bridge_words(["qwen3_30b_a3b_pretrain_config",
                                 str(BRIDGE / "qwen3_moe_30b_a3b_pretrain_override_example.yaml"),
                                 "model.tensor_model_parallel_size=2"])
    out = tmp_path / "bridge.toml"
    out.write_text(imp.toml("codesign import megatron-bridge: test"))
    capsys.readouterr()
    rc = main(["estimate", str(out)])
    printed, err = capsys.readouterr()
    assert rc == 0 and "step time" in printed, err


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("words, message", [
    (["llama4_8b_pretrain_config"],
     "recipe 'llama4_8b_pretrain_config' is not one codesign restates (known: "
     "llama3_8b_pretrain_2gpu_h100_bf16_config"),
    (["llama3_8b_pretrain_config", "model.tensor_model_parallel_size=four"],
     "llama3_8b_pretrain_config + the command line: model.tensor_model_parallel_size='four' "
     "must be a whole number >= 1"),
    (["llama3_8b_pretrain_config", "train.global_batch_size=[1, 2]"],
     "train.global_batch_size='[1, 2]' must be a whole number"),
    (["llama3_8b_pretrain_config", "modle.tensor_model_parallel_size=2"],
     "the command line: modle.tensor_model_parallel_size=2: 'modle' is not a ConfigContainer "
     "field"),
    (["llama3_8b_pretrain_config", "~model.seq_length"], "deletes a key"),
    (["llama3_8b_pretrain_config", "mixed_precision=bf16_with_nvfp4_mixed"],
     "trains in NVFP4, which codesign does not model"),
    (["llama3_8b_pretrain_config", "mixed_precision=bf32_mixed"],
     "mixed_precision='bf32_mixed' is not a mixed-precision recipe Megatron-Bridge defines"),
    (["llama3_8b_pretrain_config", "mixed_precision.bf16=maybe"],
     "mixed_precision.bf16='maybe' must be true or false"),
    (["llama3_8b_pretrain_config", "model=4"], "model=4 must be a mapping of its keys"),
    (["llama3_8b_pretrain_config", "--nproc-per-node", "8"],
     "'--nproc-per-node' is not a flag codesign reads"),
    (["llama3_8b_pretrain_config", "-tp"], "-tp needs a value"),
    (["llama3_8b_pretrain_config", "missing.yaml"], "'missing.yaml' does not exist"),
    (["model.tensor_model_parallel_size=2"], "no recipe named"),
    (["llama3_8b_pretrain_config", "--mode", "sft"], "restates pretrain recipes only"),
])
def test_bad_input_is_one_line(words, message):
    with pytest.raises(ValueError) as e:
        megatron_bridge_words(words)
    assert len(str(e.value).splitlines()) == 1
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("text, message", [
    ("", "is empty: a Megatron-Bridge override file holds ConfigContainer keys"),
    ("# only a comment\n", "is empty"),
    ("- model\n", "must hold a YAML mapping of ConfigContainer keys, not list"),
    ("model: [\n", "is not valid YAML"),
    ("model:\n  pipeline_model_parallel_size: two\n",
     "model.pipeline_model_parallel_size='two' must be a whole number"),
    ("model:\n  num_layers: " + "9" * 2000 + "\n", "overrides.yaml"),  # past 1,000 digits
    ("a: &a [1, 1]\n" + "".join(f"{c}: &{c} [*{p}, *{p}]\n" for p, c in ALIAS_CHAIN),
     "overrides.yaml"),  # an alias bomb: 2^20 values
])
def test_bad_override_files_are_one_line_naming_the_file(tmp_path, text, message):
    path = _yaml(tmp_path, "overrides.yaml", text)
    with pytest.raises(ValueError) as e:
        megatron_bridge_words(["llama3_8b_pretrain_config", path])
    assert len(str(e.value).splitlines()) == 1
    assert message in str(e.value) and "overrides.yaml" in str(e.value), str(e.value)
