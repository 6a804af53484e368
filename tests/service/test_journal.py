"""The dispatcher's journal: order, atomic batches, kill -9, compaction, damaged files."""

import copy
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jdata.service import _requests
from jdata.service import journal as J
from jdata.service import state as S
from jdata.service._messages import JobPlan, Mode, Register
from tests.service.ledger_world import World, summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_JOB = [S.WorkerJoined("w0"), S.WorkerJoined("w1"),
        S.JobCreated("j", "train", "fp", 0, "static", 8, None), S.ClientJoined("j", "c", "l", 1.0)]


def _path(tmp_path) -> str:
    return os.path.join(tmp_path, "journal.sqlite")


def test_batches_replay_in_the_order_appended_after_reopening(tmp_path):
    grants = [S.LeasesGranted("j", "c", ((0, "w0"), (1, "w1"))), S.UnitsDone("j", "c", (1,))]
    with J.Journal(_path(tmp_path)) as journal:
        journal.append(_JOB)
        journal.append([])  # nothing: no transaction
        journal.append(grants)
    with J.Journal(_path(tmp_path)) as journal:
        assert journal.replay() == _JOB + grants
        assert [seq for seq, _ in journal.records()] == list(range(1, 7))
    restored = J.restore(_path(tmp_path))
    assert restored.leases_of("j", "c") == ((0, "w0"),) and restored.job("j").done == 1
    db = sqlite3.connect(_path(tmp_path))
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)  # a file setting: it stays
    db.close()


def test_a_batch_with_something_not_an_update_writes_none_of_it(tmp_path):
    with J.Journal(_path(tmp_path)) as journal:
        with pytest.raises(TypeError, match="not a dispatcher update"):
            journal.append([S.WorkerJoined("w0"), "WorkerJoined w1"])
        assert journal.replay() == []


def test_a_closed_journal_says_so(tmp_path):
    journal = J.Journal(_path(tmp_path))
    journal.close()
    journal.close()  # twice is fine
    with pytest.raises(ValueError, match="journal .*journal.sqlite is closed"):
        journal.append(_JOB)


def test_appends_from_several_threads_all_land(tmp_path):
    with J.Journal(_path(tmp_path)) as journal:
        threads = [threading.Thread(target=journal.append,
                                    args=([S.WorkerJoined(f"w{t}-{i}") for i in range(20)],))
                   for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(J.restore(_path(tmp_path)).alive_workers()) == 80


_KILLED = textwrap.dedent("""
    import sys
    from jdata.service import journal, state as S
    j = journal.Journal(sys.argv[1])
    j.append([S.WorkerJoined("w0"), S.JobCreated("j", None, "fp", 0, "dynamic", 100, None),
              S.ClientJoined("j", "c", "l", 1.0)])
    for batch in range(10):
        j.append([S.LeasesGranted("j", "c", tuple((10 * batch + i, "w0") for i in range(10)))])
    print("appended", flush=True)
    sys.stdin.read()  # holds the journal open until killed
""")


@pytest.mark.slow  # a second process (the full tier's kind of test)
def test_what_append_returned_for_survives_kill_9(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, _path(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"appended\n"
        assert os.path.getsize(_path(tmp_path) + "-wal") > 0  # not checkpointed: in the WAL
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stdin.close()
    assert proc.returncode == -signal.SIGKILL
    state = J.restore(_path(tmp_path))
    assert state.leases_of("j", "c") == tuple((s, "w0") for s in range(100))


# A world's story: what its dispatcher applies, request by request, goes to a real journal.
_JOBS = [("A", Mode.DYNAMIC, 9), ("B", Mode.STATIC, 7), ("C", Mode.OFF, 0),
         (None, Mode.DYNAMIC, 6), (None, Mode.STATIC, 5), (None, Mode.OFF, 0)]
_INDEX = st.integers(0, 7)
_STEP = st.tuples(st.just("step"), _INDEX, st.integers(1, 4), st.integers(1, 12))
_NEW_CLIENT = st.tuples(st.just("new_client"), st.sampled_from(_JOBS))
_RUN = st.tuples(st.just("run"), st.integers(1, 4), st.integers(1, 8))  # every consumer steps
_ACTION = st.one_of(
    _NEW_CLIENT, _NEW_CLIENT, _STEP, _STEP, _RUN, _RUN,  # the common ones, more often
    st.tuples(st.just("add_worker")), st.tuples(st.just("add_worker")),
    st.tuples(st.just("lose_worker"), _INDEX),
    st.tuples(st.just("drain"), _INDEX),
    st.tuples(st.just("commit"), _INDEX),
    st.tuples(st.just("close"), _INDEX),
    st.tuples(st.just("kill"), _INDEX),
    st.tuples(st.just("pause"), _INDEX, st.sampled_from([4.0, 11.0])),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 4.0, 11.0])),
    st.tuples(st.just("hand_off"), _INDEX),
    st.tuples(st.just("restore"), _INDEX, _INDEX),
)
# A consumer first: a story without one journals little.
ACTIONS = st.tuples(_NEW_CLIENT, st.lists(_ACTION, min_size=10, max_size=40)).map(
    lambda story: [story[0], *story[1]])


