"""service_dispatch: split leases per second through the dispatcher's state and journal.

The data service's dispatcher grants every split of every epoch; at 10^5
leases/s of demand it must not be the bottleneck. This measures its hot path
without Ray, with the very code the dispatcher actor runs per client request
(``_requests.lease``): the client reports its previous batch done and asks for
``batch`` more; the dispatcher applies ``ClientSeen`` and ``UnitsDone``, asks
``grant`` for the leases, applies them, and appends what it applied (but the
heartbeat) to the journal in one transaction (one fsync,
``synchronous=FULL``). ``clients`` clients of one named job take turns on its
``num_splits`` splits over ``workers`` workers; one worker is lost half-way
(its leases are re-issued) so that path is in the figure too.

Reported: leases/s with the journal (target >= 5,000/s), leases/s of the state
and policies alone (no journal), and how fast ``restore`` replays the
journal (updates/s), with the journal's size. Run with
``python -m benchmarks.service_dispatch`` (about 10 s).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from jdata.service import _requests
from jdata.service import journal as J
from jdata.service import state as S
from jdata.service._messages import LeaseRequest

NUM_SPLITS = 10**6  # a large job: the state's cost must not grow with it
LEASES = None  # leases measured; None: the whole job, to its last split done
BATCH = 64
CLIENTS = 4
WORKERS = 8


def run(path: str | None, leases: int | None = LEASES, num_splits: int = NUM_SPLITS,
        batch: int = BATCH, clients: int = CLIENTS, workers: int = WORKERS) -> dict:
    """Grants ``leases`` leases (journaled at ``path``, or not if ``None``); rates and counts.

    ``leases`` counts re-issued ones too; ``None`` runs until every split is done.
    """
    state = S.DispatcherState()
    journal = J.Journal(path) if path is not None else None
    setup = [S.WorkerJoined(f"w{w}") for w in range(workers)]
    setup.append(S.JobCreated("job", "bench", "fp", 0, "dynamic", num_splits, None))
    setup += [S.ClientJoined("job", f"c{c}", f"l{c}", 0.0) for c in range(clients)]
    _commit(state, journal, setup)
    held = {f"c{c}": () for c in range(clients)}
    granted = requests = 0
    start = time.perf_counter()
    lose_at = (leases or num_splits) // batch // 2
    while not _all_done(state) and (leases is None or granted < leases):
        if requests == lose_at:  # its leases were not read: re-issued to the same clients
            _commit(state, journal, [S.WorkerLost("w0")])
            held = {c: tuple(lease for lease in mine if lease[1] != "w0")
                    for c, mine in held.items()}
        client_id = f"c{requests % clients}"
        held[client_id] = _request(state, journal, client_id, held[client_id], batch)
        granted += len(held[client_id])
        requests += 1
    elapsed = time.perf_counter() - start
    if journal is not None:
        journal.close()
    return {"leases": granted, "requests": requests, "seconds": elapsed,
            "finished": _all_done(state),
            "leases_per_sec": granted / elapsed, "done": state.job("job").done}


def _request(state, journal, client_id: str, held, batch: int):
    """One client call, as the dispatcher serves it: the client's leases afterwards."""
    applied = []

    def apply(update):
        state.apply(update)
        if type(update) is not S.ClientSeen:  # heartbeats are not journaled
            applied.append(update)

    # All read: reported done with the next request, and named as the client's own (a
    # lease the ledger has for it that it does not name comes again: a lost reply).
    units = tuple(split for split, _ in held)
    reply = _requests.lease(state, LeaseRequest("job", client_id, batch, batch, units,
                                                held=units),
                            apply, now=time.time())
    if journal is not None:
        journal.append(applied)  # one transaction, one fsync
    return tuple((grant.unit, grant.worker_id) for grant in reply.grants)


def _all_done(state) -> bool:
    return state.ledger("job").units.finished()


def _commit(state, journal, updates) -> None:
    for update in updates:
        state.apply(update)
    if journal is not None:
        journal.append(updates)


def report(leases: int | None = LEASES, num_splits: int = NUM_SPLITS, directory: str | None = None,
           **kw) -> dict:
    """The three figures (see the module docstring), printed and returned."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = os.path.join(tmp, "journal.sqlite")
        journaled = run(path, leases, num_splits, **kw)
        size = sum(os.path.getsize(path + suffix) for suffix in ("", "-wal")
                   if os.path.exists(path + suffix))
        start = time.perf_counter()
        restored = J.restore(path)
        replay = time.perf_counter() - start
        with J.Journal(path) as journal:
            records = len(journal.replay())
    alone = run(None, leases, num_splits, **kw)
    result = {"journaled": journaled, "state_only": alone,
              "restore": {"records": records, "seconds": replay,
                          "done": restored.job("job").done,
                          "records_per_sec": records / replay, "journal_mb": size / 1e6}}
    print(f"leases/s journaled {journaled['leases_per_sec']:,.0f} (target >= 5,000), state "
          f"alone {alone['leases_per_sec']:,.0f}; restore replays {records:,} records in "
          f"{replay:.2f} s ({size / 1e6:.1f} MB journal)")
    return result


if __name__ == "__main__":
    print(json.dumps(report(), indent=1))
