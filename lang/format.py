"""The canonical layout of a .policy file: 2-space indents, one statement per line, comments kept.

Layout rules (docs/check.md, "Formatting"): statements keep their source order;
at most one blank line is kept where the source had any; `gpu` blocks without inner
comments print on one line; runs of consecutive one-line `gpu`/`priority`
declarations (names and values) and the levels of a topology are aligned in columns; trailing
comments of one block are aligned to one column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lang import ast
from lang.diagnostics import Diagnostic
from lang.format_expr import show_stmt

INDENT = "  "


class FormatError(ValueError):
    """The text has syntax errors; `diagnostics` says where."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__(f"{len(diagnostics)} syntax error(s)")
        self.diagnostics = diagnostics


@dataclass
class _Line:
    indent: int
    cells: list[str] | None  # None: a blank line
    comment: str | None = None
    group: object = None  # lines of one group share comment alignment
    pad: tuple[int, ...] = ()  # cell indexes padded to the widest in a run
    kind: str = ""  # runs of the same kind align their padded cells
    own_comment: bool = False

    def code(self, widths: dict[int, int] | None = None) -> str:
        cells = list(self.cells or [])
        for i in self.pad:
            if widths and i in widths and i < len(cells) - 1:
                cells[i] = cells[i].ljust(widths[i])
        return INDENT * self.indent + " ".join(cells)


@dataclass
class _Printer:
    file: ast.File
    lines: list[_Line] = field(default_factory=list)
    last_src: int = 0  # last source line emitted
    used: set[int] = field(default_factory=set)  # ids of comments already printed
    force_gap: bool = False  # the next emitted line starts a new paragraph

    def __post_init__(self):
        src = self.file.text.split("\n")
        self.blank = {i + 1 for i, row in enumerate(src) if not row.strip()}
        self.own: list[ast.Comment] = []
        self.trailing: dict[int, list[ast.Comment]] = {}
        for c in self.file.comments:
            before = src[c.span.line - 1][: c.span.col - 1] if c.span.line - 1 < len(src) else ""
            if before.strip():
                self.trailing.setdefault(c.span.line, []).append(c)
            else:
                self.own.append(c)
        self.own.sort(key=lambda c: c.span.line)

    def gap(self, line: int) -> None:
        """One blank line if the source had any between the last emitted line and `line`."""
        if self.lines and self.lines[-1].cells is not None and (self.force_gap or any(n in self.blank for n in range(self.last_src + 1, line))):
            self.lines.append(_Line(0, None))
        self.force_gap = False

    def flush_comments(self, before: int, indent: int) -> None:
        for c in self.own:
            if id(c) in self.used or c.span.line >= before:
                continue
            self.gap(c.span.line)
            self.lines.append(_Line(indent, [c.text.rstrip()], own_comment=True))
            self.used.add(id(c))
            self.last_src = c.span.line

    def emit(self, first: int, last: int, indent: int, cells: list[str], group=None, pad=(), kind="") -> None:
        self.flush_comments(first, indent)
        self.gap(first)
        comments = [c for n in range(first, last + 1) for c in self.trailing.get(n, []) if id(c) not in self.used]
        for c in comments[:-1]:  # several comments inside one statement: all but the last go above it
            self.lines.append(_Line(indent, [c.text.rstrip()], own_comment=True))
        for c in comments:
            self.used.add(id(c))
        tail = comments[-1].text.rstrip() if comments else None
        self.lines.append(_Line(indent, cells, tail, group, tuple(pad), kind))
        self.last_src = last

    def has_inner_comments(self, b: ast.Block) -> bool:
        return any(b.span.line < c.span.line <= b.span.end_line for c in self.file.comments)

    def one_line(self, d: ast.Decl) -> bool:
        """Whether the declaration prints on a single line."""
        if isinstance(d, ast.PriorityDecl):
            return True
        return (d.kind == "gpu" or not d.stmts) and not self.has_inner_comments(d)

    def decl(self, d: ast.Decl) -> None:
        if isinstance(d, ast.PriorityDecl):
            value = ("-" if d.negative else "") + d.value.text
            flags = [w for w, on in (("preempts", d.preempts), ("default", d.default)) if on]
            # names and values padded alike, so the `preempts`/`default` flags of a run line up too
            cells = ["priority", d.name.name, value] + ([" ".join(flags)] if flags else [])
            self.emit(d.span.line, d.span.end_line, 0, cells, "top", (1, 2), "priority")
            return
        head = [d.kind] + ([d.name.name] if d.name is not None else [])
        if d.kind == "gpu" and self.one_line(d):
            body = [show_stmt(s) for s in d.stmts]
            cells = head + ["{"] + body + ["}"] if body else head + ["{}"]
            pad = (1, 3) if len(body) == 2 else (1,)
            self.emit(d.span.line, d.span.end_line, 0, cells, "top", pad, "gpu" if len(body) == 2 else "")
            return
        if self.one_line(d):
            self.emit(d.span.line, d.span.end_line, 0, head + ["{}"], "top")
            return
        self.emit(d.span.line, d.span.line, 0, head + ["{"], ("head", id(d)))
        for s in d.stmts:
            if isinstance(s, ast.Level):
                self.emit(s.span.line, s.span.end_line, 1, [s.name.name, s.label.raw], ("block", id(d)), (0,), "level")
            else:
                self.emit(s.span.line, s.span.end_line, 1, [show_stmt(s)], ("block", id(d)))
        self.flush_comments(d.span.end_line, 1)
        if self.lines[-1].cells is None:
            self.lines.pop()
        self.emit(d.span.end_line, d.span.end_line, 0, ["}"], ("close", id(d)))
        self.last_src = d.span.end_line


