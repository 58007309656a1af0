"""Reports of an evaluation folder (a sweep or a comparison of judges): Markdown, JSON and PNG plots.

``write_report(out_dir)`` reads ``out_dir/results.json`` (written by :mod:`perception_judge.evaluation.sweep`) and
writes:

* ``report.md``: run and plan, the summary naming the best model, one table per suite (rows = models ordered by
  training step, cells = mean ± std over seeds), failed cells, the list of plots;
* ``report.json``: the same content, machine-readable;
* ``plots/bias_per_model.png``: the nine biases per model as grouped bars (BD types, then BC types);
* ``plots/perception_protocols.png``: per-protocol perceptual accuracies per model;
* ``plots/<suite>_vs_step.png``: every numeric metric of the suite against the training step (one panel each,
  error bars = std over seeds; only when the models have steps).

Any registered suite is rendered generically from its ``SuiteResult`` metrics; the best model is chosen by the
criterion in :func:`best_model`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_json, atomic_write_text
from perception_judge.evaluation.base import lower_is_better
from perception_judge.evaluation.bias.taxonomy import BIASES, CATEGORIES

PLOTS_DIR = "plots"
_MAX_COLS = 8


def _fmt(mean: float | None, std: float | None = None, digits: int = 3) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    s = f"{mean:.{digits}f}"
    if std is not None and not math.isnan(std):
        s += f" ± {std:.{digits}f}"
    return s


def _is_aux(metric: str) -> bool:
    """Metrics shown only as error bars / in JSON, not as their own columns or panels (seed std)."""
    return metric.endswith("_std") or metric.startswith("std.")


def _suite_protocols(data: dict[str, Any], out_dir: Path) -> dict[str, dict[str, Any]]:
    """The ``protocol`` block of one finished cell per suite (from the cell files)."""
    out: dict[str, dict[str, Any]] = {}
    for c in data.get("cells", []):
        if c.get("status") != "done" or c["suite"] in out:
            continue
        path = out_dir / "cells" / f"{c['cell']}.json"
        try:
            cell = json.loads(path.read_text(encoding="utf-8"))
            out[c["suite"]] = cell.get("result", {}).get("protocol", {}) or {}
        except (OSError, ValueError):
            continue
    return out


def metric_direction(metric: str, protocol: dict[str, Any]) -> bool:
    """True when higher is better: a suite may list ``lower_is_better`` metric names or set
    ``higher_is_better`` to a bool or a ``{metric: bool}`` map; otherwise the name decides
    (:func:`~perception_judge.evaluation.base.lower_is_better`)."""
    lower = protocol.get("lower_is_better") or []
    if metric in lower:
        return False
    hib = protocol.get("higher_is_better")
    if isinstance(hib, dict) and metric in hib:
        return bool(hib[metric])
    if lower_is_better(metric):
        return False
    if metric == protocol.get("primary_metric") and isinstance(hib, bool):
        return hib
    return True


def primary_metric(suite: str, metrics: list[str], protocol: dict[str, Any]) -> str | None:
    """The suite's ``protocol["primary_metric"]`` when it names a reported metric; else the first metric that is
    not a std, variance or failure rate."""
    pm = protocol.get("primary_metric")
    if pm in metrics:
        return pm
    for m in metrics:
        if not _is_aux(m) and not m.startswith("n_") and not any(t in m for t in ("fail_rate", "_var")):
            return m
    return None


def _table(rows: list[dict[str, Any]], suite: str, models: list[str]) -> dict[str, Any]:
    """{columns, rows: [{model, step, values: {metric: (mean, std)}}]} for one suite."""
    by_model: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    steps: dict[str, Any] = {}
    columns: list[str] = []
    for r in rows:
        if r["suite"] != suite:
            continue
        by_model.setdefault(r["model"], {})[r["metric"]] = (r["mean"], r["std"])
        steps[r["model"]] = r["step"]
        if not _is_aux(r["metric"]) and r["metric"] not in columns:
            columns.append(r["metric"])
    if suite == "bias":
        canon = [b.bias_type for b in BIASES] + list(CATEGORIES) + ["overall"]
        columns = [c for c in canon if c in columns] + [c for c in columns if c not in canon]
    out_rows = [{"model": m, "step": steps.get(m), "values": by_model[m]} for m in models if m in by_model]
    return {"columns": columns, "rows": out_rows}


def _rank(values: dict[str, float], higher_better: bool) -> dict[str, float]:
    """Average ranks (1 = best) with ties sharing the mean rank."""
    items = sorted(values.items(), key=lambda kv: -kv[1] if higher_better else kv[1])
    ranks: dict[str, float] = {}
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1][1] == items[i][1]:
            j += 1
        for k in range(i, j + 1):
            ranks[items[k][0]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def best_model(
    tables: dict[str, dict[str, Any]], protocols: dict[str, dict[str, Any]], models: list[str]
) -> dict[str, Any]:
    """The best model overall and per suite.

    Criterion: per suite, rank the models by the suite's primary metric (bias: ``overall``; perception:
    ``pair_acc``; other suites: their declared ``primary_metric``), in its direction; the best model has the
    lowest mean rank over the suites it was evaluated on (models missing a suite's primary metric are not
    ranked there). Ties go to the model with more suites, then the later step. Control suites (``protocol["control"]``,
    e.g. ``perception_mismatched``: a good judge sits at chance there) are reported but never ranked.
    """
    per_suite: dict[str, Any] = {}
    rank_sum: dict[str, list[float]] = {}
    for suite, table in tables.items():
        proto = protocols.get(suite, {})
        if proto.get("control"):
            continue
        pm = primary_metric(suite, table["columns"], proto)
        if pm is None:
            continue
        hib = metric_direction(pm, proto)
        vals = {
            r["model"]: r["values"][pm][0]
            for r in table["rows"]
            if pm in r["values"] and r["values"][pm][0] is not None
        }
        if not vals:
            continue
        ranks = _rank(vals, hib)
        best = min(ranks, key=lambda m: (ranks[m], -models.index(m) if m in models else 0))
        tied = sorted(m for m in vals if m != best and vals[m] == vals[best])
        per_suite[suite] = {
            "metric": pm,
            "higher_is_better": hib,
            "best": best,
            "value": vals[best],
            "tied_with": tied,
            "n_ranked": len(vals),
        }
        for m, r in ranks.items():
            rank_sum.setdefault(m, []).append(r)
    if not rank_sum:
        return {"best": None, "criterion": "no suite produced a primary metric", "per_suite": per_suite}
    order = {m: i for i, m in enumerate(models)}
    best = min(
        rank_sum,
        key=lambda m: (sum(rank_sum[m]) / len(rank_sum[m]), -len(rank_sum[m]), -order.get(m, -1)),
    )
    non_base = {m: v for m, v in rank_sum.items() if m != "base"}
    best_ckpt = (
        min(
            non_base,
            key=lambda m: (sum(non_base[m]) / len(non_base[m]), -len(non_base[m]), -order.get(m, -1)),
        )
        if non_base
        else None
    )
    crit = (
        "lowest mean rank over suites of each suite's primary metric ("
        + ", ".join(
            f"{s}: {v['metric']} {'↑' if v['higher_is_better'] else '↓'}" for s, v in per_suite.items()
        )
        + "); ties: more suites, then later step"
    )
    all_tied = all(len(v["tied_with"]) == v["n_ranked"] - 1 for v in per_suite.values()) and len(rank_sum) > 1
    return {
        "best": best,
        "all_tied": all_tied,
        "best_checkpoint": best_ckpt,
        "mean_rank": {m: sum(v) / len(v) for m, v in rank_sum.items()},
        "criterion": crit,
        "per_suite": per_suite,
    }


# --------------------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(plt: Any, fig: Any, path: Path, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _grouped_bars(
    ax: Any,
    cmap: Any,
    shade: float,
    labels: list[str],
    heights: list[list[float]],
    errors: list[list[float]],
) -> None:
    """One bar series per model (``labels``), side by side in each group (x = 0, 1, ...), coloured along
    ``cmap`` up to ``shade``; ``errors`` (std over seeds) become error bars when any is non-zero."""
    n = len(labels)
    width = 0.8 / n
    for i, (label, ys, es) in enumerate(zip(labels, heights, errors)):
        ax.bar(
            [j - 0.4 + width * (i + 0.5) for j in range(len(ys))],
            ys,
            width,
            yerr=es if any(es) else None,
            label=label,
            color=cmap(i / max(1, n - 1) * shade),
            capsize=2,
        )


def plot_bias_bars(table: dict[str, Any], path: Path) -> Path | None:
    """The nine biases per model as grouped bars (0-1; BD types left, BC types right)."""
    types = [b for b in BIASES if b.bias_type in table["columns"]]
    rows = [
        r for r in table["rows"] if any(r["values"].get(b.bias_type, (None,))[0] is not None for b in types)
    ]
    if not types or not rows:
        return None
    plt = _plt()
    n = len(rows)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(types) + 2), 4.6))
    labels = [
        f"{r['model']} (overall {_fmt(r['values']['overall'][0])})"
        if "overall" in r["values"]
        else r["model"]
        for r in rows
    ]
    cells = [[r["values"].get(b.bias_type, (None, None)) for b in types] for r in rows]
    _grouped_bars(
        ax,
        plt.get_cmap("viridis"),
        0.9,
        labels,
        [[mean if mean is not None else 0.0 for mean, _ in row] for row in cells],
        [[std or 0.0 for _, std in row] for row in cells],
    )
    n_bd = sum(b.metric == "bd" for b in types)
    if 0 < n_bd < len(types):
        ax.axvline(n_bd - 0.5, color="grey", lw=0.8, ls="--")
        ax.text(n_bd / 2 - 0.5, 1.07, "Bias-Deviation (↑)", ha="center", fontsize=9)
        ax.text((n_bd + len(types)) / 2 - 0.5, 1.07, "Bias-Conformity (↑)", ha="center", fontsize=9)
    ax.set_xticks(range(len(types)))
    ax.set_xticklabels([b.short for b in types])
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("score (higher is better)")
    ax.set_title("MM-JudgeBias: the nine biases per model")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=min(4, n))
    _save_figure(plt, fig, path, dpi=110)
    return path


PERCEPTION_BARS = (
    ("pair_acc_c_vs_rp", "pair: r_c > r_rp"),
    ("pair_acc_c_vs_rp_r", "pair: r_c > r_rp+r"),
    ("pair_consistency", "pair: order consistency"),
    ("batch_ranking_reward", "batch: ranking reward"),
    ("batch_kendall_tau", "batch: Kendall τ"),
    ("single_verdict_acc", "single: verdict acc."),
)


def plot_perception(table: dict[str, Any], path: Path) -> Path | None:
    """Per-protocol accuracies per model (grouped bars)."""
    metrics = [(m, lab) for m, lab in PERCEPTION_BARS if m in table["columns"]]
    rows = table["rows"]
    if not metrics or not rows:
        return None
    plt = _plt()
    n = len(rows)
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(metrics) + 2), 4.4))
    _grouped_bars(
        ax,
        plt.get_cmap("plasma"),
        0.85,
        [r["model"] for r in rows],
        [[r["values"].get(m, (None,))[0] or 0.0 for m, _ in metrics] for r in rows],
        [[r["values"].get(m, (None, None))[1] or 0.0 for m, _ in metrics] for r in rows],
    )
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([lab for _, lab in metrics], fontsize=8, rotation=12)
    ax.set_ylim(
        min(-0.05, min((r["values"].get("batch_kendall_tau", (0,))[0] or 0) for r in rows) - 0.05), 1.15
    )
    ax.set_title("Perceptual sensitivity per protocol (held-out PPJD)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(5, n))
    _save_figure(plt, fig, path, dpi=110)
    return path


PANELS_PER_PAGE = 16


def plot_vs_step(suite: str, table: dict[str, Any], path: Path) -> list[Path]:
    """Every numeric metric of a suite against the training step (one panel per metric, std over seeds as error
    bars). More than 16 metrics spill over into ``<name>_2.png``, ``<name>_3.png``, ...; returns the files."""
    rows = [r for r in table["rows"] if r["step"] is not None]
    metrics = [m for m in table["columns"] if any(r["values"].get(m, (None,))[0] is not None for r in rows)]
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
                (
                    (r["step"], *r["values"][m], r["model"])
                    for r in rows
                    if r["values"].get(m, (None,))[0] is not None
                ),
                key=lambda p: (p[0], p[3] == "final"),
            )
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            es = [p[2] or 0.0 for p in pts]
            ax.errorbar(xs, ys, yerr=es if any(es) else None, marker="o", ms=4, lw=1.2, capsize=2)
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
        _save_figure(plt, fig, out, dpi=100)
        written.append(out)
    return written


# --------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------


def _md_table(table: dict[str, Any], columns: list[str]) -> list[str]:
    head = ["model", "step", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * len(columns)) + "|"]
    for r in table["rows"]:
        cells = [r["model"], "–" if r["step"] is None else str(r["step"])]
        cells += [_fmt(*r["values"].get(c, (None, None))) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _bias_headers(columns: list[str]) -> dict[str, str]:
    short = {b.bias_type: f"{b.short} ({b.metric.upper()})" for b in BIASES}
    return {c: short.get(c, c) for c in columns}


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# Evaluation report", ""]
    src = report.get("run_dir")
    if src:
        lines += [f"Training run: `{src}`", ""]
    plan = report.get("plan") or {}
    if plan:
        s = plan.get("sampling", {})
        lines += [
            f"Suites: {', '.join(plan.get('suites', []))}; seeds: {plan.get('seeds')}; limit: {plan.get('limit')}.",
            f"Decoding: temperature {s.get('temperature')}, top_p {s.get('top_p')}, top_k {s.get('top_k')}, "
            f"max_new_tokens {s.get('max_new_tokens')}. Backend: `{json.dumps(plan.get('backend'))}`. "
            f"Pixel policy: `{json.dumps(plan.get('pixel_policy'))}`; think prefix: {plan.get('think_prefix')}.",
            "",
        ]
    summary = report["summary"]
    lines += ["## Summary", ""]
    if summary.get("best") and summary.get("all_tied"):
        lines.append(
            "**No model stands out: every model ties on every suite's primary metric** "
            f"(the tie-break picks `{summary['best']}`)."
        )
        lines.append("")
        lines.append(f"Criterion: {summary['criterion']}.")
    elif summary.get("best"):
        lines.append(
            f"**Best model: `{summary['best']}`**"
            + (
                f"; best trained checkpoint: `{summary['best_checkpoint']}`."
                if summary.get("best_checkpoint") and summary["best_checkpoint"] != summary["best"]
                else "."
            )
        )
        lines.append("")
        lines.append(f"Criterion: {summary['criterion']}.")
        for suite, v in summary.get("per_suite", {}).items():
            tie = f"; tied with {', '.join(f'`{m}`' for m in v['tied_with'])}" if v.get("tied_with") else ""
            lines.append(f"- {suite}: best `{v['best']}` ({v['metric']} = {_fmt(v['value'])}{tie})")
    else:
        lines.append(f"No best model: {summary.get('criterion')}.")
    lines.append("")
    for suite, table in report["tables"].items():
        lines += [f"## {suite}", ""]
        cols = table["columns"]
        if suite == "bias":
            headers = _bias_headers(cols)
            main = [
                c
                for c in cols
                if c in headers and (c in {b.bias_type for b in BIASES} or c in (*CATEGORIES, "overall"))
            ]
            rest = [c for c in cols if c not in main]
            t = _md_table(table, main)
            t[0] = "| " + " | ".join(["model", "step", *[headers[c] for c in main]]) + " |"
            lines += [*t, ""]
            if rest:
                lines += [*_md_table(table, rest), ""]
            lines.append(
                "BD: share of the downward room used when the evidence is destroyed; BC: 1 − relative score change "
                "under meaning-preserving changes; overall = mean of the nine. Higher is better everywhere."
            )
            lines.append("")
        else:
            for start in range(0, len(cols), _MAX_COLS):
                lines += [*_md_table(table, cols[start : start + _MAX_COLS]), ""]
        counts = report.get("counts", {}).get(suite)
        if counts:
            keys = sorted({k for c in counts.values() for k in c})
            lines.append("Counts (totals over seeds):")
            lines.append("")
            lines.append("| model | " + " | ".join(keys) + " |")
            lines.append("|---|" + "|".join(["---:"] * len(keys)) + "|")
            for m, c in counts.items():
                lines.append(f"| {m} | " + " | ".join(str(c.get(k, "–")) for k in keys) + " |")
            lines.append("")
    if report.get("failed_cells"):
        lines += ["## Failed cells", ""]
        for c in report["failed_cells"]:
            lines.append(f"- `{c['cell']}`: {c.get('error')}")
        lines.append("")
    if report.get("plots"):
        lines += ["## Plots", ""]
        for p in report["plots"]:
            lines.append(f"![{Path(p).stem}]({p})")
        lines.append("")
    lines.append(
        "Files: `results.csv` / `results.json` (every metric, mean and std over seeds), `cells/` (one JSON "
        "per model × suite × seed, with per-sample outputs in the folder of the same name)."
    )
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Write report.md, report.json and plots/*.png for an evaluation folder; returns the report dict."""
    out_dir = Path(out_dir)
    results_path = out_dir / "results.json"
    if not results_path.is_file():
        raise FileNotFoundError(
            f"{str(results_path)!r} not found: run `perception-judge eval sweep/run` first"
        )
    data = json.loads(results_path.read_text(encoding="utf-8"))
    models = [m["name"] for m in data.get("models", [])]
    rows = data.get("rows", [])
    suites = [s for s in (data.get("plan") or {}).get("suites", []) if any(r["suite"] == s for r in rows)]
    suites += sorted({r["suite"] for r in rows} - set(suites))
    protocols = _suite_protocols(data, out_dir)
    tables = {s: _table(rows, s, models) for s in suites}
    summary = best_model(tables, protocols, models)
    plots_dir = out_dir / PLOTS_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    if "bias" in tables and plot_bias_bars(tables["bias"], plots_dir / "bias_per_model.png"):
        plots.append(f"{PLOTS_DIR}/bias_per_model.png")
    if "perception" in tables and plot_perception(
        tables["perception"], plots_dir / "perception_protocols.png"
    ):
        plots.append(f"{PLOTS_DIR}/perception_protocols.png")
    for s, table in tables.items():
        if any(r["step"] is not None for r in table["rows"]):
            plots += [f"{PLOTS_DIR}/{p.name}" for p in plot_vs_step(s, table, plots_dir / f"{s}_vs_step.png")]
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for c in data.get("cells", []):
        if c.get("status") != "done":
            continue
        try:
            cell = json.loads((out_dir / "cells" / f"{c['cell']}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        agg = counts.setdefault(c["suite"], {}).setdefault(c["model"], {})
        for k, v in (cell.get("result", {}).get("counts") or {}).items():
            if isinstance(v, int | float):
                agg[k] = agg.get(k, 0) + v
    report = {
        "run_dir": data.get("run_dir"),
        "plan": data.get("plan"),
        "models": data.get("models", []),
        "summary": summary,
        "tables": {
            s: {
                "columns": t["columns"],
                "rows": [
                    {
                        "model": r["model"],
                        "step": r["step"],
                        "values": {k: {"mean": v[0], "std": v[1]} for k, v in r["values"].items()},
                    }
                    for r in t["rows"]
                ],
            }
            for s, t in tables.items()
        },
        "counts": counts,
        "failed_cells": [c for c in data.get("cells", []) if c.get("status") != "done"],
        "plots": plots,
    }
    md = render_markdown({**report, "tables": tables})
    atomic_write_text(out_dir / "report.md", md, fsync=False)
    atomic_write_json(out_dir / "report.json", report, fsync=False)
    return report


__all__ = [
    "best_model",
    "metric_direction",
    "plot_bias_bars",
    "plot_perception",
    "plot_vs_step",
    "primary_metric",
    "render_markdown",
    "write_report",
]
