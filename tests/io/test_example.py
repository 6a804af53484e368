"""jdata.io.parse_example and friends against what TensorFlow parsed from the same records.

The fixtures (tests/io/fixtures, written by make_example_fixtures.py with
TensorFlow) hold Example and SequenceExample records TensorFlow serialized,
and TensorFlow's outputs of every case; no TensorFlow is imported here.
Each case runs twice: as it runs (the batch parsed as one merged message)
and record by record (the exact path every fallback takes).
"""

import functools
import json
import pathlib
import pickle
import struct
import subprocess
import sys

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

import jdata
from jdata.io import _example_outputs, _example_parse

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CASES = json.loads((FIXTURES / "example_cases.json").read_text())["cases"]
_SPEC_CLASSES = {"FixedLenFeature": jdata.io.FixedLenFeature,
                 "VarLenFeature": jdata.io.VarLenFeature,
                 "FixedLenSequenceFeature": jdata.io.FixedLenSequenceFeature}


def read_records(file: str) -> list[bytes]:
    return list(jdata.from_tfrecord(str(FIXTURES / f"{file}.tfrecord")))


def specs(encoded):
    if encoded is None:
        return None
    return {key: _SPEC_CLASSES[kind](*args) for key, (kind, *args) in encoded.items()}


def _bytes_array(arrays, name) -> np.ndarray:
    data, lengths = arrays[name + ".bytes"].tobytes(), arrays[name + ".lengths"]
    ends = np.cumsum(lengths)
    out = np.empty(len(lengths), object)
    out[:] = [data[end - n:end] for end, n in zip(ends, lengths)]
    return out.reshape(tuple(arrays[name + ".shape"]))


def expected_outputs(case: str) -> dict:
    """``{group: {key: array or (indices, values, dense_shape)}}`` TensorFlow returned."""
    found: dict = {}
    with np.load(FIXTURES / "example_outputs.npz", allow_pickle=False) as arrays:
        for name in arrays.files:
            base, _, suffix = name.partition(".")  # bytes arrays: .bytes, .lengths, .shape
            if not base.startswith(case + "/") or suffix in ("lengths", "shape"):
                continue
            _, group, key, part = base.split("/")
            value = _bytes_array(arrays, base) if suffix == "bytes" else arrays[name]
            found.setdefault(group, {}).setdefault(key, {})[part] = value
    return {group: {key: parts.get("dense", tuple(parts.get(p) for p in (
        "indices", "values", "dense_shape"))) for key, parts in outputs.items()}
        for group, outputs in found.items()}


def assert_same(ours, theirs, where: str) -> None:
    """Equal shapes, dtypes and bits (NaN payloads and -0.0 included)."""
    if isinstance(theirs, tuple):
        assert isinstance(ours, jdata.io.SparseTensor), where
        for part, a, b in zip(("indices", "values", "dense_shape"), ours, theirs):
            assert_same(a, b, f"{where}.{part}")
        return
    if isinstance(ours, bytes):  # one record's bytes scalar, as TF's .numpy() gives it
        ours = np.array(ours, dtype=object)
    assert isinstance(ours, (np.ndarray, np.generic)), where
    ours = np.asarray(ours)
    assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype), where
    if ours.dtype == object:
        assert all(type(v) is bytes for v in ours.reshape(-1)), where
        assert ours.tolist() == theirs.tolist(), where
    else:
        assert ours.tobytes() == theirs.tobytes(), where


def run_case(case: dict):
    records = read_records(case["file"])
    which = case["records"]
    serialized = [records[i] for i in which] if isinstance(which, list) else records[which]
    function = getattr(jdata.io, case["function"])
    return function(serialized, *(specs(s) for s in case["specs"]))


