"""`codesign estimate`, `codesign traffic` and `codesign roofline`."""

from __future__ import annotations

import json

import jax
import numpy as np

from .. import output_checks, scenario, uncertainty
from ..chip_specs import preset_for_device
from ..compiling import compiled
from ..model import hardware, network_roofline, step, workload
from ..units import format_bytes
from . import _output, _system, executable_store
from ._fit import fit_lines, fit_options
from ._text import format_count, format_duration, format_duration_range


def add_arguments(parser, name):
    _system.add_scenario_arguments(parser)
    if name == "roofline":
        parser.add_argument("--plot", metavar="FILE.png", help="draw the roofline")
    if name == "estimate":
        parser.add_argument("--plot", metavar="FILE.png",
                            help="draw the step-time and memory breakdowns")
    _output.add_format(parser, None if name == "estimate" else
                       "the table as CSV (one header row)")


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "reserve")


@jax.jit
def estimate_program(scn):
    """The estimate and its outputs of a loaded scenario: its values were
    checked on loading, so without the traced check (no host callback: the
    persistent compilation cache stores the program), compiled ahead of time
    with the fast CPU options (`compiling`)."""
    est = step.estimate(scn, check=False)
    return est, step.outputs(est)


def evaluate(args):
    """(scenario, its labels, estimate) of the command line; an estimate with a
    non-finite output is a ValueError (exit 2), one with MFU/HFU above 1 against
    the peak of its GEMMs' precision a `output_checks.OutputOutOfRange` (the model's
    fault: exit 1 with one line), see `output_checks.check_outputs`."""
    scn = scenario.load(args.scenario, args.set, system=args.system)
    est, out = compiled(estimate_program, scn, store=executable_store())[0](scn)
    out = step.asked(est, out)  # time to train only when tokens are set
    output_checks.check_outputs(out, args.set)
    return scn, scenario.labels(args.scenario, args.set, system=args.system), est


def traffic_rows(est: step.Estimate) -> list[dict]:
    rows = []
    for r in est.step.traffic:
        if float(r.count_per_step) == 0 or float(r.ranks) <= 1:
            continue
        rows.append({"dimension": r.dimension, "collective": r.collective,
                     "algorithm": r.algorithm, "tier": r.tier,
                     "ranks": float(r.ranks), "message_bytes": float(r.message_bytes),
                     "count_per_step": float(r.count_per_step),
                     "critical_path": r.critical_path, "time_s": float(r.time_s),
                     "exposed_s": float(r.exposed_s)})
    return rows


def in_numpy(tree):
    """`tree`'s arrays as NumPy arrays: what is printed from a computed estimate is
    derived in NumPy, not one dispatched JAX operation at a time (the same IEEE
    arithmetic: every built-in scenario's outputs equal to the bit)."""
    return jax.tree.map(np.asarray, tree)


def estimate_json(est: step.Estimate) -> dict:
    out = {k: float(v) for k, v in step.outputs(in_numpy(est)).items()}
    out["fits_memory"] = bool(out["fits_memory"])
    out["breakdown_s"] = {k: float(v) for k, v in est.step.breakdown_s().items()}
    for k in list(out):
        if k.startswith("breakdown_") and k != "breakdown_s":
            del out[k]
    if float(est.tokens) <= 0:
        del out["time_to_train_s"], out["gpu_hours"]
    out["traffic"] = traffic_rows(est)
    return out


def _measured_elsewhere(labels) -> str | None:
    """Why validate's interval does not apply (None: it does): the system's tiers
    were calibrated on devices that are not its preset's chips (fake CPU devices,
    another GPU), so the model's error on published runs of those chips says
    nothing about this system."""
    on, preset = labels.system.measured_on, labels.system.preset
    if on is None or preset_for_device(on) == preset:
        return None
    return (f"the system's tiers were calibrated on {on}, not on {preset}'s "
            f"{labels.system.chip}, and validate's rows describe those chips")


def intervals_json(labels, out: dict) -> dict:
    """The intervals of the step time and (tokens set) the time to train, from
    validate's rows of the scenario's chip family (`codesign.uncertainty`); none,
    with the reason, for a system calibrated on other devices."""
    why = _measured_elsewhere(labels)
    if why is not None:
        return {"interval": {"none": why}}
    family = hardware.chip_family(labels.system.chip)
    step_i = uncertainty.interval(family, out["step_time_s"])
    res = {"step_time_s_interval": [step_i.lo, step_i.hi]}
    if "time_to_train_s" in out:
        train_i = uncertainty.interval(family, out["time_to_train_s"])
        res["time_to_train_s_interval"] = [train_i.lo, train_i.hi]
    res["interval"] = {"quantile": step_i.quantile, "coverage": round(step_i.coverage, 12),
                       "family": family, "rows": step_i.rows,
                       "rows_family": step_i.rows_family, "family_rows": step_i.family_rows}
    return res


