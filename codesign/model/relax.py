"""Smooth surrogates for the non-smooth pieces of the cost models, and the
two models they choose between, as types.

A `Smoothing` is handed to every cost function (its parameter `t`): `EXACT`
(`Exact()`, the default) is the exact model; `Relaxed(temperature)` the
relaxed one the gradient optimiser descends, its temperature a float leaf
(traced under the descent's scan, annealed towards zero). Each owns its
formulas: max, min, clip, ceil, `beyond_one`, `exceeds`, the lattice
interpolations, `auto`'s choice among candidates (`pick`, `minimum`) and
`exact_or_relaxed` for a relaxation that is a different evaluation of the
model rather than a smooth operator. The module functions below are the
call sites' spelling, `smooth_max(a, b, t, scale)` for `t.max(a, b, scale)`,
and refuse anything but a `Smoothing` (a bare float 0.0 or 0.3 is a
TypeError naming the argument: it is not reinterpreted).

The temperature is dimensionless: a softplus width is t times the magnitude of
what is compared (seconds, bytes and counts alike), and the relaxations of a
count (`smooth_ceil`, `lattice_cubic`, `lattice_linear_tree`, `beyond_one`)
are exact at integers for every t, so the relaxed model equals the exact one
at integer points as t anneals to zero. `benchmarks/relaxation.py` audits them
against the exact model (docs/codesign.md). All are NaN-free everywhere
(double-`where` on every log and divide).
"""

from __future__ import annotations

import abc
import functools
import inspect
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero


def where(condition, a, b) -> jax.Array:
    """`jnp.where(condition, a, b)` as one `lax.select` on operands broadcast to
    one shape and dtype (no nested jit in the trace)."""
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in (condition, a, b)))
    dtype = jnp.result_type(a, b)
    a, b = (_full(x, shape, dtype) for x in (a, b))
    return jax.lax.select(_full(condition, shape), a, b)


def stacked(*values) -> jax.Array:
    """Scalars (traced or not) as one array, in order (broadcast to one shape)."""
    return jnp.stack(jnp.broadcast_arrays(*values))


def _full(x, shape, dtype=None):
    """`x` broadcast to `shape` (and cast to `dtype`): a constant of the trace
    where `x` is a Python or NumPy value (no equation), else traced."""
    if isinstance(x, (bool, int, float, np.ndarray, np.generic)):
        return np.broadcast_to(np.asarray(x, dtype), shape)
    return jnp.broadcast_to(x if dtype is None else jnp.asarray(x, dtype), shape)


@jax.custom_jvp
def _softplus(x: jax.Array) -> jax.Array:
    """`jax.nn.softplus(x)` = logaddexp(x, 0) of a finite x, in its operations (the
    same numbers and derivative) without the nested jit and NaN guard."""
    return jnp.maximum(x, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = _softplus(x)
    return y, t * jnp.exp(x - y)


def _number(x) -> bool:
    """Whether `x` is a Python number (a constant of the formula: no equation)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _closed(custom, flags: tuple, args: tuple):
    """`custom(*flags, fixed, *traced)`: the Python numbers among `args` passed as
    static constants (`fixed`: each number, None for a traced argument), so that
    they stay literals in its formula and get no tangent."""
    fixed = tuple(x if _number(x) else None for x in args)
    return custom(*flags, fixed, *(x for x in args if not _number(x)))


def _opened(fixed: tuple, traced) -> list:
    """`_closed`'s `args` again from the static numbers and the traced rest."""
    rest = iter(traced)
    return [next(rest) if f is None else f for f in fixed]


def _tangents(fixed: tuple, tangents) -> list:
    """The tangents of `_closed`'s `args` in their places: None for a number's
    and for a symbolic zero."""
    rest = iter(tangents)
    return [None if f is not None or isinstance(d := next(rest), SymbolicZero) else d
            for f in fixed]


def _abs(x):
    return abs(x) if _number(x) else jnp.abs(x)


def _soft_extreme_parts(lower, mean_scale, a, b, temperature, scale):
    """(value, z, softplus(z), the width's scale, the width before its floor) of
    `_soft_extreme`."""
    scale = 0.5 * (_abs(a) + _abs(b)) if mean_scale else scale
    raw = temperature * scale
    # the width floored at 1e-150 (w^-2 finite): where both operands are below it
    # (or 0) the max to within 1e-150
    w = jnp.maximum(raw, 1e-150)
    zero = not lower and _number(b) and b == 0  # max(a, 0): a - 0 and 0 + w sp are a, w sp
    z = (a if zero else (b - a) if lower else (a - b)) / w
    sp = jnp.maximum(z, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(z)))  # `_softplus`
    return (w * sp if zero else b - w * sp if lower else b + w * sp), z, sp, scale, raw


