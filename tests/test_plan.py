"""The logical plan: printing, pickling, fingerprints, structure checks on restore."""

import subprocess
import sys
import textwrap

import cloudpickle
import jax
import numpy as np
import pytest

import jdata
from tests.helpers import assert_same_sequence, take_list

KEY = jax.random.key(0)


def _pipeline(scale=3):
    return (jdata.range(20).map(lambda x: x * scale).filter(lambda x: x % 2 == 0)
            .random_map(lambda x, k: x + k[0] % 5, KEY).batch(4))


def test_explain_lists_every_op_with_cardinality():
    text = _pipeline().explain()
    lines = text.splitlines()
    assert lines[0] == "Plan (optimizer rules fired: inject_prefetch)"
    assert lines[1].startswith("Prefetch(buffer_size=AUTOTUNE, injected")
    # Each op of the plan that runs ends with its name, as stats() and traces give it.
    assert lines[2].strip().startswith("Batch(batch_size=4)") and lines[2].endswith(
        "[unknown]  op: batch")
    assert "RandomMap(fn=_pipeline.<locals>.<lambda>" in lines[3]
    assert lines[3].endswith("op: random_map(<lambda>)")
    assert lines[4].strip().startswith("Filter(")
    assert lines[5].strip().startswith("Map(") and lines[5].endswith("[20]  op: map(<lambda>)")
    assert lines[6].strip() == "Range(start=0, stop=20, step=1)  [20]  op: range"
    assert lines[8] == "inject_prefetch, before:"  # then the plan the rule was given


def test_nodes_are_frozen():
    node = jdata.range(3)._node
    with pytest.raises(Exception):
        node.stop = 5


def test_datasets_round_trip_through_cloudpickle():
    ds = _pipeline()
    clone = cloudpickle.loads(cloudpickle.dumps(ds))
    assert_same_sequence(take_list(clone), take_list(ds))
    assert clone.fingerprint() == ds.fingerprint()


def test_fingerprint_is_stable_and_sensitive():
    assert _pipeline().fingerprint() == _pipeline().fingerprint()
    assert _pipeline(scale=3).fingerprint() != _pipeline(scale=4).fingerprint()
    assert jdata.range(5).fingerprint() != jdata.range(6).fingerprint()
    assert (jdata.range(5).map(lambda x: x + 1).fingerprint()
            != jdata.range(5).map(lambda x: x + 2).fingerprint())
    assert (jdata.range(5).shuffle(jax.random.key(1)).fingerprint()
            != jdata.range(5).shuffle(jax.random.key(2)).fingerprint())
    assert len(jdata.range(5).fingerprint()) == 64


def test_fingerprint_sees_globals_read_by_udfs():
    global _OFFSET
    _OFFSET = 1
    ds = jdata.range(5).map(lambda x: x + _OFFSET)
    before = ds.fingerprint()
    _OFFSET = 2
    assert ds.fingerprint() != before


_OFFSET = 1

_SCRIPT = textwrap.dedent("""
    import jax, numpy as np, jdata
    table = np.arange(10) * 7
    def lookup(x):
        return table[x % 10]
    ds = (jdata.range(100).map(lookup).filter(lambda x: x > 3)
          .random_map(lambda x, k: x + k[0] % 3, jax.random.key(5)).batch(8))
    print(ds.fingerprint())
""")


def test_fingerprint_is_the_same_across_processes():
    digests = {subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                              check=True, timeout=120).stdout.strip() for _ in range(2)}
    assert len(digests) == 1 and len(digests.pop()) == 64


def test_restoring_a_state_of_another_pipeline_fails_clearly():
    it = jdata.range(5).batch(2).iterator()
    next(it)
    with pytest.raises(ValueError, match="different pipeline"):
        jdata.range(5).map(lambda x: x).batch(2).iterator(it.get_state())
    with pytest.raises(ValueError, match="not a jdata iterator state"):
        jdata.range(5).iterator({"index": 1})


def test_state_may_be_given_as_json_text():
    import json
    it = jdata.range(5).iterator()
    next(it)
    rest = [int(x) for x in jdata.range(5).iterator(json.dumps(it.get_state()))]
    assert rest == [1, 2, 3, 4]


def test_iterator_closes_idempotently_and_as_context_manager():
    with jdata.range(3).iterator() as it:
        assert int(next(it)) == 0
    it.close()
    it.close()


def test_dataset_constructor_rejects_non_nodes():
    with pytest.raises(TypeError, match="jdata.range"):
        jdata.Dataset([1, 2, 3])


def test_len_of_finite_infinite_and_unknown():
    assert len(jdata.range(7)) == 7
    with pytest.raises(TypeError, match="infinite"):
        len(jdata.range(3).repeat())
    with pytest.raises(TypeError, match="unknown"):
        len(jdata.range(3).filter(lambda x: True))


def test_get_single_element():
    assert int(jdata.from_tensors(np.int64(4)).get_single_element()) == 4
    with pytest.raises(ValueError, match="empty"):
        jdata.range(0).get_single_element()
    with pytest.raises(ValueError, match="more than one"):
        jdata.range(2).get_single_element()


def test_apply_checks_its_result():
    assert [int(x) for x in jdata.range(4).apply(lambda d: d.skip(2))] == [2, 3]
    with pytest.raises(TypeError, match="apply"):
        jdata.range(4).apply(lambda d: 3)


def test_datasets_are_truthy_even_when_infinite():
    assert jdata.range(3).repeat()
    assert jdata.range(0)


def test_autotuned_parameters_print_as_autotune():
    text = jdata.range(4).map(lambda x: x, num_parallel_calls=jdata.AUTOTUNE).prefetch(
        jdata.AUTOTUNE).explain()
    assert "Prefetch(buffer_size=AUTOTUNE)" in text
    assert "num_parallel_calls=AUTOTUNE" in text
    assert "Prefetch(buffer_size=2)" in jdata.range(4).prefetch(2).explain()


class _CountingList(list):
    """A list that counts the items read by iterating it."""

    reads = 0

    def __iter__(self):
        for item in super().__iter__():
            type(self).reads += 1
            yield item


def test_walking_the_plan_does_not_scan_an_in_memory_source():
    # Plans are walked at every iterator creation; a source of a million
    # elements must not be read element by element to find child nodes.
    source = _CountingList(range(1_000_000))
    ds = jdata.from_source(source).map(lambda x: x + 1).batch(4)
    _CountingList.reads = 0
    assert len(list(jdata._plan.walk(ds._node))) == 3
    ds.explain()
    assert take_list(ds, 1)[0].tolist() == [1, 2, 3, 4]
    assert _CountingList.reads < 100  # a few probed for the element spec, not a million


def test_static_batch_sizes_know_a_short_last_batch_from_the_cardinality():
    assert jdata.range(20).batch(8)._node.static_batch_sizes() == (8, 4)
    assert jdata.range(24).batch(8)._node.static_batch_sizes() == (8, 8)
    assert jdata.range(20).batch(8, drop_remainder=True)._node.static_batch_sizes() == (8, 8)
    assert jdata.range(20).filter(lambda x: x > 2).batch(8)._node.static_batch_sizes() == (
        8, None)
    assert jdata.range(5).padded_batch(2)._node.static_batch_sizes() == (2, 1)
    assert jdata.counter().batch(3)._node.static_batch_sizes() == (3, 3)
    # Other ops know only static_batch_size: a remainder may come anywhere after repeat.
    assert jdata.range(20).batch(8).repeat(2)._node.static_batch_sizes() == (None, None)
    assert jdata.range(20).batch(5).map(lambda x: x)._node.static_batch_sizes() == (None, None)
