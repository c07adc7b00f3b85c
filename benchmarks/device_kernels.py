"""GEMMs (BF16 against FP8), fused attention (forward and backward) and HBM
streams on one GPU, burst and sustained, with the SM clock and board power that
`nvidia-smi` reads meanwhile. Prints one JSON object.

    python benchmarks/device_kernels.py [--backend jax|torch] [--sustain-s 10]

What it is for: the compute constants hardware.py borrows from public
microbenchmarks (the FP8/BF16 GEMM efficiency ratio, the attention efficiency of
Hopper's kernels, HBM efficiency, the clocks a GEMM sustains under the board's
power limit), measured on the device a session is lent (docs/sources.md,
"Measured by codesign commands"). Every GEMM is timed at FBGEMM's three H100
shapes (pytorch/FBGEMM pull request 2546) and at the GEMMs of one Llama 3 405B
layer at tp 8 (8,192 tokens, hidden 16,384, 128 query and 8 KV heads, FFN
53,248), BF16 and FP8 e4m3 (TN layout: both operands contract their last
axis, the layout cuBLASLt's FP8 kernels take, with bf16 output).

`--backend jax` (default) times through XLA (cuBLASLt GEMMs; cuDNN's fused
attention) and reports which custom call each FP8 GEMM compiled to;
`--backend torch` times the same GEMMs through `torch.matmul` and
`torch._scaled_mm` (the cuBLASLt FP8 path Transformer Engine calls) and
attention through SDPA's FlashAttention-2 backend. Run the two in separate
processes (each takes the GPU's memory).

Interrupted by SIGTERM (`timeout`), it prints what it measured so far and
exits 124. Times are CUDA-synchronised wall clocks over back-to-back calls (burst: the
best of 5 windows of >= 20 calls after 3 warm-ups; sustained: 0.5 s windows for
`--sustain-s` seconds per dtype on the MLP-up GEMM).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import threading
import time

FBGEMM = (("fbgemm 8192^3", 8192, 8192, 8192), ("fbgemm 65536x8192x7168", 65536, 8192, 7168),
          ("fbgemm 65536x3584x8192", 65536, 3584, 8192))
# Llama 3 405B at tp 8, 8,192 tokens: (label, m, n, k)
_H, _FFN, _TOKENS, _TP, _Q, _KV, _HD = 16384, 53248, 8192, 8, 128, 8, 128
LAYER = (("405b qkv", _TOKENS, (_Q + 2 * _KV) * _HD // _TP, _H),
         ("405b attn_out", _TOKENS, _H, _Q * _HD // _TP),
         ("405b mlp_up", _TOKENS, 2 * _FFN // _TP, _H),
         ("405b mlp_down", _TOKENS, _H, _FFN // _TP))
SUSTAINED = LAYER[2]
ATTENTION = ((4096, 16), (8192, 16), (8192, 32))  # (seq, heads), head_dim 128, batch 1, causal
HEAD_DIM = 128
STREAM_BYTES = (2**28, 2**30, 2**32)  # bf16 y = a x + b over this many bytes of x


# what has been measured so far: printed at the end, or when `timeout` stops the run
RESULT: dict = {}


def _print_partial(signum, frame):
    RESULT["stopped"] = f"signal {signum} before the end: the kernels above only"
    json.dump(RESULT, sys.stdout, indent=1)
    print(flush=True)
    sys.exit(124)


class PowerLog:
    """nvidia-smi's SM clock (MHz), board power (W) and temperature, sampled every
    100 ms in a background process, each line stamped on arrival."""

    def __init__(self):
        self.rows: list[tuple[float, float, float, float]] = []
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                clock, power, temp = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.rows.append((time.perf_counter(), clock, power, temp))

    def between(self, t0: float, t1: float) -> dict:
        rows = [r for r in self.rows if t0 <= r[0] <= t1]
        if not rows:
            return {}
        mean = lambda i: sum(r[i] for r in rows) / len(rows)  # noqa: E731
        return {"sm_clock_mhz": round(mean(1), 1), "power_w": round(mean(2), 1),
                "temperature_c": round(mean(3), 1), "samples": len(rows)}

    def close(self):
        if self.proc:
            self.proc.terminate()


def _windows(call, sync, *, calls: int, windows: int, warmup: int = 3) -> list[float]:
    """Seconds per call in each of `windows` windows of `calls` back-to-back calls."""
    for _ in range(warmup):
        call()
    sync()
    out = []
    for _ in range(windows):
        t = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        out.append((time.perf_counter() - t) / calls)
    return out


def _best_s(call, sync) -> float:
    """Seconds of one call: the best of 5 windows of back-to-back calls (`_windows`)."""
    return min(_windows(call, sync, calls=_calls_for(call, sync), windows=5))


def _calls_for(call, sync, target_s=0.25) -> int:
    call()
    sync()
    t = time.perf_counter()
    call()
    sync()
    return int(min(200, max(20, target_s / max(time.perf_counter() - t, 1e-6))))


def _sustain(call, sync, seconds: float, power: PowerLog, flops: float) -> dict:
    """Back-to-back calls for `seconds`, in 0.5 s windows; the second half's mean
    throughput, clock and power (past the first seconds' boost)."""
    calls = _calls_for(call, sync, 0.5)
    start = time.perf_counter()
    spans, rows = [], []
    while time.perf_counter() - start < seconds or len(rows) < 2:
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        t1 = time.perf_counter()
        spans.append((t0, t1))
        rows.append({"t_s": round(t1 - start, 2),
                     "tflops": round(flops * calls / (t1 - t0) / 1e12, 2),
                     **power.between(t0, t1)})
    half = len(rows) // 2
    t0, t1 = spans[half][0], spans[-1][1]
    return {"windows": rows, "calls_per_window": calls,
            "second_half_tflops": flops * calls * (len(rows) - half) / (t1 - t0) / 1e12,
            "second_half": power.between(t0, t1)}


# ------------------------------------------------------------------ JAX
def run_jax(sustain_s: float, power: PowerLog) -> dict:
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    out = RESULT
    out.update({"backend": "jax", "jax": jax.__version__, "device": dev.device_kind,
                "platform": dev.platform, "gemms": [], "attention": [], "stream": []})
    sync_on = []

    def sync():
        jax.block_until_ready(sync_on[-1]) if sync_on else None

    def keeping(fn, *args, keep=4):
        """A call of fn(*args) that keeps its last `keep` outputs for `sync`."""
        def call():
            sync_on.append(fn(*args))
            if len(sync_on) > keep:
                del sync_on[0]
        return call

    dtypes = {"bf16": jnp.bfloat16, "fp8": jnp.float8_e4m3fn}
    gemm = jax.jit(lambda a, b: jax.lax.dot_general(
        a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.bfloat16))
    # each GEMM compiles (and autotunes) once: the executable is what is timed
    sustained_inputs = {}
    for label, m, n, k in (*FBGEMM, *LAYER):
        key_a, key_b = jax.random.split(jax.random.key(m + n + k))
        for name, dt in dtypes.items():
            a = jax.random.normal(key_a, (m, k), jnp.float32).astype(dt)
            b = jax.random.normal(key_b, (n, k), jnp.float32).astype(dt)
            compiled = gemm.lower(a, b).compile()
            targets = sorted({line.split('custom_call_target="')[1].split('"')[0]
                              for line in compiled.as_text().splitlines()
                              if 'custom_call_target="' in line})

            call = keeping(compiled, a, b)
            t = _best_s(call, sync)
            out["gemms"].append({"label": label, "m": m, "n": n, "k": k, "dtype": name,
                                 "time_s": t, "tflops": 2.0 * m * n * k / t / 1e12,
                                 "custom_calls": targets})
            if (label, m, n, k) == tuple(SUSTAINED):
                sustained_inputs[name] = call
            else:
                del a, b
    out["sustained"] = {name: _sustain(call, sync, sustain_s, power, 2.0 * math.prod(
        SUSTAINED[1:])) for name, call in sustained_inputs.items()}
    sustained_inputs.clear()
    sync_on.clear()

    def attention(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")

    def fwd_bwd(q, k, v, d):
        o, vjp = jax.vjp(attention, q, k, v)
        return o, vjp(d)

    for seq, heads in ATTENTION:
        keys = jax.random.split(jax.random.key(seq + heads), 4)
        q, k, v, d = (jax.random.normal(kk, (1, seq, heads, HEAD_DIM), jnp.bfloat16)
                      for kk in keys)
        forward_flops = 4.0 * seq * seq * heads * HEAD_DIM * 0.5
        row = {"seq": seq, "heads": heads, "head_dim": HEAD_DIM, "implementation": "cudnn"}
        try:
            for name, fn, args in (("fwd", jax.jit(attention), (q, k, v)),
                                   ("fwd_bwd", jax.jit(fwd_bwd), (q, k, v, d))):
                row[f"{name}_s"] = _best_s(keeping(fn, *args), sync)
            row["fwd_tflops"] = forward_flops / row["fwd_s"] / 1e12
            row["bwd_tflops"] = 2.5 * forward_flops / (row["fwd_bwd_s"] - row["fwd_s"]) / 1e12
        except Exception as e:  # noqa: BLE001  (cuDNN missing or refusing the shape)
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out["attention"].append(row)
        sync_on.clear()

    stream = jax.jit(lambda x: x * jnp.asarray(1.0001, jnp.bfloat16) + jnp.asarray(1, jnp.bfloat16))
    for size in STREAM_BYTES:
        x = jax.random.normal(jax.random.key(size % 997), (size // 2,), jnp.float32).astype(
            jnp.bfloat16)
        t = _best_s(keeping(stream, x, keep=2), sync)
        out["stream"].append({"bytes_read": size, "time_s": t, "GBps": 2.0 * size / t / 1e9})
        sync_on.clear()
        del x
    return out


# ------------------------------------------------------------------ PyTorch
def run_torch(sustain_s: float, power: PowerLog) -> dict:
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    out = RESULT
    out.update({"backend": "torch", "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0), "gemms": [], "attention": []})
    sync = torch.cuda.synchronize
    one = torch.ones((), device=dev, dtype=torch.float32)
    for label, m, n, k in (*FBGEMM, *LAYER):
        a16 = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b16 = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        a8, b8 = a16.to(torch.float8_e4m3fn), b16.to(torch.float8_e4m3fn)
        calls = {"bf16": lambda a=a16, b=b16: torch.matmul(a, b.t()),
                 "fp8": lambda a=a8, b=b8: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                                            out_dtype=torch.bfloat16)}
        for name, call in calls.items():
            row = {"label": label, "m": m, "n": n, "k": k, "dtype": name}
            try:
                t = _best_s(call, sync)
                row.update(time_s=t, tflops=2.0 * m * n * k / t / 1e12)
            except Exception as e:  # noqa: BLE001  (an FP8 path this build lacks)
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            out["gemms"].append(row)
        del a16, b16, a8, b8, calls
        torch.cuda.empty_cache()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for seq, heads in ATTENTION:
        q, k, v, d = (torch.randn(1, heads, seq, HEAD_DIM, device=dev, dtype=torch.bfloat16)
                      for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_()
        forward_flops = 4.0 * seq * seq * heads * HEAD_DIM * 0.5
        row = {"seq": seq, "heads": heads, "head_dim": HEAD_DIM, "implementation": "sdpa flash"}

        def fwd(q=q, k=k, v=v):
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd(q=q, k=k, v=v, d=d):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), d)

        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                for name, call in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
                    row[f"{name}_s"] = _best_s(call, sync)
            row["fwd_tflops"] = forward_flops / row["fwd_s"] / 1e12
            row["bwd_tflops"] = 2.5 * forward_flops / (row["fwd_bwd_s"] - row["fwd_s"]) / 1e12
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out["attention"].append(row)
    return out


def _shrink(factor: int) -> None:
    """Every shape divided by `factor` (a CPU dry run of the script's code)."""
    global FBGEMM, LAYER, SUSTAINED, ATTENTION, STREAM_BYTES
    FBGEMM, LAYER = ([(label, *(max(x // factor, 8) for x in mnk)) for label, *mnk in rows]
                     for rows in (FBGEMM, LAYER))
    SUSTAINED = LAYER[2]
    ATTENTION = [(max(s // factor, 16), h) for s, h in ATTENTION]
    STREAM_BYTES = [max(b // factor**2, 2**12) for b in STREAM_BYTES]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("jax", "torch"), default="jax")
    p.add_argument("--sustain-s", type=float, default=10.0)
    p.add_argument("--shrink", type=int, default=1,
                   help="divide every shape by this (a dry run on a CPU)")
    p.add_argument("--no-gemms", action="store_true",
                   help="attention and HBM streams only (no GEMMs, nothing sustained)")
    args = p.parse_args(argv)
    if args.shrink > 1:
        _shrink(args.shrink)
    if args.no_gemms:
        global FBGEMM, LAYER
        FBGEMM = LAYER = ()
    signal.signal(signal.SIGTERM, _print_partial)
    power = PowerLog()
    try:
        fn = run_jax if args.backend == "jax" else run_torch
        out = fn(args.sustain_s, power)
    finally:
        power.close()
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
