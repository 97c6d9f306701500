"""A file that is not text, in every file argument of every command: one message, one exit code, no traceback.

The message is the one reader's (webhook/textfile.py): `PATH:LINE:COLUMN: not UTF-8 text (byte N: 0xHH)`,
byte N counted from 1. Commands that read one input refuse with exit 2; `lint` and `test`, which read
many files and report each, give the same message as that file's finding or error and exit 1.
Policy files are parsed text: their bad bytes are `E0004` diagnostics (tested last).
"""

from __future__ import annotations

import io
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from webhook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "tests" / "fixtures" / "cluster" / "small.yaml")
POLICIES = str(ROOT / "policies")
QUOTAS = ROOT / "policies" / "team-quotas" / "quotas.policy"
QUOTA = 'quota q {\n  for namespace == "x"\n  gpus 4\n}\n'
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml-vision}\nspec: {containers: [{name: c, image: i}]}\n"
TRACE = '{"at": 1, "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": []}}}\n'
BINARY = b"kind: Pod\n\xff\xfe\x00garbage"  # the first bad byte: the 11th, at line 2, column 1
WHERE = ":2:1: not UTF-8 text (byte 11: 0xff)"
LOG_LINE = re.compile(r"^(\S+ \S+ )?(DEBUG|INFO|WARNING|ERROR) allot\.")  # serve/demo log the policy load first


@dataclass
class Case:
    name: str
    argv: list[str]  # "{d}" is the fixture directory; "{bin}" the binary file
    code: int = 2
    stream: str = "err"  # where the one message line is: stderr (usage errors) or stdout (lint findings, test errors)
    stdin: bool = False  # the binary bytes arrive on stdin (`-`)
    shown: str = "{bin}"  # the path the message names


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("not-text")
    (root / "bin.yaml").write_bytes(BINARY)
    (root / "pod.yaml").write_text(POD)
    (root / "trace.jsonl").write_text(TRACE)
    for sub, cluster in (("suite", "../bin.yaml"), ("suite-ok", SMALL)):
        (root / sub).mkdir()
        (root / sub / "q.policy").write_text(QUOTA)
        (root / sub / "c.test.yaml").write_text(
            f"cluster: {cluster}\ncases:\n  - name: one\n    request: {{apiVersion: v1, kind: Pod, metadata: {{name: p, namespace: x}}, "
            "spec: {containers: [{name: c, image: i}]}}\n    expect: {allowed: true}\n")
    (root / "suite-ok" / "bin.test.yaml").write_bytes(BINARY)
    return root


CASES = [
    Case("eval REQUEST", ["eval", "--policy", POLICIES, "{bin}"]),
    Case("eval REQUEST on stdin", ["eval", "--policy", POLICIES, "-"], stdin=True, shown="-"),
    Case("eval --cluster", ["eval", "--policy", POLICIES, "--cluster", "{bin}", "{d}/pod.yaml"]),
    Case("eval --replay", ["eval", "--policy", POLICIES, "--replay", "{bin}"]),
    Case("eval --replay on stdin", ["eval", "--policy", POLICIES, "--replay", "-"], stdin=True, shown="-"),
    Case("check --cluster", ["check", "--cluster", "{bin}", POLICIES]),
    Case("place --cluster", ["place", "--cluster", "{bin}", "{d}/pod.yaml"]),
    Case("place GANG", ["place", "--cluster", SMALL, "{bin}"]),
    Case("simulate --cluster", ["simulate", "--cluster", "{bin}", "--trace", "{d}/trace.jsonl"]),
    Case("simulate --trace", ["simulate", "--cluster", SMALL, "--trace", "{bin}"]),
    Case("lint --cluster", ["lint", "--policy", POLICIES, "--cluster", "{bin}", "{d}/pod.yaml"]),
    Case("lint PATH", ["lint", "--policy", POLICIES, "{bin}"], code=1, stream="out"),
    Case("lint - (stdin)", ["lint", "--policy", POLICIES, "-"], code=1, stream="out", stdin=True, shown="-"),
    Case("test: a test file", ["test", "{d}/suite-ok/bin.test.yaml"], code=1, stream="out", shown="{d}/suite-ok/bin.test.yaml"),
    Case("test: its cluster file", ["test", "{d}/suite/c.test.yaml"], code=1, stream="out", shown="{d}/bin.yaml"),
    Case("serve --cluster", ["serve", "--policy", POLICIES, "--cluster", "{bin}", "--self-signed", "--certs-dir", "{d}/certs-a", "--port", "0"]),
    Case("demo --cluster", ["demo", "--cluster", "{bin}"]),
    Case("certs --inject", ["certs", "--service", "s", "--namespace", "n", "-o", "{d}/certs-b", "--inject", "{bin}"]),
    Case("bench eval --cluster", ["bench", "eval", "--cluster", "{bin}", "--runs", "10"]),
]
# A bundle is JSON that `allot compile` wrote: its refusal names the bundle, then the same words (no line: it is one line).
BUNDLE_CASES = [  # (argv, exit code: verify's 1 is its documented "not an intact bundle")
    (["bundle", "verify", "--pub", "{d}/signer.pub", "{bin}"], 1),
    (["serve", "--bundle", "{bin}", "--trust", "{d}/signer.pub", "--cluster", SMALL, "--self-signed", "--certs-dir", "{d}/certs-d", "--port", "0"], 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_binary_file_gets_the_one_message(case, d, capsys, monkeypatch):
    binary = str(d / "bin.yaml")
    argv = [a.replace("{d}", str(d)).replace("{bin}", binary) for a in case.argv]
    if case.stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BINARY), encoding="utf-8"))
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, err
    shown = case.shown.replace("{d}", str(d)).replace("{bin}", binary)
    # one shape: the place, then the one message (lint puts its finding's severity and code between)
    shape = re.compile(rf"{re.escape(shown)}:2:1: (error\[ManifestNotText\] )?not UTF-8 text \(byte 11: 0xff\)$")
    hits = [line for line in (out if case.stream == "out" else err).splitlines() if "not UTF-8" in line]
    assert len(hits) == 1 and shape.search(hits[0]), out + err
    assert code == case.code, out + err
    if case.stream == "err":  # a usage error: the one line is all of stderr, bar the log of a policy set loaded first
        lines = [line for line in err.splitlines() if not LOG_LINE.match(line)]
        assert len(lines) == 1 and lines[0].startswith(f"allot {argv[0]}: error: "), err


