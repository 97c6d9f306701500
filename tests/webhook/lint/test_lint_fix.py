"""`lint --fix`: the fill written with comments, key order, quoting and the other documents kept."""

from __future__ import annotations

import base64
import difflib
import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.webhook.lint.lint_builders import deployment, write_policy

from webhook.cli import main

FILL = """\
priority batch 100 default
rule owner {
  for gpus > 0 and not ("owner" in labels)
  set labels["owner"] = "platform"
}
rule team-label {
  mode warn
  for gpus > 0
  set labels["team"] = namespace
}
"""

ODD = """\
# Team web's serving deployment.   (comments everywhere)
kind: Deployment          # kind before apiVersion, on purpose
apiVersion: apps/v1
metadata:
    namespace: team
    name: web   # the name
spec:
    template:
        spec:
            containers:
              - resources:
                    limits: {nvidia.com/gpu: "1"}   # one card
                name: main
                image: 'registry.example/web:1'
    replicas: 1
---
# a second document stays byte for byte
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data:
  k: "v"   # quoted
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: team
  labels: {owner: me, team: team}
spec:
  containers:
  - name: main
    resources:
      limits: {nvidia.com/gpu: 1}
"""

ADDED = ["    labels:\n", "        owner: platform\n", "        team: team\n", "            priorityClassName: batch\n"]


@pytest.fixture
def policy(tmp_path):
    return write_policy(tmp_path, FILL)


