"""Autocache's pieces without Ray: cache points, the decision, the profile, the store."""

from __future__ import annotations

import json
import os
import time
import uuid

import fsspec
import jax
import numpy as np
import pytest

import jdata
from jdata._fingerprint import fingerprint
from jdata.service import autocache
from tests.helpers import assert_same_sequence, take_list

KEY, KEY2 = jax.random.key(0), jax.random.key(1)
ALL = {"compute": None, "marker": None, "output": None}


def _keep(x, key):
    return x


# ------------------------------------------------------------------ cache points

def _points(ds: jdata.Dataset) -> dict:
    return autocache.cache_points(ds._node)


@pytest.mark.parametrize("random_op, name", [
    (lambda ds: ds.shuffle(KEY), "shuffle"), (lambda ds: ds.random_map(_keep, KEY), "random_map")])
def test_a_random_op_below_the_marker_allows_no_cache(random_op, name):
    points = _points(random_op(jdata.range(10).map(abs)).autocache().map(abs))
    assert points["marker"] == (f"{name} below the marker draws anew each epoch; caching the "
                                "marker's elements would freeze it")
    assert points["output"] == (f"{name} below the marker draws anew each epoch; caching the "
                                "output would freeze it")
    assert autocache.allowed_modes(points) == {"compute": None, **points}


@pytest.mark.parametrize("random_op, name", [
    (lambda ds: ds.shuffle(KEY), "shuffle"), (lambda ds: ds.random_map(_keep, KEY), "random_map")])
def test_a_random_op_above_the_marker_allows_the_marker_only(random_op, name):
    prefix = jdata.range(10).map(abs)
    ds = random_op(prefix.autocache()).map(abs)
    points = _points(ds)
    assert points["marker"] is ds._node.input.input.input  # the marker's input
    assert fingerprint(points["marker"]) == prefix.fingerprint()  # the prefix's fingerprint
    assert points["output"] == (f"{name} above the marker draws anew each epoch; caching the "
                                "output would freeze it")
    assert autocache.allowed_modes(points) == {"compute": None, "marker": None,
                                               "output": points["output"]}


def test_deterministic_pipelines_allow_both_caches():
    ds = jdata.range(10).shuffle(KEY, reshuffle_each_iteration=False).autocache().batch(3)
    points = _points(ds)
    assert points == {"marker": ds._node.input.input, "output": ds._node}
    assert autocache.allowed_modes(points) == ALL


def test_an_endless_point_cannot_be_cached():
    below = _points(jdata.range(3).repeat().autocache().map(abs))
    assert below["marker"] == ("repeat below the marker never ends, and caching the marker's "
                               "elements needs an epoch that ends")
    assert below["output"].startswith("repeat below the marker never ends")
    above = _points(jdata.range(3).autocache().repeat())
    assert above["marker"].op_name == "range"
    assert above["output"] == ("repeat above the marker never ends, and caching the output "
                               "needs an epoch that ends")
    assert autocache.allowed_modes(_points(jdata.range(3).autocache().repeat(2))) == ALL


def test_markers_found_or_refused():
    plain = jdata.range(4).map(abs)
    assert autocache.find_marker(plain._node) is None
    assert _points(plain) == {"marker": "the pipeline has no autocache() marker",
                              "output": plain._node}
    marked = plain.autocache("marker").batch(2)
    assert autocache.find_marker(marked._node) is marked._node.input
    combined = jdata.range(2).autocache().concatenate(jdata.range(3).autocache())
    with pytest.raises(ValueError, match="2 autocache\\(\\) markers"):
        autocache.find_marker(combined._node)


# ------------------------------------------------------------------ decide

def _profile(**kw) -> autocache.Profile:
    fields = {"compute_sec": 0.0, "below_sec": 0.0, "marker_bytes": 100.0,
              "output_bytes": 100.0, "read_marker_sec": 0.0, "read_output_sec": 0.0,
              "elements": 1000, **kw}
    return autocache.Profile(**fields)


US = 1e-6


