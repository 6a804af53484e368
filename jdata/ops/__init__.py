"""One module per op: its logical node and its physical iterator/reader.

The op modules are internals; ``jdata.ops.image`` (image UDFs) is public.
"""

__all__ = ["image"]
