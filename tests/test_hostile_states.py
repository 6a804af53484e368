"""States are data, never code: crafted, malformed and foreign states fail with ValueError.

A state comes back from disk (a checkpoint), so it is untrusted input. These
tests play the attacker: a state that names a function to call, states with
every field broken in every way, and states of the same pipeline over other
data, through every way a state reaches an iterator.
"""

from __future__ import annotations

import collections
import copy
import json
import time
from itertools import islice

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jdata
import jdata.checkpoint
from tests.helpers import assert_same_sequence, take_list

KEY = jax.random.key(5)
Pair = collections.namedtuple("Pair", "a b")


def _gen(n):
    return jdata.from_generator(lambda: (np.int64(i) for i in range(n)))


def _pairs(n):
    return jdata.from_generator(lambda: (Pair(np.int64(i), np.int64(i % 3)) for i in range(n)))


def _find(tree, key):
    """The dict in ``tree`` that holds ``key`` (depth first)."""
    if isinstance(tree, dict):
        if key in tree:
            return tree
        children = tree.values()
    elif isinstance(tree, list):
        children = tree
    else:
        return None
    for child in children:
        found = _find(child, key)
        if found is not None:
            return found
    return None


def _payload(marker):
    # What an older jdata decoded by importing the module and calling the class it
    # named: here os.system("touch <marker>").
    return {"nt": "os:system", "v": [{"s": f"touch {marker}"}]}


# Each pipeline holds elements (not indices) in its state: where a crafted
# element goes, and how to put it there.
_ELEMENT_STATES = {
    "unique": (lambda: _gen(20).unique(), "seen", lambda s, p: s.__setitem__("seen", [p])),
    "scan": (lambda: _gen(20).scan(np.int64(0), lambda c, x: (c + x, c)), "scan_state",
             lambda s, p: s.__setitem__("scan_state", p)),
    "shuffle": (lambda: _gen(20).shuffle(KEY, buffer_size=5), "buffer",
                lambda s, p: s["buffer"].__setitem__(0, p)),
    "window": (lambda: _gen(20).window(4, shift=1).flat_map(lambda w: w.batch(4)), "buffer",
               lambda s, p: s["buffer"].__setitem__(0, p)),
    "group_by_window": (
        lambda: _gen(20).group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), 3),
        "groups", lambda s, p: s.__setitem__("groups", [[0, [p]]])),
}


def _crafted_state(name, marker):
    make, field, put = _ELEMENT_STATES[name]
    it = make().iterator()
    for _ in range(3):
        next(it)
    state = it.get_state()
    put(_find(state, field), _payload(marker))
    return make, state


@pytest.mark.parametrize("name", sorted(_ELEMENT_STATES))
@pytest.mark.parametrize("way", ["set_state", "iterator", "json"])
def test_a_state_that_names_a_function_never_runs_it(tmp_path, name, way):
    marker = tmp_path / "pwned"
    make, state = _crafted_state(name, marker)
    with pytest.raises(ValueError, match=f"{name}: invalid iterator state"):
        if way == "set_state":
            make().iterator().set_state(state)
        elif way == "iterator":
            make().iterator(state)
        else:
            make().iterator(json.dumps(state))
    assert not marker.exists()


def test_an_edited_orbax_checkpoint_never_runs_code(tmp_path):
    marker = tmp_path / "pwned"
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        it = _gen(20).shuffle(KEY, buffer_size=5).iterator()
        next(it)
        manager.save(1, args=ocp.args.Composite(data=jdata.checkpoint.CheckpointSave(it)))
        manager.wait_until_finished()
    path = tmp_path / "ckpt" / "1" / "data" / "process_0-of-1.json"
    state = json.loads(path.read_text())
    _find(state, "buffer")["buffer"][0] = _payload(marker)
    path.write_text(json.dumps(state))
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        with pytest.raises(ValueError, match="shuffle: invalid iterator state"):
            manager.restore(1, args=ocp.args.Composite(
                data=jdata.checkpoint.CheckpointRestore(
                    _gen(20).shuffle(KEY, buffer_size=5).iterator())))
    assert not marker.exists()


def test_namedtuples_in_states_come_back_as_the_pipelines_own_class():
    ds = _pairs(30).shuffle(KEY, buffer_size=6).prefetch(2)
    expected = take_list(_pairs(30).shuffle(KEY, buffer_size=6).prefetch(2))
    it = ds.iterator()
    head = [next(it) for _ in range(4)]
    state = json.loads(json.dumps(it.get_state()))
    rest = list(ds.iterator(state))
    assert all(type(e) is Pair for e in rest)
    assert_same_sequence(take_list(jdata.from_source(head + rest)), expected)


def test_a_full_shuffle_at_index_minus_one_is_refused_not_an_endless_loop():
    ds = jdata.range(10).shuffle(KEY)
    state = ds.iterator().get_state()
    state["state"]["index"] = -1
    with pytest.raises(ValueError, match=r"shuffle: invalid iterator state: state field "
                                         r"'index': -1 is out of range \(valid: \[0, 10\]\)"):
        ds.iterator(state)


