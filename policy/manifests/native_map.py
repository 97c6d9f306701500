"""A rule's `set labels/annotations[...]` as a MutatingAdmissionPolicy (GA from 1.36) when its value is known in the request.

Pure. The webhook patches a Pod on CREATE and UPDATE when `for` and `when` hold and the
value is not none (policy/blocks/rules.py); the policy does the same with an
ApplyConfiguration, whose merge sets the key and leaves every other label alone.
Only `mode enforce` rules mutate (warn/audit report "would set", which stays in the webhook).
"""

from __future__ import annotations

from dataclasses import dataclass

from lang import ir
from policy.manifests import native_cel
from policy.manifests.native_cel import Untranslatable


@dataclass(frozen=True, slots=True)
class Mutation:
    """A rule's sets in CEL: the condition that selects, and one (map, key, value) per set."""

    rule: ir.Rule
    condition: str
    sets: tuple[tuple[str, str, native_cel.Value], ...]


def mutation(r: ir.Rule) -> Mutation:
    """The rule's sets as CEL; Untranslatable names the first part that is not known in the request."""
    if r.mode != "enforce":
        raise Untranslatable(f"mode {r.mode} reports the change instead of making it, which only the webhook words")
    if any(isinstance(a, ir.SetLimit) for a in r.actions):
        raise Untranslatable("set limits: each container's GPU request is read through the GPU dialects")
    sets = []
    for a in r.actions:
        if isinstance(a, ir.SetField):
            if a.value.type is not ir.Type.STRING:
                raise Untranslatable(f"the value is a {a.value.type.value}, rendered by the engine's number formats")
            sets.append((a.target, a.key, native_cel.value(a.value)))
    condition = f"({native_cel.translate(r.selector)} && {native_cel.translate(r.when)})"
    maybe = [v.present for _t, _k, v in sets if v.present != "true"]
    if maybe and len(sets) > 1:
        raise Untranslatable("a value that may be none beside other sets: the webhook skips only that one")
    if maybe:  # one set: a none value sets nothing, so the policy does not match
        condition = f"({condition} && {maybe[0]})"
    return Mutation(r, condition, tuple(sets))


def apply_expression(m: Mutation) -> str:
    """The ApplyConfiguration CEL: `Object{metadata: Object.metadata{labels: {...}}}`, merged into the pod."""
    fields = []
    for target in ("labels", "annotations"):
        items = [f"{native_cel.cel_string(k)}: {v.value}" for t, k, v in m.sets if t == target]
        if items:
            fields.append(f"{target}: {{{', '.join(items)}}}")
    return "Object{metadata: Object.metadata{" + ", ".join(fields) + "}}"
