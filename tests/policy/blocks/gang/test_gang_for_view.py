"""A gang block's `for` that reads pods/total_gpus is tested on the gang view, not on the member alone."""

from __future__ import annotations

import pytest
from tests.policy.blocks.gang.gangs_builders import cluster, engine, kueue_member, node, request

BIG_GANGS_ONLY = """
gang big {
  for total_gpus > 8
  require topology fabric.rack
  on unplaceable deny
}
"""
NODES = (node("n1", "r1"), node("n2", "r1"), node("n3", "r2"))


@pytest.mark.parametrize(
    "gpus, total, want_selected",
    [
        (8, 2, True),  # the member has 8, its gang 16: selected although the pod alone is not > 8
        (4, 2, False),  # gang of 8: not selected
        (12, 1, True),  # a gang of one 12-GPU pod
    ],
)
def test_gang_for_over_total_gpus_sees_the_gang(gpus, total, want_selected):
    eng = engine(BIG_GANGS_ONLY)
    d = eng.decide(request(kueue_member("m0", "g", gpus, total)), cluster(*NODES, node("n4", "r3", gpus=16)), 0.0)
    assert ("gang big" in d.blocks) is want_selected
    assert (d.placement is not None and d.placement.level == "rack") is want_selected
