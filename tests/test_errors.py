"""Errors: UDF failures name the op and position; bad arguments fail at build time."""

import pickle

import jax
import numpy as np
import pytest

import jdata


def _fails_on_three(x):
    if x == 3:
        raise ZeroDivisionError("boom")
    return x


def test_udf_errors_name_the_op_and_position_and_chain_the_cause():
    it = jdata.range(5).map(_fails_on_three).iterator()
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(jdata.UDFError) as info:
        next(it)
    assert info.value.op == "map" and info.value.position == 3
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert "map" in str(info.value) and "position 3" in str(info.value)
    assert int(next(it)) == 4  # the failing element was consumed, iteration goes on


def test_stop_iteration_inside_a_udf_is_an_error_not_the_end():
    def stops(x):
        raise StopIteration
    with pytest.raises(jdata.UDFError):
        list(jdata.range(2).map(stops))


@pytest.mark.parametrize("build, error, words", [
    (lambda: jdata.range(3).map(5), TypeError, ["map", "fn=5", "not callable"]),
    (lambda: jdata.range(3).filter(None), TypeError, ["filter", "predicate"]),
    (lambda: jdata.range(3).batch(0), ValueError, ["batch_size=0", ">= 1"]),
    (lambda: jdata.range(3).shard(2, 2), ValueError, ["index=2", "num_shards=2"]),
    (lambda: jdata.range(3).interleave(lambda x: x, cycle_length=0), ValueError,
     ["cycle_length=0"]),
    (lambda: jdata.range(3).take(-2), ValueError, ["count=-2"]),
    # tf.data's buffer size in the key's place: not the key=jax.random.key(7) hint.
    (lambda: jdata.range(3).shuffle(7), TypeError,
     ["jax.random.key(seed), buffer_size=7", "full shuffle"]),
    (lambda: jdata.range(3).filter(lambda x: True).shuffle(jdata.range(1)), TypeError, ["key"]),
    (lambda: jdata.range(3).window(0), ValueError, ["size=0"]),
    (lambda: jdata.range(3).prefetch(-5), ValueError, ["buffer_size=-5"]),
    (lambda: jdata.range(0, 3, 0), ValueError, ["step=0"]),
    (lambda: jdata.range(3).with_options({"autotune": False}), TypeError, ["Options"]),
    (lambda: jdata.Options(cpu_budget=0), ValueError, ["cpu_budget=0"]),
])
def test_bad_arguments_fail_at_build_time_with_a_fix(build, error, words):
    with pytest.raises(error) as info:
        build()
    for word in words:
        assert word in str(info.value)


def test_full_shuffle_of_a_sequential_input_asks_for_a_buffer():
    import jax
    with pytest.raises(ValueError, match="buffer_size"):
        jdata.range(5).filter(lambda x: True).shuffle(jax.random.key(0))


def test_deterministic_without_parallelism_warns():
    with pytest.warns(UserWarning, match="no effect"):
        jdata.range(3).map(lambda x: x, deterministic=False)


@pytest.mark.parametrize("build, words", [
    (lambda: jdata.range(3).concatenate(jdata.from_tensor_slices(["a"])),
     ["concatenate", "dtype=object", "dtype=int64"]),
    (lambda: jdata.choose_from_datasets(
        [jdata.range(2), jdata.from_tensor_slices(np.zeros(2, np.float32))], jdata.range(2)),
     ["choose_from_datasets", "datasets[1]", "float32"]),
    (lambda: jdata.sample_from_datasets(
        [jdata.range(2), jdata.zip((jdata.range(2), jdata.range(2)))], key=jax.random.key(0)),
     ["sample_from_datasets", "structure"]),
])
def test_incompatible_inputs_fail_at_build_time_like_tf_data(build, words):
    with pytest.raises(TypeError) as info:
        build()
    for word in words:
        assert word in str(info.value)


def test_compatible_inputs_of_different_sizes_combine():
    ds = jdata.from_tensor_slices(np.zeros((2, 3))).concatenate(
        jdata.from_tensor_slices(np.ones((1, 5))))
    assert [x.shape for x in ds] == [(3,), (3,), (5,)]


class _Blip:
    """A source whose element 3 fails once with a transient network error."""

    def __init__(self):
        self.failed = False

    def __len__(self):
        return 8

    def __getitem__(self, index):
        if index == 3 and not self.failed:
            self.failed = True
            raise ConnectionError("the storage service did not answer")
        return np.int64(index)


