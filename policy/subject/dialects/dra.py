"""DRA: `spec.resourceClaims` -> ResourceClaim / ResourceClaimTemplate -> device requests (v1 `exactly`, v1beta1 flat)."""

from __future__ import annotations

import re
from typing import Mapping

from .capacity import slice_share
from .common import MALFORMED, MISSING_CLAIM, UNKNOWN_VALUE, Bad, ceil_div, quantity
from .gpu_whole import MIG_PREFIX, mig_profile
from .partitions import partition_share

# Device classes published by the GPU DRA drivers; others count when their name or CEL selector says "gpu".
KNOWN_GPU_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "gpu.intel.com", "vfio.gpu.nvidia.com"})
_GPU_CLASS_CACHE: dict[str, bool] = {}


def is_gpu_class(name: str | None, snapshot) -> bool:
    """Whether a DeviceClass hands out GPUs (known driver class, or 'gpu' in its name or CEL selectors)."""
    if not name:
        return False
    if name in KNOWN_GPU_CLASSES or "gpu" in name:
        return True
    dc = snapshot.device_class(name) if snapshot is not None else None
    if not dc:
        return False
    for sel in (dc.get("spec") or {}).get("selectors") or ():
        expr = ((sel or {}).get("cel") or {}).get("expression") or ""
        if "gpu" in expr:
            return True
    return False


MIG_CLASS = "mig.nvidia.com"  # NVIDIA's DRA driver: one MIG partition of a GPU per device (static or partitionable)
# A CEL selector naming the MIG profile, as NVIDIA's examples write it: device.attributes['gpu.nvidia.com'].profile == '1g.10gb'
_PROFILE = re.compile(r"""\.profile\s*==\s*['"]([0-9]+g\.[0-9]+gb(?:\+[a-z]+)?)['"]""")


def _selector_texts(selectors) -> list[str]:
    """The CEL expressions of a request's (or a DeviceClass's) selectors."""
    out = []
    for sel in selectors if isinstance(selectors, list) else ():
        cel = sel.get("cel") if isinstance(sel, dict) else None
        expr = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expr, str):
            out.append(expr)
    return out


def mig_profile_of(req: Mapping, snapshot) -> str | None:
    """The MIG profile a device request's selectors (or its DeviceClass's) ask for, e.g. '1g.10gb'; None when they name none.

    A request of the MIG class naming no profile may get any partition: it is counted as a whole GPU (the largest it may get).
    """
    texts = _selector_texts(req.get("selectors"))
    name = req.get("deviceClassName")
    dc = snapshot.device_class(name) if snapshot is not None and isinstance(name, str) and name not in KNOWN_GPU_CLASSES else None
    if dc:
        texts += _selector_texts((dc.get("spec") or {}).get("selectors"))
    for t in texts:
        m = _PROFILE.search(t)
        if m:
            return m.group(1)
    return None