def _soft_extreme(lower, mean_scale, a, b, temperature, scale):
    """`Relaxed.max` (`lower` False: b + w softplus((a - b) / w)) or `Relaxed.min`
    (`lower`: b - w softplus((b - a) / w), the same numbers as -max(-a, -b)), w =
    temperature x scale floored at 1e-150, the scale (|a| + |b|) / 2 where
    `mean_scale`, else `scale`. Its derivative (`_soft_extreme_jvp`) is the
    formula's, in fewer equations than differentiating it: sigmoid(z) da + (1 -
    sigmoid(z)) db +- (softplus(z) - z sigmoid(z)) dw."""
    return _closed(_soft_extreme_traced, (lower, mean_scale), (a, b, temperature, scale))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _soft_extreme_traced(lower, mean_scale, fixed, *traced):
    return _soft_extreme_parts(lower, mean_scale, *_opened(fixed, traced))[0]


@functools.partial(_soft_extreme_traced.defjvp, symbolic_zeros=True)
def _soft_extreme_jvp(lower, mean_scale, fixed, primals, tangents):
    a, b, temperature, scale = _opened(fixed, primals)
    da, db, dt, ds = _tangents(fixed, tangents)
    y, z, sp, scale, raw = _soft_extreme_parts(lower, mean_scale, a, b, temperature, scale)
    s = jnp.exp(z - sp)  # sigmoid(z), as `_softplus`'s derivative
    # d y / d w, 0 where the width is floored
    g = where(raw > 1e-150, (z * s - sp) if lower else (sp - z * s), 0.0)
    coefficients = {"a": lambda: s, "b": lambda: 1.0 - s, "t": lambda: g * scale,
                    "s": lambda: g * temperature}
    if mean_scale:  # dw = temperature (sign(a) da + sign(b) db) / 2, as abs' derivative
        ds, half = None, (0.5 * temperature) * g

        def signed(c, x):  # c + half sign(x), sign(0) = 1
            return where(x >= 0, c + half, c - half)

        coefficients["a"] = lambda: signed(s, a)
        coefficients["b"] = lambda: signed(1.0 - s, b)
    return y, _sum_terms(y, [(coefficients[k], d) for k, d in
                             (("a", da), ("b", db), ("t", dt), ("s", ds))])


def _sum_terms(y, terms) -> jax.Array:
    """The tangent sum_i coefficient_i() x d_i over the `terms` whose d_i is not None
    (the coefficients evaluated only for those), in `y`'s shape and dtype."""
    out = None
    for coefficient, d in terms:
        if d is not None:
            out = coefficient() * d if out is None else out + coefficient() * d
    out = jnp.zeros_like(y) if out is None else out
    return jnp.broadcast_to(out, jnp.shape(y)).astype(jnp.result_type(y))


def _hard_extreme(lower, a, b):
    """min(a, b) (`lower`) or max(a, b), its derivative `jnp.minimum`'s or
    `jnp.maximum`'s (half to each operand where they tie) in fewer equations, without
    the constants a gradient of a batched `jnp.maximum` broadcasts (`_hard_extreme_jvp`)."""
    return _closed(_hard_extreme_traced, (lower,), (a, b))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _hard_extreme_traced(lower, fixed, *traced):
    a, b = _opened(fixed, traced)
    return jnp.minimum(a, b) if lower else jnp.maximum(a, b)


