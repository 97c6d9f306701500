"""`WhatIf`: ask the placement index as if some bound pods were gone, then put them back exactly as they were.

Reclaim plans are judged by the evaluator itself (docs/reclaim.md): a victim's pods are taken
off their nodes, the request is asked, and every pod goes back to the same device with the same
share, so the index after `restore_all` answers as before (its version moves on: cached answers
are dropped, never reused across the what-if). The engine runs a decision under its lock, so no
other reader sees the index while pods are out.
"""

from __future__ import annotations

from policy.placement.aggregates import bind_whole, unbind_whole
from policy.placement.devices import Demand, NodeState


def _put_back(state: NodeState, key, held: tuple) -> None:
    """Record an allocation exactly as `NodeState.add` had (same device for a share), not re-chosen by best fit."""
    alloc, cpu, ram = held
    state.cpu_used += cpu
    state.ram_used += ram
    if type(alloc) is int:
        state.whole_used += alloc
    else:
        device, milli, memory = alloc
        if state.shared is None:
            state.shared = {}
        slot = state.shared.setdefault(device, [0, 0, 0])
        slot[0] += milli
        slot[1] += 1
        slot[2] += memory
    state.allocs[key] = held


class WhatIf:
    """Pods taken out of an index for a question; `restore_all` (always, in a `finally`) puts every one back."""

    def __init__(self, index):
        self.index = index
        self.out: dict[str, tuple[NodeState, tuple]] = {}  # index key -> (node, its allocation)

    def drop(self, keys) -> None:
        """Take these pods (index keys) off their nodes; unknown or unbound ones are skipped."""
        index = self.index
        for key in keys:
            if key in self.out:
                continue
            known = index._pods.get(key)
            state = index.nodes.get(known[0]) if known is not None else None
            if state is None or key not in state.allocs:
                continue
            held = state.allocs[key]
            if unbind_whole(state, key):  # the usual pod, as arithmetic (as the index forgets one)
                index.version += 1
            else:
                index._mutate(state, lambda s=state, k=key: s.remove(k))
            self.out[key] = (state, held)

    def restore(self, keys) -> None:
        """Put these pods back (those this what-if took out)."""
        index = self.index
        for key in keys:
            entry = self.out.pop(key, None)
            if entry is not None:
                state, held = entry
                alloc, cpu, ram = held
                if type(alloc) is int and bind_whole(state, key, Demand(whole=alloc, cpu=cpu, ram=ram)):
                    index.version += 1
                else:
                    index._mutate(state, lambda s=state, k=key, h=held: _put_back(s, k, h))

    def restore_all(self) -> None:
        """Put back every pod still out, last out first."""
        self.restore(list(reversed(list(self.out))))

    def fits(self, gang) -> bool:
        """Whether `gang` lands now (the index's yes/no answer, no placement built)."""
        return self.index.fits(gang)

    def place(self, gang):
        """Where `gang` lands now (`PlacementResult`)."""
        return self.index.query(gang)
