"""A griffe extension for the API reference: docstrings' doctests render as code.

jdata's docstrings show ``>>>`` examples in their text, as the standard library's do, rather
than under an ``Examples:`` heading; Markdown would read them as nested quotes and their
outputs (``[1, 2]``) as links. This wraps each run of doctest lines in a ``pycon`` fence before
mkdocstrings parses the docstring. Only the site sees the change: the sources and
``--doctest-modules`` read the docstrings as written.
"""

from __future__ import annotations

import re

import griffe

_FENCE = re.compile(r"^\s*(```|~~~)")


def fence_doctests(text: str) -> str:
    """``text`` with every run of lines from a ``>>>`` line to the next blank line fenced."""
    out: list[str] = []
    indent = None  # the indentation of the open doctest run, if any
    in_fence = False
    for line in text.split("\n"):
        if indent is not None and not line.strip():
            out.append(indent + "```")
            indent = None
        elif indent is None and _FENCE.match(line):
            in_fence = not in_fence
        elif indent is None and not in_fence and line.lstrip().startswith(">>>"):
            indent = line[:len(line) - len(line.lstrip())]
            out.append(indent + "```pycon")
        out.append(line)
    if indent is not None:
        out.append(indent + "```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fences the doctests of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
