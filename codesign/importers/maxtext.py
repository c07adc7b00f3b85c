"""MaxText configs: base.yml (every default; a file naming a `base_config`
builds on it), the model file `model_name=X` names (`models/X.yml` beside
it) or model files given by path, and `key=value` overrides, merged as
MaxText's pyconfig merges them (`_maxtext_config`). The model is the merged shape (scaled by
`global_parameter_scale`, with the decoder block's own layer and window
rules); the plan is the device mesh: the ICI and DCN degrees of each mesh
axis (one -1 per kind takes the rest of the devices or slices), read as
codesign's dimensions, FSDP as ZeRO-3. Facts are MaxText's at
AI-Hypercomputer/maxtext commit e591f30cbbf217ed67ef71263ec0538239f9c3b8
(src/maxtext/configs/pyconfig.py, types.py, src/maxtext/utils/max_utils.py,
maxtext_utils.py, src/maxtext/layers/decoders.py and src/maxtext/models/)."""

from __future__ import annotations

import math

from .. import presets
from ..model import hardware, plan
from . import _common as c
from . import _maxtext_config as config
from ._maxtext_config import Merged
from .hf import GEMMA3_PATTERN  # models/gemma3.py's too: 5 sliding layers, then a global one

# mesh axis -> (the middle of its ici_/dcn_*_parallelism key, the codesign dimension it
# shards; "ep": the expert axis, which also shards the batch as data parallelism does)
# (types.py's ici_map / dcn_map; attn_dp and attn_dp_expert are vLLM's, 1 in training)
AXES = {"diloco": ("diloco", "dp"), "data": ("data", "dp"), "stage": ("pipeline", "pp"),
        "fsdp": ("fsdp", "dp"), "fsdp_transpose": ("fsdp_transpose", "dp"),
        "sequence": ("sequence", "cp"), "context": ("context", "cp"),
        "context_usp_ulysses": ("context_usp_ulysses", "cp"),
        "context_autoregressive": ("context_autoregressive", "cp"),
        "tensor": ("tensor", "tp"), "tensor_sequence": ("tensor_sequence", "tp"),
        "model": ("tensor", "tp"), "autoregressive": ("autoregressive", "tp"),
        "expert": ("expert", "ep"), "attn_dp": (None, "dp"), "attn_dp_expert": (None, "dp")}
# the axes base.yml's logical_axis_rules shard the weights over (`embed`): ZeRO-3's
WEIGHT_SHARDS = ("fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert")
# compile_topology's prefix -> (the codesign preset, TensorCores per device): v4 and v5p
# name a slice by its cores, two a (megacore) chip; v5e and v6e by their chips
# (src/maxtext/utils/accelerator_to_spec_map.py)
TOPOLOGIES = {"v4": ("tpu-v4", 2), "v5p": ("tpu-v5p", 2), "v5litepod": ("tpu-v5e", 1),
              "v5e": ("tpu-v5e", 1), "v6e": ("tpu-v6e", 1)}
# dtype / weight_dtype / grad_dtype -> codesign's width
WIDTHS = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
# quantization (types.py's QuantizationType) run as codesign's fp8 recipe: 8-bit
# floating-point GEMMs, exactly
FP8 = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "nanoo_fp8", "fp8_nanoo", "fp8_gpu", "fp8_full",
                 "te_fp8_delayedscaling", "te_fp8_currentscaling", "te_mxfp8"})
# the others: integer or 4-bit GEMMs, codesign's 8-bit recipe the nearest
NARROWER = ("int8", "int4", "fp4", "intmp", "te_nvfp4", "te_nvfp4_no_rht")
# remat_policy -> (codesign's recomputation, why where it is not exact) (decoders.py's
# get_remat_policy; "none" gives jax.checkpoint no policy: every activation recomputed)
_SAVES_ALL = ("saves every projection's output and the attention context; only "
              "element-wise ops are recomputed: codesign's none")
_SAVES_DOTS = ("saves every projection's output and recomputes the attention core: "
               "codesign's selective (as validate's MaxText rows read it)")
