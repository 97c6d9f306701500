"""The scripted AdmissionReviews `allot demo` sends, each with what it must produce.

Against `webhook/data/demo-cluster.yaml` and the `policies/` library: team-a holds
28 of 32 GPUs (8 of 16 H100), team-b 4 of 16 and lends 8; rack r13 is the tightest
H100 rack with room for 16 GPUs. A placed gang is reserved: its members then get
node affinity to the same domain. Order matters: admitted non-dryRun requests
reserve quota, as they would in a cluster.

Every step states its whole expectation (`Expect`): allowed or denied, the EXACT set of
reason codes, the text one reason must contain (the table shows that reason, so a
step's title can be checked against what the server said), patch paths, the domain
an affinity patch pins, the placement. `allot demo` fails when one does not hold.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

AGENT = "system:serviceaccount:agents-coder:runner"
AGENT_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:agents-coder", "system:authenticated"]
H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"


@dataclass(frozen=True)
class Expect:
    """What must hold: allowed or not, the exact reason codes, a reason's text, patch paths, affinity, placement, warning."""

    allowed: bool
    codes: tuple[str, ...] = ()  # the exact set of reason codes the server gives (any mode)
    patch: tuple[str, ...] = ()  # substrings of JSONPatch paths that must appear
    placement: str | None = None  # the placement domain the decision log recorded
    warning: str | None = None
    reason: str | None = None  # text one of the server's reasons (denial or warning) must contain; shown in the table
    affinity: str | None = None  # the domain the node-affinity patch pins (its narrowest value, e.g. a rack)

    def describe(self) -> str:
        """One line: what the step expects."""
        parts = ["ALLOWED" if self.allowed else "DENIED", "codes " + (",".join(sorted(set(self.codes))) or "none")]
        if self.reason:
            parts.append(f"reason ~ {self.reason!r}")
        if self.warning:
            parts.append(f"warning ~ {self.warning!r}")
        if self.affinity:
            parts.append(f"affinity to {self.affinity}")
        if self.placement:
            parts.append(f"placed in {self.placement}")
        if self.patch:
            parts.append("patches " + ", ".join(self.patch))
        return "; ".join(parts)


@dataclass(frozen=True)
class Step:
    """One request of the script."""

    title: str
    endpoint: str  # "mutate" | "validate"
    review: dict
    expect: Expect
    notes: dict = field(default_factory=dict)


def _pod(name, ns, *, gpus=None, limits=None, labels=None, annotations=None, priority="batch", product=None,
         privileged=False, scheduler=None) -> dict:
    res = dict(limits or {})
    if gpus is not None:
        res["nvidia.com/gpu"] = str(gpus)
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3", "resources": {"limits": res}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    spec: dict = {"containers": [container]}
    if priority:
        spec["priorityClassName"] = priority
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    if scheduler:
        spec["schedulerName"] = scheduler
    meta = {"name": name, "namespace": ns, "labels": {"acme.io/owner": "alice", **(labels or {})}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _review(obj: dict | None, *, ns: str, name: str, user="alice@acme.io", groups=("acme:research", "system:authenticated"),
            operation="CREATE", kind=("", "v1", "Pod"), resource="pods", sub=None, dry_run=False) -> dict:
    g, v, k = kind
    req = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": g, "version": v, "kind": k},
        "resource": {"group": g, "version": v, "resource": resource},
        "requestKind": {"group": g, "version": v, "kind": k},
        "requestResource": {"group": g, "version": v, "resource": resource},
        "name": name, "namespace": ns, "operation": operation,
        "userInfo": {"username": user, "groups": list(groups)},
        "object": obj, "oldObject": None, "dryRun": dry_run,
    }
    if sub:
        req["subResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def _create(obj: dict, **kw) -> dict:
    meta = obj["metadata"]
    if obj["kind"] == "PodGroup":
        kw.setdefault("kind", ("scheduling.x-k8s.io", "v1alpha1", "PodGroup"))
        kw.setdefault("resource", "podgroups")
    elif obj["kind"] == "Workload":
        kw.setdefault("kind", ("kueue.x-k8s.io", "v1beta1", "Workload"))
        kw.setdefault("resource", "workloads")
    return _review(obj, ns=meta["namespace"], name=meta["name"], **kw)


def _podgroup(name: str, members: int, gpus: int) -> dict:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "train", "labels": {"acme.io/workload": "training", "team": "research"}},
            "spec": {"minMember": members, "minResources": {"nvidia.com/gpu": str(gpus)}}}