@pytest.mark.parametrize("regime, times, mode", [
    # a cheap pipeline whose elements read back slower than they compute (its source is local)
    ("cheap compute", dict(compute_sec=10 * US, below_sec=8 * US, read_marker_sec=50 * US,
                           read_output_sec=60 * US), "compute"),
    # an expensive decode below the marker, output elements larger (slower to read back)
    ("expensive below", dict(compute_sec=1000 * US, below_sec=990 * US,
                             read_marker_sec=20 * US, read_output_sec=60 * US), "marker"),
    # cheap below the marker, expensive above: only the output cache saves the work
    ("expensive above", dict(compute_sec=1000 * US, below_sec=20 * US,
                             read_marker_sec=10 * US, read_output_sec=15 * US), "output"),
    # the ops above grow the elements: reading the output back costs more than redoing them
    ("size increasing above", dict(compute_sec=600 * US, below_sec=500 * US,
                                   read_marker_sec=20 * US, read_output_sec=800 * US), "marker"),
])
def test_decide_picks_the_fastest_mode(regime, times, mode):
    decision = autocache.decide(_profile(**times), ALL)
    assert decision.mode == mode, regime
    assert decision.estimates == pytest.approx({
        "compute": times["compute_sec"],
        "marker": times["read_marker_sec"] + max(0, times["compute_sec"] - times["below_sec"]),
        "output": times["read_output_sec"]})
    assert decision.reason.startswith(f"{mode}: ")
    assert " us" in decision.reason or " ms" in decision.reason


def test_ties_go_to_the_mode_that_stores_less():
    near_compute = _profile(compute_sec=104 * US, below_sec=100 * US, read_marker_sec=99 * US,
                            read_output_sec=100 * US)
    decision = autocache.decide(near_compute, ALL)
    assert decision.mode == "compute"
    assert "within 5% storing less wins" in decision.reason
    near_marker = _profile(compute_sec=1000 * US, below_sec=990 * US, read_marker_sec=20 * US,
                           read_output_sec=29 * US)  # marker 30 us, output 29 us
    assert autocache.decide(near_marker, ALL).mode == "marker"
    clear = _profile(compute_sec=1000 * US, below_sec=990 * US, read_marker_sec=20 * US,
                     read_output_sec=25 * US)
    assert autocache.decide(clear, ALL).mode == "output"


def test_modes_not_allowed_are_never_chosen_and_say_why():
    fast_caches = _profile(compute_sec=1000 * US, below_sec=990 * US, read_marker_sec=5 * US,
                           read_output_sec=1 * US)
    allowed = {"compute": None, "marker": None, "output": "shuffle above the marker ..."}
    decision = autocache.decide(fast_caches, allowed)
    assert decision.mode == "marker" and set(decision.estimates) == {"compute", "marker"}
    assert "not possible: output: shuffle above the marker" in decision.reason
    neither = {"compute": None, "marker": "why not", "output": "why not"}
    assert autocache.decide(fast_caches, neither).mode == "compute"
    # Computing stores nothing, so it is always possible.
    assert autocache.decide(fast_caches, {**neither, "compute": "ignored"}).mode == "compute"


def test_a_forced_mode_wins_if_allowed():
    slow_caches = _profile(compute_sec=1 * US, read_marker_sec=100 * US, read_output_sec=1)
    decision = autocache.decide(slow_caches, ALL, forced="output")
    assert decision.mode == "output" and decision.reason == "forced by autocache(mode='output')"
    assert set(decision.estimates) == set(ALL)
    assert autocache.decide(None, ALL, forced="marker").estimates == {}
    refused = {"compute": None, "marker": None, "output": "repeat above the marker never ends"}
    with pytest.raises(ValueError, match="autocache\\(mode='output'\\) cannot be followed: "
                                         "repeat above the marker never ends"):
        autocache.decide(slow_caches, refused, forced="output")
    with pytest.raises(ValueError, match="mode='cached' is not one of"):
        autocache.decide(slow_caches, ALL, forced="cached")
    with pytest.raises(ValueError, match="needs a profile"):
        autocache.decide(None, ALL)


def test_marker_elements_per_output_element_scale_the_marker_estimate():
    batched = _profile(compute_sec=320 * US, below_sec=9 * US, read_marker_sec=1 * US,
                       read_output_sec=1000 * US, marker_per_output=32)
    assert autocache.decide(batched, ALL).estimates["marker"] == pytest.approx(
        32 * 1 * US + (320 - 32 * 9) * US)
    with pytest.raises(ValueError, match="Profile: below_sec=-1"):
        _profile(below_sec=-1)


# ------------------------------------------------------------------ profile

SLEEP_SEC = 0.004


def _slow(x):
    if x == 3:
        raise RuntimeError("a bad element")
    time.sleep(SLEEP_SEC)
    return {"x": x, "pixels": np.full(16, x, np.uint8)}


def _grow(e):
    return np.repeat(e["pixels"].astype(np.float32), 8)


