"""Coordinated reads' rounds on a worker, without Ray: every consumer of a round gets its
element of one group of consecutive elements, once all of them asked; a round not ready
within the bound is skipped for every consumer, and its group goes to the next round; a
consumer that stops asking is counted out after its timeout."""

import threading
import time

import numpy as np

from jdata.service import _rounds


class _Stream:
    """Consecutive int64 scalars; ``gate`` (an Event) holds production when cleared."""

    def __init__(self, end=None):
        self.next = 0
        self.gate = threading.Event()
        self.gate.set()
        self._end = end

    def __call__(self, n):
        assert self.gate.wait(timeout=30)
        out = []
        while len(out) < n and (self._end is None or self.next < self._end):
            out.append(np.int64(self.next))
            self.next += 1
        return out, ()


def _all(rounds, r, consumers):
    """``take(r, i)`` of each consumer ``i``, each on a thread of its own (they wait for
    one another)."""
    return _all_of(rounds, [(r, i) for i in consumers])


def _ints(results):
    return [int(e) for e, _, _ in results]


def test_every_consumer_of_a_round_gets_its_element_of_one_group():
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=3, bound_sec=10.0)
    try:
        got = [_ints(_all(rounds, r, [0, 1, 2])) for r in range(5)]
        assert got == [[3 * r, 3 * r + 1, 3 * r + 2] for r in range(5)]
        assert _ints(_all(rounds, 5, [2, 0, 1])) == [17, 15, 16]
        assert rounds.snapshot()["rounds"] == 6 and rounds.snapshot()["skipped_rounds"] == 0
    finally:
        rounds.close()


def test_a_round_waits_for_every_consumer_so_a_dying_worker_hands_it_to_all_or_none():
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=2, bound_sec=10.0)
    try:
        assert _ints(_all(rounds, 0, [0, 1])) == [0, 1]  # both live from now on
        first = {}
        t = threading.Thread(target=lambda: first.update(out=rounds.take(1, 0)))
        t.start()
        t.join(timeout=0.3)
        assert t.is_alive() and not first  # consumer 1 has not asked: nobody gets round 1
        assert int(rounds.take(1, 1)[0]) == 3
        t.join(timeout=30)
        assert int(first["out"][0]) == 2
    finally:
        rounds.close()


def test_a_round_not_ready_within_the_bound_is_skipped_by_all_and_nothing_is_lost():
    stream = _Stream()
    rounds = _rounds.RoundBuffer(stream, num_consumers=2, bound_sec=0.3, ahead=1)
    try:
        assert _ints(_all(rounds, 0, [0, 1])) == [0, 1]
        _wait(lambda: rounds.snapshot()["ready_groups"] == 1)  # group [2, 3] made ahead
        stream.gate.clear()  # production stalls: round 2 will find nothing ready
        assert _ints(_all(rounds, 1, [0, 1])) == [2, 3]
        began = time.monotonic()
        assert _all(rounds, 2, [0, 1]) == [(None, True, False)] * 2  # skipped by both
        assert 0.25 <= time.monotonic() - began < 5
        stream.gate.set()
        assert _ints(_all(rounds, 3, [0, 1])) == [4, 5]  # not lost
        assert rounds.snapshot()["skipped_rounds"] == 1
    finally:
        rounds.close()


def test_a_consumer_that_stops_asking_is_counted_out_after_its_timeout():
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=2, bound_sec=5.0,
                                 consumer_timeout=0.5)
    try:
        assert _ints(_all(rounds, 0, [0, 1])) == [0, 1]
        began = time.monotonic()
        assert int(rounds.take(1, 0)[0]) == 2  # consumer 1 is gone: after its timeout
        assert 0.3 <= time.monotonic() - began < 5
        assert int(rounds.take(2, 0)[0]) == 4  # and at once from then on
    finally:
        rounds.close()


def test_the_end_of_the_stream_ends_the_rounds():
    rounds = _rounds.RoundBuffer(_Stream(end=4), num_consumers=2, bound_sec=5.0)
    try:
        assert [_ints(_all(rounds, r, [0, 1])) for r in range(2)] == [[0, 1], [2, 3]]
        assert _all(rounds, 2, [0, 1]) == [(None, False, True)] * 2
    finally:
        rounds.close()


