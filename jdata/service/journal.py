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

``compact(state)`` keeps the file bounded over a long-running service: it
writes a snapshot of the state (``_snapshot``) in place of every record
before it, in one transaction, so the file holds the live state and the
records since; ``restore`` reads the snapshot, then replays the records after
it. The dispatcher compacts when the records since the last snapshot outweigh
it (``tail_bytes``), so a restart replays little at any age. Freed pages go
back to the file system (``auto_vacuum``).

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

from jdata._errors import JournalError as JournalError
from jdata.service import _snapshot
from jdata.service._updates import decode, encode
from jdata.service.state import DispatcherState

_FORMAT = "jdata.service.journal"
# 3: a snapshot of the state before the records (issue 24). 2 (units with segments,
# lineages, commits and restores) is read and upgraded in place; 1 is not read.
_VERSION = 3
_UPGRADES = {"2"}
_SNAPSHOT_TABLE = ("CREATE TABLE snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), "
                   "seq INTEGER NOT NULL, record TEXT NOT NULL, crc INTEGER NOT NULL)")
_SCHEMA = (
    "CREATE TABLE jdata_journal (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # seq orders the updates; kind, job_id, client_id and time serve queries by hand.
    # crc: SQLite checks no data, so damage inside a record would replay silently.
    "CREATE TABLE updates (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, job_id TEXT, "
    "client_id TEXT, time REAL, record TEXT NOT NULL, crc INTEGER NOT NULL)",
    "CREATE INDEX updates_by_job ON updates (job_id, kind)",
    _SNAPSHOT_TABLE,
)


class Journal:
    """An open journal at ``path`` (created if missing). Safe to share between threads."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = None
        self._tail_bytes = self._snapshot_bytes = 0
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._check_or_create()  # first: a foreign database is left as it was
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # Each append writes whole pages to the write-ahead log: checkpoint it every
            # 64 of them and truncate it then, or it alone would keep 4 MB. Truncated, not
            # kept for reuse: an append on a full disk then fails at once (and the
            # dispatcher says so), not some hundred appends later.
            self._db.execute("PRAGMA wal_autocheckpoint=64")
            self._db.execute("PRAGMA journal_size_limit=0")
            self._tail_bytes, self._snapshot_bytes = self._db.execute(
                "SELECT (SELECT COALESCE(SUM(LENGTH(record)), 0) FROM updates), "
                "(SELECT COALESCE(SUM(LENGTH(record)), 0) FROM snapshot)").fetchone()
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
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # before the first table
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
        if meta.get("format") == _FORMAT and meta.get("version") in _UPGRADES:
            with self._transaction():  # records of 2 read the same: it only lacks snapshots
                self._db.execute(_SNAPSHOT_TABLE)
                self._db.execute("UPDATE jdata_journal SET value = ? WHERE key = 'version'",
                                 (str(_VERSION),))
            return
        if meta.get("format") != _FORMAT or meta.get("version") != str(_VERSION):
            raise JournalError(f"{self.path} is a journal of format {meta.get('format')!r} "
                               f"version {meta.get('version')!r}; this jdata reads "
                               f"{_FORMAT!r} version {_VERSION} (and upgrades "
                               f"{sorted(_UPGRADES)})")

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
            self._tail_bytes += sum(len(row[4]) for row in rows)

    @property
    def tail_bytes(self) -> int:
        """The bytes of the records after the snapshot (as this process counted them)."""
        return self._tail_bytes

    @property
    def snapshot_bytes(self) -> int:
        """The bytes of the snapshot (0: none)."""
        return self._snapshot_bytes

    def snapshot(self) -> DispatcherState | None:
        """The state the snapshot holds (``None``: none was written)."""
        with self._lock, self._errors("read"):
            row = self._open().execute("SELECT seq, record, crc FROM snapshot").fetchone()
        if row is None:
            return None
        seq, text, crc = row
        try:
            _check(text, crc)
            return _snapshot.decode(json.loads(text))
        except (TypeError, ValueError) as error:
            raise JournalError(f"{self.path}: the snapshot (up to record {seq}) is damaged: "
                               f"{error}") from error

    def records(self):
        """``(seq, update)`` for every record after the snapshot, in order (``seq`` names
        it in errors)."""
        with self._lock, self._errors("read"):
            rows = self._open().execute(
                "SELECT seq, record, crc FROM updates ORDER BY seq").fetchall()
        for seq, text, crc in rows:
            try:
                _check(text, crc)
                yield seq, decode(json.loads(text))
            except (TypeError, ValueError) as error:  # json's errors are ValueErrors
                raise JournalError(f"{self.path}: record {seq} is damaged: {error}") from error

    def replay(self) -> list:
        """Every update after the snapshot, in the order appended."""
        return [update for _, update in self.records()]

    def compact(self, state: DispatcherState) -> int:
        """Writes ``state`` as the snapshot in place of every record; returns how many
        records went. ``state`` must be what ``restore`` gives now (the dispatcher calls
        this under the lock it appends under), and is unchanged."""
        text = json.dumps(_snapshot.encode(state), separators=(",", ":"))
        with self._lock, self._errors("compact"):
            with self._transaction():
                db = self._open()
                last = db.execute("SELECT MAX(seq) FROM updates").fetchone()[0]
                if last is None:  # nothing after the snapshot: still the state's
                    last = (db.execute("SELECT seq FROM snapshot").fetchone() or (0,))[0]
                db.execute("INSERT OR REPLACE INTO snapshot VALUES (1, ?, ?, ?)",
                           (last, text, zlib.crc32(text.encode())))
                removed = db.execute("DELETE FROM updates WHERE seq <= ?", (last,)).rowcount
            self._snapshot_bytes, self._tail_bytes = len(text), 0
            # executescript steps it to the end (execute frees one page per step); the
            # checkpoint then writes the shorter file.
            db.executescript("PRAGMA incremental_vacuum;")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
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


def _check(text, crc) -> None:
    if not isinstance(text, str) or zlib.crc32(text.encode()) != crc:
        raise ValueError("its checksum does not match")


def restore(path: str | os.PathLike) -> DispatcherState:
    """The state that the journal at ``path`` (which must exist) holds: its snapshot, then
    its records replayed."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"restore: no journal at {path}; a new dispatcher starts from "
                                "DispatcherState()")
    with Journal(path) as journal:
        state = journal.snapshot() or DispatcherState()
        records = list(journal.records())
    for seq, update in records:
        try:
            state.apply(update)
        except ValueError as error:
            raise JournalError(f"{path}: record {seq} does not fit the state that the records "
                               f"before it give: {error}") from error
    return state
