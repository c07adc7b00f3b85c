"""nccl-tests-style timing of the executed collectives on whatever devices JAX sees.

A run is one (op, algorithm, mesh, dtype) and a list of sizes. For each size
the collective is compiled and run `warmup` times, then timed `iters` times
one call at a time (`block_until_ready`; in rounds over the sizes, see `run`);
the record keeps the minimum (`time_s`,
from which algbw and busbw are computed, as `collectives.busbw_Bps` defines
them) and the median (`time_median_s`). `wrong` counts output elements that
differ from the exact answer, like nccl-tests' #wrong: inputs are small
integers so every algorithm's sum is exact in every dtype.

"size" means what nccl-tests means: the per-rank buffer of all-reduce and
send/recv, the whole per-rank input of reduce-scatter and all-to-all, the whole
output of all-gather; sizes are rounded down to whole elements (and to a
multiple of the rank count where the layout needs it), as nccl-tests does.

Several processes (jax.distributed) see one global mesh: each process times
its own calls and counts wrong elements in its own shards; counts and
checksums are summed over processes and every process returns the same rows.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .. import procfs, units
from ..model import collectives
from . import algorithms

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
          "int32": jnp.int32, "float64": jnp.float64}
NCCL_TYPE_NAMES = {"float32": "float", "bfloat16": "bfloat16", "float16": "half",
                   "int32": "int32", "float64": "double"}
REDUCING_OPS = ("all_reduce", "reduce_scatter")
_POWER_OF_TWO_ONLY = ("recursive_doubling", "halving_doubling")


@dataclasses.dataclass(frozen=True)
class BenchMesh:
    """A mesh and the axes the collectives run over (all of its axes)."""

    mesh: Mesh
    spec: str  # "8" or "2x4"

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(self.mesh.axis_names)

    @property
    def ranks(self) -> int:
        return int(self.mesh.devices.size)


def make_mesh(spec: str | None = None, devices: Sequence | None = None) -> BenchMesh:
    """`"8"` -> a 1D mesh ('ranks',); `"2x4"` -> ('node', 'local'); None -> every device."""
    devices = list(jax.devices() if devices is None else devices)
    spec = str(len(devices)) if spec is None else str(spec).strip().lower()
    try:
        shape = tuple(int(s) for s in spec.split("x"))
    except ValueError:
        shape = ()
    if len(shape) not in (1, 2) or min(shape) < 1:
        raise ValueError(f"mesh={spec!r} must be RANKS (e.g. 8) or NODESxLOCAL (e.g. 2x4)")
    needed = int(np.prod(shape))
    if needed > len(devices):
        raise ValueError(f"mesh={spec!r} needs {needed} devices; JAX sees {len(devices)} "
                         f"({devices[0].platform})")
    names = ("ranks",) if len(shape) == 1 else ("node", "local")
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape),
                         devices=devices[:needed])
    return BenchMesh(mesh, "x".join(map(str, shape)))


def runnable_algorithms(op: str, mesh: BenchMesh) -> tuple[str, ...]:
    """The algorithms of `op` this mesh can run (hierarchical needs 2 axes,
    recursive doubling / halving-doubling a power-of-two rank count)."""
    p = mesh.ranks
    return tuple(a for a in algorithms.algorithm_names(op)
                 if not (a == "hierarchical" and len(mesh.axes) != 2)
                 and not (a in _POWER_OF_TWO_ONLY and p & (p - 1)))


def check_runnable(op: str, algorithm: str, mesh: BenchMesh) -> None:
    algorithms.check_algorithm(op, algorithm)
    if algorithm not in runnable_algorithms(op, mesh):
        need = ("a 2D mesh, e.g. 2x4" if algorithm == "hierarchical"
                else "a power-of-two number of ranks")
        raise ValueError(f"algorithm={algorithm!r} needs {need}; got mesh={mesh.spec!r}")


def layout(op: str, size_bytes: float, itemsize: int, ranks: int) -> tuple[int, int]:
    """(input elements per rank, nccl-tests size in bytes actually run)."""
    n = max(int(size_bytes // itemsize), 1)
    if op in ("reduce_scatter", "all_to_all", "all_gather"):
        n = max(n // ranks, 1) * ranks
    return (n // ranks if op == "all_gather" else n), n * itemsize


def input_pattern(ranks: int, count: int) -> np.ndarray:
    """The global input (ranks x count), small integers so every sum is exact."""
    r = np.arange(ranks)[:, None]
    i = np.arange(count)[None, :]
    return (((r * 7 + i * 3) % 11) - 5).reshape(-1)


def expected_output(op: str, x: np.ndarray, ranks: int) -> np.ndarray:
    """The exact global output (every rank's block, stacked by rank) of `op` on the
    global input x (rank r's block is x.reshape(ranks, -1)[r])."""
    blocks = np.asarray(x).reshape(ranks, -1)
    if op == "all_reduce":
        return np.tile(blocks.sum(0), ranks)
    if op == "reduce_scatter":
        return blocks.sum(0)
    if op == "all_gather":
        return np.tile(blocks.reshape(-1), ranks)
    if op == "all_to_all":
        return blocks.reshape(ranks, ranks, -1).transpose(1, 0, 2).reshape(-1)
    if op == "send_recv":
        return np.roll(blocks, 1, axis=0).reshape(-1)
    raise ValueError(f"op={op!r} has no expected output; choose one of {', '.join(algorithms.OPS)}")


def compiled(op: str, algorithm: str, mesh: BenchMesh) -> Callable[[jax.Array], jax.Array]:
    """jit(shard_map(...)) running `op` by `algorithm` over every axis of the mesh on a
    global 1D array sharded on dimension 0."""
    axes = mesh.axes if len(mesh.axes) > 1 else mesh.axes[0]
    body = lambda block: algorithms.collective(op, algorithm, block, axes)  # noqa: E731
    return jax.jit(jax.shard_map(body, mesh=mesh.mesh, in_specs=P(axes), out_specs=P(axes)))


def _global_array(values: np.ndarray, mesh: BenchMesh, dtype) -> jax.Array:
    sharding = NamedSharding(mesh.mesh, P(mesh.axes if len(mesh.axes) > 1 else mesh.axes[0]))
    host = values.astype(jnp.dtype(dtype))
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _sum_over_processes(values: np.ndarray) -> np.ndarray:
    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values)).sum(axis=0)


