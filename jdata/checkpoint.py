"""Orbax checkpointing of jdata iterators, beside the model's state (``pip install
'jdata-jax[orbax]'``).

Each process writes its iterator's state (small JSON: indices and counters)
to ``process_<index>-of-<count>.json`` in the item's directory, and reads
its own file back on restore, as grain's handler does::

    import orbax.checkpoint as ocp
    import jdata.checkpoint

    manager = ocp.CheckpointManager(directory)
    it = ds.iterator()
    ...
    manager.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(params), data=jdata.checkpoint.CheckpointSave(it)))
    ...
    restored = manager.restore(step, args=ocp.args.Composite(
        model=ocp.args.StandardRestore(params),
        data=jdata.checkpoint.CheckpointRestore(ds.iterator())))
    it = restored.data  # goes on exactly after the last batch the saved run consumed

The state is read when ``CheckpointSave`` is made, so asynchronous
checkpointing (the default of ``CheckpointManager``) records the position of
that step even though the file is written later.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from jdata._extras import require

require("orbax.checkpoint", "jdata.checkpoint")  # missing: an error naming the extra
import orbax.checkpoint as ocp  # noqa: E402

from jdata._iterator import DatasetIterator

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]


def _filename() -> str:
    import jax

    return f"process_{jax.process_index()}-of-{jax.process_count()}.json"


def _restore_item(args: tuple[Any, ...], kwargs: dict[str, Any]) -> DatasetIterator:
    arg = args[0] if args else kwargs.get("args")
    item = getattr(arg, "item", None)
    if not isinstance(item, DatasetIterator):
        raise TypeError("jdata.checkpoint: restore needs CheckpointRestore(iterator) with a "
                        f"jdata iterator, not {arg!r}")
    return item


class CheckpointHandler(ocp.CheckpointHandler):
    """Saves and restores a ``jdata.DatasetIterator``'s state, one JSON file per process."""

    def save(self, directory: Path, *args: Any, **kwargs: Any) -> None:
        arg = args[0] if args else kwargs.get("args")
        state = getattr(arg, "state", None)
        if state is None:
            raise TypeError(f"jdata.checkpoint: save needs CheckpointSave(iterator), not {arg!r}")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _filename()).write_text(json.dumps(state))

    def restore(self, directory: Path, *args: Any, **kwargs: Any) -> DatasetIterator:
        item = _restore_item(args, kwargs)
        path = directory / _filename()
        if not path.exists():
            raise FileNotFoundError(
                f"jdata.checkpoint: no iterator state at {path}; the checkpoint was saved by "
                "another number of processes, or without the data item")
        item.set_state(json.loads(path.read_text()))
        return item

    def metadata(self, directory: Path) -> Any:
        return None

    def close(self) -> None:
        pass


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """Saves ``item``'s position (``manager.save(step, args=...)``).

    The position is read here, when the step is saved: an asynchronous save
    that writes later still records this step's position.
    """

    item: DatasetIterator
    state: dict[str, Any] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.item, DatasetIterator):
            raise TypeError("jdata.checkpoint: CheckpointSave(item) needs a jdata iterator "
                            f"(ds.iterator()), not {self.item!r}")
        self.state = self.item.get_state()


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Moves ``item`` (a new iterator of the same dataset) to the saved position."""

    item: DatasetIterator
