"""save/load, cache(filename) and snapshot: real ArrayRecord directories, written atomically."""

import collections
import gc
import json
import os

import jax
import numpy as np
import pytest
from array_record.python import array_record_data_source

import jdata
from jdata.io import codec
from tests.helpers import (
    assert_same_sequence, check_restore_at_every_step, read_through_data_errors, take_list)

Pair = collections.namedtuple("Pair", "left right")


def _element(i):
    return {"image": np.full((2, 3), i, np.uint8), "label": np.int64(i), "name": f"n{i}",
            "raw": bytes([i]) * (i % 3), "pair": Pair(np.float32(i / 2), [np.bool_(i % 2)]),
            "words": np.array([f"w{i}", "x"], dtype=object)}


def _dataset(n=12):
    return jdata.from_generator(lambda: (_element(i) for i in range(n)))


def _leftovers(directory) -> list:
    return [name for name in os.listdir(directory) if ".tmp-" in name]


def test_save_then_load_gives_the_same_elements_with_random_access(tmp_path):
    path = str(tmp_path / "saved")
    summary = _dataset().save(path)
    assert summary["elements"] == 12 and summary["bytes"] > 0
    loaded = jdata.load(path)
    assert len(loaded) == 12
    assert_same_sequence(take_list(loaded), take_list(_dataset()))
    assert isinstance(take_list(loaded)[0]["pair"], tuple)
    assert take_list(loaded)[0]["pair"].left == np.float32(0)
    shuffled = [int(e["label"]) for e in loaded.shuffle(jax.random.key(0))]
    assert sorted(shuffled) == list(range(12)) and shuffled != list(range(12))
    check_restore_at_every_step(loaded.batch(5))
    # grain's (array_record's) data source reads the shards; the records decode alike.
    shard = os.path.join(path, "data-00000.array_record")
    records = array_record_data_source.ArrayRecordDataSource([shard])
    structure = codec.describe(take_list(loaded)[0])
    decoded = [codec.Decoder(structure)(records[i]) for i in range(len(records))]
    assert_same_sequence(decoded, take_list(loaded))
    assert _leftovers(tmp_path) == []


def test_an_interrupted_save_leaves_nothing_and_existing_paths_are_kept(tmp_path):
    def fails_late(i):
        if i == 9:
            raise ValueError("boom")
        return np.int64(i)

    path = str(tmp_path / "partial")
    with pytest.raises(jdata.UDFError):
        jdata.range(20).map(fails_late).save(path)
    assert not os.path.exists(path) and _leftovers(tmp_path) == []
    with pytest.raises(FileNotFoundError, match="no saved dataset at"):
        jdata.load(path)
    jdata.range(3).save(path)
    with pytest.raises(FileExistsError, match="exists"):
        jdata.range(4).save(path)
    assert [int(x) for x in jdata.load(path)] == [0, 1, 2]
    empty = str(tmp_path / "empty")
    jdata.range(0).save(empty)
    assert take_list(jdata.load(empty)) == []


def _logged(log, fn):
    """``fn`` that appends a line to the file ``log`` per call (a closure over a constant
    path: the pipeline's fingerprint stays the same as calls accumulate)."""
    def udf(x):
        with open(log, "a") as f:
            f.write(f"{int(x)}\n")
        return fn(x)

    return udf


def _calls(log) -> list:
    return [int(line) for line in open(log)] if os.path.exists(log) else []


def test_cache_to_a_file_fills_once_then_serves_later_passes_and_runs(tmp_path):
    log = str(tmp_path / "calls.log")
    slow_square = _logged(log, lambda x: x * x)

    directory = str(tmp_path / "cache")

    def pipeline():
        return jdata.range(6).map(slow_square).cache(directory)

    assert [int(x) for x in pipeline().repeat(3)] == [0, 1, 4, 9, 16, 25] * 3
    assert _calls(log) == list(range(6))  # only the first pass computed
    assert [int(x) for x in pipeline()] == [0, 1, 4, 9, 16, 25]  # a new run: from disk
    assert _calls(log) == list(range(6))
    assert "CacheFile(" in pipeline().explain()
    check_restore_at_every_step(pipeline().repeat(2))
    with pytest.raises(ValueError, match="holds the elements of a different pipeline"):
        take_list(jdata.range(7).cache(directory))


