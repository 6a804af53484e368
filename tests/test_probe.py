"""Element specs of UDF outputs and opaque sources, inferred from the first elements."""

import numpy as np
import pytest

import jdata
from jdata import TensorSpec


def test_sizes_that_vary_among_the_first_elements_are_unknown():
    assert jdata.range(1, 7).map(lambda n: np.arange(n)).element_spec == TensorSpec((None,),
                                                                                    np.int64)
    assert jdata.from_source([np.zeros(3), np.zeros(5)]).element_spec == TensorSpec(
        (None,), np.float64)


def test_fixed_output_sizes_stay_known():
    seqs = jdata.range(1, 7).map(lambda n: np.arange(n))
    assert seqs.map(lambda x: np.zeros((3, 2))).element_spec == TensorSpec((3, 2), np.float64)


def test_a_passed_through_unknown_size_stays_unknown():
    # The first batches all have 4 rows; only the last has 2: the spec must not say 4.
    ds = jdata.range(18).batch(4).map(lambda x: x * 2)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert jdata.range(18).batch(4, drop_remainder=True).map(
        lambda x: x * 2).element_spec == TensorSpec((4,), np.int64)


def test_an_empty_input_cannot_show_a_udf_output():
    with pytest.raises(ValueError, match="empty"):
        jdata.range(0).map(lambda x: x).element_spec


def _fails_at_two(n):
    if n == 2:
        raise ValueError("bad element")
    return np.arange(n)


def test_elements_whose_udf_raises_are_passed_over():
    # tf.data knows the spec of a pipeline with bad elements; ignore_errors drops them.
    ds = jdata.range(1, 8).map(_fails_at_two)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert ds.ignore_errors().map(lambda x: x.sum()).element_spec == TensorSpec((), np.int64)
    first_bad = jdata.range(2, 6).map(_fails_at_two)
    assert first_bad.interleave(lambda x: jdata.from_tensors(x.sum()), 1).element_spec == (
        TensorSpec((), np.int64))


def test_a_udf_that_always_raises_raises_its_error():
    with pytest.raises(jdata.UDFError, match="map") as info:
        _ = jdata.range(10).map(lambda x: 1 // 0).element_spec
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(jdata.UDFError, match="map"):
        _ = jdata.range(10).map(lambda x: 1 // 0).map(lambda x: x).element_spec

