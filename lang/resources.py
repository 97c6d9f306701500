"""The Kubernetes resources an `agents` allow may name, and the subresources admission sees on each.

An allow is matched against the request's resource plural and subresource (policy/blocks/agents.py);
a name that no request can carry can never match, so the checker rejects it with the closest name.
Only writes and CONNECT reach admission: read-only subresources (`pods/log`) are left out on purpose.
"""

from __future__ import annotations

import difflib
import re

_STATUS = frozenset({"status"})
_SCALE = frozenset({"status", "scale"})
_NONE: frozenset[str] = frozenset()
# Subresources of pods that admission sees: CONNECT (exec, attach, portforward, proxy) and writes.
_POD = frozenset({"exec", "attach", "portforward", "proxy", "status", "binding", "eviction", "ephemeralcontainers", "resize"})

# plural -> (API groups serving it, subresources admission sees on it). "" is the core group.
RESOURCES: dict[str, tuple[frozenset[str], frozenset[str]]] = {}


def _add(group: str, table: dict[str, frozenset[str]]) -> None:
    for plural, subs in table.items():
        groups, known = RESOURCES.get(plural, (frozenset(), _NONE))
        RESOURCES[plural] = (groups | {group}, known | subs)


_add("", {
    "pods": _POD, "services": frozenset({"status", "proxy"}), "configmaps": _NONE, "secrets": _NONE,
    "namespaces": frozenset({"status", "finalize"}), "persistentvolumeclaims": _STATUS, "persistentvolumes": _STATUS,
    "serviceaccounts": frozenset({"token"}), "nodes": frozenset({"status", "proxy"}), "events": _NONE,
    "endpoints": _NONE, "resourcequotas": _STATUS, "limitranges": _NONE, "replicationcontrollers": _SCALE,
    "podtemplates": _NONE, "bindings": _NONE,
})
_add("apps", {"deployments": _SCALE, "statefulsets": _SCALE, "replicasets": _SCALE, "daemonsets": _STATUS, "controllerrevisions": _NONE})
_add("batch", {"jobs": _STATUS, "cronjobs": _STATUS})
_add("autoscaling", {"horizontalpodautoscalers": _STATUS})
_add("policy", {"poddisruptionbudgets": _STATUS})
_add("networking.k8s.io", {"ingresses": _STATUS, "networkpolicies": _NONE, "ingressclasses": _NONE})
_add("rbac.authorization.k8s.io", {"roles": _NONE, "rolebindings": _NONE, "clusterroles": _NONE, "clusterrolebindings": _NONE})
_add("scheduling.k8s.io", {"priorityclasses": _NONE, "workloads": _STATUS, "podgroups": _STATUS})
_add("coordination.k8s.io", {"leases": _NONE})
_add("discovery.k8s.io", {"endpointslices": _NONE})
_add("events.k8s.io", {"events": _NONE})
_add("storage.k8s.io", {"storageclasses": _NONE, "volumeattachments": _STATUS, "csidrivers": _NONE, "csinodes": _NONE})
_add("resource.k8s.io", {"resourceclaims": _STATUS, "resourceclaimtemplates": _NONE, "deviceclasses": _NONE, "resourceslices": _NONE})
_add("certificates.k8s.io", {"certificatesigningrequests": frozenset({"status", "approval"})})
_add("apiextensions.k8s.io", {"customresourcedefinitions": _STATUS})
_add("admissionregistration.k8s.io", {
    "validatingwebhookconfigurations": _NONE, "mutatingwebhookconfigurations": _NONE,
    "validatingadmissionpolicies": _STATUS, "validatingadmissionpolicybindings": _NONE,
})
# The custom resources Allot reads (policy/subject/dialects): workloads and gang group objects.
_add("jobset.x-k8s.io", {"jobsets": _STATUS})
_add("leaderworkerset.x-k8s.io", {"leaderworkersets": _SCALE})
_add("kubeflow.org", {"pytorchjobs": _SCALE, "mpijobs": _STATUS, "tfjobs": _SCALE, "xgboostjobs": _SCALE, "paddlejobs": _SCALE, "jaxjobs": _SCALE})
_add("trainer.kubeflow.org", {"trainjobs": _STATUS, "trainingruntimes": _NONE, "clustertrainingruntimes": _NONE})
_add("ray.io", {"rayclusters": _STATUS, "rayjobs": _STATUS, "rayservices": _STATUS})
_add("kaito.sh", {"workspaces": _STATUS})
_add("kueue.x-k8s.io", {"workloads": _STATUS, "localqueues": _STATUS, "clusterqueues": _STATUS, "resourceflavors": _NONE, "workloadpriorityclasses": _NONE})
for _group in ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh", "scheduling.run.ai"):
    _add(_group, {"podgroups": _STATUS})
