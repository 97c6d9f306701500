"""Where each block runs: natively in the API server (ValidatingAdmissionPolicy) or in the webhook, and the policies.

Pure: a `PolicySet` in, a `Plan` (one `Placement` per governing block) and plain dicts out.
A rule's `deny` compiles to a ValidatingAdmissionPolicy over Pods when its `for`, `when`
and message translate exactly (`native_cel`); what needs cluster state (usage, placement,
gangs, GPU dialects, the live PriorityClass) stays in the webhook, with the reason said.
What compiles and why is written down in docs/native.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lang import ir
from policy.admission import headline
from policy.context import where
from policy.manifests import native_agents, native_cel, native_map
from policy.manifests.native_cel import Untranslatable
from policy.manifests.scope import kind_pin, scope_of

API = "admissionregistration.k8s.io/v1"
LABELS = {"app.kubernetes.io/name": "allot", "app.kubernetes.io/managed-by": "allot-compile"}
NAME_LABEL = "kubernetes.io/metadata.name"
NEWEST = (1, 36)  # the newest GA Kubernetes minor Allot knows
VAP_SINCE = (1, 30)  # ValidatingAdmissionPolicy GA (admissionregistration.k8s.io/v1)
MAP_SINCE = (1, 36)  # MutatingAdmissionPolicy GA and served by default
_ACTIONS = {"enforce": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}

NATIVE, WEBHOOK, SPLIT = "native", "webhook", "split"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one block runs: `native`, `webhook` or `split`, what runs natively, and why each other part does not."""

    block: str
    where: str
    native: tuple[str, ...] = ()  # parts judged by the API server ("deny on Pods")
    reasons: tuple[str, ...] = ()  # why the other parts stay in the webhook
    location: str = ""

    def as_json(self) -> dict:
        """The JSON form of `allot compile --explain --format json`."""
        return {"block": self.block, "runs": self.where, "native": list(self.native), "webhook": list(self.reasons),
                "location": self.location}


@dataclass(frozen=True, slots=True)
class _Validation:
    """A rule's deny as the API server's CEL: `for` as matchCondition, `when` as the validation."""

    rule: ir.Rule
    selector: str
    when: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    """Every governing block's placement, and the native policies to emit."""

    placements: tuple[Placement, ...]
    validations: tuple[_Validation, ...] = ()
    notes: tuple[str, ...] = field(default=())
    mutations: tuple[native_map.Mutation, ...] = ()
    agents: tuple[native_agents.AgentDenies, ...] = ()

    @property
    def native_pod_blocks(self) -> frozenset[str]:
        """Ids of rules whose every Pod verdict the native policies give (the webhook's validating pod entry may skip them)."""
        return frozenset(v.rule.id for v in self.validations)

    @property
    def native_set_blocks(self) -> frozenset[str]:
        """Ids of rules whose every Pod patch a MutatingAdmissionPolicy makes (the webhook's mutating pod entry may skip them)."""
        return frozenset(m.rule.id for m in self.mutations)


def parse_version(text: str) -> tuple[int, int]:
    """`1.33` (or `v1.33.2`) -> (1, 33); ValueError when it is not a Kubernetes version."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes version (give e.g. 1.36)")
    return int(m.group(1)), int(m.group(2))


def _sets(r: ir.Rule) -> bool:
    return any(isinstance(a, (ir.SetField, ir.SetLimit)) for a in r.actions)


def _first_deny(r: ir.Rule) -> ir.Deny | None:
    return next((a for a in r.actions if isinstance(a, ir.Deny)), None)


def _deny(r: ir.Rule, version: tuple[int, int]) -> tuple[_Validation | None, str | None]:
    """The rule's deny as a validation, or the reason it stays in the webhook."""
    deny = _first_deny(r)
    if sum(isinstance(a, ir.Deny) for a in r.actions) > 1:
        return None, "deny: several messages in one rule are joined by the webhook"
    if version < VAP_SINCE:
        return None, "deny: ValidatingAdmissionPolicy is GA from 1.30"
    try:
        selector = native_cel.translate(r.selector)
        when = native_cel.translate(r.when)
        # The webhook's status.message for this single reason: policy.admission.denial_message.
        text = headline(r.id, f"{r.name}: ")
        msg = native_cel.message(deny.message, "allot denied: " + text, f" ({where(deny.span)})")
    except Untranslatable as exc:
        return None, f"deny: {exc}"
    return _Validation(r, selector, when, msg), None


