"""padded_batch: batches elements padded to a common shape. See ``Dataset.padded_batch``."""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, ClassVar

import jax
import numpy as np

from jdata import _planner, _spec, _tree
from jdata._plan import BatchSizes, Node
from jdata.ops.batch import BatchIterator, BatchReader, batched_cardinality, batched_sizes

_OP = "padded_batch"
_LEAF = _tree.structure(np.zeros(()))  # the structure of a bare array element
_SHAPE_HINT = ("a shape is a list or tuple of ints, None or -1 (pad to the longest), e.g. "
               "[None, 5]; pass one per leaf of the element, in the element's structure")


@dataclasses.dataclass(frozen=True, eq=False)
class PaddedBatchNode(Node):
    """See ``Dataset.padded_batch``.

    ``padded_shapes`` is what ``normalize_shapes`` returns. It is matched to
    the element's structure as tf.data does (``map_structure_up_to``): what
    sits at a leaf's place is that leaf's shape, so ``(4, 5)`` is one rank-2
    shape for a single-leaf element and two rank-1 shapes for a pair.
    """

    input: Node
    batch_size: int
    padded_shapes: Any
    padding_values: Any
    drop_remainder: bool = False
    op_name: ClassVar[str] = "padded_batch"
    batching: ClassVar[bool] = True

    def __post_init__(self):
        check_padding_values(self.padding_values)

    def cardinality(self) -> int:
        return batched_cardinality(self.input.cardinality(), self.batch_size,
                                   self.drop_remainder)

    def static_batch_size(self) -> int | None:
        return self.batch_size if self.drop_remainder else None

    def static_batch_sizes(self) -> BatchSizes:
        return batched_sizes(self.input.cardinality(), self.batch_size, self.drop_remainder)

    def random_access(self) -> bool:
        return self.input.random_access()

    def compute_spec(self):
        return padded_spec(self.input.element_spec(), self.padded_shapes,
                           self.batch_size if self.drop_remainder else None)


def normalize_shapes(padded_shapes: Any) -> Any:
    """Validates ``padded_shapes`` and converts its dimensions to Python ints or ``None``.

    Containers keep their types (see ``PaddedBatchNode``); ``-1`` and ``None``
    dimensions become ``None``, meaning "pad to the longest in the batch".
    """
    if padded_shapes is None:
        return None
    return _normalize(padded_shapes, "padded_shapes")


def _normalize(value, where: str):
    if value is None or _is_dim(value):
        return _dim(value, where)
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu":
        return [_dim(d, where) for d in value.tolist()]
    if isinstance(value, dict):
        return {k: _normalize(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_normalize(v, f"{where}.{f}") for f, v in zip(value._fields, value)])
    if isinstance(value, (tuple, list)):
        return type(value)(_normalize(v, f"{where}[{i}]") for i, v in enumerate(value))
    raise TypeError(f"{_OP}: {where}={value!r} is not a shape; {_SHAPE_HINT}")


def _is_dim(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _dim(value, where: str):
    if value is None or value == -1:
        return None
    if value < -1:
        raise ValueError(f"{_OP}: {where} has dimension {value}; dimensions must be >= 0, or "
                         "-1/None to pad to the longest in the batch")
    return int(value)


def _leaf_shape(value, name: str, rank: int) -> tuple:
    """One leaf's padded shape as a tuple with ``None`` for "longest in the batch"."""
    if value is None:
        return (None,) * rank  # tf.data's unknown-rank shape: pad every dimension
    if isinstance(value, int):
        value = [value]  # a bare int is a rank-1 shape, as tf.TensorShape(5) is
    if not isinstance(value, (list, tuple)) or not all(d is None or _is_dim(d) for d in value):
        raise ValueError(f"{_OP}: padded_shapes gives {value!r} for {name}, which is not a "
                         f"shape; {_SHAPE_HINT}")
    shape = tuple(None if d is None or d == -1 else d for d in value)
    if len(shape) != rank:
        raise ValueError(f"{_OP}: padded_shapes gives {name} the rank-{len(shape)} shape "
                         f"{list(value)}, but {name} has rank {rank}; the padded shape needs one "
                         "entry per dimension")
    return shape


def leaf_shapes(padded_shapes, treedef, ranks: list[int], names) -> list[tuple]:
    """Per-leaf padded shapes for elements of ``treedef`` with leaves of ``ranks``."""
    if padded_shapes is None:
        return [(None,) * r for r in ranks]
    try:
        per_leaf = treedef.flatten_up_to(padded_shapes)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{_OP}: padded_shapes={padded_shapes!r} does not match the element's "
                         f"structure {treedef}: {e}") from None
    return [_leaf_shape(v, names[j], r) for j, (v, r) in enumerate(zip(per_leaf, ranks))]


