"""Reports: the best-model criterion, metric directions, Markdown tables for any suite, and the PNG plots."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from perception_judge.core.io import atomic_write_json
from perception_judge.evaluation import report as R

LEV = "mean.batch.norm_levenshtein.micro"


def _table(values: dict[str, dict[str, float | None]], steps: dict[str, int | None] | None = None) -> dict:
    cols = list(next(iter(values.values())))
    return {
        "columns": cols,
        "rows": [
            {"model": m, "step": (steps or {}).get(m), "values": {k: (v, None) for k, v in vals.items()}}
            for m, vals in values.items()
        ],
    }


def test_best_model_mean_rank_over_suites_and_directions():
    models = ["base", "checkpoint-1", "checkpoint-2", "final"]
    tables = {
        "bias": _table(
            {
                "base": {"overall": 0.5},
                "checkpoint-1": {"overall": 0.7},
                "checkpoint-2": {"overall": 0.6},
                "final": {"overall": 0.6},
            }
        ),
        "mllm_judge": _table(
            {
                "base": {LEV: 0.6},
                "checkpoint-1": {LEV: 0.5},
                "checkpoint-2": {LEV: 0.4},
                "final": {LEV: 0.45},
            }
        ),
    }
    protocols = {}  # the primary metric and its direction come from each suite's declarations
    s = R.best_model(tables, protocols, models)
    assert (
        s["per_suite"]["mllm_judge"]["best"] == "checkpoint-2"
        and s["per_suite"]["mllm_judge"]["higher_is_better"] is False
    )
    assert s["per_suite"]["bias"]["best"] == "checkpoint-1"
    # mean ranks: base 4, ckpt-1 (1+3)/2=2, ckpt-2 (2.5+1)/2=1.75, final (2.5+2)/2=2.25
    assert s["best"] == "checkpoint-2" and s["mean_rank"]["checkpoint-2"] == pytest.approx(1.75)
    assert "lowest mean rank" in s["criterion"] and f"{LEV} ↓" in s["criterion"]
    tie = R.best_model(
        {"bias": _table({"base": {"overall": 0.5}, "final": {"overall": 0.5}})}, {}, ["base", "final"]
    )
    assert tie["best"] == "final" and tie["per_suite"]["bias"]["tied_with"] == ["base"]
    none = R.best_model({"bias": _table({"base": {"overall": None}})}, {}, ["base"])
    assert none["best"] is None


def test_metric_directions_and_primary_metrics_come_from_the_suites_declarations():
    """No guessing from names: a direction is what the suite declares, an undeclared metric or an unregistered
    suite has none (and is never ranked)."""
    assert R.declared("perception", "pair_parse_fail_rate").higher_is_better is False
    assert R.declared("mllm_judge", "pair.parse_failure_rate").higher_is_better is False
    assert R.declared("position", "parse_failure_rate").higher_is_better is False
    assert R.declared("bias", "inter_run_var").higher_is_better is False
    assert R.declared("vlrewardbench", "mean.acc.by_category.general").higher_is_better is True
    assert (
        R.declared("perception", "pair_acc_n").count
        and R.declared("perception", "pair_acc_n").higher_is_better is None
    )
    assert R.declared("s", "accuracy") is None and R.declared("perception", "accuracy") is None
    metrics = ["pair_acc_n", "pair_acc_std", "pair_parse_fail_rate", "pair_acc"]
    assert R.primary_metric("perception", metrics) == "pair_acc"
    both = ["mean.self.padded_preferred_rate", "mean.flip.flip_rate_to_padded"]
    assert R.primary_metric("verbosity", both) == "mean.flip.flip_rate_to_padded"
    assert R.primary_metric("s", ["acc", "f1"]) is None


def _write_eval(
    tmp_path, suites: dict[str, dict[str, dict[str, float]]], steps: dict[str, int], protocols=None
) -> None:
    cells, rows = [], []
    for suite, per_model in suites.items():
        for model, metrics in per_model.items():
            cid = f"{model}__{suite}__seed0"
            cell = {
                "cell": cid,
                "model": model,
                "step": steps[model],
                "kind": "checkpoint",
                "suite": suite,
                "seed": 0,
                "status": "done",
                "result": {
                    "suite": suite,
                    "metrics": metrics,
                    "protocol": (protocols or {}).get(suite, {}),
                    "counts": {"n_items": 3},
                },
            }
            atomic_write_json(tmp_path / "cells" / f"{cid}.json", cell)
            cells.append({k: cell[k] for k in ("cell", "model", "step", "suite", "seed", "status")})
            rows += [
                {
                    "model": model,
                    "step": steps[model],
                    "kind": "checkpoint",
                    "suite": suite,
                    "metric": k,
                    "mean": v,
                    "std": None,
                    "n_seeds": 1,
                    "values": {"0": v},
                }
                for k, v in metrics.items()
            ]
    cells.append(
        {
            "cell": "x__bias__seed1",
            "model": "x",
            "step": 9,
            "suite": "bias",
            "seed": 1,
            "status": "failed",
            "error": "boom",
        }
    )
    data = {
        "run_dir": "r",
        "plan": {"suites": list(suites), "seeds": [0], "sampling": {}},
        "models": [{"name": m, "step": s} for m, s in steps.items()],
        "cells": cells,
        "rows": rows,
    }
    (tmp_path / "results.json").write_text(json.dumps(data))


def test_write_report_renders_any_suite_and_plots(tmp_path):
    from perception_judge.evaluation.bias.taxonomy import BIAS_TYPES

    steps = {"base": 0, "checkpoint-5": 5, "final": 7}
    bias = {
        m: {**{t: 0.1 * (i + 1) + 0.01 * j for j, t in enumerate(BIAS_TYPES)}, "overall": 0.2 * (i + 1)}
        for i, m in enumerate(steps)
    }
    vlrb = {
        m: {"overall_acc": 0.4 + 0.1 * i, "macro_acc": 0.3 + 0.1 * i, "parse_fail_rate": 0.1}
        for i, m in enumerate(steps)
    }
    _write_eval(tmp_path, {"bias": bias, "vlrewardbench": vlrb}, steps)
    rep = R.write_report(tmp_path)
    assert rep["summary"]["best"] == "final"
    assert set(rep["plots"]) == {
        "plots/bias_per_model.png",
        "plots/bias_vs_step.png",
        "plots/vlrewardbench_vs_step.png",
    }
    for p in rep["plots"]:
        with Image.open(tmp_path / p) as im:
            assert im.format == "PNG" and im.size[0] > 600 and im.size[1] > 200
    md = (tmp_path / "report.md").read_text()
    assert "## vlrewardbench" in md and "overall_acc" in md and "macro_acc" in md
    assert "TD (BD)" in md and "TextIns (BC)" in md and "**Best model: `final`**" in md
    assert "BD: share of the downward room" in md  # the bias record's note
    assert "`x__bias__seed1`: boom" in md
    lines = [line for line in md.splitlines() if line.startswith("| base |")]
    assert lines and "0.100" in lines[0]
    js = json.loads((tmp_path / "report.json").read_text())
    assert js["tables"]["vlrewardbench"]["rows"][0]["values"]["overall_acc"] == {"mean": 0.4, "std": None}
    assert js["counts"]["bias"]["final"]["n_items"] == 3


def test_write_report_without_results_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"results\.json"):
        R.write_report(tmp_path)


def test_many_metrics_spill_over_into_more_plot_pages(tmp_path):
    steps = {"base": 0, "checkpoint-1": 1}
    metrics = {
        m: {f"mean.metric_{k:02d}": 0.1 * k + i for k in range(20)}
        | {f"std.metric_{k:02d}": 0.01 for k in range(20)}
        for i, m in enumerate(steps)
    }
    _write_eval(tmp_path, {"mjbench": metrics}, steps)
    rep = R.write_report(tmp_path)
    assert [p for p in rep["plots"] if "vs_step" in p] == [
        "plots/mjbench_vs_step.png",
        "plots/mjbench_vs_step_2.png",
    ]
    assert rep["tables"]["mjbench"]["columns"] == [
        f"mean.metric_{k:02d}" for k in range(20)
    ]  # std.* are error bars


def test_control_suites_never_pick_the_best_checkpoint():
    models = ["base", "final"]
    tables = {
        "perception": _table({"base": {"pair_acc": 0.5}, "final": {"pair_acc": 0.9}}),
        "perception_mismatched": _table({"base": {"pair_acc": 0.9}, "final": {"pair_acc": 0.5}}),
    }
    protocols = {
        "perception": {"primary_metric": "pair_acc", "higher_is_better": True},
        "perception_mismatched": {"primary_metric": "pair_acc", "higher_is_better": True, "control": True},
    }
    s = R.best_model(tables, protocols, models)
    assert s["best"] == "final" and "perception_mismatched" not in s["per_suite"]


def test_every_table_names_its_protocol_and_parser(tmp_path):
    steps = {"base": 0, "final": 7}
    vlrb = {m: {"vote.acc": 0.5 + 0.1 * i, "official.acc": 0.6 + 0.1 * i} for i, m in enumerate(steps)}
    mllm = {m: {"mean.pair.acc.micro": 0.5, "flex.Ave": 0.4 + 0.1 * i} for i, m in enumerate(steps)}
    protocols = {
        "vlrewardbench": {"parser": "published: the benchmark's own rule"},
        "mllm_judge": {"parser": "strict (project): exactly n tags"},
    }
    _write_eval(tmp_path, {"vlrewardbench": vlrb, "mllm_judge": mllm}, steps, protocols)
    R.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    section = md.split("## vlrewardbench")[1].split("## ")[0]
    project, official = section.index("**project protocol**"), section.index("**official protocol**")
    assert project < section.index("vote.acc") < official < section.index("official.acc")
    assert "Parser: published: the benchmark's own rule." in section
    section = md.split("## mllm_judge")[1].split("## ")[0]
    assert section.index("**published protocol**") < section.index("flex.Ave")
    assert "Parser: strict (project): exactly n tags." in section
    js = json.loads((tmp_path / "report.json").read_text())["tables"]
    assert js["vlrewardbench"]["protocol_of"] == {"vote.acc": "project", "official.acc": "official"}
    assert js["mllm_judge"]["protocol_of"]["flex.Ave"] == "published"
    assert js["mllm_judge"]["parser"].startswith("strict")


def test_official_numbers_name_their_rule_and_an_undefined_group_is_na_not_zero(tmp_path):
    steps = {"base": 0, "final": 7}
    vlrb = {
        "base": {"mean.acc": 0.5, "official.acc": 0.6, "official.acc.by_category.reasoning": None},
        "final": {"mean.acc": 0.7, "official.acc": 0.8, "official.acc.by_category.reasoning": 0.75},
    }
    why = "no decided (agree or reject) item in reasoning; cal.py divides by zero"
    protocols = {
        "vlrewardbench": {
            "official_rule": "VL-RewardBench cal.py (classify + distribution_dataset): strict majority",
            "undefined_metrics": {"official.acc.by_category.reasoning": why},
        }
    }
    _write_eval(tmp_path, {"vlrewardbench": vlrb}, steps, protocols)
    R.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    section = md.split("## vlrewardbench")[1].split("## ")[0]
    assert "**official protocol**: the benchmark's official scoring rule" in section
    assert "VL-RewardBench cal.py (classify + distribution_dataset): strict majority" in section
    base = next(line for line in section.splitlines() if line.startswith("| base |") and "0.600" in line)
    assert base.endswith("| n/a |") and "0.000" not in base
    final = next(line for line in section.splitlines() if line.startswith("| final |") and "0.800" in line)
    assert final.endswith("| 0.750 |")  # defined for this model: its number, no n/a
    assert f"- n/a: `base` `official.acc.by_category.reasoning`: seed 0: {why}" in section
    js = json.loads((tmp_path / "report.json").read_text())["tables"]["vlrewardbench"]
    assert js["rules"]["official"].startswith("VL-RewardBench cal.py")
    assert js["undefined"]["base"]["official.acc.by_category.reasoning"].endswith(why)


def test_the_report_reads_for_people(tmp_path, monkeypatch):
    """Issue 31: counts printed as 240.000, each suite's table was split into column chunks of raw metric names,
    and the bias chart drew a type with no scorable pair exactly like a 0. Now: per suite one table of its headline
    metrics with their intervals, counts as integers, the full set in report.json, and "n/a (no scorable pair)" in
    tables and a hatched n/a bar in the chart."""
    from perception_judge.evaluation import sweep as S
    from perception_judge.evaluation.backends.scripted import ScriptedBackend, format_scores
    from perception_judge.evaluation.plan import resolve

    def judge(req, sampling):  # never scores a text-dominance pair: that type has no scorable pair
        return "no verdict" if req.meta["bias_type"] == "text_dominance" else format_scores(req, [8])

    options = {"bias": {"source": "builtin", "n_per_type": 1}}
    plan = resolve([{"suites": ["bias"], "options": options, "backend": {"kind": "scripted"}}], tmp_path)
    figures = []
    monkeypatch.setattr(R, "_save_figure", lambda plt, fig, path, **_: figures.append(fig) or path)
    S.evaluate(
        [S.ModelEntry("judge")], plan, backend_factory=lambda e, p: ScriptedBackend(judge), progress=False
    )
    md = (tmp_path / "report.md").read_text()
    bias = md.split("## bias")[1]
    head = next(line for line in bias.splitlines() if line.startswith("| model |")).split(" | ")
    row = next(line for line in bias.splitlines() if line.startswith("| judge |")).split(" | ")
    assert row[head.index("TD (BD)")] == "n/a (no scorable pair)"
    assert "inter_sample_var" not in bias and "parse_failure_rate" not in bias  # headline only
    js = json.loads((tmp_path / "report.json").read_text())["tables"]["bias"]
    assert {"inter_sample_var", "parse_failure_rate"} <= set(
        js["columns"]
    )  # the full set stays in report.json
    assert js["headline"][0] == "overall" and js["rows"][0]["values"]["text_dominance"]["mean"] is None
    counts = bias.split("Counts")[1]
    assert "| 9 |" in counts and ".0" not in counts  # integers as integers
    ax = figures[0].axes[0]
    assert any(t.get_text() == "n/a" for t in ax.texts)
    assert any(p.get_hatch() == "///" for p in ax.patches)  # drawn unlike a 0

    steps = {"base": 0, "final": 7}
    perception = {
        m: {"pair_acc": 0.5 + 0.2 * i, "pair_acc_ci95_lo": 0.44 + 0.2 * i, "pair_acc_ci95_hi": 0.56 + 0.2 * i,
            "pair_acc_n": 240.0, "pair_acc_ties": 0.1, "error_rate": 0.0}
        for i, m in enumerate(steps)
    }  # fmt: skip
    _write_eval(tmp_path / "p", {"perception": perception}, steps)
    md = R.render_markdown(
        {
            **R.write_report(tmp_path / "p"),
            "tables": R._tables(tmp_path / "p", R.read_results(tmp_path / "p"))[0],
        }
    )
    table = md.split("## perception")[1].split("Parser")[0]
    assert "| base | 0 | 0.500 [0.44, 0.56] | 240 |" in table and "240.000" not in md
    assert "pair_acc_ties" not in table and "error_rate" not in table


def test_a_constant_judge_is_flagged_never_best_and_the_report_says_what_it_scored(tmp_path, monkeypatch):
    """Issue 41: the report named a judge that always answers 7 (and one that always answers 1) "Best model", showed
    one judge's backend for a run of two and titled the project's 24 procedural items as MM-JudgeBias's data. Now a
    judge whose verdicts never vary is flagged and not ranked (here both constants beat the contrarian judge on
    ``overall``), each judge's backend has its line, rows keep one order in every table, every missing number reads
    n/a under one footnote, and the tables and the plot title say which prompt and data were scored."""
    from perception_judge.evaluation import sweep as S
    from perception_judge.evaluation.backends.scripted import ScriptedBackend, format_scores
    from perception_judge.evaluation.plan import resolve

    class Served(ScriptedBackend):  # another backend kind, as an API-served judge would be
        name = "served"

    judges = {
        "c7": ScriptedBackend(lambda r, s: format_scores(r, [7]), label="c7"),
        "c1": ScriptedBackend(lambda r, s: format_scores(r, [1]), label="c1"),
        "contrarian": Served(
            lambda r, s: format_scores(r, [9 if r.meta["side"] == "biased" else 5]), label="x"
        ),
    }
    figures = []
    monkeypatch.setattr(R, "_save_figure", lambda plt, fig, path, **_: figures.append(fig) or path)
    options = {"bias": {"source": "builtin", "n_per_type": 1}}
    plan = resolve([{"suites": ["bias"], "options": options, "backend": {"kind": "scripted"}}], tmp_path)
    S.evaluate(
        [S.ModelEntry(n) for n in judges], plan, backend_factory=lambda e, p: judges[e.name], progress=False
    )
    js = json.loads((tmp_path / "report.json").read_text())
    rows = {r["model"]: r["values"]["overall"]["mean"] for r in js["tables"]["bias"]["rows"]}
    assert rows["c7"] == rows["c1"] > rows["contrarian"]  # unflagged, a constant would be named best
    assert js["summary"]["best"] == "contrarian" and js["summary"]["degenerate"] == {
        "c7": ["bias"],
        "c1": ["bias"],
    }
    assert "degenerate" in js["summary"]["criterion"]
    flags = js["tables"]["bias"]["degenerate"]
    assert flags["c7"].startswith("the same verdict in all 18 parsed judgements (score 7")
    md = (tmp_path / "report.md").read_text()
    assert "**Best model: `contrarian`**" in md and "- degenerate, never ranked: `c7` (bias)" in md
    assert "Degenerate, never ranked: `c1`: the same verdict in all 18 parsed judgements (score 1)." in md
    judges_md = md.split("Judges")[1].split("## Summary")[0]
    assert judges_md.index("`c7`") < judges_md.index("`c1`") < judges_md.index("`contrarian`")
    c7 = next(line for line in judges_md.splitlines() if line.startswith("- `c7`"))
    assert '"backend": "scripted"' in c7 and '"label": "c7"' in c7 and '"backend": "served"' in judges_md
    bias = md.split("## bias")[1]
    order = [
        [ln.split(" | ")[0] for ln in part.splitlines() if ln.startswith("| c") and " | " in ln]
        for part in bias.split("Counts")
    ]
    assert order[0] == order[1] == ["| c7", "| c1", "| contrarian"]  # one order in every table
    assert "| c7 | n/a |" in bias and md.count("n/a: no number") == 1  # no step: n/a, one footnote
    said = "prompt: the project's; data: builtin (the project's items, not the benchmark's, n base items 9, n pairs 9)"
    assert f"Scored with {said}." in bias
    assert (
        "Comparable with the published table (MM-JudgeBias leaderboard): **no** (prompt and scale: the project's"
        in bias
    )
    alone = {"bias": {**R._tables(tmp_path, R.read_results(tmp_path))[0]["bias"]}}  # the constants alone:
    alone["bias"]["rows"] = [r for r in alone["bias"]["rows"] if r["model"] != "contrarian"]
    only = R.best_model(alone, {}, ["c7", "c1"])  # nothing stands out; the tie-break still picks one
    assert only["all_tied"] == "every judge is degenerate" and only["degenerate"] == {
        "c7": ["bias"],
        "c1": ["bias"],
    }
    assert "**No model stands out: every judge is degenerate**" in R._summary_lines(only)[0]
    mixed = {
        "bias": _table({"x": {"overall": 0.4}, "y": {"overall": 0.9}}),
        "mmrb2": _table({"x": {"mean.acc": 0.5}, "y": {"mean.acc": 0.5}}),
    }
    mixed["bias"]["degenerate"] = {
        "y": "the same verdict"
    }  # ranked alone on bias, tied on mmrb2: x stands out
    assert (
        R.best_model(mixed, {}, ["x", "y"])["all_tied"] is False
        and R.best_model(mixed, {}, ["x", "y"])["best"] == "x"
    )
    title = figures[0].axes[0].get_title()
    assert title.startswith("The nine MM-JudgeBias bias types per model\n") and said in title


def test_plots_draw_chance_the_control_and_bands_on_integer_steps(tmp_path, monkeypatch):
    """Issue 41: chance lines on the accuracy and Kendall tau bars, the mismatched-image control beside the real
    image's bars, the headline metrics (not every field) against the step with their 95% band, integer steps, and
    each figure's caption saying what its bars or bands are."""
    from matplotlib.collections import LineCollection, PolyCollection

    steps = {"base": 0, "checkpoint-1": 1, "final": 2}  # a span matplotlib would tick in quarters
    acc = "pair_acc_c_vs_rp"
    real = {m: {acc: 0.5 + 0.1 * i, f"{acc}_ci95_lo": 0.4 + 0.1 * i, f"{acc}_ci95_hi": 0.6 + 0.1 * i,
                f"{acc}_n": 240, "batch_kendall_tau": 0.2 * i, "pair_parse_fail_rate": 0.0, "error_rate": 0.0}
            for i, m in enumerate(steps)}  # fmt: skip
    control = {m: {acc: 0.5, "batch_kendall_tau": 0.0} for m in steps}
    _write_eval(tmp_path, {"perception": real, "perception_mismatched": control}, steps)
    figures, captions = [], []
    monkeypatch.setattr(
        R,
        "_save_figure",
        lambda plt, fig, path, **kw: figures.append(fig) or captions.append(kw.get("caption")) or path,
    )
    R.write_report(tmp_path)
    bars = figures[0].axes[0]
    chance = {
        round(seg[0][1], 3)
        for c in bars.collections
        if isinstance(c, LineCollection)
        for seg in c.get_segments()
    }
    assert {0.5, 0.0} <= chance  # pair accuracy 0.5, Kendall tau 0
    assert (
        R.declared("vlrewardbench", "mean.acc").chance == 0.5
        and R.declared("position", "mean.acc_both_orders").chance == 0.25
    )
    assert sum(p.get_hatch() == "xx" for p in bars.patches) == 3 * 2  # each model's control, both metrics
    assert "no error bars" in captions[0] and "Dotted: chance" in captions[0]  # one seed: no spread to show
    assert "perception_mismatched" in captions[0]
    panels = figures[1].axes
    assert [ax.get_title() for ax in panels if ax.axison] == [acc, "batch_kendall_tau"]  # headline, no count
    band = next(c for c in panels[0].collections if isinstance(c, PolyCollection))
    assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(0.4)  # the suite's own 95% interval
    assert all(float(t).is_integer() for t in panels[0].get_xticks())
    assert captions[1].startswith("Band: 95% interval")
    lo, hi = R._band(
        {"values": {"m": (0.5, 0.1)}, "n": {"m": 3}}, "m"
    )  # no interval of its own: t over 3 seeds
    assert (lo, hi) == pytest.approx((0.5 - 4.3027 * 0.1 / 3**0.5, 0.5 + 4.3027 * 0.1 / 3**0.5), abs=1e-4)


