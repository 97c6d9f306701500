"""Kubernetes manifests a policy set needs: webhook configurations narrowed to what it governs, PriorityClasses.

Pure: a `PolicySet` in, plain dicts out (the CLI serializes them). What is narrowed
and why is written down in docs/deploy.md ("What the webhook configurations intercept").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lang import ir
from policy.manifests import cel
from policy.manifests import match
from policy.manifests.scope import NamespaceScope, kind_pin, needs_gpu, scope_of, union_scopes
from policy.admission import plural
from policy.subject.dialects.workloads import RESOURCES as WORKLOAD_RESOURCES, WORKLOAD_KIND_NAMES
from policy.subject.workloads import HELD_KINDS, SCALABLE

API = "admissionregistration.k8s.io/v1"
NAME_LABEL = "kubernetes.io/metadata.name"
DIGEST_ANNOTATION = "allot.io/bundle-digest"
LABELS = {"app.kubernetes.io/name": "allot", "app.kubernetes.io/managed-by": "allot-compile"}
MUTATING_NAME = "allot-mutating"
VALIDATING_NAME = "allot-validating"

# Per-entry API-server timeouts: a decision is micro-seconds, so 5 s only covers a slow
# network or a replica restart; agents get less because every agent call waits on it.
POD_TIMEOUT = 5
GROUP_TIMEOUT = 5
AGENT_TIMEOUT = 3
RELEASE_TIMEOUT = 2  # a workload DELETE only releases a hold (fails open): a down replica delays it by this much at most

# Gang dialects whose group objects carry a gang's size and topology (policy/dialects).
GROUP_RESOURCES: tuple[tuple[str, str], ...] = (
    ("scheduling.x-k8s.io", "podgroups"),  # coscheduling plugin
    ("scheduling.sigs.k8s.io", "podgroups"),  # coscheduling before scheduler-plugins v0.28
    ("scheduling.volcano.sh", "podgroups"),  # Volcano
    ("scheduling.run.ai", "podgroups"),  # KAI scheduler
    ("scheduling.k8s.io", "workloads"),  # upstream Workload API
    ("scheduling.k8s.io", "podgroups"),  # upstream PodGroup
    ("kueue.x-k8s.io", "workloads"),  # Kueue Workload (pod groups)
)


@dataclass(frozen=True, slots=True)
class Target:
    """Where the API server reaches the webhook, and which namespaces it never intercepts."""

    service: str = "allot"
    namespace: str = "allot-system"
    port: int = 443
    ca_bundle: str | None = None  # base64 PEM, as clientConfig.caBundle wants it
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    digest: str | None = None  # bundle digest, stamped on the configurations
    url: str | None = None  # `clientConfig.url` base (https://host:port) instead of the Service, e.g. a webhook outside the cluster


@dataclass(frozen=True, slots=True)
class _Contributor:
    """One block's say in an entry: may it act on GPU-less pods, where is it pinned, does it enforce."""

    gpu_only: bool
    scope: NamespaceScope | None
    enforce: bool
    reads_operation: bool = False
    conditions: tuple[ir.Expr | None, ...] = ()  # selector, when: what must hold for it to act
    needs_gpu: bool = False  # by its meaning (quota, fraction, gang, priority default), whatever the conditions
    kinds: frozenset[str] | None = None  # the only kinds it can act on (`kind == "Workload"` in its for/when); None: any


POD_KINDS = frozenset({"Pod"})
WORKLOAD_KINDS = frozenset(WORKLOAD_RESOURCES)


def _for(contributors: list[_Contributor], kinds: frozenset[str]) -> list[_Contributor]:
    """The contributors that may act on one of `kinds`: a rule `for kind == "Workload"` widens no pod entry."""
    return [c for c in contributors if c.kinds is None or c.kinds & kinds]


def _mentions_operation(*exprs: ir.Expr | None) -> bool:
    return any(e is not None and cel.mentions(e, "operation") for e in exprs)


