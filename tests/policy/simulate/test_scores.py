"""The FGD paper simulator's scores on small hand-checked nodes, and its typical mix and fragmentation."""

import math

import pytest

from policy.simulate import scores
from policy.placement.fragment import Fragmentation, Mix, Shape, score_cuts, typical_mix

EMPTY8 = (1000,) * 8


@pytest.mark.parametrize("cpu_free, lefts, pod, want", [
    # 100 - (64000-8000)/2560 - (1500-500)/160 = 100 - 21.875 - 6.25 = 71.875 -> 71
    (64000, (1000, 500), (8000, 500, 1), 71),
    # nothing left over: 100
    (8000, (1000,), (8000, 1000, 1), 100),
    # an empty 8-GPU, 128-core node for a CPU pod: 100 - 127000/2560 - 8000/160 = 0.39 -> 0
    (128000, EMPTY8, (1000, 0, 0), 0),
])
def test_best_fit(cpu_free, lefts, pod, want):
    assert scores.best_fit(cpu_free, lefts, *pod) == want


@pytest.mark.parametrize("cpu_free, lefts, pod, want", [
    # dot = (128000*16000/128000^2 + 8000*1000/8000^2) / 2 = (0.125 + 0.125) / 2 -> 100 * (1 - 0.125) = 87.5 -> 87
    (128000, EMPTY8, (16000, 1000, 1), 87),
    (4000, EMPTY8, (16000, 1000, 1), 0),  # cpu short: the minimum
    (0, (), (0, 0, 0), 100),
])
def test_dot_product(cpu_free, lefts, pod, want):
    assert scores.dot_product(cpu_free, lefts, *pod) == want


@pytest.mark.parametrize("lefts, pod, want", [
    (EMPTY8, (500, 1), 25),                    # an empty node: 33 - 8 GPUs
    ((1000, 1000), (500, 1), 31),              # 33 - 2
    ((1000,), (1000, 1), 32),                  # 33 - 1
    ((600, 1000, 1000), (300, 1), 94),         # a used device: 100 - (600/10)/10
    ((100, 1000, 1000), (300, 1), 49),         # the used device is too small: an untouched one on a used node, 50 - 1
    ((0, 1000, 1000, 1000), (1000, 2), 48),    # two untouched devices on a used node
    ((0, 1000, 1000, 1000), (1000, 3), 47),
    (EMPTY8, (0, 0), 0),                       # CPU-only pods score 0 everywhere
])
def test_packing(lefts, pod, want):
    assert scores.packing(lefts, *pod) == want


@pytest.mark.parametrize("lefts, kinds, pod, want", [
    ((1000,) * 6 + (0, 0), {"share": 2}, (500, 1), 6 + 75),             # 25 * 2000 / 8000 = 6, only shares here
    ((1000,) * 6 + (0, 0), {"share": 1, "1-gpu": 1}, (500, 1), 6 + 50),  # shares among others
    (EMPTY8, {}, (500, 1), 25),                                          # no GPU pod yet
    ((1000,) * 7 + (0,), {"1-gpu": 1}, (500, 1), 3),                     # only other kinds
    ((1000,) * 4 + (0,) * 4, {"2-gpu": 2}, (1000, 2), 12 + 75),
    (EMPTY8, {}, (0, 0), 0),
])
def test_clustering(lefts, kinds, pod, want):
    assert scores.clustering(lefts, kinds, *pod) == want


def mix_of(*shapes_counts):
    shapes = [s for s, c in shapes_counts for _ in range(c)]
    return typical_mix(shapes)


A = Shape(1000, 500, 1)   # a half-GPU task
B = Shape(1000, 1000, 1)  # a whole-GPU task


def test_node_fragmentation_against_the_mix():
    frag = Fragmentation(mix_of((A, 3), (B, 1)))
    access = frag.access_id([True, True])
    # devices (1000, 300): both shapes fit on the free device; its 300 is too small for either -> fragment 300
    assert frag.amount(access, 8000, (1000, 300)) == 4 * 300
    # (500, 300): A fits (only the 500), B does not (all 800 is fragment to it): (3*300 + 1*800) / 4
    assert frag.amount(access, 8000, (500, 300)) == 3 * 300 + 800
    # cpu short for both: every free milli is fragment
    assert frag.amount(access, 500, (1000, 300)) == 4 * 1300
    # a node neither may use (another GPU model): all fragment
    assert frag.amount(frag.access_id([False, False]), 8000, (1000, 300)) == 4 * 1300


def test_cpu_only_tasks_see_every_free_gpu_as_fragment():
    frag = Fragmentation(mix_of((A, 1), (Shape(4000, 0, 0), 1)))
    assert frag.amount(frag.access_id([True, True]), 8000, (1000,)) == 1000  # A: 0, the CPU task: 1000


def test_fgd_puts_a_small_share_into_the_fragment():
    frag = Fragmentation(mix_of((A, 3), (B, 1)))
    access = frag.access_id([True, True])
    # 200 on device 0 -> (800, 300): fragment 300 -> 500, score int(100 sigmoid(-0.2)) = 45;
    # on device 1 -> (1000, 100): 300 -> 100, int(100 sigmoid(0.2)) = 54: device 1
    assert scores.fgd(frag, access, 8000, (1000, 300), 1000, 200, 1) == (54, 1)
    # 500 fits only device 0 -> (500, 300): 300 -> 425, int(100 sigmoid(-0.125)) = 46
    assert scores.fgd(frag, access, 8000, (1000, 300), 1000, 500, 1) == (46, 0)
    # a whole GPU takes the free device -> (0, 300): fragment stays 300 -> 50
    assert scores.fgd(frag, access, 8000, (1000, 300), 1000, 1000, 1) == (50, -1)


@pytest.mark.parametrize("total", [1, 7, 8152])
def test_fgd_cut_points_give_the_sigmoid_score(total):
    frag = Fragmentation(Mix((A,), (total,), total))  # fragmentation amounts are kept times the mix's total count
    assert len(score_cuts(total)) == 99
    for delta in range(-8000, 8001, 37):
        assert frag.score(delta * total, 0) == int(100 / (1 + math.exp(-delta / 1000))), delta


def test_typical_mix_covers_95_percent_commonest_first():
    shapes = [Shape(1000, 500, 1)] * 60 + [Shape(2000, 1000, 1)] * 30 + [Shape(8000, 1000, 8)] * 6 + [Shape(4000, 0, 0)] * 4
    mix = typical_mix(shapes)
    assert mix.shapes == (Shape(1000, 500, 1), Shape(2000, 1000, 1), Shape(8000, 1000, 8))  # 96 % >= 95 %: the CPU task is cut
    assert mix.counts == (60, 30, 6) and mix.total == 96
    # equal counts: the larger shape first (the artifact's reversed order)
    tie = typical_mix([Shape(1000, 500, 1), Shape(2000, 500, 1)])
    assert tie.shapes == (Shape(2000, 500, 1), Shape(1000, 500, 1))


def test_device_choice_helpers():
    assert scores.tightest((1000, 300, 600, 300), 250) == 1  # least free with room, first by index
    assert scores.tightest((100, 200), 250) == -1
    assert scores.take_whole((0, 1000, 1000, 1000), 1000, 2) == (1, 2)
