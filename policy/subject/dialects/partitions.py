"""DRA partitionable devices (KEP-4815): the share of a GPU a partition takes, from the counters it consumes.

A driver publishes a GPU's counter sets (`sharedCounters`: memory, multiprocessors …)
and its partitions as devices that consume from them (`consumesCounters`). A request's
candidates are the devices of its class's drivers whose attributes satisfy the plain
equalities of its CEL selectors (`device.attributes['dom'].name == 'v'`, joined by `&&`;
a selector with any other logic filters nothing, so candidates are never too few). A
partition takes the largest fraction of a counter set it consumes; a device consuming no
counters takes a whole GPU; the largest over the candidates counts (the scheduler may
pick any of them).
"""

from __future__ import annotations

import re
from typing import Mapping

from .capacity import drivers_of, resource_slices, whole_quantity
from .common import ceil_div

_EQ = re.compile(r"""device\.attributes\[\s*['"]([^'"]+)['"]\s*\]\.([A-Za-z0-9_]+)\s*==\s*(['"][^'"]*['"]|true|false|-?[0-9]+)""")


def _selector_texts(selectors) -> list[str]:
    out = []
    for sel in selectors if isinstance(selectors, list) else ():
        cel = sel.get("cel") if isinstance(sel, dict) else None
        if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
            out.append(cel["expression"])
    return out


def equalities(texts: list[str]) -> list[tuple[str, str, object]]:
    """(domain, attribute, value) every candidate must have, from the selectors that are plain conjunctions."""
    out = []
    for t in texts:
        if "||" in t or "!" in t or "?" in t:
            continue  # not a plain conjunction: it narrows nothing here
        for dom, name, raw in _EQ.findall(t):
            value = raw[1:-1] if raw[0] in "'\"" else (raw == "true") if raw in ("true", "false") else int(raw)
            out.append((dom, name, value))
    return out


def _attribute(attrs: Mapping, driver: str, dom: str, name: str):
    a = attrs.get(f"{dom}/{name}")
    if a is None and dom == driver:
        a = attrs.get(name)
    if not isinstance(a, dict):
        return None
    for kind in ("string", "version", "int", "bool"):
        if kind in a:
            return a[kind]
    return None


def partition_share(req: Mapping, snapshot) -> int | None:
    """Milli share of one GPU the device a request gets takes, from the partitions in the state; None without candidates there."""
    if snapshot is None:
        return None
    name = req.get("deviceClassName")
    drivers = drivers_of(name, snapshot)
    if not drivers:
        return None
    dc = snapshot.device_class(name) if isinstance(name, str) else None
    need = equalities(_selector_texts(req.get("selectors")) + _selector_texts(((dc or {}).get("spec") or {}).get("selectors")))
    slices = [rs["spec"] for rs in resource_slices(snapshot) if rs["spec"].get("driver") in drivers]
    if not slices:
        return None
    totals: dict[tuple, dict[str, int]] = {}
    for spec in slices:  # counter sets may come in a slice of their own, beside the pool's device slices
        pool = (spec.get("pool") or {}).get("name") if isinstance(spec.get("pool"), dict) else None
        for cs in spec.get("sharedCounters") or ():
            if isinstance(cs, dict) and isinstance(cs.get("counters"), dict):
                totals[(spec["driver"], pool, cs.get("name"))] = {k: v for k, v in ((k, whole_quantity(c)) for k, c in cs["counters"].items()) if v}
    best = None
    partitions = False
    for spec in slices:
        pool = (spec.get("pool") or {}).get("name") if isinstance(spec.get("pool"), dict) else None
        for dev in spec.get("devices") or ():
            if not isinstance(dev, dict):
                continue
            body = dev.get("basic") if isinstance(dev.get("basic"), dict) else dev  # v1beta1 nests it in `basic`
            attrs = body.get("attributes") if isinstance(body.get("attributes"), dict) else {}
            if any(_attribute(attrs, spec["driver"], dom, n) != v for dom, n, v in need):
                continue
            s = None
            for use in body.get("consumesCounters") or ():
                total = totals.get((spec["driver"], pool, use.get("counterSet"))) if isinstance(use, dict) else None
                for k, c in ((use.get("counters") or {}).items() if total else ()):
                    got = whole_quantity(c)
                    if got is not None and total.get(k):
                        part = min(1000, ceil_div(got * 1000, total[k]))
                        s = part if s is None else max(s, part)
            partitions = partitions or s is not None
            s = 1000 if s is None else s
            best = s if best is None else max(best, s)
    return best if partitions else None
