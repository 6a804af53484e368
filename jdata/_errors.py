"""Exceptions raised by jdata."""

import dataclasses
from typing import Any


class UDFError(Exception):
    """A user-defined function raised while processing an element.

    The original exception is chained as ``__cause__``. ``op`` names the
    transformation (``"map"``, ``"filter"``...) and ``position`` is the
    element's position in that transformation's input stream.
    """

    def __init__(self, op: str, position: int, cause: BaseException) -> None:
        self.op = op
        self.position = position
        self.__cause__ = cause  # also when rebuilt from a pickle (worker processes)
        super().__init__(
            f"{op}: the user function raised {type(cause).__name__} on the element at "
            f"position {position} of its input: {cause}{_read_only_hint(cause)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return UDFError, (self.op, self.position, self.__cause__)


# NumPy's message for an in-place write to an array whose ``writeable`` flag is off.
_READ_ONLY = "assignment destination is read-only"


def _read_only_hint(cause: BaseException) -> str:
    """What to do about NumPy's bare read-only error, else ``""`` (only ever on the error path)."""
    if not (isinstance(cause, ValueError) and str(cause) == _READ_ONLY):
        return ""
    return (". jdata hands out arrays read-only where they share their buffer with a source, "
            "a cache or another element (so that a function cannot change what a later pass "
            "reads); write to a copy: x = x.copy() (or np.array(x)) before changing it in place")


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

    A ``map``'s or ``random_map``'s function that raises ``DecodeError`` (as
    ``jdata.ops.image``'s decoders do on a corrupt, truncated or oversized
    image) raises a ``DataError`` too, with ``path`` and ``record`` ``None``:
    the element has no file; ``position`` names it.

    Files that cannot be opened or read at all (missing, no permission, too
    many open files) raise ``OSError``, not ``DataError``: the data is not at
    fault, and ``ignore_errors()`` must not quietly yield nothing.
    """

    def __init__(self, op: str, position: int, path: str | None, record: int | None,
                 cause: BaseException, unread_bytes: int | None = None) -> None:
        self.path, self.record, self.unread_bytes = path, record, unread_bytes
        if path is None:  # a map's element (e.g. an image's bytes): no file to name
            message = (f"{op}: cannot decode the element at position {position} of its "
                       f"input: {cause}")
        else:
            message = f"{op}: cannot read record {record} of {path}: {cause}"
        if unread_bytes is not None:
            message += (f"; the rest of the file cannot be read either ({unread_bytes} bytes "
                        "skipped unread): its records are lost")
        Exception.__init__(self, message)
        self.op, self.position = op, position
        self.__cause__ = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return DataError, (self.op, self.position, self.path, self.record, self.__cause__,
                           self.unread_bytes)


class DecodeError(ValueError):
    """An element's bytes cannot be decoded: corrupt, truncated, or refused (an image
    whose header declares more pixels than allowed). The data is at fault, not the code:
    raised in a ``map``'s (or ``random_map``'s, ``filter``'s...) function, it reaches the
    iterator as a ``DataError`` naming the op and the element's position, which
    ``ignore_errors()`` skips and counts as an unreadable record. Decoders of your own
    may raise it (or a subclass) for the same treatment."""


def udf_error(op: str, position: int, cause: BaseException) -> UDFError:
    """The error reporting that a user function raised ``cause`` on the element at
    ``position``: a ``DataError`` when ``cause`` is a ``DecodeError``, else a ``UDFError``."""
    if isinstance(cause, DecodeError):
        return DataError(op, position, None, None, cause)
    return UDFError(op, position, cause)


class ImageDecodeError(DecodeError):
    """An image's bytes are corrupt, truncated or of no format the decoder reads
    (``jdata.ops.image``'s decoders)."""


class ImageTooLargeError(ImageDecodeError):
    """An image's header declares more pixels than the decoder's ``max_pixels`` allows
    (``jdata.ops.image.MAX_PIXELS`` by default): refused before any pixel is decoded."""


class ElementError(UDFError):
    """An element failed on a data-service worker outside any user function: the worker's
    pipeline raised something other than a ``UDFError`` there, or the element cannot be
    sent to the client (it does not pickle).

    It comes in the element's place, as a ``UDFError`` does, and the stream goes on after
    it (``ignore_errors()`` after ``distribute`` skips it). ``position`` is the element's
    position in its split (or stream); the original error is chained as ``__cause__``.
    """

    def __init__(self, position: int, reason: str, cause: BaseException | None = None) -> None:
        Exception.__init__(self, f"distribute: the element at position {position} of its "
                                 f"split failed on a worker: {reason}")
        self.op, self.position, self.reason = "distribute", position, reason
        self.__cause__ = _portable(cause)

    def __reduce__(self) -> tuple[Any, ...]:
        return ElementError, (self.position, self.reason, self.__cause__)


class ServiceError(RuntimeError):
    """A data-service iterator cannot go on as it promised: it was silent past its
    client timeout and other consumers took its splits, its state was restored into
    another iterator, or no worker could run its job for minutes. The message says what
    happened and what to do (usually: restore the iterator from its last checkpoint)."""


class ServiceNotFoundError(ServiceError):
    """No jdata service runs where it was looked for: no dispatcher in the namespace (the
    message names it), or no service recorded for the command line to act on. Start one
    (``service.start``, ``jdata service start``) or pass the right address and namespace."""


class ServiceConnectionError(ServiceError, ConnectionError):
    """This process cannot reach the service the way it needs: nothing, or something other
    than a Ray cluster, answers at the address; the cluster refused this process's token;
    or the process has no Ray connection to read through. The message names the address
    and the fix. Also a ``ConnectionError``."""


class ServiceStartError(ServiceError):
    """The service could not start: its dispatcher failed in its constructor (the message
    carries the dispatcher's own one-line error), or the embedded Ray would listen beyond
    this machine. A journal of another version is a ``JournalError`` instead."""


class ServiceVersionError(ServiceError):
    """The client's and the service's jdata speak different client protocols (checked when
    a process joins a service). The message names both jdata versions: install the
    service's version where the client runs, or restart the service with the client's."""


class ServiceStoppedError(ServiceError):
    """The service this iterator reads from was stopped (``svc.stop()``, ``jdata service
    stop``), not restarted: the iterator can go no further. Start a service again and
    restore the iterator from its last checkpoint (``ds.iterator(state)``)."""


class ServiceUnavailableError(ServiceError):
    """The dispatcher cannot journal (its ``work_dir``'s disk is full or failing), so it
    refuses what would change its books: new jobs, new clients, new leases. Reads of what
    was granted go on; the dispatcher retries the journal by itself and takes requests
    again once it can write (``svc.status().journal`` says which). Free space where the
    message says, or wait and retry."""


class WorkDirInUseError(ServiceError):
    """Another dispatcher holds the ``work_dir`` (its journal is one service's alone). The
    message names the holder; give this service a ``work_dir`` of its own, or join the
    running one with ``service.connect``."""


class WorkerImportError(ServiceError):
    """The data-service workers cannot import a module this pipeline's functions come from
    (the trainer can: cloudpickle sends a function of an importable module by name, and
    the workers import it again). ``module`` names it; the message says how to ship the
    code to the workers (Ray's ``runtime_env``), or to send it by value."""

    def __init__(self, module: str | None, reason: str) -> None:
        self.module, self.reason = module, reason
        name = repr(module) if module else "a module"
        by_value = (f"import {module}; cloudpickle.register_pickle_by_value({module})"
                    if module else "cloudpickle.register_pickle_by_value(<the module>)")
        super().__init__(
            f"distribute: the service's workers cannot import {name}, which this pipeline's "
            f"functions come from ({reason}): the trainer imports it, the workers do not "
            "have it. Ship the code to the workers with Ray's runtime_env, given to whoever "
            "starts the service: service.start(..., runtime_env={'py_modules': [<the "
            "module, or its file or package directory>]}) or runtime_env={'working_dir': "
            f"'.'}}; or send its functions by value: {by_value}, before the iterator starts")

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses Ray from the worker to the trainer
        return WorkerImportError, (self.module, self.reason)


class IteratorClosedError(ValueError):
    """``next()``, ``get_state()`` or ``set_state()`` on a ``DatasetIterator`` after its
    ``close()``: its threads, worker processes and buffers are gone, so it can go no
    further and has no position left to say (a ``ValueError``, as Python's own operations
    on a closed file). Make a new one with ``ds.iterator()``, or ``ds.iterator(state)``
    with a state taken before ``close()`` to go on from there."""


class WorkerError(RuntimeError):
    """A worker process of the process engine died or could not start: the iterator cannot
    go on.

    ``computing`` is true on the error of the work a worker died computing
    (not on that of work queued behind it).
    """

    computing = False


class SharedMemoryError(WorkerError):
    """The shared-memory directory has no room for a segment the process engine needs."""


class UnpicklableJobError(TypeError):
    """The job (a UDF, or a subtree's reader factory) cannot be pickled for worker
    processes: ``engine="auto"`` keeps such work on threads."""


class JournalError(ValueError):
    """A service journal that is not one, is damaged, is of another version or does not
    replay. The message names the file; nothing of it is used (the dispatcher does not
    start on it)."""


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


# The distribution on the package index (``jdata`` there is another project).
DISTRIBUTION = "jdata-jax"


def install_hint(extra: str) -> str:
    """The shell line that installs jdata's ``extra``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingExtraError(ImportError):
    """A feature needs an optional dependency that is not installed (an ``ImportError``).

    ``feature`` is what needs it, ``name`` the module that did not import and ``extra``
    the jdata extra that installs it.
    """

    def __init__(self, feature: str, module: str, extra: str, distribution: str) -> None:
        super().__init__(f"{feature} needs {distribution} (module {module!r} does not "
                         f"import): {install_hint(extra)}", name=module)
        self.feature, self.extra, self.distribution = feature, extra, distribution

    def __reduce__(self) -> tuple[Any, tuple[str, str | None, str, str]]:
        return _rebuild, (self.feature, self.name, self.extra, self.distribution)


def _rebuild(feature: str, module: str, extra: str, distribution: str) -> MissingExtraError:
    return MissingExtraError(feature, module, extra, distribution)


class OptionsFrozenError(dataclasses.FrozenInstanceError):
    """An attribute assignment to ``Options`` (a ``dataclasses.FrozenInstanceError``)."""

    def __init__(self, name: str, value: Any) -> None:
        super().__init__(
            f"cannot assign to field {name!r}: jdata.Options are immutable (tf.data's "
            f"`options.{name} = ...` has no jdata spelling). Set it with "
            f"ds = ds.with_options(jdata.Options({name}={value!r})) (which overrides that "
            f"field only), or copy options with that change: "
            f"dataclasses.replace(options, {name}={value!r})")
