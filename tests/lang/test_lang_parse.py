"""Parsing: spans, comments, continuation lines, and syntax errors in words."""

import re
from dataclasses import dataclass

import pytest

import lang
from lang import ast


def parse_ok(src: str) -> ast.File:
    f, diags = lang.parse(src, "t.policy")
    assert diags == []
    return f


def test_spans_start_at_the_keyword_and_end_at_the_brace():
    f = parse_ok("# c\nquota team-a {\n  gpus 8   # eight\n}\n")
    q = f.decls[0]
    assert (q.span.line, q.span.col, q.span.end_line, q.span.end_col) == (2, 1, 4, 2)
    assert (q.name.name, q.name.span.col) == ("team-a", 7)
    s = q.stmts[0]
    assert (s.key, s.value.text, s.span.col, s.span.end_col) == ("gpus", "8", 3, 9)
    assert [(c.text, c.span.line) for c in f.comments] == [("# c", 1), ("# eight", 3)]


def test_statements_may_share_a_line_and_continue_after_and_or():
    f = parse_ok('gpu l4 { product "NVIDIA-L4" memory 24Gi }\nrule r {\n  for gpus > 0 and\n      namespace == "a" or\n  pods > 1\n  deny "x"\n}\n')
    assert [s.key for s in f.decls[0].stmts] == ["product", "memory"]
    cond = f.decls[1].stmts[0].expr
    assert isinstance(cond, ast.BoolOp) and cond.op == "or" and cond.span.end_line == 5


def test_names_may_contain_dashes_but_subtraction_needs_spaces():
    f = parse_ok('rule a-b-c {\n  when total_gpus - gpus > 0\n  deny "x"\n}\n')
    assert f.decls[0].name.name == "a-b-c"
    assert isinstance(f.decls[0].stmts[0].expr.left, ast.ArithExpr)


def test_string_escapes():
    f = parse_ok('rule r {\n  deny "say \\"hi\\"\\n"\n}\n')
    assert f.decls[0].stmts[0].message.value == 'say "hi"\n'


@dataclass
class Bad:
    name: str
    src: str
    want_code: str
    want_line: int
    want_words: str


BAD = [
    Bad("missing quantity", "gpu g { memory }", "E0001", 1, "a number or a quantity like `80Gi`"),
    Bad("bad unit", "gpu g { memory 80Gib }", "E0007", 1, "did you mean `80Gi`?"),
    Bad("unknown unit", "gpu g { memory 80Qx }", "E0007", 1, "`Qx` is not a unit"),
    Bad("single equals", 'rule r {\n  for namespace = "a"\n}', "E0001", 2, "expected `==`"),
    Bad("unknown statement", "quota q {\n  gpu_mem 2Ti\n}", "E0001", 2, "unknown statement `gpu_mem`"),
    Bad("ampersands", "rule r {\n  when a && b\n}", "E0002", 2, "unexpected character `&`"),
    Bad("unclosed block", "quota q {\n  gpus 1\n", "E0003", 3, "expected"),
    Bad("junk at top", "hello", "E0001", 1, "a declaration"),
    Bad("unterminated string", 'rule r {\n  deny "oops\n}', "E0002", 2, "unexpected character"),
    Bad("non-ASCII digit", "priority p \u0663", "E0002", 1, "unexpected character"),
    Bad("missing expression", "rule r {\n  when\n}", "E0001", 2, "an expression"),
]


@pytest.mark.parametrize("case", BAD, ids=[b.name for b in BAD])
def test_syntax_errors_are_worded(case):
    f, diags = lang.parse(case.src, "t.policy")
    assert [d.code for d in diags] == [case.want_code]
    d = diags[0]
    assert d.span.line == case.want_line
    assert case.want_words in d.message
    # never lark's vocabulary
    assert not re.search(r"\b(NAME|NUMBER|STRING|_NL|\$END|RBRACE|LBRACE|Token)\b", d.message + (d.help or ""))


