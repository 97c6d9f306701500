"""Lowering of `budget` blocks: GPU-hours per calendar period, checked like every block (docs/budgets.md).

Time zones are checked against the IANA database through `zoneinfo` (data, read once per
name; the project's lead allows it beside the no-I/O rule). Nothing here reads a clock.
"""

from __future__ import annotations

import difflib
import functools

from lang import ast, ir
from lang.checker import check_mode, check_statements, decl_name, known
from lang.diagnostics import Diagnostic, error, warning
from lang.ir import Type
from lang.spans import strip_spans

MILLI_GPU_SECONDS_PER_HOUR = 3600 * 1000  # one GPU held for one hour, in the meter's unit
DURATION_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
ACTIONS = ("deny", "warn", "priority")
MAX_THRESHOLD = 10000  # per mille: 1000 %; a warning past ten times the budget is a typo


@functools.lru_cache(maxsize=1024)
def known_zone(name: str) -> bool:
    """Whether `name` is an IANA time zone this machine's tz database holds (`UTC`, `Europe/Berlin`)."""
    import zoneinfo

    if not name or name.startswith(("/", ".")) or ".." in name:
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (ValueError, KeyError, OSError):  # not found, a malformed key, a directory (`Europe`)
        return False
    return True


@functools.cache
def _zones() -> tuple[str, ...]:
    import zoneinfo

    return tuple(sorted(zoneinfo.available_timezones()))


def _close(name: str, options) -> str | None:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"did you mean `{close[0]}`?" if close else None


def lower_budget(low, b: ast.Block, priorities: dict[str, int]) -> ir.Budget | None:
    """`budget NAME { for; gpu_hours N [of M]; period P [in "Z"]; on spent …; warn at …%; half_life N UNIT; mode }`."""
    stmts = check_statements(b, low.diags)
    name = decl_name(b)
    amount = model = None
    hours = stmts.get("gpu_hours")
    if hours is None:
        low.err("E0111", f"budget `{name}` states no `gpu_hours`", b.span, "e.g. `gpu_hours 20000` or `gpu_hours 20000 of h100`")
    else:
        amount = low.amount(ast.Setting("gpu_hours", hours.amount, hours.span), Type.GPU)  # milli-GPU-hours: 0.5 -> 500
        if amount is not None and amount <= 0:
            low.err("E0305", f"`gpu_hours {hours.amount.text}` must be more than 0", hours.amount.span)
            amount = None
        if hours.model is not None:
            model = hours.model.name
            if model not in low.scope.gpus and not low.scope.broken("gpu", model):
                hint = _close(model, sorted(low.scope.gpus))
                low.err("E0102", f"unknown GPU model `{model}`", hours.model.span, (hint + " " if hint else "") + known("models", low.scope.gpus))
    period, zone = _period(low, stmts.get("period"), b, name)
    on_spent, tier = _on_spent(low, stmts.get("on spent"), priorities)
    thresholds = _thresholds(low, stmts.get("warn at"))
    half_life = _half_life(low, stmts.get("half_life"))
    selector = low.selector(stmts)
    mode = check_mode(stmts, low.diags)
    if amount is None or period is None:
        return None
    return ir.Budget(name, selector, amount * 3600, model, period, zone, on_spent, tier, thresholds, half_life, mode, b.span)


def _period(low, s: ast.Period | None, b: ast.Block, name: str) -> tuple[str | None, str]:
    if s is None:
        low.err("E0111", f"budget `{name}` states no `period`", b.span, 'e.g. `period month in "Europe/Berlin"`')
        return None, "UTC"
    unit = s.unit.name
    zone = s.zone.value if s.zone is not None else "UTC"
    if s.zone is not None and not known_zone(zone):
        hint = _close(zone, _zones())
        low.err("E0309", f"unknown time zone {s.zone.raw}", s.zone.span, hint or "an IANA name such as `Europe/Berlin`, `America/New_York` or `UTC`")
    if unit not in ir.PERIODS:
        low.err("E0308", f"unknown period `{unit}`", s.unit.span, _close(unit, ir.PERIODS) or "periods: " + ", ".join(ir.PERIODS))
        return None, zone
    return unit, zone