def _world() -> World:
    world = World()
    world.add_worker()
    world.add_worker()
    return world


def _play(world: World, action: tuple) -> None:
    kind, *args = action
    if kind in ("add_worker", "lose_worker", "drain", "tick"):
        getattr(world, kind)(*args)
    elif kind == "new_client":
        world.new_client(*args[0])
    elif kind == "restore":  # a lineage none of whose consumers runs, from one of its commits
        lineages = [lineage for lineage in world.lineages if lineage.commits and not any(
            c.alive and not c.ended and c.lineage is lineage for c in world.clients)]
        if lineages:
            lineage = lineages[args[0] % len(lineages)]
            world.restore(lineage, args[1] % len(lineage.commits))
    elif kind == "run":
        for client in list(world.clients):
            for _ in range(args[1]):
                world.step(client, args[0])
    elif world.clients:
        client = world.clients[args[0] % len(world.clients)]
        if kind == "step":
            for _ in range(args[2]):
                world.step(client, args[1])
        elif kind == "pause":  # past its timeout it is expired, and finds out when it goes on
            world.pause(client)
            world.tick(args[1])
        else:
            getattr(world, kind)(client)  # commit, close, kill, hand_off


def _graced(state: S.DispatcherState, now: float) -> dict:
    """``summary`` and the lineages, once every clock starts ``now`` (``ClientSeen`` is
    not journaled: a restarted dispatcher counts its clients as seen at its start)."""
    state.grace(now)
    lineages = {}
    for job_id in state.jobs:
        ledger = state.ledger(job_id)
        lineages[job_id] = (dict(ledger.lineages), dict(ledger.live),
                            {c: client.pending for c, client in ledger.clients.items()})
    return dict(summary(state), lineages=lineages)


@SETTINGS
@given(ACTIONS)
def test_restoring_after_any_batch_gives_the_state_of_that_prefix(actions):
    world = _world()
    with tempfile.TemporaryDirectory() as directory, J.Journal(_path(directory)) as journal:
        start = 0
        for action in [None] + actions:
            if action is not None:
                _play(world, action)
            journal.append(world.history[start:])  # one batch per action
            start = len(world.history)
            restored = J.restore(_path(directory))
            assert _graced(restored, world.now) == _graced(copy.deepcopy(world.state),
                                                           world.now)
        assert journal.replay() == world.history


@SETTINGS
@given(ACTIONS, st.sets(st.integers(0, 30)))
def test_compaction_at_any_batch_keeps_the_state_that_replay_gives(actions, cuts):
    """Compacted after any batches, the journal restores the state every record gives, and
    goes on taking records."""
    world = _world()
    with tempfile.TemporaryDirectory() as directory, J.Journal(_path(directory)) as journal:
        start = 0
        for k, action in enumerate(actions):
            _play(world, action)
            journal.append(world.history[start:])
            start = len(world.history)
            if k in cuts:
                journal.compact(world.state)
                assert journal.replay() == [] and journal.tail_bytes == 0
            restored = J.restore(_path(directory))
            assert _graced(restored, world.now) == _graced(copy.deepcopy(world.state),
                                                           world.now)
        journal.append([S.WorkerJoined("late")])  # and the compacted journal goes on
        assert J.restore(_path(directory)).alive_workers()[-1] == "late"


def test_an_anonymous_job_of_a_world_goes_with_its_last_client_and_compaction_drops_it(
        tmp_path):
    """(The property above sees removed jobs: a closed consumer's job is removed.)"""
    world = _world()
    client = world.new_client(None, Mode.DYNAMIC, 6)
    for _ in range(10):
        world.step(client, 2)
    world.close(client)
    world.tick(1.0)
    assert world.history[-1] == S.JobRemoved(client.job_id) and world.state.jobs == ()
    with J.Journal(_path(tmp_path)) as journal:
        journal.append(world.history)
        assert journal.compact(world.state) == len(world.history)
        assert journal.replay() == []
        assert journal.snapshot().alive_workers() == world.state.alive_workers()
        assert journal.snapshot().jobs == ()


