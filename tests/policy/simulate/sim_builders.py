"""Small builders for simulation tests: nodes, pods, trace records, and a one-call runner."""

from __future__ import annotations

import lang
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.simulate.run import Options, Simulation
from policy.simulate.synthetic import H100, L4, node, pod
from policy.simulate.trace import Arrival, Departure

__all__ = ["H100", "L4", "Arrival", "Departure", "arrive", "engine", "gpu_node", "node", "pod", "simulate"]


def gpu_node(name: str, kind=H100, **labels) -> dict:
    """A Ready GPU node (8×H100 by default)."""
    return node(name, kind, labels or None)


def arrive(at: float, name: str, ns: str = "team-a", gpus: int | None = 1, cores: int | None = None,
           cpu: str = "1", memory: str = "1Gi", duration: float | None = None, product: str | None = None) -> Arrival:
    """An arrival of one pod."""
    return Arrival(at, pod(name, ns, gpus, cores, cpu, memory, product), duration, where=f"test:{name}")


def engine(policy_text: str = "") -> Engine:
    """An Engine of one policy text (empty: admits everything)."""
    ps, diags = lang.compile_policies([("test.policy", policy_text)] if policy_text else [])
    assert ps is not None, diags
    return Engine(ps)


def simulate(nodes, events, policy_text: str = "", **options):
    """(Result, Simulation) of `events` over `nodes`."""
    saturate_target = options.pop("saturate_target", None)
    workload = options.pop("workload", [e for e in events if isinstance(e, Arrival)])
    sim = Simulation(engine(policy_text), ClusterSnapshot.from_objects(nodes), Options(**options), workload=workload)
    return sim.run(events, saturate_target=saturate_target), sim
