"""`codesign import maxtext`: MaxText's base.yml (tests/fixtures/import/maxtext,
abridged from the real file) merged with a real model file and key=value
overrides, read as a scenario that loads and estimates; the mesh's -1 rule, the
DCN axes across slices, the refusals, the ignored keys and validate's MaxText
row re-created from the script that ran it."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import equinox as eqx
import pytest

from codesign import files, scenario, validate
from codesign.cli import main
from codesign.importers.maxtext import maxtext_words
from codesign.model import workload

FIXTURES = Path(__file__).parent / "fixtures" / "import" / "maxtext"
BASE = str(FIXTURES / "base.yml")


def _import(*words: str, **options):
    return maxtext_words([BASE, *words], **options)


def _scenario(imported) -> scenario.Scenario:
    """What `codesign estimate` reads of the TOML the import writes."""
    return scenario.from_tables(tomllib.loads(imported.toml("test")))


def _differences(a: eqx.Module, b: eqx.Module) -> dict:
    return {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
            if not bool(eqx.tree_equal(getattr(a, f.name), getattr(b, f.name)))}


def _refused(*words: str, **options) -> str:
    with pytest.raises((ValueError, FileNotFoundError)) as e:
        maxtext_words(list(words), **options)
    message = str(e.value)
    assert "\n" not in message, message
    return message


def test_base_model_and_overrides_import_load_and_estimate(capsys, tmp_path):
    """base.yml + model_name=llama3-8b + a v5p run's overrides: the TPU preset the
    compile topology names, its slice as the torus, the plan MaxText's mesh makes."""
    imp = _import("model_name=llama3-8b", "compile_topology=v5p-128", "ici_tensor_parallelism=4",
                  "per_device_batch_size=2", "max_target_length=8192", "remat_policy=full",
                  "steps=100", "gradient_accumulation_steps=2")
    text = imp.toml("codesign import maxtext: test")
    assert tomllib.loads(text) == imp.tables
    m, t, p, s = (imp.tables[k] for k in ("model", "training", "parallel", "system"))
    assert (s["preset"], s["gpus"], s["scale_up_domain"]) == ("tpu-v5p", 64, 64)
    assert (p["tp"], p["dp"], p["pp"], p["cp"], p["zero"]) == (4, 16, 1, 1, 3)
    assert "zero_shard_size" not in p and "placement" not in s  # one slice, FSDP over all
    # 2 sequences a chip x 64 chips a pass over dp 16; two passes a step
    assert (t["micro_batch"], t["global_batch"], t["recompute"], t["stack"]) == \
        (8, 256, "full", "xla")
    assert t["tokens"] == 100 * 256 * 8192
    assert m["seq_len"] == 8192 and "tp_overlap" in imp.assumed["parallel.tp_overlap"]
    out = tmp_path / "maxtext.toml"
    out.write_text(text)
    assert float(scenario.load(out).system.gpus) == 64
    capsys.readouterr()
    rc = main(["estimate", str(out)])
    printed, err = capsys.readouterr()
    assert rc == 0 and "step time" in printed, err
    step = float(printed.split("step time", 1)[1].split()[0])
    assert math.isfinite(step) and step > 0


@pytest.mark.parametrize("model, preset", [("llama3-8b", "llama3-8b"),
                                           ("mixtral-8x7b", "mixtral-8x7b"),
                                           ("deepseek3-671b", "deepseek-v3")])
def test_the_parsed_shape_is_the_model_files(model, preset):
    """The model file's numbers (read here from the file itself) are the
    scenario's shape, and that shape is codesign's preset of the model."""
    path = FIXTURES / "models" / f"{model}.yml"
    given = files.parse_yaml(path.read_text(), str(path))
    for words in ([f"model_name={model}"], [str(path)]):
        imp = _import(*words, "ici_expert_parallelism=8" if "num_experts" in given else "steps=1",
                      gpus=8)
        m = imp.tables["model"]
        assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn_hidden"],
                m["vocab"]) == tuple(given[k] for k in (
                    "base_num_decoder_layers", "base_emb_dim", "base_num_query_heads",
                    "base_num_kv_heads", "base_mlp_dim", "vocab_size"))
        assert m["gated"] is (len(given["mlp_activations"]) == 2)
        assert m["tied_embeddings"] is given["logits_via_embedding"]
        if "num_experts" in given:
            assert (m["experts"], m["top_k"], m["expert_ffn_hidden"]) == (
                given["num_experts"], given["num_experts_per_tok"], given["base_moe_mlp_dim"])
            assert m["moe_layers"] == m["layers"] - given.get("first_num_dense_layers", 0)
            assert m.get("shared_experts", 0) == given.get("shared_experts", 0)
            assert imp.tables["parallel"]["ep"] == 8
        scn = _scenario(imp)
        expected = dataclasses.replace(workload.model(preset), seq_len=scn.model.seq_len)
        assert _differences(scn.model, expected) == {}


