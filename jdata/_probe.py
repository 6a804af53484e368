"""Element specs of UDF outputs, found by running the pipeline on its first elements.

A Python UDF cannot be traced symbolically the way tf.data traces graphs, so
specs of UDF outputs (and of opaque sources) come from the first few
elements: sizes that differ among them are ``None``. Sizes that vary only
later in the stream cannot be seen; ``batch`` and ``padded_batch`` do not
rely on specs, so a too-specific spec never changes any element.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from jdata import _planner, _spec, _tree
from jdata._errors import UDFError
from jdata._options import Options
from jdata._plan import Node
from jdata.runtime.context import Context

# Elements read to infer a spec: enough to see most varying sizes, cheap to compute.
_PROBE_ELEMENTS = 4


def first_elements(node: Node, op: str, count: int = _PROBE_ELEMENTS) -> list:
    """Up to ``count`` leading elements of ``node``; raises if it has none.

    Elements whose UDF raised are passed over, as ``ignore_errors`` does: a
    bad element must not make the spec of a pipeline that drops it unknowable
    (or fail the ops that read the spec while iterating). The probe stops
    after ``_PROBE_ELEMENTS`` such errors, and raises the first if it has no
    element.
    """
    # No autotuning: the probe reads a few elements and stops.
    it = _planner.make_iterator(node, Context(Options(autotune=False), probing=True), 0)
    elements, errors = [], []
    try:
        while len(elements) < count:
            try:
                elements.append(next(it))
            except StopIteration:
                break
            except UDFError as e:  # the iterator has moved past the bad element
                errors.append(e)
                if len(errors) == _PROBE_ELEMENTS:
                    break
    finally:
        it.close()
    if not elements:
        if errors:
            raise errors[0]
        raise ValueError(f"{op}: cannot infer the element_spec because the input is empty")
    return elements


def first_element(node: Node, op: str):
    """The first element of ``node``; raises if it has none."""
    return first_elements(node, op, 1)[0]


def leading_spec(node: Node, op: str):
    """The merged spec of ``node``'s first elements (for sources with opaque elements)."""
    return _merged([_spec.spec_of(e) for e in first_elements(node, op)])


def udf_output_spec(input_node: Node, apply: Callable, op: str):
    """The merged spec of ``apply`` on the first input elements, generalized.

    Sizes that differ among the outputs are ``None``. A UDF may also pass
    through an input size that varies only later (a batch dimension without
    ``drop_remainder`` is constant until the last batch): when the probed
    inputs all had the same sizes in their unknown dimensions, output sizes
    equal to one of those are reported as ``None`` too. That makes a spec less
    specific, never more.
    """
    elements, outputs = _applied(first_elements(input_node, op), apply)
    input_spec = input_node.element_spec()
    spec = _merged([_spec.spec_of(out) for out in outputs])
    unknown = [_unknown_sizes(input_spec, e) for e in elements]
    if all(sizes == unknown[0] for sizes in unknown):
        spec = _generalize(spec, unknown[0])
    return spec


def _applied(elements: list, apply: Callable) -> tuple[list, list]:
    """The elements on which ``apply`` succeeds, and its outputs; raises if it fails on all."""
    kept, outputs, errors = [], [], []
    for element in elements:
        try:
            outputs.append(apply(element))
        except UDFError as e:  # a bad element: its neighbours still show the spec
            errors.append(e)
            continue
        kept.append(element)
    if not outputs:
        raise errors[0]
    return kept, outputs


def _merged(specs: list):
    return functools.reduce(_spec.merge, specs)


def _unknown_sizes(spec, element) -> set[int]:
    sizes: set[int] = set()
    spec_leaves = _tree.leaves(spec)
    element_leaves = _tree.leaves(element)
    for s, leaf in zip(spec_leaves, element_leaves):
        if isinstance(s, _spec.TensorSpec):
            sizes.update(n for n, d in zip(np.shape(leaf), s.shape) if d is None)
    return sizes


def _generalize(spec, unknown_sizes: set[int]):
    if not unknown_sizes:
        return spec
    return _tree.map(lambda s: _spec.TensorSpec(
        tuple(None if d in unknown_sizes else d for d in s.shape), s.dtype), spec)
