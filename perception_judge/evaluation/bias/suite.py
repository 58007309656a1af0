"""The compositional-bias suite (MM-JudgeBias): every pair scored pointwise twice (unbiased, biased) by the same
judge and prompt; BD / BC by :mod:`.metrics`. Options (:class:`BiasOptions`) and outputs (the upstream per-sample
files ``judgements/seed_<seed>/<id:04d>.json``, which an interrupted run resumes from, ``samples.jsonl``,
``bias_report.json``): docs/evaluation.md §2.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from perception_judge.core.io import atomic_write_json
from perception_judge.core.options import CommaList
from perception_judge.core.schema import JudgeRequest, JudgeResult, content_key
from perception_judge.evaluation import base
from perception_judge.evaluation.bias import metrics as M
from perception_judge.evaluation.bias.items import builtin_base_items, synth_base_items
from perception_judge.evaluation.bias.loader import META_FIELDS, load_official
from perception_judge.evaluation.bias.perturbations import BiasPair, build_pairs
from perception_judge.evaluation.bias.prompts import (
    MMJB,
    is_out_of_range,
    prompt_hash,
    score_messages,
    upstream_extract_score,
)
from perception_judge.evaluation.bias.taxonomy import BIASES, CATEGORIES, get_bias, select
from perception_judge.evaluation.prompt_source import PROJECT, Prompt, PublishedPromptOptions, comparable

log = logging.getLogger(__name__)

SIDES = ("unbiased", "biased")


class BiasOptions(PublishedPromptOptions):
    """The suite's options (``SuiteConfig.options``; ``--set bias.KEY=VALUE`` on the command line);
    ``prompt_source``: MM-JudgeBias's prompt, with ``prompt=mmjb``."""

    SUITE, PROMPT = "bias", "mmjb"

    source: Literal["synth", "builtin", "official", "items", "pairs"] = "synth"
    data: str | Path | None = Field(None, validate_default=True)  # official: datasets / parquet folder, JSONL
    images_dir: str | Path | None = None  # official: restricted images (<id:04d>_<role>.jpg / <id:04d>.jpg)
    split: str = "test"
    on_missing: Literal["skip", "error"] = "skip"  # official: a row without its image is skipped or an error
    n_items: int = 24  # synth: base items to generate
    n_per_type: int | None = 4  # pairs per bias type of a generated set (None = every eligible item)
    data_seed: int = 0  # seeds the base set and the perturbations (the judge seeds are SuiteConfig.seeds)
    bias_types: Annotated[CommaList, AfterValidator(lambda v: [get_bias(t).bias_type for t in v])] | None = (
        None
    )
    prompt: Literal["single", "mmjb"] = "single"
    parser: Literal["compat", "strict"] = "compat"  # of the mmjb prompt
    abstention: M.Abstention = "drop"
    empty: M.EmptyRule = "upstream"
    insertion_mode: Literal["keywords", "query"] = "keywords"
    model_key: str | None = None  # key under "judgement" in the upstream files (default: the backend's label)
    chunk_size: int = 64  # requests per backend call; the per-sample files are written after each chunk
    resume: bool = True  # reuse the completed per-sample files of an interrupted run
    items: Any = None  # source "items": a list of BaseItem
    pairs: Any = None  # source "pairs": a list of BiasPair

    @field_validator("data")
    @classmethod
    def _official_data(cls, data: Any, info: ValidationInfo) -> Any:
        if info.data.get("source") == "official" and not data:
            raise ValueError("bias source 'official' needs the option data=PATH (datasets folder or JSONL)")
        return data


METRICS: dict[str, base.Metric] = {
    **{
        b.bias_type: base.Metric(
            ideal=1.0,
            label=f"{b.short} ({b.metric.upper()})",
            about=f"{b.category:12s} {b.metric.upper()}  {b.perturbation}",
        )
        for b in BIASES
    },
    **dict.fromkeys((*CATEGORIES, "overall"), base.Metric(ideal=1.0)),
    **dict.fromkeys(("inter_run_var", "inter_sample_var", "parse_failure_rate"), base.LOWER),
}
"""BD and BC lie in [0, 1], higher is better (1: the judge follows the evidence exactly)."""


