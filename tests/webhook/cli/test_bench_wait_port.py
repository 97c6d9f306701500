"""The bench reads a child's port from its stderr log, even when another thread's log line shares that line."""

from __future__ import annotations

import pytest

from webhook.bench.serve import wait_port


class Running:
    """A child process that has not exited."""

    returncode = None

    def poll(self):
        return None


@pytest.mark.parametrize("text, marker, want_port", [
    ("allot serve: listening on https://127.0.0.1:8443\n", "allot serve: listening on", 8443),
    ("allot serve: listening on https://127.0.0.1:39911 2026-12-01 12:33:49,081 INFO allot.watch: X is not served (404): counted as empty\n",
     "allot serve: listening on", 39911),
    ("2026-12-01 INFO allot.reload: loaded\napi double listening on: 4242\n", "api double listening on", 4242),
])
def test_the_port_after_the_marker(tmp_path, text, marker, want_port):
    log = tmp_path / "child.err"
    log.write_text(text)
    assert wait_port(log, Running(), marker, limit=1.0) == want_port


def test_a_log_without_the_marker_stalls_with_its_tail(tmp_path):
    log = tmp_path / "child.err"
    log.write_text("INFO starting\n")
    with pytest.raises(RuntimeError, match="did not start: INFO starting"):
        wait_port(log, Running(), "allot serve: listening on", limit=0.2)
