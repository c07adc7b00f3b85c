"""The program path against the step model: trace the transformer `codesign audit`
builds (or the MoE example) and set `cost` beside `step.step` of the equivalent
scenario (the same model, plan and system), on step time and on the bytes of
every collective.

The equivalent scenario: the traced shape as a `Transformer` with the naive
attention kernel (the traced model materialises the s x s scores), the mesh as a
`Plan` (one micro-batch, no ZeRO, no recompute) in bf16 with gradients reduced in
bf16 (the traced parameters, hence their gradients, are bf16).

Bytes the traffic table leaves out, and that the program therefore moves on top
of it (predicted here from the shape, not read from the HLO):
- tp: the vocab-parallel embedding's all-reduce in forward and the logits'
  input-gradient all-reduce in backward (b s h each, bf16), and the
  cross-entropy over vocab-parallel logits: 4 buffers of b s values (max, sum
  of exponentials, the target logit, and the sum's gradient), counted apart
  (`cross_entropy_values`): the loss is f32 in the program, and which of its
  values the program widened cannot be told from XLA:CPU's own widening
  (`_hlo_ops`), so their bytes come out at 2 or 4 per value;
- dp: the layer-norm scales ((2 layers + 1) x hidden, bf16, replicated over tp)
  and the loss mean (one value);
- ep: none.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from ..model import attention, step
from ..model.plan import Plan, recipe
from ..model.workload import Transformer
from . import _cost, _trace, examples

WIDTH = 2.0  # bf16: the traced models' parameters and activations

# the three cross-check scenarios: (builder, mesh, config)
SCENARIOS = {
    "dense": ("transformer", {"dp": 2, "tp": 4},
              dict(layers=2, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152,
                   seq_len=2048, vocab=51200, micro_batch=1)),
    "gqa": ("transformer", {"dp": 2, "tp": 4},
            dict(layers=2, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, seq_len=2048,
                 vocab=32768, micro_batch=1, gated=True)),
    "moe": ("moe", {"dp": 2, "ep": 4},
            dict(layers=2, hidden=4096, heads=32, kv_heads=8, seq_len=2048, vocab=32768,
                 micro_batch=1, experts=8, top_k=2, expert_ffn_hidden=14336, gated=True)),
}


def _plan(dp, tp, ep, micro_batch) -> Plan:
    return Plan(dp, tp, 1, 1, ep, micro_batch, dp * micro_batch,
                precision=recipe("bf16", grad_reduce="bf16"))


def equivalent(kind: str, mesh_axes: dict, config: dict) -> tuple[Transformer, Plan]:
    """The (Transformer, Plan) the step model costs for a cross-check scenario."""
    naive = attention.NaiveAttention()
    if kind == "transformer":
        mesh = examples.make_mesh(mesh_axes)
        shape = examples.transformer_shape(mesh, **config)
        model = dataclasses.replace(shape.transformer(), attention_kernel=naive)
        return model, _plan(shape.dp, shape.tp, 1, shape.micro_batch)
    s = examples.MoeShape(**config)
    model = Transformer(s.layers, s.hidden, s.heads, s.seq_len, s.vocab, kv_heads=s.kv_heads,
                        ffn_hidden=s.expert_ffn_hidden, moe_layers=s.layers, experts=s.experts,
                        top_k=s.top_k, expert_ffn_hidden=s.expert_ffn_hidden, gated=s.gated,
                        tied_embeddings=False, attention_kernel=naive)
    n = mesh_axes["dp"] * mesh_axes["ep"]
    return model, _plan(n, 1, mesh_axes["ep"], s.micro_batch)


def left_out_bytes(kind: str, model: Transformer, plan: Plan) -> dict:
    """{dimension: bytes the program moves beyond the table's rows} (module doc),
    the cross-entropy's values apart (`cross_entropy_values`)."""
    b, s, h = float(plan.micro_batch), float(model.seq_len), float(model.hidden)
    dp = (2.0 * float(model.layers) + 1.0) * h * WIDTH + WIDTH
    tp = 2.0 * b * s * h * WIDTH if kind == "transformer" and float(plan.tp) > 1 else 0.0
    return {"tp": tp, "dp": dp, "ep": 0.0}


def cross_entropy_values(kind: str, plan: Plan, model: Transformer) -> int:
    """The b s-value reductions of the cross-entropy over vocab-parallel logits."""
    return 4 if kind == "transformer" and float(plan.tp) > 1 else 0


def _dimension(kind: str, axes: tuple[str, ...]) -> str:
    if kind == "transformer":
        return {("tp",): "tp", ("dp",): "dp"}.get(axes, "+".join(axes))
    return {("ep",): "ep", ("dp", "ep"): "dp", ("dp",): "dp"}.get(axes, "+".join(axes))


def run(name: str, system, program: _trace.Program | None = None) -> dict:
    """Trace scenario `name` of `SCENARIOS` (on the first devices JAX sees), cost it
    on `system`, and compare with `step.step` of the equivalent scenario."""
    kind, mesh_axes, config = SCENARIOS[name]
    if program is None:
        mesh = examples.make_mesh(mesh_axes)
        fn, args, ins, outs = getattr(examples, kind)(mesh, **config)
        program = _trace.trace(fn, *args, mesh=mesh, in_shardings=ins, out_shardings=outs,
                               name=name)
    model, plan = equivalent(kind, mesh_axes, config)
    devices = float(program.devices)
    system = eqx.tree_at(lambda x: x.gpus, system, jnp.asarray(devices))
    est = jax.jit(lambda sy: _cost.cost(program, sy))(system)
    ref = jax.jit(step.step)(model, plan, system)
    table: dict = {}
    for r in ref.traffic:
        if float(r.count_per_step) > 0 and float(r.ranks) > 1:
            table[r.dimension] = table.get(r.dimension, 0.0) + float(
                r.count_per_step * r.message_bytes)
    moved: dict = {}
    loss_values = []  # (elements, bytes) of the cross-entropy's b s-value buffers over tp
    bs = int(plan.micro_batch) * int(model.seq_len)
    for op in program.collectives:
        d = _dimension(kind, program.axes(op))
        for elements, n in op.buffers:
            if d == "tp" and elements == bs:
                loss_values.append((elements, n))
                continue
            moved[d] = moved.get(d, 0.0) + n
    extra = left_out_bytes(kind, model, plan)
    dims = sorted(set(table) | set(moved))
    bytes_ = {d: {"program": moved.get(d, 0.0), "table": table.get(d, 0.0),
                  "left_out": extra.get(d, 0.0),
                  "exact": moved.get(d, 0.0) == table.get(d, 0.0) + extra.get(d, 0.0)}
              for d in dims}
    ce = {"expected": cross_entropy_values(kind, plan, model), "found": len(loss_values),
          "bytes": [n for _, n in loss_values]}
    return {"scenario": name, "program_step_s": float(est.step_time_s),
            "estimate_step_s": float(ref.step_time_s),
            "ratio": float(est.step_time_s) / float(ref.step_time_s),
            "program": {"compute_s": float(est.compute_s), "gemm_s": float(est.gemm_s),
                        "memory_s": float(est.memory_s), "exposed_s": float(est.exposed_s)},
            "estimate": {k: float(v) for k, v in ref.breakdown_s().items()},
            "bytes": bytes_, "cross_entropy": ce, "program_obj": program}
