"""The compositional-bias suite: ``run(backend, config) -> SuiteResult``.

Every pair is scored pointwise twice (unbiased, biased) by the same judge with the same prompt; BD / BC per
bias, per category and overall follow :mod:`perception_judge.evaluation.bias.metrics`; k seeds give a mean,
a standard deviation and the inter-run / inter-sample variances.

Options (``SuiteConfig.options``; ``--set bias.KEY=VALUE`` on the command line):

================  ==============================================================================================
``source``        ``synth`` (default: PPJD synthetic items; falls back to ``builtin`` with a note when the PPJD
                  generator is not installed), ``builtin`` (our procedural set), ``official`` (MM-JudgeBias data
                  at ``data``), ``items`` (``items``: a list of BaseItem), ``pairs`` (``pairs``: a list of BiasPair)
``data``          official data: a ``datasets`` folder, a parquet folder or a JSONL file
``images_dir``    official data: folder of restricted images (``<id:04d>_<role>.jpg`` / ``<id:04d>.jpg``)
``on_missing``    official data: ``skip`` (default; counted in ``n_missing_image``) or ``error``
``n_items``       synth: how many base items to generate (default 24)
``n_per_type``    pairs per bias type for generated sets (default 4; null = every eligible item)
``data_seed``     seed of the base set and perturbations (default 0; the judge seeds are ``SuiteConfig.seeds``)
``bias_types``    subset of the nine types (default all)
``prompt``        ``single`` (default; our protocol) or ``mmjb`` (the MM-JudgeBias-structured prompt)
``parser``        for ``mmjb``: ``compat`` (default; upstream-compatible) or ``strict``
``mmjb_template_file``  a file with the exact upstream template, for prompt parity
``abstention``    ``drop`` (default, upstream) or ``aware`` (see metrics)
``empty``         a type with nothing to score: ``upstream`` (default; None without parsed pairs, 0.0 when its
                  rule skips them all), ``none`` or ``zero`` (see metrics)
``insertion_mode``  ``keywords`` (default) or ``query`` for the text-insertion bias
``model_key``     key under ``judgement`` in the upstream-layout files (default: the backend's label)
``chunk_size``    requests per backend call; per-sample files are written after each chunk (default 64)
``resume``        reuse completed per-sample files of an earlier interrupted run (default true)
================  ==============================================================================================

Outputs under ``config.out_dir``:

* ``judgements/seed_<seed>/<id:04d>.json``: the upstream per-sample layout (``{judgement: {<model_key>:
  {unbiased, unbiased_score, biased, biased_score}}, meta: {...}}``; upstream ``run_evaluation.py`` reads it),
  plus a ``perception_judge`` block with errors and provenance;
* ``samples.jsonl``: one line per pair and seed (texts, scores, errors, BD_i/BC_i, status);
* ``bias_report.json``: the upstream report shape per seed and the combined runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_json
from perception_judge.core.schema import JudgeRequest, JudgeResult, content_key
from perception_judge.evaluation.base import (
    JudgeBackend,
    SuiteConfig,
    SuiteResult,
    is_backend_error,
    judge_chunks,
    write_samples,
)
from perception_judge.evaluation.bias import metrics as M
from perception_judge.evaluation.bias.items import BaseItem, builtin_base_items, synth_base_items
from perception_judge.evaluation.bias.perturbations import BiasPair, BiasSide, build_pairs
from perception_judge.evaluation.bias.prompts import (
    is_out_of_range,
    load_template,
    prompt_hash,
    score_messages,
)
from perception_judge.evaluation.bias.taxonomy import BIASES, CATEGORIES, select

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "source": "synth",
    "data": None,
    "images_dir": None,
    "split": "test",
    "on_missing": "skip",
    "n_items": 24,
    "n_per_type": 4,
    "data_seed": 0,
    "bias_types": None,
    "prompt": "single",
    "parser": "compat",
    "mmjb_template_file": None,
    "abstention": "drop",
    "empty": "upstream",
    "insertion_mode": "keywords",
    "model_key": None,
    "chunk_size": 64,
    "resume": True,
}
SIDES = ("unbiased", "biased")


def options_with_defaults(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(DEFAULTS) - {"items", "pairs"}
    if unknown:
        raise ValueError(f"unknown bias-suite option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    return {**DEFAULTS, **options}


# --------------------------------------------------------------------------------------------------------------
# Pairs
# --------------------------------------------------------------------------------------------------------------


def load_pairs(opts: dict[str, Any], limit: int | None = None) -> tuple[list[BiasPair], dict[str, Any]]:
    """The pairs to judge and a description of where they came from."""
    source = opts["source"]
    info: dict[str, Any] = {"source": source}
    if source == "official":
        from perception_judge.evaluation.bias.loader import load_official

        if not opts.get("data"):
            raise ValueError("bias source 'official' needs the option data=PATH (datasets folder or JSONL)")
        pairs, rep = load_official(
            opts["data"],
            images_dir=opts.get("images_dir"),
            split=opts.get("split", "test"),
            bias_types=opts.get("bias_types"),
            on_missing=opts.get("on_missing", "skip"),
        )
        info["load_report"] = rep.to_dict()
        info["parity"] = "shipped-only" if rep.n_missing_image else "complete"
        if rep.n_missing_image:
            log.warning(rep.summary())
        else:
            log.info(rep.summary())
    elif source == "pairs":
        pairs = list(opts["pairs"])
    else:
        items: list[BaseItem]
        if source == "items":
            items = list(opts["items"])
        elif source == "builtin":
            items = builtin_base_items(seed=int(opts["data_seed"]))
        elif source == "synth":
            items = synth_base_items(int(opts["n_items"]), seed=int(opts["data_seed"]))
        else:
            raise ValueError(
                f"unknown bias source {source!r}; choose synth, builtin, official, items or pairs"
            )
        info["n_base_items"] = len(items)
        pairs = build_pairs(
            items,
            n_per_type=opts["n_per_type"],
            bias_types=opts["bias_types"],
            seed=int(opts["data_seed"]),
            insertion_mode=opts["insertion_mode"],
        )
    if opts.get("bias_types") and source in ("pairs",):
        wanted = {b.bias_type for b in select(opts["bias_types"])}
        pairs = [p for p in pairs if p.bias_type in wanted]
    if limit is not None:  # `limit` caps pairs per bias type, so every type keeps data
        seen: dict[str, int] = {}
        kept = []
        for p in pairs:
            if seen.get(p.bias_type, 0) < limit:
                kept.append(p)
                seen[p.bias_type] = seen.get(p.bias_type, 0) + 1
        pairs = kept
    info["n_pairs"] = len(pairs)
    return pairs, info


def side_request(pair: BiasPair, side: str, prompt: str, parser: str, template: str) -> JudgeRequest:
    s: BiasSide = getattr(pair, side)
    messages, default_parser = score_messages(prompt, s.query, pair.response, s.image is not None, template)
    return JudgeRequest(
        request_id=f"bias-{pair.pair_id}-{side}",
        messages=messages,
        images=[s.image] if s.image is not None else [],
        n_scores=1,
        parser=parser or default_parser,
        meta={
            "suite": "bias",
            "pair_id": pair.pair_id,
            "bias_type": pair.bias_type,
            "side": side,
            "item_id": pair.meta.get("item_id", ""),
            "query_source": s.query_source,
            "image_source": s.image_source,
        },
    )


# --------------------------------------------------------------------------------------------------------------
# Per-sample files (upstream layout) and resume
# --------------------------------------------------------------------------------------------------------------


def sample_file(out_dir: Path, seed: int, pair_id: Any) -> Path:
    name = f"{pair_id:04d}.json" if isinstance(pair_id, int) else f"{pair_id}.json"
    return out_dir / "judgements" / f"seed_{seed}" / name


def _stored_texts(path: Path, model_key: str, resume_key: str) -> dict[str, str]:
    """Completed sides of an earlier run with the same prompt, decoding and judge (text non-empty)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    ours = data.get("perception_judge", {})
    if ours.get("resume_key") != resume_key:
        return {}
    j = data.get("judgement", {}).get(model_key, {})
    out = {}
    for side in SIDES:
        text = j.get(side)
        if (
            isinstance(text, str)
            and text
            and not (ours.get(f"{side}_error") or "").startswith("backend error")
        ):
            out[side] = text
            if ours.get(f"{side}_reasoning"):
                out[f"{side}_reasoning"] = ours[f"{side}_reasoning"]
    return out