@functools.partial(_hard_extreme_traced.defjvp, symbolic_zeros=True)
def _hard_extreme_jvp(lower, fixed, primals, tangents):
    a, b = _opened(fixed, primals)
    da, db = _tangents(fixed, tangents)
    y = jnp.minimum(a, b) if lower else jnp.maximum(a, b)
    share = 0.5 + 0.5 * jnp.sign((b - a) if lower else (a - b))  # a's: 1 wins, 1/2 ties
    return y, _sum_terms(y, [(lambda: share, da), (lambda: 1.0 - share, db)])


def _clamp(x, lo, hi):
    """min(max(x, lo), hi), its derivative `jnp.maximum`'s and `jnp.minimum`'s (half to
    each operand where they tie) in fewer equations (`_clamp_jvp`)."""
    return _closed(_clamp_traced, (), (x, lo, hi))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _clamp_traced(fixed, *traced):
    x, lo, hi = _opened(fixed, traced)
    return jnp.minimum(jnp.maximum(x, lo), hi)


@functools.partial(_clamp_traced.defjvp, symbolic_zeros=True)
def _clamp_jvp(fixed, primals, tangents):
    x, lo, hi = _opened(fixed, primals)
    dx, dlo, dhi = _tangents(fixed, tangents)
    m = jnp.maximum(x, lo)
    y = jnp.minimum(m, hi)
    # the share of each operand: 1 where it wins, 1/2 where they tie, else 0
    above = 0.5 + 0.5 * jnp.sign(x - lo)  # of max(x, lo) to x
    below = 0.5 + 0.5 * jnp.sign(hi - m)  # of min(m, hi) to m
    return y, _sum_terms(y, [(lambda: above * below, dx), (lambda: (1.0 - above) * below, dlo),
                             (lambda: 1.0 - below, dhi)])


def safe_log(x: jax.Array, tiny: float = 1e-300) -> jax.Array:
    """log(x) for x > 0; a finite value (and a zero gradient) elsewhere."""
    return jnp.log(where(x > tiny, x, tiny))  # log(tiny) there, its gradient 0


def safe_div(a: jax.Array, b: jax.Array) -> jax.Array:
    """a / b with 0 where b == 0 (and no NaN in the gradient)."""
    return a / where(b != 0, b, jnp.inf)  # a finite a / inf: 0, its gradients 0


@jax.custom_jvp
def _straight_through_ceil(x: jax.Array) -> jax.Array:
    """ceil(x), its derivative 1 (the envelope's slope: `Exact.ceil`)."""
    return jnp.ceil(x)


_straight_through_ceil.defjvp(lambda primals, tangents: (jnp.ceil(primals[0]), tangents[0]))


def log2_ranks(p: jax.Array) -> jax.Array:
    """log2 of a rank count, 0 at p <= 1 (exact for every p >= 1).

    The discrete algorithms take ceil(log2 p) rounds; we use log2 p, which is
    exact at powers of two and smooth in between (documented approximation).
    """
    return jnp.log(jnp.maximum(p, 1.0)) / math.log(2.0)  # (max: no log of p < 1)


def _traces(tree) -> set:
    return {id(x._trace) for x in jax.tree.leaves(tree) if isinstance(x, jax.core.Tracer)}