def leaf_names(treedef) -> list[str]:
    """Readable names of an element's leaves, for error messages."""
    if treedef.num_leaves == 1 and jax.tree_util.treedef_is_leaf(treedef):
        return ["the element"]
    dummy = _tree.unflatten(treedef, list(range(treedef.num_leaves)))
    paths = jax.tree_util.tree_flatten_with_path(dummy)[0]
    return [f"leaf {jax.tree_util.keystr(path)}" for path, _ in paths]


def padded_spec(spec, padded_shapes, batch_size: int | None):
    """The spec of padded batches of ``spec``: fixed padded sizes stay, the rest are ``None``.

    Without ``padded_shapes`` the input's known sizes stay too, as in tf.data:
    padding to the longest in the batch keeps a size that every element has.
    """
    leaves, treedef = _tree.flatten(spec)
    names = leaf_names(treedef)
    if padded_shapes is None:
        shapes = [s.shape for s in leaves]
    else:
        shapes = leaf_shapes(padded_shapes, treedef, [s.rank for s in leaves], names)
    out = []
    for s, shape, name in zip(leaves, shapes, names):
        for size, padded in zip(s.shape, shape):
            if size is not None and padded is not None and size > padded:
                raise ValueError(f"{_OP}: {name} has shape {s.shape}, larger than its padded "
                                 f"shape {list(shape)}")
        out.append(_spec.TensorSpec((batch_size, *shape), s.dtype))
    return _tree.unflatten(treedef, out)


# ----------------------------------------------------------------- padding values


def check_padding_values(padding_values) -> None:
    """Raises unless ``padding_values`` is ``None``, one scalar, or a structure of scalars."""
    leaves = jax.tree_util.tree_leaves(padding_values, is_leaf=lambda x: x is None)
    for value in leaves:
        if value is None or isinstance(value, (bytes, str, numbers.Number, np.generic)):
            continue
        if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
            continue
        if isinstance(value, (np.ndarray, jax.Array)):
            raise ValueError(f"{_OP}: padding_values must be scalars, but one has shape "
                             f"{np.shape(value)}")
        raise TypeError(f"{_OP}: padding_values={padding_values!r} must be None, a scalar, or "
                        "a structure of scalars matching the element")


def _leaf_padding_values(padding_values, treedef) -> list:
    if padding_values is None or _is_scalar(padding_values):
        return [padding_values] * treedef.num_leaves
    try:
        return treedef.flatten_up_to(padding_values)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{_OP}: padding_values={padding_values!r} does not match the "
                         f"element's structure {treedef}: {e}") from None


def _is_scalar(value) -> bool:
    return not isinstance(value, (dict, list, tuple))


def _pad_value(value, dtype: np.dtype, sample, name: str):
    """The padding of one leaf, converted to the leaf's dtype."""
    if dtype.kind in "OSU":
        if value is None:
            return "" if isinstance(sample, str) or dtype.kind == "U" else b""
        if not isinstance(value, (bytes, str)):
            raise TypeError(f"{_OP}: padding_values gives {value!r} for {name}, a string leaf; "
                            "pass a bytes or str padding value")
        return value
    if value is None:
        return dtype.type(0)
    if isinstance(value, (bytes, str)):
        raise TypeError(f"{_OP}: padding_values gives the string {value!r} for {name}, whose "
                        f"dtype is {dtype}; pass a number")
    if isinstance(value, float) and dtype.kind in "biu":
        raise TypeError(f"{_OP}: padding_values gives the float {value!r} for {name}, whose "
                        f"dtype is {dtype}")
    if isinstance(value, (bool, int, float, complex)):  # Python scalars adapt to the leaf
        try:
            return np.asarray(value, dtype=dtype)[()]
        except (OverflowError, TypeError) as e:
            raise TypeError(f"{_OP}: padding_values gives {value!r} for {name}, which does not "
                            f"fit its dtype {dtype}") from e
    value = np.asarray(value)
    if not np.can_cast(value.dtype, dtype, "same_kind"):
        raise TypeError(f"{_OP}: padding_values gives a {value.dtype} value for {name}, whose "
                        f"dtype is {dtype}; pass a value of that dtype")
    return value.astype(dtype)[()]


