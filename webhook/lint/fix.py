"""`allot lint --fix`: write what admission would fill into the manifests, changing only the lines it fills.

The fill of one object is the mutating decision's JSONPatch as git should hold it
(policy/lint/patches.py `for_git`) plus the values of the warn/audit `set` rules
(`RuleWouldSet`). They are made as text edits at the object's own nodes (webhook/lint/edit.py):
new lines in the document's indentation, a replaced scalar in place, every other byte of
the file as it was. The edited file is read again and must hold exactly the fill, or the
object is reported as not fixed and left as it was.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass

from webhook.lint.edit import Edit, EditError, apply_edits, guess_style, plan
from webhook.lint.judge import Judged
from webhook.lint.reader import parse

FixError = EditError  # the name callers catch


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


def _tokens(pointer: str) -> tuple[str, ...]:
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:])


def puts(j: Judged) -> list[tuple[tuple[str, ...], object]]:
    """The `(keys, value)` pairs of one object's fill: its patch ops, then its rules' `set` values."""
    out = []
    for op in j.patch:
        keys = _tokens(op["path"])
        if not keys:
            raise FixError("a patch of the whole object cannot be written back")
        if op["op"] not in ("add", "replace"):
            raise FixError(f"patch op {op['op']!r} is not written back")
        out.append((keys, op["value"]))
    out.extend((tuple(path), value) for path, value in j.sets)
    return out


def _put(obj, keys: tuple[str, ...], value) -> None:
    node = obj
    for k in keys[:-1]:
        if isinstance(node, list):
            node = node[int(k)]
        else:
            node = node.setdefault(k, {})
    if isinstance(node, list):
        node.append(value) if keys[-1] == "-" else node.insert(int(keys[-1]), value)
    else:
        node[keys[-1]] = value


def filled(obj: dict, pairs) -> dict:
    """A copy of `obj` with every `(keys, value)` set: what the edited manifest must read back as."""
    out = copy.deepcopy(obj)
    for keys, value in pairs:
        _put(out, keys, copy.deepcopy(value))
    return out


def _objects(path: str, text: str) -> list[tuple[tuple[int, int | None], dict]]:
    docs, _ = parse(path, text)
    return [((d.line, d.item), d.obj) for d in docs]


def _reads_as(path: str, text: str, want: list[dict]) -> bool:
    got = [obj for _, obj in _objects(path, text)]
    return len(got) == len(want) and all(repr(a) == repr(b) for a, b in zip(got, want))


def fix_file(path: str, text: str, judged: list[Judged]) -> Fixed:
    """The file with every judged object's fill written in, each object edited at its own lines."""
    wanted = [j for j in judged if j.patch or j.sets]
    if not wanted:
        return Fixed(path, text, text, 0)
    if "\r" in text.replace("\r\n", ""):
        return Fixed(path, text, text, 0, tuple(f"{path}:{j.doc.line}: not fixed: the file has lone CR line breaks" for j in wanted))
    lines = text.splitlines(True)
    before = _objects(path, text)
    index = {key: i for i, (key, _) in enumerate(before)}
    want = [obj for _, obj in before]
    planned: list[tuple[Judged, list[Edit], int, dict]] = []
    problems: list[str] = []
    for j in wanted:
        try:
            i = index.get((j.doc.line, j.doc.item))
            if i is None or j.doc.node is None:
                raise FixError("the object was not found again in the file")
            pairs = puts(j)
            edits = plan(j.doc.node, pairs, guess_style(j.doc.node), lines)
            planned.append((j, edits, i, filled(j.doc.obj, pairs)))
        except FixError as exc:
            problems.append(f"{path}:{j.doc.line}: not fixed: {exc}")
    good = _checked(path, lines, want, planned, problems)
    if not good:
        return Fixed(path, text, text, 0, tuple(problems))
    after = apply_edits(lines, [e for _, edits, _, _ in good for e in edits])
    return Fixed(path, text, after, len(good), tuple(problems))


def _checked(path, lines, want, planned, problems):
    """The planned objects whose edits read back as their fill: all of them at once, else each one alone."""
    def reads(items) -> bool:
        expect = list(want)
        for _, _, i, obj in items:
            expect[i] = obj
        try:
            return _reads_as(path, apply_edits(lines, [e for _, edits, _, _ in items for e in edits]), expect)
        except FixError:
            return False

    if not planned or reads(planned):
        return planned
    good = []
    for item in planned:
        if reads([item]):
            good.append(item)
        else:
            problems.append(f"{path}:{item[0].doc.line}: not fixed: the edit would not read back as the fill")
    return good if reads(good) else []
