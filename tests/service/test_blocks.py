"""jdata.service's data plane without Ray: blocks stack exactly (every element comes back
with its type, dtype, shape, bits and key order), and a worker's stream of blocks holds every
outcome of its split once, in order, however its ``next_many`` fails."""

import collections
import dataclasses
import pickle
import struct

import jax
import numpy as np
import pytest

import jdata
from jdata import _planner
from jdata.runtime.context import Context
from jdata.service import _blocks, splits, worker

Point = collections.namedtuple("Point", "x y")
_NAN_PAYLOAD = struct.unpack("<f", struct.pack("<I", 0x7FC0ABCD))[0]


def _same(a, b, where="element"):
    """Equal to the bit, with the same types, dtypes, shapes and dict key order."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b), f"{where}: {a!r} != {b!r}"
        if a.dtype.kind in "OUS":
            assert np.array_equal(a, b), where
        else:
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _through_ray(elements, failures=()):
    """What the client gets: the packed block pickled (protocol 5, as Ray does), unpacked."""
    payload = _blocks.encode(elements, failures)
    packed = _blocks.pack(payload, failures, _blocks.nbytes(payload, elements), None)
    back, failures, nbytes = _blocks.unpack(pickle.loads(pickle.dumps(packed, protocol=5)), None)
    assert nbytes == _blocks.nbytes(payload, elements)
    return back, failures


BLOCKS = {
    "int64 scalars": [np.int64(i) for i in range(50)],
    "every scalar dtype": [[np.dtype(d).type(i) for i in range(5)] for d in
                           ("b1", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4",
                            "f8", "c8", "c16")],
    "nan payload": [np.float32(_NAN_PAYLOAD), np.float32(-0.0), np.float32(np.inf)],
    "0-d arrays": [np.array(i, np.int32) for i in range(7)],
    "arrays": [np.arange(12, dtype=np.float32).reshape(3, 4) + i for i in range(6)],
    "fortran arrays": [np.asfortranarray(np.arange(6).reshape(2, 3) * i) for i in range(3)],
    "dict key order": [{"b": np.int64(i), "a": np.full(2, i, np.uint8)} for i in range(9)],
    "nested": [({"x": (np.float64(i), np.array([i, i])), "t": b"%d" % i}, np.int8(i))
               for i in range(5)],
    "text": [{"text": "é%d" % i, "raw": b"\x00" * i, "n": np.int32(i)} for i in range(4)],
    "only text": ["a", "bc", ""],
    "empty containers": [{} for _ in range(3)] + [()],
    "empty dicts": [{} for _ in range(3)],
    "empty tuples": [() for _ in range(3)],
    "mixed scalar dtypes": [np.int32(1), np.int64(2), np.int32(3)],
    "scalar and 0-d array": [np.int64(1), np.array(2, np.int64)],
    "ragged arrays": [np.zeros(i, np.float32) for i in range(4)],
    "datetime units": [np.datetime64(1, "s"), np.datetime64(1, "ms")],
    "object arrays": [np.array([b"a", 1], dtype=object), np.array([b"b", 2], dtype=object)],
    "namedtuples": [Point(np.int64(i), np.int64(-i)) for i in range(3)],
    "lists": [[np.int64(i), np.int64(i)] for i in range(3)],
    "dict then tuple": [{"a": np.int64(1)}, (np.int64(1),)],
    "different keys": [{"a": np.int64(1)}, {"b": np.int64(1)}],
    "same keys, other order": [{"a": np.int64(1), "b": np.int64(2)},
                               {"b": np.int64(2), "a": np.int64(1)}],
    "subclass": [np.ma.masked_array([1, 2]), np.ma.masked_array([3, 4])],
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_a_block_comes_back_element_for_element(name):
    block = BLOCKS[name]
    rows = [block] if name != "every scalar dtype" else block
    for elements in rows:
        back, failures = _through_ray(list(elements))
        assert failures == () and len(back) == len(elements)
        for i, (a, e) in enumerate(zip(back, elements)):
            if name == "subclass":  # kept as it was sent: compare the data
                assert type(a) is type(e) and np.array_equal(a, e)
                continue
            _same(a, e, f"{name}, element {i}")


@pytest.mark.parametrize("name", ["int64 scalars", "0-d arrays", "arrays", "dict key order",
                                  "nested", "text", "empty dicts", "every scalar dtype"])
def test_same_structured_numeric_blocks_travel_stacked(name):
    rows = BLOCKS[name] if name == "every scalar dtype" else [BLOCKS[name]]
    for elements in rows:
        assert type(_blocks.encode(elements)) is _blocks.Columns, name


@pytest.mark.parametrize("name", ["only text", "mixed scalar dtypes", "dict then tuple",
                                  "different keys", "namedtuples", "lists",
                                  "same keys, other order"])
def test_blocks_that_do_not_stack_travel_as_lists(name):
    assert type(_blocks.encode(BLOCKS[name])) is list


def test_big_arrays_and_single_elements_are_not_copied_into_a_stack():
    big = [np.zeros(_blocks.STACK_BYTES, np.uint8) for _ in range(3)]
    one = big[:1]
    assert type(_blocks.encode(big)) is list and _blocks.encode(one) is one
    mixed = _blocks.encode([{"image": b, "label": np.int64(i)} for i, b in enumerate(big)])
    assert type(mixed) is _blocks.Columns
    assert all(e["image"] is b for e, b in zip(mixed.elements(), big))


def test_stacked_arrays_arrive_read_only_views_of_one_buffer():
    elements = [np.full((64, 64), i, np.uint8) for i in range(8)]
    columns = _blocks.encode(elements)
    assert _blocks.nbytes(columns, elements) == 8 * 64 * 64
    back = columns.elements()
    assert all(b.base is columns.tree.values for b in back)


def test_a_block_with_failures_names_their_places():
    error = jdata.UDFError("map", 3, ValueError("bad"))
    elements = [np.int64(0), _blocks.Failure(error), np.int64(2)]
    back, failures = _through_ray(elements, (1,))
    assert failures == (1,) and isinstance(back[1], _blocks.Failure)
    assert isinstance(back[1].error, jdata.UDFError) and back[1].error.position == 3
    _same(back[0], elements[0])
    _same(back[2], elements[2])


@pytest.mark.parametrize("compression", _blocks.CODECS)
def test_compressed_blocks_come_back_the_same(compression):
    for name in ("arrays", "text", "dict key order"):
        elements = BLOCKS[name]
        packed = _blocks.pack(_blocks.encode(elements), (), 1234, compression)
        assert isinstance(packed, bytes)
        back, failures, nbytes = _blocks.unpack(packed, compression)
        assert failures == () and nbytes == 1234
        for a, e in zip(back, elements):
            _same(a, e, name)


def test_block_sizes_grow_while_cheap_and_stop_at_the_limits():
    size = 16
    assert worker.next_block_size(size, size, 8 * size, 0.001) == 2 * size
    assert worker.next_block_size(size, size, 8 * size, 2 * worker.BLOCK_SEC) == size
    assert worker.next_block_size(64, 64, 8 * 64, 1.0) == 32  # slow: halves
    assert worker.next_block_size(size, size - 1, 8, 0.001) == size  # the split ended
    assert worker.next_block_size(worker.BLOCK_ELEMENTS, worker.BLOCK_ELEMENTS, 8,
                                  0.0) == worker.BLOCK_ELEMENTS
    # 1 MB elements: a block holds BLOCK_BYTES of them, at least one.
    assert worker.next_block_size(16, 16, 16 << 20, 0.0) == worker.BLOCK_BYTES >> 20
    assert worker.next_block_size(16, 1, 64 << 20, 0.0) == 1


# ---------------------------------------------------------------- a worker's stream


def _fails_on(bad):
    def fn(x):
        if int(x) in bad:
            raise ValueError(f"bad element {int(x)}")
        return x * 2
    return fn


def _outcomes(elements):
    return [("error", e.error.op, e.error.position) if isinstance(e, _blocks.Failure)
            else ("element", int(e)) for e in elements]


def _expected(ds, epoch=0, skip=0):
    """The local outcomes of ``ds`` one by one, past ``skip``."""
    it = _planner.make_iterator(ds._optimize().plan, Context(ds.options), epoch)
    try:
        out = []
        while True:
            try:
                out.append(("element", int(next(it))))
            except StopIteration:
                return out[skip:]
            except jdata.UDFError as e:
                out.append(("error", e.op, e.position))
    finally:
        it.close()


def _spec(cut, i=0):
    return dataclasses.asdict(cut.split(i))


def _worker_with(ds, job="job"):
    w = worker.Worker("w0")
    w._plans[job] = worker._Plan((ds._optimize().plan, ds.options))  # as if fetched
    return w


def _received(stream):
    out, sizes = [], []
    for packed in stream:
        elements, failures, _ = _blocks.unpack(packed, None)
        assert all(isinstance(elements[i], _blocks.Failure) for i in failures)
        assert sum(isinstance(e, _blocks.Failure) for e in elements) == len(failures)
        out += elements
        sizes.append(len(elements))
    return _outcomes(out), sizes


@pytest.mark.parametrize("parallel", [None, 2])
@pytest.mark.parametrize("skip", [0, 1, 40, 299])
def test_a_split_read_holds_every_outcome_once_even_when_next_many_loses_some(parallel, skip):
    # A parallel map's next_many raises at a failing element and loses the ones it pulled
    # before it: the worker reads again past what it sent, element by element.
    ds = jdata.range(300).map(_fails_on({5, 77, 78, 250}), num_parallel_calls=parallel)
    cut = splits.plan_splits(ds._optimize().plan, ds.options, target_elements=300, epoch=0)
    assert cut.num_splits == 1
    w = _worker_with(ds)
    got, sizes = _received(w.read_split(_read(_spec(cut), skip)))
    assert got == _expected(ds, skip=skip)
    assert w._stats.snapshot()["active"] == 0  # the read has ended


def test_blocks_start_small_and_grow_on_a_cheap_pipeline():
    ds = jdata.range(100_000).map(lambda x: x + 1)
    cut = splits.plan_splits(ds._optimize().plan, ds.options, target_elements=100_000,
                             epoch=0)
    got, sizes = _received(_worker_with(ds).read_split(_read(_spec(cut))))
    assert len(got) == 100_000 and sizes[0] == worker.FIRST_BLOCK
    assert max(sizes) >= 1024 and sum(sizes) == 100_000
    w = _worker_with(ds)  # the job's next read starts where the last one got to
    list(w.read_split(_read(_spec(cut), 99_000)))
    _, again = _received(w.read_split(_read(_spec(cut))))
    assert again[0] > worker.FIRST_BLOCK


def test_big_elements_travel_a_few_per_block():
    ds = jdata.range(12).map(lambda x: np.full(3 << 20, x, np.uint8))
    cut = splits.plan_splits(ds._optimize().plan, ds.options, target_elements=12, epoch=0)
    w = _worker_with(ds)
    sizes = [len(_blocks.unpack(p, None)[0])
             for p in w.read_split(_read(_spec(cut)))]
    assert sizes[0] == worker.FIRST_BLOCK == 1 and sum(sizes) == 12
    assert max(sizes) == 1  # two would pass BLOCK_BYTES
    assert w._stats.snapshot()["bytes"] == 12 * (3 << 20)


@pytest.mark.parametrize("skip", [0, 3, 150])
def test_the_whole_plan_read_holds_every_outcome_once(skip):
    key = jax.random.key(0)
    ds = jdata.range(200).shuffle(key, buffer_size=16).map(_fails_on({3, 4, 120}),
                                                           num_parallel_calls=2)
    got, _ = _received(_worker_with(ds).read_slot(_read(0, skip)))  # slot 0: the local epoch
    assert got == _expected(ds, skip=skip)


def _read(unit, skip=0, checked=False, job="job"):
    return worker.ReadSpec(job, "fp", None, 0, unit, skip, None, checked)


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("this element cannot be pickled")


def _unpicklable_at(bad):
    def fn(x):  # an object array (a valid leaf) holding what cannot be pickled
        return np.array(_Unpicklable(), dtype=object) if int(x) in bad else x
    return fn


def test_a_checked_read_sends_an_element_that_cannot_be_pickled_as_an_element_error():
    """Issue 23: Ray could not pickle an element and the split ended (a loop that caught
    the error and went on lost 36 of 40 elements). A checked read (what the client asks
    for after such a failure) sends an ElementError in its place and all the rest."""
    ds = jdata.range(40).map(_unpicklable_at({3}))
    cut = splits.plan_splits(ds._optimize().plan, ds.options, target_elements=40, epoch=0)
    packed = list(_worker_with(ds).read_split(_read(_spec(cut), checked=True)))
    elements = [e for p in packed for e in _blocks.unpack(p, None)[0]]
    assert [int(e) for i, e in enumerate(elements) if i != 3] == [i for i in range(40) if i != 3]
    assert isinstance(elements[3], _blocks.Failure)
    assert isinstance(elements[3].error, jdata.ElementError)
    assert "cannot be sent" in str(elements[3].error) and elements[3].error.position == 3
    pickle.dumps(packed)  # everything sent pickles, the error too


class _Broken:
    """A source whose element 7 raises something other than a user function's error."""

    def __len__(self):
        return 20

    def __getitem__(self, i):
        if i == 7:
            raise MemoryError("the worker ran out of memory on element 7")
        return np.int64(i)


