"""A dispatcher, its workers and its clients, simulated on ``DispatcherState`` without Ray.

``Simulation.run(ops)`` plays a random story (workers join and die, jobs are
created, clients lease, read, report and fall silent, time passes) the way
the dispatcher actor plays it: every decision comes from the policies, every
change is an update applied to the state and kept in ``history``. Beside the
state it keeps a model of what each client received, and checks after every
step the promises the service makes:

- no split is leased twice at once, or leased once done;
- no split reaches two clients that are still alive (a client skips a split
  it already holds; a dead client's splits are lost with it);
- static leases follow ``alive[s % W]``, dynamic ones the lowest free splits
  on the least-loaded workers.

``drain`` then finishes every job, and ``check_exactly_once`` that every split
of every finished job was reported done exactly once.
"""

from __future__ import annotations

import collections

from hypothesis import strategies as st

from jdata.service import state as S

CLIENT_TIMEOUT = 10.0

# "off" jobs lease nothing: one in five.
_CREATE = st.tuples(st.just("create"), st.sampled_from(["off", "dynamic", "dynamic", "static",
                                                        "static"]),
                    st.integers(0, 40), st.booleans())
# One call of a client: report some splits it holds (``report`` of them), lease (``count``,
# within ``max_outstanding``), then read (``read`` of its leases); 0 leaves a step for later.
_ACT = st.tuples(st.just("act"), st.integers(0, 15), st.integers(0, 8), st.integers(1, 8),
                 st.integers(1, 12), st.integers(0, 8))
_EVENT = st.one_of(
    st.tuples(st.just("join"), st.integers(0, 3)),  # 0: a new worker; k: a lost one returns
    st.tuples(st.just("lose"), st.integers(0, 7)),
    _CREATE,
    st.tuples(st.just("client"), st.integers(0, 7)),
    st.tuples(st.just("leave"), st.integers(0, 15)),  # a client closes its iterator
    st.tuples(st.just("tick"), st.sampled_from([1.0, 4.0, 11.0])),
)
# A few workers and jobs, then steps of a client's call and maybe an event, so that most
# examples lease, read and report between the failures.
OPS = st.tuples(
    st.lists(st.just(("join", 0)), max_size=3),
    st.lists(_CREATE, min_size=1, max_size=3),
    st.lists(st.tuples(_ACT, st.one_of(st.none(), _EVENT)), min_size=5, max_size=40),
).map(lambda parts: parts[0] + parts[1] + [op for step in parts[2] for op in step if op])

def summary(state: S.DispatcherState) -> dict:
    """Everything the queries tell about ``state``: equal summaries, equal states."""
    jobs = {}
    for job_id in state.jobs:
        info = state.job(job_id)
        jobs[job_id] = (info, state.free_splits(job_id, info.num_splits + 1),
                        {c: state.leases_of(job_id, c) for c in info.clients},
                        state.worker_loads(job_id), state.finished(job_id))
    return {"workers": state.alive_workers(), "jobs": jobs}


class _Client:
    def __init__(self):
        self.received: set[int] = set()  # what reached it (its consumer has it)
        self.unreported: set[int] = set()  # received, not reported done yet


