"""`lint` outputs: text like `check`, JSON, SARIF 2.1.0 for code scanning, JUnit with one case per object."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from tests.webhook.lint.lint_builders import deployment, job, line_of, write_policy

from webhook.cli import main

H100 = "NVIDIA-H100-80GB-HBM3"

# The parts of the SARIF 2.1.0 schema that GitHub code scanning reads (required members and enums as the spec has them).
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["tool", "results"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name", "rules"],
                    "properties": {"rules": {"type": "array", "items": {
                        "type": "object", "required": ["id", "shortDescription"],
                        "properties": {"shortDescription": {"type": "object", "required": ["text"]}}}}}}}},
                "results": {"type": "array", "items": {
                    "type": "object", "required": ["ruleId", "level", "message", "locations"],
                    "properties": {
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "message": {"type": "object", "required": ["text"]},
                        "locations": {"type": "array", "minItems": 1, "items": {
                            "type": "object", "required": ["physicalLocation"],
                            "properties": {"physicalLocation": {
                                "type": "object", "required": ["artifactLocation", "region"],
                                "properties": {"artifactLocation": {"type": "object", "required": ["uri"]},
                                               "region": {"type": "object", "required": ["startLine"],
                                                          "properties": {"startLine": {"type": "integer", "minimum": 1}}}}}}}}}}}},
        }},
    },
}


@pytest.fixture
def repo(tmp_path):
    policy = write_policy(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.yaml").write_text(deployment(gpus="8", model=H100) + "---\n" + job(gpus="1"))
    (tmp_path / "m" / "b.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n- not an object\n")
    return policy, str(tmp_path / "m")


def _run(capsys, *argv):
    rc = main(["lint", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_text_lines_and_summary(capsys, repo):
    policy, path = repo
    rc, out, _ = _run(capsys, "--policy", policy, path)
    assert rc == 1
    text = deployment(gpus="8", model=H100)
    assert f"{path}/a.yaml:{line_of(text, 'metadata:')}:1: error[RuleDenied] no-huge: web: more than 4 GPUs per pod" in out
    assert f"{path}/b.yaml:5:1: error[ManifestNotAnObject]" in out
    last = out.splitlines()[-1]
    assert last.startswith("linted 2 files, 4 objects; 1 skipped (kinds the policy set does not govern): 2 errors, ")
    assert "capacity not judged (no --cluster" in last


def test_json(capsys, repo):
    policy, path = repo
    rc, out, _ = _run(capsys, "--policy", policy, "--format", "json", path)
    doc = json.loads(out)
    assert rc == 1
    assert doc["summary"] | {"warnings": 0, "notes": 0} == {
        "files": 2, "objects": 4, "skipped": 1, "errors": 2, "warnings": 0, "notes": 0,
        "capacity_judged": False, "capacity_not_judged_findings": 0}
    denied = next(f for f in doc["findings"] if f["code"] == "RuleDenied" and f["severity"] == "error")
    assert denied["block"] == "rule no-huge" and denied["object"] == "Deployment team/web" and denied["field"] == "metadata"


def test_sarif_is_valid_and_rules_are_block_ids(capsys, repo):
    policy, path = repo
    rc, out, _ = _run(capsys, "--policy", policy, "--format", "sarif", path)
    log = json.loads(out)
    jsonschema.validate(log, SARIF_SUBSET)
    run = log["runs"][0]
    rule_ids = {r["id"] for r in run["tool"]["driver"]["rules"]}
    assert {"rule no-huge", "rule needs-model", "ManifestNotAnObject"} <= rule_ids
    assert {r["ruleId"] for r in run["results"]} == rule_ids
    huge = next(r for r in run["results"] if r["ruleId"] == "rule no-huge")
    assert huge["level"] == "error"
    assert huge["locations"][0]["physicalLocation"]["region"]["startLine"] == 3
    assert huge["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == f"{path}/a.yaml"
    assert rc == 1


def test_junit_one_case_per_object_failure_per_error(capsys, repo):
    policy, path = repo
    rc, out, _ = _run(capsys, "--policy", policy, "--format", "junit", path)
    root = ET.fromstring(out.split("\n", 1)[1])
    cases = root.findall(".//testcase")
    names = sorted(c.get("name") for c in cases)
    assert names == ["(invalid object, line 5)", "Deployment team/web (line 1)",
                     f"Job team/batch (line {len(deployment(gpus='8', model=H100).splitlines()) + 2})"]
    failed = {c.get("name"): [f.get("type") for f in c.findall("failure")] for c in cases}
    assert failed["Deployment team/web (line 1)"] == ["rule no-huge"]
    assert failed["(invalid object, line 5)"] == ["ManifestNotAnObject"]
    assert root.get("tests") == "3" and root.get("failures") == "2"
    assert rc == 1
