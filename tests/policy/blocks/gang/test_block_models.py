"""`models …` in quota and fraction blocks: a workload of a known model outside the list is denied; unknown passes."""

from __future__ import annotations

import pytest
from tests.policy.blocks.gang.gangs_builders import H100, L4, cluster, engine, node, request

POLICY = """
quota team {
  for namespace == "train"
  gpus 64
  models h100
}
fraction shared {
  for namespace == "train"
  max 0.5
  models l4
}
"""


def _pod(product: str | None, *, gpus: str | None = "1", fraction: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}]}
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    meta: dict = {"name": "p", "namespace": "train"}
    if fraction:
        meta["annotations"] = {"gpu-fraction": fraction}
        spec["containers"][0]["resources"] = {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    "pod, want_codes",
    [
        (_pod(H100), []),
        (_pod(L4), ["QuotaModelNotAllowed"]),  # the quota may use h100 only
        (_pod(None), []),  # model unknown: passes (the scheduler picks the pool)
        (_pod("NVIDIA-A100-SXM4-80GB"), ["QuotaModelNotAllowed"]),  # an undeclared product is not listed either
        (_pod(L4, fraction="0.25"), ["QuotaModelNotAllowed"]),  # a share of L4: the fraction allows it, the quota does not
        (_pod(H100, fraction="0.25"), ["FractionModelNotAllowed"]),  # shares only on l4
    ],
)
def test_quota_and_fraction_models(pod, want_codes):
    eng = engine(POLICY)
    d = eng.decide(request(pod), cluster(node("n1", "r1"), node("n2", "r1", product=L4)), 0.0)
    assert [r.code for r in d.reasons if r.mode == "enforce"] == want_codes
    assert d.allowed is (not want_codes)
    for r in d.reasons:
        assert "may use only" in r.message and r.data["models"]
