"""Exact quantity parsing: units, rounding up, bad text rejected."""

import pytest
from hypothesis import given, strategies as st

from lang.quantity import QuantityError, format_bytes, format_bytes_short, format_milli, to_int, to_milli


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


@pytest.mark.parametrize("n, want", [
    (0, "0"), (512, "512"), (1024, "1Ki"), (85899345920, "80Gi"), (7730941132, "7.2Gi"),
    (500_000_000, "476.8Mi"), (600 * 10**9, "558.8Gi"), (1536 * 2**20, "1536Mi"), (1920 * 2**30, "1920Gi"), (8 * 2**30 - 1, "8.0Gi"), (2**30 - 1, "1.0Gi"), (-7730941132, "-7.2Gi"),
])
def test_format_bytes_short_is_exact_when_whole_else_one_decimal(n, want):
    assert format_bytes_short(n) == want
