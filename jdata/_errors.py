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