def test_recreates_validates_maxtext_16b_v5e_row():
    """validate's `MaxText 16B on 256 TPU v5e` row, from the overrides of
    configs/v5e/16b.sh (AI-Hypercomputer/maxtext at 76bd53b0, the row's commit) over
    base.yml, with that commit's base.yml shape restated (emb 2560, 8 heads of 256,
    MLP 8192 relu, 16 layers, vocabulary 32,768, logits via the embedding)."""
    shape = ("base_emb_dim=2560 base_num_query_heads=8 base_num_kv_heads=8 base_mlp_dim=8192 "
             "base_num_decoder_layers=16 head_dim=256 mlp_activations=[relu] vocab_size=32768 "
             "logits_via_embedding=true")
    script = ("steps=30 per_device_batch_size=6 enable_checkpointing=false remat_policy=full "
              "global_parameter_scale=16 max_target_length=2048 use_iota_embed=true "
              "reuse_example_batch=1 dataset_type=synthetic attention=flash gcs_metrics=true")
    imp = _import(*shape.split(), *script.split(), gpus=256, system={"preset": "tpu-v5e"})
    name = "MaxText 16B on 256 TPU v5e (FSDP 256, TP 1)"
    row = next(c for c in validate.CHECKS if c.name == name)
    mine, theirs = _scenario(imp), scenario.from_tables(row.tables)
    assert _differences(mine.model, theirs.model) == {}
    assert _differences(mine.plan, theirs.plan) == {}
    assert _differences(mine.system, theirs.system) == {}
    assert {"enable_checkpointing", "use_iota_embed", "dataset_type"} <= set(imp.ignored)


def test_minus_one_takes_the_rest_of_the_devices_and_the_slices():
    imp = _import("ici_tensor_parallelism=4", "ici_fsdp_parallelism=-1", gpus=64,
                  system={"preset": "tpu-v5p"})
    p = imp.tables["parallel"]
    assert (p["tp"], p["dp"], p["zero"]) == (4, 16, 3)  # fsdp: 64 / 4
    # two slices: dcn_data_parallelism -1 takes them, FSDP within a slice (HSDP)
    imp = _import("num_slices=2", "ici_tensor_parallelism=4", gpus=64,
                  system={"preset": "tpu-v5p"})
    p, s = imp.tables["parallel"], imp.tables["system"]
    assert (p["tp"], p["dp"], p["zero_shard_size"]) == (4, 16, 8)
    assert (s["scale_up_domain"], s["placement"]) == (32, "tp,cp,ep,pp,dp")
    assert _scenario(imp).plan.placement == ("tp", "cp", "ep", "pp", "dp")
    # a pipeline across the slices: pp is outermost already
    imp = _import("num_slices=2", "dcn_data_parallelism=1", "dcn_pipeline_parallelism=2",
                  gpus=64, system={"preset": "tpu-v5p"})
    assert imp.tables["parallel"]["pp"] == 2 and "placement" not in imp.tables["system"]
    # without --gpus: the compile topology's slices
    imp = _import("compile_topology=v5e-256", "compile_topology_num_slices=4")
    assert (imp.tables["system"]["gpus"], imp.tables["parallel"]["dp"]) == (1024, 1024)
    assert imp.tables["system"]["preset"] == "tpu-v5e"
    # on a GPU system a slice is one host (MaxText's A3): the data axis spans the nodes
    imp = _import("ici_fsdp_parallelism=8", gpus=32)
    p = imp.tables["parallel"]
    assert (p["dp"], p["zero_shard_size"]) == (32, 8)
    assert _import(gpus=4).tables["parallel"]["dp"] == 4  # part of a host: one slice