def _record(
    pair: BiasPair, seed: int, model_key: str, results: dict[str, JudgeResult], provenance: dict
) -> dict:
    j = {}
    ours: dict[str, Any] = dict(provenance)
    for side in SIDES:
        r = results.get(side)
        j[side] = r.text if r else ""
        j[f"{side}_score"] = r.scores[0] if r and r.scores else None
        ours[f"{side}_error"] = r.error if r else "not judged"
        if r and r.reasoning:
            ours[f"{side}_reasoning"] = r.reasoning
        s: BiasSide = getattr(pair, side)
        ours[f"{side}_query"] = s.query
        ours[f"{side}_image_source"] = s.image_source
    meta = {"id": pair.pair_id, "bias_type": pair.bias_type, "bias_category": pair.category}
    for k in ("task_type", "domain_type", "difficulty", "unbiased_source", "biased_source"):
        meta[k] = pair.meta.get(k, "")
    ours["seed"] = seed
    ours["pair_meta"] = {k: v for k, v in pair.meta.items() if k not in meta}
    return {"judgement": {model_key: j}, "meta": meta, "perception_judge": ours}


# --------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------


def _scored(pair: BiasPair, results: dict[str, JudgeResult]) -> M.ScoredPair:
    def score(r: JudgeResult | None) -> float | None:
        return float(r.scores[0]) if r is not None and r.scores else None

    def abstained(r: JudgeResult | None) -> bool:
        return r is not None and not r.scores and bool(r.text.strip()) and not is_backend_error(r)

    u, b = results.get("unbiased"), results.get("biased")
    oor = any(r is not None and is_out_of_range(r.scores, r.error) for r in (u, b))
    return M.ScoredPair(
        pair.pair_id, pair.bias_type, score(u), score(b), abstained(u), abstained(b), oor, dict(pair.meta)
    )


