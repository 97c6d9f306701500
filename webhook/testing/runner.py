"""`allot test` I/O: find `*.test.yaml` files, read them strictly, compile each policy set once, run cases.

A test file in directory D runs against the policy set made of every `*.policy` in D
plus those in each ancestor of D up to (and including) the PATH root given.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import pathlib
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from policy.testing.cases import DEFAULT_NOW, Case, CaseResult, DuplicateCase, TestFile, build_review, case_warnings, run_case
from policy.testing.hints import did_you_mean
from policy.testing.names import unknown_names
from webhook.errors import UsageError
from webhook.sources import read_policy_file
from webhook.textfile import decode, read_bytes

SUFFIX = ".test.yaml"


@dataclass(frozen=True, slots=True)
class Target:
    """One test file and the root up to which ancestor policies join its set."""

    path: pathlib.Path
    root: pathlib.Path


@dataclass(slots=True)
class CaseOutcome:
    """A case as reported: its file, its name and what happened."""

    file: str
    name: str
    result: CaseResult
    line: int = 1  # where the case starts in its file
    warnings: tuple[str, ...] = ()  # what makes the case weaker than it looks; informs, exit unchanged

    @property
    def id(self) -> str:
        """`file::name`, what --filter matches."""
        return f"{self.file}::{self.name}"


@dataclass(slots=True)
class Run:
    """Everything `allot test` observed, for the text, JUnit and coverage reports."""

    outcomes: list[CaseOutcome] = field(default_factory=list)
    file_errors: list[tuple[str, str]] = field(default_factory=list)  # (file, one-line message)
    blocks: set[tuple[str, str]] = field(default_factory=set)  # (location, id) of governing blocks of sets used
    exercised: set[tuple[str, str]] = field(default_factory=set)  # (location, id) seen in Decision.blocks

    @property
    def failed(self) -> int:
        """Failed cases plus files that could not be read at all."""
        return sum(not o.result.passed for o in self.outcomes) + len(self.file_errors)

    @property
    def passed(self) -> int:
        """Cases that met every expectation."""
        return sum(o.result.passed for o in self.outcomes)


def display(path: pathlib.Path) -> str:
    """A path relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(pathlib.Path.cwd().resolve()))
    except ValueError:
        return str(path)


def find_targets(paths: list[str]) -> list[Target]:
    """Test files under each PATH (a directory searched recursively, or one test file)."""
    targets: list[Target] = []
    for raw in paths or ["."]:
        p = pathlib.Path(raw)
        if p.is_dir():
            found = sorted(p.rglob("*" + SUFFIX))
            # hidden directories (.git, .venv, …) never hold the project's tests
            targets += [Target(f, p) for f in found if f.is_file() and not _hidden(f.relative_to(p))]
        elif p.is_file():
            if not p.name.endswith(SUFFIX):
                raise UsageError(f"{raw}: not a test file (expected *{SUFFIX})")
            targets.append(Target(p, p.parent))
        else:
            raise UsageError(f"{raw}: no such file or directory")
    return targets


def _hidden(rel: pathlib.Path) -> bool:
    return any(part.startswith(".") for part in rel.parts[:-1])


def policy_files(target: Target) -> tuple[pathlib.Path, ...]:
    """`*.policy` of the test file's directory and of its ancestors up to the root."""
    root = target.root.resolve()
    d = target.path.parent.resolve()
    dirs = [d]
    while d != root and root in d.parents:
        d = d.parent
        dirs.append(d)
    return tuple(f for d in reversed(dirs) for f in sorted(d.glob("*.policy")) if f.is_file())