def test_a_compacted_journal_is_as_small_as_the_live_state_whatever_ran_before(tmp_path):
    """Ten thousand grants of jobs that ended leave a file of the live state's size."""
    state = S.DispatcherState()
    with J.Journal(_path(tmp_path)) as journal:
        def run(updates):
            for update in updates:
                state.apply(update)
            journal.append(updates)
        run([S.WorkerJoined("w0")])
        for k in range(100):
            job = f"job{k}"
            run([S.JobCreated(job, None, "fp", 0, "dynamic", 100, None),
                 S.ClientJoined(job, "c", "l", 1.0)])
            for unit in range(100):
                run([S.LeasesGranted(job, "c", ((unit, "w0"),)),
                     S.UnitsDone(job, "c", (unit,))])
            run([S.ClientReleased(job, "c", ()), S.JobRemoved(job)])
        before = os.path.getsize(_path(tmp_path))
        journal.compact(state)
        after = os.path.getsize(_path(tmp_path)) + _size(_path(tmp_path) + "-wal")
    assert before > 1_000_000 and after < 50_000, (before, after)
    assert J.restore(_path(tmp_path)).alive_workers() == ("w0",)


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def test_a_damaged_snapshot_is_a_journal_error(tmp_path):
    with J.Journal(_path(tmp_path)) as journal:
        journal.append(_JOB)
        journal.compact(_replayed(_JOB))
    db = sqlite3.connect(_path(tmp_path))
    text = db.execute("SELECT record FROM snapshot").fetchone()[0]
    forged = text.replace('"w1"', '"w0"')  # alive twice
    db.execute("UPDATE snapshot SET record = ?, crc = ?",
               (forged, zlib.crc32(forged.encode())))  # a checksum that fits: read, refused
    db.commit()
    db.close()
    with pytest.raises(J.JournalError, match="the snapshot .* is damaged"):
        J.restore(_path(tmp_path))


def _replayed(updates) -> S.DispatcherState:
    state = S.DispatcherState()
    for update in updates:
        state.apply(update)
    return state


_FINISHED_NAMED_JOB = [
    S.WorkerJoined("w0"), S.WorkerJoined("w1"),
    S.JobCreated("a", "A", "fp", 0, "dynamic", 2, None), S.ClientJoined("a", "c", "l", 0.0),
    S.LeasesGranted("a", "c", ((0, "w0"), (1, "w1"))), S.UnitsDone("a", "c", (0, 1)),
    S.ClientReleased("a", "c", ()), S.NameEpoch("A", 0), S.JobRemoved("a")]  # past job_timeout


# Found by a test: compaction dropped every record of a removed named job, its JobCreated
# too, and the name's next fresh iterator ran epoch 0 again after a restart. The removal
# writes the name's epoch (NameEpoch), which compaction keeps.
def test_compaction_keeps_the_latest_epoch_of_a_removed_named_job(tmp_path):
    with J.Journal(_path(tmp_path)) as journal:
        journal.append(_FINISHED_NAMED_JOB)
        journal.compact(_replayed(_FINISHED_NAMED_JOB))
    request = Register("A", "fp", Mode.DYNAMIC, 0, "l2", JobPlan(2))
    epochs = []
    for state in (_replayed(_FINISHED_NAMED_JOB), J.restore(_path(tmp_path))):
        reply = _requests.register(state, request, state.apply, now=1.0, job_id="b",
                                   client_id="d", client_timeout=10.0)
        epochs.append(reply.epoch)
    assert epochs == [1, 1]


def _damage(path: str, old: bytes, new: bytes) -> None:
    with open(path, "rb") as f:
        data = f.read()
    assert data.count(old) == 1
    with open(path, "wb") as f:
        f.write(data.replace(old, new))


def _journal_of(path: str, updates) -> None:
    with J.Journal(path) as journal:
        journal.append(updates)  # closing checkpoints the WAL into the file


def test_a_damaged_record_is_an_error_naming_the_path_and_the_record(tmp_path):
    _journal_of(_path(tmp_path), _JOB)
    _damage(_path(tmp_path), b'"worker_id":"w1"', b'"worker_id":"x1"')  # still valid JSON
    with pytest.raises(J.JournalError, match=r"journal.sqlite: record 2 is damaged: its checksum"):
        J.restore(_path(tmp_path))


