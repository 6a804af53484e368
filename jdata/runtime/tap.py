"""Buffered pulls from an input, with tokens that make buffers restorable.

Ops that buffer input elements (buffer shuffle, window, group_by_window)
pull through a ``Tap``. Over a random-access input a token is the element's
index, so the op's state stores indices and a restore re-reads them; over any
other input the token is the element itself, encoded into the state.
"""

from __future__ import annotations

from jdata.runtime import state_codec, states
from jdata.runtime.iterator import IndexIterator, Iterator
from jdata.runtime.values import frozen


class Tap:
    """Pulls tokens from ``it``; ``fetch(token)`` gives the element."""

    def __init__(self, it: Iterator, op: str, input_node):
        self.it = it
        self.by_index = isinstance(it, IndexIterator)
        self._op = op
        # The input's elements, as a template for namedtuples in restored buffers.
        self._input_node = input_node

    def next_token(self):
        """The next input token; raises ``StopIteration`` at the end."""
        if self.by_index:
            i = self.it.index
            if i >= len(self.it.reader):
                raise StopIteration
            self.it.index = i + 1
            return i
        # Frozen: a snapshot holds buffered elements themselves and encodes them only
        # when get_state() asks, so a consumer must not change them in place.
        return frozen(next(self.it))

    def fetch(self, token):
        return self.it.reader[token] if self.by_index else token

    def next(self):
        """The next ``(token, element)`` pair."""
        token = self.next_token()
        return token, self.fetch(token)

    def encode(self, tokens) -> list:
        return list(tokens) if self.by_index else [state_codec.encode(t) for t in tokens]

    def decode(self, data, field: str, max_length: int | None = None) -> list:
        """Tokens from a restored state's ``field``; call after ``set_state`` of the input.

        Indices must be ones the input has served already, each once.
        """
        if self.by_index:
            return states.check_ints(data, self._op, field, 0, self.it.index - 1, max_length,
                                     distinct=True)
        data = states.check_list(data, self._op, field, max_length=max_length)
        spec = self._input_node.element_spec
        return [state_codec.decode(t, self._op, field, get_template=spec) for t in data]

    def snapshot(self):
        return self.it.snapshot()

    def set_state(self, state) -> None:
        self.it.set_state(state)
