"""``Options(auto_vectorize=True)``: runs undeclared ``map`` UDFs as ``jit(vmap(fn))`` when
they trace.

For each sequential, non-vectorized ``map`` whose input elements have fixed
shapes and numeric dtypes, the rule traces the UDF with ``jax.eval_shape``
on the input's element spec. A UDF that traces, and whose traced output has
exactly the structure, shapes and dtypes the map produces element by
element (its ``element_spec``, from running it on the first elements), is
vectorized. One that does not trace (Python control flow on values, NumPy
calls on tracers, side effects), or whose output would differ in dtype
(JAX computes in 32 bits unless ``jax_enable_x64`` is set), runs as before.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jdata import _tree
from jdata._plan import Node
from jdata._spec import TensorSpec
from jdata.ops.map import MapNode
from jdata.optimize.rewrite import bottom_up


def _abstract(spec):
    """``spec`` as ``jax.ShapeDtypeStruct``s, or ``None`` if some leaf is ragged or not numeric."""
    leaves, treedef = _tree.flatten(spec)
    structs = []
    for leaf in leaves:
        if (not isinstance(leaf, TensorSpec) or None in leaf.shape
                or leaf.dtype.kind not in "biuf"):
            return None
        structs.append(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype))
    return _tree.unflatten(treedef, structs)


def traces_like_per_element(node: MapNode) -> bool:
    """True if ``node.fn`` traces to the outputs the per-element map produces."""
    try:
        args = _abstract(node.input.element_spec())
        if args is None:
            return False
        if type(args) is tuple:
            traced = jax.eval_shape(node.fn, *args)
        else:
            traced = jax.eval_shape(node.fn, args)
        expected = node.element_spec()
    except Exception:  # does not trace, or its spec cannot be found: leave it
        return False
    traced_leaves, traced_tree = _tree.flatten(traced)
    expected_leaves, expected_tree = _tree.flatten(expected)
    if traced_tree != expected_tree:
        return False
    return all(isinstance(e, TensorSpec) and tuple(t.shape) == e.shape
               and np.dtype(t.dtype) == e.dtype
               for t, e in zip(traced_leaves, expected_leaves))


class AutoVectorizeRule:
    name = "auto_vectorize"

    def apply(self, plan: Node, options) -> Node:
        if not options.auto_vectorize:
            return plan

        def vectorize(node: Node) -> Node:
            if (type(node) is MapNode and not node.vectorize
                    and node.num_parallel_calls is None and traces_like_per_element(node)):
                return dataclasses.replace(node, vectorize=True)
            return node

        return bottom_up(plan, vectorize)
