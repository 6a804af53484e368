"""Coordinated reads: every consumer uses a run of rounds, or every one skips it, even when
the worker died between its replies (the dispatcher's agreement, without Ray)."""

from jdata.service._run_outcomes import SKIP, USE, WAIT, Outcomes

LIVE = {"a", "b"}


def test_a_run_is_used_once_every_consumer_received_it():
    o = Outcomes(timeout_sec=10.0)
    assert o.report("a", 0, True, 0.0, LIVE) == WAIT
    assert o.report("a", 0, True, 0.1, LIVE) == WAIT  # asking again changes nothing
    assert o.report("b", 0, True, 0.2, LIVE) == USE
    assert o.report("a", 0, True, 0.3, LIVE) == USE  # decided: the same for everyone


def test_a_run_one_consumer_lost_is_skipped_by_all_even_those_that_have_it():
    o = Outcomes(timeout_sec=10.0)
    assert o.report("a", 8, True, 0.0, LIVE) == WAIT  # a got it; the worker died
    assert o.report("b", 8, False, 0.1, LIVE) == SKIP  # before b's reply left
    assert o.report("a", 8, True, 0.2, LIVE) == SKIP
    # Decided runs stay decided: a late report cannot change them.
    assert o.report("b", 16, True, 0.3, LIVE) == WAIT
    assert o.report("a", 16, True, 0.4, LIVE) == USE
    assert o.report("b", 16, False, 0.5, LIVE) == USE


def test_a_silent_consumer_is_counted_out_then_waited_for_again_when_it_reports():
    o = Outcomes(timeout_sec=10.0)
    o.report("a", 0, True, 0.0, LIVE)
    o.report("b", 0, True, 0.0, LIVE)
    assert o.report("a", 8, True, 5.0, LIVE) == WAIT  # b last heard 5 s ago
    assert o.report("a", 8, True, 10.5, LIVE) == USE  # silent 10.5 s: counted out
    assert o.report("a", 16, True, 11.0, LIVE) == USE  # still out: no new wait
    assert o.report("b", 24, True, 12.0, LIVE) == WAIT  # it came back: waited for again
    assert o.report("a", 24, True, 12.1, LIVE) == USE


def test_a_consumer_that_joins_later_takes_no_part_in_earlier_runs():
    o = Outcomes(timeout_sec=10.0)
    o.report("a", 0, True, 0.0, {"a"})
    assert o.report("a", 8, True, 1.0, {"a", "c"}) == WAIT  # c registered, silent so far
    assert o.report("c", 64, True, 1.1, {"a", "c"}) == WAIT  # c starts at round 64
    assert o.report("a", 8, True, 1.2, {"a", "c"}) == USE
    # A consumer that left (closed) is not waited for.
    assert o.report("a", 16, True, 1.3, {"a"}) == USE
