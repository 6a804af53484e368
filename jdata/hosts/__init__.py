"""Multi-host input: per-host batch sizes and global ``jax.Array``s (``Dataset.to_global``).

>>> import jdata
>>> jdata.hosts.per_host_batch_size(256, num_processes=4)
64
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jdata._dataset import Dataset

__all__ = ["per_host_batch_size", "shard_for_this_host"]


def per_host_batch_size(global_batch_size: int, num_processes: int | None = None) -> int:
    """The batch each host reads so that the hosts' batches make ``global_batch_size``.

    ``num_processes`` defaults to ``jax.process_count()``. A global batch that
    the processes cannot split evenly is a ``ValueError`` that names both.
    """
    if num_processes is None:
        import jax

        num_processes = jax.process_count()
    for name, value in (("global_batch_size", global_batch_size),
                        ("num_processes", num_processes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"per_host_batch_size: {name}={value!r} must be a positive int")
    if global_batch_size % num_processes:
        raise ValueError(
            f"per_host_batch_size: a global batch of {global_batch_size} does not split "
            f"evenly over {num_processes} processes; use a multiple of {num_processes} "
            f"(e.g. {global_batch_size - global_batch_size % num_processes or num_processes})")
    return global_batch_size // num_processes


def shard_for_this_host(ds: Dataset) -> Dataset:
    """``ds.shard(jax.process_count(), jax.process_index())``: this host's disjoint part."""
    import jax

    return ds.shard(jax.process_count(), jax.process_index())
