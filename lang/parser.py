"""Text -> `lang.ast.File` plus syntax diagnostics. The only module that imports lark.

LALR with positions propagated. On a syntax error the file is re-parsed one
top-level block at a time (a block starts at column 1 with its keyword), so one
bad block does not hide the errors or the declarations of the others.
"""

from __future__ import annotations

import pathlib
import re
import threading

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from lang import ast
from lang.diagnostics import Diagnostic, error
from lang.build import Builder, BuildError, unescape
from lang.parse_errors import describe_unexpected
from lang.span import Span

_GRAMMAR = pathlib.Path(__file__).with_name("grammar.lark")
_BLOCK_START = re.compile(r"^(gpu|topology|priority|quota|fraction|gang|agents|rule)\b", re.M)
_MAX_ERRORS = 25
_lock = threading.Lock()  # the builder keeps per-parse state (path, depths)
_COMMENT_SCAN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*')  # strings first, so a `#` inside one is not a comment
_parser: lark.Lark | None = None
_builder: Builder | None = None


def _lark() -> lark.Lark:
    """The parser, built once; it applies _Builder inline, so parse() returns AST declarations."""
    global _parser, _builder
    if _parser is None:
        _builder = Builder()
        _parser = lark.Lark(
            _GRAMMAR.read_text(encoding="utf-8"),
            parser="lalr",
            lexer="contextual",
            transformer=_builder,
        )
    return _parser


def terminal_patterns() -> dict[str, str]:
    """Terminal name -> literal text for keyword/punctuation terminals (for error messages)."""
    out = {}
    for t in _lark().terminals:
        if t.pattern.type == "str":
            out[t.name] = t.pattern.value
    return out


def _parse_decls(text: str, path: str) -> list:
    p = _lark()
    with _lock:
        _builder.path = path
        _builder.depth = {}
        try:
            return p.parse(text)
        finally:
            _builder.depth = {}


def scan_comments(text: str, path: str) -> tuple[ast.Comment, ...]:
    """Every `# …` outside a string literal, with its span."""
    if "#" not in text:
        return ()
    out = []
    line, line_start, pos = 1, 0, 0
    for m in _COMMENT_SCAN.finditer(text):
        if text[m.start()] != "#":
            continue
        while True:  # advance the line counter to the match
            nl = text.find("\n", pos, m.start())
            if nl < 0:
                break
            line, line_start, pos = line + 1, nl + 1, nl + 1
        col = m.start() - line_start + 1
        comment = m.group(0).rstrip("\r")
        out.append(ast.Comment(comment, Span(path, line, col, line, col + len(comment))))
    return tuple(out)


def _parse_example(text: str):
    return _parse_decls(text, "<example>")



def bare_parser() -> lark.Lark:
    """The same grammar without the AST builder: the baseline of `allot bench check`."""
    return lark.Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual")


def _chunks(text: str) -> list[tuple[int, int, int]]:
    """(start offset, end offset, first line) of each top-level block."""
    starts = [m.start() for m in _BLOCK_START.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    out = []
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else len(text)
        out.append((s, e, text.count("\n", 0, s) + 1))
    return out


def _bad_bytes(text: str, path: str) -> list[Diagnostic]:
    if "\ufffd" not in text:
        return []
    diags = []
    for lineno, line in enumerate(text.split("\n"), 1):
        col = line.find("\ufffd")
        if col >= 0:
            diags.append(
                error("E0004", "this line is not valid UTF-8", Span(path, lineno, col + 1, lineno, col + 2), "save the file as UTF-8")
            )
    return diags


def parse(text: str, path: str) -> tuple[ast.File | None, list[Diagnostic]]:
    """Parse one file; the File holds every declaration that parsed, diagnostics every syntax error."""
    diags = _bad_bytes(text, path)
    if diags:  # reported once as E0004; parse on so the rest of the file is still checked
        text = text.replace("\ufffd", " ")
    try:
        decls = _parse_decls(text, path)
        return ast.File(path, tuple(decls), scan_comments(text, path), text), diags
    except (UnexpectedInput, BuildError):
        pass
    decls: list[ast.Decl] = []
    errors = 0
    chunks = _chunks(text)
    for n, (start, end, line) in enumerate(chunks):
        padded = "\n" * (line - 1) + text[start:end]
        try:
            found_decls = _parse_decls(padded, path)
        except UnexpectedInput as exc:
            errors += 1
            if errors > _MAX_ERRORS:
                diags.append(error("E0005", f"more than {_MAX_ERRORS} syntax errors; stopped here", Span(path, line, 1, line, 2)))
                break
            d = describe_unexpected(exc, padded, path, last_chunk=n == len(chunks) - 1, parse_fn=_parse_example)
            if d.code == "E0003" and n < len(chunks) - 1:  # point at the block left open, not at its neighbour
                head = text[start:end].split("\n", 1)[0].rstrip()
                next_line = chunks[n + 1][2]
                d = error("E0003", "this block is not closed: `}` is missing", Span(path, line, 1, line, len(head) + 1), f"the next declaration starts at line {next_line}")
            diags.append(d)
            continue
        except BuildError as exc:
            errors += 1
            diags.append(exc.diagnostic)
            continue
        decls.extend(found_decls)
    if not decls:
        return None, diags
    return ast.File(path, tuple(decls), scan_comments(text, path), text), diags


__all__ = ["parse", "unescape", "UnexpectedCharacters", "UnexpectedEOF", "UnexpectedToken"]
