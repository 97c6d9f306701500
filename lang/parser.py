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
from lark import Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from lang import ast
from lang.diagnostics import Diagnostic, error
from lang.parse_errors import describe_unexpected
from lang.span import Span

_GRAMMAR = pathlib.Path(__file__).with_name("grammar.lark")
_BLOCK_START = re.compile(r"^(gpu|topology|priority|quota|fraction|gang|agents|rule)\b", re.M)
_MAX_ERRORS = 25
_lock = threading.Lock()  # the comment callback collects into one list per parse
_comments: list[Token] = []
_parser: lark.Lark | None = None


def _lark() -> lark.Lark:
    global _parser
    if _parser is None:
        _parser = lark.Lark(
            _GRAMMAR.read_text(encoding="utf-8"),
            parser="lalr",
            lexer="contextual",
            propagate_positions=True,
            lexer_callbacks={"COMMENT": _comments.append},
        )
    return _parser


def terminal_patterns() -> dict[str, str]:
    """Terminal name -> literal text for keyword/punctuation terminals (for error messages)."""
    out = {}
    for t in _lark().terminals:
        if t.pattern.type == "str":
            out[t.name] = t.pattern.value
    return out


class _Builder:
    """Lark tree -> frozen AST nodes with spans."""

    def __init__(self, path: str):
        self.path = path

    def span(self, node) -> Span:
        if isinstance(node, Token):
            return Span(self.path, node.line, node.column, node.end_line, node.end_column)
        m = node.meta
        if getattr(m, "empty", True):
            return Span(self.path, 0, 0, 0, 0)
        return Span(self.path, m.line, m.column, m.end_line, m.end_column)

    def join(self, a: Span, b: Span) -> Span:
        return Span(self.path, a.line, a.col, b.end_line, b.end_col)

    def ident(self, tok: Token) -> ast.Ident:
        return ast.Ident(str(tok), self.span(tok))

    def string(self, tok: Token) -> ast.Str:
        return ast.Str(unescape(str(tok)), str(tok), self.span(tok))

    # ---- declarations ------------------------------------------------------

    def decl(self, tree: Tree) -> ast.Decl:
        kind = tree.data.removesuffix("_block")
        if tree.data == "priority_decl":
            return self.priority(tree)
        toks = [c for c in tree.children if isinstance(c, Token) and c.type == "NAME"]
        name = self.ident(toks[0]) if toks and tree.children[0] is toks[0] else None
        stmts = tuple(self.stmt(c) for c in tree.children if isinstance(c, Tree))
        return ast.Block(kind, name, stmts, self.span(tree))

    def priority(self, tree: Tree) -> ast.PriorityDecl:
        kids = tree.children
        types = [k.type for k in kids]
        return ast.PriorityDecl(
            name=self.ident(kids[0]),
            value=ast.Num(str(kids[types.index("NUMBER")]), self.span(kids[types.index("NUMBER")])),
            negative="MINUS" in types,
            preempts="PREEMPTS" in types,
            default="DEFAULT" in types,
            span=self.span(tree),
        )

    # ---- statements --------------------------------------------------------

    def stmt(self, tree: Tree) -> ast.Stmt:
        kind, kids, sp = tree.data, tree.children, self.span(tree)
        if kind == "level_stmt":
            return ast.Level(self.ident(kids[0]), self.string(kids[1]), sp)
        if kind in ("for_stmt", "when_stmt", "identity_stmt"):
            return ast.Cond(kind.removesuffix("_stmt"), self.expr(kids[0]), sp)
        if kind == "require_topology_stmt":
            when = self.expr(kids[2]) if len(kids) > 2 else None
            return ast.RequireTopology(self.ident(kids[0]), self.ident(kids[1]), when, sp)
        if kind == "allow_stmt":
            verbs = tuple(self.name_of(v) for v in kids[0].children)
            resources = tuple(self.name_of(r) for r in kids[1].children)
            when = self.expr(kids[2]) if len(kids) > 2 else None
            return ast.Allow(verbs, resources, when, sp)
        if kind == "deny_stmt":
            when = next((self.expr(k) for k in kids if not (isinstance(k, Token) and k.type == "STRING")), None)
            msg = next((self.string(k) for k in kids if isinstance(k, Token) and k.type == "STRING"), None)
            return ast.DenyStmt(when, msg, sp)
        if kind == "set_stmt":
            return ast.SetStmt(self.ident(kids[0]), self.string(kids[1]), self.expr(kids[2]), sp)
        if kind == "require_members_stmt":
            return ast.Setting("require min_members", None, sp)
        key = _SETTING_KEYS[kind]
        value = self.literal(kids[0]) if kids else None
        of = self.ident(kids[1]) if len(kids) > 1 else None
        return ast.Setting(key, value, sp, of)

    def name_of(self, tree: Tree) -> ast.Ident:
        toks = tree.children
        text = "/".join(str(t) for t in toks)
        return ast.Ident(text, self.join(self.span(toks[0]), self.span(toks[-1])))

    def literal(self, tok: Token):
        if tok.type == "STRING":
            return self.string(tok)
        if tok.type == "NUMBER":
            return ast.Num(str(tok), self.span(tok))
        return self.ident(tok)

    # ---- expressions -------------------------------------------------------

    def expr(self, node) -> ast.Expr:
        if isinstance(node, Token):  # inlined single-token atoms never reach here; defensive
            return ast.Path((str(node),), self.span(node))
        kind, kids, sp = node.data, node.children, self.span(node)
        if kind == "path":
            return ast.Path(tuple(str(k) for k in kids), sp)
        if kind == "string":
            return self.string(kids[0])
        if kind == "number":
            return ast.Num(str(kids[0]), sp)
        if kind in ("true", "false", "none"):
            return ast.Const({"true": True, "false": False, "none": None}[kind], sp)
        if kind == "index":
            return ast.IndexExpr(self.expr(kids[0]), self.string(kids[1]), sp)
        if kind == "has":
            return ast.HasExpr(self.expr(kids[1]), sp)
        if kind == "not_op":
            return ast.NotExpr(self.expr(kids[1]), sp)
        if kind == "neg":
            return ast.NegExpr(self.expr(kids[1]), sp)
        if kind in ("or_expr", "and_expr"):
            return ast.BoolOp(kind[:-5].rstrip("_"), tuple(self.expr(k) for k in kids), sp)
        if kind == "compare":
            return ast.CompareExpr(str(kids[1]), self.expr(kids[0]), self.expr(kids[2]), sp)
        if kind == "arith":
            return ast.ArithExpr(str(kids[1]), self.expr(kids[0]), self.expr(kids[2]), sp)
        if kind == "matches":
            return ast.MatchesExpr(self.expr(kids[0]), self.string(kids[1]), sp)
        if kind == "contains":
            return ast.InExpr(self.expr(kids[0]), self.expr(kids[1]), sp)
        if kind == "paren":
            return ast.Paren(self.expr(kids[0]), sp)
        raise AssertionError(f"unhandled tree {kind}")  # grammar and builder out of step: a bug


