"""Several image UDFs, random or not, as one ``random_map`` UDF: a hand fusion.

The hand-written form of what jdata's optimizer does on its own
(``random_map_fusion`` fuses adjacent ``map``s and ``random_map``s into one
stage): ``--tuning`` runs it beside the optimizer's plan, and the ``plain``
loops call it. ``Chain`` runs the kernels in one call, each random kernel
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