def _set(r: ir.Rule, version: tuple[int, int]) -> tuple[native_map.Mutation | None, str | None]:
    """The rule's sets as a mutation, or the reason they stay in the webhook."""
    if version < MAP_SINCE:
        return None, "set: MutatingAdmissionPolicy is GA from 1.36"
    try:
        return native_map.mutation(r), None
    except Untranslatable as exc:
        return None, f"set: {exc}"


def _rule(r: ir.Rule, version: tuple[int, int]) -> tuple[Placement, _Validation | None, native_map.Mutation | None]:
    loc = where(r.span)
    native: list[str] = []
    reasons: list[str] = []
    v = m = None
    if _first_deny(r) is not None:
        v, why = _deny(r, version)
        if v is None:
            reasons.append(why)
        else:
            native.append("deny on Pods")
            kinds = kind_pin(r.selector, r.when)
            if kinds is None or not kinds <= {"Pod"}:
                reasons.append("deny on workload objects (Job, JobSet, ...): their subject is read from their pod templates by the workload dialects")
    if _sets(r):
        m, why = _set(r, version)
        if m is None:
            reasons.append(why)
        else:
            native.append("set on Pods")  # the webhook's sets patch pods only
    where_ = WEBHOOK if not native else NATIVE if not reasons else SPLIT
    return Placement(r.id, where_, tuple(native), tuple(reasons), loc), v, m


_STATEFUL_BLOCKS = (
    ("quotas", "reads usage: the quota ledger and the cluster's running workloads"),
    ("fractions", "reads GPU shares through the GPU dialects, and how many pods share a GPU"),
    ("gangs", "needs placement and the gang's group objects in the cluster state"),
)


def plan(ps: ir.PolicySet, version: tuple[int, int] = NEWEST) -> Plan:
    """Where every governing block of `ps` runs for a cluster of `version`; no block is left out."""
    out: list[Placement] = []
    validations: list[_Validation] = []
    mutations: list[native_map.Mutation] = []
    agents: list[native_agents.AgentDenies] = []
    if ps.priorities:
        out.append(Placement("priority", WEBHOOK, (), (
            "the default class is set on GPU workloads, which Allot recognises through its GPU dialects",
            "an unknown class is judged against the live PriorityClass objects"), where(ps.priorities[0].span)))
    for attr, reason in _STATEFUL_BLOCKS:
        for b in getattr(ps, attr):
            out.append(Placement(b.id, WEBHOOK, (), (reason,), where(b.span)))
    for a in ps.agents:
        part, reasons = native_agents.agent_denies(a) if version >= VAP_SINCE else (None, [
            "ValidatingAdmissionPolicy is GA from 1.30"])
        if part is not None:
            agents.append(part)
        out.append(Placement(a.id, SPLIT if part is not None else WEBHOOK, ("deny on Pods",) if part else (),
                             tuple(reasons), where(a.span)))
    for r in ps.rules:
        p, v, m = _rule(r, version)
        out.append(p)
        if v is not None:
            validations.append(v)
        if m is not None:
            mutations.append(m)
    notes = []
    if version < VAP_SINCE:
        notes.append(f"--kube-version {version[0]}.{version[1]}: ValidatingAdmissionPolicy is GA from 1.30; every block runs in the webhook")
    if version < MAP_SINCE:
        notes.append(f"--kube-version {version[0]}.{version[1]}: MutatingAdmissionPolicy is GA from 1.36; mutations run in the webhook")
    return Plan(tuple(out), tuple(validations), tuple(notes), tuple(mutations), tuple(agents))


# ---- objects --------------------------------------------------------------------------


def policy_name(block_id: str) -> str:
    """A DNS-subdomain object name for a block: `allot-rule-critical-is-for-serving`."""
    name = re.sub(r"[^a-z0-9-]+", "-", ("allot-" + block_id).lower()).strip("-")
    return name[:253]