def claim_requests(claim_spec: Mapping) -> list:
    """The device requests of a claim spec (the same for a template's `spec.spec`)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    reqs = devices.get("requests") if isinstance(devices, dict) else None
    return reqs if isinstance(reqs, list) else []


def _one_request(req: Mapping) -> Mapping:
    """The effective device request: v1 `exactly`, the first `firstAvailable` choice, or the flat v1beta1 form."""
    exactly = req.get("exactly")
    if isinstance(exactly, dict):
        return exactly
    first = req.get("firstAvailable")
    if isinstance(first, list) and first and isinstance(first[0], dict):
        return first[0]
    return req


def read_requests(requests: list, path: str, snapshot, device_memory_of):
    """(devices, milli-GPU, memory bytes, milli share or None) over a claim's GPU device requests."""
    devices = milli = 0
    memory = 0
    share = None
    have_memory = False
    for i, raw in enumerate(requests):
        if not isinstance(raw, dict):
            raise Bad(MALFORMED, f"{path}.devices.requests[{i}]: {raw!r} is not a device request")
        req = _one_request(raw)
        if not is_gpu_class(req.get("deviceClassName"), snapshot):
            continue
        rpath = f"{path}.devices.requests[{i}]"
        mode = req.get("allocationMode") or "ExactCount"
        if mode == "All":
            raise Bad(UNKNOWN_VALUE, f"{rpath}.allocationMode: 'All' asks every matching device; Allot cannot count it before allocation")
        if mode != "ExactCount":
            raise Bad(UNKNOWN_VALUE, f"{rpath}.allocationMode: {mode!r} is not ExactCount or All")
        count_raw = req.get("count", 1)
        if type(count_raw) is not int or count_raw < 1:
            raise Bad(MALFORMED, f"{rpath}.count: {count_raw!r} is not a whole number >= 1")
        profile = mig_profile_of(req, snapshot)
        if profile is not None:  # a MIG partition is its profile's share of one GPU, as nvidia.com/mig-<profile> is
            try:
                s, mem = mig_profile(MIG_PREFIX + profile)
            except Bad:
                raise Bad(UNKNOWN_VALUE, f"{rpath}.selectors: MIG profile {profile!r} is not one of a known GPU") from None
            devices += count_raw
            milli += count_raw * s
            memory += count_raw * mem
            have_memory = True
            share = s if share is None else max(share, s)
            continue
        caps = (req.get("capacity") or {}).get("requests") if isinstance(req.get("capacity"), dict) else None
        mem = None
        asked: dict[str, int] = {}
        if isinstance(caps, dict):
            for key, value in caps.items():
                try:
                    q = quantity(value)
                except ValueError:
                    raise Bad(MALFORMED, f"{rpath}.capacity.requests[{key}]: {value!r} is not a quantity") from None
                if q <= 0:
                    raise Bad(MALFORMED, f"{rpath}.capacity.requests[{key}]: {value!r} is not positive")
                asked[key] = int(-((-q.numerator) // q.denominator)) if type(q) is not int else q
                if key == "memory" or key.endswith("/memory"):
                    mem = asked[key]
        devices += count_raw
        if not asked:  # a whole device, or a partition of one (its share from the counters it consumes)
            s = partition_share(req, snapshot)
            if s is not None and s < 1000:
                share = s if share is None else max(share, s)
            milli += count_raw * (s if s is not None else 1000)
            continue
        # A capacity request shares the device: its share is what it consumes of the device's published
        # capacities (ResourceSlices in the state), else memory / device memory when known, else the whole device.
        s = slice_share(req.get("deviceClassName"), asked, snapshot)
        if mem is not None:
            have_memory = True
            memory += count_raw * mem
            if s is None:
                device_memory = device_memory_of()
                s = min(1000, ceil_div(mem * 1000, device_memory)) if device_memory else None
        if s is not None:
            share = s if share is None else max(share, s)
        milli += count_raw * (s if s is not None else 1000)
    return devices, milli, (memory if have_memory else None), share


def pod_claims(pod: Mapping, snapshot, device_memory_of):
    """(milli-GPU, memory bytes or None, share or None, problems) for every claim a pod names.

    `device_memory_of()` gives bytes per device (or None); called only for capacity requests.
    """
    spec = pod.get("spec") or {}
    claims = spec.get("resourceClaims")
    if not claims:
        return 0, None, None, ()
    ns = (pod.get("metadata") or {}).get("namespace")
    statuses = {}
    for st in ((pod.get("status") or {}).get("resourceClaimStatuses") or ()):
        if isinstance(st, dict) and st.get("resourceClaimName"):
            statuses[st.get("name")] = st["resourceClaimName"]
    milli = 0
    memory = None
    share = None
    problems = []
    for i, ref in enumerate(claims):
        if not isinstance(ref, dict):
            problems.append(Bad(MALFORMED, f"spec.resourceClaims[{i}]: {ref!r} is not a claim reference"))
            continue
        src = ref.get("source") if isinstance(ref.get("source"), dict) else ref  # pre-1.31 `source:` shape
        claim_name = src.get("resourceClaimName") or statuses.get(ref.get("name"))
        template_name = src.get("resourceClaimTemplateName")
        requests = None
        where = ""
        if claim_name and snapshot is not None:
            claim = snapshot.resource_claim(ns, claim_name)
            if claim is not None:
                requests = claim_requests(claim.get("spec") or {})
                where = f"ResourceClaim {ns}/{claim_name} spec"
        if requests is None and template_name and snapshot is not None:
            tmpl = snapshot.resource_claim_template(ns, template_name)
            if tmpl is not None:
                requests = claim_requests((tmpl.get("spec") or {}).get("spec") or {})
                where = f"ResourceClaimTemplate {ns}/{template_name} spec.spec"
        if requests is None:
            what = f"ResourceClaim {claim_name!r}" if claim_name else f"ResourceClaimTemplate {template_name!r}"
            problems.append(Bad(MISSING_CLAIM, f"spec.resourceClaims[{i}]: {what} is not in the cluster state; its GPUs are not counted"))
            continue
        try:
            _, m, mem, s = read_requests(requests, where, snapshot, device_memory_of)
        except Bad as bad:
            problems.append(bad)
            continue
        milli += m
        if mem is not None:
            memory = (memory or 0) + mem
        if s is not None:
            share = s if share is None else max(share, s)
    return milli, memory, share, problems
