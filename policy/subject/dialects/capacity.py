"""DRA consumable capacity (KEP-5075): the share of a shared device a capacity request takes, read from the ResourceSlices in the state.

A device that allows multiple allocations publishes each capacity's `value` and, maybe,
a `requestPolicy`. A request consumes what it asks of a capacity (rounded up to the
policy's valid values or range step), the policy's `default` for a capacity it does not
ask, and the whole capacity when neither is set. The device's share taken is the largest
of those fractions: memory asked of a device whose cores are not shared takes it whole.
Devices are those of the request's driver (the class's name for the GPU drivers' own
classes, else its DeviceClass's `device.driver == '…'` selector); where they differ, the
largest share counts (the scheduler may pick any of them).
"""

from __future__ import annotations

import re
import weakref
from typing import Mapping

from .common import ceil_div, quantity

_DRIVER = re.compile(r"""device\.driver\s*==\s*['"]([^'"]+)['"]""")
DRIVER_CLASSES = {"gpu.nvidia.com": "gpu.nvidia.com", "mig.nvidia.com": "gpu.nvidia.com",
                  "gpu.amd.com": "gpu.amd.com", "gpu.intel.com": "gpu.intel.com"}


def _name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def whole_quantity(value) -> int | None:
    """A DRA capacity or counter value (`q` or `{value: q}`) as a whole quantity, rounded up (None when it is not one)."""
    if isinstance(value, dict):  # v1beta1 and later: {value: q}
        value = value.get("value")
    try:
        q = quantity(value)
    except ValueError:
        return None
    return q if type(q) is int else -((-q.numerator) // q.denominator)


# (a weak reference to the state, its resource_version, its ResourceSlices): one scan per state version, not per claim.
_LAST: list = [(None, None, ())]


def resource_slices(snapshot) -> tuple:
    """The ResourceSlices of the state (a scan of the objects Allot does not index, remembered until the state changes)."""
    ref, version, found = _LAST[0]
    now = getattr(snapshot, "resource_version", None)
    if ref is not None and ref() is snapshot and version == now and now is not None:
        return found
    found = tuple(rs for rs in snapshot.objects("ResourceSlice") if isinstance(rs.get("spec"), dict))
    try:
        _LAST[0] = (weakref.ref(snapshot), now, found)
    except TypeError:  # a state that takes no weak reference is scanned every time
        pass
    return found


def drivers_of(class_name, snapshot) -> frozenset[str]:
    """The DRA drivers whose devices a device class hands out."""
    if class_name in DRIVER_CLASSES:
        return frozenset({DRIVER_CLASSES[class_name]})
    dc = snapshot.device_class(class_name) if snapshot is not None and isinstance(class_name, str) else None
    found = set()
    for sel in ((dc or {}).get("spec") or {}).get("selectors") or ():
        expr = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, dict) else None
        if isinstance(expr, str):
            found.update(_DRIVER.findall(expr))
    return frozenset(found)


def _consumed(asked: int | None, cap: Mapping, value: int) -> int:
    policy = cap.get("requestPolicy") if isinstance(cap.get("requestPolicy"), dict) else {}
    if asked is None:
        default = whole_quantity(policy.get("default"))
        return default if default is not None else value
    valid = [v for v in (whole_quantity(x) for x in policy.get("validValues") or ()) if v is not None]
    if valid:
        return min((v for v in valid if v >= asked), default=asked)
    rng = policy.get("validRange") if isinstance(policy.get("validRange"), dict) else None
    if rng:
        low, step = whole_quantity(rng.get("min")) or 0, whole_quantity(rng.get("step"))
        asked = max(asked, low)
        if step:
            asked = low + ceil_div(asked - low, step) * step
    return asked


def _device_share(body: Mapping, asked: Mapping[str, int]) -> int | None:
    caps = body.get("capacity")
    if not isinstance(caps, dict) or not body.get("allowMultipleAllocations"):
        return None
    best = None
    for key, cap in caps.items():
        value = whole_quantity(cap)
        if not value or value <= 0:
            continue
        got = _consumed(asked.get(_name(key)), cap if isinstance(cap, dict) else {}, value)
        s = min(1000, ceil_div(got * 1000, value))
        best = s if best is None else max(best, s)
    return best


def slice_share(class_name, asked: Mapping[str, int], snapshot) -> int | None:
    """Milli share of one shared device a request asking `asked` (capacity name -> amount) takes; None without such devices in the state."""
    if snapshot is None:
        return None
    drivers = drivers_of(class_name, snapshot)
    if not drivers:
        return None
    asked = {_name(k): v for k, v in asked.items()}
    best = None
    for rs in resource_slices(snapshot):
        spec = rs["spec"]
        if spec.get("driver") not in drivers:
            continue
        for dev in spec.get("devices") or ():
            if not isinstance(dev, dict):
                continue
            body = dev.get("basic") if isinstance(dev.get("basic"), dict) else dev  # v1beta1 nests it in `basic`
            s = _device_share(body, asked)
            if s is not None:
                best = s if best is None else max(best, s)
    return best
