"""The GPU demand of one pod, whatever its dialect: whole GPUs, MIG, HAMi, KAI fractions and DRA claims."""

from __future__ import annotations

from typing import Mapping

from lang.quantity import compact
from policy.subject.dialects import dra, hami, kai
from policy.subject.dialects.common import BAD_OBJECT as MALFORMED_OBJECT
from policy.subject.dialects import shape
from policy.subject.dialects.common import EMPTY, MALFORMED, Bad, quantity, whole_count
from policy.subject.dialects.gpu_whole import MIG_PREFIX, WHOLE, read_mig
from policy.subject.dialects.product import read_product
from policy.subject.dialects.unread import UNCOUNTED, accelerator_like
from policy.subject.model import PodSet, Problem, make_podset

_PREFIXES = ("nvidia.com/", "amd.com/")


_UNSET = object()


def _product(env: list) -> str | None:
    """The pod's requested product, read once per pod (env = [pod, spec, annotations, snapshot, product])."""
    if env[4] is _UNSET:
        env[4] = read_product(env[0], env[1], env[2], env[3])
    return env[4]


def _device_memory(env: list) -> int | None:
    """Bytes per device of the pod's GPU; only memory-based shares need it."""
    snapshot = env[3]
    if snapshot is None:
        return None
    node = env[1].get("nodeName")
    if node:
        mem = snapshot.node_gpu_memory(node)
        if mem is not None:
            return mem
    return snapshot.gpu_memory(_product(env))


# Devices of one resource a container may ask: more is no node's count (time-slicing replicas included), only a
# mistake such as `8Gi` read as 8,589,934,592 GPUs; it is refused like any bad count (MalformedQuantity).
MAX_DEVICES = 65536


def device_count(value, path: str) -> int:
    """A whole-device count: a plain whole number, no unit or exponent (`8Gi`, `1k`, `1e3`), at most MAX_DEVICES."""
    if type(value) is str and any(c.isalpha() for c in value):
        q = quantity(value)  # not a quantity at all: the caller's MalformedQuantity says so
        whole = type(q) is int or q.denominator == 1
        meant = f" (it would be {compact(q)} devices)" if whole else f" ({value} is {q.numerator}/{q.denominator} of a device; devices are whole)"
        raise Bad(MALFORMED, f"{path}: {value!r} has a unit; a device count is a plain whole number like \"8\"{meant}")
    count = whole_count(value, path)
    if count > MAX_DEVICES:
        raise Bad(MALFORMED, f"{path}: {compact(count)} devices is more than any node holds (at most {MAX_DEVICES} are read)")
    return count


def _read_key(key: str, value, path: str, acc: list, problems: list) -> None:
    """Fold one GPU resource entry into acc = [whole, mig milli, mig memory, cores, mem_pct, mem, mig share]."""
    try:
        if key in WHOLE:
            acc[0] += device_count(value, path)
        elif key.startswith(MIG_PREFIX):
            count, m, b = read_mig(key, value, path)
            acc[1] += m
            acc[2] = (acc[2] or 0) + b
            if count:  # a MIG slice is a share of one physical GPU, isolated but shared
                s = m // count
                acc[6] = s if acc[6] is None else max(acc[6], s)
        elif key == hami.GPUCORES:
            acc[3] = hami.cores(value, path, problems)
        elif key == hami.GPUMEM_PCT:
            acc[4] = hami.percent(value, path)
        elif key == hami.GPUMEM:
            acc[5] = hami.mebibytes(value, path)
        elif accelerator_like(key):  # `nvidia.com/gpu.shared` (a renamed time-sliced GPU), `amd.com/vgpu`, ...
            problems.append(_uncounted(key, path))
    except Bad as bad:
        problems.append(Problem(bad.code, str(bad)))
    except ValueError as exc:  # QuantityError from a malformed value
        problems.append(Problem(MALFORMED, f"{path}: {exc}"))


_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage"})


def _uncounted(key: str, path: str) -> Problem:
    return Problem(UNCOUNTED, f"{path}: not counted, {key} looks like an accelerator no GPU dialect Allot reads counts "
                              "(docs/kinds.md)")


