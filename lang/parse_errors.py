"""Syntax errors in words: what was expected ("a quantity like `80Gi`"), never lark terminal names."""

from __future__ import annotations

import difflib
import re

from lang.diagnostics import Diagnostic, error
from lang.span import Span

_TOP = {"GPU", "TOPOLOGY", "PRIORITY", "QUOTA", "FRACTION", "GANG", "AGENTS", "RULE"}
_TOP_WORDS = {t: t.lower() for t in _TOP}
# A number glued to letters that are not a unit: `80GB`, `24gi`, `2TB`, `1.5GiB`.
_BAD_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([A-Za-z][A-Za-z0-9_]*)")
_MEANT_UNIT = {u.lower(): u for u in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")}
_MEANT_UNIT.update({u[0].lower(): u for u in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")})
_EXPR_START = {"NAME", "STRING", "NUMBER", "NOT", "HAS", "TRUE", "FALSE", "NONE", "LPAR", "MINUS"}
_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number or a quantity like `8`, `0.25` or `80Gi`",
    "STRING": 'a string in double quotes like "team-a"',
    "_NL": "a line break",
    "SEMICOLON": "a line break",
    "CMP": "a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`)",
    "$END": "the end of the file",
    "PLUS": "`+`",
    "MINUS": "`-`",
    "STAR": "`*`",
    "OR": "`or`",
    "AND": "`and`",
}
_BLOCK_OF_LINE = re.compile(r"^(gpu|topology|priority|quota|fraction|gang|agents|rule)\b", re.M)
_STATEMENTS = {
    "gpu": "`product`, `memory`",
    "topology": 'a level like `rack "topology.acme.io/rack"`',
    "quota": "`for`, `cohort`, `gpus`, `gpu_memory`, `borrow`, `lend`, `mode`",
    "fraction": "`for`, `min`, `max`, `memory at least`, `per_gpu at most`, `mode`",
    "gang": "`for`, `require min_members`, `require topology`, `on unplaceable`, `mode`",
    "agents": "`identity`, `allow`, `deny`, `mode`",
    "rule": "`for`, `when`, `deny`, `set`, `mode`",
}


# Common mistakes recognised by the parser state they fail in (lark's match_examples):
# label -> (example texts, message, help).
MISTAKES: dict[str, tuple[list[str], str, str]] = {
    "per-model": (["quota q {\n gpus 16 h100\n}"], "expected `of` between the amount and the GPU model", "write `gpus 16 of h100`"),
    "memory-floor": (
        ["fraction f {\n memory >= 10Gi\n}", "fraction f {\n memory 10Gi\n}"],
        "a fraction's memory floor is written `memory at least Q`",
        "e.g. `memory at least 10Gi`",
    ),
    "per-gpu": (["fraction f {\n per_gpu 4\n}", "fraction f {\n per_gpu <= 4\n}"], "the sharer limit is written `per_gpu at most N`", "e.g. `per_gpu at most 4`"),
    "topology-name": (["gang g {\n require topology rack\n}"], "a topology requirement names the topology and its level", "e.g. `require topology fabric.rack`"),
    "allow-verb": (["agents {\n allow pods when x\n}", "agents a {\n allow pods when x\n}", "agents {\n allow pods\n}"], "an `allow` names the verbs first, then the resources", "e.g. `allow create, delete pods`"),
}


def recognise(exc, parse_fn) -> tuple[str, str] | None:
    """(message, help) when the error matches a known mistake, else None."""
    try:
        label = exc.match_examples(parse_fn, {k: v[0] for k, v in MISTAKES.items()}, use_accepts=True)
    except Exception:  # a broken example must never turn a diagnostic into a crash
        return None
    return (MISTAKES[label][1], MISTAKES[label][2]) if label else None



def _word(name: str, kw: dict[str, str]) -> str:
    if name in _WORDS:
        return _WORDS[name]
    if name in kw:
        return f"`{kw[name]}`"
    return name.lower()


def _expected_words(expected: set[str], block: str | None, kw: dict[str, str]) -> str:
    names = set(expected) - {"SEMICOLON"}
    if names & _TOP and len(names & _TOP) >= 4:
        return "a declaration (`gpu`, `topology`, `priority`, `quota`, `fraction`, `gang`, `agents` or `rule`)"
    if "RBRACE" in names and len(names) >= 4 and block in _STATEMENTS:
        article = "an" if block[0] in "aeiou" else "a"
        return f"a statement of {article} {block} block ({_STATEMENTS[block]}) or `}}`"
    if len(names & _EXPR_START) >= 5:
        return "an expression (a field like `gpus`, a string, a number, `not`, `has(…)` or `(`)"
    if names == {"NUMBER"} or names == {"NUMBER", "MINUS"}:
        return "a number or a quantity like `80Gi`, `500m` or `0.25`"
    words = sorted({_word(n, kw) for n in names})
    if len(words) > 6:
        words = words[:6] + ["…"]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _found(tok) -> str:
    if tok.type == "$END":
        return "the end of the file"
    if tok.type == "_NL":
        return "the end of the line"
    if tok.type == "STRING":
        return f"the string {tok.value}"
    return f"`{tok.value}`"


def _block_at(text: str, line: int) -> str | None:
    """The kind of the last declaration starting at or before `line` (names the block in messages)."""
    kind = None
    for m in _BLOCK_OF_LINE.finditer(text):
        if text.count("\n", 0, m.start()) + 1 > line:
            break
        kind = m.group(1)
    return kind


def _help_for_token(tok, expected: set[str], block: str | None, kw: dict[str, str]) -> str | None:
    if tok.type == "EQUAL" and "CMP" in expected:
        return "compare with `==`"
    if tok.type == "NAME" and expected & _TOP:  # a misspelt declaration keyword: `qouta`
        close = difflib.get_close_matches(tok.value, [_TOP_WORDS[t] for t in expected & _TOP], n=1, cutoff=0.6)
        if close:
            return f"did you mean `{close[0]}`?"
    if tok.type == "NAME" and "RBRACE" in expected:
        options = [v for k, v in kw.items() if k in expected and v.isidentifier()]
        close = difflib.get_close_matches(tok.value, options, n=1)
        if close:
            return f"did you mean `{close[0]}`?"
    if tok.type == "_NL" and ("OR" in expected or "AND" in expected or "CMP" in expected):
        return "to continue a condition on the next line, end this line with `and` or `or`"
    return None


def _help_for_char(ch: str) -> str | None:
    if ch in "&|":
        return "write `and` / `or`"
    if ch == "!":
        return "write `not x`, or `!=` to compare"
    if ch == "'":
        return "strings use double quotes"
    if ch.isdigit() or ch == ".":
        return "quantities are a number with an optional unit: Ki Mi Gi Ti Pi Ei, or n u m k M G T P E"
    if ch == '"':
        return "a string must end on the line it starts"
    return None


def meant_unit(suffix: str) -> str | None:
    """The binary unit a mistyped one most likely meant: GB, gb, gi, GiB -> Gi; None when unclear."""
    s = suffix.lower()
    if len(s) > 1 and s.endswith("b"):  # GB, GiB: bytes are implied
        s = s[:-1]
    return _MEANT_UNIT.get(s)


def _unit_hint(text: str, pos: int, path: str, line: int, col: int) -> Diagnostic | None:
    """E0007 for a quantity with a unit Kubernetes does not know, naming the one most likely meant."""
    m = _BAD_QUANTITY.match(text, pos) if 0 <= pos < len(text) else None
    if m is None or (pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] in "_-.")):
        return None
    number, suffix = m.groups()
    where = Span(path, line, col, line, col + len(m.group(0)))
    units = "memory sizes use binary units Ki Mi Gi Ti Pi Ei (or decimal k M G T P E); GPU amounts are plain numbers or `m`"
    meant = meant_unit(suffix)
    if meant is None:
        return error("E0007", f"`{m.group(0)}` is not a quantity: `{suffix}` is not a unit", where, units)
    return error("E0007", f"`{m.group(0)}` is not a quantity; did you mean `{number}{meant}`?", where, units)


