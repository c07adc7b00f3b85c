"""A user-written model that codesign's `Transformer` cannot express: blocks that
alternate causal attention with a gated linear recurrence (an RG-LRU-style layer,
as in Griffin / RecurrentGemma), each followed by a gated MLP, in flax.

The recurrence h_t = a_t * h_{t-1} + (1 - a_t) * x_t runs over the sequence with
`jax.lax.associative_scan` (log-depth, no loop), its channels split over the
'tp' axis (element-wise in the channels: no communication inside it); attention
heads and MLP columns are Megatron-split over 'tp', the batch over 'dp'.

`build(mesh, **config)` is the protocol `codesign program` calls:

    codesign program docs/examples/hybrid.py:build --spec docs/examples/hybrid.toml

It imports nothing from codesign.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def build(mesh, layers=4, hidden=256, heads=8, width=512, mlp=1024, seq_len=128, vocab=1024,
          micro_batch=2):
    dt = jnp.bfloat16
    head_dim, s = hidden // heads, seq_len

    def pin(x, *spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))

    def dense(features, name, axis=-1):
        return nn.DenseGeneral(features, axis=axis, use_bias=False, dtype=dt, param_dtype=dt,
                               name=name)

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x):
            qkv = pin(dense((3, heads, head_dim), "qkv")(x), "dp", None, None, "tp", None)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            scores = jnp.einsum("bqhd,bshd->bhqs", q, k).astype(jnp.float32) / head_dim**0.5
            scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -1e9)
            att = jnp.einsum("bhqs,bshd->bqhd", jax.nn.softmax(scores, -1).astype(dt), v)
            return pin(dense(hidden, "out", axis=(-2, -1))(att), "dp", None, None)

    class Recurrence(nn.Module):
        @nn.compact
        def __call__(self, x):
            u = pin(dense((2, width), "in")(x), "dp", None, None, "tp")
            gate = jax.nn.sigmoid(u[:, :, 0].astype(jnp.float32))
            value = u[:, :, 1].astype(jnp.float32)

            def combine(left, right):  # (a, b): h -> a h + b, composed
                return right[0] * left[0], right[0] * left[1] + right[1]

            _, h = jax.lax.associative_scan(combine, (gate, (1.0 - gate) * value), axis=1)
            return pin(dense(hidden, "proj")(h.astype(dt)), "dp", None, None)

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = pin(dense((2, mlp), "up")(x), "dp", None, None, "tp")
            return pin(dense(hidden, "down")(nn.silu(h[:, :, 0]) * h[:, :, 1]), "dp", None, None)

    class Hybrid(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = self.param("embedding", nn.initializers.normal(0.02), (vocab, hidden), dt)
            x = jnp.take(emb, tokens, axis=0)
            for i in range(layers):
                mixer = Attention if i % 2 else Recurrence
                x = x + mixer(name=f"mixer{i}")(nn.RMSNorm(dtype=dt, param_dtype=dt)(x))
                x = x + Mlp(name=f"mlp{i}")(nn.RMSNorm(dtype=dt, param_dtype=dt)(x))
            return nn.RMSNorm(dtype=dt, param_dtype=dt)(x) @ emb.T

    model = Hybrid()
    tokens = jax.ShapeDtypeStruct((mesh.shape["dp"] * micro_batch, s), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)
    split = {"qkv": P(None, None, "tp", None), "out": P("tp", None, None),
             "in": P(None, None, "tp"), "proj": P("tp", None), "up": P(None, None, "tp"),
             "down": P("tp", None)}

    def spec(path, leaf):
        names = [str(getattr(p, "key", p)) for p in path]
        layer = next((n for n in reversed(names) if n in split), None)
        return NamedSharding(mesh, split[layer] if layer and names[-1] == "kernel" else P())

    shardings = jax.tree_util.tree_map_with_path(spec, params)

    def loss(p, tok):
        logp = jax.nn.log_softmax(model.apply(p, tok).astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(logp, tok[..., None], axis=-1))

    def train(p, tok):
        value, grads = jax.value_and_grad(loss)(p, tok)
        return jax.tree.map(lambda w, g: w - 0.01 * g, p, grads), value

    return train, (params, tokens), (shardings, NamedSharding(mesh, P("dp", None))), \
        (shardings, None)
