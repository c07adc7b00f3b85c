"""Parameters, FLOPs and activation bytes against published figures and closed forms."""

import pytest

from codesign.model import workload

# (preset, published parameter count, relative tolerance)
PUBLISHED = [
    ("megatron-8.3b", 8.3e9, 0.01),  # Shoeybi et al. 2019
    ("gpt3-175b", 175e9, 0.01),  # Brown et al. 2020
    ("megatron-530b", 530e9, 0.01),  # Smith et al. 2022
    ("megatron-1t", 1008e9, 0.01),  # Narayanan et al. 2021, Table 1: 1008B
    ("llama3-8b", 8.0e9, 0.01),  # Dubey et al. 2024
    ("llama3-70b", 70.6e9, 0.01),
    ("llama3-405b", 405e9, 0.01),
    ("mixtral-8x7b", 46.7e9, 0.01),  # Jiang et al. 2024: 46.7B total
    ("deepseek-v3", 671e9, 0.01),  # DeepSeek-V3: 671B total
]


@pytest.mark.parametrize("name,params,tol", PUBLISHED)
def test_parameter_counts_match_publications(name, params, tol):
    assert float(workload.model(name).params()) == pytest.approx(params, rel=tol)


def test_active_parameters_of_moe_models():
    assert float(workload.model("mixtral-8x7b").active_params_per_token()) == pytest.approx(12.9e9,
                                                                                            rel=0.02)
    # DeepSeek-V3: 37B activated (MLA approximated by MHA: within 3%)
    assert float(workload.model("deepseek-v3").active_params_per_token()) == pytest.approx(37e9,
                                                                                           rel=0.03)


def _narayanan(B, s, L, h, V, recompute):
    c = 96 if recompute else 72
    return c * B * s * L * h**2 * (1 + s / (6 * h) + V / ((16 if recompute else 12) * L * h))


@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-1t", "megatron-530b"])
def test_flops_follow_narayanan_2021(name):
    m = workload.model(name)
    B, s, L, h, V = 1536.0, float(m.seq_len), float(m.layers), float(m.hidden), float(m.vocab)
    tokens = B * s
    assert float(m.model_flops_per_token()) * tokens == pytest.approx(
        _narayanan(B, s, L, h, V, False), rel=1e-9)
    assert float(m.hardware_flops_per_token("full")) * tokens == pytest.approx(
        _narayanan(B, s, L, h, V, True), rel=1e-9)
    selective = float(m.hardware_flops_per_token("selective")) - float(m.model_flops_per_token())
    assert selective == pytest.approx(L * 4 * s * h)


@pytest.mark.parametrize("tp,sp", [(1, False), (8, False), (8, True)])
def test_activation_bytes_follow_korthikanti_2022(tp, sp):
    m = workload.model("gpt3-175b")
    s, b, h, a = 2048, 1, 12288, 96
    got = float(m.activation_bytes_per_layer(b, tp, sp, "none", False))
    want = (s * b * h / tp * (34 + 5 * a * s / h) if sp
            else s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp)))
    assert got == pytest.approx(want)
    # selective recompute drops the 5 a s^2 b term; full keeps only the input
    assert float(m.activation_bytes_per_layer(b, tp, sp, "selective", False)) == pytest.approx(
        s * b * h * ((34 / tp) if sp else (10 + 24 / tp)))
    assert float(m.activation_bytes_per_layer(b, tp, sp, "full", False)) == pytest.approx(
        2 * s * b * h / (tp if sp else 1))


def test_bad_models_are_rejected_with_the_field():
    with pytest.raises(ValueError, match="model.heads=30 must be a multiple of model.kv_heads=8"):
        workload.Transformer(4, 64, 30, 128, 1000, kv_heads=8)
    with pytest.raises(ValueError, match="model.layers=0"):
        workload.Transformer(0, 64, 8, 128, 1000)
    with pytest.raises(ValueError, match="model.top_k=9 must not exceed model.experts=8"):
        workload.Transformer(4, 64, 8, 128, 1000, moe_layers=2, experts=8, top_k=9,
                             expert_ffn_hidden=64)
    with pytest.raises(ValueError, match="unknown"):
        workload.preset("gpt-5")
    with pytest.raises(ValueError, match="recompute='some'"):
        workload.model("gpt3-175b").hardware_flops_per_token("some")