# Words that start a statement, per block: a line starting with one begins a new statement.
_STATEMENT_WORDS = {
    "gpu": {"product", "memory"},
    "quota": {"for", "mode", "cohort", "gpus", "gpu_memory", "borrow", "lend", "models"},
    "fraction": {"for", "mode", "min", "max", "memory", "per_gpu", "models"},
    "gang": {"for", "mode", "require", "on", "models"},
    "agents": {"mode", "identity", "allow", "deny"},
    "rule": {"for", "mode", "when", "deny", "set"},
}
# A line ending in a binary operator: the statement continues on the next line.
_DANGLING = re.compile(r"(?:(?<![\w-])(and|or|not|in|matches)|(==|!=|<=|>=|<|>|\+|-|\*))[ \t]*$")
_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|#')


def _code_of(row: str) -> str:
    """The line without its comment (a `#` inside a string is not one)."""
    for m in _STRING_OR_COMMENT.finditer(row):
        if m.group() == "#":
            return row[: m.start()]
    return row


def dangling_operator(text: str, tok, block: str | None, path: str) -> Diagnostic | None:
    """E0001 at a trailing operator (`and` at the end of line 8) when the statement it continues into starts a new one.

    The parser only notices on the next line, where the statement keyword is read as an operand; the
    mistake is the operator left at the end of the line before.
    """
    line, col = tok.line or 1, tok.column or 1
    if not (tok.type in ("_NL", "RBRACE") or tok.value[:1].isalnum() or tok.value[:1] in '"_'):
        return None  # an operator after the word: the expression does go on (`gpus => 2`), the mistake is there
    rows = text.split("\n")
    if not 1 < line <= len(rows):
        return None
    row = rows[line - 1]
    first = row.split(None, 1)
    if not first:
        return None
    if tok.type == "RBRACE" and col == row.index(first[0]) + 1:
        first = ["}"]  # the block closes right after the operator
    elif first[0] not in _STATEMENT_WORDS.get(block or "", ()):
        return None
    else:
        after = row.index(first[0]) + len(first[0])
        if row[after : col - 1].strip():  # the parser failed further on: the line itself is the mistake
            return None
    prev = line - 1
    while prev > 0 and not _code_of(rows[prev - 1]).strip():
        prev -= 1  # blank or comment-only lines between them
    if prev == 0:
        return None
    code = _code_of(rows[prev - 1])
    m = _DANGLING.search(code)
    if m is None or (m.group(2) == "*" and code.split()[:1] == ["allow"]):  # `allow create *`: any resource
        return None
    op = m.group(1) or m.group(2)
    start = m.start(1) if m.group(1) else m.start(2)
    where = Span(path, prev, start + 1, prev, start + 1 + len(op))
    return error(
        "E0001",
        f"`{op}` at the end of line {prev} has nothing after it: line {line} "
        + ("closes the block" if first[0] == "}" else f"starts a new statement (`{first[0]}`)"),
        where,
        f"finish the condition after `{op}`, or remove the `{op}`",
    )