def wrong_and_checksum(out: jax.Array, expected: np.ndarray) -> tuple[int, float]:
    """(#elements differing from `expected`, sum of all outputs), over all processes."""
    wrong, checksum = 0, 0.0
    for shard in out.addressable_shards:
        got = np.asarray(shard.data, np.float64)
        wrong += int(np.sum(got != expected[shard.index]))
        checksum += float(got.sum())
    total = _sum_over_processes(np.array([wrong, checksum], np.float64))
    return int(total[0]), float(total[1])


def time_calls(fn: Callable, x, iters: int, warmup: int,
               clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], object]:
    """Times of `iters` calls after `warmup` calls, one at a time; and the last output."""
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters={iters} must be >= 1 and warmup={warmup} >= 0")
    out = None
    for _ in range(warmup):
        out = jax.block_until_ready(fn(x))
    times = []
    for _ in range(iters):
        start = clock()
        out = jax.block_until_ready(fn(x))
        times.append(clock() - start)
    return times, out


@dataclasses.dataclass(frozen=True)
class BenchRecord:
    """One size of one run; `as_json` gives the `codesign bench --json` object."""

    op: str
    algorithm: str
    ranks: int
    mesh: str
    dtype: str
    size_bytes: int
    count: int
    time_s: float  # minimum over iters
    time_median_s: float
    algbw_Bps: float
    busbw_Bps: float
    wrong: int
    checksum: float
    iters: int
    device: str = ""  # the devices' kind as JAX names it ("cpu", "NVIDIA H100 80GB HBM3")

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Case:
    """The device input and exact expected output of one size."""

    x: jax.Array
    expected: np.ndarray
    size_bytes: int
    count: int  # elements in `size_bytes`


