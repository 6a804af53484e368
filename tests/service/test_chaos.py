"""The chaos run (``benchmarks/service_chaos.py``): its history checker on crafted logs, and
a short run of seeded fault schedules on a real Ray (the full tier), with no violation."""

import dataclasses

import pytest

from benchmarks import _chaos_check as check
from benchmarks import service_chaos
from jdata.service import _ray
from tests.service import trainer

# Schedules 5005..5007 (quick, of the leasing modes) hold every fault kind but node removal
# (the run's cluster phase, too slow for this tier), every leasing mode, named and anonymous
# jobs: asserted below. (Shared and coordinated jobs: test_contract's and test_service's
# faults here; the full run draws from every mode.)
SEED, SCHEDULES = 5005, 3
KINDS = tuple(k for k in check.KINDS if k != "node_removal")


def _log(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def _schedule(mode="dynamic", named=False, faults=(), bad=None, n=4, workers=2):
    return {"seed": 1, "phase": "local", "mode": mode, "named": named, "n": n,
            "workers": workers, "bad": bad, "faults": list(faults)}


def test_kept_events_keep_an_error_like_an_element_up_to_the_last_checkpoint(tmp_path):
    # Killed after C 2 with an error and an element past it; restored at 2, it ends.
    path = _log(tmp_path, "t", ["E 1", "X ElementError 'x'", "E 2", "C 2", "X ElementError 'y'",
                                "E 3", "R 2", "X ElementError 'y'", "E 3", "END"])
    assert check.kept_events(path) == [("E", 1), ("X", "ElementError 'x'"), ("E", 2),
                                       ("X", "ElementError 'y'"), ("E", 3)]
    assert trainer.kept(path) == [1, 2, 3]
    killed = _log(tmp_path, "k", ["E 1", "C 1", "X ElementError 'y'", "E 2"])
    assert check.kept_events(killed) == [("E", 1)]


def test_a_clean_history_has_no_violation(tmp_path):
    logs = [_log(tmp_path, "a", ["E 1000", "E 3000", "C 2", "END"]),
            _log(tmp_path, "b", ["E 2000", "X ElementError 'no'", "END"])]
    expected = check.Expected((1000, 2000, 3000), errors=1)
    assert check.check(_schedule(named=True), logs, expected) == []


def test_missing_and_duplicated_elements_are_named(tmp_path):
    logs = [_log(tmp_path, "a", ["E 1000", "E 2000", "END"]),
            _log(tmp_path, "b", ["E 2000", "END"])]
    found = check.check(_schedule(named=True, faults=[{"kind": "worker_kill"}]), logs,
                        check.Expected((1000, 2000, 3000), errors=0))
    assert [(v["check"], v["missing"], v["duplicated"]) for v in found] == \
        [("elements", [3000], [2000])]
    assert found[0]["seed"] == 1 and found[0]["faults"] == ["worker_kill"]


def test_an_error_kept_twice_an_unended_trainer_and_a_wrong_order_are_violations(tmp_path):
    logs = [_log(tmp_path, "a", ["X E 'a'", "E 2000", "X E 'a'", "E 1000"])]
    found = check.check(_schedule(), logs, check.Expected((1000, 2000), 1, (1000, 2000)))
    assert {v["check"] for v in found} == {"ended", "errors", "elements", "order"}


def test_a_service_error_is_allowed_only_after_a_named_trainers_pause(tmp_path):
    lines = ["E 1000", "C 1", "E 2000", "FAIL ServiceError 'restore it'", "R 1", "E 2000",
             "END"]
    expected = check.Expected((1000, 2000), 0)
    pause = {"kind": "trainer_pause", "victim": 0}
    assert check.check(_schedule(named=True, faults=[pause]),
                       [_log(tmp_path, "a", lines), _log(tmp_path, "b", ["END"])], expected) == []
    found = check.check(_schedule(faults=[pause]), [_log(tmp_path, "c", lines)],
                        check.Expected((1000, 2000), 0, (1000, 2000)))
    assert [v["check"] for v in found] == ["failed"]


def test_off_mode_checks_the_slots_indices_and_slot_zero(tmp_path):
    expected = check.Expected((1001, 1500, 2002, 2700), 0, None, slots=2, local=(1001, 2002))
    good = [_log(tmp_path, "a", ["E 1500", "E 2002", "E 1001", "E 2700", "END"])]
    assert check.check(_schedule(mode="off"), good, expected) == []
    bad = [_log(tmp_path, "b", ["E 1500", "E 2002", "E 1002", "E 2700", "END"])]
    found = check.check(_schedule(mode="off"), bad, expected)
    assert {v["check"] for v in found} == {"elements", "slot 0"}


def test_the_stall_is_the_gap_a_fault_caused():
    times = [[("READY", 0.0), ("E", 1.0), ("E", 1.1), ("E", 4.0), ("END", 4.1)],
             [("READY", 0.0), ("E", 1.0), ("READY", 6.0), ("E", 6.5), ("END", 7.0)]]
    assert check.stall({"kind": "worker_kill", "t": 2.0}, times) == pytest.approx(2.9)
    # A killed trainer waits from its restore's READY: its death is not a wait.
    kill = {"kind": "trainer_kill", "t": 4.05, "back": 5.0, "victim": 1}
    assert check.stall(kill, times) == pytest.approx(0.5)
    assert check.stall({"kind": "worker_kill", "t": 9.0}, times) is None
    # A paused one waits from its SIGCONT, to its next element or its FAIL.
    paused = [[("READY", 0.0), ("E", 1.0), ("FAIL", 5.0), ("READY", 7.0), ("E", 7.2)]]
    pause = {"kind": "trainer_pause", "t": 1.5, "back": 4.0, "victim": 0}
    assert check.stall(pause, paused, {0: [4.0]}) == pytest.approx(1.0)
    errors = [[("E", 1.0), ("X", 1.5), ("E", 1.6)]]
    assert check.stall({"kind": "bad_element"}, errors) == pytest.approx(0.5)


def test_schedules_are_a_function_of_their_seed_and_hold_only_the_kinds_asked():
    assert check.draw(7) == check.draw(7)
    for seed in range(50):
        schedule = check.draw(seed, KINDS, quick=True)
        assert set(check.kinds_of(schedule)) <= set(KINDS) and schedule["phase"] == "local"
        assert 1 <= len(schedule["faults"]) <= 2 and 200 <= schedule["n"] <= 400


def test_the_table_counts_schedules_violations_and_stalls():
    results = [{"mode": "off", "scheduled": ["worker_kill"], "kinds": ["worker_kill"],
                "violations": [], "stalls": {"worker_kill": 0.5}},
               {"mode": "off", "scheduled": ["worker_kill"], "kinds": [],
                "violations": [{"check": "elements"}], "stalls": {}}]
    report = check.table(results)
    assert report["rows"] == [{"mode": "off", "kind": "worker_kill", "schedules": 2,
                               "missed": 1, "violations": 1, "longest_stall_s": 0.5}]
    assert report["totals"]["all"] == {"schedules": 2, "violations": 1}
    assert "worker_kill" in check.format_table(report)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_a_short_chaos_run_keeps_every_element_once_and_every_fault_happens():
    drawn = [check.draw(SEED + i, KINDS, quick=True, modes=check.LEASED)
             for i in range(SCHEDULES)]
    assert {k for s in drawn for k in check.kinds_of(s)} == set(KINDS)
    assert {s["mode"] for s in drawn} == set(check.LEASED)
    assert {s["named"] for s in drawn} == {True, False}
    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    report = service_chaos.run(SCHEDULES, SEED, quick=True, kinds=KINDS, modes=check.LEASED)
    assert not ray.is_initialized()  # the run stopped the Ray it started
    assert report["violations"] == []
    for result in report["results"]:
        assert result["kinds"] == result["scheduled"], result  # each fault happened
    assert report["totals"]["all"] == {"schedules": SCHEDULES, "violations": 0}


def test_a_shared_trainer_may_miss_only_what_the_service_counted(tmp_path):
    expected = check.Expected((1000, 2000, 3000, 4000), errors=0, slots=2)
    whole = _log(tmp_path, "a", ["E 1000", "E 3000", "E 2000", "E 4000", "END"])
    behind = _log(tmp_path, "b", ["E 1000", "E 4000", "END"])  # skipped 2 behind a window
    schedule = _schedule(mode="shared", named=True)
    assert check.check(schedule, [whole, behind], dataclasses.replace(expected, counted=2)) == []
    found = check.check(schedule, [whole, behind], expected)
    assert [v["check"] for v in found] == ["counted"] and "2 elements missing" in \
        found[0]["detail"]
    twice = _log(tmp_path, "c", ["E 1000", "E 1000", "E 2000", "E 3000", "E 4000", "END"])
    assert [v["check"] for v in check.check(_schedule(mode="shared"), [twice], expected)] == \
        ["trainer 0's stream"]


def test_coordinated_consumers_must_read_one_group_per_round(tmp_path):
    # Rounds of groups (2k, 2k + 1): consumer 0 the even index, consumer 1 the odd.
    a = _log(tmp_path, "a", ["G 0", "E 0", "G 1", "E 2000", "G 3", "X ElementError 'e'", "END"])
    b = _log(tmp_path, "b", ["G 0", "E 1000", "G 1", "E 3000", "G 2", "E 5000", "END"])
    schedule = _schedule(mode="coordinated", named=True, bad=6)
    assert check.check(schedule, [a, b], check.Expected((), 0)) == []
    split = _log(tmp_path, "s", ["G 0", "E 1000", "G 1", "E 5000", "END"])
    found = check.check(schedule, [a, split], check.Expected((), 0))
    assert [v["check"] for v in found] == ["lock-step"] and "1 rounds" in found[0]["detail"]
    again = _log(tmp_path, "r", ["G 0", "E 1000", "C 1", "R 0", "G 0", "E 1000", "G 0",
                                 "E 1000", "END"])
    assert "consumer 1's rounds" in [v["check"] for v in check.check(
        schedule, [a, again], check.Expected((), 0))]