def describe_unexpected(exc, text: str, path: str, keywords: dict[str, str], last_chunk: bool = True, parse_fn=None) -> Diagnostic:
    """One diagnostic for a lark UnexpectedInput raised while parsing `text`; `keywords`: terminal name -> its text.

    The parser hands in what it knows of lark (the exception, the terminals), so this module imports no parser:
    lark's exceptions are told apart by their class names.
    """
    kw = keywords
    kind = type(exc).__name__
    if kind == "UnexpectedCharacters":
        line, col = exc.line, exc.column
        ch = text[exc.pos_in_stream] if 0 <= exc.pos_in_stream < len(text) else "?"
        unit = _unit_hint(text, exc.pos_in_stream, path, line, col)
        if unit is not None:
            return unit
        block = _block_at(text, line)
        where = Span(path, line, col, line, col + 1)
        shown = repr(ch)[1:-1] if not ch.isprintable() else ch
        msg = f"unexpected character `{shown}`"
        if exc.allowed:
            msg += f"; expected {_expected_words(set(exc.allowed), block, kw)}"
        return error("E0002", msg, where, _help_for_char(ch))
    if kind == "UnexpectedToken":
        tok = exc.token
        expected = set(exc.expected)
        block = _block_at(text, getattr(tok, "line", 1) or 1)
        if tok.type == "$END":
            line = getattr(tok, "end_line", None) or getattr(tok, "line", 1) or 1
            col = getattr(tok, "end_column", None) or getattr(tok, "column", 1) or 1
            where = Span(path, line, col, line, col + 1)
            if not last_chunk and "RBRACE" in expected:
                return error("E0003", "this block is not closed: expected `}` before the next declaration", where)
            return error("E0003", f"unexpected end of file; expected {_expected_words(expected, block, kw)}", where)
        line, col = tok.line or 1, tok.column or 1
        end_line, end_col = (tok.end_line or line), (tok.end_column or col + 1)
        if tok.type == "_NL":
            end_line, end_col = line, col + 1
        where = Span(path, line, col, end_line, end_col)
        dangling = dangling_operator(text, tok, block, path)
        if dangling is not None:
            return dangling
        known = recognise(exc, parse_fn) if parse_fn else None
        if known:
            return error("E0001", known[0], where, known[1])
        if tok.type == "EQUAL" and "CMP" in expected:
            return error("E0001", "expected `==` to compare, found `=`", where, "`=` only appears in `set labels[\"k\"] = …`")
        if tok.type == "NAME" and "RBRACE" in expected and block in _STATEMENTS and len(expected) >= 4:
            article = "an" if block[0] in "aeiou" else "a"
            msg = f"unknown statement `{tok.value}` in {article} {block} block; expected {_STATEMENTS[block]} or `}}`"
        else:
            msg = f"expected {_expected_words(expected, block, kw)}, found {_found(tok)}"
        return error("E0001", msg, where, _help_for_token(tok, expected, block, kw))
    line = getattr(exc, "line", 1) or 1
    col = getattr(exc, "column", 1) or 1
    return error("E0001", "syntax error", Span(path, line, col, line, col + 1))
