"""The public measurements and end-to-end fits behind the presets' efficiencies
and latencies (`hardware.py` builds the chips and systems from them; each
number's source is in docs/sources.md): streaming and GEMM efficiencies
through the GEMM roofline of `compute.gemm_time_s`, nccl-tests bus bandwidths
through the ring all-reduce, NCCL's per-step latencies, the matmul
efficiencies fitted under the calibration rule, the FP8/BF16 ratio measured
on an H200, FlashAttention-2's share of the H100 peak."""

from __future__ import annotations

import math

from .units import GB, Gbps, us

# an H200 device-to-device copy moved ~4.3e12 B/s of its 4.8e12 B/s spec (public
# microbenchmark): 0.9 of `hbm_Bps` for every chip's streaming kernels
HBM_EFFICIENCY = 0.9


def gemm_efficiency(achieved_flops_per_s, n, peak_flops_per_s, hbm_Bps,
                    element_bytes=2.0) -> float:
    """The `matmul_efficiency` at which `compute.gemm_time_s` gives a square n^3
    GEMM the measured throughput: E = (flops / peak + bytes / HBM) / measured time."""
    return _roofline_efficiency(achieved_flops_per_s, (n, n, n), peak_flops_per_s, hbm_Bps,
                                element_bytes)


def _roofline_efficiency(achieved_flops_per_s, mnk, peak_flops_per_s, hbm_Bps,
                         element_bytes) -> float:
    """`gemm_efficiency` of an (m x k) @ (k x n) GEMM, mnk = (m, n, k)."""
    m, n, k = mnk
    flops, moved = 2.0 * m * n * k, element_bytes * (m * k + k * n + m * n)
    return (flops / peak_flops_per_s + moved / (hbm_Bps * HBM_EFFICIENCY)) * (
        achieved_flops_per_s / flops)


def calibrated_efficiency(target_busbw_Bps: float, bandwidth_Bps: float,
                           reduction_Bps: float) -> float:
    """Efficiency that makes a large-message ring all-reduce report `target_busbw_Bps`.

    For large n the ring costs t = 2(p-1)/p n / (B e) + (p-1)/p n / R, and
    busbw = n/t x 2(p-1)/p, so 1/busbw = 1/(B e) + 1/(2R): solve for e.
    """
    return 1.0 / (bandwidth_Bps * (1.0 / target_busbw_Bps - 0.5 / reduction_Bps))


# A tier's latency_s is the per-step latency of NCCL's Simple protocol (its
# tuning model's hwLat, Ring: NVLink 3.4 us, network 14 us); `protocols.Nccl`
# adds each protocol's base latency and scales the step for LL / LL128.
LATENCY_SOURCE = ("NCCL tuning model (hwLat, Ring, Simple): 3.4 us per NVLink step, 14 us per "
                  "network step")
