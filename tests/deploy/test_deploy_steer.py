"""A steer block sends pods to /mutate: GPU-less ones too (steering moves them off GPU nodes), never failing them closed.

Found on the kit: a policy set of steer blocks alone compiled to an empty MutatingWebhookConfiguration,
so the webhook was never called and nothing was steered (tests/e2e/test_e2e_steer.py).
"""

import deploy_apiserver as api
import deploy_builders as b
import pytest

from lang import ir
from policy.manifests import configurations as m


def steer(selector=None) -> ir.Steer:
    return ir.Steer("small", selector, "fragmentation", 3, "enforce", b.S)


MUTATE = {"pods.mutate.allot.io"}


@pytest.mark.parametrize(
    "selector, req, want",
    [
        (None, b.request(obj=b.pod(gpu=True)), MUTATE),
        (None, b.request(obj=b.pod()), MUTATE),  # a CPU-only pod is steered too
        (b.eq("namespace", "ml"), b.request(namespace="ml", obj=b.pod()), MUTATE),
        (b.eq("namespace", "ml"), b.request(namespace="web", obj=b.pod(gpu=True)), set()),
    ],
)
def test_steer_blocks_intercept_the_pods_they_may_steer(selector, req, want):
    cfg = m.mutating_configuration(ir.PolicySet(steers=(steer(selector),)))
    assert set(api.intercepting(cfg, req)) == want


def test_steering_alone_fails_open_and_a_quota_beside_it_does_not_change_that():
    cfg = m.mutating_configuration(ir.PolicySet(steers=(steer(),)))
    (entry,) = cfg["webhooks"]
    assert entry["failurePolicy"] == "Ignore"
    assert "gpu-pod" not in {c["name"] for c in entry.get("matchConditions", ())}
    with_quota = m.mutating_configuration(ir.PolicySet(steers=(steer(),), quotas=(b.quota("all"),)))
    assert [e["failurePolicy"] for e in with_quota["webhooks"]] == ["Ignore"]  # quotas do not patch pods
    assert m.mutating_configuration(ir.PolicySet())["webhooks"] == []
