"""`agents` blocks: default deny for agents, explicit `allow`s, and `deny` that beats every allow.

A block governs a request when
  * its `identity` matches the requester (user / groups / serviceaccount): EVERY
    operation is governed, CREATE, UPDATE, DELETE and CONNECT (exec, attach,
    port-forward) alike; or
  * the workload is MARKED an agent by its labels and the operation is CREATE or
    UPDATE (what puts an agent's spec into the cluster). Deleting or exec-ing into an
    agent pod by a non-agent identity (garbage collector, an operator debugging) is
    not governed by the label. A workload is marked an agent when it carries the
    label `allot.dev/agent: "true"`, or any label in an `agents.*` domain
    (`agents.acme.io/state`, `agents.x-k8s.io/sandbox`, ...).
A governed request is denied unless an `allow` matches its operation, resource and
`when`; a matching `deny` wins over any allow. A request without a username (the API
server always sends one) is denied by every block with an `identity` (`UnknownIdentity`):
an identity that cannot be established is not an ordinary user.
"""

from __future__ import annotations

from typing import Callable, Mapping

from lang import ir
from policy.context import Context, where

AGENT_LABEL = "allot.dev/agent"
UNKNOWN_IDENTITY = "UnknownIdentity"
_LABEL_GOVERNED_OPS = frozenset({"CREATE", "UPDATE"})


# Label keys seen that mark nothing: whether a key marks an agent depends on the key alone, so an entry is never
# stale; one C-level superset test replaces a startswith call per label on every request. The value of
# AGENT_LABEL matters, so it is never remembered.
_PLAIN_KEYS: set = set()
PLAIN_KEYS_CAP = 4096  # distinct keys remembered; past it the memo starts over (label keys are the users', not bounded)


def marks_agent(key) -> bool:
    """Whether label `key` alone marks its workload an agent (a key in an `agents.*` domain)."""
    return type(key) is str and key.startswith("agents.") and "/" in key


def is_marked_agent(labels: Mapping[str, str]) -> bool:
    """True when the labels mark the workload an agent (see module doc)."""
    if not labels:
        return False
    if _PLAIN_KEYS.issuperset(labels):  # every key known to mark nothing (AGENT_LABEL is never among them)
        return False
    if labels.get(AGENT_LABEL) == "true":
        return True
    for key in labels:
        if marks_agent(key):
            return True
    if len(_PLAIN_KEYS) + len(labels) > PLAIN_KEYS_CAP:
        _PLAIN_KEYS.clear()
    # Never added, not added-then-discarded: a request decided on another thread meanwhile must not find it there.
    _PLAIN_KEYS.update(key for key in labels if key != AGENT_LABEL)
    return False


def resource_of(w) -> str:
    """`pods`, or `pods/exec` for a subresource request."""
    return f"{w.resource}/{w.subresource}" if w.subresource else w.resource


def _allow_matcher(a: ir.AgentAllow, when) -> Callable[[object, str, str], bool]:
    ops, resources = a.operations, a.resources
    any_op, any_res = "*" in ops, "*" in resources

    def matches(w, op: str, resource: str) -> bool:
        if not (any_op or op in ops):
            return False
        if not (any_res or resource in resources):
            return False
        return when is None or when(w)

    return matches


def make_check(block: ir.Agents, identity, compile_when, compile_message, mode: str) -> Callable[[Context], None]:
    """The per-request check of one `agents` block; `compile_when`/`compile_message` turn IR into closures."""
    block_id, location = block.id, where(block.span)
    allows = tuple((_allow_matcher(a, compile_when(a.when)), where(a.span)) for a in block.allows)
    denies = tuple((compile_when(d.when), compile_message(d.message), where(d.span)) for d in block.denies)

    def governs(w) -> tuple[bool, str]:
        if identity is not None and identity(w):
            return True, f"identity {w.user or w.serviceaccount or '?'} matches"
        if w.operation in _LABEL_GOVERNED_OPS and is_marked_agent(w.labels):
            return True, "the workload's labels mark it an agent"
        return False, ""

    def check(ctx: Context) -> None:
        w = ctx.w
        if not w.agent:  # the engine set `agent` from every identity and the labels: nothing to govern
            return
        op, resource = w.operation, resource_of(w)
        if identity is not None and not w.user:
            # No username: whether the identity matches cannot be told, so no allow may vouch for it.
            ctx.blocks.append(block_id)
            data = {"operation": op, "resource": resource, "user": None}
            text = f"{block.name}: {op} {resource} by a requester without a username (request.userInfo.username missing or null)"
            ctx.find(UNKNOWN_IDENTITY, block_id, location, f"{text}: the identity cannot be established, so it is denied", mode, data)
            return
        governed, why = governs(w)
        if not governed:
            return
        ctx.blocks.append(block_id)
        for when, message, loc in denies:
            if when is None or when(w):
                text = message(w) or "denied for agents"
                data = {"operation": op, "resource": resource, "user": w.user}
                ctx.find("AgentDenied", block_id, loc, f"{block.name}: {text} ({why})", mode, data)
                return
        for matches, loc in allows:
            if matches(w, op, resource):
                if ctx.trace is not None:  # a note is only read by --explain: do not format it otherwise
                    ctx.note(block_id, loc, f"{op} {resource} allowed for agents ({why})")
                return
        data = {"operation": op, "resource": resource, "user": w.user}
        text = f"{block.name}: agents are denied by default; no allow matches {op} {resource}"
        ctx.find("AgentNotAllowed", block_id, location, f"{text} in namespace {w.namespace} ({why})", mode, data)

    return check
