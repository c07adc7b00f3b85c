"""`codesign import` on hostile files (issue 46, one guard on every door): nesting
past 32 levels, a YAML alias bomb, a shell variable doubled until it fills memory,
a `--moe-layer-freq` nested past Python's stack, numbers of thousands of digits,
interpolations that multiply: each is one line naming the file (and the key or
flag), exit 2, no traceback and no hang. A UTF-8 byte-order mark is accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codesign import files, scenario
from codesign.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "import"
HF = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "vocab_size": 1024}
TITAN = '[model]\nname = "llama3"\nflavor = "8B"\n'
NEMO = ("trainer:\n  num_nodes: 1\n  devices: 8\nmodel:\n  num_layers: 2\n  hidden_size: 64\n"
        "  num_attention_heads: 8\n  encoder_seq_length: 128\n")
MEGATRON = "--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 128"
ZOO = ("MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 64\n  --num-attention-heads: 8\n"
       "  --seq-length: 128\n")


def _refused(capsys, *argv) -> str:
    """The one stderr line of `codesign ARGV`, which must refuse (exit 2, nothing
    printed, no traceback, no internal error)."""
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and out == "", (rc, err[:500])
    assert len(lines) == 1 and len(err.splitlines()) == 1, err[:500]
    assert "Traceback" not in err and "internal error" not in err, err[:500]
    return lines[0]


def _import_refused(capsys, tmp_path, kind: str, name: str, text: str, *words) -> str:
    """Write `text` to tmp_path/name, import it as `kind`: the refusal, naming the file."""
    path = tmp_path / name
    path.write_text(text)
    line = _refused(capsys, "import", kind, str(path), *words)
    assert name in line, line
    return line


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# ------------------------------------------------------------------ nesting
@pytest.mark.parametrize("kind, name, text, key", [
    ("hf", "config.json", _deep(100_000)[:100_000], None),  # never closes
    ("hf", "config.json", json.dumps({**HF, "extra": json.loads(_deep(40))}), "extra"),
    ("torchtitan", "job.toml", f"deep = {_deep(5000)}\n{TITAN}", None),
    ("torchtitan", "job.toml", f"deep = {_deep(40)}\n{TITAN}", "deep"),
    ("nemo", "recipe.yaml", f"{NEMO}  extra: {_deep(20_000)}\n", None),
    ("nemo", "recipe.yaml", NEMO + "  extra: " + "{a: " * 40 + "1" + "}" * 40 + "\n", None),
    ("megatron", "zoo.yaml", f"{ZOO}  --extra: {_deep(20_000)}\n", None),
])
def test_nesting_past_32_levels_is_one_line(capsys, tmp_path, kind, name, text, key):
    line = _import_refused(capsys, tmp_path, kind, name, text)
    assert "more than 32 levels deep" in line, line
    if key is not None:
        assert key in line, line


def test_32_levels_still_read(tmp_path):
    """The cap is the scenario reader's: 32 levels of lists import."""
    assert files.MAX_DEPTH == scenario.MAX_TOML_DEPTH == 32
    tree = files.parse_json(json.dumps({"a": json.loads(_deep(31))}), "x.json")
    assert tree["a"] == json.loads(_deep(31))
    assert files.parse_yaml(f"a: {_deep(31)}\n", "x.yaml")["a"] == json.loads(_deep(31))


