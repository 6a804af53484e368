"""The coordinated schedule without Ray (``_coordination.next_entry``): its first entry
starts at the consumers' run, a change of workers starts a new one ``ROUND_LEAD`` rounds
past the furthest consumer, and every worker keeps its slot; a new worker takes a slot
nobody had."""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from jdata.service import _coordination as co
from jdata.service import _rounds_reader as reader
from jdata.service import state as S


def _grow(schedule, furthest, alive):
    entry = co.next_entry("j", schedule, furthest, alive)
    return schedule + [(entry.first_round, entry.placements)] if entry else schedule


def test_the_first_entry_starts_at_the_run_of_the_furthest_consumer():
    entry = co.next_entry("j", [], 13, ["a", "b"])
    assert entry == S.RoundsScheduled("j", 8, ((0, "a"), (1, "b")))
    assert co.next_entry("j", [], 0, []) is None  # no worker yet: nothing to schedule


def test_the_same_workers_need_no_entry_and_new_ones_start_past_the_lead():
    schedule = _grow([], 0, ["a", "b"])
    assert co.next_entry("j", schedule, 40, ["a", "b"]) is None
    schedule = _grow(schedule, 40, ["b", "c"])  # a died, c joined
    assert schedule[-1] == (104, ((1, "b"), (2, "c")))  # 40 + 64, a whole run
    assert 104 % co.ROUNDS_PER_READ == 0


def test_a_worker_keeps_its_slot_and_a_new_one_never_takes_a_dead_ones():
    schedule = _grow([], 0, ["a", "b", "c"])
    schedule = _grow(schedule, 0, ["c"])
    schedule = _grow(schedule, 0, ["c", "d", "b"])
    assert schedule[-1][1] == ((2, "c"), (3, "d"), (1, "b"))
    starts = [first for first, _ in schedule]
    assert starts == [0, 64, 72]  # each a run past the last at least


def test_every_entry_it_makes_fits_the_ledger():
    s = S.DispatcherState()
    for update in [S.WorkerJoined("a"), S.WorkerJoined("b"),
                   S.JobCreated("j", "n", "fp", 0, "coordinated", None, None)]:
        s.apply(update)
    for furthest, joined, lost in [(0, None, None), (30, "c", "a"), (50, "d", None),
                                   (51, None, "b"), (90, "a2", "c")]:
        if joined:
            s.apply(S.WorkerJoined(joined))
        if lost:
            s.apply(S.WorkerLost(lost))
        entry = co.next_entry("j", list(s.ledger("j").schedule), furthest,
                              list(s.alive_workers()))
        s.apply(entry)  # validated by the ledger: slots kept, none given twice
    slots = [slot for _, placed in s.job("j").schedule for slot, _ in placed]
    assert sorted(set(slots)) == [0, 1, 2, 3, 4]


