"""`codesign import` against issue 56's review: a file of another kind refused in
one line naming it, config paths confined to the config's folder, MaxText's
pipeline_parallel_layers read and empty slices refused, `import KIND --help`,
`--set KEY VALUE` named, a Bridge key nested past the cap, a Megatron script's
shell variables (`--var`), group-limited routing in every importer, issue 54's
software flags named as ignored, and Megatron-Bridge's tutorial and perf recipes."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from codesign import importers, scenario
from codesign.cli import import_, main
from codesign.importers._kinds import NAMED
from codesign.importers.megatron import SOFTWARE_FLAGS
from codesign.importers.megatron_bridge import megatron_bridge_words

FIXTURES = Path(__file__).parent / "fixtures" / "import"
MAXTEXT = FIXTURES / "maxtext"
# one file of each kind (the megatron kind twice: a script and a ModelZoo YAML)
OF_KIND = [("hf", FIXTURES / "hf" / "llama3-8b.json"),
           ("nemo", FIXTURES / "nemo" / "llama3_8b.yaml"),
           ("megatron", FIXTURES / "megatron" / "gpt3-175b.sh"),
           ("megatron", FIXTURES / "megatron" / "mixtral-8x7b.yaml"),
           ("torchtitan", FIXTURES / "torchtitan" / "llama3_8b.toml"),
           ("maxtext", MAXTEXT / "models" / "llama3-8b.yml"),
           ("megatron-bridge", FIXTURES / "megatron_bridge" /
            "llama3_8b_pretrain_override_example.yaml")]
# how each importer takes one file on the command line
WORDS = {"megatron-bridge": lambda f: ["llama3_8b_pretrain_config", f]}


def _import(kind: str, *words: str, gpus=None, shell=None) -> importers.Imported:
    return import_.imported(kind, list(words), gpus, None, shell)


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's own exit
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _tables(imported: importers.Imported) -> dict:
    """What the written TOML holds (and that it loads)."""
    tables = tomllib.loads(imported.toml("test"))
    scenario.from_tables(tables)
    return tables


# ------------------------------------------------------------------ kinds
@pytest.mark.parametrize("kind", importers.KINDS)
@pytest.mark.parametrize("other, path", OF_KIND, ids=[p.name for _, p in OF_KIND])
def test_a_file_of_another_kind_is_refused_naming_it(kind, other, path):
    words = WORDS.get(kind, lambda f: [f])(str(path))
    if other == kind:
        return  # its own kind: imported elsewhere (tests/test_importers.py)
    with pytest.raises(ValueError) as e:
        _import(kind, *words)
    text = str(e.value)
    assert len(text.splitlines()) == 1
    assert f"looks like {NAMED[other]}" in text and str(path) in text, text


def test_maxtext_given_a_config_json_exits_2_not_the_default_model(capsys):
    rc, out, err = _cli(capsys, "import", "maxtext", str(FIXTURES / "hf" / "deepseek-v3.json"))
    assert (rc, out) == (2, "")
    assert "looks like a Hugging Face config.json (codesign import hf)" in err
    assert len(err.splitlines()) == 1


def test_a_bridge_recipe_word_that_is_a_file_names_its_kind():
    with pytest.raises(ValueError, match="is a file, not a recipe function; it looks like a "
                                         "Hugging Face config.json"):
        _import("megatron-bridge", str(FIXTURES / "hf" / "llama3-8b.json"))


def test_a_nemo_recipe_in_bridge_s_layout_still_imports_as_nemo(tmp_path):
    """NeMo's importer reads a Megatron-Bridge layout holding the model's shape
    (a ConfigContainer's YAML), and refuses one without it (an override file)."""
    full = tmp_path / "full.yaml"
    full.write_text("model:\n  num_layers: 2\n  hidden_size: 64\n  num_attention_heads: 8\n"
                    "  seq_length: 128\ntrain:\n  global_batch_size: 8\n  micro_batch_size: 1\n")
    assert _tables(_import("nemo", str(full)))["training"]["global_batch"] == 8
    partial = tmp_path / "over.yaml"
    partial.write_text("model:\n  tensor_model_parallel_size: 2\ntrain:\n  train_iters: 5\n")
    with pytest.raises(ValueError, match="looks like a Megatron-Bridge override file"):
        _import("nemo", str(partial))


# ------------------------------------------------------------------ MaxText paths
def _maxtext_folder(tmp_path: Path) -> Path:
    """A configs folder: base.yml and models/ (the fixtures'), a secret beside it."""
    configs = tmp_path / "configs"
    shutil.copytree(MAXTEXT, configs)
    (tmp_path / "secret.yml").write_text("private_key_name: 1\n")
    return configs


@pytest.mark.parametrize("link", ["../secret.yml", "{tmp}/secret.yml", "../../../../etc/passwd",
                                  "/etc/passwd"])
def test_base_config_outside_the_folder_is_refused_naming_key_and_value(tmp_path, link):
    configs = _maxtext_folder(tmp_path)
    link = link.format(tmp=tmp_path)
    (configs / "run.yml").write_text(f"base_config: {link}\n")
    with pytest.raises(ValueError) as e:
        _import("maxtext", str(configs / "run.yml"))
    text = str(e.value)
    assert len(text.splitlines()) == 1 and "private_key_name" not in text
    assert f"base_config={link[:40]!r}"[:-1] in text  # the value, cut to a short line
    assert "leads out of the config's folder" in text


def test_a_planted_link_out_of_the_folder_is_refused(tmp_path):
    configs = _maxtext_folder(tmp_path)
    (configs / "evil.yml").symlink_to(tmp_path / "secret.yml")
    (configs / "run.yml").write_text("base_config: evil.yml\n")
    with pytest.raises(ValueError, match="base_config='evil.yml' leads out"):
        _import("maxtext", str(configs / "run.yml"))


@pytest.mark.parametrize("name", ["../../..", "../secret", "/etc/passwd", ".."])
def test_model_name_is_a_name_not_a_path(tmp_path, name):
    configs = _maxtext_folder(tmp_path)
    with pytest.raises(ValueError) as e:
        _import("maxtext", str(configs / "base.yml"), f"model_name={name}")
    assert f"model_name={name!r} is not a model name" in str(e.value)


def test_paths_inside_the_configs_folder_or_named_on_the_command_line_are_read(tmp_path):
    """MaxText's own layouts: a config in a sub-folder of the configs folder on
    ../base.yml, and a base file elsewhere that the command line names."""
    configs = _maxtext_folder(tmp_path)
    (configs / "post").mkdir()
    (configs / "post" / "run.yml").write_text("base_config: ../base.yml\nsteps: 10\n")
    run = _import("maxtext", str(configs / "post" / "run.yml"), "model_name=llama3-8b")
    assert run.tables["model"]["layers"] == 32
    own = tmp_path / "own"
    own.mkdir()
    (own / "run.yml").write_text(f"base_config: {configs / 'base.yml'}\n")
    named = _import("maxtext", str(configs / "base.yml"), str(own / "run.yml"),
                    "model_name=llama3-8b")
    assert named.tables["model"]["layers"] == 32


# ------------------------------------------------------------------ MaxText values
def test_pipeline_parallel_layers_is_read():
    """32 decoder layers, 28 pipelined over 4 stages: 7 repeats of one layer a stage
    (MaxText's circular pipeline); the 4 others said as unpipelined."""
    imp = _import("maxtext", str(MAXTEXT / "base.yml"), "model_name=llama3-8b",
                  "ici_pipeline_parallelism=4", "pipeline_parallel_layers=28")
    p = _tables(imp)["parallel"]
    assert (p["pp"], p["schedule"], p["interleave"]) == (4, "interleaved", 7)
    assert "the other 4 unpipelined" in imp.assumed["pipeline_parallel_layers"]
    assert "pipeline_parallel_layers" not in imp.ignored
    with pytest.raises(ValueError, match="pipeline_parallel_layers=33 must be -1"):
        _import("maxtext", str(MAXTEXT / "base.yml"), "model_name=llama3-8b",
                "ici_pipeline_parallelism=4", "pipeline_parallel_layers=33")


@pytest.mark.parametrize("word, key", [("compile_topology=v5e-0", "compile_topology"),
                                       ("compile_topology=v5p-1", "compile_topology"),
                                       ("num_slices=0", "num_slices"),
                                       ("compile_topology_num_slices=0",
                                        "compile_topology_num_slices")])
def test_no_chips_or_no_slices_is_refused_naming_the_key(word, key):
    with pytest.raises(ValueError) as e:
        _import("maxtext", str(MAXTEXT / "base.yml"), "model_name=llama3-8b", word)
    assert f"{key}=" in str(e.value) and len(str(e.value).splitlines()) == 1


# ------------------------------------------------------------------ the command line
@pytest.mark.parametrize("kind", importers.KINDS)
def test_import_kind_help_prints_its_usage(capsys, kind):
    rc, out, err = _cli(capsys, "import", kind, "--help")
    assert (rc, err) == (0, "")
    assert out.startswith(f"usage: codesign import {kind} {import_.USAGE[kind]}")
    assert importers.MODULES[kind].__doc__.split()[0] in out  # the importer's description


@pytest.mark.parametrize("argv", [
    ("import", "hf", str(FIXTURES / "hf" / "llama3-8b.json"), "--set", "parallel.tp", "2"),
    ("import", "--set", "parallel.tp", "2", "hf", str(FIXTURES / "hf" / "llama3-8b.json")),
    ("estimate", "--set", "parallel.tp", "2"),
])
def test_set_with_a_space_is_named(capsys, argv):
    rc, out, err = _cli(capsys, *argv)
    assert (rc, out) == (2, "")
    assert err.splitlines() == [f"codesign {argv[0]}: error: --set takes KEY=VALUE, got "
                                "'parallel.tp'"]


def test_a_bridge_key_nested_10000_deep_is_one_line(capsys):
    key = "model." + ".".join(["a"] * 10_000)
    rc, out, err = _cli(capsys, "import", "megatron-bridge", "llama3_8b_pretrain_config",
                        f"{key}=1")
    assert (rc, out) == (2, "") and len(err.splitlines()) == 1
    assert "nests past 32 levels" in err
    inner = "model." + ".".join(["a"] * 30)  # 31 levels: read (and unread)
    assert inner in megatron_bridge_words(["llama3_8b_pretrain_config", f"{inner}=1"]).ignored


# ------------------------------------------------------------------ shell variables
MIXTRAL = FIXTURES / "megatron" / "mixtral-8x7b-distributed.sh"


def test_megatron_s_mixtral_script_imports_with_its_variables():
    """examples/mixtral/train_mixtral_8x7b_distributed.sh: on SLURM_NNODES=4 nodes of
    8, its tokenizer ($2) named; the paths it leaves unset ($1, $3) only said."""
    imp = _import("megatron", str(MIXTRAL),
                  shell={"SLURM_NNODES": "4", "2": "/data/mixtral/tokenizer.model"})
    t = _tables(imp)
    assert (t["system"]["gpus"], t["parallel"]["pp"], t["parallel"]["ep"]) == (32, 4, 8)
    assert (t["model"]["experts"], t["model"]["top_k"], t["model"]["vocab"]) == (8, 2, 32000)
    assert "/data/mixtral/tokenizer.model" in imp.assumed["model.vocab"]
    assert imp.assumed["shell variables"].startswith("shell variables $3, $1 unset")
    assert {"--data-path", "--save", "--load", "--tensorboard-dir"} <= set(imp.ignored)


def test_var_stands_over_the_script_s_own_assignment_and_defaults(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("L=2\nNL=${LAYERS:-4}\n--num-layers $NL --hidden-size 64 "
                      "--num-attention-heads 8 --seq-length 128 --data-path $DATA\n")
    assert _import("megatron", str(script)).tables["model"]["layers"] == 4
    assert _import("megatron", str(script), shell={"LAYERS": "6"}).tables["model"]["layers"] == 6
    assert _import("megatron", str(script), shell={"NL": "8"}).tables["model"]["layers"] == 8


def test_an_unset_variable_where_a_number_is_read_names_var(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("--num-layers $NL --hidden-size 64 --num-attention-heads 8 "
                      "--seq-length 128\n")
    with pytest.raises(ValueError, match=r"--num-layers='\$NL' .*--var NAME=VALUE"):
        _import("megatron", str(script))


def test_var_is_refused_for_other_sources(capsys):
    rc, _, err = _cli(capsys, "import", "hf", str(FIXTURES / "hf" / "llama3-8b.json"),
                      "--var", "A=1")
    assert rc == 2 and "--var sets the variables of a script" in err
    rc, _, err = _cli(capsys, "import", "megatron", str(MIXTRAL), "--var", "A")
    assert rc == 2 and "--var takes NAME=VALUE" in err


# ------------------------------------------------------------------ group-limited routing
def test_group_limited_routing_is_read_by_every_importer():
    """DeepSeek-V3's topk_group 4 of n_group 8: the HF importer's limit, and the same
    from Megatron's flags, Megatron-Bridge's keys and MaxText's."""
    hf = _import("hf", str(FIXTURES / "hf" / "deepseek-v3.json")).tables["parallel"]
    assert hf["moe_node_limit"] == 4
    args = ("--num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 128 "
            "--num-experts 16 --moe-router-topk 4 --moe-router-num-groups 8 "
            "--moe-router-group-topk 4").split()
    mega = _import("megatron", *args)
    assert mega.tables["parallel"]["moe_node_limit"] == hf["moe_node_limit"]
    assert "--moe-router-group-topk 4 of --moe-router-num-groups 8" in mega.assumed[
        "parallel.moe_node_limit"]
    bridge = megatron_bridge_words(["deepseek_v3_pretrain_config"])
    assert bridge.tables["parallel"]["moe_node_limit"] == hf["moe_node_limit"]
    assert not {"model.moe_router_num_groups", "model.moe_router_group_topk"} & set(
        bridge.ignored)
    maxtext = _import("maxtext", str(MAXTEXT / "base.yml"), "model_name=deepseek3-671b",
                      "n_routing_groups=8", "topk_routing_group=4")
    assert maxtext.tables["parallel"]["moe_node_limit"] == hf["moe_node_limit"]
    # every group allowed: no limit
    free = megatron_bridge_words(["deepseek_v3_pretrain_config", "model.moe_router_group_topk=8"])
    assert "moe_node_limit" not in free.tables["parallel"]


# ------------------------------------------------------------------ issue 54's flags
MOE_ARGS = ("--num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 128 "
            "--num-experts 8 --moe-router-topk 2").split()
# name -> (the value given, the scenario key's value it sets; None: named, not read)
SOFTWARE_CASES = {
    "moe_token_dispatcher_type": ("flex", "hybridep"),  # with the backend below
    "moe_flex_dispatcher_backend": ("hybridep", "hybridep"),
    "moe_hybridep_num_sms": (32, 32),
    "moe_deepep_num_sms": (20, None),  # the dispatcher is hybridep: named
    "cuda_graph_impl": ("transformer_engine", "partial"),
    "cuda_graph_scope": ("moe_router,moe_preprocess", "moe_router,moe_preprocess"),
    "moe_router_fusion": (True, True),
    "moe_permute_fusion": (True, True),
    "moe_a2a_overlap": (True, True),
    "delay_wgrad_compute": (True, True),
    "moe_expert_capacity_factor": (1.25, 1.25),
    "moe_expert_rank_capacity_factor": (1.5, None),  # the expert's factor stands
    "moe_pad_expert_input_to_capacity": (True, True),
    # the model's own layers: MOE_LAYOUT below, as Megatron's flag; Bridge's recipe has 48
    "pipeline_model_parallel_layout": ("EttttL", "EttttL"),
    "recompute_modules": ("core_attn", None),
    "fp8_recipe": ("blockwise", None),
}


def _value_of(imported, scenario_key: str):
    section, key = scenario_key.split(".")
    return imported.tables.get(section, {}).get(key)


def _named(imported, name: str) -> bool:
    return any(i.split("=")[0] == name for i in imported.ignored) or \
        any(name in why for why in imported.assumed.values())


def test_every_software_flag_sets_its_key_in_both_importers():
    """Each row of SOFTWARE_FLAGS given as Megatron's flag and as Bridge's key sets
    the same scenario key to the same value, or is named (ignored or assumed)."""
    assert set(SOFTWARE_CASES) == set(SOFTWARE_FLAGS)
    args, overrides = list(MOE_ARGS), []
    for name, sw in SOFTWARE_FLAGS.items():
        value = SOFTWARE_CASES[name][0]
        args += [sw.flag] if value is True else [sw.flag, str(value)]
        if name != "pipeline_model_parallel_layout":  # Bridge's 48 layers: their own layout
            overrides.append(f"{sw.key}={'true' if value is True else value}")
    layout = "E" + "t" * 48 + "L"
    mega = _import("megatron", *args)
    bridge = megatron_bridge_words(["qwen3_30b_a3b_pretrain_config", *overrides,
                                    f"model.pipeline_model_parallel_layout={layout}",
                                    "model.pipeline_model_parallel_size=1",
                                    "model.virtual_pipeline_model_parallel_size=null"])
    for imported, spelled in ((mega, "flag"), (bridge, "key")):
        for name, (_, want) in SOFTWARE_CASES.items():
            sw = SOFTWARE_FLAGS[name]
            if name == "pipeline_model_parallel_layout" and spelled == "key":
                want = layout
            if want is None:
                assert _named(imported, getattr(sw, spelled)), (spelled, name)
            else:
                assert _value_of(imported, sw.scenario) == want, (spelled, name)
        assert "training.host_syncs" not in imported.assumed  # padded: no host read-back
        _tables(imported)  # and it loads


@pytest.mark.parametrize("words, want", [
    # alltoall, dropless: the host reads the tokens per expert back
    ("--moe-token-dispatcher-type alltoall", {"parallel.moe_dispatcher": "alltoall",
                                              "training.host_syncs": True}),
    ("--moe-token-dispatcher-type flex", {"parallel.moe_dispatcher": "deepep",
                                          "training.host_syncs": True}),
    ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep",
     {"parallel.moe_dispatcher": "hybridep", "training.host_syncs": None}),
    ("--moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.0",
     {"training.host_syncs": None, "training.moe_capacity_factor": 1.0,
      "training.moe_pad_experts": None}),
    # TE graphs with no scope, Megatron's old whole-layer scope: the layer's static parts
    ("--cuda-graph-impl transformer_engine", {"training.cuda_graphs": "layer"}),
    ("--cuda-graph-impl local --cuda-graph-scope full", {"training.cuda_graphs": "layer",
                                                         "training.cuda_graph_scope": None}),
    ("--cuda-graph-impl none --cuda-graph-scope attn", {"training.cuda_graphs": "none"}),
    # the scope promotes the implementation (Megatron-Core); padded experts: full_iteration
    ("--cuda-graph-scope full_iteration --moe-expert-capacity-factor 1 "
     "--moe-pad-expert-input-to-capacity", {"training.cuda_graphs": "full_iteration",
                                            "training.moe_pad_experts": True}),
    # the paged stash's rank capacity without padding: codesign's iteration scope
    ("--cuda-graph-impl full_iteration --moe-expert-rank-capacity-factor 1.5",
     {"training.cuda_graphs": "iteration", "training.moe_capacity_factor": 1.5}),
    # combined 1F1B over pipeline stages needs virtual ones
    ("--overlap-moe-expert-parallel-comm --pipeline-model-parallel-size 2",
     {"parallel.ep_overlap": None}),
    ("--overlap-moe-expert-parallel-comm --pipeline-model-parallel-size 2 "
     "--num-virtual-stages-per-pipeline-rank 2", {"parallel.ep_overlap": True}),
    ("--moe-token-dispatcher-type allgather", {"parallel.moe_dispatcher": None,
                                               "training.host_syncs": None}),
])
def test_software_flag_values(words, want):
    imported = _import("megatron", *MOE_ARGS, *words.split())
    for key, value in want.items():
        assert _value_of(imported, key) == value, key
    _tables(imported)


def test_software_values_the_model_cannot_express_are_named_with_the_value():
    imported = _import("megatron", *MOE_ARGS, "--moe-token-dispatcher-type", "allgather",
                       "--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope",
                       "attn", "mamba")
    assert any(i.startswith("--moe-token-dispatcher-type=allgather (") for i in imported.ignored)
    assert any(i.startswith("--cuda-graph-scope=attn,mamba (mamba") for i in imported.ignored)
    assert _value_of(imported, "training.cuda_graph_scope") == "attn"
    # on a dense model the MoE ones are named, the graphs read
    dense = _import("megatron", *MOE_ARGS[:8], "--moe-router-fusion", "--cuda-graph-impl",
                    "local")
    assert any(i.startswith("--moe-router-fusion=True (a dense") for i in dense.ignored)
    assert _value_of(dense, "training.cuda_graphs") == "layer"


@pytest.mark.parametrize("flag, value", [
    ("--moe-token-dispatcher-type", "alltoallx"), ("--moe-flex-dispatcher-backend", "nccl"),
    ("--cuda-graph-impl", "cudnn"), ("--cuda-graph-scope", "attention"),
    ("--moe-expert-capacity-factor", "-1"), ("--moe-hybridep-num-sms", "many")])
def test_malformed_software_values_are_one_line_exit_2(capsys, flag, value):
    extra = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend",
             "hybridep"] if flag == "--moe-hybridep-num-sms" else []
    code, out, err = _cli(capsys, "import", "megatron", *MOE_ARGS, *extra, flag, value)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert flag in err and value in err


# ------------------------------------------------------------------ Bridge's own recipes
def test_the_tutorial_recipe_and_its_yaml_import():
    """tutorials/recipes/llama/02_pretrain_with_yaml.py: llama32_1b_pretrain_config
    under conf/llama32_1b_pretrain.yaml, then a key=value word."""
    imp = megatron_bridge_words(["llama32_1b_pretrain_config",
                                 str(FIXTURES / "megatron_bridge" / "llama32_1b_pretrain.yaml"),
                                 "train.train_iters=5000"])
    t = _tables(imp)
    m = t["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn_hidden"]) == \
        (16, 2048, 32, 8, 8192)
    assert (m["tied_embeddings"], m["seq_len"]) == (True, 4096)
    assert (t["training"]["global_batch"], t["training"]["micro_batch"]) == (8, 1)
    assert t["training"]["tokens"] == 5000 * 8 * 4096
    assert t["system"]["gpus"] == 1
    assert {"optimizer.lr", "checkpoint.save", "rng.seed"} <= set(imp.ignored)