SCALE_UP_LATENCY_S = 3.4 * us
SCALE_OUT_LATENCY_S = 14.0 * us
# A TPU's ICI and data-centre network, costed without protocols (`AlphaBeta`):
# assumption, 0.5 us per ICI hop and 2 us per network hop.
TPU_LATENCY_SOURCE = "assumption: 0.5 us per ICI hop, 2 us per network hop"
ICI_LATENCY_S = 0.5 * us
DCN_LATENCY_S = 2.0 * us
NDR_NIC_BUSBW_Bps = 47 * GB  # nccl-tests: one 400 Gb/s NDR NIC achieves about 46-48 GB/s
NIC_EFFICIENCY = NDR_NIC_BUSBW_Bps / (400 * Gbps)  # 0.94, used for every NIC generation
# Large-GEMM efficiency, fitted by validate.calibrate_matmul_efficiency (rerun in
# tests/test_step.py) to the seeds' two throughput figures:
A100_MATMUL_EFFICIENCY = 0.796  # Narayanan et al. 2021: 1T on 3072 A100s, 163 TFLOP/s/GPU
V100_MATMUL_EFFICIENCY = 0.530  # Shoeybi et al. 2019: 1.2B on one V100, 39 TFLOP/s
# H100 SXM datasheet (dense, without sparsity); the H200 and H800 share them
H100_BF16_FLOPS_PER_S = 989e12
H100_FP8_FLOPS_PER_S = 1979e12
H100_TF32_FLOPS_PER_S = 494.7e12
H100_HBM_Bps = 3.35e12  # 80 GB HBM3
H200_HBM_Bps = 4.8e12  # H200 SXM datasheet: 141 GB HBM3e
# H100-class tensor cores: an 8192^3 BF16 GEMM on an H200 (same tensor cores,
# 4.8e12 B/s HBM3e) ran at 769-798e12 FLOP/s (public microbenchmark, mean of
# ten); the midpoint through the GEMM roofline of compute.gemm_time_s: 0.859, a
# burst ceiling (seconds of one GEMM at boost clock), not what a training step
# sustains.
H100_GEMM_MICROBENCHMARK_EFFICIENCY = gemm_efficiency(0.5 * (769e12 + 798e12), 8192,
                                                      H100_BF16_FLOPS_PER_S, H200_HBM_Bps)
# What H100-class tensor cores sustain through whole training steps (a 700 W board
# under its power limit: clocks below the burst's, every GEMM of every layer):
# no microbenchmark pins it down, so it is fitted to end-to-end runs under the
# calibration rule (one constant per chip family and mechanism, on at most a
# third of the family's rows): `validate.fit_matmul_efficiency` on
# `validate.H100_GEMM_ROWS` (llm-foundry's BF16 MPT-70B on 128 and 512 H100s,
# MPT-30B and MPT-13B on 512: the four H100 rows whose steps are most nearly all
# large GEMMs), rerun and checked in tests/test_training_today.py. H200 and H800
# (the same tensor cores and board power), B200, GB200, B300 and GB300 borrow it
# (assumption: no Blackwell run in the table).
H100_MATMUL_EFFICIENCY = 0.6492
# FP8 GEMMs reach less of their (doubled) peak than BF16 GEMMs of the same
# shape. Measured on an NVIDIA H200 (700 W; the H100's tensor cores) on
# 2026-12-04 through PyTorch 2.11: torch.matmul (BF16) against torch._scaled_mm
# (FP8 e4m3, per-tensor scales, bf16 output: the cuBLASLt path Transformer
# Engine calls), at FBGEMM's three H100 shapes and the four GEMMs of a Llama 3
# 405B layer at tp 8 (benchmarks/device_kernels.py; the record is
# benchmarks/results/2026-12-04-h200-kernels-torch.json). Each throughput is
# turned into an efficiency through the GEMM roofline of compute.gemm_time_s
# (989/1,979 TFLOP/s peaks, the H200's 4.8 TB/s); the FP8/BF16 ratios are
# 0.87-0.93 and their geometric mean is the FP8 GEMMs' efficiency relative to
# `matmul_efficiency` (every chip: assumption off Hopper). The quantisation
# itself is `Precision.gemm_cast_bytes`. Each row is the best of five 0.25 s
# windows of back-to-back GEMMs, seconds of load: 8192^3 in BF16 ran at 701e12
# FLOP/s, below the 769-798e12 of ten GEMMs after warm-up above (the clocks
# under load, most likely; they were not read in this run).
H200_GEMMS = (  # (m, n, k, BF16 FLOP/s, FP8 FLOP/s), measured
    (8192, 8192, 8192, 701.3e12, 1260.5e12),
    (65536, 8192, 7168, 694.5e12, 1255.5e12),
    (65536, 3584, 8192, 673.8e12, 1240.2e12),
    (8192, 2304, 16384, 677.2e12, 1214.3e12),
    (8192, 16384, 2048, 640.1e12, 1111.8e12),
    (8192, 13312, 16384, 683.2e12, 1235.1e12),
    (8192, 16384, 6656, 663.6e12, 1228.4e12))


