"""What would make a plan fit in memory: each one change (more GPUs, a larger
tp, pp or cp, a smaller micro-batch, a higher ZeRO stage, more recompute)
evaluated exactly, for `codesign estimate` and `codesign report` on a
scenario that does not fit.

A change of a float knob (GPUs, tp, pp, cp, micro-batch) keeps the compiled
step program's structure: every such candidate runs the one executable the
estimate used. A ZeRO stage or a recompute mode is another program (compiled,
or read back from the executable store); those are tried while the search is
until they took `BUDGET_S`, the rest listed with the command that evaluates them.
"""

from __future__ import annotations

import math
import time

from .. import scenario as sc
from ..compiling import compiled
from ..model import sharding, strategies
from ..optimize import neighbours
from ..units import format_bytes
from ._text import format_count

BUDGET_S = 4.0  # seconds of other programs (ZeRO, recompute) past which none is started


def candidates(scn) -> list[tuple[str, str, bool]]:
    """(override, words, static) of each one change that may lower the memory per
    GPU: twice the GPUs (dp x2, the plan held), tp, pp and cp at their next
    admissible value up, the micro-batch at its next down, every higher ZeRO
    stage and every recompute mode that stores less; `static` where the change
    is another compiled program."""
    p = scn.plan
    out = [(f"system.gpus={2 * float(scn.system.gpus):.0f}",
            "twice the GPUs (dp x2, the plan held)", False)]
    for knob, up, words in (("parallel.tp", True, "tp"), ("parallel.pp", True, "pp"),
                            ("parallel.cp", True, "cp"),
                            ("training.micro_batch", False, "micro-batch")):
        w = neighbours(scn, knob)[up]
        if w is not None:
            v = float(sc.get_knob(scn, knob))
            out.append((f"{knob}={w:.0f}", f"{words} {v:.0f} -> {w:.0f}", False))
    stages = sharding.ZERO_STAGES
    out += [(f"parallel.zero={z}", f"ZeRO {p.zero.name} -> {z}", True)
            for z in stages[stages.index(p.zero.name) + 1:]]
    names = strategies.RECOMPUTES
    here = names.index(p.recompute.name)
    out += [(f"training.recompute={r}", f"recompute {p.recompute.name} -> {r}", True)
            for r in names[here + 1:]]
    return out


def fit_options(args, estimate_fn, store=None, budget_s: float = BUDGET_S) -> list[dict]:
    """Each of `candidates` of the command line's scenario, evaluated by
    `estimate_fn` (the estimate's jitted program) through `compiled`: {"set",
    "change", and "step_time_s", "gpus", "memory_bytes_per_gpu",
    "memory_capacity_bytes", "fits_memory", or "refused" (the scenario refuses
    the change: its one line), or "not_evaluated" (a ZeRO stage or recompute
    mode once `budget_s` went to such programs)}; the ones that fit first,
    cheapest in GPU-seconds per step (step time x GPUs)."""
    base = sc.load(args.scenario, args.set, system=args.system)
    spent_s = 0.0  # on the programs of ZeRO stages and recompute modes
    options = []
    for override, words, static in candidates(base):
        row = {"set": override, "change": words}
        try:
            scn = sc.load(args.scenario, [*args.set, override], system=args.system)
        except ValueError as e:
            options.append({**row, "refused": str(e)})
            continue
        if static and spent_s > budget_s:
            options.append({**row, "not_evaluated": f"codesign estimate --set {override}"})
            continue
        start = time.perf_counter()
        _, out = compiled(estimate_fn, scn, store=store)[0](scn)
        spent_s += (time.perf_counter() - start) if static else 0.0
        numbers = [float(out[k]) for k in ("step_time_s", "memory_bytes_per_gpu")]
        if not all(math.isfinite(x) and x > 0 for x in numbers):
            options.append({**row, "refused": "the model gives no finite step time or memory "
                                              "there"})
            continue
        options.append({**row, "step_time_s": float(out["step_time_s"]),
                        "gpus": float(scn.system.gpus),
                        "memory_bytes_per_gpu": float(out["memory_bytes_per_gpu"]),
                        "memory_capacity_bytes": float(out["memory_capacity_bytes"]),
                        "fits_memory": bool(out["fits_memory"])})

    def rank(o):
        if o.get("fits_memory"):
            return (0, o["step_time_s"] * o["gpus"])
        return (1 if "fits_memory" in o else 2, o.get("memory_bytes_per_gpu", 0.0))

    return sorted(options, key=rank)


def fit_lines(options: list[dict]) -> list[str]:
    """The options in words, the cheapest that fits first and marked."""
    lines = ["what would make it fit (each change alone, evaluated exactly; those that fit "
             "first, cheapest in GPU-seconds per step):"]
    fits = [o for o in options if o.get("fits_memory")]
    for o in options:
        head = f"  {o['change']:<38} "
        if "refused" in o:
            lines.append(f"{head}refused: {o['refused']}")
        elif "not_evaluated" in o:
            lines.append(f"{head}not evaluated here (time): {o['not_evaluated']}")
        else:
            fit = "fits" if o["fits_memory"] else "does not fit"
            best = "   <- the cheapest that fits" if fits and o is fits[0] else ""
            lines.append(f"{head}{fit}: {format_bytes(o['memory_bytes_per_gpu'])} of "
                         f"{format_bytes(o['memory_capacity_bytes'])}, step "
                         f"{o['step_time_s']:.3f} s on {format_count(o['gpus'])} GPUs "
                         f"(--set {o['set']}){best}")
    if not fits:
        lines.append("  none of these alone fits: combine them (codesign optimize --vary ...)")
    return lines
