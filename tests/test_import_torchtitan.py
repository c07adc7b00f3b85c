"""`codesign import torchtitan`: an entry of torchtitan's config registry named as
its command line names it (`--module llama3 --config llama3_70b`, then overrides),
read by the same mapping as an old job TOML; the importer's tables checked against
the registry's source (tests/fixtures/import/torchtitan/*.py, trimmed copies)."""

from __future__ import annotations

import ast
import json
import math
import tomllib
from pathlib import Path

import pytest

from codesign import importers, scenario
from codesign.cli import main
from codesign.importers.torchtitan import DEFAULTS, REGISTRY, torchtitan_words

FIXTURES = Path(__file__).parent / "fixtures" / "import" / "torchtitan"
# the registry's config dataclasses and activation-checkpointing policies, by the
# names torchtitan's command line gives them
SECTIONS = {"TrainingConfig": "training", "ParallelismConfig": "parallelism",
            "CompileConfig": "compile"}
POLICIES = {"SelectiveAC": "selective", "FullAC": "full"}


def _scenario(imported: importers.Imported) -> scenario.Scenario:
    """What `codesign estimate` reads of the TOML the import writes."""
    return scenario.from_tables(tomllib.loads(imported.toml("test")))


def _words(text: str, **options) -> importers.Imported:
    return torchtitan_words(text.split(), **options)


# ------------------------------------------------------------------ the source's values
def _literal(node: ast.expr):
    """A constant expression of the source (`4 * 4096`, a list of strings)."""
    return eval(compile(ast.Expression(node), "<fixture>", "eval"), {})


def _name(node: ast.expr) -> str:
    """`f` of a call `f(...)` or `C.Config(...)` (then `C`)."""
    func = node.func
    return func.id if isinstance(func, ast.Name) else _name_of(func.value)


def _name_of(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr


def _values(node: ast.expr, env: dict) -> dict:
    """The registry values (section.key: value) an expression of an entry sets."""
    if isinstance(node, ast.Name):
        return dict(env.get(node.id, {}))
    if not isinstance(node, ast.Call):
        return {}
    name = _name(node)
    keywords = {k.arg: k.value for k in node.keywords}
    if name == "model_registry":
        out = {"model.flavor": _literal(node.args[0])}
        if "converters" in keywords:
            out["model.converters"] = [_name(c) for c in keywords["converters"].elts]
        return out
    if name in SECTIONS:
        return {f"{SECTIONS[name]}.{k}": _literal(v) for k, v in keywords.items()}
    if name in POLICIES:
        return {"activation_checkpoint.mode": POLICIES[name]}
    if name == "Trainer":
        out = {}
        for key in ("model_spec", "training", "parallelism", "compile", "activation_checkpoint"):
            if key in keywords:
                out |= _values(keywords[key], env)
        return out
    return {}


def _entry(functions: dict, name: str) -> dict:
    """The values a config function returns: its Trainer.Config, or another
    entry's with the attributes it assigns."""
    env: dict = {}
    for stmt in functions[name].body:
        if isinstance(stmt, ast.Return):
            return _values(stmt.value, env)
        if not isinstance(stmt, ast.Assign):
            continue
        target, value = stmt.targets[0], stmt.value
        if isinstance(target, ast.Name):
            called = isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            env[target.id] = (_entry(functions, value.func.id)
                              if called and value.func.id in functions else _values(value, env))
            continue
        path = ast.unparse(target).split(".")
        values, field = env[path[0]], ".".join(path[1:])
        section = "model" if field == "model_spec" else field
        if "." in field:
            values[field] = _literal(value)
        else:  # a whole section (or the model spec) replaced
            env[path[0]] = {k: v for k, v in values.items()
                            if not k.startswith(f"{section}.")} | _values(value, env)
    raise AssertionError(f"{name} returns nothing")


def _registry(module: str) -> dict:
    """{config function: ((model.name, flavor), values)} of a registry fixture."""
    tree = ast.parse((FIXTURES / f"{module}_config_registry.py").read_text())
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    out = {}
    for name in functions:
        values = _entry(functions, name)
        out[name] = ((module, values.pop("model.flavor")), values)
    return out


def _defaults() -> dict:
    """{section: {field: default}} of the config dataclasses of configs.py."""
    tree = ast.parse((FIXTURES / "configs.py").read_text())
    out = {}
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef) and c.name in SECTIONS):
        fields = {}
        for stmt in (s for s in cls.body if isinstance(s, ast.AnnAssign) and s.value):
            value = stmt.value
            if isinstance(value, ast.Call):  # field(default_factory=lambda: ...)
                value = value.keywords[0].value.body
            fields[stmt.target.id] = _literal(value)
        out[SECTIONS[cls.name]] = fields
    return out


