"""Trace formats: Allot's own (JSONL, YAML), a served decision log, and the openb CSVs."""

import json

import pytest

from policy.subject.demand import pod_demand
from policy.simulate.openb import is_openb, openb_nodes, openb_pods
from policy.simulate.resources import NodeSelection, node_allocatable, pod_requests
from policy.simulate.trace import Arrival, Departure, TraceError, is_decision_log, parse_allot, parse_decision_log

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0001,64000,262144,2,P100
openb-node-0002,96000,786432,8,G2
"""
PODS_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,100,0
openb-pod-0001,6000,12288,1,460,,LS,Running,10,50,10
openb-pod-0002,88000,327680,8,1000,P100|T4,LS,Running,20,,20
openb-pod-0003,4000,4096,0,0,,BE,Running,30,40,30
"""


def test_openb_nodes_are_real_node_objects():
    nodes = openb_nodes(NODES_CSV, "n.csv")
    assert [n["metadata"]["name"] for n in nodes] == ["openb-node-0000", "openb-node-0001", "openb-node-0002"]
    p100 = nodes[1]
    assert p100["status"]["allocatable"] == {"cpu": "64000m", "memory": "262144Mi", "pods": "110", "nvidia.com/gpu": "2"}
    assert p100["metadata"]["labels"]["nvidia.com/gpu.product"] == "P100"
    assert p100["metadata"]["labels"]["nvidia.com/gpu.memory"] == "16384"
    assert "nvidia.com/gpu.memory" not in nodes[2]["metadata"]["labels"]  # G2: undisclosed
    assert node_allocatable(p100).cpu == 64000 and node_allocatable(p100).memory == 262144 * 2**20


@pytest.mark.parametrize("row, want_gpus, want_fraction, want_cpu, want_duration", [
    (0, 1000, None, 12000, 100.0),
    (1, 460, 460, 6000, 40.0),      # HAMi gpucores 46: an exact share
    (2, 8000, None, 88000, None),   # no deletion time: runs to the end
    (3, 0, None, 4000, 10.0),
])
def test_openb_pods_map_to_whole_or_hami_pods(row, want_gpus, want_fraction, want_cpu, want_duration):
    trace = openb_pods(PODS_CSV, "p.csv")
    a = trace.events[row]
    demand = pod_demand(a.obj)
    assert (demand.gpus, demand.fraction) == (want_gpus, want_fraction)
    assert pod_requests(a.obj)[0] == want_cpu
    assert a.duration == want_duration
    assert a.obj["metadata"]["namespace"] == "openb"


def test_openb_gpu_spec_becomes_node_affinity():
    a = openb_pods(PODS_CSV, "p.csv").events[2]
    sel = NodeSelection(a.obj)
    assert sel.matches({"nvidia.com/gpu.product": "T4"}) and not sel.matches({"nvidia.com/gpu.product": "G2"})


