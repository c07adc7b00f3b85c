"""`codesign import`: Megatron arguments, NeMo recipes, torchtitan jobs and Hugging
Face config.json files (tests/fixtures/import, written by hand in the public
recipes' shapes) to scenarios that load, estimate, and re-create the validate
rows whose sources publish a config."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import equinox as eqx
import pytest

from codesign import importers, scenario, validate
from codesign.cli import main
from codesign.model import workload

FIXTURES = Path(__file__).parent / "fixtures" / "import"
# one file a scenario (torchtitan/*.py: registry source, tests/test_import_torchtitan.py)
ALL = sorted((kind, p) for kind in importers.FILE_KINDS for p in (FIXTURES / kind).iterdir()
             if p.suffix != ".py")

# what a fixture needs of the command line: Megatron-LM's Mixtral script runs on
# SLURM_NNODES nodes (its ep 8 and pp 4 need 4 of 8 GPUs)
OPTIONS = {"mixtral-8x7b-distributed.sh": {"variables": {"SLURM_NNODES": "4"}}}


def _fixture(kind: str, name: str, **options) -> importers.Imported:
    return importers.from_file(kind, FIXTURES / kind / name, **options)


def _scenario(imported: importers.Imported) -> scenario.Scenario:
    """What `codesign estimate` reads of the TOML the import writes."""
    return scenario.from_tables(tomllib.loads(imported.toml("test")))


def _row(name: str) -> scenario.Scenario:
    check = next(c for c in validate.CHECKS if c.name == name)
    return scenario.from_tables(check.tables)


def _differences(a: eqx.Module, b: eqx.Module) -> dict:
    """{field: (a's, b's)} of the fields of two Modules that differ."""
    out = {}
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if not bool(eqx.tree_equal(x, y)):
            out[f.name] = (x, y)
    return out


def _same_run(imported: scenario.Scenario, row: scenario.Scenario) -> dict:
    """The differences of model, plan and system between two scenarios."""
    return {**_differences(imported.model, row.model), **_differences(imported.plan, row.plan),
            **{f"system.{k}": v for k, v in _differences(imported.system, row.system).items()}}


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize("kind, path", ALL, ids=[p.name for _, p in ALL])
def test_every_fixture_imports_to_a_scenario_that_loads(kind, path):
    imported = importers.from_file(kind, path, **OPTIONS.get(path.name, {}))
    text = imported.toml("test")
    assert tomllib.loads(text) == imported.tables  # what is written is what was read
    scn = _scenario(imported)
    assert float(scn.system.gpus) >= 1
    assert all(line.startswith("# ") for line in text.split("\n[")[0].splitlines())
    assert imported.assumed, "every source is silent on something (the system at least)"


# ------------------------------------------------------------------ Megatron
def test_megatron_script_reads_arrays_variables_and_torchrun():
    imp = _fixture("megatron", "gpt3-175b.sh")
    m, t, p, s = (imp.tables[k] for k in ("model", "training", "parallel", "system"))
    assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["seq_len"]) == \
        (96, 12288, 96, 96, 2048)
    assert m["ffn_hidden"] == 4 * 12288 and "model.ffn_hidden" in imp.assumed
    # GPT-2 BPE's 50,257 padded to a multiple of 128 x tp 8, as Megatron pads it
    assert m["vocab"] == 51200 and "50257" in imp.assumed["model.vocab"]
    assert m["dropout"] is True and "0.1" in imp.assumed["model.dropout"]
    assert (m["gated"], m["tied_embeddings"]) == (False, True)
    assert (t["micro_batch"], t["global_batch"], t["recompute"], t["dtype"]) == \
        (1, 1536, "full", "fp16")
    assert t["tokens"] == 500000 * 1536 * 2048
    assert (p["tp"], p["pp"], p["sequence_parallel"], p["zero"]) == (8, 16, True, 0)
    assert s["gpus"] == 128 * 8 and "--nnodes 128" in imp.assumed["system.gpus"]
    assert {"--lr", "--rampup-batch-size", "--save", "--master_addr"} <= set(imp.ignored)
    assert not {"--num-layers", "--fp16", "--nnodes"} & set(imp.ignored)


def test_megatron_modelzoo_mixtral_recreates_the_megatron_core_row():
    """validate's Megatron-Core Mixtral 8x7B row (tp 1, ep 8, pp 4, vp 8 on 64
    H100s), from a Megatron-MoE-ModelZoo config of that mapping: the same model,
    plan and system (the GPU count is the launcher's: --gpus)."""
    imp = _fixture("megatron", "mixtral-8x7b.yaml", gpus=64)
    row = _row("Megatron-Core 0.8 Mixtral 8x7B on 64 H100 (tp 1, ep 8, pp 4, vp 8)")
    # the same but for the host's read-back: the config's dropless alltoall dispatcher
    # syncs (training.host_syncs, issue 54), which the row (Megatron-Core 0.8) leaves off
    assert _same_run(_scenario(imp), row) == {"host_syncs": (True, False)}
    assert imp.tables["parallel"]["moe_dispatcher"] == "alltoall"
    # the config says sequence parallelism; Megatron turns it off at tp 1
    assert imp.tables["parallel"]["sequence_parallel"] is False
    assert "--fp8-format" not in imp.ignored and "--moe-grouped-gemm" in imp.ignored


def test_megatron_arguments_text_pads_the_vocabulary_and_counts_the_fewest_gpus():
    imp = _fixture("megatron", "llama3-70b.txt")
    m, p = imp.tables["model"], imp.tables["parallel"]
    assert m["vocab"] == 129024  # 128,256 up to a multiple of 128 x 8
    assert (p["tp"], p["pp"], p["cp"], p["interleave"], p["schedule"]) == \
        (8, 4, 2, 80 // (4 * 5), "interleaved")
    assert imp.tables["training"]["dtype"] == "fp8"  # --fp8-format over --bf16
    assert imp.tables["system"]["gpus"] == 8 * 4 * 2  # dp 1: the source gives no count
    assert imp.ignored == ("--max-position-embeddings", "--normalization")


def test_megatron_inline_arguments(capsys):
    args = ("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 "
            "--num-layers-per-virtual-pipeline-stage 5 --context-parallel-size 1 "
            "--sequence-parallel --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 "
            "--num-attention-heads 64 --group-query-attention --num-query-groups 8 "
            "--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 "
            "--global-batch-size 512 --swiglu --untie-embeddings-and-output-weights "
            "--recompute-granularity full --recompute-method uniform --bf16 "
            "--use-distributed-optimizer --padded-vocab-size 128256 --some-future-flag 3")
    rc, text, err = _cli(capsys, "import", "megatron", *args.split(), "--gpus", "512")
    assert (rc, err) == (0, "")
    assert text.startswith("# codesign import megatron: the arguments\n")
    assert "--some-future-flag" in text and "padded" not in text  # given padded: as is
    scn = scenario.from_tables(tomllib.loads(text))
    assert (float(scn.plan.dp), float(scn.plan.interleave), float(scn.model.vocab)) == \
        (8.0, 2.0, 128256.0)
    assert (scn.plan.recompute.name, scn.plan.zero.name, scn.plan.sequence_parallel) == \
        ("full", 1, True)
    assert "tp_overlap" not in tomllib.loads(text)["parallel"]  # no --tp-comm-overlap: 0
    rc, text, err = _cli(capsys, "import", "megatron", *args.split(), "--tp-comm-overlap",
                         "--gpus", "512")
    assert (rc, err) == (0, "") and tomllib.loads(text)["parallel"]["tp_overlap"] == 1.0
    one = args.replace("--tensor-model-parallel-size 8", "--tensor-model-parallel-size 1")
    rc, text, err = _cli(capsys, "import", "megatron", *one.split(), "--tp-comm-overlap",
                         "--gpus", "512")
    assert (rc, err) == (0, "") and "tp_overlap" not in tomllib.loads(text)["parallel"]


# the NeMo Llama 3 8B recipe's run as Megatron arguments (NeMo passes its recipe to
# Megatron-Core); the round trips below share one structure: one compile
LLAMA3_8B_ARGS = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --seq-length 8192 --swiglu "
    "--untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 "
    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B "
    "--micro-batch-size 1 --global-batch-size 128 --context-parallel-size 2 --bf16 "
    "--fp8-format hybrid --use-distributed-optimizer --use-flash-attn --train-iters 300000")


def test_megatron_arguments_of_the_nemo_recipe_round_trip_to_an_estimate(capsys, tmp_path):
    out = tmp_path / "llama.toml"
    rc, printed, err = _cli(capsys, "import", "megatron", *LLAMA3_8B_ARGS.split(),
                            "--gpus", "8", "--out", str(out))
    assert (rc, err) == (0, "") and printed == f"wrote {out}\n"
    scn = scenario.load(out)
    assert _same_run(scn, _scenario(_fixture("nemo", "llama3_8b.yaml"))) == {}
    rc, printed, err = _cli(capsys, "estimate", str(out))
    assert rc == 0 and "step time" in printed, err


def test_megatron_shell_words():
    text = ('TP=${TP:-4}\nARGS="--num-layers 4 --hidden-size 256"  # a string of arguments\n'
            "python pretrain_gpt.py $ARGS --tensor-model-parallel-size=$TP \\\n"
            "  --num-attention-heads ${HEADS:-8} --seq-length 128 # comment --lr 1\n"
            "--num-experts 4 --moe-layer-freq '[0]*1+[1]*3'\n")
    imp = importers.megatron(importers.shell_arguments(text, "s.sh"), "s.sh")
    m = imp.tables["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["moe_layers"], m["experts"]) == \
        (4, 256, 8, 3, 4)
    assert imp.tables["parallel"]["tp"] == 4 and "--lr" not in imp.ignored
    assert imp.tables["model"]["top_k"] == 2 and "model.top_k" in imp.assumed


GPT_OSS_ARGS = ("--num-layers 36 --hidden-size 2880 --num-attention-heads 64 "
                "--group-query-attention --num-query-groups 8 --seq-length 4096 --swiglu "
                "--num-experts 128 --moe-router-topk 4 --moe-ffn-hidden-size 2880 --bf16 "
                "--untie-embeddings-and-output-weights --vocab-size 201088 --lr 3e-4")


def test_megatron_head_width_windows_mtp_and_bf16_gradient_reduction(capsys):
    args = GPT_OSS_ARGS + (" --kv-channels 128 --window-size 128 0 --window-attn-skip-freq 2 "
                           "--mtp-num-layers 1 --grad-reduce-in-bf16")
    rc, text, err = _cli(capsys, "import", "megatron", *args.split(), "--gpus", "8")
    assert (rc, err) == (0, "")
    tables = tomllib.loads(text)
    m, t = tables["model"], tables["training"]
    # every 2nd layer (counting from 1) full, the other 18 windowed over 128 tokens
    assert (m["head_dim"], m["window_layers"], m["window"], m["mtp_layers"]) == (128, 18, 128, 1)
    assert t["grad_reduce_dtype"] == "bf16"
    # Megatron-Core's 40M-parameter bucket in the bf16 reduction: 2 bytes each
    assert tables["parallel"]["dp_bucket_bytes"] == 2 * 40e6
    assert "--lr" in text and "--kv-channels" not in text.split("\n[")[0]
    scn = scenario.from_tables(tables)
    assert (float(scn.model.head_width), float(scn.model.window_layers)) == (128.0, 18.0)
    assert scn.plan.precision.grad_reduce == "bf16"
    # without them: hidden / heads, no window, no MTP, the bf16 recipe's fp32 reduction
    plain = importers.megatron(GPT_OSS_ARGS.split(), gpus=8).tables
    assert not {"head_dim", "window_layers", "window", "mtp_layers"} & set(plain["model"])
    assert "grad_reduce_dtype" not in plain["training"]
    assert plain["parallel"]["dp_bucket_bytes"] == 4 * 40e6


def test_megatron_expert_tensor_parallelism_and_activation_offload():
    """Qwen3-235B's H100 recipe folds EP 32 x ETP 1 over TP 2 x DP 16; Llama 3
    70B's GB200 recipe offloads 40 layers' activations: both land in the
    scenario (an ETP equal to TP is the default and is not written)."""
    args = GPT_OSS_ARGS + (" --tensor-model-parallel-size 2 --expert-model-parallel-size 32 "
                           "--expert-tensor-parallel-size 1 --sequence-parallel "
                           "--cpu-offloading --cpu-offloading-num-layers 12")
    imp = importers.megatron(args.split(), gpus=32)
    p, t = imp.tables["parallel"], imp.tables["training"]
    assert (p["tp"], p["ep"], p["etp"], t["offload_layers"]) == (2, 32, 1, 12)
    assert not {"--expert-tensor-parallel-size", "--cpu-offloading-num-layers"} & set(imp.ignored)
    scn = scenario.from_tables(imp.tables)
    assert float(scn.plan.expert_dp) == 1.0
    same = importers.megatron((GPT_OSS_ARGS + " --tensor-model-parallel-size 2 "
                               "--expert-tensor-parallel-size 2").split(), gpus=8)
    assert "etp" not in same.tables["parallel"]


@pytest.mark.parametrize("extra, expected", [
    ("--kv-channels 45", {}),  # hidden / heads: the default
    ("--window-size (4096,0)", {"window_layers": 36, "window": 4096}),  # every layer
    ("--window-size 4096,0 --window-attn-skip-freq 4", {"window_layers": 27, "window": 4096}),
    ("--window-size '(128, 0)' --window-attn-skip-freq [1,0]*18",
     {"window_layers": 18, "window": 128}),
    ("--window-size -1,0", {}),  # an unbounded window: full attention
])
def test_megatron_window_forms(extra, expected):
    words = importers.shell_arguments(GPT_OSS_ARGS + " " + extra, "args")
    m = importers.megatron(words, gpus=8).tables["model"]
    assert {k: m[k] for k in ("head_dim", "window_layers", "window") if k in m} == expected


def test_megatron_fp32_gradient_accumulation_of_fp16():
    words = LLAMA3_8B_ARGS.replace("--bf16 --fp8-format hybrid", "--fp16").split()
    assert "grad_reduce_dtype" not in importers.megatron(words).tables["training"]  # fp16
    imp = importers.megatron(words + ["--accumulate-allreduce-grads-in-fp32"])
    assert imp.tables["training"]["grad_reduce_dtype"] == "fp32"
    assert "--accumulate-allreduce-grads-in-fp32" not in imp.ignored


def test_nemo_window_lists_are_megatron_tuples():
    text = ("model:\n  num_layers: 36\n  hidden_size: 2880\n  num_attention_heads: 64\n"
            "  seq_length: 4096\n  kv_channels: 64\n  window_size: [128, 0]\n"
            "  window_attn_skip_freq: 2\n  mtp_num_layers: null\n")
    m = importers.nemo(text, "gpt-oss.yaml", gpus=8).tables["model"]
    assert (m["window_layers"], m["window"], m["head_dim"]) == (18, 128, 64)


@pytest.mark.parametrize("args, message", [
    ("--num-layers 8 --hidden-size 64", "--num-attention-heads missing"),
    ("--num-layers x --hidden-size 64 --num-attention-heads 8 --seq-length 8",
     "--num-layers='x' must be a whole number >= 1"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--tensor-model-parallel-size $TP", "a shell expression or variable"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3",
     "--num-layers-per-virtual-pipeline-stage=3 must divide --num-layers=8"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--num-experts 4 --moe-layer-freq [1]*7", "must give 0 or 1 for each of the 8 layers"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--tensor-model-parallel-size 3", "parallel.tp=3 must divide model.heads=8"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--window-size 0,0", "--window-size='0,0' must be the window's left and right extents"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--window-size wide", "--window-size='wide' must be the window's left and right extents"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--window-size 16 --window-attn-skip-freq [1]*7",
     "--window-attn-skip-freq='[1]*7' must give 0 or 1 for each of the 8 layers"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--kv-channels 0", "--kv-channels='0' must be a whole number >= 1"),
    ("--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
     "--mtp-num-layers -1", "--mtp-num-layers='-1' must be a whole number >= 0"),
])
def test_megatron_bad_input_is_one_line_exit_2(capsys, args, message):
    rc, out, err = _cli(capsys, "import", "megatron", *args.split())
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert message in err, err


# ------------------------------------------------------------------ NeMo
def test_nemo_llama3_8b_recreates_the_nemo_row():
    """validate's NeMo 24.07 Llama 3 8B FP8 row, from the launcher recipe with its
    plan: the same model, plan and system."""
    imp = _fixture("nemo", "llama3_8b.yaml")
    row = _row("NeMo 24.07 LLAMA3-8B FP8 on 8 H100 (tp 1, pp 1, cp 2, vp 1)")
    assert _same_run(_scenario(imp), row) == {}
    assert imp.tables["training"]["tokens"] == 300000 * 128 * 8192


def test_nemo_llama3_70b_recreates_the_nemo_row_but_its_padded_vocabulary():
    imp = _fixture("nemo", "llama3_70b.yaml")
    row = _row("NeMo 24.07 LLAMA3-70B FP8 on 64 H100 (tp 4, pp 4, cp 2, vp 5)")
    diff = _same_run(_scenario(imp), row)
    # NeMo pads 128,256 to a multiple of 128 x tp 4; the validate row keeps 128,256
    assert {k: tuple(float(x) for x in v) for k, v in diff.items()} == \
        {"vocab": (128512.0, 128256.0)}
    assert imp.tables["parallel"]["tp_overlap"] == 1.0  # ub_tp_comm_overlap: true, as the row


def test_nemo_gpt3_175b_resolves_interpolations_and_says_what_validate_assumes_otherwise():
    """The launcher's GPT-3 175B recipe with the performance summary's plan: the
    plan is the validate row's but for the recipe's selective recomputation (the
    row assumes none), the model but for the padded vocabulary and the recipe's
    dropout 0.1 (the row assumes GPT-3's 51,200 and no dropout)."""
    imp = _fixture("nemo", "gpt3_175b.yaml")
    assert imp.tables["model"]["ffn_hidden"] == 4 * 12288  # ${multiply:4, ${.hidden_size}}
    row = _row("NeMo 24.07 GPT3-175B FP8 on 128 H100 (tp 4, pp 8, cp 1, vp 6)")
    diff = _same_run(_scenario(imp), row)
    assert set(diff) == {"vocab", "dropout", "recompute"}
    assert float(diff["vocab"][0]) == 50688 and diff["dropout"] == (True, False)


@pytest.mark.parametrize("edit, message", [
    (("num_layers: 32", "num_layers: ${model.nope}"), "model.num_layers='${model.nope}' is an "
                                                      "interpolation codesign does not resolve"),
    (("num_layers: 32", "num_layers: thirty"), "model.num_layers='thirty' must be a whole"),
    (("activations_checkpoint_granularity: null", "activations_checkpoint_granularity: most"),
     "model.activations_checkpoint_granularity='most' is not one of none, selective, full"),
    (("model:", "model: [\n"), "is not valid YAML"),
])
def test_nemo_bad_input_is_one_line_exit_2(capsys, tmp_path, edit, message):
    text = (FIXTURES / "nemo" / "llama3_8b.yaml").read_text().replace(*edit, 1)
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    rc, out, err = _cli(capsys, "import", "nemo", str(path))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert message in err, err


def test_nemo_megatron_bridge_layout():
    text = ("model:\n  tensor_model_parallel_size: 2\n  seq_length: 4096\n  num_layers: 32\n"
            "  hidden_size: 4096\n  num_attention_heads: 32\n  num_query_groups: 8\n"
            "  ffn_hidden_size: 14336\n  gated_linear_unit: true\n  vocab_size: 128256\n"
            "  share_embeddings_and_output_weights: false\n  hidden_dropout: 0.0\n"
            "  attention_dropout: 0.0\ntrain:\n  global_batch_size: 256\n"
            "  micro_batch_size: 2\n  train_iters: 100\nmixed_precision: bf16_mixed\n"
            "ddp:\n  use_distributed_optimizer: true\n")
    imp = importers.nemo(text, "bridge.yaml", gpus=16)
    scn = _scenario(imp)
    assert (float(scn.model.kv_heads), scn.model.gated, scn.model.tied_embeddings) == \
        (8.0, True, False)
    assert (float(scn.plan.dp), float(scn.plan.micro_batch), scn.plan.zero.name,
            scn.plan.dtype) == (8.0, 2.0, 1, "bf16")
    assert "train.train_iters 100" in imp.assumed["training.tokens"]
    assert "tp_overlap" not in imp.tables["parallel"]
    overlapped = importers.nemo(text + "comm_overlap:\n  tp_comm_overlap: true\n",
                                "bridge.yaml", gpus=16)
    assert overlapped.tables["parallel"]["tp_overlap"] == 1.0


def test_nemo_round_trips_to_an_estimate(capsys, tmp_path):
    out = tmp_path / "nemo.toml"
    rc, _, err = _cli(capsys, "import", "nemo", str(FIXTURES / "nemo" / "llama3_8b.yaml"),
                      "--out", str(out))
    assert rc == 0, err
    rc, printed, err = _cli(capsys, "estimate", str(out))
    assert rc == 0 and "step time" in printed, err


# ------------------------------------------------------------------ torchtitan
def test_torchtitan_fsdp_takes_the_launcher_gpus():
    imp = _fixture("torchtitan", "llama3_8b.toml")
    scn = _scenario(imp)
    assert imp.tables["model"] == {"preset": "llama3-8b", "seq_len": 8192}
    assert (float(scn.plan.dp), scn.plan.zero.name, float(scn.plan.zero_shard_size)) == \
        (8.0, 3, 0.0)
    assert (scn.plan.recompute.name, scn.plan.dtype) == ("selective", "bf16")
    assert float(scn.system.gpus) == 8 and "NGPU 8" in imp.assumed["system.gpus"]
    big = _scenario(_fixture("torchtitan", "llama3_405b.toml", gpus=128))
    assert (float(big.plan.dp), float(big.plan.tp), big.plan.zero.name, big.plan.dtype) == \
        (16.0, 8.0, 3, "fp8")
    assert float(big.plan.tp_overlap) == 1.0  # enable_async_tensor_parallel = true


def test_torchtitan_hsdp_shards_within_replicas():
    scn = _scenario(_fixture("torchtitan", "llama3_70b.toml"))
    assert (float(scn.system.gpus), float(scn.plan.dp), float(scn.plan.tp)) == (64.0, 8.0, 8.0)
    assert (scn.plan.zero.name, float(scn.plan.zero_shard_size)) == (3, 4.0)
    assert (scn.plan.recompute.name, scn.plan.dtype, float(scn.plan.micro_batch)) == \
        ("full", "fp8", 8.0)


def test_torchtitan_pipeline_schedule():
    text = ('[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 16\n'
            "seq_len = 4096\n[parallelism]\ndata_parallel_shard_degree = 2\n"
            'tensor_parallel_degree = 8\npipeline_parallel_degree = 4\n'
            'pipeline_parallel_schedule = "Interleaved1F1B"\n'
            "pipeline_parallel_layers_per_stage = 5\npipeline_parallel_microbatch_size = 2\n"
            '[activation_checkpoint]\nmode = "none"\n')
    imp = importers.torchtitan(text, "job.toml")
    scn = _scenario(imp)
    assert (scn.plan.schedule.name, float(scn.plan.interleave)) == ("interleaved", 4.0)
    assert (float(scn.plan.micro_batch), float(scn.plan.global_batch)) == (2.0, 32.0)
    assert (float(scn.system.gpus), float(scn.model.seq_len)) == (64.0, 4096.0)
    assert "training.recompute" not in imp.assumed


def test_torchtitan_qwen3_flavor_is_the_hugging_face_model():
    """torchtitan's Qwen3 32B job: the flavor's shape restated from torchtitan's
    model args is the model of Qwen3-32B's config.json."""
    imp = _fixture("torchtitan", "qwen3_32b.toml")
    scn = _scenario(imp)
    assert "preset" not in imp.tables["model"] and imp.tables["model"]["seq_len"] == 4096
    hf = _scenario(_fixture("hf", "qwen3-32b.json")).model
    assert _differences(scn.model, eqx.tree_at(lambda m: m.seq_len, hf, scn.model.seq_len)) == {}
    assert (float(scn.plan.dp), scn.plan.zero.name, scn.plan.recompute.name) == (8.0, 3, "full")
    assert imp.tables["training"]["tokens"] == 3000 * 2 * 8 * 4096


@pytest.mark.parametrize("name, flavor, params", [
    # Qwen3 model cards' totals; DeepSeek-V2-Lite's 15.7B and V2's 236B; V3's 671B
    ("qwen3", "0.6B", 0.6e9), ("qwen3", "1.7B", 1.7e9), ("qwen3", "4B", 4.0e9),
    ("qwen3", "8B", 8.2e9), ("qwen3", "14B", 14.8e9), ("qwen3", "32B", 32.8e9),
    ("qwen3", "30B-A3B", 30.5e9), ("qwen3", "235B-A22B", 235e9),
    ("deepseek_v3", "16B", 15.7e9), ("deepseek_v3", "236B", 236e9),
    ("deepseek_v3", "671B", 671e9),
])
def test_torchtitan_flavors_have_their_published_sizes(name, flavor, params):
    imp = importers.torchtitan(f'[model]\nname = "{name}"\nflavor = "{flavor}"\n', "job.toml")
    assert abs(float(_scenario(imp).model.params()) / params - 1) < 0.03


def test_torchtitan_deepseek_v3_671b_is_the_preset_and_16b_imports():
    model = _scenario(importers.torchtitan(
        '[model]\nname = "deepseek_v3"\nflavor = "671B"\n[training]\nseq_len = 4096\n',
        "job.toml")).model
    assert _differences(model, workload.model("deepseek-v3")) == {}
    scn = _scenario(_fixture("torchtitan", "deepseek_v3_16b.toml"))
    assert (float(scn.plan.ep), float(scn.plan.dp), scn.plan.recompute.name) == \
        (8.0, 8.0, "selective")
    assert (float(scn.model.experts), float(scn.model.moe_layers)) == (64.0, 26.0)


@pytest.mark.parametrize("text, argv, message", [
    ('[model]\nname = "llama3"\nflavor = "debugmodel"\n', (),
     "model.name='llama3' model.flavor='debugmodel' is not a flavor codesign knows"),
    ('[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = 8\n',
     ("--gpus", "12"), "--gpus=12 is not a multiple of"),
    ('[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\nmode = "most"\n', (),
     "activation_checkpoint.mode='most' is not one of none, selective, full"),
    ('[model]\nname = "llama3"\n[parallelism\n', (), "is not valid TOML"),
])
def test_torchtitan_bad_input_is_one_line_exit_2(capsys, tmp_path, text, argv, message):
    path = tmp_path / "job.toml"
    path.write_text(text)
    rc, out, err = _cli(capsys, "import", "torchtitan", str(path), *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert message in err, err


def test_torchtitan_round_trips_to_an_estimate(capsys, tmp_path):
    out = tmp_path / "titan.toml"
    rc, _, err = _cli(capsys, "import", "torchtitan",
                      str(FIXTURES / "torchtitan" / "llama3_70b.toml"), "--out", str(out))
    assert rc == 0, err
    rc, printed, err = _cli(capsys, "estimate", str(out))
    assert rc == 0 and "step time" in printed, err


# ------------------------------------------------------------------ Hugging Face
@pytest.mark.parametrize("name, preset", [("llama3-8b.json", "llama3-8b"),
                                          ("mixtral-8x7b.json", "mixtral-8x7b"),
                                          ("deepseek-v3.json", "deepseek-v3")])
def test_hf_config_is_the_preset_of_its_model(name, preset):
    """A public checkpoint's config.json gives the model preset codesign cites for
    it, at the importer's assumed training sequence."""
    imp = _fixture("hf", name)
    model = _scenario(imp).model
    expected = eqx.tree_at(lambda m: (m.seq_len, m.mtp_layers), workload.model(preset),
                           (model.seq_len.astype(float), model.mtp_layers.astype(float)))
    assert _differences(model, expected) == {}
    assert "model.seq_len" in imp.assumed and "plan" in imp.assumed
    # DeepSeek-V3's num_nextn_predict_layers: one MTP depth (the preset leaves it out)
    assert float(model.mtp_layers) == (1.0 if preset == "deepseek-v3" else 0.0)


@pytest.mark.parametrize("name, params, windowed, window", [
    ("qwen3-32b.json", 32.8e9, None, None),  # use_sliding_window false: no window
    ("qwen3-30b-a3b.json", 30.5e9, None, None),
    ("gemma-2-9b.json", 9.24e9, 21, 4096),  # every other layer of 42, the first too
    ("gpt-oss-120b.json", 116.8e9, 18, 128),  # layer_types: sliding, full, ... x 18
])
def test_hf_public_configs_have_their_published_sizes(name, params, windowed, window):
    """The public config.json of Qwen3-32B, Qwen3-30B-A3B, Gemma-2-9B and
    GPT-OSS-120B: the model's parameters within 1% of the published totals, the
    windows as the families lay them out, every key not read listed as ignored."""
    imp = _fixture("hf", name)
    model = _scenario(imp).model
    assert abs(float(model.params()) / params - 1) < 0.01, float(model.params())
    m = imp.tables["model"]
    assert (m.get("window_layers"), m.get("window")) == (windowed, window)
    assert "rope_theta" in imp.ignored and "architectures" in imp.ignored
    assert not {"num_hidden_layers", "head_dim", "sliding_window", "model_type"} & \
        set(imp.ignored)
    assert "# ignored (not read by codesign): architectures," in imp.toml("test")


def test_hf_gpt_oss_and_deepseek_v3_specifics():
    gpt = _fixture("hf", "gpt-oss-120b.json")
    m = gpt.tables["model"]
    assert (m["gated"], m["attention_sinks"], m["experts"], m["top_k"], m["moe_layers"],
            m["expert_ffn_hidden"], m["head_dim"]) == (True, True, 128, 4, 36, 2880, 64)
    # mxfp4 is the release's storage, not a training recipe
    assert "training" not in gpt.tables and "quantization_config" in gpt.ignored
    assert "mxfp4" in gpt.assumed["quantization_config"]
    assert "experts_per_token" not in gpt.ignored  # read, with num_experts_per_tok
    assert float(_scenario(gpt).model.attention_params()) == \
        2 * 2880 * 64 * 64 + 2 * 2880 * 8 * 64 + 64  # Q, O, K, V and a sink per head
    deepseek = _fixture("hf", "deepseek-v3.json")
    assert deepseek.tables["model"]["mtp_layers"] == 1
    # topk_group 4 of n_group 8: node-limited routing to 4 nodes, said as assumed
    assert deepseek.tables["parallel"]["moe_node_limit"] == 4
    assert "topk_group 4" in deepseek.assumed["parallel.moe_node_limit"]


LAYERS4 = ('"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, '
           '"vocab_size": 1000')


@pytest.mark.parametrize("keys, expected, rule", [
    ('"model_type": "mistral", "sliding_window": 64', (4, 64, None), None),
    ('"model_type": "mistral", "sliding_window": null', None, None),
    ('"model_type": "phi3", "sliding_window": 64', (4, 64, None), "Mistral's rule"),
    ('"model_type": "gemma3_text", "sliding_window": 64, "sliding_window_pattern": 2',
     (2, 64, None), "sliding_window_pattern 2"),
    ('"model_type": "gemma3_text", "sliding_window": 64', (4, 64, None), "Gemma 3's 6"),
    ('"model_type": "gpt_oss", "sliding_window": 16', (2, 16, None), "GptOssConfig"),
    ('"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": false', None, None),
    ('"model_type": "qwen2", "sliding_window": 64, "use_sliding_window": true, '
     '"max_window_layers": 1', (3, 64, None), "max_window_layers 1"),
    ('"model_type": "qwen3", "sliding_window": 64, "use_sliding_window": true',
     None, None),  # Qwen2's default 28 full layers: none of 4 slides
    ('"sliding_window": 64, "layer_types": ["full_attention", "sliding_attention", '
     '"sliding_attention", "full_attention"]', (2, 64, None), None),
    ('"model_type": "llama4_text", "attention_chunk_size": 32, "no_rope_layers": [1, 1, 0, 1]',
     (3, 32, True), None),
    ('"model_type": "llama4_text", "attention_chunk_size": 32', (3, 32, True),
     "Llama 4's interval 4"),
    ('"attention_chunk_size": 32, "layer_types": ["chunked_attention", "chunked_attention", '
     '"chunked_attention", "full_attention"]', (3, 32, True), None),
])
def test_hf_window_rules(keys, expected, rule):
    imp = importers.hf("{" + LAYERS4 + ", " + keys + "}", "config.json")
    m = imp.tables["model"]
    got = (m["window_layers"], m["window"], m.get("chunked_attention")) \
        if "window_layers" in m else None
    assert got == expected
    assert (rule is None) == ("model.window_layers" not in imp.assumed)
    assert rule is None or rule in imp.assumed["model.window_layers"]
    _scenario(imp)


def test_hf_qwen_moe_counts_shared_experts_and_sparse_layers():
    text = ('{"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, '
            '"num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632, '
            '"vocab_size": 151936, "max_position_embeddings": 8192, "num_experts": 60, '
            '"num_experts_per_tok": 4, "moe_intermediate_size": 1408, '
            '"shared_expert_intermediate_size": 5632, "decoder_sparse_step": 2, '
            '"tie_word_embeddings": false, "head_dim": 64}')
    imp = importers.hf(text, "config.json", gpus=16)
    m = imp.tables["model"]
    assert (m["moe_layers"], m["experts"], m["top_k"], m["shared_experts"]) == (12, 60, 4, 4)
    assert m["head_dim"] == 64  # not hidden / heads = 128: read as given
    assert imp.tables["system"]["gpus"] == 16
    _scenario(imp)


def test_hf_bad_input_is_one_line_exit_2(capsys, tmp_path):
    path = tmp_path / "config.json"
    for text, message in (('{"hidden_size": 64}', "num_hidden_layers, num_attention_heads, "
                           "vocab_size missing"), ("{nope", "is not valid JSON (line 1"),
                          ("[1, 2]", "must hold a JSON object")):
        path.write_text(text)
        rc, out, err = _cli(capsys, "import", "hf", str(path))
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert message in err, err


GPT_OSS = (FIXTURES / "hf" / "gpt-oss-120b.json").read_text()
GEMMA2 = (FIXTURES / "hf" / "gemma-2-9b.json").read_text()


@pytest.mark.parametrize("text, message", [
    (GEMMA2.replace('"sliding_window": 4096', '"sliding_window": -3'),
     "sliding_window=-3 must be a whole number >= 0"),
    (GEMMA2.replace('"sliding_window": 4096', '"sliding_window": 0').replace(
        '"model_type": "gemma2"', '"layer_types": ' + json.dumps(
            ["sliding_attention", "full_attention"] * 21) + ', "model_type": "gemma2"'),
     "sliding_window=0 must be a whole number >= 1 for the 21 sliding_attention layers"),
    (GPT_OSS.replace('"full_attention"\n  ],', '"full_attention", "full_attention"\n  ],', 1),
     "layer_types must name the attention of each of the 36 layers (num_hidden_layers), "
     "not 37 entries"),
    (GPT_OSS.replace('"full_attention"', '"chunked_attention"', 1),
     "layer_types mixes sliding_attention and chunked_attention layers"),
    (GPT_OSS.replace('"full_attention"', '"linear_attention"', 1),
     "layer_types[1]='linear_attention' is not an attention codesign models"),
    (GPT_OSS.replace('"sliding_window": 128', '"sliding_window": null'),
     "sliding_window=None must be a whole number >= 1 for the 18 sliding_attention layers"),
    (GPT_OSS.replace('"experts_per_token": 4', '"experts_per_token": 2'),
     "experts_per_token=2 must equal num_experts_per_tok=4"),
    (GPT_OSS.replace('"num_hidden_layers": 36', '"num_hidden_layers": 36, '
                     '"num_nextn_predict_layers": -1'),
     "num_nextn_predict_layers=-1 must be a whole number >= 0"),
])
def test_hf_bad_windows_and_experts_are_one_line_exit_2(capsys, tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    rc, out, err = _cli(capsys, "import", "hf", str(path))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert message in err, err


def test_hf_round_trips_to_an_estimate(capsys, tmp_path):
    out = tmp_path / "hf.toml"
    rc, _, err = _cli(capsys, "import", "hf", str(FIXTURES / "hf" / "llama3-8b.json"),
                      "--set", "parallel.cp=2", "--set", "parallel.zero=1",
                      "--set", "training.dtype=fp8", "--out", str(out))
    assert rc == 0, err
    rc, printed, err = _cli(capsys, "estimate", str(out))
    assert rc == 0 and "step time" in printed, err


# ------------------------------------------------------------------ the command
def test_set_and_system_replace_what_would_be_assumed(capsys):
    rc, out, err = _cli(capsys, "import", "hf", str(FIXTURES / "hf" / "llama3-8b.json"),
                        "--system", "dgx-a100", "--gpus", "16", "--set", "model.seq_len=4096")
    assert rc == 0, err
    tables = tomllib.loads(out)
    assert tables["system"] == {"preset": "dgx-a100", "gpus": 16}
    assert tables["model"]["seq_len"] == 4096
    assert "# set: model.seq_len=4096" in out
    assert "assumed: system" not in out and "assumed: model.seq_len" not in out


@pytest.mark.parametrize("argv, message", [
    (("import", "nemo"), "import nemo takes one FILE (NeMo recipe); got nothing"),
    (("import", "hf", "a.json", "b.json"), "import hf takes one FILE"),
    (("import", "hf", "missing.json"), "Hugging Face config 'missing.json' does not exist"),
    (("import", "megatron", "--gpus", "0", "--num-layers", "2"), "--gpus='0' must be a whole"),
    (("import", "megatron", "--num-layers", "2", "--out"), "--out needs a value"),
    (("import", "hf", "tests/fixtures/import/hf/llama3-8b.json", "--system", "dgx-z100"),
     "system preset 'dgx-z100' is unknown"),
    (("import", "hf", "tests/fixtures/import/hf/llama3-8b.json", "--set", "parallel.tp=3",
      "--gpus", "3"),
     "imports as a scenario codesign refuses: parallel.tp=3 must divide model.heads=32"),
    (("import", "hf", "tests/fixtures/import/hf/llama3-8b.json", "--out", "no/such/dir/x.toml"),
     "--out 'no/such/dir/x.toml': its folder 'no/such/dir' does not exist"),
])
def test_command_bad_input_is_one_line_exit_2(capsys, monkeypatch, argv, message):
    monkeypatch.chdir(Path(__file__).parents[1])
    rc, out, err = _cli(capsys, *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert message in err, err


def test_the_documented_import_is_what_the_command_prints(capsys, monkeypatch):
    """docs/inputs.md quotes `codesign import hf tests/fixtures/import/hf/llama3-8b.json`."""
    monkeypatch.chdir(Path(__file__).parents[1])
    page = (Path(__file__).parents[1] / "docs" / "inputs.md").read_text()
    quoted = page.split("# codesign import hf: ", 1)[1].split("```", 1)[0]
    rc, out, _ = _cli(capsys, "import", "hf", "tests/fixtures/import/hf/llama3-8b.json")
    assert rc == 0 and out == "# codesign import hf: " + quoted