_SAVES_SOME = "recomputes the MLP's GEMMs too: codesign's nearest is full"
REMAT = {"full": ("full", None), "none": ("full", None),
         "minimal_with_context": ("none", _SAVES_ALL), "minimal_flash": ("none", _SAVES_ALL),
         "minimal_with_context_and_quantization": ("none", _SAVES_ALL),
         "minimal": ("selective", _SAVES_DOTS),
         "minimal_with_quantization": ("selective", _SAVES_DOTS),
         "minimal_offloaded": ("selective", _SAVES_DOTS + ", its saved tensors in host memory"),
         **{name: ("full", _SAVES_SOME) for name in (
             "save_dot_with_context_except_mlp", "save_dot_except_mlpwi", "save_dot_except_mlp",
             "save_qkv_proj", "save_out_proj", "qkv_proj_offloaded", "custom")}}
# decoder blocks whose layer is two transformer layers, a local then a global one (Gemma 2)
LAYER_PAIRS = frozenset({"gemma2"})
MLA = "mla"  # attention_type of multi-head latent attention (codesign's model.attention too)
ATTENTIONS = ("global", "full", "local_sliding", "chunk", MLA)


def maxtext_words(words: list[str], *, gpus: int | None = None,
                  system: dict | None = None) -> c.Imported:
    """The scenario of a MaxText run: `base.yml [MODEL.yml ...] [key=value ...]`."""
    files = [w for w in words if not config.OVERRIDE.match(w)]
    bad = [w for w in files if w.startswith("-")]
    if not files or bad:
        raise ValueError("import maxtext takes base.yml (or a config naming base_config), then "
                         "model files and key=value overrides; got "
                         f"{c.shown(bad[0]) if bad else 'no YAML file'}")
    overrides = config.overrides(words)
    t, root = config.merged(files, overrides)
    d = c.Draft("maxtext", files[0])
    layers, pipeline_layers = _model(t, d)
    preset, slice_size = _system(t, d, system)
    mesh, slices = _mesh(t, d, gpus, preset, slice_size)
    _plan(t, d, mesh, layers, pipeline_layers, _tpu(preset))
    _placement(d, mesh, system or {}, slices)
    _precision(t, d)
    _recompute(t, d, layers)
    d.put("training.stack", "xla")
    steps = t.count("steps", lo=-1)
    if steps == -1:  # -1 inherits learning_rate_schedule_steps (base.yml)
        steps = t.count("learning_rate_schedule_steps", lo=-1)
    c.tokens(d, steps if steps and steps > 0 else None, "steps")
    config.ignored(t, d, root)
    return d.done()


# ----------------------------------------------------------------- the model
def _scales(t: Merged) -> tuple[int, int, int, int]:
    """(embedding, heads, MLP, layers) powers of two of global_parameter_scale
    (types.py's get_individual_scales)."""
    scale = t.count("global_parameter_scale")
    log2 = scale.bit_length() - 1
    if 2**log2 != scale:
        raise c.bad(t.where, "global_parameter_scale", scale, "must be a power of two")
    base, rem = divmod(log2, 3)
    heads = base + int(rem > 0)
    return base + int(rem > 1), heads, heads, base


