"""What the service's roles say to each other: enums and frozen dataclasses, never dicts.

A client registers (``Register`` -> ``Registered``), leases units (``LeaseRequest`` ->
``LeaseReply``), commits what a checkpoint holds (``Commit``) and leaves (``Release``).
A *unit* is what the dispatcher leases: a split (``dynamic``/``static``: a range of
positions or a group of files) or a *slot* (``off``: one whole-pipeline stream with
randomness of its own). A unit is read from an *offset*: the elements before it are
kept by some client already.

A *lineage* names one consumer across restores: the iterator's state carries it, so a
restored iterator takes over what its earlier incarnation held (and a killed
incarnation's leases come back) rather than joining as a stranger.

Nothing here imports Ray: Ray pickles these between actors.
"""

from __future__ import annotations

import dataclasses
import enum


class Mode(enum.StrEnum):
    """How a job's work is cut and read (``distribute(processing_mode=...)`` and friends)."""

    DYNAMIC = "dynamic"  # splits leased to the least-loaded worker
    STATIC = "static"  # split s on worker s mod W
    OFF = "off"  # slots: each a whole-pipeline stream of its own randomness
    SHARED = "shared"  # slots every consumer reads, through windows (sharing=True)
    COORDINATED = "coordinated"  # rounds (num_consumers / consumer_index)

    @property
    def leases(self) -> bool:
        """Whether the job's units are leased to one client at a time (the ledger's)."""
        return self in (Mode.DYNAMIC, Mode.STATIC, Mode.OFF)


class Standing(enum.StrEnum):
    """What the dispatcher knows of a client that calls it."""

    OK = "ok"
    EXPIRED = "expired"  # silent past client_timeout: its units went back
    SUPERSEDED = "superseded"  # its lineage was restored into another iterator
    UNKNOWN = "unknown"  # the job is gone (finished and collected, or never was)


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """How a job is cut: ``num_units`` units (``None``: unbounded, as a files reader under
    ``repeat()``), of ``split_elements`` positions each for range splits."""

    num_units: int | None
    split_elements: int | None = None


@dataclasses.dataclass(frozen=True)
class Position:
    """What a consumer kept of a job: the units it yielded whole from their start
    (``done``, as ``[start, stop)`` ranges), whole from an offset (``done_from``:
    ``(unit, start)``, where another consumer kept the elements before), and parts
    (``partial``: ``(unit, start, stop)``, the elements ``[start, stop)`` of a unit it
    was reading, or left to others)."""

    done: tuple[tuple[int, int], ...] = ()
    done_from: tuple[tuple[int, int], ...] = ()
    partial: tuple[tuple[int, int, int], ...] = ()

    def wants(self) -> dict[int, tuple[int, int | None]]:
        """Per unit, the part ``(start, stop)`` it kept (``stop`` None: to the end)."""
        out: dict[int, tuple[int, int | None]] = {
            unit: (0, None) for start, stop in self.done for unit in range(start, stop)}
        out.update((unit, (start, None)) for unit, start in self.done_from)
        out.update((unit, (start, stop)) for unit, start, stop in self.partial)
        return out


@dataclasses.dataclass(frozen=True)
class Resume:
    """A consumer's position in an epoch, as its state holds it. ``committed``: for a
    paused client resuming (its live position), where it had committed last."""

    epoch: int
    position: Position
    committed: Position | None = None


@dataclasses.dataclass(frozen=True)
class Register:
    """A client's first call. ``plan``: the client's own cut (``None``: it asks for the
    job's first, and cuts only if the job has none). ``resume``: a restored state (or,
    with ``exact_only``, the live state of a client that was expired while paused)."""

    name: str | None
    fingerprint: str
    mode: Mode
    epoch: int
    lineage: str
    plan: JobPlan | None
    resume: Resume | None = None
    exact_only: bool = False


@dataclasses.dataclass(frozen=True)
class Conflict:
    """A unit a restore could not make what the state says: ``where`` is "duplicated"
    (another consumer kept or reads elements the state holds too) or "lost" (elements
    this lineage read past its state, that nobody reads again). Counted, never silent."""

    unit: int
    where: str


@dataclasses.dataclass(frozen=True)
class Registered:
    """The dispatcher's answer. ``need_plan``: no job holds this pipeline yet and the client
    sent no plan; it cuts one and registers again."""

    job_id: str | None
    client_id: str | None
    epoch: int
    plan: JobPlan | None
    client_timeout: float
    conflicts: tuple[Conflict, ...] = ()
    leased: tuple[int, ...] = ()  # a restore's units leased back to it (others: handed)
    need_plan: bool = False
    refused: str | None = None  # why a resume could not be exact (nothing was changed)


@dataclasses.dataclass(frozen=True)
class Grant:
    """Read ``unit`` from ``worker_id`` past ``offset`` elements of it."""

    unit: int
    worker_id: str
    offset: int


@dataclasses.dataclass(frozen=True)
class LeaseRequest:
    """Report ``done`` units (yielded whole) and give ``returned`` ones back (``(unit,
    offset)``), then lease up to ``want`` more while holding at most ``max_held``.
    ``held``: the units the client reads or read whole (None: not told); the ledger's
    other leases of it on a worker, granted by a call whose reply it never got (or
    re-issued so), come back with the grants."""

    job_id: str
    client_id: str
    want: int
    max_held: int
    done: tuple[int, ...] = ()
    returned: tuple[tuple[int, int], ...] = ()
    waiting: bool = False  # it has nothing to yield: a peer idle on units may hand them over
    held: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class LeaseReply:
    """``grants``; ``finished``: the epoch is over for this client (every unit is done and
    no other client could still roll back units it did); ``give_back``: units to return
    (another client has none, ``off`` mode); ``workers``: the alive count (clients size
    their reads by it)."""

    standing: Standing
    grants: tuple[Grant, ...] = ()
    finished: bool = False
    give_back: tuple[int, ...] = ()
    workers: int = 0
    waiting_on: int = 0  # units other clients hold while this one has nothing to read
    drained: bool = False  # every unit is done (others may still roll back theirs)


@dataclasses.dataclass(frozen=True)
class HeartbeatReply:
    """``hand_off``: this client is idle (its consumer has not asked for a while) while it
    holds units another client of the job waits for: it gives them back at what it
    yielded (``Release`` through ``return_units``), and leases again when asked."""

    standing: Standing
    hand_off: bool = False
    give_back: tuple[int, ...] = ()  # off slots above its share (another client has fewer)


@dataclasses.dataclass(frozen=True)
class Commit:
    """What a consumer's state (``get_state``) holds: if it dies, the units it touched
    since go back from there, not from where it stood when it died."""

    job_id: str
    client_id: str
    position: Position
    reported: tuple[int, ...] = ()  # units yielded whole not yet reported done


@dataclasses.dataclass(frozen=True)
class Release:
    """A client leaves (closed, or at the end of its epoch): it keeps all it yielded;
    ``offsets``: how far it got into each unit it still holds."""

    job_id: str
    client_id: str
    offsets: tuple[tuple[int, int], ...] = ()
    reported: tuple[int, ...] = ()
    position: Position | None = None  # a hand-off commits it (``_requests.return_units``)
