"""One lint run: read every path, judge every object with one engine, collect findings and counts.

Large runs are split over worker processes forked after the engine is built (so the
policy set is still compiled once); each worker reads and judges a contiguous slice of the
files and sends back the findings and a slim record per object.
"""

from __future__ import annotations

import gc
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from webhook.lint.finding import Finding
from webhook.lint.judge import Judged, Linter
from webhook.lint.reader import STDIN, Document, Read, expand, read_files

PARALLEL_FROM = 400  # files: below this, forking costs more than it saves


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


@contextmanager
def _collector_off():
    """The cyclic garbage collector off for a while (as it was before, after)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_and_judge(files: list[str], linter: Linter, stdin=None) -> tuple[Read, list[Judged]]:
    """Read then judge, without the collector rescanning the documents read so far.

    Every document's nodes and objects stay alive for the whole run; with the collector on,
    its full passes over that growing heap cost three times the parsing itself. Reading makes
    no cycles to collect, so the collector is off while reading, and what was read is frozen
    out of its view while judging.
    """
    with _collector_off():
        read = read_files(files, stdin)
        linter.learn_state(read.documents)  # before any object is judged: its namespace's labels, its claim templates count
        gc.freeze()  # before the collector is back on, or its first pass scans all that was read
    try:
        return read, [linter.judge(d) for d in read.documents]
    finally:
        gc.unfreeze()


_LINTER: Linter | None = None  # the forked workers' engine (inherited, never pickled)


def _slim(j: Judged) -> Judged:
    obj = j.doc.obj
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    keep = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "generateName", "namespace") if isinstance(meta.get(k), str)}}
    return Judged(Document(j.doc.path, j.doc.line, keep, None, j.doc.item), j.findings, j.patch, j.sets, j.governed, j.unjudged)


def _work(files: list[str]) -> tuple[Read, list[Judged]]:
    read, judged = _read_and_judge(files, _LINTER)
    judged = [_slim(j) for j in judged]
    read.documents, read.texts = [], {p: "" for p in read.texts}  # the parent keeps only the file order
    return read, judged


def _parallel(files: list[str], jobs: int) -> list[tuple[Read, list[Judged]]] | None:
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform: one process
        return None
    per = -(-len(files) // (jobs * 4))  # a few slices per worker, so a slow slice does not hold the others
    slices = [files[i : i + per] for i in range(0, len(files), per)]
    with ctx.Pool(jobs) as pool:
        return pool.map(_work, slices)


def default_jobs(files: int) -> int:
    """Worker processes for `files` files: the cores (at most 4) once the run is large enough."""
    return min(os.cpu_count() or 1, 4) if files >= PARALLEL_FROM else 1


_STATE_KIND = re.compile(r"^\s*kind:\s*[\"']?(Namespace|ResourceClaim|ResourceClaimTemplate|DeviceClass|ResourceSlice|TrainingRuntime|"
                         r"ClusterTrainingRuntime|PodGroup|Workload|CompositePodGroup)[\"']?\s*$", re.M)


def _learn_state_first(files: list[str], linter: Linter) -> None:
    """Before forking, read the files that may declare objects others refer to, so every worker judges with all of them.

    The text search only picks which files to parse; the parse decides what is learned (Linter.learn_state).
    """
    maybe = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                if _STATE_KIND.search(fh.read()):
                    maybe.append(path)
        except OSError:
            continue  # the worker that reads it reports it
    if maybe:
        linter.learn_state(read_files(maybe).documents)


def lint(paths: list[str], linter: Linter, *, stdin=None, cluster: str | None = None, jobs: int = 1) -> Report:
    """Read `paths` and judge each object; findings sorted by file, line, column and code.

    `jobs` > 1 judges in forked workers; their report keeps no file texts (so `--fix` runs in one process).
    """
    global _LINTER
    files = expand(paths)
    parts = None
    if jobs > 1 and STDIN not in files and len(files) >= 2:
        _learn_state_first(files, linter)
        _LINTER = linter
        try:
            parts = _parallel(files, jobs)
        finally:
            _LINTER = None
    if parts is None:
        parts = [_read_and_judge(files, linter, stdin)]
    report = Report(cluster=cluster)
    for read, judged in parts:
        report.files += read.files
        report.texts.update(read.texts)
        report.invalid.extend(read.findings)
        report.judged.extend(judged)
    findings = list(report.invalid)
    for j in report.judged:
        findings.extend(j.findings)
    order = {p: i for i, p in enumerate(files)}
    findings.sort(key=lambda f: (order.get(f.path, len(order)), f.line, f.col, f.code))
    report.findings = findings
    return report
