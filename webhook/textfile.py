"""The one reader of the text files a user names: cluster states, traces, manifests, requests, test files, logs.

Every command decodes what it reads here, so a file that is not text gets one message
everywhere: `PATH:LINE:COLUMN: not UTF-8 text (byte N: 0xHH)`. N counts bytes from 1, as
`cmp` does (the file's first byte is byte 1); LINE and COLUMN count from 1 like every other
location Allot prints (COLUMN in characters). A NUL byte makes a file binary too, as git
judges it: no YAML, JSON or policy text holds one. A UTF-8 byte-order mark is skipped.
Policy files are the exception: `lang.parse` reports their undecodable bytes as `E0004`
diagnostics (webhook/sources.py), so `check` lists them with the set's other errors.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from webhook.errors import UsageError

STDIN = "-"
_BOM = b"\xef\xbb\xbf"


class NotText(UsageError):
    """A file that is not UTF-8 text: where (`path`, `line`, `column`) and what (`detail`, the message without the place)."""

    def __init__(self, path: str, line: int, column: int, detail: str):
        super().__init__(f"{path}:{line}:{column}: {detail}")
        self.path, self.line, self.column, self.detail = path, line, column, detail


def _not_text(raw: bytes, start: int, path: str, first_line: int = 1, offset: int = 0) -> NotText:
    """The error for the byte at 0-based `start` of `raw` (itself at byte `offset` of the file, on line `first_line`)."""
    line_start = raw.rfind(b"\n", 0, start) + 1
    head = raw[line_start:start]
    column = len((head[3:] if offset + line_start == 0 and head.startswith(_BOM) else head).decode("utf-8", errors="replace")) + 1
    detail = f"not UTF-8 text (byte {offset + start + 1}: 0x{raw[start]:02x})"
    if offset == 0 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        detail += "; it starts with a UTF-16 byte-order mark: save it as UTF-8"
    return NotText(path, first_line + raw.count(b"\n", 0, start), column, detail)


def _first_bad(raw: bytes, skip_bom: bool) -> tuple[str | None, int]:
    """(the text, -1), or (None, the 0-based offset in `raw` of the first byte that is not text)."""
    skip = 3 if skip_bom and raw.startswith(_BOM) else 0
    try:
        text = raw[skip:].decode("utf-8") if skip else raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = skip + exc.start  # the decoder counts from the slice it was given
        nul = raw.find(b"\0", 0, bad)
        return None, bad if nul < 0 else nul
    return (text, -1) if "\0" not in text else (None, raw.find(b"\0"))


def decode(raw: bytes, path: str) -> str:
    """The text of `raw` (a leading byte-order mark dropped); NotText at the first byte that is not text."""
    text, bad = _first_bad(raw, True)
    if text is None:
        raise _not_text(raw, bad, path)
    return text


def _open(path: str, what: str):
    try:
        return open(path, "rb")  # the caller closes it (a `with` over the returned file)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a {what} file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_bytes(path: str, what: str, stdin=None) -> bytes:
    """The bytes of the `what` file (cluster-state, trace, …) at `path`, or of stdin for `-`; UsageError when unreadable."""
    if path == STDIN:
        stream = stdin if stdin is not None else sys.stdin
        data = stream.buffer.read() if hasattr(stream, "buffer") else stream.read()
        return data if isinstance(data, bytes) else data.encode("utf-8")
    with _open(path, what) as fh:
        try:
            return fh.read()
        except OSError as exc:  # a directory on some systems, a vanished mount
            raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_text(path: str, what: str, stdin=None) -> str:
    """The UTF-8 text of the `what` file at `path` (`-`: stdin); UsageError (NotText when not text) in one line."""
    return decode(read_bytes(path, what, stdin), path)


def read_lines(path: str, what: str, stdin=None) -> Iterator[str]:
    """The lines of a text file (`-`: stdin) one at a time, for logs too large to hold; NotText where a line is not text."""
    if path == STDIN:
        stream = stdin if stdin is not None else sys.stdin
        yield from _decoded(getattr(stream, "buffer", stream), path)
        return
    with _open(path, what) as fh:
        yield from _decoded(fh, path)


def _decoded(stream, path: str) -> Iterator[str]:
    offset = 0
    for number, raw in enumerate(stream, 1):
        if isinstance(raw, str):  # a text stream handed in (tests, a wrapped stdin): already decoded
            yield raw
            continue
        text, bad = _first_bad(raw, number == 1)
        if text is None:
            raise _not_text(raw, bad, path, number, offset)
        offset += len(raw)
        yield text