def test_a_restored_consumer_reads_a_kept_round_again_and_skips_a_forgotten_one():
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=2, bound_sec=10.0)
    try:
        first = _ints(_all(rounds, 0, [0, 1]))
        assert int(rounds.take(0, 1)[0]) == first[1]  # taken already: kept a while
        for r in range(1, 40):
            _all(rounds, r, [0, 1])
        # Long gone: skipped. A new group there (as before the chaos run found it) gave a
        # restored consumer other groups than its peer had read in the same rounds.
        assert rounds.take(0, 1) == (None, True, False)
        assert rounds.take(5, 0) == (None, True, False)
        assert _ints(_all(rounds, 40, [0, 1])) == [80, 81]  # the next round: the next group
    finally:
        rounds.close()


def _wait(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)  # polling the producer thread's state


def test_a_round_waited_on_past_the_rounds_lifetime_keeps_its_entry(monkeypatch):
    # Found by the chaos run: rounds were forgotten a while after their first request even
    # while their consumers waited in ``take`` (for a peer), and the waiting ones failed
    # with ValueError (no round left to be the oldest waiting). A lifetime of 0 forgets
    # every handed-out round at once.
    monkeypatch.setattr(_rounds, "_ROUND_TTL_SEC", 0.0)
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=2, bound_sec=60.0,
                                 consumer_timeout=0.5)
    try:
        assert int(rounds.take(0, 1)[0]) == 1  # consumer 1 alone (0 never asked): at once
        # Each waits for the other (alive) to ask its round, then is counted out of it.
        a, b = _all_of(rounds, [(1, 0), (2, 1)])
        assert not a[1] and not b[1] and int(a[0]) % 2 == 0 and int(b[0]) % 2 == 1
        assert {int(a[0]) // 2, int(b[0]) // 2} == {1, 2}  # the next two groups
    finally:
        rounds.close()


def _all_of(rounds, takes):
    """``take(r, i)`` for each ``(r, i)`` of ``takes``, each on a thread of its own; a take
    that raises fails the test."""
    out, errors = {}, []

    def one(r, i):
        try:
            out[(r, i)] = rounds.take(r, i)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=t) for t in takes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(out) == len(takes)
    return [out[t] for t in takes]


def _take_many_on_threads(rounds, requests):
    """``take_many(first, 4, consumer, turn)`` of each ``(first, consumer, turn)`` on a
    thread of its own; the threads and where their results go."""
    out = {}

    def one(first, consumer, turn):
        out[(first, consumer)] = _ints(rounds.take_many(first, 4, consumer, turn))

    threads = [threading.Thread(target=one, args=r) for r in requests]
    for t in threads:
        t.start()
    return threads, out


def test_a_readers_later_request_that_runs_first_waits_for_the_earlier_ones():
    """Found by test_contract under load: a consumer's requests for rounds 8.. and 0.. ran
    on the worker's threads in that order, and round 8 got the first group: the same
    keys gave another stream on each run. A request's rounds are asked for in its reader's
    order now."""
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=2, bound_sec=30.0)
    try:
        later, out = _take_many_on_threads(rounds, [(4, c, (f"reader{c}", 1)) for c in (0, 1)])
        for t in later:
            t.join(timeout=0.3)
        assert all(t.is_alive() for t in later) and not out  # waiting for their turn 0
        earlier, first = _take_many_on_threads(rounds, [(0, c, (f"reader{c}", 0))
                                                        for c in (0, 1)])
        for t in earlier + later:
            t.join(timeout=60)
        assert {**first, **out} == {(0, 0): [0, 2, 4, 6], (0, 1): [1, 3, 5, 7],
                       (4, 0): [8, 10, 12, 14], (4, 1): [9, 11, 13, 15]}
    finally:
        rounds.close()


def test_a_turn_that_never_comes_holds_a_request_for_the_bound_only():
    """A buffer made again (idle too long) never sees a reader's earlier requests."""
    rounds = _rounds.RoundBuffer(_Stream(), num_consumers=2, bound_sec=0.3)
    try:
        began = time.monotonic()
        threads, out = _take_many_on_threads(rounds, [(8, c, (f"reader{c}", 5)) for c in (0, 1)])
        for t in threads:
            t.join(timeout=60)
        assert out == {(8, 0): [0, 2, 4, 6], (8, 1): [1, 3, 5, 7]}
        assert time.monotonic() - began >= 0.25
        threads, out = _take_many_on_threads(rounds, [(12, c, (f"reader{c}", 6)) for c in (0, 1)])
        for t in threads:
            t.join(timeout=60)
        assert out == {(12, 0): [8, 10, 12, 14], (12, 1): [9, 11, 13, 15]}
    finally:
        rounds.close()
