"""from_tfrecord and from_text_lines: real files, checksums, corruption, exact restore."""

import gzip
import os
import struct

import fsspec
import hypothesis
import jax
import pytest
from hypothesis import strategies as st

import jdata
from jdata.io import records
from tests.helpers import check_restore_at_every_step, read_through_data_errors, take_list

# Written by TensorFlow 2 (tf.io.TFRecordWriter): b"", b"a", b"hello world"; and, GZIP,
# b"x" * 40, b"yz".
TF_WRITTEN = bytes.fromhex(
    "000000000000000029039807d8ea82a201000000000000000175de4161786ee4280b000000000000"
    "008615f50468656c6c6f20776f726c64007ed86d")
TF_WRITTEN_GZIP = bytes.fromhex(
    "1f8b0800000000000003d3608080ff05625e154482e4e997de3041f555a8739b54561d5cf0683500"
    "5376cb1c4a000000")


def _write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_reads_files_written_by_tensorflow(tmp_path):
    plain = _write(tmp_path / "a.tfrecord", TF_WRITTEN)
    assert take_list(jdata.from_tfrecord(plain)) == [b"", b"a", b"hello world"]
    zipped = _write(tmp_path / "b.tfrecord.gz", TF_WRITTEN_GZIP)
    assert take_list(jdata.from_tfrecord(zipped, "GZIP")) == [b"x" * 40, b"yz"]


def test_writes_what_tensorflow_writes(tmp_path):
    path = str(tmp_path / "mine.tfrecord")
    assert jdata.io.write_tfrecord(path, [b"", b"a", b"hello world"]) == 3
    assert open(path, "rb").read() == TF_WRITTEN


def _files(tmp_path, sizes=(5, 0, 7)):
    paths = []
    for f, n in enumerate(sizes):
        path = str(tmp_path / f"part-{f}.tfrecord")
        jdata.io.write_tfrecord(path, [f"{f}:{i}".encode() * (i + 1) for i in range(n)])
        paths.append(path)
    return paths


def test_several_files_in_order_with_exact_restore_at_every_step(tmp_path):
    paths = _files(tmp_path)
    expected = [f"{f}:{i}".encode() * (i + 1) for f, n in enumerate((5, 0, 7)) for i in range(n)]
    ds = jdata.from_tfrecord(paths)
    check_restore_at_every_step(ds, expected)
    glob = jdata.from_tfrecord(str(tmp_path / "part-*.tfrecord"))
    assert take_list(glob) == expected
    gz = str(tmp_path / "all.tfrecord.gz")
    with gzip.open(gz, "wb") as f:
        f.write(b"".join(open(p, "rb").read() for p in paths))
    check_restore_at_every_step(jdata.from_tfrecord(gz, compression_type="gzip"), expected)


def test_a_corrupt_record_names_the_file_and_ignore_errors_skips_only_it(tmp_path):
    (path,) = _files(tmp_path, (6,))
    data = bytearray(open(path, "rb").read())
    data[12 + 3 + 16 * 0] ^= 0xFF  # a byte of record 0's data: its data checksum fails
    _write(path, bytes(data))
    with pytest.raises(jdata.DataError) as raised:
        take_list(jdata.from_tfrecord(path))
    error = raised.value
    assert (error.path, error.record, error.position) == (path, 0, 0)
    assert path in str(error) and "checksum" in str(error) and "byte 0" in str(error)
    it = jdata.from_tfrecord(path).ignore_errors().iterator()
    assert [r for r in it] == [b"0:%d" % i * (i + 1) for i in range(1, 6)]
    assert it.stats().dropped == [
        {"stage": "ignore_errors", "udf_errors": 0, "unreadable_records": 1, "unread_bytes": 0}]
    assert "1 unreadable records" in str(it.stats())


def test_a_truncated_file_raises_once_then_the_next_file_is_read(tmp_path):
    first, second = _files(tmp_path, (4, 3))
    data = open(first, "rb").read()
    _write(first, data[:-5])  # the last record loses its tail
    ds = jdata.from_tfrecord([first, second])
    got, errors = read_through_data_errors(ds)
    assert errors == [(first, 3)]
    assert got == [b"0:0", b"0:1" * 2, b"0:2" * 3, b"1:0", b"1:1" * 2, b"1:2" * 3]
    assert take_list(ds.ignore_errors()) == got
    check_restore_at_every_step(ds.ignore_errors(), got)