def _kueue_workload(name: str, count: int, gpus: int) -> dict:
    """A Kueue Workload (the group object of a Kueue pod group) of `count` training pods with `gpus` each."""
    template = {"spec": {"containers": [{"name": "w", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "train", "labels": {"acme.io/workload": "training", "team": "research"}},
            "spec": {"queueName": "research", "podSets": [{"name": "workers", "count": count, "template": template}]}}


def _member(name: str, group: str, total: int, gpus: int) -> dict:
    """A training Pod of Kueue pod group `group` of `total` pods (Kueue's label and annotation)."""
    return _pod(name, "train", gpus=gpus, labels={"acme.io/workload": "training", "team": "research",
                                                  "kueue.x-k8s.io/pod-group-name": group},
                annotations={"kueue.x-k8s.io/pod-group-total-count": str(total)})


def steps() -> list[Step]:
    """The script, in order."""
    team_a = {"team": "team-a"}
    exec_options = {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"], "container": "main",
                    "stdin": True, "tty": True}
    sleeping = {"team": "team-b", "agents.acme.io/state": "sleeping"}
    return [
        Step("team-a asks 10 H100: 8 in use + 10 > 16 of h100", "validate",
             _create(_pod("h100-10", "team-a", gpus=10, labels=team_a, product=H100, priority="prod")),
             Expect(False, codes=("QuotaModelExceeded",), reason="8 h100 in use + 10 requested > 16 nominal h100")),
        Step("team-a asks 4 GPUs: 28 + 4 fits its 32 exactly", "validate",
             _create(_pod("job-4", "team-a", gpus=4, labels=team_a)), Expect(True)),
        Step("team-a-dev 8 GPUs, dry run: borrows, reserves nothing", "validate",
             _create(_pod("job-8-dry", "team-a-dev", gpus=8, labels=team_a), dry_run=True), Expect(True)),
        Step("team-a-dev asks 8 GPUs: borrows 8 idle GPUs of team-b", "validate",
             _create(_pod("job-8", "team-a-dev", gpus=8, labels=team_a)), Expect(True)),
        Step("team-a asks 1 more GPU: beyond nominal 32 + borrow 8", "validate",
             _create(_pod("one-more", "team-a", gpus=1, labels=team_a)),
             Expect(False, codes=("QuotaExceeded",), reason="40 in use + 1 requested > 32 nominal + 8 borrowable")),
        Step("team-b GPU pod with no priority class gets the default", "mutate",
             _create(_pod("notebook", "team-b", gpus=1, priority=None)),
             Expect(True, patch=("/spec/priorityClassName", "/metadata/labels/team"))),
        Step("team-b pod names an undeclared priority class", "validate",
             _create(_pod("vip", "team-b", gpus=1, labels={"team": "team-b"}, priority="urgent")),
             Expect(False, codes=("UnknownPriorityClass",), reason="priority class 'urgent' is not declared")),
        Step("inference: 10 GiB HAMi slice of an L4, no vram-floor", "validate",
             _create(_pod("chat-new", "inference-chat", priority="prod", product=L4,
                          labels={"team": "serving", "app.kubernetes.io/component": "inference"},
                          limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"})),
             Expect(True, codes=("RuleDenied",), warning="vram-floor")),
        Step("inference: a 4 GiB slice is under the 10Gi floor", "validate",
             _create(_pod("chat-tiny", "inference-chat", priority="prod", product=L4, labels={"team": "serving"},
                          limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"})),
             Expect(False, codes=("FractionMemoryBelowFloor",), reason="GPU memory 4Gi < floor 10Gi")),
        Step("gang llm-16 (Kueue, 2 x 8 GPUs) fits the tightest rack", "validate",
             _create(_kueue_workload("llm-16", 2, 8)), Expect(True, placement="r13")),
        Step("llm-16's first member: pinned to its group's rack r13", "mutate",
             _create(_member("llm-16-0", "llm-16", 2, 8)),
             Expect(True, patch=("/spec/affinity", "/metadata/annotations"), affinity="r13", placement="r13")),
        Step("llm-16's second member: the same rack r13", "mutate",
             _create(_member("llm-16-1", "llm-16", 2, 8)),
             Expect(True, patch=("/spec/affinity",), affinity="r13", placement="r13")),
        Step("pod group k16 (2 x 8, no group object): 16 > 8, a rack", "mutate",
             _create(_member("k16-0", "k16", 2, 8)),
             Expect(True, patch=("/spec/affinity",), affinity="r13", placement="r13")),  # r13 had 32 free
        Step("distributed member (2 x 4 GPUs): pinned to one host", "mutate",
             _create(_pod("ddp-0", "train", gpus=4, product=H100, labels={
                 "acme.io/workload": "distributed", "team": "research", "kueue.x-k8s.io/pod-group-name": "ddp"},
                 annotations={"kueue.x-k8s.io/pod-group-total-count": "2"})),
             Expect(True, patch=("/spec/affinity",), affinity="h100-b3-r24-7", placement="h100-b3-r24-7")),
        Step("gang of 16 x 8 GPUs needs one block: none has 128 free", "validate",
             _create(_kueue_workload("llm-128", 16, 8)),
             Expect(False, codes=("GangUnplaceable", "RuleDenied"), reason="no block of topology fabric holds 16 pods of 8 GPUs")),
        Step("a PodGroup of 16 x 8 with no pod template, on H100 and L4 nodes: not yet placeable", "validate",
             _create(_podgroup("llm-pg", 16, 128)),
             Expect(False, codes=("GangNotYetPlaceable", "RuleDenied"), reason="not yet placeable: the GPU model of PodGroup train/llm-pg")),
        Step("agent creates a 0.25 GPU pod in agents-sandbox", "validate",
             _create(_pod("tool-1", "agents-sandbox", priority="batch", labels={"team": "agents"}, scheduler="kai-scheduler",
                          annotations={"gpu-fraction": "0.25"}), user=AGENT, groups=AGENT_GROUPS),
             Expect(True)),
        Step("agent creates a GPU pod outside the sandbox", "validate",
             _create(_pod("tool-2", "team-b", gpus=1, labels={"team": "team-b"}), user=AGENT, groups=AGENT_GROUPS),
             Expect(False, codes=("AgentNotAllowed",), reason="agents are denied by default; no allow matches CREATE pods in namespace team-b (identity")),
        Step("agent creates a privileged pod in the sandbox", "validate",
             _create(_pod("root-1", "agents-sandbox", priority=None, labels={"team": "agents"}, privileged=True),
                     user=AGENT, groups=AGENT_GROUPS),
             Expect(False, codes=("AgentDenied",), reason="agents may not escalate")),
        Step("agent execs into a pod", "validate",
             _review(exec_options, ns="agents-sandbox", name="tool-0", operation="CONNECT", user=AGENT, groups=AGENT_GROUPS,
                     kind=("", "v1", "PodExecOptions"), sub="exec"),
             Expect(False, codes=("AgentNotAllowed",), reason="no allow matches CONNECT pods/exec")),
        # alice (no agent identity) creates it: the rule is the point. Its agents.* label still marks
        # the pod an agent, so the agents blocks deny it too (no namespace is allowed by both).
        Step("alice's pod labelled a sleeping agent holds a GPU", "validate",
             _create(_pod("nap-1", "team-b", gpus=1, labels=sleeping)),
             Expect(False, codes=("RuleDenied", "AgentNotAllowed"),
                    reason="rule sleeping-agents-hold-no-gpus: a sleeping agent holds 1 GPUs")),
        Step("an agent identity's sleeping pod: agents deny it first", "validate",
             _create(_pod("nap-2", "team-b", gpus=1, labels=sleeping), user=AGENT, groups=AGENT_GROUPS),
             Expect(False, codes=("AgentNotAllowed", "RuleDenied"),
                    reason="agents agents: agents are denied by default; no allow matches CREATE pods in namespace team-b (identity")),
        Step("a CPU-only pod is none of Allot's business", "mutate",
             _create(_pod("web", "default", priority=None, limits={"cpu": "1"})), Expect(True)),
    ]
