"""An mkdocs hook: the guides' tagged code blocks render as Python code.

The tests read a block's info string for what to do with it (``tests/test_docs.py``):
```` ```python tf.data ```` is shown for comparison, ```` ```python needs flax ```` needs a
library the tests do not install. Markdown takes an info string of more than one word for
no fence at all: the block would render as a paragraph, its comments as headings. The site
gets ```` ```python ```` and, above the block, what the tag says.
"""

from __future__ import annotations

import re

_TAGGED = re.compile(r"^```python[ \t]+(\S[^\n]*?)[ \t]*$", re.M)


def _caption(tag: str) -> str:
    if tag == "tf.data":
        return ""  # the guide says "**tf.data**" above these itself
    if tag.startswith("needs "):
        return f"*Needs `{tag.removeprefix('needs ')}` (not run by the tests).*\n\n"
    return ""


def untag(markdown: str) -> str:
    """``markdown`` with every ```` ```python <tag> ```` fence made ```` ```python ````.

    >>> print(untag("```python needs torch\\nimport torch\\n```"))
    *Needs `torch` (not run by the tests).*
    <BLANKLINE>
    ```python
    import torch
    ```
    """
    return _TAGGED.sub(lambda m: _caption(m.group(1)) + "```python", markdown)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    return untag(markdown)