@pytest.mark.parametrize("words, options, message", [
    (("ici_fsdp_parallelism=-1", "ici_tensor_parallelism=-1"), {},
     "ici_fsdp_parallelism and ici_tensor_parallelism are both -1"),
    (("ici_tensor_parallelism=3",), {"gpus": 64, "system": {"preset": "tpu-v5p"}},
     "the ICI axes' degrees (ici_fsdp_parallelism -1, ici_tensor_parallelism 3) must multiply "
     "to the 64 devices a slice"),
    (("ici_fsdp_parallelism=4",), {"gpus": 64, "system": {"preset": "tpu-v5p"}},
     "must multiply to the 64 devices a slice"),
    (("ici_tensor_parallelism=0",), {}, "ici_tensor_parallelism=0 must be -1 (the rest)"),
    (("num_slices=3",), {"gpus": 64}, "--gpus=64 is not a multiple of the 3 slices"),
    (("per_device_batch_size=0.1",), {"gpus": 8},
     "per_device_batch_size=0.1 x 8 devices = 0 sequences a pass must split over dp 8"),
    (("per_device_batch_size=abc",), {}, "per_device_batch_size='abc' must be a number"),
    (("compile_topology=tpu7x-64",), {}, "compile_topology='tpu7x-64' is not a TPU slice"),
    (("global_parameter_scale=3",), {}, "global_parameter_scale=3 must be a power of two"),
    (("remat_policy=most",), {}, "remat_policy='most' is not one of full, none"),
    (("quantization=int3",), {}, "quantization='int3' is not a quantization MaxText names"),
    (("ici_pipeline_parallelism=3",), {"gpus": 6, "system": {"preset": "tpu-v5p"}},
     "the 16 decoder layers must be ici/dcn_pipeline_parallelism 3"),
])
def test_bad_input_is_one_line_naming_the_key(words, options, message):
    assert message in _refused(BASE, *words, **options)


def test_an_override_key_not_in_base_yml_is_refused_naming_it():
    line = _refused(BASE, "model_name=llama3-8b", "ici_tensr_parallelism=4")
    assert line.startswith("the key=value overrides: ici_tensr_parallelism=4 is not a key of ")
    assert BASE in line


def test_an_unknown_model_name_is_refused_naming_the_folder():
    line = _refused(BASE, "model_name=llama9-1t")
    assert line == (f"model_name='llama9-1t': no llama9-1t.yml in {FIXTURES / 'models'} or "
                    f"{FIXTURES.parent / 'models'}")


def test_model_file_and_override_conflict_as_maxtext_refuses_it():
    line = _refused(BASE, "model_name=llama3-8b", "base_num_decoder_layers=4")
    assert "base_num_decoder_layers=4 is also set by" in line and "llama3-8b.yml (32)" in line
    imp = _import("model_name=llama3-8b", "base_num_decoder_layers=4",
                  "override_model_config=true")
    assert imp.tables["model"]["layers"] == 4
    imp = _import("model_name=llama3-8b-Instruct", "base_num_decoder_layers=32")  # the same value
    assert imp.tables["model"]["layers"] == 32


def test_ignored_keys_are_listed():
    imp = _import("model_name=mixtral-8x7b", "enable_checkpointing=false", "learning_rate=1e-4",
                  "ici_expert_parallelism=8", gpus=8)
    text = imp.toml("test")
    ignored = " ".join(line for line in text.splitlines() if line.startswith("#   ")
                       or line.startswith("# ignored"))
    for key in ("enable_checkpointing", "learning_rate", "rope_max_timescale",
                "normalization_layer_epsilon", "other keys of base.yml"):
        assert key in ignored, key
    for key in ("num_experts", "base_emb_dim", "decoder_block", "ici_expert_parallelism"):
        assert key not in imp.ignored, key


def test_windows_layer_pairs_and_base_config(tmp_path):
    """Gemma 2's decoder layer is a local and a global layer (models/gemma2.py), its
    window sliding_window_size; a config naming base_config builds on base.yml."""
    (tmp_path / "models").mkdir()
    (tmp_path / "base.yml").write_text(Path(BASE).read_text())
    # AI-Hypercomputer/maxtext src/maxtext/configs/models/gemma2-9b.yml at e591f30c
    (tmp_path / "models" / "gemma2-9b.yml").write_text(
        "base_emb_dim: 3584\nbase_num_query_heads: 16\nbase_num_kv_heads: 8\n"
        "base_mlp_dim: 14336\nbase_num_decoder_layers: 21\nhead_dim: 256\n"
        'mlp_activations: ["gelu","linear"]\nvocab_size: 256128\ndecoder_block: "gemma2"\n'
        "logits_via_embedding: true\nsliding_window_size: 4096\n")
    (tmp_path / "run.yml").write_text('base_config: "base.yml"\nmodel_name: "gemma2-9b"\n'
                                      "hardware: 'gpu'\nmax_target_length: 8192\n")
    imp = maxtext_words([str(tmp_path / "run.yml")], gpus=8)
    m = imp.tables["model"]
    assert (m["layers"], m["window_layers"], m["window"], m["head_dim"]) == (42, 21, 4096, 256)
    assert (m["tied_embeddings"], m["seq_len"], imp.tables["system"]["preset"]) == \
        (True, 8192, "dgx-h100")
    assert "system.preset" in imp.assumed  # hardware gpu names no system: the default
    _scenario(imp)
    imp = _import("attention_type=local_sliding", "sliding_window_size=1024")
    assert (imp.tables["model"]["window_layers"], imp.tables["model"]["window"]) == (16, 1024)
    assert "window_layers" not in _import("sliding_window_size=1024").tables["model"]
    assert "sliding_window_size=0 must be a whole number >= 1" in _refused(
        BASE, "attention_type=local_sliding")