def test_one_bad_block_does_not_hide_the_others():
    src = "quota a {\n  gpus x\n}\nquota b {\n  gpus 2\n}\nquota c {\n  lend\n}\n"
    f, diags = lang.parse(src, "t.policy")
    assert [d.span.line for d in diags] == [2, 8]
    # a and c are kept without their bad statement (and marked partial), so the checker reads the rest of them
    assert [d.name.name for d in f.decls] == ["a", "b", "c"]
    assert [sp.line for sp in f.partial] == [1, 7]


def test_check_errors_of_a_block_with_a_syntax_error_are_reported_in_the_same_run():
    src = 'rule r {\n  for namspace == "a"\n  when gpus >> 0\n  deny "x"\n}\nrule t {\n  for namespace == "a"\n  deny "x" x\n}\n'
    _, diags = lang.compile_policies([("t.policy", src)])
    # E0101 inside the broken block r shows beside its syntax error; t's lost `deny` is not called missing (E0111)
    assert [(d.code, d.span.line) for d in diags] == [("E0101", 2), ("E0001", 3), ("E0001", 8)]


@pytest.mark.parametrize("src,want", [
    ('quota a {\n  for namspace == "x"\n  gpus 8\n\nquota b {\n  for namespace == "b"\n  gpus 4\n}\n', [("E0003", 1), ("E0101", 2)]),
    ('rule r {\n  for namspace == "x"\n  deny "x"\n', [("E0101", 2), ("E0003", 4)]),  # open at the end of the file
])
def test_a_block_left_open_is_still_checked(src, want):
    _, diags = lang.compile_policies([("t.policy", src)])
    assert [(d.code, d.span.line) for d in diags] == want


@pytest.mark.parametrize("src,line,col,op", [
    ('rule r {\n  for namespace == "a"\n  when gpus > 0 and\n  deny "x"\n}\n', 3, 17, "and"),
    ('rule r {\n  when gpus > 0 or  # more later\n\n    deny "x"\n}\n', 2, 17, "or"),
    ('quota q {\n  for namespace == "a" and\n  gpus 8\n}\n', 2, 24, "and"),
    ('agents a {\n  identity user == "x" or\n  allow create pods\n}\n', 2, 24, "or"),
    ('rule r {\n  deny "x"\n  when gpus > 0 and\n}\n', 3, 17, "and"),  # the block closes after it
])
def test_a_trailing_operator_is_reported_at_itself_not_on_the_next_line(src, line, col, op):
    _, diags = lang.parse(src, "t.policy")
    assert [(d.code, d.span.line, d.span.col) for d in diags] == [("E0001", line, col)]
    assert diags[0].message.startswith(f"`{op}` at the end of line {line}")
    assert op in diags[0].help


@pytest.mark.parametrize("src,line,message", [
    ('quota q {\n  gpus 8  # and\n  borrow x\n}\n', 3, "expected a number"),  # `and` in a comment continues nothing
    ('agents {\n  allow create *\n  allow pods\n}\n', 3, "expected `*`, `,` or a name"),  # `*` is a resource there
])
def test_an_operator_that_continues_nothing_is_not_blamed(src, line, message):
    _, diags = lang.parse(src, "t.policy")
    assert [(d.span.line, d.message[: len(message)]) for d in diags] == [(line, message)]


def test_an_operator_on_the_continued_line_is_still_reported_there():
    _, diags = lang.parse('rule r {\n  when gpus > 0 and\n       gpus => 2\n  deny "x"\n}\n', "t.policy")
    assert [(d.span.line, d.message) for d in diags] == [(3, "expected `==` to compare, found `=`")]


def test_not_utf8_is_a_located_error():
    f, diags = lang.parse("quota a {\n  gpus 1 \ufffd\n}\n", "t.policy")
    assert [(d.code, d.span.line, d.span.col) for d in diags] == [("E0004", 2, 10)]


@pytest.mark.parametrize("prefix,suffix", [("(" * 500, ")" * 500), ("not " * 500, ""), ("-" * 500, "")])
def test_absurd_nesting_is_a_diagnostic_not_a_stack_overflow(prefix, suffix):
    src = f'rule r {{\n  when {prefix}gpus > 0{suffix}\n  deny "x"\n}}\nquota q {{\n  gpus x\n}}\n'
    _, diags = lang.compile_policies([("t.policy", src)])
    assert [(d.code, d.span.line) for d in diags] == [("E0006", 2), ("E0001", 6)]


