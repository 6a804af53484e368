"""What parallel workers hand back: an element's value or its error.

An ``Outcome`` crosses threads as it is and worker processes as a pickle:
an error leaving a process carries its traceback as text (tracebacks do not
pickle), chained under the UDF's own exception as a ``RemoteTraceback``.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import cloudpickle

from jdata._errors import UDFError


class WorkerError(RuntimeError):
    """A worker process died or could not start: the iterator cannot go on."""




class Outcome:
    """An element's result or the exception computing it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def get(self):
        if self.error is not None:
            raise self.error
        return self.value

    def __reduce__(self):
        # Leaving a worker process: an error carries its traceback as text
        # (tracebacks do not pickle) and becomes picklable if it was not.
        if self.error is None:
            return Outcome, (self.value,)
        return _remote_outcome, (_picklable(self.error), _traceback_text(_innermost(self.error)))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text."""

    def __str__(self):
        return "\n" + self.args[0]


def _innermost(error: BaseException) -> BaseException:
    """The exception the UDF raised: a ``UDFError``'s cause, else ``error`` itself."""
    return error.__cause__ if isinstance(error, UDFError) else error


def _traceback_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def _picklable(error: BaseException) -> BaseException:
    try:
        cloudpickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _remote_outcome(error: BaseException, text: str) -> Outcome:
    # The UDF's own exception gets the remote traceback chained, so the user
    # sees where it failed in the worker.
    _innermost(error).__cause__ = RemoteTraceback(text)
    return Outcome(error=error)



def compute_all(fn: Callable, items) -> list[Outcome]:
    out = []
    for item in items:
        try:
            out.append(Outcome(fn(item)))
        except Exception as e:  # delivered to the consumer at the element's turn
            out.append(Outcome(error=e))
    return out

