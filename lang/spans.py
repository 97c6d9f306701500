"""Blanking spans so two trees compare by meaning (formatter round-trips, tests)."""

from __future__ import annotations

import dataclasses

from lang.span import NO_SPAN, Span


def strip_spans(node):
    """The same tree with every Span replaced by NO_SPAN (recurses into dataclasses, tuples, frozensets)."""
    if isinstance(node, Span):
        return NO_SPAN
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {f.name: strip_spans(getattr(node, f.name)) for f in dataclasses.fields(node) if f.compare or f.name == "span"}
        return dataclasses.replace(node, **changes)
    if isinstance(node, tuple):
        return tuple(strip_spans(x) for x in node)
    if isinstance(node, list):
        return [strip_spans(x) for x in node]
    if isinstance(node, frozenset):
        return frozenset(strip_spans(x) for x in node)
    return node
