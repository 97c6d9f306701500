"""The workload-expression subject fields and `set limits[...]`: typed, absence-checked, located errors."""

from dataclasses import dataclass

import pytest

import lang
from lang import ir
from lang.format import format_source


def diags(src: str):
    return lang.compile_policies([("t.policy", src)])


@dataclass
class Case:
    name: str
    src: str
    want_codes: list
    want_line_col: tuple | None = None


CASES = [
    Case("counts need no guard", 'rule r {\n when gpu_pods > 1 and gpu_limit_mismatches > 0 and memory_share\n deny "x"\n}', []),
    Case("controller may be absent: != needs a guard", 'rule r {\n when controller != "Job"\n deny "x"\n}', ["E0205"], (2, 7)),
    Case("guarded controller", 'rule r {\n when has(controller) and controller != "Job"\n deny "x"\n}', []),
    Case("requested memory may be absent", 'rule r {\n when gpu_memory_requested < 10Gi\n deny "x"\n}', ["E0205"]),
    Case("requested memory is a quantity", 'rule r {\n when has(gpu_memory_requested) and gpu_memory_requested < 10\n deny "x"\n}', ["E0202"]),
    Case("gang_scheduler is a string", 'rule r {\n when gang_scheduler == 3\n deny "x"\n}', ["E0201"]),
    Case("gpu_pods never negative", 'rule r {\n when gpu_pods < 0\n deny "x"\n}', ["E0301"]),
    Case("has(gpu_pods) always true", 'rule r {\n when not has(gpu_pods)\n deny "x"\n}', ["E0301"]),
    Case("a field compared with a field", 'rule r {\n for controller == kind\n deny "{controller} {gpu_pods}"\n}', []),
    Case("set a GPU limit to its request", 'rule r {\n set limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"]\n}', []),
    Case("set a cpu limit", 'rule r {\n set limits["cpu"] = requests["cpu"]\n}', ["E0112"], (2, 13)),
    Case("set a bare prefix", 'rule r {\n set limits["nvidia.com/"] = requests["nvidia.com/"]\n}', ["E0112"]),
    Case("set a limit to another request", 'rule r {\n set limits["nvidia.com/gpu"] = requests["amd.com/gpu"]\n}', ["E0112"], (2, 33)),
    Case("set a limit to a number", 'rule r {\n set limits["nvidia.com/gpu"] = 2\n}', ["E0112"]),
    Case("set requests", 'rule r {\n set requests["nvidia.com/gpu"] = "1"\n}', ["E0112"]),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.name)
def test_checks(c):
    _, found = diags(c.src)
    assert [d.code for d in found if d.severity == "error"] == c.want_codes
    if c.want_line_col:
        d = next(d for d in found if d.code == c.want_codes[0])
        assert (d.span.line, d.span.col) == c.want_line_col


def test_set_limit_lowers_to_its_resource_and_formats_back():
    src = 'rule fill {\n  set limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"]\n  set limits["amd.com/gpu"] = requests["amd.com/gpu"]\n}\n'
    ps, found = diags(src)
    assert found == [] and [(type(a), a.resource) for a in ps.rules[0].actions] == [(ir.SetLimit, "nvidia.com/gpu"), (ir.SetLimit, "amd.com/gpu")]
    assert format_source(src, "t.policy") == src
