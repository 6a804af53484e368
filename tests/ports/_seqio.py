"""seqio's feature converters with packing, ported to jdata (an example of a port, not library
code).

The pipeline structure is seqio's, op for op (``seqio/utils.py`` and
``seqio/feature_converters.py`` at b898b9f992877cea2cda40dbc03597ea5cd4b08f; the TF
originals are in fixtures/make_seqio_fixtures.py): every ``tf.data.Dataset.X`` became
``jdata.X`` and every TF op inside a UDF the NumPy expression that computes the same
thing. What the rename did not cover is marked ``PORT:``.
"""

from __future__ import annotations

import numpy as np

import jdata

AUTOTUNE = jdata.AUTOTUNE


# --- seqio/utils.py -------------------------------------------------------------------------


def trim_and_pad_dataset(dataset: jdata.Dataset, feature_lengths) -> jdata.Dataset:
    def _trim_and_pad(k, t):
        if k not in feature_lengths:
            return t
        length_k = feature_lengths[k]
        t = t[:length_k]
        pad_amt = length_k - t.shape[0]
        return np.pad(t, [(0, pad_amt)] + [(0, 0)] * (t.ndim - 1))

    return dataset.map(lambda x: {k: _trim_and_pad(k, t) for k, t in x.items()},
                       num_parallel_calls=AUTOTUNE)


def trim_dataset(dataset: jdata.Dataset, sequence_length, output_features) -> jdata.Dataset:
    def _trim(k, v):
        if k not in output_features or k not in sequence_length:
            return v
        return v[:sequence_length[k]]

    return dataset.map(lambda ex: {k: _trim(k, v) for k, v in ex.items()},
                       num_parallel_calls=AUTOTUNE)


def _strip_packed_feature_key(key: str) -> str:
    def strip_suffix(k, s):
        return k[: -len(s)] if k.endswith(s) else k
    return strip_suffix(strip_suffix(key, "_positions"), "_segment_ids")


def trim_and_pack_dataset(dataset: jdata.Dataset, feature_lengths) -> jdata.Dataset:
    element_spec = dataset.element_spec
    for k in feature_lengths:
        if k not in element_spec:
            raise ValueError(f"Feature '{k}' not found in dataset. Available keys are "
                             f"{list(element_spec.keys())}")
        # PORT: tf.TensorSpec.shape.is_compatible_with(TensorShape([None])) has no
        # jdata.TensorSpec counterpart; for a rank-1 target it is a rank check.
        if element_spec[k].rank != 1:
            raise ValueError(f"Features to be packed must be one-dimensional. '{k}' is not.")
    ds = dataset.map(lambda x: {k: x[k][:n, ...] for k, n in feature_lengths.items()},
                     num_parallel_calls=AUTOTUNE)
    # Setting batch_size=length ensures that the concatenated sequences (if they have
    # length >= 1) are sufficient to fill at least one packed example.
    batch_size = max(feature_lengths.values())
    padded_shapes = {k: [-1] for k in feature_lengths}
    for k in feature_lengths:
        padded_shapes[k].extend(dataset.element_spec[k].shape[1:])
    ds = ds.padded_batch(batch_size, padded_shapes=padded_shapes)
    ds = _pack_with_numpy(ds, feature_lengths)
    # PORT: seqio's last map only calls set_shape (static shapes lost in tf.while_loop);
    # NumPy arrays always have their shape, so there is nothing to port.
    return ds


def _pack_with_numpy(dataset: jdata.Dataset, feature_lengths) -> jdata.Dataset:
    """``_pack_with_tf_ops``: its tf.while_loop over a batch is a Python loop; the
    TensorArrays are lists."""
    keys = list(feature_lengths)

    def empty_example():
        return {k + suff: np.zeros([0], np.int32) for k in keys for suff in ("", "_positions")}

    def _write_packed_example(partial, outputs):
        for k, v in partial.items():
            outputs[k].append(np.pad(v, [(0, feature_lengths[_strip_packed_feature_key(k)]
                                          - v.size)]))
        return empty_example()

    def pack_batch(x):
        partial = empty_example()
        outputs = {k: [] for k in partial}
        for i in range(x[keys[0]].shape[0]):
            one_example = {}
            for k in keys:
                val = x[k][i].astype(np.int32)
                one_example[k] = val[:np.count_nonzero(val)]
            can_append = all(partial[k].size + one_example[k].size <= feature_lengths[k]
                             for k in keys)
            if not can_append:
                partial = _write_packed_example(partial, outputs)
            for k in keys:
                new_seq = one_example[k][:feature_lengths[k]]
                partial[k] = np.concatenate([partial[k], new_seq])
                partial[k + "_positions"] = np.concatenate(
                    [partial[k + "_positions"], np.arange(new_seq.size, dtype=np.int32)])
        _write_packed_example(partial, outputs)
        packed = {k: np.stack(v) for k, v in outputs.items()}
        for k in keys:
            packed[k + "_segment_ids"] = (
                np.cumsum(packed[k + "_positions"] == 0, axis=1, dtype=np.int32)
                * (packed[k] != 0).astype(np.int32))
        return packed

    dataset = dataset.map(pack_batch, num_parallel_calls=AUTOTUNE)
    return dataset.unbatch()


