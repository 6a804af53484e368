"""Splits: the pieces of an epoch that the data service leases to its workers.

``plan_splits`` cuts one epoch of the part of a pipeline above ``distribute``
into splits; ``read_split`` computes one of them, anywhere, any number of
times. Where the plan splits is decided by ``_split_point``:

- ``"range"`` splits are positions of a random-access node (sources under a
  full ``shuffle(key)``, ``map``, ``random_map``, ``batch``, ``take``...), with
  only element-wise ops above it (``filter``, ``unbatch``, the optimizer's
  ``prefetch``). Reading them in split order gives the local pipeline's
  stream of that epoch, bit for bit: every element is computed by index,
  with the keys of its position.
- ``"files"`` splits are groups of files of a TFRecord or text-lines source
  (or of the file list an ``interleave`` opens), each read by the whole plan
  over those files alone. Together they hold every element once; the order
  differs across files, as with tf.data's dynamic sharding. Random ops above
  the files run with an epoch mixed with the split's index, so no two
  splits share a shuffle order or a key. Each split is a stream of its own,
  as in tf.data: a ``batch`` or ``padded_batch`` with ``drop_remainder=True``
  above the files drops the last partial batch *of each split* (the splits
  hold the local pipeline's elements but each split's remainder), and every
  batch of every split is full.
- An ``interleave`` over a ``repeat`` of a random-access file list (tf.data's
  training reader, ``from_tensor_slices(files).shuffle(key).repeat()
  .interleave(read, cycle_length)``) is cut as tf.data's split provider for
  ``repeat`` cuts it: the groups of files of repetition 0, then those of
  repetition 1, and so on, each repetition's list in the order the local
  ``repeat`` gives that pass (a new shuffle order each pass). The first
  ``k`` repetitions' splits hold the elements of the local pipeline's first
  ``k`` passes over the files. ``repeat()`` has no last split:
  ``SplitPlan.num_splits`` is then None.

Both take the plan as it runs (``Dataset`` optimizes the part above
``distribute`` first) and never optimize it again: the nodes passed to
``read_split`` must be those (or equal ones) given to ``plan_splits``.
Nothing here imports Ray.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from jdata import _planner, _random
from jdata._errors import UDFError
from jdata._plan import Node
from jdata.ops.interleave import InterleaveNode
from jdata.ops.skip import SkipNode
from jdata.ops.take import TakeNode
from jdata.ops.window import ValuesNode
from jdata.runtime import iterator as _iterator
from jdata.runtime.context import Context
from jdata.service import _split_point
from jdata.service._blocks import element_bytes

# A split should take about this long to compute: long enough that leasing it
# costs little, short enough that a lost worker's splits are redone quickly.
_SPLIT_SEC = 0.2
# ... and hold at most this many bytes of output (big elements): workers and clients
# buffer a few splits each, and a lost worker's split is sent again.
_SPLIT_BYTES = 64 << 20
# The measurement of a plan's cost per position reads until a read takes half this.
_PROBE_SEC = 0.05
# More splits than this would make the dispatcher's tables the bottleneck.
_MAX_SPLITS = 1_000_000
_SPLIT_SALT = _random.salt("service.split")


@dataclasses.dataclass(frozen=True)
class Split:
    """One piece of an epoch; JSON-able with ``dataclasses.asdict``.

    ``kind`` is ``"range"`` (``start:stop`` are positions of the plan's
    random-access part) or ``"files"`` (``start:stop`` index its file list;
    under a ``repeat``, the repeated list: file ``j`` of repetition ``r`` is
    at ``r * SplitPlan.total + j``, and a split never spans two repetitions).
    ``index`` is the split's place in split order.
    """

    index: int
    kind: str
    start: int
    stop: int


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """How one epoch of a plan is cut: ``total`` positions (or files) in splits of ``size``,
    all of it ``repetitions`` times.

    ``exact``: a split's element count is its length (range splits with no
    op above them that drops or adds elements).
    ``repetitions``: 1, but for files splits of an ``interleave`` whose file
    list is a ``repeat``: its ``count``, or None for ``repeat()`` (forever).
    Each repetition is cut on its own (its last split may hold fewer files):
    split ``i`` is group ``i % splits_per_repetition`` of repetition
    ``i // splits_per_repetition``, read from that repetition's file list.
    """

    kind: str
    total: int
    size: int
    exact: bool
    repetitions: int | None = 1

    @property
    def splits_per_repetition(self) -> int:
        """The splits of one pass over the ``total`` positions or files."""
        return -(-self.total // self.size)

    @property
    def num_splits(self) -> int | None:
        """The number of splits, or **None when unbounded**: a ``repeat()`` of a non-empty
        file list has no last split (``split(i)`` is valid for every ``i >= 0``), so a
        caller must not size tables, loops or states by it then."""
        per_repetition = self.splits_per_repetition
        if self.repetitions is None:
            return None if per_repetition else 0  # repeat() of nothing is empty (tf.data)
        return per_repetition * self.repetitions

    @property
    def target_elements(self) -> int | None:
        """What ``plan_splits(target_elements=...)`` takes to cut these same splits again."""
        return self.size if self.kind == "range" else None

    def split(self, index: int) -> Split:
        """Split number ``index`` (``0 <= index``, and ``< num_splits`` unless it is None)."""
        bound = self.num_splits
        if not _is_int(index) or index < 0 or (bound is not None and index >= bound):
            valid = "0 and up" if bound is None else f"0 to {bound - 1}"
            raise ValueError(f"index={index!r}: this plan has splits {valid}")
        repetition, group = divmod(int(index), self.splits_per_repetition)
        start, base = group * self.size, repetition * self.total
        return Split(int(index), self.kind, base + start,
                     base + min(self.total, start + self.size))

    def cardinality_of(self, index: int) -> int | None:
        """The number of elements of split ``index`` where known before reading it, else None."""
        split = self.split(index)
        return split.stop - split.start if self.exact else None


def splittable(plan: Node) -> str | None:
    """None if ``plan`` can be cut into splits, else why not (the ``ValueError``'s message)."""
    try:
        _split_point.find(plan)
    except ValueError as e:
        return str(e)
    return None


def plan_splits(plan: Node, options, *, target_elements: int | None = None,
                epoch: int = 0) -> SplitPlan:
    """The splits of epoch ``epoch`` of ``plan`` (see the module's docstring).

    Args:
      plan: the part of the pipeline above ``distribute``, as it runs (optimized).
      options: the pipeline's merged ``Options``.
      target_elements: positions per range split. ``None`` measures the cost of
        the first positions (about 50 ms) and aims at splits of about 0.2 s and
        at most 64 MB. At most a million splits either way. Files splits ignore
        it: they hold one file each (an ``interleave``'s, ``cycle_length``
        files: one per slot), as a sequential file can only be read from its
        start. A ``batch(..., drop_remainder=True)`` above files drops each
        split's own last partial batch.
      epoch: the epoch to cut. Range splits are the same in every epoch (the
        positions do not move, the elements at them do); an ``interleave``'s file
        list is that epoch's (under a ``repeat``, each repetition's is the one
        the local ``repeat`` reads in that pass of this epoch).

    Returns:
      The ``SplitPlan``. Its ``num_splits`` is None for an ``interleave`` over
      ``repeat()`` of a file list: splits go on forever, repetition after
      repetition of the file list.

    Raises:
      ValueError: the plan cannot be split; the message names the op and the fix.

    >>> import jdata
    >>> from jdata.service import splits
    >>> ds = jdata.range(10).map(lambda x: x * 2)
    >>> plan = ds._optimize().plan
    >>> cut = splits.plan_splits(plan, ds.options, target_elements=4)
    >>> cut.num_splits, cut.split(2), cut.cardinality_of(2)
    (3, Split(index=2, kind='range', start=8, stop=10), 2)
    >>> [int(x) for x in splits.read_split(plan, ds.options, cut.split(2), epoch=0)]
    [16, 18]
    """
    point = _split_point.find(plan)
    if target_elements is not None:
        _check_count(target_elements, "target_elements", 1)
    if point.kind == "files":
        if type(point.node) is InterleaveNode:
            # One repetition's list: the length of a repeat() would be endless.
            files = len(_list_reader(point, Context(options), epoch, 0))
            return SplitPlan("files", files, point.node.cycle_length, False, point.repetitions)
        return SplitPlan("files", len(point.node.paths), 1, False)
    total = len(_planner.make_reader(point.node, Context(options), epoch))
    size = int(target_elements or _measured_size(plan, point, options, epoch, total))
    return SplitPlan("range", total, max(size, -(-total // _MAX_SPLITS), 1), point.exact)


def read_split(plan: Node, options, split: Split, epoch: int, skip: int = 0) -> SplitIterator:
    """The elements of ``split`` of epoch ``epoch``, but its first ``skip`` outcomes.

    An outcome is an element or an element's error (a ``jdata.UDFError``,
    which the iterator raises and then moves past, as a pipeline's iterator
    does); with no errors, ``skip`` is the number of elements already read.
    Reading again with ``skip`` gives the rest of a first read exactly.
    ``plan`` and ``options`` are those given to ``plan_splits``.
    """
    point = _split_point.find(plan)
    if not isinstance(split, Split):
        raise TypeError(f"split={split!r}: pass a Split (SplitPlan.split(index))")
    if split.kind != point.kind or not 0 <= split.start <= split.stop:
        raise ValueError(f"split={split}: this plan has {point.kind} splits "
                         "(use the SplitPlan that plan_splits returned for it)")
    _check_count(skip, "skip", 0)
    seek = point.kind == "range" and point.exact  # positions are outcomes: skip by index
    it = _open(plan, point, split, epoch, options, skip if seek else 0)
    if not seek:
        try:
            _discard(it, skip)
        except BaseException:
            it.close()
            raise
    return it


class SplitIterator:
    """The elements of one split (``read_split``); it closes its pipeline at the end.

    ``next_many(n)`` reads up to ``n`` at once as a pipeline's iterator does
    (``[]`` only at the end; an element's error may lose the others of the call).
    ``close()`` (or dropping the iterator) releases it before the end.
    """

    def __init__(self, it, ctx: Context):
        self._it, self._ctx = it, ctx

    def __iter__(self):
        return self

    def __next__(self):
        if self._it is None:
            raise StopIteration
        try:
            return next(self._it)
        except StopIteration:
            self.close()
            raise

    def next_many(self, n: int) -> list:
        out = [] if self._it is None else self._it.next_many(n)
        if not out:
            self.close()
        return out

    def close(self) -> None:
        """Stops the pipeline and its threads (as ``DatasetIterator.close``). Idempotent."""
        if self._it is not None:
            it, self._it = self._it, None
            it.close()
            self._ctx.stop_tuner()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass


def _open(plan: Node, point, split: Split, epoch: int, options,
          seek: int = 0) -> SplitIterator:
    """``plan`` run over ``split`` alone (from ``seek`` positions in)."""
    ctx = Context(options)
    node = point.node
    if point.kind == "range":
        start = split.start + seek
        node = TakeNode(SkipNode(node, start), max(0, split.stop - start))
    else:
        if type(node) is InterleaveNode:
            node = dataclasses.replace(node, input=ValuesNode(
                tuple(_file_names(point, split, ctx, epoch)), node.input.element_spec))
        else:
            node = dataclasses.replace(node, paths=node.paths[split.start:split.stop])
        # Every random op above (nested datasets' included) draws anew per split.
        epoch = _random.mix_epoch(epoch, _SPLIT_SALT, split.index)
    for op in reversed(point.chain):
        node = dataclasses.replace(op, input=node)
    return SplitIterator(_planner.make_iterator(node, ctx, epoch), ctx)


def _list_reader(point, ctx: Context, epoch: int, repetition: int):
    """The reader of an interleave's file list in ``repetition`` of epoch ``epoch``,
    with the epoch the local pipeline's ``repeat`` gives that pass (its shuffle order)."""
    if point.repeat is not None:
        epoch = _random.repeat_epoch(epoch, repetition)
    return _planner.make_reader(point.files, ctx, epoch)


def _file_names(point, split: Split, ctx: Context, epoch: int) -> list:
    """The files of ``split``: read from the list at the job's epoch (and under a repeat,
    of the split's repetition), so the splits hold each file once per repetition."""
    reader, repetition = _list_reader(point, ctx, epoch, 0), 0
    total = len(reader)
    if point.repeat is not None and split.start >= total > 0:
        repetition = split.start // total
        reader = _list_reader(point, ctx, epoch, repetition)
    base, last = repetition * total, point.repetitions
    if split.stop - base > total or (last is not None and repetition >= last):
        raise ValueError(f"split={split}: its files are not in one repetition of this "
                         "plan's file list (use the SplitPlan that plan_splits returned)")
    names, error = _iterator.read_block(reader, split.start - base, split.stop - base)
    if error is not None:
        raise error
    return names


def _discard(it, count: int | None = None) -> None:
    """Moves ``it`` past ``count`` outcomes (all of them if None)."""
    n = 0
    while count is None or n < count:
        n += 1
        try:
            next(it)
        except StopIteration:
            return
        except UDFError:  # an element's error is an outcome; the iterator is past it
            pass


def _measured_size(plan: Node, point, options, epoch: int, total: int) -> int:
    """Positions per split for splits of about ``_SPLIT_SEC`` and at most ``_SPLIT_BYTES``,
    from reading the first positions: twice as many each time until a read takes
    ``_PROBE_SEC / 2``, then that read once more where it took under ``_SPLIT_SEC``, and
    the faster of the two (a stall of the machine in one short read, 4 positions of 2 ms
    read in 40 ms, made splits of a fifth of the size)."""

    def read(count: int) -> tuple[float, int]:
        began = time.perf_counter()
        with _open(plan, point, Split(0, "range", 0, count), epoch, options) as it:
            nbytes = _drain_bytes(it)
        return time.perf_counter() - began, nbytes

    count, seconds, nbytes = 1, 0.0, 0
    while total:
        count = min(count, total)
        seconds, nbytes = read(count)
        if seconds >= _PROBE_SEC / 2 or count == total:
            break
        count *= 2
    if total and seconds < _SPLIT_SEC:
        seconds = min(seconds, read(count)[0])
    size = int(_SPLIT_SEC * count / seconds) if seconds > 0 else total
    if nbytes:
        size = min(size, _SPLIT_BYTES * count // nbytes)
    return max(1, size)


def _drain_bytes(it, sample: int = 64) -> int:
    """Reads ``it`` to its end (errors are outcomes); the bytes of its elements, from the
    first ``sample`` of them (the time it takes is the cost being measured)."""
    sampled = seen = outcomes = 0
    while True:
        try:
            element = next(it)
        except StopIteration:
            return sampled * outcomes // seen if seen else 0
        except UDFError:
            element = None
        outcomes += 1
        if element is not None and seen < sample:
            sampled += element_bytes(element)
            seen += 1


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_count(value, name: str, minimum: int) -> None:
    if not _is_int(value):
        raise TypeError(f"{name}={value!r}: pass an int")
    if value < minimum:
        raise ValueError(f"{name}={value!r}: pass an int >= {minimum}")