def once(method):
    """`method` computed once per instance and (hashable) argument: a derived size of
    the model (parameters, FLOPs per token; the step model asks for the same sizes
    from compute, traffic, memory and the step: ~270 equations of a full estimate
    were repeats of these), a chip's sustained peak, a weakly typed temperature cast
    once. The value is kept on the instance only where it
    lives in the traces of the instance's own leaves (or is concrete beside
    concrete leaves), so it is valid exactly where the instance is: one
    computed inside a nested trace (a `lax.cond` branch, an inner `jit`) is
    recomputed, never leaked. A pytree operation (`tree_at`, `vmap`) builds a
    new instance, with nothing kept."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def once(self, *args, **kwargs):
        memo = self.__dict__.get("_once")
        if memo is None:
            memo = self.__dict__["_once"] = {}
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        key = (method.__name__, *list(bound.arguments.values())[1:])
        if key in memo:
            return memo[key]
        value = method(self, *args, **kwargs)
        if _traces(value) <= _traces(self):
            memo[key] = value
        return value

    return once


# ---------------------------------------------------------------- the two models


class Smoothing(eqx.Module):
    """How the model treats its non-smooth pieces: exactly (`Exact`) or relaxed
    (`Relaxed`). Every method is exact at integer counts in both; `Exact`'s are
    the exact functions (straight-through where a gradient of a staircase is
    asked for), `Relaxed`'s continuous in every input."""

    @abc.abstractmethod
    def max(self, a, b, scale=None) -> jax.Array:
        """max(a, b); `scale`: the magnitude of what is compared (`smooth_max`)."""

    @abc.abstractmethod
    def min(self, a, b, scale=None) -> jax.Array:
        """min(a, b) (`smooth_min`)."""

    @abc.abstractmethod
    def clip(self, x, lo, hi, scale=None) -> jax.Array:
        """clip(x, lo, hi), lo <= hi, inside [lo, hi] (`smooth_clip`)."""

    @abc.abstractmethod
    def hard_max(self, a, b) -> jax.Array:
        """max(a, b) exactly in both models, `jnp.maximum`'s derivative (`hard_max`)."""

    @abc.abstractmethod
    def hard_min(self, a, b) -> jax.Array:
        """min(a, b) exactly in both models (`hard_min`)."""

    @abc.abstractmethod
    def beyond_one(self, count) -> jax.Array:
        """Whether a count exceeds one (`beyond_one`)."""

    @abc.abstractmethod
    def ceil(self, x) -> jax.Array:
        """ceil(x), with the envelope x's slope (`smooth_ceil`)."""

    @abc.abstractmethod
    def exceeds(self, x, bound) -> jax.Array:
        """1 where positive `x` exceeds positive `bound`, else 0 (`exceeds`)."""

    @abc.abstractmethod
    def lattice_cubic(self, f, counts: tuple) -> jax.Array:
        """f(*counts) of integer counts >= 1 (`lattice_cubic`)."""

    @abc.abstractmethod
    def lattice_linear_tree(self, f, counts: tuple, lowest: float = 1.0):
        """f(*counts) of integer counts >= `lowest`, f a pytree (`lattice_linear_tree`)."""

    @abc.abstractmethod
    def pick(self, stacked, times: jax.Array) -> tuple:
        """(the chosen candidate's `stacked` pytree, weights) over the leading axis (`pick`)."""

    @abc.abstractmethod
    def minimum(self, times: jax.Array) -> jax.Array:
        """The minimum of positive `times` over the leading axis (`minimum`)."""

    @abc.abstractmethod
    def exact_or_relaxed(self, exact: Callable, relaxed: Callable):
        """`exact()` in the exact model, `relaxed()` in the relaxed one (`exact_or_relaxed`)."""


class Exact(Smoothing):
    """The exact model: max, min, clip and ceil themselves (ceil with the
    envelope's slope, straight-through), `count > 1`, f at the counts, the
    fastest candidate with one-hot weights. No leaves: a program of the exact
    model holds no temperature."""

    def max(self, a, b, scale=None) -> jax.Array:
        return jnp.maximum(a, b)

    def min(self, a, b, scale=None) -> jax.Array:
        return jnp.minimum(a, b)  # = -max(-a, -b), one equation

    def clip(self, x, lo, hi, scale=None) -> jax.Array:
        return jnp.minimum(jnp.maximum(x, lo), hi)

    def hard_max(self, a, b) -> jax.Array:
        return jnp.maximum(a, b)

    def hard_min(self, a, b) -> jax.Array:
        return jnp.minimum(a, b)

    def beyond_one(self, count) -> jax.Array:
        return count > 1.0

    def ceil(self, x) -> jax.Array:
        return _straight_through_ceil(x)

    def exceeds(self, x, bound) -> jax.Array:
        return (x > bound).astype(x.dtype) + 0.0 * bound

    def lattice_cubic(self, f, counts: tuple) -> jax.Array:
        return f(*counts)

    def lattice_linear_tree(self, f, counts: tuple, lowest: float = 1.0):
        return f(*counts)

    def pick(self, stacked, times: jax.Array) -> tuple:
        weights = _winner(times)
        # the winner's terms, exactly: every other term is finite, times 0
        return jax.tree.map(lambda x: jnp.sum(weights * x, axis=0), stacked), weights

    def minimum(self, times: jax.Array) -> jax.Array:
        return jnp.sum(_winner(times) * times, axis=0)

    def exact_or_relaxed(self, exact: Callable, relaxed: Callable):
        return exact()


