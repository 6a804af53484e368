"""from_array_record over files written by the array-record package (grain's format)."""

import json
import os
import subprocess
import sys

import fsspec
import jax
import numpy as np
import pytest
from array_record.python import array_record_data_source
from array_record.python.array_record_module import ArrayRecordWriter

import jdata
from tests.helpers import (
    check_restore_at_every_step, open_files_under, read_through_data_errors, take_list)


def _write(path: str, records, options: str = "group_size:1") -> str:
    writer = ArrayRecordWriter(path, options)
    for record in records:
        writer.write(record)
    writer.close()
    return path


def _records(f: int, n: int) -> list:
    return [f"{f}-{i}-".encode() * (i % 7 + 1) for i in range(n)]


@pytest.fixture
def shards(tmp_path):
    sizes = (50, 1, 30)
    paths = [_write(str(tmp_path / f"data-{f:02d}.array_record"), _records(f, n))
             for f, n in enumerate(sizes)]
    return paths, [r for f, n in enumerate(sizes) for r in _records(f, n)]


def test_reads_every_record_of_several_files_as_the_array_record_package_does(shards):
    paths, expected = shards
    ds = jdata.from_array_record(paths)
    assert len(ds) == 81 and ds.element_spec == jdata.TensorSpec((), object)
    assert take_list(ds) == expected
    # The same records through array_record's (and grain's) own data source.
    source = array_record_data_source.ArrayRecordDataSource(paths)
    assert [source[i] for i in range(len(source))] == expected
    glob = os.path.join(os.path.dirname(paths[0]), "data-*.array_record")
    assert take_list(jdata.from_array_record(glob)) == expected
    assert "FromArrayRecord(files=3, records=81)" in ds.explain()


def test_random_access_shuffles_shards_and_restores_by_index(shards):
    paths, expected = shards
    ds = jdata.from_array_record(paths).shuffle(jax.random.key(0)).batch(8)
    batches = check_restore_at_every_step(ds)
    flat = [r for b in batches for r in b]
    assert sorted(flat) == sorted(expected) and flat != expected
    shard = take_list(jdata.from_array_record(paths).shard(4, 1))
    assert shard == expected[1::4]
    it = jdata.from_array_record(paths).iterator()
    for _ in range(60):
        next(it)
    assert it.get_state()["state"] == {"index": 60}  # an index, not records


def test_parallel_reads_in_threads_and_processes_give_the_same_records(shards):
    paths, expected = shards
    for engine in ("threads", "processes"):
        ds = (jdata.from_array_record(paths).map(len, num_parallel_calls=2).batch(10)
              .with_options(jdata.Options(engine=engine)))
        assert np.concatenate(take_list(ds)).tolist() == [len(r) for r in expected]


def test_grouped_files_and_blocks_that_span_files(tmp_path):
    paths = [_write(str(tmp_path / f"g{f}.array_record"), _records(f, 300), "group_size:64")
             for f in range(2)]
    expected = _records(0, 300) + _records(1, 300)
    assert take_list(jdata.from_array_record(paths).batch(256).unbatch()) == expected


def test_a_corrupt_file_names_the_record_and_ignore_errors_skips_it(tmp_path):
    path = _write(str(tmp_path / "bad.array_record"), [b"%06d" % i * 50 for i in range(20)],
                  "group_size:1,uncompressed")
    data = bytearray(open(path, "rb").read())
    chunk = data.find(b"000005000005")
    assert chunk > 0
    data[chunk:chunk + 24] = b"\xff" * 24  # inside record 5's (uncompressed) chunk
    with open(path, "wb") as f:
        f.write(bytes(data))
    ds = jdata.from_array_record(path)
    got, errors = read_through_data_errors(ds)
    assert got[:5] == [b"%06d" % i * 50 for i in range(5)]
    assert errors and errors[0] == (path, 5)
    kept = take_list(ds.ignore_errors())
    assert kept == got


def test_truncated_and_missing_files_fail_when_built(tmp_path):
    path = _write(str(tmp_path / "cut.array_record"), [b"x" * 100] * 10)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.array_record is not a readable ArrayRecord"):
        jdata.from_array_record(path)
    with pytest.raises(FileNotFoundError, match="missing.array_record"):
        jdata.from_array_record(str(tmp_path / "missing.array_record"))


