"""Exact Kubernetes-style quantities (`80Gi`, `500m`, `0.25`, `1e3`) as integers, never floats."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([eE][+-]?[0-9]{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?")  # ASCII digits only, as Kubernetes


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse(text: str) -> Fraction:
    """The exact value of a quantity string, e.g. `parse("1.5Gi") == 1610612736`."""
    if not isinstance(text, str):
        text = str(text)
    m = _QUANTITY.fullmatch(text.strip())
    if not m or len(text) > 64:
        raise QuantityError(f"{text!r} is not a quantity (expected a number with an optional unit like 80Gi or 500m)")
    sign, digits, exponent, suffix = m.groups()
    value = Fraction(digits if not digits.endswith(".") else digits[:-1])
    if exponent:
        value *= Fraction(10) ** int(exponent[1:])
    elif suffix:
        value *= _SUFFIX[suffix]
    return -value if sign == "-" else value


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def to_int(text: str) -> int:
    """Whole units, rounded up like Kubernetes' `Value()` (bytes for memory)."""
    return _ceil(parse(text))


def to_milli(text: str) -> int:
    """Thousandths, rounded up like Kubernetes' `MilliValue()` (milli-GPU for GPU amounts)."""
    return _ceil(parse(text) * 1000)


COMPACT_ABOVE = 10**15  # integers from here on print in e-notation: a 400-digit number is no message


def compact(n, exact: bool = False) -> str:
    """An integer for people: as is below 10^15, else e-notation (`1e400`): to 3 digits, or every digit when `exact`."""
    if not isinstance(n, int):  # a Fraction: its whole part (counts and sizes are whole)
        n = int(n)
    if -COMPACT_ABOVE < n < COMPACT_ABOVE:
        return str(n)
    sign = "-" if n < 0 else ""
    if abs(n).bit_length() >= 13000:  # past Python's int-to-text limit: the exponent from the bit length
        return f"{sign}~2^{abs(n).bit_length() - 1}"
    digits = str(abs(n))
    tail = (digits[1:] if exact else digits[1:3]).rstrip("0")
    return f"{sign}{digits[0]}{'.' + tail if tail else ''}e{len(digits) - 1}"


def format_bytes(n: int) -> str:
    """The shortest exact binary form: 85899345920 -> '80Gi' (e-notation past 10^15 bytes without one)."""
    if abs(n) >= COMPACT_ABOVE * _SUFFIX["Ei"]:  # `1e400`, not a 380-digit count of Ei; still exact
        return compact(n, exact=True)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return compact(n, exact=True)


_BINARY = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def format_bytes_short(n: int) -> str:
    """Bytes for people to read: exact when short ('80Gi', '1920Gi'), else one decimal of the largest binary unit reached ('7.2Gi').

    Below 1Ki the plain byte count. `8.0Gi` is a little off 8Gi, `8Gi` exactly it. For text
    output only: JSON keeps the integer, and policy text needs `format_bytes`'s exact form.
    """
    exact = format_bytes(n)
    if abs(n) < 1024 or (exact.endswith("i") and len(exact.lstrip("-")) <= 6):  # at most 4 digits and a unit
        return exact
    sign, m = ("-" if n < 0 else ""), abs(n)
    i = max(k for k, suffix in enumerate(_BINARY) if m >= _SUFFIX[suffix])
    unit = int(_SUFFIX[_BINARY[i]])
    tenths = (m * 20 + unit) // (2 * unit)  # rounded half up, in integers
    if tenths >= 10240 and i + 1 < len(_BINARY):  # 1023.96Mi reads as 1.0Gi
        i, tenths = i + 1, 10
    return f"{sign}{tenths // 10}.{tenths % 10}{_BINARY[i]}"


def format_milli(n: int) -> str:
    """GPU amounts for people: 4000 -> '4', 250 -> '0.25', 1500 -> '1.5'."""
    whole, frac = divmod(abs(n), 1000)
    sign = "-" if n < 0 else ""
    if whole >= COMPACT_ABOVE and frac == 0:  # `1e400`, exact: it reads back as the same amount
        return sign + compact(whole, exact=True)
    if frac == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{frac:03d}".rstrip("0")
