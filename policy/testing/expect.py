"""Comparing a `Decision` with a case's expectations: each mismatch carries expected, got and a diff."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from policy.decision import Decision
from policy.testing.patch import PatchError, apply_patch

@dataclass(frozen=True, slots=True)
class Mismatch:
    """One expectation that did not hold."""

    field: str  # the expectation key: allowed, denied_by, messages, patch, …
    expected: Any
    got: Any
    note: str = ""  # why, when the values alone do not say (e.g. which pattern matched nothing)

    def diff(self) -> str:
        """A unified diff of expected vs got as indented JSON."""
        want, have = _dump(self.expected), _dump(self.got)
        return "\n".join(
            difflib.unified_diff(want.splitlines(), have.splitlines(), "expected", "got", lineterm="", n=3)
        )


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _unmatched(patterns: list[str], texts: list[str]) -> list[str]:
    return [p for p in patterns if not any(re.search(p, t) for t in texts)]


def _check_patterns(field: str, patterns: list[str] | None, texts: list[str]) -> Iterator[Mismatch]:
    if patterns is None:
        return
    if not patterns:
        if texts:
            yield Mismatch(field, [], texts, f"expected no {field}")
        return
    missing = _unmatched(patterns, texts)
    if missing:
        yield Mismatch(field, patterns, texts, "no " + field[:-1] + " matches " + ", ".join(map(repr, missing)))


def _check_audit(want: Mapping[str, str] | None, got: Mapping[str, str]) -> Iterator[Mismatch]:
    if want is None:
        return
    if not want:
        if got:
            yield Mismatch("audit", {}, dict(got), "expected no audit annotations")
        return
    bad = [k for k, p in want.items() if k not in got or not re.search(p, got[k])]
    if bad:
        yield Mismatch("audit", dict(want), dict(got), "missing or not matching: " + ", ".join(bad))


def subset_diff(want: Any, got: Any, path: str = "") -> list[str]:
    """Paths where `got` does not contain `want`: dicts by subset (None = key absent), lists by length."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path or '/'}: expected an object"]
        out: list[str] = []
        for k, v in want.items():
            sub = f"{path}/{k}"
            if v is None:
                if k in got:
                    out.append(f"{sub}: expected absent")
            elif k not in got:
                out.append(f"{sub}: missing")
            else:
                out.extend(subset_diff(v, got[k], sub))
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path or '/'}: expected a list of {len(want)}"]
        return [m for i, (w, g) in enumerate(zip(want, got)) for m in subset_diff(w, g, f"{path}/{i}")]
    return [] if want == got and type(want) is type(got) else [f"{path or '/'}: expected {want!r}, got {got!r}"]


def _check_patched(expect, decision: Decision, obj: Mapping) -> Iterator[Mismatch]:
    try:
        patched = apply_patch(obj, decision.patch)
    except PatchError as exc:
        yield Mismatch("patched", expect.patched, [dict(p) for p in decision.patch], f"patch does not apply: {exc}")
        return
    if expect.patched_exact:
        if patched != expect.patched:
            yield Mismatch("patched", expect.patched, patched, "patched object differs")
        return
    problems = subset_diff(expect.patched, patched)
    if problems:
        yield Mismatch("patched", expect.patched, patched, "; ".join(problems))


def _check_placement(expect, decision: Decision) -> Iterator[Mismatch]:
    p = decision.placement
    got = None if p is None else decision.to_json()["placement"]
    want = expect.placement
    if want is None:
        if got is not None:
            yield Mismatch("placement", None, got, "expected no placement")
        return
    if got is None:
        yield Mismatch("placement", want if isinstance(want, str) else want.model_dump(exclude_none=True), None)
        return
    want_d = {"value": want} if isinstance(want, str) else want.model_dump(exclude_none=True)
    if any(got.get(k) != v for k, v in want_d.items()):
        yield Mismatch("placement", want_d, got, "placement differs")


def compare_decision(expect, decision: Decision, obj: Mapping) -> list[Mismatch]:
    """Every expectation of `expect` (a case's `cases.Expect`) that `decision` (on object `obj`) does not meet."""
    out: list[Mismatch] = []
    if decision.allowed != expect.allowed:
        out.append(Mismatch("allowed", expect.allowed, decision.allowed, _verdict(decision)))
    if expect.denied_by is not None:
        got = sorted({r.block for r in decision.denials})
        if sorted(set(expect.denied_by)) != got:
            out.append(Mismatch("denied_by", sorted(set(expect.denied_by)), got))
    if expect.codes is not None:
        got = sorted({r.code for r in decision.reasons})
        if sorted(set(expect.codes)) != got:
            out.append(Mismatch("codes", sorted(set(expect.codes)), got))
    out.extend(_check_patterns("messages", expect.messages, [r.message for r in decision.reasons]))
    out.extend(_check_patterns("warnings", expect.warnings, list(decision.warnings)))
    out.extend(_check_audit(expect.audit, decision.audit))
    if expect.patch is not None:
        got_patch = [dict(p) for p in decision.patch]
        if got_patch != expect.patch:
            out.append(Mismatch("patch", expect.patch, got_patch))
    if expect.patched is not None:
        out.extend(_check_patched(expect, decision, obj))
    if expect.expects_placement():
        out.extend(_check_placement(expect, decision))
    return out


def _verdict(decision: Decision) -> str:
    """Why the engine decided as it did, for the failure report."""
    if not decision.reasons:
        return "no block had a finding"
    return "; ".join(f"{r.block} [{r.mode}] {r.code}: {r.message}" for r in decision.reasons)
