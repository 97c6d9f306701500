"""The report of a simulation: a JSON-ready dict (deterministic: sorted keys, rounded shares) and its text.

Shares are exact integer ratios rounded to 4 decimals at the end; nothing else is a float
except times (seconds of the trace).
"""

from __future__ import annotations

from typing import Mapping

from policy.simulate.preempt import render as render_preemption
from policy.simulate.run import SAMPLE_FIELDS, Result
from policy.simulate.saturate import allocation_at

SPARK = "▁▂▃▄▅▆▇█"
DIFF_LIMIT = 50  # differing decisions listed in full; the rest are counted
EXAMPLE_LIMIT = 160  # characters of an example message on its line of the text summary


def _share(part: int | float, whole: int | float) -> float:
    return round(part / whole, 4) if whole else 0.0


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _ranked(d: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def _percentile(sorted_values: list[float], p: int) -> float:
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, -(-p * len(sorted_values) // 100) - 1))  # nearest rank
    return sorted_values[k]


def build_report(result: Result, inputs: Mapping, quota_specs=()) -> dict:
    """The JSON-ready report of one run."""
    r = result
    outcomes = r.outcomes
    finals = _count(o.final for o in outcomes)
    denied = [o for o in outcomes if o.final == "denied"]
    unplaceable = [o for o in outcomes if o.final == "unplaceable"]
    waited = sorted(o.waited for o in outcomes if o.waited is not None)
    i_alloc, i_dev, i_node, i_starved, i_demand = (SAMPLE_FIELDS.index(f) for f in ("allocated_gpu", "frag_device", "frag_node", "frag_starved", "demand_gpu"))
    samples = r.samples
    total = r.gpu_total
    last = samples[-1] if samples else (0,) * len(SAMPLE_FIELDS)
    peak = max(samples, key=lambda s: (s[i_alloc], -s[0])) if samples else last
    examples: dict[str, str] = {}
    for o in outcomes:
        if o.final in ("denied", "unplaceable") and o.codes and o.codes[0] not in examples:
            examples[o.codes[0]] = f"{o.key}: {o.message}"
    quota = []
    for qi, spec in enumerate(quota_specs):
        used = [row[qi] for row in r.quota_samples] or [0]
        nominal = spec.nominal or 0
        quota.append({
            "id": spec.id, "name": spec.name, "cohort": spec.cohort,
            "nominal_milli": spec.nominal, "borrow_limit_milli": spec.borrow, "lend_limit_milli": spec.lend,
            "peak_used_milli": max(used), "mean_used_milli": sum(used) // len(used), "final_used_milli": used[-1],
            "peak_borrowed_milli": max(max(0, u - nominal) for u in used) if spec.nominal is not None else 0,
            "peak_share_of_nominal": _share(max(used), nominal) if nominal else None,
        })
    span = r.span
    mean_alloc = _share(r.alloc_area / span, total) if span > 0 else _share(last[i_alloc], total)
    return {
        "inputs": dict(sorted(inputs.items())),
        "cluster": {"nodes": r.nodes, "gpu_nodes": r.gpu_nodes, "gpus_milli": total,
                    "cpu_milli": r.cpu_total, "memory_bytes": r.mem_total},
        "objects": {"arrived": len(outcomes), **{k: finals.get(k, 0) for k in ("bound", "denied", "unplaceable", "conflict", "withdrawn")},
                    "resubmitted": sum(1 for o in outcomes if o.attempts > 1)},
        "denied_by_reason": _count(c for o in denied for c in dict.fromkeys(o.codes)),
        "denied_by_block": _count(b for o in denied for b in o.blocks),
        "unplaceable_by_reason": _count(o.codes[0] for o in unplaceable if o.codes),
        "examples": dict(sorted(examples.items())),
        "attempts": {"total": r.attempts, "admitted": r.admitted_attempts,
                     "denied_by_reason": _ranked(r.denied_attempts), "denied_by_block": _ranked(r.denied_blocks),
                     "unplaceable_by_reason": _ranked(r.unplaceable_attempts), "warned_by_reason": _ranked(r.warned)},
        "gpu": {
            "arrived_demand_share": _share(r.arrived_gpu, total),
            "demand_peak_share": _share(max((s[i_demand] for s in samples), default=0), total),
            "allocated_final_share": _share(last[i_alloc], total),
            "allocated_peak_share": _share(peak[i_alloc], total),
            "allocated_mean_share": mean_alloc,
            "fragmentation_final": {"shared_devices": _share(last[i_dev], total), "partly_used_nodes": _share(last[i_node], total),
                                    "cpu_or_memory_exhausted": _share(last[i_starved], total)},
            "fragmentation_at_peak": {"shared_devices": _share(peak[i_dev], total), "partly_used_nodes": _share(peak[i_node], total),
                                      "cpu_or_memory_exhausted": _share(peak[i_starved], total)},
            "allocated_at_arrived": at_arrived(r),
        },
        "waiting": {"objects": len(waited), "mean_s": round(sum(waited) / len(waited), 3) if waited else 0.0,
                    "p50_s": _percentile(waited, 50), "p90_s": _percentile(waited, 90), "max_s": waited[-1] if waited else 0.0},
        "quota": quota,
        "timeline": {"fields": list(SAMPLE_FIELDS), "rows": [[round(s[0], 3), *s[1:]] for s in samples]},
        "quota_timeline": {"ids": list(r.quota_ids), "rows": [list(q) for q in r.quota_samples]},
        "preemption": r.preemption,
    }


def at_arrived(r: Result) -> dict[str, float]:
    """Percent of GPUs allocated at each 10 % of arrived demand (the FGD paper's metric; saturating runs only)."""
    if not r.steps or not r.gpu_total:
        return {}
    upto = round(100 * r.steps[-1][0] / r.gpu_total)
    curve = allocation_at(r.steps, r.gpu_total, upto)
    return {str(x): curve[x] for x in range(10, upto + 1, 10) if x in curve}


def seeds_report(reports: list[dict]) -> dict:
    """One document for runs that differ only in seed: each run's curve and final allocation, and their mean."""
    curves = [rep["gpu"]["allocated_at_arrived"] for rep in reports]
    points = [x for x in curves[0] if all(x in c for c in curves)] if curves else []
    inputs = dict(reports[0]["inputs"]) if reports else {}
    inputs["seed"] = None
    inputs["seeds"] = [rep["inputs"]["seed"] for rep in reports]
    return {
        "inputs": dict(sorted(inputs.items())),
        "cluster": reports[0]["cluster"] if reports else {},
        "runs": [{"seed": rep["inputs"]["seed"], "allocated_at_arrived": rep["gpu"]["allocated_at_arrived"],
                  "allocated_final_share": rep["gpu"]["allocated_final_share"], "objects": rep["objects"]} for rep in reports],
        "mean_allocated_at_arrived": {x: round(sum(c[x] for c in curves) / len(curves), 2) for x in points},
    }


def render_seeds(doc: dict) -> str:
    """The terminal table of a multi-seed run: allocation at each 10 % of arrived demand, per seed and the mean."""
    inp, cl = doc["inputs"], doc["cluster"]
    points = list(doc["mean_allocated_at_arrived"])
    seeds = inp["seeds"]
    span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ",".join(map(str, seeds))
    lines = [f"allot simulate: {inp.get('trace')} ({inp.get('trace_format')}) saturating to {inp.get('saturate')}x, "
             f"method {inp.get('method')}, seeds {span} ({len(seeds)} runs)",
             f"  cluster {cl['nodes']} nodes ({cl['gpu_nodes']} with GPUs, {_gpus(cl['gpus_milli'])} GPUs); "
             f"policy {inp.get('policy')}; scheduler {inp.get('scheduler')}",
             "GPU allocated (%) at arrived demand (% of the cluster's GPUs)",
             f"  {'arrived':<9}" + "".join(f"{x + '%':>7}" for x in points)]
    for run in doc["runs"]:
        lines.append(f"  {'seed ' + str(run['seed']):<9}" + "".join(f"{run['allocated_at_arrived'][x]:>7.2f}" for x in points))
    lines.append(f"  {'mean':<9}" + "".join(f"{doc['mean_allocated_at_arrived'][x]:>7.2f}" for x in points))
    return "\n".join(lines)


def differences(a: Result, b: Result) -> dict:
    """The objects whose first decision or end differ between two runs of the same trace."""
    listed, count = [], 0
    for oa, ob in zip(a.outcomes, b.outcomes):
        sa = (oa.first_allowed, tuple(sorted(oa.first_codes)), oa.final, tuple(sorted(oa.codes)))
        sb = (ob.first_allowed, tuple(sorted(ob.first_codes)), ob.final, tuple(sorted(ob.codes)))
        if sa == sb:
            continue
        count += 1
        if len(listed) < DIFF_LIMIT:
            listed.append({"object": oa.key, "a": _side(oa), "b": _side(ob)})
    return {"count": count, "listed": listed}


def _side(o) -> dict:
    return {"first": "allowed" if o.first_allowed else "denied" if o.first_allowed is False else "-",
            "first_codes": sorted(o.first_codes), "final": o.final, "codes": sorted(o.codes)}


# ---- text ------------------------------------------------------------------------------
def sparkline(values: list[int], top: int, width: int = 60) -> str:
    """A one-line chart of `values` (0..top), at most `width` characters."""
    if not values or top <= 0:
        return ""
    step = max(1, -(-len(values) // width))
    points = [max(values[i:i + step]) for i in range(0, len(values), step)]
    return "".join(SPARK[min(len(SPARK) - 1, v * len(SPARK) // (top + 1))] for v in points)


def clip(text: str, limit: int = EXAMPLE_LIMIT) -> str:
    """`text` whole when it fits in `limit` characters, else cut between words (inside one only when no
    boundary falls in the second half) and ended with an ellipsis."""
    if len(text) <= limit:
        return text
    head = text[:limit + 1]  # a space just past the limit still makes a boundary
    cut = max(head.rfind(" "), head.rfind("\n"))
    kept = head[:cut].rstrip(" ,;:") if cut >= limit // 2 else ""
    return (kept or text[:limit]) + "…"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _gpus(milli: int | None) -> str:
    if milli is None:
        return "-"
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli / 1000:.2f}"


def _pairs(d: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def render_text(rep: dict) -> str:
    """The terminal summary of one report."""
    inp, cl, ob, gpu = rep["inputs"], rep["cluster"], rep["objects"], rep["gpu"]
    method = f", method {inp['method']}" if inp.get("method") == "artifact" else ""
    mode = f"saturating to {inp['saturate']}x (seed {inp['seed']}{method})" if inp.get("saturate") else "in trace time order"
    lines = [
        f"allot simulate: {inp.get('trace')} ({inp.get('trace_format')}) {mode}",
        f"  cluster {cl['nodes']} nodes ({cl['gpu_nodes']} with GPUs, {_gpus(cl['gpus_milli'])} GPUs); "
        f"policy {inp.get('policy')}; scheduler {inp.get('scheduler')}"
        + (f"; resubmit every {inp['retry']:g}s for {inp['deadline']:g}s" if inp.get("retry") else "; denied/unplaceable dropped"),
        f"objects    arrived {ob['arrived']}  bound {ob['bound']}  denied {ob['denied']}  unplaceable {ob['unplaceable']}"
        f"  resubmitted {ob['resubmitted']}" + (f"  conflict {ob['conflict']}" if ob["conflict"] else "")
        + (f"  withdrawn {ob['withdrawn']}" if ob["withdrawn"] else ""),
        f"GPU        allocated final {_pct(gpu['allocated_final_share'])}, peak {_pct(gpu['allocated_peak_share'])}, "
        f"mean {_pct(gpu['allocated_mean_share'])}; "
        + (f"arrived demand {_pct(gpu['arrived_demand_share'])} of the cluster" if inp.get("saturate")
           else f"peak demand (running, the starting cluster's pods too, + waiting) {_pct(gpu['demand_peak_share'])} of the cluster"),
    ]
    curve = gpu.get("allocated_at_arrived") or {}
    if curve:
        lines.append("           at arrived " + ", ".join(f"{x}% {v:.2f}%" for x, v in curve.items()))
    tl = rep["timeline"]
    i_alloc = tl["fields"].index("allocated_gpu")
    spark = sparkline([row[i_alloc] for row in tl["rows"]], cl["gpus_milli"])
    if spark:
        lines.append(f"           {spark}  (allocated {'as demand grows' if inp.get('saturate') else 'over time'})")
    fr = gpu["fragmentation_final"]
    lines.append(f"idle GPUs  (final) on shared devices {_pct(fr['shared_devices'])}, on partly used nodes {_pct(fr['partly_used_nodes'])}, "
                 f"where cpu or memory ran out {_pct(fr['cpu_or_memory_exhausted'])}")
    lines.append(f"denied     by reason: {_pairs(rep['denied_by_reason'])}; by block: {_pairs(rep['denied_by_block'])}")
    lines.append(f"unplaceable by reason: {_pairs(rep['unplaceable_by_reason'])}")
    for code, text in rep["examples"].items():
        lines.append(f"  e.g. {code}: {clip(text)}")
    w = rep["waiting"]
    if w["objects"]:
        lines.append(f"waiting    {w['objects']} resubmitted objects bound: mean {w['mean_s']:g}s, p50 {w['p50_s']:g}s, "
                     f"p90 {w['p90_s']:g}s, max {w['max_s']:g}s")
    if rep["quota"]:
        lines.append("quota      name            nominal  borrow  peak used  mean used  peak borrowed")
        for q in rep["quota"]:
            lines.append(f"           {q['name']:<15} {_gpus(q['nominal_milli']):>7}  {_gpus(q['borrow_limit_milli']) if q['borrow_limit_milli'] is not None else 'any':>6}"
                         f"  {_gpus(q['peak_used_milli']):>9}  {_gpus(q['mean_used_milli']):>9}  {_gpus(q['peak_borrowed_milli']):>13}")
    lines += render_preemption(rep.get("preemption"))
    skipped = inp.get("skipped") or 0
    if skipped:
        lines.append(f"skipped    {skipped} trace record(s): {inp.get('skipped_first')}")
    return "\n".join(lines)


_SIDE_ROWS = (
    ("bound", lambda r: r["objects"]["bound"]),
    ("denied", lambda r: r["objects"]["denied"]),
    ("unplaceable", lambda r: r["objects"]["unplaceable"]),
    ("GPU allocated (final)", lambda r: _pct(r["gpu"]["allocated_final_share"])),
    ("GPU allocated (peak)", lambda r: _pct(r["gpu"]["allocated_peak_share"])),
    ("GPU allocated (mean)", lambda r: _pct(r["gpu"]["allocated_mean_share"])),
    ("idle on partly used nodes", lambda r: _pct(r["gpu"]["fragmentation_final"]["partly_used_nodes"])),
    ("resubmitted, waited p90", lambda r: f"{r['waiting']['p90_s']:g}s"),
)


def render_against(a: dict, b: dict, diff: dict) -> str:
    """Two reports side by side, then the decisions that differ."""
    lines = [render_text(a), "", f"what-if: {a['inputs'].get('policy')} (A) against {b['inputs'].get('policy')} (B)",
             f"  {'':<28}{'A':>14}{'B':>14}"]
    for label, get in _SIDE_ROWS:
        lines.append(f"  {label:<28}{str(get(a)):>14}{str(get(b)):>14}")
    for key in ("denied_by_reason", "denied_by_block"):
        lines.append(f"  {key.replace('_', ' ')}: A {_pairs(a[key])}; B {_pairs(b[key])}")
    lines.append(f"decisions that differ: {diff['count']}" + (f" (first {len(diff['listed'])} listed)" if diff["count"] > len(diff["listed"]) else ""))
    for d in diff["listed"]:
        def side(s):
            codes = f" [{', '.join(s['codes'])}]" if s["codes"] else ""
            first = f"first {s['first']}" + (f" [{', '.join(s['first_codes'])}]" if s["first_codes"] else "")
            return f"{first}, ended {s['final']}{codes}"
        lines.append(f"  {d['object']}: A {side(d['a'])} | B {side(d['b'])}")
    return "\n".join(lines)
