"""The service's exactly-once ledger under any interleaving, without Ray (Hypothesis).

A ``RuleBasedStateMachine`` plays workers joining, dying and draining,
consumers of named and anonymous jobs in every leasing mode leasing, reading,
yielding, committing (``get_state``), closing, being killed or paused past
their timeout, losing a lease's reply (the dispatcher killed after it journaled),
lineages restored from any earlier commit, and the dispatcher restarting from its journal, over the real ``_requests``, policies, state and
``LeaseCore`` (``tests/service/ledger_world.py`` only plays the I/O). At the
end every consumer runs to its epoch's end and every finished epoch must hold
each element exactly once across what its consumers keep, but for the units a
restore reported as conflicts.
"""

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from jdata.service._messages import Mode
from tests.service.ledger_world import World, summary

JOBS = [("A", Mode.DYNAMIC, 9), ("B", Mode.STATIC, 7), ("C", Mode.OFF, 0),
        (None, Mode.DYNAMIC, 6), (None, Mode.STATIC, 5), (None, Mode.OFF, 0)]


class LedgerMachine(RuleBasedStateMachine):
    @initialize(workers=st.integers(1, 3))
    def start(self, workers):
        self.world = World()
        for _ in range(workers):
            self.world.add_worker()

    def _client(self, index: int):
        clients = self.world.clients
        return clients[index % len(clients)] if clients else None

    @rule(job=st.sampled_from(JOBS))
    def new_client(self, job):
        name, mode, units = job
        self.world.new_client(name, mode, units)

    @rule(index=st.integers(0, 15), k=st.integers(1, 4), times=st.integers(1, 12))
    def step(self, index, k, times):
        client = self._client(index)
        for _ in range(times if client else 0):
            self.world.step(client, k)

    @rule(index=st.integers(0, 15), event=st.sampled_from(
        ["commit", "close", "hand_off", "lose_a_lease_reply", "kill"]))
    def client_event(self, index, event):
        """A consumer commits (``get_state``), closes, goes idle and hands its units
        off, has a lease's reply lost, or is killed."""
        if (client := self._client(index)) is not None:
            getattr(self.world, event)(client)

    @rule(index=st.integers(0, 15), seconds=st.sampled_from([4.0, 11.0]))
    def pause(self, index, seconds):
        """A consumer stops (SIGSTOP, a long evaluation) while time passes: past its
        timeout it is expired, and finds out when it goes on."""
        if (client := self._client(index)) is not None:
            self.world.pause(client)
            self.world.tick(seconds)

    @rule(index=st.integers(0, 15), which=st.integers(0, 7))
    def restore(self, index, which):
        lineages = [lineage for lineage in self.world.lineages if lineage.commits and not any(
            c.alive and not c.ended and c.lineage is lineage for c in self.world.clients)]
        if lineages:
            lineage = lineages[index % len(lineages)]
            self.world.restore(lineage, which % len(lineage.commits))

    @rule()
    def add_worker(self):
        self.world.add_worker()

    @rule(index=st.integers(0, 7))
    def lose_worker(self, index):
        self.world.lose_worker(index)

    @rule(index=st.integers(0, 7))
    def drain(self, index):
        self.world.drain(index)

    @rule(seconds=st.sampled_from([1.0, 4.0, 11.0]))
    def tick(self, seconds):
        self.world.tick(seconds)

    @rule()
    def restart_dispatcher(self):
        self.world.restart_dispatcher()

    @invariant()
    def no_unit_is_leased_twice(self):
        state = self.world.state
        for job_id in state.jobs:
            ledger = state.ledger(job_id)
            held = [u for units in ledger.by_client.values() for u in units]
            assert len(held) == len(set(held)) == len(ledger.leases)
            assert all(ledger.units.state(u) == 1 for u in held)

    def teardown(self):
        if hasattr(self, "world"):
            self.world.draining.clear()
            self.world.finish()
            self.world.check()


LedgerMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_the_ledger_keeps_every_element_exactly_once = LedgerMachine.TestCase


def test_a_replayed_journal_is_the_state_it_recorded(tmp_path):
    from tests.service.ledger_world import replay_through_journal

    world = World()
    world.add_worker()
    world.add_worker()
    a = world.new_client("A", Mode.DYNAMIC, 9)
    b = world.new_client("A", Mode.DYNAMIC, 9)
    for _ in range(20):
        world.step(a, 2)
        world.step(b, 3)
    world.commit(a)
    world.lose_worker(0)
    world.kill(b)
    world.tick(11.0)
    replayed = replay_through_journal(world, tmp_path / "j.sqlite")
    for state in (replayed, world.state):
        state.grace(world.now)  # heartbeats are not journaled: a restart's clocks start now
    assert summary(replayed) == summary(world.state)


@pytest.mark.parametrize("mode", [Mode.DYNAMIC, Mode.STATIC, Mode.OFF])
def test_two_consumers_of_a_named_job_share_its_units_once(mode):
    world = World()
    for _ in range(3):
        world.add_worker()
    clients = [world.new_client("J", mode, 11) for _ in range(2)]
    world.finish()
    world.check()
    assert all(c.lineage.kept for c in clients)  # both read some of it