class Relaxed(Smoothing):
    """The relaxed model at `temperature` (> 0, dimensionless: a relative
    width; a Python float or a float array, traced under jit, vmap and the
    descent's scan). Its formulas are those of the module functions."""

    temperature: float | jax.Array = eqx.field(converter=lambda x: _temperature(x))

    def __check_init__(self):
        given = self.temperature
        if isinstance(given, jax.core.Tracer):  # checked where it was concrete
            return
        value = np.asarray(given, dtype=float)
        if not (np.all(np.isfinite(value)) and np.all(value > 0)):
            raise ValueError(f"Relaxed(temperature={given!r}): the temperature must be a "
                             "positive finite number (the exact model is relax.EXACT)")

    def max(self, a, b, scale=None) -> jax.Array:
        return _soft_extreme(False, scale is None, a, b, self._temperature_for(a, b, scale),
                             0.0 if scale is None else scale)

    def min(self, a, b, scale=None) -> jax.Array:
        return _soft_extreme(True, scale is None, a, b, self._temperature_for(a, b, scale),
                             0.0 if scale is None else scale)

    def _temperature_for(self, *operands):
        """The temperature as the formula with `operands` computes it: a weakly typed
        one (`jnp.asarray(0.05)`) meeting strongly typed operands takes their dtype,
        cast once per instance and dtype (`_temperature_as`) rather than in every
        formula; otherwise the temperature itself."""
        t = self.temperature
        if _number(t) or not jax.typeof(t).weak_type:
            return t
        strong = [x for x in operands if x is not None and not _number(x)
                  and not jax.typeof(x).weak_type]
        return self._temperature_as(jnp.result_type(*strong).name) if strong else t

    @once
    def _temperature_as(self, dtype: str) -> jax.Array:
        return jax.lax.convert_element_type(self.temperature, dtype)

    def clip(self, x, lo, hi, scale=None) -> jax.Array:
        return _clamp(self.min(self.max(x, lo, scale), hi, scale), lo, hi)

    def hard_max(self, a, b) -> jax.Array:
        return _hard_extreme(False, a, b)

    def hard_min(self, a, b) -> jax.Array:
        return _hard_extreme(True, a, b)

    def beyond_one(self, count) -> jax.Array:
        return _clamp(count - 1.0, 0.0, 1.0)

    def ceil(self, x) -> jax.Array:
        frac = x - jax.lax.stop_gradient(jnp.floor(x))
        rise = frac / jnp.maximum(self.temperature, 1e-6)
        return x + (1.0 - frac) * (1.0 - jnp.exp(-rise * rise))

    def exceeds(self, x, bound) -> jax.Array:
        return jax.nn.sigmoid((safe_log(x) - safe_log(bound))
                              / jnp.maximum(self.temperature, 1e-12))

    def lattice_cubic(self, f, counts: tuple) -> jax.Array:
        d = len(counts)
        k = [jnp.floor(jnp.maximum(jax.lax.stop_gradient(x), 1.0)) for x in counts]
        offsets = np.array(np.meshgrid(*[[-1.0, 0.0, 1.0, 2.0]] * d, indexing="ij")).reshape(
            d, -1).T
        # the 4^d lattice points as one vmap of f (the trace holds f once)
        values = jax.vmap(lambda o: f(*(jnp.maximum(kj + o[j], 1.0) for j, kj in enumerate(k))))(
            jnp.asarray(offsets))
        values = values.reshape((4,) * d + values.shape[1:])
        for j in reversed(range(d)):  # the last count first, as f's innermost argument
            values = _monotone_cubic(jax.lax.unstack(values, axis=j), k[j], counts[j] - k[j])
        return values

    def lattice_linear_tree(self, f, counts: tuple, lowest: float = 1.0):
        x = jnp.stack([jnp.maximum(c, lowest) for c in counts])
        k = jax.lax.stop_gradient(jnp.floor(x))
        w = x - k
        corners = np.array(np.meshgrid(*[[0.0, 1.0]] * len(counts), indexing="ij")).reshape(
            len(counts), -1).T  # (2^d, d)
        # the 2^d corners as one vmap of f (the trace holds f once); a leaf that
        # does not depend on the counts is the same at every corner: it is taken
        # as it is, not broadcast over the corners and weighted (the weights sum to 1)
        same = {}

        def at(c):
            leaves, same["tree"] = jax.tree.flatten(f(*(k + c)))
            trace = c._trace if isinstance(c, jax.core.Tracer) else None
            same["leaves"] = [None if getattr(v, "_trace", None) is trace else v
                              for v in leaves]
            # a value that is several leaves (the step time in two places) weighted once
            first = {}
            same["at"] = [first.setdefault(id(v), len(first)) if u is None else None
                          for v, u in zip(leaves, same["leaves"], strict=True)]
            return list({id(v): v for v, u in zip(leaves, same["leaves"], strict=True)
                         if u is None}.values())

        varying = jax.vmap(at)(jnp.asarray(corners))
        weight = jnp.prod(where(corners == 1.0, w, 1.0 - w), axis=1)  # (2^d,)
        weighted = [jnp.tensordot(weight, v, axes=1) for v in varying]
        return jax.tree.unflatten(same["tree"], [weighted[i] if u is None else u for u, i in
                                                 zip(same["leaves"], same["at"], strict=True)])

    def pick(self, stacked, times: jax.Array) -> tuple:
        soft_min_s, weights = _log_soft_min(times, self.temperature)  # weights equal at p = 1
        scale = safe_div(soft_min_s, jnp.sum(weights * times, axis=0))  # in (k^-T, 1]
        return jax.tree.map(lambda x: scale * jnp.sum(weights * x, axis=0), stacked), weights

    def minimum(self, times: jax.Array) -> jax.Array:
        soft_min_s, weights = _log_soft_min(times, self.temperature)
        mean_s = jnp.sum(weights * times, axis=0)
        return safe_div(soft_min_s, mean_s) * mean_s  # 0 where every candidate is

    def exact_or_relaxed(self, exact: Callable, relaxed: Callable):
        return relaxed()


