"""Categorical knobs (`categorical_search`): the scenario keys that are a
choice, not a number (`CATEGORICAL`: every declared key that is not a float:
parallel.zero, training.recompute, parallel.schedule, training.dtype and the
precision parts, system.placement, parallel.sequence_parallel, system.topology,
..., `system.preset`, the hardware preset the scenario's system starts
from: its choices `presets.PRESET_NAMES`, and the chip design's process node
and HBM generation, `chip.node` and `chip.hbm`). Each combination of choices is
another static structure (another compiled program, another strategy pytree,
another system's numbers), so the product of the choices is
enumerated outside: each combination is the scenario loaded with those keys
set (as `codesign estimate --set` would load it), its numeric knobs are solved
inside by `grid_search` or `optimize` as without choices, and the best over
the combinations wins (ties to the first in the product's order, choices in
the order given). A combination the scenario cannot be loaded with (a plan
`estimate` refuses) or whose integer knobs have no admissible value is
skipped, with its reason; when every one is, `NoValidChoice`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time

from .. import chip, presets
from .. import scenario as sc
from ..model import plan
from ..progress import Progress
from ._grid import GRID_POINTS, MAX_GRID_POINTS, grid_size
from ._method import Method, search_method
from ._model import evaluate
from ._problem import OBJECTIVES, Problem, build
from ._result import Result, make_result, top_points

# each combination is its own compiled program (about a second for the grid, 5-15 s
# for the gradient method on 2 CPU cores): past this many, restrict the choices
MAX_COMBINATIONS = 32
# the system preset (a loader key, not a declared one): each choice loads the
# scenario on that preset's system, the scenario's own [system] keys and --set on top
PRESET = "system.preset"
# every declared scenario key that is not a number nor free text (a string without
# declared choices: `parallel.pipeline_layout`; the placement's choices are its
# orders), the system preset, and the chip design's choices (`scenario.CHIP_CHOICES`:
# chip.node, chip.hbm; each choice loads the scenario with that [chip] key set)
PLACEMENT = "system.placement"
CATEGORICAL = (*(k for k, w in sc.KEYS.items() if w.declaration.kind is not float and not (
    w.declaration.kind is str and w.declaration.choices is None and k != PLACEMENT)),
    PRESET, *sc.CHIP_CHOICES)


def _declaration(key: str):
    return sc.CHIP_KEYS[key] if key in sc.CHIP_CHOICES else sc.KEYS[key].declaration


class NoValidChoice(ValueError):
    """Every combination of the choices is refused (valid input, no feasible
    answer: exit code 3 in the command)."""


def choices_of(key: str) -> tuple:
    """Every choice of the categorical key `key`, as `--set` takes it: the
    declared choices, False and True for a switch, every order of the
    dimensions for `system.placement`."""
    if key not in CATEGORICAL:
        raise ValueError(f"{key} is not a categorical scenario key; they are "
                         f"{', '.join(CATEGORICAL)}")
    if key == PRESET:
        return presets.PRESET_NAMES
    decl = _declaration(key)
    if decl.choices is not None:
        return decl.choices
    if decl.kind is bool:
        return (False, True)
    if key == PLACEMENT:
        return tuple(",".join(p) for p in itertools.permutations(plan.DIMENSIONS))
    raise TypeError(f"{key}: a categorical key without choices; declare them")


def parse_choice(key: str, value):
    """One choice of `key` from its text (`--vary parallel.zero=0|1`: "0") or as
    it is, checked: a one-line ValueError naming the key, the value and the choices."""
    kind = str if key == PRESET else _declaration(key).kind
    if isinstance(value, str):
        text = value.strip()
        value = {"true": True, "false": False}.get(text.lower(), text) if kind is bool else text
        if kind is int:
            try:
                value = int(text)
            except ValueError:
                pass
        if key == "system.placement":
            value = ",".join(s.strip() for s in text.split(","))
    options = choices_of(key)
    if isinstance(value, bool) != (kind is bool) or value not in options:
        shown = (f"an order of {','.join(plan.DIMENSIONS)}" if key == "system.placement"
                 else ", ".join(_text(v) for v in options))
        raise ValueError(f"{key}={value if isinstance(value, bool | int) else repr(value)} "
                         f"is not one of {shown}")
    return value


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def scenario_choice(scn: sc.Scenario, key: str, labels: sc.Labels | None = None):
    """The scenario's own choice of the categorical key `key`, as `--set` takes it
    (`system.preset`'s from the scenario's `labels`: the pytree holds numbers; a
    chip choice's from the scenario's design, or without a [chip] table the
    design one would build on: the preset's published part, else the default)."""
    if key == PRESET:
        if labels is None:
            raise ValueError(f"{PRESET}: the scenario's labels are needed to read it")
        return labels.system.preset
    if key in sc.CHIP_CHOICES:  # without a [chip] table: the design one would start from
        field = key.split(".", 1)[1]
        if scn.chip is not None:
            return getattr(scn.chip, field)
        part = None if labels is None else chip.PART_OF_PRESET_CHIP.get(labels.system.chip)
        if part is not None:
            return getattr(chip.published_design(part), field)
        return next(f.default for f in dataclasses.fields(chip.ChipDesign) if f.name == field)
    value = functools.reduce(getattr, sc.KEYS[key].path, scn)
    if hasattr(value, "name"):  # a strategy
        return value.name
    return ",".join(value) if isinstance(value, tuple) else value


def overrides(design: dict) -> list[tuple]:
    """The `--set` overrides (section, key, value) of the categorical knobs of `design`."""
    return [(*k.split(".", 1), v) for k, v in design.items() if k in CATEGORICAL]


def design_scenario(load, design: dict) -> sc.Scenario:
    """The scenario of a design ({knob: value}, a `Result.best`): `load` of its
    choices' overrides, with its numbers set."""
    return sc.set_knobs(load(overrides(design)),
                        {k: v for k, v in design.items() if k not in CATEGORICAL})


def _options(keys: list, given: dict) -> list[tuple]:
    """The choices of each key: those `given` (parsed, deduplicated), else every one."""
    return [tuple(dict.fromkeys(parse_choice(k, v) for v in given[k])) if k in given
            else choices_of(k) for k in keys]


def _point(prob: Problem, method: Method, start: float) -> Result:
    """The scenario of a combination with no number varied, evaluated exactly."""
    ex = evaluate(prob, [[]], chunk=1)
    metrics = {k: float(v[0]) for k, v in ex.metrics.items()}
    feasible = bool(ex.feasible[0])
    grid = method.point_counts(feasible)
    return make_result(prob, method.name, prob.here, ex.objective[0], feasible, 1, start, [],
                   metrics=metrics, top=top_points(prob, prob.here[None], ex, 1), **grid)


def _merged_profile(profiles: list, grid_points: int) -> dict | None:
    """The seconds (and calls) of every combination's search, summed; the
    reasons a grid scanned again in float64 (`float64_rescan`), joined."""
    profiles = [p for p in profiles if p]
    if not profiles:
        return None
    keys = dict.fromkeys(k for p in profiles for k in p)
    out = {k: "; ".join(dict.fromkeys(p[k] for p in profiles if p.get(k)))
           if any(isinstance(p.get(k), str) for p in profiles)
           else sum(p.get(k, 0) for p in profiles) for k in keys}
    if "points_per_s" in out:
        out["points_per_s"] = grid_points / max(out["stream_s"], 1e-12)
    return out


def categorical_search(load, vary, bounds=None, objective: str = "step_time", *,
                       choices: dict | None = None, method: Method | str = "grid",
                       budget_usd=None, budget_w=None, max_gpus=None, assumptions=None,
                       max_points: int = MAX_GRID_POINTS, progress: bool = False,
                       **options) -> Result:
    """The best design over every combination of the categorical knobs of
    `vary` (module docstring) and the numeric knobs of `vary` within `bounds`.

    `load(overrides)` returns the scenario with the (section, key, value)
    overrides set (`functools.partial(scenario.load, name)` with the base
    overrides prepended, say); a ValueError from it refuses the combination.
    `choices` ({key: values}, values as text or typed) restricts a key to
    some of its choices (default: every one, `choices_of`). `method` is a
    `Method` or its name: "grid" (`grid_search`, given `options`) or "gradient"
    (`optimize`). The grid's
    points over all the combinations count against `max_points`, the number
    of combinations too (both methods), a one-line ValueError past it.
    `progress` draws a bar over the combinations on stderr.

    `Result.best` and every `Result.top` entry hold the choices beside the
    numbers, in the order of `vary` (the choices are part of a design: the top
    designs are distinct); `Result.combinations` says what became of each
    combination; the method's counts (evaluations, grid points, seconds) are
    summed over them, the path is the best combination's."""
    start = time.perf_counter()
    vary = tuple(dict.fromkeys(vary))
    given = dict(choices or {})
    stray = [k for k in given if k not in vary or k not in CATEGORICAL]
    if stray:
        k = stray[0]
        raise ValueError(f"choices of {k}, which is " + (
            "not varied" if k not in vary else "a number: give its range in bounds instead"))
    chosen = [k for k in bounds or {} if k in CATEGORICAL]
    if chosen:
        raise ValueError(f"bounds for {chosen[0]}, a choice, not a number: restrict its "
                         f"choices instead ({chosen[0]}=A|B)")
    method = search_method(method)
    numeric = tuple(k for k in vary if k not in CATEGORICAL)
    keys = [k for k in vary if k in CATEGORICAL]
    options_per_key = _options(keys, given)
    count = math.prod(len(o) for o in options_per_key)
    if count > MAX_COMBINATIONS:
        raise ValueError(f"the choices of {', '.join(keys)} make {count:,} combinations, each "
                         f"compiled on its own, above the cap of {MAX_COMBINATIONS}; restrict "
                         "them (--vary 'KEY=A|B')")
    if count > max_points:
        raise ValueError(f"the choices of {', '.join(keys)} make {count:,} combinations, "
                         f"above the cap max_points={max_points:,}; restrict them (KEY=A|B)")
    combos = [dict(zip(keys, c, strict=True)) for c in itertools.product(*options_per_key)]
    args = {"budget_usd": budget_usd, "budget_w": budget_w, "max_gpus": max_gpus,
            "assumptions": assumptions}
    build(load([]), numeric, bounds, objective, **args)  # the arguments' errors: exit 2
    problems, rows = [], []
    for values in combos:
        try:
            problems.append(build(load(overrides(values)), numeric, bounds, objective,
                                  **args))
            rows.append({"choices": values, "refused": None})
        except ValueError as e:
            problems.append(None)
            rows.append({"choices": values, "refused": str(e).splitlines()[0],
                         "feasible": False, "objective": None})
    solvable = [p for p in problems if p is not None]
    if not solvable:
        first = rows[0]
        raise NoValidChoice(f"none of the {len(rows):,} combinations of {', '.join(keys)} is "
                            f"a plan the scenario takes (the first, {_shown(first['choices'])}"
                            f": {first['refused']})")
    points = sum(grid_size(p, options.get("grid_points", GRID_POINTS)) if numeric else 1
                 for p in solvable)
    if method.grid_points(points) > max_points:
        raise ValueError(f"the grid has {points:,} points over {len(solvable):,} "
                         f"combinations of {', '.join(keys)}, above the cap "
                         f"max_points={max_points:,}; restrict the choices, narrow `bounds` "
                         "or lower `grid_points`")
    bar = Progress("optimize", 0, len(combos), enabled=progress, unit="combinations")
    results = []
    for i, prob in enumerate(problems):
        r = None
        if prob is not None and not numeric:
            r = _point(prob, method, time.perf_counter())
        elif prob is not None:
            r = method.search(prob, max_points=max_points, **options)
        results.append(r)
        if r is not None:
            rows[i] |= {"feasible": r.feasible,
                        "objective": r.value if r.feasible else None}
        bar.set(0, i + 1)
    bar.close()
    top = options.get("top", method.top)
    return _merged(vary, combos, results, rows, objective, top, start)


def _shown(values: dict) -> str:
    return ", ".join(f"{k}={_text(v)}" for k, v in values.items())


def _merged(vary, combos, results, rows, objective, top: int, start) -> Result:
    """One `Result` of the combinations' (None: refused): the best feasible
    one's (else the first solved one's least-violating point), choices in;
    the `top` best of theirs (none when 0)."""
    goal = OBJECTIVES[objective][1]
    design = lambda values, knobs: {k: {**values, **knobs}[k] for k in vary}  # noqa: E731
    solved = [(c, r) for c, r in zip(combos, results, strict=True) if r is not None]
    feasible = [(c, r) for c, r in solved if r.feasible]
    best_values, best = min(feasible, key=lambda cr: goal * cr[1].value) if feasible \
        else solved[0]  # min: the first of equal values
    entries = [{**t, "knobs": design(c, t["knobs"])} for c, r in solved for t in r.top or []]
    entries.sort(key=lambda t: goal * t["objective"])  # stable: ties in the product's order
    grid = best.grid_size is not None
    points = sum(r.grid_size for _, r in solved) if grid else None
    return best._replace(
        best=design(best_values, best.best),
        evaluations=sum(r.evaluations for _, r in solved),
        wall_s=time.perf_counter() - start,
        grid_size=points,
        feasible_points=sum(r.feasible_points for _, r in solved) if grid else None,
        top=entries[:top] if top > 0 else None,
        profile=_merged_profile([r.profile for _, r in solved], points or 0),
        combinations=rows)
