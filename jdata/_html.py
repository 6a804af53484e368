"""Notebook displays (``_repr_html_``) of datasets and iterators.

Everything shown is text that jdata or the user wrote (plans print UDF names
such as ``<lambda>``), so every piece is escaped: nothing in a plan can
become markup in the notebook.
"""

from __future__ import annotations

import html


def block(title: str, rows: list[tuple[str, str]], text: str) -> str:
    """A title, a table of ``(name, value)`` rows and ``text`` in a ``<pre>``, escaped."""
    cells = "".join(
        f"<tr><th style=\"text-align:left\">{html.escape(name)}</th>"
        f"<td style=\"text-align:left\">{html.escape(value)}</td></tr>" for name, value in rows)
    table = f"<table>{cells}</table>" if rows else ""
    return f"<div><strong>{html.escape(title)}</strong>{table}<pre>{html.escape(text)}</pre></div>"


def described(describe, fallback: str) -> str:
    """``describe()``, or ``fallback`` and why not: a display must not raise."""
    try:
        return describe()
    except Exception as e:
        return f"{fallback}\n({type(e).__name__}: {e})"
