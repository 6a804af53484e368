"""The dispatcher's autocache bookkeeping without Ray: profile in epoch 1, then put, then
get; forced modes; a complete cache read by any job; failures."""

import numpy as np
import pytest

from jdata.service import _autocache_plans, autocache

ALLOWED = {"compute": None, "marker": None, "output": None}
KEYS = {"marker": "m" * 16, "output": "o" * 16}
# Computing below the marker is dear, reading the output back too: "marker" wins.
PROFILE = dict(compute_sec=0.010, below_sec=0.009, marker_bytes=100.0, output_bytes=100.0,
               read_marker_sec=0.0001, read_output_sec=0.005, elements=64)


class _Profiler:
    """Stands in for the worker that measures: the profile is in once ``ready``."""

    def __init__(self, fields=PROFILE):
        self.started, self.ready, self.fields = [], False, fields

    def start(self, job_fp, plan_ref):
        self.started.append(job_fp)
        return len(self.started)

    def poll(self, handle):
        if isinstance(self.fields, Exception):
            raise self.fields
        return dict(self.fields) if self.ready else None


def _plans(tmp_path, profiler):
    return _autocache_plans.Plans(str(tmp_path), profiler.start, profiler.poll)


def _complete(store, key, n=5):
    autocache.write_part(str(store), key, 0, [np.int64(i) for i in range(n)])
    autocache.write_manifest(str(store), key, 1)


def test_epoch_one_profiles_then_the_decision_is_put_then_read(tmp_path):
    profiler = _Profiler()
    plans = _plans(tmp_path, profiler)

    def answer(epoch):
        return plans.answer("job", KEYS, ALLOWED, None, ["plan"], epoch)

    first = answer(0)
    assert first["action"] == "compute" and "profiles" in first["reason"]
    assert answer(1)["action"] == "compute" and profiler.started == ["job"]  # once
    profiler.ready = True
    put = answer(2)
    assert (put["action"], put["point"]) == ("put", "marker")
    assert answer(2) == put  # the clients of one epoch agree
    _complete(tmp_path, KEYS["marker"])
    assert answer(3)["action"] == "get" and answer(3)["point"] == "marker"
    status, = plans.status()
    assert status["mode"] == "marker" and status["profile"]["elements"] == 64
    assert set(status["estimates"]) == {"compute", "marker", "output"}
    assert not any(k.startswith("_") for k in status)


def test_a_complete_cache_is_read_from_the_first_epoch_by_any_job(tmp_path):
    _complete(tmp_path, KEYS["marker"])
    profiler = _Profiler()
    answer = _plans(tmp_path, profiler).answer("another", KEYS, ALLOWED, None, [], 0)
    assert (answer["action"], answer["point"]) == ("get", "marker")
    assert profiler.started == []  # nothing to profile
    # A forced "compute" ignores caches; a forced "output" waits for its own cache.
    plans = _plans(tmp_path, profiler)
    assert plans.answer("forced", KEYS, ALLOWED, "compute", [], 0)["action"] == "compute"
    assert plans.answer("out", KEYS, ALLOWED, "output", [], 0)["action"] == "put"


def test_no_point_allowed_computes_without_profiling_and_says_why(tmp_path):
    profiler = _Profiler()
    allowed = {"compute": None, "marker": "shuffle below the marker draws anew each epoch",
               "output": "shuffle below the marker draws anew each epoch"}
    answer = _plans(tmp_path, profiler).answer("job", {}, allowed, None, [], 0)
    assert answer["action"] == "compute" and "shuffle below the marker" in answer["reason"]
    assert profiler.started == []
    with pytest.raises(ValueError, match="cannot be followed"):
        _plans(tmp_path, profiler).answer("job", {}, allowed, "marker", [], 0)


def test_a_failed_profile_or_put_leaves_the_pipeline_computing(tmp_path):
    profiler = _Profiler(fields=RuntimeError("worker died"))
    plans = _plans(tmp_path, profiler)
    plans.answer("job", KEYS, ALLOWED, None, [], 0)
    answer = plans.answer("job", KEYS, ALLOWED, None, [], 1)
    assert answer["action"] == "compute" and "profiling failed" in answer["reason"]
    # A forced put that fails: this epoch's other clients and later epochs compute.
    plans = _plans(tmp_path, _Profiler())
    assert plans.answer("f", KEYS, ALLOWED, "marker", [], 0)["action"] == "put"
    plans.failed("f", "writing the cache of the marker failed (UDFError: bad)")
    for epoch in (0, 1):
        answer = plans.answer("f", KEYS, ALLOWED, "marker", [], epoch)
        assert answer["action"] == "compute" and "bad" in answer["reason"]
    plans.written("f", "marker", {"elements": 3})
    assert plans.status()[0]["written"] == {"point": "marker", "elements": 3}


def test_no_worker_to_profile_on_tries_again_next_epoch(tmp_path):
    calls = []

    def start(job_fp, plan_ref):
        calls.append(job_fp)
        if len(calls) == 1:
            raise RuntimeError("no worker to profile on")
        return 1

    plans = _autocache_plans.Plans(str(tmp_path), start, lambda handle: None)
    assert "cannot profile yet" in plans.answer("j", KEYS, ALLOWED, None, [], 0)["reason"]
    assert "profiles" in plans.answer("j", KEYS, ALLOWED, None, [], 1)["reason"]
    assert calls == ["j", "j"]
