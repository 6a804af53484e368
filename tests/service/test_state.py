"""The dispatcher's state machine and policies, without Ray: updates, errors, properties."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jdata.service import state as S
from tests.service.simulation import OPS, Simulation, summary

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EXAMPLES = [
    S.JobCreated("j", "name", "fp", 3, 10, "dynamic"), S.JobCreated("j", None, "", 0, 0, "off"),
    S.WorkerJoined("w"), S.WorkerLost("w"), S.LeasesGranted("j", "c", ((3, "w"), (0, "v"))),
    S.SplitsDone("j", "c", (4, 1)), S.ClientSeen("j", "c", 1.5), S.ClientGone("j", "c"),
    S.JobRemoved("j"),
]


def _state(*updates, workers=("w0", "w1"), num_splits=10, mode="dynamic", clients=("c",)):
    s = S.DispatcherState()
    for update in ([S.WorkerJoined(w) for w in workers]
                   + [S.JobCreated("j", None, "fp", 0, num_splits, mode)]
                   + [S.ClientSeen("j", c, 0.0) for c in clients] + list(updates)):
        s.apply(update)
    return s


def _grant(s, client="c", count=4, max_outstanding=100):
    granted = S.grant(s, "j", client, count, max_outstanding)
    s.apply(granted)
    return granted.leases


# ------------------------------------------------------------ updates and their encoding


@pytest.mark.parametrize("update", EXAMPLES, ids=lambda u: type(u).__name__)
def test_an_update_survives_json_and_the_strict_decoder(update):
    assert S.decode(json.loads(json.dumps(S.encode(update)))) == update


@pytest.mark.parametrize("make, match", [
    (lambda: S.JobCreated("", None, "fp", 0, 1, "dynamic"), "job_id=''"),
    (lambda: S.JobCreated("j", None, "fp", -1, 1, "dynamic"), "epoch=-1"),
    (lambda: S.JobCreated("j", None, "fp", 0, True, "dynamic"), "num_splits=True"),
    (lambda: S.JobCreated("j", None, "fp", 0, 1, "sharded"), "mode='sharded'"),
    (lambda: S.JobCreated("j", None, "fp", 0, 5, "off"), "num_splits=5 must be 0"),
    (lambda: S.JobCreated("j", None, 7, 0, 1, "dynamic"), "fingerprint=7"),
    (lambda: S.WorkerJoined(None), "worker_id=None"),
    (lambda: S.LeasesGranted("j", "c", [(0, "w")]), "leases=.* tuple"),
    (lambda: S.LeasesGranted("j", "c", ((0, "w"), (0, "v"))), "repeats a split"),
    (lambda: S.LeasesGranted("j", "c", ((-1, "w"),)), "leases splits=-1"),
    (lambda: S.LeasesGranted("j", "c", ((0, ""),)), "worker_id=''"),
    (lambda: S.SplitsDone("j", "c", (1, 1)), "repeats a split"),
    (lambda: S.SplitsDone("j", "c", (1.0,)), "splits=1.0"),
    (lambda: S.ClientSeen("j", "c", float("nan")), "time=nan"),
    (lambda: S.ClientSeen("j", "c", "now"), "time='now'"),
])
def test_an_update_with_a_bad_field_is_refused_where_it_is_made(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()


def test_a_time_given_as_an_int_is_a_float():
    assert S.ClientSeen("j", "c", 3).time == 3.0 and isinstance(S.ClientSeen("j", "c", 3).time,
                                                                 float)


@pytest.mark.parametrize("record, match", [
    ([], "a record is a dict"),
    ({"worker_id": "w"}, "field 'type'=None"),
    ({"type": "__import__('os').system('true')"}, "field 'type'="),
    ({"type": "WorkerJoined"}, "lacks field 'worker_id'"),
    ({"type": "WorkerJoined", "worker_id": "w", "pickle": "x"}, "unknown field 'pickle'"),
    ({"type": "SplitsDone", "job_id": "j", "client_id": "c", "splits": "12"}, "splits='12'"),
    ({"type": "LeasesGranted", "job_id": "j", "client_id": "c", "leases": [[0]]}, "leases="),
    ({"type": "LeasesGranted", "job_id": "j", "client_id": "c", "leases": [[0, 1]]},
     "worker_id=1"),
    ({"type": "JobCreated", "job_id": "j", "name": None, "fingerprint": "f", "epoch": "0",
      "num_splits": 1, "mode": "static"}, "epoch='0'"),
])
def test_decoding_a_bad_record_is_a_value_error_naming_the_field(record, match):
    with pytest.raises(ValueError, match=match):
        S.decode(record)


def test_encode_refuses_what_is_not_an_update():
    with pytest.raises(TypeError, match="not a dispatcher update"):
        S.encode({"type": "WorkerJoined"})


# ------------------------------------------------------------ applying updates


def test_workers_are_kept_in_join_order_and_a_returning_worker_goes_last():
    s = _state(S.WorkerLost("w0"), S.WorkerJoined("w2"), S.WorkerJoined("w0"))
    assert s.alive_workers() == ("w1", "w2", "w0")


@pytest.mark.parametrize("update, match", [
    (S.WorkerJoined("w0"), "alive already"),
    (S.WorkerLost("w9"), "not alive"),
    (S.JobCreated("j", None, "fp", 0, 1, "dynamic"), "exists"),
    (S.LeasesGranted("nope", "c", ((0, "w0"),)), "unknown job_id='nope'"),
    (S.LeasesGranted("j", "x", ((0, "w0"),)), "not a client of job 'j'"),
    (S.LeasesGranted("j", "c", ((10, "w0"),)), "split 10 is out of range"),
    (S.LeasesGranted("j", "c", ((0, "w9"),)), "worker 'w9', which is not alive"),
    (S.SplitsDone("j", "c", (0,)), "split 0 is not leased"),
    (S.ClientGone("j", "x"), "not a client"),
    (S.JobRemoved("x"), "unknown job_id='x'"),
])
def test_an_update_that_does_not_fit_the_state_raises_and_changes_nothing(update, match):
    s = _state()
    before = summary(s)
    with pytest.raises(ValueError, match=match):
        s.apply(update)
    assert summary(s) == before


def test_a_batch_with_one_bad_lease_grants_none_of_it():
    s = _state(clients=("c", "d"))
    _grant(s, "d", count=1)  # split 0 is d's
    with pytest.raises(ValueError, match="split 0 is leased to client 'd' on worker 'w0'"):
        s.apply(S.LeasesGranted("j", "c", ((1, "w0"), (2, "w1"), (0, "w1"))))
    assert s.leases_of("j", "c") == () and s.free_splits("j", 2) == [1, 2]


def test_done_splits_are_never_leased_or_done_again():
    s = _state()
    _grant(s, count=2)
    s.apply(S.SplitsDone("j", "c", (0,)))
    assert s.job("j").done == 1 and s.leases_of("j", "c") == ((1, "w1"),)
    with pytest.raises(ValueError, match="split 0 is done"):
        s.apply(S.LeasesGranted("j", "c", ((0, "w0"),)))
    with pytest.raises(ValueError, match="split 0 is already done"):
        s.apply(S.SplitsDone("j", "c", (0,)))


def test_only_the_client_holding_a_lease_reports_it_done():
    s = _state(clients=("c", "d"))
    _grant(s, "c", count=1)
    with pytest.raises(ValueError, match="leased to client 'c', not 'd'"):
        s.apply(S.SplitsDone("j", "d", (0,)))


def test_a_lost_workers_leases_wait_for_their_client_who_may_report_them_done():
    s = _state(clients=("c", "d"))
    assert _grant(s, "c", count=2) == ((0, "w0"), (1, "w1"))
    s.apply(S.WorkerLost("w1"))
    assert s.leases_of("j", "c") == ((0, "w0"), (1, None))
    assert s.job("j").orphaned == {"c": (1,)} and s.job("j").leased == {"w0": (0,)}
    # Another client never gets c's orphan: c may hold it whole, its report on the way.
    assert _grant(s, "d", count=1) == ((2, "w0"),)
    with pytest.raises(ValueError, match="split 1 is leased to client 'c' on worker None"):
        s.apply(S.LeasesGranted("j", "d", ((1, "w0"),)))
    s.apply(S.SplitsDone("j", "c", (1,)))
    assert s.leases_of("j", "c") == ((0, "w0"),) and s.job("j").done == 1


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_draining_worker_gets_no_new_split_and_its_orphans_go_elsewhere(mode):
    s = _state(workers=("w0", "w1", "w2"), mode=mode)
    assert {w for _, w in _grant(s, count=3)} == {"w0", "w1", "w2"}
    granted = S.grant(s, "j", "c", 4, 100, exclude=frozenset({"w1"}))
    assert granted.leases and all(w != "w1" for _, w in granted.leases)
    s.apply(granted)
    s.apply(S.WorkerLost("w2"))  # its split is orphaned: re-issued, not to the drained one
    again = S.grant(s, "j", "c", 1, 100, exclude=frozenset({"w1"}))
    assert again.leases == ((2, "w0"),)
    assert S.grant(s, "j", "c", 1, 100, exclude=frozenset({"w0", "w1"})) is None


def test_a_gone_clients_leases_go_back_to_the_pool_lowest_first():
    s = _state(clients=("c", "d"))
    _grant(s, "c", count=3)
    s.apply(S.WorkerLost("w0"))  # 0 and 2 orphaned, 1 on w1
    s.apply(S.ClientGone("j", "c"))
    assert s.free_splits("j", 5) == [0, 1, 2, 3, 4] and s.worker_loads("j") == {"w1": 0}
    assert _grant(s, "d", count=2) == ((0, "w1"), (1, "w1"))


def test_a_gone_client_cannot_come_back_under_its_id():
    s = _state(S.ClientGone("j", "c"))
    with pytest.raises(ValueError, match="client 'c' of job 'j' is gone"):
        s.apply(S.ClientSeen("j", "c", 5.0))


def test_a_clients_time_only_moves_forward():
    s = _state(S.ClientSeen("j", "c", 9.0), S.ClientSeen("j", "c", 4.0))
    assert s.clients("j") == {"c": 9.0} and s.last_seen("j") == 9.0


def test_a_job_name_is_one_pipelines_per_epoch():
    s = _state(S.JobCreated("k", "train", "fp", 0, 5, "dynamic"))
    assert s.find_job("train", "fp", 0) == "k" and s.find_job("train", "fp", 1) is None
    with pytest.raises(ValueError, match="runs another pipeline"):
        s.find_job("train", "other", 0)
    with pytest.raises(ValueError, match="exists as job 'k'; join that job"):
        s.apply(S.JobCreated("k2", "train", "fp", 0, 5, "dynamic"))
    s.apply(S.JobRemoved("k"))
    assert s.find_job("train", "fp", 0) is None and s.jobs == ("j",)


def test_apply_refuses_what_is_not_an_update():
    with pytest.raises(TypeError, match="not a dispatcher update"):
        S.DispatcherState().apply(("WorkerJoined", "w"))


def test_a_job_of_a_million_splits_grants_from_its_frontier():
    s = _state(num_splits=10**6)
    for _ in range(100):
        leases = _grant(s, count=64, max_outstanding=64)
        s.apply(S.SplitsDone("j", "c", tuple(split for split, _ in leases)))
    assert s.job("j").done == 6400 and s.free_splits("j", 1) == [6400]
    assert len(s.job("j").leased) == 0 and not s.finished("j")


# ------------------------------------------------------------ policies


def test_dynamic_grants_the_lowest_free_splits_to_the_least_loaded_workers():
    s = _state(workers=("w0", "w1", "w2"), clients=("c", "d"))
    assert _grant(s, "c", count=2) == ((0, "w0"), (1, "w1"))
    assert _grant(s, "d", count=4) == ((2, "w2"), (3, "w0"), (4, "w1"), (5, "w2"))


def test_static_sends_split_s_to_worker_s_mod_w_and_re_runs_it_among_the_alive():
    s = _state(workers=("w0", "w1", "w2"), mode="static")
    assert _grant(s, count=5) == ((0, "w0"), (1, "w1"), (2, "w2"), (3, "w0"), (4, "w1"))
    s.apply(S.WorkerLost("w1"))
    assert _grant(s, count=3) == ((1, "w2"), (4, "w0"), (5, "w2"))


def test_grant_respects_count_and_max_outstanding_but_always_re_issues_orphans():
    s = _state()
    assert len(_grant(s, count=8, max_outstanding=3)) == 3
    assert S.grant(s, "j", "c", 8, 3) is None
    s.apply(S.WorkerLost("w0"))  # 0 and 2 orphaned
    assert _grant(s, count=8, max_outstanding=1) == ((0, "w1"), (2, "w1"))


@pytest.mark.parametrize("mode, workers", [("off", ("w0",)), ("dynamic", ())])
def test_grant_gives_nothing_without_splits_or_workers(mode, workers):
    s = _state(workers=workers, mode=mode, num_splits=0 if mode == "off" else 4)
    assert S.grant(s, "j", "c", 4, 4) is None


def test_grant_gives_nothing_once_every_split_is_leased_or_done():
    s = _state(num_splits=2)
    _grant(s, count=4)
    assert S.grant(s, "j", "c", 4, 4) is None


@pytest.mark.parametrize("args, match", [
    (("j", "c", 0, 4), "count=0"), (("j", "c", 2, True), "max_outstanding=True"),
    (("j", "x", 2, 4), "client 'x' is not a client"), (("x", "c", 2, 4), "unknown job_id='x'"),
])
def test_grant_refuses_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        S.grant(_state(), *args)


def test_expire_drops_silent_clients_then_their_jobs():
    s = _state(S.ClientSeen("j", "d", 5.0), clients=("c",))
    assert S.expire(s, 10.0, client_timeout=8.0) == [S.ClientGone("j", "c")]
    for update in S.expire(s, 10.0, client_timeout=8.0):
        s.apply(update)
    assert S.expire(s, 13.0, client_timeout=8.0) == []  # d seen at 5: silent 8 s, not more
    assert S.expire(s, 13.5, client_timeout=8.0) == [S.ClientGone("j", "d"), S.JobRemoved("j")]
    assert S.expire(s, 13.5, client_timeout=8.0, job_timeout=60.0) == [S.ClientGone("j", "d")]


def test_a_finished_job_goes_with_its_last_client_and_a_job_never_joined_stays():
    s = _state(num_splits=1)
    s.apply(S.JobCreated("lonely", None, "fp", 0, 3, "dynamic"))
    s.apply(S.SplitsDone("j", "c", (_grant(s, count=1)[0][0],)))
    s.apply(S.ClientGone("j", "c"))
    assert s.finished("j")
    assert S.expire(s, 0.0, client_timeout=100.0) == [S.JobRemoved("j")]


@pytest.mark.parametrize("args, match", [((0.0, -1.0), "client_timeout=-1.0"),
                                         ((0.0, 1.0, float("inf")), "job_timeout=inf")])
def test_expire_refuses_bad_timeouts(args, match):
    with pytest.raises(ValueError, match=match):
        S.expire(_state(), *args)


def test_job_summary_counts_what_a_status_page_shows():
    s = _state()
    _grant(s, count=3)
    s.apply(S.WorkerLost("w1"))
    assert S.job_summary(s.job("j")) == {
        "job_id": "j", "name": None, "epoch": 0, "mode": "dynamic", "num_splits": 10,
        "done": 0, "leased": 2, "orphaned": 1, "clients": 1}


# ------------------------------------------------------------ properties


@SETTINGS
@given(OPS)
def test_any_story_of_failures_delivers_every_split_exactly_once(ops):
    sim = Simulation()
    sim.run(ops)  # checks leases and deliveries after every update
    sim.drain()
    assert sim.state.jobs == tuple(j for j in sim.clients)


@SETTINGS
@given(OPS, st.data())
def test_applying_the_decoded_history_of_any_prefix_gives_that_prefixs_state(ops, data):
    sim = Simulation()
    sim.run(ops)
    k = data.draw(st.integers(0, len(sim.history)))
    replayed = S.DispatcherState()
    for update in sim.history[:k]:
        replayed.apply(S.decode(json.loads(json.dumps(S.encode(update)))))
    assert summary(replayed) == sim.summaries[k]


_UPDATES = st.one_of(
    st.builds(S.WorkerJoined, st.sampled_from(["w1", "w2", "w9"])),
    st.builds(S.WorkerLost, st.sampled_from(["w1", "w2", "w9"])),
    st.builds(S.LeasesGranted, st.sampled_from(["job1", "job2", "x"]),
              st.sampled_from(["c1", "c2", "c3"]),
              st.lists(st.tuples(st.integers(0, 45), st.sampled_from(["w1", "w2", "w9"])),
                       max_size=3, unique_by=lambda lease: lease[0]).map(tuple)),
    st.builds(S.SplitsDone, st.sampled_from(["job1", "job2", "x"]),
              st.sampled_from(["c1", "c2", "c3"]),
              st.lists(st.integers(0, 45), max_size=3, unique=True).map(tuple)),
    st.builds(S.ClientGone, st.sampled_from(["job1", "job2"]), st.sampled_from(["c1", "c2"])),
    st.builds(S.JobRemoved, st.sampled_from(["job1", "job2", "x"])),
)


@SETTINGS
@given(OPS, st.lists(_UPDATES, max_size=20))
def test_any_update_either_fits_or_raises_and_changes_nothing(ops, updates):
    sim = Simulation()
    sim.run(ops)
    for update in updates:
        before = summary(sim.state)
        try:
            sim.state.apply(update)
        except ValueError:
            assert summary(sim.state) == before
        for job_id in sim.state.jobs:  # what did fit keeps the split accounting whole
            info = sim.state.job(job_id)
            held = [s for group in (info.leased, info.orphaned) for v in group.values() for s in v]
            free = sim.state.free_splits(job_id, info.num_splits + 1)
            assert len(set(held)) == len(held) and not set(held) & set(free)
            assert info.done + len(held) + len(free) == info.num_splits
