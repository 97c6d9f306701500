"""`lint` judging: each object decided by the webhook's engine, every finding located at its field."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.webhook.lint.lint_builders import deployment, job, jobset, line_of, write_policy

from webhook.cli.eval import load_policy, load_snapshot
from webhook.lint.judge import Linter
from webhook.lint.run import lint

H100 = "NVIDIA-H100-80GB-HBM3"
CLUSTER = "policies/fixtures/cluster.yaml"


def run(tmp_path, text: str, *, cluster: str | None = None, jobs: int = 1):
    policy = load_policy([write_policy(tmp_path)])
    snapshot = load_snapshot(cluster) if cluster else None
    linter = Linter(policy, snapshot=snapshot, user="kubernetes-admin", groups=("system:masters", "system:authenticated"), now=0.0)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return lint([str(path)], linter, cluster=cluster, jobs=jobs), str(path)


@dataclass
class Case:
    name: str
    text: str
    want_code: str
    want_severity: str
    want_line_of: str  # the text of the line the finding points at
    want_block: str | None
    want_field: str | None
    cluster: str | None = None


TWO_SETS = jobset() + """\
  - name: evaluator
    replicas: 1
    template:
      spec:
        template:
          spec:
            priorityClassName: nightly
            containers:
            - name: eval
              resources:
                limits: {nvidia.com/gpu: "1"}
"""

CASES = [
    Case("warn rule: no GPU model", deployment(), "RuleDenied", "warning", "metadata:", "rule needs-model", "metadata"),
    Case("deny rule at the object", deployment(gpus="8", model=H100), "RuleDenied", "error", "metadata:", "rule no-huge", "metadata"),
    Case("quota over with nothing running", deployment(gpus="2", replicas=5, model=H100), "QuotaExceeded", "error",
         "resources:", "quota team", "spec.template.spec.containers[0].resources"),
    Case("a Job's quota, at its container", job(gpus="3", parallelism=3), "QuotaExceeded", "error", "resources:", "quota team",
         "spec.template.spec.containers[0].resources"),
    Case("warn set: the label it would write", deployment(), "RuleWouldSet", "warning", "labels:", "rule team-label",
         "metadata.labels"),
    Case("JobSet gang with no nodes: a note", jobset(), "GangUnplaceable", "note", "nodeSelector:", "gang racks",
         "spec.replicatedJobs[0].template.spec.template.spec.nodeSelector"),
    Case("malformed quantity at the field", deployment(gpus="2x"), "MalformedQuantity", "error", 'nvidia.com/gpu: "2x"',
         None, "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"),
    Case("unknown class: the template that names it", TWO_SETS, "UnknownPriorityClass", "error", "priorityClassName: nightly",
         "priority", "spec.replicatedJobs[1].template.spec.template.spec.priorityClassName"),
    Case("default priority fill: at the object, its field not written yet", deployment(model=H100, labels={"team": "t"}),
         "AdmissionPatch", "note", "apiVersion:", "priority batch", None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_finding_located_at_field(tmp_path, case):
    report, path = run(tmp_path, case.text, cluster=case.cluster)
    found = [f for f in report.findings if f.code == case.want_code]
    assert found, [str(f) for f in report.findings]
    f = found[0]
    assert f.severity == case.want_severity
    assert f.path == path
    assert f.line == line_of(case.text, case.want_line_of)
    assert f.object_line == line_of(case.text, "apiVersion:")  # the object's first line
    assert f.field == case.want_field
    if case.want_block is None:
        assert f.block in (None, "subject")
    else:
        assert f.block == case.want_block
        assert "a.policy:" in f.block_location  # the line of the policy that raised it


def test_clean_object_has_no_findings(tmp_path):
    text = deployment(model=H100, labels={"team": "t"}).replace("  template:\n    spec:\n", "  template:\n    spec:\n      priorityClassName: batch\n")
    report, _ = run(tmp_path, text)
    assert [str(f) for f in report.findings] == []
    assert not report.failed


def test_capacity_needs_the_cluster_and_is_judged_with_it(tmp_path):
    text = jobset(replicas=2)
    report, _ = run(tmp_path, text)
    gang = [f for f in report.findings if f.code == "GangUnplaceable"]
    assert gang and gang[0].severity == "note" and "not judged" in gang[0].message
    assert report.unjudged == 1
    # The fixture cluster has H100 racks: the 4-pod gang fits there, and nothing is shown as unjudged.
    with_cluster, _ = run(tmp_path, text, cluster=CLUSTER)
    assert not [f for f in with_cluster.findings if f.code == "GangUnplaceable"]
    assert with_cluster.unjudged == 0


def test_gang_too_big_for_any_rack_is_an_error_with_the_cluster(tmp_path):
    report, _ = run(tmp_path, jobset(gpus="4", replicas=40), cluster=CLUSTER)
    codes = {(f.code, f.severity) for f in report.findings}
    assert ("GangUnplaceable", "error") in codes


def test_ungoverned_kinds_are_skipped_and_counted(tmp_path):
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" + job()
    report, _ = run(tmp_path, text)
    assert report.skipped == 2
    assert sum(j.governed for j in report.judged) == 1


def test_parallel_run_reports_the_same(tmp_path):
    texts = [deployment(name=f"d{i}", gpus=str(1 + i % 6)) for i in range(12)]
    for i, t in enumerate(texts):
        (tmp_path / f"f{i:02d}.yaml").write_text(t)
    policy = load_policy([write_policy(tmp_path)])
    linter = Linter(policy, snapshot=None, user="kubernetes-admin", groups=("system:masters",), now=0.0)
    one = lint([str(tmp_path)], linter, jobs=1)
    two = lint([str(tmp_path)], linter, jobs=2)
    assert [str(f) for f in one.findings] == [str(f) for f in two.findings]
    assert one.files == two.files == 12
    assert any(f.severity == "error" for f in one.findings)


POD = """\
# a pod with a tier label the policy rewrites
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: team
  labels:
    tier: cpu
    team: t
spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  containers:
  - name: main
    resources:
      limits: {nvidia.com/gpu: 1}
"""

TIER = 'rule tier {\n  for gpus > 0\n  set labels["tier"] = "gpu"\n}\n'


def _notes(tmp_path, text: str, policy: str):
    linter = Linter(load_policy([write_policy(tmp_path, policy)]), snapshot=None, user="kubernetes-admin",
                    groups=("system:masters", "system:authenticated"), now=0.0)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return [f for f in lint([str(path)], linter).findings if f.code == "AdmissionPatch"]


def test_one_default_priority_fill_is_one_note_at_the_objects_first_line(tmp_path):
    notes = _notes(tmp_path, POD, "priority batch 100 default\n")
    assert len(notes) == 1, [str(n) for n in notes]
    n = notes[0]
    assert (n.line, n.col, n.object_line, n.field) == (2, 1, 2, None)
    assert n.block == "priority batch"
    assert n.message.startswith('admission would add /spec/priorityClassName = "batch"; it also sends /spec/priority and /spec/preemptionPolicy')


def test_a_fill_that_replaces_a_field_is_at_that_fields_line(tmp_path):
    notes = _notes(tmp_path, POD, TIER)
    assert [(n.line, n.col, n.field, n.block) for n in notes] == [(line_of(POD, "tier: cpu"), 5, "metadata.labels.tier", "rule tier")]
    assert notes[0].message == 'admission would replace /metadata/labels/tier = "gpu"'


def test_a_label_named_priority_is_the_rules_fill_not_the_priority_class(tmp_path):
    notes = _notes(tmp_path, POD, 'priority batch 100 default\nrule p {\n  for gpus > 0\n  set labels["priority"] = "high"\n}\n')
    assert sorted(n.block for n in notes) == ["priority batch", "rule p"]


def test_the_default_priority_of_two_pod_templates_is_one_note(tmp_path):
    text = TWO_SETS.replace("            priorityClassName: nightly\n", "")
    notes = _notes(tmp_path, text, "priority batch 100 default\n")
    assert len(notes) == 1, [str(n) for n in notes]
    assert notes[0].message.count("priorityClassName") == 2 and notes[0].line == 1


CLAIMING_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: dra-train
  namespace: team
spec:
  template:
    spec:
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      resourceClaims:
      - name: gpus
        resourceClaimTemplateName: six-gpus
      containers:
      - name: main
        image: registry.example/train:1
        resources:
          claims:
          - name: gpus
"""
SIX_GPUS = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: six-gpus
  namespace: team
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 6
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_carrying_its_own_claim_template_is_judged_with_it(tmp_path, jobs):
    policy = load_policy([write_policy(tmp_path)])
    linter = Linter(policy, snapshot=None, user="kubernetes-admin", groups=("system:masters",), now=0.0)
    (tmp_path / "a.yaml").write_text(CLAIMING_JOB)  # the template comes in another file, after it
    (tmp_path / "b.yaml").write_text(SIX_GPUS)
    report = lint([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")], linter, jobs=jobs)
    codes = {f.code for f in report.findings}
    assert "MissingResourceClaim" not in codes
    assert "RuleDenied" in codes or any("more than 4 GPUs" in f.message for f in report.findings)  # its 6 GPUs are counted


GANG_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: member-0
  namespace: team
  labels:
    scheduling.x-k8s.io/pod-group: trainers
spec:
  containers:
  - name: main
    image: registry.example/train:1
    resources:
      limits:
        nvidia.com/gpu: "1"
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: trainers
  namespace: team
spec:
  minMember: 2
"""


def test_a_file_carrying_its_pods_group_is_judged_with_it(tmp_path):
    report, _ = run(tmp_path, GANG_POD)
    assert "MissingGroup" not in {f.code for f in report.findings}