def _model(t: Merged, d: c.Draft) -> tuple[int, int]:
    """[model]; returns (transformer layers, MaxText's decoder layers: what its
    pipeline divides)."""
    emb, heads_scale, mlp_scale, layer_scale = (2**s for s in _scales(t))
    hidden = emb * t.count("base_emb_dim")
    heads = heads_scale * t.count("base_num_query_heads")
    decoder_layers = layer_scale * t.count("base_num_decoder_layers")
    block = t.text("decoder_block")
    layers = decoder_layers * (2 if block in LAYER_PAIRS else 1)
    d.put("model.layers", layers)
    d.put("model.hidden", hidden)
    d.put("model.heads", heads)
    d.put("model.kv_heads", heads_scale * t.count("base_num_kv_heads"))
    mlp = mlp_scale * t.count("base_mlp_dim")
    d.put("model.ffn_hidden", mlp)
    d.put("model.seq_len", t.count("max_target_length"))
    d.put("model.vocab", t.count("vocab_size"))
    activations = t.get("mlp_activations")
    d.put("model.gated", isinstance(activations, list) and len(activations) > 1)
    d.put("model.tied_embeddings", t.flag("logits_via_embedding"))
    kind = t.text("attention_type")
    if kind not in ATTENTIONS:
        raise c.bad(t.where, "attention_type", kind,
                    f"is not an attention codesign models ({', '.join(ATTENTIONS)})")
    if kind == MLA:
        d.put("model.attention", MLA)
        for key, name in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                          ("qk_head_dim", "qk_nope_head_dim"),
                          ("qk_rope_head_dim", "qk_rope_head_dim"), ("v_head_dim", "v_head_dim")):
            d.put(f"model.{key}", t.count(name, lo=0))
    elif t.count("head_dim") != hidden / heads:
        d.put("model.head_dim", t.count("head_dim"))
    _moe(t, d, layers, mlp_scale)
    _window(t, d, block, kind, layers)
    mtp = t.count("mtp_num_layers", lo=0)
    if mtp:
        d.put("model.mtp_layers", mtp)
    if t.flag("attention_sink"):
        d.put("model.attention_sinks", True)
    rate = t.get("dropout_rate")
    d.put("model.dropout", t.flag("enable_dropout")
          and c.number(t.where, "dropout_rate", rate) > 0)
    d.put("model.attention_kernel", _kernel(t))
    return layers, decoder_layers


