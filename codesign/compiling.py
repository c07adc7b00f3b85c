"""Ahead-of-time compilation, once per process and argument structure, with
XLA:CPU options chosen for the step model's programs on the CPU.

The step model's programs run for microseconds to a second, and XLA spends
seconds optimising them: with the classic emitters at LLVM -O0
(`CPU_COMPILER_OPTIONS`) a full estimate compiles 2-4x faster and runs a few
times slower, which pays wherever a program is compiled to run a few times
(one `codesign estimate`, the gradient method's descent and exact evaluation:
70 s and 19 s at XLA's defaults on the Llama-3-70B problem of
benchmarks/search.py, about 10 s and 2.5 s with these options, the values
equal to rounding). Programs that evaluate many scenarios at once (the grid,
benchmarks/estimate.py) keep XLA's optimisation (`BATCH_COMPILER_OPTIONS`).

Both turn off XLA:CPU's YNNPACK fusions, which hand a reduction or a small
contraction, with the elementwise code around it, to a library kernel: on the
vmapped full estimate (1,000 scenarios) they took 2.8 us per scenario against
0.86 us for XLA's own loops, and 5.6 against 3.7 us with the fast-compile
options (benchmarks/estimate.py measures the rate).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import platform
import threading
import time
import types
from pathlib import Path

import jax

from .store import load_record, save_record

_OWN_LOOPS = {"xla_cpu_experimental_ynn_fusion_type": ""}  # no YNNPACK fusions
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False,
                        "xla_backend_optimization_level": 0, **_OWN_LOOPS}
BATCH_COMPILER_OPTIONS = dict(_OWN_LOOPS)
_COMPILED: dict = {}  # (jitted function, options, argument structure and types) -> executable


def options(batch: bool = False) -> dict | None:
    """The compiler options of a program on the default backend (None off the CPU)."""
    if jax.default_backend() != "cpu":
        return None
    return dict(BATCH_COMPILER_OPTIONS if batch else CPU_COMPILER_OPTIONS)


def compiled(jitted, *args, batch: bool = False, store: str | Path | None = None,
             prove: bool = True, load: bool = True):
    """`jitted` lowered and compiled ahead of time for the structure, shapes and
    dtypes of `args` (once per process; `options(batch)`): (the executable,
    seconds spent tracing and compiling it, or reading it back, in this call;
    waiting for it where `ahead` started it).

    With `store` (a folder), the executable is also kept there and read back by
    a later process (`stored_key`), which then neither traces nor compiles; one
    read back is run once on `args` to prove it whole unless `prove` is False
    (`run`, whose own first run is the proof); `load=False` compiles afresh and
    stores what it compiled. Only a record this user's store wrote for this very
    key is used (`load_record`); a store folder another user could write into is not
    used at all (a `StoreWarning`, and the program compiled in memory)."""
    key = _key(jitted, args, batch)
    if key in _COMPILED:
        return _COMPILED[key], 0.0
    t0 = time.perf_counter()
    path = _stored_path(jitted, args, batch, store)
    started = _AHEAD.pop(key, None)
    exe, read_back = started.result() if started is not None else (None, False)
    if exe is not None and read_back and (not load or (prove and not _runs(exe, args))):
        exe = None  # read back by `ahead` and broken (or not wanted): compiled afresh below
    elif started is None and path is not None and load:
        exe = load_record(path, args, prove)
    if exe is None:
        exe = _compile(jitted, args, batch, xla_cache=path is None)
        if path is not None:
            save_record(path, exe)
    _COMPILED[key] = exe
    return exe, time.perf_counter() - t0


def ahead(jitted, *args, batch: bool = False, store: str | Path | None = None) -> bool:
    """Start `compiled(jitted, *args, batch=batch, store=store)` beside the caller:
    the program is read back from `store` in a thread, or, with no record there,
    traced and lowered here (under the caller's JAX settings) and compiled by
    XLA in a thread (XLA releases the GIL while it compiles or loads). A later
    `compiled` (or `run`) of the same program waits for it instead of starting
    again, and proves what was read back as it would have; one that fails to
    read back is compiled then, in the caller's thread. Used where a caller
    knows the programs it will run (the gradient method: the descent, the rule
    check and the exact evaluation compile at once, on as many cores). Whether
    it started anything (not when the program is compiled or started already)."""
    key = _key(jitted, args, batch)
    if key in _COMPILED or key in _AHEAD:
        return False
    path = _stored_path(jitted, args, batch, store)
    lowered = None if path is not None and path.is_file() else jitted.lower(*args)

    def work():
        if lowered is None:
            return load_record(path, args, False), True
        exe = _compiled_lowered(lowered, batch, xla_cache=path is None)
        if path is not None:
            save_record(path, exe)
        return exe, False

    _AHEAD[key] = _pool().submit(work)
    return True


_AHEAD: dict = {}  # `_key` -> Future of (executable or None, read back?): `ahead`'s programs
_POOL: list = []  # the threads `ahead` compiles in (made on first use)


def _pool():
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2),
                                        thread_name_prefix="codesign-compile"))
    return _POOL[0]


def _stored_path(jitted, args, batch, store) -> Path | None:
    """Where `store` keeps `jitted`'s executable for `args` (None: no store, or a
    closure, whose values are not in its key)."""
    if not store or _code(jitted) is None:
        return None
    return Path(store) / f"{stored_key(jitted, args, batch)}.exe"


def _runs(exe, args) -> bool:
    """Whether `exe` runs on `args` (a read-back executable's proof)."""
    try:
        jax.block_until_ready(exe(*args))
    except Exception:  # noqa: BLE001
        return False
    return True


def run(jitted, *args, store: str | Path | None = None):
    """`jitted(*args)` through `compiled`'s executable, waited for: (its output,
    seconds spent tracing and compiling or reading back). An executable read
    back from `store` that fails on its first run is compiled afresh, stored in
    its place and run again (what `compiled`'s proof does, without running a
    long program twice)."""
    exe, compile_s = compiled(jitted, *args, store=store, prove=False)
    try:
        return jax.block_until_ready(exe(*args)), compile_s
    except Exception:  # noqa: BLE001
        if store is None:
            raise
    # the stored one is broken: forgotten, compiled anew and stored over it
    _COMPILED.pop(_key(jitted, args, False), None)
    exe, again_s = compiled(jitted, *args, store=store, prove=False, load=False)
    return jax.block_until_ready(exe(*args)), compile_s + again_s


def _key(jitted, args, batch):
    """This process's key of a compiled program: the function and the arguments'
    structure, shapes and dtypes."""
    leaves, tree = jax.tree.flatten(args)
    return (jitted, batch, tree, tuple(jax.typeof(x) for x in leaves))


# ------------------------------------------------------------------ stored executables
_DIGEST: list = []  # this package's source digest, once per process


def _source_digest() -> str:
    """sha256 of every Python source of the package: a stored executable is this code's."""
    if not _DIGEST:
        root = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
        _DIGEST.append(h.hexdigest())
    return _DIGEST[0]


def _cpu_flags() -> str:
    try:  # Linux: the instruction sets compiled code may use
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return ""


def _code(jitted) -> str | None:
    """sha256 of the code of the function `jitted` wraps (its bytecode, names and
    constants, nested functions' too), or None when it closes over variables
    (a closure's values are not in its code: not stored). Two functions of one
    name (lambdas, functions made in a function) get two keys."""
    fn = getattr(jitted, "__wrapped__", jitted)
    code = getattr(fn, "__code__", None)
    if code is None or getattr(fn, "__closure__", None):
        return None
    h = hashlib.sha256()

    def digest(c) -> None:
        h.update(c.co_code + b"\0" + repr((c.co_names, c.co_varnames)).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                digest(const)
            elif isinstance(const, frozenset):  # its order varies with hash randomization
                h.update(repr(sorted(map(repr, const))).encode())
            else:
                h.update(repr(const).encode())

    digest(code)
    h.update(repr(getattr(fn, "__defaults__", None)).encode())
    return h.hexdigest()


def stored_key(jitted, args, batch: bool = False) -> str:
    """What a stored executable is valid for, hashed: the package's sources, JAX and
    jaxlib, the backend, its devices and this CPU, float64 or not, the compiler
    options and XLA_FLAGS, the function (its name and code: `_code`), and the
    structure of `args` (every static field, every leaf's shape and dtype)."""
    from jaxlib import version as jaxlib_version

    structure = jax.tree.map(lambda x: str(jax.typeof(x)), args)
    parts = (_source_digest(), jax.__version__, jaxlib_version.__version__,
             jax.default_backend(), str(jax.devices()), platform.machine(), _cpu_flags(),
             str(jax.config.jax_enable_x64), repr(options(batch)),
             os.environ.get("XLA_FLAGS", ""),
             f"{jitted.__module__}.{jitted.__qualname__}", str(_code(jitted)))
    h = hashlib.sha256("\0".join(parts).encode())
    h.update(pickle.dumps(structure, protocol=4))
    return h.hexdigest()


def _compile(jitted, args, batch, xla_cache=True):
    """`jitted` lowered and compiled for `args` (`_compiled_lowered`)."""
    return _compiled_lowered(jitted.lower(*args), batch, xla_cache)


def _compiled_lowered(lowered, batch, xla_cache=True):
    """A lowered program compiled; without `xla_cache`, by XLA itself, not read
    from JAX's persistent cache (`_xla_cache_off`): an XLA:CPU executable read
    back from that cache serializes without its kernels (a later process that
    loads it fails with "Function ... not found"), so one to be stored is
    compiled so."""
    if xla_cache:
        return lowered.compile(compiler_options=options(batch))
    with _xla_cache_off():
        return lowered.compile(compiler_options=options(batch))


_CACHE_OFF = {"depth": 0, "was_on": False}  # compiles under _xla_cache_off, and what it found
_CACHE_LOCK = threading.Lock()


@contextlib.contextmanager
def _xla_cache_off():
    """JAX's persistent compilation cache neither read nor written inside (every
    thread's compiles; nested and concurrent uses share one switch). Setting
    `jax_enable_compilation_cache` alone is not enough: JAX decides once per
    process whether its cache is used (`is_cache_used`), so a process whose
    first compile found it on would still read a program another process
    compiled (the store then keeping a record without kernels, which every later
    process fails to run and compiles again); `reset_cache` makes JAX decide
    anew, once on the way in and once on the way out."""
    from jax.experimental.compilation_cache import compilation_cache

    with _CACHE_LOCK:
        if _CACHE_OFF["depth"] == 0:
            _CACHE_OFF["was_on"] = bool(jax.config.jax_enable_compilation_cache)
            if _CACHE_OFF["was_on"]:
                jax.config.update("jax_enable_compilation_cache", False)
                compilation_cache.reset_cache()
        _CACHE_OFF["depth"] += 1
    try:
        yield
    finally:
        with _CACHE_LOCK:
            _CACHE_OFF["depth"] -= 1
            if _CACHE_OFF["depth"] == 0 and _CACHE_OFF["was_on"]:
                jax.config.update("jax_enable_compilation_cache", True)
                compilation_cache.reset_cache()
