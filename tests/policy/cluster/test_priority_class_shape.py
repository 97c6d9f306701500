"""PriorityClasses enter the snapshot only with the types the Priority plugin (and Allot's patch) compute from."""

import pytest

from policy.cluster.snapshot import ClusterSnapshot, SnapshotError


def pc(**fields):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "batch"}, "value": 100,
            **fields}


@pytest.mark.parametrize(
    "obj, want_error",
    [
        (pc(), None),
        (pc(preemptionPolicy="Never", globalDefault=True), None),
        (pc(value="100"), "PriorityClass batch: value must be a 32-bit integer, not a string"),
        (pc(value=True), "PriorityClass batch: value must be a 32-bit integer, not a boolean"),
        (pc(value=2**31), f"PriorityClass batch: value must be a 32-bit integer, not {2**31}"),
        (pc(preemptionPolicy="Sometimes"), "PriorityClass batch: preemptionPolicy must be PreemptLowerPriority or Never, not 'Sometimes'"),
        (pc(preemptionPolicy=[]), "PriorityClass batch: preemptionPolicy must be PreemptLowerPriority or Never, not []"),
        (pc(globalDefault="yes"), "PriorityClass batch: globalDefault must be a boolean, not a string"),
    ],
)
def test_priority_class_shape(obj, want_error):
    if want_error is None:
        assert ClusterSnapshot.from_objects([obj]).priority_class("batch")["value"] == 100
    else:
        with pytest.raises(SnapshotError) as exc:
            ClusterSnapshot.from_objects([obj])
        assert str(exc.value).endswith(want_error)