def test_perf_recipes_import_with_their_plans():
    """perf_recipes/deepseek/h100/deepseek_v3.py and perf_recipes/llama/h100/llama3.py:
    the plans they set over the library recipes."""
    ds = megatron_bridge_words(["perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"])
    t = _tables(ds)
    p = t["parallel"]
    assert (p["tp"], p["pp"], p["interleave"], p["ep"], p["moe_node_limit"]) == (2, 8, 4, 64, 4)
    assert (t["training"]["global_batch"], t["training"]["recompute"],
            t["training"]["grad_reduce_dtype"], t["system"]["gpus"]) == \
        (16384, "selective", "bf16", 1024)
    # the library's recipe of that name is the library's
    lib = megatron_bridge_words(["deepseek_v3_pretrain_1024gpu_h100_bf16_config"]).tables
    assert lib["parallel"]["pp"] == 16
    fp8 = megatron_bridge_words(["deepseek_v3_pretrain_1024gpu_h100_fp8cs_config"])
    assert fp8.tables["training"]["dtype"] == "fp8"
    assert any(i.startswith("mixed_precision.fp8_recipe=tensorwise (") for i in fp8.ignored)
    llama = _tables(megatron_bridge_words(["llama3_8b_pretrain_8gpu_h100_bf16_config"]))
    assert (llama["parallel"]["cp"], llama["training"]["global_batch"],
            llama["model"]["vocab"], llama["system"]["gpus"]) == (2, 128, 128256, 8)


