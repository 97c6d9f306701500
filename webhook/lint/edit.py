"""Text edits that fill values into a manifest as written: new lines in the document's own style, nothing else touched.

A fill is a list of puts (keys from the object's root, a value). Each put finds the deepest
node of its keys the manifest has (PyYAML nodes with line marks, from the reader): a
scalar that exists is replaced in place; missing keys become new lines after the last line
of the block mapping that should hold them, at that mapping's own key column, nested by the
document's own mapping step and sequence offset (guessed from the object's nodes), strings
quoted as the document quotes them. A flow mapping (`{a: 1}`) gets `, key: value` before its
closing brace. Every other line of the file stays byte for byte.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import yaml


class EditError(ValueError):
    """A fill this manifest cannot take as a text edit (reported, the manifest left as it was)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace the text from (line, col) to (end_line, end_col), 0-based, by `text`; an insertion when both ends meet."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


@dataclass(frozen=True, slots=True)
class Style:
    """How a document writes YAML: spaces per mapping level, a sequence's dash offset under its key, its quote."""

    step: int = 2
    offset: int = 0
    quote: str = '"'


def guess_style(root) -> Style:
    """The most common mapping step, dash offset and quote character among the nodes of `root`."""
    steps: Counter[int] = Counter()
    offsets: Counter[int] = Counter()
    quotes: Counter[str] = Counter()
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.ScalarNode):
            if n.style in ('"', "'"):
                quotes[n.style] += 1
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if isinstance(v, yaml.MappingNode) and not v.flow_style and v.value and not n.flow_style:
                    child = v.value[0][0].start_mark
                    if child.line > k.start_mark.line:  # `- a:` puts a mapping on its key's line: no step there
                        steps[child.column - k.start_mark.column] += 1
                if (isinstance(v, yaml.SequenceNode) and not v.flow_style and v.value and not n.flow_style
                        and v.start_mark.line > k.start_mark.line):
                    offsets[v.start_mark.column - k.start_mark.column] += 1
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    step = next((s for s, _ in steps.most_common() if s > 0), 2)
    offset = next((o for o, _ in offsets.most_common() if o >= 0), 0)
    quote = quotes.most_common(1)[0][0] if quotes else '"'
    return Style(step, offset, quote)


def scalar(value, style: Style) -> str:
    """One scalar as YAML text: plain when YAML reads it back as the same value, else quoted the document's way."""
    if isinstance(value, str):
        plain = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
        plain = plain.removesuffix("\n").removesuffix("\n...")
        if plain == value:
            return value
        if style.quote == "'" and "\n" not in value and value.isprintable():
            return "'" + value.replace("'", "''") + "'"
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    raise EditError(f"cannot write a {type(value).__name__} value")


def flow(value, style: Style) -> str:
    """A value in flow style (for inside `{…}` or `[…]`)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(str(k), style)}: {flow(v, style)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v, style) for v in value) + "]"
    return scalar(value, style)


def block_entry(key: str, value, indent: int, style: Style) -> list[str]:
    """The lines of `key: value` at column `indent`, nested in the document's style."""
    head = " " * indent + scalar(str(key), style) + ":"
    if isinstance(value, dict) and value:
        out = [head]
        for k, v in value.items():
            out.extend(block_entry(k, v, indent + style.step, style))
        return out
    if isinstance(value, list) and value:
        return [head, *_block_items(value, indent + style.offset, style)]
    return [head + " " + flow(value, style)]


def _block_items(items: list, dash: int, style: Style) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, dict) and item:
            entries: list[str] = []
            for k, v in item.items():
                entries.extend(block_entry(k, v, dash + 2, style))
            out.append(" " * dash + "- " + entries[0][dash + 2 :])
            out.extend(entries[1:])
        else:
            out.append(" " * dash + "- " + flow(item, style))
    return out


