"""Messages with `{field}` holes: `"a sleeping agent holds {gpus} GPUs"` -> ir.Template."""

from __future__ import annotations

import difflib
import re

from lang import ast, ir
from lang.diagnostics import Diagnostic, error
from lang.span import Span

_HOLE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def lower_template(s: ast.Str, fields: dict[str, ir.Type], diags: list[Diagnostic]) -> ir.Template:
    """Split a message into text and Field parts; `{{`/`}}` are literal braces; unknown fields are E0113."""
    from lang.build import unescape

    raw = s.raw[1:-1]
    parts: list = []
    text: list[str] = []
    pos = 0
    for m in _HOLE.finditer(raw):
        text.append(raw[pos : m.start()])
        pos = m.end()
        if m.group(0) in ("{{", "}}"):
            text.append(m.group(0)[0])
            continue
        name = m.group(1).strip()
        col = s.span.col + 1 + m.start()
        span = Span(s.span.path, s.span.line, col, s.span.line, col + len(m.group(0)))
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=1)
            hint = f"did you mean `{{{close[0]}}}`?" if close else "write `{{` for a literal brace"
            diags.append(error("E0113", f"the message interpolates `{{{name}}}`, which is not a subject field", span, hint))
            continue
        if text:
            parts.append(unescape('"' + "".join(text) + '"'))
            text = []
        parts.append(ir.Field(name, fields[name], span))
    text.append(raw[pos:])
    tail = unescape('"' + "".join(text) + '"')
    if tail:
        parts.append(tail)
    return ir.Template(tuple(p for p in parts if p != ""), s.span)
