"""The coordinated schedule without Ray (``_coordination.next_entry``): its first entry
starts at the consumers' run, a change of workers starts a new one ``ROUND_LEAD`` rounds
past the furthest consumer, and every worker keeps its slot; a new worker takes a slot
nobody had."""

from jdata.service import _coordination as co
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
