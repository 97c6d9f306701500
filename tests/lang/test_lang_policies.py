"""Every file under policies/ checks clean: as one tree, and each directory with its ancestors' files."""

import pathlib

import pytest

import lang
from webhook.sources import read_policy_sources

ROOT = pathlib.Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
FILES = sorted(POLICIES.rglob("*.policy")) if POLICIES.exists() else []
DIRS = sorted({p.parent for p in FILES})


def with_ancestors(directory: pathlib.Path) -> list[str]:
    """The directory's own *.policy plus those directly in each ancestor up to policies/ (the test runner's rule)."""
    chain = [directory] + [a for a in directory.parents if POLICIES in (a, *a.parents)]
    return sorted(str(p) for d in chain for p in d.glob("*.policy"))


def errors_of(paths: list[str]) -> list[str]:
    _, diags = lang.compile_policies(read_policy_sources(paths))
    return [f"{d.span}: {d.code} {d.message}" for d in diags if d.severity == "error"]


def test_policy_files_are_collected():
    # the repository ships a policy library; if it is emptied this must be a visible decision
    assert all(p.suffix == ".policy" and p.is_file() for p in FILES)
    assert len(FILES) == len(set(FILES))


@pytest.mark.parametrize("directory", DIRS, ids=[str(d.relative_to(ROOT)) for d in DIRS])
def test_directory_checks_clean_with_its_ancestors(directory):
    assert errors_of(with_ancestors(directory)) == []


def test_whole_tree_checks_clean_as_one_set():
    assert errors_of([str(POLICIES)] if FILES else []) == []


def test_every_policy_file_is_in_some_checked_set():
    covered = {p for d in DIRS for p in with_ancestors(d)}
    assert {str(p) for p in FILES} <= covered
