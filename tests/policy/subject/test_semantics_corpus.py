"""The corpus cases of the semantics fixes (issue 28 item 3), read as `allot lint` reads a file: the workload judged with the file's other objects as its state.

A stand-in until the corpus table test (tests/policy/subject/test_corpus.py) reads every case file.
"""

from pathlib import Path

import pytest
import yaml

from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.subject.normalize import normalize

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
CASES = ("jobset-generatename", "job-dra-namespace", "leaderworkerset-groups", "leaderworkerset-volcano", "pytorchjob-elastic", "rayjob-submitter", "rayjob-http-mode", "deployment-hami-lower-bound", "pod-coscheduling-group", "trainjob-cluster-runtime", "trainjob-training-runtime", "deployment-dra-mig", "job-dra-mig-profiles", "pod-dra-consumable-capacity", "job-dra-partition")


def judged(name: str):
    """(expectation, subject) of one case file."""
    docs = [d for d in yaml.safe_load_all((CORPUS / f"{name}.yaml").read_text()) if d is not None]
    expect, obj, state = docs[0]["expect"], docs[1], docs[2:]
    request = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE", namespace=expect.get("namespace"))["request"]
    return expect, normalize(request, ClusterSnapshot.from_objects(state))


@pytest.mark.parametrize("name", CASES)
def test_case_reads_as_written(name):
    expect, w = judged(name)
    got = {"kind": w.kind, "pods": w.pods, "gpu_milli": w.total_gpus, "gang": w.gang is not None, "minimum": w.min_members}
    want = {k: expect[k] for k in got}
    if "groups" in expect:
        got["groups"], want["groups"] = w.pods // w.min_members, expect["groups"]
    if "namespace" in expect:
        got["namespace"], want["namespace"] = w.namespace, expect["namespace"]
    for code in expect.get("findings") or ():
        assert code in {p.code for p in w.problems}, (code, w.problems)
    assert got == want