# The artifact's multi-GPU variants carry only the first five columns (no times, no gpu_spec).
SHORT_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
openb-pod-0000,12000,16384,1,1000
openb-pod-0001,6000,12288,1,460
openb-pod-0002,88000,327680,8,1000
openb-pod-0003,4000,4096,0,0
"""


@pytest.mark.parametrize("text, want", [
    (NODES_CSV, ("nodes",)), (PODS_CSV, ("pods",)), (SHORT_CSV, ("pods",)), ('{"at": 0}', ()),
])
def test_openb_detection(text, want):
    assert tuple(k for k in ("nodes", "pods") if is_openb(text, k)) == want


@pytest.mark.parametrize("csv, want", [
    ("name,cpu_milli\nx,1\n", "p.csv:1: not an openb CSV: missing column(s)"),
    (PODS_CSV.replace("0,100,0", "zero,100,0"), "p.csv:2: column creation_time: 'zero' is not a whole non-negative number"),
    (PODS_CSV.replace("1,460", "1,465"), "p.csv:3: gpu_milli 465 is not a whole percent"),
    (SHORT_CSV.replace("6000,12288,1,460", "6000,12288,1"), "p.csv:3: column gpu_milli is missing"),
    (SHORT_CSV.replace("88000,327680", "88000,-5"), "p.csv:4: column memory_mib: '-5' is not a whole non-negative number"),
    (SHORT_CSV.replace(",8,1000", ",8,500"), "p.csv:4: a GPU share (gpu_milli 500) of 8 GPUs"),
])
def test_openb_errors_are_located(csv, want):
    with pytest.raises(TraceError, match="^" + want.replace("(", r"\(").replace(")", r"\)")):
        openb_pods(csv, "p.csv")


def test_short_openb_pod_list_reads_like_the_long_one_without_times():
    short, long = openb_pods(SHORT_CSV, "s.csv"), openb_pods(PODS_CSV, "p.csv")
    assert [a.at for a in short.events] == [0.0] * 4 and all(a.duration is None for a in short.events)  # file order, run to the end
    assert [a.where for a in short.events] == [f"s.csv:{n}" for n in range(2, 6)]
    for a, b in zip(short.events, long.events):
        spec_a, spec_b = a.obj["spec"], b.obj["spec"]
        assert spec_a["containers"] == spec_b["containers"]
    assert "affinity" not in short.events[2].obj["spec"]  # no gpu_spec column: any GPU model


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}}


def test_allot_jsonl_and_yaml_read_the_same():
    jsonl = "\n".join([json.dumps({"at": 5, "object": POD, "duration": 60}), "", json.dumps({"at": 70, "delete": "ns/p"})])
    yaml_text = "- at: 5\n  duration: 60\n  object: " + json.dumps(POD) + "\n- at: 70\n  delete: ns/p\n"
    for text in (jsonl, yaml_text):
        trace = parse_allot(text, "t")
        assert [type(e) for e in trace.events] == [Arrival, Departure]
        assert trace.events[0].at == 5.0 and trace.events[0].duration == 60.0 and trace.events[1].key == "ns/p"


@pytest.mark.parametrize("record, want", [
    ({"object": POD}, "t:1: 'at' must be a finite number of seconds, got None"),
    ({"at": -1, "object": POD}, "t:1: 'at' must not be negative"),
    ({"at": 1}, "t:1: a record holds exactly one of 'object'"),
    ({"at": 1, "delete": "nope"}, "t:1: 'delete' must be 'namespace/name'"),
    ({"at": 1, "object": POD, "colour": 1}, "t:1: unknown field(s) colour"),
    ({"at": 1, "object": {"kind": "Pod"}}, "t:1: 'object' must be a Kubernetes object with metadata.name"),
    ({"at": 1, "object": POD, "duration": "long"}, "t:1: 'duration' must be a finite number"),
])
def test_allot_format_errors_are_located(record, want):
    with pytest.raises(TraceError) as err:
        parse_allot(json.dumps(record), "t")
    assert str(err.value).startswith(want)


def test_bad_json_line_and_bad_yaml_are_located():
    with pytest.raises(TraceError, match=r"^t:2: not a JSON record"):
        parse_allot('{"at": 1, "delete": "a/b"}\n{nope', "t")
    with pytest.raises(TraceError, match=r"^t:\d+:\d+: not valid YAML"):
        parse_allot("- at: [1\n", "t")


def test_non_pod_objects_are_skipped_with_a_reason():
    trace = parse_allot(json.dumps({"at": 1, "object": {**POD, "kind": "Job"}}), "t")
    assert trace.events == [] and trace.skipped == [("t:1", "Job objects are not simulated yet (pods only)")]


def test_decision_log_lines_become_arrivals_with_their_user():
    req = {"uid": "u1", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "ns",
           "userInfo": {"username": "alice", "groups": ["devs"]}, "object": POD}
    lines = [
        json.dumps({"ts": 1000.5, "endpoint": "mutate", "result": "allowed", "request": req}),
        json.dumps({"ts": 1000.6, "endpoint": "validate", "result": "allowed", "request": req}),  # same request: once
        json.dumps({"ts": 1010, "endpoint": "validate", "result": "allowed",
                    "request": {**req, "uid": "u2", "operation": "DELETE", "name": "p", "object": None}}),
        json.dumps({"ts": 1020, "endpoint": "validate", "result": "allowed"}),
        "garbage",
    ]
    assert is_decision_log("\n".join(lines))
    trace = parse_decision_log(lines, "log")
    assert [type(e) for e in trace.events] == [Arrival, Departure]
    assert trace.events[0].user == "alice" and trace.events[0].groups == ("devs",) and trace.events[0].at == 0.0
    assert trace.events[1].at == 9.5 and trace.events[1].key == "ns/p"
    assert [why for _, why in trace.skipped] == [
        "no request logged (serve with --log-requests to make lines replayable)", "not JSON"]
