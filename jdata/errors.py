"""The errors a jdata user catches (all exported from ``jdata`` too).

- ``UDFError``: a user function raised on an element (the cause is chained);
  ``ignore_errors()`` skips such elements.
- ``DataError``: a record of a file could not be read (a ``UDFError``).
- ``ElementError``: an element failed on a data-service worker outside a user
  function, or could not be sent to the client (a ``UDFError``).
- ``ServiceError``: a data-service iterator cannot go on as it promised.
- ``ServiceUnavailableError``: the dispatcher cannot journal; it refuses changes until
  it can (a ``ServiceError``).
- ``WorkDirInUseError``: another dispatcher holds the ``work_dir`` (a ``ServiceError``).
- ``WorkerImportError``: the service's workers cannot import a module the pipeline's
  functions come from (a ``ServiceError``).
- ``ServiceNotFoundError``: no service runs where it was looked for (a ``ServiceError``).
- ``ServiceConnectionError``: this process cannot reach the service (a ``ServiceError``
  and a ``ConnectionError``).
- ``ServiceStartError``: the service could not start (a ``ServiceError``).
- ``ServiceVersionError``: the client's and the service's jdata speak different protocols
  (a ``ServiceError``).
- ``ServiceStoppedError``: the service an iterator reads from was stopped (a
  ``ServiceError``).
- ``WorkerError``: a worker process of the process engine died or could not start (a
  ``RuntimeError``); ``SharedMemoryError``: the shared-memory directory is full (a
  ``WorkerError``).
- ``IteratorClosedError``: ``next()`` on an iterator after its ``close()`` (a
  ``ValueError``).
- ``UnpicklableJobError``: a job cannot be pickled for worker processes (a ``TypeError``).
- ``MissingExtraError``: a feature needs an optional dependency that is not installed (an
  ``ImportError`` naming the extra to install).
- ``OptionsFrozenError``: an assignment to a ``jdata.Options`` field (a
  ``dataclasses.FrozenInstanceError`` that says how to set it).
- ``DecodeError``: an element's bytes cannot be decoded (raised in a UDF, it reaches the
  iterator as a ``DataError``); ``ImageDecodeError`` and ``ImageTooLargeError`` are
  ``jdata.ops.image``'s (corrupt or truncated; a header declaring more than
  ``max_pixels``).
- ``JournalError``: a service journal that is not one, is damaged, is of another version
  or does not replay (a ``ValueError``).

Every public exception class of jdata is here (``jdata.errors.__all__``).
"""

from jdata._errors import DataError as DataError
from jdata._errors import DecodeError as DecodeError
from jdata._errors import ElementError as ElementError
from jdata._errors import ImageDecodeError as ImageDecodeError
from jdata._errors import ImageTooLargeError as ImageTooLargeError
from jdata._errors import IteratorClosedError as IteratorClosedError
from jdata._errors import JournalError as JournalError
from jdata._errors import MissingExtraError as MissingExtraError
from jdata._errors import OptionsFrozenError as OptionsFrozenError
from jdata._errors import ServiceConnectionError as ServiceConnectionError
from jdata._errors import ServiceError as ServiceError
from jdata._errors import ServiceNotFoundError as ServiceNotFoundError
from jdata._errors import ServiceStartError as ServiceStartError
from jdata._errors import ServiceStoppedError as ServiceStoppedError
from jdata._errors import ServiceUnavailableError as ServiceUnavailableError
from jdata._errors import ServiceVersionError as ServiceVersionError
from jdata._errors import SharedMemoryError as SharedMemoryError
from jdata._errors import UDFError as UDFError
from jdata._errors import UnpicklableJobError as UnpicklableJobError
from jdata._errors import WorkDirInUseError as WorkDirInUseError
from jdata._errors import WorkerError as WorkerError
from jdata._errors import WorkerImportError as WorkerImportError

__all__ = ["DataError", "DecodeError", "ElementError", "ImageDecodeError", "ImageTooLargeError",
           "IteratorClosedError", "JournalError",
           "MissingExtraError", "OptionsFrozenError", "ServiceConnectionError", "ServiceError",
           "ServiceNotFoundError", "ServiceStartError", "ServiceStoppedError",
           "ServiceUnavailableError", "ServiceVersionError", "SharedMemoryError", "UDFError",
           "UnpicklableJobError", "WorkDirInUseError", "WorkerError", "WorkerImportError"]

