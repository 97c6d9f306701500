"""Exact quantity parsing: units, rounding up, bad text rejected."""

import pytest
from hypothesis import given, strategies as st

from lang.quantity import QuantityError, format_bytes, format_milli, to_int, to_milli


@pytest.mark.parametrize(
    "text,want_int,want_milli",
    [
        ("80Gi", 80 * 2**30, 80 * 2**30 * 1000),
        ("500m", 1, 500),
        ("0.25", 1, 250),
        ("1.5", 2, 1500),
        ("1e3", 1000, 1_000_000),
        ("10M", 10_000_000, 10_000_000_000),
        ("1Ki", 1024, 1024_000),
        ("0.0001", 1, 1),
    ],
)
def test_parse_table(text, want_int, want_milli):
    assert to_int(text) == want_int
    assert to_milli(text) == want_milli


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "Gi", "1 Gi", "1GB", "--1", "1e", "9" * 80])
def test_bad_quantities_raise_quantity_error(text):
    with pytest.raises(QuantityError):
        to_int(text)


@given(st.integers(min_value=0, max_value=2**62))
def test_format_bytes_round_trips(n):
    assert to_int(format_bytes(n)) == n


@given(st.integers(min_value=-10**9, max_value=10**9))
def test_format_milli_round_trips(n):
    assert to_milli(format_milli(n)) == n
