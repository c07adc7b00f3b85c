"""Where every collective is EXECUTED: hand-written algorithms from jax.lax primitives.

Each function here runs inside `jax.shard_map` on one rank's block and moves
data only with `ppermute` (plus `axis_index` / `axis_size`); the `lax`
built-ins (`psum`, `psum_scatter`, `all_gather`, `all_to_all`, `ppermute`) are
the yardstick they are tested and timed against (algorithm name "lax").
`model/collectives.py` holds their cost; this module holds their data movement.

`axes` is one mesh axis name or a tuple of them; a tuple is one flat group of
ranks numbered as `lax.axis_index(axes)` numbers them (first axis major).
`hierarchical` takes exactly two axes, (outer, inner) = ('node', 'local'):
the inner axis is the fast tier inside a node, the outer one joins nodes.

Layouts follow the lax built-ins with `tiled=True` on dimension 0:
all-reduce keeps the shape; reduce-scatter maps (p c, ...) to (c, ...), rank r
keeping block r; all-gather maps (c, ...) to (p c, ...); all-to-all sends
block j of (p c, ...) to rank j and stacks what it receives by source rank.

| op             | algorithm          | messages per rank                 |
|----------------|--------------------|-----------------------------------|
| all_reduce     | ring               | 2(p-1) of n/p (RS + AG)           |
| all_reduce     | recursive_doubling | log2 p of n (p a power of two)    |
| all_reduce     | halving_doubling   | 2 log2 p, halving sizes (p = 2^k) |
| all_reduce     | tree               | double binary tree, pipelined     |
| all_reduce     | hierarchical       | RS inside, all-reduce across, AG inside |
| reduce_scatter | ring, recursive_doubling (halving), hierarchical |        |
| all_gather     | ring, recursive_doubling, hierarchical |                   |
| all_to_all     | direct (pairwise), hierarchical (inside, then across) |    |
| send_recv      | direct: every rank sends n to rank + 1 (nccl-tests sendrecv) |
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..model import collectives

Axes = str | tuple[str, ...]
TREE_PIPELINE_CHUNKS = 4  # pieces each tree streams: latency (K + depth) steps of n/K


# ------------------------------------------------------------------ rank helpers
def _axes(axes: Axes) -> tuple[str, ...]:
    return (axes,) if isinstance(axes, str) else tuple(axes)


def _name(axes: Axes):
    axes = _axes(axes)
    return axes[0] if len(axes) == 1 else axes


def ranks(axes: Axes) -> int:
    """The number of ranks in `axes` (a Python int, inside shard_map)."""
    return int(lax.axis_size(_name(axes)))


def _rank(axes: Axes) -> jax.Array:
    return lax.axis_index(_name(axes))


def _shift(x, axes: Axes, p: int, by: int):
    """Every rank sends x to rank + by (mod p) and receives from rank - by."""
    return lax.ppermute(x, _name(axes), [(i, (i + by) % p) for i in range(p)])


def _permute(x, axes: Axes, pairs: list[tuple[int, int]]):
    """ppermute along `pairs` (source, destination); ranks not receiving get zeros."""
    return lax.ppermute(x, _name(axes), pairs) if pairs else jnp.zeros_like(x)


def _swap(x, axes: Axes, p: int, mask: int):
    """Every rank exchanges x with rank XOR mask."""
    return lax.ppermute(x, _name(axes), [(i, i ^ mask) for i in range(p)])


def _check_power_of_two(algorithm: str, p: int) -> None:
    if p & (p - 1):
        raise ValueError(f"algorithm={algorithm!r} needs a power-of-two number of ranks; "
                         f"got ranks={p}")


def _check_two_axes(axes: Axes) -> tuple[str, str]:
    axes = _axes(axes)
    if len(axes) != 2:
        raise ValueError(f"algorithm='hierarchical' needs two mesh axes (outer, inner), "
                         f"e.g. ('node', 'local'); got axes={axes}")
    return axes


def _blocks(x: jax.Array, p: int, what: str) -> jax.Array:
    """(p c, ...) -> (p, c, ...), with a clear error when p does not divide dim 0."""
    if x.ndim == 0 or x.shape[0] % p:
        raise ValueError(f"{what}: leading dimension {x.shape[:1]} must be a multiple of "
                         f"ranks={p}")
    return x.reshape((p, x.shape[0] // p) + x.shape[1:])


def _pieces(x: jax.Array, k: int) -> jax.Array:
    """Flatten and zero-pad x into k equal pieces: (k, ceil(size / k))."""
    flat = x.reshape(-1)
    per = -(-flat.size // k) if flat.size else 0
    return jnp.pad(flat, (0, per * k - flat.size)).reshape(k, per)


def _unpieces(pieces: jax.Array, like: jax.Array) -> jax.Array:
    return pieces.reshape(-1)[: like.size].reshape(like.shape)


# ------------------------------------------------------------------ ring
def _ring_reduce_scatter(chunks: jax.Array, axes: Axes, p: int) -> jax.Array:
    """p-1 steps around the ring; rank r ends with the sum of chunks[r] over ranks."""
    r = _rank(axes)

    def step(s, chunks):
        recv = _shift(chunks[(r - s - 1) % p], axes, p, 1)
        return chunks.at[(r - s - 2) % p].add(recv)

    return lax.fori_loop(0, p - 1, step, chunks)[r]


def _ring_all_gather(mine: jax.Array, axes: Axes, p: int) -> jax.Array:
    """p-1 steps forwarding what arrived last; returns (p, ...) in rank order."""
    r = _rank(axes)
    chunks = jnp.zeros((p,) + mine.shape, mine.dtype).at[r].set(mine)

    def step(s, carry):
        chunks, last = carry
        last = _shift(last, axes, p, 1)
        return chunks.at[(r - s - 1) % p].set(last), last

    return lax.fori_loop(0, p - 1, step, (chunks, mine))[0]


def _ring_all_reduce(x, axes, p):
    pieces = _ring_all_gather(_ring_reduce_scatter(_pieces(x, p), axes, p), axes, p)
    return _unpieces(pieces, x)


# ------------------------------------------------------------------ recursive doubling / halving
def _doubling_all_reduce(x, axes, p):
    _check_power_of_two("recursive_doubling", p)
    for k in range(int(math.log2(p))):
        x = x + _swap(x, axes, p, 1 << k)  # a + b == b + a: both partners agree bit for bit
    return x


def _halving_reduce_scatter(chunks, axes, p):
    """Recursive halving: log2 p exchanges of halving size; rank r keeps chunks[r]."""
    _check_power_of_two("recursive_doubling", p)
    r, d = _rank(axes), p // 2
    while d >= 1:  # the buffer holds 2d chunks; bit d of the chunk id splits it
        high = (r & d) != 0
        lo, hi = chunks[:d], chunks[d:]
        keep, send = jnp.where(high, hi, lo), jnp.where(high, lo, hi)
        chunks = keep + _swap(send, axes, p, d)
        d //= 2
    return chunks[0]


def _doubling_all_gather(mine, axes, p):
    """Recursive doubling: log2 p exchanges of doubling size; (p, ...) in rank order."""
    _check_power_of_two("recursive_doubling", p)
    r, buf, d = _rank(axes), mine[None], 1
    while d < p:
        other = _swap(buf, axes, p, d)
        high = (r & d) != 0
        buf = jnp.where(high, jnp.concatenate([other, buf]), jnp.concatenate([buf, other]))
        d *= 2
    return buf


def _halving_doubling_all_reduce(x, axes, p):
    _check_power_of_two("halving_doubling", p)
    mine = _halving_reduce_scatter(_pieces(x, p), axes, p)
    return _unpieces(_doubling_all_gather(mine, axes, p), x)


# ------------------------------------------------------------------ double binary tree
def _tree_tables(p: int, order: list[int]):
    """Heap-shaped binary tree on virtual positions v (parent (v-1)//2) placed on
    physical ranks order[v]: (depth per physical rank, left/right child->parent
    pairs, depth of the tree)."""
    depth = np.zeros(p, np.int32)
    for v in range(p):
        depth[order[v]] = int(math.log2(v + 1))
    left = [(order[c], order[(c - 1) // 2]) for c in range(1, p, 2)]
    right = [(order[c], order[(c - 1) // 2]) for c in range(2, p, 2)]
    return depth, left, right, int(math.log2(p))


def _tree_all_reduce(chunks, axes, p, order):
    """Pipelined reduce up the tree, then pipelined broadcast down: K + D - 1 steps
    each (K pieces, D the tree's depth); rank at depth d handles piece t - (D - d)
    on the way up and t - d on the way down at step t."""
    K = chunks.shape[0]
    depth_table, left, right, D = _tree_tables(p, order)
    depth = jnp.asarray(depth_table)[_rank(axes)]
    left_down, right_down = [(b, a) for a, b in left], [(b, a) for a, b in right]

    def piece(k):
        return jnp.clip(k, 0, K - 1), (k >= 0) & (k < K)

    def up(t, chunks):
        k, ok = piece(t - (D - depth))
        payload = jnp.where(ok, chunks[k], 0)
        recv = _permute(payload, axes, left) + _permute(payload, axes, right)
        k_in, ok_in = piece(t - (D - depth) + 1)
        return chunks.at[k_in].add(jnp.where(ok_in, recv, 0))

    def down_step(t, chunks):
        k, ok = piece(t - depth)
        payload = jnp.where(ok, chunks[k], 0)
        recv = _permute(payload, axes, left_down) + _permute(payload, axes, right_down)
        k_in, ok_in = piece(t - depth + 1)
        return chunks.at[k_in].set(jnp.where(ok_in & (depth > 0), recv, chunks[k_in]))

    chunks = lax.fori_loop(0, K + D - 1, up, chunks)
    return lax.fori_loop(0, K + D - 1, down_step, chunks)


def _double_tree_all_reduce(x, axes, p, pipeline_chunks=TREE_PIPELINE_CHUNKS):
    """NCCL's double binary tree: half the data on a heap-ordered tree, half on its
    mirror image (rank p-1-v), so a leaf of one tree is an inner node of the other."""
    if p == 1:
        return x
    halves = _pieces(x, 2 * pipeline_chunks).reshape(2, pipeline_chunks, -1)
    a = _tree_all_reduce(halves[0], axes, p, list(range(p)))
    b = _tree_all_reduce(halves[1], axes, p, list(range(p))[::-1])
    return _unpieces(jnp.stack([a, b]), x)


# ------------------------------------------------------------------ hierarchical
def _hierarchical_all_reduce(x, axes, p):
    outer, inner = _check_two_axes(axes)
    n_local = ranks(inner)
    mine = _ring_reduce_scatter(_pieces(x, n_local), inner, n_local)
    mine = _ring_all_reduce(mine, outer, ranks(outer))
    return _unpieces(_ring_all_gather(mine, inner, n_local), x)


def _hierarchical_reduce_scatter(x, axes, p):
    outer, inner = _check_two_axes(axes)
    n_out, n_in = ranks(outer), ranks(inner)
    blocks = _blocks(x, p, "reduce_scatter")
    by_local = jnp.swapaxes(blocks.reshape((n_out, n_in) + blocks.shape[1:]), 0, 1)
    partial = _ring_reduce_scatter(by_local, inner, n_in)  # (n_out, c, ...) for my local rank
    return _ring_reduce_scatter(partial, outer, n_out)


def _hierarchical_all_gather(x, axes, p):
    outer, inner = _check_two_axes(axes)
    n_out, n_in = ranks(outer), ranks(inner)
    across = _ring_all_gather(x, outer, n_out)  # (n_out, c, ...)
    both = jnp.swapaxes(_ring_all_gather(across, inner, n_in), 0, 1)  # (n_out, n_in, c, ...)
    return both.reshape((p * x.shape[0],) + x.shape[1:])


# ------------------------------------------------------------------ all-to-all
def _direct_all_to_all(x, axes, p):
    """Pairwise exchange: at step s rank r sends block r+s to rank r+s."""
    blocks, r = _blocks(x, p, "all_to_all"), _rank(axes)
    out = jnp.zeros_like(blocks).at[r].set(blocks[r])
    for s in range(1, p):
        out = out.at[(r - s) % p].set(_shift(blocks[(r + s) % p], axes, p, s))
    return out.reshape(x.shape)


def _hierarchical_all_to_all(x, axes, p):
    """Exchange inside the node (to the local rank of the destination), then across."""
    outer, inner = _check_two_axes(axes)
    n_out, n_in = ranks(outer), ranks(inner)
    blocks = _blocks(x, p, "all_to_all")
    by_dst = blocks.reshape((n_out, n_in) + blocks.shape[1:])  # [dst node, dst local]
    inside = _direct_all_to_all(jnp.swapaxes(by_dst, 0, 1).reshape(x.shape), inner, n_in)
    inside = inside.reshape((n_in, n_out) + blocks.shape[1:])  # [src local, dst node]
    across = _direct_all_to_all(jnp.swapaxes(inside, 0, 1).reshape(x.shape), outer, n_out)
    return across  # [src node, src local] = global source rank order


# ------------------------------------------------------------------ send/recv
def send_recv(x: jax.Array, axes: Axes, shift: int = 1) -> jax.Array:
    """Every rank sends x to rank + shift and receives from rank - shift (a ring)."""
    return _shift(x, axes, ranks(axes), shift)


# ------------------------------------------------------------------ dispatch tables
def _lax(op):
    return {
        "all_reduce": lambda x, axes, p: lax.psum(x, _name(axes)),
        "reduce_scatter": lambda x, axes, p: lax.psum_scatter(
            x, _name(axes), scatter_dimension=0, tiled=True),
        "all_gather": lambda x, axes, p: lax.all_gather(x, _name(axes), axis=0, tiled=True),
        "all_to_all": lambda x, axes, p: lax.all_to_all(x, _name(axes), 0, 0, tiled=True),
        "send_recv": lambda x, axes, p: lax.ppermute(
            x, _name(axes), [(i, (i + 1) % p) for i in range(p)]),
    }[op]


def _flat_blocks(fn):
    """Adapt a (p, c, ...) -> (c, ...) block function to reduce-scatter's layout."""
    return lambda x, axes, p: fn(_blocks(x, p, "reduce_scatter"), axes, p)


def _gathered(fn):
    """Adapt a (c, ...) -> (p, c, ...) function to all-gather's tiled layout."""
    return lambda x, axes, p: fn(x, axes, p).reshape((p * x.shape[0],) + x.shape[1:])


_ALGORITHMS: dict[str, dict[str, Callable]] = {
    "all_reduce": {
        "ring": _ring_all_reduce,
        "recursive_doubling": _doubling_all_reduce,
        "halving_doubling": _halving_doubling_all_reduce,
        "tree": lambda x, axes, p: _double_tree_all_reduce(x, axes, p),
        "hierarchical": _hierarchical_all_reduce,
        "lax": _lax("all_reduce"),
    },
    "reduce_scatter": {
        "ring": _flat_blocks(_ring_reduce_scatter),
        "recursive_doubling": _flat_blocks(_halving_reduce_scatter),
        "hierarchical": _hierarchical_reduce_scatter,
        "lax": _lax("reduce_scatter"),
    },
    "all_gather": {
        "ring": _gathered(_ring_all_gather),
        "recursive_doubling": _gathered(_doubling_all_gather),
        "hierarchical": _hierarchical_all_gather,
        "lax": _lax("all_gather"),
    },
    "all_to_all": {
        "direct": _direct_all_to_all,
        "hierarchical": _hierarchical_all_to_all,
        "lax": _lax("all_to_all"),
    },
    "send_recv": {
        "direct": lambda x, axes, p: send_recv(x, axes),
        "lax": _lax("send_recv"),
    },
}
OPS = tuple(_ALGORITHMS)


def check_op(op: str) -> str:
    """`op` normalised as the cost model spells it (`collectives`), if executable."""
    try:
        name = collectives.check_op(op)
    except ValueError:  # not even a modelled collective
        name = None
    if name not in _ALGORITHMS:
        raise ValueError(f"op={op!r} is not executable; choose one of {', '.join(OPS)}")
    return name


def algorithm_names(op: str) -> tuple[str, ...]:
    """The executable algorithms of `op`, the lax built-in ("lax") last."""
    return tuple(_ALGORITHMS[check_op(op)])


def check_algorithm(op: str, algorithm: str) -> str:
    if algorithm not in algorithm_names(op):
        raise ValueError(f"algorithm={algorithm!r} is not executable for op={op!r}; choose "
                         f"one of {', '.join(algorithm_names(op))}")
    return algorithm


def collective(op: str, algorithm: str, x: jax.Array, axes: Axes) -> jax.Array:
    """Run `op` by `algorithm` on this rank's block x (call inside shard_map)."""
    op = check_op(op)
    return _ALGORITHMS[op][check_algorithm(op, algorithm)](x, axes, ranks(axes))


def all_reduce(x: jax.Array, axes: Axes, algorithm: str = "ring") -> jax.Array:
    return collective("all_reduce", algorithm, x, axes)


def reduce_scatter(x: jax.Array, axes: Axes, algorithm: str = "ring") -> jax.Array:
    return collective("reduce_scatter", algorithm, x, axes)


def all_gather(x: jax.Array, axes: Axes, algorithm: str = "ring") -> jax.Array:
    return collective("all_gather", algorithm, x, axes)


def all_to_all(x: jax.Array, axes: Axes, algorithm: str = "direct") -> jax.Array:
    return collective("all_to_all", algorithm, x, axes)


# ------------------------------------------------------------------ pipeline
def pipeline(microbatches: jax.Array, axes: Axes,
             stage_fn: Callable[[jax.Array, jax.Array], jax.Array]) -> jax.Array:
    """Stream m micro-batches through p stages (one per rank of `axes`).

    Stage 0 reads `microbatches` (m, ...); at step t stage s applies
    `stage_fn(s, x)` to micro-batch t - s and sends the result to stage s + 1
    (ppermute, no wrap-around). After m + p - 1 steps the last stage holds the
    m outputs; the returned (m, ...) array is zero on the other stages.
    """
    p, s = ranks(axes), _rank(axes)
    m = microbatches.shape[0]
    forward = [(i, i + 1) for i in range(p - 1)]

    def step(carry, t):
        inbox, outputs = carry
        k = t - s
        x = jnp.where(s == 0, microbatches[jnp.clip(t, 0, m - 1)], inbox)
        y = stage_fn(s, x)
        done = (k >= 0) & (k < m) & (s == p - 1)
        slot = jnp.clip(k, 0, m - 1)
        outputs = outputs.at[slot].set(jnp.where(done, y, outputs[slot]))
        return (lax.ppermute(y, _name(axes), forward), outputs), None

    init = (jnp.zeros_like(microbatches[0]), jnp.zeros_like(microbatches))
    return lax.scan(step, init, jnp.arange(m + p - 1))[0][1]


# ------------------------------------------------------------------ MoE dispatch / combine
def node_limited_routing(scores: jax.Array, *, experts_per_node: int, top_k: int,
                         max_nodes: int) -> tuple[jax.Array, jax.Array]:
    """Top-k experts per token restricted to its `max_nodes` best nodes.

    scores (T, E) router affinities, experts numbered node-major
    (expert e lives on node e // experts_per_node). A node's score is its best
    expert's affinity (DeepSeek-V3 sums the top few; the limit is the same).
    Returns (expert ids (T, k) int32, gates (T, k) softmax over the chosen).
    """
    T, E = scores.shape
    if E % experts_per_node:
        raise ValueError(f"experts={E} must be a multiple of experts_per_node={experts_per_node}")
    nodes = E // experts_per_node
    if not 1 <= max_nodes <= nodes:
        raise ValueError(f"max_nodes={max_nodes} must lie in [1, nodes={nodes}]")
    if not 1 <= top_k <= max_nodes * experts_per_node:
        raise ValueError(f"top_k={top_k} must lie in [1, max_nodes x experts_per_node="
                         f"{max_nodes * experts_per_node}]")
    per_node = scores.reshape(T, nodes, experts_per_node)
    best_nodes = lax.top_k(per_node.max(axis=-1), max_nodes)[1]  # (T, M)
    allowed = jax.nn.one_hot(best_nodes, nodes, dtype=bool).any(axis=1)  # (T, N)
    masked = jnp.where(jnp.repeat(allowed, experts_per_node, axis=1), scores, -jnp.inf)
    top, ids = lax.top_k(masked, top_k)
    return ids.astype(jnp.int32), jax.nn.softmax(top, axis=-1)


def _slots(dest: jax.Array, n_dest: int) -> jax.Array:
    """Position of each item among the earlier items with the same destination."""
    onehot = (dest[:, None] == jnp.arange(n_dest)[None, :]).astype(jnp.int32)
    return jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, dest[:, None], axis=1)[:, 0]


def _route(rows, expert, n_dest, experts_per_dest, send, axes, expert_fn):
    """Send each (row, expert) pair to the rank of its expert over `axes`, apply
    expert_fn there, and bring the result back to the pair's position.

    rows (R, d); expert (R,) index among the n_dest x experts_per_dest experts
    reachable over `axes`, -1 for none. Capacity is R per destination: no drops.
    """
    R = rows.shape[0]
    valid = expert >= 0
    dest = jnp.where(valid, expert // experts_per_dest, 0)
    slot = jnp.where(valid, _slots(jnp.where(valid, dest, n_dest), n_dest + 1), R)
    buf = jnp.zeros((n_dest, R + 1) + rows.shape[1:], rows.dtype)
    buf = buf.at[dest, slot].set(rows)[:, :R]  # invalid pairs land in the dropped column
    ids = jnp.full((n_dest, R + 1), -1, jnp.int32)
    ids = ids.at[dest, slot].set(jnp.where(valid, expert % experts_per_dest, -1))[:, :R]
    recv = send(buf.reshape((n_dest * R,) + rows.shape[1:]), axes)
    recv_ids = send(ids.reshape(-1), axes)
    out = expert_fn(jnp.maximum(recv_ids, 0), recv)
    out = jnp.where((recv_ids >= 0).reshape((-1,) + (1,) * (out.ndim - 1)), out, 0)
    back = send(out, axes).reshape((n_dest, R) + out.shape[1:])
    return jnp.where(valid.reshape((-1,) + (1,) * (out.ndim - 1)),
                     back[dest, jnp.minimum(slot, R - 1)], 0)


def moe_dispatch_combine(x: jax.Array, expert_ids: jax.Array, gates: jax.Array,
                         expert_fn: Callable[[jax.Array, jax.Array], jax.Array], *,
                         experts_per_device: int, axes: Axes = ("node", "local"),
                         max_nodes: int | None = None,
                         algorithm: str = "direct") -> tuple[jax.Array, jax.Array]:
    """MoE dispatch + expert compute + combine for this rank's tokens.

    x (T, d) tokens; expert_ids (T, k) global expert ids (expert e lives on rank
    e // experts_per_device of `axes`, node-major); gates (T, k).
    `expert_fn(local_expert (R,), rows (R, d)) -> (R, d)` evaluates this rank's
    experts. Returns (y, crossings): y[t] = sum_j gates[t, j] f_{e_tj}(x[t]) and
    the number of token copies this rank sent across the outer ('node') axis.

    max_nodes=None sends every (token, choice) straight to its expert's rank
    (the reference: up to k node crossings per token). max_nodes=M sends each
    token once to every node it needs, to the rank with the same local index,
    which forwards it over the inner axis to its experts there and sums their
    gated outputs before the one copy returns: at most M crossings per token
    when the routing respects the limit (`node_limited_routing`).
    """
    outer, inner = _check_two_axes(axes)
    n_out, n_in = ranks(outer), ranks(inner)
    T, k = expert_ids.shape
    send = lambda v, ax: collective("all_to_all", algorithm, v, ax)  # noqa: E731
    per_node = experts_per_device * n_in
    node_of = expert_ids // per_node  # (T, k)
    my_node = _rank(outer)
    if max_nodes is None:
        rows = jnp.repeat(x, k, axis=0)
        out = _route(rows, expert_ids.reshape(-1), n_out * n_in, experts_per_device, send,
                     axes, expert_fn)
        y = (gates.reshape(-1, 1).astype(out.dtype) * out).reshape((T, k) + x.shape[1:])
        crossings = jnp.sum(node_of != my_node)
        return y.sum(axis=1), crossings
    hit = (node_of[:, None, :] == jnp.arange(n_out)[None, :, None])  # (T, N, k)
    needs = hit.any(axis=-1)  # (T, N)
    # stage 1: one copy of each token to each node it needs (same local rank there)
    copies = jnp.where(needs.T[..., None], x[None], 0).reshape((n_out * T,) + x.shape[1:])
    local_ids = jnp.where(hit, (expert_ids % per_node)[:, None, :], -1)  # (T, N, k)
    local_ids = jnp.swapaxes(local_ids, 0, 1).reshape(n_out * T, k)
    node_gates = jnp.swapaxes(jnp.where(hit, gates[:, None, :], 0), 0, 1).reshape(n_out * T, k)
    got = send(copies, outer)
    got_ids = send(local_ids, outer)
    got_gates = send(node_gates, outer)
    # stage 2: forward over the inner axis to the experts, combine inside the node
    out = _route(jnp.repeat(got, k, axis=0), got_ids.reshape(-1), n_in, experts_per_device,
                 send, inner, expert_fn)
    combined = (got_gates.reshape(-1, 1).astype(out.dtype) * out)
    combined = combined.reshape((n_out * T, k) + x.shape[1:]).sum(axis=1)
    back = send(combined, outer).reshape((n_out, T) + x.shape[1:])
    crossings = jnp.sum(jnp.where(jnp.arange(n_out)[None, :] != my_node, needs, False))
    return back.sum(axis=0), crossings