def test_profile_measures_each_point_and_leaves_no_probe(tmp_path):
    ds = jdata.range(400).map(_slow).autocache().map(_grow)
    began = time.perf_counter()
    p = autocache.profile(ds._node, ds.options, str(tmp_path))
    assert time.perf_counter() - began < 4
    assert SLEEP_SEC <= p.below_sec < 3 * SLEEP_SEC
    assert p.compute_sec >= 0.95 * p.below_sec
    assert p.errors == 2  # element 3, once at each point: skipped, counted
    assert 16 <= p.elements < 400 and p.marker_per_output == 1
    assert p.output_bytes > 4 * p.marker_bytes > 0  # float32 x 8 copies vs uint8 and an int
    assert 0 < p.read_marker_sec < p.below_sec and 0 < p.read_output_sec < p.compute_sec
    assert os.listdir(tmp_path) == []
    # A cache pays for a UDF of milliseconds (either one: the map above is cheap).
    assert autocache.decide(p, autocache.allowed_modes(_points(ds))).mode != "compute"


def test_profile_of_a_cheap_pipeline_is_quick_and_counts_batches(tmp_path):
    ds = jdata.range(100_000).map(lambda x: x * 2).autocache().batch(32)
    began = time.perf_counter()
    p = autocache.profile(ds._node, ds.options, str(tmp_path))
    assert time.perf_counter() - began < 4
    assert p.marker_per_output == pytest.approx(100_000 / 3125)
    assert p.errors == 0 and p.elements > 1000
    with pytest.raises(ValueError, match="needs a plan with an autocache"):
        autocache.profile(jdata.range(3)._node, ds.options, str(tmp_path))


def test_profile_probes_a_url_store_and_removes_its_probe():
    store = f"memory://jdata-autocache-{uuid.uuid4().hex}"
    ds = jdata.range(50).map(lambda x: {"x": x}).autocache().map(lambda e: e["x"] + 1)
    p = autocache.profile(ds._node, ds.options, store)
    assert p.elements == 50 and p.read_marker_sec > 0 and p.read_output_sec > 0
    assert fsspec.filesystem("memory").find(store.removeprefix("memory://")) == []  # no file


# ------------------------------------------------------------------ the store

FP = "0123abcd" * 8
PARTS = [
    [{"x": np.array([i, -i], np.int64), "h": np.float16(i / 4), "s": f"e{i}".encode()}
     for i in range(lo, hi)]
    for lo, hi in ((0, 5), (5, 6), (6, 13))]


def _write_all(store: str, parts=PARTS) -> dict:
    for index, elements in enumerate(parts):
        summary = autocache.write_part(store, FP, index, iter(elements))
        assert summary["records"] == len(elements) and summary["published"]
    return autocache.write_manifest(store, FP, len(parts))


def _check_round_trip(store: str) -> None:
    assert autocache.read_manifest(store, FP) is None
    written = _write_all(store)
    manifest = autocache.read_manifest(store, FP)
    assert manifest == written
    assert manifest["parts"] == 3 and manifest["elements"] == 13 and manifest["bytes"] > 0
    node = autocache.load_node(store, FP, manifest)
    assert node.random_access() and node.cardinality() == 13
    ds = jdata.Dataset(node)
    assert_same_sequence(take_list(ds), [e for part in PARTS for e in part])
    assert_same_sequence(take_list(ds.skip(7).take(2)), PARTS[2][1:3])  # position i, record i


def test_store_round_trip_on_a_local_directory(tmp_path):
    _check_round_trip(str(tmp_path / "store"))
    again = autocache.write_part(str(tmp_path / "store"), FP, 1, [PARTS[0][0]])
    assert not again["published"]  # the first writer won; its part is kept
    manifest = autocache.read_manifest(str(tmp_path / "store"), FP)
    assert jdata.Dataset(autocache.load_node(str(tmp_path / "store"), FP,
                                             manifest)).cardinality() == 13


def test_store_round_trip_on_an_fsspec_url():
    store = f"memory://jdata-autocache-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    try:
        _check_round_trip(store)
        assert not autocache.write_part(store, FP, 0, [PARTS[0][0]])["published"]
    finally:
        fs.rm(store.removeprefix("memory://"), recursive=True)