def prepare(op: str, mesh: BenchMesh, size_bytes: float, dtype: str = "float32") -> Case:
    jdtype = DTYPES[check_dtype(dtype)]
    itemsize = jnp.dtype(jdtype).itemsize
    count, size = layout(op, size_bytes, itemsize, mesh.ranks)
    host = input_pattern(mesh.ranks, count)
    return Case(_global_array(host, mesh, jdtype), expected_output(op, host, mesh.ranks), size,
                size // itemsize)


def host_memory_bytes(op: str, ranks: int, sizes_bytes: Sequence[float],
                      dtype: str = "float32") -> int:
    """What `run` holds at its peak in host memory (fake CPU devices live there
    too): every size's input, exact expected output (int64) and last output at
    once, plus the temporaries of preparing the largest input (its int64
    pattern, three times over, and the cast)."""
    itemsize = jnp.dtype(DTYPES[check_dtype(dtype)]).itemsize
    kept, transient = 0, 0
    for size in sizes_bytes:
        count, _ = layout(op, size, itemsize, ranks)
        inputs = ranks * count
        outputs = {"all_gather": ranks * inputs, "reduce_scatter": count}.get(op, inputs)
        kept += inputs * itemsize + outputs * (8 + itemsize)
        transient = max(transient, inputs * (3 * 8 + itemsize))
    return kept + transient


def check_memory(op: str, ranks: int, sizes_bytes: Sequence[float], dtype: str,
                 available_bytes: int | None) -> None:
    """A one-line ValueError when `host_memory_bytes` exceeds `available_bytes`
    (None: unknown, not checked), before anything is allocated."""
    need = host_memory_bytes(op, ranks, sizes_bytes, dtype)
    if available_bytes is not None and need > available_bytes:
        raise ValueError(
            f"sizes up to {units.format_bytes(max(sizes_bytes))} over {ranks} ranks need about "
            f"{units.format_bytes(need)} of host memory at once (every size's input, expected "
            f"and last output); this process can take {units.format_bytes(available_bytes)}: "
            "choose smaller --sizes or fewer of them")


def record(op: str, algorithm: str, mesh: BenchMesh, case: Case, dtype: str,
           times: Sequence[float], out: jax.Array) -> BenchRecord:
    """The BenchRecord of `times` (one per call) and the last output of one size."""
    wrong, checksum = wrong_and_checksum(out, case.expected)
    t = min(times)
    return BenchRecord(
        op, algorithm, mesh.ranks, mesh.spec, dtype, case.size_bytes, case.count, t,
        statistics.median(times), float(collectives.algbw_Bps(case.size_bytes, t)),
        float(collectives.busbw_Bps(op, case.size_bytes, t, mesh.ranks)), wrong, checksum,
        len(times), mesh.mesh.devices.flat[0].device_kind)


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    return dtype


def run(op: str, algorithm: str, mesh: BenchMesh, sizes_bytes: Sequence[float], *,
        dtype: str = "float32", iters: int = 20, warmup: int = 5,
        progress: Callable[[int, int, str], None] | None = None) -> list[BenchRecord]:
    """Every size of one (op, algorithm) on `mesh`, smallest first.

    Each size is compiled and warmed up `warmup` times first; then `iters`
    rounds time one call of every size in turn, so a burst of load elsewhere
    on the machine slows one round of all sizes, not every call of one size
    (the minimum over rounds is the figure that then stands).
    """
    op = algorithms.check_op(op)
    check_runnable(op, algorithm, mesh)
    check_dtype(dtype)
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters={iters} must be >= 1 and warmup={warmup} >= 0")
    check_memory(op, mesh.ranks, sizes_bytes, dtype, procfs.available_memory_bytes())
    fn = compiled(op, algorithm, mesh)
    cases = [prepare(op, mesh, size, dtype) for size in sizes_bytes]
    steps, done = len(cases) + iters, 0
    outputs = []
    for case in cases:
        if progress is not None:
            progress(done, steps, f"{op} {algorithm} warm-up {case.size_bytes} B")
        outputs.append(time_calls(fn, case.x, 1, warmup)[1])
        done += 1
    times: list[list[float]] = [[] for _ in cases]
    for round_ in range(iters):
        if progress is not None:
            progress(done, steps, f"{op} {algorithm} round {round_ + 1}/{iters}")
        for i, case in enumerate(cases):
            t, outputs[i] = time_calls(fn, case.x, 1, 0)
            times[i] += t
        done += 1
    if progress is not None:
        progress(steps, steps, f"{op} {algorithm}")
    return [record(op, algorithm, mesh, case, dtype, t, out)
            for case, t, out in zip(cases, times, outputs, strict=True)]


# ------------------------------------------------------------------ nccl-tests table
def _time_us(time_s: float) -> str:
    us = time_s * 1e6
    return f"{us:9.0f}" if us >= 1e4 else f"{us:9.1f}" if us >= 100 else f"{us:9.2f}"


def table_header(op: str, algorithm: str, mesh: BenchMesh | str, dtype: str, iters: int,
                 warmup: int, platform: str) -> str:
    spec = mesh.spec if isinstance(mesh, BenchMesh) else mesh
    return "\n".join([
        f"# codesign bench: {op} by {algorithm} on mesh {spec}, {dtype}, "
        f"{iters} timed iters after {warmup} warm-up, devices: {platform}",
        "#",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'time':>9}  {'time':>9}"
        f"  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'min(us)':>9}  {'med(us)':>9}"
        f"  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
    ])


def table_row(r: BenchRecord) -> str:
    redop = "sum" if r.op in REDUCING_OPS else "none"
    return (f"{r.size_bytes:12d}  {r.count:12d}  {NCCL_TYPE_NAMES[r.dtype]:>8}  {redop:>6}  "
            f"{_time_us(r.time_s)}  {_time_us(r.time_median_s)}  {r.algbw_Bps / 1e9:6.2f}  "
            f"{r.busbw_Bps / 1e9:6.2f}  {r.wrong:6d}")


def table_footer(records: Sequence[BenchRecord]) -> str:
    wrong = sum(r.wrong for r in records)
    avg = np.mean([r.busbw_Bps for r in records]) / 1e9 if records else 0.0
    return "\n".join([f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
                      f"# Avg bus bandwidth    : {avg:g} ", "#"])
