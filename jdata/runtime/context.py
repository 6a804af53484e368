"""What every physical iterator of one pipeline shares."""

from __future__ import annotations

import dataclasses

from jdata._options import Options


@dataclasses.dataclass
class Context:
    """Run-wide settings passed to every iterator factory.

    ``options`` are the merged ``Options`` of the whole plan. The autotuner
    (which also gathers the statistics) is created on first use.
    """

    options: Options = dataclasses.field(default_factory=Options)
    _tuner: object = None

    def autotuner(self):
        if self._tuner is None:
            from jdata.runtime import autotune, executors

            options = self.options
            self._tuner = autotune.Autotuner(
                options.autotune, options.cpu_budget or executors.usable_cores(),
                options.ram_budget or autotune.default_ram_budget())
        return self._tuner
