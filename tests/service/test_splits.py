"""jdata.service.splits: range splits read back the local stream bit for bit, files splits
hold every element once, a re-read with skip gives the rest, and plans that cannot be split
say which op prevents it."""

import dataclasses
import gc
import json
import pickle
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

import jdata
from jdata import _planner
from jdata.runtime.context import Context
from jdata.service import splits
from tests.helpers import assert_elements_equal, materialize, take_list

K1, K2 = jax.random.key(1), jax.random.key(2)


def _outcomes(it) -> list:
    """Every ``next`` of ``it``: ``("element", e)`` or ``("error", type, op, position)``;
    iteration goes on after an element's error, as it may."""
    out = []
    while True:
        try:
            out.append(("element", materialize(next(it))))
        except StopIteration:
            return out
        except jdata.UDFError as e:
            out.append(("error", type(e).__name__, e.op, e.position))
        assert len(out) < 10_000


def _assert_same_outcomes(actual: list, expected: list, context: str = "") -> None:
    assert len(actual) == len(expected), f"{context}{len(actual)} != {len(expected)} outcomes"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a[0] == e[0] == "element":
            assert_elements_equal(a[1], e[1], f"{context}outcome {i}: ")
        else:
            assert a == e, f"{context}outcome {i}: {a} != {e}"


def _local(ds: jdata.Dataset, epoch: int) -> list:
    it = _planner.make_iterator(ds._optimize().plan, Context(ds.options), epoch)
    try:
        return _outcomes(it)
    finally:
        it.close()


def _split_outcomes(ds: jdata.Dataset, target, epoch: int) -> tuple:
    """The split plan and each split's outcomes, read through read_split."""
    plan = ds._optimize().plan
    cut = splits.plan_splits(plan, ds.options, target_elements=target, epoch=epoch)
    return cut, [_outcomes(splits.read_split(plan, ds.options, cut.split(i), epoch))
                 for i in range(cut.num_splits)]


def _fails_on_sevens(x):
    if x % 7 == 3:
        raise ValueError(f"bad {x}")
    return x * 3


