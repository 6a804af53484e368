"""``Dataset``: the user-facing plan builder.

Each method owns its user documentation, validates its arguments and builds
one logical node from ``jdata/ops/``; no method iterates (except the terminal
``reduce`` and ``get_single_element``). Semantics follow ``tf.data.Dataset``;
randomness takes explicit JAX keys instead of seeds.
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Concatenate, ParamSpec, TypeVar

import numpy as np

from jdata import _fingerprint, _html, _placement, _plan, _random, optimize
from jdata import _validate as check
from jdata._constants import AUTOTUNE, INFINITE, UNKNOWN
from jdata._iterator import DatasetIterator, Epochs
from jdata._options import Options
from jdata._types import Key
from jdata.ops import (autocache as autocache_op, batch, bucket_by_sequence_length, cache,
                       concatenate, enumerate as enumerate_op, filter as filter_op, flat_map,
                       group_by_window, ignore_errors, interleave, map as map_op,
                       options as options_op, padded_batch, prefetch, random_map, rebatch,
                       repeat, scan, shard, shuffle, skip, take, take_while, unbatch, unique,
                       window)
from jdata.runtime.context import Context
from jdata.runtime.udf import check_callable

if TYPE_CHECKING:  # jdata.service is imported when a pipeline is distributed
    from jdata.service import Service

# tf.data's default is the machine's core count, which makes the output order
# depend on the machine; jdata fixes it so the order is the same everywhere.
DEFAULT_CYCLE_LENGTH = 8


_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _explains_tf_calls(
        explain: Callable[[tuple[Any, ...], dict[str, Any], TypeError], Exception],
) -> Callable[[Callable[Concatenate[_S, _P], _R]], Callable[Concatenate[_S, _P], _R]]:
    """A call that does not bind to the method (arguments in tf.data's order, such as
    ``shuffle(1000, key=k)``) raises ``explain(args, kwargs)`` instead of Python's
    "multiple values for argument". The method keeps its signature (for type checkers
    through the ``ParamSpec``, for ``inspect.signature`` through ``functools.wraps``)."""
    def wrap(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def checked(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                signature.bind(self, *args, **kwargs)
            except TypeError as e:
                raise explain(args, kwargs, e) from None
            return method(self, *args, **kwargs)
        return checked
    return wrap


class Dataset:
    """A stateless plan of a pipeline: sources and transformations.

    Build one with a source (``jdata.range``, ``jdata.from_tensor_slices``,
    ``jdata.from_source``...) and chain transformations. Iterating creates a
    ``DatasetIterator``; the dataset itself never changes.

    >>> import jdata
    >>> ds = jdata.range(10).map(lambda x: x * 2).filter(lambda x: x % 3 != 0).batch(4)
    >>> [b.tolist() for b in ds]
    [[2, 4, 8, 10], [14, 16]]
    """

    def __init__(self, node: _plan.Node) -> None:
        if not isinstance(node, _plan.Node):
            raise TypeError(
                f"Dataset({node!r}): build datasets with jdata.range, jdata.from_tensor_slices, "
                "jdata.from_source and the other sources, not with the Dataset constructor")
        self._node = node
        self._optimized: optimize.Optimized | None = None
        self._epochs = Epochs()
        # Cedar's planner (Options(plan=...)): the plan's fingerprint, and each placed plan
        # by its structure, so that later iterators share its nodes (a cache's elements,
        # parked workers).
        self._plan_fingerprint: str | None = None
        self._placed: dict[str, _plan.Node] = {}

    def __getstate__(self) -> dict[str, Any]:
        # The plan only: the optimized plan is rebuilt where it is used, and the
        # iterator count starts again at 0 (as in a fresh process).
        return {"_node": self._node}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Dataset.__init__(self, state["_node"])

    def _optimize(self) -> optimize.Optimized:
        # Once per dataset: its iterators share the optimized nodes (and caches).
        if self._optimized is None:
            self._optimized = optimize.optimize(self._node, self.options)
        return self._optimized

    # ----------------------------------------------------------------- iteration

    def iterator(self, state: dict[str, Any] | str | bytes | None = None) -> DatasetIterator:
        """A new iterator, optionally resumed from a ``get_state()`` result.

        As in tf.data, each new iterator of a dataset is a new epoch: the Nth
        iterator (``iter(ds)``, ``ds.iterator()``, and the passes of
        ``reduce``, ``save`` and ``get_single_element``) sees what the Nth
        pass of ``ds.repeat()`` would, with a new ``shuffle`` order and new
        ``random_map`` keys (``reshuffle_each_iteration=False`` keeps the first
        order). It is a pure function of the keys and N: a fresh process (or an
        unpickled dataset) starts again at N = 0. jdata's own probing
        (``element_spec``, ``cardinality``, ``explain``) runs no epoch.

        Args:
          state: what ``DatasetIterator.get_state()`` returned (or its JSON text),
            from an iterator of this same pipeline. ``None`` starts the next
            epoch at its beginning. A state resumes its own epoch, and the
            dataset's next iterator runs the epoch after it.

        >>> import jdata, jax
        >>> it = jdata.range(4).iterator()
        >>> _ = next(it)
        >>> [int(x) for x in jdata.range(4).iterator(it.get_state())]
        [1, 2, 3]
        >>> ds = jdata.range(5).shuffle(jax.random.key(0))
        >>> first, second = [int(x) for x in ds], [int(x) for x in ds]
        >>> first != second and sorted(first) == sorted(second)
        True
        """
        epoch = 0 if state is not None else self._epochs.take()
        options = self.options
        if options.service is not None and options.plan is None:
            warnings.warn("Options(service=...) has no effect with Options(plan=None): set "
                          "plan=jdata.AUTOTUNE (or use ds.with_service(svc)) to let the "
                          "planner use the service", UserWarning, stacklevel=2)
        plan, profiler = self._optimize().plan, None
        if options.plan is not None:
            plan, profiler = self._planned(plan, options, state)
        return DatasetIterator(plan, Context(options=options), state, epoch, self._epochs,
                               profiler)

    def _planned(self, plan: _plan.Node, options: Options,
                 state: Any) -> tuple[_plan.Node, Any]:
        """The plan Cedar's planner chose (or a state's), or the plan with a profiler."""
        from jdata import _autoplan

        if state is not None:
            signature = _autoplan.state_signature(state)
            placed = None if signature is None else _autoplan.matching(
                plan, signature, options, self._node)
            return (plan if placed is None else self._placed.setdefault(
                _plan.structure_signature(placed), placed)), None
        _autoplan.check_pins(plan, options)
        if self._plan_fingerprint is None:
            self._plan_fingerprint = _fingerprint.fingerprint(plan)
        placement = _autoplan.decided(plan, self._plan_fingerprint)
        if placement is None:
            return plan, _autoplan.Profiler(plan, self._plan_fingerprint, options, self._node)
        placed = _autoplan.apply(plan, placement.cut, placement.cache, options,
                                 placement.cache_part, self._node)
        signature = _plan.structure_signature(placed)
        placed = self._placed.setdefault(signature, placed)
        # A plan the planner left (a cache it tried) goes, and what it held with it.
        self._placed = {signature: placed}
        return placed, _autoplan.trial(plan, self._plan_fingerprint, placement, placed)

    def __iter__(self) -> DatasetIterator:
        return self.iterator()

    def as_numpy_iterator(self) -> DatasetIterator:
        """An iterator (elements are already NumPy; kept for tf.data ports)."""
        return self.iterator()

    def __bool__(self) -> bool:
        # As in tf.data: a dataset is always truthy, so ``if ds:`` never calls
        # ``len()`` (which raises for infinite and unknown cardinalities).
        return True

    def __len__(self) -> int:
        n = self.cardinality()
        if n == INFINITE:
            raise TypeError("the dataset is infinite; len() needs a finite dataset")
        if n == UNKNOWN:
            raise TypeError("the dataset's length is unknown (e.g. after filter); "
                            "use cardinality() or count the elements")
        return n

    # ---------------------------------------------------------------- properties

    @property
    def element_spec(self) -> Any:
        """The structure of an element, with a ``TensorSpec`` per leaf.

        Sizes that vary are ``None`` (e.g. the batch dimension without
        ``drop_remainder``). Python UDFs cannot be traced, so the spec of a
        UDF's output is inferred lazily from the pipeline's first elements.

        >>> import jdata
        >>> jdata.range(10).batch(4).element_spec
        TensorSpec(shape=(None,), dtype=int64)
        """
        return self._node.element_spec()

    @property
    def options(self) -> Options:
        """The ``Options`` of the pipeline, merged along the plan (outer wins)."""
        found = [n.options for n in _plan.walk(self._node)
                 if isinstance(n, options_op.OptionsNode)]
        merged = Options()
        for opts in reversed(found):  # innermost first, so outer settings override
            merged = merged.merge(opts)
        return merged

    def cardinality(self) -> int:
        """The number of elements, or ``jdata.INFINITE`` / ``jdata.UNKNOWN``.

        It comes from static facts only: where a count would rest on sizes
        seen in the first elements (a UDF's outputs or an opaque source's
        records, as ``unbatch`` of them would), it is ``UNKNOWN``.

        >>> import jdata
        >>> jdata.range(10).batch(3).cardinality()
        4
        >>> jdata.range(10).repeat().cardinality() == jdata.INFINITE
        True
        >>> jdata.range(10).filter(lambda x: x > 3).cardinality() == jdata.UNKNOWN
        True
        """
        return self._node.cardinality()

    def fingerprint(self) -> str:
        """A hex digest that is the same for the same pipeline in any process.

        UDFs are hashed by their code and the values they close over. A value
        that cannot be hashed (one with no pickle reduction, as an open file, a
        socket or a generator) makes the digest unique to this process: no other
        process shares its caches or its named service jobs.
        ``jdata._fingerprint.fingerprint_uncertainty`` says which value it is.
        """
        return _fingerprint.fingerprint(self._node)

    def explain(self) -> str:
        """The optimized plan as text, output op first, with each op's cardinality
        and name (``op: ...``, the name ``it.stats()``, its plots and profiler traces
        give the op: its UDFs', a fused op's parts').

        Then, for each optimizer rule that fired, the plan it was given (what
        it produced is the next rule's input, or the plan printed first);
        ``Options(optimize=False)`` turns the rules off.

        >>> import jdata
        >>> print(jdata.range(8).map(abs).map(abs).explain())
        Plan (optimizer rules fired: map_fusion)
        Map(fn=abs.abs)  [8]  op: map(abs)+map(abs)
          Range(start=0, stop=8, step=1)  [8]  op: range
        <BLANKLINE>
        map_fusion, before:
          Map(fn=abs)  [8]
            Map(fn=abs)  [8]
              Range(start=0, stop=8, step=1)  [8]
        """
        ctx = Context(self.options)
        result = self._optimize()
        names = ", ".join(f.rule for f in result.fired) or "none"
        lines = [f"Plan (optimizer rules fired: {names})"]
        lines += _explain(result.plan, 0, ctx, _plan.op_labels(result.plan))
        for fired in result.fired:
            lines += ["", f"{fired.rule}, before:"] + _explain(fired.before, 1, ctx, {})
            lines += [f"  ({note})" for note in fired.notes]
        if self.options.plan is not None:
            lines += [""] + self._plan_lines(result.plan, ctx)
        return "\n".join(lines)

    def _plan_lines(self, plan: _plan.Node, ctx: Context) -> list[str]:
        """Cedar's planner's decision as ``explain()`` shows it: the placed plan, the
        reasons and the profile."""
        from jdata import _autoplan

        if self._plan_fingerprint is None:
            self._plan_fingerprint = _fingerprint.fingerprint(plan)
        placement = _autoplan.decided(plan, self._plan_fingerprint)
        if placement is None:
            return ["Cedar's plan: not decided yet (the first iterator profiles the plan "
                    f"above for {_autoplan.PROFILE_SEC:g} s, or to its end)"]
        placed = _autoplan.apply(plan, placement.cut, placement.cache, self.options,
                                 placement.cache_part, self._node)
        failed = _autoplan.scale_error(self._plan_fingerprint)
        scaled = [] if failed is None else [f"  setting the service's workers failed: {failed}"]
        return (placement.describe() + scaled + ["Planned (from the next iterator on):"]
                + _explain(placed, 1, ctx, _plan.op_labels(placed)))

    def __repr__(self) -> str:
        return f"<jdata.Dataset {self._node}>"

    def _repr_html_(self) -> str:
        """Notebooks show the plan as ``explain()`` prints it."""
        return _html.block("jdata.Dataset", [], _html.described(self.explain, repr(self)))

    # ------------------------------------------------------------- transformations

    def map(self, fn: Callable[..., Any], num_parallel_calls: int | None = None,
            deterministic: bool | None = None, vectorize: bool = False) -> Dataset:
        """Applies ``fn`` to every element.

        A tuple element is unpacked into positional arguments, as in tf.data.

        Args:
          fn: maps an element to a new element (a pytree of NumPy values).
          num_parallel_calls: elements processed in parallel; ``None`` runs
            sequentially, ``jdata.AUTOTUNE`` lets the runtime decide how many
            workers, and whether threads or worker processes (it measures
            whether ``fn`` holds the GIL; see ``Options.engine``). ``fn`` is
            cloudpickled for processes, so lambdas and closures work.
          deterministic: with ``False``, parallel results may come in
            completion order. ``None`` follows ``Options.deterministic``.
          vectorize: ``fn`` is traceable by JAX; run it as ``jit(vmap(fn))``
            over blocks of elements. Outputs equal those of ``jax.jit(fn)`` on
            each element, so they follow JAX's dtypes: 32-bit unless
            ``jax_enable_x64`` is set (``lambda x: x * 2`` on ``int64``
            elements gives ``int32``); floats may differ in the last bits from
            calling ``fn`` eagerly, as ``jit`` may simplify (e.g. ``x / 3.0``).
            An error in ``fn`` is raised for each element it concerns, at its
            own position.

        >>> import jdata
        >>> [int(x) for x in jdata.range(3).map(lambda x: x + 10)]
        [10, 11, 12]
        >>> ds = jdata.from_tensor_slices(([1, 2], [3, 4])).map(lambda a, b: a * b)
        >>> [int(x) for x in ds]
        [3, 8]
        """
        check_callable(fn, "fn", "map")
        check.parallelism(num_parallel_calls, deterministic, "map")
        check.bool_arg(vectorize, "vectorize", "map")
        return Dataset(map_op.MapNode(self._node, fn, num_parallel_calls, deterministic,
                                      vectorize))

    def random_map(self, fn: Callable[..., Any], key: Key, num_parallel_calls: int | None = None,
                   deterministic: bool | None = None, vectorize: bool = False) -> Dataset:
        """Applies ``fn(element, element_key)`` with a key of the element's own.

        ``element_key`` is a NumPy ``uint32[2]`` array: pass it to any
        ``jax.random`` function or to ``np.random.default_rng``. It is a pure
        function of ``key``, the epoch and the element's position, so outputs
        never depend on parallelism or restarts; each epoch (a pass of an
        enclosing ``repeat``, or a new iterator of the dataset) gets fresh keys.
        Different ops of a kind given the same ``key`` see the same per-position
        keys: split the key (``jax.random.split``) per op.

        Args:
          fn: ``fn(element, element_key) -> element`` (tuple elements unpacked,
            the key last).
          key: a JAX PRNG key (``jax.random.key(0)``) or its ``uint32[2]`` data.
          num_parallel_calls: as in ``map``.
          deterministic: as in ``map``.
          vectorize: as in ``map``.

        >>> import jdata, jax, numpy as np
        >>> def noisy():
        ...     return jdata.range(3).random_map(
        ...         lambda x, k: x + np.random.default_rng(k).integers(100), jax.random.key(0))
        >>> [int(x) for x in noisy()] == [int(x) for x in noisy()]  # the same keys, the same stream
        True
        >>> ds = noisy()
        >>> [int(x) for x in ds] == [int(x) for x in ds]  # a second iterator is the next epoch
        False
        """
        check_callable(fn, "fn", "random_map")
        key_data = _random.as_key_data(key)
        check.parallelism(num_parallel_calls, deterministic, "random_map")
        check.bool_arg(vectorize, "vectorize", "random_map")
        return Dataset(random_map.RandomMapNode(self._node, fn, key_data, num_parallel_calls,
                                                deterministic, vectorize))

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keeps the elements for which ``predicate`` returns true.

        >>> import jdata
        >>> [int(x) for x in jdata.range(6).filter(lambda x: x % 2 == 0)]
        [0, 2, 4]
        """
        check_callable(predicate, "predicate", "filter")
        return Dataset(filter_op.FilterNode(self._node, predicate))

    def flat_map(self, fn: Callable[..., Dataset]) -> Dataset:
        """Maps each element to a dataset and concatenates those datasets.

        >>> import jdata
        >>> ds = jdata.range(1, 4).flat_map(lambda x: jdata.from_tensors(x).repeat(x))
        >>> [int(x) for x in ds]
        [1, 2, 2, 3, 3, 3]
        """
        check_callable(fn, "fn", "flat_map")
        return Dataset(flat_map.FlatMapNode(self._node, fn))

    def interleave(self, fn: Callable[..., Dataset], cycle_length: int | None = None,
                   block_length: int | None = 1,
                   num_parallel_calls: int | None = None,
                   deterministic: bool | None = None) -> Dataset:
        """Maps elements to datasets and interleaves them, as tf.data does.

        ``cycle_length`` input elements are open at once; ``block_length``
        consecutive elements are taken from each before moving to the next.

        Args:
          fn: maps an element to a ``Dataset``.
          cycle_length: datasets open at once. ``None`` means
            ``DEFAULT_CYCLE_LENGTH`` (8; tf.data uses the core count, which
            makes the order machine-dependent).
          block_length: consecutive elements from each dataset; ``None`` means 1
            (tf.data's default, which ported code may pass explicitly).
          num_parallel_calls: as in ``map``.
          deterministic: as in ``map``.

        >>> import jdata
        >>> ds = jdata.range(1, 6).interleave(
        ...     lambda x: jdata.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
        >>> "".join(str(int(x)) for x in ds)
        '111122221122333344443344555555'
        """
        check_callable(fn, "fn", "interleave")
        if cycle_length is None or cycle_length == AUTOTUNE:
            cycle_length = DEFAULT_CYCLE_LENGTH
        if block_length is None:
            block_length = 1
        check.int_arg(cycle_length, "cycle_length", "interleave", minimum=1)
        check.int_arg(block_length, "block_length", "interleave", minimum=1)
        check.parallelism(num_parallel_calls, deterministic, "interleave")
        return Dataset(interleave.InterleaveNode(self._node, fn, int(cycle_length),
                                                 int(block_length), num_parallel_calls,
                                                 deterministic))

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: int | None = None,
              deterministic: bool | None = None) -> Dataset:
        """Stacks consecutive elements into batches (a new leading dimension).

        Leaves must have the same shape within a batch (see ``padded_batch``);
        ``bytes``/``str`` leaves batch into NumPy object arrays.

        Args:
          batch_size: elements per batch (>= 1).
          drop_remainder: drop a last batch smaller than ``batch_size``.
          num_parallel_calls: as in ``map``.
          deterministic: as in ``map``.

        >>> import jdata
        >>> [b.tolist() for b in jdata.range(7).batch(3)]
        [[0, 1, 2], [3, 4, 5], [6]]
        >>> [b.tolist() for b in jdata.range(7).batch(3, drop_remainder=True)]
        [[0, 1, 2], [3, 4, 5]]
        """
        check.int_arg(batch_size, "batch_size", "batch", minimum=1)
        check.bool_arg(drop_remainder, "drop_remainder", "batch")
        check.parallelism(num_parallel_calls, deterministic, "batch")
        return Dataset(batch.BatchNode(self._node, int(batch_size), drop_remainder,
                                       num_parallel_calls, deterministic))

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False) -> Dataset:
        """Batches elements, padding each leaf to a common shape.

        Args:
          batch_size: elements per batch (>= 1).
          padded_shapes: per leaf, the shape to pad to; ``None`` or ``-1`` in a
            dimension pads to the longest in the batch. ``None`` (the default)
            pads every dimension to the longest in the batch.
          padding_values: per leaf (or one scalar for all), the pad value;
            default 0 for numbers and ``b""``/``""`` for strings.
          drop_remainder: drop a last batch smaller than ``batch_size``.

        >>> import jdata
        >>> ds = jdata.range(1, 4).map(lambda x: np.arange(x)).padded_batch(2)
        >>> [b.tolist() for b in ds]
        [[[0, 0], [0, 1]], [[0, 1, 2]]]
        """
        check.int_arg(batch_size, "batch_size", "padded_batch", minimum=1)
        check.bool_arg(drop_remainder, "drop_remainder", "padded_batch")
        return Dataset(padded_batch.PaddedBatchNode(
            self._node, int(batch_size), padded_batch.normalize_shapes(padded_shapes),
            padding_values, drop_remainder))

    def unbatch(self) -> Dataset:
        """Splits each element along its first dimension into elements.

        >>> import jdata
        >>> [int(x) for x in jdata.range(5).batch(2).unbatch()]
        [0, 1, 2, 3, 4]
        """
        return Dataset(unbatch.UnbatchNode(self._node))

    def rebatch(self, batch_size: int | Sequence[int], drop_remainder: bool = False) -> Dataset:
        """Re-splits batches into batches of ``batch_size`` rows.

        Same as ``unbatch().batch(batch_size, drop_remainder)``. ``batch_size``
        may be a list of sizes, used in turn (round robin), as in tf.data.

        >>> import jdata
        >>> [b.tolist() for b in jdata.range(7).batch(3).rebatch(2)]
        [[0, 1], [2, 3], [4, 5], [6]]
        >>> [b.tolist() for b in jdata.range(6).batch(6).rebatch([1, 2])]
        [[0], [1, 2], [3], [4, 5]]
        """
        sizes = batch_size if isinstance(batch_size, (list, tuple, np.ndarray)) else [batch_size]
        if len(sizes) == 0:
            raise ValueError("rebatch: batch_size=[] needs at least one size")
        sizes = tuple(check.int_arg(s, "batch_size", "rebatch", minimum=1) for s in sizes)
        check.bool_arg(drop_remainder, "drop_remainder", "rebatch")
        return Dataset(rebatch.RebatchNode(self._node, sizes, drop_remainder))

    @_explains_tf_calls(shuffle.tf_style_error)
    def shuffle(self, key: Key | None = None, buffer_size: int | None = None,
                reshuffle_each_iteration: bool | None = True, *,
                seed: int | None = None) -> Dataset:
        """Shuffles elements with randomness from ``key``.

        Without ``buffer_size`` the input must be random access (a source, and
        maps, batches, takes... of one): the output is a full permutation per
        epoch, with O(1) memory and state. With ``buffer_size`` it has tf.data's
        buffer semantics on any input: a buffer of that many elements, each
        output drawn at random from it and replaced by the next input.

        Args:
          key: a JAX PRNG key (``jax.random.key(0)``) or its ``uint32[2]`` data.
          buffer_size: the buffer's size (>= 1), or ``None`` for a full shuffle.
          reshuffle_each_iteration: a new order each epoch (each pass of an
            enclosing ``repeat``, and each new iterator of the dataset, as in
            tf.data; ``None`` too); ``False`` repeats the first epoch's order.
          seed: tf.data's argument. A call in tf.data's order
            (``shuffle(1024)``, ``shuffle(buffer_size=1024, seed=0)``) is a
            ``TypeError`` that shows jdata's spelling,
            ``shuffle(jax.random.key(0), buffer_size=1024)``.

        >>> import jdata, jax
        >>> ds = jdata.range(5).shuffle(jax.random.key(0))
        >>> sorted(int(x) for x in ds)
        [0, 1, 2, 3, 4]
        """
        if key is None or seed is not None or (
                isinstance(key, (int, np.integer)) and not isinstance(key, bool)):
            positional = () if key is None else (key,) if buffer_size is None else (
                key, buffer_size)
            keywords = {"buffer_size": buffer_size} if key is None and buffer_size else {}
            raise shuffle.tf_style_error(
                positional, {**keywords, **({"seed": seed} if seed is not None else {})})
        key_data = _random.as_key_data(key)
        check.int_arg(buffer_size, "buffer_size", "shuffle", minimum=1, allow_none=True)
        if reshuffle_each_iteration is None:  # tf.data's default, which reshuffles
            reshuffle_each_iteration = True
        check.bool_arg(reshuffle_each_iteration, "reshuffle_each_iteration", "shuffle")
        if buffer_size is None and not self._node.random_access():
            raise ValueError(
                "shuffle: a full shuffle (buffer_size=None) needs a random-access input, but "
                f"this input is not random access ({_first_sequential(self._node)}); pass "
                "buffer_size=N for a buffer shuffle, or shuffle before that op")
        return Dataset(shuffle.ShuffleNode(self._node, key_data, buffer_size,
                                           reshuffle_each_iteration))

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeats the dataset ``count`` times (forever with ``None`` or -1).

        >>> import jdata
        >>> [int(x) for x in jdata.range(2).repeat(3)]
        [0, 1, 0, 1, 0, 1]
        """
        count = check.int_arg(count, "count", "repeat", minimum=-1, allow_none=True)
        return Dataset(repeat.RepeatNode(self._node, None if count in (None, -1) else count))

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all of them with -1).

        >>> import jdata
        >>> [int(x) for x in jdata.range(10).take(3)]
        [0, 1, 2]
        """
        count = check.int_arg(count, "count", "take", minimum=-1)
        return Dataset(take.TakeNode(self._node, count))

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (none with -1).

        >>> import jdata
        >>> [int(x) for x in jdata.range(5).skip(3)]
        [3, 4]
        """
        count = check.int_arg(count, "count", "skip", minimum=-1)
        return Dataset(skip.SkipNode(self._node, count))

    def take_while(self, predicate: Callable[..., Any]) -> Dataset:
        """Elements up to (not including) the first for which ``predicate`` is false.

        >>> import jdata
        >>> [int(x) for x in jdata.range(10).take_while(lambda x: x < 4)]
        [0, 1, 2, 3]
        """
        check_callable(predicate, "predicate", "take_while")
        return Dataset(take_while.TakeWhileNode(self._node, predicate))

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Every ``num_shards``-th element, starting at ``index``.

        For multi-host input use ``shard(jax.process_count(), jax.process_index())``;
        over random-access inputs it reads only this shard's elements.

        >>> import jdata
        >>> [int(x) for x in jdata.range(10).shard(3, 1)]
        [1, 4, 7]
        """
        check.int_arg(num_shards, "num_shards", "shard", minimum=1)
        check.int_arg(index, "index", "shard", minimum=0)
        if index >= num_shards:
            raise ValueError(f"shard: index={index} must be < num_shards={num_shards} "
                             f"(shards are numbered 0 .. {num_shards - 1})")
        return Dataset(shard.ShardNode(self._node, int(num_shards), int(index)))

    def enumerate(self, start: int = 0) -> Dataset:
        """Pairs each element with its position: ``(i, element)``.

        >>> import jdata
        >>> [(int(i), int(x)) for i, x in jdata.range(10, 13).enumerate()]
        [(0, 10), (1, 11), (2, 12)]
        """
        check.int_arg(start, "start", "enumerate")
        return Dataset(enumerate_op.EnumerateNode(self._node, int(start)))

    def concatenate(self, other: Dataset) -> Dataset:
        """This dataset's elements followed by ``other``'s.

        >>> import jdata
        >>> [int(x) for x in jdata.range(2).concatenate(jdata.range(5, 7))]
        [0, 1, 5, 6]
        """
        if not isinstance(other, Dataset):
            raise TypeError(f"concatenate: other={other!r} must be a jdata.Dataset")
        return Dataset(check_inputs_combine(concatenate.ConcatenateNode(self._node, other._node)))

    def window(self, size: int, shift: int | None = None, stride: int = 1,
               drop_remainder: bool = False) -> Dataset:
        """A dataset of windows, each a dataset, as in tf.data.

        Window ``k`` holds input elements ``k*shift + j*stride`` for ``j < size``.
        Each window element has the input's structure with every leaf replaced
        by a ``Dataset`` of that leaf's values (``jdata.zip`` them back).

        Args:
          size: elements per window (>= 1).
          shift: input elements between window starts (default ``size``).
          stride: input elements between a window's elements.
          drop_remainder: drop windows with fewer than ``size`` elements.

        >>> import jdata
        >>> ds = jdata.range(7).window(3, shift=2).flat_map(lambda w: w.batch(3))
        >>> [b.tolist() for b in ds]
        [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]
        """
        check.int_arg(size, "size", "window", minimum=1)
        shift = size if shift is None else check.int_arg(shift, "shift", "window", minimum=1)
        check.int_arg(stride, "stride", "window", minimum=1)
        check.bool_arg(drop_remainder, "drop_remainder", "window")
        return Dataset(window.WindowNode(self._node, int(size), int(shift), int(stride),
                                         drop_remainder))

    def group_by_window(self, key_func: Callable[..., Any],
                        reduce_func: Callable[[Any, Dataset], Dataset],
                        window_size: int | None = None,
                        window_size_func: Callable[[Any], Any] | None = None) -> Dataset:
        """Groups elements by key into windows and reduces each window to a dataset.

        ``key_func(element)`` gives an int key. When a key's group reaches its
        window size, ``reduce_func(key, window_dataset)`` is called and its
        elements are emitted; at the end of the input, the remaining groups are
        reduced in ascending key order (as tf.data does).

        Args:
          key_func: element -> int key.
          reduce_func: ``(key, window: Dataset) -> Dataset``.
          window_size: elements per window, for every key. Exactly one of
            ``window_size`` and ``window_size_func`` must be given.
          window_size_func: key -> window size for that key.

        >>> import jdata
        >>> ds = jdata.range(10).group_by_window(
        ...     key_func=lambda x: x % 2, reduce_func=lambda k, w: w.batch(3), window_size=3)
        >>> [b.tolist() for b in ds]
        [[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]
        """
        check_callable(key_func, "key_func", "group_by_window")
        check_callable(reduce_func, "reduce_func", "group_by_window")
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window: pass exactly one of window_size and "
                             f"window_size_func (got {window_size!r} and {window_size_func!r})")
        if window_size is not None:
            check.int_arg(window_size, "window_size", "group_by_window", minimum=1)
        else:
            check_callable(window_size_func, "window_size_func", "group_by_window")
        return Dataset(group_by_window.GroupByWindowNode(
            self._node, key_func, reduce_func,
            None if window_size is None else int(window_size), window_size_func))

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any],
                                  bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int], padded_shapes: Any = None,
                                  padding_values: Any = None, pad_to_bucket_boundary: bool = False,
                                  no_padding: bool = False,
                                  drop_remainder: bool = False) -> Dataset:
        """Batches elements of similar length together, padding within a bucket.

        An element of length ``L`` goes to bucket ``i`` where
        ``bucket_boundaries[i-1] <= L < bucket_boundaries[i]``; each bucket is
        batched with its own size from ``bucket_batch_sizes`` (one more entry
        than boundaries), using ``group_by_window`` as tf.data does.

        Args:
          element_length_func: element -> int length.
          bucket_boundaries: increasing upper length boundaries.
          bucket_batch_sizes: batch size per bucket (``len(bucket_boundaries) + 1``).
          padded_shapes: as in ``padded_batch``.
          padding_values: as in ``padded_batch``.
          pad_to_bucket_boundary: pad unknown dimensions to the bucket's
            boundary minus one instead of the longest in the batch; elements
            must then be shorter than ``max(bucket_boundaries)``.
          no_padding: batch without padding (elements of a bucket must have equal shapes).
          drop_remainder: drop each bucket's last partial batch.

        >>> import jdata
        >>> ds = jdata.range(1, 7).map(lambda n: np.arange(n)).bucket_by_sequence_length(
        ...     len, bucket_boundaries=[4], bucket_batch_sizes=[2, 2])
        >>> [b.shape for b in ds]
        [(2, 2), (2, 5), (1, 3), (1, 6)]
        """
        return Dataset(bucket_by_sequence_length.build(
            self._node, element_length_func, bucket_boundaries, bucket_batch_sizes,
            padded_shapes, padding_values, pad_to_bucket_boundary, no_padding, drop_remainder))

    def scan(self, initial_state: Any, scan_func: Callable[..., tuple[Any, Any]]) -> Dataset:
        """A running fold: ``scan_func(state, element) -> (new_state, output)``.

        >>> import jdata
        >>> ds = jdata.range(5).scan(np.int64(0), lambda s, x: (s + x, s + x))
        >>> [int(x) for x in ds]
        [0, 1, 3, 6, 10]
        """
        check_callable(scan_func, "scan_func", "scan")
        return Dataset(scan.ScanNode(self._node, _as_state(initial_state, "scan"), scan_func))

    def reduce(self, initial_state: Any, reduce_func: Callable[..., Any]) -> Any:
        """Folds the whole dataset into one value: ``reduce_func(state, element)``.

        >>> import jdata
        >>> int(jdata.range(5).reduce(np.int64(0), lambda s, x: s + x))
        10
        """
        check_callable(reduce_func, "reduce_func", "reduce")
        return scan.reduce(self.iterator(), _as_state(initial_state, "reduce"), reduce_func)

    def unique(self) -> Dataset:
        """Drops elements seen before (scalar int or string elements, as in tf.data).

        >>> import jdata
        >>> [int(x) for x in jdata.from_tensor_slices([1, 3, 1, 2, 3]).unique()]
        [1, 3, 2]
        """
        return Dataset(unique.UniqueNode(self._node))

    def prefetch(self, buffer_size: int) -> Dataset:
        """Prepares up to ``buffer_size`` elements ahead of the consumer.

        ``jdata.AUTOTUNE`` lets the runtime size the buffer. Outputs are unchanged.

        >>> import jdata
        >>> [int(x) for x in jdata.range(3).prefetch(2)]
        [0, 1, 2]
        """
        if buffer_size != AUTOTUNE:
            check.int_arg(buffer_size, "buffer_size", "prefetch", minimum=0)
        return Dataset(prefetch.PrefetchNode(self._node, int(buffer_size)))

    def cache(self, filename: str | None = None) -> Dataset:
        """Keeps the elements after the first complete pass: in memory, or on disk.

        Later passes (epochs of an enclosing ``repeat``, or new iterators of
        this dataset) read the cache. A pass that stops early caches nothing,
        so a cache never holds a truncated dataset. As sources do, the cache
        hands out each element in new containers with read-only arrays: a UDF
        cannot change what a later pass reads.

        Args:
          filename: ``None`` (or ``""``, tf.data's default) caches in memory.
            A path caches to that
            directory (ArrayRecord shards, written atomically as ``save``
            writes; ``pip install 'jdata-jax[io]'``), which later runs of the same
            pipeline reuse: a directory written by a different pipeline
            (another ``fingerprint()``) is an error.

        >>> import jdata
        >>> [int(x) for x in jdata.range(3).map(lambda x: x * x).cache().repeat(2)]
        [0, 1, 4, 0, 1, 4]
        """
        if filename is None or (isinstance(filename, str) and filename == ""):
            return Dataset(cache.CacheNode(self._node))
        from jdata.io import file_cache

        if not isinstance(filename, (str, os.PathLike)) or not os.fspath(filename):
            raise TypeError(f"cache: filename={filename!r} must be a path (or None for memory)")
        return Dataset(file_cache.FileCacheNode(self._node, os.fspath(filename)))

    def snapshot(self, path: str) -> Dataset:
        """Materializes the elements under ``path/<fingerprint>`` on the first complete pass
        and reads them from there afterwards, in this run and in later runs of the same
        pipeline (a changed pipeline gets a new fingerprint, hence a new directory).

        Written atomically, as ``save`` writes (``pip install 'jdata-jax[io]'``).
        """
        from jdata.io import file_cache

        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"snapshot: path={path!r} must be a directory path")
        directory = file_cache.snapshot_directory(path, self._node)
        return Dataset(file_cache.FileCacheNode(self._node, directory, snapshot=True))

    def autocache(self, mode: str | None = None) -> Dataset:
        """Marks a candidate cache point for the data service (``jdata.service``).

        Cachew's autocaching: in the first epoch of a job, the service measures
        what it costs to compute the pipeline, to read the elements at this
        marker back from a cache (then only the ops above the marker run), and
        to read the pipeline's whole output back, and from the next epoch on it
        uses the fastest. Elements stay the same in every case; a cache is
        never taken where it would freeze randomness that must be drawn anew
        each epoch (a ``shuffle(key)`` or ``random_map`` below the point it
        would cache). Locally, without the service, the marker does nothing
        and costs nothing. A pipeline has at most one marker.

        Args:
          mode: ``None`` lets the service decide. ``"compute"`` (never cache),
            ``"marker"`` (cache the elements here) or ``"output"`` (cache the
            pipeline's output) force that choice, for users who know and for
            benchmarks; forcing a cache the pipeline cannot have is an error.

        >>> import jdata
        >>> ds = jdata.range(4).map(lambda x: x * 10).autocache().map(lambda x: x + 1)
        >>> [int(x) for x in ds]
        [1, 11, 21, 31]
        """
        if mode is not None and (not isinstance(mode, str) or mode not in autocache_op.MODES):
            raise ValueError(f"autocache: mode={mode!r} is not one of None (the service "
                             f"decides), {', '.join(map(repr, autocache_op.MODES))}")
        if any(isinstance(n, autocache_op.AutocacheNode) for n in _plan.walk(self._node)):
            raise ValueError("autocache: this pipeline has a marker already, and a pipeline "
                             "has at most one; keep only the autocache() where a cache "
                             "would save the most")
        return Dataset(autocache_op.AutocacheNode(self._node, mode))

    def save(self, path: str) -> dict[str, Any]:
        """Writes every element to a new directory ``path`` that ``jdata.load(path)`` reads.

        ArrayRecord shards of the elements (grain's ``ArrayRecordDataSource``
        reads the records too) and a JSON metadata file with the element
        structure, spec, count and this pipeline's fingerprint. Written to a
        temporary directory renamed into place at the end, so an interrupted
        save leaves nothing at ``path``. Writes local directories (``jdata.load``
        also reads fsspec URLs, e.g. after a copy to ``gs://``). Returns ``{"path", "elements",
        "bytes", "seconds"}``; progress is logged (logger ``"jdata"``, INFO)
        every 10 s.
        """
        from jdata.io import saved

        with self.iterator() as it:
            return saved.save(it, path, self.fingerprint())

    def distribute(self, service: Service, processing_mode: str = "dynamic",
                   job_name: str | None = None,
                   num_consumers: int | None = None, consumer_index: int | None = None,
                   sharing: bool = False, compression: str | None = None,
                   deterministic: bool | None = None) -> Dataset:
        """Runs everything above this point on the workers of a ``jdata.service``.

        Args:
          service: what ``jdata.service.start()`` or ``connect()`` returned.
          processing_mode: ``"dynamic"`` (the dispatcher leases splits of the
            pipeline to workers; every element of an epoch arrives exactly
            once, even when workers die), ``"static"`` (split ``i`` on worker
            ``i mod W``, re-run elsewhere if that worker dies) or ``"off"``
            (every worker runs the whole pipeline, as tf.data's OFF).
          job_name: every iterator that names the same job (and pipeline), in
            this process or another, joins one job: the job, not the dataset,
            owns the epoch and the splits, and each element of an epoch goes to
            one of them (tf.data's rule). ``None``: a job of this iterator's own
            (the dataset's Nth iterator runs epoch N).
          num_consumers: coordinated reads for synchronous training
            (tf.data's): the ``num_consumers`` consumers of a named,
            infinite job read in rounds, every consumer round ``r`` from the
            same worker, consumer ``consumer_index`` its element of the round's
            group of consecutive elements; with
            ``bucket_by_sequence_length(C * b).rebatch(b)`` above, a step's
            batches have similar lengths. A round not ready within 2 s is
            skipped by all consumers together.
          consumer_index: this consumer's index, below ``num_consumers``.
          sharing: jobs that name the same ``job_name`` and run the same
            pipeline read one stream, each at its own pace, through sliding
            windows of recent elements on the workers (tf.data's ephemeral
            data sharing): the pipeline is computed once for all of them. The
            stream is cut in slots (one per worker when the job starts), each
            the whole pipeline with randomness of its own, read in turn. A job
            that falls behind a window skips to its start; ``it.stats()`` and
            ``svc.status()`` count what it skipped. A finite pipeline ends
            when every slot's stream has.
          compression: ``"lz4"`` or ``"zstd"`` compresses blocks between
            workers and this process (for links between nodes); ``None`` sends
            them as they are, without copies on one node.
          deterministic: yield splits in split order, so an index-based
            pipeline gives exactly the local stream; ``None`` follows
            ``Options.deterministic``.
        """
        from jdata.service import Service
        from jdata.service import _blocks, client

        if not isinstance(service, Service):
            raise TypeError(f"distribute: service={service!r} must be what "
                            "jdata.service.start() or connect() returned")
        client.check_mode(processing_mode)
        if job_name is not None and (not isinstance(job_name, str) or not job_name):
            raise TypeError(f"distribute: job_name={job_name!r} must be a non-empty str")
        check.bool_arg(sharing, "sharing", "distribute")
        if (num_consumers is None) != (consumer_index is None):
            raise ValueError("distribute: pass num_consumers and consumer_index together "
                             f"(got num_consumers={num_consumers!r}, consumer_index="
                             f"{consumer_index!r})")
        if num_consumers is not None:
            count, index = check.as_int(num_consumers), check.as_int(consumer_index)
            if count is None or count < 1:
                raise ValueError(f"distribute: num_consumers={num_consumers!r} must be an "
                                 "int >= 1")
            if index is None or not 0 <= index < count:
                raise ValueError(f"distribute: consumer_index={consumer_index!r} must be an "
                                 f"int in [0, {count})")
            num_consumers, consumer_index = count, index  # NumPy's ints become Python's
            if sharing:
                raise ValueError("distribute: coordinated reads (num_consumers) and "
                                 "sharing=True are different jobs; choose one")
        if sharing or num_consumers is not None:
            what = "sharing=True" if sharing else "num_consumers"
            if job_name is None:
                raise ValueError(f"distribute({what}): name the job (job_name=...): the "
                                 "consumers that name it read together")
            if processing_mode not in ("dynamic", "off"):
                raise ValueError(f"distribute({what}): processing_mode="
                                 f"{processing_mode!r}: its workers each run the whole "
                                 "pipeline (processing_mode='off', the default here)")
            if num_consumers is not None and self.cardinality() not in (INFINITE, UNKNOWN):
                raise ValueError(
                    "distribute(num_consumers) needs an infinite pipeline above it (add "
                    ".repeat()), as tf.data's: its consumers read rounds with no end of an "
                    "epoch to agree on")
            processing_mode = "off"
        if deterministic is not None:
            check.bool_arg(deterministic, "deterministic", "distribute")
        if compression not in (None,) + _blocks.CODECS:
            raise ValueError(f"distribute: compression={compression!r} must be None, 'lz4' or "
                             "'zstd'")
        if processing_mode != "off":
            client.check_splittable(self._node, processing_mode)
        return Dataset(client.DistributeNode(self._node, service.ref, processing_mode,
                                             job_name, deterministic, compression, sharing,
                                             num_consumers, consumer_index))

    def to_global(self, sharding: Any, prefetch: int = 2,
                  normalize: tuple[Any, Any] | None = None) -> Dataset:
        """Per-host batches as global ``jax.Array``s, ``prefetch`` of them on the devices ahead.

        Each host's batch becomes its part of a global array through
        ``jax.make_array_from_process_local_data(sharding, batch)``: with a
        ``NamedSharding`` whose first axis is sharded over the data-parallel
        mesh axis, every host contributes its rows. A background thread keeps
        up to ``prefetch`` batches transferred ahead (``0``: convert on the
        consumer's thread), so transfers overlap the training step. The
        iterator's state leaves out the batches already on the devices: a
        restore transfers them again, exactly.

        ``None`` in a pytree of shardings keeps the leaves below it on the
        host: they come out as the per-host NumPy batch, unchanged (ids,
        ``bytes`` and ``str`` leaves, which a ``jax.Array`` cannot hold), in
        the same element as their batch's device leaves.

        Every batch must split evenly over the devices: its rows on this host
        a multiple of the number of row blocks the sharding puts on this
        host's devices (one host: all of them; the global batch is then the
        hosts' batches together). Batch sizes known when the dataset is built
        (``batch(n)``, with its last batch where the input's cardinality is
        known) are checked then; others when the batch arrives. Batch with
        ``drop_remainder=True`` so that a short last batch is dropped.

        With ``normalize=(mean, std)``, images travel as ``uint8`` and are
        normalized on the devices: every ``uint8`` leaf that has a sharding
        becomes ``(x - mean) / std`` in ``float32`` (one compiled program
        per shape, dispatched as the batch arrives), after a quarter of the
        bytes of ``float32`` crossed to the devices; other leaves are left
        as they are. Use it in place of ``map(jdata.ops.image.normalize(mean,
        std))``.

        Args:
          sharding: a ``jax.sharding.Sharding`` for every leaf, or a pytree
            with the elements' structure (or a prefix of it) whose leaves are
            shardings, or ``None`` for leaves kept on the host.
          prefetch: batches kept on the devices ahead of the consumer.
          normalize: ``None``, or ``(mean, std)``, each a number or one per
            channel (the last axis) of the ``uint8`` device leaves.

        Raises:
          TypeError: ``sharding`` is not a sharding or such a pytree, or a
            ``bytes``/``str`` leaf has a sharding, or ``normalize`` is not a
            ``(mean, std)`` pair.
          ValueError: the pytree does not match the elements, or a batch does
            not split evenly over the devices, or ``normalize`` has no
            ``uint8`` device leaf or a leaf of other channels (when the
            dataset is built where its spec and batch sizes are known, else
            at that batch).

        >>> import jax, numpy as np, jdata
        >>> mesh = jax.sharding.Mesh(jax.devices(), ("data",))
        >>> rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        >>> n = 2 * jax.device_count()  # a multiple of the devices the rows are split over
        >>> ds = jdata.from_tensor_slices({"x": np.arange(4 * n, dtype=np.float32),
        ...                                "id": [b"%d" % i for i in range(4 * n)]})
        >>> ds = ds.batch(n, drop_remainder=True)
        >>> first = ds.to_global({"x": rows, "id": None}).take(1).get_single_element()
        >>> type(first["x"]).__name__, type(first["id"]).__name__, first["id"][:2].tolist()
        ('ArrayImpl', 'ndarray', [b'0', b'1'])
        >>> ds.to_global(rows)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        TypeError: to_global: the leaf at ['id'] holds bytes or str, ... put None at its place...
        >>> images = jdata.from_tensors(np.full((n, 4, 4, 3), 255, np.uint8))
        >>> batch = images.to_global(rows, normalize=(127.5, 127.5)).get_single_element()
        >>> batch.dtype, float(batch.max())
        (dtype('float32'), 1.0)
        """
        from jdata.hosts import shardings, to_global

        shardings.check_argument(sharding)
        check.int_arg(prefetch, "prefetch", "to_global", minimum=0)
        normalize = to_global.normalize_argument(normalize)
        to_global.check_input(self._node, sharding, normalize)
        return Dataset(to_global.ToGlobalNode(self._node, sharding, int(prefetch), normalize))

    def ignore_errors(self, log_warning: bool = False) -> Dataset:
        """Drops elements whose processing raised in a UDF upstream.

        Args:
          log_warning: log each dropped element's error as a warning.

        >>> import jdata
        >>> ds = jdata.from_tensor_slices([1., 0., 2.]).map(lambda x: 1 / int(x))
        >>> [float(x) for x in ds.ignore_errors()]
        [1.0, 0.5]
        """
        check.bool_arg(log_warning, "log_warning", "ignore_errors")
        return Dataset(ignore_errors.IgnoreErrorsNode(self._node, log_warning))

    def apply(self, fn: Callable[[Dataset], Dataset]) -> Dataset:
        """Applies a function that transforms whole datasets: ``fn(self)``.

        >>> import jdata
        >>> [int(x) for x in jdata.range(5).apply(lambda ds: ds.skip(3))]
        [3, 4]
        """
        check_callable(fn, "fn", "apply")
        out = fn(self)
        if not isinstance(out, Dataset):
            raise TypeError(f"apply: fn returned {type(out).__name__}, not a jdata.Dataset")
        return out

    def with_options(self, options: Options) -> Dataset:
        """Sets pipeline options; fields set here override those set upstream.

        >>> import jdata
        >>> jdata.range(3).with_options(jdata.Options(deterministic=False)).options.deterministic
        False
        """
        if not isinstance(options, Options):
            raise TypeError(f"with_options: options={options!r} must be a jdata.Options")
        return Dataset(options_op.OptionsNode(self._node, options))

    def with_service(self, service: Service) -> Dataset:
        """Lets Cedar's planner run part of the pipeline on ``service``.

        ``Options(service=service)``, with ``Options(plan=jdata.AUTOTUNE)`` unless a
        plan is set upstream: the planner profiles the first iterator and may cut the
        pipeline, running the part below the cut on the service's workers (as
        ``distribute(service)`` there would), with as many workers as the consumer's
        demand needs, and none when this process keeps up (see ``Options.plan``).

        Args:
          service: what ``jdata.service.start()`` or ``connect()`` returned.
        """
        if self.options.plan is not None:  # pins set upstream stay
            return self.with_options(Options(service=service))
        return self.with_options(Options(service=service, plan=AUTOTUNE))

    def get_single_element(self) -> Any:
        """The dataset's only element; raises if it has zero or several.

        >>> import jdata
        >>> int(jdata.from_tensors(np.int64(7)).get_single_element())
        7
        """
        with self.iterator() as it:
            try:
                element = next(it)
            except StopIteration:
                raise ValueError("get_single_element: the dataset is empty") from None
            try:
                next(it)
            except StopIteration:
                return element
        raise ValueError("get_single_element: the dataset has more than one element")


