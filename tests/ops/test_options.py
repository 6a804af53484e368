import dataclasses

import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step


def test_defaults():
    options = jdata.Options()
    assert (options.deterministic, options.optimize, options.autotune) == (True, True, True)
    assert options.cpu_budget is None and options.ram_budget is None
    assert jdata.range(3).options == jdata.Options()


def test_options_are_frozen_and_keyword_only():
    with pytest.raises(dataclasses.FrozenInstanceError):
        jdata.Options().deterministic = False
    with pytest.raises(TypeError):
        jdata.Options(False)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"deterministic": 1}, TypeError, "Options.deterministic=1"),
    ({"optimize": None}, TypeError, "Options.optimize=None"),
    ({"autotune": "yes"}, TypeError, "Options.autotune='yes'"),
    ({"cpu_budget": 0}, ValueError, "Options.cpu_budget=0"),
    ({"cpu_budget": 2.5}, ValueError, "Options.cpu_budget=2.5"),
    ({"cpu_budget": True}, ValueError, "Options.cpu_budget=True"),
    ({"ram_budget": -1}, ValueError, "Options.ram_budget=-1"),
])
def test_validation(kwargs, error, message):
    with pytest.raises(error, match=message):
        jdata.Options(**kwargs)


def test_with_options_sets_the_pipelines_options():
    ds = jdata.range(3).with_options(jdata.Options(autotune=False, cpu_budget=4))
    assert ds.options == jdata.Options(autotune=False, cpu_budget=4)


def test_outer_options_override_inner_ones():
    inner = jdata.Options(deterministic=False, cpu_budget=2)
    outer = jdata.Options(cpu_budget=8, ram_budget=2**30)
    ds = jdata.range(3).with_options(inner).map(lambda x: x).with_options(outer)
    assert ds.options == jdata.Options(deterministic=False, cpu_budget=8, ram_budget=2**30)


def test_options_set_on_any_branch_are_merged():
    a = jdata.range(2).with_options(jdata.Options(autotune=False))
    b = jdata.range(2).with_options(jdata.Options(optimize=False))
    assert a.concatenate(b).options == jdata.Options(autotune=False, optimize=False)


def test_outer_explicit_default_values_override_inner_ones():
    # tf.data's rule: an explicitly set field wins even when it equals the default.
    inner = jdata.Options(deterministic=False, autotune=False)
    ds = jdata.range(3).with_options(inner).with_options(jdata.Options(deterministic=True))
    assert ds.options.deterministic is True and ds.options.autotune is False


def test_options_pickle_with_what_was_set():
    import cloudpickle
    clone = cloudpickle.loads(cloudpickle.dumps(jdata.Options(deterministic=True)))
    assert jdata.Options(deterministic=False).merge(clone).deterministic is True


def test_options_merge_keeps_unset_fields():
    merged = jdata.Options(deterministic=False).merge(jdata.Options(cpu_budget=3))
    assert merged == jdata.Options(deterministic=False, cpu_budget=3)


def test_with_options_changes_no_element():
    base = jdata.from_tensor_slices({"x": np.arange(5)}).map(lambda e: e["x"] * 2)
    ds = base.with_options(jdata.Options(deterministic=False))
    assert [int(x) for x in check_restore_at_every_step(ds)] == [0, 2, 4, 6, 8]
    assert ds.element_spec == TensorSpec((), np.int64)
    assert ds.cardinality() == 5
    assert ds._node.random_access()


def test_restore_over_sequential_input():
    ds = jdata.range(8).filter(lambda x: x % 2 == 1).with_options(jdata.Options(optimize=False))
    assert [int(x) for x in check_restore_at_every_step(ds)] == [1, 3, 5, 7]
    assert not ds._node.random_access()


def test_iterator_sees_the_merged_options():
    ds = jdata.range(3).with_options(jdata.Options(cpu_budget=2)).with_options(
        jdata.Options(autotune=False))
    it = ds.iterator()
    assert list(it) == [0, 1, 2]
    assert ds.options.cpu_budget == 2 and ds.options.autotune is False


@pytest.mark.parametrize("options", [None, {"deterministic": False}, True])
def test_with_options_needs_an_options_object(options):
    with pytest.raises(TypeError, match="with_options: options="):
        jdata.range(3).with_options(options)


def test_assigning_an_option_says_how_to_set_it_in_jdata():
    options = jdata.Options()
    with pytest.raises(dataclasses.FrozenInstanceError) as info:
        options.deterministic = False
    message = str(info.value)
    assert "ds.with_options(jdata.Options(deterministic=False))" in message
    assert "dataclasses.replace(options, deterministic=False)" in message
    with pytest.raises(dataclasses.FrozenInstanceError):
        del options.autotune
    assert options.deterministic is True and options.autotune is True
    replaced = dataclasses.replace(options, deterministic=False)
    assert replaced.deterministic is False and options.deterministic is True


def test_options_are_equal_only_when_they_merge_alike():
    explicit, default = jdata.Options(deterministic=True), jdata.Options()
    assert explicit.deterministic == default.deterministic
    assert explicit != default
    inner = jdata.Options(deterministic=False)
    assert inner.merge(explicit).deterministic != inner.merge(default).deterministic
    assert explicit == jdata.Options(deterministic=True)
    assert hash(explicit) == hash(jdata.Options(deterministic=True))
    assert len({explicit, default, jdata.Options()}) == 2
    assert jdata.Options() != object()
