"""Where a pod's priority class came from, when the pod names none: the cluster's `globalDefault` class.

The API server's Priority admission plugin runs before any webhook and gives a pod that
names no class the `globalDefault: true` PriorityClass (name and value). Allot reads the
pod as the plugin leaves it (policy/subject/normalize.py), so the policy's own `default` class
never applies there; a user reading a trace or a failed test sees a class the pod never
named. This note says so. Pure: reads the object and the snapshot only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lang import ir


def global_default_note(obj, snapshot, priorities: Sequence[ir.Priority]) -> str | None:
    """One line explaining a priority class taken from the cluster's globalDefault PriorityClass, or None."""
    if not isinstance(obj, Mapping) or obj.get("kind") != "Pod" or snapshot is None:
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if spec.get("priorityClassName") or spec.get("priority") is not None:
        return None  # the pod (or the Priority plugin, already) named it: nothing implicit to explain
    pc = snapshot.default_priority_class()
    if pc is None:
        return None
    name, value = pc["metadata"]["name"], pc["value"]
    note = (f"the pod names no priority class, so the cluster's globalDefault PriorityClass {name} ({value}) "
            "applies, as the API server's Priority admission sets it before any webhook")
    default = next((p for p in priorities if p.default), None)
    if default is not None and default.name != name:
        note += f"; the policy's default {default.name} does not apply"
    if priorities and name not in {p.name for p in priorities}:
        note += f"; {name} is not declared by the policy"
    return note
