"""`codesign.program`: tracing a user's jitted step on 8 fake CPU devices, reading its
compiled HLO, costing it on a System (differentiably), scaling the data axis, the
cross-check against the step model, and `codesign program`."""

import json
import math
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import codesign
from codesign import program
from codesign.cli import main
from codesign.program import crosscheck, examples
from codesign.program import spec as program_spec

ROOT = Path(__file__).resolve().parents[1]
HYBRID = ROOT / "docs" / "examples" / "hybrid.py"


@pytest.fixture(scope="module")
def system():
    return codesign.load("default").system


@pytest.fixture(scope="module")
def crosschecks(system):
    return {name: crosscheck.run(name, system) for name in crosscheck.SCENARIOS}


def test_a_sharded_matmul_is_one_gemm_and_one_all_reduce(system):
    mesh = examples.make_mesh({"dp": 2, "tp": 4})
    x = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((512, 256), jnp.bfloat16)
    prog = program.trace(lambda a, b: a @ b, x, w, mesh=mesh,
                         in_shardings=(P("dp", "tp"), P("tp", None)),
                         out_shardings=P("dp", None))
    (gemm,) = [op for op in prog.ops if op.kind == "gemm"]
    assert gemm.gemm == ((1, 32, 128, 256, "bf16"),)  # per device: 32 rows, k split over tp
    assert gemm.flops == 2 * 32 * 128 * 256
    (ar,) = prog.collectives
    assert (ar.collective, prog.axes(ar)) == ("all_reduce", ("tp",))
    # the partial sums in bf16 (XLA:CPU reduces them in f32: read at the program's width)
    assert ar.collective_bytes == 32 * 256 * 2
    est = program.cost(prog, system)
    assert float(est.step_time_s) == pytest.approx(
        float(est.compute_s + est.exposed_s), rel=1e-12)
    assert float(est.exposed_s) == pytest.approx(float(est.communication_s), rel=1e-12)
    assert float(jnp.sum(est.collective_exposed_s)) == pytest.approx(float(est.exposed_s))


def test_the_cross_check_agrees_with_estimate_for_three_scenarios(crosschecks):
    for name, r in crosschecks.items():
        assert abs(r["ratio"] - 1.0) <= 0.10, (name, r["ratio"], r["program"], r["estimate"])
        for dim, b in r["bytes"].items():
            assert b["exact"], (name, dim, b)
        ce = r["cross_entropy"]
        assert ce["found"] == ce["expected"], (name, ce)
    assert set(crosschecks["moe"]["bytes"]) == {"dp", "ep"}
    assert crosschecks["moe"]["bytes"]["ep"]["program"] > 0
    assert set(crosschecks["dense"]["bytes"]) == {"dp", "tp"}


def test_the_program_agrees_with_xla_cost_analysis_on_flops(crosschecks):
    for r in crosschecks.values():
        prog = r["program_obj"]
        assert prog.flops == pytest.approx(prog.xla_cost["flops"], rel=0.02)


def _knobs(system, bandwidth, domain):
    s = eqx.tree_at(lambda x: x.scale_out.bandwidth_Bps, system, bandwidth)
    return eqx.tree_at(lambda x: x.scale_up_domain, s, domain)


def test_gradients_match_central_differences(crosschecks, system):
    prog = crosschecks["dense"]["program_obj"]
    scale = {"dp": 256}  # 1,024 GPUs: the dp all-reduce leaves the domain

    def step_s(bandwidth, domain):
        return program.cost(prog, _knobs(system, bandwidth, domain), scale).step_time_s

    b0, d0 = float(system.scale_out.bandwidth_Bps), 8.0
    grad = jax.jit(jax.grad(step_s, argnums=(0, 1)))(b0, d0)
    f = jax.jit(step_s)
    for i, (x0, rel) in enumerate(((b0, 1e-4), (d0, 1e-4))):
        h = x0 * rel
        args_hi = (b0 + h, d0) if i == 0 else (b0, d0 + h)
        args_lo = (b0 - h, d0) if i == 0 else (b0, d0 - h)
        fd = (float(f(*args_hi)) - float(f(*args_lo))) / (2 * h)
        assert math.isfinite(float(grad[i])) and float(grad[i]) != 0.0
        assert float(grad[i]) == pytest.approx(fd, rel=1e-4)
    assert float(grad[0]) < 0  # more scale-out bandwidth, a shorter step
    assert float(grad[1]) < 0  # a larger domain keeps more of the dp ring on NVLink


