"""Semantic checks: one small policy per mistake, with the code and position we want."""

import pathlib
from dataclasses import dataclass

import pytest

import lang
from lang.ir import Type

FIXTURES = pathlib.Path(__file__).with_name("fixtures")
HEAD = 'gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }\ntopology fabric {\n  rack "r"\n  host "h"\n}\n'


def compile_one(src: str, head: bool = True):
    return lang.compile_policies([("t.policy", (HEAD if head else "") + src)])


def codes(src: str, head: bool = True) -> list[str]:
    return [d.code for d in compile_one(src, head)[1]]


@dataclass
class Case:
    name: str
    src: str
    want_codes: list[str]


CASES = [
    Case("string vs gpu amount", 'rule r {\n for gpus > "8"\n deny "x"\n}', ["E0201"]),
    Case("unknown field", 'rule r {\n for gpuz > 1\n deny "x"\n}', ["E0101"]),
    Case("unknown gpu model", "quota q {\n gpus 8\n gpus 4 of a100\n}", ["E0102"]),
    Case("unknown model compared", 'rule r {\n when gpu_model == "a100"\n deny "x"\n}', ["E0102"]),
    Case("known model compared", 'rule r {\n when gpu_model == "h100" or has(gpu_model) and gpu_model != h100\n deny "x"\n}', []),
    Case("unknown topology", "gang g {\n require topology fab.rack\n}", ["E0103"]),
    Case("unknown level", "gang g {\n require topology fabric.zone\n}", ["E0104"]),
    Case("unknown level literal", 'rule r {\n when topology.required == fabric.zone\n deny "x"\n}', ["E0104"]),
    Case("duplicate quota", "quota q {\n gpus 1\n}\nquota q {\n gpus 2\n}", ["E0105"]),
    Case("duplicate statement", "quota q {\n gpus 1\n gpus 2\n}", ["E0106"]),
    Case("two defaults", "priority a 1 default\npriority b 2 default", ["E0107"]),
    Case("unknown mode", "quota q {\n gpus 1\n mode loud\n}", ["E0108"]),
    Case("unknown verb", "agents {\n allow exec pods\n}", ["E0109"]),
    Case("set a map", 'rule r {\n set labels["x"] = labels\n}', ["E0201"]),
    Case("set an amount", 'rule r {\n set annotations["gpus"] = total_gpus\n}', []),
    Case("set spec", 'rule r {\n set spec["x"] = "y"\n}', ["E0112"]),
    Case("unknown interpolation", 'rule r {\n deny "{gpuz}"\n}', ["E0113"]),
    Case("identity reads the workload", "agents {\n identity gpus > 0\n}", ["E0114"]),
    Case("never true: none", 'rule r {\n when gpu_model == none\n deny "x"\n}', ["E0301"]),
    Case("never true: negative", 'rule r {\n for gpus < 0\n deny "x"\n}', ["E0301"]),
    Case("never true: contradiction", 'rule r {\n for gpus > 8 and gpus < 4\n deny "x"\n}', ["E0301"]),
    Case("never true: two names", 'rule r {\n for namespace == "a" and namespace == "b"\n deny "x"\n}', ["E0301"]),
    Case("never true: literals", 'rule r {\n when 1 > 2\n deny "x"\n}', ["E0301"]),
    Case("per-model over total", "quota q {\n gpus 8\n gpus 16 of h100\n}", ["E0302"]),
    Case("min over max", "fraction f {\n min 0.5\n max 0.25\n}", ["E0303"]),
    Case("fraction over one", "fraction f {\n max 1.5\n}", ["E0304"]),
    Case("priority out of range", "priority p 2000000000", ["E0305"]),
    Case("borrow without cohort", "quota q {\n gpus 8\n borrow 2\n}", ["E0306"]),
    Case("memory without unit", 'rule r {\n when gpu_memory > 80\n deny "x"\n}', ["E0202"]),
    Case("gpu amount finer than 1m", 'rule r {\n when gpus > 0.0001\n deny "x"\n}', ["E0202"]),
    Case("gpu amount with memory unit", 'rule r {\n when gpus > 1Gi\n deny "x"\n}', ["E0201"]),
    Case("non-bool condition", 'rule r {\n when gpus\n deny "x"\n}', ["E0203"]),
    Case("ordering strings", 'rule r {\n when namespace < "b"\n deny "x"\n}', ["E0204"]),
    Case("cohort of one", "quota q {\n cohort solo\n gpus 8\n}", ["W0302"]),
    Case("borrow with the model cap as the whole quota", "quota q {\n cohort c\n gpus 192 of h100\n borrow 64\n}\nquota p {\n cohort c\n gpus 8\n}", ["W0305"]),
    Case("borrow with the model cap equal to the total", "quota q {\n cohort c\n gpus 192\n gpus 192 of h100\n borrow 64\n}\nquota p {\n cohort c\n gpus 64\n}", ["W0305"]),
    Case("borrow with the model cap under the total", "quota q {\n cohort c\n gpus 192\n gpus 128 of h100\n borrow 64\n}\nquota p {\n cohort c\n gpus 64\n}", []),
    Case("borrow 0 with a model cap", "quota q {\n cohort c\n gpus 192 of h100\n borrow 0m\n}\nquota p {\n cohort c\n gpus 8\n}", []),
    # cohort trees (docs/reclaim.md): parents, cycles, limits that can never be used
    Case("cohort tree", "cohort org {\n gpus 8\n}\ncohort c {\n parent org\n borrow 8\n weight 2\n}\nquota q {\n cohort c\n gpus 8\n weight 1.5\n}", []),
    Case("unknown parent cohort", "cohort c {\n parent orgg\n}\ncohort org {\n gpus 1\n}\nquota q {\n cohort c\n gpus 8\n}", ["E0320", "W0320"]),
    Case("cohort cycle", "cohort a {\n parent b\n}\ncohort b {\n parent a\n}\nquota q {\n cohort a\n gpus 8\n}", ["E0321"]),
    Case("cohort without members", "cohort empty {\n gpus 8\n}", ["W0320"]),
    Case("root cohort borrows", "cohort c {\n borrow 4\n}\nquota q {\n cohort c\n gpus 8\n}\nquota p {\n cohort c\n gpus 8\n}", ["W0321"]),
    Case("borrow beyond what the tree lends", "quota q {\n cohort c\n gpus 8\n borrow 64\n}\nquota p {\n cohort c\n gpus 8\n lend 4\n}", ["W0322"]),
    Case("borrow within what the tree lends", "quota q {\n cohort c\n gpus 8\n borrow 4\n}\nquota p {\n cohort c\n gpus 8\n lend 4\n}", []),
    Case("borrow from a parent pool", "cohort org {\n gpus 16\n}\ncohort c {\n parent org\n}\nquota q {\n cohort c\n gpus 8\n borrow 16\n}", []),
    Case("lend nobody may borrow", "quota q {\n cohort c\n gpus 8\n borrow 0\n}\nquota p {\n cohort c\n gpus 8\n lend 4\n}", ["W0323"]),
    Case("weight without a cohort", "quota q {\n gpus 8\n weight 2\n}", ["W0324"]),
    Case("negative weight", "quota q {\n cohort c\n gpus 8\n weight -1\n}\nquota p {\n cohort c\n gpus 8\n}", ["E0001"]),
    Case("cohort pool by model", "cohort c {\n gpus 8 of h100\n}\nquota q {\n cohort c\n gpus 8\n}\nquota p {\n cohort c\n gpus 8\n}", ["E0114"]),
    Case("always true", 'rule r {\n for true\n deny "x"\n}', ["W0301"]),
    Case("hidden topology requirement", "gang g {\n require topology fabric.rack when total_gpus > 8\n require topology fabric.host\n}", ["W0303"]),
    Case("never true: gpus always present", 'rule r {\n for not has(gpus)\n deny "x"\n}', ["E0301"]),
    Case("maybe present", 'rule r {\n for not has(gpu_model) and not has(labels["x"])\n deny "x"\n}', []),
    Case("connect on pods", "agents {\n allow connect pods\n}", ["W0304"]),
    Case("connect on exec", "agents {\n allow connect, create pods/exec, pods\n}", ["W0304"]),
    Case("gpu without memory", 'gpu l4 { product "NVIDIA-L4" }', ["E0111"]),
    Case("rule that does nothing", 'rule r {\n when gpus > 0\n}', ["E0111"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_reports(case):
    assert codes(case.src) == case.want_codes


def test_errors_withhold_the_policy_set_but_warnings_do_not():
    assert compile_one("quota q {\n gpus 1\n gpus 2\n}")[0] is None
    ps, diags = compile_one("quota q {\n cohort solo\n gpus 8\n}")
    assert [d.severity for d in diags] == ["warning"] and ps is not None


def test_three_mistakes_give_three_located_diagnostics():
    src = (FIXTURES.parent / "golden" / "three_mistakes.policy").read_text()
    _, diags = lang.compile_policies([("x.policy", src)])
    assert [(d.code, d.span.line, d.span.col) for d in diags] == [("E0201", 5, 7), ("E0102", 7, 14), ("E0303", 11, 3)]


def test_all_errors_of_a_set_are_collected_across_files():
    _, diags = lang.compile_policies([("a.policy", "quota q {\n gpus 1\n}\n"), ("b.policy", "quota q {\n gpus 1 of x\n}\nrule r {\n for gpuz\n deny \"x\"\n}\n")])
    assert sorted((d.span.path, d.code) for d in diags) == [("b.policy", "E0101"), ("b.policy", "E0105")]


def test_contract_example_checks_clean_and_lowers_exactly():
    src = (FIXTURES / "contract.policy").read_text()
    ps, diags = lang.compile_policies([("contract.policy", src)])
    assert diags == []
    assert [q.name for q in ps.quotas] == ["team-a", "team-b"]
    a, b = ps.quotas
    assert (a.gpus, a.per_model, a.gpu_memory, a.borrow, a.lend, a.cohort) == (32000, (("h100", 16000),), 2 * 2**40, 8000, None, "research")
    assert (b.gpus, b.lend, b.borrow) == (16000, 8000, None)
    f = ps.fractions[0]
    assert (f.min, f.max, f.memory_floor, f.per_gpu, f.mode) == (100, 500, 10 * 2**30, 4, "enforce")
    g = ps.gangs[0]
    assert [(r.topology, r.level, r.when.right.value) for r in g.topology] == [("fabric", "rack", 8000), ("fabric", "block", 64000)]
    assert (g.require_min_members, g.on_unplaceable) == (True, "deny")
    assert [(p.name, p.value, p.preempts, p.default) for p in ps.priorities] == [
        ("critical", 1000, True, False), ("prod", 500, False, False), ("batch", 100, False, True)]
    ag = ps.agents[0]
    assert [(sorted(x.operations), sorted(x.resources)) for x in ag.allows] == [(["CREATE"], ["pods"]), (["DELETE"], ["pods"])]
    assert ag.allows[0].when.items[1].right.value == 250 and ag.allows[0].when.items[1].right.type is Type.GPU
    assert ag.denies[0].message.parts == ("agents may not escalate",)
    assert [r.mode for r in ps.rules] == ["warn", "enforce", "enforce"]
    parts = ps.rules[1].actions[0].message.parts
    assert parts[0] == "a sleeping agent holds " and parts[1].name == "gpus" and parts[2] == " GPUs; release them"
    s = ps.rules[2].actions[0]
    assert (s.target, s.key, s.value.key, s.value.target.name) == ("labels", "team", "team", "namespace.labels")
    assert ps.sources == (("contract.policy", src),)
    assert [m.memory for m in ps.gpus] == [80 * 2**30, 24 * 2**30]


def test_numeric_literals_take_the_type_of_the_other_side():
    ps, _ = compile_one('rule r {\n for has(gpu_memory) and has(fraction)\n when gpu_memory >= 10Gi and fraction < 500m and 2 <= pods\n deny "x"\n}')
    items = ps.rules[0].when.items
    assert [(i.right.value if i.right.__class__.__name__ == "Lit" else i.left.value) for i in items] == [10 * 2**30, 500, 2]
    assert [i.left.type for i in items[:2]] == [Type.BYTES, Type.FRACTION]


def test_policy_set_keeps_source_order_across_files():
    ps, _ = lang.compile_policies([("b.policy", "quota b {\n gpus 1\n}\n"), ("a.policy", "quota a {\n gpus 1\n}\n")])
    assert [q.name for q in ps.quotas] == ["a", "b"]