@pytest.fixture(params=["merged", "one_by_one"])
def parse_path(request, monkeypatch):
    if request.param == "one_by_one":  # as when the merged parse cannot vouch for a batch
        monkeypatch.setattr(_example_parse, "_merged_entries", lambda *args: None)
        monkeypatch.setattr(_example_parse, "_merged_values", lambda *args: None)
    return request.param


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["error"] is None])
def test_outputs_are_tensorflows_bit_for_bit(name, parse_path):
    outputs = run_case(CASES[name])
    expected = expected_outputs(name)
    groups = ({"features": outputs} if isinstance(outputs, dict) else
              dict(zip(("context", "lists", "lengths"), outputs)))
    assert set(groups) >= set(expected)
    for group, values in groups.items():
        assert set(values) == set(expected.get(group, {})), (name, group)
        for key, value in values.items():
            assert_same(value, expected[group][key], f"{name}/{group}/{key}")


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["error"] is not None])
def test_what_tensorflow_refuses_is_a_value_error_naming_feature_and_record(name, parse_path):
    case = CASES[name]
    with pytest.raises(ValueError) as raised:
        run_case(case)
    message = str(raised.value)
    key = next(iter(case["specs"][0] or case["specs"][1]))
    assert repr(key) in message or f"Feature: {key} " in message, message
    assert f"record {_failing_record(name)}" in message, message
    assert _FIXES[name] in message, message


_FIXES = {  # what each error says besides the feature and the record
    "missing_without_default": "give its FixedLenFeature a default_value",
    "type_mismatch": "holds float32 values, but its spec's dtype is int64 (data types don't "
                     "match); declare it with dtype=np.float32",
    "wrong_count": "has 67 values, but shape (3,) holds 3",
    "empty_list_for_fixed": "has 0 values, but shape (3,) holds 3",
    "not_a_multiple": "has 3 values, not a multiple of 2",
    "varlen_type": "declare it with dtype=bytes",
    "list_required": "Feature list 'frames' is required but could not be found in record 2; "
                     "pass allow_missing=True",
    "step_count": "step 0 of feature list 'var' of record 0 has 1 values, but shape (2,) "
                  "holds 2",
    "step_type": "step 0 of feature list 'frames' of record 0 holds int64 values",
    "context_missing": "Feature: vec (data type: float32) is required but could not be found",
}


def _failing_record(name: str) -> int:
    # TF names the record (Index: N) except for missing features: the first lacking one.
    error = CASES[name]["error"]
    if "Index: " in error:
        return int(error.split("Index: ")[1].split(".")[0])
    return {"missing_without_default": 1, "list_required": 2, "context_missing": 1,
            "step_count": 0}[name]


def test_the_fixtures_cover_every_kind_and_corner():
    batch = expected_outputs("batch")["features"]
    assert batch["specials"].dtype == np.float32
    bits = set(batch["specials"].view(np.uint32).reshape(-1).tolist())
    assert {0x7FC0ABCD, 0x7F800000, 0xFF800000, 0x80000000, 1} <= bits  # NaN payload, infs...
    assert {-2**63, 2**63 - 1} <= set(batch["big"].reshape(-1).tolist())
    assert "日本".encode() in batch["tags"][1].tolist()
    assert batch["label"].tolist() == [3, -1, -5, 2, -1, 2**62]  # defaults; a key given twice
    assert batch["name"].tolist()[2] == b"none"  # a Feature of no kind is a missing one
    lengths = expected_outputs("sequence_batch")["lengths"]
    assert lengths["frames"].tolist() == [3, 1, 0, 1]
    assert sum(path.stat().st_size for path in FIXTURES.iterdir()) < 200_000


def test_import_jdata_does_not_import_protobuf():
    code = "import sys, jdata; print('google.protobuf' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=pathlib.Path(__file__).parents[2])
    assert done.stdout.strip() == "False"


