"""Reports of an evaluation folder: :func:`write_report` reads its results (:mod:`.results`) and writes
``report.md``, ``report.json`` and ``plots/`` (docs/evaluation.md §5). What a metric means (its direction, whether
it is a count) comes from its suite's declarations (:data:`perception_judge.evaluation.suites.SUITES`), nothing else.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import textwrap
from pathlib import Path
from typing import Any

from scipy.stats import rankdata
from scipy.stats import t as student_t

from perception_judge.core.io import atomic_write_json, atomic_write_text
from perception_judge.core.redact import redact_text
from perception_judge.evaluation.base import Bars, Metric
from perception_judge.evaluation.results import done_results, read_results
from perception_judge.evaluation.suites import SUITES

PLOTS_DIR = "plots"
PANELS_PER_PAGE = 16
PROTOCOL_FAMILIES = {
    "project": "the project's rules (failures and ties count against the judge)",
    "published": "a replica of the published evaluation script's aggregation",
    "official": "the benchmark's official scoring rule, as its own script computes it",
}
NOT_AVAILABLE = "n/a"
"""A missing number, never 0; where the suite declares why (``protocol["undefined_metrics"]``) a short reason reads in
the cell (``n/a (no scorable pair)``), a long one below the table."""
SHORT_REASON = 30
FOOTNOTE = "n/a: no number (the reason, where the suite gave one, is in the cell or below its table)."
BAND = "Band: 95% interval (the suite's Wilson interval, else the t interval over seeds). Dotted: chance."


def declared(suite: str, metric: str) -> Metric | None:
    """The suite's declaration of a metric (None for an unknown suite or an undeclared metric)."""
    return SUITES[suite].metric(metric) if suite in SUITES else None


def _fmt(mean: float | None, std: float | None = None, count: bool = False) -> str:
    if mean is None or math.isnan(mean):
        return NOT_AVAILABLE
    if count:
        return f"{mean:.0f}" if float(mean).is_integer() else f"{mean:.1f}"
    return f"{mean:.3f}" + ("" if not std or math.isnan(std) else f" ± {std:.3f}")


def _mean(row: dict[str, Any], metric: str) -> float | None:
    """A table row's mean of ``metric`` (None when the model has none)."""
    return row["values"].get(metric, (None, None))[0]


def primary_metric(suite: str, metrics: list[str]) -> str | None:
    """The metric that ranks models on a suite: the first reported one its record's ``primary`` patterns match;
    None for a suite that is not registered or reports none of them."""
    primary = SUITES[suite].primary_metrics(metrics) if suite in SUITES else []
    return primary[0] if primary else None


def metric_family(metric: str) -> str:
    """The :data:`PROTOCOL_FAMILIES` key of a number: ``official.*``, ``flex.*`` (published), else project."""
    return {"official": "official", "flex": "published"}.get(metric.split(".", 1)[0], "project")


def _table(rows: list[dict[str, Any]], suite: str, models: list[str]) -> dict[str, Any]:
    """{columns (every metric but the stds), rows: [{model, step, values: {metric: (mean, std)}}]} of a suite."""
    rows = [r for r in rows if r["suite"] == suite]
    by_model: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    steps, ns = {}, {}  # ns: per model and metric, the seeds behind its mean
    for r in rows:
        by_model.setdefault(r["model"], {})[r["metric"]] = (r["mean"], r["std"])
        ns.setdefault(r["model"], {})[r["metric"]], steps[r["model"]] = r.get("n_seeds", 1), r["step"]
    metrics = dict.fromkeys(r["metric"] for r in rows)  # a seed std is an error bar (and JSON), not a column
    columns = [m for m in metrics if not (m.endswith("_std") or m.startswith("std."))]
    out = [{"model": m, "step": steps[m], "values": by_model[m], "n": ns[m]} for m in models if m in steps]
    return {"columns": columns, "rows": out}


