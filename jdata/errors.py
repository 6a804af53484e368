"""The errors a jdata user catches (all exported from ``jdata`` too).

- ``UDFError``: a user function raised on an element (the cause is chained);
  ``ignore_errors()`` skips such elements.
- ``DataError``: a record of a file could not be read (a ``UDFError``).
- ``ElementError``: an element failed on a data-service worker outside a user
  function, or could not be sent to the client (a ``UDFError``).
- ``ServiceError``: a data-service iterator cannot go on as it promised.
"""

from jdata._errors import DataError as DataError
from jdata._errors import ElementError as ElementError
from jdata._errors import ServiceError as ServiceError
from jdata._errors import UDFError as UDFError

__all__ = ["DataError", "ElementError", "ServiceError", "UDFError"]
