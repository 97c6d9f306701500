"""Charts (PNG, matplotlib) and the self-contained HTML page of an `allot simulate` report.

matplotlib is the optional extra `sim` (`pip install 'allot[sim]'`); it is imported only
here, so the rest of the CLI runs without it. Figures are drawn on an Agg canvas (no
pyplot global state, no display) with PNG metadata left out, so the same report gives
the same bytes.
"""

from __future__ import annotations

import base64
import html
import io

_COLOURS = ("#1f6feb", "#d4521c", "#2da44e", "#8250df", "#bf8700", "#57606a")


def _figure(title: str):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 3.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title, fontsize=11, loc="left")
    ax.grid(True, alpha=0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _series(rep: dict, field: str) -> list[int]:
    tl = rep["timeline"]
    i = tl["fields"].index(field)
    return [row[i] for row in tl["rows"]]


def _x(rep: dict) -> tuple[list[float], str]:
    total = rep["cluster"]["gpus_milli"] or 1
    if rep["inputs"].get("saturate"):
        return [100 * v / total for v in _series(rep, "arrived_gpu")], "arrived GPU demand (% of the cluster's GPUs)"
    return [t / 3600 for t in _series(rep, "t")], "hours into the trace"


def _pct(rep: dict, field: str) -> list[float]:
    total = rep["cluster"]["gpus_milli"] or 1
    return [100 * v / total for v in _series(rep, field)]


def charts(rep: dict, other: dict | None = None) -> dict[str, bytes]:
    """File name -> PNG bytes: GPU allocation, fragmentation, quota usage (with quotas), outcomes (with any)."""
    out: dict[str, bytes] = {}
    x, xlabel = _x(rep)
    saturating = bool(rep["inputs"].get("saturate"))
    fig, ax = _figure("GPU allocation as demand grows" if saturating else "GPU allocation over time")
    label_a = "allocated" if other is None else "allocated (A)"
    ax.plot(x, _pct(rep, "allocated_gpu"), color=_COLOURS[0], label=label_a, linewidth=1.8)
    if saturating:
        ax.plot(x, x, color=_COLOURS[5], linestyle=":", label="arrived demand", linewidth=1)
    else:
        ax.plot(x, _pct(rep, "demand_gpu"), color=_COLOURS[5], linestyle=":", label="demand (running + waiting)", linewidth=1)
    if other is not None:
        xb, _ = _x(other)
        ax.plot(xb, _pct(other, "allocated_gpu"), color=_COLOURS[1], label="allocated (B)", linewidth=1.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("% of the cluster's GPUs")
    ax.set_ylim(0, max(105, max(_pct(rep, "demand_gpu") or [0]) * 1.05) if not saturating else 105)
    ax.legend(fontsize=8, loc="lower right" if saturating else "upper right")
    out["gpu-allocation.png"] = _png(fig)

    fig, ax = _figure("Idle GPUs stranded (fragmentation)")
    for colour, field, label in ((_COLOURS[1], "frag_device", "on shared devices"), (_COLOURS[2], "frag_node", "on partly used nodes"),
                                 (_COLOURS[3], "frag_starved", "where cpu or memory ran out")):
        ax.plot(x, _pct(rep, field), color=colour, label=label, linewidth=1.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("% of the cluster's GPUs")
    ax.legend(fontsize=8)
    out["fragmentation.png"] = _png(fig)

    if rep["quota"]:
        fig, ax = _figure("Quota usage against nominal")
        rows = rep["quota_timeline"]["rows"]
        for qi, q in enumerate(rep["quota"]):
            colour = _COLOURS[qi % len(_COLOURS)]
            ax.plot(x, [row[qi] / 1000 for row in rows], color=colour, label=q["name"], linewidth=1.4)
            if q["nominal_milli"] is not None:
                ax.axhline(q["nominal_milli"] / 1000, color=colour, linestyle="--", linewidth=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("GPUs in use (dashed: nominal)")
        ax.legend(fontsize=8)
        out["quota.png"] = _png(fig)

    bars = [(f"denied: {k}", v) for k, v in rep["denied_by_reason"].items()]
    bars += [(f"unplaceable: {k}", v) for k, v in rep["unplaceable_by_reason"].items()]
    if bars:
        fig, ax = _figure("Objects not bound, by reason")
        labels = [b[0] for b in bars][::-1]
        ax.barh(labels, [b[1] for b in bars][::-1], color=_COLOURS[1])
        ax.set_xlabel("objects")
        out["outcomes.png"] = _png(fig)
    return out


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _gpus(milli) -> str:
    return "-" if milli is None else (f"{milli // 1000}" if milli % 1000 == 0 else f"{milli / 1000:.2f}")


def _pc(x) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _report_section(rep: dict, title: str) -> str:
    ob, gpu = rep["objects"], rep["gpu"]
    parts = [f"<h2>{html.escape(title)}</h2>"]
    parts.append(_table(["", "value"], [
        ["policy", rep["inputs"].get("policy")], ["trace", f"{rep['inputs'].get('trace')} ({rep['inputs'].get('trace_format')})"],
        ["scheduler", rep["inputs"].get("scheduler")],
        ["cluster", f"{rep['cluster']['nodes']} nodes, {_gpus(rep['cluster']['gpus_milli'])} GPUs"],
        ["arrived / bound / denied / unplaceable", f"{ob['arrived']} / {ob['bound']} / {ob['denied']} / {ob['unplaceable']}"],
        ["resubmitted", ob["resubmitted"]],
        ["GPU allocated: final / peak / mean", f"{_pc(gpu['allocated_final_share'])} / {_pc(gpu['allocated_peak_share'])} / {_pc(gpu['allocated_mean_share'])}"],
        ["arrived demand", _pc(gpu["arrived_demand_share"])],
        ["idle on shared devices / partly used nodes / cpu-or-memory exhausted (final)",
         " / ".join(_pc(gpu["fragmentation_final"][k]) for k in ("shared_devices", "partly_used_nodes", "cpu_or_memory_exhausted"))],
        ["waiting of resubmitted objects: p50 / p90 / max", f"{rep['waiting']['p50_s']:g}s / {rep['waiting']['p90_s']:g}s / {rep['waiting']['max_s']:g}s"],
    ]))
    for key, label in (("denied_by_reason", "denied, by reason"), ("denied_by_block", "denied, by block"),
                       ("unplaceable_by_reason", "unplaceable, by reason")):
        if rep[key]:
            parts.append(f"<h3>{label}</h3>" + _table(["", "objects"], [[k, v] for k, v in rep[key].items()]))
    if rep["examples"]:
        parts.append("<h3>examples</h3>" + _table(["reason", "object: message"], [[k, v] for k, v in rep["examples"].items()]))
    if rep["quota"]:
        parts.append("<h3>quota</h3>" + _table(
            ["quota", "cohort", "nominal", "borrow limit", "peak used", "mean used", "peak borrowed"],
            [[q["name"], q["cohort"] or "-", _gpus(q["nominal_milli"]), _gpus(q["borrow_limit_milli"]) if q["borrow_limit_milli"] is not None else "any",
              _gpus(q["peak_used_milli"]), _gpus(q["mean_used_milli"]), _gpus(q["peak_borrowed_milli"])] for q in rep["quota"]]))
    return "\n".join(parts)


_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}img{max-width:100%;border:1px solid #d0d7de;margin:.5em 0}h1{font-size:1.5em}"""
# Counts the charts the browser decoded, so a headless check can read it back from the DOM.
_SCRIPT = """window.addEventListener('load',function(){var n=0;document.querySelectorAll('img').forEach(function(i){
if(i.complete&&i.naturalWidth>0){n++}});document.body.setAttribute('data-charts-loaded',String(n));});"""


def html_page(doc: dict, images: dict[str, bytes]) -> str:
    """One self-contained page: the charts inlined as base64 PNG, the tables, and the differing decisions."""
    against = "a" in doc and "b" in doc
    rep = doc["a"] if against else doc
    parts = ["<!doctype html><html lang=en><head><meta charset=utf-8><title>allot simulate</title>",
             f"<style>{_CSS}</style></head><body data-charts='{len(images)}'>", "<h1>allot simulate</h1>"]
    for name, png in images.items():
        parts.append(f"<img alt='{html.escape(name)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    parts.append(_report_section(rep, "A: " + str(rep["inputs"].get("policy")) if against else "Report"))
    if against:
        parts.append(_report_section(doc["b"], "B: " + str(doc["b"]["inputs"].get("policy"))))
        diff = doc["differences"]
        parts.append(f"<h2>Decisions that differ: {diff['count']}</h2>")
        parts.append(_table(["object", "A", "B"], [[d["object"], f"{d['a']['first']} → {d['a']['final']} {' '.join(d['a']['codes'])}",
                                                      f"{d['b']['first']} → {d['b']['final']} {' '.join(d['b']['codes'])}"] for d in diff["listed"]]))
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"