def test_memory_filesystem_url(tmp_path):
    local = _write(str(tmp_path / "m.array_record"), _records(3, 12))
    fsspec.filesystem("memory").pipe("/jdata-ar/m.array_record", open(local, "rb").read())
    assert take_list(jdata.from_array_record("memory://jdata-ar/m.array_record")) == \
        _records(3, 12)


def test_maps_over_records_read_in_blocks_fail_and_restore_per_element(shards):
    paths, expected = shards

    def size(record):
        if record.startswith(b"0-7-"):
            raise ValueError("bad record 7")
        return len(record)

    ds = jdata.from_array_record(paths).map(size)
    with pytest.raises(jdata.UDFError) as raised:
        take_list(ds)
    assert (raised.value.op, raised.value.position) == ("map", 7)
    kept = [len(r) for r in expected if not r.startswith(b"0-7-")]
    assert [int(x) for x in check_restore_at_every_step(ds.ignore_errors())] == kept
    parallel = ds.map(lambda x: x, num_parallel_calls=2).ignore_errors()
    assert [int(x) for x in take_list(parallel)] == kept


def _shards(directory, files: int, records: int) -> tuple[list, list]:
    paths = [_write(str(directory / f"s{f:04d}.array_record"),
                    [b"%d-%d" % (f, i) for i in range(records)]) for f in range(files)]
    return paths, [b"%d-%d" % (f, i) for f in range(files) for i in range(records)]


def read_many_shards_under_a_low_descriptor_limit(directory: str) -> dict:
    import pathlib
    import resource

    paths, expected = _shards(pathlib.Path(directory), 1100, 2)
    ds = jdata.from_array_record(paths)
    shuffled = ds.shuffle(jax.random.key(0))  # the key made (and JAX loaded) before the limit
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    in_order = take_list(ds.ignore_errors())
    shuffled = take_list(shuffled.ignore_errors())
    return {"in_order": in_order == expected, "shuffled": sorted(shuffled) == sorted(expected),
            "records": [len(in_order), len(shuffled), len(expected)]}


def test_1100_shards_under_a_limit_of_1024_descriptors_lose_nothing(tmp_path):
    # A process of its own: it lowers its descriptor limit (and jdata before this fix
    # exhausted it, failing whatever ran next).
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import json, sys; from tests.io.test_array_record import "
            "read_many_shards_under_a_low_descriptor_limit as read; "
            "print(json.dumps(read(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=240, cwd=repo, env={**os.environ, "PYTHONPATH": repo})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"in_order": True, "shuffled": True, "records": [2200, 2200, 2200]}


def _counting_opens(monkeypatch) -> list:
    from jdata.io import array_record

    opened = []
    real = array_record.open_reader
    monkeypatch.setattr(array_record, "open_reader",
                        lambda path: opened.append(path) or real(path))
    return opened


@pytest.mark.parametrize("threads", [None, 2])
def test_open_files_are_bounded_shared_by_threads_and_closed_with_the_iterator(tmp_path,
                                                                               threads):
    paths, expected = _shards(tmp_path, 200, 2)
    ds = (jdata.from_array_record(paths).shuffle(jax.random.key(1))
          .map(lambda r: r, num_parallel_calls=threads).filter(lambda r: True))
    it = ds.iterator()
    got, most_open = [], 0
    for record in it:
        got.append(record)
        most_open = max(most_open, open_files_under(tmp_path))
    assert sorted(got) == sorted(expected) and got != expected
    # At most 128 files (jdata.io._open_files), one set for every reader (thread) of the
    # source; a file evicted while another thread reads it is closed when that read ends.
    assert 0 < most_open <= 128 + (threads or 1) - 1
    it.close()
    assert open_files_under(tmp_path) == 0


@pytest.mark.parametrize("threads", [None, 2])
def test_a_full_shuffle_over_64_files_opens_each_file_once(tmp_path, monkeypatch, threads):
    paths, expected = _shards(tmp_path, 64, 10)
    ds = jdata.from_array_record(paths).shuffle(jax.random.key(2)).map(
        lambda r: r, num_parallel_calls=threads)
    opened = _counting_opens(monkeypatch)  # after the build, which counts each file's records
    with ds.iterator() as it:
        assert sorted(it) == sorted(expected)
    assert sorted(opened) == paths  # not once per record, nor once per thread