def judge_seed(
    backend: JudgeBackend,
    pairs: list[BiasPair],
    seed: int,
    config: SuiteConfig,
    opts: dict[str, Any],
    parser: str,
    template: str,
    p_hash: str,
    model_key: str,
    provenance: dict[str, Any],
) -> tuple[list[M.ScoredPair], list[dict[str, Any]], dict[str, int]]:
    """Judge every pair once with one seed; writes the per-sample files as chunks finish."""
    sampling = dataclasses.replace(config.sampling, seed=int(seed))
    out_dir = Path(config.out_dir)
    results: dict[tuple[Any, str], JudgeResult] = {}
    todo: list[tuple[BiasPair, str, JudgeRequest]] = []
    stats = {"n_calls": 0, "n_resumed": 0, "n_backend_errors": 0}
    from perception_judge.evaluation.base import parse_result

    for pair in pairs:
        stored = (
            _stored_texts(sample_file(out_dir, seed, pair.pair_id), model_key, provenance["resume_key"])
            if opts["resume"]
            else {}
        )
        for side in SIDES:
            req = side_request(pair, side, opts["prompt"], parser, template)
            if side in stored:  # re-parse the stored completion with the current parser
                results[(pair.pair_id, side)] = parse_result(
                    req, stored[side], stored.get(f"{side}_reasoning")
                )
                stats["n_resumed"] += 1
            else:
                todo.append((pair, side, req))
    by_id = {p.pair_id: p for p in pairs}
    chunk = max(1, int(opts["chunk_size"]))
    requests = [r for _, _, r in todo]
    for start, out in judge_chunks(backend, requests, sampling, chunk, f"bias seed {seed}", "call"):
        part = todo[start : start + chunk]
        touched = set()
        for (pair, side, _), res in zip(part, out):
            results[(pair.pair_id, side)] = res
            touched.add(pair.pair_id)
            stats["n_calls"] += 1
            stats["n_backend_errors"] += is_backend_error(res)
        for pid in touched:
            pair = by_id[pid]
            rec = _record(pair, seed, model_key, {s: results.get((pid, s)) for s in SIDES}, provenance)
            atomic_write_json(sample_file(out_dir, seed, pid), rec, fsync=False)
    scored, lines = [], []
    for pair in pairs:
        res = {s: results[(pair.pair_id, s)] for s in SIDES}
        sp = _scored(pair, res)
        value, status = M.pair_value(sp, opts["abstention"])
        scored.append(sp)
        lines.append(
            {
                "seed": seed,
                "id": pair.pair_id,
                "bias_type": pair.bias_type,
                "category": pair.category,
                "unbiased_score": sp.unbiased,
                "biased_score": sp.biased,
                "value": value,
                "status": status,
                "out_of_range": sp.out_of_range,
                "unbiased_error": res["unbiased"].error,
                "biased_error": res["biased"].error,
                "unbiased_text": res["unbiased"].text,
                "biased_text": res["biased"].text,
                "unbiased_query": pair.unbiased.query,
                "biased_query": pair.biased.query,
                "meta": {k: v for k, v in pair.meta.items() if isinstance(v, str | int | float | list)},
            }
        )
    # rewrite every sample of this seed once (covers resumed ones, so the folder is complete and consistent)
    for pair in pairs:
        rec = _record(pair, seed, model_key, {s: results[(pair.pair_id, s)] for s in SIDES}, provenance)
        atomic_write_json(sample_file(out_dir, seed, pair.pair_id), rec, fsync=False)
    return scored, lines, stats


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    """Run the compositional-bias suite; see the module docstring for options and outputs."""
    opts = options_with_defaults(dict(config.options))
    if opts["abstention"] not in M.ABSTENTION_MODES:
        raise ValueError(f"abstention must be one of {M.ABSTENTION_MODES}, got {opts['abstention']!r}")
    if opts["prompt"] == "mmjb":
        if opts["parser"] not in ("compat", "strict"):
            raise ValueError(f"the mmjb prompt's parser must be 'compat' or 'strict', got {opts['parser']!r}")
        parser = "mmjb" if opts["parser"] == "compat" else "mmjb_strict"
    elif opts["prompt"] == "single":
        parser = "protocol"
    else:
        raise ValueError(f"unknown bias-suite prompt {opts['prompt']!r}; choose single or mmjb")
    template = load_template(opts["mmjb_template_file"])
    p_hash = prompt_hash(opts["prompt"], template)
    described = backend.describe()
    model_key = str(opts["model_key"] or described.get("label") or described.get("model") or backend.name)
    model_key = os.path.basename(model_key.rstrip("/")) or model_key
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    pairs, source_info = load_pairs(opts, config.limit)
    types = [b.bias_type for b in select(opts["bias_types"])]
    sampling_wo_seed = {k: v for k, v in dataclasses.asdict(config.sampling).items() if k != "seed"}
    provenance = {
        "prompt": opts["prompt"],
        "prompt_hash": p_hash,
        "parser": parser,
        # stored completions are reused only for the same prompt, decoding and judge
        "resume_key": content_key(p_hash, sampling_wo_seed, described),
    }

    reports: list[M.BiasReport] = []
    per_seed: dict[str, Any] = {}
    all_lines: list[dict[str, Any]] = []
    stats_total = {"n_calls": 0, "n_resumed": 0, "n_backend_errors": 0}
    all_scored: list[M.ScoredPair] = []
    for seed in config.seeds:
        scored, lines, stats = judge_seed(
            backend, pairs, seed, config, opts, parser, template, p_hash, model_key, provenance
        )
        rep = M.compute_report(scored, opts["abstention"], opts["empty"], types)
        reports.append(rep)
        per_seed[str(seed)] = {**rep.to_dict(model_key), "counts": rep.counts()}
        all_lines += lines
        all_scored += scored
        for k in stats_total:
            stats_total[k] += stats[k]

    combined = M.combine_runs(reports)
    metrics: dict[str, float | None] = {}
    for t in types:
        metrics[t] = combined["per_bias"][t]["mean"]
    for c in CATEGORIES:
        metrics[c] = combined["category_avg"][c]["mean"]
    metrics["overall"] = combined["overall"]["mean"]
    if len(reports) > 1:
        for t in types:
            metrics[f"{t}_std"] = combined["per_bias"][t]["std"]
        metrics["overall_std"] = combined["overall"]["std"]
        metrics["inter_run_var"] = combined["inter_run_var"]
    metrics["inter_sample_var"] = combined["inter_sample_var"]
    n_calls = 2 * len(pairs) * len(reports)
    n_no_score = sum((line["unbiased_score"] is None) + (line["biased_score"] is None) for line in all_lines)
    metrics["parse_failure_rate"] = n_no_score / n_calls if n_calls else None

    counts: dict[str, int] = {"n_runs": len(reports)}
    for rep in reports:
        for k, v in rep.counts().items():
            counts[k] = counts.get(k, 0) + v
    counts.update(stats_total)
    if "load_report" in source_info:
        counts["n_missing_image"] = source_info["load_report"]["n_missing_image"]

    samples_path = out_dir / "samples.jsonl"
    write_samples(samples_path, all_lines)
    report_blob = {"model_key": model_key, "per_seed": per_seed, "combined": combined}
    atomic_write_json(out_dir / "bias_report.json", report_blob, fsync=False)

    protocol = {
        "suite": "bias",
        "prompt": opts["prompt"],
        "prompt_hash": p_hash,
        "parser": parser,
        "think_stripping": "text after the last </think> is parsed; an unclosed block is a parse failure"
        if parser != "mmjb"
        else "a closed <think>...</think> block is stripped before the upstream parser runs",
        "abstention": opts["abstention"],
        "empty": opts["empty"],
        "seeds": list(config.seeds),
        "sampling": dataclasses.asdict(config.sampling),
        "backend": described,
        "model_key": model_key,
        "data": {k: v for k, v in source_info.items() if k != "load_report"},
        "data_seed": opts["data_seed"],
        "n_per_type": opts["n_per_type"],
        "bias_types": types,
        "aggregation": "per bias: mean of BD_i / BC_i over used pairs; category: unweighted mean of its biases; "
        "overall: unweighted mean of the per-bias values; seeds: mean, sample std; inter_run_var = var of the "
        "run-level overall (ddof=1), inter_sample_var = mean over runs of the population variance of the "
        "per-sample values",
        "primary_metric": "overall",
        "higher_is_better": True,
        "metric_kinds": {b.bias_type: b.metric for b in BIASES if b.bias_type in types},
    }
    extra = {
        "per_seed": per_seed,
        "per_bias_counts": {
            t: {k: sum(getattr(r.per_bias[t], k) for r in reports) for k in M.COUNT_KEYS} for t in types
        },
        "by_difficulty": M.breakdown(all_scored, "difficulty", opts["abstention"], types),
        "by_domain": M.breakdown(all_scored, "domain_type", opts["abstention"], types),
        "upstream_judgements_dir": str(out_dir / "judgements"),
        "bias_report": str(out_dir / "bias_report.json"),
    }
    if "load_report" in source_info:
        extra["load_report"] = source_info["load_report"]
    return SuiteResult("bias", metrics, protocol, counts, str(samples_path), extra)


__all__ = ["DEFAULTS", "judge_seed", "load_pairs", "options_with_defaults", "run", "side_request"]
