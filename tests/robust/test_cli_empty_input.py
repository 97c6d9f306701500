"""Empty input is said, never passed in silence: a cluster, a trace, a manifest file that holds nothing.

Commands that cannot work without nodes (`simulate`, `place`) refuse such a cluster (exit 2) and say
what the file held; the others read it as an empty cluster with one warning line and go on.
"""

from __future__ import annotations

import io
import json
import pathlib
import sys

import pytest

from tests.policy.simulate.sim_builders import arrive, simulate
from webhook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
POLICIES = str(ROOT / "policies")
SMALL = str(ROOT / "tests" / "fixtures" / "cluster" / "small.yaml")
TRACE = '{"at": 1, "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": []}}}\n'
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml-vision}\nspec: {containers: [{name: c, image: i}]}\n"
PODS_ONLY = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}, spec: {containers: []}}\n" \
            "- {apiVersion: v1, kind: Namespace, metadata: {name: x}}\n"
FILES = {
    "empty.yaml": "",
    "comments.yaml": "# nothing here yet\n---\n",
    "empty-list.yaml": "apiVersion: v1\nkind: List\nitems: []\n",
    "pods-only.yaml": PODS_ONLY,
    "trace.jsonl": TRACE,
    "pod.yaml": POD,
    "skipped.jsonl": '{"at": 1, "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {}}}\n',
}


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("empty-input")
    for name, text in FILES.items():
        (root / name).write_text(text)
    return root


def run(argv: list[str], d: pathlib.Path, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process run; `{d}` is the fixture directory."""
    code = main([a.replace("{d}", str(d)) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, err
    return code, out, err.replace(str(d) + "/", "")


NO_NODES = [
    # (argv, the one stderr line after `allot CMD: error: `)
    (["simulate", "--cluster", "{d}/empty.yaml", "--trace", "{d}/trace.jsonl"],
     "cluster empty.yaml holds no objects: a cluster with no nodes cannot be simulated (every pod would be unplaceable)"),
    (["simulate", "--cluster", "{d}/empty-list.yaml", "--trace", "{d}/trace.jsonl"],
     "cluster empty-list.yaml holds no objects: a cluster with no nodes cannot be simulated (every pod would be unplaceable)"),
    (["simulate", "--cluster", "{d}/pods-only.yaml", "--trace", "{d}/trace.jsonl"],
     ("cluster pods-only.yaml holds no Nodes (read 2 objects, none of them a Node): a cluster with no nodes cannot be simulated "
      "(every pod would be unplaceable)")),
    (["place", "--cluster", "{d}/empty-list.yaml", "{d}/pod.yaml"],
     "cluster empty-list.yaml holds no objects: a gang cannot be placed on a cluster with no nodes"),
    (["place", "--cluster", "{d}/pods-only.yaml", "{d}/pod.yaml"],
     "cluster pods-only.yaml holds no Nodes (read 2 objects, none of them a Node): a gang cannot be placed on a cluster with no nodes"),
    (["simulate", "--cluster", SMALL, "--trace", "{d}/empty.yaml"], "trace empty.yaml holds no pods: nothing to simulate"),
    (["simulate", "--cluster", SMALL, "--trace", "{d}/skipped.jsonl"], 
     ("trace skipped.jsonl holds no pods (1 record(s) skipped, the first skipped.jsonl:1: ConfigMap objects are not simulated yet (pods only)): "
      "nothing to simulate")),
]


@pytest.mark.parametrize("argv, want", NO_NODES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_command_that_needs_nodes_or_pods_refuses_and_says_what_it_read(argv, want, d, capsys):
    code, out, err = run(argv, d, capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"allot {argv[0]}: error: {want}"), err


def test_the_scheduler_explains_a_pod_on_a_cluster_of_no_nodes():
    result, _ = simulate([], [arrive(1, "a")])  # a library caller: the CLI refuses this cluster before
    assert [(o.codes, o.message) for o in result.outcomes if o.codes] == [
        (("NoNodes",), "0/0 nodes are available: no nodes available to schedule pods")]


WARNED = [
    (["eval", "--policy", POLICIES, "--cluster", "{d}/empty.yaml", "{d}/pod.yaml"], 0),
    (["check", "--cluster", "{d}/empty-list.yaml", POLICIES], 1),  # the declared priority classes are missing from it: drift errors
    (["lint", "--policy", POLICIES, "--cluster", "{d}/comments.yaml", "{d}/pod.yaml"], 0),
]


@pytest.mark.parametrize("argv, want_code", WARNED, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_an_empty_cluster_file_is_read_with_one_warning(argv, want_code, d, capsys):
    code, out, err = run(argv, d, capsys)
    name = next(a for a in argv if a.startswith("{d}/")).removeprefix("{d}/")
    assert code == want_code, out + err
    assert err.splitlines() == [f"allot {argv[0]}: warning: cluster {name} holds no objects: read as an empty cluster (no nodes, pods or namespaces)"]


def test_a_cluster_file_with_objects_gets_no_warning(d, capsys):
    code, _, err = run(["eval", "--policy", POLICIES, "--cluster", SMALL, "{d}/pod.yaml"], d, capsys)
    assert (code, err) == (0, "")


def test_serve_reads_an_empty_cluster_file_with_the_warning(d, capsys):
    from webhook.server.serving import _load_cluster_file

    assert len(_load_cluster_file(str(d / "empty.yaml"))) == 0
    assert "warning: cluster " in capsys.readouterr().err


@pytest.mark.parametrize("name", ["empty.yaml", "comments.yaml", "empty-list.yaml"])
def test_lint_warns_of_a_file_that_holds_no_object(name, d, capsys):
    code, out, err = run(["lint", "--policy", POLICIES, f"{{d}}/{name}", "{d}/pod.yaml"], d, capsys)
    path = f"{d}/{name}"
    assert code == 0, out + err  # a warning: lint's exit codes fail on errors only (docs/lint.md)
    assert f"{path}:1:1: warning[ManifestEmpty] read 0 objects from {path} (no document, or an empty List)" in out.splitlines()
    assert "linted 2 files, 1 object: 0 errors, 1 warning" in out


def test_lint_counts_no_object_for_an_empty_file_in_json(d, capsys):
    code, out, _ = run(["lint", "--policy", POLICIES, "--format", "json", "{d}/empty.yaml"], d, capsys)
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["objects"] == 0 and doc["summary"]["warnings"] == 1
    assert [f["code"] for f in doc["findings"]] == ["ManifestEmpty"]


def test_lint_warns_of_an_empty_stdin(d, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8"))
    code, out, _ = run(["lint", "--policy", POLICIES, "-"], d, capsys)
    assert code == 0 and "-:1:1: warning[ManifestEmpty] read 0 objects from -" in out


def test_a_manifest_file_with_objects_gets_no_empty_warning(d, capsys):
    _, out, _ = run(["lint", "--policy", POLICIES, "{d}/pod.yaml"], d, capsys)
    assert "ManifestEmpty" not in out
