"""The one fitting loop `calibrate` (collectives) and `compute` (kernels) share:
Adam on the log parameters of a smooth loss, one compiled loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

FIT_LEARNING_RATE = 0.1  # Adam's step on a log parameter: an e-fold of 10%


def minimise(loss, start, steps: int, upper=None):
    """Adam (optax) on the log parameters with a cosine-decayed step, one compiled loop.

    The loss is smooth and has three parameters per tier; Adam's per-parameter
    step of about `FIT_LEARNING_RATE` (an e-fold of 10%) reaches the optimum of
    parameters that start orders of magnitude away, and the decay settles it.
    With `upper` (an array like `start`, inf where free) every step is projected
    onto params <= upper: the least squares within a physical bound.
    """
    opt = optax.adam(optax.cosine_decay_schedule(FIT_LEARNING_RATE, steps))

    def body(_, carry):
        params, state = carry
        updates, state = opt.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, updates)
        return (params if upper is None else jnp.minimum(params, upper)), state

    run = jax.jit(lambda x: jax.lax.fori_loop(0, steps, body, (x, opt.init(x)))[0])
    return run(start if upper is None else jnp.minimum(start, upper))