@pytest.mark.parametrize("text, match", [
    ('{"type":"WorkerJoined","worker_id":7}', "worker_id=7"),
    ('{"type":"UnitsDone","job_id":"j","client_id":"c","units":[1,1]}', "each unit once"),
    ('{"type":"LeasesGranted","job_id":"j","client_id":"c","leases":[[0,null]]}',
     "worker_id=None"),
], ids=["a worker id", "a unit twice", "a null worker"])
def test_a_record_that_does_not_decode_is_an_error_naming_the_field(tmp_path, text, match):
    _journal_of(_path(tmp_path), _JOB)
    db = sqlite3.connect(_path(tmp_path))
    db.execute("UPDATE updates SET record = ?, crc = ? WHERE seq = 1",
               (text, zlib.crc32(text.encode())))
    db.commit()
    db.close()
    with pytest.raises(J.JournalError, match=rf"record 1 is damaged: .*{match}"):
        J.restore(_path(tmp_path))


def test_records_that_do_not_replay_are_an_error_naming_the_record(tmp_path):
    _journal_of(_path(tmp_path), _JOB + [S.UnitsDone("j", "c", (3,))])
    with pytest.raises(J.JournalError,
                       match=r"record 5 does not fit .*reports done unit 3, which is not leased"):
        J.restore(_path(tmp_path))


@pytest.mark.parametrize("spoil, match", [
    (lambda data: b"hello\n" * 100, "file is not a database"),
    (lambda data: data[:len(data) // 2], "database disk image is malformed"),
    (lambda data: data[:8192] + bytes(range(256)) * 16 + data[12288:], "malformed"),
], ids=["text", "truncated", "a page overwritten"])
def test_a_file_that_is_not_a_journal_is_an_error_naming_it(tmp_path, spoil, match):
    _journal_of(_path(tmp_path), [S.WorkerJoined(f"w{i}") for i in range(300)])
    with open(_path(tmp_path), "rb") as f:
        data = f.read()
    assert len(data) > 12288  # a page past the header and the pointer map (auto_vacuum)
    with open(_path(tmp_path), "wb") as f:
        f.write(spoil(data))
    not_a_journal = f"{_path(tmp_path)} is not a readable jdata service journal: .*{match}"
    with pytest.raises(J.JournalError, match=not_a_journal):
        J.restore(_path(tmp_path))


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path):
    db = sqlite3.connect(_path(tmp_path))
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(J.JournalError, match=r"not a jdata service journal \(its tables are "):
        J.Journal(_path(tmp_path))
    db = sqlite3.connect(_path(tmp_path))
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    db.close()


@pytest.mark.parametrize("version", ["1", "99"])  # 1: splits, before lineages and commits
def test_a_journal_of_another_version_is_refused(tmp_path, version):
    _journal_of(_path(tmp_path), [])
    db = sqlite3.connect(_path(tmp_path))
    db.execute("UPDATE jdata_journal SET value = ? WHERE key = 'version'", (version,))
    db.commit()
    db.close()
    with pytest.raises(J.JournalError, match=f"version '{version}'; this jdata reads "
                                             "'jdata.service.journal' version 3"):
        J.restore(_path(tmp_path))


def test_a_journal_of_version_2_is_upgraded_in_place_and_replays(tmp_path):
    """Version 2 (no snapshot table) is what the service before issue 24 wrote."""
    _journal_of(_path(tmp_path), _JOB)
    db = sqlite3.connect(_path(tmp_path))
    db.execute("DROP TABLE snapshot")
    db.execute("UPDATE jdata_journal SET value = '2' WHERE key = 'version'")
    db.commit()
    db.close()
    assert J.restore(_path(tmp_path)).alive_workers() == ("w0", "w1")
    with J.Journal(_path(tmp_path)) as journal:
        journal.compact(_replayed(_JOB))
    assert J.restore(_path(tmp_path)).clients("j") == {"c": 1.0}


def test_restore_needs_a_journal_and_journal_a_directory_that_exists(tmp_path):
    with pytest.raises(FileNotFoundError, match="no journal at .*journal.sqlite"):
        J.restore(_path(tmp_path))
    with pytest.raises(J.JournalError, match="nowhere.*not a readable"):
        J.Journal(os.path.join(tmp_path, "nowhere", "journal.sqlite"))