def interval_source(i: dict) -> str:
    """"validate's 15 A100 rows", or where the family has too few, all rows."""
    if i["rows_family"] != "all":
        return f"validate's {i['rows']} {i['family']} rows"
    n = i["family_rows"]
    few = "no" if n == 0 else f"only {n}"
    return f"validate's {i['rows']} rows, {few} {i['family']} row{'' if n == 1 else 's'}"


def interval_ratio(out: dict) -> str:
    """The interval as a multiple of the estimate, and, where the estimate lies
    outside it (validate's rows of the family all ran faster, or all slower,
    than predicted), which way: "0.82-0.99 x the estimate: validate's tpu rows
    ran faster than predicted"."""
    lo, hi = out["step_time_s_interval"]
    step = out["step_time_s"]
    words = f"{lo / step:.2f}-{hi / step:.2f} x the estimate" if step > 0 else ""
    i = out["interval"]
    rows = (f"validate's {i['family']} rows" if i["rows_family"] != "all"
            else "validate's rows")
    if step > 0 and hi < step:
        return f"{words}: {rows} ran faster than predicted"
    if step > 0 and lo > step:
        return f"{words}: {rows} ran slower than predicted"
    return words


def print_traffic(rows):
    print(f"{'dim':<4} {'collective':<15} {'tier':<19} {'ranks':>5} {'message':>10} "
          f"{'count':>9} {'crit':>4} {'time_s':>9} {'exposed_s':>9}")
    for r in rows:
        print(f"{r['dimension']:<4} {r['collective']:<15} {r['tier']:<19} {r['ranks']:>5.0f} "
              f"{format_bytes(r['message_bytes']):>10} {r['count_per_step']:>9.0f} "
              f"{'yes' if r['critical_path'] else 'no':>4} {r['time_s']:>9.3f} "
              f"{r['exposed_s']:>9.3f}")


def _etp(p) -> str:
    """The experts' own tensor-parallel size where it is set."""
    return f" etp {format_count(p.etp)}" if float(p.etp) > 0 else ""


def _count(n) -> str:
    """A parameter count as people write it: 8.03B, 671B, 1.01T."""
    n = float(n)
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:,.0f}"


def parameters_words(model) -> str:
    """The parameter counts with their conventions (`workload.parameter_counts`):
    "671B total (36.5B active per token without the input embedding, 37.4B with
    it)", the MTP module's share of the total where it has one."""
    c = workload.parameter_counts(in_numpy(model))
    mtp = (f" incl. the MTP module's {_count(c.mtp)} (its blocks and projections; it shares "
           "the embedding and head)" if c.mtp > 0 else "")
    embedding = (", the input embedding tied to the output head" if c.tied else
                 f" without the input embedding, {_count(c.active + c.input_embedding)} with it")
    return f"{_count(c.total)} total{mtp} ({_count(c.active)} active per token{embedding})"


def _gpu_hours(h: float) -> str:
    """0.60M from 100,000 GPU-hours up (as the tables of published runs write
    them); below, the whole hours: 2,662 (not 0.00M)."""
    return f"{h / 1e6:.2f}M" if h >= 1e5 else format_count(round(h))


def print_estimate(scn, labels, out):
    p = scn.plan
    print(f"scenario {labels.scenario}: {labels.model} on {format_count(scn.system.gpus)} x "
          f"{labels.system.chip} ({labels.system.preset})")
    print(_system.line(out["system"]))
    print(f"plan: dp {format_count(p.dp)}  tp {format_count(p.tp)}  pp {format_count(p.pp)}  "
          f"cp {format_count(p.cp)}  ep {format_count(p.ep)}{_etp(p)}  "
          f"micro-batches {format_count(p.micro_batches)}  "
          f"schedule {p.schedule.name}  zero {p.zero.name}  recompute {p.recompute.name}  "
          f"{p.dtype}  "
          f"attention {scn.model.attention.name}/{scn.model.attention_kernel.name}")
    print(f"step time        {out['step_time_s']:.3f} s   ({out['tokens_per_s']:,.0f} tokens/s)")
    if "step_time_s_interval" in out:
        lo, hi = out["step_time_s_interval"]
        ratio = interval_ratio(out)
        outside = f" ({ratio})" if "predicted" in ratio else ""  # the estimate outside it
        print(f"  {out['interval']['coverage']:.0%} interval   {lo:.3f}-{hi:.3f} s, from "
              f"{interval_source(out['interval'])}{outside}")
    else:
        print(f"  interval       none: {out['interval']['none']}")
    for k, v in out["breakdown_s"].items():
        share = v / out["step_time_s"] if out["step_time_s"] else 0.0
        print(f"  {k:<14} {v:9.3f} s  {share:6.1%}")
    # against the 16-bit peak and, GEMMs in 8 bits, against the chip's 8-bit peak
    # (`Chip.peak_fp8_flops_per_s`: fp8, or int8 on a chip without fp8, e.g. A100)
    print(f"parameters       {parameters_words(scn.model)}")
    own = p.precision.gemm not in ("bf16", "fp16")
    mfu_own = f", of the 8-bit peak {out['mfu_gemm_peak']:.1%}" if own else ""
    hfu_own = f" (of the 8-bit peak {out['hfu_gemm_peak']:.1%})" if own else ""
    print(f"MFU {out['mfu']:.1%} (causal {out['mfu_causal']:.1%}{mfu_own})   "
          f"HFU {out['hfu']:.1%}{hfu_own}   model {out['model_tflops_per_gpu']:.1f} / hardware "
          f"{out['hardware_tflops_per_gpu']:.1f} TFLOP/s per GPU")
    print(f"memory           {format_bytes(out['memory_bytes_per_gpu'])} of "
          f"{format_bytes(out['memory_capacity_bytes'])} per GPU "
          f"({'fits' if out['fits_memory'] else 'DOES NOT FIT'})")
    print("  " + "  ".join(f"{k} {format_bytes(out[f'memory_{k}_bytes'])}"
                           for k in MEMORY_PARTS))
    print(f"expected step    {out['expected_step_time_s']:.3f} s (p99 "
          f"{out['step_time_p99_s']:.3f} s), goodput {out['goodput']:.1%}, effective "
          f"training time {out['effective_training_time_fraction']:.1%}, job MTBF "
          f"{out['mtbf_s'] / 3600:.1f} h")
    print(f"fabric           ${out['fabric_cost_usd'] / 1e6:,.1f}M, "
          f"{out['fabric_power_w'] / 1e3:,.0f} kW")
    if "time_to_train_s" in out:
        print(f"time to train    {format_duration(out['time_to_train_s'])}, "
              f"{_gpu_hours(out['gpu_hours'])} GPU-hours")
        if "time_to_train_s_interval" in out:
            lo, hi = out["time_to_train_s_interval"]
            print(f"  {out['interval']['coverage']:.0%} interval   "
                  f"{format_duration_range(lo, hi)} (the step time's)")


