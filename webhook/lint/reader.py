"""Read manifests with line marks: files, directories of *.yaml/*.yml, `-` for stdin; multi-document, `kind: List`.

PyYAML's C loader composes each document into nodes (which carry line marks) and
constructs the plain object from them, so the judge gets dicts and the report can still
find the line of any field. A document that is not valid YAML, not a mapping, or has no
kind/apiVersion becomes a located finding with a stable code; the rest of the file and the
other files are still read (a syntax error ends its document, not the file).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import yaml

from webhook.errors import UsageError
from webhook.lint.finding import Finding
from webhook.textfile import NotText, decode

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_RESOLVED: dict[tuple[str, bool], str] = {}  # plain scalar text -> its tag: keys and values recur in every manifest


class ManifestLoader(_BASE):
    """PyYAML's C loader with a memo of implicit tags (the pure-Python resolver cost half the read)."""

    def resolve(self, kind, value, implicit):
        """The tag of a node; plain scalars' tags are remembered by their text."""
        if kind is yaml.ScalarNode and implicit[0]:
            key = (value, implicit[1])
            tag = _RESOLVED.get(key)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(_RESOLVED) < 200_000:
                    _RESOLVED[key] = tag
            return tag
        if kind is yaml.MappingNode and implicit:
            return _MAP
        if kind is yaml.SequenceNode and implicit:
            return _SEQ
        return super().resolve(kind, value, implicit)


class RecursiveAlias(yaml.MarkedYAMLError):
    """An alias inside the node it names: a structure without end, which no manifest can be."""


class _Slow(Exception):
    """The document needs PyYAML's own constructor (merge keys, unhashable keys, aliases in a cycle)."""


def construct(loader, node):
    """The plain object of a document: maps, lists and strings built directly, other scalars by PyYAML."""
    memo: dict[int, object] = {}

    def build(n):
        cls = n.__class__
        if cls is yaml.ScalarNode:
            if n.tag == _STR:
                return n.value
            return loader.construct_object(n, deep=True)
        got = memo.get(id(n), memo)
        if got is not memo:
            if got is None:
                raise RecursiveAlias(problem="an alias refers to a node that contains it", problem_mark=n.start_mark)
            return got
        memo[id(n)] = None
        if cls is yaml.MappingNode and n.tag == _MAP:
            out = {}
            for k, v in n.value:
                if k.__class__ is not yaml.ScalarNode or k.tag not in (_STR, "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool",
                                                                       "tag:yaml.org,2002:null", "tag:yaml.org,2002:float"):
                    raise _Slow  # merge keys (`<<`), complex keys, tagged keys
                out[build(k)] = build(v)
        elif cls is yaml.SequenceNode and n.tag == _SEQ:
            out = [build(v) for v in n.value]
        else:
            raise _Slow
        memo[id(n)] = out
        return out

    try:
        return build(node)
    except _Slow:
        return loader.construct_document(node)
SUFFIXES = (".yaml", ".yml")
TEST_SUFFIXES = (".test.yaml", ".test.yml")  # `allot test` case files beside policies: not manifests
STDIN = "-"
_MARKER = re.compile(r"^---(?=[ \t\r]|$)", re.MULTILINE)

# Stable codes of objects the reader cannot hand to the engine.
YAML_SYNTAX = "ManifestYamlSyntax"
NOT_TEXT = "ManifestNotText"
NOT_OBJECT = "ManifestNotAnObject"
NO_KIND = "ManifestMissingKind"
BAD_LIST = "ManifestBadList"
TOO_DEEP = "ManifestTooDeep"
RECURSIVE = "ManifestRecursiveAlias"
EMPTY = "ManifestEmpty"


@dataclass(slots=True)
class Document:
    """One object to judge: where it is, the plain object, and its node (for field lines)."""

    path: str
    line: int  # 1-based line of its first key (a List item's: after its dash)
    obj: dict
    node: Any = field(repr=False)
    item: int | None = None  # index in a `kind: List`

    def field_line(self, keys: tuple[str, ...]) -> tuple[int, int, tuple[str, ...]]:
        """(line, column, the keys found) of the deepest node of `keys` the document has."""
        node, found = self.node, ()
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        for key in keys:
            nxt = None
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == key:
                        nxt, kline, kcol = v, k.start_mark.line + 1, k.start_mark.column + 1
                        break
            elif isinstance(node, yaml.SequenceNode) and key.isdigit() and int(key) < len(node.value):
                nxt = node.value[int(key)]
                kline, kcol = nxt.start_mark.line + 1, nxt.start_mark.column + 1
            if nxt is None:
                break
            node, found, line, col = nxt, (*found, key), kline, kcol
        return line, col, found


@dataclass(slots=True)
class Read:
    """What the reader found: objects to judge, located findings for the rest, and each file's text."""

    documents: list[Document] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    files: int = 0


def expand(paths: list[str]) -> list[str]:
    """Files to read: each file named, every *.yaml/*.yml under each directory (sorted; hidden ones and *.test.yaml skipped)."""
    out: list[str] = []
    for p in paths:
        if p == STDIN:
            out.append(p)
        elif os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(os.path.join(root, f) for f in files
                             if f.endswith(SUFFIXES) and not f.startswith(".") and not f.endswith(TEST_SUFFIXES))
            out.extend(sorted(found))
        elif os.path.exists(p):
            out.append(p)
        else:
            raise UsageError(f"{p}: no such file or directory")
    return out


def read_paths(paths: list[str], stdin=None) -> Read:
    """Read every manifest under `paths`; an unreadable path the user named is a UsageError."""
    return read_files(expand(paths), stdin)


