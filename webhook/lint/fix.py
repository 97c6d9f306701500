"""`allot lint --fix`: write what admission would fill into the manifests, keeping comments and key order.

The fill of one object is the mutating decision's JSONPatch plus the values of the warn/audit
`set` rules (`RuleWouldSet`). Each is applied with ruamel.yaml in round-trip mode to the one
`---` document that holds the object, and only that document is emitted again: the rest of
the file stays byte for byte. Indentation is guessed from the document itself.
"""

from __future__ import annotations

import difflib
import io
from dataclasses import dataclass

from webhook.lint.judge import Judged
from webhook.lint.reader import chunks


class FixError(ValueError):
    """A fill that cannot be applied to the document as written (reported, never a traceback)."""


@dataclass(frozen=True, slots=True)
class Fixed:
    """One file's text before and after, and how many objects changed."""

    path: str
    before: str
    after: str
    objects: int
    problems: tuple[str, ...] = ()

    def diff(self) -> str:
        """A unified diff of the file (empty when nothing changed)."""
        return "".join(difflib.unified_diff(self.before.splitlines(True), self.after.splitlines(True),
                                            fromfile=self._side("a"), tofile=self._side("b")))

    def _side(self, side: str) -> str:
        return self.path if self.path.startswith("/") else f"{side}/{self.path}"  # git's a/ b/ for repository paths


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _set(doc, keys: list[str], value, *, create: bool) -> None:
    from ruamel.yaml.comments import CommentedMap

    node = doc
    for k in keys[:-1]:
        if isinstance(node, list):
            if not k.isdigit() or int(k) >= len(node):
                raise FixError(f"index {k} is not in the list")
            node = node[int(k)]
        elif isinstance(node, dict):
            if k not in node:
                if not create:
                    raise FixError(f"{k!r} does not exist")
                node[k] = CommentedMap()
            node = node[k]
        else:
            raise FixError(f"{k!r}: parent is not a mapping")
    last = keys[-1]
    if isinstance(node, list):
        if last == "-":
            node.append(value)
        elif last.isdigit() and int(last) <= len(node):
            node.insert(int(last), value)
        else:
            raise FixError(f"index {last} is not in the list")
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise FixError(f"{last!r}: parent is not a mapping")


def _remove(doc, keys: list[str]) -> None:
    node = doc
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    del node[int(keys[-1]) if isinstance(node, list) else keys[-1]]


def apply(doc, ops, sets) -> None:
    """Apply JSONPatch `ops` (add, replace, remove) and `(path, value)` sets to a round-trip document in place."""
    for op in ops:
        keys = _tokens(op["path"])
        if not keys:
            raise FixError("a patch of the whole object cannot be written back")
        try:
            if op["op"] in ("add", "replace"):
                _set(doc, keys, op["value"], create=True)
            elif op["op"] == "remove":
                _remove(doc, keys)
            else:
                raise FixError(f"patch op {op['op']!r} is not written back")
        except (KeyError, IndexError, TypeError) as exc:
            raise FixError(f"{op['path']}: {exc}") from None
    for path, value in sets:
        _set(doc, list(path), value, create=True)


def _yaml(body: str):
    from ruamel.yaml import YAML
    from ruamel.yaml.util import load_yaml_guess_indent

    _, indent, offset = load_yaml_guess_indent(body)
    indent = indent or 2
    offset = offset or 0
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 1 << 16  # never re-wrap long strings
    y.indent(mapping=indent, sequence=offset + 2, offset=offset)  # a dash, a space, then the item
    return y


def _fix_chunk(chunk: str, targets: list[Judged]) -> str:
    head, body = "", chunk
    first, nl, rest = chunk.partition("\n")
    if first.startswith("---"):
        if first[3:].strip() and not first[3:].strip().startswith("#"):
            raise FixError("a document that starts on its `---` line is not rewritten")
        head, body = first + nl, rest
    y = _yaml(body)
    docs = list(y.load_all(body))
    docs = [d for d in docs if d is not None]
    if len(docs) != 1:
        raise FixError("the `---` section holds more than one document")
    doc = docs[0]
    for j in targets:
        target = doc["items"][j.doc.item] if j.doc.item is not None else doc
        apply(target, j.patch, j.sets)
    out = io.StringIO()
    y.dump(doc, out)
    text = out.getvalue()
    if not body.endswith("\n") and text.endswith("\n"):
        text = text[:-1]
    return head + text


def fix_file(path: str, text: str, judged: list[Judged]) -> Fixed:
    """The file with every judged object's fill applied, each in its own `---` section."""
    wanted = [j for j in judged if j.patch or j.sets]
    if not wanted:
        return Fixed(path, text, text, 0)
    parts = list(chunks(text))
    bounds = [(off, off + c.count("\n") + (0 if c.endswith("\n") else 1)) for off, c in parts]
    by_chunk: dict[int, list[Judged]] = {}
    for j in wanted:
        line0 = j.doc.line - 1
        for i, (a, b) in enumerate(bounds):
            if a <= line0 < max(b, a + 1):
                by_chunk.setdefault(i, []).append(j)
                break
    out, problems, objects = [], [], 0
    for i, (_off, chunk) in enumerate(parts):
        if i not in by_chunk:
            out.append(chunk)
            continue
        try:
            out.append(_fix_chunk(chunk, by_chunk[i]))
            objects += len(by_chunk[i])
        except Exception as exc:  # noqa: BLE001 - ruamel's own errors included: report the object, keep the file
            out.append(chunk)
            problems.append(f"{path}:{by_chunk[i][0].doc.line}: not fixed: {exc}")
    return Fixed(path, text, "".join(out), objects, tuple(problems))