def _moe(t: Merged, d: c.Draft, layers: int, mlp_scale: int) -> None:
    """Routed experts (num_experts > 1): in the layers from first_num_dense_layers
    on, every interleave_moe_layer_step-th (Llama 4's determine_is_moe_layer)."""
    experts = t.count("num_experts")
    if experts <= 1:
        return
    dense = t.count("first_num_dense_layers", lo=0)
    step = t.count("interleave_moe_layer_step")
    # layers i in [dense, layers) with (i + 1) % step == 0
    d.put("model.moe_layers", max(0, layers // step - dense // step))
    d.put("model.experts", experts)
    d.put("model.top_k", t.count("num_experts_per_tok"))
    width = t.count("base_moe_mlp_dim", lo=-1)
    if width < 1:  # types.py: an MoE model needs a positive moe_mlp_dim
        raise c.bad(t.where, "base_moe_mlp_dim", width, f"must be >= 1 with num_experts={experts}")
    d.put("model.expert_ffn_hidden", mlp_scale * width)
    shared = t.count("shared_experts", lo=0)
    if shared:
        d.put("model.shared_experts", shared)
    c.group_limit(d, t.count("n_routing_groups", lo=-1), t.count("topk_routing_group", lo=-1),
                  "n_routing_groups", "topk_routing_group")


def _window(t: Merged, d: c.Draft, block: str, kind: str, layers: int) -> None:
    """model.window_layers / window: the decoder block's own pattern (Gemma 2: the
    local layer of each pair; Gemma 3: 5 of every 6; GPT-OSS: every other, the first
    too; Llama 4: chunks on all but every nope_layer_interval-th), else every layer
    under attention_type local_sliding or chunk."""
    chunked = block == "llama4" or kind == "chunk"
    if block == "llama4":
        interval = t.count("nope_layer_interval", lo=-1)
        windowed = layers - layers // interval if interval > 0 else layers
    elif block in LAYER_PAIRS:
        windowed = layers // 2
    elif block == "gemma3":
        windowed = layers - layers // GEMMA3_PATTERN
    elif block == "gpt_oss":
        windowed = (layers + 1) // 2
    elif kind in ("local_sliding", "chunk"):
        windowed = layers
    else:
        return
    key = "chunk_attn_window_size" if chunked else "sliding_window_size"
    window = t.count(key, lo=0)
    if not window:
        raise c.bad(t.where, key, window, f"must be a whole number >= 1 for the {windowed} "
                    f"windowed layers of decoder_block {block}")
    d.put("model.window_layers", windowed)
    d.put("model.window", window)
    if chunked:
        d.put("model.chunked_attention", True)


def _kernel(t: Merged) -> str:
    """attention: dot_product is the naive kernel; autoselected runs flash when
    training sequences of 128 tokens or more off the CPU (attention_op.py)."""
    name = t.text("attention")
    if name == "dot_product":
        return "naive"
    if name == "autoselected" and (t.count("max_target_length") < 128
                                   or t.text("hardware") == "cpu"):
        return "naive"
    return "flash"


# ----------------------------------------------------------------- the system
def _system(t: Merged, d: c.Draft, table: dict | None) -> tuple[str, int | None]:
    """[system]: --system, else the TPU generation compile_topology names, else the
    default; returns the preset and the devices a slice holds where the source says
    (compile_topology, or one host of a GPU system: MaxText's GPU slice)."""
    topology = t.text("compile_topology")
    slice_size = None
    if topology:
        prefix, _, count = topology.rpartition("-")
        if prefix in TOPOLOGIES and count.isdigit() and int(count) < TOPOLOGIES[prefix][1]:
            raise c.bad(t.where, "compile_topology", topology, "names no chips: a slice "
                        f"of {prefix} holds {TOPOLOGIES[prefix][1]} or more")
        if prefix not in TOPOLOGIES or not count.isdigit() or int(count) % TOPOLOGIES[prefix][1]:
            raise c.bad(t.where, "compile_topology", topology, "is not a TPU slice codesign has "
                        f"a preset for ({', '.join(p + '-N' for p in TOPOLOGIES)}); give "
                        "--system")
        named, cores = TOPOLOGIES[prefix]
        slice_size = int(count) // cores
        d.put("system.preset", named)
    elif t.text("hardware") == "tpu" and "preset" not in (table or {}):
        d.assume("system.preset", c.DEFAULT_SYSTEM, "hardware 'tpu' names no TPU generation "
                 "(compile_topology would, e.g. v5p-256): codesign's default system "
                 "(--system tpu-v5p)")
    c.system(d, table)
    preset = d.tables["system"]["preset"]
    if slice_size is None and not _tpu(preset):
        slice_size = int(d.get("system.gpus_per_node") or presets.system(preset).gpus_per_node)
    return preset, slice_size


def _tpu(preset: str) -> bool:
    return hardware.chip_family(presets.preset(preset).chip) == "tpu"


def _axes(t: Merged) -> list[str]:
    axes = t.get("mesh_axes")
    if not isinstance(axes, list) or any(a not in AXES for a in axes):
        raise c.bad(t.where, "mesh_axes", axes, f"must list mesh axes ({', '.join(AXES)})")
    return axes


def _degrees(t: Merged, axes: list[str], kind: str) -> dict:
    """{axis: its {kind}_*_parallelism} (-1: the rest), at most one -1."""
    out = {}
    for axis in axes:
        middle = AXES[axis][0]
        key = f"{kind}_{middle}_parallelism"
        value = 1 if middle is None else t.count(key, lo=-1, default=1)
        if value == 0:
            raise c.bad(t.where, key, value, "must be -1 (the rest) or a whole number >= 1")
        out[axis] = value
    rest = [f"{kind}_{AXES[a][0]}_parallelism" for a, v in out.items() if v == -1]
    if len(rest) > 1:
        raise ValueError(f"{t.where_of(rest[1])}: {' and '.join(rest)} are both -1; MaxText "
                         f"lets one {kind.upper()} axis take the rest")
    return out


def _fill(t: Merged, degrees: dict, kind: str, target: int, what: str) -> dict:
    """MaxText's fill_unspecified_mesh_axes: the -1 axis takes `target` over the
    others' product, and the product must be `target`."""
    known = math.prod(v for v in degrees.values() if v != -1)
    rest = next((a for a, v in degrees.items() if v == -1), None)
    if rest is not None and target % known == 0:
        degrees = {**degrees, rest: target // known}
    if math.prod(degrees.values()) != target:
        key = f"{kind}_{AXES[rest][0]}_parallelism" if rest else f"{kind}_*_parallelism"
        raise ValueError(f"{t.where_of(key)}: the {kind.upper()} axes' degrees "
                         f"({_shown(degrees, kind)}) must multiply to the {target} {what}")
    return degrees


def _shown(degrees: dict, kind: str) -> str:
    return ", ".join(f"{kind}_{AXES[a][0]}_parallelism {v}" for a, v in degrees.items()
                     if v != 1 and AXES[a][0])


def _mesh(t: Merged, d: c.Draft, gpus: int | None, preset: str,
          slice_size: int | None) -> tuple[dict, int]:
    """{axis: ICI x DCN degree} and the slices: the devices are --gpus, else the
    slices' (num_slices, or the DCN axes' product) devices each (compile_topology,
    or the ICI axes' product, or one host in whole groups of the other ICI axes)."""
    axes = _axes(t)
    ici, dcn = _degrees(t, axes, "ici"), _degrees(t, axes, "dcn")
    for name in ("num_slices", "compile_topology_num_slices"):
        if t.count(name, lo=-1) == 0:  # -1: unset; a slice count of 0 runs nothing
            raise c.bad(t.where_of(name), name, 0, "must be -1 (unset) or a whole number >= 1")
    key = "num_slices" if t.count("num_slices", lo=-1) > 0 else "compile_topology_num_slices"
    slices, why = t.count(key, lo=-1), f"{key} {t.count(key, lo=-1)}"
    if slices <= 0:
        known = math.prod(v for v in dcn.values() if v != -1)
        slices, why = known, "the DCN axes' product"
        if -1 in dcn.values() and gpus is not None and slice_size and gpus > slice_size:
            if gpus % slice_size:
                raise ValueError(f"--gpus={gpus} is not a whole number of slices of {slice_size} "
                                 "devices (MaxText's GPU slice is one host)")
            slices, why = gpus // slice_size, f"--gpus {gpus} in slices of {slice_size}"
        elif -1 in dcn.values():
            d.assume("slices", None, f"{known} slice{'s' if known > 1 else ''}: the source "
                     "gives no slice count (num_slices or compile_topology_num_slices), so "
                     "the DCN axis of -1 takes 1")
    if gpus is not None:
        if gpus % slices:
            raise ValueError(f"--gpus={gpus} is not a multiple of the {slices} slices ({why})")
        per_slice = gpus // slices
    else:
        if slice_size and (_tpu(preset) or -1 in ici.values()):
            per_slice = slice_size
            source = (f"compile_topology {t.text('compile_topology')}" if _tpu(preset)
                      else "one host of the system")
        elif -1 not in ici.values():
            per_slice, source = math.prod(ici.values()), "the ICI axes' product"
        else:
            host = int(presets.system(preset).gpus_per_node)
            known = math.prod(v for v in ici.values() if v != -1)
            per_slice = -(-host // known) * known
            source = (f"one host of the system ({host}) in whole groups of the other ICI "
                      f"axes' product {known}")
        c.gpus(d, None, (per_slice * slices, f"{slices} slice{'s' if slices > 1 else ''} "
                         f"({why}) of {per_slice} devices ({source}) (--gpus N)"))
    if gpus is not None:
        d.put("system.gpus", gpus)
    ici = _fill(t, ici, "ici", per_slice, "devices a slice")
    dcn = _fill(t, dcn, "dcn", slices, "slices")
    if _tpu(preset) and "scale_up_domain" not in d.tables["system"]:
        d.assume("system.scale_up_domain", per_slice, "a slice's chips on one torus of ICI "
                 "links (as validate's MaxText rows), DCN between slices")
    return {a: (ici[a], dcn[a]) for a in axes}, slices


# ----------------------------------------------------------------- the plan
def _size(mesh: dict, *dims: str) -> int:
    return math.prod(i * o for a, (i, o) in mesh.items() if AXES[a][1] in dims)


def _plan(t: Merged, d: c.Draft, mesh: dict, layers: int, decoder_layers: int,
          tpu: bool) -> None:
    """[parallel] and the batches: tp, pp, cp, ep and dp (every batch axis: data,
    fsdp, fsdp_transpose, expert, diloco) from the mesh; FSDP's weight shards as
    ZeRO-3 (HSDP where data replicas remain); the pipeline's repeats as virtual
    stages."""
    tp, pp, cp = _size(mesh, "tp"), _size(mesh, "pp"), _size(mesh, "cp")
    dp, moe = _size(mesh, "dp", "ep"), bool(d.get("model.moe_layers"))
    for key, value in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", _size(mesh, "ep") if moe else 1),
                       ("dp", dp)):
        d.put(f"parallel.{key}", value)
    # tensor_sequence shards the norms' activations by sequence (activation_norm_length)
    d.put("parallel.sequence_parallel", math.prod(mesh.get("tensor_sequence", (1,))) > 1)
    if tp > 1 and tpu:
        d.assume("parallel.tp_overlap", 1.0, "XLA's collective matmul hides TP's collectives "
                 "under the GEMMs on TPUs (as validate's MaxText rows; --set "
                 "parallel.tp_overlap=0)")
    elif tp > 1 and t.text("te_comm_gemm_overlap") != "disabled":
        d.put("parallel.tp_overlap", 1.0)  # Transformer Engine's collective GEMMs
    for axis, why in (("diloco", "DiLoCo's replicas as data parallelism reduced every step "
                       "(DiLoCo reduces every diloco_sync_period steps)"),
                      ("autoregressive", "the autoregressive axis as tensor parallelism (it "
                       "shards the heads and the MLP as tensor does)")):
        if axis in mesh and math.prod(mesh[axis]) > 1:
            d.assume(axis, None, why)
    shard = math.prod(math.prod(mesh[a]) for a in WEIGHT_SHARDS if a in mesh)
    if shard > 1:
        d.put("parallel.zero", 3)
        if shard < dp * cp:
            d.put("parallel.zero_shard_size", shard)
    elif t.flag("shard_optimizer_over_data") and dp > 1:
        d.put("parallel.zero", 1)
    else:
        d.put("parallel.zero", 0)
    _batches(t, d, dp, pp)
    if pp > 1:
        _pipeline(t, d, pp, layers, decoder_layers)


def _batches(t: Merged, d: c.Draft, dp: int, pp: int) -> None:
    """per_device_batch_size x devices sequences a forward pass (types.py's
    micro_batch_size_to_train_on), over dp and, with a pipeline, its micro-batches;
    gradient_accumulation_steps of them a step."""
    devices, where = int(d.get("system.gpus")), t.where_of("per_device_batch_size")
    per_device = c.number(where, "per_device_batch_size", t.get("per_device_batch_size"))
    forward = int(devices * per_device)
    micro_batches = 1
    if pp > 1:
        micro_batches = t.count("num_pipeline_microbatches", lo=-1)
        if micro_batches == -1:  # the stages, twice with delayed activation forwarding
            micro_batches = pp * (2 if t.flag("pipeline_delay_activation_forwarding") else 1)
    if forward < 1 or forward % (dp * micro_batches):
        raise c.bad(where, "per_device_batch_size", per_device,
                    f"x {devices} devices = {forward} sequences a pass must split over dp "
                    f"{dp}" + (f" x {micro_batches} pipeline micro-batches"
                               if micro_batches > 1 else ""))
    d.put("training.micro_batch", forward // (dp * micro_batches))
    d.put("training.global_batch", forward * t.count("gradient_accumulation_steps"))


def _pipeline(t: Merged, d: c.Draft, pp: int, layers: int, decoder_layers: int) -> None:
    """num_pipeline_repeats (-1: decoder layers / (stages x layers a stage)) > 1 is a
    circular pipeline: codesign's interleaved schedule; one repeat runs every
    micro-batch's forward, then their backward (autodiff of a scan): GPipe."""
    per_stage = t.count("num_layers_per_pipeline_stage")
    repeats = t.count("num_pipeline_repeats", lo=-1)
    # pipeline_parallel_layers (-1: every decoder layer) are pipelined; MaxText runs
    # the others after the pipeline, data parallel over the stage axis
    pipelined = t.count("pipeline_parallel_layers", lo=-1)
    if pipelined == -1:
        pipelined, what = decoder_layers, f"the {decoder_layers} decoder layers"
    elif not 1 <= pipelined <= decoder_layers:
        raise c.bad(t.where_of("pipeline_parallel_layers"), "pipeline_parallel_layers",
                    pipelined, f"must be -1 (every layer) or 1 to the {decoder_layers} "
                    "decoder layers")
    else:
        what = f"pipeline_parallel_layers {pipelined}"
    if repeats == -1 and pipelined % (pp * per_stage) == 0:
        repeats = pipelined // (pp * per_stage)
    if repeats < 1 or pp * per_stage * repeats != pipelined:
        raise ValueError(f"{t.where_of('num_pipeline_repeats')}: {what} must be "
                         f"ici/dcn_pipeline_parallelism {pp} x num_layers_per_pipeline_stage "
                         f"{per_stage} x num_pipeline_repeats (MaxText's rule)")
    if pipelined != decoder_layers:
        d.assume("pipeline_parallel_layers", None, f"pipeline_parallel_layers {pipelined} of "
                 f"the {decoder_layers} decoder layers: MaxText runs the other "
                 f"{decoder_layers - pipelined} unpipelined, data parallel over the stage "
                 "axis; codesign pipelines every layer")
    if repeats > 1:
        d.assume("parallel.schedule", "interleaved", f"MaxText's circular pipeline of "
                 f"{repeats} repeats: codesign's interleaved schedule")
        d.put("parallel.interleave", repeats)
    else:
        d.assume("parallel.schedule", "gpipe", "MaxText's pipeline runs every micro-batch's "
                 "forward, then their backward: GPipe's order")


def _placement(d: c.Draft, mesh: dict, table: dict, slices: int) -> None:
    """The dimensions whose DCN degree is above 1 cross slices: outermost."""
    moe = bool(d.get("model.moe_layers"))  # without experts the expert axis is data's
    crossing = {"dp" if AXES[a][1] == "ep" and not moe else AXES[a][1]
                for a, (_, o) in mesh.items() if o > 1}
    order = [x for x in plan.DEFAULT_PLACEMENT if x not in crossing] + \
        [x for x in plan.DEFAULT_PLACEMENT if x in crossing]
    if slices > 1 and "placement" not in table and tuple(order) != plan.DEFAULT_PLACEMENT:
        names = ", ".join(sorted(crossing))
        d.assume("system.placement", ",".join(order), f"the DCN axes ({names}) cross the "
                 f"{slices} slices: outermost, the others inside a slice")


# ----------------------------------------------------------------- precision
def _width(t: Merged, key: str) -> str:
    name = t.text(key)
    if name not in WIDTHS:
        raise c.bad(t.where, key, name, f"is not one of {', '.join(WIDTHS)}")
    return WIDTHS[name]


def _precision(t: Merged, d: c.Draft) -> None:
    """training.dtype: an fp8 quantization, else dtype; weight_dtype and
    grad_dtype as the parts they are."""
    width = _width(t, "dtype")
    quant = t.text("quantization")
    if quant in FP8:
        d.put("training.dtype", "fp8")
    elif quant in NARROWER:
        d.assume("training.dtype", "fp8", f"quantization {quant}: codesign's narrowest GEMM "
                 "recipe, 8-bit at the chip's 8-bit peak (a TPU preset's is its int8 peak)")
    elif quant in ("", "none"):
        d.put("training.dtype", width)
    else:
        raise c.bad(t.where, "quantization", quant, "is not a quantization MaxText names "
                    f"({', '.join(sorted(FP8) + list(NARROWER))})")
    weights = _width(t, "weight_dtype")
    recipe = plan.RECIPES[d.get("training.dtype")]
    if weights != "fp32":  # the weights are the master copy, Adam's moments as wide
        for part, value in (("params", weights), ("master", "none"), ("optimizer", weights)):
            d.put(f"training.{part}_dtype", value)
    elif recipe["master"] == "fp32":
        d.assume("training.master_dtype", None, "weight_dtype float32: the recipe's fp32 "
                 f"master weights, beside the {recipe['params']} working copy codesign counts "
                 "(MaxText casts them at each use)")
    grads = _width(t, "grad_dtype")
    if grads != recipe["grad_reduce"]:
        d.put("training.grad_reduce_dtype", grads)


def _recompute(t: Merged, d: c.Draft, layers: int) -> None:
    policy = t.text("remat_policy")
    if policy not in REMAT:
        raise c.bad(t.where, "remat_policy", policy, f"is not one of {', '.join(REMAT)}")
    name, why = REMAT[policy]
    if why is None:
        d.put("training.recompute", name)
    else:
        d.assume("training.recompute", name, f"remat_policy {policy} {why}")
    if policy == "minimal_offloaded":
        per_stage = layers // int(d.get("parallel.pp"))
        d.assume("training.offload_layers", per_stage, "minimal_offloaded keeps every "
                 "layer's saved tensors in host memory")