# ------------------------------------------------------------------------ padding


class Padder:
    """Stacks a list of elements into one batch, padding each leaf (``BatchReader``'s stack)."""

    def __init__(self, padded_shapes, padding_values):
        self._padded_shapes = padded_shapes
        self._padding_values = padding_values
        self._layouts: dict = {}  # (treedef, ranks) -> (names, shapes, padding values)

    def __call__(self, elements: list):
        first = elements[0]
        if type(first) is np.ndarray and list(map(type, elements)).count(np.ndarray) == len(
                elements):  # one array per element, the common case: no tree walks
            names, shapes, values = self._layout(_LEAF, (first.ndim,))
            return _pad_leaf(elements, shapes[0], values[0], names[0])
        flat, treedef = _tree.flatten(first)
        columns = [flat]
        for i, element in enumerate(elements[1:], 1):
            leaves_i, treedef_i = _tree.flatten(element)
            if treedef_i != treedef:
                raise ValueError(f"{_OP}: element {i} of the batch has structure {treedef_i}, "
                                 f"but element 0 has {treedef}")
            columns.append(leaves_i)
        names, shapes, values = self._layout(treedef, tuple(np.ndim(leaf) for leaf in flat))
        return _tree.unflatten(treedef, [
            _pad_leaf([c[j] for c in columns], shapes[j], values[j], names[j])
            for j in range(len(flat))])

    def _layout(self, treedef, ranks: tuple):
        layout = self._layouts.get((treedef, ranks))
        if layout is None:
            names = leaf_names(treedef)
            layout = (names, leaf_shapes(self._padded_shapes, treedef, list(ranks), names),
                      _leaf_padding_values(self._padding_values, treedef))
            self._layouts[(treedef, ranks)] = layout
        return layout


def _pad_leaf(values: list, shape: tuple, pad, name: str) -> np.ndarray:
    if isinstance(values[0], (bytes, str)):
        return _tree.stack(values, _OP)  # scalar strings: nothing to pad
    arrays = values if all(type(v) is np.ndarray for v in values) else [np.asarray(v)
                                                                        for v in values]
    other_rank = next((a.ndim for a in arrays if a.ndim != len(shape)), None)
    if other_rank is not None:
        raise ValueError(f"{_OP}: {name} has rank {len(shape)} in the batch's first element "
                         f"but rank {other_rank} in another; padding needs equal ranks")
    sizes = [a.shape for a in arrays]
    target = tuple(max(size[d] for size in sizes) if s is None else s
                   for d, s in enumerate(shape))
    for d, s in enumerate(shape):  # sizes padded to the longest cannot be too large
        too_large = s is not None and next((size for size in sizes if size[d] > s), None)
        if too_large:
            raise ValueError(f"{_OP}: {name} has shape {too_large}, larger than its padded "
                             f"shape {list(shape)}; enlarge padded_shapes, or use None to pad "
                             "to the longest in the batch")
    strings = arrays[0].dtype.kind in "OSU"
    dtypes = {a.dtype for a in arrays}
    dtype = (np.dtype(object) if strings else dtypes.pop() if len(dtypes) == 1
             else np.result_type(*arrays))
    sample = next((a.flat[0] for a in arrays if a.size), None)
    out = np.full((len(arrays), *target), _pad_value(pad, dtype, sample, name), dtype=dtype)
    if len(target) == 1:
        for i, a in enumerate(arrays):
            out[i, :len(a)] = a
    else:
        for i, a in enumerate(arrays):
            out[(i, *map(slice, a.shape))] = a
    return out


def _reader(node: PaddedBatchNode, ctx, epoch: int):
    return BatchReader(_planner.make_reader(node.input, ctx, epoch), node.batch_size,
                       node.drop_remainder, Padder(node.padded_shapes, node.padding_values))


def _iterator(node: PaddedBatchNode, ctx, epoch: int):
    return BatchIterator(_planner.make_iterator(node.input, ctx, epoch), node.batch_size,
                         node.drop_remainder, Padder(node.padded_shapes, node.padding_values))


_planner.register(PaddedBatchNode, iterator=_iterator, reader=_reader)