def _on_spent(low, s: ast.OnSpent | None, priorities: dict[str, int]) -> tuple[str, str | None]:
    if s is None:
        return "deny", None
    action = s.action.name
    if action not in ACTIONS:
        low.err("E0110", f"unknown action `{action}` for `on spent`", s.action.span, _close(action, ACTIONS) or "use `deny`, `warn` or `priority TIER`")
        return "deny", None
    if action != "priority":
        if s.tier is not None:
            low.err("E0110", f"`on spent {action}` takes no tier", s.tier.span, f"write `on spent priority {s.tier.name}` to move spent work to that class")
        return action, None
    if s.tier is None:
        low.err("E0111", "`on spent priority` needs the class spent work moves to", s.span, "e.g. `on spent priority batch`")
        return "deny", None
    tier = s.tier.name
    if tier not in priorities:
        if not low.scope.broken("priority", tier):
            hint = _close(tier, sorted(priorities))
            low.err("E0310", f"unknown priority tier `{tier}`", s.tier.span, (hint + " " if hint else "") + known("priority classes", priorities))
        return "deny", None
    if len(priorities) > 1 and priorities[tier] >= max(priorities.values()):
        low.diags.append(warning("W0308", f"`{tier}` is the highest declared class: spent work moves to no lower tier", s.tier.span,
                                 "name a lower class, e.g. " + min(priorities, key=priorities.get)))
    return "priority", tier


def _thresholds(low, s: ast.Thresholds | None) -> tuple[int, ...]:
    if s is None:
        return ()
    out: list[int] = []
    for v in s.values:
        permille = low.amount(ast.Setting("warn at", v, v.span), Type.FRACTION)  # 80 -> 80000 milli-percent
        if permille is None:
            continue
        if permille % 100:
            low.err("E0202", f"`{v.text}%` is finer than 0.1 %", v.span)
            continue
        permille //= 100
        if not 0 < permille <= MAX_THRESHOLD:
            low.err("E0305", f"`{v.text}%` is outside (0 %, 1000 %]", v.span, "a threshold is a share of the budget, e.g. 80% or 100%")
        elif permille in out:
            low.err("E0106", f"`{v.text}%` is listed twice in `warn at`", v.span)
        else:
            out.append(permille)
    return tuple(sorted(out))


def _half_life(low, s: ast.HalfLife | None) -> int | None:
    if s is None:
        return None
    unit = s.unit.name
    seconds = DURATION_UNITS.get(unit.removesuffix("s"))
    if seconds is None:
        low.err("E0312", f"unknown duration unit `{unit}`", s.unit.span, _close(unit, [u + "s" for u in DURATION_UNITS]) or "units: seconds, minutes, hours, days, weeks")
        return None
    n = low.amount(ast.Setting("half_life", s.amount, s.amount.span), Type.INT)
    if n is None:
        return None
    if n <= 0:
        low.err("E0305", "a half-life must be more than 0", s.amount.span)
        return None
    return n * seconds


def check_overlaps(budgets: list[ir.Budget], diags: list[Diagnostic]) -> None:
    """E0311: two budgets with the same selector, model and period meter the same use twice (a copy, or a rename left behind)."""
    seen: dict[tuple, ir.Budget] = {}
    for b in budgets:
        key = (strip_spans(b.selector), b.model, b.period)
        first = seen.get(key)
        if first is None:
            seen[key] = b
            continue
        what = f"of {b.model}" if b.model else "of every model"
        diags.append(error("E0311", f"budgets `{first.name}` and `{b.name}` meter the same workloads {what} per {b.period}", b.span,
                           f"`{first.name}` is at {first.span.path}:{first.span.line}; keep one (a renamed budget starts a new meter: docs/budgets.md)"))
