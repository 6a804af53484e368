"""Several image UDFs, random or not, as one ``random_map`` UDF: a hand fusion.

jdata's ``map_fusion`` fuses consecutive ``map``s but not ``random_map``s, so a
pipeline of one ``random_map`` per kernel hands every element from thread to
thread once per kernel. ``Chain`` runs them in one call, each random kernel
with a key of its own split from the element's (``image.split_key``), so that
two kernels do not draw the same numbers.
"""

from __future__ import annotations


class Chain:
    """``fns``, ``(random, fn)`` pairs, applied in order to an element (a tuple element
    unpacked, as ``map`` does); picklable if the UDFs are."""

    def __init__(self, *fns):
        self.fns = fns
        self.__name__ = self.__qualname__ = "chain(" + ", ".join(
            getattr(fn, "__qualname__", type(fn).__name__) for _, fn in fns) + ")"

    def __call__(self, *args):
        from jdata.ops import image

        *element, key = args
        for (random, fn), subkey in zip(self.fns, image.split_key(key, len(self.fns))):
            out = fn(*element, subkey) if random else fn(*element)
            element = list(out) if isinstance(out, tuple) else [out]
        return tuple(element) if len(element) > 1 else element[0]
