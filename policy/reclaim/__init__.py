"""Reclaim and preemption plans: which running workloads must give way so that a request lands (docs/reclaim.md).

Pure: the plan is data (victims as whole workloads with kind, namespace, name, uid and an
action); a controller carries it out. No I/O, no clock.
"""

from policy.reclaim.plan import Plan, Victim, VictimPod

__all__ = ["Plan", "Victim", "VictimPod"]
