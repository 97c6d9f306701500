"""webhook.sources.read_policy_sources: files, directories (sorted, recursive), usage errors, bad bytes."""

import pytest

from webhook.cli import UsageError
from webhook.sources import read_policy_sources


def test_directory_is_every_policy_file_under_it_sorted(tmp_path):
    (tmp_path / "b.policy").write_text("b")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "z.policy").write_text("z")
    (tmp_path / "a" / "readme.md").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.policy").write_text("hidden")
    got = read_policy_sources([str(tmp_path)])
    assert [(p.removeprefix(str(tmp_path)), t) for p, t in got] == [("/a/z.policy", "z"), ("/b.policy", "b")]


def test_a_file_given_twice_is_read_once(tmp_path):
    p = tmp_path / "a.policy"
    p.write_text("x")
    assert len(read_policy_sources([str(p), str(tmp_path)])) == 1


def test_missing_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        read_policy_sources([str(tmp_path / "nope")])


def test_bad_bytes_become_replacement_characters_and_bom_is_dropped(tmp_path):
    p = tmp_path / "a.policy"
    p.write_bytes(b"\xef\xbb\xbfquota \xff")
    assert read_policy_sources([str(p)])[0][1] == "quota \ufffd"