def _rule_contributor(r: ir.Rule) -> _Contributor:
    return _Contributor(
        gpu_only=needs_gpu(r.selector, r.when),
        scope=scope_of(r.selector, r.when),
        enforce=r.mode == "enforce",
        reads_operation=_mentions_operation(r.selector, r.when),
        conditions=(r.selector, r.when),
        kinds=kind_pin(r.selector, r.when),
    )


def _block_contributor(b) -> _Contributor:
    # Quotas charge GPUs, fractions govern shared GPUs, gang members are placed by GPUs:
    # a pod without a GPU changes none of their arithmetic (docs/deploy.md).
    return _Contributor(gpu_only=True, scope=scope_of(b.selector), enforce=b.mode == "enforce",
                        conditions=(b.selector,), needs_gpu=True)


# default / unknown class: any namespace, GPU workloads only
_PRIORITY = _Contributor(gpu_only=True, scope=None, enforce=True, needs_gpu=True)


def validating_pod_contributors(ps: ir.PolicySet) -> list[_Contributor]:
    """Blocks that can deny a pod."""
    out = [_block_contributor(b) for b in (*ps.quotas, *ps.fractions, *ps.gangs)]
    out += [_rule_contributor(r) for r in ps.rules if any(isinstance(a, ir.Deny) for a in r.actions)]
    if ps.priorities:
        out.append(_PRIORITY)
    return out


def _steer_contributor(s: ir.Steer) -> _Contributor:
    # Steering moves GPU-less pods too (one on a GPU node strands its devices): every pod its `for`
    # matches. It never denies, so a webhook that cannot be reached must not stop pods (Ignore).
    return _Contributor(gpu_only=False, scope=scope_of(s.selector), enforce=False, conditions=(s.selector,),
                        kinds=kind_pin(s.selector, None))


def mutating_pod_contributors(ps: ir.PolicySet) -> list[_Contributor]:
    """Blocks that can patch a pod: `set` rules, the default priority, gang placement affinity, steering."""
    out = [_rule_contributor(r) for r in ps.rules if any(isinstance(a, (ir.SetField, ir.SetLimit)) for a in r.actions)]
    out += [_block_contributor(g) for g in ps.gangs if g.topology]
    out += [_steer_contributor(s) for s in ps.steers]
    if any(p.default for p in ps.priorities):
        out.append(_PRIORITY)
    return out


# ---- entries --------------------------------------------------------------------------


def _namespace_selector(target: Target, scope: NamespaceScope | None) -> dict:
    excluded = sorted({target.namespace, *target.excluded_namespaces})
    exprs = [{"key": NAME_LABEL, "operator": "NotIn", "values": excluded}]
    if scope is not None and scope.exact:
        exprs.append({"key": NAME_LABEL, "operator": "In", "values": sorted(scope.names)})
    return {"matchExpressions": exprs}


def _client_config(target: Target, path: str) -> dict:
    if target.url:
        cfg: dict = {"url": target.url.rstrip("/") + path}
    else:
        cfg = {"service": {"name": target.service, "namespace": target.namespace, "path": path, "port": target.port}}
    if target.ca_bundle:
        cfg["caBundle"] = target.ca_bundle
    return cfg


def _entry(name: str, path: str, target: Target, rules: list[dict], conditions: list[dict], *, enforce: bool,
           timeout: int, scope: NamespaceScope | None = None, mutating: bool = False) -> dict:
    entry = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(target, path),
        "rules": rules,
        # Fail closed while any block enforces (a down webhook must not waive quota or agent
        # default-deny); warn/audit-only entries fail open since they never deny.
        "failurePolicy": "Fail" if enforce else "Ignore",
        "matchPolicy": "Equivalent",
        "namespaceSelector": _namespace_selector(target, scope),
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": timeout,
    }
    if conditions:
        entry["matchConditions"] = conditions
    if mutating:
        entry["reinvocationPolicy"] = "IfNeeded"
    return entry


