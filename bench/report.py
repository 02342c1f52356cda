"""The table on stdout, ``results/latest.json`` and the PNG chart."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.core import Result, Target

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.2f}"


def table(results: list[Result]) -> str:
    lines = []
    width = max((len(r.case) for r in results), default=20)
    head = f"{'case':<{width}}  {'unit':<9} {'min':>10} {'median':>10} {'max':>10}  n"
    scenario = None
    for r in results:
        if r.scenario != scenario:
            scenario = r.scenario
            lines += ["", f"== {scenario}", head, "-" * len(head)]
        d = r.as_dict()
        extra = f"  ({r.note})" if r.note else ""
        lines.append(
            f"{r.case:<{width}}  {r.unit:<9} {_fmt(d['min']):>10} "
            f"{_fmt(d['median']):>10} {_fmt(d['max']):>10}  {len(r.samples)}{extra}"
        )
    return "\n".join(lines)


def spread(lo_hi: Any) -> str:
    """``[lo..hi]`` of the per-round ratios (empty when unknown)."""
    if not lo_hi:
        return ""
    return f"[{lo_hi[0]:.2f}..{lo_hi[1]:.2f}]"


def targets_table(targets: list[Target]) -> str:
    lines = [
        "",
        "== targets (ratio of medians [min..max of per-round ratios]; met only when the whole"
        " spread is on the right side of the bound)",
    ]
    for t in targets:
        verdict = t.verdict.upper() if t.verdict in ("met", "missed", "borderline") else t.verdict
        bound = "" if math.isinf(t.bound) else f" {t.op} {t.bound:g}"
        value = "-" if t.ratio is None else f"{t.ratio:.2f} {spread(t.spread)}"
        lines.append(f"[{verdict:>10}] {t.label}: {value}{bound}   {t.detail}")
    return "\n".join(lines)


def write_json(
    path: Path, meta: dict[str, Any], results: list[Result], targets: list[Target], notes: list[str]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "meta": meta,
        "results": [r.as_dict() for r in results],
        "targets": [t.as_dict() for t in targets],
        "notes": notes,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


PEERS = ("pgqueuer", "procrastinate", "oban")


def _colour(case: str) -> str:
    """Peers orange, raw-SQL and plain-table baselines green, ours blue."""
    if any(p in case for p in PEERS):
        return "#ff7f0e"
    if "raw " in case or "plain" in case:
        return "#2ca02c"
    return "#1f77b4"


def chart(path: Path, results: list[Result], targets: list[Target], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[Result]] = {}
    for r in results:
        if r.samples:
            groups.setdefault(f"{r.scenario} ({r.unit})", []).append(r)
    panels = [*groups.items()]
    n = len(panels) + (1 if targets else 0)
    heights = [max(1.6, 0.32 * len(rs) + 0.8) for _, rs in panels]
    if targets:
        heights.append(max(1.6, 0.32 * len(targets) + 0.8))
    fig, axes = plt.subplots(
        n, 1, figsize=(11, sum(heights) + 1), gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    for ax, (name, rs) in zip(axes[:, 0], panels, strict=False):
        _bars(ax, name, rs)
    if targets:
        _target_panel(axes[-1, 0], targets)
    fig.suptitle(title + "\nblue: outbox, green: raw SQL / plain table, orange: peers", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.9 / sum(heights)))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(ax: Any, name: str, rs: list[Result]) -> None:
    med = [r.median or 0.0 for r in rs]
    lo = [m - min(r.samples) for m, r in zip(med, rs, strict=True)]
    hi = [max(r.samples) - m for m, r in zip(med, rs, strict=True)]
    y = list(range(len(rs)))
    ax.barh(y, med, xerr=[lo, hi], color=[_colour(r.case) for r in rs], capsize=3)
    ax.set_yticks(y, [r.case for r in rs], fontsize=7)
    ax.invert_yaxis()
    ax.set_title(
        f"{name}: median, whiskers min-max "
        f"({'higher' if rs[0].higher_is_better else 'lower'} is better)",
        fontsize=9,
    )
    ax.tick_params(axis="x", labelsize=7)
    for yi, m in zip(y, med, strict=True):
        ax.text(m, yi, f" {_fmt(m)}", va="center", fontsize=7)


def _target_panel(ax: Any, targets: list[Target]) -> None:
    shown = [t for t in targets if t.ratio is not None and not math.isinf(t.bound)]
    y = list(range(len(shown)))
    score = [
        (t.ratio or 0) / t.bound if t.op == ">=" else t.bound / (t.ratio or 1e-9) for t in shown
    ]
    colour = {"met": "#2ca02c", "borderline": "#ff7f0e"}
    ax.barh(y, score, color=[colour.get(t.verdict, "#d62728") for t in shown])
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(y, [f"{t.label} ({t.ratio:.2f} {spread(t.spread)})" for t in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_title(
        "targets: value / bound (>= 1 means met; orange: borderline over the rounds)", fontsize=9
    )
    ax.tick_params(axis="x", labelsize=7)


def markdown(doc: dict[str, Any], chart_path: str) -> str:
    """The README's Performance section body, rendered from a results document."""
    meta, m = doc["meta"], doc["meta"]["machine"]
    out = [
        f"Measured {meta['when']} with `{meta['command']}` ({meta['rounds']} interleaved "
        f"rounds{' after an uncounted warm-up round' if meta.get('warmup') else ''}, "
        f"{meta['seconds']:.0f} s) on {m.get('cpus')} CPUs "
        f"({m.get('cpu', 'unknown CPU')}), {m.get('memory_gib')} GiB, Python "
        f"{m.get('python')}, PostgreSQL {m.get('postgresql')} with default settings; "
        "client and server share the machine.",
        "",
        f"![benchmark chart]({chart_path})",
        "",
        "| scenario | case | unit | min | median | max |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in doc["results"]:
        note = f" ({r['note']})" if r.get("note") else ""
        out.append(
            f"| {r['scenario']} | {r['case']}{note} | {r['unit']} | {_fmt(r['min'])} | "
            f"{_fmt(r['median'])} | {_fmt(r['max'])} |"
        )
    out += [
        "",
        "Target values are ratios of medians; the spread is the min..max of the ratios taken "
        "round by round, and a target is met only when all of it is on the right side of "
        "the bound (borderline when part of it is).",
        "",
        "| target | value | spread over rounds | bound | met |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    words = {"met": "yes", "missed": "**no**", "borderline": "**borderline**"}
    for t in doc["targets"]:
        bound = "-" if t["bound"] in (None, float("inf")) else f"{t['op']} {t['bound']:g}"
        verdict = t.get("verdict") or {True: "met", False: "missed", None: "n/a"}[t["met"]]
        met = "info" if bound == "-" else words.get(verdict, verdict)
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        out.append(f"| {t['label']} | {value} | {spread(t.get('spread'))} | {bound} | {met} |")
    return "\n".join(out) + "\n"


def rerender(path: Path = RESULTS / "latest.json") -> None:
    """Redraw the chart and the markdown from a results document (no measuring)."""
    doc = json.loads(path.read_text())
    results = [
        Result(
            r["scenario"],
            r["case"],
            r["unit"],
            r["higher_is_better"],
            r["samples"],
            r["note"],
            r.get("rounds") or [],
        )
        for r in doc["results"]
    ]
    targets = []
    for t in doc["targets"]:
        tg = Target(t["label"], t["ours"], t["reference"], t["op"], t["bound"])
        tg.ratio, tg.met, tg.detail = t["value"], t["met"], t["detail"]
        tg.verdict = t.get("verdict") or {True: "met", False: "missed", None: "n/a"}[t["met"]]
        tg.spread = tuple(t["spread"]) if t.get("spread") else None
        targets.append(tg)
    meta = doc["meta"]
    chart(
        path.with_suffix(".png"),
        results,
        targets,
        f"outbox bench — {meta['when']} — {meta['command']}",
    )
    path.with_suffix(".md").write_text(markdown(doc, f"{path.stem}.png"))


if __name__ == "__main__":
    rerender()
