"""ignore_errors: drops elements whose UDF raised. See ``Dataset.ignore_errors``."""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar

from jdata import _planner
from jdata._constants import UNKNOWN
from jdata._errors import DataError, UDFError
from jdata._plan import Node, Unchanged
from jdata.runtime.iterator import UnaryIterator

_LOGGER = logging.getLogger("jdata")


@dataclasses.dataclass(frozen=True, eq=False)
class IgnoreErrorsNode(Unchanged):
    """See ``Dataset.ignore_errors``."""

    input: Node
    log_warning: bool = False
    op_name: ClassVar[str] = "ignore_errors"

    def cardinality(self) -> int:
        return 0 if self.input.cardinality() == 0 else UNKNOWN


class _IgnoreErrorsIterator(UnaryIterator):
    """Retries ``next`` after a ``UDFError``; the input has already moved past the element.

    Only ``UDFError`` is caught: any other exception means a broken iterator
    (or a bug in jdata), which might raise again forever, or a file that cannot
    be read at all (an ``OSError``), which skipping would turn into silence.
    """

    OP = "ignore_errors"

    def __init__(self, node: IgnoreErrorsNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._log_warning = node.log_warning
        self._dropped = ctx.autotuner().count_dropped("ignore_errors")

    def __next__(self):
        while True:
            try:
                return next(self._input)
            except UDFError as e:  # DataError (an unreadable record) included
                self._count(e)
                if self._log_warning:
                    _LOGGER.warning("ignore_errors: dropped an element: %s", e)

    def _count(self, error: UDFError) -> None:
        if not isinstance(error, DataError):
            self._dropped["udf_errors"] += 1
            return
        self._dropped["unreadable_records"] += 1
        # A record whose damage hides the rest of its file loses that rest too.
        self._dropped["unread_bytes"] += error.unread_bytes or 0


_planner.register(IgnoreErrorsNode, iterator=_IgnoreErrorsIterator)
