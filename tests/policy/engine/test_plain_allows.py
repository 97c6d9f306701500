"""The shared allowed Decision is cached per engine: another engine's (a reload, engines side by side) never serves it."""

from __future__ import annotations

from lang import compile_policies
from policy import engine as engine_module
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

POLICY = 'quota a { for namespace == "team-a"  gpus 8 }\nrule no-priv { for gpus > 0  when privileged  deny "no" }\n'


def pod():
    c = {"name": "m", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": {"containers": [c]}}


def test_each_engine_caches_its_own_allowed_decision():
    ps, diags = compile_policies([("p.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    first, second, snap = Engine(ps), Engine(ps), ClusterSnapshot.from_objects([])
    req = wrap_manifest(pod(), user="alice", groups=["dev"], operation="CREATE")["request"]
    before = dict(engine_module._PLAIN_ALLOWS)
    a, b = first.decide(req, snap, 0.0, reserve=False), first.decide(req, snap, 0.0, reserve=False)
    c = second.decide(req, snap, 0.0, reserve=False)
    assert a.allowed and a is b  # shared within one engine
    assert c == a and c is not a  # the same answer, from the other engine's own cache
    assert a.blocks == ("quota a", "rule no-priv")
    assert engine_module._PLAIN_ALLOWS == before  # the module-level cache is only for callers of combine() without one
