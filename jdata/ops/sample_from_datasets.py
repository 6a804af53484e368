"""sample_from_datasets: a weighted random mix. See ``jdata.sample_from_datasets``."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from typing import ClassVar

import numpy as np

from jdata import _planner, _random, _spec
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node
from jdata.ops import choose_from_datasets as choose_op
from jdata.runtime import states
from jdata.runtime.iterator import Iterator

_SALT = _random.salt("sample_from_datasets")


@dataclasses.dataclass(frozen=True, eq=False)
class SampleFromDatasetsNode(Node):
    """See ``jdata.sample_from_datasets``."""

    datasets: tuple
    weights: tuple
    key: np.ndarray
    stop_on_empty_dataset: bool = False
    rerandomize_each_iteration: bool = False
    op_name: ClassVar[str] = "sample_from_datasets"
    random: ClassVar[bool] = True

    def random_epoch(self, epoch: int) -> int:
        """The epoch the draws use: fixed unless rerandomizing each iteration."""
        return epoch if self.rerandomize_each_iteration else 0

    def cardinality(self) -> int:
        if all(d.cardinality() == INFINITE for d in self.datasets):
            return INFINITE
        return UNKNOWN

    def compute_spec(self):
        return _spec.merge_compatible([d.element_spec() for d in self.datasets],
                                      [f"datasets[{i}]" for i in range(len(self.datasets))],
                                      "sample_from_datasets")

    def __str__(self):
        weights = ", ".join(f"{w:.3g}" for w in self.weights)
        return (f"SampleFromDatasets(weights=[{weights}], "
                f"stop_on_empty_dataset={self.stop_on_empty_dataset}, "
                f"rerandomize_each_iteration={self.rerandomize_each_iteration})")


class _SampleIterator(Iterator):
    """Draw ``t`` picks a dataset with the uniform of position ``t``.

    The uniform is compared with the cumulative weights of the datasets not
    yet exhausted, so exhausting a dataset renormalizes the others' weights
    without a rejection loop. Datasets of weight zero are never drawn.
    """

    def __init__(self, node: SampleFromDatasetsNode, ctx, epoch: int):
        self._inputs = [_planner.make_iterator(d, ctx, epoch) for d in node.datasets]
        self._weights = node.weights
        self._stop_on_empty = node.stop_on_empty_dataset
        self._uniforms = _random.UniformBlocks(node.key, _SALT, node.random_epoch(epoch))
        self._draws = 0
        # A dataset of weight zero is never drawn, as if exhausted (tf.data drops them).
        self._set_exhausted([w == 0 for w in node.weights])

    def _set_exhausted(self, exhausted: list) -> None:
        self._exhausted = exhausted
        self._active = [i for i, done in enumerate(exhausted) if not done]
        self._cumulative = list(itertools.accumulate(self._weights[i] for i in self._active))

    def __next__(self):
        while self._active:
            threshold = self._uniforms[self._draws] * self._cumulative[-1]
            self._draws += 1
            pick = bisect.bisect_right(self._cumulative, threshold)
            chosen = self._active[min(pick, len(self._active) - 1)]
            try:
                return next(self._inputs[chosen])
            except StopIteration:
                exhausted = list(self._exhausted)
                if self._stop_on_empty:
                    exhausted = [True] * len(exhausted)
                else:
                    exhausted[chosen] = True
                self._set_exhausted(exhausted)
        raise StopIteration

    def snapshot(self):
        return {"draws": self._draws, "exhausted": list(self._exhausted),
                "inputs": [it.snapshot() for it in self._inputs]}

    def set_state(self, state):
        exhausted, saved = choose_op.check_inputs(state, "sample_from_datasets", ("draws",),
                                                  len(self._inputs))
        self._draws = states.check_int(state["draws"], "sample_from_datasets", "draws")
        # Weight-zero datasets stay out, as they start.
        self._set_exhausted([d or w == 0 for d, w in zip(exhausted, self._weights)])
        for it, s in zip(self._inputs, saved):
            it.set_state(s)

    def close(self):
        for it in self._inputs:
            it.close()


_planner.register(SampleFromDatasetsNode, iterator=_SampleIterator)
