"""Keras 3 training on jdata pipelines (``pip install 'jdata-jax[keras]'``).

Keras accepts tf.data, grain and PyTorch loaders by type and refuses anything
else ("Unrecognized data type"), but it takes any of its own ``DataAdapter``
objects as they are. ``adapt(ds)`` is one::

    model.fit(jdata.keras.adapt(train), epochs=3,
              validation_data=jdata.keras.adapt(val))

Epochs work as with a ``tf.data.Dataset``:

- a finite dataset (known cardinality) is read whole each epoch, by a fresh
  ``ds.iterator()``: a ``shuffle`` reshuffles and ``random_map`` draws new keys
  each epoch, as jdata's epochs do. With ``steps_per_epoch`` below its size, one
  iterator goes on across epochs and a fresh one starts when it is used up;
- an infinite dataset (``repeat()``) needs ``steps_per_epoch`` (otherwise the
  first epoch never ends, as with tf.data): one iterator goes on across epochs.

Elements are what Keras expects of a batch: ``(x,)``, ``(x, y)`` or
``(x, y, sample_weight)``, where each part may be an array, a tuple or a dict
(named model inputs); or a dict alone (``x`` only: named inputs, for ``predict``
or a model that computes its own loss). Every array has a batch dimension
(``ds.batch(n)``). Anything else is refused when the dataset is adapted.

Keras builds a model by reading one batch of a first iterator, as it does with
tf.data (which also reshuffles per iterator): on a model's first ``fit`` that
iterator takes one of the dataset's epochs. The iterators Keras asks for but
never reads (it asks for the next epoch's twice) start nothing and take none.

The adapter is for Keras's JAX backend (``KERAS_BACKEND=jax``), which takes
jdata's NumPy batches as they are; the TensorFlow and PyTorch backends are
refused with that advice.
"""

from __future__ import annotations

import functools

from jdata import _tree
from jdata._constants import INFINITE, UNKNOWN
from jdata._extras import require
from jdata._spec import TensorSpec

_PARTS = ("x", "y", "sample_weight")


def adapt(dataset):
    """A Keras ``DataAdapter`` over ``dataset``: pass it wherever Keras takes data.

    Args:
      dataset: a batched ``jdata.Dataset`` whose elements are ``(x, y)``,
        ``(x,)``, ``(x, y, sample_weight)`` or a dict of named inputs.

    Returns:
      An object that ``model.fit``, ``evaluate`` and ``predict`` accept as ``x``
      or ``validation_data`` (with no ``y``: the targets are in the elements).
      Each epoch reads a fresh ``dataset.iterator()`` (see the module's
      documentation for ``steps_per_epoch`` and infinite datasets).

    Raises:
      TypeError: ``dataset`` is not a ``jdata.Dataset``, or its elements hold
        something other than arrays (datasets, from ``window``).
      ValueError: its elements are not Keras batches (the message says why).
      MissingExtraError: Keras 3 is not installed (an ``ImportError``).
    """
    import jdata

    if not isinstance(dataset, jdata.Dataset):
        hint = (" (an iterator: pass its dataset, each epoch needs a fresh iterator)"
                if isinstance(dataset, jdata.DatasetIterator) else "")
        raise TypeError(f"jdata.keras.adapt: dataset={dataset!r:.80} is a "
                        f"{type(dataset).__name__}{hint}; pass a jdata.Dataset")
    _check_batches(dataset.element_spec)
    return _adapter_class()(dataset)


def _check_batches(spec) -> None:
    """``ValueError`` unless elements of ``spec`` are batches Keras can unpack."""
    if isinstance(spec, dict):
        parts = {"x": spec}
    elif isinstance(spec, (tuple, list)) and 1 <= len(spec) <= len(_PARTS):
        parts = dict(zip(_PARTS, spec))
    else:
        raise ValueError(
            f"jdata.keras.adapt: the dataset's elements ({spec!r:.200}) are not Keras "
            "batches: Keras takes (x, y), (x,), (x, y, sample_weight) or a dict of named "
            "inputs. Map them into one, e.g. ds.map(lambda image, label: (image, label)) "
            "for a model's inputs and targets, or ds.map(lambda x: (x,)) for predict")
    for part, part_spec in parts.items():
        for leaf in _tree.flatten(part_spec)[0]:
            if not isinstance(leaf, TensorSpec):
                raise TypeError(f"jdata.keras.adapt: {part} holds {leaf!r:.80}, not an "
                                "array; Keras batches hold arrays only")
            if not leaf.shape:
                raise ValueError(
                    f"jdata.keras.adapt: {part} holds a scalar ({leaf!r}), so the elements "
                    "are not batches: batch the dataset first (ds.batch(batch_size))")


@functools.cache
def _adapter_class():
    """``DatasetAdapter``, made once Keras is imported (jdata itself never imports it)."""
    # Keras has no public path to its adapter base class: the one Keras 3 defines.
    DataAdapter = require("keras.src.trainers.data_adapters.data_adapter",
                          "jdata.keras (Keras 3, its JAX backend)").DataAdapter

    class DatasetAdapter(DataAdapter):
        """Feeds a ``jdata.Dataset`` to Keras, a fresh iterator per epoch (``adapt``)."""

        def __init__(self, dataset):
            self._dataset = dataset
            cardinality = dataset.cardinality()
            self._num_batches = None if cardinality in (INFINITE, UNKNOWN) else cardinality

        def __repr__(self):
            return f"jdata.keras.adapt({self._dataset!r})"

        def get_numpy_iterator(self):
            # jdata's batches are NumPy arrays already: no conversion per batch.
            return _started_on_first_next(self._dataset)

        get_jax_iterator = get_numpy_iterator

        def get_tf_dataset(self):
            raise _backend_refused("tensorflow")

        def get_torch_dataloader(self):
            raise _backend_refused("torch")

        @property
        def num_batches(self):
            return self._num_batches

        @property
        def batch_size(self):
            leaves = _tree.flatten(self._dataset.element_spec)[0]
            return leaves[0].shape[0] if leaves else None

        @property
        def has_partial_batch(self):
            return None  # unknown, as for tf.data

        @property
        def partial_batch_size(self):
            return None

    return DatasetAdapter


def _started_on_first_next(dataset):
    """``dataset``'s batches, from an iterator made at the first ``next()``.

    Keras asks for the next epoch's iterator as soon as an epoch ends, and again when
    the next epoch begins: made eagerly, the first of the two would start threads and
    processes for nothing and take an epoch (a shuffle order) that no batch is read
    from. Dropped unread, this generator makes nothing.
    """
    # A loop rather than ``yield from``: dropping the generator then drops the iterator
    # without close(), which keeps its worker processes for the next epoch's iterator.
    for batch in dataset.iterator():  # noqa: UP028
        yield batch


def _backend_refused(backend: str) -> NotImplementedError:
    return NotImplementedError(
        f"jdata.keras feeds Keras's JAX backend, not its {backend} backend: set "
        "KERAS_BACKEND=jax before keras is imported")
