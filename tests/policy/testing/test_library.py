"""The shipped library: `allot test policies/` passes with more than zero cases.

NOTE: this test exercises the whole engine, including gang placement; it fails
honestly while a piece the library relies on is not built yet (e.g. placement
reports PlacementNotEvaluated instead of a domain).
"""

import pathlib

from webhook.cli import main

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_allot_test_policies_passes(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["test", "policies"])
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    passed, failed = (int(w) for w in lines[-1].replace(",", "").split()[::2])
    assert failed == 0, "\n".join(lines[-60:])
    assert passed > 0 and code == 0
    # every library case that expects a denial names its codes, so it cannot pass on another reason
    assert [line for line in lines if line.startswith("WARN")] == []


def test_every_library_directory_has_policies_and_tests():
    dirs = [d for d in (REPO / "policies").iterdir() if d.is_dir() and d.name != "fixtures"]
    assert len(dirs) >= 8
    for d in dirs:
        assert list(d.glob("*.policy")) and list(d.glob("*.test.yaml")), d.name


def test_the_whole_library_compiles_as_one_set():
    """The demo loads all of policies/ as ONE set: block names unique, declarations once."""
    from lang import compile_policies

    files = sorted((REPO / "policies").rglob("*.policy"))
    policy_set, diagnostics = compile_policies([(str(f), f.read_text()) for f in files])
    assert [str(d) for d in diagnostics] == []
    ids = [b.id for b in (*policy_set.quotas, *policy_set.fractions, *policy_set.gangs, *policy_set.agents, *policy_set.rules)]
    assert len(ids) == len(set(ids)) > 20
    assert [g.name for g in policy_set.gpus] == ["h100", "l4"]


def test_policies_doc_states_how_gang_sizes_are_written_as_the_library_writes_them():
    """docs/policies.md once recommended `min_members * gpus` while the library wrote `total_gpus`."""
    import re

    doc = (REPO / "docs" / "policies.md").read_text()
    [term] = re.findall(r"Sizes are written with `([^`]+)`", doc)
    policy = (REPO / "policies" / "training-gangs" / "gangs.policy").read_text()
    conditions = re.findall(r"require topology \S+ when (.+)", policy)
    assert conditions and all(c.strip().startswith(term) for c in conditions), (term, conditions)


def test_policies_doc_lists_no_failing_case_when_none_fails(capsys, monkeypatch):
    """A "Known gaps" entry about a case that fails on purpose must be true: some case fails."""
    doc = (REPO / "docs" / "policies.md").read_text()
    gaps = doc[doc.index("## Known gaps"):]
    monkeypatch.chdir(REPO)
    code = main(["test", "policies"])
    capsys.readouterr()
    assert ("fails on purpose" in gaps) == (code != 0)
    assert ("Every case of the library passes" in gaps) == (code == 0)
