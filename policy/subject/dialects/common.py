"""Small, fast readers shared by the dialect modules: numbers, quantities and problems."""

from __future__ import annotations

from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

from lang.quantity import QuantityError, parse

MIB = 2**20
# Read-only empty map for `x or EMPTY` fallbacks: ends up in subjects, so it must not be mutable; C-speed `.get`.
EMPTY: Mapping = MappingProxyType({})

MALFORMED = "MalformedQuantity"
BAD_FRACTION = "InvalidFraction"
UNKNOWN_VALUE = "UnknownGpuDialectValue"
MISSING_GROUP = "MissingGroup"
MISSING_CLAIM = "MissingResourceClaim"
BAD_OBJECT = "MalformedObject"


class Bad(ValueError):
    """A dialect value that cannot be read; turned into a `Problem` by the caller."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def quantity(value: object) -> Fraction | int:
    """The exact value of a quantity; plain digit strings and ints skip the regex (hot path)."""
    if type(value) is int:
        return value
    if type(value) is str and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"{value!r} is not a quantity")
    return parse(value if isinstance(value, str) else repr(value))


def whole_count(value: object, path: str) -> int:
    """A non-negative whole number of devices (extended resources must be integers)."""
    q = quantity(value)
    if q < 0 or (type(q) is not int and q.denominator != 1):
        raise Bad(MALFORMED, f"{path}: {value!r} is not a whole, non-negative number of devices")
    return int(q)


def ceil_milli(value: Fraction | int) -> int:
    """Thousandths of `value`, rounded up (Kubernetes MilliValue)."""
    if type(value) is int:
        return value * 1000
    v = value * 1000
    return -((-v.numerator) // v.denominator)


def ceil_div(a: int, b: int) -> int:
    """`a / b` rounded up, in integers."""
    return -((-a) // b)
