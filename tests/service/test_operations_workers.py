"""Operations: the code a pipeline runs on the service's workers and in worker processes.

A UDF of a module only the trainer has (cloudpickle sends it by name: the workers
import it again) fails on the workers with a ``WorkerImportError`` that names the
module and the remedies, and runs once Ray's ``runtime_env`` ships the module. A UDF
whose closure holds the ``Service`` cannot go into worker processes (they run no Ray):
AUTOTUNE keeps it on threads, ``engine="processes"`` refuses it with the reason.
Every service here is started by its test on 127.0.0.1 and stopped by it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import sys
import textwrap

import pytest

import jdata
from jdata import _placement
from jdata.runtime import engine
from jdata.runtime.outcomes import WorkerError
from jdata.service import _ray
from tests.runtime.process_helpers import PROCESSES, pool_of

# Ray starts its processes with fork+exec while JAX's threads run: JAX warns, harmlessly.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]

_MODULE = "jdata_test_trainer_only_udfs"
_SOURCE = textwrap.dedent("""
    def triple(x):
        return x * 3
""")


@pytest.fixture
def trainer_only(tmp_path):
    """A module the trainer imports from a file outside ``sys.path``: cloudpickle sends its
    functions by name, and no other process finds it by that name."""
    path = tmp_path / f"{_MODULE}.py"
    path.write_text(_SOURCE)
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    spec.loader.exec_module(module)
    try:
        yield module, path
    finally:
        sys.modules.pop(_MODULE, None)


@contextlib.contextmanager
def _service(**kw):
    from jdata import service

    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    svc = service.start(num_workers=1, worker_cpus=0.5, split_elements=7, num_cpus=2, **kw)
    try:
        yield svc
    finally:
        svc.stop()
    assert not ray.is_initialized()


def _read(ds) -> list[int]:
    with ds.iterator() as it:
        return [int(x) for x in it]


def _first_error(ds) -> BaseException:
    """What building ``ds``'s iterator or its first ``next()`` raised."""
    with pytest.raises(Exception) as info, ds.iterator() as it:
        next(it)
    return info.value


# ------------------------------------------------------------------ item 7: imports


def test_a_udf_the_workers_cannot_import_says_so_in_every_mode(trainer_only):
    """It was a ``ModuleNotFoundError`` (shared, coordinated) or an ``ElementError`` per
    split, "the worker cannot read the rest of its split" (dynamic, static, off), with no
    word of the workers or of a remedy."""
    module, _ = trainer_only
    above = jdata.range(20).map(module.triple)
    with _service() as svc:
        pipelines = {
            "dynamic": above.distribute(svc),
            "off": above.distribute(svc, processing_mode="off"),
            "shared": above.repeat().distribute(svc, job_name="imports-shared", sharing=True),
            "coordinated": above.repeat().distribute(svc, job_name="imports-rounds",
                                                     num_consumers=1, consumer_index=0),
        }
        errors = {mode: _first_error(ds) for mode, ds in pipelines.items()}
    assert {type(e).__name__ for e in errors.values()} == {"WorkerImportError"}, errors
    for mode, error in errors.items():
        assert isinstance(error, jdata.errors.WorkerImportError), (mode, repr(error))
        assert isinstance(error, jdata.errors.ServiceError)
        assert error.module == _MODULE, mode
        message = str(error)
        for words in ("workers cannot import", _MODULE, "runtime_env", "py_modules",
                      "working_dir", f"cloudpickle.register_pickle_by_value({_MODULE})"):
            assert words in message, (mode, words, message)


def test_runtime_env_py_modules_ships_the_module_to_the_workers(trainer_only):
    """``service.start(runtime_env=...)`` reaches ``ray.init``: the job's workers get the
    module, so the same pipeline runs (the remedy the error names)."""
    module, path = trainer_only
    with _service(runtime_env={"py_modules": [str(path)]}) as svc:
        out = _read(jdata.range(20).map(module.triple).distribute(svc))
    assert out == [3 * x for x in range(20)]


def test_worker_processes_that_cannot_import_a_udfs_module_say_so(trainer_only):
    """The process engine's workers start from the trainer's ``sys.path`` as it was when
    the first one started: the error was a bare traceback of ``ModuleNotFoundError``."""
    module, _ = trainer_only
    ds = jdata.range(8).map(module.triple, num_parallel_calls=2).with_options(PROCESSES)
    error = _first_error(ds)
    assert isinstance(error, WorkerError), repr(error)
    message = str(error)
    for words in (f"cannot import {_MODULE!r}", "sys.path",
                  f"cloudpickle.register_pickle_by_value({_MODULE})", "engine='threads'"):
        assert words in message, (words, message)


# ------------------------------------------------------------------ item 8: the Service


@dataclasses.dataclass
class _Holder:
    """Any object holding the service (a trainer's config, a logger)."""

    svc: object


def _plus_workers(holder, x):
    return x + len(holder.svc.status().workers)


def _udfs(svc) -> dict:
    return {"closure": lambda x: x + len(svc.status().workers),
            "holder": functools.partial(_plus_workers, _Holder(svc))}


def test_a_udf_holding_the_service_is_refused_by_worker_processes_with_the_reason():
    """It pickled (the dispatcher's Ray handle pickles where Ray runs), then every worker
    process failed to start: ``WorkerError ... Ray has not been started yet``."""
    with _service() as svc:
        errors = {name: _first_error(jdata.range(8).map(udf, num_parallel_calls=2)
                                     .with_options(PROCESSES))
                  for name, udf in _udfs(svc).items()}
    for name, error in errors.items():
        assert isinstance(error, TypeError), (name, repr(error))
        message = str(error)
        for words in ("jdata.service.Service", "cannot travel into pipeline worker processes",
                      "outside the UDF", "engine='threads'"):
            assert words in message, (name, words, message)


def test_autotune_keeps_a_udf_holding_the_service_on_threads(monkeypatch):
    """AUTOTUNE moved it to processes (here: decided so by an earlier iterator of the same
    code, as after a measurement) and the pipeline crashed mid-stream."""
    monkeypatch.setattr(engine, "_DECISIONS", {})  # this test's decisions stay its own
    with _service() as svc:
        workers = len(svc.status().workers)
        for name, udf in _udfs(svc).items():
            ds = jdata.range(40).map(udf, num_parallel_calls=jdata.AUTOTUNE)
            engine.remember(_placement.engine_key(ds._node)(), ("processes", "measured"))
            with ds.iterator() as it:
                out = [int(x) for x in it]
                assert pool_of(it).engine == "threads", name
                assert "jdata.service.Service" in pool_of(it).engine_reason, name
            assert out == [x + workers for x in range(40)], name
