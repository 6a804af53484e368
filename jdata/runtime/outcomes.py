"""What parallel workers hand back: an element's value or its error.

An ``Outcome`` crosses threads as it is and worker processes as a pickle:
an error leaving a process carries its traceback as text (tracebacks do not
pickle), chained under the UDF's own exception as a ``RemoteTraceback``.
An exception that does not survive pickling travels as a ``RemoteError``
with its type and message, still inside its ``UDFError``, so that
``ignore_errors()`` and error handlers see the same error types whichever
engine ran the UDF.
"""

from __future__ import annotations

import copy
import traceback
from typing import Any, Callable

import cloudpickle

from jdata._errors import UDFError
from jdata._errors import UnpicklableJobError as UnpicklableJobError
from jdata._errors import WorkerError as WorkerError


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
        error, message = self.error, None
        text = _traceback_text(_innermost(error))
        if not _survives_pickling(error):
            error, message = _with_picklable_cause(error), str(error)
        return _remote_outcome, (error, text, message)


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text."""

    def __str__(self):
        return "\n" + self.args[0]


class RemoteError(Exception):
    """An exception raised in a worker process that could not travel as itself
    (it does not pickle): ``type_name`` and its message."""

    def __init__(self, type_name: str, message: str):
        super().__init__(type_name, message)
        self.type_name = type_name

    def __str__(self):
        return f"{self.args[0]}: {self.args[1]}"


def _innermost(error: BaseException) -> BaseException:
    """The exception the UDF raised: a ``UDFError``'s cause, else ``error`` itself."""
    return error.__cause__ if isinstance(error, UDFError) else error


def _traceback_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def _survives_pickling(error: BaseException) -> bool:
    try:
        cloudpickle.loads(cloudpickle.dumps(error))
        return True
    except Exception:
        return False


def _stand_in(error: BaseException) -> BaseException:
    return error if _survives_pickling(error) else RemoteError(type(error).__name__, str(error))


def _with_picklable_cause(error: BaseException) -> BaseException:
    """``error`` with what does not pickle replaced by a ``RemoteError``.

    A ``UDFError`` (``DataError`` included) stays one, with its op and
    position; only its cause is replaced, when that is what fails.
    """
    if not isinstance(error, UDFError):
        return _stand_in(error)
    clone = copy.copy(error)
    clone.__cause__ = _stand_in(error.__cause__)
    return clone if _survives_pickling(clone) else _stand_in(error)


def _remote_outcome(error: BaseException, text: str, message: str | None) -> Outcome:
    # The UDF's own exception (or its stand-in) gets the remote traceback
    # chained, so the user sees where it failed in the worker.
    _innermost(error).__cause__ = RemoteTraceback(text)
    if message is not None and isinstance(error, UDFError):
        error.args = (message,)  # the worker's: it names the original exception type
    return Outcome(error=error)


def compute_all(fn: Callable, items) -> list[Outcome]:
    out = []
    for item in items:
        try:
            out.append(Outcome(fn(item)))
        except Exception as e:  # delivered to the consumer at the element's turn
            out.append(Outcome(error=e))
    return out

