"""The dispatcher's journal: order, atomic batches, kill -9, compaction, damaged files."""

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

from jdata.service import journal as J
from jdata.service import state as S
from tests.service.simulation import OPS, Simulation, summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_JOB = [S.WorkerJoined("w0"), S.WorkerJoined("w1"),
        S.JobCreated("j", "train", "fp", 0, 8, "static"), S.ClientSeen("j", "c", 1.0)]


def _path(tmp_path) -> str:
    return os.path.join(tmp_path, "journal.sqlite")


def test_batches_replay_in_the_order_appended_after_reopening(tmp_path):
    grants = [S.LeasesGranted("j", "c", ((0, "w0"), (1, "w1"))), S.SplitsDone("j", "c", (1,))]
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
    j.append([S.WorkerJoined("w0"), S.JobCreated("j", None, "fp", 0, 100, "dynamic"),
              S.ClientSeen("j", "c", 1.0)])
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


@SETTINGS
@given(OPS, st.data())
def test_restoring_after_any_batch_gives_the_state_of_that_prefix(ops, data):
    sim = Simulation()
    sim.run(ops)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(sim.history)), max_size=4)))
    with tempfile.TemporaryDirectory() as directory, J.Journal(_path(directory)) as journal:
        start = 0
        for cut in cuts + [len(sim.history)]:
            journal.append(sim.history[start:cut])
            start = cut
            assert summary(J.restore(_path(directory))) == sim.summaries[cut]


@SETTINGS
@given(OPS)
def test_compaction_keeps_the_state_that_replay_gives(ops):
    sim = Simulation()
    sim.run(ops)
    with tempfile.TemporaryDirectory() as directory, J.Journal(_path(directory)) as journal:
        journal.append(sim.history)
        dropped = journal.compact()
        assert len(journal.replay()) == len(sim.history) - dropped
        assert summary(J.restore(_path(directory))) == summary(sim.state)
        journal.append([S.WorkerJoined("late")])  # and the compacted journal goes on
        assert J.restore(_path(directory)).alive_workers()[-1] == "late"


def test_compaction_drops_removed_jobs_and_stale_heartbeats(tmp_path):
    beats = [S.ClientSeen("j", "c", t) for t in (2.0, 9.0, 3.0)]
    other = [S.JobCreated("k", None, "fp", 0, 2, "dynamic"), S.ClientSeen("k", "d", 1.0),
             S.ClientGone("k", "d"), S.JobRemoved("k")]
    with J.Journal(_path(tmp_path)) as journal:
        journal.append(_JOB + other + beats)
        assert journal.compact() == 4 + 2  # all of k; j's heartbeats at 2 and 3
        assert journal.replay() == _JOB + [beats[1]]
    assert J.restore(_path(tmp_path)).clients("j") == {"c": 9.0}


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


def test_a_record_that_does_not_decode_is_an_error_naming_the_field(tmp_path):
    _journal_of(_path(tmp_path), _JOB)
    db = sqlite3.connect(_path(tmp_path))
    text = '{"type":"WorkerJoined","worker_id":7}'
    db.execute("UPDATE updates SET record = ?, crc = ? WHERE seq = 1",
               (text, zlib.crc32(text.encode())))
    db.commit()
    db.close()
    with pytest.raises(J.JournalError, match=r"record 1 is damaged: .*worker_id=7"):
        J.restore(_path(tmp_path))


def test_records_that_do_not_replay_are_an_error_naming_the_record(tmp_path):
    _journal_of(_path(tmp_path), _JOB + [S.SplitsDone("j", "c", (3,))])
    with pytest.raises(J.JournalError, match=r"record 5 does not fit .*split 3 is not leased"):
        J.restore(_path(tmp_path))


@pytest.mark.parametrize("spoil, match", [
    (lambda data: b"hello\n" * 100, "file is not a database"),
    (lambda data: data[:len(data) // 2], "database disk image is malformed"),
    (lambda data: data[:4096] + bytes(range(256)) * 16 + data[8192:], "malformed"),
], ids=["text", "truncated", "a page overwritten"])
def test_a_file_that_is_not_a_journal_is_an_error_naming_it(tmp_path, spoil, match):
    _journal_of(_path(tmp_path), [S.WorkerJoined(f"w{i}") for i in range(300)])
    with open(_path(tmp_path), "rb") as f:
        data = f.read()
    assert len(data) > 8192  # a page past the header to spoil
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


def test_a_journal_of_another_version_is_refused(tmp_path):
    _journal_of(_path(tmp_path), [])
    db = sqlite3.connect(_path(tmp_path))
    db.execute("UPDATE jdata_journal SET value = '99' WHERE key = 'version'")
    db.commit()
    db.close()
    with pytest.raises(J.JournalError, match="version '99'; this jdata reads"):
        J.restore(_path(tmp_path))


def test_restore_needs_a_journal_and_journal_a_directory_that_exists(tmp_path):
    with pytest.raises(FileNotFoundError, match="no journal at .*journal.sqlite"):
        J.restore(_path(tmp_path))
    with pytest.raises(J.JournalError, match="nowhere.*not a readable"):
        J.Journal(os.path.join(tmp_path, "nowhere", "journal.sqlite"))
