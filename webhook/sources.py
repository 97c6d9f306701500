"""Reading policy sets from disk: files or directories of `*.policy` files, as (path, text) pairs."""

from __future__ import annotations

import os
import pathlib

from webhook.errors import UsageError
from webhook.textfile import read_bytes


def _decode(data: bytes) -> str:
    """UTF-8 text; undecodable bytes become U+FFFD, which `lang.parse` reports as a located error."""
    text = data.decode("utf-8", errors="replace")
    return text[1:] if text.startswith("\ufeff") else text  # a BOM is not part of the policy


def read_policy_file(path: pathlib.Path) -> str:
    """The text of one policy file as `lang.parse` wants it (bad bytes left for its `E0004`); UsageError if unreadable."""
    return _read(path)


def _read(path: pathlib.Path) -> str:
    return _decode(read_bytes(str(path), "policy"))  # the one reader's errors; its bytes decoded leniently (E0004)


def _files_under(directory: pathlib.Path) -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for root, dirs, files in os.walk(directory, onerror=None):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # skip .git and friends
        found.extend(pathlib.Path(root) / f for f in files if f.endswith(".policy"))
    return sorted(found)


def read_policy_sources(paths: list[str]) -> list[tuple[str, str]]:
    """(path, text) for each file, or each `*.policy` under each directory (sorted); UsageError if missing."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for raw in paths:
        path = pathlib.Path(raw)
        if not path.exists():
            raise UsageError(f"{raw}: no such file or directory")
        files = _files_under(path) if path.is_dir() else [path]
        for file in files:
            key = str(file)
            if key in seen:
                continue
            seen.add(key)
            out.append((key, _read(file)))
    return out


def relative_sources(policy: str, sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Sources with paths relative to the policy directory (or a file's directory), `/`-separated.

    What a bundle stores, so a set has one digest and one set of source locations in
    its messages whether it is loaded from a directory or from its bundle, wherever
    the directory is mounted.
    """
    root = pathlib.Path(policy)
    base = root if root.is_dir() else root.parent
    return [(pathlib.Path(os.path.relpath(p, base)).as_posix(), t) for p, t in sources]