@pytest.mark.parametrize("words, windowed, window, chunked", [
    (("decoder_block=gemma3", "sliding_window_size=1024"), 16 - 16 // 6, 1024, False),
    (("decoder_block=gpt_oss", "sliding_window_size=128"), 8, 128, False),
    (("decoder_block=llama4", "chunk_attn_window_size=8192", "nope_layer_interval=4"), 12,
     8192, True),
    (("attention_type=chunk", "chunk_attn_window_size=512"), 16, 512, True),
])
def test_decoder_blocks_window_rules(words, windowed, window, chunked):
    m = _import(*words).tables["model"]
    assert (m["window_layers"], m["window"], m.get("chunked_attention", False)) == \
        (windowed, window, chunked)


def test_moe_routing_groups_and_sequence_parallel_tensor():
    imp = _import("model_name=deepseek3-671b", "n_routing_groups=8", "topk_routing_group=4",
                  "ici_expert_parallelism=8", "ici_tensor_sequence_parallelism=2", gpus=16,
                  system={"preset": "tpu-v5p"})
    p = imp.tables["parallel"]
    assert (p["tp"], p["ep"], p["dp"], p["sequence_parallel"]) == (2, 8, 8, True)
    assert p["moe_node_limit"] == 4 and "topk_routing_group 4" in imp.assumed[
        "parallel.moe_node_limit"]
    _scenario(imp)


def test_precision_recompute_and_pipeline():
    imp = _import("quantization=fp8", "remat_policy=minimal", "grad_dtype=bfloat16")
    t = imp.tables["training"]
    assert (t["dtype"], t["recompute"], t["grad_reduce_dtype"]) == ("fp8", "selective", "bf16")
    imp = _import("quantization=int8", "weight_dtype=bfloat16", "remat_policy=minimal_with_context")
    t = imp.tables["training"]
    assert (t["dtype"], t["params_dtype"], t["master_dtype"], t["optimizer_dtype"],
            t["recompute"]) == ("fp8", "bf16", "none", "bf16", "none")
    assert "int8" in imp.assumed["training.dtype"]
    assert _scenario(imp).plan.precision.master == "none"
    imp = _import("ici_pipeline_parallelism=4", "num_layers_per_pipeline_stage=2", gpus=8,
                  system={"preset": "tpu-v5p"})
    p, t = imp.tables["parallel"], imp.tables["training"]
    # 16 layers = 4 stages x 2 layers x 2 repeats; 12 x 8 = 96 sequences in 4 micro-batches
    assert (p["pp"], p["dp"], p["schedule"], p["interleave"]) == (4, 2, "interleaved", 2)
    assert (t["micro_batch"], t["global_batch"]) == (12, 96)
    imp = _import("ici_pipeline_parallelism=4", "num_layers_per_pipeline_stage=4", gpus=8,
                  system={"preset": "tpu-v5p"})
    assert imp.tables["parallel"]["schedule"] == "gpipe"
    _scenario(imp)


def test_base_config_chains_end(tmp_path):
    (tmp_path / "a.yml").write_text('base_config: "b.yml"\n')
    (tmp_path / "b.yml").write_text('base_config: "a.yml"\n')
    assert "base_config='a.yml' makes a chain of more than 8 configs" in _refused(
        str(tmp_path / "a.yml"))
    (tmp_path / "c.yml").write_text("- a list\n")
    assert "must hold a YAML mapping" in _refused(str(tmp_path / "c.yml"))


def test_words_that_are_neither_files_nor_overrides_are_refused():
    assert "import maxtext takes base.yml" in _refused("--steps", "3")
    assert "import maxtext takes base.yml" in _refused("steps=3")
    assert "MaxText config 'missing.yml' does not exist" in _refused("missing.yml")
