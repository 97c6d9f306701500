"""The workload corpus: one manifest per case (tests/fixtures/corpus), each read as `allot lint` and the webhook read it.

The first document of a case file is its expectation (`expect:` pods, gpu_milli, gang,
minimum, and optional groups / unread / findings / namespace); the documents after it are the
workload and the objects it refers to (runtimes, claim templates, PodGroups, Namespaces,
Nodes), which go into the cluster state as lint takes them. Format: /tmp/wt/BRIEF.md and
docs/kinds.md ("The corpus").
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policy.cluster.errors import SnapshotError
from policy.cluster.snapshot import ClusterSnapshot
from policy.subject.normalize import normalize
from webhook.cli.eval import build_request

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
CASES = sorted(CORPUS.glob("*.yaml"))
KEYS = {"kind", "pods", "gpu_milli", "gang", "minimum", "groups", "unread", "findings", "namespace"}


def _load(path: Path) -> tuple[dict, dict, list[dict]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) >= 2, f"{path.name}: an expectation and at least one object"
    head, obj, *rest = docs
    assert set(head) == {"expect"}, f"{path.name}: the first document holds only `expect`"
    expect = head["expect"]
    assert set(expect) <= KEYS, f"{path.name}: unknown keys {sorted(set(expect) - KEYS)}"
    assert {"kind", "pods", "gpu_milli", "gang", "minimum"} <= set(expect), f"{path.name}: kind, pods, gpu_milli, gang and minimum are required"
    return expect, obj, rest


def _read(obj: dict, rest: list[dict], namespace: str | None):
    """The subject of `obj` as lint builds it: its namespace filled in, the other documents in the cluster state."""
    snapshot = ClusterSnapshot()
    for other in rest:
        try:
            snapshot.apply("ADDED", other)
        except SnapshotError as exc:  # a case's own object that the state refuses is a broken case
            raise AssertionError(f"{other.get('kind')}: {exc}") from None
    if namespace is not None:
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("namespace", namespace)
        obj = {**obj, "metadata": meta}
    return normalize(build_request(obj, user="alice", groups=("dev",), operation="CREATE"), snapshot)


def test_corpus_is_large_and_each_kind_appears_twice():
    kinds: dict[str, int] = {}
    for path in CASES:
        expect, _, _ = _load(path)
        kinds[expect["kind"]] = kinds.get(expect["kind"], 0) + 1
    assert len(CASES) >= 80, f"{len(CASES)} cases"
    assert not [k for k, n in kinds.items() if n < 2], "every kind needs a plain and a tricky case"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_corpus_case(path: Path):
    expect, obj, rest = _load(path)
    w = _read(obj, rest, expect.get("namespace"))
    codes = {p.code for p in w.problems}
    got = {"kind": w.kind, "pods": w.pods, "gpu_milli": w.total_gpus, "gang": w.gang is not None,
           "minimum": w.min_members}
    want = {k: expect[k] for k in got}
    assert got == want, f"{path.name}: problems {[p.message for p in w.problems]}"
    if "groups" in expect:
        assert w.pods // w.min_members == expect["groups"], path.name  # an LWS: each group of min_members pods is a gang
    if expect.get("unread"):
        assert "UnreadWorkload" in codes, f"{path.name}: {codes}"
    else:
        assert "UnreadWorkload" not in codes, f"{path.name}: {[p.message for p in w.problems]}"
    missing = set(expect.get("findings") or ()) - codes
    assert not missing, f"{path.name}: expected {sorted(missing)} among {sorted(codes)}"
