"""The iterator states of the service's readers: plain JSON, checked as untrusted input.

A leasing reader's state (``dynamic``, ``static``, ``off``) is its lineage, the
job's epoch and plan, and its ``Position`` (the units yielded whole, whole from
an offset, and parts). A shared reader's is its position in each slot's stream;
a coordinated reader's its next round. Decoding never imports, calls or
unpickles anything, and every malformed, out-of-range or foreign field is a
``ValueError`` naming the field.
"""

from __future__ import annotations

import re

from jdata.runtime import states
from jdata.service import _units
from jdata.service._messages import Position

_OP = "distribute"
_LINEAGE = re.compile(r"[0-9a-f]{32}")
# A state lists at most this many units (a job has at most a million splits; an
# unbounded reader's done units are ranges, far fewer).
_MAX_ENTRIES = 1_000_000
_MAX_SLOTS = 65_536
# The units a state of an unbounded job (a files reader under ``repeat()``) may name:
# its client and the dispatcher restore it unit by unit, so a crafted range of 2**40
# units would take all the memory there is. 2**24 splits (groups of files) is half a
# year at a split a second.
_MAX_UNBOUNDED_UNITS = 1 << 24
# A position in an endless stream (a shared slot's, an ``off`` slot's, a coordinated
# round): a worker computes its way there in order, so a crafted one must not be a
# lifetime of work. A slot serving 100,000 elements a second reaches 2**40 in four months.
_MAX_STREAM_POSITION = 1 << 40


def lease_state(lineage: str | None, epoch: int | None, units: int | None,
                split_elements: int | None, position: Position) -> dict:
    return {"lineage": lineage, "epoch": epoch, "units": units,
            "split_elements": split_elements,
            "done": [list(r) for r in position.done],
            "done_from": [list(p) for p in position.done_from],
            "partial": [list(p) for p in position.partial]}


def read_lease_state(state) -> tuple[str | None, int | None, int | None, int | None, Position]:
    """``(lineage, epoch, units, split_elements, position)`` of a leasing reader's state."""
    fields = states.Fields(state, _OP, ("lineage", "epoch", "units", "split_elements", "done",
                                         "done_from", "partial"))
    lineage = state["lineage"]
    if lineage is not None and (not isinstance(lineage, str) or not _LINEAGE.fullmatch(lineage)):
        raise states.invalid(_OP, "lineage", "is not a lineage id (32 hex digits)")
    epoch = None if state["epoch"] is None else fields.int("epoch", 0, states.MAX_EPOCH)
    units = None if state["units"] is None else fields.int("units", 0, _MAX_ENTRIES)
    elements = None if state["split_elements"] is None else fields.int("split_elements", 1)
    # Every unit number is checked against its bound before any range is expanded.
    bound = _MAX_UNBOUNDED_UNITS if units is None else units
    done = _ranges(fields.list("done", max_length=_MAX_ENTRIES), bound)
    done_from = tuple(_ints(p, "done_from", 2, bound)
                      for p in fields.list("done_from", max_length=_MAX_ENTRIES))
    partial = tuple(_ints(p, "partial", 3, bound)
                    for p in fields.list("partial", max_length=_MAX_ENTRIES))
    if any(start >= stop for _, start, stop in partial):
        raise states.invalid(_OP, "partial", "has a part [start, stop) that is empty")
    position = Position(done, done_from, partial)
    listed = [u for u, _ in done_from] + [u for u, _, _ in partial]
    starts = [start for start, _ in done]
    if len(set(listed)) != len(listed) or any(_units.in_ranges(u, done, starts)
                                              for u in listed):
        raise states.invalid(_OP, "partial", "lists a unit twice")
    if lineage is None and (done or done_from or partial):
        raise states.invalid(_OP, "lineage", "is missing from a state that has progress")
    return lineage, epoch, units, elements, position


def check_within(position: Position, length: int) -> None:
    """An ``off`` state's parts end within the pipeline, where its length is known, else
    within ``_MAX_STREAM_POSITION``: a restore skips that many elements (forever, for a
    crafted count on an endless pipeline)."""
    limit = length if length >= 0 else _MAX_STREAM_POSITION
    for unit, start, stop in position.partial:
        if stop > limit:
            beyond = (f"the pipeline's {length} elements" if length >= 0 else
                      f"the {_MAX_STREAM_POSITION} elements a restore may skip")
            raise states.invalid(_OP, "partial", f"reaches element {stop} of slot {unit}, "
                                 f"beyond {beyond}")


def _ranges(pairs: list, bound: int) -> tuple:
    out, last = [], -1
    for pair in pairs:
        start, stop = _ints(pair, "done", 2, bound + 1)
        if stop > bound:  # a range is a count of units: its end too is a unit bound
            raise states.invalid(_OP, "done", f"{pair} reaches past the {bound} units its "
                                              "job can have")
        if not last <= start < stop:
            raise states.invalid(_OP, "done", f"{pair} is not a sorted, disjoint [start, stop) "
                                              "range")
        out.append((start, stop))
        last = stop
    return tuple(out)


def _ints(values, field: str, length: int, bound: int) -> tuple:
    values = states.check_ints(values, _OP, field, 0, states.MAX_COUNT)
    if len(values) != length or values[0] >= bound:
        raise states.invalid(_OP, field, f"{values} is not {length} ints with a unit below "
                                         f"{bound}")
    return tuple(values)


def shared_state(positions: dict[int, int]) -> dict:
    return {"slots": [[slot, position] for slot, position in sorted(positions.items())]}


def read_shared_state(state, length: int = -1) -> dict[int, int]:
    """A shared reader's position in each slot's stream: within the pipeline's ``length``
    elements where it is known (>= 0), else within ``_MAX_STREAM_POSITION`` (a worker
    computes the slot's stream up to a consumer's position)."""
    fields = states.Fields(state, _OP, ("slots",))
    limit = length if length >= 0 else _MAX_STREAM_POSITION
    out = {}
    for pair in fields.list("slots", max_length=_MAX_SLOTS):
        slot, position = _ints(pair, "slots", 2, _MAX_SLOTS)
        if position > limit:
            raise states.invalid(_OP, "slots", f"position {position} of slot {slot} is "
                                               f"beyond the {limit} elements a slot can reach")
        if slot in out:
            raise states.invalid(_OP, "slots", f"lists slot {slot} twice")
        out[slot] = position
    return out


def rounds_state(round_index: int) -> dict:
    return {"round": round_index}


def read_rounds_state(state) -> int:
    # Bounded as a stream position: the dispatcher places new workers from the furthest
    # round a consumer reports on, so the others would keep the old workers that long.
    return states.Fields(state, _OP, ("round",)).int("round", 0, _MAX_STREAM_POSITION)
