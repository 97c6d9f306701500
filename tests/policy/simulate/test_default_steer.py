"""`--scheduler default`: preferred node affinity weighed as kube-scheduler's default profile does; default+steer end to end."""

import json

from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.simulate.default import least_allocated, with_steering
from policy.simulate.run import Options, Simulation
from policy.simulate.trace import Arrival
import lang


def node(name, cpu="64"):
    alloc = {"cpu": cpu, "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, cpu="8", prefer=None):
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    if prefer:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": w, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}} for n, w in prefer]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "a"}, "spec": spec}


def run(objs, scheduler="default", policy=None):
    snap = ClusterSnapshot.from_objects([node("a"), node("b"), node("c", "128")])
    sim = Simulation(Engine(policy or lang.compile_policies([])[0]), snap, Options(scheduler))
    res = sim.run([Arrival(float(i), o) for i, o in enumerate(objs)])
    return [o.node for o in res.outcomes], sim


def test_without_preferences_the_least_allocated_node_by_cpu_wins():
    nodes, _ = run([pod("p1"), pod("p2")])
    assert nodes == ["c", "a"]  # 128 cores first; then a (8 of 64 cores, 1 Gi) is left emptier than c (16 of 128, 2 Gi)


def test_a_preferred_node_beats_the_emptier_one():
    nodes, sim = run([pod("p1", prefer=[("a", 100)]), pod("p2", prefer=[("b", 100), ("a", 50)])])
    assert nodes == ["a", "b"]
    # a holds 8 of 64 cores: another 8-core pod leaves 48 of 64 (75) and 254 of 256 Gi (99) -> (75 + 99) // 2
    assert least_allocated(sim.scheduler.nodes["a"], sim._request(pod("q"))) == 87


def test_default_plus_steer_packs_where_default_spreads():
    objs = [pod(f"p{i}", cpu="1") for i in range(6)]
    plain, steered = with_steering(lang.compile_policies([])[0])
    spread, _ = run(objs, policy=plain)
    packed, _ = run(objs, policy=steered)
    assert len(set(spread)) > 1  # LeastAllocated moves on as cpu fills
    assert len(set(packed)) == 1  # steered: one node takes all six single GPUs, the others stay whole
    assert json.dumps(steered.steers[0].name) == '"allot-steering"'
