"""The storage benchmark's file and jdata's reading of it."""

from array_record.python import array_record_data_source

import pytest

from benchmarks import storage

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_jdata_reads_every_record_of_the_benchmark_file():
    path = storage.prepare(scale=0.02)
    n = storage.items(path)
    assert n == 400
    records = list(storage.jdata_pipeline(path))
    source = array_record_data_source.ArrayRecordDataSource([path])
    assert records == [source[i] for i in range(n)]
    assert all(200 <= len(r) <= 2048 for r in records)


def test_jdatas_shuffled_shard_pipeline_reads_every_record_once_in_another_order():
    # (grain's, its peer, needs grain, which `make bench` installs, not the tests.)
    paths = storage.prepare_shards(scale=0.2)  # 62 records in each of 64 shards
    source = array_record_data_source.ArrayRecordDataSource(paths)
    in_order = [source[i] for i in range(len(source))]
    assert len(in_order) == 64 * 62
    shuffled = list(storage.shuffled_shard_pipelines(paths)["jdata"]())
    assert shuffled != in_order and sorted(shuffled) == sorted(in_order)