@pytest.fixture(scope="module")
def array_records(tmp_path_factory):
    """ArrayRecord files, and Parquet files beside them."""
    root = tmp_path_factory.mktemp("random_access")
    parquet = []
    for f, n in enumerate((7, 12)):
        parquet.append(str(root / f"rows-{f}.parquet"))
        rows = {"id": np.arange(n) + 100 * f, "name": [f"r{i}" for i in range(n)]}
        pq.write_table(pa.table(rows), parquet[-1], row_group_size=5)
    paths = []
    for f, n in enumerate((9, 1, 6)):
        path = str(root / f"data-{f}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for i in range(n):
            writer.write(f"{f}-{i}".encode() * (i + 1))
        writer.close()
        paths.append(path)
    return paths, parquet


def _vectorized(x, key):
    return jnp.sin(x * 0.37) + jax.random.normal(key, (2,)) @ jnp.ones((2, 3))


def _random_access_pipelines(files) -> dict:
    array_records, parquet = files
    table = {"x": np.arange(40, dtype=np.float32).reshape(20, 2), "s": [f"s{i}" for i in range(20)]}
    return {
        "range": jdata.range(3, 40, 2),
        "slices_shuffle_map": jdata.from_tensor_slices(table).shuffle(K1).map(
            lambda e: {"x": e["x"] * 2, "s": e["s"]}),
        "random_map_batch": jdata.range(25).shuffle(K1).random_map(
            lambda x, key: (x, key), K2).batch(4),
        "batch_drop_remainder": jdata.range(25).shuffle(K1).batch(4, drop_remainder=True),
        "take_skip_shard": jdata.range(100).skip(7).take(60).shard(3, 1),
        "repeat_enumerate": jdata.range(6).shuffle(K1).repeat(3).enumerate(10),
        "from_source_padded_batch": jdata.from_source(
            [np.full((i % 3,), i, np.int16) for i in range(15)]).padded_batch(4),
        "array_record": jdata.from_array_record(array_records).shuffle(K1).random_map(
            lambda r, key: (r, key[0]), K2),
        "parquet": jdata.from_parquet(parquet).shuffle(K1).batch(3),
        "vectorized": jdata.range(20).shuffle(K1).random_map(_vectorized, K2, vectorize=True)
        .map(lambda y: jnp.tanh(y).sum(), vectorize=True),
        "parallel_map_batch": jdata.range(30).map(lambda x: x + 1, num_parallel_calls=2).batch(4),
        "errors": jdata.range(30).shuffle(K1).map(_fails_on_sevens),
        "errors_prefetch": jdata.range(30).shuffle(K1).map(_fails_on_sevens).prefetch(3),
        # Element-wise ops above the random-access part: splits of unknown length.
        "filter_map": jdata.range(40).shuffle(K1).filter(lambda x: x % 3 != 0).map(
            lambda x: x * 10),
        "unbatch_ignore_errors": jdata.range(30).map(_fails_on_sevens).batch(4).unbatch()
        .ignore_errors(),
    }


def test_range_splits_concatenate_to_the_local_stream_of_each_epoch(array_records):
    for name, ds in _random_access_pipelines(array_records).items():
        exact = name not in ("filter_map", "unbatch_ignore_errors")
        for epoch in (0, 1, 2):
            expected = _local(ds, epoch)
            for target in (1, 7, 1000):
                context = f"{name}, epoch {epoch}, target {target}: "
                cut, pieces = _split_outcomes(ds, target, epoch)
                assert cut.kind == "range" and cut.exact == exact, context
                assert cut.num_splits == -(-cut.total // target), context
                for i, piece in enumerate(pieces):
                    if exact:
                        assert cut.cardinality_of(i) == len(piece), context
                    else:
                        assert cut.cardinality_of(i) is None, context
                _assert_same_outcomes([o for p in pieces for o in p], expected, context)
    errors = _random_access_pipelines(array_records)["errors"]
    assert any(o[0] == "error" for o in _local(errors, 0))  # errors are outcomes too


def test_the_local_stream_is_what_the_nth_iterator_of_a_dataset_yields():
    ds = jdata.range(12).shuffle(K1).random_map(lambda x, key: (x, key), K2)
    for epoch in range(3):
        local = [o[1] for o in _local(ds, epoch)]
        nth = take_list(ds)  # the dataset's iterator number `epoch`
        for a, e in zip(nth, local, strict=True):
            assert_elements_equal(a, e)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(_local(ds, 0), _local(ds, 1)))


@pytest.mark.parametrize("name", ["random_map_batch", "errors", "errors_prefetch", "filter_map",
                                  "unbatch_ignore_errors", "array_record"])
def test_a_split_read_again_with_skip_gives_the_rest(array_records, name):
    ds = _random_access_pipelines(array_records)[name]
    plan, epoch = ds._optimize().plan, 1
    cut = splits.plan_splits(plan, ds.options, target_elements=7, epoch=epoch)
    for i in range(cut.num_splits):
        split = cut.split(i)
        full = _outcomes(splits.read_split(plan, ds.options, split, epoch))
        for skip in range(len(full) + 2):
            rest = _outcomes(splits.read_split(plan, ds.options, split, epoch, skip=skip))
            _assert_same_outcomes(rest, full[skip:], f"split {i}, skip {skip}: ")


# ------------------------------------------------------------------------- files splits

@pytest.fixture(scope="module")
def record_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    tfrecords, texts = [], []
    for f, n in enumerate((5, 0, 7, 3)):
        path = str(root / f"part-{f}.tfrecord")
        jdata.io.write_tfrecord(path, [f"{f}:{i}".encode() * (i % 3 + 1) for i in range(n)])
        tfrecords.append(path)
    for f, n in enumerate((4, 6, 2)):
        path = root / f"part-{f}.txt"
        path.write_bytes(b"".join(f"# {f}\n".encode() if i == 0 else f"{f}-{i}\r\n".encode()
                                  for i in range(n)))
        texts.append(str(path))
    return tfrecords, texts


def _files_pipelines(record_files) -> dict:
    tfrecords, texts = record_files
    return {
        "tfrecord_map_filter": (tfrecords, lambda paths: jdata.from_tfrecord(paths).map(
            lambda r: r + b"!").filter(lambda r: len(r) % 2 == 0)),
        "tfrecord_batch": (tfrecords, lambda paths: jdata.from_tfrecord(paths).map(
            lambda r: np.int64(len(r))).batch(2)),
        "text_filter_repeat": (texts, lambda paths: jdata.from_text_lines(paths).filter(
            lambda line: not line.startswith(b"#")).repeat(2).prefetch(2)),
    }


def _rows(outcomes: list) -> list:
    """Elements as sortable rows (batches unbatched)."""
    out = []
    for kind, element in outcomes:
        assert kind == "element"
        out.extend(np.asarray(element).tolist() if isinstance(element, np.ndarray) else
                   [element])
    return sorted(out)


@pytest.mark.parametrize("name", ["tfrecord_map_filter", "tfrecord_batch", "text_filter_repeat"])
def test_files_splits_hold_each_element_once_each_in_its_files_local_order(record_files, name):
    paths, build = _files_pipelines(record_files)[name]
    ds = build(paths)
    for epoch in (0, 1):
        cut, pieces = _split_outcomes(ds, None, epoch)
        assert (cut.kind, cut.num_splits, cut.target_elements) == ("files", len(paths), None)
        assert cut.cardinality_of(0) is None
        assert _rows([o for p in pieces for o in p]) == _rows(_local(ds, epoch))
        for i, piece in enumerate(pieces):
            _assert_same_outcomes(piece, _local(build([paths[i]]), epoch), f"split {i}: ")
        # A skip gives the rest.
        plan = ds._optimize().plan
        for i, piece in enumerate(pieces):
            for skip in range(len(piece) + 2):
                rest = _outcomes(splits.read_split(plan, ds.options, cut.split(i), epoch, skip))
                _assert_same_outcomes(rest, piece[skip:], f"split {i}, skip {skip}: ")


def test_random_ops_above_files_draw_anew_for_each_split_and_epoch(tmp_path):
    paths = []
    for f in range(3):
        paths.append(str(tmp_path / f"{f}.tfrecord"))
        jdata.io.write_tfrecord(paths[-1], [f"{f}-{i}".encode() for i in range(6)])
    ds = jdata.from_tfrecord(paths).shuffle(K1, buffer_size=3).random_map(
        lambda r, key: (r, key), K2)

    def read(epoch):
        pieces = _split_outcomes(ds, None, epoch)[1]
        return [[(r, tuple(key.tolist())) for _, (r, key) in p] for p in pieces]

    first = read(0)
    assert read(0) == first  # a pure function of (keys, epoch, split)
    assert sorted(r for p in first for r, _ in p) == sorted(
        f"{f}-{i}".encode() for f in range(3) for i in range(6))
    keys = [key for p in first for _, key in p]
    assert len(set(keys)) == len(keys)  # no two splits share keys
    orders = [[int(r.split(b"-")[1]) for r, _ in p] for p in first]
    assert len({tuple(o) for o in orders}) > 1  # nor a shuffle order
    assert {k for p in read(1) for _, k in p}.isdisjoint(keys)


def test_an_interleave_over_a_file_list_splits_by_cycles_of_files(record_files):
    tfrecords, _ = record_files
    pattern = tfrecords[0].replace("part-0", "part-*")
    files = jdata.io.list_files(pattern, key=K1)

    def read(path):
        return jdata.from_tfrecord(path).map(lambda r: r + b".")

    ds = files.interleave(read, cycle_length=2)
    orders = set()
    for epoch in (0, 1):
        cut, pieces = _split_outcomes(ds, None, epoch)
        assert (cut.kind, cut.total, cut.size, cut.num_splits) == ("files", 4, 2, 2)
        assert _rows([o for p in pieces for o in p]) == _rows(_local(ds, epoch))
        # Split i interleaves files 2i and 2i+1 of that epoch's shuffled list.
        order = [name for _, name in _local(files, epoch)]
        orders.add(tuple(order))
        for i, piece in enumerate(pieces):
            alone = jdata.from_tensor_slices(order[2 * i:2 * i + 2]).interleave(read, 2)
            _assert_same_outcomes(piece, _local(alone, epoch), f"epoch {epoch}, split {i}: ")
        plan = ds._optimize().plan
        for skip in range(len(pieces[1]) + 1):
            rest = _outcomes(splits.read_split(plan, ds.options, cut.split(1), epoch, skip))
            _assert_same_outcomes(rest, pieces[1][skip:], f"skip {skip}: ")
    assert len(orders) == 2


# ------------------------------------------------------------------------- refusals

def _unsplittable(paths) -> list:
    """(the op the error names, a piece of the fix it gives, the dataset)."""
    odd = lambda x: x % 2 == 1  # noqa: E731
    after = "after distribute"
    return [
        ("from_generator", "from_source", jdata.from_generator(lambda: iter(range(3)))),
        ("counter", "jdata.range", jdata.counter()),
        ("repeat", "repeat after distribute", jdata.range(10).repeat()),
        ("batch", after, jdata.range(10).filter(odd).batch(2)),
        ("shuffle", "no buffer_size", jdata.range(10).shuffle(K1, buffer_size=4)),
        ("take_while", after, jdata.range(10).take_while(lambda x: x < 5)),
        ("zip", "random access", jdata.zip((jdata.range(10).filter(odd), jdata.range(10)))),
        ("random_map", "directly to the random-access input",
         jdata.range(10).filter(odd).random_map(lambda x, k: x, K1)),
        ("flat_map", after, jdata.range(4).flat_map(lambda x: jdata.range(x))),
        ("cache", after, jdata.range(10).filter(odd).cache()),
        ("take", after, jdata.from_tfrecord(paths).take(3)),
        ("shard", "drop the shard", jdata.from_tfrecord(paths).shard(2, 0)),
        ("repeat", "repeat after distribute", jdata.from_tfrecord(paths).repeat()),
        ("repeat", "repeat the file list under the interleave",
         jdata.from_tensor_slices(paths).interleave(jdata.from_tfrecord, 2).repeat()),
        ("interleave", "random-access file list", jdata.from_tensor_slices(paths).filter(
            lambda path: True).interleave(jdata.from_tfrecord, 2)),
        ("map", "one repeat is the interleave's input", jdata.from_tensor_slices(paths)
         .repeat().map(lambda path: path).interleave(jdata.from_tfrecord, 2)),
    ]


def test_plans_that_cannot_be_split_name_the_op_and_the_fix(record_files):
    for op, fix, ds in _unsplittable(record_files[0]):
        plan = ds._optimize().plan
        with pytest.raises(ValueError, match=rf"cannot split this pipeline at {op} ") as e:
            splits.plan_splits(plan, ds.options, target_elements=4)
        assert fix in str(e.value), (op, str(e.value))
        assert splits.splittable(plan) == str(e.value)
        with pytest.raises(ValueError, match=rf"at {op} "):
            splits.read_split(plan, ds.options, splits.Split(0, "range", 0, 1), 0)
    assert splits.splittable(jdata.range(4)._optimize().plan) is None


def test_bad_arguments_and_the_split_plan_as_data():
    ds = jdata.range(10)
    plan, options = ds._optimize().plan, ds.options
    cut = splits.plan_splits(plan, options, target_elements=4)
    assert pickle.loads(pickle.dumps(cut)) == cut
    split = cut.split(2)
    assert splits.Split(**json.loads(json.dumps(dataclasses.asdict(split)))) == split
    for bad in (-1, 3, 1.0, True):
        with pytest.raises(ValueError, match=f"index={bad!r}"):
            cut.split(bad)
    with pytest.raises(TypeError, match="target_elements='4'"):
        splits.plan_splits(plan, options, target_elements="4")
    with pytest.raises(ValueError, match="target_elements=0"):
        splits.plan_splits(plan, options, target_elements=0)
    with pytest.raises(ValueError, match="skip=-1"):
        splits.read_split(plan, options, split, 0, skip=-1)
    with pytest.raises(ValueError, match="range splits"):
        splits.read_split(plan, options, dataclasses.replace(split, kind="files"), 0)
    with pytest.raises(TypeError, match="pass a Split"):
        splits.read_split(plan, options, dataclasses.asdict(split), 0)


# ------------------------------------------------------------------------- split sizes

def test_the_chosen_size_gives_splits_of_about_a_fifth_of_a_second():
    def slow(x):
        time.sleep(0.002)
        return x

    ds = jdata.range(2000).map(slow)
    plan = ds._optimize().plan
    began = time.perf_counter()
    cut = splits.plan_splits(plan, ds.options)
    assert time.perf_counter() - began < 0.5  # the measurement is bounded
    assert 50 <= cut.size <= 200, cut
    began = time.perf_counter()
    assert len(list(splits.read_split(plan, ds.options, cut.split(3), 0))) == cut.size
    assert 0.1 <= time.perf_counter() - began <= 0.4
    assert splits.plan_splits(plan, ds.options, target_elements=cut.target_elements) == cut


def test_a_stall_in_one_short_read_of_the_measurement_does_not_shrink_the_splits():
    # A CI run: the machine stalled in one of the first short reads, and the splits came
    # out a fifth of their size (20 positions of 2 ms, where 100 make a fifth of a second).
    stalled = []

    def slow(x):
        if x == 7 and not stalled:  # in the read of 8 positions: 16 ms of work
            stalled.append(x)
            time.sleep(0.06)
        time.sleep(0.002)
        return x

    ds = jdata.range(2000).map(slow)
    cut = splits.plan_splits(ds._optimize().plan, ds.options)
    assert stalled and 40 <= cut.size <= 200, cut  # the stall alone would give 21


def test_splits_of_big_elements_hold_at_most_64_mb():
    # Cheap to compute, so a split by time alone would hold the whole epoch: one worker
    # would read it all, and a lost worker would cost all of it again.
    ds = jdata.from_tensors(np.ones(10 << 20, np.uint8)).repeat(100)
    plan = ds._optimize().plan
    cut = splits.plan_splits(plan, ds.options)
    assert cut.size == 6 and cut.num_splits == 17, cut
    text = jdata.range(10_000).map(lambda x: b"x" * 1000)
    cut = splits.plan_splits(text._optimize().plan, text.options)
    assert cut.size > 1000  # 1 KB elements: bounded by time, not bytes


def test_never_more_than_a_million_splits():
    ds = jdata.range(10_000_000)
    plan = ds._optimize().plan
    assert splits.plan_splits(plan, ds.options, target_elements=1).num_splits == 1_000_000
    assert splits.plan_splits(plan, ds.options).num_splits <= 1_000_000
    empty = splits.plan_splits(jdata.range(0)._optimize().plan, ds.options)
    assert empty.num_splits == 0 and empty.size == 1


def test_a_split_left_before_its_end_releases_its_threads():
    ds = jdata.range(3000).map(lambda x: x + 1, num_parallel_calls=2).batch(4)
    plan = ds._optimize().plan
    split = splits.plan_splits(plan, ds.options, target_elements=40).split(1)
    for leave in ("close", "drop"):
        before = set(threading.enumerate())
        it = splits.read_split(plan, ds.options, split, 0)
        assert next(it).tolist() == [161, 162, 163, 164]
        started = set(threading.enumerate()) - before
        assert started, "the parallel map runs on threads"
        if leave == "close":
            it.close()
        else:
            del it
            gc.collect()
        for thread in started:
            thread.join(timeout=10)
        assert not [t.name for t in started if t.is_alive()], leave
