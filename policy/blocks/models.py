"""`models …` in quota and fraction blocks: a workload whose GPU model is known and not listed is denied.

A workload of unknown model (no product in its nodeSelector, node affinity or HAMi
type) passes: it may land on any pool, which only the scheduler decides. Gang blocks
check their `models` themselves (policy/blocks/gang.py) and also plan on them.
"""

from __future__ import annotations

from typing import Callable

from policy.context import Context, where


def asked_model(w) -> str | None:
    """The declared model a workload asks for, else its raw product when it names exactly one; None when unknown."""
    if w.gpu_model is not None:
        return w.gpu_model
    product = w.gpu_product
    return product if product and "," not in product else None


def make_check(kind: str, name: str, block: str, span, models: tuple[str, ...], mode: str) -> Callable[[Context], None]:
    """The check of one quota's or fraction's `models` line (`kind` is "quota" or "fraction")."""
    location, allowed = where(span), frozenset(models)
    code = "QuotaModelNotAllowed" if kind == "quota" else "FractionModelNotAllowed"
    listed = ", ".join(models)

    def check(ctx: Context) -> None:
        w = ctx.w
        if kind == "quota" and (w.operation != "CREATE" or w.total_gpus <= 0):
            return
        if kind == "fraction" and (w.fraction is None or w.operation not in ("CREATE", "UPDATE")):
            return
        model = asked_model(w)
        if model is None or model in allowed:
            return
        what = "a shared GPU" if kind == "fraction" else "GPUs"
        text = f"{name}: {w.kind} asks for {what} of {model}; this {kind} may use only {listed}"
        ctx.find(code, block, location, text, mode, {"model": model, "models": list(models)})

    return check