EXACT = Exact()  # the exact model: every `t` parameter's default


def _temperature(value):
    """`Relaxed`'s temperature: a Python int or float as a float (a weakly typed
    literal in the trace, as a number written in the formula), an array as it is."""
    if isinstance(value, Smoothing) or isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.number, np.ndarray, jax.Array)):
        raise TypeError(f"Relaxed(temperature={value!r}): the temperature must be a float "
                        "or a float array")
    return float(value) if isinstance(value, (int, float, np.number)) else value


def smoothing(value, name: str = "t") -> Smoothing:
    """`value` if it is a `Smoothing`; else a TypeError naming the argument `name`
    (a bare float is not read as a temperature: 0.0 was the exact model)."""
    if not isinstance(value, Smoothing):
        raise TypeError(f"{name}={value!r} is not a relax.Smoothing: pass relax.EXACT (the "
                        "exact model, the default) or relax.Relaxed(temperature)")
    return value


# ---------------------------------------------------------------- the formulas


def smooth_max(a: jax.Array, b: jax.Array, t: Smoothing = EXACT, scale=None) -> jax.Array:
    """max(a, b); relaxed, smoothed by softplus with width T x `scale` (T the temperature).

    The temperature is relative: the width is T times the operands' magnitude
    (`scale`, by default (|a| + |b|) / 2), so one T smooths seconds, bytes and
    counts alike (at a = b the value is a (1 + T ln 2)). With operands of one
    sign it is monotone in each. Where an operand is a difference (max(x - y,
    0): what of x a hiding y leaves exposed) give the scale of what is
    compared, (x + y) / 2: the default would see only |x - y| and not smooth.
    """
    return smoothing(t).max(a, b, scale)


def smooth_min(a: jax.Array, b: jax.Array, t: Smoothing = EXACT, scale=None) -> jax.Array:
    """min(a, b); relaxed, -`smooth_max`(-a, -b)."""
    return smoothing(t).min(a, b, scale)