def _line_map(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Document path -> 1-based line, so schema errors point into the file."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            out[path + (k.value,)] = k.start_mark.line + 1
            _line_map(v, path + (k.value,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, path + (i,), out)
    return out


def _located(err: dict, lines: dict[tuple, int]) -> tuple[int, str]:
    """The line and the dotted document path of one pydantic error (union tags dropped)."""
    loc = tuple(err["loc"])
    dup = (err.get("ctx") or {}).get("error")
    if isinstance(dup, DuplicateCase):  # raised by the file's validator, so pydantic locates it at the top
        loc = ("cases", dup.index, "name")
    path: tuple = ()
    for part in loc:
        if path + (part,) in lines:
            path += (part,)
    shown = path + ((loc[-1],) if err["type"] == "missing" and loc else ())
    dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in shown).lstrip(".")
    return lines.get(path, 1), dotted or "(top)"


def _message(err: dict, lines: dict[tuple, int]) -> str:
    dup = (err.get("ctx") or {}).get("error")
    if isinstance(dup, DuplicateCase):
        return f"two cases are named {dup.name!r}; the first is cases[{dup.first}] at line {lines.get(('cases', dup.first), 1)}"
    return err["msg"]


def case_lines(node: yaml.Node | None) -> dict[int, int]:
    """Case index -> the 1-based line its entry starts on, for reports that point at a case."""
    lines = _line_map(node) if node is not None else {}
    return {p[1]: line for p, line in lines.items() if len(p) == 2 and p[0] == "cases" and isinstance(p[1], int)}


@dataclass(frozen=True, slots=True)
class LoadedFile:
    """A validated test file and where each case starts."""

    tests: TestFile
    lines: dict[int, int]
    paths: dict[tuple, int] = field(default_factory=dict)  # document path -> line, for errors found after reading


def load_test_file(path: pathlib.Path) -> TestFile:
    """Parse and strictly validate one test file; ValueError carries `file:line: message` lines."""
    return read_test_file(path).tests


def read_test_file(path: pathlib.Path) -> LoadedFile:
    """`load_test_file`, keeping the line of each case."""
    shown = display(path)
    text = _text(path, "test")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ValueError(f"{shown}:{(mark.line + 1) if mark else 1}: invalid YAML: {exc.problem}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ValueError(f"{shown}:1: a test file is a mapping with `cases:`")
    try:
        return LoadedFile(TestFile.model_validate(data), case_lines(node), _line_map(node) if node is not None else {})
    except ValidationError as exc:
        lines = _line_map(node)
        msgs = []
        for err in exc.errors():
            line, where = _located(err, lines)
            msg = f"{shown}:{line}: {where}: {_message(err, lines)}{did_you_mean(err)}"
            if msg not in msgs:
                msgs.append(msg)
        raise ValueError("\n".join(msgs)) from None


def _text(path: pathlib.Path, what: str) -> str:
    """The file's text by the one reader; ValueError (`shown:line:col: not UTF-8 text …`) as other file errors are."""
    try:
        return decode(read_bytes(str(path), what), display(path))
    except UsageError as exc:
        raise ValueError(str(exc)) from None


class _Clusters:
    """Cluster states by file, parsed once; each case gets its own fresh snapshot."""

    def __init__(self) -> None:
        self._files: dict[pathlib.Path, list[dict]] = {}

    def objects(self, spec: str | dict | None, base: pathlib.Path) -> list[dict]:
        """The objects of an inline List or of a List file relative to `base`."""
        if spec is None:
            return []
        if isinstance(spec, dict):
            return _items(spec)
        path = (base / spec).resolve()
        if path not in self._files:
            if not path.is_file():
                raise ValueError(f"cluster file not found: {display(path)}")
            docs = [d for d in yaml.safe_load_all(_text(path, "cluster-state")) if d]
            self._files[path] = [o for d in docs for o in _items(d)]
        return self._files[path]


def _items(doc: Any) -> list[dict]:
    if not isinstance(doc, dict):
        raise ValueError("a cluster state is a Kubernetes List or object")
    if isinstance(doc.get("items"), list):
        return [o for o in doc["items"] if isinstance(o, dict)]
    return [doc]


class _Sets:
    """Compiled policy sets by their file list: each set compiles once per run."""

    def __init__(self, run: Run) -> None:
        self._cache: dict[tuple, tuple[Any, str | None]] = {}
        self._run = run

    def get(self, files: tuple[pathlib.Path, ...], target: Target) -> tuple[Any, str | None]:
        """(policy set, None) or (None, error message)."""
        if files not in self._cache:
            self._cache[files] = self._compile(files, target)
        return self._cache[files]

    def _compile(self, files: tuple[pathlib.Path, ...], target: Target) -> tuple[Any, str | None]:
        if not files:
            where = display(target.path.parent)
            return None, f"no *.policy files in {where} or its ancestors up to {display(target.root)}"
        try:
            from lang import compile_policies
        except ImportError:
            return None, "the policy compiler is not built yet (lang.compile_policies is missing)"
        try:  # read as `allot check` reads them: bad bytes become E0004 diagnostics, located
            sources = [(display(f), read_policy_file(f)) for f in files]
        except UsageError as exc:
            return None, f"cannot read the policy set: {exc}"
        try:
            policy_set, diagnostics = compile_policies(sources)
        except Exception as exc:  # a compiler bug must not become a traceback for the user
            return None, f"the policy compiler failed: {type(exc).__name__}: {exc}"
        errors = [d for d in diagnostics if getattr(d, "severity", "error") == "error"]
        if policy_set is None or errors:
            shown = "; ".join(str(d) for d in (errors or diagnostics)[:3])
            return None, f"policy set does not compile: {shown or 'no diagnostics given'}"
        for block in _governing(policy_set):
            self._run.blocks.add((str(block.span), block.id))
        return policy_set, None


def _governing(policy_set: Any) -> list[Any]:
    return [*policy_set.quotas, *policy_set.fractions, *policy_set.gangs, *policy_set.agents, *policy_set.rules]


def _decider(policy_set: Any, objects: list[dict], mode: str | None):
    """A fresh engine and snapshot per case, so reservations never leak between cases."""
    try:
        from policy.cluster.snapshot import ClusterSnapshot
        from policy.engine import Engine
    except ImportError as exc:
        raise RuntimeError(f"the policy engine is not built yet ({exc.name} is missing)") from None
    engine = Engine(policy_set, mode_override=mode)
    snapshot = ClusterSnapshot.from_objects(copy.deepcopy(objects))
    decide = lambda review, mutate, now: engine.decide(review["request"], snapshot, now, mutate=mutate)
    edit = lambda event, obj: snapshot.apply(event, copy.deepcopy(obj))  # SnapshotError is a ValueError
    return decide, edit, snapshot


def _selected(file: str, case: Case, pattern: str | None) -> bool:
    if not pattern:
        return True
    ident = f"{file}::{case.name}"
    return pattern in ident or fnmatch.fnmatchcase(ident, pattern)


def run_targets(targets: list[Target], pattern: str | None = None) -> Run:
    """Run every (selected) case of every target file."""
    run, clusters = Run(), _Clusters()
    sets = _Sets(run)
    for target in targets:
        shown = display(target.path)
        try:
            loaded = read_test_file(target.path)
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            if pattern is None or pattern in shown or fnmatch.fnmatchcase(shown, pattern):
                run.file_errors.append((shown, str(exc)))
            continue
        tf = loaded.tests
        cases = [(i, c) for i, c in enumerate(tf.cases) if _selected(shown, c, pattern)]
        if not cases:
            continue
        policy_set, problem = sets.get(policy_files(target), target)
        unknown = _unknown_names(loaded, policy_set, shown)
        if unknown:  # an expectation no decision can meet: the file is wrong, not the policy
            run.file_errors.append((shown, unknown))
            continue
        for i, case in cases:
            result = _run_one(case, tf, target, policy_set, problem, clusters)
            run.outcomes.append(CaseOutcome(shown, case.name, result, loaded.lines.get(i, 1), tuple(case_warnings(case, result))))
        if policy_set is not None:
            where = {b.id: str(b.span) for b in _governing(policy_set)}
            for o in run.outcomes[-len(cases):]:
                if o.result.decision is not None:
                    run.exercised.update((where[b], b) for b in o.result.decision.blocks if b in where)
    return run


def _unknown_names(loaded: LoadedFile, policy_set: Any, shown: str) -> str | None:
    """`file:line: cases[i].expect.codes[j]: unknown reason code …` lines, or None when every name is known."""
    if policy_set is None:  # the set did not compile: its cases report that
        return None
    found = unknown_names(loaded.tests, {b.id for b in _governing(policy_set)})
    if not found:
        return None
    lines = []
    for u in found:
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in u.path).lstrip(".")
        lines.append(f"{shown}:{loaded.paths.get(u.path, 1)}: {dotted}: {u.message}")
    return "\n".join(lines)


def _run_one(case: Case, tf: TestFile, target: Target, policy_set: Any, problem: str | None, clusters: _Clusters) -> CaseResult:
    if problem is not None:
        return CaseResult(case.name, error=problem)
    try:
        spec = case.cluster if case.cluster is not None else tf.cluster
        objects = clusters.objects(spec, target.path.parent)
        now = float(tf.now) if tf.now is not None else DEFAULT_NOW
        decide, edit, snapshot = _decider(policy_set, objects, case.mode)
    except (ValueError, RuntimeError, OSError, yaml.YAMLError) as exc:
        return CaseResult(case.name, error=str(exc).splitlines()[0])
    except Exception as exc:  # a snapshot or engine constructor bug: a failed case, not a traceback
        return CaseResult(case.name, error=f"{type(exc).__name__}: {exc}")
    result = run_case(case, decide, now, edit)
    return result if result.passed else _with_notes(result, case, snapshot, policy_set)


def _with_notes(result: CaseResult, case: Case, snapshot: Any, policy_set: Any) -> CaseResult:
    """A failed case's result with what the decision alone does not show (a class from globalDefault)."""
    from policy.blocks.priority_origin import global_default_note

    try:
        obj = build_review(case)["request"].get("object")
        note = global_default_note(obj, snapshot, policy_set.priorities)
    except Exception:  # noqa: BLE001 - a note is a courtesy; it never turns a failure into a crash
        return result
    return dataclasses.replace(result, notes=(note,)) if note else result