def test_scaling_the_data_axis_grows_only_its_groups(crosschecks, system):
    prog = crosschecks["dense"]["program_obj"]
    small, big = program.cost(prog, system), program.cost(prog, system, {"dp": 256})
    tp = [k for k, op in enumerate(prog.collectives) if prog.axes(op) == ("tp",)]
    dp = [k for k, op in enumerate(prog.collectives) if prog.axes(op) == ("dp",)]
    assert tp and dp
    for k in tp:
        assert float(small.collective_s[k]) == float(big.collective_s[k])
    for k in dp:
        assert float(big.collective_s[k]) > 2 * float(small.collective_s[k])
    assert float(big.compute_s) == float(small.compute_s)
    assert float(big.devices) == 1024
    with pytest.raises(ValueError, match="'pp' is not an axis"):
        program.cost(prog, system, {"pp": 4})


def test_a_user_written_hybrid_model_traces_and_costs(system):
    build = program_spec.function(f"{HYBRID}:build")
    mesh = examples.make_mesh({"dp": 2, "tp": 4})
    step, args, ins, outs = build(mesh, layers=2, hidden=64, heads=4, width=64, mlp=128,
                                  seq_len=16, vocab=128)
    prog = program.trace(step, *args, mesh=mesh, in_shardings=ins, out_shardings=outs)
    axes = {prog.axes(op) for op in prog.collectives}
    assert ("tp",) in axes and ("dp",) in axes
    est = program.cost(prog, system, {"dp": 128})
    s = program.summary(prog, est, {"dp": 128})
    assert s["devices"] == 512 and s["step_time_s"] > s["compute_s"] > 0
    assert any("scaled from the traced mesh" in a for a in s["assumptions"])
    assert "codesign program" in program.format_report(prog, est, {"dp": 128})


def test_the_trace_cap_and_missing_devices_are_one_line_errors():
    with pytest.raises(ValueError, match="exceeds the trace cap of 1024"):
        program.check_devices(2048)
    with pytest.raises(ValueError, match="JAX sees 8"):
        program.check_devices(16, available=8)


