"""Which block wrote a JSONPatch op of the mutating decision: `set` rules by their key, the default priority by field.

A `Decision`'s patch is a list of ops without authors; `lint` names the block behind
each one so a fill is reported like any other finding (rule id and source line).
"""

from __future__ import annotations

from dataclasses import dataclass

from lang import ir
from policy.context import where

_MAPS = {"labels": ("metadata", "labels"), "annotations": ("metadata", "annotations")}
_PRIORITY_FIELDS = frozenset({"priorityClassName", "priority", "preemptionPolicy"})


@dataclass(frozen=True, slots=True)
class Author:
    """A block id and the `path:line:col` of the line that writes the value."""

    block: str
    location: str


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


class Authors:
    """The set-writers of one policy set, indexed once."""

    def __init__(self, policy_set: ir.PolicySet):
        self.sets: dict[tuple[str, ...], Author] = {}
        for rule in policy_set.rules:
            if rule.mode != "enforce":
                continue  # warn/audit sets are reported as RuleWouldSet findings, not patched
            for action in rule.actions:
                if isinstance(action, ir.SetField):
                    self.sets.setdefault(_MAPS[action.target] + (action.key,), Author(rule.id, where(action.span)))
        default = next((p for p in policy_set.priorities if p.default), None)
        self.priority = Author(f"priority {default.name}", where(default.span)) if default is not None else None

    def of(self, op: dict) -> tuple[Author | None, tuple[str, ...]]:
        """(the author of `op` or None, the path it writes as keys)."""
        keys = tuple(_unescape(t) for t in str(op.get("path", "")).split("/")[1:])
        if keys and keys[-1] in _PRIORITY_FIELDS:
            return self.priority, keys
        if keys in self.sets:
            return self.sets[keys], keys
        value = op.get("value")
        if isinstance(value, dict):  # a whole map added at once (`add /metadata/labels {…}`)
            for k in value:
                if keys + (k,) in self.sets:
                    return self.sets[keys + (k,)], keys
        return None, keys
