"""Shared test helpers: element comparison and the checkpoint round trip."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

import jdata


def plan_ops(node) -> list[str]:
    """The op names of a plan's first-input chain, from the root down."""
    out = []
    while True:
        out.append(node.op_name)
        if not node.inputs():
            return out
        node = node.inputs()[0]


def materialize(value):
    """Turns an element into comparable plain data; nested datasets become lists."""
    if isinstance(value, jdata.Dataset):
        return [materialize(e) for e in value]
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[materialize(v) for v in value])
    if isinstance(value, (tuple, list)):
        return type(value)(materialize(v) for v in value)
    return value


def assert_elements_equal(actual, expected, context: str = "") -> None:
    """Elements equal leaf by leaf, with the same structure, dtypes and shapes."""
    actual, expected = materialize(actual), materialize(expected)
    a_leaves, a_tree = jax.tree_util.tree_flatten(actual)
    e_leaves, e_tree = jax.tree_util.tree_flatten(expected)
    assert a_tree == e_tree, f"{context}structure {a_tree} != {e_tree}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, (bytes, str)):
            assert a == e, f"{context}leaf {i}: {a!r} != {e!r}"
            continue
        a_arr, e_arr = np.asarray(a), np.asarray(e)
        where = f"{context}leaf {i}"
        assert a_arr.shape == e_arr.shape, f"{where}: shape {a_arr.shape} != {e_arr.shape}"
        if e_arr.dtype != object:
            assert a_arr.dtype == e_arr.dtype, f"{where}: dtype {a_arr.dtype} != {e_arr.dtype}"
        assert np.array_equal(a_arr, e_arr), f"{context}leaf {i}: {a_arr!r} != {e_arr!r}"


def assert_same_sequence(actual: list, expected: list, context: str = "") -> None:
    assert len(actual) == len(expected), (
        f"{context}{len(actual)} elements != {len(expected)} expected")
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_elements_equal(a, e, f"{context}element {i}: ")


def take_list(ds: jdata.Dataset, limit: int | None = None) -> list:
    """The dataset's elements (the first ``limit`` of them), materialized."""
    out = []
    with ds.iterator() as it:
        for element in it:
            out.append(materialize(element))
            if limit is not None and len(out) >= limit:
                break
    return out


def check_restore_at_every_step(ds: jdata.Dataset, expected: list | None = None,
                                limit: int | None = None) -> list:
    """Checks that restoring at every step yields exactly the remaining elements.

    For every step ``k`` (0 .. n), the state after ``k`` elements is sent
    through JSON and restored both into a new iterator (``ds.iterator(state)``)
    and into an iterator that has already moved (``set_state``); each must
    produce elements ``k:`` of the uninterrupted run. ``limit`` bounds
    infinite datasets. Returns the full sequence.

    Each new iterator of ``ds`` is a new epoch, so the checked iterator starts
    from the uninterrupted run's first state (its epoch); the moved iterators
    run later epochs until ``set_state`` brings them back.
    """
    first = ds.iterator()
    start = json.loads(json.dumps(first.get_state()))
    full = _rest(first, limit)
    if expected is not None:
        assert_same_sequence(full, expected, "uninterrupted run: ")
    it = ds.iterator(start)
    for step in range(len(full) + 1):
        state = json.loads(json.dumps(it.get_state()))
        remaining = None if limit is None else limit - step
        fresh = _rest(ds.iterator(state), remaining)
        assert_same_sequence(fresh, full[step:], f"restored at step {step}: ")
        moved = ds.iterator()  # a later epoch, which may be shorter (random lengths)
        next(moved, None)
        moved.set_state(state)
        assert_same_sequence(_rest(moved, remaining), full[step:],
                             f"set_state on a moved iterator at step {step}: ")
        if step < len(full):
            assert_elements_equal(next(it), full[step], f"original iterator step {step}: ")
    if limit is None:
        assert _rest(it, None) == [], "the iterator continued past the end"
    return full


def _rest(it, remaining: int | None) -> list:
    out = []
    with it:
        for element in it:
            if remaining is not None and len(out) >= remaining:
                break
            out.append(materialize(element))
    return out


def assert_read_only_write(ds: jdata.Dataset) -> None:
    """Iterating ``ds`` fails with NumPy's read-only error (a UDF wrote in place)."""
    with pytest.raises(jdata.UDFError) as info:
        list(ds)
    cause = info.value.__cause__
    assert isinstance(cause, ValueError) and "read-only" in str(cause), repr(cause)


def add_one_in_place(x):
    """A UDF that writes its input array in place (which sources must not allow)."""
    x += 1
    return x


