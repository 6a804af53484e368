"""autocache: the identity locally, random access kept, state through it, one marker per
pipeline, and an optimizer that moves nothing across it."""

from __future__ import annotations

import numpy as np
import pytest

import jdata
from jdata import optimize
from jdata._fingerprint import fingerprint
from jdata.ops.autocache import AutocacheNode
from jdata.service import _split_point
from tests.helpers import assert_same_sequence, check_restore_at_every_step, take_list, plan_ops

IMAGES = np.random.default_rng(0).integers(0, 256, size=(10, 8, 8, 3), dtype=np.uint8)


@pytest.mark.parametrize("mode", [None, "compute", "marker", "output"])
def test_elements_pass_through_unchanged(mode):
    ds = jdata.range(6).map(lambda x: {"x": x, "sq": x * x}).autocache(mode)
    expected = take_list(jdata.range(6).map(lambda x: {"x": x, "sq": x * x}))
    assert_same_sequence(check_restore_at_every_step(ds), expected)


def test_random_access_is_kept():
    ds = jdata.range(10).map(lambda x: x + 1).autocache()
    assert ds._node.random_access()
    assert ds.map(lambda x: x * 2).batch(3)._node.random_access()
    # Over a sequential input it stays sequential, and still passes elements through.
    sequential = jdata.range(10).filter(lambda x: x % 2 == 0).autocache()
    assert not sequential._node.random_access()
    assert [int(x) for x in check_restore_at_every_step(sequential)] == [0, 2, 4, 6, 8]


def test_restore_at_every_step_with_ops_on_both_sides():
    ds = (jdata.from_tensor_slices(IMAGES).map(lambda x: x.astype(np.float32))
          .autocache().map(lambda x: x.mean()).batch(3))
    unmarked = (jdata.from_tensor_slices(IMAGES).map(lambda x: x.astype(np.float32))
                .map(lambda x: x.mean()).batch(3))
    assert_same_sequence(check_restore_at_every_step(ds), take_list(unmarked))


def test_element_spec_and_cardinality_are_the_inputs():
    base = jdata.range(10).batch(4)
    assert base.autocache().element_spec == base.element_spec
    assert base.autocache().cardinality() == 3
    assert jdata.range(3).repeat().autocache().cardinality() == jdata.INFINITE
    assert jdata.range(3).filter(bool).autocache().cardinality() == jdata.UNKNOWN


@pytest.mark.parametrize("mode", ["cache", "", "Marker", 1, True])
def test_bad_mode_names_the_value_and_the_choices(mode):
    with pytest.raises(ValueError, match=r"autocache: mode=.* 'compute', 'marker', 'output'"):
        jdata.range(3).autocache(mode)


def test_a_second_marker_is_refused_where_it_is_added():
    marked = jdata.range(5).autocache()
    with pytest.raises(ValueError, match="has a marker already"):
        marked.autocache()
    with pytest.raises(ValueError, match="has a marker already"):
        marked.map(lambda x: x + 1).batch(2).autocache("output")


def test_plans_print_the_marker_and_fingerprints_include_it():
    prefix = jdata.range(5).map(abs)
    assert str(prefix.autocache()._node) == "Autocache(mode=chosen by the service)"
    assert str(prefix.autocache("marker")._node) == "Autocache(mode='marker')"
    marked, forced = prefix.autocache(), prefix.autocache("output")
    assert isinstance(forced._node, AutocacheNode) and forced._node.mode == "output"
    assert len({prefix.fingerprint(), marked.fingerprint(), forced.fingerprint()}) == 3
    # The marker's input is the prefix the service would cache.
    assert fingerprint(marked._node.input) == prefix.fingerprint()
    assert marked.fingerprint() == jdata.range(5).map(abs).autocache().fingerprint()


def test_the_optimizer_fuses_on_each_side_but_never_across():
    ds = (jdata.range(12).map(lambda x: x + 1).map(lambda x: x * 3).autocache()
          .map(lambda x: x - 2).map(lambda x: x // 2))
    result = optimize.optimize(ds._node, ds.options)
    assert plan_ops(result.plan) == ["map", "autocache", "map", "range"]
    assert [f.rule for f in result.fired] == ["map_fusion"]
    unmarked = (jdata.range(12).map(lambda x: x + 1).map(lambda x: x * 3)
                .map(lambda x: x - 2).map(lambda x: x // 2))
    assert_same_sequence(take_list(ds), take_list(unmarked))


def test_no_reordering_or_pushdown_crosses_the_marker():
    to_float = jdata.declare(lambda x: x.astype(np.float32) / 255, pointwise=True)
    crop = jdata.declare(lambda x: x[2:6, 2:6], selection=True)
    ds = jdata.from_tensor_slices(IMAGES).map(to_float).autocache().map(crop)
    assert plan_ops(optimize.optimize(ds._node, ds.options).plan) == ["map", "autocache", "map",
                                                                   "from_tensor_slices"]
    reads_x = jdata.declare(lambda e: e["x"] % 2 == 0, reads=["x"])
    writes_y = jdata.declare(lambda e: {"x": e["x"], "y": e["x"] * 2}, writes=["y"])
    filtered = jdata.range(8).map(lambda x: {"x": x}).map(writes_y).autocache().filter(reads_x)
    plan = optimize.optimize(filtered._node, filtered.options).plan
    assert plan_ops(plan)[:2] == ["filter", "autocache"]
    # take over a map of a sequential input would sink below the map: not below the marker.
    taken = jdata.range(20).filter(lambda x: x > 2).map(lambda x: x * 2).autocache().take(3)
    assert plan_ops(optimize.optimize(taken._node, taken.options).plan)[:3] == [
        "take", "autocache", "map"]
    for marked in (ds, filtered, taken):
        assert_same_sequence(take_list(marked),
                             take_list(marked.with_options(jdata.Options(optimize=False))))


def test_explain_shows_the_marker_between_its_maps():
    ds = jdata.range(4).map(abs).autocache().map(abs)
    lines = ds.explain().splitlines()
    assert [line.strip().split("(")[0] for line in lines[1:5]] == [
        "Map", "Autocache", "Map", "Range"]
    assert lines[0] == "Plan (optimizer rules fired: none)"


def test_a_marker_above_a_split_point_keeps_positions(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(6)))
    ds = jdata.from_text_lines(str(path)).autocache().map(lambda x: x.upper())
    point = _split_point.find(ds._node)
    assert point.kind == "files" and point.exact
    assert [op.op_name for op in point.chain] == ["map", "autocache"]
