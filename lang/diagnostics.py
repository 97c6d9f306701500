"""Diagnostics: located errors and warnings, rendered like a compiler's, as JSON and as SARIF."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lang.span import Span

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding: a stable `code` (see CODES), a message in words, where, and an optional help line."""

    code: str
    severity: Severity
    message: str
    span: Span
    help: str | None = None

    def __str__(self) -> str:
        """`path:line:col: severity[CODE]: message`, one line (logs, test reports)."""
        s = self.span
        return f"{s.path}:{s.line}:{s.col}: {self.severity}[{self.code}]: {self.message}"

    def to_json(self) -> dict:
        """Fields for `--format json`: path, line, column, end, code, severity, message, help."""
        s = self.span
        return {
            "path": s.path,
            "line": s.line,
            "column": s.col,
            "end": {"line": s.end_line, "column": s.end_col},
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "help": self.help,
        }


def error(code: str, message: str, span: Span, help: str | None = None) -> Diagnostic:
    """An error diagnostic."""
    return Diagnostic(code, "error", message, span, help)


def warning(code: str, message: str, span: Span, help: str | None = None) -> Diagnostic:
    """A warning diagnostic (does not fail `allot check`)."""
    return Diagnostic(code, "warning", message, span, help)


def sort_key(d: Diagnostic) -> tuple:
    """Order by file, then position, then code: stable output for goldens and CI."""
    return (d.span.path, d.span.line, d.span.col, d.code)


def _underline(line_text: str, d: Diagnostic) -> str:
    s = d.span
    start = max(s.col, 1)
    if s.end_line == s.line and s.end_col > start:
        width = s.end_col - start
    else:  # multi-line span: underline to the end of the first line
        width = max(len(line_text) - start + 1, 1)
    width = max(1, min(width, max(len(line_text) - start + 1, 1)))
    # keep tabs so the carets line up under tab-indented source
    pad = "".join("\t" if ch == "\t" else " " for ch in line_text[: start - 1])
    return pad + ("^" if width == 1 else "^" * width)


def render(d: Diagnostic, texts: dict[str, str]) -> str:
    """`path:line:col: error[CODE]: message`, the source line, carets under the span, `help: …`."""
    s = d.span
    out = [str(d)]
    text = texts.get(s.path)
    if text is not None and s.line >= 1:
        lines = text.split("\n")
        if s.line <= len(lines):
            line_text = lines[s.line - 1].rstrip("\r")
            gutter = str(s.line)
            out.append(f"{' ' * len(gutter)} |")
            out.append(f"{gutter} | {line_text}")
            out.append(f"{' ' * len(gutter)} | {_underline(line_text, d)}")
    if d.help:
        out.append(f"  = help: {d.help}")
    return "\n".join(out)


def render_all(diags: list[Diagnostic], texts: dict[str, str]) -> str:
    """Every diagnostic rendered, separated by blank lines."""
    return "\n\n".join(render(d, texts) for d in sorted(diags, key=sort_key))


def summarize(diags: list[Diagnostic], files: int) -> str:
    """The final line of `allot check`."""
    errors = sum(d.severity == "error" for d in diags)
    warnings = len(diags) - errors
    noun = "file" if files == 1 else "files"
    if not diags:
        return f"checked {files} {noun}: no problems"
    return f"checked {files} {noun}: {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"


def sarif_result(rule_id: str, level: str, text: str, uri: str, region: dict) -> dict:
    """One SARIF result at `uri` and `region` (`level`: error, warning or note)."""
    return {
        "ruleId": rule_id,
        "level": level,
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": region}}],
    }


def sarif_log(rules: list[dict], results: list[dict], tool_version: str = "0.1.0") -> dict:
    """A SARIF 2.1.0 log with one run of the `allot` driver (shared by `check` and `lint`)."""
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "allot", "version": tool_version, "rules": rules}},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def to_sarif(diags: list[Diagnostic], tool_version: str = "0.1.0") -> dict:
    """A SARIF 2.1.0 log with one run, for GitHub code scanning."""
    from lang.codes import CODES

    used = sorted({d.code for d in diags})
    rules = [{"id": c, "shortDescription": {"text": CODES.get(c, c)}} for c in used]
    results = []
    for d in sorted(diags, key=sort_key):
        s = d.span
        region = {"startLine": max(s.line, 1), "startColumn": max(s.col, 1)}
        if s.end_line >= s.line and s.end_col >= 1:
            region.update(endLine=max(s.end_line, 1), endColumn=max(s.end_col, 1))
        text = d.message + (f" (help: {d.help})" if d.help else "")
        results.append(sarif_result(d.code, "error" if d.severity == "error" else "warning", text, s.path, region))
    return sarif_log(rules, results, tool_version)
