"""Garbage test files (random YAML shapes where cases, before steps and cluster edits go) are refused
with located `file:line:` lines, never a traceback: the schema walk for did-you-mean hints included."""

from __future__ import annotations

import os

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.testing.runner import load_test_file

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

KEYS = ["name", "request", "expect", "before", "add", "remove", "persist", "allowed", "codes", "alowed", "kind",
        "cluster", "clustr", "dryRun", "operation", "namespace", "placement", "valu", "apiVersion", "cases", "reqest"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "x", "Pod", "CONNECT", "DELETE"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)), max_leaves=12)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}


@FUZZ
@given(case=st.dictionaries(st.sampled_from(KEYS), values, max_size=5), before=st.lists(values, max_size=3))
def test_garbage_cases_are_located_errors(tmp_path, case, before):
    body = {"cases": [{"name": "a", "request": POD, "expect": {"allowed": True}}, {**case, "before": before}]}
    path = tmp_path / "x.test.yaml"
    path.write_text(yaml.safe_dump(body))
    try:
        load_test_file(path)
    except ValueError as exc:
        lines = str(exc).splitlines()
        assert lines and all(line.startswith(f"{path}:") for line in lines), lines
