"""Text -> `lang.ast.File` plus syntax diagnostics. The only module that imports lark.

LALR with positions propagated. On a syntax error the file is re-parsed one
top-level block at a time (a block starts at column 1 with its keyword), so one
bad block does not hide the errors or the declarations of the others.
"""

from __future__ import annotations

import functools
import pathlib
import re
import threading

import lark
from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import Lexer

from lang import ast
from lang.diagnostics import Diagnostic, error
from lang.build import Builder, BuildError, unescape
from lang.parse_errors import describe_unexpected
from lang.span import Span

_GRAMMAR = pathlib.Path(__file__).with_name("grammar.lark")
_KINDS = "gpu|topology|priority|cohort|quota|fraction|gang|agents|rule|budget|steer"
# A declaration starts in column 1 with its keyword, or with any word (a misspelt keyword) and a name before `{`.
_BLOCK_START = re.compile(rf"^(?:(?:{_KINDS})\b|[A-Za-z_][\w-]*(?:[ \t]+[A-Za-z_][\w-]*)?[ \t]*\{{)", re.M)
_HEAD = re.compile(rf"({_KINDS})\b[ \t]*([A-Za-z_](?:[\w-]*\w)?)?")
_STATEMENT_ERRORS = ("E0001", "E0002", "E0007")  # errors inside one statement: the block reads on after it
_TOP_TERMINALS = {"GPU", "TOPOLOGY", "PRIORITY", "QUOTA", "FRACTION", "GANG", "AGENTS", "RULE", "BUDGET", "STEER"}
# A line that a condition continues after: ends in an operator, `,` or `(` (comments aside).
_CONTINUES = re.compile(r"(?:\b(?:and|or|not|in|matches)|[,(+\-*<>=])[ \t]*(?:#[^\n]*)?$")
_MAX_ERRORS = 25
_lock = threading.Lock()  # the builder keeps per-parse state (path, depths)
_COMMENT_SCAN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*')  # strings first, so a `#` inside one is not a comment
_parser: lark.Lark | None = None
_builder: Builder | None = None


_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?(?![A-Za-z0-9_.])"
_TOKENS = (  # the grammar's terminals, tried in this order at each position
    ("WS", r"[ \t\f\r]+"),
    ("COMMENT", r"\#[^\n]*"),
    ("_NL", r"(?:(?:\r?\n|;)[\t \f\r]*(?:\#[^\n]*)?)+"),
    ("STRING", r'"(?:[^"\\\n]|\\.)*"'),
    ("NUMBER", _NUMBER),
    ("NAME", r"[A-Za-z_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"),
)


class _PolicyLexer(Lexer):
    """A contextual lexer in one regex: a word is a keyword only where the parser accepts that keyword.

    Same tokens as lark's contextual lexer on this grammar (a test compares them), about
    twice as fast, because it skips lark's per-terminal matching machinery.
    """

    __future_interface__ = 1

    def __init__(self, conf):
        words = {t.pattern.value: t.name for t in conf.terminals if t.pattern.type == "str"}
        self.keywords = {w: n for w, n in words.items() if w[:1].isalpha() or w[:1] == "_"}
        self.punct = {w: n for w, n in words.items() if w not in self.keywords}
        self.punct.update({op: "CMP" for op in ("==", "!=", "<=", ">=", "<", ">")})
        ops = "|".join(re.escape(p) for p in sorted(self.punct, key=len, reverse=True))
        self.master = re.compile("|".join(f"(?P<{n}>{rx})" for n, rx in _TOKENS) + f"|(?P<P>{ops})")

    def lex(self, lexer_state, parser_state):
        text = lexer_state.text
        text = getattr(text, "text", text)  # lark may hand a TextSlice
        states = parser_state.parse_conf.parse_table.states
        match, keywords, punct = self.master.match, self.keywords, self.punct
        pos, line, line_start, n = 0, 1, 0, len(text)
        while pos < n:
            m = match(text, pos)
            if m is None:
                allowed = set(states[parser_state.position])
                raise UnexpectedCharacters(text, pos, line, pos - line_start + 1, allowed=allowed, state=parser_state)
            kind, end = m.lastgroup, m.end()
            if kind == "WS" or kind == "COMMENT":
                pos = end
                continue
            value = m.group()
            col = pos - line_start + 1
            if kind == "P":
                kind = punct[value]
            elif kind == "NAME":
                kw = keywords.get(value)
                if kw is not None and kw in states[parser_state.position]:
                    kind = kw
            elif kind == "_NL":
                last = text.rfind("\n", pos, end)
                if last >= 0:
                    end_line = line + value.count("\n")
                    yield Token(kind, value, pos, line, col, end_line, end - last, end)
                    line, line_start, pos = end_line, last + 1, end
                    continue
            yield Token(kind, value, pos, line, col, line, col + (end - pos), end)
            pos = end


