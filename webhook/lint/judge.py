"""Judge each manifest with the webhook's engine, offline: a CREATE by one identity, against an optional snapshot.

The policy set is compiled once and one `Engine` decides every object (mutating side, so
`set` rules report what they would write and the JSONPatch of the fill comes back too);
nothing is reserved, so every object is judged alone against the snapshot. Without a
snapshot, findings that need cluster state (policy/lint/fields.py CLUSTER_CODES) are
notes that say so, never violations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from policy.cluster.errors import SnapshotError
from policy.cluster.snapshot import CLUSTER_SCOPED, ClusterSnapshot
from policy.engine import Engine
from policy.lint.fields import HELP, QUOTA_CODES, needs_cluster, needs_subject, reason_path
from policy.lint.patches import Authors, for_git, op_keys
from policy.lint.nodes import CODE as NO_NODE_HOLDS, find_unholdable, largest_gpus
from policy.lint.scope import governed
from policy.subject.dialects.gangs import group_family
from policy.subject.dialects.unread import unread_problem
from policy.subject.normalize import normalize
from webhook.cli.eval import build_request
from webhook.errors import UsageError
from webhook.lint.finding import SEVERITY_OF_MODE, Finding
from webhook.lint.reader import Document

BAD_OBJECT = "ManifestNotAdmissible"  # the object cannot be wrapped into an AdmissionReview
PATCH = "AdmissionPatch"  # a JSONPatch op the mutating webhook would send (a `set` or the default priority)
NOT_JUDGED = " (not judged: no --cluster, so usage and nodes are unknown)"
ALONE = " (with nothing else running: the object alone is over the quota)"


# kind -> the API group it must come from, for the objects `learn_state` takes from the manifests.
STATE_KINDS = {"Namespace": "", "ResourceClaim": "resource.k8s.io", "ResourceClaimTemplate": "resource.k8s.io",
               "DeviceClass": "resource.k8s.io", "ResourceSlice": "resource.k8s.io", "TrainingRuntime": "trainer.kubeflow.org",
               "ClusterTrainingRuntime": "trainer.kubeflow.org"}


def is_state_object(obj: dict) -> bool:
    """Whether a manifest is one the others refer to (a Namespace, a claim template, a device slice, a runtime, a gang object)."""
    kind, api = obj.get("kind"), obj.get("apiVersion")
    if type(api) is not str or type(kind) is not str:
        return False
    if kind == "Namespace":
        return api == "v1"
    group = api.split("/", 1)[0] if "/" in api else ""
    if kind in STATE_KINDS:
        return group == STATE_KINDS[kind]
    return group_family(api, kind) is not None


@dataclass(slots=True)
class Judged:
    """One object's outcome: its findings, the fill (JSONPatch ops) and whether the policy set governs its kind."""

    doc: Document
    findings: list[Finding] = field(default_factory=list)
    patch: tuple = ()
    sets: list[tuple[tuple[str, ...], object]] = field(default_factory=list)  # warn/audit `set`s: (path, value) to fill
    governed: bool = True
    unjudged: int = 0  # capacity findings shown as notes for want of --cluster


