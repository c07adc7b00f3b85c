"""Measure a chip's compute and fit the step model's compute constants
(`codesign calibrate compute`).

Three kinds of kernel are timed, jitted, on the default device:
- GEMMs over the shapes a transformer layer runs after tensor-parallel splits
  (QKV, attention output, MLP up and down for several hidden sizes and tp: thin
  and wide, small and large) plus a few small squares that pin the fixed cost;
- a fused attention kernel, `jax.nn.dot_product_attention` (cuDNN's flash
  attention on GPUs; elsewhere, and wherever cuDNN refuses a shape, XLA's
  implementation, which is not fused: the record says which), forward and
  forward + backward, causal, always in bf16;
- a streaming element-wise kernel (y = a x + b) over a range of sizes.

Each timed call runs `repeats` copies of the kernel on distinct input buffers
(so XLA can neither merge nor drop them; fewer copies where they would not
fit in `memory_bytes`); the time of one kernel is the call's time / copies
(the minimum over `iters` calls), so the host's dispatch is spread over the
copies and what remains is the kernel and its launch.

The model is the step model's (`hardware.Chip` fields; the same names are
`[system]` keys, see scenario.py), with P the dtype's peak, P16 the 16-bit peak
and H the chip's hbm_Bps from the preset:

    GEMM       t = (2mkn / P + e (mk + kn + mn) / (H hbm_efficiency)) / matmul_efficiency + o
    attention  t = flops / (P16 attention_efficiency) + o per kernel
               (forward 4 b s^2 heads head_dim x 0.5 causal; backward
               attention.FLASH_BACKWARD_OVER_FORWARD x forward)
    stream     t = bytes read and written / (H hbm_efficiency) + o

with o = kernel_overhead_s and e the bytes per element. The four constants are
fitted together by least squares on log time (every kernel weighs the same,
whatever its time) over all but every third shape of each kind, which is held
out: `holdout_error` is the maximum |predicted / measured - 1| over those.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import files
from ..model.attention import FLASH_BACKWARD_OVER_FORWARD
from ..model.hardware import System
from ._fit import minimise

KINDS = ("gemm", "attention", "stream")
CONSTANTS = ("matmul_efficiency", "hbm_efficiency", "attention_efficiency", "kernel_overhead_s")
# dtype -> (jnp dtype of the GEMM inputs, bytes per element, Chip field of its peak)
DTYPES = {"bf16": (jnp.bfloat16, 2, "peak_flops_per_s"),
          "fp8": (jnp.float8_e4m3fn, 1, "peak_fp8_flops_per_s"),
          "fp32": (jnp.float32, 4, "peak_fp32_flops_per_s")}
FIT_STEPS = 4000
# The default grids (accelerator, CPU). CPU ones are tiny: they calibrate the
# machinery and this CPU, in seconds.
HIDDEN = {"accelerator": (1024, 2048, 4096, 8192, 16384), "cpu": (64, 128, 256)}
TOKENS = {"accelerator": 4096, "cpu": 128}
TP = {"accelerator": (1, 8), "cpu": (1, 4)}
SQUARES = {"accelerator": (128, 256, 512), "cpu": (16, 32)}
SEQ = {"accelerator": (1024, 2048, 4096, 8192), "cpu": (64, 128, 256)}
HEADS = {"accelerator": (8, 32), "cpu": (2,)}
HEAD_DIM = {"accelerator": 128, "cpu": 32}
STREAM_BYTES = {"accelerator": tuple(2 ** i for i in range(16, 31, 2)),
                "cpu": tuple(2 ** i for i in range(12, 23, 2))}
REPEATS = {"accelerator": 16, "cpu": 4}
MEMORY_BYTES = {"accelerator": 8 * 2**30, "cpu": 256 * 2**20}  # for the copies of one kernel
# device-kind fragment -> preset (checked in order: "GB200" before "B200")
# ------------------------------------------------------------------ what is timed
@dataclasses.dataclass(frozen=True)
class Kernel:
    """One measured kernel: its work and its time."""

    kind: str  # "gemm", "attention" or "stream"
    label: str  # e.g. "mlp_up h=4096 tp=8", "attention fwd+bwd s=4096 heads=32"
    flops: float  # GEMM 2mkn; attention as in the module doc; stream 0
    bytes: float  # GEMM e (mk + kn + mn); stream read + written; attention 0 (not modelled)
    kernels: int  # fixed overheads per measured call (attention fwd+bwd: 2)
    time_s: float  # measured: one kernel (minimum over calls)
    time_median_s: float = float("nan")
    implementation: str = ""  # attention: "cudnn" (fused) or "xla"

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def backend_class(platform: str) -> str:
    return "cpu" if platform == "cpu" else "accelerator"


def gemm_shapes(hidden_sizes: Sequence[int], tokens: int, tps: Sequence[int],
                squares: Sequence[int] = ()) -> list[tuple[str, int, int, int]]:
    """(label, m, k, n) of a layer's GEMMs per hidden size h and tp (m = tokens):
    QKV (h -> 3h/tp), attention output (h/tp -> h), MLP up (h -> 4h/tp), MLP
    down (4h/tp -> h), for tp dividing h; then `squares` s x s x s. Distinct shapes."""
    out, seen = [], set()
    for h in hidden_sizes:
        for tp in tps:
            if h % tp or h // tp < 8:
                continue
            for name, k, n in (("qkv", h, 3 * h // tp), ("attn_out", h // tp, h),
                               ("mlp_up", h, 4 * h // tp), ("mlp_down", 4 * h // tp, h)):
                if (tokens, k, n) not in seen:
                    seen.add((tokens, k, n))
                    out.append((f"{name} h={h} tp={tp}", tokens, k, n))
    for s in squares:
        if (s, s, s) not in seen:
            seen.add((s, s, s))
            out.append((f"square {s}", s, s, s))
    return out


def gemm_work(m: float, k: float, n: float, elem_bytes: float) -> tuple[float, float]:
    """(flops, bytes) of one (m x k) @ (k x n)."""
    return 2.0 * m * k * n, elem_bytes * (m * k + k * n + m * n)


def attention_flops(batch: float, seq: float, heads: float, head_dim: float, *,
                    causal: bool = True, backward: bool = False) -> float:
    """4 b s^2 heads head_dim (x 0.5 causal) forward; x (1 + FLASH_BACKWARD_OVER_FORWARD)
    with the backward."""
    forward = 4.0 * batch * seq**2 * heads * head_dim * (0.5 if causal else 1.0)
    return forward * (1.0 + FLASH_BACKWARD_OVER_FORWARD) if backward else forward


# ------------------------------------------------------------------ timing
def _repeated(kernel: Callable) -> Callable:
    """A jitted function running `kernel` once on each of its argument tuples, and
    returning every output: the copies read distinct buffers, so XLA can neither
    merge them nor drop any (an optimization barrier does not stop XLA:CPU)."""
    return jax.jit(lambda copies: tuple(kernel(*inputs) for inputs in copies))


def _nbytes(tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def time_kernel(kernel: Callable, inputs: Sequence, *, repeats: int, iters: int,
                warmup: int, memory_bytes: float = float("inf"),
                clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """(minimum, median) seconds of one `kernel` call, from `iters` timed calls that
    each run `repeats` copies (fewer when the copies' inputs and outputs would pass
    `memory_bytes`) after `warmup` untimed ones."""
    if repeats < 1 or iters < 1 or warmup < 0:
        raise ValueError(f"repeats={repeats} and iters={iters} must be >= 1, warmup={warmup} "
                         ">= 0")
    inputs = tuple(inputs)
    per_copy = _nbytes(inputs) + _nbytes(jax.eval_shape(kernel, *inputs))
    repeats = int(max(1, min(repeats, memory_bytes // max(per_copy, 1))))
    copies = (inputs,) + tuple(tuple(jnp.copy(x) for x in inputs) for _ in range(repeats - 1))
    fn = _repeated(kernel)
    for _ in range(max(warmup, 1)):  # the first call compiles
        jax.block_until_ready(fn(copies))
    times = []
    for _ in range(iters):
        start = clock()
        jax.block_until_ready(fn(copies))
        times.append((clock() - start) / repeats)
    return min(times), statistics.median(times)


def _random(key, shape, dtype):
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def measure_gemms(shapes, dtype: str, *, repeats: int, iters: int, warmup: int,
                  memory_bytes: float = float("inf"),
                  progress: Callable | None = None) -> list[Kernel]:
    jdtype, elem, _ = DTYPES[dtype]
    out_dtype = jnp.bfloat16 if dtype == "fp8" else jdtype

    def gemm(a, b):
        return jnp.matmul(a, b, preferred_element_type=out_dtype)

    rows = []
    for i, (label, m, k, n) in enumerate(shapes):
        ka, kb = jax.random.split(jax.random.key(i))
        inputs = (_random(ka, (m, k), jdtype), _random(kb, (k, n), jdtype))
        t, med = time_kernel(gemm, inputs, repeats=repeats, iters=iters, warmup=warmup,
                             memory_bytes=memory_bytes)
        flops, moved = gemm_work(m, k, n, elem)
        rows.append(Kernel("gemm", label, flops, moved, 1, t, med))
        if progress:
            progress(label)
    return rows


def _attention(implementation: str | None, backward: bool) -> Callable:
    def forward(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                            implementation=implementation)

    if not backward:
        return forward

    def forward_backward(q, k, v, d_out):
        _, vjp = jax.vjp(forward, q, k, v)
        return vjp(d_out)[0]

    return forward_backward


def measure_attention(seqs, heads_list, head_dim: int, *, platform: str, repeats: int,
                      iters: int, warmup: int, memory_bytes: float = float("inf"),
                      progress: Callable | None = None) -> list[Kernel]:
    """Causal bf16 attention, batch 1: cuDNN's fused kernel on GPUs (XLA's where it
    refuses), XLA's elsewhere."""
    rows = []
    for s in seqs:
        for heads in heads_list:
            keys = jax.random.split(jax.random.key(s * 1000 + heads), 4)
            q, k, v, d_out = (_random(kk, (1, s, heads, head_dim), jnp.bfloat16) for kk in keys)
            for backward in (False, True):
                inputs = (q, k, v, d_out) if backward else (q, k, v)
                impl = "cudnn" if platform == "gpu" else "xla"
                try:
                    t, med = time_kernel(_attention(impl, backward), inputs, repeats=repeats,
                                         iters=iters, warmup=warmup, memory_bytes=memory_bytes)
                except Exception:  # noqa: BLE001  (cuDNN refuses the shape or is missing)
                    if impl == "xla":
                        raise
                    impl = "xla"
                    t, med = time_kernel(_attention(impl, backward), inputs, repeats=repeats,
                                         iters=iters, warmup=warmup, memory_bytes=memory_bytes)
                label = f"attention {'fwd+bwd' if backward else 'fwd'} s={s} heads={heads}"
                flops = attention_flops(1, s, heads, head_dim, causal=True, backward=backward)
                rows.append(Kernel("attention", label, flops, 0.0, 2 if backward else 1, t,
                                   med, impl))
                if progress:
                    progress(label)
    return rows