class ScheduleMachine(RuleBasedStateMachine):
    """Workers join and die, the dispatcher restarts from its journal (forgetting the
    rounds consumers reported), consumers are killed and restored from earlier rounds as
    new clients (the killed ones live in the ledger until they expire), and they read
    rounds as ``_rounds_reader`` does: they fetch the schedule every ``ROUND_LEAD // 4``
    rounds (reporting their round) and request the runs ``_RUNS_AHEAD`` ahead of theirs
    from the schedule they know. A round goes out
    once every consumer asked for it, so none reads more than those runs past another.
    Every run must go to the same (slot, worker) for every consumer."""

    CONSUMERS = 3

    @initialize(workers=st.integers(1, 3))
    def start(self, workers):
        self.state, self.history = S.DispatcherState(), []
        self.coordination = co.Coordination()
        self.workers = 0
        self._apply(S.JobCreated("j", "n", "fp", 0, "coordinated", None, None))
        for _ in range(workers):
            self.add_worker()
        self.rounds = [0] * self.CONSUMERS
        self.known = [None] * self.CONSUMERS  # the schedule each consumer fetched last
        self.until = [0] * self.CONSUMERS
        self.restored = [False] * self.CONSUMERS
        self.clients = [f"c{consumer}" for consumer in range(self.CONSUMERS)]
        self.dead: set[str] = set()  # killed clients the ledger has yet to expire
        self.placed: dict[int, tuple] = {}  # a run's first round -> where it was read

    def _apply(self, update):
        self.state.apply(update)
        self.history.append(update)

    @rule()
    def add_worker(self):
        self.workers += 1
        self._apply(S.WorkerJoined(f"w{self.workers}"))

    @rule(index=st.integers(0, 5))
    def lose_worker(self, index):
        alive = self.state.alive_workers()
        if len(alive) > 1:
            self._apply(S.WorkerLost(alive[index % len(alive)]))

    @rule()
    def restart_dispatcher(self):
        self.state = S.DispatcherState()
        for update in self.history:
            self.state.apply(S.decode(S.encode(update)))
        self.coordination = co.Coordination()

    @rule(consumer=st.integers(0, CONSUMERS - 1), back=st.integers(0, 40))
    def restore_a_consumer(self, consumer, back):
        """Killed, and restored from a state taken ``back`` rounds ago: a new reader, a
        new client (the killed one stays in the ledger until it expires)."""
        self.rounds[consumer] = max(0, self.rounds[consumer] - back)
        self.known[consumer], self.restored[consumer] = None, True
        self.dead.add(self.clients[consumer])
        self.clients[consumer] = f"{self.clients[consumer]}+"

    @rule()
    def expire_the_killed(self):
        self.dead.clear()

    @rule(consumer=st.integers(0, CONSUMERS - 1), rounds=st.integers(1, 24))
    def read_rounds(self, consumer, rounds):
        for _ in range(rounds):
            if not self._read_a_round(consumer):
                return

    @rule(rounds=st.integers(1, 96))
    def read_together(self, rounds):
        """Every consumer reads, a round each in turn (runs far past the last entry)."""
        for _ in range(rounds):
            for consumer in range(self.CONSUMERS):
                self._read_a_round(consumer)

    def _read_a_round(self, consumer) -> bool:
        r, run = self.rounds[consumer], co.ROUNDS_PER_READ
        if r >= min(self.rounds) + (reader._RUNS_AHEAD - 1) * run:
            return False  # its round waits for the others to ask for it
        if self.known[consumer] is None or r >= self.until[consumer]:
            self.coordination.furthest("j", self.clients[consumer], reader.reported_round(
                r, self.known[consumer] is not None, self.restored[consumer]))
            placing = self.coordination.placing_round("j", set(self.clients) | self.dead)
            entry = co.next_entry("j", list(self.state.ledger("j").schedule), placing,
                                  list(self.state.alive_workers()))
            if entry is not None:
                self._apply(entry)
            self.known[consumer] = list(self.state.ledger("j").schedule)
            self.until[consumer] = r + co.ROUND_LEAD // 4
        first = r - r % run
        for start in range(first, first + reader._RUNS_AHEAD * run, run):
            placed = self.known[consumer][0][1]  # as the reader picks its entry
            for entry_first, entry_placed in self.known[consumer]:
                if entry_first <= start:
                    placed = entry_placed
            where = placed[(start // run) % len(placed)]
            assert self.placed.setdefault(start, where) == where, (start, where)
        self.rounds[consumer] += 1
        return True

    @invariant()
    def every_worker_keeps_one_slot_and_every_slot_one_worker(self):
        if not hasattr(self, "state"):
            return
        pairs = {pair for _, placed in self.state.ledger("j").schedule for pair in placed}
        assert len({w for _, w in pairs}) == len({s for s, _ in pairs}) == len(pairs)


ScheduleMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_every_consumer_reads_each_run_from_one_place = ScheduleMachine.TestCase


def test_a_restarted_dispatcher_places_no_entry_behind_a_restored_consumer():
    """Found by the chaos run (seed 110): a consumer restored after the dispatcher restarted
    reported no round, so the dispatcher took 0 for the furthest and placed the workers left
    after a rescale from round 64, behind the rounds the others had requested: 48 rounds
    read from two slots. A restored consumer reports its round now, and a restarted
    dispatcher adds no entry before every live consumer reported one (the killed one
    until it expires)."""
    world = ScheduleMachine()
    world.start(workers=2)
    for _ in range(10):
        for consumer in range(3):
            world.read_rounds(consumer, 12)
    assert world.rounds == [120] * 3
    world.restart_dispatcher()
    world.lose_worker(0)
    world.restore_a_consumer(0, 4)
    for consumer in range(3):
        world.read_rounds(consumer, 12)  # every run read from one place (asserted inside)
    assert world.state.ledger("j").schedule == [(0, ((0, "w1"), (1, "w2")))]
    world.expire_the_killed()
    for consumer in range(3):
        world.read_rounds(consumer, 12)
    assert world.state.ledger("j").schedule[-1] == (200, ((1, "w2"),))
    assert co.next_entry("j", world.state.ledger("j").schedule, None, ["w3"]) is None


def test_a_consumer_restored_far_behind_and_asking_first_after_a_restart_moves_no_run():
    """Found by this file's machine: after a restart, a consumer restored 48 rounds back
    asked first and its round alone placed a new worker from round 64, behind runs the
    others had requested from the old entry. The entry waits for every live consumer's
    round and starts ``ROUND_LEAD`` past the furthest."""
    world = ScheduleMachine()
    world.start(workers=2)
    world.read_together(48)
    world.add_worker()
    world.restart_dispatcher()
    world.restore_a_consumer(0, 48)
    world.read_together(40)  # every run read from one place (asserted inside)
    assert world.rounds == [40, 56, 56]
    assert world.state.ledger("j").schedule == [(0, ((0, "w1"), (1, "w2")))]
    world.expire_the_killed()
    world.read_together(40)
    assert world.state.ledger("j").schedule[-1] == (112, ((0, "w1"), (1, "w2"), (2, "w3")))
