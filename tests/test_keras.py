"""``jdata.keras.adapt``: Keras 3 (JAX backend) trains on jdata pipelines, with tf.data's epochs."""

from __future__ import annotations

import os

# Before keras is first imported, which fixes its backend for the process.
os.environ["KERAS_BACKEND"] = "jax"

import jax
import keras
import numpy as np
import pytest

import jdata
from jdata.keras import adapt

N, BATCH = 64, 16  # 4 batches per epoch
_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(N, 4)).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 3.0, 0.5], np.float32))[:, None]


class StepCounter(keras.callbacks.Callback):
    """Training and validation batches seen in each epoch."""

    def __init__(self):
        super().__init__()
        self.train, self.test = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.train.append(0)
        self.test.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.train[-1] += 1

    def on_test_batch_end(self, batch, logs=None):
        self.test[-1] += 1


def _model(inputs=None) -> keras.Model:
    """A linear model, built and compiled: ``fit`` then reads no batch to build it."""
    assert keras.backend.backend() == "jax", "run with KERAS_BACKEND=jax (or unset)"
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(X[:BATCH], Y[:BATCH], epochs=1, verbose=0)
    return model


def _counting_iterators(datasets, run):
    """What ``run()`` returns, and how many iterators of each dataset it made (each new
    iterator takes the next epoch, see ``Dataset.iterator``; the probes take one each)."""
    before = [ds.iterator().epoch for ds in datasets]
    result = run()
    return result, [ds.iterator().epoch - 1 - b for ds, b in zip(datasets, before)]


def _fit(model, ds, **kw) -> tuple[keras.callbacks.History, StepCounter, int]:
    counter = StepCounter()
    history, [made] = _counting_iterators(
        [ds], lambda: model.fit(adapt(ds), verbose=0, callbacks=[counter], **kw))
    return history, counter, made


def _train() -> jdata.Dataset:
    return jdata.from_tensor_slices((X, Y)).shuffle(jax.random.key(1)).batch(BATCH)


def test_a_finite_dataset_is_read_whole_each_epoch_by_a_fresh_iterator():
    ds, val = _train(), jdata.from_tensor_slices((X[:32], Y[:32])).batch(BATCH)
    model, counter = _model(), StepCounter()
    history, made = _counting_iterators([ds, val], lambda: model.fit(
        adapt(ds), epochs=2, validation_data=adapt(val), verbose=0, callbacks=[counter]))
    assert counter.train == [4, 4] and counter.test == [2, 2]
    assert made == [2, 2]
    loss = history.history["loss"]
    assert loss[1] < loss[0] and len(history.history["val_loss"]) == 2


def test_each_epoch_reshuffles_as_the_datasets_iterators_do():
    adapter, twin = adapt(_train()), _train()
    seen = [[y.tolist() for _, y in adapter.get_jax_iterator()] for _ in range(2)]
    assert seen == [[y.tolist() for _, y in twin.iterator()] for _ in range(2)]
    assert seen[0] != seen[1]


def test_an_infinite_dataset_goes_on_across_epochs_with_steps_per_epoch():
    ds = jdata.from_tensor_slices((X, Y)).repeat().batch(BATCH)
    history, counter, made = _fit(_model(), ds, epochs=2, steps_per_epoch=3)
    assert counter.train == [3, 3] and made == 1
    assert history.history["loss"][1] < history.history["loss"][0]


def test_steps_per_epoch_below_a_finite_size_goes_on_then_starts_again():
    _, counter, made = _fit(_model(), _train(), epochs=3, steps_per_epoch=2)
    assert counter.train == [2, 2, 2] and made == 2  # batches 1-2, 3-4, then a new epoch


def test_sample_weights_and_named_inputs():
    a, b = keras.Input((2,), name="a"), keras.Input((2,), name="b")
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    model.compile(optimizer="sgd", loss="mse")
    inputs = {"a": X[:, :2], "b": X[:, 2:]}
    zero = jdata.from_tensor_slices((inputs, Y, np.zeros(N, np.float32))).batch(BATCH)
    history = model.fit(adapt(zero), epochs=2, verbose=0)
    assert history.history["loss"] == [0.0, 0.0]  # every example weighs nothing
    predicted = model.predict(adapt(jdata.from_tensor_slices(inputs).batch(BATCH)), verbose=0)
    assert predicted.shape == (N, 1)


def test_elements_that_are_not_keras_batches_are_refused():
    with pytest.raises(ValueError, match=r"not Keras batches.*\(x, y\)"):
        adapt(jdata.from_tensor_slices(X).batch(BATCH))
    with pytest.raises(ValueError, match="not Keras batches"):
        adapt(jdata.from_tensor_slices((X, Y, Y, Y)).batch(BATCH))
    with pytest.raises(ValueError, match=r"y holds a scalar.*ds\.batch\(batch_size\)"):
        adapt(jdata.from_tensor_slices((X, Y[:, 0])))
    with pytest.raises(TypeError, match="an iterator: pass its dataset"):
        adapt(_train().iterator())
    with pytest.raises(TypeError, match="pass a jdata.Dataset"):
        adapt((X, Y))
    with pytest.raises(NotImplementedError, match="KERAS_BACKEND=jax"):
        adapt(_train()).get_tf_dataset()


def test_without_keras_the_error_names_the_extra(monkeypatch):
    import sys

    import jdata.keras

    monkeypatch.setitem(sys.modules, "keras.src.trainers.data_adapters.data_adapter", None)
    with pytest.raises(ImportError, match=r"pip install 'jdata-jax\[keras\]'"):
        jdata.keras._adapter_class.__wrapped__()  # uncached: the import is tried again
