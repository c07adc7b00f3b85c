"""A costed program in words and as JSON: the step, its breakdown by kernel class
and by collective (grouped by kind and mesh axes), exposed and hidden
communication, and the assumptions the costing made."""

from __future__ import annotations

from ..units import format_bytes
from ._cost import ProgramEstimate, scaled_sizes
from ._trace import Program


def _ms(x) -> str:
    return f"{float(x) * 1e3:.4g} ms"


def assumptions(program: Program, scale: dict | None) -> list[str]:
    out = []
    if not program.has_async:
        out.append("no async collective pairs in the HLO (XLA:CPU): each collective "
                   "overlaps the compute that does not depend on it, by data dependencies")
    out.append("two in-order streams (compute kernels; collectives), in the compiled "
               "schedule's order")
    sizes = scaled_sizes(program.mesh, scale)
    if sizes != program.axis_sizes:
        changed = ", ".join(f"{a} {s} -> {n}" for a, s, n in
                            zip(program.axis_names, program.axis_sizes, sizes, strict=True)
                            if s != n)
        out.append(f"scaled from the traced mesh ({changed}): each device's kernels and each "
                   "collective's bytes as traced (weak scaling: exact for a data-parallel axis); "
                   "groups spanning a scaled axis grow")
    return out


def collective_groups(program: Program, est: ProgramEstimate) -> list[dict]:
    """One row per (collective, mesh axes): count, bytes, seconds, exposed seconds."""
    rows: dict = {}
    for k, op in enumerate(program.collectives):
        key = (op.collective, "+".join(program.axes(op)) or "-")
        r = rows.setdefault(key, {"collective": key[0], "axes": key[1], "count": 0,
                                  "bytes": 0.0, "time_s": 0.0, "exposed_s": 0.0})
        r["count"] += 1
        r["bytes"] += op.collective_bytes
        r["time_s"] += float(est.collective_s[k])
        r["exposed_s"] += float(est.collective_exposed_s[k])
    return list(rows.values())


def summary(program: Program, est: ProgramEstimate, scale: dict | None = None) -> dict:
    counts = program.counts()
    return {
        "program": program.name,
        "mesh": dict(zip(program.axis_names, program.axis_sizes, strict=True)),
        "costed_mesh": dict(zip(program.axis_names, scaled_sizes(program.mesh, scale),
                                strict=True)),
        "devices": float(est.devices),
        "step_time_s": float(est.step_time_s), "compute_s": float(est.compute_s),
        "gemm_s": float(est.gemm_s), "memory_bound_s": float(est.memory_s),
        "communication_s": float(est.communication_s), "exposed_s": float(est.exposed_s),
        "hidden_s": float(est.hidden_s),
        "kernels": {"gemm": counts.get("gemm", 0), "memory_bound": counts.get("memory", 0),
                    "collectives": counts.get("collective", 0), "free": counts.get("free", 0)},
        "flops_per_device": program.flops, "gemm_flops_per_device": program.gemm_flops,
        "xla_cost_analysis": program.xla_cost,
        "collectives": collective_groups(program, est),
        "assumptions": assumptions(program, scale),
    }


def schedule(program: Program, est: ProgramEstimate) -> list[dict]:
    """Every collective in schedule order: its HLO name, position, kind, axes, bytes,
    replica groups, and its start, time and exposed part in the costed step."""
    return [{"name": op.name, "position": int(i), "collective": op.collective,
             "axes": "+".join(program.axes(op)) or "-", "bytes": op.collective_bytes,
             "groups": [list(g) for g in op.groups], "async": op.is_async,
             "start_s": float(est.collective_start_s[k]), "time_s": float(est.collective_s[k]),
             "exposed_s": float(est.collective_exposed_s[k]), "op_name": op.op_name}
            for k, (i, op) in enumerate(zip(program.graph.collective, program.collectives,
                                            strict=True))]


def as_json(program: Program, est: ProgramEstimate, scale: dict | None = None) -> dict:
    """`summary` with the collective schedule (`schedule`)."""
    return {**summary(program, est, scale), "schedule": schedule(program, est)}


def format_report(program: Program, est: ProgramEstimate, scale: dict | None = None,
                  system_line: str = "") -> str:
    s = summary(program, est, scale)
    mesh = ",".join(f"{a}={n}" for a, n in s["mesh"].items())
    costed = ",".join(f"{a}={n}" for a, n in s["costed_mesh"].items())
    k = s["kernels"]
    lines = [f"codesign program: {program.name} traced on mesh {mesh}, costed on {costed} "
             f"({s['devices']:,.0f} devices)"]
    if system_line:
        lines.append(system_line)
    lines += [f"  {k['gemm']} GEMM kernels, {k['memory_bound']} memory-bound kernels, "
              f"{k['collectives']} collectives ({k['free']} free ops)",
              f"  {program.flops:.4g} FLOP per device counted "
              + (f"(XLA's cost analysis: {program.xla_cost['flops']:.4g})"
                 if "flops" in program.xla_cost else "(no XLA cost analysis)"),
              "",
              f"step time        {_ms(s['step_time_s'])}",
              f"  compute        {_ms(s['compute_s'])}  (GEMM {_ms(s['gemm_s'])}, "
              f"memory-bound {_ms(s['memory_bound_s'])})",
              f"  communication  {_ms(s['communication_s'])}: exposed {_ms(s['exposed_s'])}, "
              f"hidden {_ms(s['hidden_s'])}",
              "",
              "collectives (by kind and mesh axes):",
              f"  {'collective':<15} {'axes':<10} {'count':>5} {'bytes':>11} {'time':>11} "
              f"{'exposed':>11}"]
    for r in s["collectives"]:
        lines.append(f"  {r['collective']:<15} {r['axes']:<10} {r['count']:5d} "
                     f"{format_bytes(r['bytes']):>11} {_ms(r['time_s']):>11} "
                     f"{_ms(r['exposed_s']):>11}")
    lines.append("")
    lines += [f"assumption: {a}" for a in s["assumptions"]]
    return "\n".join(lines)