_SETTING_KEYS = {
    "product_stmt": "product",
    "memory_stmt": "memory",
    "cohort_stmt": "cohort",
    "gpus_stmt": "gpus",
    "gpu_memory_stmt": "gpu_memory",
    "borrow_stmt": "borrow",
    "lend_stmt": "lend",
    "min_stmt": "min",
    "max_stmt": "max",
    "memory_floor_stmt": "memory at least",
    "per_gpu_stmt": "per_gpu at most",
    "unplaceable_stmt": "on unplaceable",
    "mode_stmt": "mode",
}

_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def unescape(raw: str) -> str:
    """The value of a string literal: `\\n`, `\\t`, `\\"`, `\\\\` are escapes; other backslashes stay."""
    body = raw[1:-1]
    if "\\" not in body:
        return body
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in _ESCAPES:
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _parse_tree(text: str) -> tuple[Tree, list[Token]]:
    p = _lark()
    with _lock:
        _comments.clear()
        try:
            tree = p.parse(text)
        finally:
            comments = list(_comments)
            _comments.clear()
    return tree, comments


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
    b = _Builder(path)
    try:
        tree, comments = _parse_tree(text)
        decls = tuple(b.decl(c) for c in tree.children)
        return _file(path, text, decls, comments, b), diags
    except UnexpectedInput:
        pass
    decls: list[ast.Decl] = []
    comments: list[Token] = []
    errors = 0
    chunks = _chunks(text)
    for n, (start, end, line) in enumerate(chunks):
        padded = "\n" * (line - 1) + text[start:end]
        try:
            tree, found = _parse_tree(padded)
        except UnexpectedInput as exc:
            errors += 1
            if errors > _MAX_ERRORS:
                diags.append(error("E0005", f"more than {_MAX_ERRORS} syntax errors; stopped here", Span(path, line, 1, line, 2)))
                break
            diags.append(describe_unexpected(exc, padded, path, last_chunk=n == len(chunks) - 1))
            continue
        comments.extend(found)
        decls.extend(b.decl(c) for c in tree.children)
    if not decls:
        return None, diags
    return _file(path, text, tuple(decls), comments, b), diags


def _file(path: str, text: str, decls, comments: list[Token], b: _Builder) -> ast.File:
    kept = tuple(ast.Comment(str(c), b.span(c)) for c in comments)
    return ast.File(path, decls, kept, text)


__all__ = ["parse", "unescape", "UnexpectedCharacters", "UnexpectedEOF", "UnexpectedToken"]
