"""read_cluster_file: the I/O shell turns every file problem into one UsageError line."""

import pytest

from webhook.errors import UsageError
from webhook.clusterfile import read_cluster_file


@pytest.mark.parametrize("content,want", [
    (None, "no such cluster-state file"),
    (b"\xff\xfe\x00bad", "not UTF-8 text"),
    (b"kind: List\nitems:\n- kind: Pod\n  metadata: {}\n", "line 3: document.items[0]: Pod has no metadata.name"),
    (b"a: [b\n", "malformed YAML"),
])
def test_bad_files_are_usage_errors(tmp_path, content, want):
    path = tmp_path / "cluster.yaml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError) as err:
        read_cluster_file(str(path))
    assert want in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        read_cluster_file(str(tmp_path))


def test_bom_file_loads(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xef\xbb\xbfapiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    assert read_cluster_file(str(path)).node("n") is not None
