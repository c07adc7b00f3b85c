"""`codesign program` on hostile input (issue 46): the user's own module, builder and
step failing in every way Python allows, extents XLA would abort on, meshes named
twice or empty, a spec nested past the cap, times that rounding would make
negative. Each ends as one line on stderr and exit 2 (the user's error or bad
input), never a traceback or "a bug in codesign". Most fail before anything
compiles; the one that compiles traces a two-op step."""

import functools
import json
import sys

import jax
import pytest

from codesign.cli import main
from codesign.program import _user
from codesign.program import spec as program_spec

ARGS_SPEC = '[mesh]\ndp = 8\n[[args]]\nshape = [64, 32]\nsharding = ["dp"]\n'
MESH_SPEC = "[mesh]\ndp = 8\n"
OK_STEP = "def step(x):\n    return (x * 2.0).sum()\n"


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _fails(capsys, argv, code: int = 2) -> str:
    """Run the command; it must exit `code` with one non-empty stderr line, no
    traceback and no claim of a bug in codesign. Returns that line."""
    got = main(["program", *argv])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code, (argv, got, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert "bug in codesign" not in err, err
    assert out == "", out
    return lines[0]


def _user_step(tmp_path, capsys, name: str, body: str, spec: str = ARGS_SPEC) -> str:
    """The line for a step module `name`.py (`body`) traced on the spec's [[args]]."""
    module = _write(tmp_path, f"{name}.py", body)
    spec_path = _write(tmp_path, f"{name}.toml", spec)
    return _fails(capsys, [f"{module}:step", "--spec", str(spec_path), "--json"])


# the user's module failing as it imports: their error, named by file and <module>
@pytest.mark.parametrize("name, body, words", [
    ("syntax46", "def step(x):\n    return (x *\n", "SyntaxError: '(' was never closed"),
    ("importerr46", "import no_such_module_46\n", "ModuleNotFoundError: No module named"),
    ("atimport46", "raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    ("exits46", "import sys\nsys.exit(3)\n", "SystemExit: 3"),
])
def test_a_module_that_fails_to_import_is_the_users_error(tmp_path, capsys, name, body, words):
    line = _user_step(tmp_path, capsys, name, body + OK_STEP)
    assert f"{tmp_path / name}.py:<module>: {words}" in line, line
    assert name not in sys.modules  # a failed module is not left registered


# the user's step failing while JAX traces it: named by file and function
@pytest.mark.parametrize("name, body, words", [
    ("runtime46", "def step(x):\n    raise RuntimeError('boom in step')\n",
     "RuntimeError: boom in step"),
    ("recursion46", "def step(x):\n    return step(x)\n", "RecursionError: maximum recursion"),
    ("memory46", "def step(x):\n    raise MemoryError('out of memory')\n",
     "MemoryError: out of memory"),
    ("value46", "def step(x):\n    raise ValueError('bad value in step')\n",
     "ValueError: bad value in step"),
    ("tracer46", "def step(x):\n    if x.sum() > 0:\n        return x\n    return -x\n",
     "TracerBoolConversionError"),
    ("unprintable46", "class E(Exception):\n    def __str__(self):\n        raise TypeError\n"
                      "def step(x):\n    raise E()\n", "E"),
])
def test_a_step_that_raises_is_the_users_error(tmp_path, capsys, name, body, words):
    line = _user_step(tmp_path, capsys, name, body)
    assert f"{tmp_path / name}.py:step: {words}" in line, line


def test_a_step_that_exits_is_an_error_not_an_empty_answer(tmp_path, capsys):
    """SystemExit(0) in the step: exit 2 and no stdout under --json, not exit 0."""
    line = _user_step(tmp_path, capsys, "exit46", "def step(x):\n    raise SystemExit(0)\n")
    assert f"{tmp_path / 'exit46'}.py:step: SystemExit: 0" in line, line


def test_ctrl_c_in_the_step_stays_an_interrupt(tmp_path, capsys):
    """The boundary lets Ctrl-C through: the command's own exit 130."""
    module = _write(tmp_path, "interrupt46.py", "def step(x):\n    raise KeyboardInterrupt\n")
    spec_path = _write(tmp_path, "interrupt46.toml", ARGS_SPEC)
    line = _fails(capsys, [f"{module}:step", "--spec", str(spec_path)], code=130)
    assert line == "codesign program: interrupted", line


def test_a_step_returning_none_or_a_class_names_the_users_function(tmp_path, capsys):
    line = _user_step(tmp_path, capsys, "none46", "def step(x):\n    return None\n")
    assert f"{tmp_path / 'none46'}.py:step: returned no arrays" in line, line
    line = _user_step(tmp_path, capsys, "class46",
                      "class step:\n    def __init__(self, x):\n        self.x = x\n")
    assert f"{tmp_path / 'class46'}.py:step: is a class, not a function" in line, line
    assert "MODULE:FUNCTION=" not in line  # not as if codesign refused its input


@pytest.mark.parametrize("name, body", [
    ("bigzeros46", "import jax.numpy as jnp\ndef step(x):\n"
                   "    return jnp.zeros((10**12, 10**12)).sum() + x.sum()\n"),
    ("bigscan46", "import jax, jax.numpy as jnp\ndef step(x):\n"
                  "    body = lambda c, _: (c + jnp.ones((2**31, 2**30), c.dtype).sum(), None)\n"
                  "    return jax.lax.scan(body, x.sum(), None, length=2)[0]\n"),
])
def test_a_step_making_an_array_xla_aborts_on_is_refused(tmp_path, capsys, name, body):
    """XLA aborts the process compiling such an array: refused after tracing, before."""
    line = _user_step(tmp_path, capsys, name, body)
    assert f"{tmp_path / name}.py:step: makes a float" in line and "past the 2**60" in line


def test_a_long_message_is_cut_to_one_short_line(tmp_path, capsys):
    body = "def step(x):\n    raise RuntimeError('x' * 100000 + '\\nsecond line')\n"
    line = _user_step(tmp_path, capsys, "long46", body)
    assert "RuntimeError: xxx" in line and "second line" not in line
    assert len(line) < 1000, len(line)


# the builder: what it raises and what it returns
@pytest.mark.parametrize("name, body, words", [
    ("brt46", "def build(mesh):\n    raise RuntimeError('builder broke')\n",
     "build: RuntimeError: builder broke"),
    ("btype46", "def build(mesh, **config):\n    raise TypeError('inside the builder')\n",
     "build: TypeError: inside the builder"),
    ("bexit46", "def build(mesh):\n    raise SystemExit(1)\n", "build: SystemExit: 1"),
    ("bfour46", "def build(mesh):\n    return (1, 2, 3, 4)\n",
     "build: returned a step that is 1 (int), not a function"),
    ("bnone46", "def build(mesh):\n    return None\n", "build: returned None (NoneType)"),
    ("bargs46", "def build(mesh):\n    return (lambda x: x, 3, None, None)\n",
     "build: returned args that are 3 (int)"),
    ("bhuge46", "import jax\ndef build(mesh):\n    x = jax.ShapeDtypeStruct((10**12, 10**12), "
                "'float32')\n    return (lambda x: x.sum(), (x,), None, None)\n",
     "build: returned args, array 0: shape=[1000000000000, 1000000000000] holds"),
])
def test_a_builder_that_fails_is_the_users_error(tmp_path, capsys, name, body, words):
    module = _write(tmp_path, f"{name}.py", body)
    spec_path = _write(tmp_path, f"{name}.toml", MESH_SPEC)
    line = _fails(capsys, [f"{module}:build", "--spec", str(spec_path)])
    assert f"{module}:{words}" in line, line


def test_config_keys_named_like_the_boundarys_arguments_reach_the_builder():
    got = _user.call(None, lambda mesh, **config: config, "mesh", where=1, fn=2)
    assert got == {"where": 1, "fn": 2}


def test_a_config_the_builder_does_not_take_names_the_spec(tmp_path, capsys):
    module = _write(tmp_path, "bconfig46.py", "def build(mesh, layers=1):\n    return 0\n")
    spec_path = _write(tmp_path, "bconfig46.toml", MESH_SPEC + "[config]\nlayer = 2\n")
    line = _fails(capsys, [f"{module}:build", "--spec", str(spec_path)])
    assert "[config] ['layer']" in line and "unexpected keyword argument 'layer'" in line, line


def test_arguments_the_step_does_not_take_name_the_spec(tmp_path, capsys):
    line = _user_step(tmp_path, capsys, "twoargs46", "def step(x, y):\n    return x + y\n")
    assert "the spec's 1 [[args]] arrays" in line and "missing a required argument" in line


def test_a_dotted_module_missing_or_failing(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, "dotted46.py", "raise RuntimeError('dotted boom')\n")
    line = _fails(capsys, ["dotted46:step", "--mesh", "dp=8"])
    assert "dotted46:<module>: RuntimeError: dotted boom" in line, line
    line = _fails(capsys, ["nomodule46.sub:step", "--mesh", "dp=8"])
    assert "cannot import 'nomodule46.sub'" in line, line


# extents from the spec, checked before XLA sees them (it aborts the process)
@pytest.mark.parametrize("shape, words", [
    ("[1000000000000, 1000000000000]", "args[0].shape=[1000000000000, 1000000000000] holds"),
    ("[1099511627776, 2]", "args[0].shape=[1099511627776, 2] holds"),
    ("[0, 4]", "args[0].shape=[0, 4] must be a list of positive integers"),
    ("[-1]", "args[0].shape=[-1] must be a list of positive integers"),
    ("8", "args[0].shape=8 must be a list of positive integers"),
    ("[true]", "args[0].shape=[True] must be a list of positive integers"),
])
def test_a_spec_shape_past_the_bound_is_refused_before_tracing(tmp_path, capsys, shape, words):
    module = _write(tmp_path, "okstep46.py", OK_STEP)
    spec_path = _write(tmp_path, "shape46.toml", f"[mesh]\ndp = 8\n[[args]]\nshape = {shape}\n")
    line = _fails(capsys, [f"{module}:step", "--spec", str(spec_path)])
    assert words in line, line


def test_a_long_shape_is_echoed_short(tmp_path, capsys):
    module = _write(tmp_path, "okstep46.py", OK_STEP)
    shape = "[" + ", ".join(["1"] * 5000 + [str(2**41)]) + "]"
    spec_path = _write(tmp_path, "long46.toml", f"[mesh]\ndp = 8\n[[args]]\nshape = {shape}\n")
    line = _fails(capsys, [f"{module}:step", "--spec", str(spec_path)])
    assert "args[0].shape=[1, 1, 1" in line and "holds 8.8e+12 bytes" in line, line
    assert len(line) < 1000, len(line)


def test_the_extent_bound_is_2_to_the_40_bytes():
    program_spec.check_extent([2**38], 4, "shape")  # 1 TiB exactly: allowed
    with pytest.raises(ValueError, match=r"shape=\[274877906945\] holds"):
        program_spec.check_extent([2**38 + 1], 4, "shape")
    assert program_spec.MAX_ARRAY_BYTES == 2**40


@pytest.mark.parametrize("extra, words", [
    ('dtype = "complex128"\n', "args[0].dtype='complex128'; choose one of"),
    ("dtype = 3\n", "args[0].dtype=3; choose one of"),
    ("sharding = 3\n", "args[0].sharding=3 must be a list of mesh axis names"),
    ("shard = []\n", "args[0].shard is unknown"),
])
def test_a_malformed_args_table_is_one_line(tmp_path, capsys, extra, words):
    module = _write(tmp_path, "okstep46.py", OK_STEP)
    spec_path = _write(tmp_path, "args46.toml",
                       f"[mesh]\ndp = 8\n[[args]]\nshape = [8, 4]\n{extra}")
    assert words in _fails(capsys, [f"{module}:step", "--spec", str(spec_path)])


# meshes: an axis twice, an empty flag
@pytest.mark.parametrize("flag, value, words", [
    ("--mesh", "dp=2,dp=4", "--mesh='dp=2,dp=4': axis 'dp' is given twice"),
    ("--mesh", "", "--mesh is empty"),
    ("--mesh", " ", "--mesh is empty"),
    ("--mesh", "dp=\u00b2", "must be AXIS=SIZE with a positive integer size"),
    ("--scale", "dp=2,dp=4", "--scale='dp=2,dp=4': axis 'dp' is given twice"),
    ("--scale", "", "--scale is empty"),
])
def test_a_mesh_axis_twice_or_an_empty_flag_is_refused(tmp_path, capsys, flag, value, words):
    module = _write(tmp_path, "okstep46.py", OK_STEP)
    spec_path = _write(tmp_path, "args46.toml", ARGS_SPEC)
    line = _fails(capsys, [f"{module}:step", "--spec", str(spec_path), flag, value])
    assert words in line, line


# the spec file read as a scenario is: nesting capped, errors name the file
@pytest.mark.parametrize("text, words", [
    ("[mesh]\ndp = 8\n[config]\nx = " + "[" * 40 + "]" * 40 + "\n",
     "more than 32 levels deep"),
    ("[mesh]\ndp = 8\n[config]\nx = " + "[" * 5000 + "]" * 5000 + "\n",
     "more than 32 levels deep"),
    ("[mesh\n", "is not valid TOML"),
])
def test_a_broken_spec_names_its_file(tmp_path, capsys, text, words):
    module = _write(tmp_path, "okstep46.py", OK_STEP)
    spec_path = _write(tmp_path, "broken46.toml", text)
    line = _fails(capsys, [f"{module}:step", "--spec", str(spec_path)])
    assert f"spec file '{spec_path}'" in line and words in line, line


def _numbers(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _numbers(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _numbers(v)
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield tree


def test_no_time_is_negative_at_a_huge_scale(tmp_path, capsys):
    """dp=30,000,000 on the two-op step: the exposed time equals the communication
    but for rounding, which made the hidden time -2.7e-20 s before clipping."""
    module = _write(tmp_path, "okstep46.py", OK_STEP)
    spec_path = _write(tmp_path, "args46.toml", ARGS_SPEC)
    assert main(["program", f"{module}:step", "--spec", str(spec_path),
                 "--scale", "dp=30000000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hidden_s"] == 0.0 and out["exposed_s"] > 0
    negative = [x for x in _numbers(out) if x < 0]
    assert not negative, negative


# the boundary itself
def test_the_boundary_converts_all_but_ctrl_c():
    for error in (RuntimeError("r"), SystemExit(0), MemoryError(), RecursionError("deep"),
                  ValueError("v"), GeneratorExit()):
        with pytest.raises(_user.UserError, match=r"^f\.py:g: ") as info:
            with _user.running("f.py:g"):
                raise error
        assert info.value.__cause__ is error  # CODESIGN_DEBUG=1 shows the user's traceback
    with pytest.raises(KeyboardInterrupt):
        with _user.running("f.py:g"):
            raise KeyboardInterrupt
    inner = _user.UserError("a.py:inner: RuntimeError: r")
    with pytest.raises(_user.UserError) as info:
        with _user.running("b.py:outer"):
            raise inner
    assert info.value is inner  # the innermost boundary names it


def test_a_user_callable_is_named_by_its_file_and_function():
    def step(x):
        return x

    here = __file__
    assert _user.location(step) == f"{here}:{step.__qualname__}"
    assert _user.location(jax.jit(step)) == f"{here}:{step.__qualname__}"
    assert _user.location(functools.partial(step, 1)) == f"{here}:{step.__qualname__}"

    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError(name)

    assert _user.location(Hostile()).endswith("Hostile")
    assert _user.describe(RuntimeError("")) == "RuntimeError"
    assert _user.describe(KeyError("k")) == "KeyError: 'k'"