def check_inputs_combine(node: _plan.Node) -> _plan.Node:
    """tf.data's build-time check that a node's inputs combine, where it runs no user code.

    The node's spec does the check; with UDFs in the plan that spec needs
    elements, so the check waits for iteration (or ``element_spec``).
    """
    if _plan.spec_is_static(node) and all(n.cardinality() != 0 for n in node.inputs()):
        node.element_spec()
    return node


def _explain(node: _plan.Node, indent: int, ctx: Context, names: dict[int, str]) -> list[str]:
    line = "  " * indent + f"{node}  [{_count(node.cardinality())}]"
    if id(node) in names:  # the plan that runs: its ops' names, as stats() gives them
        line += f"  op: {names[id(node)]}"
    where = _placement.describe_engine(node, ctx)
    lines = [f"{line}  {where}" if where else line]
    for child in node.inputs():
        lines += _explain(child, indent + 1, ctx, names)
    return lines


def _count(n: int) -> str:
    return {INFINITE: "infinite", UNKNOWN: "unknown"}.get(n, str(n))


def _first_sequential(node: _plan.Node) -> str:
    """Names the op that makes ``node`` lose random access, for error messages."""
    for child in node.inputs():
        if not child.random_access():
            return _first_sequential(child)
    return str(node)


def _as_state(state: Any, op: str) -> Any:
    """Converts a user's initial state to NumPy leaves, checking that it is a pytree."""
    if state is None:
        raise TypeError(f"{op}: initial_state=None; pass the initial state, e.g. np.int64(0)")
    if callable(state):
        raise TypeError(f"{op}: initial_state={state!r} is a function; pass a value")
    from jdata import _tree
    return _tree.normalize(state, op)

