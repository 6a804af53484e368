"""Ray Data as a Cedar peer: a local Ray on the loopback interface for one stream
(Cedar's NLP and ASR, SimCLR and SSD).

A stream is ``ray.data.range`` over element indices (cycled ``_EPOCHS`` times for an
infinite stream: Ray Data has no ``repeat``) mapped by an actor class in batches, the
actors holding the workload's data; Ray starts with the stream and shuts down when it is
closed.
"""

from __future__ import annotations

import numpy as np

_EPOCHS = 50  # "forever" for a measurement of seconds
_CPUS = 2
# Two actors of half a CPU leave Ray Data's read tasks (1 CPU each) room on the 2 CPUs.
_ACTOR_CPUS = 0.5
_ROWS_PER_BLOCK = 256


class Indexed:
    """An actor's map of a batch of ``{"id": indices}`` to ``{"x": stacked items}`` (an item
    that is a tuple: ``{"x0": ..., "x1": ...}``, each part stacked), where ``item(i)`` makes
    element ``i % count``; ``make(*args)`` builds ``item`` once per actor."""

    def __init__(self, make, count: int, *args):
        self.item, self.count = make(*args), count

    def __call__(self, batch: dict) -> dict:
        items = [self.item(int(i) % self.count) for i in batch["id"]]
        if isinstance(items[0], tuple):
            return {f"x{k}": np.stack(part) for k, part in enumerate(zip(*items))}
        return {"x": np.stack(items)}


def stream(make, args: tuple, count: int, batch_size: int, repeat: bool):
    """Batches of ``batch_size`` items of ``make(*args)(i)``, ``i`` over ``0..count-1``
    (cycled with ``repeat``), from Ray Data on a local Ray bound to 127.0.0.1."""
    import ray

    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
             num_cpus=_CPUS, log_to_driver=False)
    try:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        rows = count * (_EPOCHS if repeat else 1)
        ds = ray.data.range(rows, override_num_blocks=max(1, rows // _ROWS_PER_BLOCK))
        ds = ds.map_batches(Indexed, fn_constructor_args=(make, count, *args),
                            batch_size=batch_size, concurrency=2, num_cpus=_ACTOR_CPUS)
        for batch in ds.iter_batches(batch_size=batch_size, batch_format="numpy"):
            yield batch["x"] if "x" in batch else tuple(batch[f"x{k}"]
                                                        for k in range(len(batch)))
    finally:
        ray.shutdown()