# ------------------------------------------------------------------ YAML aliases
def _alias_bomb(key: str, indent: str) -> str:
    """Billion laughs: nine levels of anchors, each a list of nine aliases of the last."""
    lines = [f'{indent}l0: &l0 ["lol"]']
    lines += [f"{indent}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines) + f"\n{indent}{key}: *l9\n"


def test_a_yaml_alias_bomb_is_one_line(capsys, tmp_path):
    line = _import_refused(capsys, tmp_path, "nemo", "recipe.yaml",
                           NEMO + _alias_bomb("window_size", "  "))
    assert "YAML aliases" in line and "model." in line, line
    line = _import_refused(capsys, tmp_path, "megatron", "zoo.yaml",
                           ZOO.replace("  --num-layers: 2\n", "") + _alias_bomb(
                               "--num-layers", "  "))
    assert "YAML aliases" in line, line


def test_yaml_anchors_and_merges_of_a_sane_size_still_import(capsys, tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("shape: &shape\n  num_layers: 2\n  hidden_size: 64\n"
                    "model:\n  <<: *shape\n  num_attention_heads: 8\n  encoder_seq_length: 128\n"
                    "  window_size: &w [16, 0]\nagain: *w\n")
    capsys.readouterr()
    assert main(["import", "nemo", str(path)]) == 0, capsys.readouterr().err
    assert "window = 16" in capsys.readouterr().out


def test_a_recursive_yaml_alias_is_one_line(capsys, tmp_path):
    _import_refused(capsys, tmp_path, "nemo", "recipe.yaml", NEMO + "  loop: &a [*a]\n")


# ------------------------------------------------------------------ Megatron
def test_shell_variable_doubling_is_one_line(capsys, tmp_path):
    text = "A=x\n" + "A=$A$A\n" * 40 + MEGATRON + " --train-iters $A\n"
    line = _import_refused(capsys, tmp_path, "megatron", "train.sh", text)
    assert "$A" in line, line
    text = "B=" + "y" * 60_000 + "\n" + MEGATRON + " --foo" + " $B" * 100 + "\n"
    line = _import_refused(capsys, tmp_path, "megatron", "train.sh", text)
    assert "$B" in line, line


@pytest.mark.parametrize("freq", ["+".join(["[1]"] * 50_000), "(" * 150 + "[1]" + ")" * 150,
                                  "[1]" + "*1" * 5000, "[1]*100000+[1]*100000",
                                  "[1]*10**9"])
def test_a_moe_layer_freq_past_python_s_stack_is_one_line(capsys, tmp_path, freq):
    args = [*MEGATRON.split(), "--num-experts", "4", "--moe-layer-freq", freq]
    line = _refused(capsys, "import", "megatron", *args)
    assert "--moe-layer-freq" in line and len(line) < 300, line
    line = _import_refused(capsys, tmp_path, "megatron", "train.sh",
                           " ".join(args[:-1]) + f" '{freq}'\n")
    assert "--moe-layer-freq" in line, line


def test_a_long_moe_layer_sum_is_read_without_recursion(capsys):
    """A sum of a thousand lists, as deep an expression, is read (Megatron's eval)."""
    freq = "+".join(["[0,1]"] * 500)
    capsys.readouterr()
    rc = main(["import", "megatron", "--num-layers", "1000", "--hidden-size", "64",
               "--num-attention-heads", "8", "--seq-length", "128", "--num-experts", "4",
               "--moe-layer-freq", freq])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "moe_layers = 500" in out


def test_a_flag_without_its_value_is_named(capsys, tmp_path):
    line = _refused(capsys, "import", "megatron", "--hidden-size", "64",
                    "--num-attention-heads", "8", "--seq-length", "128", "--num-layers")
    assert "--num-layers needs a value" in line and "True" not in line, line
    line = _import_refused(capsys, tmp_path, "megatron", "train.sh",
                           "--num-layers --hidden-size 64 --num-attention-heads 8 "
                           "--seq-length 128\n")
    assert "--num-layers needs a value" in line, line


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("kind, name, text, key", [
    ("hf", "config.json", json.dumps(HF).replace('"vocab_size": 1024',
                                                 '"vocab_size": ' + "7" * 5000), "vocab_size"),
    ("hf", "config.json", json.dumps({**HF, "seed": 0}).replace('"seed": 0',
                                                                '"seed": ' + "7" * 2000), "seed"),
    ("torchtitan", "job.toml", TITAN + "[training]\nsteps = " + "7" * 5000 + "\n", "steps"),
    ("torchtitan", "job.toml", TITAN + "[training]\nsteps = 0x" + "f" * 5000 + "\n",
     "training.steps"),
    ("nemo", "recipe.yaml", NEMO.replace("num_layers: 2", "num_layers: " + "7" * 5000),
     "num_layers"),
    ("nemo", "recipe.yaml", NEMO + "  seed: " + "7" * 2000 + "\n", "model.seed"),
    ("megatron", "zoo.yaml", ZOO.replace("--num-layers: 2", "--num-layers: " + "7" * 5000),
     "--num-layers"),
    ("megatron", "train.sh", MEGATRON.replace("--num-layers 2", "--num-layers " + "7" * 5000),
     "--num-layers"),
])
def test_a_number_of_thousands_of_digits_names_its_key(capsys, tmp_path, kind, name, text, key):
    line = _import_refused(capsys, tmp_path, kind, name, text)
    assert key in line and "sys.set_int_max_str_digits" not in line and len(line) < 300, line


def test_a_count_past_the_gpus_codesign_models_blames_the_key_written(capsys, tmp_path):
    line = _import_refused(capsys, tmp_path, "nemo", "recipe.yaml",
                           NEMO.replace("num_nodes: 1", "num_nodes: 1e11"))
    assert "trainer.num_nodes" in line and "system.gpus" not in line, line


def test_a_list_where_a_number_is_expected_says_so(capsys, tmp_path):
    line = _import_refused(capsys, tmp_path, "nemo", "recipe.yaml",
                           NEMO.replace("num_layers: 2", "num_layers: [32]"))
    assert "model.num_layers" in line and "whole number" in line and "missing" not in line, line
    line = _import_refused(capsys, tmp_path, "hf", "config.json",
                           json.dumps({**HF, "num_hidden_layers": [32]}))
    assert "num_hidden_layers" in line and "whole number" in line, line


# ------------------------------------------------------------------ other doors
def test_interpolations_that_multiply_are_one_line(capsys, tmp_path):
    """OmegaConf interpolations, each level three of the next (a 3^6-fold value;
    from a 2 MB file, 1.5 GB): refused past a MiB, in one short line."""
    refs = [f"  v{i}: " + ("${.v" + str(i + 1) + "}") * 3 for i in range(6)]
    text = NEMO.replace("num_layers: 2", "num_layers: ${.v0}") + "\n".join(refs) + \
        "\n  v6: " + "x" * 2000 + "\n"
    line = _import_refused(capsys, tmp_path, "nemo", "recipe.yaml", text)
    assert "model.num_layers='${.v0}'" in line and "more than" in line, line
    text = text.replace("${.v6}" * 3, "${.v6}")  # 3^5 x 2000: a 486 kB value, resolved
    line = _import_refused(capsys, tmp_path, "nemo", "recipe.yaml", text)
    assert "model.num_layers='xxxx" in line and "must be a whole number" in line, line


@pytest.mark.parametrize("kind, name, text", [
    ("hf", "config.json", json.dumps({**HF, "num_hidden_layers": 2**53, "num_local_experts": 8,
                                      "num_experts_per_tok": 2})),
    ("hf", "config.json", json.dumps({**HF, "num_local_experts": 8, "mlp_only_layers": [[1]]})),
    ("torchtitan", "job.toml", TITAN.replace('flavor = "8B"', 'flavor = "8B"\nconverters = 5')),
    ("nemo", "recipe.yaml", NEMO + "  7: 3\n"),
])
def test_odd_values_are_one_line_or_read(capsys, tmp_path, kind, name, text):
    """Values of the wrong shape (a layer count for which a list would not fit in
    memory, a list of lists, a number for a list, a number for a key) are read or
    refused in one line, never a fault or a hang."""
    path = tmp_path / name
    path.write_text(text)
    capsys.readouterr()
    rc = main(["import", kind, str(path)])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "internal error" not in err and "Traceback" not in err, err
    assert rc == 0 or (len(err.splitlines()) == 1 and name in err), err


def test_texts_that_would_make_a_scanner_quadratic_are_read_at_once(capsys, tmp_path):
    """Unclosed `${NAME:-` by the hundred thousand (the shell expander), digit runs
    just short of the cap before a long number (the number finder): each read once,
    not rescanned from every position (minutes before)."""
    path = tmp_path / "train.sh"
    path.write_text(MEGATRON + " ${A:-" * 200_000 + "\n")
    capsys.readouterr()
    assert main(["import", "megatron", str(path)]) == 0, capsys.readouterr().err
    text = json.dumps({**HF, "note": ("9" * 999 + " ") * 2000}).replace(
        '"vocab_size": 1024', '"vocab_size": ' + "7" * 5000)
    line = _import_refused(capsys, tmp_path, "hf", "config.json", text)
    assert "vocab_size (line 1) holds an integer of more than 1000 digits" in line, line


# ------------------------------------------------------------------ byte-order mark
def test_a_byte_order_mark_is_accepted(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text("\ufeff" + (FIXTURES / "hf" / "llama3-8b.json").read_text(), "utf-8")
    capsys.readouterr()
    assert main(["import", "hf", str(path)]) == 0, capsys.readouterr().err
    toml = tmp_path / "default.toml"
    builtin = Path(scenario.__file__).parent / "scenarios" / "default.toml"
    toml.write_text("\ufeff" + builtin.read_text(), "utf-8")
    assert scenario.read(toml) == scenario.read(builtin)
    scenario.load(toml)
