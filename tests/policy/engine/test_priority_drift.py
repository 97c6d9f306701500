"""Declared priority classes against live PriorityClasses: every difference the API server would act on."""

from __future__ import annotations

import pytest
from tests.policy.engine.engine_builders import priority

from policy.cluster.snapshot import ClusterSnapshot
from policy.blocks.priority_drift import priority_drift

DECLARED = (priority("batch", 100, default=True), priority("prod", 500, preempts=True))


def pc(name, value, policy="Never", global_default=False):
    """A live PriorityClass."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "preemptionPolicy": policy, "globalDefault": global_default}


AGREE = [pc("batch", 100), pc("prod", 500, "PreemptLowerPriority")]


@pytest.mark.parametrize(
    "live, want",
    [
        (AGREE, []),
        (AGREE + [pc("kueue-low", 1)], []),  # undeclared classes that are not default are none of our business
        ([pc("batch", 100, "PreemptLowerPriority"), AGREE[1]], [("batch", "preemptionPolicy", "Never", "PreemptLowerPriority")]),
        ([pc("batch", 90), AGREE[1]], [("batch", "value", 100, 90)]),
        ([AGREE[0]], [("prod", "missing", 500, None)]),
        ([pc("batch", 100, global_default=True), AGREE[1]], [("batch", "globalDefault", False, True)]),
        (AGREE + [pc("site-default", 3, global_default=True)], [("site-default", "globalDefault", None, True)]),
        ([pc("batch", 7, "PreemptLowerPriority")], [("batch", "value", 100, 7), ("batch", "preemptionPolicy", "Never", "PreemptLowerPriority"),
                                                    ("prod", "missing", 500, None)]),
    ],
)
def test_drift(live, want):
    got = priority_drift(DECLARED, ClusterSnapshot.from_objects(live))
    assert [(d.name, d.field, d.declared, d.live) for d in got] == want
    for d in got:
        assert d.name in d.message and d.fix
        assert (d.span is None) == (d.name not in {"batch", "prod"})


def test_absent_preemption_policy_reads_as_the_api_server_default():
    live = [{**pc("batch", 100), "preemptionPolicy": None}, AGREE[1]]
    (d,) = priority_drift(DECLARED, ClusterSnapshot.from_objects(live))
    assert (d.field, d.live) == ("preemptionPolicy", "PreemptLowerPriority")


def test_no_snapshot_no_drift():
    assert priority_drift(DECLARED, None) == []