def last_line(node) -> int:
    """The 0-based line of the last character of `node`'s content (a block collection's end mark is the next token's)."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        k, v = node.value[-1]
        return k.end_mark.line if _empty(v) else max(k.end_mark.line, last_line(v))
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return last_line(node.value[-1])
    end = node.end_mark
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">") and end.column == 0:
        return end.line - 1
    return end.line


def _empty(node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.value == "" and not node.style


def _child(node, key: str):
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
        return None
    if isinstance(node, yaml.SequenceNode) and key.isdigit() and int(key) < len(node.value):
        return node.value[int(key)]
    return None


def _merge(tree: dict, keys: list[str], value) -> None:
    for k in keys[:-1]:
        nxt = tree.get(k)
        if not isinstance(nxt, dict):
            nxt = tree[k] = {}
        tree = nxt
    if isinstance(tree.get(keys[-1]), dict) and isinstance(value, dict):
        for k, v in value.items():
            _merge(tree[keys[-1]], [k], v)
    else:
        tree[keys[-1]] = value


def plan(root, puts, style: Style, lines: list[str]) -> list[Edit]:
    """The edits that write each `(keys, value)` of `puts` into the object whose node is `root`."""
    additions: dict[int, tuple[object, dict]] = {}  # id(the deepest mapping found) -> (node, the missing keys' tree)
    edits: list[Edit] = []
    for keys, value in puts:
        node, depth = root, 0
        while depth < len(keys):
            nxt = _child(node, keys[depth])
            if nxt is None:
                break
            node, depth = nxt, depth + 1
        if depth == len(keys):
            edits.append(_replace(node, keys, value, style))
            continue
        if not isinstance(node, yaml.MappingNode):
            where = "/".join(keys[:depth]) or "the object"
            raise EditError(f"{where} is not a mapping: /{'/'.join(keys)} cannot be added")
        _merge(additions.setdefault(id(node), (node, {}))[1], list(keys[depth:]), value)
    # Mappings that end on one line take their new lines innermost first (a container's, then its pod spec's).
    for node, tree in sorted(additions.values(), key=lambda nt: -_key_column(nt[0])):
        edits.append(_insert_flow(node, tree, style, lines) if node.flow_style else _insert_block(node, tree, style, lines))
    return edits


def _key_column(node) -> int:
    return node.value[0][0].start_mark.column if node.value and not node.flow_style else -1


def _replace(node, keys, value, style: Style) -> Edit:
    if not isinstance(node, yaml.ScalarNode) or node.style in ("|", ">") or isinstance(value, (dict, list)):
        raise EditError(f"/{'/'.join(keys)}: only a one-line scalar is replaced in place")
    text = scalar(value, style)
    if isinstance(value, str) and text == value and node.style in ('"', "'"):  # quoted before: quoted the same way
        text = "'" + value.replace("'", "''") + "'" if node.style == "'" else json.dumps(value, ensure_ascii=False)
    s, e = node.start_mark, node.end_mark
    return Edit(s.line, s.column, e.line, e.column, text)


def _eol(lines: list[str], line: int) -> str:
    text = lines[line] if line < len(lines) else ""
    return "\r\n" if text.endswith("\r\n") else "\n"


def _insert_block(node, tree: dict, style: Style, lines: list[str]) -> Edit:
    if node.value:
        indent = node.value[0][0].start_mark.column
    else:
        raise EditError("an empty block mapping has no column to write at")
    new: list[str] = []
    for k, v in tree.items():
        new.extend(block_entry(k, v, indent, style))
    after = last_line(node)
    eol = _eol(lines, after)
    text = "".join(line + eol for line in new)
    if after + 1 >= len(lines) and lines and not lines[-1].endswith("\n"):  # the last line has no line break
        end = len(lines[-1])
        return Edit(len(lines) - 1, end, len(lines) - 1, end, eol + text[: -len(eol)])
    return Edit(after + 1, 0, after + 1, 0, text)


def _insert_flow(node, tree: dict, style: Style, lines: list[str]) -> Edit:
    end = node.end_mark  # just after the closing brace
    line = lines[end.line] if end.line < len(lines) else ""
    if end.column < 1 or line[end.column - 1 : end.column] != "}":
        raise EditError("the flow mapping's closing brace was not found")
    if node.value and all(k.style == '"' for k, _ in node.value):  # JSON written as YAML: stays JSON
        text = ", ".join(f"{json.dumps(str(k))}: {json.dumps(v, ensure_ascii=False)}" for k, v in tree.items())
    else:
        text = ", ".join(f"{scalar(str(k), style)}: {flow(v, style)}" for k, v in tree.items())
    if node.value:
        text = ", " + text
    return Edit(end.line, end.column - 1, end.line, end.column - 1, text)


def apply_edits(lines: list[str], edits: list[Edit]) -> str:
    """The text with every edit made; edits at one point are made in the order given."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    text = "".join(lines)

    def offset(line: int, col: int) -> int:
        if line >= len(lines):
            return len(text)
        return starts[line] + col

    spans = sorted(((offset(e.line, e.col), offset(e.end_line, e.end_col), i, e.text) for i, e in enumerate(edits)),
                   key=lambda s: (s[0], s[2]))
    out, pos = [], 0
    for a, b, _, new in spans:
        if a < pos:
            raise EditError("two fills overlap")
        out.append(text[pos:a])
        out.append(new)
        pos = b
    out.append(text[pos:])
    return "".join(out)