def roofline_rows(scn, est):
    rows = []
    for dim, d in network_roofline.roofline(est.step, scn.system, scn.plan.dtype).items():
        if float(d["bytes"]) <= 0:
            continue
        rows.append({"dimension": dim, "tier": "scale_out" if d["scale_out"] else "scale_up",
                     "wire_bytes_per_gpu": float(d["bytes"]),
                     "flop_per_byte": float(d["flop_per_byte"]),
                     "needed_flop_per_byte": float(d["needed_flop_per_byte"]),
                     "compute_bound": bool(d["flop_per_byte"] >= d["needed_flop_per_byte"])})
    return rows


def _plot_estimate(scn, labels, out: dict, path: str) -> None:
    plots = _output.plots()
    memory = {k: out[f"memory_{k}_bytes"] for k in MEMORY_PARTS}
    plots.estimate_breakdown(out["breakdown_s"], memory, out["memory_capacity_bytes"],
                             path=path, title=f"{labels.scenario}: {labels.model} on "
                             f"{float(scn.system.gpus):.0f} x {labels.system.chip}")


def _table(args, scn, labels, rows: list[dict], extra: dict | None = None) -> bool:
    """Print `rows` as JSON (with the scenario echo) or CSV; False for text."""
    if args.json:
        print(json.dumps({**_output.echo(scn, labels, args.system), **(extra or {}),
                          "rows": rows},
                         indent=1))
    elif args.csv:
        _output.write_csv(rows)
    return args.json or args.csv


def run(args, name) -> int:
    scn, labels, est = evaluate(args)
    system = _system.info(scn.system, labels.system, args.system)
    if name == "traffic":
        rows = traffic_rows(est)
        if not _table(args, scn, labels, rows):
            print(_system.line(system))
            print_traffic(rows)
        return 0
    if name == "roofline":
        rows = roofline_rows(scn, est)
        if args.plot:
            _output.plots().roofline(rows, args.plot, title=f"{labels.scenario}: network roofline")
        if not _table(args, scn, labels, rows, {"plot": args.plot} if args.plot else None):
            print(_system.line(system))
            print(f"{'dim':<4} {'tier':<10} {'bytes/GPU/step':>15} {'FLOP/byte':>11} "
                  f"{'needed':>9}  bound")
            for r in rows:
                print(f"{r['dimension']:<4} {r['tier']:<10} "
                      f"{format_bytes(r['wire_bytes_per_gpu']):>15} {r['flop_per_byte']:>11,.0f}"
                      f" {r['needed_flop_per_byte']:>9,.0f}  "
                      f"{'compute' if r['compute_bound'] else 'NETWORK'}")
        if args.plot:
            _output.wrote(args.plot, args)
        return 0
    out = estimate_json(est)
    out = {**out, **intervals_json(labels, out), **_output.echo(scn, labels, args.system)}
    if args.plot:
        _plot_estimate(scn, labels, out, args.plot)
        out["plot"] = args.plot
    if not out["fits_memory"]:  # what one change would make it fit, evaluated exactly
        out["fit_options"] = fit_options(args, estimate_program, executable_store())
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_estimate(scn, labels, out)
        if "fit_options" in out:
            print("\n".join(fit_lines(out["fit_options"])))
        print()
        print_traffic(out["traffic"])
        if args.plot:
            _output.wrote(args.plot, args)
    return 0