def test_an_evaluation_written_before_the_provenance_still_reports(tmp_path):
    """Cells of an older run have no ``left_out``, ``comparable`` or ``degenerate``: the report says what they hold."""
    old = {"data": {"source": "official", "parity": "complete", "n_pairs": 9}, "prompt": "mmjb"}
    _write_eval(tmp_path, {"bias": {"base": {"overall": 0.5}}}, {"base": 0}, {"bias": old})
    R.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "Scored with prompt: the project's; data: official (parity complete, n pairs 9)." in md
    assert "Comparable with" not in md


def test_a_suite_without_a_headline_number_still_plots_what_it_has(tmp_path):
    """Random-weight judges never give a verdict: no headline number, but the parse failures are plotted."""
    steps = {"base": 0, "final": 2}
    bias = {m: {"overall": None, "parse_failure_rate": 1.0} for m in steps}
    _write_eval(
        tmp_path, {"bias": bias}, steps, {"bias": {"undefined_metrics": {"overall": "no scorable pair"}}}
    )
    assert "plots/bias_vs_step.png" in R.write_report(tmp_path)["plots"]


def test_a_model_whose_cells_all_failed_has_no_row(tmp_path):
    _write_eval(tmp_path, {"bias": {"base": {"overall": 0.5}}}, {"base": 0, "broken": 5})
    assert [r["model"] for r in R.write_report(tmp_path)["tables"]["bias"]["rows"]] == ["base"]
