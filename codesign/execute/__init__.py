"""The real execution path: collectives written with jax.shard_map, measured and
used to calibrate the cost models (see DESIGN.md, "The real execution path").

- `algorithms`: where every collective is executed (ring, recursive doubling,
  halving-doubling, double tree, hierarchical, all-to-all, node-limited MoE,
  pipeline), each equal to its jax.lax built-in;
- `bench`: nccl-tests-style timing; `nccl_tests`: reading nccl-tests logs;
- `calibrate`: alpha-beta-gamma fit per tier, written as a [system] override;
  `line_rate`: the fit held against what the machine's links and NICs carry;
- `compute`: GEMM, attention and streaming kernels timed on one device, and the
  step model's compute constants fitted to them (`codesign calibrate compute`);
- `hlo`, `audit`: collectives of a compiled sharded step against the traffic table;
- `distributed`: the one launcher: several processes joined by jax.distributed
  (local, a cluster JAX detects, or --coordinator), supervised.
"""

from . import algorithms as algorithms
from . import audit as audit
from . import bench as bench
from . import calibrate as calibrate
from . import compute as compute
from . import distributed as distributed
from . import hlo as hlo
from . import line_rate as line_rate
from . import nccl_tests as nccl_tests
from .algorithms import OPS as OPS
from .algorithms import algorithm_names as algorithm_names
from .algorithms import all_gather as all_gather
from .algorithms import all_reduce as all_reduce
from .algorithms import all_to_all as all_to_all
from .algorithms import collective as collective
from .algorithms import moe_dispatch_combine as moe_dispatch_combine
from .algorithms import node_limited_routing as node_limited_routing
from .algorithms import pipeline as pipeline
from .algorithms import reduce_scatter as reduce_scatter
from .algorithms import send_recv as send_recv
