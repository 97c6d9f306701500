"""Where a checked policy set reads a subject field: the engine computes policy-dependent fields only when read."""

from __future__ import annotations

from lang import ir


def field_uses(node, name: str) -> list[ir.Field]:
    """Every `ir.Field` named `name` in an IR node (a block, an expression, a tuple of them), in order."""
    if type(node) in (tuple, list):
        return [f for n in node for f in field_uses(n, name)]
    if isinstance(node, ir.Field):
        return [node] if node.name == name else []
    fields = getattr(type(node), "__dataclass_fields__", None)
    if fields is None:
        return []
    return [f for attr in fields if attr != "span" for f in field_uses(getattr(node, attr), name)]


def reads_field(policy_set: ir.PolicySet, name: str) -> bool:
    """Whether any governing block reads field `name` (in a condition, a value or a message)."""
    blocks = (*policy_set.quotas, *policy_set.fractions, *policy_set.gangs, *policy_set.agents, *policy_set.rules)
    return any(field_uses(b, name) for b in blocks)