def smooth_clip(x: jax.Array, lo, hi, t: Smoothing = EXACT, scale=None) -> jax.Array:
    """clip(x, lo, hi) (lo <= hi); relaxed, `smooth_min(smooth_max(x, lo), hi)`
    kept inside [lo, hi] (the smooth form dips below lo where hi is near it:
    a group of one rank would hold fewer than one)."""
    return smoothing(t).clip(x, lo, hi, scale)


def hard_max(a: jax.Array, b: jax.Array, t: Smoothing = EXACT) -> jax.Array:
    """max(a, b) in both models (a bound the relaxation leaves exact), with
    `jnp.maximum`'s derivative: `jnp.maximum` itself exactly; relaxed, one custom_jvp
    whose derivative takes fewer equations (the relaxed gradient's size)."""
    return smoothing(t).hard_max(a, b)


def hard_min(a: jax.Array, b: jax.Array, t: Smoothing = EXACT) -> jax.Array:
    """min(a, b) in both models (`hard_max`)."""
    return smoothing(t).hard_min(a, b)


def beyond_one(count: jax.Array, t: Smoothing = EXACT) -> jax.Array:
    """Whether a count of ranks or stages exceeds one (a collective or a send
    that exists only then): `count > 1` exactly; relaxed, the ramp clip(count
    - 1, 0, 1), exact at integer counts (0 at one, 1 from two), so that the
    relaxed model does not jump just above a count of one."""
    return smoothing(t).beyond_one(count)


def smooth_ceil(x: jax.Array, t: Smoothing = EXACT) -> jax.Array:
    """ceil(x); relaxed, x + (1 - frac) (1 - exp(-(frac / T)^2)), frac = x - floor(x).

    Exact at integer x for every T; ceil(x) as T -> 0, continuous and
    non-decreasing in x for every T (the optimiser anneals T downwards; T is
    floored at 1e-6). The step from n to n + 1 rises over frac ~ T above each
    integer n, leaving it with zero slope: at an integer the derivative is the
    envelope's, 1 (an exponential rise, 1 - exp(-frac / T), gave 1 + 1/T
    there, a hundredfold pull at T = 0.01 towards the next integer wherever x
    = L / stages is one). Exactly, the value is ceil(x) and the derivative is
    that of the envelope x (straight-through), so an elasticity of the exact
    model sees that more stages hold fewer layers rather than the staircase's
    zero slope.
    """
    return smoothing(t).ceil(x)


def exceeds(x: jax.Array, bound: jax.Array, t: Smoothing = EXACT) -> jax.Array:
    """1 where positive `x` exceeds positive `bound`, else 0 (a step, exactly);
    relaxed, the logistic sigmoid(log(x / bound) / T), smooth in both (1/2 at
    x = bound; T floored at 1e-12)."""
    return smoothing(t).exceeds(x, bound)


def lattice_cubic(f, counts: tuple, t: Smoothing = EXACT) -> jax.Array:
    """f(*counts) of counts >= 1 that are integers in the exact model, relaxed
    between integers: the tensor product, one count after the other, of
    monotone cubics (Fritsch-Butland) through f at the integers around each
    count (4 per count: f is evaluated at 4^len(counts) points, one `jax.vmap`
    of f).

    Exact at integer counts for every T; between two integers of one count
    (the others integral) it stays within the two values and is monotone, its
    slope at an integer the harmonic mean of the neighbouring steps (0 beside
    a flat step or at a local extremum). What it approximates is f on the
    integer lattice, not f's formula between integers: `shape`'s layers per
    stage, v ceil(L / (p v)), relaxed in L / (p v) (`smooth_ceil`), is flat
    between two stage counts while the ratio stays inside one integer and
    drops where it crosses one, and the bubble growing beside it then made
    the step time rise and fall between two stage counts. (`shape` relaxes
    the stage's padding over an even split so, not the layer count: the
    micro-batches grow with pp beside it, and a monotone cubic of the count
    between 96 and 48 put their product 12% above both ends.) In the exact
    model it is f(*counts).
    """
    return smoothing(t).lattice_cubic(f, counts)