# recipe -> (parallel.moe_dispatcher, moe_dispatcher_sms, training.cuda_graphs,
# cuda_graph_scope, moe_router_fusion, parallel.ep_overlap, training.host_syncs), as each
# function at the importer's commit sets them on an H100 (None: not set)
MOE_SOFTWARE = {
    # the library's: apply_flex_dispatcher_backend turns the backend into flex on Hopper
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config":
        ("deepep", None, "none", None, None, None, True),
    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config":
        ("hybridep", 32, "partial", "moe_router,moe_preprocess", True, None, None),
    "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config":
        ("deepep", None, "none", None, None, None, True),
    "deepseek_v3_pretrain_1024gpu_h100_bf16_config":
        ("hybridep", 16, "none", None, None, None, None),
    "gpt_oss_120b_pretrain_64gpu_h100_bf16_config":
        ("alltoall", None, "none", None, None, None, True),
    # the perf recipes (_benchmark_common: HybridEP on 32 SMs)
    "perf_recipes.qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config":
        ("hybridep", 32, "partial", "moe_router,moe_preprocess", True, True, None),
    "qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config":
        ("hybridep", 32, "partial", "attn,moe_router,moe_preprocess", True, None, None),
    "perf_recipes.qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config":
        ("alltoall", None, "none", None, True, True, True),
    "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config":
        ("alltoall", None, "none", None, True, True, True),
    "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config":
        ("hybridep", 32, "none", None, True, None, None),
    "perf_recipes.gpt_oss_120b_pretrain_64gpu_h100_bf16_config":
        ("alltoall", None, "none", None, True, None, True),
}


