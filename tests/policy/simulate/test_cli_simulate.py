"""`allot simulate` end to end: the embedded example, the three trace formats, determinism, usage errors."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from test_traces import NODES_CSV, PODS_CSV

ROOT = pathlib.Path(__file__).resolve().parents[3]


def allot(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def openb(tmp_path_factory):
    d = tmp_path_factory.mktemp("openb")
    (d / "nodes.csv").write_text(NODES_CSV)
    (d / "pods.csv").write_text(PODS_CSV)
    return d


def test_embedded_example_runs_with_no_arguments():
    p = allot("simulate")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("allot simulate: example trace.jsonl (embedded) (allot) in trace time order")
    assert "objects    arrived 400" in p.stdout
    assert "quota      name" in p.stdout and "team-a" in p.stdout
    assert p.stderr == ""  # no progress bar when stderr is not a terminal


def test_same_inputs_and_seed_give_the_same_bytes(openb):
    args = ("simulate", "--cluster", str(openb / "nodes.csv"), "--trace", str(openb / "pods.csv"), "--saturate", "1.3", "--seed", "7", "--json")
    first, second = allot(*args), allot(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    other = allot(*args[:-3], "--seed", "8", "--json")
    assert json.loads(other.stdout)["inputs"]["seed"] == 8
    example = allot("simulate", "--json")
    assert example.stdout == allot("simulate", "--json").stdout


def test_openb_saturation_report(openb):
    p = allot("simulate", "--cluster", str(openb / "nodes.csv"), "--trace", str(openb / "pods.csv"), "--saturate", "1.3", "--json")
    rep = json.loads(p.stdout)
    assert rep["cluster"] == {"nodes": 3, "gpu_nodes": 2, "gpus_milli": 10000, "cpu_milli": 192000, "memory_bytes": 1310720 * 2**20}
    assert rep["gpu"]["arrived_demand_share"] >= 1.3
    assert rep["objects"]["arrived"] == rep["objects"]["bound"] + rep["objects"]["unplaceable"]
    assert rep["inputs"]["trace_format"] == "openb"


def test_progress_bar_on_request(openb):
    p = allot("simulate", "--cluster", str(openb / "nodes.csv"), "--trace", str(openb / "pods.csv"), "--progress")
    assert p.returncode == 0
    assert p.stderr.rstrip().endswith("100% 4/4 events")


def test_decision_log_trace_runs(tmp_path):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    line = {"ts": 5, "endpoint": "validate", "result": "allowed",
            "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "team-a", "object": pod,
                        "userInfo": {"username": "bob", "groups": []}}}
    (tmp_path / "log.jsonl").write_text(json.dumps(line) + "\n")
    p = allot("simulate", "--cluster", str(ROOT / "webhook/data/simulate/cluster.yaml"), "--trace", str(tmp_path / "log.jsonl"), "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["inputs"]["trace_format"] == "decision-log" and rep["objects"]["bound"] == 1


@pytest.mark.parametrize("args, want", [
    (("--trace", "x.jsonl"), "give --cluster FILE"),
    (("--cluster", "c.yaml"), "give --trace FILE"),
    (("--cluster", "missing.yaml", "--trace", "missing.jsonl"), "missing.jsonl: no such trace file"),
    (("--retry", "0", "--cluster", "c", "--trace", "t"), "--retry 0.0: give a positive number of seconds"),
    (("--deadline", "5", "--cluster", "c", "--trace", "t"), "--deadline applies to resubmission"),
    (("--saturate", "lots", "--cluster", "c", "--trace", "t"), "--saturate 'lots' is not a number"),
    (("--saturate", "1.3", "--retry", "5", "--cluster", "c", "--trace", "t"), "--retry has nothing to wait for"),
    (("--scheduler", "fgd2", "--cluster", "c", "--trace", "t"), "argument --scheduler: invalid choice: 'fgd2'"),
    (("--method", "artifact", "--cluster", "c", "--trace", "t"), "--method applies to --saturate X"),
    (("--seeds", "42-51", "--cluster", "c", "--trace", "t"), "--seeds applies to --saturate X"),
    (("--saturate", "1.3", "--seeds", "51-42", "--cluster", "c", "--trace", "t"), "--seeds '51-42': a range A-B needs A <= B"),
    (("--saturate", "1.3", "--seeds", "x", "--cluster", "c", "--trace", "t"), "--seeds 'x': give seeds as A-B"),
    (("--saturate", "1.3", "--seeds", "1-2", "--plot", "d", "--cluster", "c", "--trace", "t"), "--plot take one run"),
])
def test_usage_errors_exit_2_with_one_line(args, want):
    p = allot("simulate", *args)
    assert p.returncode == 2
    assert want in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_bad_scheduler_prints_the_usage_pointer():
    p = allot("simulate", "--scheduler", "best_fit")
    assert p.returncode == 2 and "(see allot simulate --help)" in p.stderr
    assert "'least-free-gpu', 'default', 'random', 'best-fit', 'packing', 'dot-product', 'clustering', 'fgd', 'default+steer'" in p.stderr


def test_cli_lists_every_model_of_the_library():
    from policy.simulate.scheduler import SCHEDULERS as OURS
    from policy.simulate.scores import ARTIFACT
    from webhook.cli.simulate import ARTIFACT_MODELS, SCHEDULERS

    assert SCHEDULERS == OURS + ARTIFACT + ("default+steer",) and ARTIFACT_MODELS == ARTIFACT


def test_seeds_report_the_mean_curve_of_the_artifact_method(openb):
    args = ("simulate", "--cluster", str(openb / "nodes.csv"), "--trace", str(openb / "pods.csv"), "--saturate", "1.3",
            "--method", "artifact", "--scheduler", "fgd", "--seeds", "1-3")
    p = allot(*args)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].endswith("saturating to 1.3x, method artifact, seeds 1-3 (3 runs)")
    assert [ln.split()[:2] for ln in lines[-4:]] == [["seed", "1"], ["seed", "2"], ["seed", "3"], ["mean"]]
    doc = json.loads(allot(*args, "--json").stdout)
    runs = doc["runs"]
    assert [r["seed"] for r in runs] == [1, 2, 3] and doc["inputs"]["seeds"] == [1, 2, 3]
    for x, mean in doc["mean_allocated_at_arrived"].items():
        assert mean == round(sum(r["allocated_at_arrived"][x] for r in runs) / 3, 2)
    one = json.loads(allot(*args[:-2], "--seed", "2", "--json").stdout)  # a single run has the same curve as its seed's row
    assert one["gpu"]["allocated_at_arrived"] == runs[1]["allocated_at_arrived"] and one["inputs"]["method"] == "artifact"


def test_bad_trace_record_is_a_located_usage_error(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"at": 0, "delete": "a/b"}\n{"at": "soon", "delete": "a/b"}\n')
    p = allot("simulate", "--cluster", str(ROOT / "webhook/data/simulate/cluster.yaml"), "--trace", str(tmp_path / "t.jsonl"))
    assert p.returncode == 2
    assert f"{tmp_path / 't.jsonl'}:2: 'at' must be a finite number of seconds, got 'soon'" in p.stderr


def test_policy_that_does_not_compile_exits_1(tmp_path):
    (tmp_path / "bad.policy").write_text("quota q {\n")
    p = allot("simulate", "--policy", str(tmp_path), "--cluster", str(ROOT / "webhook/data/simulate/cluster.yaml"),
              "--trace", str(ROOT / "webhook/data/simulate/trace.jsonl"))
    assert p.returncode == 1 and "bad.policy" in p.stderr


def test_bench_simulate_runs_a_small_synthetic_case():
    p = allot("bench", "simulate", "--only", "synthetic", "--nodes", "64", "--pods", "300", "--json")
    assert p.returncode == 0, p.stderr
    figures = json.loads(p.stdout)
    case = figures["cases"][0]
    assert (case["case"], case["nodes"], case["pods"]) == ("synthetic", 64, 300)
    assert 0 < case["bound"] <= 300 and case["rss_bytes"] > 0 and case["wall_s"] > 0


def test_against_reports_both_sides_and_the_differences():
    p = allot("simulate", "--against", str(ROOT / "webhook/data/simulate/against"), "--json")
    doc = json.loads(p.stdout)
    assert set(doc) == {"a", "b", "differences"}
    assert doc["a"]["denied_by_block"].get("rule team-c-no-whole-hosts") and not doc["b"]["denied_by_block"].get("rule team-c-no-whole-hosts")
    assert doc["differences"]["count"] == len(doc["differences"]["listed"]) > 0
    text = allot("simulate", "--against", str(ROOT / "webhook/data/simulate/against")).stdout
    assert "decisions that differ:" in text and "team-c/" in text


def test_bench_fidelity_sets_ours_beside_the_published_curve(openb, tmp_path):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text((openb / "nodes.csv").read_text())
    (tmp_path / "openb_pod_list_default.csv").write_text((openb / "pods.csv").read_text())
    p = allot("bench", "fidelity", "--openb", str(tmp_path), "--schedulers", "fgd", "--seeds", "1", "--json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)["rows"]
    assert (row["variant"], row["scheduler"]) == ("default", "fgd")
    published = json.loads((ROOT / "webhook/data/simulate/artifact_curves.json").read_text())["curves"]["default"]["fgd"]
    assert published["130"] == 95.39  # the paper's FGD on the default trace at 1.3x arrived
    assert "10" in row["ours"] and row["artifact"] == {x: published[x] for x in row["ours"]}
    assert all(row["diff"][x] == round(row["ours"][x] - published[x], 2) for x in row["ours"])
    assert row["within"] == (row["max_abs_diff"] <= 1.0)
    bad = allot("bench", "fidelity", "--openb", str(tmp_path), "--schedulers", "spread")
    assert bad.returncode == 2 and "the artifact's models are" in bad.stderr