@pytest.mark.parametrize("src,want_help", [
    ("quota q {\n  gpus 8 h100\n}", "write `gpus 16 of h100`"),
    ("fraction f {\n  memory >= 10Gi\n}", "e.g. `memory at least 10Gi`"),
    ("fraction f {\n  per_gpu 4\n}", "e.g. `per_gpu at most 4`"),
    ("gang g {\n  require topology rack\n}", "e.g. `require topology fabric.rack`"),
    ("agents a {\n  allow pods when x\n}", "e.g. `allow create, delete pods`"),
])
def test_common_mistakes_are_recognised(src, want_help):
    _, diags = lang.parse(src, "t.policy")
    assert [(d.code, d.help) for d in diags] == [("E0001", want_help)]


def shape(e) -> str:
    """An expression as fully parenthesised text, to pin precedence."""
    if isinstance(e, ast.Path):
        return e.dotted
    if isinstance(e, (ast.Str, ast.Num)):
        return getattr(e, "raw", None) or e.text
    if isinstance(e, ast.BoolOp):
        return "(" + f" {e.op} ".join(shape(i) for i in e.items) + ")"
    if isinstance(e, (ast.CompareExpr, ast.ArithExpr)):
        return f"({shape(e.left)} {e.op} {shape(e.right)})"
    if isinstance(e, ast.NotExpr):
        return f"(not {shape(e.item)})"
    if isinstance(e, ast.NegExpr):
        return f"(-{shape(e.item)})"
    if isinstance(e, ast.InExpr):
        return f"({shape(e.item)} in {shape(e.container)})"
    if isinstance(e, ast.MatchesExpr):
        return f"({shape(e.target)} matches {e.pattern.raw})"
    if isinstance(e, ast.Paren):
        return f"[{shape(e.item)}]"
    return type(e).__name__


@pytest.mark.parametrize("src,want", [
    ("a or b and c", "(a or (b and c))"),
    ("a and b and c or d", "((a and b and c) or d)"),
    ("not a == b and c", "((not (a == b)) and c)"),
    ("not not a", "(not (not a))"),
    ("-a * b + c", "(((-a) * b) + c)"),
    ("a - b - c > 0", "(((a - b) - c) > 0)"),
    ("a + b * c <= d", "((a + (b * c)) <= d)"),
    ('"k" in labels or n matches "x*"', '(("k" in labels) or (n matches "x*"))'),
    ("(a and b) and c", "([(a and b)] and c)"),
    ("a - -1 > 0", "((a - (-1)) > 0)"),
])
def test_operator_precedence(src, want):
    f = parse_ok(f'rule r {{\n  when {src}\n  deny "x"\n}}\n')
    assert shape(f.decls[0].stmts[0].expr) == want


@pytest.mark.parametrize("src,want_words", [
    ("a == b == c", "cannot be chained"),
    ("a matches b", "quoted glob pattern"),
    ("a == not b", "`not` must come before"),
])
def test_operator_misuse_is_a_syntax_error(src, want_words):
    _, diags = lang.parse(f'rule r {{\n  when {src}\n  deny "x"\n}}\n', "t.policy")
    assert [d.code for d in diags] == ["E0001"] and want_words in diags[0].message and diags[0].span.line == 2


def test_error_count_is_capped_per_file():
    src = "quota q {\n  gpus x\n}\n" * 40
    _, diags = lang.parse(src, "t.policy")
    assert [d.code for d in diags] == ["E0001"] * 25 + ["E0005"]


def test_unclosed_block_points_at_its_opening_line():
    src = 'quota a {\n  gpus 8\n\nrule r {\n  when gpus > 0\n  deny "x"\n}\n'
    f, diags = lang.parse(src, "t.policy")
    assert [(d.code, d.span.line, d.help) for d in diags] == [("E0003", 1, "the next declaration starts at line 4")]
    assert [d.name.name for d in f.decls] == ["a", "r"]  # `a` read as if closed (and partial), so it is checked too
    assert [sp.line for sp in f.partial] == [1]


