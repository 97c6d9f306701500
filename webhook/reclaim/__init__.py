"""Carrying out reclaim and preemption plans in `allot serve` (docs/reclaim.md, "Carrying plans out").

Plans are recorded at admission (records.py), one replica leads through a Lease (lease.py) and
runs each record's steps (executor.py, act.py); a victim a PodDisruptionBudget forbids is replaced
by a replan (replan.py).
"""

from webhook.ledger.apiclient import for_client
from webhook.reclaim.controller import ReclaimController
from webhook.reclaim.replan import replanner

__all__ = ["ReclaimController", "for_client", "replanner"]
