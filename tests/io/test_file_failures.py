"""Files that cannot be read at all: deleted after the dataset was built, no permission, too
many open files. Every file source raises the ``OSError`` (naming the path), never a
``DataError`` that ``ignore_errors()`` would skip until nothing is left."""

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

import jdata
from tests.helpers import take_list

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _array_record(path, records):
    writer = ArrayRecordWriter(path, "group_size:1")
    for record in records:
        writer.write(record)
    writer.close()
    return path


def sources(directory: str) -> dict:
    """``{source: (dataset, a file of it to break)}``; the directory directories (load,
    cache, snapshot) are written here and read back by the datasets."""
    join = lambda name: os.path.join(directory, name)  # noqa: E731
    ar = _array_record(join("a.array_record"), [b"%d" % i for i in range(5)])
    tf = join("a.tfrecord")
    jdata.io.write_tfrecord(tf, [b"%d" % i for i in range(5)])
    with open(join("a.txt"), "w") as f:
        f.write("0\n1\n2\n")
    pq.write_table(pa.table({"x": np.arange(5)}), join("a.parquet"))
    jdata.range(5).save(join("saved"))
    cached = jdata.range(5).map(lambda x: x + 1).cache(join("cache"))
    snapshot = jdata.range(5).map(lambda x: x + 2).snapshot(join("snap"))
    take_list(cached), take_list(snapshot)  # written: later passes read the directories
    [snap_dir] = os.listdir(join("snap"))
    shard = "data-00000.array_record"
    return {
        "array_record": (jdata.from_array_record(ar), ar),
        "tfrecord": (jdata.from_tfrecord(tf), tf),
        "text_lines": (jdata.from_text_lines(join("a.txt")), join("a.txt")),
        "parquet": (jdata.from_parquet(join("a.parquet")), join("a.parquet")),
        "load": (jdata.load(join("saved")), os.path.join(join("saved"), shard)),
        "cache": (cached, os.path.join(join("cache"), shard)),
        "snapshot": (snapshot, os.path.join(join("snap"), snap_dir, shard)),
    }


SOURCES = ("array_record", "tfrecord", "text_lines", "parquet", "load", "cache", "snapshot")


@pytest.mark.parametrize("source", SOURCES)
def test_a_file_deleted_after_the_dataset_was_built_raises_file_not_found(tmp_path, source):
    ds, path = sources(str(tmp_path))[source]
    assert len(take_list(ds)) > 0
    os.remove(path)
    with pytest.raises(FileNotFoundError, match=os.path.basename(path)):
        take_list(ds.ignore_errors())


def _lowest_free_fd() -> int:
    fd = os.dup(0)
    os.close(fd)
    return fd


def failures_in_this_process(directory: str) -> dict:
    """What each source raises, through ``ignore_errors()``, when its file has no read
    permission and when no file can be opened (the descriptor limit reached)."""
    out = {}
    for name, (ds, path) in sources(directory).items():
        take_list(ds)  # everything imported, caches written: only the file reads fail below
        os.chmod(path, 0)
        out[name] = {"path": path, "no_permission": _raised(ds)}
        os.chmod(path, 0o644)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (_lowest_free_fd(), hard))
        try:
            out[name]["too_many_open_files"] = _raised(ds)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return out


def _raised(ds) -> list:
    try:
        return ["nothing raised", len(take_list(ds.ignore_errors()))]
    except Exception as e:
        return [type(e).__name__, getattr(e, "errno", None), str(e)]


@pytest.fixture(scope="module")
def failures(tmp_path_factory):
    # In a process of its own: it lowers its descriptor limit, and root gives up its
    # right to read any file (so that permissions apply to it too).
    directory = str(tmp_path_factory.mktemp("failures"))
    code = ("import json, sys; from tests.io.test_file_failures import failures_in_this_process;"
            " print(json.dumps(failures_in_this_process(sys.argv[1])))")
    command = [sys.executable, "-c", code, directory]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=_REPO,
                          env={**os.environ, "PYTHONPATH": _REPO})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("source", SOURCES)
def test_no_permission_raises_permission_error(failures, source):
    kind, errno, message = failures[source]["no_permission"]
    assert (kind, errno) == ("PermissionError", 13), message
    assert failures[source]["path"] in message


@pytest.mark.parametrize("source", SOURCES)
def test_too_many_open_files_raises_os_error(failures, source):
    kind, errno, message = failures[source]["too_many_open_files"]
    assert (kind, errno) == ("OSError", 24), message
    # The file, or for a cache the directory's metadata, read first.
    assert "Too many open files" in message
    assert os.path.dirname(failures[source]["path"]) in message