def _lint(capsys, *argv):
    rc = main(["lint", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_fix_keeps_everything_but_the_patched_keys(tmp_path, capsys, policy):
    path = tmp_path / "odd.yaml"
    path.write_text(ODD)
    rc, out, err = _lint(capsys, "--policy", policy, "--fix", str(path))
    assert rc == 0
    assert out.startswith(f"# {path}\n")
    fixed = out.split("\n", 1)[1]
    lines = fixed.splitlines(True)
    for added in ADDED:
        assert added in lines
        lines.remove(added)
    assert "".join(lines) == ODD  # comments, key order, quoting and the ConfigMap all as they were
    doc = next(yaml.safe_load_all(fixed))
    assert doc["metadata"]["labels"] == {"owner": "platform", "team": "team"}
    assert doc["spec"]["template"]["spec"]["priorityClassName"] == "batch"
    assert "linted 1 file" in err  # the report goes to stderr, the manifest to stdout


def test_fix_kubectl_indentation_and_existing_labels(tmp_path, capsys, policy):
    text = deployment(labels={"tier": "web"})
    path = tmp_path / "d.yaml"
    path.write_text(text)
    rc, out, _ = _lint(capsys, "--policy", policy, "--fix", "--diff", str(path))
    assert rc == 0
    added = [l for l in out.splitlines() if l.startswith("+") and not l.startswith("+++")]
    assert added == ["+    owner: platform", "+    team: team", "+      priorityClassName: batch"]
    assert not [l for l in out.splitlines() if l.startswith("-") and not l.startswith("---")]


def test_fix_write_rewrites_in_place_and_a_second_run_has_nothing_to_fill(tmp_path, capsys, policy):
    path = tmp_path / "odd.yaml"
    path.write_text(ODD)
    rc, out, err = _lint(capsys, "--policy", policy, "--fix", "--write", str(path))
    assert rc == 0 and "fixed 1 object" in err
    assert path.read_text() != ODD
    rc, out, err = _lint(capsys, "--policy", policy, "--fix", "--diff", str(path))
    assert out == ""  # the fill is there now: nothing more to change
    assert "RuleWouldSet" not in err and "AdmissionPatch" not in err


def test_fix_a_list_item_and_stdin_prints_the_whole_stream(capsys, policy, monkeypatch):
    import io

    text = "apiVersion: v1\nkind: List\nitems:\n- " + deployment().replace("\n", "\n  ").rstrip() + "\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    rc, out, _ = _lint(capsys, "--policy", policy, "--fix", "-")
    assert rc == 0
    item = yaml.safe_load(out)["items"][0]
    assert item["metadata"]["labels"] == {"app": "web", "owner": "platform", "team": "team"}
    assert item["spec"]["template"]["spec"]["priorityClassName"] == "batch"


def test_diff_and_write_need_fix(tmp_path, capsys, policy):
    path = tmp_path / "d.yaml"
    path.write_text(deployment())
    rc, _, err = _lint(capsys, "--policy", policy, "--diff", str(path))
    assert rc == 2 and "--fix" in err


# Each style: a manifest as a team writes it, and the same file after `--fix --write`, where
# only the filled lines are new (`+` marks them below, and is cut before comparing).
STYLES = {
    "indented sequences, 2-space mappings": """\
# serving, as our team writes it
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
  labels:
    app: web   # the app
+    owner: platform
+    team: team
spec:
  template:
    spec:
      containers:
        - name: main
          image: registry.example/web:1
          resources:
            limits:
              nvidia.com/gpu: "1"
+      priorityClassName: batch
      # a comment after the last key stays after the fill
""",
    "kubectl style: sequences at their key's column": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
+  labels:
+    owner: platform
+    team: team
spec:
  template:
    spec:
      containers:
      - name: main
        resources:
          limits:
            nvidia.com/gpu: '1'
+      priorityClassName: batch
""",
    "4-space mappings, indented sequences": """\
apiVersion: batch/v1
kind: Job
metadata:
    name: batch   # comment kept
    namespace: team
+    labels:
+        owner: platform
+        team: team
spec:
    template:
        spec:
            restartPolicy: Never
            containers:
                - name: work
                  resources:
                      limits: {nvidia.com/gpu: "1"}
+            priorityClassName: batch
""",
    "flow labels and no final line break": ("""\
apiVersion: batch/v1
kind: Job
metadata:
  name: batch
  namespace: team
  labels: {app: batch}
spec:
  template:
    spec:
      containers:
        - name: work
          resources: {limits: {nvidia.com/gpu: "1"}}""", """\
apiVersion: batch/v1
kind: Job
metadata:
  name: batch
  namespace: team
  labels: {app: batch, owner: platform, team: team}
spec:
  template:
    spec:
      containers:
        - name: work
          resources: {limits: {nvidia.com/gpu: "1"}}
      priorityClassName: batch"""),
    "a label replaced in place, its quotes kept": ("""\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team, labels: {owner: x, team: 'other'}}   # one line
spec:
  containers:
    - name: main
      resources: {limits: {nvidia.com/gpu: 1}}
""", """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team, labels: {owner: x, team: 'team'}}   # one line
spec:
  containers:
    - name: main
      resources: {limits: {nvidia.com/gpu: 1}}
  priorityClassName: batch
"""),
    "a JSON manifest stays JSON": (
        ('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"},\n'
         ' "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}\n'),
        ('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team", '
         '"labels": {"owner": "platform", "team": "team"}},\n'
         ' "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 1}}}], "priorityClassName": "batch"}}\n')),
}


def _unmarked(case) -> tuple[str, str]:
    """(the file before, the file after) of a STYLES entry: a pair, or one text whose `+` lines are the fill."""
    if isinstance(case, tuple):
        return case
    lines = case.splitlines(True)
    return "".join(l for l in lines if not l.startswith("+")), "".join(l.removeprefix("+") for l in lines)


@pytest.mark.parametrize("name", STYLES)
def test_fix_adds_only_the_filled_lines_in_the_documents_own_style(tmp_path, capsys, policy, name):
    before, after = _unmarked(STYLES[name])
    path = tmp_path / "m.yaml"
    path.write_text(before)
    rc, _, err = _lint(capsys, "--policy", policy, "--fix", "--write", str(path))
    assert rc == 0 and "not fixed" not in err, err
    assert path.read_text() == after


def test_fix_diff_of_an_indented_file_is_the_added_lines_only(tmp_path, capsys, policy):
    before, _ = _unmarked(STYLES["indented sequences, 2-space mappings"])
    path = tmp_path / "m.yaml"
    path.write_text(before)
    rc, out, _ = _lint(capsys, "--policy", policy, "--fix", "--diff", str(path))
    assert rc == 0
    changed = [l for l in out.splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert changed == ["+    owner: platform", "+    team: team", "+      priorityClassName: batch"]


def test_fix_of_one_document_leaves_the_others_byte_for_byte(tmp_path, capsys, policy):
    kept = "# kept as is\napiVersion: v1\nkind: ConfigMap\nmetadata:   {name: c}\ndata:\n    k:   'v'\n"
    filled_already = deployment(labels={"owner": "platform", "team": "team"}).replace(
        "    spec:\n", "    spec:\n      priorityClassName: batch\n")
    before, after = _unmarked(STYLES["indented sequences, 2-space mappings"])
    path = tmp_path / "m.yaml"
    path.write_text(f"{kept}---\n{filled_already}---\n{before}---\n{kept}")
    rc, _, err = _lint(capsys, "--policy", policy, "--fix", "--write", str(path))
    assert rc == 0 and "fixed 1 object" in err
    assert path.read_text() == f"{kept}---\n{filled_already}---\n{after}---\n{kept}"


def test_a_file_with_lone_cr_line_breaks_is_reported_and_left_as_it_was(tmp_path, capsys, policy):
    path = tmp_path / "m.yaml"
    path.write_bytes(deployment().replace("\n", "\r").encode())
    _, _, err = _lint(capsys, "--policy", policy, "--fix", "--write", str(path))
    assert "not fixed: the file has lone CR line breaks" in err
    assert path.read_bytes() == deployment().replace("\n", "\r").encode()


def test_fix_of_a_pod_writes_the_class_name_only(tmp_path, capsys, policy):
    """`priority` and `preemptionPolicy` are computed by the API server from the class: in git they go stale."""
    path = tmp_path / "pod.yaml"
    path.write_text(POD)
    rc, _, err = _lint(capsys, "--policy", policy, "--fix", "--write", str(path))
    assert rc == 0 and "fixed 1 object" in err
    assert path.read_text() == POD + "  priorityClassName: batch\n"


def test_the_webhook_still_fills_priority_and_preemption_policy(tmp_path, capsys, policy):
    path = tmp_path / "pod.yaml"
    path.write_text(POD)
    assert main(["eval", "--policy", policy, "--mutate", str(path)]) == 0
    review = json.loads(capsys.readouterr().out)
    ops = json.loads(base64.b64decode(review["response"]["patch"]))
    assert {op["path"] for op in ops} >= {"/spec/priorityClassName", "/spec/priority", "/spec/preemptionPolicy"}


class _IndentedSequences(yaml.SafeDumper):
    """PyYAML writes `- ` at the key's column; this dumper indents sequences under their key."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(indent=st.sampled_from([2, 4]), indented=st.booleans(), labels=st.sampled_from([None, {"app": "web"}, {"app": "web", "tier": "x"}]),
       containers=st.integers(1, 3), sort=st.booleans())