def load_pairs(opts: BiasOptions, limit: int | None = None) -> tuple[list[BiasPair], dict[str, Any]]:
    """The pairs to judge (at most ``limit`` per bias type) and a description of where they came from."""
    info: dict[str, Any] = {"source": opts.source}
    if opts.source == "official":
        pairs, rep = load_official(
            opts.data, opts.images_dir, opts.split, opts.bias_types, on_missing=opts.on_missing
        )
        info["load_report"] = rep.to_dict()
        info["parity"] = "shipped-only" if rep.n_missing_image else "complete"
        log.log(logging.WARNING if rep.n_missing_image else logging.INFO, rep.summary())
    elif opts.source == "pairs":
        wanted = {b.bias_type for b in select(opts.bias_types)}
        pairs = [p for p in opts.pairs if not opts.bias_types or p.bias_type in wanted]
    else:
        if opts.source == "items":
            items = list(opts.items)
        elif opts.source == "builtin":
            items = builtin_base_items(seed=opts.data_seed)
        else:
            items = synth_base_items(opts.n_items, seed=opts.data_seed)
        info["n_base_items"] = len(items)
        pairs = build_pairs(items, opts.n_per_type, opts.bias_types, opts.data_seed, opts.insertion_mode)
    if limit is not None:  # the first ``limit`` pairs of each type
        seen: Counter[str] = Counter()
        kept = []
        for p in pairs:
            seen[p.bias_type] += 1
            if seen[p.bias_type] <= limit:
                kept.append(p)
        pairs = kept
    info["n_pairs"] = len(pairs)
    n = info.get("load_report", {}).get("n_missing_image")
    info["left_out"] = [f"limit {limit} per type"] * (limit is not None) + [f"{n} rows unjudged"] * bool(n)
    info["complete"] = not info["left_out"]
    return pairs, info


def side_request(pair: BiasPair, side: str, prompt: str, parser: str, mmjb: Prompt = MMJB) -> JudgeRequest:
    s = getattr(pair, side)
    meta = {"suite": "bias", "pair_id": pair.pair_id, "bias_type": pair.bias_type, "side": side}
    meta |= {"item_id": pair.meta.get("item_id", ""), "query_source": s.query_source}
    meta["image_source"] = s.image_source
    return JudgeRequest(
        request_id=f"bias-{pair.pair_id}-{side}",
        messages=score_messages(prompt, s.query, pair.response, s.image is not None, mmjb),
        images=[s.image] if s.image is not None else [],
        n_scores=1,
        parser=parser,
        meta=meta,
    )


def sample_file(out_dir: Path, seed: int, pair_id: Any) -> Path:
    name = f"{pair_id:04d}.json" if isinstance(pair_id, int) else f"{pair_id}.json"
    return out_dir / "judgements" / f"seed_{seed}" / name


def _stored_texts(path: Path, model_key: str, resume_key: str) -> dict[str, str]:
    """The completed sides (and reasoning) of an earlier run with the same prompt, decoding and judge."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    ours = data.get("perception_judge", {})
    if ours.get("resume_key") != resume_key:
        return {}
    judgement = data.get("judgement", {}).get(model_key, {})
    out = {}
    for side in SIDES:
        text, error = ours.get(f"{side}_text", judgement.get(side)), ours.get(f"{side}_error") or ""
        if isinstance(text, str) and text and not error.startswith("backend error"):
            out[side] = text
            if ours.get(f"{side}_reasoning"):
                out[f"{side}_reasoning"] = ours[f"{side}_reasoning"]
    return out


def _verdict_text(text: str, score: float | None) -> str:
    """What the judgement file stores as a side's text: the completion when the published parser
    (``upstream_extract_score``) reads the project's score from it, else a verdict it reads exactly: the score
    itself (``"7.0"``), or ``""`` when the project has no score (upstream drops the pair, as the project does)."""
    parsed = upstream_extract_score(text)
    if parsed == score or (
        parsed is not None and score is not None and math.isnan(parsed) and math.isnan(score)
    ):
        return text
    return "" if score is None else repr(float(score))


def _record(
    pair: BiasPair,
    seed: int,
    model_key: str,
    results: dict[str, JudgeResult | None],
    provenance: dict,
    abstention: str,
) -> dict:
    """The upstream per-sample layout of one pair, plus our ``perception_judge`` block (the completions, errors,
    queries). The upstream ``judgement`` block holds the scores the project's report used
    (:func:`~perception_judge.evaluation.bias.metrics.upstream_scores`) and texts the published
    ``run_evaluation.py`` re-parses to the same scores, so that its ``compute_report`` gives the project's report."""
    u, b = results.get("unbiased"), results.get("biased")
    if u is not None and b is not None:
        scores = dict(zip(SIDES, M.upstream_scores(_scored(pair, u, b), abstention)))
    else:
        scores = {side: r.scores[0] if r and r.scores else None for side, r in results.items()}
    judgement = {}
    ours: dict[str, Any] = dict(provenance)
    for side in SIDES:
        r, s = results.get(side), getattr(pair, side)
        text = r.text if r else ""
        judgement[side] = _verdict_text(text, scores.get(side))
        judgement[f"{side}_score"] = scores.get(side)
        ours[f"{side}_text"] = text
        ours[f"{side}_error"] = r.error if r else "not judged"
        if r and r.reasoning:
            ours[f"{side}_reasoning"] = r.reasoning
        ours[f"{side}_query"] = s.query
        ours[f"{side}_image_source"] = s.image_source
    meta = {"id": pair.pair_id, "bias_type": pair.bias_type, "bias_category": pair.category}
    meta |= {k: pair.meta.get(k, "") for k in META_FIELDS if k not in meta}
    ours["seed"] = seed
    ours["pair_meta"] = {k: v for k, v in pair.meta.items() if k not in meta}
    return {"judgement": {model_key: judgement}, "meta": meta, "perception_judge": ours}


