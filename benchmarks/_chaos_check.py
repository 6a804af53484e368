"""The chaos run's pure parts: its schedules, history checker, stall measure and table.

``draw(seed)`` is schedule ``seed``: a pure function of it (``random.Random(seed)``).

``check`` reads the logs of one schedule's trainers (``tests/service/trainer.py``'s format)
and holds them to docs/service.md's contract, "What exactly once means when clients die":
every element of the epoch is *kept* (yielded and, for a killed client, covered by its last
checkpoint) exactly once across the job's trainers. The rules, per mode:

- dynamic, static: the union of the kept histories is the pipeline's elements, each once;
  the unpicklable element (``bad``) is replaced by its ``ElementError``: its ``X`` line is
  kept exactly once (an ``X`` logged past a killed trainer's last checkpoint is not kept,
  like an ``E`` there: the restore or another trainer receives the error again). For one
  anonymous trainer the kept history is also the local stream, in order (the docs promise
  it "after any failure"; a restore resumes exactly);
- off, with S slots: the kept values are the reference multiset (each slot's stream once,
  read without faults: a slot is a pure function of the keys, the epoch and its index),
  each index ``value // 1000`` appears S times, slot 0's values (the local stream) are all
  there, and the ``X`` of the bad element is kept S times (once per slot);
- shared, with S slots: each trainer reads each slot's stream whole ("each reads the whole
  stream"): its kept values are a part of the reference (each slot's stream once, read
  without faults), none twice, and what the trainers miss together is at most what the
  service counted lost (``JobStatus.lost``: skips behind a window are allowed, counted);
- coordinated (two consumers, a repeated pipeline without shuffle): a consumer keeps each
  round once at most, its own element of the round's group (``CONSUMERS`` consecutive
  elements of a slot's stream), and both consumers of a round read one group (lock-step);
  rounds a consumer missed while dead are allowed (the table: "gone, counted skipped").

Every trainer's last incarnation must end (``END``); a ``FAIL`` is allowed only as a
``ServiceError`` of a named dynamic, static or off job's trainer that was paused past the
client timeout (one per pause: others may have taken its splits meanwhile; an anonymous
job's trainer resumes, and so do shared and coordinated ones).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import json
import random

from tests.service import trainer as trainer_module

LEASED = ("dynamic", "static", "off")  # the modes whose trainers keep each element once
MODES = LEASED + ("shared", "coordinated")
CONSUMERS = 2  # a coordinated job's, one per trainer
TIMED = ("worker_kill", "dispatcher_kill", "trainer_kill", "trainer_pause", "rescale_restore")
KINDS = TIMED[:2] + ("node_removal",) + TIMED[2:] + ("two_clients", "bad_element")
CLIENT_TIMEOUT_SEC = 2.0  # the service's, in the chaos run: a killed client's splits return
_NODE_SHARE, _NAMED_SHARE, _BAD_SHARE = 0.15, 0.4, 0.3  # of the schedules
_SHOWN = 20  # elements named per violation; the counts say how many in all


def draw(seed: int, kinds=KINDS, quick: bool = False, modes=MODES) -> dict:
    """Schedule ``seed`` (a pure function of it and ``modes``): the job, the pipeline and
    the faults."""
    rng = random.Random(seed)
    nodes = "node_removal" in kinds and rng.random() < _NODE_SHARE
    workers = 2 if nodes else rng.choice((2, 3))
    mode, named = rng.choice(modes), "two_clients" in kinds and rng.random() < _NAMED_SHARE
    named = named or mode == "coordinated"  # its consumers are two trainers
    n = rng.randrange(200, 401)
    n -= n % 2 if mode == "coordinated" else 0  # even: a round's group never spans the repeat
    timed = [k for k in TIMED if k in kinds]
    faults = [_draw_fault(rng, rng.choice(timed), workers)
              for _ in range(rng.randint(1, 2 if quick else 3) if timed else 0)]
    if nodes:  # one removal at most: the cluster has two nodes to remove from
        faults[:1] = [{"kind": "node_removal", "pick": round(rng.random(), 3)}]
    for fault, at in zip(faults, sorted(rng.uniform(0.1, 0.6) for _ in faults)):
        fault["at"] = round(at, 3)
    bad = rng.randrange(n) if "bad_element" in kinds and rng.random() < _BAD_SHARE else None
    per_trainer = {"off": n * workers / (2 if named else 1), "shared": n * workers,
                   "coordinated": n}.get(mode, n / (2 if named else 1))
    epoch_sec = rng.uniform(3.0, 4.5) if quick else rng.uniform(5.0, 9.0)
    return {"seed": seed, "phase": "nodes" if nodes else "local", "mode": mode,
            "named": named, "workers": workers, "n": n, "bad": bad, "faults": faults,
            "split_elements": rng.randrange(10, 21), "checkpoint_every": rng.randrange(10, 31),
            "pace": round(epoch_sec / per_trainer, 4)}


def _draw_fault(rng: random.Random, kind: str, workers: int) -> dict:
    fault = {"kind": kind, "pick": round(rng.random(), 3)}
    if kind in ("trainer_kill", "rescale_restore"):  # below or above the client timeout
        below = rng.random() < 0.5
        fault["delay"] = round(rng.uniform(0.0, 0.5) * CLIENT_TIMEOUT_SEC if below else
                               rng.uniform(1.5, 2.5) * CLIENT_TIMEOUT_SEC, 2)
    if kind == "rescale_restore":
        fault["scale_to"] = rng.choice([w for w in (1, 2, 3) if w != workers])
    if kind == "trainer_pause":
        fault["extra"] = round(rng.uniform(0.0, 1.0), 2)  # seconds past its expiry
    return fault


def trainers(schedule: dict) -> int:
    """How many trainers a schedule runs: two for a named job (a coordinated job's two
    consumers), else one."""
    return 2 if schedule["named"] else 1


def elements(schedule: dict) -> int:
    """The elements (with errors) a schedule's trainers read in all, without a fault: an
    off job's and a shared job's trainers read each slot's stream (a shared job's each
    whole), a coordinated consumer ``n`` elements."""
    n, workers = schedule["n"], schedule["workers"]
    return {"off": n * workers, "shared": n * workers * trainers(schedule),
            "coordinated": n * CONSUMERS}.get(schedule["mode"], n)


def kinds_of(schedule: dict) -> list[str]:
    """The fault kinds a schedule holds (a named job is the "two clients" one)."""
    kinds = {f["kind"] for f in schedule["faults"]}
    kinds |= {"two_clients"} if schedule["named"] else set()
    kinds |= {"bad_element"} if schedule["bad"] is not None else set()
    return [k for k in KINDS if k in kinds]


@dataclasses.dataclass(frozen=True)
class Expected:
    """What a schedule's job must keep: the values (sorted, as a multiset), the number of
    kept ``X`` lines, the local order (one anonymous dynamic/static trainer) or ``None``,
    and for ``off`` the slots and the local stream (slot 0); for ``shared``, ``values`` and
    ``errors`` are each trainer's (each slot's stream once), and ``counted`` is what the
    service counted lost (set once the schedule ended)."""

    values: tuple
    errors: int
    order: tuple | None = None
    slots: int = 1
    local: tuple = ()
    counted: int = 0


def read_lines(path: str) -> list[str]:
    """A log's lines (``[]`` where it was never written)."""
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


