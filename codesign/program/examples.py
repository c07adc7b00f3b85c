"""Example programs for `codesign program`, each a builder
`build(mesh, **config) -> (step, args, in_shardings, out_shardings)` (the protocol
`codesign program MODULE:FUNCTION` calls, `config` from the spec's [config]):

- `transformer`: the flax transformer `codesign audit` builds (`execute.audit`),
  Megatron-sharded over a ('dp', 'tp') mesh, at any size (`AuditShape` fields);
- `moe`: a mixture-of-experts transformer over a ('dp', 'ep') mesh, the experts
  split over ep, tokens dispatched to them with `jax.lax.all_to_all` inside a
  `jax.shard_map` (capacity top_k x tokens / experts per expert: balanced routing
  fills it, the overflow is dropped), everything else data-parallel over dp x ep.

Both train with SGD on a softmax cross-entropy (the audit's step), in bf16.
docs/examples/hybrid.py is a user-written model `Transformer` cannot express.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from ..execute import audit


def transformer(mesh, **config):
    """The audit's transformer on `mesh` (axes dp, tp); `config` sets `AuditShape`
    fields (layers, hidden, heads, kv_heads, ffn_hidden, seq_len, vocab,
    micro_batch, gated, tied_embeddings, sequence_parallel)."""
    shape = transformer_shape(mesh, **config)
    _, train, args, (params, batch) = audit.train_step(shape, mesh)
    return train, args, (params, batch), (params, None)


def transformer_shape(mesh, **config) -> audit.AuditShape:
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    if set(sizes) != set(audit.AXES):
        raise ValueError(f"mesh axes {tuple(sizes)}: the transformer example needs "
                         f"{' and '.join(audit.AXES)}")
    base = dict(layers=2, hidden=128, heads=8, kv_heads=8, ffn_hidden=512, seq_len=32,
                vocab=64 * sizes["tp"], micro_batch=2, gated=False, tied_embeddings=False,
                sequence_parallel=False)
    fields = {f.name for f in dataclasses.fields(audit.AuditShape)} - {"dp", "tp", "notes"}
    for key in config:
        if key not in fields:
            raise ValueError(f"config.{key} is not a transformer field; fields are "
                             f"{', '.join(sorted(fields))}")
    return audit.AuditShape(**{**base, **config}, dp=sizes["dp"], tp=sizes["tp"], notes=())


@dataclasses.dataclass(frozen=True)
class MoeShape:
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 4
    seq_len: int = 32
    vocab: int = 256
    micro_batch: int = 2  # per device
    experts: int = 8
    top_k: int = 2
    expert_ffn_hidden: int = 256
    gated: bool = False


def moe(mesh, **config):
    """The MoE transformer (`MoeShape` fields in `config`) on `mesh` (axes dp, ep)."""
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    if set(sizes) != {"dp", "ep"}:
        raise ValueError(f"mesh axes {tuple(sizes)}: the MoE example needs dp and ep")
    fields = {f.name for f in dataclasses.fields(MoeShape)}
    for key in config:
        if key not in fields:
            raise ValueError(f"config.{key} is not a MoE field; fields are "
                             f"{', '.join(sorted(fields))}")
    shape = MoeShape(**config)
    if shape.experts % sizes["ep"]:
        raise ValueError(f"config.experts={shape.experts} must be a multiple of ep="
                         f"{sizes['ep']}")
    return _moe_step(shape, mesh)


def _moe_step(shape: MoeShape, mesh):
    import flax.linen as nn

    dt, batch = jnp.bfloat16, ("dp", "ep")
    ep, e_local = mesh.shape["ep"], shape.experts // mesh.shape["ep"]
    head_dim, s, h = shape.hidden // shape.heads, shape.seq_len, shape.hidden
    mats = 2 if shape.gated else 1

    def experts_ffn(x, router, w1, w2):  # one device's tokens, its experts
        b = x.shape[0]
        tokens = b * s
        capacity = tokens * shape.top_k // shape.experts
        xt = x.reshape(tokens, h)
        probs = jax.nn.softmax((xt @ router).astype(jnp.float32), -1)
        gates, chosen = jax.lax.top_k(probs, shape.top_k)  # (tokens, k)
        onehot = jax.nn.one_hot(chosen.reshape(-1), shape.experts, dtype=jnp.int32)
        position = jnp.sum((jnp.cumsum(onehot, 0) - 1) * onehot, -1)
        slot = jnp.where(position < capacity, chosen.reshape(-1) * capacity + position,
                         shape.experts * capacity)  # overflow: the dropped row
        buf = jnp.zeros((shape.experts * capacity + 1, h), dt)
        buf = buf.at[slot].set(jnp.repeat(xt, shape.top_k, axis=0))[:-1]
        buf = jax.lax.all_to_all(buf.reshape(ep, e_local, capacity, h), "ep", 0, 0)
        hid = jnp.einsum("selh,ehmf->selmf", buf, w1)
        act = nn.silu(hid[..., 0, :]) * hid[..., 1, :] if shape.gated else nn.gelu(hid[..., 0, :])
        out = jnp.einsum("self,efh->selh", act, w2)
        out = jax.lax.all_to_all(out, "ep", 0, 0).reshape(shape.experts * capacity, h)
        out = jnp.concatenate([out, jnp.zeros((1, h), dt)])[slot]
        out = out.reshape(tokens, shape.top_k, h) * gates[..., None].astype(dt)
        return out.sum(1).reshape(b, s, h)

    ffn = jax.shard_map(experts_ffn, mesh=mesh,
                        in_specs=(P(batch), P(), P("ep"), P("ep")), out_specs=P(batch))

    dense, norm = audit.dense, audit.norm

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            g = shape.heads // shape.kv_heads
            qkv = dense((shape.kv_heads, g + 2, head_dim), "qkv")(norm()(x))
            q, k, v = qkv[:, :, :, :g], qkv[:, :, :, g], qkv[:, :, :, g + 1]
            x = x + dense(h, "out", axis=(-3, -2, -1))(audit.causal_attention(q, k, v))
            init = nn.initializers.normal(0.02)
            router = self.param("router", init, (h, shape.experts), dt)
            w1 = self.param("w1", init, (shape.experts, h, mats, shape.expert_ffn_hidden), dt)
            w2 = self.param("w2", init, (shape.experts, shape.expert_ffn_hidden, h), dt)
            return x + ffn(norm()(x), router, w1, w2)

    class Moe(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = self.param("embedding", nn.initializers.normal(0.02), (shape.vocab, h), dt)
            x = jnp.take(emb, tokens, axis=0)
            for i in range(shape.layers):
                x = Block(name=f"block{i}")(x)
            out = self.param("unembedding", nn.initializers.normal(0.02), (shape.vocab, h), dt)
            return norm()(x) @ out.T

    model = Moe()
    n = mesh.devices.size
    tokens = jax.ShapeDtypeStruct((n * shape.micro_batch, s), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)

    def spec(path, leaf):
        names = [str(getattr(p, "key", p)) for p in path]
        return NamedSharding(mesh, P("ep") if names[-1] in ("w1", "w2") else P())

    param_sharding = jax.tree_util.tree_map_with_path(spec, params)
    _, train = audit.sgd_step(model)
    return train, (params, tokens), (param_sharding, NamedSharding(mesh, P(batch))), \
        (param_sharding, None)


def make_mesh(axes: dict, devices=None):
    """A mesh of `axes` ({name: size}, the last innermost) on the first devices."""
    from ._trace import check_devices

    devices = list(jax.devices() if devices is None else devices)
    n = 1
    for v in axes.values():
        n *= int(v)
    check_devices(n, len(devices))
    return jax.make_mesh(tuple(int(v) for v in axes.values()), tuple(axes),
                         axis_types=(AxisType.Auto,) * len(axes), devices=devices[:n])