def test_the_tables_restate_the_registry_source():
    """Every entry codesign supports is the fixture's function (its flavor, token
    counts, degrees, policy, converters, compile), and every one of the fixture's
    functions is supported; the defaults are the dataclasses' (every field)."""
    modules = sorted({m for m, _ in REGISTRY})
    source = {(m, f): v for m in modules for f, v in _registry(m).items()}
    assert source == REGISTRY
    assert _defaults() == {k: v for k, v in DEFAULTS.items() if k != "activation_checkpoint"}


# ------------------------------------------------------------------ the entries
@pytest.mark.parametrize("module, config", list(REGISTRY), ids=[c for _, c in REGISTRY])
def test_every_registry_entry_imports_to_a_scenario_that_loads(module, config):
    imp = _words(f"--module {module} --config {config}")
    text = imp.toml("test")
    assert tomllib.loads(text) == imp.tables
    scn = _scenario(imp)
    (name, flavor), values = REGISTRY[(module, config)]
    assert float(scn.model.seq_len) == values["training.max_context_length"]
    tokens = values.get("training.num_tokens_per_microbatch_per_dp_rank", 16384)
    assert float(scn.plan.micro_batch) * float(scn.model.seq_len) == tokens
    assert float(scn.system.gpus) == 8 and "NGPU 8" in imp.assumed["system.gpus"]
    assert imp.where == f"torchtitan --module {module} --config {config}"


def test_registry_entries_read_the_plan_the_function_sets():
    big = _words("--module llama3 --config llama3_405b", gpus=512)
    scn = _scenario(big)
    assert (float(scn.plan.tp), float(scn.plan.dp), scn.plan.zero.name, scn.plan.dtype) == \
        (8.0, 64.0, 3, "fp8")
    assert (float(scn.plan.tp_overlap), scn.plan.recompute.name, scn.plan.cuda_graphs) == \
        (1.0, "full", "iteration")  # compile.enable_async_tensor_parallel; CUDA graphs on
    assert (float(scn.plan.micro_batch), float(scn.plan.global_batch)) == (2.0, 128.0)
    assert big.ignored == ("compile.enable",)
    mx = _words("--module llama3 --config llama3_8b_mxfp8")
    assert mx.tables["training"]["dtype"] == "fp8" and "MXFP8" in mx.assumed["training.dtype"]
    moe = _scenario(_words("--module deepseek_v3 --config deepseek_v3_16b"))
    assert (float(moe.plan.ep), float(moe.plan.dp), moe.plan.cuda_graphs) == (8.0, 8.0, "none")


@pytest.mark.parametrize("config, params", [("gpt_oss_20b", 21e9), ("gpt_oss_120b", 117e9)])
def test_gpt_oss_flavours_have_their_published_sizes(config, params):
    """OpenAI's model card: 21B and 117B parameters; 120b's count is that of
    its config.json read by the hf importer."""
    model = _scenario(_words(f"--module gpt_oss --config {config}")).model
    assert abs(float(model.params()) / params - 1) < 0.01
    if config == "gpt_oss_120b":
        hf = importers.from_file("hf", FIXTURES.parent / "hf" / "gpt-oss-120b.json")
        assert float(_scenario(hf).model.params()) == float(model.params())


def test_qwen3_and_deepseek_16b_import_from_the_job_file_and_the_registry():
    """The flavours a user reported refused: the same model either way."""
    for toml, words in (("qwen3_32b.toml", "--module qwen3 --config qwen3_32b"),
                        ("deepseek_v3_16b.toml", "--module deepseek_v3 --config deepseek_v3_16b")):
        old, new = torchtitan_words([str(FIXTURES / toml)]), _words(words)
        assert old.tables["model"] == new.tables["model"]
        assert _scenario(new).model.params() == _scenario(old).model.params()


def test_the_job_file_path_is_the_file_import():
    for path in sorted(FIXTURES.glob("*.toml")):
        for gpus in (None, 128):
            assert torchtitan_words([str(path)], gpus=gpus) == \
                importers.from_file("torchtitan", path, gpus=gpus)


