"""jdata.service.splits over the readers tf.data users build (TF Model Garden's
``InputReader``): a batch that drops its remainder drops each files split's own, and an
``interleave`` over a repeated file list splits repetition after repetition, each in the
order the local ``repeat`` gives that pass, as tf.data's dynamic sharding does."""

import collections
import pickle

import jax
import numpy as np
import pytest

import jdata
from jdata import _planner
from jdata.runtime.context import Context
from jdata.service import splits
from tests.helpers import assert_elements_equal, materialize

K1, K2 = jax.random.key(1), jax.random.key(2)
_SIZES = (5, 0, 7, 3, 4)  # records per file: five files, one empty


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """TFRecord and text-lines files of the same records: ``b"f:i"``, ``i`` < its size."""
    root = tmp_path_factory.mktemp("readers")
    tfrecords, texts = [], []
    for f, n in enumerate(_SIZES):
        records = [f"{f}:{i}".encode() for i in range(n)]
        tfrecords.append(str(root / f"part-{f}.tfrecord"))
        jdata.io.write_tfrecord(tfrecords[-1], records)
        texts.append(str(root / f"part-{f}.txt"))
        with open(texts[-1], "wb") as out:
            out.write(b"".join(r + b"\n" for r in records))
    return tfrecords, texts


def _read(path):
    return jdata.from_tfrecord(path)


def _elements(ds: jdata.Dataset, epoch: int = 0) -> list:
    """The local pipeline's elements in epoch ``epoch`` (its ``epoch``-th iterator)."""
    it = _planner.make_iterator(ds._optimize().plan, Context(ds.options), epoch)
    try:
        return [materialize(e) for e in it]
    finally:
        it.close()


def _split_elements(ds: jdata.Dataset, split, epoch: int = 0, skip: int = 0) -> list:
    plan = ds._optimize().plan
    return [materialize(e) for e in splits.read_split(plan, ds.options, split, epoch, skip)]


def _cut(ds: jdata.Dataset, epoch: int = 0) -> splits.SplitPlan:
    return splits.plan_splits(ds._optimize().plan, ds.options, epoch=epoch)


def _assert_same(actual: list, expected: list, context: str = "") -> None:
    assert len(actual) == len(expected), f"{context}{len(actual)} != {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_elements_equal(a, e, f"{context}element {i}: ")


def _records(element):
    """The records of an element: a record, a batch of them, or a tuple led by either."""
    return element[0] if isinstance(element, tuple) else element


def _rows(elements: list) -> collections.Counter:
    """The records of ``elements``, as a multiset."""
    out = collections.Counter()
    for e in map(_records, elements):
        out.update(bytes(r) for r in (e if isinstance(e, np.ndarray) else [e]))
    return out


# ------------------------------------------------------------------ drop_remainder=True

def _batched_readers(tfrecords, texts) -> dict:
    """name: (file list, groups of files a split reads, build(files, drop_remainder), size)."""
    pad = lambda r: (r, np.arange(len(r) % 3, dtype=np.int32))  # noqa: E731
    one_each = [[p] for p in tfrecords]
    return {
        "tfrecord_batch": (tfrecords, one_each, lambda paths, drop: jdata.from_tfrecord(
            paths).batch(3, drop_remainder=drop), 3),
        "tfrecord_padded_batch": (tfrecords, one_each, lambda paths, drop: jdata.from_tfrecord(
            paths).map(pad).padded_batch(2, drop_remainder=drop), 2),
        "text_map_batch": (texts, [[p] for p in texts], lambda paths, drop: jdata
                           .from_text_lines(paths).map(lambda line: line).batch(
                               2, drop_remainder=drop), 2),
        "interleave_batch": (tfrecords, [tfrecords[i:i + 2] for i in (0, 2, 4)],
                             lambda paths, drop: jdata.from_tensor_slices(paths).interleave(
                                 _read, cycle_length=2).batch(3, drop_remainder=drop), 3),
    }


@pytest.mark.parametrize("name", ["tfrecord_batch", "tfrecord_padded_batch", "text_map_batch",
                                  "interleave_batch"])
