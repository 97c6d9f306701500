"""`allot lint` output: text like `allot check`, JSON, SARIF 2.1.0 (GitHub code scanning) and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lang.diagnostics import sarif_log, sarif_result
from webhook.junit import finish, testsuites
from webhook.lint.reader import EMPTY
from webhook.lint.run import Report

_LEVEL = {"error": "error", "warning": "warning", "note": "note"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _objects(report: Report) -> int:
    """Objects read: judged ones and invalid ones (a file that held none is no object)."""
    return len(report.judged) + sum(f.code != EMPTY for f in report.invalid)


def summary(report: Report) -> str:
    """The last line: files, objects, skipped kinds, counts per severity, and whether capacity was judged."""
    objects = _objects(report)
    parts = [f"linted {_plural(report.files, 'file')}, {_plural(objects, 'object')}"]
    if report.skipped:
        parts.append(f"{report.skipped} skipped (kinds the policy set does not govern)")
    counts = f"{_plural(report.count('error'), 'error')}, {_plural(report.count('warning'), 'warning')}, {_plural(report.count('note'), 'note')}"
    line = "; ".join(parts) + ": " + counts
    if report.cluster is None:
        shown = f", {report.unjudged} capacity finding{'s' * (report.unjudged != 1)} shown as notes" if report.unjudged else ""
        line += f"; capacity not judged (no --cluster: quota usage and placement unknown{shown})"
    else:
        line += f"; capacity judged against {report.cluster}"
    return line


def text(report: Report) -> str:
    """Each finding as `file:line:col: severity[CODE] message` with its block and help, then the summary."""
    out = []
    for f in report.findings:
        lines = [str(f)]
        if f.block and f.block != "subject":
            lines.append(f"  = block: {f.block}" + (f" ({f.block_location})" if f.block_location else ""))
        if f.object and f.field:
            lines.append(f"  = at: {f.object}, {f.field} (object at line {f.object_line})")
        elif f.object:
            lines.append(f"  = at: {f.object}")
        if f.help:
            lines.append(f"  = help: {f.help}")
        out.append("\n".join(lines))
    out.append(summary(report))
    return "\n".join(out)


def to_json(report: Report) -> dict:
    """Findings and counts as one JSON object."""
    return {
        "findings": [f.to_json() for f in report.findings],
        "summary": {
            "files": report.files,
            "objects": _objects(report),
            "skipped": report.skipped,
            "errors": report.count("error"),
            "warnings": report.count("warning"),
            "notes": report.count("note"),
            "capacity_judged": report.cluster is not None,
            "capacity_not_judged_findings": report.unjudged,
        },
    }


def to_sarif(report: Report, tool_version: str = "0.1.0") -> dict:
    """A SARIF 2.1.0 log: one rule per block id (or reader code), results located by the field's line."""
    rules: dict[str, dict] = {}
    results = []
    for f in report.findings:
        rule = f.rule
        if rule not in rules:
            desc = f"{rule} ({f.block_location})" if f.block_location else rule
            rules[rule] = {"id": rule, "shortDescription": {"text": desc}}
            if f.block_location:
                rules[rule]["properties"] = {"location": f.block_location}
        text = f"{f.code}: {f.message}" + (f" (help: {f.help})" if f.help else "")
        result = sarif_result(rule, _LEVEL[f.severity], text, f.path, {"startLine": max(f.line, 1), "startColumn": max(f.col, 1)})
        result["properties"] = {"code": f.code, "object": f.object, "objectLine": f.object_line, "field": f.field}
        results.append(result)
    return sarif_log(sorted(rules.values(), key=lambda r: r["id"]), results, tool_version)


def junit(report: Report) -> str:
    """JUnit XML: one suite per file, one case per object, a failure per error finding (warnings as output)."""
    root = testsuites("allot lint")
    by_file: dict[str, list] = {}
    for j in report.judged:
        if j.governed:
            by_file.setdefault(j.doc.path, []).append((f"{j.doc.obj.get('kind')} {_name(j.doc.obj)} (line {j.doc.line})", j.findings))
    for f in report.invalid:
        by_file.setdefault(f.path, []).append(("(no objects)" if f.code == EMPTY else f"(invalid object, line {f.line})", [f]))
    for path, cases in by_file.items():
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(cases)))
        fails = 0
        for name, findings in cases:
            case = ET.SubElement(suite, "testcase", classname=path, name=name, file=path)
            errors = [f for f in findings if f.severity == "error"]
            fails += bool(errors)
            for f in errors:
                ET.SubElement(case, "failure", message=f"{f.code}: {f.message}"[:300], type=f.rule).text = str(f)
            others = [str(f) for f in findings if f.severity != "error"]
            if others:
                ET.SubElement(case, "system-out").text = "\n".join(others)
        suite.set("failures", str(fails))
        suite.set("errors", "0")
    return finish(root)


def _name(obj: dict) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ns = meta.get("namespace")
    return f"{ns + '/' if isinstance(ns, str) and ns else ''}{meta.get('name') or meta.get('generateName') or '?'}"