def _differ(a, b) -> bool:
    """Whether two quantities differ in value (`"1"` and `1` do not); unreadable ones are left to the readers."""
    try:
        return quantity(a) != quantity(b)
    except ValueError:
        return False


def _contradicts(key: str, req, lim, path: str) -> Problem:
    return Problem(shape.BAD_REQUESTS, f"{path}.requests[{key}]: {req!r} differs from limits {lim!r}; "
                   "extended resources cannot be overcommitted, so the API server requires requests == limits")


def _whole_fast(value) -> int | None:
    """A plain device count (`8`, `"8"`), or None when the value needs the full reader."""
    if type(value) is int:
        return value if value >= 0 else None
    if type(value) is str and value.isascii() and value.isdigit():
        return int(value)
    return None


def _container(c, where: str, index: int, env: list, problems: list) -> tuple[int, int | None, int | None] | None:
    """(milli-GPU, memory bytes or None, shared milli or None) of one container, None when it asks no GPU."""
    res = c.get("resources")
    if type(res) is not dict:  # `""` or `[]` is not an absent field: only null is
        if res is not None:
            problems.append(shape.wrong(f"spec.{where}[{index}].resources", "an object", res))
        return None
    requests = res.get("requests")
    limits = res.get("limits")
    if type(requests) is not dict:  # absent is the common case: no path formatted for it
        requests = EMPTY if requests is None else shape.mapping(requests, f"spec.{where}[{index}].resources.requests", problems)
    if type(limits) is not dict:
        limits = EMPTY if limits is None else shape.mapping(limits, f"spec.{where}[{index}].resources.limits", problems)
    # One pass per table: GPU-looking keys only. Limits imply requests for extended
    # resources; an explicit request must equal the limit (API validation), and every
    # name must be one the API server accepts. The usual pod names one whole-GPU key: no dict then.
    one = None
    found = None
    for key in limits:
        if key in _STANDARD:  # cpu, memory: no GPU prefix, a valid name (a set hit, not a startswith per key)
            continue
        if key.startswith(_PREFIXES):
            if one is None:
                one = key
            else:
                found = found or {one: "limits"}
                found[key] = "limits"
        elif not shape.valid_resource_name(key):
            problems.append(shape.bad_resource_name(key, f"spec.{where}[{index}].resources.limits[{key}]"))
        elif accelerator_like(key):
            problems.append(_uncounted(key, f"spec.{where}[{index}].resources.limits[{key}]"))
    for key in requests:
        if key in _STANDARD:
            continue
        if key.startswith(_PREFIXES):
            if key in limits and requests[key] != limits[key] and _differ(requests[key], limits[key]):
                problems.append(_contradicts(key, requests[key], limits[key], f"spec.{where}[{index}].resources"))
            if one is None:
                one = key
            elif key != one or found is not None:
                found = found or {one: "requests" if one in requests else "limits"}
                found[key] = "requests"
        elif not shape.valid_resource_name(key):
            problems.append(shape.bad_resource_name(key, f"spec.{where}[{index}].resources.requests[{key}]"))
        elif key not in limits and accelerator_like(key):
            problems.append(_uncounted(key, f"spec.{where}[{index}].resources.requests[{key}]"))
    if one is None:
        return None
    if found is None:
        table = "requests" if one in requests else "limits"
        if one in WHOLE:  # fast path: one whole-GPU resource with a plain count
            value = requests[one] if table == "requests" else limits[one]
            if type(value) is int and 0 <= value <= MAX_DEVICES:
                return value * 1000, None, None
            if type(value) is str and value.isascii() and value.isdigit() and len(value) < 5:
                return int(value) * 1000, None, None
        found = {one: table}
    acc = [0, 0, None, None, None, None, None]
    for key, table in found.items():
        value = (requests if table == "requests" else limits)[key]
        _read_key(key, value, f"spec.{where}[{index}].resources.{table}[{key}]", acc, problems)
    whole, milli, mem_bytes, cores, mem_pct, mem, mig_share = acc
    if cores is None and mem_pct is None and mem is None:
        return milli + whole * 1000, mem_bytes, mig_share
    devices = whole or 1  # HAMi: gpumem/gpucores without nvidia.com/gpu means one vGPU
    share = hami.share(cores, mem_pct, mem, _device_memory(env) if mem is not None else None, problems, f"spec.{where}[{index}].resources")
    milli += devices * (share if share is not None else 1000)
    if mem is not None:
        mem_bytes = (mem_bytes or 0) + devices * mem
    return milli, mem_bytes, share


