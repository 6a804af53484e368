"""A shared job's sliding window on a worker, without Ray: every consumer reads the same
stream, computed once; a consumer that fell behind skips to the window's start and is told how
many elements it skipped; the window stays within its bytes."""

import threading

import jax

import numpy as np
import pytest

import jdata
from jdata.service import _blocks, _window, worker


class _Counting:
    """An infinite stream of int64 scalars (8 bytes each) that counts what it computes."""

    def __init__(self, fail_at=(), end_at=None):
        self.computed = 0
        self._fail_at, self._end_at = set(fail_at), end_at

    def __call__(self, n):
        elements, failures = [], []
        while len(elements) < n and (self._end_at is None or self.computed < self._end_at):
            if self.computed in self._fail_at:
                failures.append(len(elements))
                elements.append(_blocks.Failure(jdata.UDFError("map", self.computed,
                                                               ValueError("bad"))))
            else:
                elements.append(np.int64(self.computed))
            self.computed += 1
        return elements, tuple(failures), 8 * len(elements)


def _window_of(stream, max_bytes=1 << 20, block=4):
    return _window.SharedWindow(stream, max_bytes, block, lambda size, *_: size)


def _read(window, consumer, n, count):
    """``count`` elements (or failures, as None) read ``n`` at a time; and what was skipped."""
    out, skipped = [], 0
    while len(out) < count:
        elements, failures, _, skip, _, _ = window.read(consumer, min(n, count - len(out)))
        assert elements
        skipped += skip
        out += [None if i in failures else int(e) for i, e in enumerate(elements)]
    return out, skipped


def test_consumers_read_the_same_stream_computed_once():
    stream = _Counting()
    window = _window_of(stream)
    a, _ = _read(window, "a", 3, 30)
    b, _ = _read(window, "b", 5, 30)
    assert a == b == list(range(30))
    assert stream.computed == 32  # whole blocks of 4: once, for both
    stats = window.snapshot()
    assert stats["produced"] == 32 and stats["served"] == 60 and stats["consumers"] == 2
    assert stats["hits"] < stats["reads"]  # a's reads computed; b's were all hits
    rest = window.read("b", 5)
    assert [int(e) for e in rest[0]] == [30, 31] and rest[4] is True  # the block's end
    assert window.read("b", 5)[4] is False and stream.computed == 36  # b at the end: computes


def test_a_consumer_behind_the_window_skips_to_its_start_and_is_told():
    stream = _Counting()
    window = _window_of(stream, max_bytes=8 * 16, block=8)  # 16 elements of 8 bytes
    slow, _ = _read(window, "slow", 2, 2)
    fast, _ = _read(window, "fast", 8, 200)
    assert fast == list(range(200)) and window.snapshot()["window_bytes"] <= 8 * 16
    elements, _, _, skipped, hit, after = window.read("slow", 4)
    start = after - len(elements)
    assert skipped == start - 2 > 0 and hit and [int(e) for e in elements][0] == start
    assert window.snapshot()["skipped"] == skipped
    newcomer = window.read("new", 1)
    assert newcomer[3] == 0 and int(newcomer[0][0]) == window.snapshot()["produced"] - 16


def test_a_restored_position_resumes_there_or_at_the_window():
    stream = _Counting()
    window = _window_of(stream, max_bytes=8 * 64, block=8)
    _read(window, "a", 8, 40)
    elements, _, _, skipped, _, _ = window.read("b", 3, position=20)
    assert [int(e) for e in elements] == [20, 21, 22] and skipped == 0
    _read(window, "a", 8, 200)
    elements, _, _, skipped, _, after = window.read("c", 3, position=5)
    assert skipped == after - 3 - 5 and int(elements[0]) == after - 3


def test_failures_keep_their_places():
    window = _window_of(_Counting(fail_at={2, 5}))
    out, _ = _read(window, "a", 3, 8)
    assert out == [0, 1, None, 3, 4, None, 6, 7]


def test_a_stream_that_ends_gives_nothing_more():
    window = _window_of(_Counting(end_at=6))
    out, _ = _read(window, "a", 4, 6)
    assert out == list(range(6))
    assert window.read("a", 4)[0] == [] and window.read("b", 4)[0] != []


def test_concurrent_consumers_each_read_the_stream_in_order():
    stream = _Counting()
    window = _window_of(stream, max_bytes=1 << 30, block=16)
    results = {}

    def consume(name):
        results[name] = _read(window, name, 7, 2000)[0]

    threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(r == list(range(2000)) for r in results.values()) and len(results) == 4
    assert stream.computed < 2000 + 16 * 4  # computed once, not once per consumer


