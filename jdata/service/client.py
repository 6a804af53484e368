"""The client role: ``Dataset.distribute``'s node, and the iterator that reads from workers.

The iterator is a shell over one reader per read protocol, chosen once from the
node (``_reader_for``):

- ``_lease_reader.LeaseReader``: ``dynamic`` and ``static`` (leased splits, an
  exactly-once ledger on the dispatcher) and ``off`` (leased slots, each a whole
  stream of its own randomness);
- ``_shared_reader.SharedReader``: ``sharing=True`` (windows of slots every job reads);
- ``_rounds_reader.RoundsReader``: ``num_consumers`` (coordinated rounds).

The shell owns what all share: the stage of ``it.stats()``, the start on the first
element, the state (``snapshot``/``set_state``), ``close``, and the end of a stopped
service: whatever a reader meets once its service was stopped (a dead actor, a shut
down Ray) comes out as one ``ServiceStoppedError``. The contract each
reader keeps, mode by mode and fault by fault, is the table in "When things fail: the
contract" of the data service's guide (https://jdata-jax.readthedocs.io).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata._errors import ServiceError, UDFError
from jdata._plan import Node, Unchanged
from jdata.runtime.iterator import Tunable
from jdata.runtime.stats import OpStats
from jdata.service import _lease_reader, _rounds_reader, _shared_reader, splits
from jdata.service._messages import Mode

MODES = ("off", "dynamic", "static")
# tf.data service's processing modes (and sharding policies, lower-cased) -> jdata's.
_TF_MODES = {"parallel_epochs": "off", "distributed_epoch": "dynamic", "off": "off",
             "dynamic": "dynamic", "file": "static", "data": "static",
             "file_or_data": "static", "hint": "static"}
_OP = "distribute"


@dataclasses.dataclass(frozen=True)
class ServiceRef:
    """Where a service is (what a plan holds, rather than Ray handles)."""

    address: str | None
    namespace: str
    split_elements: int | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class DistributeNode(Unchanged):
    """See ``Dataset.distribute``."""

    input: Node
    service: ServiceRef
    processing_mode: str = "dynamic"
    job_name: str | None = None
    deterministic: bool | None = None
    compression: str | None = None
    sharing: bool = False
    num_consumers: int | None = None
    consumer_index: int | None = None
    # Autocache: (store, cache fingerprint): each split is written as that cache's part,
    # and the element read for it is the part's summary (see ``_autocache_runner``).
    cache_put: tuple | None = None
    op_name: ClassVar[str] = _OP

    def cardinality(self) -> int:
        if self.num_consumers is not None:
            return INFINITE
        if self.sharing or self.job_name is not None or self.processing_mode == "off":
            return UNKNOWN  # a named job is shared: this client reads part of it
        return self.input.cardinality()

    @property
    def mode(self) -> Mode:
        if self.sharing:
            return Mode.SHARED
        if self.num_consumers is not None:
            return Mode.COORDINATED
        return Mode(self.processing_mode)

    def __str__(self):
        return (f"Distribute(processing_mode={self.processing_mode!r}, "
                f"job_name={self.job_name!r}, deterministic={self.deterministic}, "
                f"compression={self.compression!r}, sharing={self.sharing}, "
                f"num_consumers={self.num_consumers}, consumer_index={self.consumer_index})")


def check_mode(mode) -> None:
    """A ``ValueError`` unless ``mode`` is one of ``MODES``; for tf.data service's names
    it says which of jdata's does the same.

    >>> check_mode("parallel_epochs")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ... is tf.data service's name; jdata's is processing_mode='off' (every ...
    """
    if isinstance(mode, str) and mode in MODES:
        return
    same = _TF_MODES.get(mode.lower()) if isinstance(mode, str) else None
    modes = ", ".join(map(repr, MODES))
    if same is None:
        raise ValueError(f"{_OP}: processing_mode={mode!r} must be one of {modes}")
    raise ValueError(f"{_OP}: processing_mode={mode!r} is tf.data service's name; jdata's is "
                     f"processing_mode={same!r} ({_MODE_MEANS[same]}). jdata's modes: {modes}")


_MODE_MEANS = {"off": "every worker runs the whole pipeline",
               "dynamic": "the dispatcher leases splits to workers, each element of an "
                          "epoch read once",
               "static": "split i on worker i mod W"}


def check_splittable(node: Node, mode: str) -> None:
    """A ``ValueError`` when ``node`` cannot be cut into splits, with the way out."""
    reason = splits.splittable(node)
    if reason is not None:
        raise ValueError(f"{_OP}(processing_mode={mode!r}): {reason}; or distribute it with "
                         "processing_mode='off' (every worker runs the whole pipeline)")


_READERS = {Mode.DYNAMIC: _lease_reader.LeaseReader, Mode.STATIC: _lease_reader.LeaseReader,
            Mode.OFF: _lease_reader.LeaseReader, Mode.SHARED: _shared_reader.SharedReader,
            Mode.COORDINATED: _rounds_reader.RoundsReader}


class _DistributeIterator(Tunable):
    # A stage of it.stats() (elements/s, time waited, workers); no knob for the autotuner:
    # the service sizes itself (Tunable's set_parallelism and set_buffer_size do nothing).
    def __init__(self, node: DistributeNode, ctx, epoch: int):
        self.stats = OpStats("workers", parallelism=0, buffer_size=2, engine="service",
                             engine_reason="not started")
        self._reader = _READERS[node.mode](node, ctx, epoch, self.stats)
        self._started = self._closed = False
        ctx.autotuner().register(self, _OP, False, False)

    def __next__(self):
        out = self.next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    def next_many(self, n: int) -> list:
        """Up to ``n`` next elements, from one block (a slice of it): what ``batch`` above
        asks for. An element's error is raised in its place, and the elements before it
        come first, so nothing is lost."""
        if self._closed:
            return []
        try:
            if not self._started:
                self._started = True
                self._reader.start()
            with self._entered():
                return self._reader.next_many(n)
        except (UDFError, ServiceError):  # an element's, or the service's own word
            raise
        except Exception as e:
            transport = getattr(self._reader, "transport", None)
            if transport is not None and transport.stopped():
                raise transport.ended() from e
            raise

    def _entered(self):
        transport = getattr(self._reader, "transport", None)  # None: its start failed
        return contextlib.nullcontext() if transport is None else transport.entered()

    def snapshot(self):
        return self._reader.snapshot()

    def set_state(self, state):
        if self._started:
            raise ValueError(f"{_OP}: restore into a new iterator (ds.iterator(state))")
        self._reader.set_state(state)

    def close(self):
        if not self._closed:
            self._closed = True
            self._reader.close()


_planner.register(DistributeNode, iterator=_DistributeIterator)