def test_a_cache_mismatch_names_the_value_that_cannot_be_hashed(tmp_path):
    directory = str(tmp_path / "cache")

    def pipeline(handle):  # as a new run builds it: another open file each time
        return jdata.range(3).map(lambda x: x if handle else None).cache(directory)

    with open(os.devnull) as first, open(os.devnull) as second:
        assert [int(x) for x in pipeline(first)] == [0, 1, 2]
        with pytest.raises(ValueError, match="different pipeline") as raised:
            take_list(pipeline(second))
    message = str(raised.value)
    assert "No later run can reuse this cache" in message
    assert "_io.TextIOWrapper (read by " in message and "<lambda>" in message
    assert "create that value inside the UDF, or make it picklable" in message
    with pytest.raises(ValueError, match="different pipeline") as certain:
        take_list(jdata.range(4).cache(directory))
    assert "cannot be hashed" not in str(certain.value)


def test_a_partial_or_closed_pass_leaves_no_cache(tmp_path):
    directory = str(tmp_path / "cache")
    ds = jdata.range(50).map(lambda x: x + 1).cache(directory)
    assert [int(x) for x in ds.take(10)] == list(range(1, 11))
    it = ds.iterator()
    next(it)
    it.close()
    assert not os.path.exists(directory) and _leftovers(tmp_path) == []
    dropped = ds.iterator()
    next(dropped)
    assert len(_leftovers(tmp_path)) == 1  # being written
    del dropped
    gc.collect()
    assert _leftovers(tmp_path) == []  # an iterator collected mid-pass leaves nothing
    assert len(take_list(ds)) == 50 and os.path.exists(directory)


def test_concurrent_writers_of_one_cache_both_finish_and_one_directory_wins(tmp_path):
    directory = str(tmp_path / "cache")
    ds = jdata.range(30).map(lambda x: x * 3).cache(directory)
    first, second = ds.iterator(), ds.iterator()
    a, b = [], []
    for _ in range(30):  # both passes fill a temporary directory at once
        a.append(int(next(first)))
        b.append(int(next(second)))
    for it in (first, second):
        with pytest.raises(StopIteration):
            next(it)
    assert a == b == [3 * x for x in range(30)]
    assert [int(x) for x in jdata.load(directory)] == a
    assert _leftovers(tmp_path) == []


def test_a_restored_writing_pass_finishes_without_writing(tmp_path):
    directory = str(tmp_path / "cache")
    ds = jdata.range(8).cache(directory)
    it = ds.iterator()
    for _ in range(3):
        next(it)
    resumed = ds.iterator(it.get_state())
    assert [int(x) for x in resumed] == [3, 4, 5, 6, 7]
    assert not os.path.exists(directory)  # it did not see elements 0-2
    it.close()
    assert [int(x) for x in ds] == list(range(8)) and os.path.exists(directory)


def test_snapshot_is_keyed_by_the_pipeline_fingerprint(tmp_path):
    log = str(tmp_path / "calls.log")
    double = _logged(log, lambda x: x * 2)

    root = str(tmp_path / "snap")
    ds = jdata.range(5).map(double).snapshot(root)
    assert [int(x) for x in ds] == [0, 2, 4, 6, 8]
    rebuilt = jdata.range(5).map(double).snapshot(root)  # a later run: reused
    assert [int(x) for x in rebuilt] == [0, 2, 4, 6, 8] and len(_calls(log)) == 5
    other = jdata.range(6).map(double).snapshot(root)
    assert len(take_list(other)) == 6
    assert sorted(os.listdir(root)) == sorted([jdata.range(5).map(double).fingerprint(),
                                               jdata.range(6).map(double).fingerprint()])


def test_saving_rejects_elements_it_cannot_store(tmp_path):
    with pytest.raises(ValueError, match="element 1 has structure"):
        jdata.from_generator(lambda: iter([np.int64(1), (np.int64(1), np.int64(2))])).save(
            str(tmp_path / "mixed"))
    assert not os.path.exists(tmp_path / "mixed") and _leftovers(tmp_path) == []
    with pytest.raises(TypeError, match="must be a path"):
        jdata.range(3).cache(5)


def test_load_reads_a_saved_directory_through_an_fsspec_url(tmp_path):
    import fsspec

    path = str(tmp_path / "saved")
    _dataset(5).save(path)
    memory = fsspec.filesystem("memory")
    for name in os.listdir(path):
        memory.pipe(f"/jdata-saved/{name}", open(os.path.join(path, name), "rb").read())
    assert_same_sequence(take_list(jdata.load("memory://jdata-saved")),
                         take_list(_dataset(5)))
    with pytest.raises(FileNotFoundError, match="no saved dataset"):
        jdata.load("memory://jdata-nothing-here")
    with pytest.raises(ValueError, match="local directories only"):
        jdata.range(2).save("memory://jdata-out")


