"""The GPU demand of one pod, whatever its dialect: whole GPUs, MIG, HAMi, KAI fractions and DRA claims."""

from __future__ import annotations

from typing import Mapping

from policy.dialects import dra, hami, kai
from policy.dialects.common import EMPTY, Bad
from policy.dialects.gpu_whole import MIG_PREFIX, WHOLE, read_mig
from policy.dialects.common import whole_count
from policy.dialects.product import read_product
from policy.subject import PodSet, Problem

_PREFIXES = ("nvidia.com/", "amd.com/")


def _gpu_keys(requests: Mapping, limits: Mapping) -> dict:
    """GPU-looking resource names -> (value, which); requests win, limits imply requests for extended resources."""
    found = {}
    for key, value in limits.items():
        if key.startswith(_PREFIXES):
            found[key] = (value, "limits")
    for key, value in requests.items():
        if key.startswith(_PREFIXES):
            found[key] = (value, "requests")
    return found


def _container(c: Mapping, path: str, device_memory: int | None, problems: list) -> tuple[int, int | None, int | None]:
    """(milli-GPU, memory bytes or None, shared milli or None) of one container."""
    res = c.get("resources") if isinstance(c, Mapping) else None
    if not res:
        return 0, None, None
    keys = _gpu_keys(res.get("requests") or EMPTY, res.get("limits") or EMPTY)
    if not keys:
        return 0, None, None
    whole = 0
    milli = 0
    memory = None
    cores = mem_pct = mem = None
    shared = False
    for key, (value, where) in keys.items():
        kpath = f"{path}.resources.{where}[{key}]"
        try:
            if key in WHOLE:
                whole = whole_count(value, kpath)
            elif key.startswith(MIG_PREFIX):
                _, m, b = read_mig(key, value, kpath)
                milli += m
                memory = (memory or 0) + b
            elif key == hami.GPUCORES:
                cores, shared = hami.percent(value, kpath), True
            elif key == hami.GPUMEM_PCT:
                mem_pct, shared = hami.percent(value, kpath), True
            elif key == hami.GPUMEM:
                mem, shared = hami.mebibytes(value, kpath), True
        except Bad as bad:
            problems.append(Problem(bad.code, str(bad)))
        except ValueError as exc:  # QuantityError from a malformed value
            problems.append(Problem("MalformedQuantity", f"{kpath}: {exc}"))
    if not shared:
        return milli + whole * 1000, memory, None
    devices = whole or 1  # HAMi: gpumem/gpucores without nvidia.com/gpu means one vGPU
    share = hami.share(cores, mem_pct, mem, device_memory)
    milli += devices * (share if share is not None else 1000)
    if mem is not None:
        memory = (memory or 0) + devices * mem
    return milli, memory, share


def read_demand(pod: Mapping, snapshot=None) -> tuple[PodSet, list[Problem]]:
    """The pod's PodSet (count 1) and the problems met reading it; never raises on bad values."""
    meta = pod.get("metadata") or EMPTY
    spec = pod.get("spec") or EMPTY
    annotations = meta.get("annotations") or EMPTY
    problems: list[Problem] = []
    product = read_product(pod, spec, annotations, snapshot)
    device_memory = snapshot.gpu_memory(product, spec.get("nodeName")) if snapshot is not None else None
    milli = 0
    memory = None
    share = None
    containers = spec.get("containers") or ()
    for i, c in enumerate(containers):
        m, b, s = _container(c, f"spec.containers[{i}]", device_memory, problems)
        milli += m
        if b is not None:
            memory = (memory or 0) + b
        if s is not None:
            share = s if share is None else max(share, s)
    init_peak = 0
    for i, c in enumerate(spec.get("initContainers") or ()):
        m, b, s = _container(c, f"spec.initContainers[{i}]", device_memory, problems)
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":  # sidecars run beside the app
            milli += m
            if b is not None:
                memory = (memory or 0) + b
        else:
            init_peak = max(init_peak, m)
        if s is not None:
            share = s if share is None else max(share, s)
    milli = max(milli, init_peak)
    if annotations:
        try:
            got = kai.read_kai(annotations)
        except Bad as bad:
            problems.append(Problem(bad.code, str(bad)))
            got = None
        if got is not None:
            devices, s, mem = got
            if s is None and mem is not None and device_memory:
                s = min(1000, -((-mem * 1000) // device_memory))
            milli += devices * (s if s is not None else 1000)
            if mem is not None:
                memory = (memory or 0) + devices * mem
            if s is not None:
                share = s if share is None else max(share, s)
    if spec.get("resourceClaims"):
        m, b, s, bad_list = dra.pod_claims(pod, snapshot, device_memory)
        milli += m
        if b is not None:
            memory = (memory or 0) + b
        if s is not None:
            share = s if share is None else max(share, s)
        problems.extend(Problem(b.code, str(b)) for b in bad_list)
    fraction = share if share is not None and share < 1000 else None
    return PodSet(meta.get("name") or meta.get("generateName") or "", 1, milli, fraction, memory, product), problems


def pod_demand(pod: Mapping, snapshot=None) -> PodSet:
    """The GPU demand of one pod: milli-GPU, shared fraction, memory bytes, product (problems dropped)."""
    return read_demand(pod, snapshot)[0]
