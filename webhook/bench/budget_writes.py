"""The meter's writes under load for `allot bench budget`: three replicas over the API double, the writer killed midway.

Real HTTP and compare-and-swap (webhook/bench/apidouble.py); the API server's time is
simulated so minutes run in seconds. Every replica ticks every `step` (far more often than the
service's own 5 s poll: any load), pods come and go between ticks, and the writer stops ticking
at the half (killed): one of the others takes over after the 30 s lease. Measured: the most
writes of the meter object in any 10 s window (each write carries every budget), and whether
the live replicas agree on every budget at the end.
"""

from __future__ import annotations

import asyncio
import types

import lang
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.meter import store
from webhook.meter.api import dated_api
from webhook.meter.clock import ServerClock
from webhook.meter.service import MeterService

NS = "allot-system"


class SetClock(ServerClock):
    """The API server's time, set by the caller (the bench, the meter's tests)."""

    def __init__(self, t: int) -> None:
        super().__init__()
        self.t = t

    def now_ms(self) -> int:
        return self.t


def _replica(url: str, policy_text: str, pods: list[dict], name: str, t: int) -> MeterService:
    policy, _ = lang.compile_policies([("bench.policy", policy_text)])
    state = types.SimpleNamespace(engine=Engine(policy), snapshot=ClusterSnapshot.from_objects(pods), gate=None)
    clock = SetClock(t)
    return MeterService(state, NS, dated_api(api_client(url), clock), clock, identity=name)


async def _run(policy_text: str, pods: list[dict], make_pod, t0: int, seconds: int, step_ms: int) -> dict:
    double = ApiDouble()
    url = await double.start()
    try:
        reps = [_replica(url, policy_text, pods, f"r{k}", t0) for k in range(3)]
        writes: list[int] = []  # server ms of each write of the object
        seen_rv = None
        steps = seconds * 1000 // step_ms
        for n in range(steps):
            t = t0 + n * step_ms
            live = reps if n < steps // 2 else reps[1:]  # r0, the first writer, is killed at the half
            for r in live:
                r.clock.t = t
                for event, old, new in ((("ADDED", None, make_pod(n)),) if n % 2 == 0 else (("DELETED", make_pod(n - 1), None),)):
                    r.state.snapshot.apply(event, new if new is not None else old)
                await r.tick()
            cm = double.objects.get(("configmaps", NS, store.NAME))
            rv = (cm or {}).get("metadata", {}).get("resourceVersion")
            if rv != seen_rv:
                seen_rv = rv
                writes.append(int(cm["data"]["at"]))
        end = t0 + steps * step_ms
        for r in reps[1:]:
            r.clock.t = end
            await r.tick()
        a, b = reps[1].meter, reps[2].meter
        spread = max(abs(a.used_at(i, end) - b.used_at(i, end)) for i in range(len(a.specs)))
        most = max(sum(1 for w in writes if s <= w < s + 10_000) for s in writes) if writes else 0
        return {"writes": len(writes), "most_in_10s": most, "simulated_s": seconds, "replica_spread_mgpu_ms": spread,
                "writers": sorted({r.identity for r in reps if r.writes["ok"]})}
    finally:
        await double.stop()


def measure(policy_text: str, pods: list[dict], make_pod, t0: int, seconds: int = 300, step_ms: int = 500) -> dict:
    """Run the three replicas for `seconds` of server time, ticking every `step_ms`; the write figures."""
    return asyncio.run(_run(policy_text, pods, make_pod, t0, seconds, step_ms))