def test_without_protobuf_parsing_says_which_extra_to_install():
    code = ("import sys; sys.modules['google.protobuf'] = None\n"
            "import jdata, numpy as np\n"
            "try:\n"
            "    jdata.io.parse_example(b'', {'x': jdata.io.VarLenFeature(np.int64)})\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=pathlib.Path(__file__).parents[2])
    assert done.stdout.strip() == ("parse_example needs protobuf (module "
                                   "'google.protobuf.message' does not import): pip install "
                                   "'jdata-jax[io]'")


def test_feature_specs_pickle_hash_and_compare_by_value():
    spec = {"x": jdata.io.FixedLenFeature([2], np.float32, default_value=[1, 2]),
            "y": jdata.io.VarLenFeature(bytes),
            "z": jdata.io.FixedLenSequenceFeature((), "int64", True, default_value=np.int64(-1))}
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec["x"] == jdata.io.FixedLenFeature((2,), "float32", ((1.0, 2.0)))
    assert len({spec["x"], jdata.io.FixedLenFeature([2], "float32", [1.0, 2.0])}) == 1
    assert spec["x"].default_value == (1.0, 2.0) and spec["z"].default_value == -1
    assert repr(spec["y"]) == "VarLenFeature(dtype='string')"


@pytest.mark.parametrize("dtype, name", [
    (np.int64, "int64"), ("int64", "int64"), (np.dtype("int64"), "int64"),
    (np.float32, "float32"), ("float32", "float32"), (np.dtype(np.float32), "float32"),
    (bytes, "string"), ("string", "string"), ("bytes", "string"), (np.bytes_, "string")])
def test_dtypes_are_accepted_by_every_name_a_tf_user_types(dtype, name):
    assert jdata.io.VarLenFeature(dtype).dtype == name
    assert jdata.io.FixedLenFeature([], dtype).dtype == name


@pytest.mark.parametrize("dtype", [np.float64, "float", float, int, np.int32, "int32", None,
                                   object, np.dtype("S3")])
def test_other_dtypes_are_refused_naming_the_three(dtype):
    for make in (jdata.io.VarLenFeature, lambda d: jdata.io.FixedLenFeature([], d),
                 lambda d: jdata.io.FixedLenSequenceFeature([], d, True)):
        with pytest.raises(TypeError, match="np.int64, np.float32 or bytes"):
            make(dtype)


def test_str_as_dtype_says_to_use_bytes():
    with pytest.raises(TypeError, match="dtype=bytes"):
        jdata.io.FixedLenFeature([], str)


@pytest.mark.parametrize("shape, error, words", [
    ([None], ValueError, "FixedLenSequenceFeature reads a first dimension"),
    ([2, None], ValueError, "every size must be known"), ([-1], ValueError, ">= 0"),
    ("ab", TypeError, "list or tuple"), ([1.5], TypeError, "must hold ints"),
    ([True], TypeError, "must hold ints")])
def test_bad_shapes_are_refused_with_the_fix(shape, error, words):
    with pytest.raises(error, match=words):
        jdata.io.FixedLenFeature(shape, np.int64)


def test_an_int_shape_is_one_dimension_as_in_tf():
    assert jdata.io.FixedLenFeature(3, np.int64).shape == (3,)


@pytest.mark.parametrize("dtype, default, error, words", [
    (np.int64, [1, 2], ValueError, "has 2 values, but shape \\(3,\\) holds 3"),
    (np.int64, 1, ValueError, r"np.full\(\(3,\), value\)"),
    (np.int64, [1.5, 2, 3], TypeError, "integers that fit int64"),
    (np.int64, [True, False, True], TypeError, "integers"),
    (np.int64, [2**64 - 1, 0, 0], TypeError, "integers that fit int64"),
    (np.float32, ["a", "b", "c"], TypeError, "numbers"),
    (bytes, [1, 2, 3], TypeError, "must hold bytes")])
def test_bad_defaults_are_refused_when_the_spec_is_built(dtype, default, error, words):
    with pytest.raises(error, match=words):
        jdata.io.FixedLenFeature([3], dtype, default_value=default)


def test_string_defaults_may_be_str_and_any_nesting_of_the_shape():
    spec = jdata.io.FixedLenFeature([2, 2], bytes, default_value=["a", b"b", "ç", b""])
    assert spec.default_value == ((b"a", b"b"), ("ç".encode(), b""))


def test_sequence_feature_specs_are_checked():
    with pytest.raises(ValueError, match="holds no values"):
        jdata.io.FixedLenSequenceFeature([2, 0], np.int64, True)
    with pytest.raises(ValueError, match="must be one value"):
        jdata.io.FixedLenSequenceFeature([2], np.int64, True, default_value=[1, 2])
    with pytest.raises(TypeError, match="allow_missing"):
        jdata.io.FixedLenSequenceFeature([2], np.int64, "yes")


RECORDS = read_records("examples")
SEQUENCES = read_records("sequence_examples")
LABEL = {"label": jdata.io.FixedLenFeature([], np.int64, default_value=0)}


@pytest.mark.parametrize("features, error, words", [
    ({}, ValueError, "features is empty"), (None, TypeError, "must be a dict"),
    ({"label": "int64"}, TypeError, r"features\['label'\] is a str; use jdata.io"),
    ({b"label": LABEL["label"]}, TypeError, "must be a str"),
    ({"frames": jdata.io.FixedLenSequenceFeature([2], np.int64)}, ValueError,
     "pass allow_missing=True")])
def test_parse_example_refuses_bad_features(features, error, words):
    with pytest.raises(error, match=words):
        jdata.io.parse_example(RECORDS, features)


@pytest.mark.parametrize("serialized, error, words", [
    ("text", TypeError, "must be one record"), (3, TypeError, "must be one record"),
    ([RECORDS[0], "text"], TypeError, "record 1 of serialized is a str"),
    (np.array([RECORDS[:2]], dtype=object), ValueError, r"shape \(1, 2\)"),
    (np.array(RECORDS[:2]), TypeError, "dtype=object")])
def test_parse_example_refuses_what_is_no_record(serialized, error, words):
    with pytest.raises(error, match=words):
        jdata.io.parse_example(serialized, LABEL)


def test_batches_may_be_tuples_object_arrays_and_hold_numpy_bytes():
    want = jdata.io.parse_example(RECORDS, LABEL)["label"]
    batch = np.empty(len(RECORDS), object)
    batch[:] = [np.bytes_(r) for r in RECORDS]  # np.bytes_ keeps trailing zero bytes
    for serialized in (tuple(RECORDS), batch):
        np.testing.assert_array_equal(jdata.io.parse_example(serialized, LABEL)["label"], want)
    one = np.array(RECORDS[0], dtype=object)  # a 0-d array: one record
    assert jdata.io.parse_single_example(one, LABEL)["label"] == want[0]


def test_single_record_functions_refuse_batches():
    with pytest.raises(ValueError, match="parse batches with parse_example"):
        jdata.io.parse_single_example(RECORDS, LABEL)
    with pytest.raises(ValueError, match="parse batches with parse_sequence_example"):
        jdata.io.parse_single_sequence_example(SEQUENCES, {"id": LABEL["label"]})


def test_parse_sequence_example_refuses_bad_features():
    op = jdata.io.parse_sequence_example
    with pytest.raises(ValueError, match="both empty"):
        op(SEQUENCES)
    with pytest.raises(TypeError, match=r"context_features\['x'\] is a FixedLenSequenceFeature"):
        op(SEQUENCES, {"x": jdata.io.FixedLenSequenceFeature([], np.int64, True)})
    with pytest.raises(TypeError, match=r"sequence_features\['x'\] is a FixedLenFeature"):
        op(SEQUENCES, None, {"x": jdata.io.FixedLenFeature([], np.int64)})
    with pytest.raises(ValueError, match="drop the default_value"):
        op(SEQUENCES, None, {"x": jdata.io.FixedLenSequenceFeature([], np.int64, True, 5)})


def test_a_truncated_record_is_a_value_error_naming_it():
    # Record 0's one top-level field spans it: any cut leaves that field short.
    for cut in range(1, len(RECORDS[0])):
        with pytest.raises(ValueError, match="record 1 of the batch is not a serialized "
                                             "tf.train.Example"):
            jdata.io.parse_example([RECORDS[1], RECORDS[0][:cut]], LABEL)


def test_a_truncated_sequence_example_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="record 2 of the batch is not a serialized "
                                         "tf.train.SequenceExample"):
        jdata.io.parse_sequence_example(SEQUENCES[:2] + [SEQUENCES[0][:-3]],
                                        {"id": LABEL["label"]})