def test_fix_only_adds_lines_whatever_the_style(tmp_path, policy, indent, indented, labels, containers, sort):
    from webhook.cli.eval import load_policy
    from webhook.lint.fix import fix_file
    from webhook.lint.judge import Linter
    from webhook.lint.run import lint

    meta = {"name": "web", "namespace": "team", **({"labels": labels} if labels is not None else {})}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
           "spec": {"template": {"spec": {"containers": [
               {"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": "1"}}, "args": ["a", "b"]} for i in range(containers)]}}}}
    text = yaml.dump(obj, Dumper=_IndentedSequences if indented else yaml.SafeDumper, indent=indent, sort_keys=sort)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    linter = Linter(load_policy([policy]), snapshot=None, user="u", groups=("system:authenticated",), now=0.0)
    report = lint([str(path)], linter)
    fixed = fix_file(str(path), text, report.judged)
    assert fixed.problems == ()
    diff = list(difflib.ndiff(text.splitlines(True), fixed.after.splitlines(True)))
    assert not [l for l in diff if l.startswith("- ")], "".join(diff)  # only added lines
    got = yaml.safe_load(fixed.after)
    assert got["metadata"]["labels"] == {**(labels or {}), "owner": "platform", "team": "team"}
    assert got["spec"]["template"]["spec"]["priorityClassName"] == "batch"
    added = [l[2:] for l in diff if l.startswith("+ ")]
    assert all((len(l) - len(l.lstrip(" "))) % indent == 0 for l in added), added  # at the document's own step


def test_fix_after_a_broken_document_writes_at_the_right_lines(tmp_path, capsys, policy):
    before, after = _unmarked(STYLES["indented sequences, 2-space mappings"])
    path = tmp_path / "m.yaml"
    path.write_text("kind: [\n---\n" + before)
    rc, out, err = _lint(capsys, "--policy", policy, "--fix", "--write", str(path))
    assert rc == 1 and "ManifestYamlSyntax" in out  # the broken document is still an error
    assert "not fixed" not in err and "fixed 1 object" in err, err
    assert path.read_text() == "kind: [\n---\n" + after