class Simulation:
    def __init__(self):
        self.state = S.DispatcherState()
        self.history: list = []
        self.summaries = [summary(self.state)]  # summaries[k]: the state after history[:k]
        self.now = 0.0
        self._ids = collections.Counter()
        self.lost: list[str] = []
        self.clients: dict[str, dict[str, _Client]] = {}  # job -> live clients
        self.received_ever: dict[str, set] = collections.defaultdict(set)
        self.reports: dict[str, collections.Counter] = collections.defaultdict(
            collections.Counter)
        self.finished_removed: list[str] = []

    def _new_id(self, kind: str) -> str:
        self._ids[kind] += 1
        return f"{kind}{self._ids[kind]}"

    def apply(self, *updates) -> None:
        for update in updates:
            self.state.apply(update)
            self.history.append(update)
            self.summaries.append(summary(self.state))
        self.check_invariants()

    # ------------------------------------------------------------ the story

    def run(self, ops) -> None:
        for op in ops:
            getattr(self, "_" + op[0])(*op[1:])

    def _join(self, k: int) -> None:
        if k and self.lost:
            self.apply(S.WorkerJoined(self.lost.pop(k % len(self.lost))))
        else:
            self.apply(S.WorkerJoined(self._new_id("w")))

    def _lose(self, k: int) -> None:
        alive = self.state.alive_workers()
        if alive:
            self.lost.append(alive[k % len(alive)])
            self.apply(S.WorkerLost(self.lost[-1]))

    def _create(self, mode: str, num_splits: int, named: bool) -> None:
        """As the dispatcher's register: a named job is joined if it runs; else created."""
        num_splits = 0 if mode == "off" else num_splits
        name, epoch = ("shared", num_splits % 2) if named else (None, 0)
        job_id = self.state.find_job(name, "fp", epoch) if named else None
        updates = []
        if job_id is None:
            job_id = self._new_id("job")
            updates.append(S.JobCreated(job_id, name, "fp", epoch, num_splits, mode))
            self.clients[job_id] = {}
        client_id = self._new_id("c")
        self.apply(*updates, S.ClientSeen(job_id, client_id, self.now))
        self.clients[job_id][client_id] = _Client()

    def _client(self, k: int) -> None:
        jobs = self.state.jobs
        if jobs:
            self._client_of(jobs[k % len(jobs)])

    def _live_client(self, k: int):
        live = [(j, c) for j, clients in self.clients.items() for c in clients]
        return live[k % len(live)] if live else (None, None)

    def _act(self, k: int, report: int, count: int, max_outstanding: int, read: int) -> None:
        job_id, client_id = self._live_client(k)
        if job_id is not None:
            self.report(job_id, client_id, report)
            self.request(job_id, client_id, count, max_outstanding)
            self.read(job_id, client_id, read)

    def _leave(self, k: int) -> None:
        job_id, client_id = self._live_client(k)
        if job_id is not None:
            del self.clients[job_id][client_id]
            self.apply(S.ClientGone(job_id, client_id))

    def request(self, job_id: str, client_id: str, count: int, max_outstanding: int) -> None:
        self.apply(S.ClientSeen(job_id, client_id, self.now))
        before = self.state.job(job_id)
        granted = S.grant(self.state, job_id, client_id, count, max_outstanding)
        if granted is not None:
            self._check_policy(before, granted, max_outstanding)
            self.apply(granted)

    def read(self, job_id: str, client_id: str, count: int) -> None:
        """Reads whole splits from their (alive) workers; skips those it holds already."""
        client = self.clients[job_id][client_id]
        leases = [(s, w) for s, w in self.state.leases_of(job_id, client_id)
                  if w is not None and s not in client.unreported]
        for split, _ in leases[:count]:
            client.received.add(split)
            client.unreported.add(split)
            self.received_ever[job_id].add(split)

    def report(self, job_id: str, client_id: str, count: int) -> None:
        client = self.clients[job_id][client_id]
        splits = tuple(sorted(client.unreported)[:count])
        client.unreported -= set(splits)
        self.reports[job_id].update(splits)  # the model first: apply checks against it
        if splits:
            self.apply(S.ClientSeen(job_id, client_id, self.now),
                       S.SplitsDone(job_id, client_id, splits))

    def _tick(self, seconds: float) -> None:
        self.now += seconds
        for update in S.expire(self.state, self.now, CLIENT_TIMEOUT):
            if isinstance(update, S.ClientGone):
                seen = self.state.clients(update.job_id)[update.client_id]
                assert self.now - seen > CLIENT_TIMEOUT
                del self.clients[update.job_id][update.client_id]  # it is dead
            else:
                assert not self.clients[update.job_id]
                if self.state.finished(update.job_id):
                    self.finished_removed.append(update.job_id)
                    self.check_exactly_once(update.job_id)
                del self.clients[update.job_id]
            self.apply(update)

    # ------------------------------------------------------------ the checks

    def check_invariants(self) -> None:
        for job_id in self.state.jobs:
            info = self.state.job(job_id)
            leased = [s for splits in info.leased.values() for s in splits]
            orphaned = [s for splits in info.orphaned.values() for s in splits]
            held = leased + orphaned
            assert len(held) == len(set(held)), f"a split leased twice: {info}"
            assert set(info.leased) <= set(self.state.alive_workers())
            assert not set(held) & set(self.reports[job_id]), "a done split is leased"
            free = self.state.free_splits(job_id, info.num_splits + 1)
            assert info.done + len(held) + len(free) == info.num_splits
            assert info.done == len(self.reports[job_id])
            assert self.state.finished(job_id) == (info.done == info.num_splits)
            live = collections.Counter(
                s for client in self.clients[job_id].values() for s in client.received)
            assert all(n == 1 for n in live.values()), f"a split reached two live clients: {live}"

    def _check_policy(self, before: S.JobInfo, granted: S.LeasesGranted,
                      max_outstanding: int) -> None:
        """The grant follows the policy, against a brute-force reading of ``before``."""
        alive = self.state.alive_workers()
        mine = dict(self.state.leases_of(before.job_id, granted.client_id))
        orphans = sorted(s for s, w in mine.items() if w is None)
        splits = [s for s, _ in granted.leases]
        taken = {s for group in (before.leased, before.orphaned) for v in group.values()
                 for s in v} | set(self.reports[before.job_id])
        free = [s for s in range(before.num_splits) if s not in taken]
        fresh = splits[len(orphans[:len(splits)]):]
        assert splits[:len(orphans)] == orphans[:len(splits)]  # the client's orphans first
        assert fresh == free[:len(fresh)]  # then the lowest free splits
        assert len(mine) + len(fresh) <= max(max_outstanding, len(mine))
        if before.mode == "static":
            assert [w for _, w in granted.leases] == [alive[s % len(alive)] for s in splits]
        else:
            loads = {w: len(before.leased.get(w, ())) for w in alive}
            for _, worker_id in granted.leases:
                assert loads[worker_id] == min(loads.values())
                assert worker_id == next(w for w in alive if loads[w] == loads[worker_id])
                loads[worker_id] += 1

    def drain(self) -> None:
        """Finishes every job: a worker if none, a client where none, rounds until done."""
        if not self.state.alive_workers():
            self._join(0)
        for job_id in self.state.jobs:
            if not self.clients[job_id]:
                self._client_of(job_id)
            for _ in range(self.state.job(job_id).num_splits + 1):
                for client_id in list(self.clients[job_id]):
                    self.request(job_id, client_id, count=8, max_outstanding=16)
                    self.read(job_id, client_id, count=16)
                    self.report(job_id, client_id, count=16)
                if self.state.finished(job_id):
                    break
            self.check_exactly_once(job_id)

    def _client_of(self, job_id: str) -> None:
        client_id = self._new_id("c")
        self.apply(S.ClientSeen(job_id, client_id, self.now))
        self.clients[job_id][client_id] = _Client()

    def check_exactly_once(self, job_id: str) -> None:
        num_splits = self.summaries[-1]["jobs"][job_id][0].num_splits
        assert self.state.finished(job_id)
        assert self.reports[job_id] == collections.Counter(range(num_splits))
        assert self.received_ever[job_id] == set(range(num_splits))
