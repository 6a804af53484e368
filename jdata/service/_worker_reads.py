"""How a worker turns an iterator into blocks for a client, without Ray.

A read yields **blocks** of outcomes: elements, and in the place of each that
failed, a ``_blocks.Failure`` (a user function's ``UDFError``, or an
``ElementError`` for anything else the worker's pipeline raised there). Blocks
are read with ``next_many`` (one tight loop per block), grow while they are
cheap to produce (``next_block_size``), and stop at the next block once the job
is stopped (``stopped()``: its clients left, or it was removed).

``next_many`` may lose the elements of its call before a failing one, so on an
error the read opens again past the outcomes sent (``open_at``) and goes on
element by element: every outcome is sent once, in order. A *checked* read (a
client asks for one after a read failed on the worker side, as when Ray could
not pickle an element) also tries to pickle each element and sends an
``ElementError`` in the place of one that cannot be sent. A shared or coordinated
read has no such second try (its window moved on): ``sendable`` checks its blocks
before they leave, trying to pickle only what may not pickle.

``open_at(n)`` opens the read past its first ``n`` outcomes.
"""

from __future__ import annotations

import pickle
import time

import cloudpickle
import numpy as np

from jdata._errors import ElementError, UDFError
from jdata.service import _blocks

# A job's first block has FIRST_BLOCK elements (the client starts early, and an element's
# size is not known yet); blocks then double while one takes less than BLOCK_SEC to
# produce, up to BLOCK_ELEMENTS and BLOCK_BYTES (a Ray object's overhead is then small
# against its elements). A job's next reads start at the size its last read reached.
FIRST_BLOCK = 1
BLOCK_ELEMENTS = 1 << 16
BLOCK_BYTES = 4 << 20
BLOCK_SEC = 0.02


def next_block_size(size: int, produced: int, nbytes: int, seconds: float,
                    block_sec: float = BLOCK_SEC) -> int:
    """Elements to ask for next, after a block of ``produced`` elements (of the ``size``
    asked) that took ``seconds`` and weighs ``nbytes``."""
    if produced >= size and seconds < block_sec:
        size *= 2
    elif seconds > 4 * block_sec:  # the elements got costlier: the client waits less
        size //= 2
    if nbytes and produced:
        size = min(size, max(1, BLOCK_BYTES * produced // nbytes))
    return max(1, min(size, BLOCK_ELEMENTS))


def exact(it, n: int, checked: bool = False, where: int = 0) -> tuple[list, tuple, bool]:
    """Up to ``n`` outcomes of ``it`` one by one: ``(elements, failure places, broken)``.
    A ``UDFError`` is a failure in its place; any other error too (an ``ElementError``),
    after which ``broken`` says the iterator must be opened again past it. ``checked``:
    an element that cannot be pickled is sent as an ``ElementError`` instead."""
    elements, failures = [], []
    while len(elements) < n:
        try:
            element = next(it)
        except StopIteration:
            break
        except UDFError as e:
            failures.append(len(elements))
            elements.append(_blocks.Failure(e))
            continue
        except Exception as e:  # the worker's runtime, not a user function
            failures.append(len(elements))
            elements.append(_blocks.Failure(ElementError(
                where + len(elements), f"the worker raised {type(e).__name__}: {e}", e)))
            return elements, tuple(failures), True
        if checked:
            element = _sendable(element, where + len(elements))
            if type(element) is _blocks.Failure:
                failures.append(len(elements))
        elements.append(element)
    return elements, tuple(failures), False


def _sendable(element, position: int):
    """``element``, or a ``Failure`` naming why it cannot travel to the client."""
    try:
        cloudpickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)
        return element
    except Exception as e:
        return _blocks.Failure(ElementError(
            position, f"it cannot be sent to the client ({type(e).__name__}: {e})", e))


_PLAIN = (int, float, bool, bytes, str, type(None))


def _plain(x) -> bool:
    """Whether ``x`` pickles for sure: numbers, strings, NumPy arrays and scalars that
    hold no objects, and tuples, lists and dicts of those."""
    kind = type(x)
    if kind is np.ndarray or isinstance(x, np.generic):
        return x.dtype.kind != "O"
    if kind in _PLAIN:
        return True
    if kind is tuple or kind is list:
        return all(map(_plain, x))
    return kind is dict and all(type(k) in _PLAIN and _plain(v) for k, v in x.items())


def sendable(elements: list, failures: tuple, where: int) -> tuple[list, tuple]:
    """``elements`` (the first at position ``where``) with each that cannot be pickled
    replaced by its ``ElementError``, and ``failures`` grown to match."""
    out, places = elements, set(failures)
    for i, element in enumerate(elements):
        if i in places or _plain(element):
            continue
        checked = _sendable(element, where + i)
        if type(checked) is _blocks.Failure:
            out = out if out is not elements else list(elements)
            out[i] = checked
            places.add(i)
    return out, tuple(sorted(places))


def stream(open_at, skip: int, *, size: int, compression: str | None, stats,
           stopped, checked: bool = False, sizes: dict | None = None, key=None):
    """The blocks (packed) of ``open_at(skip)``'s outcomes; see the module docstring.

    ``stats.producing()`` spans the making of each block and ``stats.add(elements, bytes,
    seconds)`` counts it; ``sizes[key]`` keeps the block size reached for the next read
    of the same plan.
    """
    it = open_at(skip)
    sent, one_by_one = skip, checked
    try:
        while not stopped():
            began = time.perf_counter()
            failures: tuple = ()
            broken = False
            with stats.producing():  # not the wait for the reader, after the yield
                if one_by_one:
                    elements, failures, broken = exact(it, size, checked, sent)
                else:
                    try:
                        elements = it.next_many(size)
                    except Exception:  # a UDFError or worse: again from the last block sent
                        it.close()
                        it, one_by_one = open_at(sent), True
                        continue
                if not elements:
                    return
                sent += len(elements)
                payload = _blocks.encode(elements, failures)
                nbytes = _blocks.nbytes(payload, elements)
            seconds = time.perf_counter() - began
            stats.add(len(elements), nbytes, seconds)
            size = next_block_size(size, len(elements), nbytes, seconds)
            if sizes is not None:
                sizes[key] = size
            yield _blocks.pack(payload, failures, nbytes, compression)
            if broken:  # past the failure: an iterator that raised may not go on
                it.close()
                it = open_at(sent)
    finally:
        it.close()