def _pod_entry(name: str, path: str, target: Target, contributors: list[_Contributor], mutating: bool) -> dict | None:
    if not contributors:
        return None
    ops = ["CREATE", "UPDATE"] + (["DELETE"] if any(c.reads_operation for c in contributors) else [])
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops, "resources": ["pods"], "scope": "Namespaced"}]
    conditions = []
    gpu_only = all(c.gpu_only for c in contributors)
    if gpu_only:
        conditions.append({"name": "gpu-pod", "expression": cel.gpu_pod_cel()})
    # What any block's for/when needs, read from the request and the object (labels, namespace,
    # priority class, identity); with gpu-pod already required, GPU atoms are `true` here.
    selectors = match.any_block_cel([(c.conditions, c.needs_gpu) for c in contributors], gpu_required=gpu_only)
    if selectors != match.TRUE:
        conditions.append({"name": "policy-selectors", "expression": selectors})
    scope = union_scopes(c.scope for c in contributors)
    return _entry(name, path, target, rules, conditions, enforce=any(c.enforce for c in contributors),
                  timeout=POD_TIMEOUT, scope=scope, mutating=mutating)


def _group_entry(ps: ir.PolicySet, target: Target) -> dict | None:
    if not ps.gangs:
        return None
    groups: dict[str, list[str]] = {}
    for group, resource in GROUP_RESOURCES:
        groups.setdefault(group, []).append(resource)
    rules = [
        {"apiGroups": [g], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": sorted(rs),
         "scope": "Namespaced"}
        for g, rs in sorted(groups.items())
    ]
    scope = union_scopes(scope_of(g.selector) for g in ps.gangs)
    conditions = []
    if scope is not None and not scope.exact:
        conditions.append({"name": "policy-namespaces", "expression": cel.namespace_cel(scope)})
    return _entry("groups.validate.allot.io", "/validate", target, rules, conditions,
                  enforce=any(g.mode == "enforce" for g in ps.gangs), timeout=GROUP_TIMEOUT, scope=scope)


def workload_rules(operations: list[str], scale: bool) -> list[dict]:
    """Rules for the workload kinds Allot reads (Job, JobSet, LWS, ...), per API group; `scale` adds their scale sub-resources."""
    by_group: dict[str, list[str]] = {}
    for resource, group, _versions in WORKLOAD_RESOURCES.values():
        by_group.setdefault(group, []).append(resource)
        if scale and resource in SCALABLE:
            by_group[group].append(resource + "/scale")
    return [{"apiGroups": [g], "apiVersions": ["*"], "operations": operations, "resources": sorted(rs), "scope": "Namespaced"}
            for g, rs in sorted(by_group.items())]


def _workload_entry(name: str, path: str, target: Target, contributors: list[_Contributor], mutating: bool) -> dict | None:
    """Workload objects, judged at submission as the pods their templates would make (docs/deploy.md)."""
    if not contributors:
        return None
    ops = ["CREATE"] if mutating else ["CREATE", "UPDATE"]
    scope = union_scopes(c.scope for c in contributors)
    # Only workloads whose templates ask for GPUs (or a scale, whose object has no template); a rule that may act on GPU-less pods takes all.
    conditions = [{"name": "gpu-workload", "expression": cel.gpu_workload_cel()}] if all(c.gpu_only for c in contributors) else []
    if scope is not None and not scope.exact:
        conditions.append({"name": "policy-namespaces", "expression": cel.namespace_cel(scope)})
    return _entry(name, path, target, workload_rules(ops, scale=not mutating), conditions,
                  enforce=any(c.enforce for c in contributors), timeout=POD_TIMEOUT, scope=scope, mutating=mutating)