def read_files(files: list[str], stdin=None) -> Read:
    """Read these files (as `expand` lists them)."""
    read = Read()
    for path in files:
        read.files += 1
        try:
            text = decode(_raw(path, stdin), path)  # the one reader's message, as every command gives it
        except NotText as exc:
            read.findings.append(Finding(path, exc.line, exc.column, NOT_TEXT, "error", exc.detail))
            continue
        read.texts[path] = text
        docs, findings = parse(path, text)
        if not docs and not findings:  # an empty file, only comments, an empty List: say so rather than pass in silence
            findings.append(Finding(path, 1, 1, EMPTY, "warning", f"read 0 objects from {path} (no document, or an empty List)"))
        read.documents.extend(docs)
        read.findings.extend(findings)
    return read


def _raw(path: str, stdin) -> bytes:
    if path == STDIN:
        stream = stdin if stdin is not None else sys.stdin
        data = stream.buffer.read() if hasattr(stream, "buffer") else stream.read()
        return data if isinstance(data, bytes) else data.encode("utf-8")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def parse(path: str, text: str) -> tuple[list[Document], list[Finding]]:
    """The documents of one file; on a YAML error, each `---` chunk is read alone so the others survive."""
    docs: list[Document] = []
    findings: list[Finding] = []
    if _load(path, text, 0, docs, findings):
        return docs, findings
    docs, findings = [], []
    for offset, chunk in chunks(text):
        _load(path, chunk, offset, docs, findings)
    return docs, findings


def chunks(text: str) -> Iterator[tuple[int, str]]:
    """(0-based line offset, text) of each `---`-separated chunk; the marker line starts its chunk."""
    starts = [m.start() for m in _MARKER.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    starts.append(len(text))
    for a, b in zip(starts, starts[1:]):
        yield text.count("\n", 0, a), text[a:b]


def _load(path: str, text: str, offset: int, docs: list[Document], findings: list[Finding]) -> bool:
    """Append the documents of `text` (lines shifted by `offset`); False after a YAML error (its finding appended)."""
    loader = ManifestLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            obj = construct(loader, node)
            if obj is not None:
                if offset:
                    _shift(node, offset)
                _document(path, obj, node, docs, findings)
        return True
    except RecursiveAlias as exc:
        mark = exc.problem_mark
        findings.append(Finding(path, mark.line + 1 + offset, mark.column + 1, RECURSIVE, "error", f"not a manifest: {exc.problem}"))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1 + offset, mark.column + 1) if mark else (offset + 1, 1)
        last = offset + text.count("\n") + 1
        if line > last:  # the parser's mark can sit past the end of a text without a final newline
            line, col = last, len(text.rsplit("\n", 1)[-1]) + 1
        what = exc.problem or exc.context or "syntax error"
        findings.append(Finding(path, line, col, YAML_SYNTAX, "error", f"not valid YAML: {what}",
                                help="fix the YAML; the other documents of the file were still linted"))
    except yaml.YAMLError as exc:
        findings.append(Finding(path, offset + 1, 1, YAML_SYNTAX, "error", f"not valid YAML: {exc}"))
    except RecursionError:
        findings.append(Finding(path, offset + 1, 1, TOO_DEEP, "error", "the document is nested too deeply to read"))
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar the constructor cannot build, e.g. a bad timestamp
        findings.append(Finding(path, offset + 1, 1, YAML_SYNTAX, "error", f"not valid YAML: {type(exc).__name__}: {exc}"))
    finally:
        loader.dispose()
    return False


class _ShiftedMark:
    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int):
        self.line, self.column = line, column


def _shift(node, offset: int) -> None:
    """Move the marks of a chunk's nodes to file lines (C marks are read-only: replace them)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        n.start_mark = _ShiftedMark(n.start_mark.line + offset, n.start_mark.column)
        n.end_mark = _ShiftedMark(n.end_mark.line + offset, n.end_mark.column)  # `--fix` writes after a node's end
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def _key_line(node, key: str) -> int:
    if isinstance(node, yaml.MappingNode):
        for k, _v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return k.start_mark.line + 1
    return node.start_mark.line + 1


def _document(path: str, obj: Any, node, docs: list[Document], findings: list[Finding], item: int | None = None) -> None:
    line = node.start_mark.line + 1
    col = node.start_mark.column + 1
    where = "List item" if item is not None else "document"
    if not isinstance(obj, dict):
        findings.append(Finding(path, line, col, NOT_OBJECT, "error",
                                f"{where} is a {_type(obj)}, not a Kubernetes object (a mapping with apiVersion and kind)"))
        return
    kind, api = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind or not isinstance(api, str) or not api:
        missing = [k for k, v in (("apiVersion", api), ("kind", kind)) if not isinstance(v, str) or not v]
        findings.append(Finding(path, line, col, NO_KIND, "error", f"{where} has no {' or '.join(missing)}: not a Kubernetes object",
                                help="every manifest names its apiVersion and kind"))
        return
    if kind == "List" or (kind.endswith("List") and "items" in obj):
        items = obj.get("items")
        item_nodes = _value_node(node, "items")
        if not isinstance(items, list) or not isinstance(item_nodes, yaml.SequenceNode):
            findings.append(Finding(path, _key_line(node, "items"), col, BAD_LIST, "error", f"{kind}: items is not a list"))
            return
        for i, (o, n) in enumerate(zip(items, item_nodes.value)):
            _document(path, o, n, docs, findings, i)
        return
    docs.append(Document(path, line, obj, node, item))


def _value_node(node, key: str):
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    return None


def _type(obj: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(obj), type(obj).__name__)