def _scored(pair: BiasPair, u: JudgeResult, b: JudgeResult) -> M.ScoredPair:
    def score(r: JudgeResult) -> float | None:
        return float(r.scores[0]) if r.scores else None

    def abstained(r: JudgeResult) -> bool:
        return not r.scores and bool(r.text.strip()) and not base.is_backend_error(r)

    oor = is_out_of_range(u.scores, u.error) or is_out_of_range(b.scores, b.error)
    return M.ScoredPair(
        pair.pair_id, pair.bias_type, score(u), score(b), abstained(u), abstained(b), oor, pair.meta
    )


def _sample_line(
    pair: BiasPair, u: JudgeResult, b: JudgeResult, seed: int, abstention: str
) -> dict[str, Any]:
    """The ``samples.jsonl`` line of one pair and seed."""
    sp = _scored(pair, u, b)
    value, status = M.pair_value(sp, abstention)
    line = {"seed": seed, "id": pair.pair_id, "bias_type": pair.bias_type, "category": pair.category}
    line |= {"unbiased_score": sp.unbiased, "biased_score": sp.biased, "value": value, "status": status}
    line |= {"out_of_range": sp.out_of_range, "unbiased_error": u.error, "biased_error": b.error}
    line |= {"unbiased_text": u.text, "biased_text": b.text}
    line |= {"unbiased_query": pair.unbiased.query, "biased_query": pair.biased.query}
    return line | {"meta": {k: v for k, v in pair.meta.items() if isinstance(v, str | int | float | list)}}