@pytest.mark.parametrize("argv, want_code", BUNDLE_CASES, ids=lambda a: a[0] if isinstance(a, list) else "")
def test_a_binary_bundle_gets_the_one_message(argv, want_code, d, capsys):
    from webhook.bundle import keygen

    if not (d / "signer.pub").exists():
        keygen(d / "signer")
    code = main([a.replace("{d}", str(d)).replace("{bin}", str(d / "bin.yaml")) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not LOG_LINE.match(line)]
    assert code == want_code and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].endswith("bad format: not UTF-8 text (byte 11: 0xff)"), err


@pytest.mark.parametrize("raw, want", [
    (b"\xff\xfek\x00i\x00", ":1:1: not UTF-8 text (byte 1: 0xff); it starts with a UTF-16 byte-order mark: save it as UTF-8"),
    (b"\xef\xbb\xbfkind: \xe9", ":1:7: not UTF-8 text (byte 10: 0xe9)"),  # the BOM counts as bytes, not as a column
    (b"a: 1\nb: caf\xc3\xa9 \xc3", ":2:9: not UTF-8 text (byte 15: 0xc3)"),  # a character cut short at the end
    (b"a: 1\nb: \x00", ":2:4: not UTF-8 text (byte 9: 0x00)"),  # a NUL byte: binary, as git judges it
])
def test_the_message_says_where_the_first_bad_byte_is(raw, want, tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_bytes(raw)
    assert main(["place", "--cluster", str(path), str(path)]) == 2
    assert capsys.readouterr().err == f"allot place: error: {path}{want}\n"


def test_a_log_line_that_is_not_text_is_located_in_the_stream(tmp_path, capsys):
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": "\xff"}\n')
    assert main(["eval", "--policy", POLICIES, "--replay", str(log)]) == 2
    assert capsys.readouterr().err == f"allot eval: error: {log}:3:8: not UTF-8 text (byte 26: 0xff)\n"


def test_serve_with_a_binary_cluster_exits_2_without_listening(d):
    argv = ["serve", "--policy", POLICIES, "--cluster", str(d / "bin.yaml"), "--self-signed", "--certs-dir", str(d / "certs-c"), "--port", "0"]
    done = subprocess.run([sys.executable, "-m", "webhook", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "listening" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == f"allot serve: error: {d / 'bin.yaml'}{WHERE}"


@pytest.mark.parametrize("argv, code", [(["check", "{p}"], 1), (["test", "{t}"], 1)])
def test_a_policy_file_that_is_not_text_is_an_E0004_diagnostic(argv, code, tmp_path, capsys):
    (tmp_path / "q.policy").write_bytes(QUOTAS.read_bytes().replace(b"cohort ml\n", b"cohort ml # caf\xe9\n", 1))
    (tmp_path / "c.test.yaml").write_text("cases:\n  - name: one\n    request: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
                                          "    expect: {allowed: true}\n")
    argv = [a.replace("{p}", str(tmp_path / "q.policy")).replace("{t}", str(tmp_path / "c.test.yaml")) for a in argv]
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert "E0004" in out and "q.policy:6:" in out and "codec" not in out + err, out + err
