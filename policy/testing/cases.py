"""Policy test cases: the strict `*.test.yaml` schema and running one case against a decide function.

Pure: no file reads, no clock. The runner (`webhook/testing/runner.py`) reads files,
builds the engine and cluster snapshot, and hands `run_case` a `decide` callable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from policy.decision import Decision
from policy.testing.expect import Mismatch, compare_decision
from policy.testing.patch import apply_patch

DEFAULT_NOW = 1_800_000_000.0  # a fixed instant (2027-01-15) so cases never depend on the wall clock
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
WRAP_KEYS = ("user", "groups", "operation", "dryRun", "namespace", "old")
# Kinds the snapshot keys by (namespace,) name alone; other kinds (gang objects, …) also need their apiVersion
_KEYED_BY_NAME = frozenset({"Pod", "Node", "Namespace", "PriorityClass", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass"})


class _Strict(BaseModel):
    """Unknown keys are errors and YAML scalars are not coerced ("true" is not a bool)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


def _compile_patterns(patterns: list[str] | None) -> list[str] | None:
    """Reject a bad regex when the file is loaded, not when the case runs."""
    for p in patterns or ():
        try:
            re.compile(p)
        except re.error as exc:
            raise ValueError(f"bad regex {p!r}: {exc}") from None
    return patterns


class PlacementExpect(_Strict):
    """The expected placement domain; every given field must equal the decision's."""

    value: str | None = None
    label: str | None = None
    topology: str | None = None
    level: str | None = None
    nodes: dict[str, int] | None = None


class Expect(_Strict):
    """What must come out of the decision; `allowed` is required so no case passes by accident."""

    allowed: bool
    denied_by: list[str] | None = None  # exact set of block ids of enforcing reasons
    codes: list[str] | None = None  # exact set of reason codes, any mode
    messages: list[str] | None = None  # regexes; each must match some reason message; [] = no reasons
    warnings: list[str] | None = None  # regexes; each must match some warning; [] = no warnings
    audit: dict[str, str] | None = None  # key -> regex of the value; {} = no audit annotations
    patch: list[dict[str, Any]] | None = None  # the exact JSONPatch, in order
    patched: dict[str, Any] | None = None  # subset of the object after the patch; null = key absent
    patched_exact: bool = False  # compare `patched` for equality instead of as a subset
    placement: str | PlacementExpect | None = None  # domain value, fields, or null = no placement

    @field_validator("messages", "warnings")
    @classmethod
    def _check_patterns(cls, v: list[str] | None) -> list[str] | None:
        return _compile_patterns(v)

    @field_validator("audit")
    @classmethod
    def _check_audit(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        _compile_patterns(list((v or {}).values()))
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Expect":
        if self.allowed and self.denied_by:
            raise ValueError("allowed: true contradicts a non-empty denied_by")
        if not self.allowed and self.denied_by == []:
            raise ValueError("allowed: false needs at least one block in denied_by (or omit it)")
        if self.patched_exact and self.patched is None:
            raise ValueError("patched_exact needs patched")
        return self

    def expects_placement(self) -> bool:
        """Whether the file said anything about placement (null counts: it asserts none)."""
        return "placement" in self.model_fields_set


class Send(_Strict):
    """One request to send: a manifest plus how to wrap it, or a full AdmissionReview."""

    request: dict[str, Any]  # a manifest, or a full AdmissionReview (kind: AdmissionReview)
    now: float | int | None = None  # seconds; default: the file's `now`, else DEFAULT_NOW
    user: str | None = None
    groups: list[str] | None = None
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"] | None = None
    dry_run: bool | None = Field(default=None, alias="dryRun")
    namespace: str | None = None
    old: dict[str, Any] | None = None  # oldObject for UPDATE/DELETE

    @model_validator(mode="after")
    def _wrappable(self) -> "Send":
        if is_review(self.request):
            given = [k for k in WRAP_KEYS if getattr(self, _attr(k)) is not None]
            if given:
                raise ValueError(f"request is a full AdmissionReview; move {', '.join(given)} into it")
            if not isinstance(self.request.get("request"), dict):
                raise ValueError("a full AdmissionReview needs a `request` object")
        elif not isinstance(self.request.get("kind"), str):
            raise ValueError("request manifest needs a `kind`")
        return self


class Prior(Send):
    """A `before` request; `persist: true` also stores what was admitted in the cluster state, as the API server would."""

    persist: bool = False

    @model_validator(mode="after")
    def _persistable(self) -> "Prior":
        if is_review(self.request):
            inner = self.request.get("request")
            inner = inner if isinstance(inner, dict) else {}
            op, dry = inner.get("operation"), inner.get("dryRun")
        else:
            op, dry = self.operation, self.dry_run
        if self.persist and op == "CONNECT":
            raise ValueError("persist: a CONNECT stores nothing in the cluster")
        if self.persist and dry is True:
            raise ValueError("persist: the API server stores nothing for a dry run")
        return self


class ObjectRef(_Strict):
    """An object to remove from the cluster state: kind, name, namespace (namespaced kinds) and apiVersion (gang objects)."""

    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)
    namespace: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")

    def as_object(self) -> dict:
        """The minimal object a snapshot delete needs."""
        meta = {"name": self.name, **({"namespace": self.namespace} if self.namespace is not None else {})}
        return {"apiVersion": self.api_version or "", "kind": self.kind, "metadata": meta}

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