def _monotone_cubic(c: list, k, w):
    """The Fritsch-Butland cubic through c[0..3] (the values at counts k - 1 ..
    k + 2, the first clamped to 1) at k + w, 0 <= w < 1 (`lattice_cubic`)."""
    step = [c[i + 1] - c[i] for i in range(3)]
    step[0] = where(k > 1, step[0], step[1])  # one-sided at a count of 1

    def slope(a, b):  # harmonic mean of two steps of one sign, else 0
        ab = a * b  # 2ab / (a + b) where ab > 0, else 2ab / inf = 0 (its gradients 0)
        return 2.0 * ab / where(ab > 0, a + b, jnp.inf)

    # both slopes at once: the steps before and after each of the two middle points
    m0, m1 = jax.lax.unstack(slope(jnp.stack(step[:2]), jnp.stack(step[1:])))
    w2 = w * w
    w3 = w2 * w  # (w w) w, as w * w * w
    return ((2 * w3 - 3 * w2 + 1) * c[1] + (w3 - 2 * w2 + w) * m0
            + (3 * w2 - 2 * w3) * c[2] + (w3 - w2) * m1)


def lattice_linear_tree(f, counts: tuple, t: Smoothing = EXACT, lowest: float = 1.0):
    """f(*counts) of counts >= `lowest` that are integers in the exact model, relaxed
    between integers as the multilinear interpolation of f at the corners of
    the unit cell around the counts, for an `f` whose value is a pytree of
    float arrays: its 2^len(counts) evaluations one `jax.vmap` of f (the trace
    holds f once), every leaf relaxed alike. Exact at integer counts for
    every T, monotone between two integers of one count (the others
    integral), its slope there the step to the next integer (at an integer,
    the step above it). In the exact model it is f(*counts)."""
    return smoothing(t).lattice_linear_tree(f, counts, lowest)


def pick(stacked, times: jax.Array, t: Smoothing) -> tuple:
    """(the choice's `stacked` pytree, weights) among candidates along the leading
    axis of `times` (positive seconds) and of every leaf of `stacked`.

    Exactly the fastest candidate's leaves, its weight one-hot (ties to the
    first: its gradient, where `jnp.min`'s would average over the tied).
    Relaxed, the soft minimum in log space, (sum_i v_i^(-1/T))^(-T), with
    weights w_i = softmax(-log v_i / T) (a ratio of e between two candidates
    whose values differ by a factor exp(T); T floored at 1e-6): each leaf the
    weighted sum, scaled so that the times sum to the soft minimum."""
    return smoothing(t).pick(stacked, times)


def minimum(times: jax.Array, t: Smoothing) -> jax.Array:
    """The minimum of positive `times` along the leading axis: `pick`'s time
    without its weights (the soft minimum relaxed; 0 where every candidate is)."""
    return smoothing(t).minimum(times)


def exact_or_relaxed(exact: Callable, relaxed: Callable, t: Smoothing):
    """`exact()` in the exact model, `relaxed()` in the relaxed one: for a
    relaxation that is a different evaluation of the model (an interpolation
    between the integers around a count, a mix of a group fitting and
    spilling out of its domain) rather than a smooth operator."""
    return smoothing(t).exact_or_relaxed(exact, relaxed)


def _winner(times: jax.Array) -> jax.Array:
    """One-hot weights of the fastest candidate (leading axis; ties to the first:
    its gradient, where `jnp.min`'s would average over the tied)."""
    return jax.nn.one_hot(jnp.argmin(times, axis=0), times.shape[0], axis=0, dtype=times.dtype)


def _log_soft_min(values: jax.Array, t, axis: int = 0):
    """(soft minimum, weights) of positive `values` along `axis`, in log space:
    (sum_i v_i^(-1/t))^(-t) and w_i = softmax(-log v_i / t), t floored at 1e-6."""
    t = jnp.maximum(t, 1e-6)
    z = -safe_log(values) / t  # finite
    # logsumexp and softmax in their operations, sharing the shifted exponentials
    top = jax.lax.stop_gradient(jnp.max(z, axis=axis, keepdims=True))
    e = jnp.exp(z - top)
    total = jnp.sum(e, axis=axis, keepdims=True)
    return jnp.exp(-t * jnp.squeeze(jnp.log(total) + top, axis)), e / total
