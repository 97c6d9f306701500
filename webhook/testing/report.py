"""`allot test` output: failure diffs as text, JUnit XML, and the coverage of governing blocks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Iterator

from policy.testing.expect import Mismatch
from webhook.junit import finish, testsuites
from webhook.testing.runner import CaseOutcome, Run


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in text.splitlines())


def describe(m: Mismatch) -> str:
    """One mismatch as a headline plus, for structured values, a unified diff."""
    if m.field == "allowed":
        head = f"  allowed: expected {str(m.expected).lower()}, got {str(m.got).lower()}"
        return head + (f"\n    because: {m.note}" if m.note else "")
    head = f"  {m.field}: " + (m.note or "expected differs from got")
    return head + "\n" + _indent(m.diff())


def failure_text(o: CaseOutcome) -> str:
    """The full report of one failed case."""
    r = o.result
    notes = [f"  note: {n}" for n in r.notes]
    if r.error is not None:
        return "\n".join([f"ERROR {o.id}", f"  {r.error}", *notes])
    return "\n".join([f"FAIL {o.id}", *(describe(m) for m in r.mismatches), *notes])


def text_lines(run: Run, *, verbose: bool = False) -> Iterator[str]:
    """The human report, without the final tally line."""
    for file, message in run.file_errors:
        yield f"ERROR {file}\n{_indent(message, '  ')}"
    for o in run.outcomes:
        if not o.result.passed:
            yield failure_text(o)
        elif verbose:
            yield f"ok   {o.id}"
    for o in run.outcomes:
        for message in o.warnings:
            yield warning_text(o, message)


def warning_text(o: CaseOutcome, message: str) -> str:
    """`WARN file:line::case` and the message: the line points an editor at the case."""
    return f"WARN {o.file}:{o.line}::{o.name}\n  {message}"


def tally(run: Run) -> str:
    """The last line: `N passed, M failed`."""
    return f"{run.passed} passed, {run.failed} failed"


def coverage_lines(run: Run) -> list[str]:
    """Governing blocks of the sets that ran which no case exercised."""
    missed = sorted(run.blocks - run.exercised)
    head = f"coverage: {len(run.blocks) - len(missed)} of {len(run.blocks)} governing blocks exercised"
    return [head] + [f"  not exercised: {block} ({loc})" for loc, block in missed]


def junit_xml(run: Run) -> str:
    """JUnit XML: one <testsuite> per test file, one <testcase> per case."""
    suites: dict[str, list[CaseOutcome]] = {}
    for o in run.outcomes:
        suites.setdefault(o.file, []).append(o)
    root = testsuites("allot test")
    for file, outcomes in suites.items():
        suite = ET.SubElement(root, "testsuite", name=file, tests=str(len(outcomes)))
        f = e = 0
        for o in outcomes:
            case = ET.SubElement(suite, "testcase", classname=file, name=o.name, file=file)
            if o.result.error is not None:
                e += 1
                ET.SubElement(case, "error", message=o.result.error).text = o.result.error
            elif o.result.mismatches:
                f += 1
                fields = ", ".join(m.field for m in o.result.mismatches)
                ET.SubElement(case, "failure", message=f"expectation not met: {fields}").text = failure_text(o)
            if o.warnings:  # CI shows a case's output beside it; a warning never fails it
                ET.SubElement(case, "system-out").text = "\n".join(warning_text(o, w) for w in o.warnings)
        suite.set("failures", str(f))
        suite.set("errors", str(e))
    for file, message in run.file_errors:
        suite = ET.SubElement(root, "testsuite", name=file, tests="1", failures="0", errors="1")
        case = ET.SubElement(suite, "testcase", classname=file, name="(file)", file=file)
        ET.SubElement(case, "error", message=message.splitlines()[0]).text = message
    return finish(root)