def _lark() -> lark.Lark:
    """The parser, built once; it applies _Builder inline, so parse() returns AST declarations."""
    global _parser, _builder
    if _parser is None:
        _builder = Builder()
        _parser = lark.Lark(
            _GRAMMAR.read_text(encoding="utf-8"),
            parser="lalr",
            lexer=_PolicyLexer,
            transformer=_builder,
        )
    return _parser


@functools.cache
def terminal_patterns() -> dict[str, str]:
    """Terminal name -> literal text for keyword/punctuation terminals (for error messages; do not mutate)."""
    out = {}
    for t in _lark().terminals:
        if t.pattern.type == "str":
            out[t.name] = t.pattern.value
    return out


def _parse_decls(text: str, path: str) -> list:
    p = _lark()
    with _lock:
        _builder.file = path
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



def reference_parse(text: str, path: str = "<ref>") -> list:
    """Declarations parsed with lark's own contextual lexer instead of _PolicyLexer (tests compare the two)."""
    global _reference
    if _reference is None:
        _reference = lark.Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual", transformer=_builder)
    _lark()
    with _lock:
        _builder.file = path
        _builder.depth = {}
        try:
            return _reference.parse(text)
        finally:
            _builder.depth = {}


_reference: lark.Lark | None = None


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


def _head(chunk: str) -> tuple[str, str] | None:
    """(kind, name) from a declaration's first line, as far as it can be read."""
    m = _HEAD.match(chunk)
    return (m.group(1), m.group(2) or m.group(1)) if m else None


def _stray_length(rest: str) -> int:
    """Length of a stray declaration at the start of `rest`: its line, or up to its `}` in column 1 if it opens a block."""
    nl = rest.find("\n")
    first = rest if nl < 0 else rest[:nl]
    if "{" in first and "}" not in first:
        close = re.search(r"^\}[^\n]*\n?", rest, re.M)
        if close is not None:
            return close.end()
    return len(rest) if nl < 0 else nl + 1


def _line_offset(text: str, line: int) -> int:
    """Offset of the start of 1-based `line` in `text` (len(text) past the end)."""
    pos = 0
    for _ in range(line - 1):
        nl = text.find("\n", pos)
        if nl < 0:
            return len(text)
        pos = nl + 1
    return pos


def _blank_statement(padded: str, line: int) -> str:
    """`padded` with the statement that ends on `line` blanked (its continuation lines too); a closing `}` stays."""
    rows = padded.split("\n")
    first = line - 1
    while first > 0 and _CONTINUES.search(rows[first - 1]):
        first -= 1
    for i in range(first, min(line, len(rows))):
        rows[i] = "}" if rows[i].rstrip().endswith("}") else ""
    return "\n".join(rows)