def test_derived_sizes_are_computed_once_per_instance_and_never_leak_a_trace():
    """`Transformer`'s derived sizes are kept on the instance only where they
    live in the instance's own traces: a traced model asks once per trace; a
    concrete model used under jit, or a traced one first asked inside a nested
    trace (a `lax.cond` branch), recomputes and leaks no tracer."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    m = workload.model("llama3-8b")
    expected = float(m.params())

    def count_params(model):
        return sum(e.primitive.name == "mul" for e in jax.make_jaxpr(
            lambda x: [model.params() for _ in range(3)])(0.0).jaxpr.eqns)

    @jax.jit
    def twice(hidden):
        traced = eqx.tree_at(lambda t: t.hidden, m, hidden)
        return traced.params() + traced.params()

    assert float(twice(jnp.asarray(4096.0))) == pytest.approx(2 * expected, rel=1e-12)
    # the concrete model under jit: staged each time, nothing kept across traces
    assert float(jax.jit(lambda: m.params())()) == pytest.approx(expected, rel=1e-12)
    assert float(jax.jit(lambda: m.params() * 1.0)()) == pytest.approx(expected, rel=1e-12)
    assert count_params(m) == 0  # concrete leaves: the concrete value is kept and reused

    def branch(hidden):
        traced = eqx.tree_at(lambda t: t.hidden, m, hidden)
        inner = jax.lax.cond(hidden > 0, lambda: traced.params(), lambda: 0.0 * hidden)
        return inner + traced.params()  # asked again outside the branch: no leaked tracer

    assert float(jax.jit(branch)(jnp.asarray(4096.0))) == pytest.approx(2 * expected, rel=1e-12)

    def repeats(hidden):
        traced = eqx.tree_at(lambda t: t.hidden, m, hidden)
        return traced.params() + traced.params() + traced.params()

    once = len(jax.make_jaxpr(lambda h: eqx.tree_at(lambda t: t.hidden, m, h).params())(
        1.0).jaxpr.eqns)
    assert len(jax.make_jaxpr(repeats)(1.0).jaxpr.eqns) == once + 2  # two adds, no repeats


# Hugging Face configs of models with their own head width, sliding windows and
# fine-grained experts (config.json of each release): (layers, hidden, heads,
# kv_heads, head_dim, ffn, vocab, tied, MoE (moe_layers, experts, top_k, width)),
# published total parameters
RELEASED = [
    # Qwen3-32B (Qwen/Qwen3-32B config.json; 32.8B in its model card)
    ((64, 5120, 64, 8, 128, 25600, 151936, False, None), 32.8e9),
    # Qwen3-30B-A3B: 30.5B total (model card)
    ((48, 2048, 32, 4, 128, 6144, 151936, False, (48, 128, 8, 768)), 30.5e9),
    # GPT-OSS-120B: 116.8B total (OpenAI's model card, Table 1)
    ((36, 2880, 64, 8, 64, 2880, 201088, False, (36, 128, 4, 2880)), 116.8e9),
    # Gemma-2-9B: 9.24B (Gemma 2 report, Table 2: 8.32B non-embedding + 0.92B embedding)
    ((42, 3584, 16, 8, 256, 14336, 256000, True, None), 9.24e9),
]


def _released(shape, **kw):
    layers, hidden, heads, kv, head_dim, ffn, vocab, tied, moe = shape
    if moe is not None:
        kw |= dict(zip(("moe_layers", "experts", "top_k", "expert_ffn_hidden"), moe, strict=True))
    return workload.Transformer(layers, hidden, heads, 4096, vocab, kv_heads=kv, head_dim=head_dim,
                                ffn_hidden=ffn, gated=True, tied_embeddings=tied, **kw)


@pytest.mark.parametrize("shape,params", RELEASED)
def test_head_width_of_its_own_gives_the_published_sizes(shape, params):
    model = _released(shape)
    assert float(model.params()) == pytest.approx(params, rel=0.01)
    # hidden / heads would miss the query and output projections' width
    narrow = _released(shape[:4] + (0,) + shape[5:])
    assert float(narrow.attention_params()) < 0.9 * float(model.attention_params())


def test_head_width_sets_the_attention_shapes():
    m = _released(RELEASED[1][0])  # Qwen3-30B-A3B: queries 32 x 128 = 4096 on a hidden of 2048
    (qkv_k, qkv_n, _, _), (o_k, o_n, _, _) = m.attention_gemms()
    assert (float(qkv_k), float(qkv_n), float(o_k), float(o_n)) == (2048, 4096 + 2 * 512, 4096,
                                                                      2048)
    assert float(m.kv_elements_per_token()) == 2 * 4 * 128
    assert float(m.attention_score_flops_per_token()) == 2 * 4096 * 32 * (128 + 128)
    # head_dim 0 (the default) is hidden / heads
    assert float(workload.model("llama3-8b").head_width) == 128.0


@pytest.mark.parametrize("chunked", [False, True])
def test_windowed_layers_count_only_the_keys_their_window_sees(chunked):
    full = _released(RELEASED[2][0])  # GPT-OSS-120B: a 128-token window every other layer
    half = _released(RELEASED[2][0], window_layers=18, window=128, chunked_attention=chunked)
    s, w = 4096.0, 128.0
    # sliding: query i sees min(i, w) keys, w - w^2 / 2s on average; chunked: w / 2;
    # the whole-matrix convention counts twice what a causal kernel executes
    windowed = w if chunked else 2 * w - w * w / s
    assert float(half.score_keys) == pytest.approx(0.5 * (s + windowed))
    assert float(half.attention_score_flops_per_token()) == pytest.approx(
        float(full.attention_score_flops_per_token()) * 0.5 * (s + windowed) / s)
    assert float(half.kv_share_per_layer()) == pytest.approx(0.5 * (1 + w / s))
    # a window as long as the sequence is full attention (sliding)
    whole = _released(RELEASED[2][0], window_layers=36, window=8192)
    assert float(whole.score_keys) == pytest.approx(s)
    with pytest.raises(ValueError, match="model.window_layers"):
        _released(RELEASED[2][0], window_layers=40, window=128)
    with pytest.raises(ValueError, match="model.window"):
        _released(RELEASED[2][0], window_layers=18)


def test_mtp_depth_adds_a_block_a_projection_and_an_output_head():
    """DeepSeek-V3's MTP module (report, section 2.2): a 2h x h projection, one
    (MoE) block and the shared output head per depth."""
    import equinox as eqx
    import jax.numpy as jnp

    base = workload.model("deepseek-v3")
    mtp = eqx.tree_at(lambda m: m.mtp_layers, base, jnp.asarray(1.0))
    h = 7168.0
    moe_block = (float(base.attention_params()) + 256 * 3 * h * 2048 + 3 * h * 2048
                 + h * 256)
    assert float(mtp.params() - base.params()) == pytest.approx(moe_block + 2 * h * h, rel=1e-6)
    extra = float(mtp.forward_flops_per_token() - base.forward_flops_per_token())
    assert extra == pytest.approx(float(base.layer_forward_flops_per_token(True))
                                  + float(base.attention_score_flops_per_token())
                                  + 4 * h * h + 2 * 129280 * h, rel=1e-6)
    # a dense model's MTP block is dense
    dense = eqx.tree_at(lambda m: m.mtp_layers, workload.model("llama3-8b"), jnp.asarray(2.0))
    assert float(dense.mtp_moe_layers) == 0.0
    assert float(dense.blocks) == 34.0