def _not_object(c, path: str, problems: list) -> None:
    problems.append(shape.wrong(path, "an object", c))
    return None


def read_demand(pod: Mapping, snapshot=None) -> tuple[PodSet, list[Problem]]:
    """The pod's PodSet (count 1) and the problems met reading it; never raises on bad values."""
    try:
        return _read_demand(pod, snapshot)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        # A field of an unexpected JSON type (e.g. `spec: true`): count nothing, say why.
        meta = pod.get("metadata") if type(pod.get("metadata")) is dict else EMPTY
        name = meta.get("name") if type(meta.get("name")) is str else ""
        why = shape.locate(pod) or Problem(MALFORMED_OBJECT, f"pod {name or '?'}: a field has an unexpected type ({type(exc).__name__}: {exc})")
        return make_podset(name, 1, 0, None, None, None), [why]


def _read_demand(pod: Mapping, snapshot) -> tuple[PodSet, list[Problem]]:
    problems: list[Problem] = []
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if type(meta) is not dict or type(spec) is not dict:
        meta = shape.mapping(meta, "metadata", problems)
        spec = shape.mapping(spec, "spec", problems)
    annotations = meta.get("annotations") or EMPTY
    if type(annotations) is not dict:
        annotations = EMPTY  # reported by normalization with the labels
    env = [pod, spec, annotations, snapshot, _UNSET]
    milli = 0
    mem_total = None
    share = None
    i = -1
    containers = spec.get("containers")
    if type(containers) is not list:
        containers = shape.items(containers, "spec.containers", problems)
    for c in containers:
        i += 1
        got = _container(c, "containers", i, env, problems) if type(c) is dict else _not_object(c, f"spec.containers[{i}]", problems)
        if got is not None:
            milli += got[0]
            if got[1] is not None:
                mem_total = (mem_total or 0) + got[1]
            if got[2] is not None:
                share = got[2] if share is None else max(share, got[2])
    inits = spec.get("initContainers")
    if type(inits) is not list and inits is not None:
        inits = shape.items(inits, "spec.initContainers", problems)
    if inits:
        init_peak = 0
        for i, c in enumerate(inits):
            got = _container(c, "initContainers", i, env, problems) if type(c) is dict else _not_object(c, f"spec.initContainers[{i}]", problems)
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
                dm = _device_memory(env)
                s = min(1000, -((-mem * 1000) // dm)) if dm else None
            milli += devices * (s if s is not None else 1000)
            if mem is not None:
                mem_total = (mem_total or 0) + devices * mem
            if s is not None:
                share = s if share is None else max(share, s)
    if spec.get("resourceClaims"):
        m, b, s, bad_list = dra.pod_claims(pod, snapshot, lambda: _device_memory(env))
        milli += m
        if b is not None:
            mem_total = (mem_total or 0) + b
        if s is not None:
            share = s if share is None else max(share, s)
        problems.extend(Problem(b.code, str(b)) for b in bad_list)
    fraction = share if share is not None and share < 1000 else None
    # The product matters only for pods that ask for GPUs (quota per model, memory floors).
    product = _product(env) if milli or mem_total else None
    name = meta.get("name") or meta.get("generateName") or ""
    return make_podset(name, 1, milli, fraction, mem_total, product), problems


def pod_demand(pod: Mapping, snapshot=None) -> PodSet:
    """The GPU demand of one pod: milli-GPU, shared fraction, memory bytes, product (problems dropped)."""
    return read_demand(pod, snapshot)[0]
