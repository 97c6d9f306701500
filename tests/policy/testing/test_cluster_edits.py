"""`before:` steps that change the case's cluster state (add / remove / persist), and the warning about
denials expected without `codes:` — so a case cannot pass because of a denial for another reason."""

import textwrap

import pytest

from webhook.cli import main

POLICY = """\
quota team-a {
  for namespace == "team-a"
  gpus 4
}
gang train {
  for namespace == "train"
  require min_members
}
"""

CLUSTER = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
  status:
    allocatable: {nvidia.com/gpu: "8"}
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: busy, namespace: team-a}
  spec: {nodeName: n1, containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: "4"}}}]}
  status: {phase: Running}
"""

TEAM_POD = ("{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: team-a},"
            " spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: '1'}}}]}}")
MEMBER = ("{apiVersion: v1, kind: Pod, metadata: {name: m, namespace: train, labels: {scheduling.x-k8s.io/pod-group: g}},"
          " spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: '1'}}}]}}")
GROUP = "{apiVersion: scheduling.x-k8s.io/v1alpha1, kind: PodGroup, metadata: {name: g, namespace: train}, spec: {minMember: 2}}"


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    """Write `d/x.test.yaml` (cluster: c.yaml) with the given cases and run `allot test d`: (exit, stdout lines)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "p.policy").write_text(POLICY)
    (tmp_path / "d" / "c.yaml").write_text(CLUSTER)
    monkeypatch.chdir(tmp_path)

    def go(cases: str) -> tuple[int, list[str]]:
        (tmp_path / "d" / "x.test.yaml").write_text("cluster: c.yaml\ncases:\n" + textwrap.dedent(cases))
        code = main(["test", "d"])
        return code, capsys.readouterr().out.rstrip("\n").splitlines()

    return go


# (name, cases text, want exit, want tally, a line that must appear (or None))
CASES = [
    ("the team is full without an edit", f"""\
     - name: c
       request: {TEAM_POD}
       expect: {{allowed: false, codes: [QuotaExceeded]}}
     """, 0, "1 passed, 0 failed", None),
    ("a removed pod frees its GPUs", f"""\
     - name: c
       before:
         - remove: [{{kind: Pod, namespace: team-a, name: busy}}]
       request: {TEAM_POD}
       expect: {{allowed: true, codes: []}}
     """, 0, "1 passed, 0 failed", None),
    ("an added pod holds GPUs", f"""\
     - name: c
       before:
         - remove: [{{kind: Pod, namespace: team-a, name: busy}}]
         - add:
             - {{apiVersion: v1, kind: Pod, metadata: {{name: other, namespace: team-a}}, status: {{phase: Running}},
                 spec: {{nodeName: n1, containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: '4'}}}}}}]}}}}
       request: {TEAM_POD}
       expect: {{allowed: false, codes: [QuotaExceeded]}}
     """, 0, "1 passed, 0 failed", None),
    ("a member of a group not in the cluster lacks its minimum", f"""\
     - name: c
       request: {MEMBER}
       expect: {{allowed: false, codes: [GangMinMembersMissing, MissingGroup]}}
     """, 0, "1 passed, 0 failed", None),
    ("an added group gives its member a minimum", f"""\
     - name: c
       before:
         - add: [{GROUP}]
       request: {MEMBER}
       expect: {{allowed: true, codes: []}}
     """, 0, "1 passed, 0 failed", None),
    ("a persisted group admission is in the cluster for the request", f"""\
     - name: c
       before:
         - {{persist: true, request: {GROUP}}}
       request: {MEMBER}
       expect: {{allowed: true, codes: []}}
     """, 0, "1 passed, 0 failed", None),
    ("without persist the admitted group is not stored", f"""\
     - name: c
       before:
         - request: {GROUP}
       request: {MEMBER}
       expect: {{allowed: true}}
     """, 1, "0 passed, 1 failed", "FAIL d/x.test.yaml::c"),
    ("a persisted DELETE removes the object", f"""\
     - name: c
       before:
         - persist: true
           operation: DELETE
           request: {{apiVersion: v1, kind: Pod, metadata: {{name: busy, namespace: team-a}}}}
       request: {TEAM_POD}
       expect: {{allowed: true, codes: []}}
     """, 0, "1 passed, 0 failed", None),
    ("an edit does not leak into the next case", f"""\
     - name: edited
       before:
         - remove: [{{kind: Pod, namespace: team-a, name: busy}}]
       request: {TEAM_POD}
       expect: {{allowed: true}}
     - name: next
       request: {TEAM_POD}
       expect: {{allowed: false, codes: [QuotaExceeded]}}
     """, 0, "2 passed, 0 failed", None),
    ("removing what is not there is an error, never a silent no-op", f"""\
     - name: c
       before:
         - remove: [{{kind: Pod, namespace: team-a, name: bussy}}]
       request: {TEAM_POD}
       expect: {{allowed: true}}
     """, 1, "0 passed, 1 failed", "  before[0].remove[0]: Pod team-a/bussy is not in the cluster state"),
    ("a gang object removed without its apiVersion is not found, with a hint", f"""\
     - name: c
       before:
         - add: [{GROUP}]
         - remove: [{{kind: PodGroup, namespace: train, name: g}}]
       request: {MEMBER}
       expect: {{allowed: true}}
     """, 1, "0 passed, 1 failed",
     "  before[1].remove[0]: PodGroup train/g is not in the cluster state (for a gang object, give its apiVersion)"),
    ("an unusable added object is a located error", f"""\
     - name: c
       before:
         - add: [{{apiVersion: v1, kind: Pod, metadata: {{namespace: team-a}}}}]
       request: {TEAM_POD}
       expect: {{allowed: true}}
     """, 1, "0 passed, 1 failed", "  before[0].add[0]: Pod has no metadata.name"),
]