class ClusterEdit(_Strict):
    """A `before` step that changes the case's cluster state: objects added (or replaced), then objects removed."""

    add: list[dict[str, Any]] = Field(default_factory=list)  # full objects, as `kubectl get -o yaml` shows them
    remove: list[ObjectRef] = Field(default_factory=list)  # each must be in the cluster state

    @model_validator(mode="after")
    def _something(self) -> "ClusterEdit":
        if not self.add and not self.remove:
            raise ValueError("a cluster edit needs `add` or `remove` (or both)")
        return self


def _step_kind(value: Any) -> str:
    """`edit` for a step with add/remove and no request, else `send`: one schema's errors, not two."""
    if isinstance(value, dict) and "request" not in value and ("add" in value or "remove" in value):
        return "edit"
    if isinstance(value, ClusterEdit):
        return "edit"
    return "send"


Step = Annotated[Union[Annotated[Prior, Tag("send")], Annotated[ClusterEdit, Tag("edit")]], Discriminator(_step_kind)]


class Case(Send):
    """One request against one cluster state, with its expectations."""

    name: str = Field(min_length=1)
    cluster: str | dict[str, Any] | None = None  # path relative to the test file, or an inline List
    before: list[Step] = Field(default_factory=list)  # requests admitted and cluster edits, in order, on one engine and snapshot
    mutate: bool = True  # decide as the mutating endpoint (patches included) or the validating one
    mode: Literal["enforce", "warn", "audit"] | None = None  # override every block's mode
    expect: Expect

    @model_validator(mode="after")
    def _consistent(self) -> "Case":
        if not self.mutate and (self.expect.patch is not None or self.expect.patched is not None):
            raise ValueError("mutate: false never produces a patch; drop patch/patched or mutate: false")
        return self


class TestFile(_Strict):
    """A `*.test.yaml` file: defaults for its cases, then the cases."""

    __test__ = False  # not a pytest test class, despite the name
    cluster: str | dict[str, Any] | None = None
    now: float | int | None = None
    cases: list[Case] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> "TestFile":
        seen: dict[str, int] = {}
        for i, case in enumerate(self.cases):
            if case.name in seen:
                raise DuplicateCase(case.name, i, seen[case.name])
            seen[case.name] = i
        return self


class DuplicateCase(ValueError):
    """Two cases share a name; carries both indexes so the reader can point at the second one."""

    def __init__(self, name: str, index: int, first: int) -> None:
        super().__init__(f"two cases are named {name!r} (cases[{first}] and cases[{index}])")
        self.name, self.index, self.first = name, index, first


def _attr(key: str) -> str:
    return "dry_run" if key == "dryRun" else key


def is_review(obj: dict) -> bool:
    """Whether a request is a full AdmissionReview rather than a manifest."""
    return obj.get("kind") == "AdmissionReview"


def build_review(case: Send) -> dict:
    """The AdmissionReview the case sends: the full review as given, or the manifest wrapped."""
    if is_review(case.request):
        return case.request
    from policy.admission import wrap_manifest  # the engine's wrapper: one definition of the envelope

    operation = case.operation or "CREATE"
    obj = case.request if operation != "DELETE" else case.old or case.request
    review = wrap_manifest(
        obj,
        user=case.user or "tester",
        groups=tuple(case.groups or ("system:authenticated",)),
        operation=operation,
        namespace=case.namespace,
    )
    req = review["request"]
    if operation == "DELETE":
        req["object"] = None
        req["oldObject"] = obj
    elif case.old is not None:
        req["oldObject"] = case.old
    if case.dry_run is not None:
        req["dryRun"] = case.dry_run
    return review


@dataclass(frozen=True, slots=True)
class CaseResult:
    """The outcome of one case: passed, or the mismatches (or the error) that failed it."""

    name: str
    mismatches: tuple[Mismatch, ...] = ()
    decision: Decision | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()  # context for a failure the decision alone does not show (e.g. a globalDefault class)

    @property
    def passed(self) -> bool:
        """No mismatch and no error."""
        return self.error is None and not self.mismatches


