"""An `agents` block's `deny`s over Pods as CEL: the part of the block the API server can judge itself.

Pure. policy/blocks/agents.py governs a request when the identity matches (any
operation) or, on CREATE/UPDATE, the labels mark the workload an agent; the first
`deny` whose `when` holds wins over every allow, worded
`NAME: MESSAGE (identity USER matches | the workload's labels mark it an agent)`.
Default deny needs every allow judged, and allows read GPU amounts or a CONNECT's live
pod, so it stays in the webhook: the block is split, and the webhook still sees all of
its traffic. Denies are native up to the first one that does not translate, since an
earlier webhook-only deny would word the denial.
"""

from __future__ import annotations

from dataclasses import dataclass

from lang import ir
from policy.admission import headline
from policy.blocks.agents import AGENT_LABEL
from policy.context import where
from policy.manifests import native_cel
from policy.manifests.native_cel import USER, Untranslatable, cel_string

_LABELS = "object.metadata.labels"
# policy.blocks.agents.is_marked_agent: the agent label "true", or any key in an `agents.*` domain.
MARKED_CEL = (f"(has({_LABELS}) && (({cel_string(AGENT_LABEL)} in {_LABELS} && {_LABELS}[{cel_string(AGENT_LABEL)}] == \"true\") || "
              f"{_LABELS}.exists(k, k.startsWith(\"agents.\") && k.contains(\"/\"))))")


@dataclass(frozen=True, slots=True)
class AgentDenies:
    """The native part of an agents block: who is governed, and the denies in source order (condition, message)."""

    block: ir.Agents
    governed: str
    denies: tuple[tuple[str, str], ...]


def agent_denies(b: ir.Agents) -> tuple[AgentDenies | None, list[str]]:
    """(the natively judged denies or None, why the rest stays in the webhook)."""
    reasons = ["default deny and the allows: allows read GPU amounts or the live pod of a CONNECT, and default deny needs every allow judged"]
    try:
        identity = native_cel.translate(b.identity) if b.identity is not None else None
    except Untranslatable as exc:
        return None, [*reasons, f"deny: the identity: {exc}"]
    if identity is not None:
        # No username: the webhook denies UnknownIdentity; the API server always sends one, so only the webhook words it.
        identity = f"(has({USER}) && {identity})"
        governed = f"({identity} || {MARKED_CEL})"
        why = f"({identity} ? \"identity \" + {USER} + \" matches\" : \"the workload's labels mark it an agent\")"
    else:
        governed, why = MARKED_CEL, "\"the workload's labels mark it an agent\""
    denies = []
    for d in b.denies:
        try:
            cond = native_cel.translate(d.when)
            prefix = "allot denied: " + headline(b.id, f"{b.name}: ")
            msg = native_cel.message(d.message, prefix, "", default="denied for agents")
        except Untranslatable as exc:
            reasons.append(f"deny at {where(d.span)} and after: {exc}")
            break
        denies.append((cond, f"{msg} + \" (\" + {why} + \") ({where(d.span)})\""))
    if not denies:
        return None, reasons
    return AgentDenies(b, governed, tuple(denies)), reasons


def validations(a: AgentDenies) -> list[dict]:
    """One validation per deny; each fails only when it is the first deny that holds (the webhook reports that one)."""
    out = []
    for i, (cond, msg) in enumerate(a.denies):
        earlier = [c for c, _ in a.denies[:i]]
        expr = f"!({cond})" if not earlier else f"!({cond}) || {' || '.join(earlier)}"
        out.append({"expression": expr, "messageExpression": msg, "reason": "Forbidden"})
    return out
