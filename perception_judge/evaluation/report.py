"""Reports of an evaluation folder (a sweep or a comparison of judges): Markdown, JSON and PNG plots.

``write_report(out_dir)`` reads the folder's results (:mod:`perception_judge.evaluation.results`) and writes
``report.md`` (plan, the best model by :func:`best_model`, a table per suite with mean ± std over seeds,
counts, failed cells, plots), ``report.json`` (the same, machine-readable) and ``plots/``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from scipy.stats import rankdata

from perception_judge.core.io import atomic_write_json, atomic_write_text
from perception_judge.evaluation.base import lower_is_better
from perception_judge.evaluation.bias.taxonomy import BIASES, CATEGORIES
from perception_judge.evaluation.results import done_results, read_results

PLOTS_DIR = "plots"
_MAX_COLS = 8
PANELS_PER_PAGE = 16
PERCEPTION_BARS = (
    ("pair_acc_c_vs_rp", "pair: r_c > r_rp"),
    ("pair_acc_c_vs_rp_r", "pair: r_c > r_rp+r"),
    ("pair_consistency", "pair: order consistency"),
    ("batch_ranking_reward", "batch: ranking reward"),
    ("batch_kendall_tau", "batch: Kendall τ"),
    ("single_verdict_acc", "single: verdict acc."),
)


def _fmt(mean: float | None, std: float | None = None) -> str:
    if mean is None or math.isnan(mean):
        return "–"
    return f"{mean:.3f}" + ("" if std is None or math.isnan(std) else f" ± {std:.3f}")


def _mean(row: dict[str, Any], metric: str) -> float | None:
    """A table row's mean of ``metric`` (None when the model has none)."""
    return row["values"].get(metric, (None, None))[0]


def _is_aux(metric: str) -> bool:
    """Metrics shown only as error bars / in JSON, not as their own columns or panels (seed std)."""
    return metric.endswith("_std") or metric.startswith("std.")


def metric_direction(metric: str, protocol: dict[str, Any]) -> bool:
    """True when higher is better: a suite may list ``lower_is_better`` metric names or set
    ``higher_is_better`` to a ``{metric: bool}`` map, or to a bool for its primary metric; otherwise the name
    decides (:func:`~perception_judge.evaluation.base.lower_is_better`)."""
    hib = protocol.get("higher_is_better")
    if metric in (protocol.get("lower_is_better") or []):
        return False
    if isinstance(hib, dict) and metric in hib:
        return bool(hib[metric])
    if lower_is_better(metric):
        return False
    return hib if isinstance(hib, bool) and metric == protocol.get("primary_metric") else True


def primary_metric(suite: str, metrics: list[str], protocol: dict[str, Any]) -> str | None:
    """The suite's ``protocol["primary_metric"]`` when it names a reported metric; else the first metric that is
    not a std, a count or a lower-is-better metric (failure rates, variances, ...)."""
    if protocol.get("primary_metric") in metrics:
        return protocol["primary_metric"]
    plain = (m for m in metrics if not _is_aux(m) and not m.startswith("n_") and not lower_is_better(m))
    return next(plain, None)


PROTOCOL_FAMILIES = {
    "project": "the project's rules (failures and ties count against the judge)",
    "published": "a replica of the published evaluation script's aggregation",
    "official": "the benchmark's official scoring rule, as its own script computes it",
}
NOT_AVAILABLE = "n/a"
"""A cell whose number the suite declares undefined, with a reason (``protocol["undefined_metrics"]``): never 0."""


def metric_family(metric: str) -> str:
    """The :data:`PROTOCOL_FAMILIES` key of a number: ``official.*``, ``flex.*`` (published), else project."""
    return {"official": "official", "flex": "published"}.get(metric.split(".", 1)[0], "project")


