"""Reading `kubectl get -o yaml|json` text into objects, with line-located errors (no file I/O here)."""

from __future__ import annotations

import json
from typing import Callable, Iterator, Mapping

import orjson  # ~4x faster than json for large `kubectl get -o json` dumps (256k nodes)
import yaml

from policy.cluster.errors import SnapshotError

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DEPTH = 1000  # Kubernetes objects nest a few dozen levels; the JSON path (orjson) stops at 1024 too
_SURROGATE = "text holds a lone surrogate code point (not UTF-8)"


def _yaml_error(exc: yaml.YAMLError) -> SnapshotError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    why = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if "nesting depth" in why:  # newer libyaml refuses deep nesting itself (also at 1000): one wording for both
        why = f"nested deeper than {MAX_DEPTH} levels"
    if mark is not None:
        return SnapshotError(f"line {mark.line + 1}, column {mark.column + 1}: malformed YAML: {why}")
    return SnapshotError(f"malformed YAML: {why}")


def _documents(text: str) -> list:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as first:
            try:  # orjson's messages carry no line; json's do (error path only)
                json.loads(text)
            except json.JSONDecodeError as exc:
                raise SnapshotError(f"line {exc.lineno}, column {exc.colno}: malformed JSON: {exc.msg}") from None
            except RecursionError:  # json recurses per level; orjson stops at 1024 levels
                pass
            raise SnapshotError(f"malformed JSON: {first}") from None
        except UnicodeEncodeError:
            raise SnapshotError(_SURROGATE) from None
        return doc if isinstance(doc, list) else [doc]
    try:
        _check_depth(text)
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    except UnicodeEncodeError:
        raise SnapshotError(_SURROGATE) from None
    except RecursionError:
        raise SnapshotError("malformed YAML: nested too deeply") from None


def _check_depth(text: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH: libyaml's C composer recurses per level and crashes the process (~20k)."""
    # Each level needs a '[' or '{', or one more column of indentation (or "- ") on a line: cheap bounds first.
    flow = text.count("[") + text.count("{") - text.count("[]") - text.count("{}")
    if flow + max(map(len, text.splitlines()), default=0) < MAX_DEPTH:
        return
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):  # events come from libyaml's own heap stack: no recursion
        cls = event.__class__
        if cls is yaml.MappingStartEvent or cls is yaml.SequenceStartEvent:
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise SnapshotError(f"line {mark.line + 1}, column {mark.column + 1}: malformed YAML: nested deeper than {MAX_DEPTH} levels")
        elif cls is yaml.MappingEndEvent or cls is yaml.SequenceEndEvent:
            depth -= 1


def flatten(obj, where: str, kind: str | None, path: tuple) -> Iterator[tuple[str, tuple, object, str | None]]:
    """Flatten Lists into (where, index path, object, kind implied by a typed list)."""
    if isinstance(obj, Mapping):
        k = obj.get("kind") or kind
        if isinstance(k, str) and k.endswith("List") and "items" in obj and (obj["items"] is None or isinstance(obj["items"], list)):
            inner = k[:-4] if k != "List" else None
            for i, item in enumerate(obj["items"] or ()):  # `items: null` is an empty list
                yield from flatten(item, f"{where}.items[{i}]", inner, path + ("items", i))
            return
    yield where, path, obj, kind


def _line_of(text: str, doc_index: int, path: tuple) -> int | None:
    """1-based line of the node at `path` in YAML document `doc_index` (error path only: slow is fine)."""
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
        node = nodes[doc_index]
        for step in path:
            if isinstance(node, yaml.MappingNode):
                node = next(v for k, v in node.value if k.value == step)
            else:
                node = node.value[step]
        return node.start_mark.line + 1
    except Exception:  # a location is a courtesy; the error message stands without it
        return None


def load_documents(text: str) -> Iterator[tuple[str, object, str | None, Callable[[], str]]]:
    """(where, object, implied kind, locate) for every object in the text; `locate()` gives "line N: " lazily."""
    if not isinstance(text, str):
        raise SnapshotError("cluster state must be text")
    docs = _documents(text)
    is_json = text.lstrip().startswith(("{", "["))
    for d, doc in enumerate(docs):
        for where, path, obj, kind in flatten(doc, f"document {d + 1}" if len(docs) > 1 else "document", None, ()):
            yield where, obj, kind, _locator(text, d, path, is_json)


def _locator(text: str, doc_index: int, path: tuple, is_json: bool) -> Callable[[], str]:
    def locate() -> str:
        line = None if is_json else _line_of(text, doc_index, path)
        return f"line {line}: " if line else ""

    return locate
