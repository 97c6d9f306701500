"""Which block wrote a JSONPatch op of the mutating decision: `set` rules by their key, the default priority by field.

A `Decision`'s patch is a list of ops without authors; `lint` names the block behind
each one so a fill is reported like any other finding (rule id and source line), and
`for_git` keeps of them what a manifest in git should hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from lang import ir
from policy.context import where

_MAPS = {"labels": ("metadata", "labels"), "annotations": ("metadata", "annotations")}
_PRIORITY_FIELDS = frozenset({"priorityClassName", "priority", "preemptionPolicy"})
# What the API server's Priority plugin computes from the class at admission: written in git,
# they break the manifest the day the class's value or policy changes.
COMPUTED_FIELDS = frozenset({"priority", "preemptionPolicy"})


@dataclass(frozen=True, slots=True)
class Author:
    """A block id and the `path:line:col` of the line that writes the value."""

    block: str
    location: str


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def op_keys(op: dict) -> tuple[str, ...]:
    """The keys of a JSONPatch op's path (`/metadata/labels/acme.io~1team` -> metadata, labels, acme.io/team)."""
    return tuple(_unescape(t) for t in str(op.get("path", "")).split("/")[1:])


def _is_priority(keys: tuple[str, ...]) -> bool:
    """A pod spec's priority field (not a label or annotation that happens to be named `priority`)."""
    return len(keys) >= 2 and keys[-2] == "spec" and keys[-1] in _PRIORITY_FIELDS


def for_git(ops) -> tuple[dict, ...]:
    """The ops a manifest in git should take: the priority class name, never the `priority` or
    `preemptionPolicy` the API server computes from it (the webhook still sends those at admission)."""
    out = []
    for op in ops:
        keys = op_keys(op)
        if _is_priority(keys) and keys[-1] in COMPUTED_FIELDS:
            continue
        value = op.get("value")
        if keys and keys[-1] == "spec" and isinstance(value, dict) and "priorityClassName" in value:
            op = {**op, "value": {k: v for k, v in value.items() if k not in COMPUTED_FIELDS}}
        out.append(op)
    return tuple(out)


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
        keys = op_keys(op)
        if _is_priority(keys):
            return self.priority, keys
        value = op.get("value")
        if keys and keys[-1] == "spec" and isinstance(value, dict) and "priorityClassName" in value:
            return self.priority, keys  # a pod without a spec gets the default's members as one map
        if keys in self.sets:
            return self.sets[keys], keys
        if isinstance(value, dict):  # a whole map added at once (`add /metadata/labels {…}`)
            for k in value:
                if keys + (k,) in self.sets:
                    return self.sets[keys + (k,)], keys
        return None, keys
