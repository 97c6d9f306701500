"""Duplicate JSON keys in a review's GPU resource maps: orjson keeps the last value, silently.

`{"nvidia.com/gpu": "64", "nvidia.com/gpu": "0"}` would be read as 0 GPUs. A full
duplicate-aware parse costs several times orjson's, so it runs only when a cheap
count says it may find something: the raw body's GPU-prefixed keys (`"nvidia.com/…":`,
whitespace before the colon included) are counted and compared with the keys the
decoded request holds where Allot reads them (container limits and requests, labels,
annotations, nodeSelector, minResources; of the object, of its pod template and of a Kueue
Workload's pod sets). Any difference, or a JSON escape that could spell a key another way
(`\\/`, `\\u`), sends the body through the exact scan.
"""

from __future__ import annotations

import json
import re

from policy.subject.dialects.shape import DUPLICATE_KEY
from policy.subject.model import Problem

_KEY = re.compile(rb'"(?:nvidia|amd)\.com/[^"\\]*"\s*:')
_PREFIXES = ("nvidia.com/", "amd.com/")


def duplicate_problem(body: bytes, req: dict) -> Problem | None:
    """A `MalformedDuplicateKey` problem naming the first duplicated key and its path, or None."""
    # An escape could spell a key another way: only the exact scan tells. (A lone backslash is
    # looked for first: one byte is a memchr, the two-byte searches cost ~1.8 us on a 1 KB body.)
    if b"\\" in body and (b"\\/" in body or b"\\u" in body):
        return _scan(body)
    # Every GPU key the decoded request holds is in the body at least once, so a plain count of the
    # quoted prefixes (keys and any string values) equal to the decoded keys proves no key was repeated,
    # at a fraction of the regex's cost; a larger count falls back to counting keys alone.
    quoted = body.count(b'"nvidia.com/') + body.count(b'"amd.com/')
    if quoted == 0:
        return None
    known = _known(req)
    if quoted == known or len(_KEY.findall(body)) == known:
        return None
    return _scan(body)


def _prefixed(m) -> int:
    if type(m) is not dict:
        return 0
    n = 0
    for k in m:
        if k.startswith(_PREFIXES):
            n += 1
    return n


def _known(req: dict) -> int:
    """GPU-prefixed keys of the decoded object and oldObject, in the maps the count looks for."""
    n = 0
    for name in ("object", "oldObject"):
        obj = req.get(name)
        if type(obj) is not dict:
            continue
        spec = obj.get("spec")
        n += _in_template(obj)
        if type(spec) is not dict:
            continue
        # A Kueue Workload's pod sets and a controller's pod template: their GPU keys are counted
        # too, or every such request would take the exact scan (~45 us) for nothing.
        template = spec.get("template")
        if type(template) is dict:
            n += _in_template(template)
        sets = spec.get("podSets")
        if type(sets) is list:
            for s in sets:
                template = s.get("template") if type(s) is dict else None
                if type(template) is dict:
                    n += _in_template(template)
    return n


def _in_template(obj: dict) -> int:
    """GPU-prefixed keys of one object or pod template: labels, annotations and its pod spec's maps."""
    n = 0
    meta = obj.get("metadata")
    if type(meta) is dict:
        n += _prefixed(meta.get("labels")) + _prefixed(meta.get("annotations"))
    spec = obj.get("spec")
    if type(spec) is not dict:
        return n
    n += _prefixed(spec.get("nodeSelector")) + _prefixed(spec.get("minResources"))
    for key in ("containers", "initContainers"):
        cs = spec.get(key)
        if type(cs) is list:
            for c in cs:
                res = c.get("resources") if type(c) is dict else None
                if type(res) is dict:
                    n += _prefixed(res.get("limits")) + _prefixed(res.get("requests"))
    return n


class _Dups(dict):
    """A decoded JSON object that had a key twice; `dups` holds (key, first value, last value)."""

    dups: list


def _pairs(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: dict = {}
    marked = _Dups(out)
    marked.dups = []
    for k, v in pairs:
        if k in seen:
            marked.dups.append((k, seen[k], v))
        else:
            seen[k] = v
    return marked


def _scan(body: bytes) -> Problem | None:
    """The exact, slow check: a duplicate-aware parse, then the path of the first object with a repeated key."""
    try:
        doc = json.loads(body, object_pairs_hook=_pairs)
    except RecursionError:
        return Problem(DUPLICATE_KEY, "request: nested too deeply to check for duplicate keys")
    except ValueError:
        return None  # orjson accepted what json refuses: nothing more to say than the decoded request
    found = _first(doc, "")
    if found is None:
        return None
    path, (key, first, last) = found
    return Problem(DUPLICATE_KEY, f"{path or '(top)'}: key {key!r} appears twice ({_short(first)}, then {_short(last)}); "
                   "which one the sender meant cannot be told")


def _first(value, path: str):
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, dict):
            if type(v) is _Dups:
                return p.lstrip("."), v.dups[0]
            stack.extend((x, f"{p}.{k}") for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{p}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "..."
