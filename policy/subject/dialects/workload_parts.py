"""The parts every workload reader shares: the `Template` a pod set is read into, and checked field readers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policy.subject.model import Problem

from .common import BAD_OBJECT, EMPTY, MALFORMED


@dataclass(frozen=True, slots=True)
class Template:
    """One pod set of a workload: `count` pods from one template, `minimum` of them needed to start."""

    name: str
    count: int
    minimum: int | None  # None: the whole set
    pod: Mapping  # a Pod-shaped {"metadata", "spec"} built from the template
    spec_path: tuple[str, ...] | None  # where the template's pod spec sits in the object (None: no template in the object)
    where: str | None = None  # where a demand problem points when there is no template path (else the path, dotted)


def _map(v) -> Mapping:
    return v if type(v) is dict else EMPTY


def _count(value, default: int, path: str, problems: list) -> int:
    """A non-negative whole count (the controller's default when absent), else the default plus a problem."""
    if value is None:
        return default
    if type(value) is int and value >= 0:
        return value
    problems.append(Problem(MALFORMED, f"{path}: {value!r} is not a whole number >= 0"))
    return default


def _list(value, path: str, problems: list) -> list:
    """A list field; anything else is a located problem (fail closed: a set that cannot be read is not silently empty)."""
    if value is None or type(value) is list:
        return value or []
    problems.append(Problem(BAD_OBJECT, f"{path}: expected a list, got {type(value).__name__}"))
    return []


def _object(value, path: str, problems: list) -> Mapping:
    """An object field (None: absent); anything else is a located problem."""
    if value is None or type(value) is dict:
        return value or EMPTY
    problems.append(Problem(BAD_OBJECT, f"{path}: expected an object, got {type(value).__name__}"))
    return EMPTY


def _pod(template, ns: str | None, path: str = "", problems: list | None = None) -> dict:
    """A Pod-shaped object from a PodTemplateSpec, so the pod demand readers apply unchanged."""
    if problems is not None:
        t = _object(template, path, problems)
        _object(t.get("spec"), f"{path}.spec", problems)
        _object(t.get("metadata"), f"{path}.metadata", problems)
    t = _map(template)
    meta = dict(_map(t.get("metadata")))
    if ns:  # the controller makes its pods in the workload's namespace, whatever the template says
        meta["namespace"] = ns
    return {"kind": "Pod", "metadata": meta, "spec": _map(t.get("spec"))}


def _job_pods(jspec: Mapping, path: str, problems: list) -> int:
    """Pods a Job runs at once: parallelism (default 1), at most the completions left (default: parallelism)."""
    parallelism = _count(jspec.get("parallelism"), 1, f"{path}.parallelism", problems)
    completions = jspec.get("completions")
    if completions is not None:
        completions = _count(completions, parallelism, f"{path}.completions", problems)
        return min(parallelism, completions)
    return parallelism