@functools.lru_cache(maxsize=64)
def local_values(n: int, seed: int) -> tuple:
    """The local pipeline's stream: the order dynamic and static keep, slot 0's values."""
    return tuple(int(x) for x in trainer_module.pipeline({"n": n, "seed": seed}))


def expectation(schedule: dict, off_values: list | None = None) -> Expected:
    """What a schedule's job must keep; ``off_values``: an off job's elements, read
    without a fault (each slot's stream once)."""
    local = local_values(schedule["n"], schedule["seed"])
    kept = tuple(v for v in local if v // 1000 != schedule["bad"])
    errors = int(schedule["bad"] is not None)
    slots = schedule["workers"]
    if schedule["mode"] == "shared":
        return Expected(tuple(sorted(off_values)), errors * slots, None, slots)
    if schedule["mode"] != "off":
        return Expected(tuple(sorted(kept)), errors, None if schedule["named"] else kept)
    return Expected(tuple(sorted(off_values)), errors * slots, None, slots, kept)


def kept_events(path: str, rounds: bool = False) -> list[tuple]:
    """A trainer's kept history with its errors: ``("E", value)`` and ``("X", message)``,
    by ``trainer.kept``'s rule (a killed incarnation keeps up to its last checkpoint);
    ``rounds``: ``(kind, value, round)``, the round of a coordinated consumer's ``G`` line.
    Raises ``AssertionError`` where its elements are not ``trainer.kept(path)``."""
    lines = read_lines(path)
    kept: list[tuple] = []
    checkpoints: dict[int, int] = {}  # count -> len(kept) then
    incarnation_start, base, at = 0, 0, None
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "R":
            count = int(rest)
            kept = kept[:checkpoints[count]] if count else []
            incarnation_start, base = len(kept), count
        elif kind == "G":
            at = int(rest)
        elif kind in ("E", "X"):
            kept.append((kind, int(rest) if kind == "E" else rest) + ((at,) if rounds else ()))
        elif kind == "C":
            checkpoints[int(rest)] = len(kept)
    if not (lines and lines[-1] == "END"):
        last = max((c for c in checkpoints if c >= base), default=None)
        kept = kept[:checkpoints[last]] if last is not None else kept[:incarnation_start]
    elements = [event[1] for event in kept if event[0] == "E"]
    assert elements == trainer_module.kept(path), f"{path}: kept_events disagrees with kept"
    return kept


def check(schedule: dict, logs: list[str], expected: Expected) -> list[dict]:
    """The violations of one schedule (``[]`` when its history holds the contract).

    ``schedule`` names it (``seed``, ``mode``, ``named``, ``kinds``) and lists its
    ``faults`` (each with its ``kind`` and, for trainer faults, the ``victim`` index);
    ``logs`` are its trainers' log paths, in trainer order."""
    found = _exits(schedule, logs)
    if schedule["mode"] == "shared":
        found += _shared(logs, expected)
    elif schedule["mode"] == "coordinated":
        found += _rounds(logs, schedule["bad"])
    else:
        found += _leased(schedule, logs, expected)
    names = {k: schedule[k] for k in ("seed", "mode", "named")}
    faults = [f["kind"] for f in schedule["faults"]]
    return [{**names, "faults": faults, **v} for v in found]


def _leased(schedule: dict, logs: list[str], expected: Expected) -> list[dict]:
    """dynamic, static, off: each element kept once across the trainers."""
    found = []
    histories = [kept_events(path) for path in logs]
    values = [v for h in histories for k, v in h if k == "E"]
    errors = sum(k == "X" for h in histories for k, _ in h)
    found += _multiset("elements", values, expected.values)
    if errors != expected.errors:
        found.append({"check": "errors", "detail": f"{errors} ElementErrors kept, "
                      f"{expected.errors} expected"})
    if expected.order is not None and len(histories) == 1 and tuple(values) != expected.order:
        at = next((i for i, (a, b) in enumerate(zip(values, expected.order)) if a != b),
                  min(len(values), len(expected.order)))
        found.append({"check": "order", "detail": f"not the local order from position {at}"})
    if schedule["mode"] == "off":
        found += _off_slots(values, expected)
    return found


def _shared(logs: list[str], expected: Expected) -> list[dict]:
    """shared: each trainer keeps each slot's stream at most once (nothing twice, nothing
    foreign), and what all of them miss is at most what the service counted lost."""
    found, missing = [], 0
    for i, path in enumerate(logs):
        history = kept_events(path)
        values = [v for k, v in history if k == "E"]
        errors = sum(k == "X" for k, _ in history)
        have, need = collections.Counter(values), collections.Counter(expected.values)
        extra = have - need
        if extra or errors > expected.errors:
            found.append({"check": f"trainer {i}'s stream", "missing": [],
                          "duplicated": sorted(extra.elements())[:_SHOWN],
                          "detail": f"{sum(extra.values())} duplicated or foreign; {errors} "
                                    f"ElementErrors of {expected.errors}"})
        missing += sum((need - have).values()) + max(0, expected.errors - errors)
    if missing > expected.counted:
        found.append({"check": "counted", "detail": f"{missing} elements missing, "
                      f"{expected.counted} counted lost by the service"})
    return found


def _rounds(logs: list[str], bad: int | None) -> list[dict]:
    """coordinated: each consumer reads each round once at most, its own element of the
    round's group (index ``i`` of ``CONSUMERS`` consecutive elements), and the consumers
    that read a round read one group (lock-step); the bad element's error in its place."""
    found, groups = [], collections.defaultdict(dict)  # round -> consumer -> group
    for i, path in enumerate(logs):
        history = kept_events(path, rounds=True)
        seen = [r for _, _, r in history]
        if seen != sorted(set(seen)):
            found.append({"check": f"consumer {i}'s rounds", "detail": "a round read twice "
                          f"or out of order: {seen[:_SHOWN]}"})
        for kind, value, r in history:
            index = bad if kind == "X" else value // 1000
            if index is None or index % CONSUMERS != i:
                found.append({"check": f"consumer {i}'s element", "detail": f"round {r}: "
                              f"{kind} {value!r} is not consumer {i}'s of a group"})
                break
            groups[r][i] = index // CONSUMERS
    split = {r: g for r, g in groups.items() if len(set(g.values())) > 1}
    if split:
        found.append({"check": "lock-step", "detail": f"{len(split)} rounds read from "
                      f"different groups, as {sorted(split.items())[:5]}"})
    return found


def _exits(schedule: dict, logs: list[str]) -> list[dict]:
    """Each trainer's last incarnation ended, and failed only where a pause allows it."""
    found = []
    for i, path in enumerate(logs):
        lines = read_lines(path)
        # An anonymous job's splits are nobody else's: a paused trainer of one resumes;
        # so do a shared job's and a coordinated one's (at their positions, their round).
        pauses = (schedule["named"] and schedule["mode"] in LEASED) * sum(f["kind"] == "trainer_pause" and f.get("victim") == i
                                         for f in schedule["faults"])
        fails = [line for line in lines if line.startswith("FAIL ")]
        if not lines or lines[-1] != "END":
            found.append({"check": "ended", "detail": f"trainer {i} did not end: last line "
                          f"{lines[-1] if lines else None!r}"})
        bad = [f for f in fails if not f.startswith("FAIL ServiceError")]
        if bad or len(fails) > pauses:
            found.append({"check": "failed", "detail": f"trainer {i} ({pauses} pauses): "
                          f"{fails[:3]}"})
    return found


def _multiset(what: str, got: list, want) -> list[dict]:
    """A violation naming the missing and the duplicated (or foreign) values, if any."""
    have, need = collections.Counter(got), collections.Counter(want)
    missing, extra = need - have, have - need
    if not missing and not extra:
        return []
    return [{"check": what, "missing": sorted(missing.elements())[:_SHOWN],
             "duplicated": sorted(extra.elements())[:_SHOWN],
             "detail": f"{sum(missing.values())} missing, {sum(extra.values())} duplicated "
                       f"or foreign, of {sum(need.values())}"}]


def _off_slots(values: list, expected: Expected) -> list[dict]:
    """Off mode's checks that need no reference: S copies of each index, slot 0 whole."""
    indices = sorted({v // 1000 for v in expected.values})
    found = _multiset("slot indices", [v // 1000 for v in values], indices * expected.slots)
    missing = collections.Counter(expected.local) - collections.Counter(values)
    if missing:
        found.append({"check": "slot 0", "missing": sorted(missing.elements())[:_SHOWN],
                      "duplicated": [], "detail": f"{sum(missing.values())} of slot 0's "
                                                  "(the local stream's) values missing"})
    return found


def read_times(path: str) -> list[tuple[str, float]]:
    """A trainer's timestamp lines (``SPEC["log"] + ".t"``): ``(kind, seconds)``."""
    lines = read_lines(path)
    return [(kind, float(t)) for kind, _, t in (line.partition(" ") for line in lines) if t]


def stall(fault: dict, times: list[list[tuple[str, float]]],
          resumed: dict | None = None) -> float | None:
    """The longest wait of the job's trainers for an element that the fault caused.

    ``fault["t"]`` is when it struck and ``fault.get("back")`` when a paused or killed
    trainer (``fault["victim"]``) went on (SIGCONT, or its restore started). A wait runs
    from an element (or a trainer's coming back: its ``READY``, past the start of a
    process, which is Python's time, not the service's; or its SIGCONT, in ``resumed``:
    trainer index -> times) to the next element, ``END`` or ``FAIL``: the time a trainer
    was dead or stopped is not a wait. For the victim it is its first wait after it went
    on; for the others the longest wait that overlaps the fault's span. A bad element's
    stall is the longest wait around its error. ``None`` when no wait spans the fault."""
    if fault["kind"] == "bad_element":
        return _around_errors(times)
    if "t" not in fault:
        return None
    begin, end = fault["t"], fault.get("back", fault["t"])
    found = []
    for i, events in enumerate(times):
        waits = _waits(events, (resumed or {}).get(i, ()))
        if i == fault.get("victim"):
            found += [b - a for a, b in waits if a >= end][:1]
        else:
            found += [b - a for a, b in waits if a <= end and b >= begin]
    return max(found, default=None)


def _waits(events: list[tuple[str, float]], resumed) -> list[tuple[float, float]]:
    """A trainer's waits for an element: (from, to), from its last element or its coming
    back, whichever is later."""
    comebacks = sorted([t for kind, t in events if kind == "READY"] + list(resumed))
    stamps = [t for kind, t in events if kind in ("E", "X", "END", "FAIL")]
    return [(max([a] + [r for r in comebacks if a < r < b]), b)
            for a, b in itertools.pairwise(stamps)]


def _around_errors(times: list[list[tuple[str, float]]]) -> float | None:
    gaps = []
    for events in times:
        stamps = [(kind, t) for kind, t in events if kind in ("E", "X", "END")]
        for j, (kind, t) in enumerate(stamps):
            if kind == "X":
                gaps += [t - stamps[j - 1][1]] if j else []
                gaps += [stamps[j + 1][1] - t] if j + 1 < len(stamps) else []
    return max(gaps, default=None)


def table(results: list[dict], modes=MODES, kinds=KINDS) -> dict:
    """Per mode x fault kind: the schedules that held it, those where it did not happen
    (``missed``: the epoch ended first), those with a violation, and the longest stall
    (s); then totals per mode and in all. Each result has ``mode``, ``scheduled`` and
    ``kinds`` (the kinds that happened), ``violations`` and ``stalls`` (kind -> s)."""
    rows = []
    for mode in modes:
        for kind in kinds:
            runs = [r for r in results if r["mode"] == mode and kind in r["scheduled"]]
            if not runs:
                continue
            stalls = [r["stalls"][kind] for r in runs if kind in r["stalls"]]
            rows.append({"mode": mode, "kind": kind, "schedules": len(runs),
                         "missed": sum(kind not in r["kinds"] for r in runs),
                         "violations": sum(bool(r["violations"]) for r in runs),
                         "longest_stall_s": round(max(stalls), 3) if stalls else None})
    totals = {mode: {"schedules": sum(r["mode"] == mode for r in results),
                     "violations": sum(r["mode"] == mode and bool(r["violations"])
                                       for r in results)} for mode in modes}
    totals["all"] = {"schedules": len(results),
                     "violations": sum(bool(r["violations"]) for r in results)}
    return {"rows": rows, "totals": totals}


def format_table(report: dict) -> str:
    """``table``'s dict as text, one row per mode x fault kind, then the totals."""
    out = [(f"{'mode':<8} {'fault':<16} {'schedules':>9} {'missed':>6} {'violations':>10} "
            f"{'longest stall (s)':>17}")]
    for row in report["rows"]:
        s = row["longest_stall_s"]
        out.append(f"{row['mode']:<8} {row['kind']:<16} {row['schedules']:>9} "
                   f"{row['missed']:>6} {row['violations']:>10} "
                   f"{'-' if s is None else f'{s:.2f}':>17}")
    for mode, total in report["totals"].items():
        out.append(f"{mode:<8} {'(all faults)':<16} {total['schedules']:>9} {'':>6} "
                   f"{total['violations']:>10}")
    return "\n".join(out)


def summarize(schedule: dict, logs: list[str], expected: Expected | None, struck: list,
              incidents: list, wall: float) -> dict:
    """A schedule's result: the kinds that happened, its violations (``incidents``: what
    the runner saw, such as a hang; then ``check``'s), the longest stall per kind.
    ``struck`` holds, per fault of the schedule, what happened, or ``None``."""
    named = {k: schedule[k] for k in ("seed", "mode", "named")}
    names = [f["kind"] for f in schedule["faults"]]
    violations = [{**named, "faults": names, **v} for v in incidents]
    faults = [s or {"kind": f["kind"]} for s, f in zip(struck, schedule["faults"])]
    if expected is not None:
        violations += check({**schedule, "faults": faults}, logs, expected)
    lines = [read_lines(path) for path in logs]
    happened = [s for s in struck if s is not None]
    if schedule["bad"] is not None and any(x.startswith("X ") for log in lines for x in log):
        happened.append({"kind": "bad_element"})
    if schedule["named"] and lines and all(any(x.startswith("E ") for x in log)
                                           for log in lines):
        happened.append({"kind": "two_clients"})
    times = [read_times(path + ".t") for path in logs]
    resumed = collections.defaultdict(list)
    for event in happened:
        if event["kind"] == "trainer_pause":
            resumed[event["victim"]].append(event["back"])
    stalls: dict = {}
    for event in happened:
        s = stall(event, times, resumed)
        if s is not None:
            stalls[event["kind"]] = max(stalls.get(event["kind"], 0.0), round(s, 3))
    idle = [i for i, log in enumerate(lines) if not any(x.startswith("E ") for x in log)]
    notes = [f"trainer {i} of the named job yielded nothing: the other read the whole "
             "epoch" for i in idle] if schedule["named"] else []
    return {"seed": schedule["seed"], "phase": schedule["phase"], "mode": schedule["mode"],
            "named": schedule["named"], "scheduled": kinds_of(schedule), "notes": notes,
            "kinds": sorted({e["kind"] for e in happened}, key=KINDS.index),
            "violations": violations, "stalls": stalls, "wall_s": round(wall, 2),
            "faults": [{k: v for k, v in e.items() if k not in ("t", "back")}
                       for e in happened], "logs": logs if violations else []}


def format_result(result: dict) -> str:
    """One schedule's line: its seed, mode, job, the faults that happened, its verdict."""
    faults = ",".join(f["kind"] for f in result["faults"]) or "-"
    verdict = f"{len(result['violations'])} VIOLATIONS" if result["violations"] else "ok"
    return (f"seed {result['seed']} {result['mode']} "
            f"{'named' if result['named'] else 'anonymous'}: {faults}: {verdict} "
            f"({result['wall_s']:.1f} s)")


def format_report(report: dict) -> str:
    """The table, the totals, then every violation (JSON) and note."""
    total = report["totals"]["all"]["schedules"]
    summary = f"{total} schedules in {report['wall_s']:.0f} s; " \
        f"{len(report['violations'])} violations"
    lines = [format_table(report), summary]
    lines += [f"  VIOLATION {json.dumps(v)}" for v in report["violations"]]
    lines += [f"  note: {note}" for note in report["notes"]]
    return "\n".join(lines)
