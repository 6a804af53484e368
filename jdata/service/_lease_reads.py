"""The reads of a leasing client (``_lease_reader``): one Ray streaming generator per
unit being read, with backpressure, whose blocks go into the unit's buffer in the
``LeaseCore``.

A read whose worker died is read again past what was received (on the same worker if
it lives: the read failed, not the worker; else where the next lease re-issues it).
One that failed on the worker's side (an element Ray could not pickle, the worker's
runtime raising) is read again *checked*, element by element, each pickled first; if
even that fails, the unit ends there with an ``ElementError`` in place of the rest,
counted lost. The client drains every read's ready blocks, not only the one it yields
from: a read produces ``READ_AHEAD`` blocks ahead, no more.
"""

from __future__ import annotations

from jdata._errors import ElementError
from jdata.service import _blocks, _waits
from jdata.service.transport import cause
from jdata.service.worker import READ_AHEAD


class _Read:
    __slots__ = ("unit", "worker_id", "generator", "checked")

    def __init__(self, unit: int, worker_id: str, generator, checked: bool):
        self.unit, self.worker_id = unit, worker_id
        self.generator, self.checked = generator, checked


class Reads:
    """``spec(unit, skip, checked)`` gives ``(worker method, ReadSpec)`` of a read."""

    def __init__(self, transport, core, stats, report, compression: str | None, spec):
        self._transport, self._core, self._stats = transport, core, stats
        self._report, self._compression, self._spec = report, compression, spec
        self._reads: dict[int, _Read] = {}

    def __contains__(self, unit: int) -> bool:
        return unit in self._reads

    def units(self) -> list[int]:
        return list(self._reads)

    def start(self, unit: int, worker_id: str, checked: bool = False) -> None:
        method, spec = self._spec(unit, self._core.held[unit].received, checked)
        generator = self._transport.stream(worker_id, method, spec, ahead=READ_AHEAD)
        if generator is None:  # gone since the grant: the dispatcher will know it too
            self._core.lost(unit)
            self._transport.tell("report_lost", worker_id)
            return
        self._reads[unit] = _Read(unit, worker_id, generator, checked)

    def stop(self, unit: int) -> None:
        read = self._reads.pop(unit, None)
        if read is not None:
            self._transport.cancel(read.generator)

    def stop_all(self) -> None:
        for unit in list(self._reads):
            self.stop(unit)

    def pull(self, unit: int) -> None:
        """The unit's next block (or its end, or its loss), after every other read's ready
        block, without waiting for those."""
        read = self._reads[unit]
        others = [r for r in self._reads.values() if r is not read]
        if others:
            ready, _ = self._transport.ray.wait([r.generator for r in others],
                                                num_returns=len(others), timeout=0)
            ready_ids = set(map(id, ready))
            for other in others:
                if id(other.generator) in ready_ids:
                    self._take(other)
        if unit in self._reads:
            with _waits.waiting(self._stats):
                if self._transport.ready(read.generator, read.worker_id):
                    self._take(read)
                else:
                    self._lost(read)

    def pull_any(self) -> None:
        """Whichever read's block comes first (a second at most); reads whose worker
        died meanwhile are lost."""
        reads = list(self._reads.values())
        ready, _ = self._transport.ray.wait([r.generator for r in reads], num_returns=1,
                                            timeout=1.0)
        for read in reads:
            if ready and read.generator is ready[0]:
                self._take(read)
                return
        alive = set(self._transport.alive_workers())
        for read in reads:
            if read.worker_id not in alive:
                self._lost(read)

    def _take(self, read: _Read) -> None:
        transport = self._transport
        try:
            packed = transport.ray.get(next(read.generator))
        except StopIteration:
            del self._reads[read.unit]
            self._core.ended(read.unit)
            return
        except transport.ray.exceptions.RayError as e:
            self._failed(read, e)
            return
        block, failures, nbytes = _blocks.unpack(packed, self._compression)
        if block:
            self._core.arrived(read.unit, block, failures)
            self._report.bytes += nbytes
            self._stats.buffered += len(block)
            if not failures:
                self._stats.record_bytes(block[0])

    def _lost(self, read: _Read) -> None:
        del self._reads[read.unit]
        transport = self._transport
        transport.forget(read.worker_id)
        self._core.lost(read.unit)
        transport.call("report_lost", read.worker_id)
        if read.worker_id in transport.alive_workers():
            self._core.granted(read.unit, self._core.held[read.unit].received)
            self.start(read.unit, read.worker_id, read.checked)

    def _failed(self, read: _Read, error) -> None:
        if self._transport.lost(error):
            self._lost(read)
            return
        del self._reads[read.unit]
        if not read.checked:
            self.start(read.unit, read.worker_id, checked=True)
            return
        held = self._core.held[read.unit]  # even checked it fails: the unit ends here
        self._core.ended(read.unit)
        self._report.lost += 1
        held.buffer.add([_blocks.Failure(ElementError(
            held.received, "the worker cannot read the rest of its split; it is lost (counted "
            "in it.stats() and svc.status())", cause(error)))], (0,))
