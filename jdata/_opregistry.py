"""The per-op tallies of one iterator's plan, by node (``ctx.ops``): what makes the
wrappers of ``jdata.runtime.opstats`` and what ``jdata.runtime.opsummary`` reads."""

from __future__ import annotations

import threading
import time

from jdata._plan import Node, op_labels, walk
from jdata.runtime.opstats import CountedBlockReader, CountedIterator, CountedReader, Tally
from jdata.runtime.stats import OpStats

_SAMPLE_SEC = 0.05  # the output is sampled this often for plots, at first
_MAX_SAMPLES = 1000


class OpRegistry:
    """The tallies and stages of one iterator's plan, by node; what ``opsummary`` reads.

    It travels to worker processes as ``None`` (see ``jdata.runtime.opstats``).
    """

    def __init__(self, plan: Node, cpu: bool = False):
        self.plan = plan
        # Sampled calls time their CPU too (Cedar's planner profiles by it: jdata._autoplan).
        self.cpu = cpu
        self.names = op_labels(plan)
        self.started = time.perf_counter()
        self._tallies: dict[int, list[Tally]] = {}
        self._callers: dict[int, list[Tally]] = {}  # a by-index stage: its consumer's side
        self.stages: dict[int, OpStats] = {}
        self.by_index: set[int] = set()
        self._by_index_roots: list[Node] = []
        self._lock = threading.Lock()  # worker threads add tallies
        self.worker = False  # a view for worker threads (see ``workers``)
        # The output's elements and the consumer's time in next() over time, for plots.
        self._sampler = _Sampler(self.started)

    def __reduce__(self):
        return _no_registry, ()

    def workers(self) -> OpRegistry:
        """This registry as a by-index stage's worker threads use it: every call of their
        readers timed. Those calls are blocks or UDF calls, and a sampled one that waited
        for the GIL (held by another worker's UDF for up to 5 ms) would count that wait
        again for each call it stands for."""
        view = object.__new__(OpRegistry)
        view.__dict__.update(self.__dict__)
        view.worker = True
        return view

    def name(self, node: Node) -> str | None:
        return self.names.get(id(node))

    def _tally(self, node: Node, table: dict, name: str, always: bool = False) -> Tally:
        tally = Tally(name, always, self.worker, cpu=self.cpu and not always)
        with self._lock:
            table.setdefault(id(node), []).append(tally)
        return tally

    def iterator(self, node: Node, iterator, stage: OpStats | None = None):
        """``iterator`` of ``node`` wrapped in a new tally (``node``'s stage, if it is one)."""
        name = self.name(node)
        if name is None:  # a node made at run time (an interleave's datasets)
            return iterator
        if stage is not None:
            self.stages[id(node)] = stage
        elif isinstance(iterator, CountedIterator):
            return self._shared(node, iterator)
        return CountedIterator(iterator, self._tally(node, self._tallies, name,
                                                     always=stage is not None))

    def reader(self, node: Node, reader):
        name = self.name(node)
        if name is None:
            return reader
        if isinstance(reader, CountedReader):
            return self._shared(node, reader)
        wrapper = CountedBlockReader if hasattr(reader, "read_block") else CountedReader
        return wrapper(reader, self._tally(node, self._tallies, name))

    def _shared(self, node: Node, counted):
        """A pass-through op's (``with_options``): its input's iterator or reader, whose
        tally it shares (no second wrapper per element; its own time is then 0)."""
        with self._lock:
            self._tallies.setdefault(id(node), []).append(counted._tally)
        return counted

    def by_index_stage(self, node: Node, iterator, stage: OpStats):
        """A by-index stage's iterator, timed from its consumer's side (its ops' readers
        count the elements, on the workers)."""
        self.stages[id(node)] = stage
        self.by_index.add(id(node))
        self._by_index_roots.append(node)
        return CountedIterator(iterator, self._tally(node, self._callers, stage.label,
                                                     always=True))

    def tallies(self, node: Node, callers: bool = False) -> list[Tally]:
        with self._lock:
            table = self._callers if callers and id(node) in self._callers else self._tallies
            return list(table.get(id(node), ()))

    def watch_output(self) -> None:
        """Samples the plan's output over time (its newest tally; after a new root)."""
        tallies = self.tallies(self.plan, callers=True)
        if tallies:
            tallies[-1].sampler = self._sampler
            self._output = tallies[-1]

    _output: Tally | None = None

    def throughput(self) -> list[dict]:
        """The output's samples, and one of this moment."""
        if self._output is not None:
            self._sampler(self._output, force=True)
        return list(self._sampler.samples)

    def by_index_roots(self) -> list[Node]:
        return list(self._by_index_roots)

    def nodes(self) -> list[Node]:
        """The plan's nodes, output first, each once."""
        return list({id(n): n for n in walk(self.plan)}.values())


def _no_registry():
    return None


class _Sampler:
    """The plan's output over time: its elements and the consumer's time in ``next()``.

    A tally calls it after its timed calls. It is no method of the registry: a tally
    holding the registry would make a cycle, and keep the plan, and the worker processes
    parked under it (``jdata.runtime.persistent``), alive until a garbage collection.
    """

    def __init__(self, started: float):
        self.started = started
        self.samples: list[dict] = []
        self._every = _SAMPLE_SEC

    def __call__(self, tally: Tally, force: bool = False) -> None:
        now = time.perf_counter() - self.started
        if not force and self.samples and now - self.samples[-1]["time"] < self._every:
            return
        if len(self.samples) >= _MAX_SAMPLES:  # half as many, twice as far apart
            del self.samples[1::2]
            self._every *= 2
        self.samples.append({"time": now, "elements": tally.elements,
                             "busy_sec": tally.seconds()})
