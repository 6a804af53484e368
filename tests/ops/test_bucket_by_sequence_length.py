import pickle

import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step

_DOC_ELEMENTS = [[0], [1, 2, 3, 4], [5, 6, 7], [7, 8, 9, 10, 11], [13, 14, 15, 16, 19, 20],
                 [21, 22]]


def _doc_dataset():
    return jdata.from_generator(lambda: (np.array(e) for e in _DOC_ELEMENTS))


def _lists(batches) -> list:
    return [b.tolist() for b in batches]


def test_tf_data_doc_example():
    ds = _doc_dataset().bucket_by_sequence_length(
        element_length_func=lambda elem: elem.shape[0], bucket_boundaries=[3, 5],
        bucket_batch_sizes=[2, 2, 2])
    assert _lists(check_restore_at_every_step(ds)) == [
        [[1, 2, 3, 4], [5, 6, 7, 0]],
        [[7, 8, 9, 10, 11, 0], [13, 14, 15, 16, 19, 20]],
        [[0, 0], [21, 22]]]


def test_tf_data_doc_example_with_padding_values():
    ds = _doc_dataset().bucket_by_sequence_length(
        element_length_func=lambda elem: elem.shape[0], bucket_boundaries=[3, 5],
        bucket_batch_sizes=[2, 2, 2], pad_to_bucket_boundary=False, padding_values=-1)
    assert _lists(ds) == [[[1, 2, 3, 4], [5, 6, 7, -1]],
                          [[7, 8, 9, 10, 11, -1], [13, 14, 15, 16, 19, 20]],
                          [[0, -1], [21, 22]]]


def test_bucket_boundaries_and_sizes_over_a_random_access_input():
    ds = jdata.range(1, 10).map(lambda n: np.arange(n)).bucket_by_sequence_length(
        len, bucket_boundaries=[3, 6], bucket_batch_sizes=[2, 3, 1])
    out = check_restore_at_every_step(ds)
    # lengths 1,2 -> bucket 0 (size 2); 3,4,5 -> bucket 1 (size 3); 6.. -> bucket 2 (size 1).
    assert [b.shape for b in out] == [(2, 2), (3, 5), (1, 6), (1, 7), (1, 8), (1, 9)]


def test_pad_to_bucket_boundary():
    ds = jdata.range(1, 7).map(lambda n: np.arange(n)).bucket_by_sequence_length(
        len, bucket_boundaries=[3, 7], bucket_batch_sizes=[2, 2, 2], pad_to_bucket_boundary=True)
    out = check_restore_at_every_step(ds)
    assert [b.shape for b in out] == [(2, 2), (2, 6), (2, 6)]
    assert out[0].tolist() == [[0, 0], [0, 1]]


def test_pad_to_bucket_boundary_keeps_fixed_padded_dimensions():
    ds = jdata.range(1, 5).map(lambda n: np.ones((n, 2))).bucket_by_sequence_length(
        len, bucket_boundaries=[10], bucket_batch_sizes=[4, 4], padded_shapes=[None, 3],
        pad_to_bucket_boundary=True)
    assert [b.shape for b in ds] == [(4, 9, 3)]


def test_pad_to_bucket_boundary_pads_only_the_unknown_dimensions():
    # tf.data output of range(1, 6).map(lambda n: tf.fill([n, 2], n))
    # .bucket_by_sequence_length(..., [3, 7], [2, 2, 2], pad_to_bucket_boundary=True):
    # the known size 2 is kept, only the sequence dimension goes to boundary - 1.
    ds = jdata.range(1, 6).map(lambda n: np.full((n, 2), n)).bucket_by_sequence_length(
        len, bucket_boundaries=[3, 7], bucket_batch_sizes=[2, 2, 2], pad_to_bucket_boundary=True)
    assert _lists(check_restore_at_every_step(ds)) == [
        [[[1, 1], [0, 0]], [[2, 2], [2, 2]]],
        [[[3, 3], [3, 3], [3, 3], [0, 0], [0, 0], [0, 0]],
         [[4, 4], [4, 4], [4, 4], [4, 4], [0, 0], [0, 0]]],
        [[[5, 5], [5, 5], [5, 5], [5, 5], [5, 5], [0, 0]]]]
    assert ds.element_spec == TensorSpec((None, None, 2), np.int64)


