"""What every physical iterator of one pipeline shares."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from jdata._options import Options
from jdata.runtime import memory

if TYPE_CHECKING:
    from jdata.runtime.autotune import Autotuner


@dataclasses.dataclass
class Context:
    """Run-wide settings passed to every iterator factory.

    ``options`` are the merged ``Options`` of the whole plan. The autotuner
    (which also gathers the statistics) is created on first use.
    """

    options: Options = dataclasses.field(default_factory=Options)
    _tuner: Autotuner | None = None
    # The dataset's optimized plan, under which worker processes are parked for its
    # later iterators (jdata.runtime.persistent); None (a worker's context): never.
    pool_home: object = None
    # Set for the iterators that read a few elements to find an element_spec
    # (jdata._probe): from_generator keeps what they read for the real pass.
    probing: bool = False
    # The per-op tallies of an iterator's plan (jdata._opregistry.OpRegistry); None
    # (a probe's or a worker's context): ops are not counted.
    ops: object = None

    def __post_init__(self):
        # The pipeline's ram_budget counts for the whole process while it lives.
        self._claim = memory.Claim(self.options.ram_budget)

    def autotuner(self) -> Autotuner:
        if self._tuner is None:
            from jdata.runtime import autotune, executors

            options = self.options
            self._tuner = autotune.Autotuner(
                options.autotune, options.cpu_budget or executors.usable_cores())
        return self._tuner

    def stop_tuner(self) -> None:
        """Stops the autotuner's thread, if one was started (the pipeline is closing)."""
        if self._tuner is not None:
            self._tuner.stop()

    def renew_tuner(self) -> None:
        """Stops the autotuner, if one was started: stages built next get a new one (an
        ended stream's stages are built again by a restore)."""
        self.stop_tuner()
        self._tuner = None