def test_a_non_udf_error_on_a_worker_is_that_elements_error_and_the_split_goes_on():
    ds = jdata.from_source(_Broken())
    cut = splits.plan_splits(ds._optimize().plan, ds.options, target_elements=20, epoch=0)
    got, _ = _received(_worker_with(ds).read_split(_read(_spec(cut))))
    assert [o for o in got if o[0] == "element"] == [("element", i) for i in range(20) if i != 7]
    assert got[7][0] == "error" and len(got) == 20


def test_a_stopped_jobs_read_ends_at_its_next_block():
    ds = jdata.range(10**6)
    cut = splits.plan_splits(ds._optimize().plan, ds.options, target_elements=10**6, epoch=0)
    w = _worker_with(ds, job="stopped")
    stream = w.read_split(_read(_spec(cut), job="stopped"))
    next(stream)
    w.stop_job("stopped")  # its clients left: the dispatcher removed it
    assert sum(1 for _ in stream) <= 1 and w._stats.snapshot()["active"] == 0


def test_slot_zero_is_the_local_epoch_and_other_slots_draw_anew():
    assert worker.slot_epoch(5, 0) == 5
    assert len({worker.slot_epoch(5, s) for s in range(100)}) == 100


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("no pickling this")


def test_a_shared_block_sends_an_element_it_cannot_pickle_as_its_error():
    # A shared or coordinated read cannot be tried again checked (its window moved on):
    # the worker checks what it sends, trying only what may not pickle.
    from jdata._errors import ElementError
    from jdata.service import _worker_reads

    bad = np.array(_Unpicklable(), dtype=object)
    plain = [np.int64(1), np.arange(3), {"a": (1.0, "x")}, [b"y", None]]
    elements, failures = _worker_reads.sendable(plain + [bad, 7], (1,), where=100)
    assert failures == (1, 4) and elements[:4] == plain and elements[5] == 7
    error = elements[4].error
    assert isinstance(error, ElementError) and "position 104" in str(error) \
        and "cannot be sent" in str(error)
    same, none = _worker_reads.sendable(plain, (), where=0)
    assert same is plain and none == ()  # nothing to replace: the block as it was
