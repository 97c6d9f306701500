"""Every command's bad input: exit 2 (or the documented code) with one line on stderr and never a traceback."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest
import yaml

from webhook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "tests" / "fixtures" / "cluster" / "small.yaml")
POLICIES = str(ROOT / "policies")
LOG_LINE = re.compile(r"^(\S+ \S+ )?(DEBUG|INFO|WARNING|ERROR) allot\.")  # serve/demo log a rejected load first


@dataclass
class Case:
    name: str
    argv: list[str]  # "{d}" is the fixture directory
    want_code: int
    want_stderr: str  # a fragment of the one line
    logs_ok: bool = False


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "bad.yaml").write_text("items: [unclosed\n")
    (root / "bad.json").write_text('{"kind": ')
    (root / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "pod-garbage.yaml").write_text(yaml.safe_dump({"kind": "Pod", "metadata": {"name": "x"}, "spec": {"nodeName": ["n1"]}}))
    (root / "deep.yaml").write_text("a: " + "[" * 1200 + "]" * 1200)  # past Python's recursion limit; 60000 crashed libyaml's C loader
    (root / "tests").mkdir()
    (root / "tests" / "q.policy").write_text((ROOT / "policies" / "team-quotas" / "quotas.policy").read_text())
    (root / "tests" / "deep.test.yaml").write_text("a: " + "[" * 1200 + "]" * 1200)
    (root / "adir").mkdir()
    (root / "adir.policy").mkdir()
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "file").write_text("x")
    return root


CASES = [
    # check / fmt / test: policy paths
    Case("check missing path", ["check", "{d}/missing.policy"], 2, "no such file or directory"),
    Case("check dangling symlink", ["check", "{d}/dangling"], 2, "no such file or directory"),
    Case("check empty directory", ["check", "{d}/adir"], 2, "no .policy files"),
    Case("check bad --format", ["check", "--format", "xml", POLICIES], 2, "invalid choice"),
    Case("check directory named .policy", ["check", "{d}/adir.policy"], 2, ""),
    Case("fmt missing path", ["fmt", "{d}/missing.policy"], 2, "no such file or directory"),
    Case("test missing path", ["test", "{d}/missing"], 2, "no such file or directory"),
    Case("test not a test file", ["test", "{d}/bad.yaml"], 2, "not a test file"),
    Case("test --junit into a directory", ["test", "--junit", "{d}/adir", POLICIES + "/team-quotas"], 2, "is a directory"),
    # (place and certs --inject read YAML with the same loader: main() turns its RecursionError into the same line)
    Case("test deeply nested test file", ["test", "{d}/tests"], 2, "nested too deeply"),
    Case("test unknown flag", ["test", "--bogus"], 2, "unrecognized arguments"),
    # eval: request, policy and cluster files
    Case("eval missing request", ["eval", "--policy", POLICIES, "{d}/missing.yaml"], 2, "no such request file"),
    Case("eval malformed YAML", ["eval", "--policy", POLICIES, "{d}/bad.yaml"], 2, "not valid YAML/JSON"),
    Case("eval malformed JSON", ["eval", "--policy", POLICIES, "{d}/bad.json"], 2, "not valid YAML/JSON"),
    Case("eval binary request", ["eval", "--policy", POLICIES, "{d}/binary.yaml"], 2, "not UTF-8"),
    Case("eval request a directory", ["eval", "--policy", POLICIES, "{d}/adir"], 2, "is a directory, expected a request file"),
    Case("eval request a JSON list", ["eval", "--policy", POLICIES, "{d}/list.json"], 2, ""),
    Case("eval deeply nested request", ["eval", "--policy", POLICIES, "{d}/deep.yaml"], 2, "nested too deeply"),
    Case("eval deeply nested cluster", ["eval", "--policy", POLICIES, "--cluster", "{d}/deep.yaml", "{d}/pod-garbage.yaml"], 2, "nested deeper than"),
    Case("eval missing policy", ["eval", "--policy", "{d}/missing", "{d}/pod-garbage.yaml"], 2, "no such file or directory"),
    Case("eval malformed cluster", ["eval", "--policy", POLICIES, "--cluster", "{d}/bad.yaml", "{d}/pod-garbage.yaml"], 2, "malformed YAML"),
    Case("eval cluster with a bad field", ["eval", "--policy", POLICIES, "--cluster", "{d}/pod-garbage.yaml", "{d}/pod-garbage.yaml"], 2,
         "spec.nodeName must be a string"),
    Case("eval --now not a number", ["eval", "--policy", POLICIES, "--now", "soon", "x"], 2, "invalid float value"),
    Case("eval --now nan", ["eval", "--policy", POLICIES, "--now", "nan", "{d}/pod-garbage.yaml"], 2, "finite number"),
    Case("eval bad --operation", ["eval", "--policy", POLICIES, "--operation", "PATCH", "x"], 2, "invalid choice"),
    # place
    Case("place missing cluster", ["place", "--cluster", "{d}/missing.yaml", "{d}/bad.yaml"], 2, "no such cluster-state file"),
    Case("place malformed cluster", ["place", "--cluster", "{d}/bad.yaml", "{d}/bad.yaml"], 2, "malformed YAML"),
    Case("place missing gang", ["place", "--cluster", SMALL, "{d}/missing.yaml"], 2, "no such gang file"),
    Case("place bad --topology", ["place", "--cluster", SMALL, "--topology", ",,=", "{d}/bad.yaml"], 2, "--topology"),
    # serve (each refused before anything listens)
    Case("serve no cluster source", ["serve", "--policy", POLICIES, "--port", "0"], 2, "--cluster"),
    Case("serve bad port", ["serve", "--policy", POLICIES, "--cluster", SMALL, "--port", "70000"], 2, "is not a port"),
    Case("serve negative --max-body", ["serve", "--policy", POLICIES, "--cluster", SMALL, "--max-body", "-5"], 2, "--max-body"),
    Case("serve nan --reload-interval", ["serve", "--policy", POLICIES, "--cluster", SMALL, "--reload-interval", "nan"], 2, "--reload-interval"),
    Case("serve bad --on-error", ["serve", "--on-error", "maybe"], 2, "invalid choice"),
    Case("serve decision log in a missing directory", ["serve", "--policy", POLICIES, "--cluster", SMALL, "--decision-log", "{d}/no/such/log"], 2,
         "--decision-log"),
    Case("serve missing policy", ["serve", "--policy", "{d}/missing", "--cluster", SMALL, "--self-signed", "--certs-dir", "{d}/certs-a", "--port", "0"],
         2, "no such file or directory", logs_ok=True),
    Case("serve malformed cluster", ["serve", "--policy", POLICIES, "--cluster", "{d}/bad.yaml", "--self-signed", "--certs-dir", "{d}/certs-b", "--port", "0"],
         2, "malformed YAML", logs_ok=True),
    Case("serve missing TLS files", ["serve", "--policy", POLICIES, "--cluster", SMALL, "--tls-cert", "{d}/x.crt", "--tls-key", "{d}/x.key", "--port", "0"],
         2, "cannot load TLS certificate", logs_ok=True),
    # demo
    Case("demo missing policy", ["demo", "--policy", "{d}/missing"], 2, "no such file or directory", logs_ok=True),
    Case("demo malformed cluster", ["demo", "--cluster", "{d}/bad.yaml"], 2, "malformed YAML", logs_ok=True),
    Case("demo --log into a directory", ["demo", "--log", "{d}/adir"], 2, "Is a directory"),
    # compile
    Case("compile missing policy", ["compile", "--policy", "{d}/missing", "-o", "{d}/out-a"], 2, "no such file or directory"),
    Case("compile output is a file", ["compile", "--policy", POLICIES, "-o", "{d}/file"], 2, "cannot write"),
    Case("compile bad --ca-bundle", ["compile", "--policy", POLICIES, "-o", "{d}/out-b", "--ca-bundle", "{d}/bad.yaml"], 2, "not a PEM certificate"),
    Case("compile missing --sign key", ["compile", "--policy", POLICIES, "-o", "{d}/out-c", "--sign", "{d}/missing.key"], 2, "no such key file"),
    Case("compile empty --service", ["compile", "--policy", POLICIES, "-o", "{d}/out-d", "--service", ""], 2, "not a DNS label"),
    Case("compile bad --namespace", ["compile", "--policy", POLICIES, "-o", "{d}/out-e", "--namespace", "Team A"], 2, "not a DNS label"),
    Case("compile bad --port", ["compile", "--policy", POLICIES, "-o", "{d}/out-f", "--port", "0"], 2, "is not a port"),
    Case("compile --port not a number", ["compile", "--policy", POLICIES, "-o", "{d}/out-g", "--port", "https"], 2, "invalid int value"),
    # certs
    Case("certs output is a file", ["certs", "--service", "s", "--namespace", "n", "-o", "{d}/file"], 2, "cannot write"),
    Case("certs --days 0", ["certs", "--service", "s", "--namespace", "n", "-o", "{d}/certs-c", "--days", "0"], 2, "--days"),
    Case("certs empty --service", ["certs", "--service", "", "--namespace", "n", "-o", "{d}/certs-d"], 2, "not a DNS label"),
    Case("certs missing --inject", ["certs", "--service", "s", "--namespace", "n", "-o", "{d}/certs-e", "--inject", "{d}/missing.yaml"], 2,
         "no such file or directory"),
    Case("certs malformed --inject", ["certs", "--service", "s", "--namespace", "n", "-o", "{d}/certs-f", "--inject", "{d}/bad.yaml"], 2, "not YAML"),
    # bundle
    Case("bundle no action", ["bundle"], 2, "expected an action"),
    Case("bundle keygen into a directory", ["bundle", "keygen", "{d}/adir"], 2, "is a directory"),
    Case("bundle sign missing key", ["bundle", "sign", "--key", "{d}/missing.key", "{d}/bad.json"], 2, "cannot read"),
    Case("bundle sign key not PEM", ["bundle", "sign", "--key", "{d}/bad.yaml", "{d}/bad.json"], 2, "not an unencrypted PEM private key"),
    Case("bundle verify key not PEM", ["bundle", "verify", "--pub", "{d}/bad.yaml", "{d}/bad.json"], 2, "not a PEM public key"),
    # bench (bad values are refused before anything is timed)
    Case("bench no benchmark", ["bench"], 2, "name a benchmark"),
    Case("bench check N negative", ["bench", "check", "-5"], 2, "N must be"),
    Case("bench check --repeat 0", ["bench", "check", "--repeat", "0", "10"], 2, "--repeat"),
    Case("bench eval missing policy", ["bench", "eval", "--policy", "{d}/missing", "--runs", "10"], 2, "no such file or directory"),
    Case("bench eval malformed cluster", ["bench", "eval", "--cluster", "{d}/bad.yaml", "--runs", "10"], 2, "malformed YAML"),
    Case("bench eval --runs -1", ["bench", "eval", "--runs", "-1"], 2, "--runs"),
    Case("bench place --nodes 0", ["bench", "place", "--nodes", "0"], 2, "must be positive"),
    Case("bench place bad --levels", ["bench", "place", "--levels", "nope", "--nodes", "10"], 2, "--levels"),
    Case("bench serve --requests 0", ["bench", "serve", "--requests", "0"], 2, "--requests"),
    Case("unknown command", ["frobnicate"], 2, "invalid choice"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input_is_one_line_and_an_exit_code(case, d, capsys):
    argv = [a.replace("{d}", str(d)) for a in case.argv]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default, as for a user: some test dependencies raise it
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    finally:
        sys.setrecursionlimit(limit)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if not (case.logs_ok and LOG_LINE.match(line))]
    assert "Traceback" not in err + out
    assert (code, len(lines)) == (case.want_code, 1), err
    assert lines[0].startswith("allot") and case.want_stderr in lines[0], lines[0]


@pytest.mark.parametrize("argv", [["check", "/nonexistent/x.policy"], ["eval", "--policy", "policies", "--now", "soon", "x"]])
def test_the_console_entry_point_prints_one_line(argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "webhook", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


def test_an_internal_error_is_one_line_and_exit_70(monkeypatch, capsys):
    import webhook.cli.check as check

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(check, "run", broken)
    monkeypatch.delenv("ALLOT_TRACEBACK", raising=False)
    assert main(["check", POLICIES]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: KeyError" in err and "Traceback" not in err