Decide = Callable[[dict, bool, float], Decision]  # (review, mutate, now) -> decision
Edit = Callable[[str, dict], bool]  # (ADDED|DELETED, object) -> changed; raises ValueError on an unusable object


class SetupError(Exception):
    """A `before` step that could not be carried out: the case is an ERROR, never a pass."""


def admit(prior: Send, decide: Decide, now: float) -> Decision:
    """Send `prior` as the API server does: /mutate, apply its patch, then /validate (which reserves)."""
    return _admit(prior, decide, now)[0]


def _admit(prior: Send, decide: Decide, now: float) -> tuple[Decision, dict]:
    """(the validating decision, the request as validated: patched by /mutate)."""
    review = build_review(prior)
    mutated = decide(review, True, now)
    if not mutated.allowed or not mutated.patch or not review["request"].get("object"):
        return (mutated if not mutated.allowed else decide(review, False, now)), review["request"]
    request = {**review["request"], "object": apply_patch(review["request"]["object"], mutated.patch)}
    return decide({**review, "request": request}, False, now), request


def _persist(request: dict, edit: Edit, where: str) -> None:
    """Store what the API server stores after admitting `request`: the object, or its removal on DELETE."""
    if request.get("operation") == "DELETE":
        gone = request.get("oldObject")
        if not isinstance(gone, dict) or not edit("DELETED", gone):
            raise SetupError(f"{where}: persist: the deleted object is not in the cluster state")
        return
    obj = request.get("object")
    if not isinstance(obj, dict):
        raise SetupError(f"{where}: persist: the request has no object to store")
    _edit(edit, "ADDED", obj, where)


def _edit(edit: Edit, event: str, obj: dict, where: str) -> bool:
    try:
        return edit(event, obj)
    except ValueError as exc:
        raise SetupError(f"{where}: {exc}") from None


def _apply_edit(step: ClusterEdit, edit: Edit, where: str) -> None:
    for j, obj in enumerate(step.add):
        _edit(edit, "ADDED", obj, f"{where}.add[{j}]")
    for j, ref in enumerate(step.remove):
        if not _edit(edit, "DELETED", ref.as_object(), f"{where}.remove[{j}]"):
            hint = "" if ref.api_version or ref.kind in _KEYED_BY_NAME else " (for a gang object, give its apiVersion)"
            raise SetupError(f"{where}.remove[{j}]: {ref} is not in the cluster state{hint}")


def _setup(case: Case, decide: Decide, edit: Edit | None, now: float) -> None:
    """Carry out the `before` steps in order; SetupError names the step that did not hold."""
    for i, step in enumerate(case.before):
        where = f"before[{i}]"
        if edit is None and (isinstance(step, ClusterEdit) or step.persist):
            raise SetupError(f"{where}: this runner cannot change the cluster state")
        if isinstance(step, ClusterEdit):
            _apply_edit(step, edit, where)
            continue
        earlier, request = _admit(step, decide, float(step.now) if step.now is not None else now)
        if not earlier.allowed:
            why = "; ".join(r.message for r in earlier.denials) or "no reason given"
            raise SetupError(f"{where} was denied, so the case cannot set up: {why}")
        if step.persist:
            _persist(request, edit, where)


def run_case(case: Case, decide: Decide, now: float = DEFAULT_NOW, edit: Edit | None = None) -> CaseResult:
    """Carry out the case's `before` steps, then decide its request and compare with every expectation.

    `edit` changes the case's cluster state (cluster edits and `persist: true`); without it those steps are errors.
    """
    try:
        _setup(case, decide, edit, now)
        review = build_review(case)
        decision = decide(review, case.mutate, float(case.now) if case.now is not None else now)
    except SetupError as exc:
        return CaseResult(case.name, error=str(exc))
    except Exception as exc:  # an engine bug is a failed case with a one-line reason, not a crash
        return CaseResult(case.name, error=f"{type(exc).__name__}: {exc}")
    obj = review["request"].get("object") or {}
    return CaseResult(case.name, tuple(compare_decision(case.expect, decision, obj)), decision)


def case_warnings(case: Case, result: CaseResult) -> list[str]:
    """What makes a case weaker than it looks: a denial expected without the reason codes that must cause it."""
    if case.expect.allowed or case.expect.codes is not None:
        return []
    got = sorted({r.code for r in result.decision.reasons}) if result.decision is not None else []
    hint = f"; it got codes: [{', '.join(got)}]" if got else ""
    return [f"expects a denial but names no `codes:`, so a denial for another reason would pass it{hint}"]