class Linter:
    """A policy set compiled once, deciding manifests one by one."""

    def __init__(self, policy_set, *, snapshot: ClusterSnapshot | None, user: str, groups: tuple[str, ...],
                 now: float, namespace: str | None = None):
        self.engine = Engine(policy_set)
        self.governed = governed(policy_set)
        self.authors = Authors(policy_set)
        self.cluster = snapshot is not None
        self.snapshot = snapshot if snapshot is not None else ClusterSnapshot()
        self.user, self.groups, self.now, self.namespace = user, groups, now, namespace
        self._largest = None  # the most GPUs one node offers, per product: read once, on the first GPU object

    def learn_state(self, documents) -> int:
        """Take the objects among `documents` that others refer to into the snapshot: Namespaces (their labels),
        DRA claims and claim templates, Trainer runtimes, gang objects (PodGroups, Workloads).

        A manifest repository usually declares them beside the workloads; what it says is
        what the cluster will hold once applied, so it wins over a `--cluster` dump.
        """
        learned = 0
        for doc in documents:
            obj = doc.obj
            if not isinstance(obj.get("metadata"), dict) or not is_state_object(obj):
                continue
            if obj.get("kind") not in CLUSTER_SCOPED and obj.get("kind") not in ("ClusterTrainingRuntime", "ResourceSlice"):
                obj = self._with_namespace(obj)  # stored where the objects naming no namespace are judged
            try:
                self.snapshot.apply("ADDED", obj)
            except SnapshotError:
                continue  # judged (and reported) like any other object
            learned += 1
        return learned

    def judge(self, doc: Document) -> Judged:
        """Decide one object and locate every reason in its manifest."""
        obj = doc.obj
        out = Judged(doc)
        covered = self.governed.covers(obj["apiVersion"], obj["kind"])
        # A kind Allot does not read that may ask for GPUs is judged all the same: `UnreadWorkload`, never skipped in silence.
        if not covered and not self.governed.agents_any and unread_problem(obj, obj["kind"]) is None:
            out.governed = False
            return out
        if "metadata" in obj and not isinstance(obj["metadata"], dict):
            out.findings.append(Finding(doc.path, doc.line, 1, BAD_OBJECT, "error", "metadata must be a mapping",
                                        object_line=doc.line, object=f"{obj['kind']} ?"))
            return out
        obj = self._with_namespace(obj)
        try:
            request = build_request(obj, user=self.user, groups=self.groups, operation="CREATE")
        except (UsageError, ValueError) as exc:  # ValueError: a structure that refers to itself (merge keys and aliases)
            out.findings.append(Finding(doc.path, doc.line, 1, BAD_OBJECT, "error", str(exc).removeprefix("request: "),
                                        object_line=doc.line, object=_who(obj)))
            return out
        decision = self.engine.decide(request, self.snapshot, self.now, mutate=True, reserve=False)
        if not covered and not decision.blocks and not decision.reasons:
            out.governed = False  # only an agents block could have governed it, and none did
            return out
        out.patch = for_git(decision.patch)
        w = None  # the normalized subject, built again only for reasons that point into a template
        who = _who(obj)
        if self.cluster:
            if self._largest is None:
                self._largest = largest_gpus(self.snapshot.nodes())
            if self._largest:
                w = self.engine.enrich(normalize(request, self.snapshot))
                for u in find_unholdable(w, self._largest):
                    out.findings.append(self._located(doc, reason_path(NO_NODE_HOLDS, "", "", {}, w), NO_NODE_HOLDS, "warning",
                                                      u.message(), None, None, HELP.get(NO_NODE_HOLDS), who))
        if not decision.reasons and not decision.patch:
            return out
        for r in decision.reasons:
            severity = SEVERITY_OF_MODE.get(r.mode, "error")
            message = r.message
            if not self.cluster:
                if needs_cluster(r.code, r.data):
                    severity, message = "note", message + NOT_JUDGED
                    out.unjudged += 1
                elif r.code in QUOTA_CODES:
                    message += ALONE
            if r.code == "RuleWouldSet" and isinstance(r.data.get("path"), list):
                path, value = tuple(str(p) for p in r.data["path"]), r.data.get("value")  # as the rule wrote it: a label's text, a limit's quantity as the request says it
                out.sets.append((path, value))
            if w is None and needs_subject(r.code, r.block):
                w = self.engine.enrich(normalize(request, self.snapshot))
            keys = reason_path(r.code, r.block, r.message, r.data, w)
            out.findings.append(self._located(doc, keys, r.code, severity, message, r.block,
                                              r.location if r.location != "request" else None, HELP.get(r.code), who))
        out.findings.extend(self._fill_notes(doc, decision.patch, who))
        return out

    def _fill_notes(self, doc: Document, ops, who: str) -> list[Finding]:
        """One `AdmissionPatch` note per block's fill, at the field it replaces, else at the object's first line."""
        groups: dict[object, tuple[object, list[dict]]] = {}
        for op in ops:
            author, _ = self.authors.of(op)
            groups.setdefault(author.block if author else op.get("path"), (author, []))[1].append(op)
        notes = []
        for author, group in groups.values():
            git = for_git(group)
            written = {op.get("path") for op in git}
            said = "; ".join(f"{op['op']} {op['path']}" + (f" = {json.dumps(op['value'])}" if "value" in op else "") for op in git)
            computed = [op["path"] for op in group if op.get("path") not in written]
            if computed:
                said += f"; it also sends {' and '.join(computed)}, which the API server computes from the class (--fix leaves them out)"
            keys = op_keys(git[0]) if git else ()
            line, col, found = doc.field_line(keys) if keys else (doc.line, 1, ())
            if found != keys:
                line, col, found = doc.line, 1, ()
            notes.append(Finding(doc.path, line, col, PATCH, "note", f"admission would {said}",
                                 author.block if author else None, author.location if author else None,
                                 "`allot lint --fix` writes it into the manifest", doc.line, _dotted(found) or None, who))
        return notes

    def _with_namespace(self, obj: dict) -> dict:
        meta = obj.get("metadata")
        if self.namespace is None or (isinstance(meta, dict) and meta.get("namespace")):
            return obj
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta["namespace"] = self.namespace
        return {**obj, "metadata": meta}

    @staticmethod
    def _located(doc: Document, keys, code, severity, message, block, location, help_text, who) -> Finding:
        line, col, found = doc.field_line(keys) if keys else (doc.line, 1, ())
        if not found:
            line, col = doc.line, 1
        dotted = _dotted(found) if found else None
        return Finding(doc.path, line, col, code, severity, message, block, location, help_text, doc.line, dotted, who)


def _dotted(keys: tuple[str, ...]) -> str:
    out = ""
    for k in keys:
        out += f"[{k}]" if k.isdigit() or "." in k or "/" in k else ("." + k if out else k)
    return out


def _who(obj: dict) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName") or "?"
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if isinstance(ns, str) and ns else ''}{name}"
