"""The dispatcher's write-ahead journal: its updates, in order, in SQLite (WAL mode).

The dispatcher appends every update it applies; a restarted dispatcher calls
``restore`` and carries on from the state it had. ``append`` writes a batch in
one transaction, one fsync (``synchronous=FULL``): leases are granted in
batches, so the journal costs one fsync per client request, not per split.
Once ``append`` returns, the batch survives the process being killed (and,
with ``FULL``, the machine losing power).

Records are the JSON of ``state.encode``, read back with the strict
``state.decode``: a journal is data, nothing in it is evaluated or
unpickled. A file that is not a jdata journal, or whose records are damaged
or do not replay, is a ``JournalError`` naming the path, never an empty
state.

``compact`` keeps the file bounded over a long-running service: it drops
the records of removed jobs and the heartbeats that no longer matter.

>>> import os, tempfile
>>> from jdata.service import journal, state as st
>>> path = os.path.join(tempfile.mkdtemp(), "journal.sqlite")
>>> with journal.Journal(path) as j:
...     j.append([st.WorkerJoined("w0"), st.WorkerJoined("w1")])
>>> journal.restore(path).alive_workers()
('w0', 'w1')
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import zlib

from jdata.service._updates import decode, encode
from jdata.service.state import DispatcherState

_FORMAT = "jdata.service.journal"
# 2: units with segments, lineages, commits and restores (issue 23); 1 is not read.
_VERSION = 2
_SCHEMA = (
    "CREATE TABLE jdata_journal (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # seq orders the updates; kind, job_id, client_id and time only serve compact().
    # crc: SQLite checks no data, so damage inside a record would replay silently.
    "CREATE TABLE updates (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, job_id TEXT, "
    "client_id TEXT, time REAL, record TEXT NOT NULL, crc INTEGER NOT NULL)",
    "CREATE INDEX updates_by_job ON updates (job_id, kind)",
)


class JournalError(ValueError):
    """A journal file that is not one, is damaged, or does not replay."""


class Journal:
    """An open journal at ``path`` (created if missing). Safe to share between threads."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = None
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._check_or_create()  # first: a foreign database is left as it was
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as error:
            self.close()
            raise JournalError(f"{self.path} is not a readable jdata service journal: "
                               f"{error}") from error
        except JournalError:
            self.close()
            raise

    def _check_or_create(self) -> None:
        tables = {row[0] for row in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            with self._transaction():
                for statement in _SCHEMA:
                    self._db.execute(statement)
                self._db.executemany("INSERT INTO jdata_journal VALUES (?, ?)",
                                     [("format", _FORMAT), ("version", str(_VERSION))])
            return
        if "jdata_journal" not in tables:
            raise JournalError(f"{self.path} is an SQLite database but not a jdata service "
                               f"journal (its tables are {sorted(tables)}); give the "
                               "dispatcher a work_dir of its own")
        meta = dict(self._db.execute("SELECT key, value FROM jdata_journal"))
        if meta.get("format") != _FORMAT or meta.get("version") != str(_VERSION):
            raise JournalError(f"{self.path} is a journal of format {meta.get('format')!r} "
                               f"version {meta.get('version')!r}; this jdata reads "
                               f"{_FORMAT!r} version {_VERSION}")

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError(f"the journal {self.path} is closed; open it again with "
                             "Journal(path)")
        return self._db

    @contextlib.contextmanager
    def _transaction(self):
        self._open().execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a failed COMMIT (disk full) may leave it open
                self._db.execute("ROLLBACK")
            raise

    def append(self, updates) -> None:
        """Writes ``updates`` at the end, all or none, durably once this returns."""
        rows = []
        for update in updates:
            record = encode(update)
            text = json.dumps(record, separators=(",", ":"))
            rows.append((record["type"], record.get("job_id"), record.get("client_id"),
                         record.get("time"), text, zlib.crc32(text.encode())))
        if not rows:
            return
        with self._lock, self._errors("append to"), self._transaction():
            self._open().executemany("INSERT INTO updates (kind, job_id, client_id, time, "
                                     "record, crc) VALUES (?, ?, ?, ?, ?, ?)", rows)

    def records(self):
        """``(seq, update)`` for every record, in order (``seq`` names it in errors)."""
        with self._lock, self._errors("read"):
            rows = self._open().execute(
                "SELECT seq, record, crc FROM updates ORDER BY seq").fetchall()
        for seq, text, crc in rows:
            try:
                if not isinstance(text, str) or zlib.crc32(text.encode()) != crc:
                    raise ValueError("its checksum does not match")
                yield seq, decode(json.loads(text))
            except (TypeError, ValueError) as error:  # json's errors are ValueErrors
                raise JournalError(f"{self.path}: record {seq} is damaged: {error}") from error

    def replay(self) -> list:
        """Every update, in the order appended (less what ``compact`` dropped)."""
        return [update for _, update in self.records()]

    def compact(self) -> int:
        """Drops records that replay no longer needs; returns how many.

        Those are the records of removed jobs (up to their ``JobRemoved``), and
        each client's heartbeats but its first (which orders the clients) and
        its latest-timed one (the state keeps the latest time). Replaying the
        rest gives the same state. Worker joins and losses are kept (few).
        """
        with self._lock, self._errors("compact"), self._transaction():
            removed = self._open().execute(
                "DELETE FROM updates WHERE job_id IS NOT NULL AND seq <= (SELECT MAX(r.seq) "
                "FROM updates r WHERE r.job_id = updates.job_id AND r.kind = 'JobRemoved')"
            ).rowcount
            removed += self._open().execute(
                "DELETE FROM updates WHERE kind = 'ClientSeen' AND seq NOT IN (SELECT MIN(seq) "
                "FROM updates WHERE kind = 'ClientSeen' GROUP BY job_id, client_id) AND seq NOT "
                "IN (SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER (PARTITION BY job_id, "
                "client_id ORDER BY time DESC, seq) AS rank FROM "
                "updates WHERE kind = 'ClientSeen') WHERE rank = 1)").rowcount
        with self._lock, self._errors("compact"):
            self._open().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    @contextlib.contextmanager
    def _errors(self, what: str):
        try:
            yield
        except sqlite3.Error as error:
            raise JournalError(f"cannot {what} the journal {self.path}: {error}") from error

    def close(self) -> None:
        """Closes the file; appended batches are already durable."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def restore(path: str | os.PathLike) -> DispatcherState:
    """The state that replaying the journal at ``path`` gives (which must exist)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"restore: no journal at {path}; a new dispatcher starts from "
                                "DispatcherState()")
    with Journal(path) as journal:
        records = list(journal.records())
    state = DispatcherState()
    for seq, update in records:
        try:
            state.apply(update)
        except ValueError as error:
            raise JournalError(f"{path}: record {seq} does not fit the state that the records "
                               f"before it give: {error}") from error
    return state
