"""The kinds a policy set governs: the resources its webhook configurations would send to Allot.

Read from the same configurations `allot compile` writes (policy/manifests), so `lint`
skips exactly what the API server would never show the webhook. The agents entry covers
every resource but only for agent identities; that is reported separately (`agents_any`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lang import ir
from policy.admission import plural
from policy.manifests.configurations import mutating_configuration, validating_configuration

AGENTS_WEBHOOK = "agents.validate.allot.io"


@dataclass(frozen=True, slots=True)
class Governed:
    """(API group, resource) pairs the configurations intercept; `agents_any`: agents may govern every kind."""

    resources: frozenset[tuple[str, str]]
    agents_any: bool

    def covers(self, api_version: str, kind: str) -> bool:
        """Does a manifest of `apiVersion`/`kind` reach the webhook (agents aside)?"""
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        resource = plural(kind)
        return (group, resource) in self.resources or ("*", resource) in self.resources


def governed(policy_set: ir.PolicySet) -> Governed:
    """What the validating and mutating configurations of `policy_set` intercept."""
    pairs: set[tuple[str, str]] = set()
    agents = False
    for config in (validating_configuration(policy_set), mutating_configuration(policy_set)):
        for hook in config["webhooks"]:
            if hook["name"] == AGENTS_WEBHOOK:
                agents = True
                continue
            for rule in hook["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        if "/" not in resource:  # sub-resources (scale) are never a manifest in git
                            pairs.add((group, resource))
    return Governed(frozenset(pairs), agents)
