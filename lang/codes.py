"""Stable diagnostic codes and their one-line descriptions (docs/check.md has the table)."""

from __future__ import annotations

CODES: dict[str, str] = {
    # E00xx: reading and parsing
    "E0001": "syntax error: unexpected token",
    "E0002": "unexpected character",
    "E0003": "unexpected end of file",
    "E0004": "the file is not valid UTF-8",
    "E0005": "too many syntax errors; the rest of the file was not parsed",
    "E0006": "expression nested too deeply",
    "E0007": "a quantity with an unknown unit (`80GB`: did you mean `80Gi`?)",
    # E01xx: names and declarations
    "E0101": "unknown subject field",
    "E0102": "unknown GPU model",
    "E0103": "unknown topology",
    "E0104": "unknown topology level",
    "E0105": "duplicate declaration",
    "E0106": "statement given twice in one block",
    "E0107": "more than one default priority",
    "E0108": "unknown mode",
    "E0109": "unknown verb or resource in an agents allow (a custom resource is named with its group)",
    "E0110": "unknown option",
    "E0111": "missing required statement",
    "E0112": "`set` can only write labels[...], annotations[...] or a GPU limit to its request",
    "E0113": "message interpolates an unknown field",
    "E0114": "statement not allowed here",
    "E0115": "a subresource no admission request carries (`pods/exce`, `pods/log`)",
    # E02xx: types
    "E0201": "type mismatch",
    "E0202": "malformed amount for this statement",
    "E0203": "condition is not a boolean",
    "E0204": "operator does not apply to this type",
    "E0205": "comparison on a value that may be absent, without a `has()` guard",
    # E03xx: meaning
    "E0301": "condition can never be true",
    "E0302": "per-model quota exceeds the quota's total",
    "E0303": "fraction min is greater than max",
    "E0304": "fraction bound outside (0, 1]",
    "E0305": "value out of range",
    "E0306": "borrow/lend without a cohort",
    "E0307": "topology levels must be distinct and widest first",
    # E0308-E0312: budget codes (docs/budgets.md)
    "E0308": "unknown budget period (day, week, month, quarter)",
    "E0309": "unknown time zone (an IANA name such as `Europe/Berlin`)",
    "E0310": "unknown priority tier for `on spent priority`",
    "E0311": "two budgets meter the same workloads, model and period",
    "E0312": "a duration with an unknown unit (`half_life 7 days`)",
    # E0320-: cohort trees, reclaim and preemption (docs/reclaim.md)
    "E0320": "a cohort's `parent` names no cohort",
    "E0321": "a cohort is its own ancestor (a cycle of `parent` lines)",
    # E0340-: steering (docs/placement.md)
    "E0340": "unknown steering score (`by fragmentation`)",
    "E0341": "`nodes` of a steer block is not a whole number from 1 to 10",
    # Wxxxx: warnings (do not fail `allot check`)
    "W0301": "condition is always true",
    "W0302": "cohort has a single member: nothing to borrow or lend",
    "W0303": "a topology requirement can never win: a later one always matches too",
    "W0304": "`connect` on a resource without a subresource never matches",
    "W0305": "a per-model cap makes `borrow` useless for that model's pods",
    "W0306": "`quota.covered` cannot change: no quota is declared, or one has no `for`",
    "W0307": "no verb of an allow happens on one of its subresources (`create pods/exec`: exec is `connect`)",
    # W0308: budget code (docs/budgets.md)
    "W0308": "`on spent priority` names the highest class: spent work is moved to no lower tier",
    "W0320": "a declared cohort has no members: no quota joins it, no cohort names it as parent",
    "W0321": "`borrow`/`lend` on a cohort without a parent can never be used",
    "W0322": "a `borrow` larger than the cohort tree can ever lend",
    "W0323": "a `lend` no other quota of the cohort tree may borrow",
    "W0324": "a `weight` on a quota that joins no cohort has no effect",
    "W0340": "a steer block after one without `for` never steers a pod",
}
