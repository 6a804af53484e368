"""Exceptions raised by jdata."""


class UDFError(Exception):
    """A user-defined function raised while processing an element.

    The original exception is chained as ``__cause__``. ``op`` names the
    transformation (``"map"``, ``"filter"``...) and ``position`` is the
    element's position in that transformation's input stream.
    """

    def __init__(self, op: str, position: int, cause: BaseException):
        self.op = op
        self.position = position
        self.__cause__ = cause  # also when rebuilt from a pickle (worker processes)
        super().__init__(
            f"{op}: the user function raised {type(cause).__name__} on the element at "
            f"position {position} of its input: {cause}")

    def __reduce__(self):
        return UDFError, (self.op, self.position, self.__cause__)


class DataError(UDFError):
    """A record of a file could not be read: corrupt, truncated or undecodable.

    ``path`` is the file, ``record`` the record's index in it, ``op`` the
    source and ``position`` the element's position in the source's stream;
    the reason is chained as ``__cause__``. ``ignore_errors()`` skips such
    records (and counts them), as it skips elements whose UDF raised.

    ``unread_bytes`` is ``None`` when only this record is lost. Otherwise the
    damage also hides the rest of the file (where the next record starts is
    lost, or the file ends inside the record): the iterator goes on with the
    next file, and ``unread_bytes`` is how many bytes of the file (as stored)
    are skipped unread from the damage on (0 when the file ends there). The
    records in them are lost with it, whichever shard they belong to.

    Files that cannot be opened or read at all (missing, no permission, too
    many open files) raise ``OSError``, not ``DataError``: the data is not at
    fault, and ``ignore_errors()`` must not quietly yield nothing.
    """

    def __init__(self, op: str, position: int, path: str, record: int, cause: BaseException,
                 unread_bytes: int | None = None):
        self.path, self.record, self.unread_bytes = path, record, unread_bytes
        message = f"{op}: cannot read record {record} of {path}: {cause}"
        if unread_bytes is not None:
            message += (f"; the rest of the file cannot be read either ({unread_bytes} bytes "
                        "skipped unread): its records are lost")
        Exception.__init__(self, message)
        self.op, self.position = op, position
        self.__cause__ = cause

    def __reduce__(self):
        return DataError, (self.op, self.position, self.path, self.record, self.__cause__,
                           self.unread_bytes)


class ElementError(UDFError):
    """An element failed on a data-service worker outside any user function: the worker's
    pipeline raised something other than a ``UDFError`` there, or the element cannot be
    sent to the client (it does not pickle).

    It comes in the element's place, as a ``UDFError`` does, and the stream goes on after
    it (``ignore_errors()`` after ``distribute`` skips it). ``position`` is the element's
    position in its split (or stream); the original error is chained as ``__cause__``.
    """

    def __init__(self, position: int, reason: str, cause: BaseException | None = None):
        Exception.__init__(self, f"distribute: the element at position {position} of its "
                                 f"split failed on a worker: {reason}")
        self.op, self.position, self.reason = "distribute", position, reason
        self.__cause__ = _portable(cause)

    def __reduce__(self):
        return ElementError, (self.position, self.reason, self.__cause__)


class ServiceError(RuntimeError):
    """A data-service iterator cannot go on as it promised: it was silent past its
    client timeout and other consumers took its splits, its state was restored into
    another iterator, or no worker could run its job for minutes. The message says what
    happened and what to do (usually: restore the iterator from its last checkpoint)."""


def _portable(error: BaseException | None) -> BaseException | None:
    """``error``, or a ``RuntimeError`` with its text when it would not pickle."""
    if error is None:
        return None
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