@pytest.mark.parametrize("name", MOE_SOFTWARE)
def test_moe_recipes_import_their_software_settings(name):
    t = _tables(megatron_bridge_words([name]))
    p, tr = t["parallel"], t["training"]
    got = (p.get("moe_dispatcher"), p.get("moe_dispatcher_sms"), tr.get("cuda_graphs"),
           tr.get("cuda_graph_scope"), tr.get("moe_router_fusion"), p.get("ep_overlap"),
           tr.get("host_syncs"))
    assert got == MOE_SOFTWARE[name]


def test_perf_recipes_of_qwen3_and_gpt_oss_import_with_their_plans():
    """perf_recipes/qwen/h100/qwen3_moe.py, perf_recipes/gpt_oss/h100/gpt_oss.py."""
    q = _tables(megatron_bridge_words(["qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config"]))
    p = q["parallel"]
    assert (p["tp"], p["pp"], p["interleave"], p["cp"], p["ep"], p["etp"]) == (2, 8, 4, 1, 32, 1)
    assert (q["training"]["global_batch"], q["training"]["recompute"], q["training"]["dtype"],
            q["system"]["gpus"]) == (8192, "none", "fp8", 256)
    small = _tables(megatron_bridge_words(["qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config"]))
    assert (small["parallel"]["ep"], small["training"]["recompute"],
            small["training"]["global_batch"]) == (16, "none", 1024)
    g = megatron_bridge_words(["perf_recipes.gpt_oss_120b_pretrain_64gpu_h100_bf16_config"])
    assert (g.tables["parallel"]["tp"], g.tables["parallel"]["pp"], g.tables["parallel"]["ep"],
            g.tables["training"]["recompute"], g.tables["training"]["global_batch"]) == \
        (1, 4, 8, "selective", 1280)
    assert g.tables["training"]["recompute_modules"] == "layernorm,moe_act"