def test_an_environment_error_consumes_nothing_so_a_retry_reads_the_element():
    # An OSError is the environment's fault, not the element's (unlike a UDFError or
    # a DataError, which ignore_errors() skips): nothing may be lost to it.
    it = jdata.from_source(_Blip()).iterator()
    got = [int(next(it)) for _ in range(3)]
    with pytest.raises(ConnectionError):
        next(it)
    got += [int(x) for x in it]
    assert got == list(range(8))


def test_a_parallel_pipeline_stops_at_an_environment_error_until_restored():
    ds = jdata.from_source(_Blip()).map(lambda x: x * 10, num_parallel_calls=2)
    it = ds.iterator()
    got = [int(next(it)) for _ in range(3)]
    for _ in range(2):  # it stays stopped: the elements after it are not handed out
        with pytest.raises(ConnectionError):
            next(it)
    got += [int(x) for x in ds.iterator(it.get_state())]
    assert got == [10 * i for i in range(8)]


# Every error a jdata user catches, and what it is a kind of (docs/service.md, "Operations:
# errors"; jdata/errors.py).
_PUBLIC_ERRORS = {
    "UDFError": Exception, "DataError": "UDFError", "ElementError": "UDFError",
    "ServiceError": RuntimeError, "ServiceNotFoundError": "ServiceError",
    "ServiceConnectionError": "ServiceError", "ServiceStartError": "ServiceError",
    "ServiceVersionError": "ServiceError", "ServiceStoppedError": "ServiceError",
    "ServiceUnavailableError": "ServiceError", "WorkDirInUseError": "ServiceError",
    "WorkerError": RuntimeError, "SharedMemoryError": "WorkerError",
    "UnpicklableJobError": TypeError, "JournalError": ValueError,
    "IteratorClosedError": ValueError,
}


@pytest.mark.parametrize("name", sorted(_PUBLIC_ERRORS))
def test_every_public_error_comes_from_jdata_and_jdata_errors_alike(name):
    import jdata.errors

    assert name in jdata.errors.__all__
    assert getattr(jdata, name) is getattr(jdata.errors, name)
    parent = _PUBLIC_ERRORS[name]
    parent = getattr(jdata.errors, parent) if isinstance(parent, str) else parent
    assert issubclass(getattr(jdata, name), parent)


def test_jdata_exports_every_name_of_jdata_errors():
    import jdata.errors

    assert set(_PUBLIC_ERRORS) <= set(jdata.errors.__all__)
    for name in jdata.errors.__all__:
        assert getattr(jdata, name) is getattr(jdata.errors, name), name


def test_the_errors_are_the_ones_their_modules_raise():
    from jdata.runtime import outcomes, segments
    from jdata.service import journal

    assert jdata.JournalError is journal.JournalError
    assert jdata.WorkerError is outcomes.WorkerError
    assert jdata.UnpicklableJobError is outcomes.UnpicklableJobError
    assert jdata.SharedMemoryError is segments.SharedMemoryError
    # What the service raised before these types: old `except` clauses still catch them.
    assert issubclass(jdata.ServiceNotFoundError, RuntimeError)
    assert issubclass(jdata.ServiceConnectionError, ConnectionError)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchError'"):
        jdata.errors.NoSuchError  # noqa: B018


def test_import_jdata_loads_neither_ray_nor_the_service_nor_sqlite():
    import subprocess
    import sys

    code = ("import sys, jdata, jdata.errors; print(sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('ray', 'sqlite3') or m.startswith('jdata.service')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def _write_in_place(x):
    x[0] = 1
    return x


@pytest.mark.parametrize("parallel", [None, 2])
def test_an_in_place_write_to_a_shared_array_says_to_copy_it(parallel):
    ds = jdata.from_tensor_slices(np.zeros((3, 2))).map(_write_in_place,
                                                        num_parallel_calls=parallel)
    with pytest.raises(jdata.UDFError) as info:
        list(ds)
    message = str(info.value)
    assert message.startswith("map: the user function raised ValueError")
    assert "assignment destination is read-only. jdata hands out arrays read-only" in message
    assert "x = x.copy() (or np.array(x))" in message
    assert str(pickle.loads(pickle.dumps(info.value))) == message
    ok = jdata.from_tensor_slices(np.zeros((3, 2))).map(lambda x: _write_in_place(x.copy()))
    assert [e.tolist() for e in ok] == [[1, 0]] * 3


def test_other_value_errors_get_no_copy_hint():
    with pytest.raises(jdata.UDFError) as info:
        list(jdata.range(2).map(lambda x: int("a")))
    assert "read-only" not in str(info.value)