def test_random_bytes_parse_or_fail_with_a_value_error():
    rng = np.random.default_rng(0)
    failed = 0
    for size in rng.integers(1, 300, 200):
        record = rng.bytes(int(size))
        try:
            out = jdata.io.parse_example([RECORDS[0], record], LABEL)
        except ValueError as e:
            assert "record 1" in str(e)
            failed += 1
        else:
            assert out["label"].shape == (2,)
    assert failed > 150  # random bytes are rarely a valid Example


def test_corrupt_features_fail_only_when_asked_for():
    entry = _field(1, b"junk") + _field(2, b"\xff\xff")  # a Feature that does not parse
    record = _field(1, _field(1, entry))
    assert jdata.io.parse_example([record], LABEL)["label"].tolist() == [0]  # as TensorFlow
    with pytest.raises(ValueError, match="feature 'junk' of record 0 is not a serialized "
                                         "tf.train.Feature"):
        jdata.io.parse_example([record], {"junk": jdata.io.VarLenFeature(np.int64)})


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_parse_example_runs_in_worker_processes_over_tfrecord_files():
    features = specs(CASES["batch"]["specs"][0])
    ds = (jdata.from_tfrecord(str(FIXTURES / "examples.tfrecord")).repeat(4)
          .batch(len(RECORDS))
          .map(functools.partial(jdata.io.parse_example, features=features),
               num_parallel_calls=2)
          .with_options(jdata.Options(engine="processes")))
    assert "processes" in ds.explain()
    expected = expected_outputs("batch")["features"]
    batches = list(ds)
    assert len(batches) == 4
    for batch in batches:
        for key, value in batch.items():
            assert_same(value, expected[key], key)