def _namespace_selector(excluded: tuple[str, ...], scope) -> dict:
    exprs = [{"key": NAME_LABEL, "operator": "NotIn", "values": sorted(set(excluded))}]
    if scope is not None and scope.exact:
        exprs.append({"key": NAME_LABEL, "operator": "In", "values": sorted(scope.names)})
    return {"matchExpressions": exprs}


def _metadata(name: str, digest: str | None) -> dict:
    meta: dict = {"name": name, "labels": dict(LABELS)}
    if digest:
        meta["annotations"] = {"allot.io/bundle-digest": digest}
    return meta


def _vap(block_id: str, mode: str, scope, condition: tuple[str, str] | None, validations: list[dict],
         excluded: tuple[str, ...], digest: str | None) -> list[dict]:
    name = policy_name(block_id)
    spec: dict = {
        # Fail closed while the block enforces: a CEL error must not waive a deny (as the webhook's failurePolicy).
        "failurePolicy": "Fail" if mode == "enforce" else "Ignore",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                               "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": _namespace_selector(excluded, scope),
            "matchPolicy": "Equivalent",
        },
    }
    if condition is not None and condition[1] != "true":
        spec["matchConditions"] = [{"name": condition[0], "expression": condition[1]}]
    spec["validations"] = validations
    policy = {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": _metadata(name, digest), "spec": spec}
    binding = {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": _metadata(name, digest),
               "spec": {"policyName": name, "validationActions": list(_ACTIONS[mode])}}
    return [policy, binding]


def _objects(v: _Validation, excluded: tuple[str, ...], digest: str | None) -> list[dict]:
    r = v.rule
    checks = [{"expression": f"!({v.when})", "messageExpression": v.message, "reason": "Forbidden"}]
    return _vap(r.id, r.mode, scope_of(r.selector, r.when), ("for", v.selector), checks, excluded, digest)


def validating_policies(p: Plan, excluded: tuple[str, ...] = ("allot-system", "kube-system"),
                        digest: str | None = None) -> list[dict]:
    """ValidatingAdmissionPolicy + binding for every natively judged deny of the plan (rules, then agents' denies)."""
    out = [o for v in p.validations for o in _objects(v, excluded, digest)]
    for a in p.agents:
        # Identity-governed requests come from any namespace: no namespace pin beyond Allot's own exclusions.
        out += _vap(a.block.id, a.block.mode, None, ("governed", a.governed), native_agents.validations(a), excluded, digest)
    return out


def _mutating_objects(m: native_map.Mutation, excluded: tuple[str, ...], digest: str | None) -> list[dict]:
    r = m.rule
    name = policy_name(r.id)
    spec = {
        "failurePolicy": "Fail",  # enforce only: a set the policy promises must not be skipped silently
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                               "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": _namespace_selector(excluded, scope_of(r.selector, r.when)),
            "matchPolicy": "Equivalent",
        },
        "matchConditions": [{"name": "for-when", "expression": m.condition}],
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": native_map.apply_expression(m)}}],
        "reinvocationPolicy": "IfNeeded",  # as the webhook entries: later mutations may change what `for` reads
    }
    policy = {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": _metadata(name, digest), "spec": spec}
    binding = {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding", "metadata": _metadata(name, digest),
               "spec": {"policyName": name}}
    return [policy, binding]


def mutating_policies(p: Plan, excluded: tuple[str, ...] = ("allot-system", "kube-system"),
                      digest: str | None = None) -> list[dict]:
    """MutatingAdmissionPolicy + binding for every natively made `set` of the plan."""
    return [o for m in p.mutations for o in _mutating_objects(m, excluded, digest)]


def explain_lines(p: Plan) -> list[str]:
    """One line per block: where it runs, what is native, why the rest is not."""
    lines = []
    for pl in p.placements:
        head = f"  {pl.block} ({pl.location}): {pl.where}"
        if pl.native:
            head += f"; native: {', '.join(pl.native)}"
        lines.append(head)
        lines += [f"      webhook: {why}" for why in pl.reasons]
    return lines + [f"  note: {n}" for n in p.notes]