def headline(suite: str, table: dict[str, Any]) -> list[str]:
    """The columns of the report's table of a suite: its headline metrics that hold a number or a declared n/a
    (every metric for a suite that is not registered or reports none of them)."""
    undefined = (table.get("undefined") or {}).values()
    defined = {m for r in table["rows"] for m, (mean, _) in r["values"].items() if mean is not None}
    shown = [m for m in table["columns"] if m in defined or any(m in u for u in undefined)]
    return (SUITES[suite].primary_metrics(shown) if suite in SUITES else []) or shown


def best_model(
    tables: dict[str, dict[str, Any]],
    protocols: dict[str, dict[str, Any]],
    models: list[str],
    skip: bool = True,
) -> dict[str, Any]:
    """The best model overall and per suite: per suite, the models ranked by its :func:`primary_metric` in its
    declared direction (ties share the mean rank; a model without it is not ranked there); the best model has the
    lowest mean rank over its suites, ties going to more suites, then the later step. Control suites
    (``protocol["control"]``, e.g. ``perception_mismatched``), metrics without a direction and judges flagged
    degenerate on a suite (``table["degenerate"]``: verdicts that never vary) are never ranked (``skip``); when
    that leaves none, no model stands out and the tie-break picks one."""
    per_suite: dict[str, Any] = {}
    rank_sum: dict[str, list[float]] = {}
    order = {m: i for i, m in enumerate(models)}
    flagged = {m: [s for s, t in tables.items() if m in t.get("degenerate", {})] for m in models}
    degenerate = {m: suites for m, suites in flagged.items() if suites}
    for suite, table in tables.items():
        pm = None if protocols.get(suite, {}).get("control") else primary_metric(suite, table["columns"])
        hib = (declared(suite, pm) or Metric(None)).higher_is_better if pm else None
        rows = [r for r in table["rows"] if not (skip and r["model"] in table.get("degenerate", {}))]
        vals = {r["model"]: v for r in rows if (v := _mean(r, pm)) is not None}
        if hib is None or not vals:
            continue
        ranks = dict(zip(vals, map(float, rankdata([-v if hib else v for v in vals.values()]))))
        best = min(ranks, key=lambda m: (ranks[m], -order.get(m, 0)))
        tied = sorted(m for m in vals if m != best and vals[m] == vals[best])
        per_suite[suite] = {"metric": pm, "higher_is_better": hib, "best": best, "value": vals[best]}
        per_suite[suite] |= {"tied_with": tied, "n_ranked": len(vals)}
        for m, r in ranks.items():
            rank_sum.setdefault(m, []).append(r)
    if not rank_sum and degenerate and skip:
        return best_model(tables, protocols, models, False) | {"all_tied": "every judge is degenerate"}
    if not rank_sum:
        return {"best": None, "criterion": "no suite produced a primary metric", "per_suite": per_suite}

    mean_rank = {m: sum(v) / len(v) for m, v in rank_sum.items()}
    ties = (len(v["tied_with"]) == v["n_ranked"] - 1 == len(rank_sum) - 1 for v in per_suite.values())
    all_tied = len(rank_sum) > 1 and all(ties)  # every suite ranks every model, all equal

    def rank_key(m: str) -> tuple[float, int, int]:  # mean rank, then more suites, then later step
        return mean_rank[m], -len(rank_sum[m]), -order.get(m, -1)

    directions = ", ".join(
        f"{s}: {v['metric']} {'↑' if v['higher_is_better'] else '↓'}" for s, v in per_suite.items()
    )
    return {
        "best": min(rank_sum, key=rank_key),
        "all_tied": all_tied,
        "best_checkpoint": min((m for m in rank_sum if m != "base"), key=rank_key, default=None),
        "mean_rank": mean_rank,
        "criterion": f"lowest mean rank over suites of each suite's primary metric ({directions}); ties: more suites, "
        "then later step; a judge flagged degenerate on a suite (its verdicts never vary) is not ranked there",
        "per_suite": per_suite,
        "degenerate": degenerate,
    }


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(plt: Any, fig: Any, path: Path, dpi: int = 110, caption: str = "") -> Path:
    """Save a figure with its caption (what its error bars or bands mean) below it."""
    fig.tight_layout(rect=(0, 0.05 if caption else 0, 1, 1))
    fig.text(0.01, 0.01, caption, fontsize=7, ha="left", va="bottom", wrap=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _chance(ax: Any, suite: str, metric: str, x0: float, x1: float) -> bool:
    """A dotted line at the chance level the suite declares for ``metric``; whether there is one."""
    if (chance := getattr(declared(suite, metric), "chance", None)) is not None:
        ax.hlines(chance, x0, x1, colors="crimson", linestyles=":", lw=1.3)
    return chance is not None


def _label(suite: str, metric: str) -> str:
    """A metric's column header or panel title: the label its suite declares, else its name."""
    return getattr(declared(suite, metric), "label", None) or metric


def plot_bars(suite: str, tables: dict[str, dict[str, Any]], bars: Bars, path: Path) -> Path | None:
    """A suite's :class:`~perception_judge.evaluation.base.Bars` titled with what it scored: a bar per model (its
    ``control``'s hatched beside it) and metric, seed std as error bars, chance dotted, headings over the groups;
    a number the suite declares undefined is an empty hatched bar marked n/a, never a 0."""
    table, control = tables[suite], tables.get(bars.control or "", {})
    metrics, undefined = [m for m in bars.metrics if m in table["columns"]], table.get("undefined") or {}
    paired, series = {r["model"]: r for r in control.get("rows", [])}, []
    for i, r in enumerate(table["rows"]):  # each model's bar, then its control's
        c = paired.get(r["model"])
        series += [(r, r["model"], i, None)] + [(c, "· control", i, "xx")] * (c is not None)
    if not metrics or not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(8, (0.9 + 0.1 * len(series)) * len(metrics) + 2), 4.8))
    w, lowest, spread = 0.8 / len(series), 0.0, False
    for k, (row, label, i, hatch) in enumerate(series):
        xs = [j - 0.4 + w * (k + 0.5) for j in range(len(metrics))]
        cells = [row["values"].get(m, (None, None)) for m in metrics]
        errors, heights = [std or 0.0 for _, std in cells], [mean or 0.0 for mean, _ in cells]
        colour = plt.get_cmap("viridis")(i / max(1, len(table["rows"]) - 1) * 0.9)
        quoted = f" ({bars.legend} {_fmt(_mean(row, bars.legend))})" if bars.legend in row["values"] else ""
        quoted += " [degenerate]" * (label in table.get("degenerate", {}))
        ax.bar(xs, heights, w, yerr=errors if any(errors) else None, label=label + quoted, color=colour,
               capsize=2, hatch=hatch, alpha=0.55 if hatch else 1.0)  # fmt: skip
        lowest, spread = min(lowest, *heights), spread or any(errors)
        for x, m, (mean, _) in zip(xs, metrics, cells):
            if mean is None and m in undefined.get(row["model"], {}):
                ax.bar(x, 0.12, w, fill=False, hatch="///", edgecolor=colour)
                ax.text(x, 0.14, NOT_AVAILABLE, ha="center", va="bottom", fontsize=7, rotation=90)
    chance = [_chance(ax, suite, m, j - 0.45, j + 0.45) for j, m in enumerate(metrics)]
    start = 0
    for group, run in itertools.groupby(bars.groups.get(m) for m in metrics):  # a heading over each run
        n = len(list(run))
        if group and start:
            ax.axvline(start - 0.5, color="grey", lw=0.8, ls="--")
        ax.text(start + n / 2 - 0.5, 1.07, group or "", ha="center", fontsize=9)
        start += n
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([bars.metrics[m] for m in metrics], fontsize=8, rotation=12)
    ax.set(ylim=(min(0.0, lowest - 0.05), 1.15), ylabel=bars.ylabel)
    said = textwrap.fill(table.get("provenance", ""), int(fig.get_figwidth() * 11))  # what it scored, wrapped
    ax.set_title(f"{bars.title}\n{said}".strip(), fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(4, len(table["rows"])))
    bar_note = "Error bars: ± 1 std over seeds." if spread else "One seed (or no spread): no error bars."
    bar_note += " Dotted: chance." * any(chance) + f" Hatched (· control): {bars.control}." * bool(paired)
    return _save_figure(plt, fig, path, caption=bar_note)


