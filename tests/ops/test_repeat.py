import jax
import numpy as np
import pytest

import jdata
from jdata import _random
from tests.helpers import check_restore_at_every_step

KEY = jax.random.key(7)


def ints(values):
    return [np.int64(v) for v in values]


def element_keys(ds):
    return [tuple(int(v) for v in k) for k in ds]


def test_tf_data_doc_example():
    ds = jdata.from_tensor_slices([1, 2, 3]).repeat(3)
    check_restore_at_every_step(ds, ints([1, 2, 3] * 3))
    assert ds.cardinality() == 9


def test_random_access_input_is_read_by_index():
    ds = jdata.range(3).repeat(2)
    it = ds.iterator()
    for _ in range(4):
        next(it)
    assert it.get_state()["state"] == {"index": 4}
    check_restore_at_every_step(ds, ints([0, 1, 2, 0, 1, 2]))


def test_over_a_sequential_input():
    ds = jdata.range(5).filter(lambda x: x % 2 == 0).repeat(3)
    check_restore_at_every_step(ds, ints([0, 2, 4] * 3))


@pytest.mark.parametrize("base", [jdata.range(3), jdata.range(3).filter(lambda x: True)])
def test_forever(base):
    ds = base.repeat()
    assert ds.cardinality() == jdata.INFINITE
    check_restore_at_every_step(ds, ints([0, 1, 2] * 3 + [0]), limit=10)


def test_count_zero_is_empty():
    assert check_restore_at_every_step(jdata.range(3).repeat(0)) == []
    assert jdata.range(3).repeat(0).cardinality() == 0


@pytest.mark.parametrize("empty", [jdata.range(0), jdata.range(4).filter(lambda x: x > 9),
                                   jdata.from_generator(lambda: iter(()))])
def test_forever_repeat_of_an_empty_input_is_empty(empty):
    assert check_restore_at_every_step(empty.repeat()) == []
    assert check_restore_at_every_step(empty.repeat(3)) == []


def test_each_pass_has_its_own_epoch():
    key_data = _random.as_key_data(KEY)
    keys = element_keys(jdata.range(4).random_map(lambda x, k: k, KEY).repeat(3))
    passes = [keys[0:4], keys[4:8], keys[8:12]]
    assert len(set(passes[0]) | set(passes[1]) | set(passes[2])) == 12
    for r, keys_of_pass in enumerate(passes):
        blocks = _random.KeyBlocks(key_data, _random.salt("random_map"), r)
        assert keys_of_pass == [tuple(int(v) for v in blocks[i]) for i in range(4)]
    # The first pass is the dataset without repeat.
    assert passes[0] == element_keys(jdata.range(4).random_map(lambda x, k: k, KEY))


def test_reader_and_iterator_give_the_same_passes():
    by_index = jdata.range(4).random_map(lambda x, k: k, KEY).repeat(3)
    sequential = jdata.range(4).filter(lambda x: True).random_map(lambda x, k: k, KEY).repeat(3)
    forever = jdata.range(4).random_map(lambda x, k: k, KEY).repeat().take(12)
    expected = element_keys(by_index)
    assert element_keys(sequential) == expected
    assert element_keys(forever) == expected


@pytest.mark.parametrize("ds", [
    jdata.range(4).random_map(lambda x, k: k, KEY).repeat(3),
    jdata.range(4).filter(lambda x: x != 2).random_map(lambda x, k: k, KEY).repeat(3),
    jdata.range(3).random_map(lambda x, k: k, KEY).repeat().take(8),
])
def test_restoring_inside_a_later_pass_is_exact(ds):
    check_restore_at_every_step(ds)


def test_nested_repeats_get_distinct_epochs():
    keys = element_keys(jdata.range(2).random_map(lambda x, k: k, KEY).repeat(2).repeat(2))
    assert len(set(keys)) == 8
    check_restore_at_every_step(
        jdata.range(2).filter(lambda x: True).random_map(lambda x, k: k, KEY).repeat(2).repeat(2))


def test_cardinality():
    assert jdata.range(3).repeat(4).cardinality() == 12
    assert jdata.range(0).repeat().cardinality() == 0
    assert jdata.range(3).filter(lambda x: True).repeat(2).cardinality() == jdata.UNKNOWN
    assert jdata.range(3).filter(lambda x: True).repeat().cardinality() == jdata.INFINITE
    assert jdata.counter().repeat(2).cardinality() == jdata.INFINITE


def test_element_spec_and_str():
    ds = jdata.from_tensor_slices({"x": np.zeros((2, 3))})
    assert ds.repeat(2).element_spec == ds.element_spec
    assert "Repeat(forever)" in jdata.range(2).repeat().explain()
    assert "Repeat(count=2)" in jdata.range(2).repeat(2).explain()


@pytest.mark.parametrize("count, error", [(-2, ValueError), (1.5, TypeError), ("2", TypeError)])
def test_bad_arguments(count, error):
    with pytest.raises(error, match="repeat: count="):
        jdata.range(3).repeat(count)



def _fails_on_3(x):
    if x == 3:
        raise ValueError("three")
    return x


def test_blocks_read_across_passes_match_reads_by_index():
    # A filter reads its input a block at a time; the blocks span passes, each with its
    # own shuffle order.
    order = [int(x) for x in jdata.range(7).shuffle(KEY).repeat(3)]
    assert [sorted(order[i:i + 7]) for i in (0, 7, 14)] == [list(range(7))] * 3
    assert order[:7] != order[7:14]
    ds = jdata.range(7).shuffle(KEY).repeat(3).filter(lambda x: x != 0)
    assert [int(x) for x in ds] == [x for x in order if x != 0]
    check_restore_at_every_step(ds)


def test_an_element_failing_inside_a_block_read_across_passes_raises_in_its_place():
    order = [int(x) for x in jdata.range(7).shuffle(KEY).repeat(3)]
    ds = jdata.range(7).shuffle(KEY).repeat(3).map(_fails_on_3).filter(lambda x: x != 0)
    it, seen = iter(ds), []
    with pytest.raises(jdata.UDFError, match="three"):
        for x in it:
            seen.append(int(x))
    assert seen == [x for x in order[:order.index(3)] if x != 0]
