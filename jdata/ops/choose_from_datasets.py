"""choose_from_datasets: elements picked by a dataset of indices.

See ``jdata.choose_from_datasets``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner, _spec
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class ChooseFromDatasetsNode(Node):
    """See ``jdata.choose_from_datasets``."""

    datasets: tuple
    choice: Node
    stop_on_empty_dataset: bool = True
    op_name: ClassVar[str] = "choose_from_datasets"

    def cardinality(self) -> int:
        choices = self.choice.cardinality()
        if choices == 0:
            return 0
        # Only when no dataset can run out does every choice yield one element.
        if all(d.cardinality() == INFINITE for d in self.datasets):
            return choices
        return UNKNOWN

    def compute_spec(self):
        return _spec.merge_compatible([d.element_spec() for d in self.datasets],
                                      [f"datasets[{i}]" for i in range(len(self.datasets))],
                                      "choose_from_datasets")

    def __str__(self):
        return (f"ChooseFromDatasets(num_datasets={len(self.datasets)}, "
                f"stop_on_empty_dataset={self.stop_on_empty_dataset})")


class _ChooseIterator(Iterator):
    """Pulls the next choice, then the next element of the chosen dataset.

    As in tf.data, the output ends with the choices, when every dataset is
    exhausted, or (with ``stop_on_empty_dataset``) when a chosen one is.
    """

    def __init__(self, node: ChooseFromDatasetsNode, ctx, epoch: int):
        self._inputs = [_planner.make_iterator(d, ctx, epoch) for d in node.datasets]
        self._choice = _planner.make_iterator(node.choice, ctx, epoch)
        self._stop_on_empty = node.stop_on_empty_dataset
        self._exhausted = [False] * len(self._inputs)

    def __next__(self):
        while not all(self._exhausted):
            chosen = _check_choice(next(self._choice), len(self._inputs))
            if self._exhausted[chosen]:
                continue
            try:
                return next(self._inputs[chosen])
            except StopIteration:
                if self._stop_on_empty:
                    self._exhausted = [True] * len(self._exhausted)
                else:
                    self._exhausted[chosen] = True
        raise StopIteration

    def snapshot(self):
        return {"choice": self._choice.snapshot(), "exhausted": list(self._exhausted),
                "inputs": [it.snapshot() for it in self._inputs]}

    def set_state(self, state):
        exhausted, saved = check_inputs(state, "choose_from_datasets", ("choice",),
                                         len(self._inputs))
        self._choice.set_state(state["choice"])
        self._exhausted = exhausted
        for it, s in zip(self._inputs, saved):
            it.set_state(s)

    def close(self):
        self._choice.close()
        for it in self._inputs:
            it.close()


def check_inputs(state, op: str, own: tuple[str, ...], num_inputs: int) -> tuple[list, list]:
    """The checked ``exhausted`` flags and input states of a state over several datasets
    (shared with ``sample_from_datasets``); ``own`` names the op's other fields."""
    fields = states.Fields(state, op, (*own, "exhausted", "inputs"))
    exhausted = fields.list("exhausted", num_inputs)
    if not all(isinstance(done, bool) for done in exhausted):
        raise states.invalid(op, "exhausted", "must be a list of true/false")
    return list(exhausted), fields.list("inputs", num_inputs)


def _check_choice(value, num_datasets: int) -> int:
    if np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iu":
        raise ValueError(
            f"choose_from_datasets: choice_dataset produced {value!r}; its elements must be "
            "integer scalars (e.g. np.int64) indexing datasets")
    chosen = int(value)
    if not 0 <= chosen < num_datasets:
        raise ValueError(
            f"choose_from_datasets: choice_dataset produced {chosen}, out of range for "
            f"{num_datasets} datasets; choices must be in [0, {num_datasets})")
    return chosen


_planner.register(ChooseFromDatasetsNode, iterator=_ChooseIterator)
