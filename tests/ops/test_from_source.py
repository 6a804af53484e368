import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import (UDF_PATHS, add_one_in_place, assert_read_only_write,
                           assert_same_sequence, check_restore_at_every_step, map_on, pop_x)


class Squares:
    """A random-access source like a grain data source."""

    def __init__(self, n):
        self.n = n
        self.reads = []

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        self.reads.append(index)
        return {"i": np.int64(index), "sq": np.array([index * index], np.int32)}


def test_list_source():
    out = check_restore_at_every_step(jdata.from_source(["a", "b", "c"]))
    assert out == ["a", "b", "c"]


def test_numpy_array_source():
    data = np.arange(10.0).reshape(5, 2)
    out = check_restore_at_every_step(jdata.from_source(data))
    assert_same_sequence(out, list(data))


def test_custom_source():
    out = check_restore_at_every_step(jdata.from_source(Squares(6)))
    assert [(int(e["i"]), e["sq"].tolist()) for e in out] == [(i, [i * i]) for i in range(6)]


def test_restore_reads_only_the_remaining_indices():
    source = Squares(8)
    ds = jdata.from_source(source)
    it = ds.iterator()
    next(it), next(it), next(it)
    source.reads.clear()
    rest = list(ds.iterator(it.get_state()))
    assert len(rest) == 5 and source.reads == [3, 4, 5, 6, 7]


def test_element_spec_cardinality_and_random_access():
    ds = jdata.from_source(Squares(4))
    assert ds.element_spec == {"i": TensorSpec((), np.int64), "sq": TensorSpec((1,), np.int32)}
    assert ds.cardinality() == 4 and len(ds) == 4
    assert ds._node.random_access()
    assert jdata.from_source([]).cardinality() == 0
    assert list(jdata.from_source([])) == []


def test_element_spec_of_an_empty_source_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        jdata.from_source([]).element_spec


def test_plan_names_the_source_type():
    assert "Squares" in jdata.from_source(Squares(3)).explain()


@pytest.mark.parametrize("source, missing", [
    (iter([1, 2]), "__len__"), (5, "__len__"), ({1, 2}, "__getitem__"), (None, "__len__"),
])
def test_sources_without_random_access_are_type_errors(source, missing):
    with pytest.raises(TypeError, match=f"from_source: .*has no {missing}.*from_generator"):
        jdata.from_source(source)


def test_source_errors_propagate():
    class Broken(Squares):
        def __getitem__(self, index):
            if index == 2:
                raise KeyError("record 2 is corrupt")
            return super().__getitem__(index)

    it = jdata.from_source(Broken(4)).iterator()
    next(it), next(it)
    with pytest.raises(KeyError, match="corrupt"):
        next(it)
    assert int(next(it)["i"]) == 3


def records():
    return [{"x": np.array([i, i]), "y": np.int64(i)} for i in range(4)]


@pytest.mark.parametrize("path", UDF_PATHS)
def test_a_udf_that_pops_from_its_element_leaves_the_source_intact(path):
    # repeat(3) reads the source again within the pass (in the same worker process too).
    ds = map_on(jdata.from_source(records()).repeat(3), pop_x, path)
    expected = [[i, i] for i in range(4)] * 3
    assert [x.tolist() for x in ds] == expected
    assert [x.tolist() for x in ds] == expected  # the next iterator: the next epoch


@pytest.mark.parametrize("path", UDF_PATHS)
def test_an_in_place_write_raises_and_leaves_the_source_intact(path):
    source = records()
    assert_read_only_write(map_on(jdata.from_source(source),
                                  lambda d: add_one_in_place(d["x"]), path))
    assert [d["x"].tolist() for d in source] == [[i, i] for i in range(4)]
    assert source[0]["x"].flags.writeable  # read-only views: the user's arrays stay writable


def test_the_consumer_owns_its_elements():
    source = records()
    for element in jdata.from_source(source):
        element.clear()
    assert [sorted(e) for e in jdata.from_source(source)] == [["x", "y"]] * 4
