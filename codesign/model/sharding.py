"""The ZeRO stage as a strategy type (`parallel.zero`, built on
`strategies.Strategy`): what data parallelism shards over the group the
framework shards over (`params.shard_params`: dp x cp, or HSDP's
`parallel.zero_shard_size` groups) instead of replicating it (Rajbhandari et
al. 2020, ZeRO). A stage owns which of a GPU's parameter-sized terms it shards
(`shards_optimizer`, `shards_gradients`, `shards_weights`: `memory.memory`
divides those by the shard group), and the data-parallel collectives follow
from them (`traffic._dp_rows`):

- `NoZero` (0): every rank holds everything; each updates every weight, so
  the gradients are all-reduced, once per step.
- `Zero1` (1): the optimizer states sharded (Megatron's distributed
  optimizer): each rank updates its shard, so the gradients are
  reduce-scattered and the updated weights all-gathered, once per step.
- `Zero2` (2): the gradients too: each micro-batch's are reduce-scattered as
  its backward produces them (`gradient_scatters`: DeepSpeed frees them as it
  goes); the gather once per step.
- `Zero3` (3, FSDP): the weights too (`gathers_layers`): each layer's gathered
  before its forward, again before its backward where
  `parallel.reshard_after_forward`, its gradients reduce-scattered, per
  micro-batch; the gathered layers add to the weights' memory.

A stage is written as its number, its `name`: what a scenario table, `--set
parallel.zero=1`, `--vary parallel.zero=0|1` and the importers write, and what
`codesign estimate --json` echoes; `zero_stage` parses it once (anything else
is a one-line ValueError naming the key and the stages), so no other code
compares stages.
"""

from __future__ import annotations

import operator
from typing import ClassVar

import equinox as eqx

from .strategies import Strategy


class ZeroStage(Strategy):
    """A ZeRO stage: what it shards over the data-parallel shard group."""

    name: eqx.AbstractClassVar[int]  # the stage, as a scenario writes it
    shards_optimizer: eqx.AbstractClassVar[bool]  # master weights and moments
    shards_gradients: eqx.AbstractClassVar[bool]  # the reduced gradients
    shards_weights: eqx.AbstractClassVar[bool]  # the weights (FSDP)

    @property
    def shards_anything(self) -> bool:
        """Whether any term is sharded (`params.held_params` shards once)."""
        return self.shards_optimizer or self.shards_gradients or self.shards_weights

    @property
    def all_reduces_gradients(self) -> bool:
        """Every rank updates every weight, so it needs the whole reduced
        gradients (an all-reduce); otherwise each rank reduces its shard's (a
        reduce-scatter) and the updated weights are gathered."""
        return not self.shards_optimizer

    @property
    def gathers_layers(self) -> bool:
        """The weights are gathered layer by layer where they compute (FSDP),
        not once per step after the optimizer."""
        return self.shards_weights

    def gradient_scatters(self, micro_batches):
        """Reduce-scatters of the whole gradients per step where they are not
        gathered by layer: each micro-batch's where the gradients are sharded
        (no rank holds them whole to accumulate), else once."""
        return micro_batches if self.shards_gradients else 1.0


class NoZero(ZeroStage):
    """Nothing sharded: plain data parallelism."""

    name: ClassVar[int] = 0
    shards_optimizer: ClassVar[bool] = False
    shards_gradients: ClassVar[bool] = False
    shards_weights: ClassVar[bool] = False


class Zero1(ZeroStage):
    """The optimizer states sharded."""

    name: ClassVar[int] = 1
    shards_optimizer: ClassVar[bool] = True
    shards_gradients: ClassVar[bool] = False
    shards_weights: ClassVar[bool] = False


class Zero2(ZeroStage):
    """The optimizer states and the gradients sharded."""

    name: ClassVar[int] = 2
    shards_optimizer: ClassVar[bool] = True
    shards_gradients: ClassVar[bool] = True
    shards_weights: ClassVar[bool] = False


class Zero3(ZeroStage):
    """The optimizer states, the gradients and the weights sharded (FSDP)."""

    name: ClassVar[int] = 3
    shards_optimizer: ClassVar[bool] = True
    shards_gradients: ClassVar[bool] = True
    shards_weights: ClassVar[bool] = True


ZERO_CLASSES = (NoZero, Zero1, Zero2, Zero3)
ZERO_STAGES = tuple(c.name for c in ZERO_CLASSES)


def zero_stage(value, key: str = "parallel.zero") -> ZeroStage:
    """The ZeRO stage numbered `value` (an integer, as a scenario writes it), or
    `value` itself if it is a `ZeroStage`; anything else (another number, a
    bool, a float, a name) is a one-line ValueError naming `key` and the stages."""
    if isinstance(value, ZeroStage):
        return value
    by_stage = {c.name: c for c in ZERO_CLASSES}
    try:
        stage = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        stage = None
    if stage not in by_stage:
        raise ValueError(f"{key}={value!r} is not one of "
                         f"{', '.join(map(str, ZERO_STAGES))}")
    return by_stage[stage]()
