"""One lint run: read every path, judge every object with one engine, collect findings and counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.lint.finding import Finding
from webhook.lint.judge import Judged, Linter
from webhook.lint.reader import read_paths


@dataclass(slots=True)
class Report:
    """Everything the formats print: findings in file order, per-object outcomes, counts."""

    findings: list[Finding] = field(default_factory=list)
    judged: list[Judged] = field(default_factory=list)
    invalid: list[Finding] = field(default_factory=list)  # the reader's findings (objects never judged)
    texts: dict[str, str] = field(default_factory=dict)
    files: int = 0
    cluster: str | None = None

    @property
    def skipped(self) -> int:
        """Objects of kinds the policy set does not govern."""
        return sum(not j.governed for j in self.judged)

    @property
    def unjudged(self) -> int:
        """Capacity findings shown as notes because no cluster state was given."""
        return sum(j.unjudged for j in self.judged)

    def count(self, severity: str) -> int:
        """Findings of one severity."""
        return sum(f.severity == severity for f in self.findings)

    @property
    def failed(self) -> bool:
        """Any error finding (exit 1)."""
        return any(f.severity == "error" for f in self.findings)


def lint(paths: list[str], linter: Linter, *, stdin=None, cluster: str | None = None) -> Report:
    """Read `paths` and judge each object; findings sorted by file, line, column and code."""
    read = read_paths(paths, stdin)
    report = Report(texts=read.texts, files=read.files, cluster=cluster, invalid=list(read.findings))
    findings = list(read.findings)
    for doc in read.documents:
        j = linter.judge(doc)
        report.judged.append(j)
        findings.extend(j.findings)
    order = {p: i for i, p in enumerate(dict.fromkeys([*(f.path for f in read.findings), *read.texts]))}
    findings.sort(key=lambda f: (order.get(f.path, len(order)), f.path, f.line, f.col, f.code))
    report.findings = findings
    return report