@pytest.mark.parametrize("name,cases,want_code,want_tally,want_line", CASES, ids=[c[0] for c in CASES])
def test_cluster_edits(run, name, cases, want_code, want_tally, want_line):
    code, lines = run(cases)
    assert (code, lines[-1]) == (want_code, want_tally), lines
    if want_line is not None:
        assert want_line in lines, lines


def test_a_denial_without_codes_warns_at_the_case_and_names_what_it_got(run):
    code, lines = run(f"""\
     - name: ok
       request: {TEAM_POD}
       expect: {{allowed: false, codes: [QuotaExceeded]}}
     - name: vague
       request: {TEAM_POD}
       expect: {{allowed: false, denied_by: [quota team-a]}}
     """)
    assert (code, lines[-1]) == (0, "2 passed, 0 failed")  # a warning informs; it does not fail the run
    assert lines[:2] == [
        "WARN d/x.test.yaml:6::vague",
        "  expects a denial but names no `codes:`, so a denial for another reason would pass it;"
        " it got codes: [QuotaExceeded]",
    ]


def test_allowed_cases_and_cases_with_codes_do_not_warn(run):
    code, lines = run(f"""\
     - name: allowed
       request: {{apiVersion: v1, kind: Pod, metadata: {{name: q, namespace: elsewhere}}}}
       expect: {{allowed: true}}
     - name: coded
       request: {TEAM_POD}
       expect: {{allowed: false, codes: [QuotaExceeded]}}
     """)
    assert (code, lines) == (0, ["2 passed, 0 failed"])


def test_junit_carries_the_warning_beside_its_case(run, tmp_path, capsys):
    import xml.etree.ElementTree as ET

    run(f"""\
     - name: vague
       request: {TEAM_POD}
       expect: {{allowed: false}}
     - name: coded
       request: {TEAM_POD}
       expect: {{allowed: false, codes: [QuotaExceeded]}}
     """)
    assert main(["test", "d", "--junit", "out.xml"]) == 0
    capsys.readouterr()
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out.xml").getroot().iter("testcase")}
    assert cases["vague"].find("failure") is None
    assert cases["vague"].find("system-out").text.startswith("WARN d/x.test.yaml:3::vague\n  expects a denial")
    assert cases["coded"].find("system-out") is None