# Records as odd as the wire allows: keys given twice or not at all, Features of no kind, of
# two kinds, packed and unpacked, unknown fields, garbage, and the very values the merged
# parse uses as markers.
_INTS = st.sampled_from([0, 1, -1, 2**63 - 1, -2**63, _example_parse._FEATURE_END_INT])
_FLOAT_BITS = st.sampled_from([0, 0x3F800000, 0x7FC00000, 0x80000000,
                               _example_parse._FEATURE_END_FLOAT_BITS])
_BYTES = st.sampled_from([b"", b"x", b"\x00", _example_parse._FEATURE_END_BYTES])
_LISTS = {  # a Feature of each kind, packed and not
    "a": [st.lists(_INTS, max_size=4).map(lambda v: _field(3, _field(1, b"".join(
              _varint(i % 2**64) for i in v)))),
          st.lists(_INTS, max_size=4).map(lambda v: _field(3, b"".join(
              b"\x08" + _varint(i % 2**64) for i in v)))],
    "b": [st.lists(_FLOAT_BITS, max_size=4).map(lambda v: _field(2, _field(1, struct.pack(
              f"<{len(v)}I", *v)))),
          st.lists(_FLOAT_BITS, max_size=4).map(lambda v: _field(2, b"".join(
              b"\x0d" + struct.pack("<I", b) for b in v)))],
    "c": [st.lists(_BYTES, max_size=3).map(lambda v: _field(1, b"".join(
              _field(1, b) for b in v)))],
}
_ANY_LIST = st.one_of(*(s for lists in _LISTS.values() for s in lists))
_ODD_FEATURE = st.one_of(st.just(b""), _ANY_LIST, st.lists(_ANY_LIST, min_size=2, max_size=2)
                         .map(b"".join), st.binary(max_size=5))


@st.composite
def _entry(draw) -> bytes:
    key = draw(st.sampled_from(["a", "b", "c"] * 10 + ["end"]))
    odd = key == "end" or draw(st.integers(0, 19)) == 0
    feature = draw(_ODD_FEATURE if odd else st.one_of(*_LISTS[key]))
    key = _example_parse._RECORD_END_KEY if key == "end" else key.encode()
    form = draw(st.sampled_from(["both"] * 8 + ["no key", "no value", "unknown"]))
    return _field(1, {"both": _field(1, key) + _field(2, feature), "no key": _field(2, feature),
                      "no value": _field(1, key),
                      "unknown": _field(1, key) + _field(2, feature) + b"\x18\x01"}[form])


