"""shuffle: a full permutation or tf.data's buffer shuffle. See ``Dataset.shuffle``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner, _random
from jdata._plan import Node, Unchanged
from jdata.runtime import states
from jdata.runtime.iterator import Iterator
from jdata.runtime.tap import Tap

_SALT = _random.salt("shuffle")
# Permuted indices are computed this many positions at a time: one NumPy call
# per block instead of one per element.
_PERMUTATION_BLOCK = 1024


@dataclasses.dataclass(frozen=True, eq=False)
class ShuffleNode(Unchanged):
    """See ``Dataset.shuffle``."""

    input: Node
    key: np.ndarray
    buffer_size: int | None
    reshuffle_each_iteration: bool = True
    op_name: ClassVar[str] = "shuffle"
    random: ClassVar[bool] = True
    keeps_count: ClassVar[bool] = True

    def random_access(self) -> bool:
        return self.buffer_size is None and self.input.random_access()

    def random_epoch(self, epoch: int) -> int:
        """The epoch the shuffle's randomness uses: fixed when not reshuffling."""
        return epoch if self.reshuffle_each_iteration else 0

    def __str__(self):
        size = "full" if self.buffer_size is None else self.buffer_size
        return (f"Shuffle(buffer_size={size}, "
                f"reshuffle_each_iteration={self.reshuffle_each_iteration})")


def tf_style_error(args: tuple, kwargs: dict, error: TypeError | None = None) -> TypeError:
    """The help for a call written in tf.data's order, ``shuffle(buffer_size, seed)``.

    tf.data's first argument is the buffer size; jdata's is a key. Following
    the generic hint (``key=jax.random.key(1024)``) would silently turn a
    buffer of 1024 into a full shuffle, so the message spells out both.
    """
    names = ("key", "buffer_size", "reshuffle_each_iteration")
    if error is not None and (set(kwargs) - {*names, "seed"} or len(args) > len(names)):
        return TypeError(f"shuffle: {error}")  # not a tf.data call: Python's message says why
    is_int = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)  # noqa: E731
    first = args[0] if args else kwargs.get("key")
    size, seed = kwargs.get("buffer_size"), kwargs.get("seed")
    if is_int(first):  # tf.data's buffer size where jdata's key goes
        size = first
        if seed is None and len(args) > 1 and is_int(args[1]):
            seed = args[1]  # tf.data's shuffle(1024, 42)
    elif len(args) > 1:
        size = args[1]
    shown = ", ".join([_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()])
    size_text = "N" if not is_int(size) else int(size)
    seed_text = "seed" if not is_int(seed) else int(seed)
    return TypeError(
        f"shuffle({shown}): jdata's shuffle takes a JAX PRNG key first, then buffer_size "
        f"(tf.data's takes the buffer size first, then seed=). tf.data's "
        f"shuffle({size_text}, seed={seed_text}) is a buffer shuffle of {size_text} elements; "
        f"in jdata write ds.shuffle(jax.random.key({seed_text}), buffer_size={size_text}). "
        "(ds.shuffle(key) without buffer_size is a full shuffle of the whole input, which "
        "needs a random-access input.)")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"<{type(value).__name__}>"


class _PermutedReader:
    """Element ``i`` is the input's element ``perm(i)``: a full shuffle in O(1) memory."""

    def __init__(self, node: ShuffleNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self._len = len(self._input)
        self._permutation = _random.Permutation(self._len, node.key, _SALT,
                                                node.random_epoch(epoch))
        self._start = -1
        self._block = np.empty(0, np.int64)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        offset = index - self._start
        if not 0 <= offset < len(self._block):
            self._start = index - index % _PERMUTATION_BLOCK
            stop = min(self._start + _PERMUTATION_BLOCK, self._len)
            self._block = self._permutation(np.arange(self._start, stop))
            offset = index - self._start
        return self._input[int(self._block[offset])]


class _BufferShuffleIterator(Iterator):
    """tf.data's shuffle buffer: each output is drawn uniformly from the buffer.

    Before draw ``t`` the buffer is topped up to ``buffer_size`` elements, so
    output ``t`` comes from inputs ``< t + buffer_size``; the drawn slot is
    filled with the last one. Draw ``t`` uses the uniform of position ``t``.
    Over a random-access input the buffer holds indices (see ``Tap``), and an
    element is read only when it is emitted. The buffer is journaled, so a
    snapshot costs O(1) however big it is; ``get_state`` builds the list.
    """

    def __init__(self, node: ShuffleNode, ctx, epoch: int):
        self._tap = Tap(_planner.make_iterator(node.input, ctx, epoch), "shuffle", node.input)
        self._buffer_size = node.buffer_size
        self._uniforms = _random.UniformBlocks(node.key, _SALT, node.random_epoch(epoch))
        self._buffer: list = []
        self._journal = states.Journal(self._buffer, list, _redo, len)
        self._draws = 0
        self._exhausted = False

    def __next__(self):
        self._top_up()
        buffer = self._buffer
        if not buffer:
            raise StopIteration
        slot = int(self._uniforms[self._draws] * len(buffer))
        self._draws += 1
        token = buffer[slot]
        buffer[slot] = buffer[-1]
        buffer.pop()
        self._journal.log(~slot)
        return self._tap.fetch(token)

    def _top_up(self) -> None:
        # An input error leaves the buffer as it is, with the input past the
        # failing element, so the next call simply continues filling.
        buffer, journal = self._buffer, self._journal
        while not self._exhausted and len(buffer) < self._buffer_size:
            try:
                token = self._tap.next_token()
            except StopIteration:
                self._exhausted = True
                break
            buffer.append(token)
            journal.log(_logged(token))

    def snapshot(self):
        return {"input": self._tap.snapshot(), "buffer": self._journal.capture(self._tap.encode),
                "draws": self._draws, "exhausted": self._exhausted}

    def set_state(self, state):
        fields = states.Fields(state, "shuffle", ("input", "buffer", "draws", "exhausted"))
        draws, exhausted = fields.int("draws"), fields.bool("exhausted")
        self._tap.set_state(state["input"])
        self._buffer = self._tap.decode(state["buffer"], "buffer", self._buffer_size)
        self._journal.reset(self._buffer)
        self._draws, self._exhausted = draws, exhausted

    def close(self):
        self._tap.it.close()


def _logged(token):
    """How an appended token is journaled: as it is, without a container per element
    for the garbage collector to track (drawn slots are logged as ``~slot < 0``), unless
    it could be mistaken for a slot or a wrapped token: then in a 1-tuple."""
    if type(token) is int:
        return token if token >= 0 else (token,)
    return (token,) if type(token) is tuple else token


def _redo(buffer: list, op) -> None:
    """Replays one journaled change (see ``_logged``)."""
    if type(op) is int and op < 0:
        buffer[~op] = buffer[-1]
        buffer.pop()
    else:
        buffer.append(op[0] if type(op) is tuple else op)


def _iterator(node: ShuffleNode, ctx, epoch: int):
    if node.buffer_size is None:
        # Dataset.shuffle checks this; a plan rewritten into this shape is a bug.
        raise ValueError(f"shuffle: a full shuffle needs a random-access input, got {node.input}")
    return _BufferShuffleIterator(node, ctx, epoch)


_planner.register(ShuffleNode, iterator=_iterator, reader=_PermutedReader)