def test_nemo_recipes_read_the_software_keys_as_bridge_does(tmp_path):
    """NeMo's model.* keys are the same flags: a scope list and the dispatcher read."""
    recipe = tmp_path / "moe.yaml"
    recipe.write_text(
        "trainer: {devices: 8, num_nodes: 1, precision: bf16-mixed}\n"
        "model: {num_layers: 4, hidden_size: 64, num_attention_heads: 8, "
        "encoder_seq_length: 128, num_moe_experts: 8, moe_router_topk: 2, "
        "global_batch_size: 8, micro_batch_size: 1, expert_model_parallel_size: 8, "
        "moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: hybridep, "
        "cuda_graph_impl: transformer_engine, cuda_graph_scope: [attn, moe_router], "
        "recompute_modules: [core_attn]}\n")
    imported = _import("nemo", str(recipe))
    t = _tables(imported)
    assert (t["parallel"]["moe_dispatcher"], t["training"]["cuda_graphs"],
            t["training"]["cuda_graph_scope"]) == ("hybridep", "partial", "attn,moe_router")
    assert any(i.startswith("model.recompute_modules=core_attn (") for i in imported.ignored)


def test_bridge_deepseek_perf_recipe_brings_its_pipeline_layout():
    """Megatron-Bridge's 1,024-GPU DeepSeek-V3 perf recipe runs its MTP layer on a
    short last stage (`pipeline_model_parallel_layout`): the importer sets the
    scenario's `parallel.pipeline_layout` to it, and the scenario loads."""
    imported = megatron_bridge_words(["perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"])
    assert _value_of(imported, "parallel.pipeline_layout") == "Et|(tt|)*30mL"
    assert not _named(imported, "model.pipeline_model_parallel_layout")
    _tables(imported)