def measure_stream(sizes_bytes, dtype: str, *, repeats: int, iters: int, warmup: int,
                   memory_bytes: float = float("inf"),
                   progress: Callable | None = None) -> list[Kernel]:
    """y = 1.0001 x + 1 over `size` bytes of x (bf16; fp32 for an fp32 calibration):
    `size` read and `size` written."""
    jdtype = jnp.float32 if dtype == "fp32" else jnp.bfloat16
    itemsize = jnp.dtype(jdtype).itemsize

    def stream(x):
        return x * jnp.asarray(1.0001, jdtype) + jnp.asarray(1.0, jdtype)

    rows = []
    for size in sizes_bytes:
        n = max(int(size) // itemsize, 1)
        x = _random(jax.random.key(n), (n,), jdtype)
        t, med = time_kernel(stream, (x,), repeats=repeats, iters=iters, warmup=warmup,
                             memory_bytes=memory_bytes)
        label = f"stream {n * itemsize} B"
        rows.append(Kernel("stream", label, 0.0, 2.0 * n * itemsize, 1, t, med))
        if progress:
            progress(label)
    return rows


# ------------------------------------------------------------------ the model and its fit
@dataclasses.dataclass(frozen=True)
class Peaks:
    """What the fit takes from the preset: the dtype's peak, the 16-bit peak, HBM."""

    flops_per_s: float  # peak of the calibrated dtype
    flops16_per_s: float  # the 16-bit peak attention_efficiency is relative to
    hbm_Bps: float

    @classmethod
    def of(cls, system: System, dtype: str) -> Peaks:
        chip = system.chip
        return cls(float(getattr(chip, DTYPES[dtype][2])), float(chip.peak_flops_per_s),
                   float(chip.hbm_Bps))


def predict(constants: dict, kernels: Sequence[Kernel], peaks: Peaks) -> jax.Array:
    """Model seconds of every kernel (module doc) for constants name -> value."""
    kind = np.array([k.kind for k in kernels])
    flops = jnp.array([k.flops for k in kernels])
    moved = jnp.array([k.bytes for k in kernels])
    count = jnp.array([float(k.kernels) for k in kernels])
    e, eta = constants["matmul_efficiency"], constants["hbm_efficiency"]
    a, o = constants["attention_efficiency"], constants["kernel_overhead_s"]
    memory = moved / (peaks.hbm_Bps * eta)
    gemm = (flops / peaks.flops_per_s + memory) / e
    attention = flops / (peaks.flops16_per_s * a)
    body = jnp.where(kind == "gemm", gemm, jnp.where(kind == "attention", attention, memory))
    return body + o * count


def holdout_mask(kernels: Sequence[Kernel], every: int = 3) -> np.ndarray:
    """True for every `every`-th kernel (2nd, 5th, ... by work) of each kind."""
    mask = np.zeros(len(kernels), bool)
    for kind in KINDS:
        idx = [i for i, k in enumerate(kernels) if k.kind == kind]
        for j, i in enumerate(sorted(idx, key=lambda i: (kernels[i].flops, kernels[i].bytes))):
            mask[i] = every > 0 and j % every == 1
    return mask


@dataclasses.dataclass(frozen=True)
class ComputeFit:
    constants: dict  # CONSTANTS -> fitted value
    kernels: tuple[Kernel, ...]
    predicted_s: tuple[float, ...]
    held_out: tuple[bool, ...]
    peaks: Peaks

    def errors(self, kind: str | None = None, held_out: bool = True) -> np.ndarray:
        return np.array([abs(p / k.time_s - 1.0) for k, p, h in
                         zip(self.kernels, self.predicted_s, self.held_out, strict=True)
                         if h == held_out and (kind is None or k.kind == kind)])

    def holdout(self) -> dict:
        """kind -> {max, median, points} of |predicted / measured - 1| over held-out kernels."""
        out = {}
        for kind in (*KINDS, None):
            err = self.errors(kind)
            out[kind or "all"] = {"max": float(err.max()) if err.size else float("nan"),
                                  "median": float(np.median(err)) if err.size else float("nan"),
                                  "points": int(err.size)}
        return out

    def as_json(self) -> dict:
        return {"constants": dict(self.constants), "holdout_error": self.holdout(),
                "train_error_max": float(self.errors(held_out=False).max()),
                "peaks": dataclasses.asdict(self.peaks),
                "kernels": [{**k.as_json(), "predicted_s": p, "held_out": h}
                            for k, p, h in zip(self.kernels, self.predicted_s, self.held_out,
                                               strict=True)]}


def _initial(kernels: Sequence[Kernel], peaks: Peaks) -> np.ndarray:
    """Starting constants (log): each kind's best achieved fraction, o = half the
    fastest kernel."""
    def best(kind, work):
        vals = [work(k) / k.time_s for k in kernels if k.kind == kind]
        return min(max(vals), 1.0)

    e = best("gemm", lambda k: k.flops / peaks.flops_per_s)
    eta = best("stream", lambda k: k.bytes / peaks.hbm_Bps)
    a = best("attention", lambda k: k.flops / peaks.flops16_per_s)
    o = 0.5 * min(k.time_s for k in kernels)
    return np.log(np.array([e, eta, a, o]))


def fit(kernels: Sequence[Kernel], peaks: Peaks, *, holdout_every: int = 3,
        steps: int = FIT_STEPS) -> ComputeFit:
    """Least squares on log time over the kernels not held out (module doc)."""
    kernels = tuple(kernels)
    if holdout_every < 2:
        raise ValueError(f"holdout_every={holdout_every} must be at least 2")
    held = holdout_mask(kernels, holdout_every)
    for kind in KINDS:
        train = sum(1 for k, h in zip(kernels, held, strict=True) if k.kind == kind and not h)
        if train < 2:
            raise ValueError(f"{kind} has {train} shapes to fit; calibrate compute needs at "
                             "least 2 per kind (plus held-out ones): measure more sizes")
    if min(k.time_s for k in kernels) <= 0:
        raise ValueError("a kernel time is not positive: the clock cannot time these sizes")
    measured = jnp.log(jnp.array([k.time_s for k in kernels]))
    train = jnp.asarray(~held)

    def constants(theta):
        return dict(zip(CONSTANTS, jnp.exp(theta), strict=True))

    def loss(theta):
        err = jnp.log(predict(constants(theta), kernels, peaks)) - measured
        return jnp.sum(jnp.where(train, err**2, 0.0)) / jnp.sum(train)

    theta = minimise(loss, jnp.asarray(_initial(kernels, peaks)), steps)
    best = {k: float(v) for k, v in constants(theta).items()}
    pred = np.asarray(predict(best, kernels, peaks))
    return ComputeFit(best, kernels, tuple(map(float, pred)), tuple(map(bool, held)), peaks)


# ------------------------------------------------------------------ the preset
def system_toml(result: ComputeFit, *, preset: str, dtype: str, device: str,
                platform: str) -> str:
    """A `[system]` override: `preset` plus the four fitted constants, which scenario
    files and `codesign estimate --system FILE.toml` accept."""
    for name in ("matmul_efficiency", "hbm_efficiency", "attention_efficiency"):
        value = result.constants[name]
        if not 0 < value <= 1:
            raise ValueError(f"{name}={value:.3g} is not in (0, 1]: the {preset} preset's peak "
                             f"or hbm_Bps is below what this {device} achieves; pass this "
                             "chip's preset as `preset`")
    held = result.holdout()
    comments = [f"codesign calibrate compute --dtype {dtype}: {device} ({platform}), "
                f"{len(result.kernels)} kernels, constants relative to the {preset} preset's "
                "peaks", "held-out max relative error: " + ", ".join(
                    f"{kind} {held[kind]['max']:.1%}" for kind in KINDS)]
    if platform == "cpu":
        comments.append("measured on a CPU: these numbers describe this CPU, not the preset's "
                        "chip")
    system = {"preset": preset} | {name: float(f"{result.constants[name]:.6e}")
                                   for name in CONSTANTS}
    return files.toml_text({"system": system}, comments)


def summary_table(result: ComputeFit) -> str:
    held = result.holdout()
    c = result.constants
    rows = [f"matmul_efficiency    {c['matmul_efficiency']:.4g}",
            f"hbm_efficiency       {c['hbm_efficiency']:.4g}",
            f"attention_efficiency {c['attention_efficiency']:.4g}",
            f"kernel_overhead_s    {c['kernel_overhead_s']:.4g}  "
            f"({c['kernel_overhead_s'] * 1e6:.2f} us)",
            f"{'kind':<10} {'kernels':>7} {'held out':>8} {'holdout max':>11} {'median':>7}"]
    for kind in KINDS:
        n = sum(1 for k in result.kernels if k.kind == kind)
        h = held[kind]
        rows.append(f"{kind:<10} {n:7d} {h['points']:8d} {h['max']:11.1%} {h['median']:7.1%}")
    return "\n".join(rows)


def kernels_table(result: ComputeFit) -> str:
    rows = [f"{'kernel':<34} {'measured(us)':>12} {'model(us)':>10} {'error':>7} "
            f"{'TFLOP/s':>8} {'GB/s':>8}  held-out"]
    for k, p, h in zip(result.kernels, result.predicted_s, result.held_out, strict=True):
        rows.append(f"{k.label:<34} {k.time_s * 1e6:12.2f} {p * 1e6:10.2f} "
                    f"{p / k.time_s - 1:7.1%} {k.flops / k.time_s / 1e12:8.3f} "
                    f"{k.bytes / k.time_s / 1e9:8.2f}  {'*' if h else ''}")
    return "\n".join(rows)


def default_grid(platform: str) -> dict:
    c = backend_class(platform)
    return {"hidden": HIDDEN[c], "tokens": TOKENS[c], "tp": TP[c], "squares": SQUARES[c],
            "seq": SEQ[c], "heads": HEADS[c], "head_dim": HEAD_DIM[c],
            "stream_bytes": STREAM_BYTES[c], "repeats": REPEATS[c],
            "memory_bytes": MEMORY_BYTES[c]}


def measure(dtype: str, grid: dict, *, platform: str, iters: int, warmup: int,
            progress: Callable | None = None) -> list[Kernel]:
    """Every kernel of `grid` (`default_grid`'s keys) on the default device."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} must be one of {', '.join(DTYPES)}")
    shapes = gemm_shapes(grid["hidden"], grid["tokens"], grid["tp"], grid["squares"])
    kw = {"repeats": grid["repeats"], "iters": iters, "warmup": warmup,
          "memory_bytes": grid["memory_bytes"], "progress": progress}
    return (measure_gemms(shapes, dtype, **kw)
            + measure_attention(grid["seq"], grid["heads"], grid["head_dim"], platform=platform,
                                **kw)
            + measure_stream(grid["stream_bytes"], dtype, **kw))


def grid_size(grid: dict) -> int:
    shapes = gemm_shapes(grid["hidden"], grid["tokens"], grid["tp"], grid["squares"])
    return len(shapes) + 2 * len(grid["seq"]) * len(grid["heads"]) + len(grid["stream_bytes"])


def synthetic_kernels(constants: dict, peaks: Peaks, grid: dict, *, noise: float = 0.0,
                      seed: int = 0) -> list[Kernel]:
    """The kernels of `grid` with times from the model at `constants` (times a
    log-normal factor of relative size `noise`): for testing the fit."""
    shapes = gemm_shapes(grid["hidden"], grid["tokens"], grid["tp"], grid["squares"])
    elem = 2
    ks = [Kernel("gemm", label, *gemm_work(m, k, n, elem), 1, 1.0)
          for label, m, k, n in shapes]
    for s in grid["seq"]:
        for heads in grid["heads"]:
            for backward in (False, True):
                ks.append(Kernel("attention", f"s={s} heads={heads} bwd={backward}",
                                 attention_flops(1, s, heads, grid["head_dim"],
                                                 backward=backward), 0.0, 2 if backward else 1,
                                 1.0))
    ks += [Kernel("stream", f"stream {b}", 0.0, 2.0 * b, 1, 1.0) for b in grid["stream_bytes"]]
    times = np.asarray(predict(constants, ks, peaks))
    rng = np.random.default_rng(seed)
    times = times * np.exp(noise * rng.standard_normal(len(ks)))
    return [dataclasses.replace(k, time_s=float(t), time_median_s=float(t))
            for k, t in zip(ks, times, strict=True)]

