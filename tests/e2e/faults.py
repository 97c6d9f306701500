"""Faults the fault matrix (test_e2e_ledger_faults.py) puts on the kit: stalled TCP flows on loopback, an API server restart.

A stalled flow is a half-open connection: its packets go into an htb class of 8 bit/s on
`lo` (u32 filters on its ports), so an established connection stops delivering both ways
while new connections (other source ports) work. Only root can do it and only one qdisc
can be lo's root: `blocked_on_lo` takes a lock file, refuses to run over a root qdisc
someone else put there, and always deletes its own (a qdisc left on lo slows every
loopback connection on the machine; by hand: `tc qdisc del dev lo root`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import kit

LOCK = "/tmp/allot-e2e-lo-qdisc.lock"  # one stalling user of lo's root qdisc at a time (the lead's runs and this one)
RESULTS: list[str] = []  # one line a fault run: conftest prints them at the end of the session


def tc_unusable() -> str | None:
    """Why `blocked_on_lo` cannot run here (not root, no `tc`), or None."""
    if os.geteuid() != 0:
        return "stalling loopback flows needs root (tc on lo)"
    if shutil.which("tc") is None:
        return "no tc (iproute2) on this machine"
    return None


def _tc(*argv: str) -> str:
    r = subprocess.run(["tc", *argv], capture_output=True, text=True, timeout=10, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"tc {' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


@contextlib.contextmanager
def blocked_on_lo(flows: list[tuple[int | None, int | None]]):
    """TCP packets on lo whose (source port, destination port) match a flow (None: any) held at 8 bit/s: stalled, both ways if both are given."""
    assert flows
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        root = _tc("qdisc", "show", "dev", "lo").splitlines()
        if root and not root[0].startswith("qdisc noqueue"):
            raise RuntimeError(f"lo already has a root qdisc ({root[0].strip()}): not replacing another user's")
        _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb")  # no default class: unmatched traffic goes out unshaped
        try:
            _tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "8bit", "ceil", "8bit")
            for sport, dport in flows:
                match = ["match", "ip", "protocol", "6", "0xff"]
                match += ["match", "ip", "sport", str(sport), "0xffff"] if sport is not None else []
                match += ["match", "ip", "dport", str(dport), "0xffff"] if dport is not None else []
                _tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32", *match,
                    "flowid", "1:1")
            yield
        finally:
            _tc("qdisc", "del", "dev", "lo", "root")


def established_ports(pid: int, port: int) -> list[int]:
    """Local ports of the established loopback connections process `pid` has to `port` (`ss -tnp`)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{port} )"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return sorted({int(m.group(1)) for line in out.splitlines() if f"pid={pid}," in line
                   for m in [re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:" + str(port) + r"\b", line)] if m})


def half_open(pid: int, port: int) -> list[tuple[int, int]]:
    """Both directions of every connection `pid` has open to `port` now (connections it opens later are not in it)."""
    ports = established_ports(pid, port)
    return [f for p in ports for f in ((p, port), (port, p))]


def api_port(d: pathlib.Path) -> int:
    """The kit's API server port, from its kubeconfig."""
    server = next(line.split("server:", 1)[1].strip() for line in (d / "kubeconfig").read_text().splitlines() if "server:" in line)
    return int(server.rsplit(":", 1)[1].strip("/"))


def _gone(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # (a zombie has exited)
    except (OSError, IndexError):
        return True


def restart_apiserver(d: pathlib.Path) -> tuple[int, float, float]:
    """Stop the kit's kube-apiserver alone (SIGTERM, SIGKILL after 5 s) and start it with the same arguments and etcd.

    (new pid, seconds it took to stop, seconds until the new one was ready). On the kit a
    SIGTERMed API server stops listening at once, drains its requests, then lingers on its
    open connections until killed (stop.sh waits 15 s for it; a restart need not).
    """
    pidfile = d / "run" / "kube-apiserver.pid"
    pid = int(pidfile.read_text())
    argv = [a.decode() for a in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    assert argv and argv[0] == str(d / "bin" / "kube-apiserver"), argv[:1]  # the kit's own, not another's
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    deadline = t0 + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _gone(pid):
        os.kill(pid, signal.SIGKILL)
        while not _gone(pid):
            time.sleep(0.05)
    stopped = time.monotonic()
    # As start.sh launches it (setsid nohup, log appended): not this test's child, so stop.sh can stop it later.
    r = subprocess.run(["bash", "-c", 'log="$1"; shift; setsid nohup "$@" >> "$log" 2>&1 < /dev/null & echo $!', "_",
                        str(d / "run" / "kube-apiserver.log"), *argv], capture_output=True, text=True, timeout=10, check=True)
    new = int(r.stdout.strip())
    pidfile.write_text(f"{new}\n")
    kit.wait_for("the restarted API server to be ready", lambda: kit.api_ready(d), timeout=90, every=0.2)
    return new, stopped - t0, time.monotonic() - stopped