@st.composite
def _record(draw) -> bytes:
    form = draw(st.integers(0, 19))
    if form == 0:
        return draw(st.binary(max_size=12))
    parts = draw(st.lists(st.lists(_entry(), max_size=4), min_size=1,
                          max_size=2 if form == 1 else 1))
    return b"".join(_field(1, b"".join(entries)) for entries in parts)


_ODD_SPECS = [
    {"a": jdata.io.VarLenFeature(np.int64), "b": jdata.io.FixedLenSequenceFeature(
        [], np.float32, True), "c": jdata.io.FixedLenSequenceFeature([], bytes, True)},
    {"b": jdata.io.FixedLenFeature([2], np.float32, [0, 0]), "c": jdata.io.VarLenFeature(bytes)},
    {"a": jdata.io.FixedLenFeature([], np.int64, 7), "b": jdata.io.VarLenFeature(np.float32),
     "c": jdata.io.VarLenFeature(bytes)},
    {"a": jdata.io.FixedLenSequenceFeature([2], np.int64, True, -1),
     "c": jdata.io.FixedLenFeature([1], bytes, "d"), "b": jdata.io.FixedLenFeature([0], "float32")},
]


def _outcome(records, features):
    try:
        parsed = jdata.io.parse_example(records, features)
    except ValueError as e:
        return str(e)
    return {key: [(np.asarray(a).dtype, np.asarray(a).shape,
                   np.asarray(a).tolist() if np.asarray(a).dtype == object
                   else np.asarray(a).tobytes())
                  for a in (value if isinstance(value, tuple) else (value,))]
            for key, value in parsed.items()}


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(st.lists(_record(), min_size=1, max_size=6), st.sampled_from(_ODD_SPECS))
def test_the_merged_parse_gives_what_the_record_by_record_parse_gives(records, features):
    merged = _outcome(records, features)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_example_parse, "_merged_entries", lambda *args: None)
        patch.setattr(_example_parse, "_merged_values", lambda *args: None)
        assert _outcome(records, features) == merged


def _described(parse):
    """What ``parse()`` returns, down to each output's type, dtype, shape and bits, or its
    ValueError's message."""
    try:
        parsed = parse()
    except ValueError as e:
        return str(e)
    return {key: (type(value).__name__, [
        (type(a).__name__, np.asarray(a).dtype, np.asarray(a).shape,
         np.asarray(a).tolist() if np.asarray(a).dtype == object else np.asarray(a).tobytes())
        for a in (value if isinstance(value, tuple) else (value,))])
        for key, value in parsed.items()}


def _batch_of_one(record, features):
    return {key: _example_outputs.first(value)
            for key, value in jdata.io.parse_example([record], features).items()}


def _assert_single_is_batched(record, features):
    expected = _described(lambda: _batch_of_one(record, features))
    assert _described(lambda: jdata.io.parse_single_example(record, features)) == expected
    assert _described(lambda: jdata.io.parse_example(record, features)) == expected


@pytest.mark.parametrize("case", ["batch", "other_specs", "missing_without_default",
                                  "type_mismatch", "wrong_count", "empty_list_for_fixed",
                                  "not_a_multiple", "varlen_type"])
def test_parse_single_example_gives_what_a_batch_of_that_one_record_gives(case):
    features = specs(CASES[case]["specs"][0])
    for record in read_records(CASES[case]["file"]):
        _assert_single_is_batched(record, features)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(_record(), st.sampled_from(_ODD_SPECS))
def test_the_single_record_path_gives_what_the_batched_path_gives(record, features):
    _assert_single_is_batched(record, features)


def test_the_single_record_path_refuses_bad_features_as_the_batched_path_does():
    record = read_records("examples")[0]
    for features in ({}, [], {"x": 3}, {1: jdata.io.VarLenFeature(np.int64)},
                     {"x": jdata.io.FixedLenSequenceFeature([], np.int64)}):
        with pytest.raises((TypeError, ValueError)) as single:
            jdata.io.parse_single_example(record, features)
        with pytest.raises(type(single.value)) as batched:
            jdata.io.parse_example([record], features)
        assert str(single.value) == str(batched.value)
