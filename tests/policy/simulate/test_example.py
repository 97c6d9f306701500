"""The embedded example (webhook/data/simulate/) is what its generator makes, and its policies compile."""

import pathlib

import yaml

import lang
from policy.simulate.synthetic import example, trace_lines
from webhook.sources import read_policy_sources

DATA = pathlib.Path(__file__).resolve().parents[3] / "webhook" / "data" / "simulate"


def test_shipped_trace_and_cluster_match_the_generator():
    nodes, arrivals = example()
    assert (DATA / "trace.jsonl").read_text().splitlines() == trace_lines(arrivals)
    assert yaml.safe_load((DATA / "cluster.yaml").read_text())["items"] == nodes


def test_example_policies_compile():
    for sub in ("policy", "against"):
        ps, diags = lang.compile_policies(read_policy_sources([str(DATA / sub)]))
        assert ps is not None and not [d for d in diags if d.severity == "error"], diags
        assert [q.name for q in ps.quotas] == ["team-a", "team-b", "team-c"]
