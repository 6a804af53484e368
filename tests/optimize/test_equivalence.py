"""Randomized pipelines give the same elements with the optimizer on and off."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jdata
from tests.helpers import assert_same_sequence, materialize
from tests.test_restore_fuzz import build, recipes

OFF = jdata.Options(optimize=False)


def _run(ds: jdata.Dataset, limit: int = 60):
    """The elements up to the first error, and that error's type and op."""
    out = []
    try:
        for element in ds:
            out.append(materialize(element))
            if len(out) >= limit:
                break
    except jdata.UDFError as e:
        return out, (type(e).__name__, e.op)
    except (ValueError, TypeError) as e:
        return out, (type(e).__name__, None)
    return out, None


def _assert_agree(ds: jdata.Dataset) -> None:
    on, off = _run(ds), _run(ds.with_options(OFF))
    assert_same_sequence(on[0], off[0])
    assert on[1] == off[1]


def _examples(n: int):
    # Derandomized: CI checks the same pipelines every time.
    return settings(max_examples=n, derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck))


@_examples(60)
@given(recipes())
def test_outputs_with_and_without_the_optimizer_agree(recipe):
    _assert_agree(build(recipe))


def _affine(a, b):
    return lambda x: x * a + b


def _modulo(m, r):
    return lambda x: x % m != r


_CHAIN_OPS = {
    "map": lambda ds, a, b: ds.map(_affine(a % 3 + 1, b)),
    "parallel_map": lambda ds, a, b: ds.map(_affine(a % 3 + 1, b), num_parallel_calls=2),
    "filter": lambda ds, a, b: ds.filter(_modulo(a % 4 + 2, b % 2)),
    "noop": lambda ds, a, b: [ds.take(-1), ds.skip(0), ds.repeat(1), ds.prefetch(0)][a % 4],
    "batch": lambda ds, a, b: ds.batch(a % 4 + 1).map(lambda x: x.sum()),
    "take": lambda ds, a, b: ds.take(a + 5),
    "skip": lambda ds, a, b: ds.skip(a),
    "shard": lambda ds, a, b: ds.shard(a % 3 + 1, b % (a % 3 + 1)),
    "repeat": lambda ds, a, b: ds.repeat().take(a + 7),
}


@st.composite
def _chains(draw):
    steps = draw(st.lists(st.tuples(st.sampled_from(sorted(_CHAIN_OPS)),
                                    st.integers(0, 9), st.integers(0, 9)),
                          min_size=1, max_size=6))
    return draw(st.integers(0, 40)), draw(st.booleans()), steps


def _build_chain(chain) -> jdata.Dataset:
    n, generated, steps = chain
    ds = jdata.range(n)
    if generated:  # a sequential source, where pushdowns apply
        ds = jdata.from_generator(lambda: iter(range(n)),
                                  output_signature=jdata.TensorSpec((), np.int64))
    for name, a, b in steps:
        ds = _CHAIN_OPS[name](ds, a, b)
    return ds


@_examples(80)
@given(_chains())
def test_chains_of_fusable_ops_agree_with_and_without_the_optimizer(chain):
    _assert_agree(_build_chain(chain))