def _band(row: dict[str, Any], metric: str) -> tuple[float, float]:
    """A value's 95% interval: the suite's own (``<metric>_ci95_lo`` / ``_hi``), else the t interval over seeds."""
    (mean, std), n = row["values"][metric], row.get("n", {}).get(metric, 1)
    lo, hi = _mean(row, f"{metric}_ci95_lo"), _mean(row, f"{metric}_ci95_hi")
    if lo is not None and hi is not None:
        return lo, hi
    half = student_t.ppf(0.975, n - 1) * std / math.sqrt(n) if std and n > 1 else 0.0
    return mean - half, mean + half


def plot_vs_step(suite: str, table: dict[str, Any], path: Path) -> list[Path]:
    """The suite's headline metrics but counts (else every numeric one) against the training step, one panel each
    with the 95% band of :func:`_band`, chance dotted; more than 16 spill into ``<name>_2.png``, ...: the files."""
    from matplotlib.ticker import MaxNLocator

    rows = [r for r in table["rows"] if r["step"] is not None]
    numeric = [m for m in table["columns"] if any(_mean(r, m) is not None for r in rows)]
    counts = {m for m in numeric if getattr(declared(suite, m), "count", False)}
    metrics = [m for m in headline(suite, table) if m in numeric and m not in counts] or numeric  # else all
    if not rows or not metrics:
        return []
    plt = _plt()
    written = []
    pages = [metrics[i : i + PANELS_PER_PAGE] for i in range(0, len(metrics), PANELS_PER_PAGE)]
    for page_no, page in enumerate(pages, 1):
        ncols = min(4, len(page))
        nrows = math.ceil(len(page) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.7 * nrows + 0.4), squeeze=False)
        for ax, m in zip(axes.flat, page):
            pts = sorted(
                (r for r in rows if _mean(r, m) is not None), key=lambda r: (r["step"], r["model"] == "final")
            )
            steps, means = [r["step"] for r in pts], [_mean(r, m) for r in pts]
            ax.fill_between(steps, *zip(*(_band(r, m) for r in pts)), alpha=0.25, lw=0)
            ax.plot(steps, means, marker="o", ms=4, lw=1.2)
            _chance(ax, suite, m, min(steps), max(steps))
            for x, y, r in zip(steps, means, pts):
                if r["model"] in ("base", "final"):
                    ax.annotate(r["model"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            label = _label(suite, m)
            ax.set_title(label if len(label) <= 40 else label[:37] + "...", fontsize=9)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(page) :]:
            ax.axis("off")
        for ax in axes[-1]:
            ax.set_xlabel("training step", fontsize=8)
        suffix = f" ({page_no}/{len(pages)})" if len(pages) > 1 else ""
        fig.suptitle(f"{suite}: headline metrics against training step{suffix}", fontsize=11)
        out = path if page_no == 1 else path.with_name(f"{path.stem}_{page_no}{path.suffix}")
        written.append(_save_figure(plt, fig, out, dpi=100, caption=BAND))
    return written


def _cell(suite: str, row: dict[str, Any], metric: str, undefined: dict[str, dict[str, str]]) -> str:
    """A table cell: the mean with its 95% interval when the suite reports one (``<metric>_ci95_lo`` / ``_hi``),
    else ± the std over seeds; a count as an integer; ``n/a`` (with a short reason) where the suite says why."""
    mean, std = row["values"].get(metric, (None, None))
    if mean is None and metric in undefined.get(row["model"], {}):
        reasons = {r.split(": ", 1)[-1] for r in undefined[row["model"]][metric].split("; ")}
        short = len(reasons) == 1 and len(reason := reasons.pop()) <= SHORT_REASON
        return f"{NOT_AVAILABLE} ({reason})" if short else NOT_AVAILABLE
    lo, hi = _mean(row, f"{metric}_ci95_lo"), _mean(row, f"{metric}_ci95_hi")
    if mean is not None and lo is not None and hi is not None:
        return f"{_fmt(mean)} [{lo:.2f}, {hi:.2f}]"
    return _fmt(mean, std, count=getattr(declared(suite, metric), "count", False))


def _md_table(suite: str, table: dict[str, Any], columns: list[str]) -> list[str]:
    """A Markdown table of ``columns``; an undefined number reads ``n/a`` (why: in the cell or below the table)."""
    undefined = table.get("undefined") or {}
    head = ["model", "step", *[_label(suite, c) for c in columns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * len(columns)) + "|"]
    notes = []
    for r in table["rows"]:
        cells = [_cell(suite, r, c, undefined) for c in columns]
        lines.append("| " + " | ".join([r["model"], _fmt(r["step"], count=True), *cells]) + " |")
        why = undefined.get(r["model"], {})
        notes += [
            f"- {NOT_AVAILABLE}: `{r['model']}` `{c}`: {why[c]}"
            for c, v in zip(columns, cells)
            if c in why and v == NOT_AVAILABLE
        ]
    return [*lines, "", *([*notes, ""] if notes else [])]


def undefined_metrics(
    results: list[tuple[dict[str, Any], dict[str, Any]]],
) -> dict[str, dict[str, dict[str, str]]]:
    """Per suite and model, the numbers its cells declared undefined and why (``protocol["undefined_metrics"]``,
    e.g. an official group without a decided item); a model's reasons from several seeds are joined."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for cell, result in results:
        declared_now = (result.get("protocol") or {}).get("undefined_metrics") or {}
        mine = out.setdefault(cell["suite"], {}).setdefault(cell["model"], {})
        for metric, reason in declared_now.items():
            seed = f"seed {cell.get('seed')}: " if cell.get("seed") is not None else ""
            mine[metric] = "; ".join(filter(None, [mine.get(metric), seed + str(reason)]))
    return out


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    best, ckpt, lines = summary.get("best"), summary.get("best_checkpoint"), []
    flagged = [
        f"- degenerate, never ranked: `{m}` ({', '.join(s)})"
        for m, s in summary.get("degenerate", {}).items()
    ]
    if not best:
        return [f"No best model: {summary.get('criterion')}.", *flagged]
    head = f"**Best model: `{best}`**" + (
        f"; best trained checkpoint: `{ckpt}`." if ckpt and ckpt != best else "."
    )
    for suite, v in summary["per_suite"].items() if not summary.get("all_tied") else ():
        tie = f"; tied with {', '.join(f'`{m}`' for m in v['tied_with'])}" if v.get("tied_with") else ""
        lines.append(f"- {suite}: best `{v['best']}` ({v['metric']} = {_fmt(v['value'])}{tie})")
    if tied := summary.get("all_tied"):
        why = tied if isinstance(tied, str) else "every model ties on every suite's primary metric"
        head = f"**No model stands out: {why}** (the tie-break picks `{best}`)."
    return [head, "", f"Criterion: {summary['criterion']}.", *lines, *flagged]


def provenance(protocol: dict[str, Any]) -> str:
    """What a suite scored (its cell's ``protocol``): the prompt (the published file and sha256) and the data."""
    p, d = protocol.get("prompt"), protocol.get("data")
    prompts = list(p.values()) if isinstance(p, dict) and "origin" not in p else []
    files = {f"{q['repository']} {q['file']} (sha256 {q['sha256'][:12]}…)" for q in prompts if "sha256" in q}
    text = "prompt: " + (f"published, {'; '.join(sorted(files))}" if files else "the project's")
    if isinstance(d, dict) and "source" in d:
        left = [f"left out: {x}" for x in d.get("left_out") or []]
        ours = ["the project's items, not the benchmark's"] * (d["source"] != "official")
        kv = [f"{k.replace('_', ' ')} {v}" for k, v in d.items() if k != "source" and type(v) in (int, str)]
        facts = ours + kv + (left or ["complete"] * (not ours and d.get("complete") is True))
        text += f"; data: {d['source']} ({', '.join(facts)})"
    return text


def _suite_lines(suite: str, table: dict[str, Any], counts: dict[str, dict[str, Any]]) -> list[str]:
    """A suite's section: what it scored (prompt, data), its headline table (a table per protocol family), the
    comparability mark, the judges flagged degenerate, the parser, the counts."""
    lines = [f"## {suite}", "", f"Scored with {table['provenance']}.", ""]
    groups: dict[str, list[str]] = {}
    for c in headline(suite, table):
        groups.setdefault(metric_family(c), []).append(c)
    for family, members in groups.items():
        rule = (table.get("rules") or {}).get(family)
        lines += [f"**{family} protocol**: {PROTOCOL_FAMILIES[family]}{f': {rule}' if rule else ''}.", ""]
        lines += _md_table(suite, table, members)
    if mark := table.get("comparable"):  # its one rule: prompt_source.comparable
        held = ", ".join(f"`{m}`" for m in mark["metrics"]).replace("`*`", "every number") or "none"
        verdict = "**yes**" if mark["ok"] else f"**no** ({'; '.join(mark['why_not'])})"
        lines += [f"Comparable with the published table ({mark['table']}): {verdict}. Its numbers here: {held}; "
                  "any other is the project's metric (metric: ours).", ""]  # fmt: skip
    lines += [f"Degenerate, never ranked: `{m}`: {why}.\n" for m, why in table["degenerate"].items()]
    lines += [SUITES[suite].note, ""] if suite in SUITES and SUITES[suite].note else []
    lines += [f"Parser: {table['parser']}.", ""] if table.get("parser") else []
    if counts:
        keys = sorted({k for c in counts.values() for k in c})
        lines += ["Counts (totals over seeds):", "", "| model | " + " | ".join(keys) + " |"]
        lines.append("|---|" + "|".join(["---:"] * len(keys)) + "|")
        lines += [
            f"| {m} | " + " | ".join(_fmt(c.get(k), count=True) for k in keys) + " |"
            for m, c in counts.items()
        ]
        lines.append("")
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# Evaluation report", ""]
    if report.get("run_dir"):
        lines += [f"Training run: `{report['run_dir']}`", ""]
    if plan := report.get("plan"):
        b = dict(plan.get("backend") or {})
        s, policy, think = b.pop("sampling", {}), b.pop("pixel_policy", None), b.pop("think_prefix", None)
        lines += [
            f"Suites: {', '.join(plan.get('suites', []))}; seeds: {plan.get('seeds')}; limit: {plan.get('limit')}.",
            f"Decoding: temperature {s.get('temperature')}, top_p {s.get('top_p')}, top_k {s.get('top_k')}, "
            f"max_new_tokens {s.get('max_new_tokens')}. Pixel policy: `{json.dumps(policy)}`; think prefix: {think}.",
            *[f"**Warning**: {w}." for w in plan.get("warnings") or []],
            "",
        ]
    judges = [f"- `{m}`: `{json.dumps(d)}`" for m, d in report.get("backends", {}).items()]
    lines += ["Judges (each one's backend as its cells ran):", "", *judges, ""] if judges else []
    lines += ["## Summary", "", *_summary_lines(report["summary"]), ""]
    for suite, table in report["tables"].items():
        lines += _suite_lines(suite, table, report.get("counts", {}).get(suite) or {})
    if failed := report.get("failed_cells"):
        lines += ["## Failed cells", "", *[f"- `{c['cell']}`: {c.get('error')}" for c in failed], ""]
    if report.get("plots"):
        lines += ["## Plots", "", *[f"![{Path(p).stem}]({p})" for p in report["plots"]], ""]
    lines += [FOOTNOTE, ""]
    lines.append(
        "Every metric of every suite, mean and std over seeds: `results.csv` / `results.json` / `report.json`; "
        "`cells/` holds one JSON per model × suite × seed, with per-sample outputs in the folder of the same name."
    )
    return "\n".join(lines) + "\n"


def _tables(out_dir: Path, data: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
    """Per suite: the table (with its parser, official rule, undefined numbers, provenance, comparability mark and
    degenerate judges), its first finished cell's protocol, counts summed over seeds; each model's backend."""
    models = [m["name"] for m in data.get("models", [])]
    rows = data.get("rows", [])
    suites = [s for s in (data.get("plan") or {}).get("suites", []) if any(r["suite"] == s for r in rows)]
    suites += sorted({r["suite"] for r in rows} - set(suites))
    tables = {s: _table(rows, s, models) for s in suites}
    protocols: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, dict[str, float]]] = {}
    results, degenerate, backends = done_results(out_dir, data), {}, {}
    undefined = undefined_metrics(results)
    for c, result in results:
        protocol = result.get("protocol") or {}
        protocols.setdefault(c["suite"], protocol)
        backends.setdefault(c["model"], protocol.get("backend"))
        if protocol.get("degenerate"):
            degenerate.setdefault(c["suite"], {})[c["model"]] = protocol["degenerate"]
        agg = counts.setdefault(c["suite"], {}).setdefault(c["model"], {})
        for k, v in (result.get("counts") or {}).items():
            if isinstance(v, int | float):
                agg[k] = agg.get(k, 0) + v
    for s, table in tables.items():
        first = protocols.get(s, {})
        table["parser"] = str(first.get("parser") or "protocol (the project's strict score parser)")
        official = first.get("official_rule")  # the rule the official.* numbers follow
        table["rules"] = {"official": str(official)} if official else {}
        table["undefined"] = {m: why for m, why in undefined.get(s, {}).items() if why}
        table |= {"provenance": provenance(first), "comparable": first.get("comparable")}
        table["degenerate"] = degenerate.get(s, {})
    counts = {s: {m: per[m] for m in models if m in per} for s, per in counts.items()}  # the tables' order
    return tables, protocols, counts, {m: backends[m] for m in models if backends.get(m)}


def _json_table(suite: str, t: dict[str, Any]) -> dict[str, Any]:
    """A suite's table as ``report.json`` holds it: every metric, the headline, each metric's protocol family."""
    rows = [
        {**r, "values": {k: {"mean": m, "std": s} for k, (m, s) in r["values"].items()}} for r in t["rows"]
    ]
    out = {"columns": t["columns"], "headline": headline(suite, t), "parser": t["parser"]}
    out["protocol_of"] = {c: metric_family(c) for c in t["columns"]}
    keys = ("rules", "undefined", "provenance", "comparable", "degenerate")
    return out | {k: t[k] for k in keys} | {"rows": rows}


def write_report(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Write report.md, report.json and plots/*.png for an evaluation folder; returns the report dict."""
    out_dir = Path(out_dir)
    data = read_results(out_dir)
    models = [m["name"] for m in data.get("models", [])]
    tables, protocols, counts, backends = _tables(out_dir, data)
    plots_dir = out_dir / PLOTS_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    bars = {s: SUITES[s].bars for s in tables if s in SUITES and SUITES[s].bars}
    written = [plot_bars(s, tables, b, plots_dir / b.file) for s, b in bars.items()]
    for s, table in tables.items():
        written += plot_vs_step(s, table, plots_dir / f"{s}_vs_step.png")
    report = {
        "run_dir": data.get("run_dir"),
        "plan": data.get("plan"),
        "models": data.get("models", []),
        "backends": backends,
        "summary": best_model(tables, protocols, models),
        "tables": {s: _json_table(s, t) for s, t in tables.items()},
        "counts": counts,
        "failed_cells": [c for c in data.get("cells", []) if c.get("status") != "done"],
        "plots": [f"{PLOTS_DIR}/{p.name}" for p in written if p],
    }
    # the JSON files are redacted on write
    markdown = redact_text(render_markdown({**report, "tables": tables}))
    atomic_write_text(out_dir / "report.md", markdown, fsync=False)
    atomic_write_json(out_dir / "report.json", report, fsync=False)
    return report
