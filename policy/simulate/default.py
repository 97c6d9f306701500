"""`--scheduler default`: kube-scheduler's default profile as far as GPU pods feel it, preferred node affinity included.

Filters as `Scheduler`'s. Scores, with the default profile's plugin weights:

- NodeResourcesFit, LeastAllocated over cpu and memory (weight 1): per resource
  `(allocatable − requested after placing) × 100 / allocatable`, integer, averaged; GPUs
  are not scored (the default profile scores cpu and memory only);
- NodeAffinity (weight 2): the summed weights of the preferred terms a node matches,
  normalised to 0..100 over the nodes that pass the filters (kube-scheduler's
  DefaultNormalizeScore) — what Allot's steering (`steer … by fragmentation`) writes.

Not modelled: BalancedAllocation, ImageLocality, TaintToleration's score, inter-pod
affinity and topology spread (they do not see GPUs; openb pods carry none of their inputs),
the sampling of feasible nodes on clusters over 100 nodes (`percentageOfNodesToScore`), and
kube-scheduler's random pick among equal scores (the first node in name order wins here).
"""

from __future__ import annotations

from policy.simulate.scheduler import PodRequest, Scheduler, SimNode

AFFINITY_WEIGHT = 2  # NodeAffinity's weight in kube-scheduler's default profile (NodeResourcesFit: 1)


def least_allocated(node: SimNode, req: PodRequest) -> int:
    """kube-scheduler's LeastAllocated score (0..100) over cpu and memory, equal weights."""
    g = node.group
    parts = []
    for used, cap in ((node.cpu_used + req.cpu, g.cap_cpu), (node.mem_used + req.memory, g.cap_mem)):
        parts.append((cap - used) * 100 // cap if cap > 0 and used <= cap else 0)
    return sum(parts) // len(parts)


class DefaultScheduler(Scheduler):
    """Scheduler kind `default`: the best node by LeastAllocated (cpu, memory), then preferred node affinity weighed in."""

    def place(self, req: PodRequest) -> tuple[str | None, str | None, str | None]:
        """(node, None, None) or (None, code, message), as `Scheduler.place`, preferred terms counted."""
        name, code, message = super().place(req)
        if name is None or not req.prefer:
            return name, code, message
        matched: dict[SimNode, int] = {}
        for weight, flt in req.prefer:
            for node in self._matching(flt):
                if node.group is not None and self._why_not(node, req) is None:
                    matched[node] = matched.get(node, 0) + weight
        if not matched:
            return name, code, message
        top = max(matched.values())
        best = self.nodes[name]  # the best by resources alone: no other unmatched node can beat it

        def total(node: SimNode) -> tuple[int, int]:
            return least_allocated(node, req) + AFFINITY_WEIGHT * (matched.get(node, 0) * 100 // top), -node.i

        pick = max((best, *matched), key=total)
        return pick.alloc.name, None, None

    def _matching(self, flt):
        """Nodes a preferred term selects: by name when it is `metadata.name In […]` alone (Allot's steering), else every node asked."""
        terms = flt.terms or ()
        if len(terms) == 1 and not terms[0][0] and len(terms[0][1]) == 1:
            key, op, values = terms[0][1][0]
            if key == "metadata.name" and op == "In":
                return [self.nodes[v] for v in values if v in self.nodes]
        return [n for n in self.nodes.values() if flt.matches(n.alloc.name, n.alloc.labels)]


BUILTIN_STEER = "allot-steering"  # the steer block `--scheduler default+steer` adds when the policy set has none


def with_steering(policy):
    """(the policy set without steer blocks, the policy set with its own steer blocks or the built-in `steer allot-steering { by fragmentation }`)."""
    from dataclasses import replace

    from lang import ir
    from lang.span import Span

    steers = policy.steers or (ir.Steer(BUILTIN_STEER, None, "fragmentation", 3, "enforce", Span("<default+steer>", 1, 1, 1, 1)),)
    return replace(policy, steers=()), replace(policy, steers=steers)