def pop_x(element):
    """A UDF that takes its element's ``"x"`` out (which must not change the source)."""
    return element.pop("x")


# Where a map's UDF runs: inline, on 2 threads, or in 2 worker processes.
UDF_PATHS = ("inline", "threads", "processes")


def map_on(ds: jdata.Dataset, fn, path: str) -> jdata.Dataset:
    """``ds.map(fn)`` with ``fn`` run on ``path`` (one of ``UDF_PATHS``)."""
    if path == "inline":
        return ds.map(fn)
    mapped = ds.map(fn, num_parallel_calls=2)
    if path == "processes":
        return mapped.with_options(jdata.Options(engine="processes"))
    return mapped


def use_per_element_paths(monkeypatch) -> None:
    """Turns off the block paths (``read_block``, ``next_many``, the block filter).

    What runs then is the element-by-element code that the block paths must
    match in elements, errors and states.
    """
    from jdata.ops import filter as filter_op
    from jdata.ops import map as map_op
    from jdata.ops import range as range_op
    from jdata.ops import skip as skip_op
    from jdata.ops import take as take_op
    from jdata.runtime import iterator

    monkeypatch.setattr(iterator.IndexIterator, "next_many", iterator.Iterator.next_many)
    for reader in (range_op._RangeReader, map_op._MapReader, take_op._TakeReader,
                   skip_op._SkipReader):
        monkeypatch.delattr(reader, "read_block")
    monkeypatch.setattr(filter_op, "_BlockFilterIterator", filter_op._FilterIterator)


def use_small_filter_blocks(monkeypatch) -> None:
    """Blocks of 2, 4 and then 8 elements, so that short inputs cross many block ends."""
    from jdata.ops import filter as filter_op

    monkeypatch.setattr(filter_op, "_MIN_BLOCK", 2)
    monkeypatch.setattr(filter_op, "_MAX_BLOCK", 8)


def trace(it, max_steps: int = 10_000) -> list:
    """Every ``next`` of ``it`` until the end: ``("element", e)`` or ``("error", ...)``,
    each with the JSON state after it. Iteration goes on after an error, as it may.
    """
    out = []
    with it:
        for _ in range(max_steps):
            try:
                step = ("element", materialize(next(it)))
            except StopIteration:
                break
            except Exception as e:  # part of the trace
                cause = type(e.__cause__).__name__ if e.__cause__ else None
                step = ("error", type(e).__name__, getattr(e, "op", None),
                        getattr(e, "position", None), cause)
            out.append((step, json.loads(json.dumps(it.get_state()))))
        else:
            raise AssertionError(f"more than {max_steps} steps")
    return out


def assert_same_traces(actual: list, expected: list) -> None:
    assert len(actual) == len(expected), f"{len(actual)} steps != {len(expected)} expected"
    for i, ((a_step, a_state), (e_step, e_state)) in enumerate(zip(actual, expected)):
        if a_step[0] == e_step[0] == "element":
            assert_elements_equal(a_step[1], e_step[1], f"step {i}: ")
        else:
            assert a_step == e_step, f"step {i}: {a_step} != {e_step}"
        assert a_state == e_state, f"step {i}: state {a_state} != {e_state}"


def check_blocks_match_per_element(make_ds, monkeypatch) -> list:
    """``make_ds()`` through the block paths gives the per-element trace, and restores.

    Elements, errors (type, op, position, cause) and the state after every
    step must be those of the per-element paths; restoring the state after
    step ``k`` must give the rest of the trace. Returns the trace.
    """
    ds = make_ds()
    it = ds.iterator()
    start = it.get_state()  # the epoch's beginning (a new iterator is the next epoch)
    blocks = trace(it)
    for step in range(len(blocks) + 1):
        state = blocks[step - 1][1] if step else start
        assert_same_traces(trace(ds.iterator(state)), blocks[step:])
    with monkeypatch.context() as patch:
        use_per_element_paths(patch)
        per_element = trace(make_ds().iterator())
    assert_same_traces(blocks, per_element)
    return blocks


def read_through_data_errors(ds: jdata.Dataset) -> tuple[list, list]:
    """Every element of ``ds``, going on after each ``jdata.DataError``; and the errors as
    ``(path, record)``, each checked to name its file."""
    elements, errors = [], []
    it = ds.iterator()
    while True:
        try:
            elements.append(next(it))
        except StopIteration:
            return elements, errors
        except jdata.DataError as e:
            assert e.path in str(e)
            errors.append((e.path, e.record))


def open_files_under(directory) -> int:
    """How many descriptors of this process are open on files under ``directory``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        count += target.startswith(str(directory))
    return count