def test_pad_to_bucket_boundary_keeps_a_sources_known_shape():
    # tf.data: from_tensor_slices(np.arange(12).reshape(3, 2, 2)) bucketed with [5], [2, 2],
    # pad_to_bucket_boundary=True: the spec (2, 2) is fully known, so nothing is padded.
    ds = jdata.from_tensor_slices(np.arange(12).reshape(3, 2, 2)).bucket_by_sequence_length(
        len, bucket_boundaries=[5], bucket_batch_sizes=[2, 2], pad_to_bucket_boundary=True)
    assert _lists(check_restore_at_every_step(ds)) == [
        [[[0, 1], [2, 3]], [[4, 5], [6, 7]]], [[[8, 9], [10, 11]]]]
    assert ds.element_spec == TensorSpec((None, 2, 2), np.int64)


def test_no_boundaries_is_one_bucket():
    # tf.data accepts bucket_boundaries=[]: every element goes to the one bucket.
    ds = jdata.range(1, 6).map(lambda n: np.arange(n)).bucket_by_sequence_length(
        len, bucket_boundaries=[], bucket_batch_sizes=[2])
    assert _lists(check_restore_at_every_step(ds)) == [
        [[0, 0], [0, 1]], [[0, 1, 2, 0], [0, 1, 2, 3]], [[0, 1, 2, 3, 4]]]
    with pytest.raises(ValueError, match="pad_to_bucket_boundary=True needs bucket_boundaries"):
        jdata.range(3).bucket_by_sequence_length(len, [], [2], pad_to_bucket_boundary=True)


def test_pad_to_bucket_boundary_rejects_long_elements():
    ds = jdata.range(1, 6).map(lambda n: np.arange(n)).bucket_by_sequence_length(
        len, bucket_boundaries=[3], bucket_batch_sizes=[2, 2], pad_to_bucket_boundary=True)
    with pytest.raises(jdata.UDFError, match=r"length 3, but with pad_to_bucket_boundary=True "
                                             r"elements must have length < max\(bucket_"):
        list(ds)


def _fails_at_two(n):
    if n == 2:
        raise ValueError("bad element")
    return np.arange(n)


def test_bucket_padding_to_the_boundary_survives_a_bad_element():
    # tf.data output of the same pipeline (tf.range(n), with an assert failing at n == 2)
    # followed by ignore_errors(). The spec probe used to raise inside the bucket's
    # reduce_func, so ignore_errors dropped every batch.
    ds = jdata.range(1, 8).map(_fails_at_two).bucket_by_sequence_length(
        len, [3, 8], [2, 2, 2], pad_to_bucket_boundary=True).ignore_errors()
    assert [b.tolist() for b in ds] == [
        [[0, 1, 2, 0, 0, 0, 0], [0, 1, 2, 3, 0, 0, 0]],
        [[0, 1, 2, 3, 4, 0, 0], [0, 1, 2, 3, 4, 5, 0]], [[0, 0]], [[0, 1, 2, 3, 4, 5, 6]]]


def test_no_padding_batches_equal_shapes():
    ds = jdata.range(8).map(lambda x: np.full(x % 2 + 1, x)).bucket_by_sequence_length(
        len, bucket_boundaries=[2], bucket_batch_sizes=[3, 2], no_padding=True)
    assert _lists(check_restore_at_every_step(ds)) == [
        [[1, 1], [3, 3]], [[0], [2], [4]], [[5, 5], [7, 7]], [[6]]]


def test_no_padding_warns_about_unused_arguments():
    with pytest.warns(UserWarning, match="padding_values has no effect with no_padding=True"):
        jdata.range(3).bucket_by_sequence_length(lambda x: 1, [2], [1, 1], padding_values=1,
                                                 no_padding=True)


def test_drop_remainder_drops_each_buckets_partial_batch():
    ds = jdata.range(1, 8).map(lambda n: np.arange(n)).filter(lambda a: True)
    ds = ds.bucket_by_sequence_length(len, bucket_boundaries=[4], bucket_batch_sizes=[2, 3],
                                      drop_remainder=True)
    assert [b.shape for b in check_restore_at_every_step(ds)] == [(2, 2), (3, 6)]


def test_tuple_elements_are_unpacked_into_the_length_function():
    ds = jdata.range(1, 5).map(lambda n: (np.arange(n), n * 10)).bucket_by_sequence_length(
        lambda seq, label: len(seq), bucket_boundaries=[3], bucket_batch_sizes=[2, 2])
    out = check_restore_at_every_step(ds)
    assert [(s.tolist(), lab.tolist()) for s, lab in out] == [
        ([[0, 0], [0, 1]], [10, 20]), ([[0, 1, 2, 0], [0, 1, 2, 3]], [30, 40])]


