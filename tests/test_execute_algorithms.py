"""Every hand-written collective equals its jax.lax built-in (codesign.execute.algorithms).

Each test compiles ONE shard_map program holding all the algorithms it checks
(compiling is what costs time on 2 cores), then compares every output with
the lax built-in from the same program and with a NumPy closed form.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from codesign.execute import algorithms


def _mesh(shape, names, devices=None):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape),
                         devices=devices)


def _cases(axes, ops=algorithms.OPS, exclude=()):
    hier = not isinstance(axes, str) and len(axes) == 2
    return [(op, a) for op in ops for a in algorithms.algorithm_names(op)
            if (hier or a != "hierarchical") and a not in exclude]


def _run_all(mesh, axes, cases, inputs):
    """One program: every (op, algorithm) on inputs[op]; returns {(op, alg): array}."""
    ops = sorted({op for op, _ in cases})

    def body(*xs):
        by_op = dict(zip(ops, xs, strict=True))
        return tuple(algorithms.collective(op, alg, by_op[op], axes) for op, alg in cases)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(axes),) * len(ops),
                              out_specs=P(axes)))
    return dict(zip(cases, f(*(inputs[op] for op in ops)), strict=True))


def _numpy_reference(op, x, p):
    """What every rank should hold, stacked by rank like out_specs=P(axes)."""
    blocks = x.reshape(p, -1)  # blocks[r] = rank r's input
    if op == "all_reduce":
        return np.tile(blocks.sum(0), p)
    if op == "reduce_scatter":
        return blocks.sum(0)
    if op == "all_gather":
        return np.tile(blocks.reshape(-1), p)
    if op == "all_to_all":
        return blocks.reshape(p, p, -1).transpose(1, 0, 2).reshape(-1)
    return np.roll(blocks, 1, axis=0).reshape(-1)  # send_recv: from rank - 1


def _inputs(p, count, dtype, seed=0):
    """Per-op global inputs: all-reduce gets an odd count (exercises the padding),
    the block-structured ops a multiple of p."""
    rng = np.random.default_rng(seed)
    draw = lambda n: (rng.integers(-9, 10, size=n) if dtype == jnp.int32  # noqa: E731
                      else rng.normal(size=n))
    sizes = {"all_reduce": p * (count * p + 3), "reduce_scatter": p * count * p,
             "all_gather": p * count, "all_to_all": p * count * p, "send_recv": p * count}
    return {op: np.asarray(draw(n)).astype(dtype) for op, n in sizes.items()}


def _check(out, inputs, p, dtype, rtol=0.0, atol=0.0):
    for (op, alg), got in out.items():
        want = _numpy_reference(op, np.asarray(inputs[op], np.float64), p)
        got = np.asarray(got, np.float64)
        lax_out = np.asarray(out[(op, "lax")], np.float64)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{op} {alg}")
        np.testing.assert_allclose(got, lax_out, rtol=rtol, atol=atol, err_msg=f"{op} {alg}")


@pytest.mark.parametrize("shape,names,axes", [
    ((8,), ("ranks",), "ranks"),
    ((2, 4), ("node", "local"), ("node", "local")),
    ((2, 4), ("node", "local"), "local"),
])
def test_every_algorithm_equals_lax_exactly_on_int32(shape, names, axes):
    mesh = _mesh(shape, names)
    p = int(np.prod([mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes)]))
    inputs = _inputs(p, 2, jnp.int32)  # p blocks: over 'local' alone, 4 replicated on 'node'
    cases = _cases(axes)
    out = _run_all(mesh, axes, cases, {op: jnp.asarray(x) for op, x in inputs.items()})
    assert len(cases) >= (15 if len(shape) == 2 and axes != "local" else 10)
    _check(out, inputs, p, jnp.int32)


@pytest.mark.parametrize("dtype,rtol,atol", [(jnp.float32, 1e-5, 1e-5),
                                             (jnp.bfloat16, 2e-2, 6e-2)])
def test_reductions_match_lax_in_floating_point(dtype, rtol, atol):
    mesh = _mesh((2, 4), ("node", "local"))
    axes = ("node", "local")
    cases = _cases(axes, ops=("all_reduce",))
    inputs = _inputs(8, 3, dtype, seed=1)
    out = _run_all(mesh, axes, cases, {op: jnp.asarray(x) for op, x in inputs.items()})
    assert out[("all_reduce", "ring")].dtype == dtype
    # the reference sums the dtype-rounded inputs exactly; bf16 rounds each partial sum
    _check(out, {op: np.asarray(x, np.float64) for op, x in inputs.items()}, 8, dtype,
           rtol, atol)


def test_non_power_of_two_ranks_and_clear_errors():
    mesh = _mesh((6,), ("ranks",), devices=jax.devices()[:6])
    cases = _cases("ranks", exclude=("recursive_doubling", "halving_doubling"))
    inputs = _inputs(6, 2, jnp.int32, seed=2)
    out = _run_all(mesh, "ranks", cases, {op: jnp.asarray(x) for op, x in inputs.items()})
    assert ("all_reduce", "tree") in out and ("all_to_all", "direct") in out
    _check(out, inputs, 6, jnp.int32)
    for op, alg in [("all_reduce", "recursive_doubling"), ("all_reduce", "halving_doubling"),
                    ("all_gather", "recursive_doubling")]:
        with pytest.raises(ValueError, match="power-of-two number of ranks; got ranks=6"):
            _run_all(mesh, "ranks", [(op, alg), (op, "lax")], {op: jnp.asarray(inputs[op])})
    with pytest.raises(ValueError, match="hierarchical' needs two mesh axes"):
        _run_all(mesh, "ranks", [("all_reduce", "hierarchical")],
                 {"all_reduce": jnp.asarray(inputs["all_reduce"])})
    with pytest.raises(ValueError, match="algorithm='bogus' is not executable"):
        algorithms.check_algorithm("all_reduce", "bogus")
    with pytest.raises(ValueError, match="op='broadcast' is not executable"):
        algorithms.check_op("broadcast")


def test_pipeline_streams_micro_batches_through_every_stage():
    mesh = _mesh((8,), ("stage",))
    m, b = 5, 3
    rng = np.random.default_rng(3)
    micro = rng.normal(size=(8 * m, b)).astype(np.float32)  # stage 0's block is micro[:m]

    def body(x):
        return algorithms.pipeline(x.reshape(m, b), "stage", lambda s, v: v * (s + 1.0) + s)

    out = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("stage"),
                                out_specs=P("stage")))(jnp.asarray(micro))
    out = np.asarray(out).reshape(8, m, b)
    want = micro[:m].astype(np.float64)
    for s in range(8):
        want = want * (s + 1.0) + s
    np.testing.assert_allclose(out[-1], want, rtol=1e-6)
    assert np.all(out[:-1] == 0)


def test_node_limited_moe_equals_unlimited_reference_and_caps_crossings():
    mesh = _mesh((2, 4), ("node", "local"))
    axes = ("node", "local")
    T, d, k, epd, M = 6, 4, 4, 2, 1
    n_experts = 8 * epd
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8 * T, d)).astype(np.float32)
    ids, gates = algorithms.node_limited_routing(jnp.asarray(rng.normal(size=(8 * T, n_experts))),
                                                 experts_per_node=4 * epd, top_k=k, max_nodes=M)
    ids, gates = np.asarray(ids), np.asarray(gates, np.float32)
    assert np.all([len(set(row // (4 * epd))) <= M for row in ids])
    scale, bias = rng.normal(size=(2, n_experts)).astype(np.float32)

    def body(x, ids, gates, scale, bias):  # scale/bias: this rank's experts
        fn = lambda e, rows: jnp.tanh(rows * scale[e][:, None] + bias[e][:, None])  # noqa: E731
        kw = dict(experts_per_device=epd, algorithm="lax")  # direct is tested above
        ref, ref_cross = algorithms.moe_dispatch_combine(x, ids, gates, fn, **kw)
        lim, lim_cross = algorithms.moe_dispatch_combine(x, ids, gates, fn, max_nodes=M, **kw)
        return ref, lim, ref_cross[None], lim_cross[None]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(axes), out_specs=P(axes)))
    ref, lim, ref_cross, lim_cross = map(np.asarray, f(x, ids, gates, scale, bias))
    dense = sum(gates[:, j:j + 1] * np.tanh(x * scale[ids[:, j], None] + bias[ids[:, j], None])
                for j in range(k))
    np.testing.assert_allclose(ref, dense, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lim, ref, rtol=1e-5, atol=1e-6)
    node = np.repeat(np.arange(2), 4 * T)  # each token's home node
    assert lim_cross.sum() == np.sum(np.any(ids // (4 * epd) != node[:, None], axis=1))
    assert ref_cross.sum() == np.sum(ids // (4 * epd) != node[:, None])
    assert np.all(lim_cross <= M * T) and lim_cross.sum() < ref_cross.sum()


def test_routing_rejects_impossible_limits():
    scores = jnp.zeros((4, 16))
    with pytest.raises(ValueError, match="max_nodes=3 must lie in"):
        algorithms.node_limited_routing(scores, experts_per_node=8, top_k=2, max_nodes=3)
    with pytest.raises(ValueError, match="top_k=9 must lie in"):
        algorithms.node_limited_routing(scores, experts_per_node=8, top_k=9, max_nodes=1)


def test_buffers_smaller_than_the_rank_count_are_padded():
    """One element per rank: the ring, halving and tree split it into p (or 2K) pieces."""
    mesh = _mesh((8,), ("ranks",))
    cases = _cases("ranks", ops=("all_reduce",))
    x = np.arange(8, dtype=np.float32) - 3.5  # one element on each rank
    out = _run_all(mesh, "ranks", cases, {"all_reduce": jnp.asarray(x)})
    for (_, alg), got in out.items():
        np.testing.assert_array_equal(np.asarray(got), np.full(8, x.sum()), err_msg=alg)