def judge_seed(
    backend: base.JudgeBackend, prep: dict[str, Any], seed: int, config: base.SuiteConfig
) -> tuple[list[M.ScoredPair], list[dict[str, Any]], dict[str, int]]:
    """Judge every pair once with one seed (``prep``: :func:`_prepare`'s; the completed sides of an earlier run are
    re-parsed with the current parser); writes the per-sample files as chunks finish, and all of them at the end."""
    opts: BiasOptions = config.options
    out_dir, pairs, requests = Path(config.out_dir), prep["pairs"], prep["requests"]
    model_key = prep["model_key"]
    results: dict[tuple[Any, str], JudgeResult] = {}
    todo: list[tuple[BiasPair, str]] = []
    for pair in pairs:
        path = sample_file(out_dir, seed, pair.pair_id)
        stored = _stored_texts(path, model_key, prep["provenance"]["resume_key"]) if opts.resume else {}
        for side in SIDES:
            if side in stored:
                req = requests[pair.pair_id, side]
                results[pair.pair_id, side] = base.parse_result(
                    req, stored[side], stored.get(f"{side}_reasoning")
                )
            else:
                todo.append((pair, side))

    def write(pair: BiasPair) -> None:
        sides = {s: results.get((pair.pair_id, s)) for s in SIDES}
        rec = _record(pair, seed, model_key, sides, prep["provenance"], opts.abstention)
        atomic_write_json(sample_file(out_dir, seed, pair.pair_id), rec, fsync=False)

    def finished(chunk: list[base.Judgement]) -> None:
        touched = {}
        for j in chunk:
            pair, side = todo[j.item]
            results[pair.pair_id, side] = j.result
            touched[pair.pair_id] = pair
        for pair in touched.values():
            write(pair)

    counts: dict[str, int] = {}
    base.judge_items(
        backend, todo, lambda todo_side: [requests[todo_side[0].pair_id, todo_side[1]]], seeds=[seed],
        sampling=config.sampling, chunk_size=max(1, opts.chunk_size), desc=f"bias seed {seed}", counts=counts,
        on_chunk=finished,
    )  # fmt: skip
    scored, lines = [], []
    for pair in pairs:
        u, b = results[pair.pair_id, "unbiased"], results[pair.pair_id, "biased"]
        scored.append(_scored(pair, u, b))
        lines.append(_sample_line(pair, u, b, seed, opts.abstention))
        write(pair)  # every sample once more, resumed ones included: the folder is complete and consistent
    n_errors = counts.get("backend_errors", 0)
    stats = {"n_calls": len(todo), "n_resumed": 2 * len(pairs) - len(todo), "n_backend_errors": n_errors}
    return scored, lines, stats


def _prepare(backend: base.JudgeBackend, config: base.SuiteConfig) -> dict[str, Any]:
    """The pairs, their requests and what every per-sample file records of the run."""
    opts: BiasOptions = config.options
    parser = {"compat": "mmjb", "strict": "mmjb_strict"}[opts.parser] if opts.prompt == "mmjb" else "protocol"
    prompts = opts.prompts()  # read again: the cell records the file it used
    mmjb, origin = prompts.get("", MMJB), {s: p.provenance for s, p in prompts.items()} or PROJECT
    p_hash = prompt_hash(opts.prompt, mmjb)
    described = backend.describe()
    model_key = str(opts.model_key or described.get("label") or described.get("model") or backend.name)
    pairs, source_info = load_pairs(opts, config.limit)
    sampling_wo_seed = config.sampling.model_dump(exclude={"seed"})
    # stored completions are reused only for the same prompt, decoding and judge
    resume_key = content_key(p_hash, sampling_wo_seed, described)
    return {
        "pairs": pairs,
        "source_info": source_info,
        "model_key": os.path.basename(model_key.rstrip("/")) or model_key,
        "requests": {
            (p.pair_id, s): side_request(p, s, opts.prompt, parser, mmjb) for p in pairs for s in SIDES
        },
        "provenance": dict(prompt=origin, prompt_hash=p_hash, parser=parser, resume_key=resume_key),
    }


def _metrics(combined: dict[str, Any], types: list[str], n_runs: int, scored: list[M.ScoredPair]) -> dict:
    metrics: dict[str, float | None] = {t: combined["per_bias"][t]["mean"] for t in types}
    metrics |= {c: combined["category_avg"][c]["mean"] for c in CATEGORIES}
    metrics["overall"] = combined["overall"]["mean"]
    if n_runs > 1:
        metrics |= {f"{t}_std": combined["per_bias"][t]["std"] for t in types}
        metrics["overall_std"] = combined["overall"]["std"]
        metrics["inter_run_var"] = combined["inter_run_var"]
    metrics["inter_sample_var"] = combined["inter_sample_var"]
    n_no_score = sum((sp.unbiased is None) + (sp.biased is None) for sp in scored)
    metrics["parse_failure_rate"] = n_no_score / (2 * len(scored)) if scored else None
    return metrics


def _undefined(
    metrics: dict[str, float | None], per_bias_counts: dict[str, dict[str, int]]
) -> dict[str, str]:
    """Why a value is missing (the report's n/a): no pair with both scores, or every pair skipped (y <= 1)."""
    why = {
        t: "no scorable pair" if c["samples"] == 0 else "every pair skipped (y <= 1)"
        for t, c in per_bias_counts.items()
    }
    return {
        m: why.get(m, "no scorable pair")
        for m in (*per_bias_counts, *CATEGORIES, "overall")
        if metrics.get(m) is None
    }


