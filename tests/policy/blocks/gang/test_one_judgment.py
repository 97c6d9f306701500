"""One gang judgment (issue 11, problem 3): `allot place --policy` and `allot eval` answer every gang fixture alike.

Same input, same answer: each gang object of every library test file and of the
scenario fixtures below is decided by `allot eval` and placed by `allot place` on the
same cluster and policy; a file of several objects is placed whole and compared with
admission deciding its objects in order (the last GPU member answers for the gang).
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml
from tests.policy.blocks.gang.gangs_builders import DECLS, L4, member, node, podgroup, request

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.placement.request import group_of
from policy.subject.normalize import normalize_object
from webhook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[4]
GANG_CODES = {"GangUnplaceable", "GangNotYetPlaceable", "GangModelNotAllowed"}


def _is_gang_object(obj: dict) -> bool:
    if obj.get("kind") in ("PodGroup", "Workload"):
        return True
    w = normalize_object(obj, ClusterSnapshot())
    return obj.get("kind") == "Pod" and w.gang is not None and w.total_gpus > 0


def _library_fixtures():
    """(id, policy dir, cluster objects, [gang object]) for every `before`-free gang case of the policy library."""
    out = []
    for path in sorted(ROOT.glob("policies/*/*.test.yaml")):
        doc = yaml.safe_load(path.read_text())
        if "gang " not in "".join(p.read_text() for p in path.parent.glob("*.policy")):
            continue
        for case in doc.get("cases") or ():
            req, cluster = case.get("request"), case.get("cluster", doc.get("cluster"))
            if case.get("before") or not isinstance(req, dict) or req.get("kind") == "AdmissionReview" or not _is_gang_object(req):
                continue
            if case.get("operation", doc.get("operation", "CREATE")) != "CREATE":
                continue
            if isinstance(cluster, str):
                cluster = yaml.safe_load((path.parent / cluster).read_text())
            items = (cluster or {}).get("items") or []
            out.append((f"{path.parent.name}: {case['name']}", ROOT / "policies", items, [req]))  # the library is one policy set
    return out


MIXED = [node(f"h1-{i}", "r1") for i in range(12)] + [node(f"h{r}-{i}", f"r{r}") for r in (2, 3) for i in range(8)] + \
    [node(f"l9-{i}", "r9", product=L4) for i in range(10)]
SMALL = [node(f"s{r}-{i}", f"r{r}") for r in (1, 2) for i in range(2)] + [node("s3-0", "r3"), node("s3-1", "r3"), node("s3-2", "r3")]
RACK_WHEN = """gang training {
  for labels["acme.io/workload"] == "training"
  require topology fabric.rack when total_gpus > 8
  on unplaceable deny
}
"""
RACK_ALWAYS = RACK_WHEN.replace(" when total_gpus > 8", "")
MODELS_H100 = RACK_ALWAYS.replace("  require topology", "  models h100\n  require topology")
VOLCANO = podgroup("job", 3, gpus=17, tasks={"master": 1, "worker": 2}, family="volcano")
COSCHED = podgroup("pg", 4, gpus=16)


def _scenarios():
    """(id, policy text, cluster objects, gang objects): problems 2, 3 and 4 of issue 11."""
    vol = [member("job-master-0", "job", 1, family="volcano", task="master"),
           member("job-worker-0", "job", 8, family="volcano", task="worker"),
           member("job-worker-1", "job", 8, family="volcano", task="worker")]
    cos = [member(f"pg-{i}", "pg", 4) for i in range(4)]
    return [
        ("mixed: a PodGroup of unknown model", RACK_ALWAYS, MIXED, [podgroup("big", 9, gpus=72)]),
        ("mixed: a PodGroup under models h100", MODELS_H100, MIXED, [podgroup("big", 9, gpus=72)]),
        ("mixed: a PodGroup and its H100 members", RACK_ALWAYS, MIXED, [podgroup("big", 9, gpus=72)] + [member(f"big-{i}", "big", 8) for i in range(9)]),
        ("a PodGroup file alone", RACK_WHEN, SMALL, [COSCHED]),
        ("a PodGroup and its 4 pods: total_gpus is the gang's", RACK_WHEN, SMALL, [COSCHED, *cos]),
        ("one member of the PodGroup", RACK_WHEN, [*SMALL, COSCHED], [cos[0]]),
        ("a GPU-less PodGroup", RACK_ALWAYS, SMALL, [podgroup("cpu", 3)]),
        ("Volcano master and workers", RACK_ALWAYS, SMALL, [VOLCANO, *vol]),
        ("Volcano workers first", RACK_ALWAYS, SMALL, [VOLCANO, *reversed(vol)]),
        ("a Volcano master alone", RACK_ALWAYS, [*SMALL, VOLCANO], [vol[0]]),
    ]


def _policy_dir(tmp_path, text: str) -> pathlib.Path:
    d = tmp_path / "policy"
    d.mkdir()
    (d / "decls.policy").write_text(DECLS)
    (d / "gang.policy").write_text(text)
    return d


def _write(tmp_path, name: str, objs) -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump_all(objs) if isinstance(objs, list) else yaml.safe_dump(objs))
    return str(p)


def _place(capsys, cluster: str, policy, gang: str) -> dict:
    code = main(["place", "--cluster", cluster, "--policy", str(policy), gang])
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["fits"] else 3)
    return out


def _eval(capsys, cluster: str, policy, obj_file: str) -> dict:
    main(["eval", "--policy", str(policy), "--cluster", cluster, "--now", "0", "--explain", "--format", "json", obj_file])
    return json.loads(capsys.readouterr().out)["decision"]


def _same(decision: dict, placed: dict, what: str) -> None:
    gang = [r for r in decision["reasons"] if r["block"].startswith("gang ") and r["code"] in GANG_CODES]
    if decision["placement"] is not None:
        assert placed["fits"], (what, placed["reason"])
        assert (placed["level"], placed["domain"]) == (decision["placement"]["level"], decision["placement"]["value"]), what
    elif gang:
        assert not placed["fits"], (what, gang[0]["message"], placed["reason"])
        assert (gang[0]["code"] == "GangNotYetPlaceable") is (placed["reasons"][0]["code"] == "ModelUnknown"), what
        assert gang[0]["message"].split(": ", 1)[1] == placed["reason"], what
    elif placed["reasons"] and placed["reasons"][0]["code"] == "NothingToPlace":  # a GPU-less gang passes both
        assert placed["fits"] and not any(r["block"].startswith("gang ") and r["code"] in GANG_CODES for r in decision["reasons"]), what
    else:  # the policy required no topology of this gang
        assert placed["decided_by"] is None, (what, placed["decided_by"])


LIBRARY = _library_fixtures()


def test_the_library_has_gang_fixtures():
    assert len(LIBRARY) >= 5


@pytest.mark.parametrize("fixture", LIBRARY, ids=lambda f: f[0])
def test_eval_and_place_agree_on_library_gangs(fixture, tmp_path, capsys):
    _name, policy, items, (obj,) = fixture
    cluster = _write(tmp_path, "cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": items})
    gang = _write(tmp_path, "gang.yaml", obj)
    _same(_eval(capsys, cluster, policy, gang), _place(capsys, cluster, policy, gang), _name)


@pytest.mark.parametrize("scenario", _scenarios(), ids=lambda s: s[0])
def test_eval_and_place_agree_on_each_object(scenario, tmp_path, capsys):
    name, text, items, objs = scenario
    policy = _policy_dir(tmp_path, text)
    groups = [o for o in objs if o["kind"] != "Pod"]
    cluster = _write(tmp_path, "cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": [*items, *groups]})
    for i, obj in enumerate(objs):
        one = _write(tmp_path, f"obj-{i}.yaml", obj)
        _same(_eval(capsys, cluster, policy, one), _place(capsys, cluster, policy, one), f"{name}: {obj['metadata']['name']}")


@pytest.mark.parametrize("scenario", [s for s in _scenarios() if len(s[3]) > 1], ids=lambda s: s[0])
def test_a_whole_file_places_as_admission_decides_its_objects_in_order(scenario, tmp_path, capsys):
    """`serve`'s path: the group, then each member (members seen are remembered); the last GPU member answers as place does."""
    name, text, items, objs = scenario
    policy = _policy_dir(tmp_path, text)
    cluster = _write(tmp_path, "cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": items})
    placed = _place(capsys, cluster, policy, _write(tmp_path, "gang.yaml", objs))
    ps, diags = compile_policies([("decls.policy", DECLS), ("gang.policy", text)])
    assert ps is not None, diags
    eng, snap = Engine(ps), ClusterSnapshot.from_objects(items)
    last = None
    for obj in objs:
        d = eng.decide(request(obj), snap, 0.0, reserve=False)
        if obj["kind"] == "PodGroup":
            snap.apply("ADDED", obj)
        else:
            assert group_of(normalize_object(obj, snap), snap) is not None
            last = d
    _same(last.to_json(), placed, name)
