"""Policy test cases: the strict `*.test.yaml` schema and running one case against a decide function.

Pure: no file reads, no clock. The runner (`webhook/testing/runner.py`) reads files,
builds the engine and cluster snapshot, and hands `run_case` a `decide` callable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policy.decision import Decision
from policy.testing.expect import Mismatch, compare_decision
from policy.testing.patch import apply_patch

DEFAULT_NOW = 1_800_000_000.0  # a fixed instant (2027-01-15) so cases never depend on the wall clock
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
WRAP_KEYS = ("user", "groups", "operation", "dryRun", "namespace", "old")


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


class Case(Send):
    """One request against one cluster state, with its expectations."""

    name: str = Field(min_length=1)
    cluster: str | dict[str, Any] | None = None  # path relative to the test file, or an inline List
    before: list[Send] = Field(default_factory=list)  # admitted first, on the same engine and snapshot
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
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}")
            seen.add(case.name)
        return self


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

    @property
    def passed(self) -> bool:
        """No mismatch and no error."""
        return self.error is None and not self.mismatches


Decide = Callable[[dict, bool, float], Decision]  # (review, mutate, now) -> decision


def admit(prior: Send, decide: Decide, now: float) -> Decision:
    """Send `prior` as the API server does: /mutate, apply its patch, then /validate (which reserves)."""
    review = build_review(prior)
    mutated = decide(review, True, now)
    if not mutated.allowed or not mutated.patch or not review["request"].get("object"):
        return mutated if not mutated.allowed else decide(review, False, now)
    patched = {**review, "request": {**review["request"], "object": apply_patch(review["request"]["object"], mutated.patch)}}
    return decide(patched, False, now)


def run_case(case: Case, decide: Decide, now: float = DEFAULT_NOW) -> CaseResult:
    """Admit the case's `before` requests, then decide its request and compare with every expectation."""
    try:
        for i, prior in enumerate(case.before):
            earlier = admit(prior, decide, float(prior.now) if prior.now is not None else now)
            if not earlier.allowed:
                why = "; ".join(r.message for r in earlier.denials) or "no reason given"
                return CaseResult(case.name, error=f"before[{i}] was denied, so the case cannot set up: {why}")
        review = build_review(case)
        decision = decide(review, case.mutate, float(case.now) if case.now is not None else now)
    except Exception as exc:  # an engine bug is a failed case with a one-line reason, not a crash
        return CaseResult(case.name, error=f"{type(exc).__name__}: {exc}")
    obj = review["request"].get("object") or {}
    return CaseResult(case.name, tuple(compare_decision(case.expect, decision, obj)), decision)