def _more_errors(padded: str, line: int, head_line: int, path: str, budget: int) -> tuple[list[Diagnostic], list]:
    """Syntax errors after the first one of a block, and the block without its bad statements.

    The bad statement is blanked and the block parsed again, until it parses (its declarations are
    returned, so the checker still reports the rest of the block) or an error is not one of a single
    statement. Only errors on later lines are kept, and only E0001/E0002/E0007, so blanking never
    invents an unclosed block or reports one mistake twice.
    """
    out: list[Diagnostic] = []
    while line > head_line and len(out) < budget:
        padded = _blank_statement(padded, line)
        try:
            return out, _parse_decls(padded, path)
        except UnexpectedInput as exc:
            d = describe_unexpected(exc, padded, path, terminal_patterns(), parse_fn=_parse_example)
        except BuildError as exc:
            d = exc.diagnostic
        if d.code not in _STATEMENT_ERRORS or d.span.line <= line:
            break
        out.append(d)
        line = d.span.line
    return out, []


def _closed(padded: str, path: str) -> list:
    """The declarations of a block left open, read as if `}` closed it; [] when that does not parse either."""
    try:
        return _parse_decls(padded.rstrip() + "\n}\n", path)
    except (UnexpectedInput, BuildError):
        return []


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
    unparsed: list[tuple[str, str]] = []
    partials: list[Span] = []
    errors = 0
    chunks = _chunks(text)
    work = list(reversed(chunks))  # a stack: a chunk may be split where a stray top-level line starts
    while work:
        start, end, line = work.pop()
        last = not work
        padded = "\n" * (line - 1) + text[start:end]
        try:
            found_decls = _parse_decls(padded, path)
        except (UnexpectedInput, BuildError) as exc:
            errors += 1
            if errors > _MAX_ERRORS:
                diags.append(error("E0005", f"more than {_MAX_ERRORS} syntax errors; stopped here", Span(path, line, 1, line, 2)))
                break
            if isinstance(exc, BuildError):
                d = exc.diagnostic
            else:
                d = describe_unexpected(exc, padded, path, terminal_patterns(), last_chunk=last, parse_fn=_parse_example)
            between = isinstance(exc, UnexpectedToken) and bool(_TOP_TERMINALS & set(exc.expected)) and exc.token.type != "$END"
            if between:  # a stray word where a declaration should start (`prority p 5`): skip it, keep the rest
                diags.append(d)
                cut = _line_offset(padded, d.span.line) - (line - 1)
                after = cut + _stray_length(text[start + cut : end])
                if text[start + after : end].strip():
                    work.append((start + after, end, text.count("\n", 0, start + after) + 1))
                if cut > 0:  # the declarations before it parsed: parse them again on their own
                    work.append((start, start + cut, line))
                continue
            if d.code == "E0003" and not last:  # point at the block left open, not at its neighbour
                head = text[start:end].split("\n", 1)[0].rstrip()
                next_line = work[-1][2]
                d = error("E0003", "this block is not closed: `}` is missing", Span(path, line, 1, line, len(head) + 1), f"the next declaration starts at line {next_line}")
            if d.code == "E0003":  # read as if closed, so the checker still sees its statements
                closed = _closed(padded, path)
                decls.extend(closed)
                partials.extend(b.span for b in closed)
            diags.append(d)
            named = _head(text[start:end])
            if named is not None:
                unparsed.append(named)
            if d.code in _STATEMENT_ERRORS:
                more, partial = _more_errors(padded, d.span.line, line, path, _MAX_ERRORS - errors)
                errors += len(more)
                diags.extend(more)
                decls.extend(partial)  # checked too: its other statements' errors show in this run
                partials.extend(b.span for b in partial)
            continue
        decls.extend(found_decls)
    if not decls and not unparsed:
        return None, diags
    return ast.File(path, tuple(decls), scan_comments(text, path), text, tuple(unparsed), tuple(partials)), diags


__all__ = ["parse", "unescape", "UnexpectedCharacters", "UnexpectedEOF", "UnexpectedToken"]
