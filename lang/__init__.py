"""The .policy language: text -> diagnostics, AST, typed IR. No I/O, no clock.

Pipeline verbs (the API other packages call):
  parse(text, path)            -> (ast.File | None, diagnostics)
  check(files)                 -> diagnostics of parsed files (names, types, meaning)
  compile_policies(sources)    -> (PolicySet | None, diagnostics), PolicySet only when error-free
  format_source(text, path)    -> canonical text (raises FormatError on syntax errors)
"""

from __future__ import annotations

from lang import ast, ir
from lang.diagnostics import Diagnostic, sort_key


def parse(text: str, path: str) -> tuple[ast.File | None, list[Diagnostic]]:
    """Parse one file: the File holds every declaration that parsed; diagnostics every syntax error."""
    from lang.parser import parse as _parse

    return _parse(text, path)


def check(files: list[ast.File]) -> list[Diagnostic]:
    """All semantic diagnostics of a set of parsed files (merged as one policy set), sorted."""
    from lang.lower import lower_files

    _, diags = lower_files([f for f in files if f is not None])
    return sorted(diags, key=sort_key)


def compile_policies(sources: list[tuple[str, str]]) -> tuple[ir.PolicySet | None, list[Diagnostic]]:
    """(path, text) pairs -> one merged PolicySet (with `sources` filled) when there is no error."""
    from dataclasses import replace

    from lang.lower import lower_files

    files: list[ast.File] = []
    diags: list[Diagnostic] = []
    for path, text in sources:
        f, d = parse(text, path)
        diags += d
        if f is not None:
            files.append(f)
    # names declared in blocks that did not parse are not reported unknown (File.unparsed), so the
    # check errors of every block that did parse are reported beside the syntax errors
    policy, more = lower_files(files)
    diags = sorted(diags + more, key=sort_key)
    if any(d.severity == "error" for d in diags):
        return None, diags
    return replace(policy, sources=tuple(sorted(sources))), diags


def format_source(text: str, path: str) -> str:
    """The canonical layout of one file, comments kept; raises `lang.format.FormatError` on syntax errors."""
    from lang.format import format_source as _format

    return _format(text, path)


def strip_spans(node):
    """A copy of an IR/AST tree with every span blanked: compares meaning, not position."""
    from lang.spans import strip_spans as _strip

    return _strip(node)


__all__ = ["parse", "check", "compile_policies", "format_source", "strip_spans", "Diagnostic", "ast", "ir"]
