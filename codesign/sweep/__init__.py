"""Design sweeps: a TOML spec -> points -> sharded, resumable, reproducible evaluation.

A spec (format in `sweeps/README.md`) names a *target* -- a pure jnp function
of float knob values returning a dict of scalar outputs (`TARGETS`) -- a *base*
configuration, the *knobs* with their ranges, the *outputs*, and the *plots*
and *summaries* drawn from the results.

Points. Categorical knobs (algorithm names, presets, schedules) form an outer
Python loop of *combos*, each compiled once; float knobs form a grid (Cartesian
product in declaration order, the last knob fastest) crossed with `samples`
random draws (seeded). Point index = combo x n_float + float index.

Evaluation. Each combo's points are cut into chunks of `chunk_size`; a chunk is
padded to a multiple of the local device count, placed with a `NamedSharding`
over a 1D ("batch",) mesh of the local devices, and evaluated by one jitted
program per combo: `shard_map` over the mesh, each device mapping the point
function over its slice (see `Evaluator` for why this is not a `vmap`). Under
`jax.distributed` every process lists the chunks still missing and takes every
P-th one. Each chunk is written atomically (temp + fsync +
`os.replace`) as JSON (the record, exact floats) and CSV, so `resume` skips
what is on disk and recomputes nothing. The merged `results.csv` and
`results.json` are sorted by point index, formatted with 12 significant
digits and carry nothing run-dependent: a killed-then-resumed sweep and a 1-
or 2-process sweep give byte-identical files.

Gradients. With `grad`, every point also carries the elasticities
d log y / d log x of the chosen outputs with respect to every float knob
(forward-mode Jacobian), named `dlog(y)/dlog(x)`: a sensitivity map.

Layout: `_spec` (the schema, parsing, loading, result columns; `_fields` the
checks of one TOML value), `_target` (the `Target` NamedTuple and the checks
every target shares), `_targets` (the five targets, `TARGETS`), `_points`
(points, chunks, the `Job`), `_evaluate` (point functions, the sharded
`Evaluator`), `_store` (chunk files, manifest, merge, results.json), `_report`
(summary.txt, figures), `_run` (the run loop, progress, `finish_sweep`),
`_plots` (the matplotlib figures, re-exported by `codesign.plots`). The names
below are the public API; the chunk machinery (`Evaluator`, `chunk_rows`,
`write_chunk`, `read_chunk`, `prepare_out_dir`, ...) stays in its modules.
"""

from ._evaluate import point_function as point_function
from ._points import Job as Job
from ._points import Points as Points
from ._points import make_job as make_job
from ._points import make_points as make_points
from ._run import RunResult as RunResult
from ._run import finish_sweep as finish_sweep
from ._run import run as run
from ._spec import DEFAULT_CHUNK_SIZE as DEFAULT_CHUNK_SIZE
from ._spec import SIGNIFICANT_DIGITS as SIGNIFICANT_DIGITS
from ._spec import Spec as Spec
from ._spec import columns as columns
from ._spec import load_spec as load_spec
from ._spec import parse_spec as parse_spec
from ._store import LOCK_FILE as LOCK_FILE
from ._store import Table as Table
from ._store import chunks_on_disk as chunks_on_disk
from ._store import claimed as claimed
from ._store import prepare_out_dir as prepare_out_dir
from ._store import writing as writing
from ._target import Target as Target
from ._targets import TARGETS as TARGETS

__all__ = [
    "DEFAULT_CHUNK_SIZE", "LOCK_FILE", "Job", "Points", "RunResult", "SIGNIFICANT_DIGITS", "Spec",
    "TARGETS", "Table", "Target", "chunks_on_disk", "claimed", "columns", "finish_sweep",
    "load_spec", "make_job", "make_points", "parse_spec", "point_function", "prepare_out_dir",
    "run", "writing",
]