@pytest.mark.parametrize("saved, restored, message", [
    (jdata.range(10), jdata.range(20), "range: the state was saved over 10 elements, but "
                                       "this pipeline's range has 20"),
    (jdata.from_source(list(range(8))).shuffle(KEY), jdata.from_source(list(range(9))).shuffle(KEY),
     "from_source: the state was saved over 8 elements"),
    (jdata.range(10).shuffle(KEY), jdata.range(10).shuffle(jax.random.key(6)),
     "shuffle: the state was saved with another random key"),
    (_gen(10).shuffle(KEY, 3), _gen(10).shuffle(jax.random.key(6), 3),
     "shuffle: the state was saved with another random key"),
    (jdata.range(10).random_map(lambda x, k: x, KEY),
     jdata.range(10).random_map(lambda x, k: x, jax.random.key(6)),
     "random_map: the state was saved with another random key"),
])
def test_a_state_of_the_same_pipeline_over_other_data_is_refused(saved, restored, message):
    it = saved.iterator()
    next(it)
    with pytest.raises(ValueError, match=message):
        restored.iterator(it.get_state())


def test_a_changed_udf_may_restore_a_state():
    # Users fix bugs in their functions and resume.
    it = jdata.range(10).map(lambda x: x + 1).iterator()
    next(it)
    fixed = jdata.range(10).map(lambda x: x + 100)
    assert [int(x) for x in fixed.iterator(it.get_state())] == list(range(101, 110))


def test_a_version_1_state_still_restores():
    ds = jdata.range(10).shuffle(KEY)
    it = ds.iterator()
    next(it)
    state = it.get_state()
    old = {"version": 1, "plan": state["plan"], "state": state["state"]}
    assert [int(x) for x in ds.iterator(old)] == [int(x) for x in ds.iterator(state)]


@pytest.mark.parametrize("state", [[], "not json", '{"version": 2}', {"version": "2"},
                                   {"version": 2, "plan": "range()", "state": {}},
                                   "[" * 100_000])
def test_not_a_state_at_all_is_a_value_error(state):
    with pytest.raises(ValueError):
        jdata.range(3).iterator(state)


# ------------------------------------------------------------------ every field broken

def _odd(x):
    return x % 2 == 1


def _double(x):
    return x * 2


_PIPELINES = {
    "parallel_by_index": lambda: (jdata.range(40).shuffle(KEY).map(_double, num_parallel_calls=2)
                                  .batch(4).prefetch(2)),
    "buffer_shuffle_unordered": lambda: (_gen(40).shuffle(KEY, buffer_size=8)
                                         .map(_double, num_parallel_calls=2, deterministic=False)
                                         .prefetch(3)),
    "window": lambda: _gen(30).window(3, shift=2).flat_map(lambda w: w.batch(3)),
    "unique_filter": lambda: _gen(40).map(lambda x: x % 17).filter(_odd).unique(),
    "group_by_window": lambda: _gen(30).group_by_window(lambda x: x % 3, lambda k, w: w.batch(2),
                                                        window_size=2),
    "scan_repeat": lambda: jdata.range(6).repeat(3).scan(np.int64(0),
                                                         lambda c, x: (c + x, c + x)),
    "zip_enumerate_cache": lambda: jdata.zip((jdata.range(12).cache(), _gen(12))).enumerate(),
    "choose_sample": lambda: jdata.sample_from_datasets(
        [jdata.choose_from_datasets([_gen(10), jdata.range(5)], jdata.range(2).repeat(6)),
         jdata.range(100, 110)], [0.5, 0.5], KEY),
    "interleave": lambda: jdata.range(1, 8).interleave(
        lambda x: jdata.range(x).map(_double), cycle_length=3, block_length=2,
        num_parallel_calls=2),
    "unbatch_rebatch": lambda: _gen(20).batch(3).unbatch().batch(4).rebatch([2, 3]),
    "counters": lambda: (jdata.counter().take(40).skip(2).shard(2, 1).take_while(lambda x: x < 30)
                         .concatenate(jdata.range(5))),
    "vectorized": lambda: _gen(20).map(lambda x: x + 1, vectorize=True),
}


def _mutations(tree, path=()):
    """Every (path, broken value) of a state: each field replaced by values of wrong
    types and ranges, each dict missing a key or with one more, each list emptied,
    grown or turned into a dict."""
    if isinstance(tree, dict):
        yield path, []
        for key in tree:
            rest = {k: v for k, v in tree.items() if k != key}
            yield path, rest
            yield from _mutations(tree[key], (*path, key))
        yield path, {**tree, "zzz": 0}
    elif isinstance(tree, list):
        yield path, {}
        yield path, []
        if tree:
            yield path, tree + tree[-1:]
        for i, item in enumerate(tree):
            yield from _mutations(item, (*path, i))
    elif isinstance(tree, bool):
        yield from ((path, v) for v in (1, "true", None, not tree))
    elif isinstance(tree, int):
        yield from ((path, v) for v in (-1, tree + 1, 10 ** 12, 2 ** 70, "1", 1.5, True, None))
    else:
        yield from ((path, v) for v in (5, None, [], {"s": 1}))


def _replaced(state, path, value):
    if not path:
        return value
    out = copy.deepcopy(state)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize("name", sorted(_PIPELINES))
def test_every_broken_field_is_refused_or_harmless(name):
    """Each broken state either fails with ValueError when restored, or restores to an
    iterator that runs (a broken value may still be a valid position), never hangs,
    and raises nothing else."""
    make = _PIPELINES[name]
    ds = make()
    it = ds.iterator()
    for _ in range(5):
        next(it)
    state = it.get_state()
    it.close()
    refused = 0
    for path, value in _mutations(state["state"], ("state",)):
        broken = _replaced(state, path, value)
        try:
            restored = ds.iterator(broken)
        except ValueError as e:
            assert "invalid iterator state" in str(e) or "state" in str(e), e
            refused += 1
            continue
        start = time.perf_counter()
        with restored:
            for _ in islice(restored, 200):
                pass
        assert time.perf_counter() - start < 10, f"{path} = {value!r}: too slow"
    assert refused > 0