def test_missing_files_and_bad_arguments_fail_when_built(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file at .*nope.tfrecord"):
        jdata.from_tfrecord(str(tmp_path / "nope.tfrecord"))
    with pytest.raises(FileNotFoundError, match="no file matches"):
        jdata.from_text_lines(str(tmp_path / "*.txt"))
    with pytest.raises(ValueError, match="compression_type='ZLIB'"):
        jdata.from_tfrecord(_files(tmp_path, (1,))[0], compression_type="ZLIB")
    with pytest.raises(TypeError, match="must be a str"):
        jdata.from_text_lines([3])


def test_text_lines_drop_line_endings_and_resume_exactly(tmp_path):
    a = _write(tmp_path / "a.txt", b"one\r\ntwo\n\nthree")
    b = _write(tmp_path / "b.txt", b"")
    c = _write(tmp_path / "c.txt", "vier\nf\u00fcnf\n".encode())
    expected = [b"one", b"two", b"", b"three", b"vier", "f\u00fcnf".encode()]
    check_restore_at_every_step(jdata.from_text_lines([a, b, c]), expected)


def test_gzip_text_lines_across_members_empty_files_and_chunks(tmp_path, monkeypatch):
    from jdata.io import _streams

    monkeypatch.setattr(_streams, "_CHUNK_BYTES", 7)  # lines and records cross chunk ends
    members = _write(tmp_path / "m.txt.gz", gzip.compress(b"one\r\ntwo\n") +
                     gzip.compress(b"") + gzip.compress(b"three\nlast, no newline"))
    empty = _write(tmp_path / "e.txt.gz", b"")
    expected = [b"one", b"two", b"three", b"last, no newline"]
    check_restore_at_every_step(jdata.from_text_lines([members, empty], "GZIP"), expected)
    paths = _files(tmp_path, (9,))
    _write(paths[0], gzip.compress(open(paths[0], "rb").read()))
    ds = jdata.from_tfrecord(paths, "GZIP").shard(2, 1)
    check_restore_at_every_step(ds, [b"0:%d" % i * (i + 1) for i in range(1, 9, 2)])


def test_memory_filesystem_urls(tmp_path):
    fs = fsspec.filesystem("memory")
    fs.pipe("/jdata-test/x.txt", b"alpha\nbeta\n")
    fs.pipe("/jdata-test/y.tfrecord", TF_WRITTEN)
    assert take_list(jdata.from_text_lines("memory://jdata-test/x.txt")) == [b"alpha", b"beta"]
    assert take_list(jdata.from_tfrecord("memory://jdata-test/*.tfrecord"))[2] == b"hello world"
    with pytest.raises(FileNotFoundError, match="memory://jdata-test/z.txt"):
        jdata.from_text_lines("memory://jdata-test/z.txt")


def test_list_files_then_interleave_reads_files_in_parallel_exactly(tmp_path):
    paths = _files(tmp_path, (6, 3, 5, 4))
    files = jdata.list_files(str(tmp_path / "*.tfrecord"))
    assert [os.path.basename(str(p)) for p in files] == [os.path.basename(p) for p in paths]
    ds = files.interleave(jdata.from_tfrecord, cycle_length=2, num_parallel_calls=2)
    records_read = take_list(ds)
    assert sorted(records_read) == sorted(r for p in paths for r in take_list(
        jdata.from_tfrecord(p)))
    check_restore_at_every_step(ds, records_read)
    shuffled = jdata.list_files(str(tmp_path / "*.tfrecord"), key=jax.random.key(0))
    epochs = take_list(shuffled.repeat(2))
    assert sorted(epochs[:4]) == sorted(epochs[4:]) == sorted(str(p) for p in paths)


def test_masked_crc_matches_the_tfrecord_format():
    # The masked CRC-32C of the 8-byte length 0, from the first TensorFlow record above.
    assert records.masked_crc(b"\0" * 8) == int.from_bytes(TF_WRITTEN[8:12], "little")


def test_a_shard_is_pushed_into_the_source_which_never_reads_other_shards_data(tmp_path):
    paths = _files(tmp_path, (7, 5))
    expected = take_list(jdata.from_tfrecord(paths))
    for i in range(3):
        ds = jdata.from_tfrecord(paths).map(lambda r: r + b"!").shard(3, i)
        assert f"TFRecord(files=2), read as shard {i} of 3" in ds.explain()
        assert check_restore_at_every_step(ds) == [r + b"!" for r in expected[i::3]]

    def bytes_read(ds) -> int:
        total = [0]
        real_open = jdata.io._paths.open_binary

        class Counting:
            def __init__(self, f):
                self._f = f

            def read(self, n=-1):
                data = self._f.read(n)
                total[0] += len(data)
                return data

            def __getattr__(self, name):
                return getattr(self._f, name)

        jdata.io._paths.open_binary = lambda path: Counting(real_open(path))
        try:
            take_list(ds)
        finally:
            jdata.io._paths.open_binary = real_open
        return total[0]

    big = str(tmp_path / "big.tfrecord")
    jdata.io.write_tfrecord(big, [bytes(1000)] * 30)
    pushed = bytes_read(jdata.from_tfrecord(big).shard(3, 0))
    unpushed = bytes_read(jdata.from_tfrecord(big).shard(3, 0).with_options(
        jdata.Options(optimize=False)))
    assert unpushed >= 30 * 1000 and pushed < 11 * 1016 + 20 * 12  # others: headers only
    lines = _write(tmp_path / "l.txt", b"".join(b"line%d\n" % i for i in range(10)))
    text = jdata.from_text_lines(lines).shard(4, 3)
    assert "TextLines(files=1), read as shard 3 of 4" in text.explain()
    assert check_restore_at_every_step(text) == [b"line3", b"line7"]


def test_a_pushed_shard_counts_a_lost_file_as_the_unpushed_plan_does(tmp_path):
    first, second = _files(tmp_path, (5, 6))
    data = bytearray(open(first, "rb").read())
    data[19 + 9] ^= 0xFF  # record 1's length checksum: the rest of the first file is lost
    _write(first, bytes(data))
    for i in range(2):
        ds = jdata.from_tfrecord([first, second]).shard(2, i)
        off = ds.with_options(jdata.Options(optimize=False))
        assert read_through_data_errors(ds) == read_through_data_errors(off)


def _damaged(tmp_path, damage, n=25, name="d.tfrecord"):
    """A file of ``n`` records of 10 bytes (26 bytes each in the file) after ``damage(data)``."""
    path = str(tmp_path / name)
    jdata.io.write_tfrecord(path, [b"record-%03d" % i for i in range(n)])
    _write(path, damage(bytearray(open(path, "rb").read())))
    return path


def _corrupt_length(data, record=6):
    data[26 * record] ^= 0xFF  # its length no longer matches the length's checksum
    return bytes(data)


@pytest.mark.parametrize("damage", ["truncated", "corrupt_length"])
@pytest.mark.parametrize("optimize", [True, False])
def test_every_shard_hears_of_a_damaged_file_that_loses_its_records(tmp_path, damage,
                                                                    optimize):
    # The damage is at record 6 (of shard 2 of 4): the records after it are lost to every
    # shard, pushed down into the reader or not, so every shard raises it, once.
    cut = {"truncated": lambda data: bytes(data[:26 * 6 + 20]),
           "corrupt_length": _corrupt_length}[damage]
    path = _damaged(tmp_path, cut)
    whole = [b"record-%03d" % i for i in range(6)]
    for i in range(4):
        ds = jdata.from_tfrecord(path).shard(4, i).with_options(
            jdata.Options(optimize=optimize))
        got, errors = read_through_data_errors(ds)
        assert got == whole[i::4] and errors == [(path, 6)], f"shard {i}"
        with pytest.raises(jdata.DataError, match="records are lost") as raised:
            take_list(ds)
        assert raised.value.unread_bytes == os.path.getsize(path) - 26 * 6
        check_restore_at_every_step(ds.ignore_errors(), whole[i::4])


def test_stats_count_the_bytes_a_corrupt_length_loses(tmp_path):
    path = _damaged(tmp_path, _corrupt_length)
    other = _files(tmp_path, (2,))[0]
    it = jdata.from_tfrecord([path, other]).ignore_errors().iterator()
    assert list(it) == [b"record-%03d" % i for i in range(6)] + [b"0:0", b"0:1" * 2]
    lost = os.path.getsize(path) - 26 * 6
    assert it.stats().dropped == [{"stage": "ignore_errors", "udf_errors": 0,
                                   "unreadable_records": 1, "unread_bytes": lost}]
    assert f"{lost:,} bytes of files skipped unread" in str(it.stats())


def _gzip_damaged(tmp_path, damage):
    plain = _damaged(tmp_path, bytes, n=400, name="plain.tfrecord")
    zipped = bytearray(gzip.compress(open(plain, "rb").read()))
    return _write(tmp_path / "d.tfrecord.gz", damage(zipped))


@pytest.mark.parametrize("damage, recovered, unread", [
    # Cut in half: the records before the cut are read, then the file ends (nothing unread).
    (lambda z: bytes(z[:len(z) // 2]), range(100, 400), lambda size: 0),
    # A bit flip in the only compressed block: nothing of it can be delivered.
    (lambda z: bytes(z[:40] + bytes([z[40] ^ 0x10]) + z[41:]), [0], lambda size: size),
], ids=["truncated", "bit_flip"])
def test_damaged_gzip_data_is_a_data_error_and_skipping_moves_on(tmp_path, damage, recovered,
                                                                 unread):
    path = _gzip_damaged(tmp_path, damage)
    other = _files(tmp_path, (3,))[0]
    _write(other, gzip.compress(open(other, "rb").read()))
    ds = jdata.from_tfrecord([path, other], "GZIP")
    got, errors = read_through_data_errors(ds)
    assert errors == [(path, len(got) - 3)] and len(got) - 3 in recovered
    assert got == [b"record-%03d" % i for i in range(len(got) - 3)] + [b"0:0", b"0:1" * 2,
                                                                      b"0:2" * 3]
    with pytest.raises(jdata.DataError, match=r"compressed data is .* \(at byte \d+\)") as raised:
        take_list(ds)
    assert raised.value.unread_bytes == unread(os.path.getsize(path))
    assert take_list(ds.ignore_errors()) == got
    check_restore_at_every_step(ds.ignore_errors(), got)


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_a_crafted_length_with_a_valid_checksum_is_bounded_by_the_data(tmp_path, compression):
    header = struct.pack("<Q", 1 << 50)  # 1 PiB, checksummed as a writer would
    crafted = header + struct.pack("<I", records.masked_crc(header)) + b"tiny"
    path = _write(tmp_path / "crafted", gzip.compress(crafted) if compression else crafted)
    with pytest.raises(jdata.DataError, match="ends inside a record of 1125899906842624 bytes"):
        take_list(jdata.from_tfrecord(path, compression))
    assert take_list(jdata.from_tfrecord(path, compression).ignore_errors()) == []


def test_a_data_error_that_loses_the_rest_of_a_file_pickles_whole(tmp_path):
    import pickle

    path = _damaged(tmp_path, _corrupt_length)
    with pytest.raises(jdata.DataError) as raised:
        take_list(jdata.from_tfrecord(path))
    copy = pickle.loads(pickle.dumps(raised.value))  # as it leaves a worker process
    assert (copy.path, copy.record, copy.position, copy.unread_bytes) == (
        path, 6, 6, os.path.getsize(path) - 26 * 6)
    assert str(copy) == str(raised.value) and isinstance(copy.__cause__, ValueError)


@hypothesis.settings(max_examples=60, deadline=None)
# A member ending inside a block of input, after a call stopped by the output limit.
@hypothesis.example(members=[b"hello world" * 100, b"x"], padding=0, chunk=100, steps=[])
@hypothesis.given(
    members=st.lists(st.binary(max_size=300).map(lambda b: b * 7 + b"\n" + b[:5]), max_size=3),
    padding=st.sampled_from([0, 4]), chunk=st.sampled_from([1, 7, 100, 1 << 20]),
    steps=st.lists(st.tuples(st.sampled_from(["read", "readline", "skip"]),
                             st.integers(0, 900)), max_size=30))
def test_gzip_streams_give_the_data_of_every_member(members, padding, chunk, steps):
    import io

    from jdata.io import _streams

    data = b"".join(members)
    blob = b"".join(gzip.compress(m) for m in members) + b"\0" * padding  # gzip's padding
    real_chunk, _streams._CHUNK_BYTES = _streams._CHUNK_BYTES, chunk
    try:
        stream, at = _streams.GzipStream(io.BytesIO(blob), len(blob)), 0
        for kind, n in steps:
            if kind == "skip":
                assert stream.skip(n) == (at + n <= len(data))
                at = min(at + n, len(data))
                continue
            got = stream.read(n) if kind == "read" else stream.readline()
            end = min(at + n, len(data)) if kind == "read" else (
                data.find(b"\n", at) + 1 or len(data))
            assert got == data[at:end] and stream.pos == end
            at = end
        assert stream.read(len(data) + 1) == data[at:]  # up to the end, and no further
    finally:
        _streams._CHUNK_BYTES = real_chunk