_add("scheduling.volcano.sh", {"queues": _STATUS})
_add("batch.volcano.sh", {"jobs": _STATUS})

GROUPS = frozenset(g for groups, _ in RESOURCES.values() for g in groups if g)
# What a CustomResourceDefinition can declare: only these two subresources exist for custom resources.
CUSTOM_SUBRESOURCES = frozenset({"status", "scale"})
READ_ONLY = {"log": "`pods/log` is read with a GET (`kubectl logs`), which admission never sees"}
_PLURAL = re.compile(r"[a-z]([a-z0-9-]*[a-z0-9])?")  # a DNS-1035 label, as CRD plurals are
_GROUP = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def _close(name: str, options) -> str | None:
    close = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
    return close[0] if close else None


def check_resource(text: str) -> tuple[str, str | None, str | None] | tuple[None, str, str, str]:
    """(`plural[/sub]`, None, None) for a name a request can carry, else (None, code, message, help).

    `text` is `plural`, `plural.group` (a custom resource, or a built-in one named with its group),
    each optionally followed by `/subresource`.
    """
    name, _, sub = text.partition("/")
    plural, _, group = name.partition(".")
    if not _PLURAL.fullmatch(plural) or (group and not _GROUP.fullmatch(group)):
        meant = _close(plural.lower(), RESOURCES) or _close(plural.lower() + "s", RESOURCES)
        hint = f"did you mean `{meant}`? " if meant else ""
        return None, "E0109", f"`{text}` is not a resource name", hint + "resources are lowercase plurals like `pods`, `pods/exec` or `widgets.example.com`"
    if plural in RESOURCES and (not group or group in RESOURCES[plural][0]):
        subs = RESOURCES[plural][1]
    elif group and group not in GROUPS:
        subs = CUSTOM_SUBRESOURCES  # a custom resource: what a CRD can declare
    else:
        options = [p for p, (gs, _) in RESOURCES.items() if not group or group in gs]
        meant = _close(plural, options) or (_close(plural + "s", options) if not plural.endswith("s") else None)
        shown = f"{meant}.{group}" if group and meant else meant
        hint = f"did you mean `{shown}`? " if meant else ""
        where = f"API group `{group}`" if group else "Kubernetes or the custom resources Allot knows"
        return None, "E0109", f"unknown resource `{plural}` in {where}", hint + "a custom resource is named with its API group, e.g. `widgets.example.com`"
    resource = plural + (f"/{sub}" if sub else "")
    if sub and sub not in subs:
        if sub in READ_ONLY and plural == "pods":
            return None, "E0115", f"`{text}` never reaches admission", READ_ONLY[sub] + "; what an agent may read is RBAC's to limit"
        meant = _close(sub, subs)
        hint = f"did you mean `{plural}{'.' + group if group else ''}/{meant}`? " if meant else ""
        listed = ", ".join(sorted(subs)) or "none"
        return None, "E0115", f"`{name}` has no subresource `{sub}` that admission sees", hint + f"its subresources: {listed}"
    return resource, None, None


# Subresources reached by CONNECT (kubectl exec, attach, port-forward, proxy); every other one by writes.
CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy"})


def verbs_never_match(operations: set[str], resource: str) -> str | None:
    """Why none of an allow's operations can happen on `resource` (`create pods/exec`), or None."""
    _, _, sub = resource.partition("/")
    if not sub or "*" in operations or not operations:
        return None
    if sub in CONNECT_SUBRESOURCES and "CONNECT" not in operations:
        return f"`{resource}` is only reached by CONNECT (kubectl {'port-forward' if sub == 'portforward' else sub}): write `connect {resource}`"
    if sub not in CONNECT_SUBRESOURCES and operations == {"CONNECT"}:
        return f"`{resource}` is written to, never connected to: use `create` or `update`"
    return None