def test_drop_remainder_above_files_drops_each_splits_own_last_batch(files, name):
    paths, groups, build, size = _batched_readers(*files)[name]
    ds = build(paths, True)
    assert splits.splittable(ds._optimize().plan) is None  # once refused: drop_remainder
    cut = _cut(ds)
    assert cut.num_splits == len(groups)
    dropped = collections.Counter()
    kept = collections.Counter()
    for i, group in enumerate(groups):
        piece = _split_elements(ds, cut.split(i))
        # A split is read as its files alone would be, with drop_remainder.
        _assert_same(piece, _elements(build(group, True)), f"split {i}: ")
        assert all(len(_records(batch)) == size for batch in piece), f"split {i}: {piece}"
        whole = _elements(build(group, False))
        if whole and len(_records(whole[-1])) < size:
            dropped += _rows(whole[-1:])
        kept += _rows(piece)
    assert dropped, "some split must have a remainder to drop"
    assert kept + dropped == _rows(_elements(build(paths, False)))  # the local elements


def test_range_splits_keep_a_batch_that_drops_its_remainder_exact():
    # Over a random-access input the batch is read by index: one remainder, the epoch's.
    ds = jdata.range(23).shuffle(K1).batch(4, drop_remainder=True)
    plan = ds._optimize().plan
    cut = splits.plan_splits(plan, ds.options, target_elements=2)
    assert (cut.kind, cut.total, cut.num_splits, cut.exact) == ("range", 5, 3, True)
    pieces = [_split_elements(ds, cut.split(i)) for i in range(cut.num_splits)]
    _assert_same([b for p in pieces for b in p], _elements(ds))
    with pytest.raises(ValueError, match="at batch .*move it after distribute"):
        splits.plan_splits(jdata.range(23).filter(lambda x: x > 2).batch(
            4, drop_remainder=True)._optimize().plan, ds.options)


# ------------------------------------------------------------------ repeat + interleave

def _training_reader(paths, count=None, **interleave):
    files = jdata.from_tensor_slices(paths).shuffle(K1)
    return files, files.repeat(count).interleave(_read, cycle_length=2, **interleave)


def _pass_orders(files: jdata.Dataset, passes: int, epoch: int) -> list:
    """The file list of each of the local repeat's first ``passes`` passes."""
    names = _elements(files.repeat().take(passes * len(_SIZES)), epoch)
    return [names[r * len(_SIZES):(r + 1) * len(_SIZES)] for r in range(passes)]


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("epoch", [0, 1])
def test_repeat_under_interleave_splits_repetition_after_repetition(files, optimize, epoch):
    files_ds, ds = _training_reader(files[0])
    ds = ds.with_options(jdata.Options(optimize=optimize))
    cut = _cut(ds, epoch)
    assert cut.num_splits is None and cut.repetitions is None
    assert (cut.kind, cut.total, cut.size, cut.splits_per_repetition) == ("files", 5, 2, 3)
    passes = 3
    orders = _pass_orders(files_ds, passes, epoch)
    assert len({tuple(o) for o in orders}) == passes  # each pass reshuffles the list
    if epoch == 0:  # at top level, pass r of a repeat is epoch r of its input
        assert orders == [_elements(files_ds, r) for r in range(passes)]
    everything = collections.Counter()
    for i in range(passes * cut.splits_per_repetition):
        r, g = divmod(i, cut.splits_per_repetition)
        split = cut.split(i)
        assert (split.start, split.stop) == (5 * r + 2 * g, 5 * r + min(5, 2 * g + 2))
        group = orders[r][2 * g:2 * g + 2]
        piece = _split_elements(ds, split, epoch)
        alone = jdata.from_tensor_slices(group).interleave(_read, cycle_length=2)
        _assert_same(piece, _elements(alone), f"repetition {r}, group {g}: ")
        everything += _rows(piece)
    local = _training_reader(files[0], count=passes)[1]  # the first `passes` passes
    assert everything == _rows(_elements(local, epoch))
    assert sum(everything.values()) == passes * sum(_SIZES)


