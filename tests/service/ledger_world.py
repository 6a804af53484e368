"""A dispatcher's ledger, its workers and its consumers, played without Ray.

The dispatcher is the real pure part of it: ``_requests`` (admission, leases,
commits, releases) and the policies over ``DispatcherState``, every update kept
in ``history`` as the journal would keep it. Each consumer is the real
``LeaseCore``; this module only does its I/O: a worker hands out unit ``u`` as
the elements ``(u, 0) .. (u, size(u) - 1)`` (an infinite pipeline is not
needed: ``off`` slots end too), a block at a time, and a read of a unit whose
worker is gone fails.

Each consumer's *lineage* keeps what the service promises it: the elements it
yielded up to its last commit if it was killed, all of them if it left alive.
``check`` then says whether every element of every finished epoch is kept
exactly once across the lineages, but those of units a restore reported as
conflicts (the loss the contract allows there is counted, never silent).
"""

from __future__ import annotations

import collections
import dataclasses
import json

from jdata.service import _lease_core, _requests, _snapshot, journal
from jdata.service import state as S
from jdata.service._lease_core import Action
from jdata.service._messages import (Commit, JobPlan, LeaseRequest, Mode, Position, Register,
                                     Release, Resume, Standing)

CLIENT_TIMEOUT = 10.0
JOB_TIMEOUT = 1e9  # named jobs outlive every run here: restores always find them


def size(unit: int) -> int:
    return (unit * 7 + 3) % 5  # 0 to 4 elements: empty units too


@dataclasses.dataclass
class Lineage:
    name: str
    job_name: str | None
    mode: Mode
    kept: list = dataclasses.field(default_factory=list)
    commits: list = dataclasses.field(default_factory=list)  # (Resume, len(kept) then)
    conflicts: set = dataclasses.field(default_factory=set)  # (epoch, unit)
    epochs: set = dataclasses.field(default_factory=set)


class Client:
    def __init__(self, lineage: Lineage, order: str):
        self.lineage = lineage
        self.core = _lease_core.LeaseCore(order)
        self.reads: dict[int, str] = {}  # unit -> the worker its read runs on
        self.job_id = self.client_id = None
        self.epoch = 0
        self.since_commit: list = []
        self.committed = Position()  # where it committed last (a restore's position)
        self.confirmed_at = 0.0  # the world's time of its last call answered as alive
        self.alive = True
        self.paused = False
        self.ended = False


