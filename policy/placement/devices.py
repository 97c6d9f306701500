"""Per-node GPU usage, per physical device: whole devices held, and each shared device's milli, sharers and memory.

Fraction packing is real: a shared device holds pods while the sum of their shares
is at most 1000 milli, their memory fits the device, and (when a `per_gpu` limit
applies) the sharer count stays within it. Whole-GPU pods hold untouched devices.
"""

from __future__ import annotations

from dataclasses import dataclass

from policy.placement.capacity import UNSEEN, NodeSpec
from policy.placement.needs import NodeFilter

FULL = 1000  # milli-GPU of one device


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pod needs: `whole` devices, or a `milli` share of one device; `memory` bytes; model key or None."""

    whole: int = 0
    milli: int = 0
    memory: int = 0  # per device for shares; per pod for whole devices
    model: str | None = None
    tolerated: frozenset[str] = frozenset()  # tainted model keys (variants) the gang tolerates
    models: frozenset[str] = frozenset()  # model keys allowed (a gang block's `models`); empty = any
    # Besides GPUs, as the scheduler counts them (policy.placement.needs): every pod also takes one pod slot.
    cpu: int = 0  # millicores per pod
    ram: int = 0  # bytes of host memory per pod
    node_filter: NodeFilter | None = None  # nodeSelector and required node affinity; None: any node

    @property
    def extra(self) -> bool:
        """Whether anything besides GPUs and the pod slot limits where the pod goes."""
        return bool(self.cpu or self.ram or self.node_filter is not None)

    @property
    def gpu_milli(self) -> int:
        """GPU-equivalents of one pod, in milli."""
        return self.whole * FULL + self.milli


def device_fit(free_milli: int, sharers: int, free_mem: int, demand: Demand, per_gpu: int | None) -> int:
    """How many pods of a shared `demand` fit on one device in this state."""
    n = free_milli // demand.milli
    if demand.memory:
        n = min(n, free_mem // demand.memory)
    if per_gpu is not None:
        n = min(n, per_gpu - sharers)
    return n if n > 0 else 0


def whole_fit(free_whole: int, memory: int, demand: Demand) -> int:
    """How many pods of a whole-device `demand` fit in `free_whole` untouched devices of `memory` bytes."""
    if demand.memory and memory * demand.whole < demand.memory:
        return 0
    return free_whole // demand.whole


class NodeState:
    """Usage of one node: allocations by key (pod uid or reservation slot), and the device states they make."""

    __slots__ = ("name", "spec", "whole_used", "shared", "allocs", "domains", "aggs", "ranked", "cpu_used", "ram_used", "alt",
                 "taints_raw", "alloc_raw")

    def __init__(self, name: str, spec: NodeSpec | None = None):
        self.name = name
        self.spec = spec
        self.whole_used = 0
        self.shared: dict[int, list[int]] | None = None  # device -> [milli taken, sharers, memory taken]
        self.allocs: dict = {}  # key -> (int (whole devices) | (device, milli, memory), cpu, ram); one pod slot each
        self.cpu_used = 0  # millicores requested by the allocations
        self.ram_used = 0  # bytes
        self.domains: tuple = ()  # every topology domain containing the node, roots included
        self.aggs: tuple = ()  # those domains' aggregates for this node's model, updated per event
        self.ranked: tuple = ()  # the ones filed in level buckets (not roots): marked when the node's capacity moves
        # (model key, aggs, ranked) of the same domains for the key the node last left (a taint added: its untainted
        # key), so the change undone finds them without a look-up per domain; None while unknown or domains changed
        self.alt: tuple | None = None
        # The Node's taints list and allocatable dict the spec was last read from (`capacity.reread` compares them)
        self.taints_raw = UNSEEN
        self.alloc_raw = UNSEEN

    @property
    def gpus(self) -> int:
        """Physical devices (0 while the Node object is unknown)."""
        return self.spec.gpus if self.spec else 0

    @property
    def memory(self) -> int:
        """Bytes per device."""
        return self.spec.memory if self.spec else 0

    def free_whole(self) -> int:
        """Untouched devices."""
        n = self.gpus - self.whole_used - (len(self.shared) if self.shared else 0)
        return n if n > 0 else 0

    def partial_states(self) -> tuple[tuple[int, int, int], ...]:
        """(free milli, sharers, free memory) of each shared device, sorted so equal nodes compare equal."""
        if not self.shared:
            return ()
        mem = self.memory
        return tuple(sorted((max(0, FULL - t), s, max(0, mem - m)) for t, s, m in self.shared.values()))

    def contribution(self) -> tuple[int, tuple[tuple[int, int, int], ...]] | None:
        """What the node adds to its domains' aggregates, or None when it takes no GPU pods."""
        spec = self.spec
        if spec is None or not spec.eligible or spec.gpus <= 0:
            return None
        shared = self.shared
        if not shared:  # the common case, inlined: this runs twice per pod event
            free = spec.gpus - self.whole_used
            return (free if free > 0 else 0), ()
        return self.free_whole(), self.partial_states()

    def capacity(self, demand: Demand, per_gpu: int | None = None) -> int:
        """How many more pods of `demand` this node holds now (0 when not eligible): GPUs, then `limit`."""
        n = self.gpu_capacity(demand, per_gpu)
        return self.limit(n, demand) if n > 0 else 0

    def gpu_capacity(self, demand: Demand, per_gpu: int | None = None) -> int:
        """How many more pods of `demand` this node's GPUs hold now, whatever its cpu, memory and pod slots."""
        spec = self.spec
        if spec is None or not spec.eligible or spec.gpus <= 0:
            return 0
        # Runs for every node of a candidate domain per query: no sorted copy of the devices
        # (a sum does not depend on their order), no property calls.
        shared = self.shared
        free_whole = spec.gpus - self.whole_used - (len(shared) if shared else 0)
        if free_whole < 0:
            free_whole = 0
        mem = spec.memory
        if demand.whole:
            n = whole_fit(free_whole, mem, demand)
        else:
            n = free_whole * device_fit(FULL, 0, mem, demand, per_gpu) if free_whole else 0
            if shared:
                for taken, sharers, used in shared.values():
                    n += device_fit(FULL - taken if taken < FULL else 0, sharers, mem - used if used < mem else 0, demand, per_gpu)
        return n

    def limit(self, n: int, demand: Demand) -> int:
        """`n` pods by GPUs, limited by free pod slots, cpu and memory and by the node filter (what the scheduler checks)."""
        spec = self.spec
        slots = spec.pods - len(self.allocs)
        if slots < n:
            n = slots if slots > 0 else 0
        if demand.cpu:
            by_cpu = (spec.cpu - self.cpu_used) // demand.cpu
            if by_cpu < n:
                n = by_cpu if by_cpu > 0 else 0
        if demand.ram:
            by_ram = (spec.ram - self.ram_used) // demand.ram
            if by_ram < n:
                n = by_ram if by_ram > 0 else 0
        if n and demand.node_filter is not None and not demand.node_filter.matches(self.name, spec.labels):
            return 0
        return n

    def free_cpu(self) -> int:
        """Millicores not requested by the node's pods and held slots (never below 0)."""
        return max(0, self.spec.cpu - self.cpu_used) if self.spec else 0

    def free_ram(self) -> int:
        """Bytes of host memory not requested (never below 0)."""
        return max(0, self.spec.ram - self.ram_used) if self.spec else 0

    def free_pods(self) -> int:
        """Pod slots left (never below 0)."""
        return max(0, self.spec.pods - len(self.allocs)) if self.spec else 0

    def add(self, key, demand: Demand, per_gpu: int | None = None) -> None:
        """Record one pod's usage; bound pods are recorded even when they overcommit the node."""
        if key in self.allocs:
            self.remove(key)
        cpu, ram = demand.cpu, demand.ram
        if cpu:
            self.cpu_used += cpu
        if ram:
            self.ram_used += ram
        if demand.whole or not demand.milli:
            self.whole_used += demand.whole
            self.allocs[key] = (demand.whole, cpu, ram)
            return
        device = self._choose_device(demand, per_gpu)
        if self.shared is None:
            self.shared = {}
        slot = self.shared.setdefault(device, [0, 0, 0])
        slot[0] += demand.milli
        slot[1] += 1
        slot[2] += demand.memory
        self.allocs[key] = ((device, demand.milli, demand.memory), cpu, ram)

    def remove(self, key) -> bool:
        """Forget one pod's usage exactly as it was recorded; False when the key is unknown."""
        held = self.allocs.pop(key, None)
        if held is None:
            return False
        alloc, cpu, ram = held
        if cpu:
            self.cpu_used -= cpu
        if ram:
            self.ram_used -= ram
        if type(alloc) is int:
            self.whole_used -= alloc
            return True
        device, milli, memory = alloc
        slot = self.shared[device]
        slot[0] -= milli
        slot[1] -= 1
        slot[2] -= memory
        if slot[1] == 0:
            del self.shared[device]  # the last sharer left: the device is whole again
        return True

    def _choose_device(self, demand: Demand, per_gpu: int | None) -> int:
        # Best fit: the fullest shared device that still takes the pod, so whole devices stay whole.
        best, best_taken = None, -1
        mem = self.memory
        for device, (taken, sharers, used) in (self.shared or {}).items():
            if device_fit(FULL - taken, sharers, mem - used, demand, per_gpu) and taken > best_taken:
                best, best_taken = device, taken
        if best is not None:
            return best
        shared = self.shared or {}
        if self.free_whole() > 0 or not shared:
            return next(i for i in range(len(shared) + 1) if i not in shared)
        # Overcommitted reality (a bound pod that does not fit): charge the emptiest shared device.
        return min(shared, key=lambda d: (shared[d][0], d))
