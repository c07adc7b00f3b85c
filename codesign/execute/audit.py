"""The HLO traffic audit: compile a real sharded training step, read its collectives
back, and set them beside the traffic table the step model predicts.

The scenario's transformer is scaled down (its shape ratios kept: heads per
tensor-parallel rank, kv heads, FFN width over hidden, gated or not, tied
embeddings or not) to `AUDIT_LAYERS` layers of head dimension `HEAD_DIM` on
`AUDIT_SEQ_LEN` tokens, built with flax, and cut over a ('dp', 'tp') mesh the
Megatron way: QKV and the first FFN matrix column-parallel, the attention
output and second FFN matrix row-parallel, the embedding vocab-parallel, the
batch over dp; with sequence parallelism (the scenario's) the residual
stream is also split over tp along the sequence. `jax.jit` with
NamedSharding compiles the forward pass and the training step (loss,
gradients, SGD update); `hlo.parse` reads every collective, and `hlo.attribute`
names its mesh axis.

The prediction is `traffic.table` (via `step.step`) for the same scaled
configuration: one micro-batch per step, no ZeRO, bf16 (the table's wire
widths: 2 bytes per activation and gradient element). HLO bytes are compared
at that width: XLA:CPU reduces bf16 in f32, so its HLO shows twice the bytes
a GPU program moves; the element counts are what must agree.

What the table leaves out and the audit therefore explains rather than
counts as error: the vocab-parallel embedding's all-reduce (forward) and the
logits' input-gradient all-reduce (backward), both of b s h elements; the
cross-entropy's reductions over the vocab shards (b s values each); the loss
mean over dp (one scalar); and the layer-norm scales, replicated over tp and
left out of the model's parameter count, in the gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from ..model import step
from ..model.plan import Plan
from ..model.workload import Transformer
from . import hlo

AUDIT_LAYERS = 2
HEAD_DIM = 16
AUDIT_SEQ_LEN = 32
AUDIT_MICRO_BATCH = 2
AUDIT_VOCAB_PER_TP = 64
AXES = ("dp", "tp")



def _relative(delta, reference) -> float | None:
    """delta / reference; 0 for 0 / 0, None (no ratio) for x / 0."""
    if reference:
        return delta / reference
    return 0.0 if delta == 0 else None


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:+.1%}"

def parse_mesh(text: str) -> dict:
    """`"dp=2,tp=4"` -> {'dp': 2, 'tp': 4} (order kept: the last axis is innermost)."""
    out = {}
    for part in str(text).split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in AXES:
            raise ValueError(f"mesh={text!r}: axis {key!r} is not one the audit builds; use "
                             f"{' and '.join(AXES)} (e.g. dp=2,tp=4)")
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"mesh={text!r}: {key}={value!r} must be a positive integer")
        out[key] = int(value)
    out = {a: out.get(a, 1) for a in AXES}
    return out


@dataclasses.dataclass(frozen=True)
class AuditShape:
    """The scaled-down transformer and its cut."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    seq_len: int
    vocab: int
    micro_batch: int  # per dp rank
    gated: bool
    tied_embeddings: bool
    dp: int
    tp: int
    sequence_parallel: bool
    notes: tuple[str, ...]

    def transformer(self) -> Transformer:
        return Transformer(self.layers, self.hidden, self.heads, self.seq_len, self.vocab,
                           kv_heads=self.kv_heads, ffn_hidden=self.ffn_hidden, gated=self.gated,
                           tied_embeddings=self.tied_embeddings)

    def plan(self) -> Plan:
        return Plan(self.dp, self.tp, 1, 1, 1, self.micro_batch, self.dp * self.micro_batch,
                    sequence_parallel=self.sequence_parallel, dtype="bf16")

    @property
    def activation_elements(self) -> int:
        return self.micro_batch * self.seq_len * self.hidden


def _multiple(x: float, of: int) -> int:
    return max(of, int(round(x / of)) * of)


