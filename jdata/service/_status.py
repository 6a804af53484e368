"""What ``Service.status()`` returns: the dispatcher, its workers, its jobs, the
autoscaler's decisions and autocache's choices, as frozen dataclasses (``print`` one)."""

from __future__ import annotations

import dataclasses
from typing import Any


def memory_bytes() -> int:
    """This process's private resident memory (``RssAnon``: not the pages of Ray's shared
    object store it mapped, which the store bounds); 0 where ``/proc`` does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """A process of the service: its ``pid``, its Ray node and its private resident memory."""

    pid: int | None
    node_id: str | None
    memory_bytes: int = 0  # private resident (``memory_bytes()``)


@dataclasses.dataclass(frozen=True)
class JournalStatus:
    """The dispatcher's journal: its file's size on disk (with SQLite's write-ahead log),
    the snapshot's and the records' since (``tail_bytes``), how often it was compacted,
    and whether it can be written. ``writable`` False: the dispatcher refuses what would
    change its books (``ServiceUnavailableError``) since ``since`` (``time.time()``),
    for ``error``, and retries each second."""

    path: str
    file_bytes: int
    snapshot_bytes: int
    tail_bytes: int
    compactions: int
    writable: bool = True
    error: str | None = None
    since: float | None = None


@dataclasses.dataclass(frozen=True)
class WorkerStatus:
    """A worker: ``state`` "running", "starting" (waiting for its process, maybe for a
    node with room: it gets leases once up) or "unreachable" (it missed a ping: lost
    soon); ``tasks`` reads served, ``active`` running now, ``elements``/``bytes``
    produced in all; over the last 10 s, the rates, ``busy`` (the share of the time in
    which it made blocks: at most 1) and ``load`` (the blocks it made at once, on
    average: busy time summed over its reads' threads, above 1 where reads run side
    by side)."""

    worker_id: str
    pid: int | None
    node_id: str | None
    state: str = "running"
    tasks: int = 0
    active: int = 0
    elements: int = 0
    bytes: int = 0
    elements_per_sec: float = 0.0
    bytes_per_sec: float = 0.0
    busy: float = 0.0
    memory_bytes: int = 0  # private resident (``memory_bytes()``)
    plans: int = 0  # the jobs' plans it holds decoded
    load: float = 0.0


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job: its splits (done, leased, orphaned by lost workers) and clients; and from
    the clients' reports, the elements they yielded, hold buffered (the queue's fill),
    their rates over the last 10 s and the share of time they waited for workers.

    A shared job (``distribute(sharing=True)``): ``shared_hit_rate``, the share of its
    clients' reads served from the workers' windows without computing; ``skipped``,
    the elements they lost by falling behind a window; ``window_bytes``, the windows'
    size on the workers; ``computed``, the elements the workers computed for it.

    A coordinated job (``num_consumers=``): ``rounds`` its consumers read (summed),
    ``skipped_rounds`` they skipped together (no element ready within the bound), and
    ``round_wait_sec``, the mean wait for a round's element.

    ``lost`` and ``duplicated``: what the mode allows to be lost or read twice and
    happened, counted over every client the job had (the table of "When things fail: the
    contract" in the data service's guide): a shared job's skipped elements, a split a
    worker could not read to its end, a restore that found its splits taken by others.
    """

    job_id: str
    name: str | None
    epoch: int
    mode: str
    num_splits: int
    done: int
    leased: int
    orphaned: int
    clients: int
    elements: int = 0
    buffered: int = 0
    elements_per_sec: float = 0.0
    bytes_per_sec: float = 0.0
    wait_fraction: float = 0.0
    shared: bool = False
    shared_hit_rate: float = 0.0
    skipped: int = 0
    window_bytes: int = 0
    computed: int = 0
    coordinated: bool = False
    rounds: int = 0
    skipped_rounds: int = 0
    round_wait_sec: float = 0.0
    lost: int = 0
    duplicated: int = 0


@dataclasses.dataclass(frozen=True)
class ScalingDecision:
    """One autoscaler interval: at ``time`` (seconds since the dispatcher started)
    with ``workers`` running, the measured ``batch_sec`` (the consumers' seconds per
    element, waits included), ``demand`` (elements/s they would take without waiting),
    ``capacity`` (elements per busy second of a worker) and ``queue_fill``; the
    decision: ``target`` workers, the policy's ``phase`` and the ``reason``."""

    time: float
    workers: int
    target: int
    phase: str
    reason: str
    batch_sec: float
    demand: float
    capacity: float
    queue_fill: float


@dataclasses.dataclass(frozen=True)
class AutoscalerStatus:
    """``num_workers=jdata.AUTOTUNE``: the worker count it aims at, its bounds and phase
    ("estimate", "up", "down", "converging", "converged"), the workers draining before
    removal, and its decisions, oldest first."""

    target: int
    min_workers: int
    max_workers: int
    phase: str
    draining: list[str]
    decisions: list[ScalingDecision]


@dataclasses.dataclass(frozen=True)
class AutocacheStatus:
    """A pipeline with an ``autocache()`` marker (``job``: its fingerprint): ``state`` of
    its last epoch ("compute", "put": writing the cache, "get": reading it), the ``mode``
    chosen ("compute", "marker", "output"; None while profiling), the ``reason`` for the
    last epoch's state, ``chosen``: the decision's reason, with the ``estimates`` behind
    it (seconds per output element per mode) and the ``profile``
    (``autocache.Profile``'s fields); ``keys``: the fingerprints of the prefixes its caches
    are kept under; ``written``: the cache it wrote (point, elements, bytes, parts,
    seconds), if it wrote one."""

    job: str
    state: str
    mode: str | None
    reason: str
    chosen: str
    estimates: dict[str, Any]
    profile: dict[str, Any] | None
    keys: dict[str, Any]
    written: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class ServiceStatus:
    """What ``Service.status()`` returns: the dispatcher, its workers and jobs, the
    autoscaler, autocache's pipelines and the journal (``print`` it for a summary)."""

    dispatcher: ProcessInfo
    workers: list[WorkerStatus]
    jobs: list[JobStatus]
    autoscaler: AutoscalerStatus | None = None
    autocache: list[AutocacheStatus] = dataclasses.field(default_factory=list)
    journal: JournalStatus | None = None
    # What failed in the dispatcher's monitor (each step is tried again every tick): its
    # error in words -> how often. Empty when all is well.
    monitor_errors: dict[str, int] = dataclasses.field(default_factory=dict)

    def _repr_html_(self) -> str:  # a notebook's view: tables of what __str__ says
        from jdata.service import _html

        return _html.status_html(self)

    def __str__(self) -> str:
        lines = [f"dispatcher pid {self.dispatcher.pid} on node {self.dispatcher.node_id}, "
                 f"{self.dispatcher.memory_bytes / 1e6:,.0f} MB"]
        j = self.journal
        if j is not None:
            lines.append(f"journal {j.path}: {j.file_bytes / 1e6:,.2f} MB (snapshot "
                         f"{j.snapshot_bytes / 1e3:,.0f} kB, {j.tail_bytes / 1e3:,.0f} kB of "
                         f"records since), {j.compactions} compactions"
                         + ("" if j.writable else f"; CANNOT WRITE since {j.since:.0f}: "
                            f"{j.error}; new jobs, clients and leases are refused"))
        lines += [f"monitor error ({n}x): {e}" for e, n in self.monitor_errors.items()]
        lines.append(f"{len(self.workers)} workers:")
        lines += [f"  {w.worker_id} pid {w.pid}: {w.active} reads running ({w.tasks} in "
                  f"all), {w.elements_per_sec:,.0f} elements/s, "
                  f"{w.bytes_per_sec / 1e6:,.1f} MB/s, {w.busy:.0%} busy ({w.load:.2f} "
                  "blocks in the making at once)"
                  if w.state == "running" else f"  {w.worker_id}: {w.state}"
                  for w in self.workers]
        lines.append(f"{len(self.jobs)} jobs:")
        lines += [f"  {j.job_id} ({j.name or 'unnamed'}, {j.mode}, epoch {j.epoch}): "
                  f"{j.done}/{j.num_splits} splits done, {j.leased} leased, "
                  f"{j.orphaned} orphaned, {j.clients} clients; {j.elements:,} elements "
                  f"yielded, {j.elements_per_sec:,.0f} elements/s, "
                  f"{j.bytes_per_sec / 1e6:,.1f} MB/s, {j.buffered:,} buffered, "
                  f"{j.wait_fraction:.0%} of the time waiting"
                  + (f"; {j.lost:,} lost, {j.duplicated:,} duplicated (counted)"
                     if j.lost or j.duplicated else "")
                  + (f"; shared: {j.shared_hit_rate:.0%} of reads from the windows "
                     f"({j.window_bytes / 1e6:,.1f} MB), {j.computed:,} elements computed, "
                     f"{j.skipped:,} skipped" if j.shared else "")
                  + (f"; coordinated: {j.rounds:,} rounds read, {j.skipped_rounds:,} skipped, "
                     f"{j.round_wait_sec * 1e3:,.1f} ms mean wait" if j.coordinated else "")
                  for j in self.jobs]
        a = self.autoscaler
        if a is not None:
            lines.append(f"autoscaler: {a.target} workers ({a.phase}; within [{a.min_workers}, "
                         f"{a.max_workers}]), {len(a.draining)} draining")
            lines += [f"  {d.time:10.1f} s: {d.workers} -> {d.target} ({d.phase}; batch "
                      f"{d.batch_sec * 1e3:,.2f} ms, demand {d.demand:,.0f}/s, capacity "
                      f"{d.capacity:,.0f}/s per worker): {d.reason}"
                      for d in a.decisions[-5:]]
        lines += [f"autocache {c.job[:12]}: {c.state}, mode {c.mode}: {c.reason}"
                  + (f" (chosen: {c.chosen})" if c.chosen and c.chosen != c.reason else "")
                  for c in self.autocache]
        return "\n".join(lines)