class World:
    def __init__(self):
        self.state = S.DispatcherState()
        self.history: list = []
        self.now = 0.0
        self.draining: set[str] = set()
        self.clients: list[Client] = []
        self.lineages: list[Lineage] = []
        self._ids = collections.Counter()
        self.units_of: dict[tuple, int] = {}  # (job identity, epoch) -> units
        self.spread: collections.Counter = collections.Counter()  # the dispatcher's hint
        self.finished: set[tuple] = set()  # (job identity, epoch) a consumer saw end

    def new_id(self, kind: str) -> str:
        self._ids[kind] += 1
        return f"{kind}{self._ids[kind]}"

    def apply(self, update) -> None:
        """As the dispatcher does: applied, and journaled but a ``ClientSeen``."""
        self.state.apply(update)
        if type(update) is not S.ClientSeen:
            self.history.append(update)

    # ------------------------------------------------------------ workers

    def add_worker(self) -> None:
        self.apply(S.WorkerJoined(self.new_id("w")))

    def lose_worker(self, index: int) -> None:
        alive = self.state.alive_workers()
        if alive:
            worker = alive[index % len(alive)]
            self.apply(S.WorkerLost(worker))
            self.draining.discard(worker)

    def drain(self, index: int) -> None:
        alive = self.state.alive_workers()
        if alive:
            self.draining ^= {alive[index % len(alive)]}

    def restart_dispatcher(self) -> None:
        """Replays the journal's records (encoded and decoded) into a new state, whose
        clients all count as seen now (a restart's grace), as the dispatcher does; the
        state goes on from its snapshot (as a compacted journal's restore does), which
        must be the replayed state to the letter."""
        replayed = S.DispatcherState()
        for update in self.history:
            replayed.apply(S.decode(S.encode(update)))
        for state in (replayed, self.state):
            state.grace(self.now)
        assert summary(replayed) == summary(self.state)
        record = json.loads(json.dumps(_snapshot.encode(self.state)))
        restored = _snapshot.decode(record)
        assert _snapshot.encode(restored) == _snapshot.encode(replayed)
        assert summary(restored) == summary(replayed)
        self.state = restored

    # ------------------------------------------------------------ consumers

    def new_client(self, job_name: str | None, mode: Mode, num_units: int) -> Client | None:
        lineage = Lineage(self.new_id("l"), job_name, mode)
        client = Client(lineage, "turns" if mode is Mode.OFF else "order")
        if not self._register(client, plan=None if mode is Mode.OFF else JobPlan(num_units)):
            return None
        self.lineages.append(lineage)
        self.clients.append(client)
        return client

    def _register(self, client: Client, plan, resume: Resume | None = None,
                  exact_only: bool = False) -> bool:
        lineage = client.lineage
        request = Register(lineage.job_name, "fp", lineage.mode, 0, lineage.name, plan, resume,
                           exact_only)
        reply = _requests.register(self.state, request, self.apply, now=self.now,
                                   job_id=self.new_id("job"), client_id=self.new_id("c"),
                                   client_timeout=CLIENT_TIMEOUT)
        if reply.need_plan:
            return False
        if reply.refused is not None:
            return False
        client.job_id, client.client_id, client.epoch = reply.job_id, reply.client_id, reply.epoch
        client.confirmed_at = self.now
        lineage.epochs.add(reply.epoch)
        lineage.conflicts |= {(reply.epoch, c.unit) for c in reply.conflicts}
        if resume is not None:  # a restore may reopen what a finished epoch had done
            self.finished.discard((self.identity(client), reply.epoch))
        client.core.keep_only(reply.leased)
        client.reads.clear()
        self.units_of[self.identity(client), reply.epoch] = reply.plan.num_units
        return True

    def identity(self, client: Client):
        lineage = client.lineage
        return lineage.job_name if lineage.job_name is not None else lineage.name

    def restore(self, lineage: Lineage, commit_index: int) -> None:
        """``lineage`` restored from one of its commits into a new consumer."""
        position, kept = lineage.commits[commit_index]
        del lineage.kept[kept:]
        del lineage.commits[commit_index + 1:]
        client = Client(lineage, "turns" if lineage.mode is Mode.OFF else "order")
        client.core.restore(position.position)
        client.committed = position.position
        plan = JobPlan(self.units_of[lineage.job_name or lineage.name, position.epoch])
        if self._register(client, plan, position):
            self.clients.append(client)

    def step(self, client: Client, k: int) -> None:
        """One action of a consumer (it heartbeats as it goes)."""
        if not client.alive or client.ended:
            return
        client.paused = False
        action, unit = client.core.step()
        if action is Action.YIELD and self.now - client.confirmed_at >= CLIENT_TIMEOUT / 2:
            action = Action.LEASE  # maybe expired while paused: it asks before it yields
        if action is Action.YIELD:
            out, _ = client.core.held[unit].buffer.take(k)
            client.since_commit += out
            client.core.taken(unit, len(out))
        elif action in (Action.PULL, Action.PULL_ANY):
            self._pull(client, unit if action is Action.PULL else min(
                u for u, h in client.core.held.items() if h.reading), k)
        elif action is Action.LEASE:
            self._lease(client)
        elif action is Action.WAIT:
            client.core.retry()
        elif action is Action.COMMIT:
            self.commit(client, settle=True)
        else:
            self._release(client)

    def _pull(self, client: Client, unit: int, k: int) -> None:
        held = client.core.held[unit]
        if client.reads[unit] not in self.state.alive_workers():
            client.core.lost(unit)
            return
        rest = size(unit) - held.received
        if rest <= 0:
            client.core.ended(unit)
            return
        n = min(k, rest)
        client.core.arrived(unit, [(client.epoch, unit, held.received + i) for i in range(n)],
                            ())

    def _lease(self, client: Client, reply_lost: bool = False) -> None:
        want, max_held = client.core.lease_size()
        request = LeaseRequest(client.job_id, client.client_id, want, max_held,
                               tuple(client.core.to_report), tuple(client.core.to_return),
                               waiting=True, held=client.core.on_workers())
        reply = _requests.lease(self.state, request, self.apply, now=self.now,
                                exclude=frozenset(self.draining), spread=self.spread)
        self.spread.update(grant.worker_id for grant in reply.grants)
        if reply_lost:  # the dispatcher was killed before it answered: the call is retried
            return
        if reply.standing is not Standing.OK:
            self._resume(client, reply.standing)
            return
        client.confirmed_at = self.now
        client.core.returned()
        self._keep_parts(client, reply.give_back)
        for grant in reply.grants:
            client.core.granted(grant.unit, grant.offset)
            client.reads[grant.unit] = grant.worker_id
        client.core.leased(len(reply.grants), reply.finished, reply.workers, reply.give_back,
                           reply.drained)

    def lose_a_lease_reply(self, client: Client) -> None:
        """A lease the dispatcher decided and journaled whose reply never came (it was
        killed first, or the call timed out): the client asks again as it was."""
        if client.alive and not client.ended and client.job_id is not None:
            self._lease(client, reply_lost=True)

    def _resume(self, client: Client, standing: Standing) -> None:
        """A paused consumer found itself expired: it resumes where it stands if no other
        took its units meanwhile, else it fails (and its user restores a checkpoint)."""
        if standing is Standing.SUPERSEDED:
            client.alive = False
            return
        resume = Resume(client.epoch, client.core.position(), client.committed)
        plan = JobPlan(self.units_of[self.identity(client), client.epoch])
        if not self._register(client, plan, resume, exact_only=True):
            client.alive = False

    def _release(self, client: Client) -> None:
        request = Release(client.job_id, client.client_id,
                          client.core.offsets() + tuple(client.core.to_return),
                          tuple(client.core.to_report))
        if _requests.release(self.state, request, self.apply) is Standing.OK:
            client.lineage.kept += client.since_commit
            client.since_commit = []
            client.ended = True
            if client.core.finished:
                self.finished.add((self.identity(client), client.epoch))
        else:
            self._resume(client, _requests.standing(self.state, client.job_id,
                                                    client.client_id))

    def commit(self, client: Client, settle: bool = False) -> None:
        """``get_state()``: the position goes to the dispatcher and into a checkpoint
        (``settle``: the commit at the end of an epoch, in no checkpoint)."""
        if not client.alive or client.ended:
            return
        position = client.core.position()
        where = _requests.commit(self.state, Commit(client.job_id, client.client_id, position,
                                                    tuple(client.core.to_report)),
                                 self.apply, now=self.now)
        if where is not Standing.OK:
            return
        lineage = client.lineage
        lineage.kept += client.since_commit
        client.since_commit = []
        if settle:
            client.core.settled = True
        else:
            lineage.commits.append((Resume(client.epoch, position), len(lineage.kept)))
        client.committed = position

    def hand_off(self, client: Client) -> None:
        """An idle consumer hands its units to a waiting peer, at what it yielded."""
        if not client.alive or client.ended or not client.core.held:
            return
        core = client.core
        position = core.position()
        core.to_return += [(u, h.yielded) for u, h in sorted(core.held.items())]
        core.handed(list(core.held))
        client.reads.clear()
        request = Release(client.job_id, client.client_id, tuple(core.to_return),
                          tuple(core.to_report), position)
        if _requests.return_units(self.state, request, self.apply) is Standing.OK:
            core.returned()
            core.to_report = []
            client.lineage.kept += client.since_commit  # committed by the hand-off
            client.since_commit = []
            client.committed = position

    def _keep_parts(self, client: Client, units) -> None:
        """A unit given back is kept by its lineage as far as it yielded it (as if
        committed): another consumer goes on past it, so it cannot roll back."""
        units = set(units)
        lineage = client.lineage
        lineage.kept += [e for e in client.since_commit if e[1] in units]
        client.since_commit = [e for e in client.since_commit if e[1] not in units]

    def close(self, client: Client) -> None:
        """The consumer closes its iterator mid-epoch: it keeps what it yielded."""
        if client.alive and not client.ended:
            self._release(client)

    def kill(self, client: Client) -> None:
        client.alive = False

    def pause(self, client: Client) -> None:
        client.paused = True

    def tick(self, seconds: float) -> None:
        """Time passes; live consumers heartbeat (their thread runs on), then silent
        ones expire."""
        self.now += seconds
        for client in self.clients:
            if client.alive and not client.paused and not client.ended:
                reply = _requests.heartbeat(self.state, client.job_id, client.client_id,
                                            self.apply, now=self.now, idle_sec=0.0,
                                            peers_waiting=False)
                if reply.standing is Standing.OK:
                    client.confirmed_at = self.now
        for update in S.expire(self.state, self.now, CLIENT_TIMEOUT, JOB_TIMEOUT):
            self.apply(update)

    # ------------------------------------------------------------ the promise

    def finish(self, max_rounds: int = 300) -> None:
        """Runs every live consumer to its epoch's end (time passes when they wait)."""
        for _ in range(max_rounds):
            live = [c for c in self.clients if c.alive and not c.ended]
            if not live:
                return
            if not self.state.alive_workers():
                self.add_worker()
            for client in live:
                for _ in range(4):
                    self.step(client, 3)
            self.tick(CLIENT_TIMEOUT / 4)
        raise AssertionError(f"consumers never finished: {self.clients}")

    def check(self) -> None:
        """Exactly once per finished epoch over what lineages keep, but conflicts."""
        kept = collections.Counter()
        conflicts = set()
        for lineage in self.lineages:
            identity = lineage.job_name or lineage.name
            kept.update((identity,) + element for element in lineage.kept)
            conflicts |= {(identity, epoch, unit) for epoch, unit in lineage.conflicts}
        for identity, epoch in self.finished:
            units = self.units_of[identity, epoch]
            for unit in range(units):
                if (identity, epoch, unit) in conflicts:
                    continue
                for i in range(size(unit)):
                    count = kept[identity, epoch, unit, i]
                    assert count == 1, (f"element {i} of unit {unit} of {identity} epoch "
                                        f"{epoch} kept {count} times")


def summary(state: S.DispatcherState) -> dict:
    """Everything the queries tell about ``state``: equal summaries, equal states."""
    jobs = {}
    for job_id in state.jobs:
        info = state.job(job_id)
        ledger = state.ledger(job_id)
        jobs[job_id] = (info, state.free_units(job_id, (info.num_units or 64) + 1),
                        {c: state.leases_of(job_id, c) for c in info.clients},
                        {c: dict(ledger.clients[c].touched) for c in info.clients},
                        dict(ledger.units.segments), ledger.units.done_by.tolist(),
                        dict(ledger.gone), state.worker_loads(job_id), state.finished(job_id))
    return {"workers": state.alive_workers(),
            "latest": state.latest_epochs(),
            "jobs": jobs}


def replay_through_journal(world: World, path) -> S.DispatcherState:
    """The world's history appended to a real journal and restored from it."""
    with journal.Journal(path) as j:
        j.append(world.history)
    return journal.restore(path)