def scaled_shape(model: Transformer, plan: Plan, mesh: dict) -> AuditShape:
    """The scenario's model at audit size on `mesh` (see the module doc)."""
    dp, tp = mesh["dp"], mesh["tp"]
    heads, kv = float(model.heads), float(model.kv_heads)
    notes = []
    heads_small = tp * max(1, min(2, int(heads // tp)))
    kv_small = heads_small * kv / heads
    if kv_small < tp or kv_small != int(kv_small) or heads_small % kv_small:
        kv_small = heads_small if kv == heads else tp
        if kv != heads:
            notes.append(f"kv heads {kv:g} of {heads:g} scaled to {kv_small:g} of "
                         f"{heads_small} (a multiple of tp={tp})")
    hidden = heads_small * HEAD_DIM
    ffn = _multiple(float(model.ffn_hidden) / float(model.hidden) * hidden, tp)
    if float(model.moe_layers) > 0:
        notes.append(f"{float(model.moe_layers):g} MoE layers built dense (ep is not audited)")
    if plan.zero.shards_anything:
        notes.append(f"ZeRO-{plan.zero.name} is not built: gradients are all-reduced (the table "
                     "is computed with zero=0 too)")
    if float(plan.pp) > 1 or float(plan.cp) > 1 or float(plan.ep) > 1:
        notes.append("pp, cp and ep of the scenario are not built: dp x tp only")
    return AuditShape(min(AUDIT_LAYERS, int(float(model.layers))), hidden, heads_small,
                      int(kv_small), ffn, AUDIT_SEQ_LEN, AUDIT_VOCAB_PER_TP * tp,
                      AUDIT_MICRO_BATCH, bool(model.gated), bool(model.tied_embeddings), dp, tp,
                      bool(plan.sequence_parallel), tuple(notes))


# ------------------------------------------------------------------ the flax model
# bf16 layers, causal GQA attention and the SGD step of the audit's model, shared
# with codesign.program.examples (its MoE transformer)
def dense(features, name, axis=-1):
    """A bias-free bf16 linear layer (flax), inside a module's `compact` call."""
    import flax.linen as nn

    return nn.DenseGeneral(features, axis=axis, use_bias=False, dtype=jnp.bfloat16,
                           param_dtype=jnp.bfloat16, name=name)


def norm():
    """A bias-free bf16 LayerNorm (flax), inside a module's `compact` call."""
    import flax.linen as nn

    return nn.LayerNorm(use_bias=False, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)


def causal_attention(q, k, v):
    """Causal attention of queries q (b, s, kv_heads, group, d) over keys and
    values (b, s, kv_heads, d): f32 scores over the whole s x s matrix, masked,
    softmax in q's width; (b, s, kv_heads, group, d)."""
    s, d = q.shape[1], q.shape[-1]
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) / d**0.5
    scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -1e9)
    return jnp.einsum("bkgqs,bskd->bqkgd", jax.nn.softmax(scores, -1).astype(q.dtype), v)


def sgd_step(model) -> tuple:
    """(loss, train) of a flax language `model` (tokens -> logits): softmax
    cross-entropy on the tokens themselves, one SGD step at rate 0.01."""
    def loss(p, tok):
        logp = jax.nn.log_softmax(model.apply(p, tok).astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(logp, tok[..., None], axis=-1))

    def train(p, tok):
        value, grads = jax.value_and_grad(loss)(p, tok)
        return jax.tree.map(lambda w, g: w - 0.01 * g, p, grads), value

    return loss, train


def _flax_model(shape: AuditShape, mesh):
    import flax.linen as nn

    residual = P("dp", "tp", None) if shape.sequence_parallel else P("dp", None, None)
    head_dim, dt = shape.hidden // shape.heads, jnp.bfloat16

    def pin(x, spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    class Block(nn.Module):
        """Megatron's block: one fused QKV projection (kv-head groups split over tp),
        one fused first FFN matrix (with the gate when gated)."""

        @nn.compact
        def __call__(self, x):
            g = shape.heads // shape.kv_heads
            y = pin(norm()(x), P("dp", None, None))  # sequence-parallel: all-gather here
            qkv = dense((shape.kv_heads, g + 2, head_dim), "qkv")(y)
            qkv = pin(qkv, P("dp", None, "tp", None, None))
            q, k, v = qkv[:, :, :, :g], qkv[:, :, :, g], qkv[:, :, :, g + 1]
            att = pin(causal_attention(q, k, v), P("dp", None, "tp", None, None))
            x = x + pin(dense(shape.hidden, "out", axis=(-3, -2, -1))(att), residual)
            y = pin(norm()(x), P("dp", None, None))
            if shape.gated:
                h = pin(dense((2, shape.ffn_hidden), "fc1")(y), P("dp", None, None, "tp"))
                h = nn.silu(h[:, :, 0]) * h[:, :, 1]
            else:
                h = nn.gelu(pin(dense(shape.ffn_hidden, "fc1")(y), P("dp", None, "tp")))
            return x + pin(dense(shape.hidden, "fc2")(h), residual)

    class GPT(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = self.param("embedding", nn.initializers.normal(0.02),
                             (shape.vocab, shape.hidden), dt)
            # Megatron's lookup: partial sums over the vocab shards, reduced (then split
            # along the sequence when sequence-parallel)
            x = pin(jax.nn.one_hot(tokens, shape.vocab, dtype=dt) @ emb, P("dp", None, None))
            x = pin(x, residual)
            for i in range(shape.layers):
                x = Block(name=f"block{i}")(x)
            x = pin(norm()(x), P("dp", None, None))
            out = emb if shape.tied_embeddings else self.param(
                "unembedding", nn.initializers.normal(0.02), (shape.vocab, shape.hidden), dt)
            return pin(x @ out.T, P("dp", None, "tp"))

    return GPT()


_PARAM_SPECS = {"embedding": P("tp", None), "unembedding": P("tp", None),
                "qkv": P(None, "tp", None, None), "out": P("tp", None, None, None),
                "fc2": P("tp", None)}


def _param_spec(path, leaf) -> P:
    names = [str(getattr(p, "key", p)) for p in path]
    if "fc1" in names:  # (hidden, ffn) or gated (hidden, 2, ffn): split the ffn axis
        return P(*([None] * (leaf.ndim - 1)), "tp")
    for name in reversed(names):
        if name in _PARAM_SPECS:
            return _PARAM_SPECS[name]
    return P()  # layer-norm scales: replicated


def train_step(shape: AuditShape, mesh) -> tuple:
    """(loss, train, (params, tokens), (param shardings, batch sharding)) of the
    scaled transformer on `mesh` (a ('dp', 'tp') Mesh): the loss and the SGD
    training step `compile_hlo` compiles, on abstract arguments."""
    model = _flax_model(shape, mesh)
    tokens = jax.ShapeDtypeStruct((shape.dp * shape.micro_batch, shape.seq_len), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)
    param_sharding = jax.tree.map(lambda s: NamedSharding(mesh, s),
                                  jax.tree_util.tree_map_with_path(_param_spec, params))
    batch_sharding = NamedSharding(mesh, P("dp", None))
    loss, train = sgd_step(model)
    return loss, train, (params, tokens), (param_sharding, batch_sharding)


def mesh_for(shape: AuditShape, devices: Sequence | None = None):
    """The ('dp', 'tp') mesh of `shape` on the first dp x tp of `devices`."""
    devices = list(jax.devices() if devices is None else devices)
    n = shape.dp * shape.tp
    if n > len(devices):
        raise ValueError(f"mesh dp={shape.dp},tp={shape.tp} needs {n} devices; JAX sees "
                         f"{len(devices)}")
    return jax.make_mesh((shape.dp, shape.tp), AXES, axis_types=(AxisType.Auto,) * 2,
                         devices=devices[:n])


def compile_hlo(shape: AuditShape, devices: Sequence | None = None) -> dict:
    """{'forward': HLO text of the loss, 'train': HLO text of the training step}
    and the mesh they were compiled for."""
    mesh = mesh_for(shape, devices)
    loss, train, (params, tokens), shardings = train_step(shape, mesh)
    param_sharding = shardings[0]
    forward = jax.jit(loss, in_shardings=shardings).lower(params, tokens).compile()
    train_step_ = jax.jit(train, in_shardings=shardings, out_shardings=(param_sharding, None))
    train_hlo = train_step_.lower(params, tokens).compile().as_text()
    return {"forward": forward.as_text(), "train": train_hlo,
            "mesh": mesh, "param_shards": _param_shards(params, param_sharding)}


def _param_shards(params, shardings) -> dict:
    """{parameter path: elements of one rank's shard}."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return {jax.tree_util.keystr(path): math.prod(sharding.shard_shape(leaf.shape))
            for (path, leaf), sharding in zip(leaves, jax.tree.leaves(shardings), strict=True)}


# ------------------------------------------------------------------ comparison
@dataclasses.dataclass(frozen=True)
class Observed:
    """One logical collective (one buffer of one HLO instruction)."""

    program: str  # forward or train
    kind: str
    axis: str
    elements: int
    dtype: str
    role: str  # activation, cross-entropy, gradient, loss mean, other
    op_name: str


def _role(buf: hlo.Buffer, axis: str, shape: AuditShape) -> str:
    if axis == "tp":
        if buf.elements == shape.activation_elements:
            return "activation"
        if buf.elements == shape.micro_batch * shape.seq_len:
            return "cross-entropy"
        if buf.elements == shape.hidden and shape.sequence_parallel:
            return "norm grads (sp)"
    if axis == "dp":
        return "loss mean" if buf.elements == 1 else "gradient"
    return "other"


def observed(program: str, text: str, shape: AuditShape, mesh) -> list[Observed]:
    names, sizes = tuple(mesh.axis_names), tuple(mesh.devices.shape)
    out = []
    for c in hlo.parse(text, num_devices=math.prod(sizes)):
        axis = hlo.attribute(c, names, sizes)
        for buf in c.buffers:
            out.append(Observed(program, c.kind, axis, buf.elements, buf.dtype,
                                _role(buf, axis, shape), c.op_name))
    return out


def predicted_rows(shape: AuditShape, system) -> list[dict]:
    """The traffic table of the scaled configuration (rows that move bytes)."""
    system = eqx.tree_at(lambda s: s.gpus, system, jnp.asarray(float(shape.dp * shape.tp)))
    rows = jax.jit(step.step)(shape.transformer(), shape.plan(), system).traffic
    out = []
    for r in rows:
        count, ranks = float(r.count_per_step), float(r.ranks)
        if count > 0 and ranks > 1:
            out.append({"dimension": r.dimension, "collective": r.collective,
                        "algorithm": r.algorithm, "ranks": ranks,
                        "message_bytes": float(r.message_bytes), "count_per_step": count})
    return out


_WHY = {
    "embedding/logits": "outside the layers: the vocab-parallel embedding lookup's all-reduce "
                        "(and, sequence-parallel, the gather before the logits) in forward, "
                        "their input gradients in backward, b s h each; Megatron does the same, "
                        "the table counts the layers' collectives only",
    "cross-entropy": "softmax cross-entropy over vocab-parallel logits reduces b s values (max, "
                     "sum of exp, target logit) over the vocab shards",
    "loss mean": "the mean loss over the dp replicas: one scalar",
    "layer-norm scales": "layer-norm scales ((2 layers + 1) x hidden, replicated over tp) are "
                         "reduced with the gradients; the model's parameter count leaves norms "
                         "out",
    "norm grads (sp)": "with sequence parallelism each tp rank sees part of the sequence, so "
                       "the layer-norm scale gradients are summed over tp (hidden values "
                       "each; Megatron does the same)",
    "tied embedding": "the tied embedding's gradient is reduced once per use (lookup and "
                      "logits): XLA does not add the two before the all-reduce",
}


def _forward_pattern(forward: Sequence[Observed], shape: AuditShape) -> dict:
    layer_ops = [o for o in forward if o.axis == "tp" and o.role == "activation"
                 and "/block" in o.op_name]
    embedding = [o for o in forward if o.axis == "tp" and o.role == "activation"
                 and "/block" not in o.op_name]
    return {
        "tp_all_reduces_per_layer": sum(o.kind == "all-reduce" for o in layer_ops) / shape.layers,
        "tp_reduce_scatters_per_layer": sum(o.kind == "reduce-scatter" for o in layer_ops)
        / shape.layers,
        "tp_all_gathers_per_layer": sum(o.kind == "all-gather" for o in layer_ops) / shape.layers,
        "embedding_collectives": len(embedding),
    }


def _explained(role: str, count: int, elements: int, width: float) -> dict:
    return {"role": role, "count": count, "bytes": elements * width, "why": _WHY[role]}


def compare(shape: AuditShape, obs: Sequence[Observed], rows: Sequence[dict],
            param_shards: dict) -> dict:
    """Per dimension: predicted count and bytes, HLO count and bytes (at the table's
    wire width), the difference, and the parts of it that are explained."""
    train = [o for o in obs if o.program == "train"]
    forward = _forward_pattern([o for o in obs if o.program == "forward"], shape)
    out = {"forward": forward}
    for dim, counted_role in (("tp", "activation"), ("dp", "gradient")):
        mine = [r for r in rows if r["dimension"] == dim]
        pred_count = sum(r["count_per_step"] for r in mine)
        pred_bytes = sum(r["count_per_step"] * r["message_bytes"] for r in mine)
        width = shape.plan().precision.bytes("activations" if dim == "tp" else "grad_reduce")
        seen = [o for o in train if o.axis == dim]
        counted = [o for o in seen if o.role == counted_role]
        explained = []  # parts of `counted` the table leaves out, then extra collectives
        if dim == "tp" and forward["embedding_collectives"]:
            n = 2 * forward["embedding_collectives"]  # lookup forward, logits input grad backward
            explained.append(_explained("embedding/logits", n, n * shape.activation_elements,
                                        width))
        if dim == "dp":
            norms = [v for k, v in param_shards.items() if "LayerNorm" in k]
            explained.append(_explained("layer-norm scales", len(norms), sum(norms), width))
            embedding = param_shards.get("['params']['embedding']", 0)
            sizes = sorted(o.elements for o in counted)
            for v in param_shards.values():
                if v in sizes:
                    sizes.remove(v)
            if shape.tied_embeddings and embedding in sizes:
                explained.append(_explained("tied embedding", 1, embedding, width))
        hlo_bytes = sum(o.elements for o in counted) * width
        unexplained = hlo_bytes - sum(e["bytes"] for e in explained) - pred_bytes
        extra = [o for o in seen if o.role != counted_role]
        for role in sorted({o.role for o in extra} - {"other"}):
            these = [o for o in extra if o.role == role]
            explained.append(_explained(role, len(these), sum(o.elements for o in these),
                                        width))
        others = [o for o in extra if o.role == "other"]
        out[dim] = {
            "predicted_count": pred_count, "predicted_bytes": pred_bytes,
            "hlo_count": len(counted), "hlo_bytes": hlo_bytes,
            "hlo_bytes_as_compiled": sum(o.elements * hlo.DTYPE_BYTES[o.dtype] for o in counted),
            "hlo_dtypes": sorted({o.dtype for o in counted}),
            # relative to the prediction; with none predicted, 0 when none is found either
            # and None (JSON null, "n/a") when some is: no ratio, never a NaN
            "difference": _relative(hlo_bytes - pred_bytes, pred_bytes),
            "unexplained_difference": _relative(unexplained, pred_bytes),
            "explained": explained,
            "unexplained_collectives": [dataclasses.asdict(o) for o in others],
        }
    return out


@dataclasses.dataclass(frozen=True)
class AuditReport:
    scenario: str
    shape: AuditShape
    hlo: tuple[Observed, ...]
    predicted: tuple[dict, ...]
    comparison: dict

    @property
    def megatron_pattern(self) -> bool:
        """2 tensor-parallel all-reduces per layer in forward (2 reduce-scatters and
        2 all-gathers with sequence parallelism)."""
        f = self.comparison["forward"]
        if self.shape.sequence_parallel:  # XLA:CPU leaves the reduce-scatter an all-reduce
            scatters = f["tp_reduce_scatters_per_layer"] + f["tp_all_reduces_per_layer"]
            return scatters == 2 == f["tp_all_gathers_per_layer"]
        return f["tp_all_reduces_per_layer"] == 2

    @property
    def gradient_bytes_match(self) -> bool:
        """Within 5% once the explained parts are removed."""
        d = self.comparison["dp"]["unexplained_difference"]
        return d is not None and abs(d) <= 0.05

    def as_json(self) -> dict:
        return {"scenario": self.scenario, "shape": dataclasses.asdict(self.shape),
                "hlo": [dataclasses.asdict(o) for o in self.hlo],
                "predicted": list(self.predicted), "comparison": self.comparison,
                "megatron_pattern": self.megatron_pattern,
                "gradient_bytes_match": self.gradient_bytes_match}


def run(scenario, mesh: dict, devices: Sequence | None = None, name: str = "scenario"
        ) -> AuditReport:
    """Audit `scenario` (a codesign.scenario.Scenario) on `mesh` ({'dp': 2, 'tp': 4})."""
    shape = scaled_shape(scenario.model, scenario.plan, mesh)
    compiled = compile_hlo(shape, devices)
    obs = (observed("forward", compiled["forward"], shape, compiled["mesh"])
           + observed("train", compiled["train"], shape, compiled["mesh"]))
    rows = predicted_rows(shape, scenario.system)
    return AuditReport(name, shape, tuple(obs), tuple(rows),
                       compare(shape, obs, rows, compiled["param_shards"]))


# ------------------------------------------------------------------ text
def _b(n: float) -> str:
    from ..units import format_bytes

    return format_bytes(n)


def format_report(report: AuditReport) -> str:
    s = report.shape
    lines = [f"codesign audit: {report.scenario} scaled to layers={s.layers} hidden={s.hidden} "
             f"heads={s.heads} kv_heads={s.kv_heads} ffn={s.ffn_hidden}"
             f"{' (gated)' if s.gated else ''} seq={s.seq_len} vocab={s.vocab} "
             f"micro_batch={s.micro_batch}, mesh dp={s.dp} tp={s.tp}"
             f"{', sequence parallel' if s.sequence_parallel else ''}, bf16"]
    lines += [f"  note: {n}" for n in s.notes]
    lines.append("")
    lines.append("compiled HLO collectives (one line per logical collective kind):")
    lines.append(f"  {'program':<8} {'axis':<6} {'collective':<19} {'role':<17} {'count':>5} "
                 f"{'elements':>9} {'dtype':>5}")
    groups: dict = {}
    for o in report.hlo:
        groups.setdefault((o.program, o.axis, o.kind, o.role, o.elements, o.dtype), 0)
        groups[(o.program, o.axis, o.kind, o.role, o.elements, o.dtype)] += 1
    for (program, axis, kind, role, elements, dtype), count in groups.items():
        lines.append(f"  {program:<8} {axis:<6} {kind:<19} {role:<17} {count:5d} "
                     f"{elements:9d} {dtype:>5}")
    lines.append("")
    lines.append("predicted traffic table (same configuration, one micro-batch):")
    for r in report.predicted:
        lines.append(f"  {r['dimension']:<3} {r['collective']:<15} ranks {r['ranks']:g}  "
                     f"{r['count_per_step']:g} x {_b(r['message_bytes'])}")
    lines.append("")
    lines.append("per dimension, bytes at the table's wire width (bf16):")
    for dim in ("tp", "dp"):
        c = report.comparison[dim]
        lines.append(f"  {dim}: predicted {c['predicted_count']:g} collectives = "
                     f"{_b(c['predicted_bytes'])}, HLO {c['hlo_count']} = {_b(c['hlo_bytes'])} "
                     f"({_pct(c['difference'])}; as compiled {_b(c['hlo_bytes_as_compiled'])} "
                     f"in {'/'.join(c['hlo_dtypes']) or 'no dtype'}); unexplained "
                     f"{_pct(c['unexplained_difference'])}")
        for e in c["explained"]:
            lines.append(f"      + {e['role']} ({e['count']} x, {_b(e['bytes'])}): {e['why']}")
        for o in c["unexplained_collectives"]:
            lines.append(f"      ? {o['kind']} of {o['elements']} {o['dtype']} ({o['op_name']})")
    f = report.comparison["forward"]
    lines.append("")
    per_layer = f"{f['tp_all_reduces_per_layer']:g} all-reduces"
    if s.sequence_parallel:
        per_layer = (f"{f['tp_all_gathers_per_layer']:g} all-gathers and "
                     f"{f['tp_reduce_scatters_per_layer']:g} reduce-scatters + "
                     f"{f['tp_all_reduces_per_layer']:g} all-reduces (XLA:CPU keeps a "
                     "reduce-scatter as all-reduce + slice)")
    lines.append(f"forward: {per_layer} of b s h per layer over tp "
                 f"(+{f['embedding_collectives']} for the embedding); Megatron pattern: "
                 f"{'yes' if report.megatron_pattern else 'NO'}")
    lines.append(f"gradient bytes within 5% of the table once explained: "
                 f"{'yes' if report.gradient_bytes_match else 'NO'}")
    return "\n".join(lines)
