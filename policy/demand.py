"""The GPU demand of one pod, whatever its dialect: whole GPUs, MIG, HAMi, KAI fractions and DRA claims."""

from __future__ import annotations

from typing import Mapping

from policy.dialects import dra, hami, kai
from policy.dialects.common import EMPTY, MALFORMED, Bad, whole_count
from policy.dialects.gpu_whole import MIG_PREFIX, WHOLE, read_mig
from policy.dialects.product import read_product
from policy.subject import PodSet, Problem, make_podset

_PREFIXES = ("nvidia.com/", "amd.com/")


class _Memory:
    """Bytes per device of the pod's GPU, looked up only if a memory-based share needs it."""

    __slots__ = ("snapshot", "product", "node", "value", "done")

    def __init__(self, snapshot, product: str | None, node: str | None):
        self.snapshot, self.product, self.node, self.value, self.done = snapshot, product, node, None, False

    def get(self) -> int | None:
        if not self.done:
            self.done = True
            if self.snapshot is not None:
                self.value = self.snapshot.gpu_memory(self.product, self.node)
        return self.value


def _read_key(key: str, value, path: str, acc: list, problems: list) -> None:
    """Fold one GPU resource entry into acc = [whole, mig milli, mig memory, cores, mem_pct, mem]."""
    try:
        if key in WHOLE:
            acc[0] = whole_count(value, path)
        elif key.startswith(MIG_PREFIX):
            _, m, b = read_mig(key, value, path)
            acc[1] += m
            acc[2] = (acc[2] or 0) + b
        elif key == hami.GPUCORES:
            acc[3] = hami.percent(value, path)
        elif key == hami.GPUMEM_PCT:
            acc[4] = hami.percent(value, path)
        elif key == hami.GPUMEM:
            acc[5] = hami.mebibytes(value, path)
    except Bad as bad:
        problems.append(Problem(bad.code, str(bad)))
    except ValueError as exc:  # QuantityError from a malformed value
        problems.append(Problem(MALFORMED, f"{path}: {exc}"))


def _container(c, path: str, memory: _Memory, problems: list) -> tuple[int, int | None, int | None] | None:
    """(milli-GPU, memory bytes or None, shared milli or None) of one container, None when it asks no GPU."""
    res = c.get("resources") if type(c) is dict else None
    if not res:
        return None
    requests = res.get("requests") or EMPTY
    limits = res.get("limits") or EMPTY
    acc = None
    # Limits imply requests for extended resources; an explicit request wins.
    for key in limits:
        if key.startswith(_PREFIXES) and key not in requests:
            acc = acc or [0, 0, None, None, None, None]
            _read_key(key, limits[key], f"{path}.resources.limits[{key}]", acc, problems)
    for key in requests:
        if key.startswith(_PREFIXES):
            acc = acc or [0, 0, None, None, None, None]
            _read_key(key, requests[key], f"{path}.resources.requests[{key}]", acc, problems)
    if acc is None:
        return None
    whole, milli, mem_bytes, cores, mem_pct, mem = acc
    if cores is None and mem_pct is None and mem is None:
        return milli + whole * 1000, mem_bytes, None
    devices = whole or 1  # HAMi: gpumem/gpucores without nvidia.com/gpu means one vGPU
    share = hami.share(cores, mem_pct, mem, memory.get() if mem is not None else None)
    milli += devices * (share if share is not None else 1000)
    if mem is not None:
        mem_bytes = (mem_bytes or 0) + devices * mem
    return milli, mem_bytes, share


def read_demand(pod: Mapping, snapshot=None) -> tuple[PodSet, list[Problem]]:
    """The pod's PodSet (count 1) and the problems met reading it; never raises on bad values."""
    meta = pod.get("metadata") or EMPTY
    spec = pod.get("spec") or EMPTY
    annotations = meta.get("annotations") or EMPTY
    problems: list[Problem] = []
    product = read_product(pod, spec, annotations, snapshot)
    memory = _Memory(snapshot, product, spec.get("nodeName"))
    milli = 0
    mem_total = None
    share = None
    i = 0
    for c in spec.get("containers") or ():
        got = _container(c, f"spec.containers[{i}]", memory, problems) if type(c) is dict and c.get("resources") else None
        i += 1
        if got is not None:
            milli += got[0]
            if got[1] is not None:
                mem_total = (mem_total or 0) + got[1]
            if got[2] is not None:
                share = got[2] if share is None else max(share, got[2])
    inits = spec.get("initContainers")
    if inits:
        init_peak = 0
        for i, c in enumerate(inits):
            got = _container(c, f"spec.initContainers[{i}]", memory, problems)
            if got is None:
                continue
            if c.get("restartPolicy") == "Always":  # sidecars run beside the app containers
                milli += got[0]
                if got[1] is not None:
                    mem_total = (mem_total or 0) + got[1]
            else:
                init_peak = max(init_peak, got[0])
            if got[2] is not None:
                share = got[2] if share is None else max(share, got[2])
        milli = max(milli, init_peak)
    if annotations and (kai.FRACTION in annotations or kai.MEMORY in annotations):
        try:
            devices, s, mem = kai.read_kai(annotations)
        except Bad as bad:
            problems.append(Problem(bad.code, str(bad)))
        else:
            if s is None and mem is not None:
                dm = memory.get()
                s = min(1000, -((-mem * 1000) // dm)) if dm else None
            milli += devices * (s if s is not None else 1000)
            if mem is not None:
                mem_total = (mem_total or 0) + devices * mem
            if s is not None:
                share = s if share is None else max(share, s)
    if spec.get("resourceClaims"):
        m, b, s, bad_list = dra.pod_claims(pod, snapshot, memory.get())
        milli += m
        if b is not None:
            mem_total = (mem_total or 0) + b
        if s is not None:
            share = s if share is None else max(share, s)
        problems.extend(Problem(b.code, str(b)) for b in bad_list)
    fraction = share if share is not None and share < 1000 else None
    name = meta.get("name") or meta.get("generateName") or ""
    return make_podset(name, 1, milli, fraction, mem_total, product), problems


def pod_demand(pod: Mapping, snapshot=None) -> PodSet:
    """The GPU demand of one pod: milli-GPU, shared fraction, memory bytes, product (problems dropped)."""
    return read_demand(pod, snapshot)[0]