# ------------------------------------------------------------------ overrides
def test_overrides_in_every_form_torchtitan_reads():
    imp = _words("NGPU=64 MODULE=torchtitan.models.llama3 CONFIG=llama3_70b ./run_train.sh "
                 "--parallelism.data_parallel_shard_degree=4 "
                 "--parallelism.data-parallel-replicate-degree 2 "
                 "--training.num_tokens_per_microbatch_per_dp_rank 16384 "
                 "--compile.enable_async_tensor_parallel activation_checkpoint:selective "
                 "--parallelism.no_enable_sequence_parallel --metrics.log_freq 5 "
                 "--profiler.enable_profiling --training.steps=10 --dump_folder /tmp/out")
    scn = _scenario(imp)
    assert (float(scn.system.gpus), float(scn.plan.dp), float(scn.plan.zero_shard_size)) == \
        (64.0, 8.0, 4.0)
    assert (float(scn.plan.micro_batch), float(scn.plan.global_batch)) == (2.0, 16.0)
    assert (scn.plan.recompute.name, float(scn.plan.tp_overlap)) == ("selective", 1.0)
    assert not bool(scn.plan.sequence_parallel)  # --parallelism.no_enable_sequence_parallel
    assert imp.tables["training"]["tokens"] == 10 * 16 * 8192
    assert imp.ignored == ("metrics.log_freq", "profiler.enable_profiling", "dump_folder")
    assert "system.gpus" not in imp.assumed  # NGPU gave it


def test_pipeline_overrides_count_microbatches_and_need_cuda_graphs_off():
    imp = _words("--module llama3 --config llama3_70b --parallelism.pipeline_parallel_degree 4 "
                 "--parallelism.num_pp_microbatches 8 --parallelism.tensor_parallel_degree 2 "
                 "--parallelism.pipeline_parallel_schedule Interleaved1F1B "
                 "--parallelism.pipeline_parallel_layers_per_stage 5 "
                 "--training.disable_cuda_graphs --training.num_tokens_per_train_step 8388608",
                 gpus=64)
    scn = _scenario(imp)
    assert (float(scn.plan.pp), float(scn.plan.tp), float(scn.plan.dp)) == (4.0, 2.0, 8.0)
    assert (scn.plan.schedule.name, float(scn.plan.interleave)) == ("interleaved", 4.0)
    assert (float(scn.plan.micro_batch), float(scn.plan.global_batch)) == (8.0, 1024.0)
    assert scn.plan.cuda_graphs == "none"
    with pytest.raises(ValueError, match="training.disable_cuda_graphs=False with "
                       "pipeline_parallel_degree 2"):
        _words("--module llama3 --config llama3_8b --parallelism.pipeline_parallel_degree 2")


@pytest.mark.parametrize("words, message", [
    ("--module llama3 --config llama3_debugmodel",
     "torchtitan --module llama3 --config llama3_debugmodel is not a registry entry codesign "
     "knows (llama3 llama3_8b; llama3 llama3_8b_mxfp8;"),
    ("--module llama3", "torchtitan: --config is required"),
    ("--module llama3 --config llama3_8b --parallelism.tensor_parallel 2",
     "torchtitan: --parallelism.tensor_parallel is not an option of torchtitan's parallelism"),
    ("--module llama3 --config llama3_8b --model.flavor 70B",
     "torchtitan: --model.flavor is not a torchtitan option"),
    ("--module llama3 --config llama3_8b activation_checkpoint:memory-budget",
     "torchtitan: activation_checkpoint='memory-budget' is not a policy codesign reads"),
    ("--module llama3 --config llama3_8b --compile.enable_async_tensor_parallel=false",
     "--compile.enable_async_tensor_parallel='false' takes no value"),
    ("--module llama3 --config llama3_8b --parallelism.tensor_parallel_degree two",
     "parallelism.tensor_parallel_degree='two' must be a whole number"),
    ("--module llama3 --config llama3_8b --training.max_context_length 3000",
     "training.num_tokens_per_microbatch_per_dp_rank=8192 is not a whole number of sequences"),
    ("--module qwen3 --config qwen3_32b --parallelism.pipeline_parallel_schedule Zigzag "
     "--parallelism.pipeline_parallel_degree 2 --training.disable_cuda_graphs",
     "parallelism.pipeline_parallel_schedule='Zigzag' is not a schedule codesign knows"),
    ("--module llama3 --config llama3_8b --parallelism.tensor_parallel_degree",
     "torchtitan: --parallelism.tensor_parallel_degree needs a value"),
    ("--module llama3 --config llama3_8b 8", "torchtitan: '8' is not a torchtitan option"),
    ("--module llama3 --config llama3_8b --dump_folder.x 1",
     "torchtitan: --dump_folder.x is not a torchtitan option"),
    ("--module llama3 --config llama3_70b --training.num_tokens_per_train_step 81920",
     "training.num_tokens_per_train_step=81920 must be a multiple of"),
])
def test_refusals_are_one_line(words, message):
    with pytest.raises(ValueError) as e:
        _words(words)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_registry_entry_round_trips_to_an_estimate(capsys, tmp_path):
    out = tmp_path / "titan.toml"
    out.write_text(_words("--module qwen3 --config qwen3_30b_a3b").toml("test"))
    capsys.readouterr()
    rc = main(["estimate", str(out), "--json"])
    printed, err = capsys.readouterr()
    assert rc == 0, err
    assert math.isfinite(float(json.loads(printed)["step_time_s"]))