def test_element_spec():
    seqs = jdata.range(1, 5).map(lambda n: np.arange(n))
    ds = seqs.bucket_by_sequence_length(len, [3], [2, 2])
    assert ds.element_spec == TensorSpec((None, None), np.int64)
    assert ds.cardinality() == jdata.UNKNOWN
    ds = seqs.bucket_by_sequence_length(len, [3], [2, 2], drop_remainder=True,
                                        padded_shapes=[8])
    assert ds.element_spec == TensorSpec((2, 8), np.int64)
    ds = seqs.bucket_by_sequence_length(len, [3], [2, 4], drop_remainder=True,
                                        pad_to_bucket_boundary=True)
    assert ds.element_spec == TensorSpec((None, None), np.int64)
    ds = seqs.map(lambda x: np.zeros(3)).bucket_by_sequence_length(len, [3], [2, 2],
                                                                    no_padding=True)
    assert ds.element_spec == TensorSpec((None, 3), np.float64)


def test_plan_is_readable_and_picklable():
    ds = jdata.range(3).map(lambda x: np.arange(x)).bucket_by_sequence_length(
        len, [2], [1, 1])
    node = ds._node
    assert "BucketOf" in str(node) and "BatchBucket" in str(node)
    assert pickle.loads(pickle.dumps(node.key_func)) == node.key_func
    assert pickle.loads(pickle.dumps(node.reduce_func)) == node.reduce_func
    assert node.window_size_func(np.int64(1)) == 1


@pytest.mark.parametrize("kwargs, error, match", [
    ({"bucket_boundaries": 3}, TypeError, "bucket_boundaries=3"),
    ({"bucket_boundaries": [3, 3]}, ValueError, "strictly increasing"),
    ({"bucket_boundaries": [5, 3]}, ValueError, "strictly increasing"),
    ({"bucket_boundaries": [0, 3]}, ValueError, "bucket_boundaries=0 must be >= 1"),
    ({"bucket_boundaries": [1.5, 3]}, TypeError, "bucket_boundaries"),
    ({"bucket_batch_sizes": [2, 2]}, ValueError,
     r"len\(bucket_batch_sizes\) must equal len\(bucket_boundaries\) \+ 1"),
    ({"bucket_batch_sizes": 2}, TypeError, "bucket_batch_sizes=2"),
    ({"bucket_batch_sizes": [2, 0, 2]}, ValueError, "bucket_batch_sizes=0 must be >= 1"),
    ({"pad_to_bucket_boundary": 1}, TypeError, "pad_to_bucket_boundary"),
    ({"no_padding": None}, TypeError, "no_padding"),
    ({"drop_remainder": "no"}, TypeError, "drop_remainder"),
    ({"element_length_func": 3}, TypeError, "element_length_func"),
    ({"padded_shapes": "x"}, TypeError, "padded_shapes"),
    ({"padding_values": np.ones(2)}, ValueError, "padding_values"),
])
def test_bad_arguments(kwargs, error, match):
    args = {"element_length_func": len, "bucket_boundaries": [3, 5],
            "bucket_batch_sizes": [2, 2, 2], **kwargs}
    with pytest.raises(error, match=match):
        jdata.range(3).bucket_by_sequence_length(**args)


def test_bad_arguments_name_the_op():
    with pytest.raises(ValueError, match="bucket_by_sequence_length: "):
        jdata.range(3).bucket_by_sequence_length(len, [3], [1])


def test_length_must_be_an_integer():
    ds = jdata.range(3).bucket_by_sequence_length(lambda x: 1.5, [3], [1, 1])
    with pytest.raises(jdata.UDFError, match="element_length_func must return an integer"):
        list(ds)


def test_length_function_errors_are_udf_errors():
    ds = jdata.range(3).map(lambda x: np.arange(x)).bucket_by_sequence_length(
        lambda a: 1 // len(a), [3], [1, 1])
    with pytest.raises(jdata.UDFError) as info:
        list(ds)
    assert info.value.position == 0 and isinstance(info.value.__cause__, ZeroDivisionError)


def test_numpy_arrays_for_boundaries_and_batch_sizes_as_ports_compute_them():
    def build(boundaries, sizes):
        return jdata.range(20).bucket_by_sequence_length(lambda x: x, boundaries, sizes)
    expected = [b.tolist() for b in build([5, 10], [2, 3, 4])]
    for boundaries, sizes in [(np.array([5, 10]), np.array([2, 3, 4])),
                              (np.arange(5, 11, 5, dtype=np.int32), (2, 3, 4)),
                              ([np.int64(5), np.int64(10)], np.array([2, 3, 4], np.uint8))]:
        assert [b.tolist() for b in build(boundaries, sizes)] == expected
    with pytest.raises(TypeError, match="bucket_boundaries=5.0 must be an int"):
        build(np.array([5.0, 10.0]), [2, 3, 4])
    with pytest.raises(TypeError, match="(?s)bucket_batch_sizes=.* must be a list of batch sizes"):
        build([5, 10], np.ones((3, 1), np.int64))
