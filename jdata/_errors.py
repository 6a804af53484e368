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
    """

    def __init__(self, op: str, position: int, path: str, record: int, cause: BaseException):
        self.path, self.record = path, record
        Exception.__init__(self, f"{op}: cannot read record {record} of {path}: {cause}")
        self.op, self.position = op, position
        self.__cause__ = cause

    def __reduce__(self):
        return DataError, (self.op, self.position, self.path, self.record, self.__cause__)
