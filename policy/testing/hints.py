"""Did-you-mean hints for test-file schema errors: the keys the schema accepts where an unknown key was found.

Pure: walks the pydantic models of `policy.testing` along an error's location.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, Tag

from policy.testing.cases import TestFile


def did_you_mean(err: dict) -> str:
    """` (did you mean `allowed`?)` for an unknown key close to a known one of the same mapping."""
    loc = tuple(err["loc"])
    if err["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], sorted(known_keys(loc[:-1])), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _models(annotation: Any, tag: str | None = None) -> dict[str, type]:
    """The schema models an annotation can hold, by union tag (the class name when untagged)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {tag or annotation.__name__: annotation}
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *meta = typing.get_args(annotation)
        tags = [m.tag for m in meta if isinstance(m, Tag)]
        return _models(inner, tags[0] if tags else tag)
    out: dict[str, type] = {}
    for arg in typing.get_args(annotation):
        out.update(_models(arg))
    return out


def known_keys(loc: tuple) -> set[str]:
    """The keys the schema accepts in the mapping at pydantic location `loc` (aliases as written in YAML)."""
    models: dict[str, type] = {"TestFile": TestFile}
    for part in loc:
        if isinstance(part, int):
            continue
        if part in models and len(models) > 1:
            models = {part: models[part]}
            continue
        for model in models.values():
            field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
            if field is not None:
                models = _models(field.annotation)
                break
    return {f.alias or n for m in models.values() for n, f in m.model_fields.items()}
