"""A small RFC 6902 JSONPatch applier, so `patched` expectations see what the API server would."""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping


class PatchError(ValueError):
    """The patch does not apply to the object (the API server would reject it)."""


def _tokens(pointer: str) -> list[str]:
    """RFC 6901: split on '/', then unescape ~1 -> '/' and ~0 -> '~' (in that order)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"pointer {pointer!r} does not start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list, token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"bad array index {token!r}")
    i = int(token)
    if i > len(container) or (i == len(container) and not adding):
        raise PatchError(f"array index {i} out of range")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for t in tokens[:-1]:
        if isinstance(node, dict) and t in node:
            node = node[t]
        elif isinstance(node, list):
            node = node[_index(node, t, adding=False)]
        else:
            raise PatchError(f"path {path!r}: {t!r} does not exist")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, adding=False)]
    raise PatchError(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, adding=True), value)
    else:
        raise PatchError(f"path {path!r}: parent is not a container")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, adding=False)]
    else:
        raise PatchError(f"path {path!r} does not exist")
    return doc


def apply_patch(obj: Mapping, ops: Iterable[Mapping]) -> Any:
    """A patched deep copy of `obj`; raises PatchError when an operation does not apply."""
    doc: Any = copy.deepcopy(dict(obj))
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation {dict(op)} has no string path")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # replace requires the target to exist
            doc = _add(_remove(doc, path), path, copy.deepcopy(op.get("value")))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"test at {path!r} failed")
        elif kind in ("move", "copy"):
            src = op.get("from")
            if not isinstance(src, str):
                raise PatchError(f"{kind} needs a string 'from'")
            value = copy.deepcopy(_get(doc, src))
            if kind == "move":
                doc = _remove(doc, src)
            doc = _add(doc, path, value)
        else:
            raise PatchError(f"unknown op {kind!r}")
    return doc
