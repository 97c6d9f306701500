"""One located lint finding, shared by the reader (invalid objects), the judge and the report formats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "note"]
SEVERITY_OF_MODE = {"enforce": "error", "warn": "warning", "audit": "note"}


@dataclass(frozen=True, slots=True)
class Finding:
    """A finding at `path:line:col` (the field's line when found, else the object's), with the block behind it."""

    path: str
    line: int
    col: int
    code: str
    severity: Severity
    message: str
    block: str | None = None  # the block id (`quota team-a`), `subject` for a normalization problem, None for the reader
    block_location: str | None = None  # `file.policy:line:col` of the block
    help: str | None = None
    object_line: int | None = None  # the object's first line
    field: str | None = None  # dotted path of the field the line points at, when found
    object: str | None = None  # `Kind namespace/name`

    @property
    def rule(self) -> str:
        """The SARIF rule id: the block id, or the stable code for findings no block raised."""
        return self.block if self.block and self.block != "subject" else self.code

    def __str__(self) -> str:
        """`path:line:col: severity[CODE] message`, the `allot check` shape."""
        return f"{self.path}:{self.line}:{self.col}: {self.severity}[{self.code}] {self.message}"

    def to_json(self) -> dict:
        """Every field, for `--format json`."""
        return {
            "path": self.path, "line": self.line, "column": self.col, "code": self.code, "severity": self.severity,
            "message": self.message, "block": self.block, "block_location": self.block_location, "help": self.help,
            "object_line": self.object_line, "field": self.field, "object": self.object,
        }