def _shift_right_by_one(tensor: np.ndarray, bos_id: int = 0) -> np.ndarray:
    rolled = np.roll(tensor, 1, axis=0)
    rolled[:1] = bos_id  # tf.roll wraps around; the first position becomes bos_id
    return rolled


def make_autoregressive_inputs(targets, sequence_id=None, bos_id: int = 0) -> np.ndarray:
    output_dtype = targets.dtype
    inputs = _shift_right_by_one(targets, bos_id)
    if sequence_id is not None:
        not_first_in_sequence = (sequence_id == _shift_right_by_one(sequence_id))
        not_first_in_sequence = not_first_in_sequence.astype(output_dtype)
        first_ids = ((1 - not_first_in_sequence) * bos_id).astype(output_dtype)
        inputs = inputs * not_first_in_sequence + first_ids
    return inputs


# --- seqio/feature_converters.py ------------------------------------------------------------


def _check_lengths(ds: jdata.Dataset, expected_lengths, strict: bool,
                   error_label: str) -> jdata.Dataset:
    def _check_length(feat, v):
        if feat not in expected_lengths:
            return v
        actual, expected = v.shape[0], expected_lengths[feat]
        if strict and actual != expected:
            raise ValueError(f"Feature '{feat}' has length not equal to the expected length of "
                             f"{expected} during {error_label} validation")
        if not strict and actual > expected:
            raise ValueError(f"Feature '{feat}' has length not less than or equal to the "
                             f"expected length of {expected} during {error_label} validation")
        return v

    return ds.map(lambda ex: {k: _check_length(k, v) for k, v in ex.items()},
                  num_parallel_calls=AUTOTUNE)


def non_padding_position(tensor, dtype=np.int32, pad_id: int = 0) -> np.ndarray:
    return (tensor != pad_id).astype(dtype)


def convert_example(kind: str, pack: bool, features, bos_id: int = 0):
    """``EncDecFeatureConverter`` / ``LMFeatureConverter._convert_example``."""
    decoder_input_tokens = make_autoregressive_inputs(
        features["targets"], sequence_id=features.get("targets_segment_ids", None),
        bos_id=bos_id)
    d = {"decoder_target_tokens": features["targets"],
         "decoder_input_tokens": decoder_input_tokens,
         "decoder_loss_weights": non_padding_position(features["targets"])}
    if kind == "encdec":
        d["encoder_input_tokens"] = features["inputs"]
    if pack:
        d["decoder_segment_ids"] = features["targets_segment_ids"]
        d["decoder_positions"] = features["targets_positions"]
        if kind == "encdec":
            d["encoder_segment_ids"] = features["inputs_segment_ids"]
            d["encoder_positions"] = features["inputs_positions"]
    return d


def model_feature_lengths(kind: str, pack: bool, task_feature_lengths):
    """``get_model_feature_lengths`` of the two converters."""
    dec = task_feature_lengths["targets"]
    out = {"decoder_target_tokens": dec, "decoder_input_tokens": dec,
           "decoder_loss_weights": dec}
    if pack:
        out.update(decoder_segment_ids=dec, decoder_positions=dec)
    if kind == "encdec":
        enc = task_feature_lengths["inputs"]
        out["encoder_input_tokens"] = enc
        if pack:
            out.update(encoder_segment_ids=enc, encoder_positions=enc)
    return out


def feature_converter(kind: str, pack: bool, ds: jdata.Dataset,
                      task_feature_lengths) -> jdata.Dataset:
    """``FeatureConverter.__call__``'s length checks around ``_convert_features``."""
    ds = _check_lengths(ds, task_feature_lengths, strict=False, error_label="input_validation")
    if pack:
        ds = trim_and_pack_dataset(ds, task_feature_lengths)
    else:
        ds = trim_and_pad_dataset(ds, task_feature_lengths)
    ds = ds.map(lambda ex: convert_example(kind, pack, ex), num_parallel_calls=AUTOTUNE)
    return _check_lengths(ds, model_feature_lengths(kind, pack, task_feature_lengths),
                          strict=True, error_label="output_validation")