def test_codesign_program_command(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('[mesh]\ndp = 2\ntp = 4\n[scale]\ndp = 64\n[config]\nlayers = 1\n')
    assert main(["program", "codesign.program.examples:transformer", "--spec", str(spec),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["devices"] == 256 and out["costed_mesh"] == {"dp": 64, "tp": 4}
    assert {r["axes"] for r in out["collectives"]} == {"dp", "tp"}
    starts = [c["start_s"] for c in out["schedule"]]
    assert starts == sorted(starts) and len(starts) == sum(r["count"] for r in out["collectives"])
    step = tmp_path / "step.py"
    step.write_text("def step(x):\n    return (x * 2.0).sum()\n")
    args = tmp_path / "args.toml"
    args.write_text('[mesh]\ndp = 8\n[[args]]\nshape = [64, 32]\nsharding = ["dp"]\n')
    assert main(["program", f"{step}:step", "--spec", str(args)]) == 0
    assert "all_reduce      dp" in capsys.readouterr().out
    for argv, words in (
            (["program", "nomodule:f", "--mesh", "dp=8"], "cannot import"),
            (["program", f"{step}:step", "--mesh", "dp=2048"], "trace cap"),
            (["program", f"{step}:step", "--mesh", "dp=x"], "--mesh"),
            (["program", "codesign.program.examples:transformer", "--mesh", "dp=2,tp=4",
              "--scale", "pp=2"], "'pp' is not an axis")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[mesh]\ndp = 2\ntp = 4\n[config]\nlayer = 1\n')
    assert main(["program", f"{HYBRID}:build", "--spec", str(wrong)]) == 2
    assert "unexpected keyword argument 'layer'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[meshes]\ndp = 2\n")
    assert main(["program", f"{step}:step", "--spec", str(bad)]) == 2
    assert "spec key 'meshes' is unknown" in capsys.readouterr().err


def test_a_sharded_batch_argument_spec_names_known_axes():
    mesh = examples.make_mesh({"dp": 8})
    spec = program_spec.Spec({"dp": 8}, {}, {}, ({"shape": [8, 4], "sharding": ["tp"]},), None)
    with pytest.raises(ValueError, match="names axis 'tp'"):
        program_spec.arrays(spec, mesh)
    ok = program_spec.Spec({"dp": 8}, {}, {}, ({"shape": [8, 4], "sharding": ["dp", ""]},), None)
    structs, shardings = program_spec.arrays(ok, mesh)
    assert structs[0].shape == (8, 4) and shardings[0] == NamedSharding(mesh, P("dp", None))


ASYNC_HLO = """HloModule m, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p0: bf16[4096,4096], p1: bf16[4096,4096]) -> bf16[4096,4096] {
  %p0 = bf16[4096,4096]{1,0} parameter(0)
  %p1 = bf16[4096,4096]{1,0} parameter(1)
  %d0 = bf16[4096,4096]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %ars = bf16[4096,4096]{1,0} all-reduce-start(%d0), replica_groups=[2,4]<=[8], to_apply=%add
  %d1 = bf16[4096,4096]{1,0} dot(%p1, %p0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %ard = bf16[4096,4096]{1,0} all-reduce-done(%ars)
  ROOT %out = bf16[4096,4096]{1,0} add(%ard, %d1)
}
"""


def test_an_async_collective_overlaps_the_independent_gemm(system):
    prog = program.from_hlo(ASYNC_HLO, ("dp", "tp"), (2, 4))
    assert prog.has_async and [op.kind for op in prog.ops].count("gemm") == 2
    (ar,) = prog.collectives
    assert prog.axes(ar) == ("tp",) and ar.collective_bytes == 4096 * 4096 * 2
    est = program.cost(prog, system)
    d0, d1, add = (float(t) for t in program._cost._compute_s(prog, system)[0])
    comm = float(est.collective_s[0])
    # d0, then the all-reduce beside d1, then the add that reads both
    assert float(est.step_time_s) == pytest.approx(d0 + max(comm, d1) + add, rel=1e-12)
    assert float(est.exposed_s) == pytest.approx(max(comm - d1, 0.0), abs=1e-15)
    assert not any("no async" in a for a in program.summary(prog, est)["assumptions"])


CUBLAS_HLO = """HloModule m, is_scheduled=true

ENTRY %main (p0: bf16[8,4096,2048], p1: bf16[2048,1536]) -> bf16[8,4096,1536] {
  %p0 = bf16[8,4096,2048]{2,1,0} parameter(0)
  %p1 = bf16[2048,1536]{1,0} parameter(1)
  %g = (bf16[8,4096,1536]{2,1,0}, s8[4194304]{0}) custom-call(%p0, %p1), """ \
    """custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{""" \
    """"dot_dimension_numbers":{"lhs_contracting_dimensions":["2"],""" \
    """"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],""" \
    """"rhs_batch_dimensions":[]}}}
  ROOT %r = bf16[8,4096,1536]{2,1,0} get-tuple-element(%g), index=0
}
"""


def test_a_cublas_gemm_is_read_as_a_gemm():
    prog = program.from_hlo(CUBLAS_HLO, ("dp",), (1,))
    (gemm,) = [op for op in prog.ops if op.kind == "gemm"]
    assert gemm.gemm == ((1, 8 * 4096, 2048, 1536, "bf16"),)
    assert gemm.flops == 2 * 8 * 4096 * 2048 * 1536
