"""`codesign program`: cost the user's own JAX training step.

`trace(fn, *args, mesh=..., in_shardings=..., out_shardings=...)` compiles the
step for a mesh (fake CPU devices up to `MAX_TRACE_DEVICES`) and reads its
partitioned, compiled HLO into a `Program`: every kernel's FLOPs and bytes,
every collective's bytes, replica groups and place in the schedule, and the
data dependencies between them. `cost(program, system, scale=...)` costs it on
any `System` with the step model's own pieces (`compute.gemm_time_s`,
`compute.streaming_time_s`, `traffic.cost_on`) and a critical-path schedule,
as one differentiable JAX function of the system. docs/program.md.
"""

from ._cost import ProgramEstimate, cost, scaled_sizes
from ._hlo_ops import Op
from ._report import as_json, format_report, summary
from ._trace import MAX_TRACE_DEVICES, Program, check_devices, from_hlo, trace
from .spec import function as load_function

__all__ = ["MAX_TRACE_DEVICES", "Op", "Program", "ProgramEstimate", "as_json", "check_devices",
           "cost", "format_report", "from_hlo", "load_function", "scaled_sizes", "summary",
           "trace"]