def test_a_finite_repeat_has_count_times_one_repetitions_splits(files):
    files_ds, ds = _training_reader(files[0], count=3)
    cut = _cut(ds)
    assert (cut.repetitions, cut.splits_per_repetition, cut.num_splits) == (3, 3, 9)
    with pytest.raises(ValueError, match="index=9: this plan has splits 0 to 8"):
        cut.split(9)
    orders = _pass_orders(files_ds, 3, 0)
    pieces = [_split_elements(ds, cut.split(i)) for i in range(9)]
    for i, piece in enumerate(pieces):
        r, g = divmod(i, 3)
        group = orders[r][2 * g:2 * g + 2]
        _assert_same(piece, _elements(jdata.from_tensor_slices(group).interleave(_read, 2)))
    assert sum((_rows(p) for p in pieces), collections.Counter()) == _rows(_elements(ds))
    plan = ds._optimize().plan
    for start, stop in ((4, 6), (15, 17)):  # across two repetitions; past the third
        with pytest.raises(ValueError, match="not in one repetition"):
            splits.read_split(plan, ds.options, splits.Split(0, "files", start, stop), 0)


def test_far_splits_of_an_endless_reader_read_their_repetitions_files(files):
    files_ds, ds = _training_reader(files[0])
    cut = _cut(ds, epoch=2)
    for index in (10 ** 9, 10 ** 12 + 2):
        r, g = divmod(index, 3)
        split = cut.split(index)
        assert (split.index, split.start) == (index, 5 * r + 2 * g)
        order = _elements(files_ds.repeat().skip(5 * r).take(5), 2)  # the local pass r
        group = order[2 * g:2 * g + 2]
        _assert_same(_split_elements(ds, split, 2),
                     _elements(jdata.from_tensor_slices(group).interleave(_read, 2)))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=rf"index={bad!r}: this plan has splits 0 and up"):
            cut.split(bad)
    assert pickle.loads(pickle.dumps(cut)) == cut


def test_a_model_garden_training_reader_splits_and_resumes(files):
    # TF Model Garden's InputReader: shuffled files, repeat(), a parallel interleave,
    # decode, a shuffle buffer and a batch that drops its remainder.
    files_ds, reader = _training_reader(files[0], num_parallel_calls=2)
    ds = reader.map(lambda r: r + b"!").shuffle(K2, buffer_size=4).batch(
        2, drop_remainder=True).prefetch(2)
    cut = _cut(ds)
    assert cut.num_splits is None
    for index in (0, 1, 2, 3, 7, 10 ** 6):
        split = cut.split(index)
        full = _split_elements(ds, split)
        # The split's files, as the local repeat lists them (repetition after repetition).
        names = _elements(files_ds.repeat().skip(split.start).take(split.stop - split.start))
        records = _rows(_elements(jdata.from_tensor_slices(names).interleave(_read, 2)))
        records = collections.Counter({r + b"!": n for r, n in records.items()})
        assert _rows(full) <= records, index  # the files' records, but the remainder
        assert sum(_rows(full).values()) == sum(records.values()) // 2 * 2, index
        assert all(len(batch) == 2 for batch in full)
        for skip in range(len(full) + 2):
            _assert_same(_split_elements(ds, split, skip=skip), full[skip:], f"skip {skip}: ")


def test_a_plan_of_an_empty_or_bounded_repeat_as_data():
    forever = splits.SplitPlan("files", 5, 2, False, None)
    assert forever.num_splits is None and forever.cardinality_of(10 ** 6) is None
    assert forever.split(4) == splits.Split(4, "files", 7, 9)  # repetition 1, group 1
    assert forever.split(5) == splits.Split(5, "files", 9, 10)  # its last: one file
    assert splits.SplitPlan("files", 0, 2, False, None).num_splits == 0  # repeat() of nothing
    assert splits.SplitPlan("files", 5, 2, False, 0).num_splits == 0
    assert splits.SplitPlan("range", 10, 4, True).repetitions == 1


def test_random_ops_above_a_repeated_list_draw_anew_in_each_repetition(files):
    _, reader = _training_reader(files[0])
    ds = reader.random_map(lambda r, key: (r, key), K2)
    cut = _cut(ds)
    pieces = [_split_elements(ds, cut.split(i)) for i in range(2 * cut.splits_per_repetition)]
    keys = [tuple(key.tolist()) for piece in pieces for _, key in piece]
    assert len(keys) == 2 * sum(_SIZES)  # two repetitions of every record...
    assert len(set(keys)) == len(keys)  # ...none of them with another's key
