"""`codesign program MODULE:FUNCTION`: trace the user's own jitted step on a mesh of
fake CPU devices (or the accelerators JAX sees), read its compiled HLO, and cost
it on a system, scaled along the axes `--scale` names (docs/program.md)."""

from __future__ import annotations

import argparse
import json
import math

from . import _system, restart_command


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("target", metavar="MODULE:FUNCTION",
                        help="a builder FUNCTION(mesh, **config) -> (step, args, in_shardings, "
                             "out_shardings), or the step itself with [[args]] in the spec; "
                             "MODULE dotted or a .py path")
    parser.add_argument("--spec", help="TOML: [mesh], [scale], [config], [[args]], system")
    parser.add_argument("--mesh", help="the traced mesh, AXIS=SIZE pairs (overrides the "
                                       "spec's [mesh]), e.g. dp=2,tp=4")
    parser.add_argument("--scale", help="cost on more devices along these axes (overrides "
                                        "the spec's [scale]), e.g. dp=512")
    parser.add_argument("--system", help="system preset name or system TOML (default: the "
                                         "spec's, else the default scenario's)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace, name: str) -> int:
    from ..program import MAX_TRACE_DEVICES
    from ..program import spec as program_spec

    spec = program_spec.load(args.spec)
    # an empty --mesh / --scale is refused, not read as "the spec's" (parse_axes)
    mesh_axes = program_spec.parse_axes(args.mesh, "--mesh") if args.mesh is not None else spec.mesh
    if not mesh_axes:
        raise ValueError("--mesh: no mesh; give --mesh AXIS=SIZE,... or [mesh] in --spec")
    scale = program_spec.parse_axes(args.scale, "--scale") if args.scale is not None else spec.scale
    n = math.prod(mesh_axes.values())
    if n > MAX_TRACE_DEVICES:
        raise ValueError(f"--mesh: {n} devices exceed the trace cap of {MAX_TRACE_DEVICES} "
                         "(codesign.program.MAX_TRACE_DEVICES); trace on fewer and --scale "
                         "the data axis")
    from ..execute import distributed

    distributed.configure_cpu_devices(max(n, 1), restart=restart_command())
    import jax

    from .. import program
    from .. import scenario as sc
    from ..program import examples

    fn = program_spec.function(args.target)  # the user's module runs here (their errors: exit 2)
    system_source = args.system or spec.system
    scn = sc.load(None, [], system=system_source)
    labels = sc.labels(None, [], system=system_source)
    program.scaled_sizes(mesh_axes, scale)  # --scale names axes of the mesh, before tracing
    program.check_devices(n)
    mesh = examples.make_mesh(mesh_axes)
    if spec.args:
        structs, shardings = program_spec.arrays(spec, mesh)
        program_spec.check_args(fn, structs)
        prog = program.trace(fn, *structs, mesh=mesh, in_shardings=shardings,
                             name=args.target)
    else:
        step, step_args, ins, outs = program_spec.build(fn, mesh, spec.config)
        prog = program.trace(step, *step_args, mesh=mesh, in_shardings=ins,
                             out_shardings=outs, name=args.target)
    est = jax.jit(lambda s: program.cost(prog, s, scale))(scn.system)
    info = _system.info(scn.system, labels.system, system_source)
    if args.json:
        print(json.dumps({**program.as_json(prog, est, scale), "system": info}, indent=2))
    else:
        print(program.format_report(prog, est, scale, _system.line(info)))
    return 0

