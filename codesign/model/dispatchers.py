"""The MoE token dispatcher as a strategy type (`parallel.moe_dispatcher`,
built on `strategies.Strategy` and `parse`): how an MoE layer's tokens reach
their experts and come back. A dispatcher owns the bytes a token carries each
way, the kernels it launches per layer, the device-to-host synchronisations
its dropless layout needs, the SMs its kernels hold, whether it sends one copy
per destination node, and the bandwidth it achieves on the scale-up tier as a
function of a token's bytes and its SMs, read from its own published tables.

- `AllToAll`: Megatron-Core's all-to-all dispatcher over NCCL
  (`all_to_all_single`): the step model's exchange as before this type (NCCL's
  cost model, `traffic._ep_rows`; the SMs NCCL holds are the plan's
  `parallel.comm_sm_fraction`). Dropless, it copies the tokens per expert to the
  host to size the exchange: one device-to-host synchronisation per MoE layer
  in forward (Megatron-Core's `cuda_sync_point` "before_ep_alltoall"; backward
  reuses the forward's splits).
- `DeepEP`: DeepSeek's kernels (deepseek-ai/DeepEP): a token crosses the slow
  tier once per destination node and is forwarded inside; 6 kernels per layer,
  one CPU synchronisation (`notify_dispatch` busy-waits on the counts, ~35 us of
  host time), the layout kernel (~39 us), 24 SMs (NeMo Automodel's
  DeepEP-vs-HybridEP benchmark; DeepSeek's GB200 guide runs DeepEP with 24); its
  layout fuses the router's preprocessing (Megatron-Core's DeepSeek-V3 log: router
  and preprocess kernels 31 -> 17).
- `HybridEP`: NVIDIA's TMA-based dispatcher (Megatron-Core's flex dispatcher
  backend `hybridep`): 4 kernels per layer, no CPU synchronisation, 8 SMs (the
  benchmark's setting; Megatron-Bridge's H100 recipe gives it 32:
  `parallel.moe_dispatcher_sms`); the preprocessing and the permute (copy,
  permute and pad) fused into its kernels.

Achieved bandwidth (`fast_tier_Bps`) is the published GB/s of the dispatcher's
intranode dispatch on an H100 (NVLink 4, 450 GB/s per direction) as a share of
that peak, interpolated linearly in log(bytes per token) between the published
token sizes and linearly in SMs between the published SM counts (clipped at
the ends: no extrapolation), times the scale-up tier's own peak. The same
share on an SM100 chip reads ~0.72 (DeepEP V2's 643 GB/s with 24 SMs on a
900 GB/s NVLink 5, EP8), beside the H100 table's 0.74 at the same token size:
the share carries over between NVLink generations. Combine runs at the
dispatch curve at its own (16-bit) token size (the benchmark times dispatch;
DeepEP's own table has combine within 3% of dispatch: 153 / 158 GB/s).
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .strategies import Strategy, parse

# The benchmark chip's NVLink: H100 SXM, 18 NVLink 4 links x 25 GB/s per
# direction (NVIDIA H100 datasheet: 900 GB/s bidirectional)
BENCHMARK_NVLINK_Bps = 450e9
# FP8 dispatch carries one fp32 scale per 128 elements (DeepEP's and
# DeepSeek-V3's 1 x 128 tile scaling): 4 / 128 bytes per element on top of 1
FP8_SCALE_BYTES_PER_ELEMENT = 4.0 / 128.0


def _piecewise_linear(x, knots: tuple, values: list):
    """The line through (knots[i], values[i]) at `x`, flat beyond the first and
    last knot: values[0] + the sum of each segment's slope x the part of it `x`
    has passed (a few element-wise operations, no search)."""
    out = values[0]
    for i in range(len(knots) - 1):
        a, b = knots[i], knots[i + 1]
        out = out + (values[i + 1] - values[i]) / (b - a) * jnp.clip(x - a, 0.0, b - a)
    return out


class Dispatcher(Strategy):
    """An MoE token dispatcher: the facts one layer's dispatch and combine take
    from it (see the module docstring)."""

    # kernels launched per MoE layer's forward for dispatch and combine, the
    # permute and unpermute included (backward launches twice that: `compute`)
    launches: eqx.AbstractClassVar[float]
    # device-to-host synchronisations per MoE layer per forward pass (dropless)
    host_syncs: eqx.AbstractClassVar[float]
    # SMs its kernels hold while they run (`parallel.moe_dispatcher_sms`' default);
    # 0: NCCL's, charged by `parallel.comm_sm_fraction`
    sms: eqx.AbstractClassVar[float]
    # one copy of a token per destination node, forwarded inside (`parallel.moe_dedup`)
    dedups: eqx.AbstractClassVar[bool]
    # bytes per element of the scales an fp8 dispatch sends beside its tokens
    fp8_scale_bytes: eqx.AbstractClassVar[float]
    # GPU seconds per forward dispatch before the exchange (a layout kernel)
    layout_s: eqx.AbstractClassVar[float]
    # the router's preprocessing (tokens per expert, the permute's indices)
    # fused into its own layout kernels (`host.PREPROCESS_CALLS` none left)
    fused_preprocess: eqx.AbstractClassVar[bool]
    # the permute and unpermute fused into its own copies (no permute kernels
    # of Megatron-Core's whatever `training.moe_permute_fusion` says)
    fuses_permute: eqx.AbstractClassVar[bool]
    # host seconds per MoE layer's forward spent busy-waiting at its host
    # synchronisation beyond the GPU's catching up (DeepEP's notify_dispatch)
    host_wait_s: eqx.AbstractClassVar[float]
    # published intranode dispatch on an H100: bytes per token, the SM counts,
    # and GB/s at each (token size, SM count)
    token_bytes: eqx.AbstractClassVar[tuple]
    sm_points: eqx.AbstractClassVar[tuple]
    table_GBps: eqx.AbstractClassVar[tuple]  # rows: token sizes; columns: SM counts

    @property
    def holds_sms(self) -> bool:
        """Its kernels hold SMs of their own (not NCCL's share)."""
        return self.sms > 0

    @property
    def priced_by_table(self) -> bool:
        """Its scale-up bandwidth is its table's (not NCCL's cost model)."""
        return bool(self.table_GBps)

    def dispatch_bytes_per_element(self, precision) -> float:
        """Bytes per hidden element of a dispatched token: the recipe's
        `ep_dispatch` width, plus the scales of an fp8 one (`fp8_scale_bytes`)."""
        width = precision.bytes("ep_dispatch")
        return width + self.fp8_scale_bytes if precision.ep_dispatch == "fp8" else width

    def fast_tier_share(self, token_bytes, sms) -> jax.Array:
        """The share of the scale-up tier's peak its intranode exchange reaches
        for tokens of `token_bytes` with `sms` SMs (see the module docstring)."""
        x = jnp.log(token_bytes)
        sizes = tuple(math.log(b) for b in self.token_bytes)
        at_size = [_piecewise_linear(x, sizes, [row[j] * 1e9 / BENCHMARK_NVLINK_Bps
                                                for row in self.table_GBps])
                   for j in range(len(self.sm_points))]
        return _piecewise_linear(sms, self.sm_points, at_size)

    def fast_tier_Bps(self, token_bytes, sms, tier) -> jax.Array:
        """Achieved bytes per second per GPU on `tier` (a `hardware.Tier`)."""
        return self.fast_tier_share(token_bytes, sms) * tier.bandwidth_Bps


class AllToAll(Dispatcher):
    """Megatron-Core's all-to-all dispatcher over NCCL: permute, unpermute and
    the two exchanges (4 launches), one host synchronisation per layer
    (dropless), NCCL's cost model and SM share."""

    name: ClassVar[str] = "alltoall"
    launches: ClassVar[float] = 4.0
    host_syncs: ClassVar[float] = 1.0
    sms: ClassVar[float] = 0.0
    dedups: ClassVar[bool] = False
    fp8_scale_bytes: ClassVar[float] = 0.0  # the recipe's width alone, as before this type
    layout_s: ClassVar[float] = 0.0
    fused_preprocess: ClassVar[bool] = False
    fuses_permute: ClassVar[bool] = False
    host_wait_s: ClassVar[float] = 0.0
    token_bytes: ClassVar[tuple] = ()
    sm_points: ClassVar[tuple] = ()
    table_GBps: ClassVar[tuple] = ()


class DeepEP(Dispatcher):
    """DeepEP's normal kernels. NeMo Automodel's benchmark (H100, intranode):
    BF16 dispatch at hidden 7,168 (14,336 B a token) 168 GB/s with 8 SMs, 335
    with 24; at hidden 2,048 (4,096 B) 139 / 302; FP8 at hidden 2,048 (2,048 B)
    80 / 210. 6 kernels and 1 CPU synchronisation per layer; layout ~39 us."""

    name: ClassVar[str] = "deepep"
    launches: ClassVar[float] = 6.0
    host_syncs: ClassVar[float] = 1.0
    sms: ClassVar[float] = 24.0
    dedups: ClassVar[bool] = True
    fp8_scale_bytes: ClassVar[float] = FP8_SCALE_BYTES_PER_ELEMENT
    layout_s: ClassVar[float] = 39e-6
    fused_preprocess: ClassVar[bool] = True
    fuses_permute: ClassVar[bool] = False
    host_wait_s: ClassVar[float] = 35e-6
    token_bytes: ClassVar[tuple] = (2048.0, 4096.0, 14336.0)
    sm_points: ClassVar[tuple] = (8.0, 24.0)
    table_GBps: ClassVar[tuple] = ((80.0, 210.0), (139.0, 302.0), (168.0, 335.0))


class HybridEP(Dispatcher):
    """HybridEP (TMA copies; copy, permute and pad fused). NeMo Automodel's
    benchmark (H100, intranode BF16 dispatch): hidden 2,048 (4,096 B a token)
    304 GB/s with 8 SMs, 325 with 24; hidden 7,168 (14,336 B) 360 / 367 (no FP8
    figure: a smaller token reads the 4,096 B point). 4 kernels, no CPU
    synchronisation per layer."""

    name: ClassVar[str] = "hybridep"
    launches: ClassVar[float] = 4.0
    host_syncs: ClassVar[float] = 0.0
    sms: ClassVar[float] = 8.0
    dedups: ClassVar[bool] = True
    fp8_scale_bytes: ClassVar[float] = FP8_SCALE_BYTES_PER_ELEMENT
    layout_s: ClassVar[float] = 0.0
    fused_preprocess: ClassVar[bool] = True
    fuses_permute: ClassVar[bool] = True
    host_wait_s: ClassVar[float] = 0.0
    token_bytes: ClassVar[tuple] = (4096.0, 14336.0)
    sm_points: ClassVar[tuple] = (8.0, 24.0)
    table_GBps: ClassVar[tuple] = ((304.0, 325.0), (360.0, 367.0))


DISPATCHER_CLASSES = (AllToAll, DeepEP, HybridEP)
DISPATCHERS = tuple(c.name for c in DISPATCHER_CLASSES)


def dispatcher(value, key: str = "parallel.moe_dispatcher") -> Dispatcher:
    """The dispatcher named `value` (or `value` itself if it is a `Dispatcher`)."""
    return parse(key, value, Dispatcher, DISPATCHER_CLASSES)