def run(backend: base.JudgeBackend, config: base.SuiteConfig) -> base.SuiteResult:
    """Run the compositional-bias suite; see the module docstring for the outputs."""
    opts: BiasOptions = config.options
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prep = _prepare(backend, config)
    source_info, model_key = prep["source_info"], prep["model_key"]
    types = [b.bias_type for b in select(opts.bias_types)]
    reports: list[M.BiasReport] = []
    per_seed: dict[str, Any] = {}
    all_lines: list[dict[str, Any]] = []
    all_scored: list[M.ScoredPair] = []
    stats_total: Counter[str] = Counter()
    for seed in config.seeds:
        scored, lines, stats = judge_seed(backend, prep, seed, config)
        reports.append(rep := M.compute_report(scored, opts.abstention, opts.empty, types))
        per_seed[str(seed)] = {**rep.to_dict(model_key), "counts": rep.counts()}
        all_lines += lines
        all_scored += scored
        stats_total.update(stats)
    combined = M.combine_runs(reports)
    metrics = _metrics(combined, types, len(reports), all_scored)
    counts = {"n_runs": len(reports), **{k: sum(r.counts()[k] for r in reports) for k in M.COUNT_KEYS}}
    counts.update(stats_total)
    if "load_report" in source_info:
        counts["n_missing_image"] = source_info["load_report"]["n_missing_image"]
    samples_path = out_dir / "samples.jsonl"
    base.write_samples(samples_path, all_lines)
    report_blob = {"model_key": model_key, "per_seed": per_seed, "combined": combined}
    atomic_write_json(out_dir / "bias_report.json", report_blob, fsync=False)
    per_bias_counts = {
        t: {k: sum(getattr(r.per_bias[t], k) for r in reports) for k in M.COUNT_KEYS} for t in types
    }
    protocol = {
        "suite": "bias",
        **{k: v for k, v in prep["provenance"].items() if k != "resume_key"},
        "think_stripping": "text after the last </think> is parsed; an unclosed block is a parse failure"
        if prep["provenance"]["parser"] != "mmjb"
        else "a closed <think>...</think> block is stripped before the upstream parser runs",
        **opts.model_dump(include={"abstention", "empty"}),
        "model_key": model_key,
        "data": {k: v for k, v in source_info.items() if k != "load_report"},
        "comparable": comparable("bias", opts.prompts(), prep["provenance"]["parser"], source_info),
        **opts.model_dump(include={"data_seed", "n_per_type"}),
        "bias_types": types,
        "aggregation": "per bias: mean of BD_i / BC_i over used pairs; category: unweighted mean of its biases; "
        "overall: unweighted mean of the per-bias values; seeds: mean, sample std; inter_run_var = var of the "
        "run-level overall (ddof=1), inter_sample_var = mean over runs of the population variance of the "
        "per-sample values",
        "metric_kinds": {b.bias_type: b.metric for b in BIASES if b.bias_type in types},
        "undefined_metrics": _undefined(metrics, per_bias_counts),
    }
    extra = {
        "per_seed": per_seed,
        "per_bias_counts": per_bias_counts,
        "by_difficulty": M.breakdown(all_scored, "difficulty", opts.abstention, types),
        "by_domain": M.breakdown(all_scored, "domain_type", opts.abstention, types),
        "upstream_judgements_dir": str(out_dir / "judgements"),
        "bias_report": str(out_dir / "bias_report.json"),
    }
    if "load_report" in source_info:
        extra["load_report"] = source_info["load_report"]
    return base.SuiteResult("bias", metrics, protocol, counts, str(samples_path), extra)


NOTE = (
    "BD: share of the downward room used when the evidence is destroyed; BC: 1 − relative score change under "
    "meaning-preserving changes; overall = mean of the nine. Higher is better everywhere."
)
BARS = base.Bars(
    "bias_per_model.png", "The nine MM-JudgeBias bias types per model", {b.bias_type: b.short for b in BIASES},
    {b.bias_type: "Bias-Deviation (↑)" if b.metric == "bd" else "Bias-Conformity (↑)" for b in BIASES},
    "overall", "score (higher is better; hatched n/a: no scorable pair)",
)  # fmt: skip
SUITE = base.Suite(
    "bias", BiasOptions, METRICS, ("overall", *CATEGORIES, *(b.bias_type for b in BIASES)), run, NOTE, BARS
)