def _release_entry(ps: ir.PolicySet, target: Target) -> dict | None:
    """DELETEs of the workload kinds whose admission holds quota or a gang domain, so the hold is released at once (docs/workloads.md).

    Fails open: a DELETE Allot misses is seen by its watch a moment later (the object
    leaves the snapshot), and a webhook that is down must never block deleting a workload.
    """
    placing = [g for g in ps.gangs if g.topology]  # an admitted gang workload holds its domain
    if not ps.quotas and not placing:
        return None
    by_group: dict[str, list[str]] = {}
    for kind, (resource, group, _versions) in WORKLOAD_RESOURCES.items():
        if kind in HELD_KINDS:
            by_group.setdefault(group, []).append(resource)
    rules = [{"apiGroups": [g], "apiVersions": ["*"], "operations": ["DELETE"], "resources": sorted(rs), "scope": "Namespaced"}
             for g, rs in sorted(by_group.items())]
    scope = union_scopes([*(scope_of(q.selector) for q in ps.quotas), *(scope_of(g.selector) for g in placing)])
    conditions = [{"name": "gpu-workload-deleted", "expression": cel.gpu_workload_deleted_cel()}]
    if scope is not None and not scope.exact:
        conditions.append({"name": "policy-namespaces", "expression": cel.namespace_cel(scope)})
    return _entry("workloads-release.validate.allot.io", "/validate", target, rules, conditions, enforce=False,
                  timeout=RELEASE_TIMEOUT, scope=scope)


def agent_identity_cel(ps: ir.PolicySet) -> str:
    """CEL true for every request whose userInfo may match an `agents` identity."""
    return " || ".join(cel.identity_cel(a.identity) for a in ps.agents) or "false"


def _agent_entry(ps: ir.PolicySet, target: Target) -> dict | None:
    if not ps.agents:
        return None
    # Default deny covers every verb on every resource, so the rule is */*; the
    # matchCondition keeps all non-agent traffic away from Allot.
    rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
              "resources": ["*/*"], "scope": "*"}]
    conditions = [{"name": "agent-identity", "expression": agent_identity_cel(ps)}]
    return _entry("agents.validate.allot.io", "/validate", target, rules, conditions,
                  enforce=any(a.mode == "enforce" for a in ps.agents), timeout=AGENT_TIMEOUT)


def _metadata(name: str, target: Target) -> dict:
    meta: dict = {"name": name, "labels": dict(LABELS)}
    if target.digest:
        meta["annotations"] = {DIGEST_ANNOTATION: target.digest}
    return meta


# Kinds Allot reads (or that are its gang objects): a rule pinned to any other kind names a resource to intercept.
_READ_KINDS = POD_KINDS | WORKLOAD_KIND_NAMES | {"PodGroup", "Workload", "CompositePodGroup"}


def named_kinds(ps: ir.PolicySet) -> dict[str, bool]:
    """Kinds Allot does not read that a denying rule names (`for kind == "SparkApplication" …`) -> whether one such rule enforces."""
    out: dict[str, bool] = {}
    for r in ps.rules:
        if not any(isinstance(a, ir.Deny) for a in r.actions):
            continue
        for kind in kind_pin(r.selector, r.when) or ():
            if kind not in _READ_KINDS:
                out[kind] = out.get(kind, False) or r.mode == "enforce"
    return out


def _named_entry(ps: ir.PolicySet, target: Target) -> dict | None:
    """Objects of the kinds a rule names that Allot does not read (docs/kinds.md, *Unread kinds*): every write of them.

    The resource is the kind's plural in any API group: a policy names a kind, not its group.
    A `*/*` rule is never written (it would send Secrets, Leases and Events through Allot).
    """
    named = named_kinds(ps)
    if not named:
        return None
    rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
              "resources": sorted(plural(k) for k in named), "scope": "*"}]
    pinned = [r for r in ps.rules if any(k in named for k in kind_pin(r.selector, r.when) or ())]
    scope = union_scopes(scope_of(r.selector, r.when) for r in pinned)
    conditions = [{"name": "policy-namespaces", "expression": cel.namespace_cel(scope)}] if scope is not None and not scope.exact else []
    return _entry("named.validate.allot.io", "/validate", target, rules, conditions, enforce=any(named.values()),
                  timeout=POD_TIMEOUT, scope=scope)


