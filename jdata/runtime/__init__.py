"""Physical execution: iterators, readers, buffers and their state.

Internals: the public surface is ``jdata`` (its iterators, options and errors).
"""

__all__: list[str] = []