def _table(rows: list[dict[str, Any]], suite: str, models: list[str]) -> dict[str, Any]:
    """{columns, rows: [{model, step, values: {metric: (mean, std)}}]} for one suite."""
    rows = [r for r in rows if r["suite"] == suite]
    by_model: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    steps: dict[str, Any] = {}
    for r in rows:
        by_model.setdefault(r["model"], {})[r["metric"]] = (r["mean"], r["std"])
        steps[r["model"]] = r["step"]
    columns = list(dict.fromkeys(r["metric"] for r in rows if not _is_aux(r["metric"])))
    if suite == "bias":
        canon = [b.bias_type for b in BIASES] + list(CATEGORIES) + ["overall"]
        columns = [c for c in canon if c in columns] + [c for c in columns if c not in canon]
    out_rows = [{"model": m, "step": steps.get(m), "values": by_model[m]} for m in models if m in by_model]
    return {"columns": columns, "rows": out_rows}


def best_model(
    tables: dict[str, dict[str, Any]], protocols: dict[str, dict[str, Any]], models: list[str]
) -> dict[str, Any]:
    """The best model overall and per suite.

    Criterion: per suite, rank the models by the suite's primary metric (bias: ``overall``; perception:
    ``pair_acc``; other suites: their declared ``primary_metric``), in its direction, ties sharing the mean rank;
    the best model has the lowest mean rank over the suites it was evaluated on (models missing a suite's primary
    metric are not ranked there). Ties go to the model with more suites, then the later step. Control suites
    (``protocol["control"]``, e.g. ``perception_mismatched``: a good judge sits at chance there) are reported but
    never ranked.
    """
    per_suite: dict[str, Any] = {}
    rank_sum: dict[str, list[float]] = {}
    order = {m: i for i, m in enumerate(models)}
    for suite, table in tables.items():
        proto = protocols.get(suite, {})
        pm = None if proto.get("control") else primary_metric(suite, table["columns"], proto)
        if pm is None:
            continue
        hib = metric_direction(pm, proto)
        vals = {r["model"]: v for r in table["rows"] if (v := _mean(r, pm)) is not None}
        if not vals:
            continue
        ranks = dict(zip(vals, map(float, rankdata([-v if hib else v for v in vals.values()]))))
        best = min(ranks, key=lambda m: (ranks[m], -order.get(m, 0)))
        per_suite[suite] = {
            "metric": pm,
            "higher_is_better": hib,
            "best": best,
            "value": vals[best],
            "tied_with": sorted(m for m in vals if m != best and vals[m] == vals[best]),
            "n_ranked": len(vals),
        }
        for m, r in ranks.items():
            rank_sum.setdefault(m, []).append(r)
    if not rank_sum:
        return {"best": None, "criterion": "no suite produced a primary metric", "per_suite": per_suite}

    mean_rank = {m: sum(v) / len(v) for m, v in rank_sum.items()}
    all_tied = len(rank_sum) > 1 and all(len(v["tied_with"]) == v["n_ranked"] - 1 for v in per_suite.values())

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
        "then later step",
        "per_suite": per_suite,
    }


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(plt: Any, fig: Any, path: Path, dpi: int = 110) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _bar_figure(
    rows: list[dict[str, Any]],
    metrics: list[str],
    labels: list[str],
    cmap: str,
    shade: float,
    width: float,
    height: float,
) -> tuple[Any, Any, Any]:
    """Grouped bars: one group per metric, one bar per model (coloured along ``cmap`` up to ``shade``), the std
    over seeds as error bars when any is non-zero."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(8, width * len(metrics) + 2), height))
    n, w = len(rows), 0.8 / len(rows)
    for i, (row, label) in enumerate(zip(rows, labels)):
        cells = [row["values"].get(m, (None, None)) for m in metrics]
        errors = [std or 0.0 for _, std in cells]
        ax.bar(
            [j - 0.4 + w * (i + 0.5) for j in range(len(metrics))],
            [mean or 0.0 for mean, _ in cells],
            w,
            yerr=errors if any(errors) else None,
            label=label,
            color=plt.get_cmap(cmap)(i / max(1, n - 1) * shade),
            capsize=2,
        )
    ax.set_xticks(range(len(metrics)))
    return plt, fig, ax


def plot_bias_bars(table: dict[str, Any], path: Path) -> Path | None:
    """The nine biases per model as grouped bars (0-1; BD types left, BC types right)."""
    types = [b for b in BIASES if b.bias_type in table["columns"]]
    rows = [r for r in table["rows"] if any(_mean(r, b.bias_type) is not None for b in types)]
    if not types or not rows:
        return None
    labels = [
        f"{r['model']} (overall {_fmt(r['values']['overall'][0])})"
        if "overall" in r["values"]
        else r["model"]
        for r in rows
    ]
    plt, fig, ax = _bar_figure(rows, [b.bias_type for b in types], labels, "viridis", 0.9, 1.1, 4.6)
    n_bd = sum(b.metric == "bd" for b in types)
    if 0 < n_bd < len(types):
        ax.axvline(n_bd - 0.5, color="grey", lw=0.8, ls="--")
        ax.text(n_bd / 2 - 0.5, 1.07, "Bias-Deviation (↑)", ha="center", fontsize=9)
        ax.text((n_bd + len(types)) / 2 - 0.5, 1.07, "Bias-Conformity (↑)", ha="center", fontsize=9)
    ax.set_xticklabels([b.short for b in types])
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("score (higher is better)")
    ax.set_title("MM-JudgeBias: the nine biases per model")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=min(4, len(rows)))
    return _save_figure(plt, fig, path)


def plot_perception(table: dict[str, Any], path: Path) -> Path | None:
    """Per-protocol accuracies per model (grouped bars)."""
    metrics = [(m, lab) for m, lab in PERCEPTION_BARS if m in table["columns"]]
    rows = table["rows"]
    if not metrics or not rows:
        return None
    plt, fig, ax = _bar_figure(
        rows, [m for m, _ in metrics], [r["model"] for r in rows], "plasma", 0.85, 1.4, 4.4
    )
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticklabels([lab for _, lab in metrics], fontsize=8, rotation=12)
    low_tau = min(_mean(r, "batch_kendall_tau") or 0 for r in rows)
    ax.set_ylim(min(-0.05, low_tau - 0.05), 1.15)
    ax.set_title("Perceptual sensitivity per protocol (held-out PPJD)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(5, len(rows)))
    return _save_figure(plt, fig, path)


def plot_vs_step(suite: str, table: dict[str, Any], path: Path) -> list[Path]:
    """Every numeric metric of a suite against the training step (one panel per metric, std over seeds as error
    bars). More than 16 metrics spill over into ``<name>_2.png``, ``<name>_3.png``, ...; returns the files."""
    rows = [r for r in table["rows"] if r["step"] is not None]
    metrics = [m for m in table["columns"] if any(_mean(r, m) is not None for r in rows)]
    if not rows or not metrics:
        return []
    plt = _plt()
    written = []
    pages = [metrics[i : i + PANELS_PER_PAGE] for i in range(0, len(metrics), PANELS_PER_PAGE)]
    for page_no, page in enumerate(pages, 1):
        ncols = min(4, len(page))
        nrows = math.ceil(len(page) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.7 * nrows), squeeze=False)
        for ax, m in zip(axes.flat, page):
            pts = sorted(
                ((r["step"], *r["values"][m], r["model"]) for r in rows if _mean(r, m) is not None),
                key=lambda p: (p[0], p[3] == "final"),
            )
            steps, means, stds, _ = zip(*pts)
            err = [std or 0.0 for std in stds]
            ax.errorbar(steps, means, yerr=err if any(err) else None, marker="o", ms=4, lw=1.2, capsize=2)
            for x, y, _, name in pts:
                if name in ("base", "final"):
                    ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            ax.set_title(m if len(m) <= 40 else m[:37] + "...", fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(page) :]:
            ax.axis("off")
        for ax in axes[-1]:
            ax.set_xlabel("training step", fontsize=8)
        suffix = f" ({page_no}/{len(pages)})" if len(pages) > 1 else ""
        fig.suptitle(f"{suite}: metrics against training step{suffix}", fontsize=11)
        out = path if page_no == 1 else path.with_name(f"{path.stem}_{page_no}{path.suffix}")
        written.append(_save_figure(plt, fig, out, dpi=100))
    return written


def _cell(row: dict[str, Any], metric: str, undefined: dict[str, dict[str, str]]) -> str:
    mean, std = row["values"].get(metric, (None, None))
    if mean is None and metric in undefined.get(row["model"], {}):
        return NOT_AVAILABLE
    return _fmt(mean, std)


def _md_table(table: dict[str, Any], columns: list[str], headers: dict[str, str] | None = None) -> list[str]:
    """A Markdown table of ``columns``; a number the suite declared undefined reads ``n/a`` and its reason follows
    the table."""
    undefined = table.get("undefined") or {}
    head = ["model", "step", *[(headers or {}).get(c, c) for c in columns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * len(columns)) + "|"]
    notes = []
    for r in table["rows"]:
        cells = [r["model"], "–" if r["step"] is None else str(r["step"])]
        cells += [_cell(r, c, undefined) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
        why = undefined.get(r["model"], {})
        notes += [
            f"- {NOT_AVAILABLE}: `{r['model']}` `{c}`: {why[c]}"
            for c in columns
            if _cell(r, c, undefined) == NOT_AVAILABLE
        ]
    return [*lines, "", *([*notes, ""] if notes else [])]


def undefined_metrics(
    results: list[tuple[dict[str, Any], dict[str, Any]]],
) -> dict[str, dict[str, dict[str, str]]]:
    """Per suite and model, the numbers its cells declared undefined and why (``protocol["undefined_metrics"]``,
    e.g. an official group without a decided item); a model's reasons from several seeds are joined."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for cell, result in results:
        declared = (result.get("protocol") or {}).get("undefined_metrics") or {}
        mine = out.setdefault(cell["suite"], {}).setdefault(cell["model"], {})
        for metric, reason in declared.items():
            seed = f"seed {cell.get('seed')}: " if cell.get("seed") is not None else ""
            mine[metric] = "; ".join(filter(None, [mine.get(metric), seed + str(reason)]))
    return out


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    if not summary.get("best"):
        return [f"No best model: {summary.get('criterion')}."]
    if summary.get("all_tied"):
        return [
            "**No model stands out: every model ties on every suite's primary metric** "
            f"(the tie-break picks `{summary['best']}`).",
            "",
            f"Criterion: {summary['criterion']}.",
        ]
    ckpt = summary.get("best_checkpoint")
    also = f"; best trained checkpoint: `{ckpt}`." if ckpt and ckpt != summary["best"] else "."
    lines = [f"**Best model: `{summary['best']}`**{also}", "", f"Criterion: {summary['criterion']}."]
    for suite, v in summary.get("per_suite", {}).items():
        tie = f"; tied with {', '.join(f'`{m}`' for m in v['tied_with'])}" if v.get("tied_with") else ""
        lines.append(f"- {suite}: best `{v['best']}` ({v['metric']} = {_fmt(v['value'])}{tie})")
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# Evaluation report", ""]
    if report.get("run_dir"):
        lines += [f"Training run: `{report['run_dir']}`", ""]
    if plan := report.get("plan"):
        s = plan.get("sampling", {})
        lines += [
            f"Suites: {', '.join(plan.get('suites', []))}; seeds: {plan.get('seeds')}; limit: {plan.get('limit')}.",
            f"Decoding: temperature {s.get('temperature')}, top_p {s.get('top_p')}, top_k {s.get('top_k')}, "
            f"max_new_tokens {s.get('max_new_tokens')}. Backend: `{json.dumps(plan.get('backend'))}`. "
            f"Pixel policy: `{json.dumps(plan.get('pixel_policy'))}`; think prefix: {plan.get('think_prefix')}.",
            "",
        ]
    lines += ["## Summary", "", *_summary_lines(report["summary"]), ""]
    for suite, table in report["tables"].items():
        lines += [f"## {suite}", ""]
        cols = table["columns"]
        if suite == "bias":
            short = {b.bias_type: f"{b.short} ({b.metric.upper()})" for b in BIASES}
            main = [c for c in cols if c in short or c in (*CATEGORIES, "overall")]
            lines += _md_table(table, main, short)
            if rest := [c for c in cols if c not in main]:
                lines += _md_table(table, rest)
            lines += [
                "BD: share of the downward room used when the evidence is destroyed; BC: 1 − relative score change "
                "under meaning-preserving changes; overall = mean of the nine. Higher is better everywhere.",
                "",
            ]
        else:
            groups: dict[str, list[str]] = {}
            for c in cols:
                groups.setdefault(metric_family(c), []).append(c)
            for family, members in groups.items():
                rule = (table.get("rules") or {}).get(family)
                lines += [
                    f"**{family} protocol**: {PROTOCOL_FAMILIES[family]}{f': {rule}' if rule else ''}.",
                    "",
                ]
                for start in range(0, len(members), _MAX_COLS):
                    lines += _md_table(table, members[start : start + _MAX_COLS])
        if table.get("parser"):
            lines += [f"Parser: {table['parser']}.", ""]
        if counts := report.get("counts", {}).get(suite):
            keys = sorted({k for c in counts.values() for k in c})
            lines += ["Counts (totals over seeds):", "", "| model | " + " | ".join(keys) + " |"]
            lines.append("|---|" + "|".join(["---:"] * len(keys)) + "|")
            lines += [
                f"| {m} | " + " | ".join(str(c.get(k, "–")) for k in keys) + " |" for m, c in counts.items()
            ]
            lines.append("")
    if failed := report.get("failed_cells"):
        lines += ["## Failed cells", "", *[f"- `{c['cell']}`: {c.get('error')}" for c in failed], ""]
    if report.get("plots"):
        lines += ["## Plots", "", *[f"![{Path(p).stem}]({p})" for p in report["plots"]], ""]
    lines.append(
        "Files: `results.csv` / `results.json` (every metric, mean and std over seeds), `cells/` (one JSON "
        "per model × suite × seed, with per-sample outputs in the folder of the same name)."
    )
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Write report.md, report.json and plots/*.png for an evaluation folder; returns the report dict."""
    out_dir = Path(out_dir)
    data = read_results(out_dir)
    models = [m["name"] for m in data.get("models", [])]
    rows = data.get("rows", [])
    suites = [s for s in (data.get("plan") or {}).get("suites", []) if any(r["suite"] == s for r in rows)]
    suites += sorted({r["suite"] for r in rows} - set(suites))
    tables = {s: _table(rows, s, models) for s in suites}
    protocols: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, dict[str, int]]] = {}
    results = done_results(out_dir, data)
    undefined = undefined_metrics(results)
    for c, result in results:
        protocols.setdefault(c["suite"], result.get("protocol") or {})
        agg = counts.setdefault(c["suite"], {}).setdefault(c["model"], {})
        for k, v in (result.get("counts") or {}).items():
            if isinstance(v, int | float):
                agg[k] = agg.get(k, 0) + v
    for s, table in tables.items():
        parser = protocols.get(s, {}).get("parser")  # the parser that produced the suite's scores
        table["parser"] = str(parser or "protocol (the project's strict score parser)")
        official = protocols.get(s, {}).get("official_rule")  # the rule the official.* numbers follow
        table["rules"] = {"official": str(official)} if official else {}
        table["undefined"] = {m: why for m, why in undefined.get(s, {}).items() if why}
    plots_dir = out_dir / PLOTS_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path | None] = []
    if "bias" in tables:
        written.append(plot_bias_bars(tables["bias"], plots_dir / "bias_per_model.png"))
    if "perception" in tables:
        written.append(plot_perception(tables["perception"], plots_dir / "perception_protocols.png"))
    for s, table in tables.items():
        written += plot_vs_step(s, table, plots_dir / f"{s}_vs_step.png")
    report = {
        "run_dir": data.get("run_dir"),
        "plan": data.get("plan"),
        "models": data.get("models", []),
        "summary": best_model(tables, protocols, models),
        "tables": {
            s: {
                "columns": t["columns"],
                "parser": t["parser"],
                "protocol_of": {c: metric_family(c) for c in t["columns"]},
                "rules": t["rules"],
                "undefined": t["undefined"],
                "rows": [
                    {**r, "values": {k: {"mean": v[0], "std": v[1]} for k, v in r["values"].items()}}
                    for r in t["rows"]
                ],
            }
            for s, t in tables.items()
        },
        "counts": counts,
        "failed_cells": [c for c in data.get("cells", []) if c.get("status") != "done"],
        "plots": [f"{PLOTS_DIR}/{p.name}" for p in written if p],
    }
    atomic_write_text(out_dir / "report.md", render_markdown({**report, "tables": tables}), fsync=False)
    atomic_write_json(out_dir / "report.json", report, fsync=False)
    return report
