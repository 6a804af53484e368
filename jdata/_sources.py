"""Module-level sources: the ways to start a ``Dataset``.

File sources (``from_array_record``, ``from_tfrecord``...) live in ``jdata.io``.
"""

from __future__ import annotations

import builtins  # noqa: F401 - the from_generator doctest uses builtins.range
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable, Protocol, cast

import numpy as np

from jdata import _random, _tree
from jdata import _validate as check
from jdata._dataset import Dataset, check_inputs_combine
from jdata._types import Key
from jdata.ops import (choose_from_datasets as choose_op, counter as counter_op,
                       from_generator as generator_op, from_source as source_op,
                       from_tensor_slices as slices_op, from_tensors as tensors_op,
                       random as random_op, range as range_op,
                       sample_from_datasets as sample_op, zip as zip_op)
from jdata.runtime.udf import check_callable
from jdata.runtime.values import read_only


class RandomAccessSource(Protocol):
    """What ``from_source`` reads: a length and elements by index (a grain data source, a
    list, an array)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


def range(start: int, stop: int | None = None, step: int = 1) -> Dataset:  # noqa: A001
    """Integers like Python's ``range``, as NumPy ``int64`` scalars.

    >>> import jdata
    >>> [int(x) for x in jdata.range(2, 10, 3)]
    [2, 5, 8]
    """
    if stop is None:
        start, stop = 0, start
    start = check.int_arg(start, "start", "range")
    stop = check.int_arg(stop, "stop", "range")
    step = check.int_arg(step, "step", "range")
    if step == 0:
        raise ValueError("range: step=0 must be non-zero")
    return Dataset(range_op.RangeNode(start, stop, step))


def from_tensors(element: Any) -> Dataset:
    """A dataset of exactly one element.

    Lists are converted to arrays (as tf.data converts them to tensors);
    tuples, dicts and namedtuples are structure. Each pass gets the element in
    new containers with read-only arrays (views: nothing is copied).

    >>> import jdata
    >>> [b.tolist() for b in jdata.from_tensors([1, 2, 3])]
    [[1, 2, 3]]
    """
    _refuse_datasets(element, "from_tensors")
    return Dataset(tensors_op.FromTensorsNode(to_numpy_tree(element, "from_tensors")))


def from_tensor_slices(tensors: Any) -> Dataset:
    """Slices every leaf along its first dimension: element ``i`` holds row ``i``.

    Rows are read-only views of the tensors (nothing is copied).

    >>> import jdata
    >>> ds = jdata.from_tensor_slices({"x": [1, 2], "y": ["a", "b"]})
    >>> [(int(e["x"]), e["y"]) for e in ds]
    [(1, 'a'), (2, 'b')]
    """
    _refuse_datasets(tensors, "from_tensor_slices")
    tensors = to_numpy_tree(tensors, "from_tensor_slices")
    leaves = _tree.leaves(tensors)
    if not leaves:
        raise ValueError("from_tensor_slices: tensors has no leaves to slice")
    lengths: set[Any] = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
    if None in lengths:
        raise ValueError("from_tensor_slices: every leaf needs rank >= 1 to be sliced; "
                         "use from_tensors for a single element")
    if len(lengths) != 1:
        raise ValueError(f"from_tensor_slices: leaves have different lengths "
                         f"{sorted(lengths)}; every leaf must have the same first dimension")
    return Dataset(slices_op.FromTensorSlicesNode(tensors, lengths.pop()))


def _refuse_datasets(tensors: Any, op: str) -> None:
    """A list of datasets is not a tensor: say what does what the user meant."""
    items = tensors.values() if isinstance(tensors, dict) else (
        tensors if isinstance(tensors, (list, tuple)) else (tensors,))
    if any(isinstance(item, Dataset) for item in items):
        raise TypeError(
            f"{op}: tensors holds jdata.Dataset objects, which are not tensors to slice. For a "
            "dataset whose elements are those datasets, use jdata.from_source([ds1, ds2]) "
            "(e.g. jdata.from_source([ds1, ds2]).interleave(lambda d: d, cycle_length=2) "
            "to read them in turn); to mix them at random use "
            "jdata.sample_from_datasets([ds1, ds2], weights, key), to chain them "
            "ds1.concatenate(ds2)")


def from_source(source: RandomAccessSource) -> Dataset:
    """A dataset over any random-access source (``__len__`` and ``__getitem__``).

    Grain data sources, lists and array-like objects qualify. Being random
    access, the result supports full shuffles and index-only state. When an op
    downstream runs in parallel (``num_parallel_calls``), ``__getitem__`` is
    called from several threads at once, as grain and tf.data sources are.
    Elements are handed out in new containers (dicts, lists, tuples) with
    read-only views of their arrays, so that no UDF can change the source.

    >>> import jdata
    >>> [x for x in jdata.from_source(["a", "b", "c"]).skip(1)]
    ['b', 'c']
    """
    for attr in ("__len__", "__getitem__"):
        if not hasattr(source, attr):
            raise TypeError(f"from_source: source={source!r} has no {attr}; a source needs "
                            "__len__ and __getitem__ (use from_generator for iterables)")
    return Dataset(source_op.FromSourceNode(source))


def from_generator(fn: Callable[..., Iterable[Any]], output_signature: Any = None,
                   args: Sequence[Any] | None = None) -> Dataset:
    """Elements from ``fn(*args)``, a callable that returns a fresh iterable each time.

    Restoring an iterator from a state *replays* the generator: it calls
    ``fn(*args)`` again and skips the elements already produced, so ``fn``
    must yield the same sequence on every call. A replay whose first element
    differs from the saved run's (``fn`` over a shared iterator, which goes on
    where it stopped) raises a ``ValueError`` rather than skip elements. The
    elements read to find ``element_spec`` (without ``output_signature``) are
    kept for the first pass, so even such an ``fn`` loses none of them.

    Args:
      fn: called at the start of each pass, with ``args``.
      output_signature: optional pytree of ``jdata.TensorSpec`` for
        ``element_spec`` (otherwise the first element's spec is used).
      args: a tuple of arguments for ``fn``, as tf.data's: each becomes a
        NumPy value (a list an array, a Python int an ``int64``), read-only;
        ``str`` stays ``str`` (tf.data passes ``bytes``).

    >>> import jdata
    >>> [int(x) for x in jdata.from_generator(lambda: (i * i for i in builtins.range(4)))]
    [0, 1, 4, 9]
    >>> def rows(n, scale):
    ...     yield from (scale * i for i in builtins.range(n))
    >>> [int(x) for x in jdata.from_generator(rows, args=(3, 10))]
    [0, 10, 20]
    """
    check_callable(fn, "fn", "from_generator")
    if args is None:
        args = ()
    elif not isinstance(args, (tuple, list)):
        raise TypeError(f"from_generator: args={args!r} must be a tuple of arguments for fn, "
                        f"e.g. args=({args!r},)")
    args = tuple(to_numpy_tree(arg, "from_generator") for arg in args)
    return Dataset(generator_op.FromGeneratorNode(fn, output_signature, args))


def counter(start: int = 0, step: int = 1) -> Dataset:
    """``start, start + step, ...`` forever, as ``int64``.

    >>> import jdata
    >>> [int(x) for x in jdata.counter(5, 2).take(3)]
    [5, 7, 9]
    """
    start = check.int_arg(start, "start", "counter")
    step = check.int_arg(step, "step", "counter")
    return Dataset(counter_op.CounterNode(start, step))


def zip(datasets: Dataset | Sequence[Dataset] | Mapping[str, Dataset],  # noqa: A001
        *more: Dataset) -> Dataset:
    """Combines datasets element-wise into tuples (or dicts); stops at the shortest.

    >>> import jdata
    >>> ds = jdata.zip((jdata.range(3), jdata.range(10, 20)))
    >>> [(int(a), int(b)) for a, b in ds]
    [(0, 10), (1, 11), (2, 12)]
    >>> [sorted(e) for e in jdata.zip({"a": jdata.range(1), "b": jdata.range(1)})]
    [['a', 'b']]
    """
    if more:  # zip(a, b): each one is checked to be a Dataset below
        datasets = (cast(Dataset, datasets), *more)
    if isinstance(datasets, dict):
        keys, values = tuple(datasets), tuple(datasets.values())
    elif isinstance(datasets, (tuple, list)):
        keys, values = None, tuple(datasets)
    else:
        raise TypeError(f"zip: datasets={datasets!r} must be a tuple or dict of datasets")
    if not values:
        raise ValueError(f"zip: datasets={datasets!r} is empty; pass at least one dataset")
    _check_datasets(values, "datasets", "zip")
    return Dataset(zip_op.ZipNode(tuple(d._node for d in values), keys))


def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                         stop_on_empty_dataset: bool = True) -> Dataset:
    """Takes each element from ``datasets[c]`` for the next ``c`` of ``choice_dataset``.

    Args:
      datasets: a list of datasets with compatible elements.
      choice_dataset: a dataset of int64 scalars in ``[0, len(datasets))``.
      stop_on_empty_dataset: stop when a chosen dataset is exhausted; with
        ``False``, choices of exhausted datasets are skipped.

    >>> import jdata
    >>> ds = jdata.choose_from_datasets(
    ...     [jdata.from_tensors(np.str_("a")).repeat(), jdata.from_tensors(np.str_("b")).repeat()],
    ...     jdata.range(2).repeat(2))
    >>> [str(x) for x in ds]
    ['a', 'b', 'a', 'b']
    """
    datasets = tuple(datasets) if isinstance(datasets, (list, tuple)) else datasets
    if not isinstance(datasets, tuple) or not datasets:
        raise TypeError("choose_from_datasets: datasets must be a non-empty list of datasets")
    _check_datasets(datasets, "datasets", "choose_from_datasets")
    if not isinstance(choice_dataset, Dataset):
        raise TypeError(f"choose_from_datasets: choice_dataset={choice_dataset!r} must be a "
                        "jdata.Dataset of int64 scalars")
    check.bool_arg(stop_on_empty_dataset, "stop_on_empty_dataset", "choose_from_datasets")
    return Dataset(check_inputs_combine(choose_op.ChooseFromDatasetsNode(
        tuple(d._node for d in datasets), choice_dataset._node, stop_on_empty_dataset)))


def sample_from_datasets(datasets: Sequence[Dataset],
                         weights: Sequence[float] | np.ndarray[Any, Any] | None = None,
                         key: Key | None = None, stop_on_empty_dataset: bool = False,
                         rerandomize_each_iteration: bool | None = None, *,
                         seed: int | None = None) -> Dataset:
    """Samples each element from one of ``datasets`` with probability ``weights[i]``.

    Draw ``t`` depends only on ``key``, the epoch and ``t``. When a dataset is
    exhausted it is dropped and the others' weights renormalized (unless
    ``stop_on_empty_dataset``).

    Args:
      datasets: a list of datasets with compatible elements.
      weights: non-negative floats, one per dataset (``None``: uniform).
      key: a JAX PRNG key (``jax.random.key(0)``) or its ``uint32[2]`` data.
      stop_on_empty_dataset: stop at the first exhausted dataset.
      rerandomize_each_iteration: new draws each epoch (each pass of an
        enclosing ``repeat``, each new iterator). ``None`` or ``False``, as in
        tf.data: every epoch draws the datasets in the same order (the
        datasets themselves may still reshuffle).
      seed: tf.data's argument, refused with the jdata spelling (``key=``).

    >>> import jdata, jax
    >>> ds = jdata.sample_from_datasets([jdata.range(3), jdata.range(10, 13)], [0.5, 0.5],
    ...                                 key=jax.random.key(0))
    >>> sorted(int(x) for x in ds)
    [0, 1, 2, 10, 11, 12]
    """
    datasets = tuple(datasets) if isinstance(datasets, (list, tuple)) else datasets
    if not isinstance(datasets, tuple) or not datasets:
        raise TypeError("sample_from_datasets: datasets must be a non-empty list of datasets")
    _check_datasets(datasets, "datasets", "sample_from_datasets")
    if weights is None:
        weights = [1.0] * len(datasets)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (len(datasets),):
        raise ValueError(f"sample_from_datasets: weights has shape {weights.shape}; pass one "
                         f"weight per dataset ({len(datasets)})")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"sample_from_datasets: weights={weights.tolist()} must be finite, "
                         "non-negative and not all zero")
    _random.refuse_seed(seed, key, "sample_from_datasets",
                        "sample_from_datasets(datasets, weights, key=jax.random.key({seed}))")
    key_data = _random.as_key_data(key)
    check.bool_arg(stop_on_empty_dataset, "stop_on_empty_dataset", "sample_from_datasets")
    rerandomize = _rerandomize(rerandomize_each_iteration, "sample_from_datasets")
    return Dataset(check_inputs_combine(sample_op.SampleFromDatasetsNode(
        tuple(d._node for d in datasets), tuple(float(w) for w in weights / weights.sum()),
        key_data, stop_on_empty_dataset, rerandomize)))


def random(key: Key | None = None, rerandomize_each_iteration: bool | None = None, *,
           seed: int | None = None) -> Dataset:
    """An infinite stream of random ``int64`` scalars in ``[0, 2**32)`` (tf.data's
    ``Dataset.random``).

    Value ``t`` is a pure function of ``key``, the epoch and ``t`` (the first
    word of that position's Threefry key), so streams resume exactly.

    Args:
      key: a JAX PRNG key (``jax.random.key(0)``) or its ``uint32[2]`` data.
      rerandomize_each_iteration: new values each epoch (each pass of an
        enclosing ``repeat``, each new iterator). ``None`` or ``False``, as in
        tf.data: every epoch sees the same values.
      seed: tf.data's argument, refused with the jdata spelling (``key=``).

    >>> import jdata, jax
    >>> values = [int(x) for x in jdata.random(jax.random.key(0)).take(3)]
    >>> len(values) == 3 and all(0 <= v < 2**32 for v in values)
    True
    """
    _random.refuse_seed(seed, key, "random", "jdata.random(jax.random.key({seed}))")
    key_data = _random.as_key_data(key)
    return Dataset(random_op.RandomNode(key_data, _rerandomize(rerandomize_each_iteration,
                                                               "random")))


def _rerandomize(value: bool | None, op: str) -> bool:
    if value is None:
        return False
    check.bool_arg(value, "rerandomize_each_iteration", op)
    return value


def _check_datasets(datasets: Iterable[Any], arg: str, op: str) -> None:
    for i, d in enumerate(datasets):
        if not isinstance(d, Dataset):
            raise TypeError(f"{op}: {arg}[{i}]={d!r} is not a jdata.Dataset")


def to_numpy_tree(value: Any, op: str) -> Any:
    """Converts a user's tensors to a pytree of NumPy leaves; lists become arrays.

    String arrays become object arrays so their rows are plain ``str``/``bytes``.
    Arrays are read-only (views of the user's arrays, which stay writable), so
    are their rows: no UDF can change what the next epoch reads.
    """
    if isinstance(value, dict):
        return {k: to_numpy_tree(v, op) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[to_numpy_tree(v, op) for v in value])
    if isinstance(value, tuple):
        return tuple(to_numpy_tree(v, op) for v in value)
    if isinstance(value, (bytes, str)):
        return value
    if value is None:
        raise TypeError(f"{op}: None is not a valid element leaf")
    try:
        arr = np.asarray(value)
    except Exception as e:
        raise TypeError(f"{op}: cannot convert a {type(value).__name__} leaf to a NumPy "
                        "array") from e
    if arr.dtype.kind in "US":
        # NumPy's fixed-width strings drop trailing NULs (b"a\x00" -> b"a"): a
        # serialized record would lose bytes. Lists keep their own objects.
        exact = np.array(value, dtype=object) if not isinstance(value, np.ndarray) else None
        arr = exact if exact is not None and exact.shape == arr.shape else arr.astype(object)
    if arr.dtype == object and not all(isinstance(v, (bytes, str)) for v in arr.flat):
        raise TypeError(f"{op}: a {type(value).__name__} leaf is not a NumPy value, bytes "
                        "or str (nor an array of them)")
    return read_only(arr) if arr.ndim else arr[()]