def _edit_metadata(path, edit) -> None:
    name = os.path.join(path, "jdata_metadata.json")
    with open(name) as f:
        metadata = json.load(f)
    edit(metadata)
    with open(name, "w") as f:
        json.dump(metadata, f)


def _shard(metadata, **changes):
    metadata["shards"][0].update(changes)


@pytest.mark.parametrize("edit, match", [
    (lambda m, _: (_shard(m, records=2), m.update(cardinality=2)),
     "holds 2 records, but it holds 6"),
    (lambda m, _: (_shard(m, records=9), m.update(cardinality=9)),
     "holds 9 records, but it holds 6"),
    (lambda m, _: m.update(cardinality=5), "'cardinality' is 5, but its shards hold 6"),
    (lambda m, _: _shard(m, records="6"), "has '6' records"),
    (lambda m, _: _shard(m, file="../outside/data-00000.array_record"),
     "names the shard '../out"),
    (lambda m, outside: _shard(m, file=outside), "names the shard '/.*/outside/data-00000"),
    (lambda m, _: _shard(m, file=".."), "names the shard '..'"),
    (lambda m, _: m.update(shards={"file": "x"}), "'shards' is"),
    (lambda m, _: m.update(structure={"dict": [["x"]]}), "'structure': .* is not an element"),
    (lambda m, _: m.update(structure={"namedtuple": ["m:P", ["__class__"], [None]]}),
     "not an element structure"),
], ids=["count_lowered", "count_raised", "cardinality", "count_type", "dotdot", "absolute",
        "parent", "shards_type", "structure", "field_name"])
def test_a_changed_directory_fails_at_load_naming_what_is_wrong(tmp_path, edit, match):
    jdata.range(3).save(str(tmp_path / "outside"))
    path = str(tmp_path / "saved")
    jdata.range(6).save(path)
    _edit_metadata(path, lambda m: edit(m, str(tmp_path / "outside" / "data-00000.array_record")))
    with pytest.raises(ValueError, match=match) as raised:
        jdata.load(path)
    assert "changed after it was written" in str(raised.value)
    with pytest.raises(ValueError, match=match):  # a cache directory is checked alike
        take_list(jdata.range(6).cache(path))


def _rewrite_shard(path, records) -> str:
    from array_record.python.array_record_module import ArrayRecordWriter

    shard = os.path.join(path, "data-00000.array_record")
    writer = ArrayRecordWriter(shard, "group_size:1")
    for record in records:
        writer.write(record)
    writer.close()
    return shard


def test_a_record_that_does_not_decode_is_a_data_error_naming_shard_and_record(tmp_path):
    path = str(tmp_path / "saved")
    jdata.range(6).map(lambda x: {"x": x}).save(path)
    records = [codec.encode({"x": np.int64(i)}) for i in range(6)]
    records[3] = records[3][:-2]  # cut short
    shard = _rewrite_shard(path, records)
    loaded = jdata.load(path)
    got, errors = read_through_data_errors(loaded)
    assert errors == [(shard, 3)] and [int(e["x"]) for e in got] == [0, 1, 2, 4, 5]
    with pytest.raises(jdata.DataError, match="load: cannot read record 3 .* truncated"):
        take_list(loaded)
    it = loaded.shuffle(jax.random.key(0)).ignore_errors().iterator()
    assert sorted(int(e["x"]) for e in it) == [0, 1, 2, 4, 5]
    assert it.stats().dropped[0]["unreadable_records"] == 1


def test_records_that_do_not_hold_the_structure_s_leaves_fail_each(tmp_path):
    path = str(tmp_path / "saved")
    jdata.range(3).map(lambda x: {"x": x, "y": x}).save(path)
    _edit_metadata(path, lambda m: m.update(structure={"dict": [["x", None]]}))
    got, errors = read_through_data_errors(jdata.load(path))
    assert got == [] and [record for _, record in errors] == [0, 1, 2]
    with pytest.raises(jdata.DataError, match="holds 2 leaves; its structure has 1"):
        take_list(jdata.load(path))


def test_a_crafted_record_never_allocates_more_than_its_size(tmp_path):
    import struct
    import tracemalloc

    path = str(tmp_path / "saved")
    jdata.range(1).map(lambda x: [x]).save(path)
    # 14 bytes: one leaf, an object array of 10 million items (80 MB of pointers).
    shard = _rewrite_shard(path, [struct.pack("<I", 1) + b"o\x01" + struct.pack("<Q", 10**7)])
    tracemalloc.start()
    try:
        with pytest.raises(jdata.DataError, match="cannot fit in the 0 bytes left") as raised:
            take_list(jdata.load(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (raised.value.path, raised.value.record) == (shard, 0)
    assert peak < 8 << 20
