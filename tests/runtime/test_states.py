"""States taken cheaply (journals, deferred parts) and checked strictly (fields, element codec)."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest

from jdata.runtime import state_codec, states

Point = collections.namedtuple("Point", "x y")


def _redo(buffer: list, op) -> None:
    if type(op) is tuple:
        buffer.append(op[0])
    else:
        buffer[op] = buffer[-1]
        buffer.pop()


def test_journal_captures_every_version_of_a_buffer_in_its_past_state():
    rng = random.Random(0)
    buffer: list = []
    journal = states.Journal(buffer, list, _redo, len)
    captures = []
    for step in range(2000):  # many rebases: the log is kept under 2 * size + 64
        if buffer and rng.random() < 0.5:
            slot = rng.randrange(len(buffer))
            buffer[slot] = buffer[-1]
            buffer.pop()
            journal.log(slot)
        else:
            buffer.append(step)
            journal.log((step,))
        if step % 7 == 0:
            captures.append((list(buffer), journal.capture(list)))
    for expected, captured in captures:
        assert states.resolve(captured) == expected


def test_journal_reset_starts_from_the_restored_structure():
    buffer = [1, 2, 3]
    journal = states.Journal(buffer, list, _redo, len)
    journal.log(0)
    restored = [7, 8]
    journal.reset(restored)
    restored.append(9)
    journal.log((9,))
    assert states.resolve(journal.capture(list)) == [7, 8, 9]


def test_resolve_builds_deferred_parts_and_copies_the_rest():
    inner = {"index": 3}
    snapshot = {"a": [inner, states.Deferred(lambda n: {"n": n}, 5)], "b": None}
    state = states.resolve(snapshot)
    assert state == {"a": [{"index": 3}, {"n": 5}], "b": None}
    state["a"][0]["index"] = 99
    assert inner == {"index": 3}  # a snapshot may be resolved again


@pytest.mark.parametrize("state, field, message", [
    ([], "", "not a dict"),
    ({"input": {}}, "position", "has fields"),
    ({"input": {}, "position": 1, "extra": 0}, "extra", "has fields"),
    ({"input": {}, "position": -1}, "position", "out of range"),
    ({"input": {}, "position": "1"}, "position", "not an integer"),
    ({"input": {}, "position": 1.0}, "position", "not an integer"),
    ({"input": {}, "position": True}, "position", "not an integer"),
])
def test_fields_reject_malformed_states_naming_op_and_field(state, field, message):
    with pytest.raises(ValueError, match=f"map: invalid iterator state: .*{field}.*{message}"):
        fields = states.Fields(state, "map", ("input", "position"))
        fields.int("position")


def test_fields_bounds_lists_and_bools():
    fields = states.Fields({"on": 1, "done": [3, 3], "xs": [1, 2, 3]}, "op", ("on", "done", "xs"))
    with pytest.raises(ValueError, match="'on'.*true or false"):
        fields.bool("on")
    with pytest.raises(ValueError, match="'done'.*twice"):
        fields.ints("done", distinct=True)
    with pytest.raises(ValueError, match="'xs'.*3 items, more than the 2"):
        fields.list("xs", max_length=2)
    assert fields.ints("xs", 1, 3) == [1, 2, 3]


@pytest.mark.parametrize("element", [
    np.arange(6, dtype=np.int32).reshape(2, 3), np.float16(1.5), b"\x00raw", "text",
    np.array([b"a", "b"], dtype=object), {"k": (np.int64(1), [b"x"])}, 7, 2.5, True, None,
])
def test_codec_round_trips_elements(element):
    decoded = state_codec.decode(state_codec.encode(element), "op", "f")
    assert repr(decoded) == repr(element)


def test_codec_rebuilds_namedtuples_from_the_pipelines_structure_only():
    encoded = state_codec.encode({"p": Point(np.int64(1), b"y")})
    decoded = state_codec.decode(encoded, "shuffle", "buffer", template={"p": Point(0, 0)})
    assert type(decoded["p"]) is Point and decoded["p"].y == b"y"
    calls = []
    state_codec.decode(state_codec.encode(Point(1, 2)), "op", "f",
                       get_template=lambda: calls.append(1) or Point(0, 0))
    assert calls == [1]  # asked for only because a namedtuple was found
    state_codec.decode(state_codec.encode((1, 2)), "op", "f",
                       get_template=lambda: calls.append(1) or Point(0, 0))
    assert calls == [1]
    with pytest.raises(ValueError, match="namedtuple with fields"):
        state_codec.decode(encoded, "shuffle", "buffer", template={"p": (0, 0)})


@pytest.mark.parametrize("data, message", [
    ({"nt": "os:system", "v": [{"s": "echo pwned"}]}, "namedtuple"),  # the old class-by-name form
    ({"nt": ["x"], "v": [{"s": "a"}]}, "namedtuple"),  # no template: nothing to rebuild it from
    ({"nd": "AAAAAAAAAAA=", "dtype": "O", "shape": [1]}, "plain values"),  # pointers from bytes
    ({"nd": "AAAA", "dtype": "<i8", "shape": [1000000]}, "cannot hold"),
    ({"nd": "AAAA", "dtype": "<i8", "shape": [-1]}, "not a list of sizes"),
    ({"np": "!!", "dtype": "<i8"}, "base64"),
    ({"obj": [{"py": 1}], "shape": [1]}, "only bytes and str"),
    ({"py": [1, 2]}, "not a number"),
    ({"d": [[{"l": []}, {"py": 1}]]}, "dict key"),
    ({"x": 1}, "not an encoded element"),
    ({"s": "a", "b": "AA=="}, "not an encoded element"),
    ("text", "not an encoded element"),
])
def test_codec_rejects_crafted_data_naming_op_and_field(data, message):
    with pytest.raises(ValueError, match=f"unique: invalid iterator state: .*'seen'.*{message}"):
        state_codec.decode(data, "unique", "seen")


def test_codec_rejects_deep_nesting_with_a_value_error():
    data = {"py": 1}
    for _ in range(100_000):
        data = {"l": [data]}
    with pytest.raises(ValueError, match="nested too deeply"):
        state_codec.decode(data, "scan", "scan_state")
