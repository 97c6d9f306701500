"""The machine-floor loop of the benchmarks: fixed work, and percentiles read from its samples."""

from __future__ import annotations

import pytest

from webhook.bench.floor import Floor, spin


def test_spin_does_the_same_work_every_call():
    assert spin(400) == spin(400) == sum(range(400))
    assert spin(0) == 0


@pytest.mark.parametrize("samples, want_p50, want_p99, want_ratio", [
    ([10_000] * 99 + [50_000], 0.01, 0.05, 5.0),  # one slow sample in 100 is the p99
    ([10_000] * 100, 0.01, 0.01, 1.0),  # a quiet machine: the tail is the median
    ([20_000, 10_000, 30_000], 0.02, 0.03, 1.5),
])
def test_floor_figures_read_percentiles_from_the_samples(samples, want_p50, want_p99, want_ratio):
    floor = Floor()
    floor.samples = list(samples)
    got = floor.figures()
    assert (got["p50_ms"], got["p99_ms"], got["tail_ratio"], got["runs"]) == (want_p50, want_p99, want_ratio, len(samples))


def test_floor_without_samples_says_so_and_sampling_adds_one():
    floor = Floor(50)
    assert floor.figures() == {"runs": 0}
    floor.sample()
    floor.sample()
    got = floor.figures()
    assert got["runs"] == 2 and got["loop"] == 50 and got["p50_ms"] > 0
