"""seqio's packing feature converters ported to jdata give exactly TF's outputs.

The reference is fixtures/seqio_packing.npz, written by fixtures/make_seqio_fixtures.py,
which runs seqio's own tf.data code on the same examples. Everything here is integer
arithmetic, so outputs must be equal to the bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import jdata
from tests import helpers
from tests.ports import _seqio
from tests.ports.fixtures import make_seqio_fixtures as fx

_FIXTURE = np.load(fx.FIXTURE, allow_pickle=False)
_SIGNATURE = {"inputs": jdata.TensorSpec((None,), np.int32),
              "targets": jdata.TensorSpec((None,), np.int32),
              "idx": jdata.TensorSpec((), np.int64),
              "inputs_pretokenized": jdata.TensorSpec((), object)}


def _examples() -> list[dict]:
    """The examples the fixture script fed to TF, rebuilt from the stored arrays."""
    out = [{"idx": idx, "inputs_pretokenized": bytes(text)}
           for idx, text in zip(_FIXTURE["idx"], _FIXTURE["inputs_pretokenized"])]
    for k in ("inputs", "targets"):
        ends = np.cumsum(_FIXTURE[f"{k}_lengths"])
        for example, piece in zip(out, np.split(_FIXTURE[f"{k}_flat"], ends[:-1])):
            example[k] = piece
    return out


def _pipeline(name: str) -> jdata.Dataset:
    _, kind, lengths, pack, batch_size = next(c for c in fx.CASES if c[0] == name)
    examples = _examples()
    ds = jdata.from_generator(lambda: iter(examples), output_signature=_SIGNATURE)
    if kind is None:
        ds = _seqio.trim_and_pack_dataset(ds, lengths)
    else:
        ds = _seqio.trim_dataset(ds, lengths, output_features=lengths)
        ds = _seqio.feature_converter(kind, pack, ds, lengths)
    if batch_size:
        ds = ds.batch(batch_size, drop_remainder=True)
    return ds


def _expected(name: str) -> list[dict]:
    keys = [k.split("/", 1)[1] for k in _FIXTURE.files if k.startswith(name + "/")]
    n = len(_FIXTURE[f"{name}/{keys[0]}"])
    return [{k: _FIXTURE[f"{name}/{k}"][i] for k in keys} for i in range(n)]


def test_fixture_is_what_the_script_writes():
    # The examples the test rebuilds are the ones the script generated.
    helpers.assert_same_sequence(_examples(), fx.make_examples())


@pytest.mark.parametrize("name", [c[0] for c in fx.CASES])
def test_outputs_equal_tf(name):
    actual = helpers.take_list(_pipeline(name))
    helpers.assert_same_sequence(actual, _expected(name), f"{name}: ")


def test_packed_output_spec():
    # Ranks and dtypes as seqio's. The sequence length is None, where TF's is 16: seqio
    # restores it with set_shape, which a NumPy UDF has no counterpart for, and jdata's
    # probe reads the packed length 16 as the padded batch's size (see the port's notes).
    spec = _pipeline("encdec_packed").element_spec
    assert spec["encoder_segment_ids"].dtype == np.int32
    assert spec["encoder_segment_ids"].shape[0] == 3
    assert {s.rank for s in spec.values()} == {2}


def test_restores_at_every_step():
    # What the port adds over seqio's tf.data pipeline: the packed stream resumes exactly
    # (the state is the generator's position plus the unbatch's place in a packed batch).
    helpers.check_restore_at_every_step(_pipeline("lm_packed"), _expected("lm_packed"))


def test_input_validation_rejects_long_features():
    # FeatureConverter's non-strict input check, raised from inside a map as seqio's
    # assert op is: jdata chains it with the op and the element's position.
    examples = [{"targets": np.arange(1, n, dtype=np.int32)} for n in (3, 5, 4, 2, 20, 3)]
    ds = _seqio.feature_converter("lm", True, jdata.from_generator(lambda: iter(examples)),
                                  {"targets": 12})
    with pytest.raises(jdata.UDFError, match="not less than or equal") as info:
        list(ds)
    assert info.value.position == 4
    assert isinstance(info.value.__cause__, ValueError)


def test_fixture_stays_small():
    assert os.path.getsize(fx.FIXTURE) < 60_000
