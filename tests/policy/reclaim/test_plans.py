"""Reclaim and preemption plans, table-driven with builders (Kueue's preemption tests are the model).

Each case: a policy, nodes, running workloads (whole gangs, JobSets, Jobs, bare pods), one request;
and the plan expected: its kind and victims (kind/name/action), or no plan with the decision's codes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from lang import compile_policies
from policy.engine import Engine
from tests.policy.builders import gpu_container, meta, node, pod, request, snapshot

H100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"
HEAD = '''
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
gpu l4   { product "NVIDIA-L4" memory 24Gi }
topology fabric {
  rack "topology.acme.io/rack"
  host "kubernetes.io/hostname"
}
priority critical 1000 preempts
priority prod     500
priority batch    100 default
'''
TWO_TEAMS = HEAD + '''
quota team-a {
  for namespace == "team-a"
  cohort research
  gpus 8
}
quota team-b {
  for namespace == "team-b"
  cohort research
  gpus 8
}
'''
_stamp = itertools.count(1)


@dataclass
class Run:
    """A running workload: `pods` pods of `gpus` each on `nodes` (one per pod, cycled), owned as `kind`."""

    name: str
    ns: str
    nodes: tuple[str, ...]
    gpus: int = 8
    pods: int = 1
    kind: str = "JobSet"  # JobSet (label), Job (owner ref), PodGroup (gang), Pod (bare)
    priority: int = 100
    cls: str = "batch"
    product: str = H100
    order: int = field(default_factory=lambda: next(_stamp))  # later = more recently admitted

    def objects(self) -> list[dict]:
        out = []
        for i in range(self.pods):
            labels = {}
            if self.kind == "JobSet":
                labels["jobset.sigs.k8s.io/jobset-name"] = self.name
            elif self.kind == "PodGroup":
                labels["scheduling.x-k8s.io/pod-group"] = self.name
            p = pod(f"{self.name}-{i}", self.ns, [gpu_container(str(self.gpus))], labels=labels, node=self.nodes[i % len(self.nodes)],
                    priorityClassName=self.cls, priority=self.priority, nodeSelector={"nvidia.com/gpu.product": self.product})
            if self.kind == "Job":
                p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": self.name,
                                                     "uid": f"uid-{self.name}", "controller": True}]
            p["metadata"]["creationTimestamp"] = f"2026-11-30T06:{self.order:02d}:00Z"
            p["status"] = {"phase": "Running"}
            out.append(p)
        if self.kind == "JobSet":
            out.append({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(self.name, self.ns), "spec": {}})
        return out


def nodes(*specs) -> list[dict]:
    """(name, product, rack) triples, 8 GPUs each, Ready."""
    out = [node(n, product=prod, gpus="8", labels={"topology.acme.io/rack": rack}) for n, prod, rack in specs]
    for n in out:
        n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return out


def ask(name="new", ns="team-a", gpus=8, cls="batch", priority=100, product=H100, labels=None) -> dict:
    """The request: one pod (or a gang member with `labels`)."""
    p = pod(name, ns, [gpu_container(str(gpus))], labels=labels, priorityClassName=cls, priority=priority,
            nodeSelector={"nvidia.com/gpu.product": product})
    return request(p)


def decide(policy_text: str, objs: list[dict], req: dict, *, now=1000.0, reserve=False, engine=None, snap=None):
    if engine is None:
        ps, diags = compile_policies([("t.policy", policy_text)])
        assert not [d for d in diags if d.severity == "error"], diags
        engine = Engine(ps)
    snap = snap if snap is not None else snapshot(*objs)
    return engine.decide(req, snap, now, reserve=reserve), engine, snap


def victims(decision) -> list[tuple[str, str, str]]:
    return [(v.kind, v.name, v.action) for v in decision.plan.victims] if decision.plan is not None else []


RACKS = nodes(("n1", H100, "r1"), ("n2", H100, "r1"), ("n3", H100, "r2"), ("n4", H100, "r2"))


@dataclass
class Case:
    name: str
    policy: str
    nodes: list
    running: list
    req: dict
    kind: str | None  # expected plan kind (None: no plan)
    victims: list  # expected (kind, name, action), in plan order
    codes: list  # expected decision codes
    allowed: bool = True


CASES = [
    Case("lender reclaims: the most recently admitted borrower JobSet is suspended, not deleted",
         TWO_TEAMS, nodes(("n1", H100, "r1"), ("n2", H100, "r1")),
         [Run("b-old", "team-b", ("n1",)), Run("b-new", "team-b", ("n2",))],
         ask(), "reclaim", [("JobSet", "b-new", "suspend")], ["ReclaimPlanned"]),
    Case("nothing within the borrower's nominal: the older job is taken, the newer is within nominal",
         TWO_TEAMS, nodes(("n1", H100, "r1"), ("n2", H100, "r1")),
         [Run("b-small", "team-b", ("n2",), gpus=4, kind="Job"), Run("b-big", "team-b", ("n1",), kind="Job")],
         ask(), "reclaim", [("Job", "b-small", "suspend")], ["ReclaimPlanned"]),
    Case("minimal: two 1-GPU borrowers of four make room for 2 GPUs, the most recent two",
         TWO_TEAMS, nodes(("n1", H100, "r1"), ("n2", H100, "r1")),
         [Run("b-big", "team-b", ("n1",), kind="Pod"), Run("a-own", "team-a", ("n2",), gpus=4, kind="Pod"),
          *[Run(f"b-{i}", "team-b", ("n2",), gpus=1, kind="Pod") for i in range(4)]],
         ask(gpus=2), "reclaim", [("Pod", "b-3-0", "evict"), ("Pod", "b-2-0", "evict")], ["ReclaimPlanned"]),
    Case("a gang borrower is evicted whole: both pods of its group",
         TWO_TEAMS, nodes(("n1", H100, "r1"), ("n2", H100, "r1")),
         [Run("b-own", "team-b", ("n1",), kind="Pod"), Run("b-gang", "team-b", ("n2",), gpus=4, pods=2, kind="PodGroup")],
         ask(), "reclaim", [("PodGroup", "b-gang", "evict")], ["ReclaimPlanned"]),
    Case("same model: the h100 borrower goes, though the l4 one is more recent",
         TWO_TEAMS, nodes(("n1", H100, "r1"), ("n2", L4, "r1"), ("n3", H100, "r1")),
         [Run("b-own", "team-b", ("n3",)), Run("b-h100", "team-b", ("n1",)), Run("b-l4", "team-b", ("n2",), product=L4)],
         ask(), "reclaim", [("JobSet", "b-h100", "suspend")], ["ReclaimPlanned"]),
    Case("it lands already: no plan, nothing said",
         TWO_TEAMS, nodes(("n1", H100, "r1"), ("n2", H100, "r1"), ("n3", H100, "r1")),
         [Run("b-old", "team-b", ("n1",)), Run("b-new", "team-b", ("n2",))],
         ask(), None, [], []),
    Case("no borrower: a full cluster is the scheduler's business, admitted as before",
         TWO_TEAMS, nodes(("n1", H100, "r1")),
         [Run("b-own", "team-b", ("n1",))],
         ask(), None, [], []),
    Case("a critical pod preempts the quota's most recent batch workload",
         HEAD + 'quota team-a {\n for namespace == "team-a"\n gpus 8\n}\n', nodes(("n1", H100, "r1")),
         [Run("a-1", "team-a", ("n1",), gpus=4, kind="Job"), Run("a-2", "team-a", ("n1",), gpus=4, kind="Job")],
         ask(gpus=4, cls="critical", priority=1000), "preempt", [("Job", "a-2", "suspend")], ["PreemptionPlanned"]),
    Case("a tier that does not preempt is denied as before",
         HEAD + 'quota team-a {\n for namespace == "team-a"\n gpus 8\n}\n', nodes(("n1", H100, "r1")),
         [Run("a-1", "team-a", ("n1",), gpus=4, kind="Job"), Run("a-2", "team-a", ("n1",), gpus=4, kind="Job")],
         ask(gpus=4, cls="prod", priority=500), None, [], ["QuotaExceeded"], allowed=False),
    Case("preemption takes only lower priorities: critical work stays, the denial says why",
         HEAD + 'quota team-a {\n for namespace == "team-a"\n gpus 8\n}\n', nodes(("n1", H100, "r1")),
         [Run("a-1", "team-a", ("n1",), kind="Job", cls="critical", priority=1000)],
         ask(gpus=4, cls="critical", priority=1000), None, [], ["QuotaExceeded"], allowed=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plans(case):
    objs = [*case.nodes, *(o for r in case.running for o in r.objects())]
    d, _, _ = decide(case.policy, objs, case.req)
    assert d.allowed is case.allowed, d.reasons
    assert [r.code for r in d.reasons] == case.codes
    assert (d.plan.kind if d.plan else None) == case.kind
    assert victims(d) == case.victims


def test_gang_lands_in_one_rack_freed_whole():
    """A 2 x 8 gang requiring a rack: the borrower freeing n1 (beside the idle n2) goes, though n3's is more recent."""
    policy = HEAD + '''
quota team-a {
  for namespace == "team-a"
  cohort research
  gpus 16
}
quota team-b {
  for namespace == "team-b"
  cohort research
  gpus 16
}
gang training {
  for has(gang)
  require topology fabric.rack
}
'''
    running = [Run("b-n1", "team-b", ("n1",)), Run("b-n4", "team-b", ("n4",)), Run("b-n3", "team-b", ("n3",))]
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": meta("g", "team-a"), "spec": {"minMember": 2}}
    objs = [*RACKS, group, *(o for r in running for o in r.objects())]
    d, _, _ = decide(policy, objs, ask("g-0", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    assert d.allowed, d.reasons
    assert [r.code for r in d.reasons] == ["ReclaimPlanned"]  # the GangUnplaceable denial became the plan
    assert victims(d) == [("JobSet", "b-n1", "suspend")]
    assert dict(d.plan.nodes) == {"n1": 1, "n2": 1}


def test_victim_carries_what_a_controller_executes():
    case = CASES[0]
    objs = [*case.nodes, *(o for r in case.running for o in r.objects())]
    d, _, _ = decide(case.policy, objs, case.req)
    v = d.plan.victims[0]
    jobset = next(o for o in objs if o["kind"] == "JobSet" and o["metadata"]["name"] == "b-new")
    assert (v.namespace, v.uid, v.quotas, v.gpus) == ("team-b", jobset["metadata"]["uid"], ("quota team-b",), 8000)
    assert [p.name for p in v.pods] == ["b-new-0"] and v.pods[0].node == "n2"
    assert "team-b borrows 8 beyond its nominal 8" in v.reason
    assert d.plan.rules == ("quota team-a", "quota team-b") and d.plan.freed == 8000
    assert d.to_json()["plan"]["victims"][0]["action"] == "suspend"
    assert any("reclaims 8 GPUs" in w for w in d.warnings)


def test_an_admitted_plan_is_not_counted_twice():
    """The second request while the first plan's victim still runs takes the next borrower, not the same one."""
    case = CASES[0]
    policy = case.policy.replace("gpus 8\n}\nquota team-b", "gpus 16\n}\nquota team-b").replace('"team-b"\n  cohort research\n  gpus 8', '"team-b"\n  cohort research\n  gpus 0')
    assert policy.count("gpus 16") == 1 and "gpus 0" in policy
    objs = [*case.nodes, *(o for r in case.running for o in r.objects())]
    first, engine, snap = decide(policy, objs, case.req, reserve=True)
    assert victims(first) == [("JobSet", "b-new", "suspend")]
    second, _, _ = decide(policy, objs, ask("newer"), engine=engine, snap=snap, reserve=True, now=1001.0)
    assert victims(second) == [("JobSet", "b-old", "suspend")]
    later, _, _ = decide(policy, objs, ask("later"), engine=engine, snap=snap, reserve=False, now=1000.0 + 500)
    assert victims(later) == [("JobSet", "b-new", "suspend")]  # plans not carried out within their time are forgotten


def test_offline_decisions_pledge_nothing():
    case = CASES[0]
    objs = [*case.nodes, *(o for r in case.running for o in r.objects())]
    _, engine, snap = decide(case.policy, objs, case.req, reserve=False)
    again, _, _ = decide(case.policy, objs, ask("again"), engine=engine, snap=snap)
    assert victims(again) == [("JobSet", "b-new", "suspend")]


def test_the_index_is_as_before_after_a_plan():
    """The what-if puts every pod back on its device: free capacity per node is unchanged."""
    case = CASES[2]
    objs = [*case.nodes, *(o for r in case.running for o in r.objects())]
    ps, _ = compile_policies([("t.policy", case.policy)])
    engine, snap = Engine(ps), snapshot(*objs)
    engine.warm(snap)
    index = engine.state_for(snap).planner().index
    before = {n: (s.free_whole(), s.partial_states(), dict(s.allocs)) for n, s in index.nodes.items()}
    d = engine.decide(case.req, snap, 1000.0, reserve=False)
    assert d.plan is not None
    assert {n: (s.free_whole(), s.partial_states(), dict(s.allocs)) for n, s in index.nodes.items()} == before


FAIR = HEAD + '''
quota team-a {
  for namespace == "team-a"
  cohort research
  gpus 8
  weight 1
}
quota team-b {
  for namespace == "team-b"
  cohort research
  gpus 8
  weight WB
}
quota team-c {
  for namespace == "team-c"
  cohort research
  gpus 8
}
'''


@pytest.mark.parametrize("weight,victims_want,codes", [
    ("1", [("JobSet", "b-2", "suspend")], ["ReclaimPlanned"]),  # b's share 333 > a's 166 with the request: b gives way
    ("4", [], ["QuotaExceeded"]),  # weight 4: b's share 83 is below a's 166, so a cannot make it give way
])
def test_fair_share_takes_from_the_borrower_above_its_share(weight, victims_want, codes):
    running = [Run("a-own", "team-a", ("n1",)), Run("b-1", "team-b", ("n2",)), Run("b-2", "team-b", ("n3",))]
    objs = [*nodes(("n1", H100, "r1"), ("n2", H100, "r1"), ("n3", H100, "r1")), *(o for r in running for o in r.objects())]
    d, _, _ = decide(FAIR.replace("WB", weight), objs, ask(gpus=4))
    assert [r.code for r in d.reasons] == codes and d.allowed is bool(victims_want)
    assert victims(d) == victims_want
    if d.plan is not None:
        assert d.plan.kind == "fair-share" and "(share 333)" in d.plan.victims[0].reason
    else:
        assert "no fair-share plan" in d.reasons[0].message


def test_without_weights_borrowing_stays_first_come():
    """No `weight` anywhere in the tree: an over-quota request is denied as before, nobody is preempted for it."""
    running = [Run("a-own", "team-a", ("n1",)), Run("b-1", "team-b", ("n2",)), Run("b-2", "team-b", ("n3",))]
    objs = [*nodes(("n1", H100, "r1"), ("n2", H100, "r1"), ("n3", H100, "r1")), *(o for r in running for o in r.objects())]
    d, _, _ = decide(FAIR.replace("  weight WB\n", "").replace("  weight 1\n", ""), objs, ask(gpus=4))
    assert [r.code for r in d.reasons] == ["QuotaExceeded"] and d.plan is None