def test_a_missing_part_is_named(tmp_path):
    store = str(tmp_path)
    autocache.write_part(store, FP, 0, PARTS[0])
    autocache.write_part(store, FP, 2, PARTS[2])
    with pytest.raises(ValueError, match=f"part 1 of cache {FP} is missing"):
        autocache.write_manifest(store, FP, 3)
    assert autocache.read_manifest(store, FP) is None
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="parts="):
            autocache.write_manifest(store, FP, bad)
    with pytest.raises(ValueError, match="is not a directory name"):
        autocache.write_part(store, "../elsewhere", 0, PARTS[0])


@pytest.mark.parametrize("change, message", [
    (lambda m: {**m, "parts": -1}, "'parts' is -1, not a count"),
    (lambda m: {**m, "parts": True}, "'parts' is True, not a count"),
    (lambda m: {**m, "elements": "13"}, "'elements' is 13, not a count"),
    (lambda m: {**m, "fingerprint": "f" * 64}, "is not the cache's"),
    (lambda m: {**m, "format": "other/1"}, "not jdata's autocache format"),
    (lambda m: {**m, "structure": {"dict": 5}}, "'structure'"),
    (lambda m: [m], "not jdata's autocache format"),
])
def test_a_crafted_manifest_is_refused_with_its_path(tmp_path, change, message):
    store = str(tmp_path)
    manifest = _write_all(store)
    path = os.path.join(store, FP, "manifest.json")
    with open(path, "w") as f:
        json.dump(change(manifest), f)
    with pytest.raises(ValueError, match=message) as error:
        autocache.read_manifest(store, FP)
    assert path in str(error.value)
    with pytest.raises(ValueError, match=message):
        autocache.load_node(store, FP, change(manifest))


def test_a_manifest_that_is_not_json_is_refused(tmp_path):
    _write_all(str(tmp_path))
    with open(os.path.join(tmp_path, FP, "manifest.json"), "w") as f:
        f.write('{"format": ')
    with pytest.raises(ValueError, match="manifest.json: not an autocache manifest"):
        autocache.read_manifest(str(tmp_path), FP)


def _edit_part_metadata(store: str, index: int, edit) -> str:
    path = os.path.join(store, FP, f"part-{index:05d}", "jdata_metadata.json")
    with open(path) as f:
        metadata = json.load(f)
    edit(metadata)
    with open(path, "w") as f:
        json.dump(metadata, f)
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["shards"][0].update(file="../../outside/data"), "not a file of the directory"),
    (lambda m: m["shards"][0].update(file="sub/data-00000.array_record"),
     "not a file of the directory"),
    (lambda m: m["shards"][0].update(records=99), "'cardinality' is 7, but its shards hold 99"),
    (lambda m: m.update(fingerprint="f" * 64), "holds the elements of"),
])
def test_crafted_part_metadata_is_refused(tmp_path, edit, message):
    store = str(tmp_path)
    manifest = _write_all(store)
    _edit_part_metadata(store, 2, edit)
    with pytest.raises(ValueError, match=message):
        autocache.load_node(store, FP, manifest)
    with pytest.raises(ValueError, match=message):
        autocache.write_manifest(store, FP, 3)


def test_a_truncated_part_is_refused(tmp_path):
    store = str(tmp_path)
    manifest = _write_all(store)
    shard = os.path.join(store, FP, "part-00002", "data-00000.array_record")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    with pytest.raises(ValueError, match="part-00002"):
        autocache.load_node(store, FP, manifest)


def test_a_part_count_that_disagrees_with_the_manifest_is_refused(tmp_path):
    store = str(tmp_path)
    manifest = _write_all(store)
    with pytest.raises(ValueError, match="counts 14 elements, its parts hold 13"):
        autocache.load_node(store, FP, {**manifest, "elements": 14})
    with pytest.raises(ValueError, match="part 3 of cache .* is missing"):
        autocache.load_node(store, FP, {**manifest, "parts": 4})


def test_an_empty_part_keeps_the_others_in_order(tmp_path):
    store = str(tmp_path)
    parts = [PARTS[0][:2], [], PARTS[2][:1]]
    manifest = _write_all(store, parts)
    assert manifest["elements"] == 3 and manifest["structure"] is not None
    ds = jdata.Dataset(autocache.load_node(store, FP, manifest))
    assert_same_sequence(take_list(ds), parts[0] + parts[2])


def test_parts_of_other_structures_do_not_make_one_cache(tmp_path):
    store = str(tmp_path)
    autocache.write_part(store, FP, 0, PARTS[0])
    autocache.write_part(store, FP, 1, [np.arange(3)])
    with pytest.raises(ValueError, match="part 1 of cache .* has elements of structure None"):
        autocache.write_manifest(store, FP, 2)