def test_a_worker_drops_a_window_nobody_reads_and_a_stopped_jobs_windows(monkeypatch):
    ds = jdata.range(10).repeat()
    w = worker.Worker("w0", window_bytes=1 << 20, idle_sec=60.0)
    for job in ("job-1", "job-2"):
        w._plans[job] = worker._Plan((ds._optimize().plan, ds.options))  # as if fetched
        packed, skipped, hit, after, _ = w.read_shared(
            worker.ReadSpec(job, "fp", None, 0, 0), "c", 5, None, 0)
        elements, _, _ = _blocks.unpack(packed, None)
        assert len(elements) >= 1 and after == len(elements) and not hit and skipped == 0
    assert set(w._buffers.snapshot()) == {"job-1", "job-2"}
    w.stop_job("job-2")  # the dispatcher removed it: its windows go at once
    assert set(w._buffers.snapshot()) == {"job-1"}
    monkeypatch.setattr(w._buffers, "_idle_sec", 0.0)
    assert w._buffers.snapshot() == {}  # idle ones go when the worker is pinged


def test_a_window_made_again_after_it_went_idle_asks_its_readers_where_they_stand(
        monkeypatch):
    """Found by the chaos run: a slot's window dropped while idle and made again on the
    next read served a consumer with reads in flight from the stream's start (645
    elements read twice); the consumer now names the window it read, and a new one
    sends nothing until it says its position."""
    ds = jdata.range(50).repeat()
    w = worker.Worker("w0", window_bytes=1 << 20, idle_sec=60.0)
    w._plans["job"] = worker._Plan((ds._optimize().plan, ds.options))
    spec = worker.ReadSpec("job", "fp", None, 0, 0)
    packed, _, _, after, token = w.read_shared(spec, "c", 20, None, 0)
    assert after == len(_blocks.unpack(packed, None)[0]) and token
    monkeypatch.setattr(w._buffers, "_idle_sec", 0.0)
    assert w._buffers.snapshot() == {}  # the window went
    packed, _, _, after2, token2 = w.read_shared(spec, "c", 20, None, 1, token)
    assert packed is None and after2 is None and token2 != token
    packed, skipped, _, _, _ = w.read_shared(spec, "c", 5, after, 0, None)
    first = int(_blocks.unpack(packed, None)[0][0])
    assert first == after % 50 and skipped == 0  # on from its position, nothing twice


def test_a_shared_slots_stream_is_its_slots_not_its_workers():
    """Each slot's stream has randomness of its own (slot 0: the local stream), whichever
    worker computes it: the same program with the same keys reads the same streams."""
    ds = jdata.range(50).shuffle(jax.random.key(0)).repeat()

    def first_50(w, slot):
        out, seq = [], 0
        while len(out) < 50:
            packed = w.read_shared(worker.ReadSpec("job", "fp", None, 0, slot), "c",
                                   50 - len(out), None, seq)[0]
            out += [int(x) for x in _blocks.unpack(packed, None)[0]]
            seq += 1
        return out

    streams = []
    for worker_id in ("w0", "w1"):
        w = worker.Worker(worker_id, window_bytes=1 << 20)
        w._plans["job"] = worker._Plan((ds._optimize().plan, ds.options))
        streams.append([first_50(w, slot) for slot in (0, 1)])
    assert streams[0] == streams[1]  # two workers, the same slot streams
    assert streams[0][0] != streams[0][1] and sorted(streams[0][0]) == list(range(50))
    assert streams[0][0] == [int(x) for x in jdata.range(50).shuffle(jax.random.key(0))]


def test_the_default_window_is_a_twentieth_of_memory():
    from jdata.service import _worker_buffers

    assert _worker_buffers.default_window_bytes() >= 64 << 20


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_window_bytes(bad):
    from jdata import service

    with pytest.raises(ValueError, match="window_bytes"):
        service.start(window_bytes=bad)


def test_a_consumers_reads_are_served_in_the_order_it_sent_them():
    # The worker's threads may start a consumer's second read before its first.
    window = _window_of(_Counting(), block=4)
    second = {}
    t = threading.Thread(target=lambda: second.update(out=window.read("a", 4, seq=1)))
    t.start()  # waits for its turn: read 0 has not come
    first = window.read("a", 4, seq=0)
    t.join(timeout=30)
    assert [int(e) for e in first[0]] == [0, 1, 2, 3]
    assert [int(e) for e in second["out"][0]] == [4, 5, 6, 7]


def test_a_coordinated_buffer_outlives_its_consumers_wait_for_a_missing_peer():
    """Found by the chaos run: with a client timeout (the idle bound) below the consumers'
    wait for a missing peer, a round buffer went idle while they waited, and the one made
    again gave later rounds other groups than the first one had given (lock-step broken)."""
    from jdata.service import _rounds

    ds = jdata.range(100).repeat()
    w = worker.Worker("w0", window_bytes=1 << 20, idle_sec=2.0)
    w._plans["job"] = worker._Plan((ds._optimize().plan, ds.options))
    w.read_rounds(worker.ReadSpec("job", "fp", None, 0, 0), 2, 0, 0, 1, 5.0)
    (buffer, _), = w._buffers._entries.values()
    buffer.last_read -= _rounds.CONSUMER_TIMEOUT_SEC + 2.0  # past the client timeout
    assert set(w._buffers.snapshot()) == {"job"}  # kept: a peer may still be waited for
    buffer.last_read -= worker.BUFFER_IDLE_FACTOR * _rounds.CONSUMER_TIMEOUT_SEC
    assert w._buffers.snapshot() == {}  # nobody read it for long: it goes