def _align(lines: list[_Line]) -> list[str]:
    """Pad cells across runs of same-kind lines, then align trailing comments per group."""
    widths_of: dict[int, dict[int, int]] = {}
    run: list[int] = []

    def close_run():
        widths: dict[int, int] = {}
        for j in run:
            for i in lines[j].pad:
                if i < len(lines[j].cells) - 1:
                    widths[i] = max(widths.get(i, 0), len(lines[j].cells[i]))
        for j in run:
            widths_of[j] = widths
        run.clear()

    for j, ln in enumerate(lines):
        if ln.cells is None or not ln.kind or (run and lines[run[-1]].kind != ln.kind):
            close_run()
        if ln.cells is not None and ln.kind:
            run.append(j)
    close_run()
    codes = [ln.code(widths_of.get(j)) if ln.cells is not None else "" for j, ln in enumerate(lines)]
    col: dict[object, int] = {}
    for j, ln in enumerate(lines):
        if ln.comment:
            key = ln.group if ln.group != "top" else ("top-run", _run_start(lines, j))
            col[key] = max(col.get(key, 0), len(codes[j]))
    out = []
    for j, ln in enumerate(lines):
        if ln.comment:
            key = ln.group if ln.group != "top" else ("top-run", _run_start(lines, j))
            out.append(codes[j].ljust(col[key]) + "  " + ln.comment)
        else:
            out.append(codes[j])
    return out


def _run_start(lines: list[_Line], j: int) -> int:
    """Top-level one-liners align comments within a run of adjacent lines."""
    while j > 0 and lines[j - 1].cells is not None and lines[j - 1].group == "top" and not lines[j - 1].own_comment:
        j -= 1
    return j


def format_file(f: ast.File) -> str:
    """Print a parsed file in the canonical layout."""
    p = _Printer(f)
    prev_multi = False
    for d in f.decls:
        multi = not p.one_line(d)
        # a multi-line block is always separated from its neighbours by one blank line
        p.force_gap = bool(p.lines) and (multi or prev_multi)
        p.decl(d)
        prev_multi = multi
    p.flush_comments(10**9, 0)
    text = "\n".join(_align(p.lines)).strip("\n")
    return text + "\n" if text else ""


FMT_OFF = "# allot: fmt off"  # a file whose leading comments hold this line is kept as written


def format_source(text: str, path: str) -> str:
    """Canonical text of `text`; raises FormatError when it does not parse. A file marked `# allot: fmt off` is returned as is (once it parses)."""
    from lang.parser import parse

    f, diags = parse(text, path)
    errors = [d for d in diags if d.severity == "error"]
    if errors or f is None:
        if not errors and f is None:
            return ""
        raise FormatError(errors)
    if _formatting_off(text):
        return text
    return format_file(f)


def _formatting_off(text: str) -> bool:
    """True when the comment lines heading the file include the `# allot: fmt off` marker."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == FMT_OFF:
            return True
        if stripped and not stripped.startswith("#"):
            return False
    return False