@pytest.mark.parametrize("op", ["and", "or"])
def test_a_long_chain_is_one_flat_node_with_every_term(op):
    # Structure, not timing (`allot bench check --chain N` measures): the chain is built once, flat.
    n = 20_000
    cond = f" {op} ".join(f'namespace == "ns-{i}"' for i in range(n))
    f = parse_ok(f"rule r {{\n  for {cond} {'or' if op == 'and' else 'and'} gpus > 0\n  deny \"x\"\n}}\n")
    top = f.decls[0].stmts[0].expr
    chain = top
    if op == "and":  # `a and … and z or gpus > 0`: an or of (one and of n terms) and the comparison
        assert top.op == "or" and len(top.items) == 2 and top.items[0].op == "and"
        chain = top.items[0]
    else:  # `a or … or z and gpus > 0`: an or of n terms, the last one an and
        assert top.op == "or" and isinstance(top.items[-1], ast.BoolOp) and top.items[-1].op == "and"
    assert len(chain.items) == n
    assert [i.right.value for i in chain.items[:2]] == ["ns-0", "ns-1"]
    assert (chain.span.line, chain.span.col) == (2, 7)



@pytest.mark.parametrize("written,want_meant", [
    ("80GB", "80Gi"), ("24gi", "24Gi"), ("2TB", "2Ti"), ("1.5GiB", "1.5Gi"), ("512mb", "512Mi"), ("4K", "4Ki"), ("3PiB", "3Pi"),
])
def test_a_mistyped_unit_names_the_unit_meant(written, want_meant):
    src = f"quota q {{\n  gpu_memory {written}\n}}\n"
    _, diags = lang.parse(src, "t.policy")
    assert [(d.code, d.span.line, d.span.col, d.span.end_col) for d in diags] == [("E0007", 2, 14, 14 + len(written))]
    assert diags[0].message == f"`{written}` is not a quantity; did you mean `{want_meant}`?"


@pytest.mark.parametrize("src,want_help", [
    ("qouta q {\n  gpus 8\n}\n", "did you mean `quota`?"),
    ("prority p 5\n", "did you mean `priority`?"),
    ("gpu h100 { product \"x\" memory 1Gi }\nfracton f {\n  min 0.1\n}\n", "did you mean `fraction`?"),
    ("hello\n", None),
])
def test_a_misspelt_declaration_keyword_says_which_was_meant(src, want_help):
    _, diags = lang.parse(src, "t.policy")
    assert [(d.code, d.help) for d in diags] == [("E0001", want_help)]


def test_every_syntax_error_of_a_block_is_reported():
    src = 'rule r {\n  for namespace = "a"\n  when gpus > 0 and\n       gpus => 2\n  deny "x" "y"\n}\nquota q {\n  gpus 8 x\n  cohort\n}\n'
    _, diags = lang.parse(src, "t.policy")
    assert [(d.code, d.span.line) for d in diags] == [("E0001", 2), ("E0001", 4), ("E0001", 5), ("E0001", 8), ("E0001", 9)]


def test_stray_lines_between_blocks_do_not_cost_the_blocks_around_them():
    src = "quota a {\n  gpus 1\n}\nprority p 5\nquota b {\n  gpus 2\n}\nqouta c {\n  gpus 3\n}\nquota d {\n  gpus 4\n}\n"
    f, diags = lang.parse(src, "t.policy")
    assert [(d.span.line, d.help) for d in diags] == [(4, "did you mean `priority`?"), (8, "did you mean `quota`?")]
    assert [d.name.name for d in f.decls] == ["a", "b", "d"]


def test_check_errors_of_parsed_blocks_are_kept_and_names_of_broken_blocks_are_not_unknown():
    src = (
        'topology fabric {\n  rack "r"\n}\n'
        'gpu h100 { product "x" memory }\n'  # syntax error: h100 is declared, only broken
        "quota q {\n  gpus 8 of h100\n  gpus 4 of a100\n}\n"
        "gang g {\n  require topology fabric.rak\n}\n"
    )
    _, diags = lang.compile_policies([("t.policy", src)])
    assert [(d.code, d.span.line) for d in diags] == [("E0001", 4), ("E0102", 7), ("E0104", 10)]
    assert "a100" in diags[1].message