def validating_configuration(ps: ir.PolicySet, target: Target = Target(), native: frozenset[str] = frozenset()) -> dict:
    """The ValidatingWebhookConfiguration: GPU pods, gang group objects, GPU workloads (and their DELETEs), agent requests.

    `native`: ids of rules whose every Pod verdict a ValidatingAdmissionPolicy gives (policy.manifests.native);
    the pod entry leaves them out, so pods only they judge never reach the webhook.
    """
    pod_ps = replace(ps, rules=tuple(r for r in ps.rules if r.id not in native)) if native else ps
    entries = [
        _pod_entry("pods.validate.allot.io", "/validate", target, _for(validating_pod_contributors(pod_ps), POD_KINDS), mutating=False),
        _group_entry(ps, target),
        _workload_entry("workloads.validate.allot.io", "/validate", target, _for(validating_pod_contributors(ps), WORKLOAD_KINDS), mutating=False),
        _release_entry(ps, target),
        _named_entry(ps, target),
        _agent_entry(ps, target),
    ]
    return {"apiVersion": API, "kind": "ValidatingWebhookConfiguration", "metadata": _metadata(VALIDATING_NAME, target),
            "webhooks": [e for e in entries if e is not None]}


# Upstream PodGroups without a class: the Priority plugin resolves theirs like a pod's (1.36, WorkloadAwarePreemption).
NO_PRIORITY_CLASS_CEL = "!has(object.spec) || !has(object.spec.priorityClassName) || object.spec.priorityClassName == ''"


def _priority_group_entry(ps: ir.PolicySet, target: Target) -> dict | None:
    """Upstream `scheduling.k8s.io` PodGroups that name no class, when the set declares a default class.

    Fails open: a missed default leaves the group at the cluster default, it waives no limit.
    """
    if not any(p.default for p in ps.priorities):
        return None
    rules = [{"apiGroups": ["scheduling.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE"],
              "resources": ["podgroups"], "scope": "Namespaced"}]
    conditions = [{"name": "no-priority-class", "expression": NO_PRIORITY_CLASS_CEL}]
    return _entry("podgroups.mutate.allot.io", "/mutate", target, rules, conditions, enforce=False,
                  timeout=GROUP_TIMEOUT, mutating=True)


# The default class into workload templates fails open, as for PodGroups: a missed default waives no limit.
_TEMPLATE_PRIORITY = _Contributor(gpu_only=True, scope=None, enforce=False, needs_gpu=True)


def mutating_configuration(ps: ir.PolicySet, target: Target = Target(), native: frozenset[str] = frozenset()) -> dict:
    """The MutatingWebhookConfiguration: GPU pods that a `set`, the default priority or placement patches;
    upstream PodGroups the default priority patches. `native`: rules whose sets a MutatingAdmissionPolicy makes."""
    pod_ps = replace(ps, rules=tuple(r for r in ps.rules if r.id not in native)) if native else ps
    entries = [_pod_entry("pods.mutate.allot.io", "/mutate", target, _for(mutating_pod_contributors(pod_ps), POD_KINDS), mutating=True),
               _priority_group_entry(ps, target),
               _workload_entry("workloads.mutate.allot.io", "/mutate", target,
                               [_TEMPLATE_PRIORITY] if any(p.default for p in ps.priorities) else [], mutating=True)]
    return {"apiVersion": API, "kind": "MutatingWebhookConfiguration", "metadata": _metadata(MUTATING_NAME, target),
            "webhooks": [e for e in entries if e is not None]}


def priority_classes(ps: ir.PolicySet) -> list[dict]:
    """One PriorityClass per `priority`; never globalDefault (Allot's default applies to GPU workloads only)."""
    out = []
    for p in ps.priorities:
        out.append({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": p.name, "labels": dict(LABELS)},
            "value": p.value,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority" if p.preempts else "Never",
            # No source path here: the output must not depend on where `allot compile` ran.
            "description": f"Allot priority {p.name}{'; the default of GPU workloads' if p.default else ''}",
        })
    return out