def _fp8_relative_efficiency(rows=H200_GEMMS, bf16=H100_BF16_FLOPS_PER_S,
                             fp8=H100_FP8_FLOPS_PER_S, hbm_Bps=H200_HBM_Bps) -> float:
    """Geometric mean over `rows` of E_fp8 / E_bf16, each E the efficiency at
    which the GEMM roofline gives the measured throughput (`gemm_efficiency`)."""
    logs = [math.log(_roofline_efficiency(f8, mnk, fp8, hbm_Bps, 1.0)
                     / _roofline_efficiency(b16, mnk, bf16, hbm_Bps, 2.0))
            for *mnk, b16, f8 in rows]
    return math.exp(sum(logs) / len(logs))


FP8_RELATIVE_EFFICIENCY = _fp8_relative_efficiency()  # 0.902
# Meta's Grand Teton H100s (torchtitan's benchmark page, "Hardware"): 96 GB of
# HBM2e at 2.4e12 B/s, a 500 W power limit.
GRAND_TETON_HBM_Bps = 2.4e12
# What a 500 W power limit leaves of the 700 W part's tensor-core throughput:
# FBGEMM's H100 benchmark at 500 W (pytorch/FBGEMM pull request 2546, Meta's
# H100s: read as the Grand Teton part, assumption) at its three shapes, BF16
# 585.23 / 575.12 / 546.31 and FP8 1,125.51 / 1,082.75 / 1,141.38 TFLOP/s,
# against the same shapes measured on the 700 W H200 (`H200_GEMMS`' first
# three rows; the same tensor cores), each through the GEMM roofline of
# compute.gemm_time_s on its own HBM (2.4e12 and 4.8e12 B/s): BF16 0.88-0.96,
# FP8 0.88-1.0; their geometric mean is the share of the 700 W clocks the
# 500 W part sustains (`Chip.clock_fraction`; one factor for every width:
# assumption).
FBGEMM_H100_500W_GEMMS = ((585.23e12, 1125.51e12), (575.12e12, 1082.75e12),
                          (546.31e12, 1141.38e12))  # (BF16, FP8) FLOP/s per shape


def _clock_fraction(rows=FBGEMM_H100_500W_GEMMS, measured=H200_GEMMS) -> float:
    """Geometric mean over the shapes and widths of `rows` of the 500 W part's
    roofline efficiency over the 700 W part's (see above)."""
    logs = []
    for (b500, f500), (*mnk, b700, f700) in zip(rows, measured, strict=False):
        for at500, at700, peak, width in ((b500, b700, H100_BF16_FLOPS_PER_S, 2.0),
                                          (f500, f700, H100_FP8_FLOPS_PER_S, 1.0)):
            logs.append(math.log(_roofline_efficiency(at500, mnk, peak, GRAND_TETON_HBM_Bps,
                                                      width)
                                 / _roofline_efficiency(at700, mnk, peak, H200_HBM_Bps, width)))
    return math.exp(sum(logs) / len(logs))


H100_500W_CLOCK_FRACTION = _clock_fraction()  # 0.921
# FlashAttention-2 reaches 35% of the H100's 16-bit peak (Shah et al. 2024,
# "FlashAttention-3", section 1: it uses none of Hopper's TMA / warp-group
# MMA); every H100 stack in validate's table (llm-foundry's flash-attn 2, NeMo
# 24.07 / Megatron-Core's Transformer Engine, Llama 3's) is read as running an
# FA2-class kernel, forward and backward alike (assumption; FlashAttention-3
# reaches 75% forward: set system.attention_efficiency for a stack that runs it).
# H200 / H800 likewise; B200 / GB200 / B300 / GB300 borrow it (assumption).
HOPPER_ATTENTION_EFFICIENCY = 0.35
