"""The names a test file's expectations may use: block ids of its policy set and reason codes.

A `denied_by: [quota reserch]` or `codes: [QuotaExceded]` can never match, so the case
could only fail for a reason it does not say; these are test-file errors with a did-you-mean.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from policy.testing.cases import TestFile

# Every reason code a decision can carry (docs/language.md, "Reason codes", whose table tests/test_docs.py holds to
# the codes the source gives); tests/policy/testing/test_names.py holds this set to that table.
REASON_CODES = frozenset({
    # quota, priority, fraction, gang, agents, rules
    "QuotaExceeded", "QuotaModelExceeded", "QuotaMemoryExceeded", "QuotaModelNotAllowed",
    "ReclaimPlanned", "PreemptionPlanned",  # admitted with a plan (docs/reclaim.md)
    "UnknownPriorityClass",
    "FractionOutOfRange", "FractionMemoryBelowFloor", "FractionMemoryUnknown", "FractionSharersExceeded",
    "FractionModelNotAllowed", "PerGpuNotEvaluated",
    "GangMinMembersMissing", "PlacementNotEvaluated", "GangUnplaceable", "GangNotYetPlaceable", "GangModelNotAllowed",
    "PlacementSteered", "SteerWouldPrefer",  # steer blocks (docs/placement.md)
    "AgentNotAllowed", "AgentDenied", "UnknownIdentity",
    "RuleDenied", "RuleWouldSet",
    "BudgetSpent", "BudgetThreshold", "BudgetMovedToTier", "BudgetDurationUnreadable",
    # normalization problems (block `subject`, docs/dialects.md)
    "MalformedQuantity", "MalformedObject", "MalformedResourceName", "MalformedResourceRequests",
    "MalformedDuplicateKey", "InvalidFraction", "UnknownGpuDialectValue", "MissingGroup", "MissingResourceClaim",
    "ClampedGpuCores", "WorkloadNotInClusterState", "UnknownInstanceType", "UnreadWorkload", "UncountedAccelerator",
    "GpuShareLowerBound", "OverlappingRuns",
})  # fmt: skip
# Block ids that are not governing blocks: normalization problems and the priority check.
FIXED_BLOCKS = ("subject", "priority")


@dataclass(frozen=True, slots=True)
class UnknownName:
    """One name an expectation uses that nothing can produce: where it is and what to say."""

    path: tuple  # pydantic-style location in the document: ("cases", 2, "expect", "codes", 0)
    message: str


def _hint(name: str, options) -> str:
    close = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def unknown_names(tests: TestFile, blocks: set[str]) -> list[UnknownName]:
    """Every `denied_by` entry that is no block of the set (`blocks`: its ids) and every unknown `codes` entry."""
    known_blocks = set(blocks) | set(FIXED_BLOCKS)
    out: list[UnknownName] = []
    for i, case in enumerate(tests.cases):
        for j, block in enumerate(case.expect.denied_by or ()):
            if block not in known_blocks:
                names = sorted(blocks)
                shown = ", ".join(names[:8]) + (f", … ({len(names)} in all)" if len(names) > 8 else "") if names else "none"
                out.append(UnknownName(("cases", i, "expect", "denied_by", j),
                                       f"unknown block `{block}`{_hint(block, known_blocks)}; the policy set's blocks: {shown}"))
        for j, code in enumerate(case.expect.codes or ()):
            if code not in REASON_CODES:
                out.append(UnknownName(("cases", i, "expect", "codes", j),
                                       f"unknown reason code `{code}`{_hint(code, REASON_CODES)}; codes are listed in docs/semantics.md (Reason codes)"))
    return out
