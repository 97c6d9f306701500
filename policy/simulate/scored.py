"""The FGD paper simulator's scheduler models: filter, score every feasible node, bind the best (`policy.simulate.scores`).

Filters as that simulator's: node schedulable and Ready, node selection, cpu and memory
requests against allocatable, and GPU by milli per device (a share needs one device with
that much free; k whole GPUs need k untouched devices) — device memory is not modelled,
as the artifact does not. Ties go to the node first in a seeded random order of the
nodes (the artifact names each node with a random prefix and takes the smallest name).
Devices: a share goes to the tightest device (`random`: a random one with room; `fgd`:
its best-scoring one); whole GPUs take the first untouched devices.

Nodes in the same state (shape, free cpu and memory, free milli per device, kinds of GPU
pods) form a class: a pod is scored once per class, and each class offers its
first-ranked node, so a choice costs one score per distinct node state.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping

from policy.simulate import scores
from policy.placement.fragment import Fragmentation, Shape, typical_mix
from policy.simulate.scheduler import SHAPE_LABELS, WHY, PodRequest, move_gauges

FULL = 1000


class ScoredNode:
    """One node: allocatable, its rank in the seeded order, and what bound pods use of it."""

    __slots__ = (
        "access",
        "cap_cpu",
        "cap_mem",
        "cls",
        "cpu_used",
        "gauges",
        "gpus",
        "kinds",
        "labels",
        "lefts",
        "mem_used",
        "name",
        "rank",
        "schedulable",
        "shape",
    )

    def __init__(self, name: str, labels: Mapping, cap_cpu: int, cap_mem: int, gpus: int, schedulable: bool):
        self.name, self.labels, self.cap_cpu, self.cap_mem, self.gpus = name, labels, cap_cpu, cap_mem, gpus
        self.schedulable = schedulable
        self.rank = self.shape = self.access = 0
        self.cpu_used = self.mem_used = 0
        self.lefts = [FULL] * gpus
        self.kinds: dict[str, int] = {}
        self.cls: Class | None = None
        self.gauges = (0, 0, 0, 0)

    def state(self, access: bool, kinds: bool) -> tuple:
        """The class key: what filters and scores read (the mix's access and pod kinds only for the models that read them)."""
        return (self.shape, self.access if access else 0, self.cap_cpu - self.cpu_used, self.cap_mem - self.mem_used,
                tuple(sorted(self.lefts, reverse=True)), tuple(sorted(self.kinds.items())) if kinds else ())


class Class:
    """Nodes in one state; `first` is the lowest-ranked, `scores` caches a score per pod shape."""

    __slots__ = ("best_left", "cpu_free", "first", "key", "kinds", "lefts", "mem_free", "nodes", "scores", "shape", "untouched")

    def __init__(self, key: tuple, node: ScoredNode):
        self.key = key
        self.shape, _access, self.cpu_free, self.mem_free, lefts, _k = key
        self.lefts = tuple(node.lefts)  # a representative device order (scores do not depend on it)
        self.best_left = lefts[0] if lefts else 0
        self.untouched = sum(1 for v in lefts if v == FULL)
        self.kinds = dict(node.kinds)
        self.nodes: set[ScoredNode] = set()
        self.first: ScoredNode | None = None
        self.scores: dict[tuple, int] = {}


class ScoredScheduler:
    """Chooses a node by one of the artifact's scores (`scores.ARTIFACT`); gauges as `Scheduler`'s."""

    def __init__(self, kind: str, nodes: Iterable[Mapping], allocatable, gpus_of, seed: int = 0):
        if kind not in scores.ARTIFACT:
            raise ValueError(f"unknown scheduler {kind!r} (expected one of {', '.join(scores.ARTIFACT)})")
        self.kind = kind
        self.rng = random.Random(seed)
        allocs = sorted((allocatable(n) for n in nodes), key=lambda a: a.name)
        self.nodes: dict[str, ScoredNode] = {}
        shapes: dict[tuple, int] = {}
        self.shape_labels: list[dict] = []
        for a in allocs:
            g = gpus_of(a.name)
            node = self.nodes[a.name] = ScoredNode(a.name, a.labels, a.cpu, a.memory, g, a.schedulable)
            labels = {k: v for k, v in a.labels.items() if k.startswith(SHAPE_LABELS)}
            sk = (a.cpu, a.memory, g, json.dumps(labels, sort_keys=True))
            if sk not in shapes:
                shapes[sk] = len(self.shape_labels)
                self.shape_labels.append(labels)
            node.shape = shapes[sk]
        ranks = list(range(len(allocs)))
        self.rng.shuffle(ranks)  # the artifact's random name prefixes: ties go to the smallest
        for node, r in zip(self.nodes.values(), ranks):
            node.rank = r
        live = [n for n in self.nodes.values() if n.schedulable]
        self.gpu_total = sum(n.gpus for n in live) * FULL
        self.cpu_total = sum(n.cap_cpu for n in live)
        self.mem_total = sum(n.cap_mem for n in live)
        self.unschedulable = len(self.nodes) - len(live)
        self.gpu_alloc = self.frag_device = self.frag_node = self.frag_starved = 0
        self.cpu_alloc = self.mem_alloc = 0
        self.classes: dict[tuple, Class] = {}
        self._sel: dict[tuple, bool] = {}
        self._held: dict[str, tuple[str, tuple[int, ...], int]] = {}  # pod key -> (node, devices, milli each)
        self._epoch = 0
        self._nowhere: dict[tuple, tuple[int, str, str]] = {}
        self.frag: Fragmentation | None = None
        for node in live:
            self._file(node)

    # ---- the typical mix (fgd) ---------------------------------------------------------
    def set_workload(self, requests: Iterable[PodRequest]) -> None:
        """Derive the typical mix from the workload's pods (fgd scores against it)."""
        selections: dict[object, object] = {}
        shapes = []
        for req in requests:
            cpu, milli, gpus = _pod(req)
            place = req.signature[3]
            selections.setdefault(place, req.selection)
            shapes.append(Shape(cpu, milli, gpus, place))
        mix = typical_mix(shapes)
        self.frag = Fragmentation(mix)
        for node in self.nodes.values():
            node.access = self.frag.access_id([selections[s.place].matches(node.labels) for s in mix.shapes])
            if node.cls is not None:
                self._unfile(node)
                self._file(node)

    # ---- classes and gauges --------------------------------------------------------------
    def _unfile(self, node: ScoredNode) -> None:
        cls = node.cls
        cls.nodes.discard(node)
        node.cls = None
        if not cls.nodes:
            del self.classes[cls.key]
        elif cls.first is node:
            cls.first = min(cls.nodes, key=lambda n: n.rank)

    def _file(self, node: ScoredNode) -> None:
        key = node.state(self.kind == "fgd", self.kind == "clustering")
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = Class(key, node)
        cls.nodes.add(node)
        if cls.first is None or node.rank < cls.first.rank:
            cls.first = node
        node.cls = cls
        move_gauges(self, node, node.gpus * FULL - sum(node.lefts), sum(v for v in node.lefts if 0 < v < FULL),
                    node.cap_cpu - node.cpu_used, node.cap_mem - node.mem_used)

    # ---- filters and scores ---------------------------------------------------------------
    def _selects(self, req: PodRequest, cls: Class) -> bool | None:
        """True/False for the whole class; None when the selection reads per-node labels."""
        sel = req.selection
        if sel.empty:
            return True
        if not all(k.startswith(SHAPE_LABELS) for k in sel.keys):
            return None
        key = (req.signature[3], cls.shape)
        got = self._sel.get(key)
        if got is None:
            got = self._sel[key] = sel.matches(self.shape_labels[cls.shape])
        return got

    @staticmethod
    def _why_not(c: Class, req: PodRequest, cpu: int, milli: int, gpus: int) -> str | None:
        """The first filter a node of class `c` fails for the pod (GPU, cpu, memory), or None."""
        if gpus and (not c.lefts or (c.untouched < gpus if milli >= FULL else c.best_left < milli)):
            return "InsufficientGPU"
        if c.cpu_free < req.cpu:
            return "InsufficientCPU"
        if c.mem_free < req.memory:
            return "InsufficientMemory"
        return None

    def _score(self, cls: Class, cpu: int, milli: int, gpus: int) -> int:
        k = self.kind
        if k == "best-fit":
            return scores.best_fit(cls.cpu_free, cls.lefts, cpu, milli, gpus)
        if k == "packing":
            return scores.packing(cls.lefts, milli, gpus)
        if k == "dot-product":
            return scores.dot_product(cls.cpu_free, cls.lefts, cpu, milli, gpus)
        if k == "clustering":
            return scores.clustering(cls.lefts, cls.kinds, milli, gpus)
        if not (cpu or milli):
            return 100  # the artifact's fgd gives a pod that requests nothing the top score
        return scores.fgd(self._mix(), cls.key[1], cls.cpu_free, cls.lefts, cpu, milli, gpus)[0]

    def _mix(self) -> Fragmentation:
        if self.frag is None:
            raise RuntimeError("fgd needs the workload's typical mix: call set_workload first")
        return self.frag

    def place(self, req: PodRequest) -> tuple[str | None, str | None, str | None]:
        """(node name, None, None), or (None, reason code, message) when no node takes the pod."""
        cached = self._nowhere.get(req.signature)
        if cached is not None and cached[0] == self._epoch:
            return None, cached[1], cached[2]
        cpu, milli, gpus = _pod(req)
        sig = (cpu, milli, gpus)
        best, best_key = None, None
        feasible: list[tuple[Class, object]] = []
        random_kind = self.kind == "random"
        for cls in self.classes.values():
            ok = self._selects(req, cls)
            if ok is False or self._why_not(cls, req, cpu, milli, gpus) is not None:
                continue
            if ok is None:
                matching = [n for n in cls.nodes if req.selection.matches(n.labels)]
                if not matching:
                    continue
                first = min(matching, key=lambda n: n.rank)
            else:
                matching, first = None, cls.first
            if random_kind:
                feasible.append((cls, matching))
                continue
            s = cls.scores.get(sig)
            if s is None:
                s = cls.scores[sig] = self._score(cls, req.cpu or 100, milli, gpus)
            key = (-s, first.rank)
            if best_key is None or key < best_key:
                best, best_key = first, key
        if random_kind and feasible:
            i = self.rng.randrange(sum(len(m) if m is not None else len(c.nodes) for c, m in feasible))
            for cls, matching in feasible:
                members = matching if matching is not None else cls.nodes
                if i < len(members):
                    best = sorted(members, key=lambda n: n.rank)[i]
                    break
                i -= len(members)
        if best is not None:
            return best.name, None, None
        code, message = self._explain(req, cpu, milli, gpus)
        self._nowhere[req.signature] = (self._epoch, code, message)
        return None, code, message

    def _explain(self, req: PodRequest, cpu: int, milli: int, gpus: int) -> tuple[str, str]:
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            if node.cls is None:
                why = "NodeUnschedulable"
            elif not req.selection.matches(node.labels):
                why = "NodeAffinity"
            else:
                why = self._why_not(node.cls, req, cpu, milli, gpus) or "InsufficientGPU"
            counts[why] = counts.get(why, 0) + 1
        order = list(WHY)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], order.index(kv[0])))
        blocking = [kv for kv in ranked if kv[0] not in ("NodeAffinity", "NodeUnschedulable")]
        code = blocking[0][0] if blocking else ranked[0][0] if ranked else "NoNodes"
        return code, f"0/{len(self.nodes)} nodes are available: " + ", ".join(f"{n} {WHY[k]}" for k, n in ranked)

    # ---- usage ---------------------------------------------------------------------------
    def _devices(self, node: ScoredNode, req: PodRequest, milli: int, gpus: int) -> tuple[int, ...]:
        lefts = tuple(node.lefts)
        if not gpus:
            return ()
        if milli >= FULL or gpus > 1:
            got = scores.take_whole(lefts, milli, gpus)
            return got if len(got) == gpus else ()
        if self.kind == "random":
            room = [i for i, v in enumerate(lefts) if v >= milli]
            return (self.rng.choice(room),) if room else ()
        if self.kind == "fgd" and self.frag is not None:
            dev = scores.fgd(self.frag, node.access, node.cap_cpu - node.cpu_used, lefts, req.cpu or 100, milli, gpus)[1]
        else:
            dev = scores.tightest(lefts, milli)
        return (dev,) if dev >= 0 else ()

    def bind(self, node_name: str, req: PodRequest, key: str | None = None) -> None:
        """Count a pod bound to the node: its cpu, memory and devices."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        _cpu, milli, gpus = _pod(req)
        devs = self._devices(node, req, milli, gpus)
        if node.cls is not None:
            self._unfile(node)
        node.cpu_used += req.cpu
        node.mem_used += req.memory
        for d in devs:
            node.lefts[d] -= milli
        tag = scores.kind_of(milli, gpus) if devs else None
        if tag is not None:
            node.kinds[tag] = node.kinds.get(tag, 0) + 1
        self.cpu_alloc += req.cpu
        self.mem_alloc += req.memory
        if key is not None:
            self._held[key] = (node_name, devs, milli)
        if node.schedulable:
            self._file(node)

    def unbind(self, node_name: str, req: PodRequest, key: str | None = None) -> None:
        """Forget a bound pod and give its devices back."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        _n, devs, milli = self._held.pop(key, (node_name, (), 0)) if key is not None else (node_name, (), 0)
        if node.cls is not None:
            self._unfile(node)
        node.cpu_used -= req.cpu
        node.mem_used -= req.memory
        for d in devs:
            node.lefts[d] += milli
        tag = scores.kind_of(milli, len(devs)) if devs else None
        if tag is not None:
            node.kinds[tag] -= 1
            if not node.kinds[tag]:
                del node.kinds[tag]
        self.cpu_alloc -= req.cpu
        self.mem_alloc -= req.memory
        self._epoch += 1
        if node.schedulable:
            self._file(node)


def _pod(req: PodRequest) -> tuple[int, int, int]:
    """(cpu, milli per device, devices) of a request."""
    d = req.demand
    if d is None:
        return req.cpu, 0, 0
    if d.whole:
        return req.cpu, FULL, d.whole
    return req.cpu, d.milli, 1
