"""MLLM-as-a-Judge (``Dongping-Chen/MLLM-Judge``): pair, score and batch settings from the benchmark's files.

Files (``data_dir``, the repository's ``Dataset/Benchmark`` folder; override each with ``pair_file`` /
``score_file`` / ``batch_file``):

=========  ===================================================================================================
pair       ``instruction, image_path, original_dataset, answer1{name, answer}, answer2{name, answer}`` and the
           human verdict ``human`` (or ``human_answer``) in {A, B, C}; C = tie
score      ``instruction, image_path, original_dataset, answer, name`` and the human score ``human`` (or
           ``human_answer``), an int 1-5
batch      ``instruction, image_path, original_dataset, answers[{name, answer}]`` and the human ranking string
           ``human_answer`` (the GitHub copy) or ``human`` (what the evaluators read), e.g. ``"CDAB"``
=========  ===================================================================================================

Images: ``image_path`` resolved under ``images_dir`` (default: ``data_dir``, its parent, and ``image/`` in
either); a path whose leading folder is already the root (``image/200.jpg`` under ``.../image``) is found by
its file name too.

Protocol (ours, following the Perception-Judge evaluation): our judge prompts from
:func:`perception_judge.core.protocol.build_messages` — pair (two 1-10 scores; A if s1 > s2, B if s1 < s2, else C),
single (one 1-10 score, mapped onto the human 1-5 scale with ``ceil(s/2)``) and batch (one 1-10 score per
answer; prediction = slots sorted by score, highest first, ties broken towards the later slot as in the
published evaluators). Scores come only from the final answer (:func:`perception_judge.core.protocol.parse_scores`):
exactly n ``<answer>`` tags after the reasoning, integers 1-10 (option ``parser=strict``, the default). Option
``parser=published`` reads completions as the published evaluators do
(:mod:`~perception_judge.evaluation.benchmarks.published`: the first n integers of the ``<answer>`` blocks
anywhere in the text, out-of-range values kept; score: s >= 11 -> -1, else ceil(s/2); batch: the integers found,
truncated to the number of answers, a shorter ranking scored as it is); the ``*_compat`` metrics are then the
published numbers, on malformed output too.

Metrics (names ``{aggregation}.{setting}.{metric}.{scope}``; scope ``micro`` = pooled over all items (the
Perception-Judge overall), ``macro`` = unweighted mean over ``original_dataset`` subsets (Flex-Judge's "Ave"),
``by_dataset.<subset>``):

* ``pair.acc_with_tie`` — all items; a parse failure is **wrong**. ``pair.acc_with_tie_compat`` — a failure
  counts as the verdict C, as in the published evaluators. ``pair.acc_without_tie`` — items with human C
  dropped, predicted C wrong (a failure is wrong under both conventions).
* ``score.pearson`` — Pearson r of ceil(s/2) vs the human score over parsed items. ``score.pearson_compat`` —
  failures enter as −1, as in the published evaluators.
* ``batch.norm_levenshtein`` (↓) — ``lev(pred, gt) / max(len)``, a failure = 1.0 (an empty prediction, as
  published). ``batch.norm_levenshtein_parsed`` (↓) — parsed items only. Items whose ranking is missing or
  has ≤ 2 letters are skipped and counted.
* ``{setting}.parse_failure_rate`` — failed judgments / all judgments (every seed), outside any aggregation.

Aggregation over seeds (option ``aggregation``, default ``mean``; ``all`` = all three):

* ``mean`` — the metrics per seed, then their mean over seeds (Perception-Judge: seeds 0, 1, 2; temperature
  1.0, top_p 0.95, top_k 20; 448×448 images).
* ``vote`` — per item: pair majority vote (A=−1, B=+1, C=0, sign of the sum; failures abstain), score
  median of the parsed seeds, batch mean score per slot over the parsed seeds; then the metrics once.
* ``flex`` — a replica of Flex-Judge's ``test/evaluate.py`` on our parsed scores: pair majority vote with
  failures as C; score Pearson on the runs' **accumulated** lists (failure −1, undefined r → 0), median over
  the k cumulative values; batch mean distance on accumulated runs, **max** over runs; headline = ``macro``.
  Flex's own prompts (1-5 score prompt, temperature 0.4, top_p 0.8) differ from ours, so only the
  aggregation is replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import SLOTS, JudgeRequest
from perception_judge.evaluation.base import JudgeBackend, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
    PERCEPTION_JUDGE_SAMPLING,
    PERCEPTION_JUDGE_SEEDS,
    BenchmarkDataError,
    ImageSource,
    Outcome,
    SampleWriter,
    aggregation_note,
    aggregations,
    check_known_options,
    first_field,
    judge_items,
    judge_protocol,
    judged_items,
    macro,
    mean_over_runs,
    opt,
    opt_choices,
    opt_int,
    opt_path,
    parse_failure_rate,
    prefixed,
    prepare_image,
    read_jsonl,
    require_file,
    slug,
    suite_result,
    suite_seeds,
)
from perception_judge.evaluation.benchmarks.published import DESCRIPTIONS, parser_option, request_parser

SUITE = "mllm_judge"
SETTINGS: tuple[str, ...] = ("pair", "score", "batch")
PROMPT_PROTOCOL = {"pair": "pair", "score": "single", "batch": "batch"}
OPTIONS = (
    "data_dir",
    "images_dir",
    "settings",
    "pair_file",
    "score_file",
    "batch_file",
    "aggregation",
    "chunk_size",
    "seeds",
    "image_size",
    "missing_images",
    "parser",
)
GT_FIELDS = ("human", "human_answer")


@dataclass
class Item:
    """One benchmark record, normalised."""

    setting: str
    row: int  # 1-based position in the file
    item_id: str
    dataset: str
    question: str
    responses: list[str]
    names: list[str | None]
    image: Any
    gt: Any  # "A" | "B" | "C" (pair), int 1-5 (score), ranking string (batch)


# ----------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------


def _answer(record: dict[str, Any], key: str, path: Path, row: int) -> tuple[str, str | None]:
    value = record.get(key)
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        name = value.get("name")
        return value["answer"], str(name) if name is not None else None
    if isinstance(value, str):
        return value, None
    raise BenchmarkDataError(
        f"MLLM-as-a-Judge: {path!s} record {row}: {key!r} must be {{name, answer}}", path
    )


def _question(record: dict[str, Any], path: Path, row: int) -> str:
    q = first_field(record, ("instruction", "question"))
    if not isinstance(q, str):
        raise BenchmarkDataError(f"MLLM-as-a-Judge: {path!s} record {row}: no 'instruction' text", path)
    return q


def pair_gt(record: dict[str, Any]) -> str | None:
    v = first_field(record, GT_FIELDS)
    if isinstance(v, str) and v.strip().upper() in M.VERDICTS:
        return v.strip().upper()
    return None


def score_gt(record: dict[str, Any]) -> int | None:
    v = first_field(record, GT_FIELDS)
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and 1 <= v <= 5 else None


def batch_gt(record: dict[str, Any]) -> str | None:
    """The human ranking as slot letters (separators such as ``>`` or spaces dropped); None if absent."""
    v = first_field(record, GT_FIELDS)
    if not isinstance(v, str):
        return None
    letters = "".join(ch for ch in v.upper() if ch in SLOTS)
    return letters or None


def load_items(setting: str, path: Path) -> tuple[list[Item], dict[str, int]]:
    """Items of one setting, and counts of the records left out (``skipped_no_gt``, ``skipped_gt_short``,
    ``skipped_bad_answers``)."""
    records = read_jsonl(path, f"MLLM-as-a-Judge {setting} file")
    items: list[Item] = []
    counts: dict[str, int] = {"records": len(records)}

    def skip(reason: str) -> None:
        counts[f"skipped_{reason}"] = counts.get(f"skipped_{reason}", 0) + 1

    for row, rec in enumerate(records, 1):
        question = _question(rec, path, row)
        dataset = str(rec.get("original_dataset") or "unknown")
        image = rec.get("image_path")
        ident = rec.get(f"{setting}_id", rec.get("id", row))
        item_id = f"{setting}:{ident}"
        if setting == "pair":
            a1, n1 = _answer(rec, "answer1", path, row)
            a2, n2 = _answer(rec, "answer2", path, row)
            gt = pair_gt(rec)
            if gt is None:
                skip("no_gt")
                continue
            items.append(Item(setting, row, item_id, dataset, question, [a1, a2], [n1, n2], image, gt))
        elif setting == "score":
            a, name = _answer(rec, "answer", path, row)
            name = name if name is not None else (str(rec["name"]) if rec.get("name") is not None else None)
            gt = score_gt(rec)
            if gt is None:
                skip("no_gt")
                continue
            items.append(Item(setting, row, item_id, dataset, question, [a], [name], image, gt))
        else:
            answers = rec.get("answers")
            if not isinstance(answers, list) or not 2 <= len(answers) <= len(SLOTS):
                skip("bad_answers")
                continue
            texts, names = [], []
            for j, ans in enumerate(answers):
                if isinstance(ans, dict) and isinstance(ans.get("answer"), str):
                    texts.append(ans["answer"])
                    names.append(str(ans["name"]) if ans.get("name") is not None else None)
                elif isinstance(ans, str):
                    texts.append(ans)
                    names.append(None)
                else:
                    raise BenchmarkDataError(
                        f"MLLM-as-a-Judge: {path!s} record {row}: answers[{j}] must be {{name, answer}}",
                        path,
                    )
            gt = batch_gt(rec)
            if gt is None or len(gt) <= 2:  # the published rule: skip gt None or of length <= 2
                skip("gt_short")
                continue
            items.append(Item(setting, row, item_id, dataset, question, texts, names, image, gt))
    return items, counts


# ----------------------------------------------------------------------------------------------------------
# Predictions and metrics
# ----------------------------------------------------------------------------------------------------------


def prediction(setting: str, outcome: Outcome | None, parser: str = "strict") -> Any:
    """The prediction of one judgment: a verdict (pair), a 1-5 score (score) or a ranking (batch); None on a
    parse failure or a missing judgment. Under ``parser="published"`` a score of 11 or more is a failure (the
    published evaluator's -1) and smaller out-of-range values go through ``ceil(s/2)`` as they are."""
    if outcome is None or outcome.scores is None:
        return None
    s = outcome.scores
    if setting == "pair":
        return M.pair_verdict(s[0], s[1])
    if setting == "score":
        if parser == "published" and s[0] >= 11:
            return None
        return M.ceil_half(s[0])
    return M.ranking_from_scores(s)


def _groups(items: list[Item]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        out.setdefault(it.dataset, []).append(i)
    return out


def _scoped(name: str, items: list[Item], fn: Any, with_macro: bool = True) -> dict[str, float | None]:
    """``fn(indices) -> value`` evaluated on all items (micro), per subset, and their macro mean."""
    groups = _groups(items)
    out: dict[str, float | None] = {f"{name}.micro": fn(list(range(len(items))))}
    per = {ds: fn(idx) for ds, idx in sorted(groups.items())}
    if with_macro:
        out[f"{name}.macro"] = macro(per)
    out.update({f"{name}.by_dataset.{slug(ds)}": v for ds, v in per.items()})
    return out


def run_metrics(setting: str, items: list[Item], preds: list[Any]) -> dict[str, float | None]:
    """Metrics of one run (one seed, or the voted predictions) of one setting."""
    gts = [it.gt for it in items]
    if setting == "pair":
        out = {}
        for name, with_tie, failure in (
            ("acc_with_tie", True, "wrong"),
            ("acc_with_tie_compat", True, "tie"),
            ("acc_without_tie", False, "wrong"),
        ):
            out.update(
                _scoped(
                    f"pair.{name}",
                    items,
                    lambda idx, w=with_tie, f=failure: M.pair_accuracy(
                        [preds[i] for i in idx], [gts[i] for i in idx], with_tie=w, failure=f
                    ),
                )
            )
        return out
    if setting == "score":

        def parsed_r(idx: list[int]) -> float | None:
            kept = [i for i in idx if preds[i] is not None]
            return M.pearson([float(preds[i]) for i in kept], [float(gts[i]) for i in kept])

        def compat_r(idx: list[int]) -> float | None:
            return M.pearson(
                [float(preds[i]) if preds[i] is not None else -1.0 for i in idx], [float(gts[i]) for i in idx]
            )

        return {
            **_scoped("score.pearson", items, parsed_r),
            **_scoped("score.pearson_compat", items, compat_r),
        }

    def lev(idx: list[int], parsed_only: bool) -> float | None:
        values = [
            M.normalized_levenshtein(preds[i] or "", gts[i])
            for i in idx
            if not (parsed_only and preds[i] is None)
        ]
        return M.mean(values)

    return {
        **_scoped("batch.norm_levenshtein", items, lambda idx: lev(idx, False)),
        **_scoped("batch.norm_levenshtein_parsed", items, lambda idx: lev(idx, True)),
    }


def voted_predictions(
    setting: str, per_seed: list[list[Outcome | None]], parser: str = "strict"
) -> list[Any]:
    """Item-level combination over seeds (failures abstain; None when every seed failed)."""
    n = len(per_seed[0]) if per_seed else 0
    out: list[Any] = []
    for i in range(n):
        outs = [run[i] for run in per_seed if run[i] is not None and run[i].scores is not None]
        if setting == "pair":
            out.append(M.vote_verdict(prediction("pair", o) for o in outs))
        elif setting == "score":
            out.append(M.median(prediction("score", o, parser) for o in outs))  # median skips None
        else:
            if not outs:
                out.append(None)
                continue
            k = min(len(o.scores or []) for o in outs)  # published batch rankings can be shorter
            means = [sum(o.scores[j] for o in outs) / len(outs) for j in range(k)]  # type: ignore[index]
            out.append(M.ranking_from_scores(means))
    return out


def flex_metrics(
    setting: str, items: list[Item], per_seed: list[list[Outcome | None]], parser: str = "strict"
) -> dict[str, Any]:
    """Flex-Judge's ``test/evaluate.py`` aggregation (see the module docstring)."""
    groups = _groups(items)
    gts = [it.gt for it in items]
    preds = [[prediction(setting, o, parser) for o in run] for run in per_seed]
    out: dict[str, float | None] = {}
    if setting == "pair":
        voted = [M.vote_verdict((run[i] or "C") for run in preds) for i in range(len(items))]
        for name, with_tie in (("acc_with_tie", True), ("acc_without_tie", False)):
            scoped = _scoped(
                f"pair.{name}",
                items,
                lambda idx, w=with_tie: M.pair_accuracy(
                    [voted[i] for i in idx], [gts[i] for i in idx], with_tie=w, failure="tie"
                ),
            )
            # the script rounds each subset to 3 decimals, then averages and rounds again ("Ave")
            per = {k: _round3(v) for k, v in scoped.items() if ".by_dataset." in k}
            scoped.update(per)
            scoped[f"pair.{name}.macro"] = _round3(macro(per))
            out.update(scoped)
        return out
    if setting == "score":
        per = {
            ds: M.flex_score_pearson(
                [[float(run[i]) if run[i] is not None else -1.0 for i in idx] for run in preds],
                [float(gts[i]) for i in idx],
            )
            for ds, idx in sorted(groups.items())
        }
        name = "score.pearson"
    else:
        per = {
            ds: M.flex_batch_distance(
                [[M.normalized_levenshtein(run[i] or "", gts[i]) for i in idx] for run in preds]
            )
            for ds, idx in sorted(groups.items())
        }
        name = "batch.norm_levenshtein"
    out[f"{name}.macro"] = _round3(macro(per))  # the script averages the unrounded subsets, then rounds "Ave"
    out.update({f"{name}.by_dataset.{slug(ds)}": _round3(v) for ds, v in per.items()})
    return out


def _round3(value: float | None) -> float | None:
    """Flex-Judge's printed precision: ``round(x, 3)`` (None stays None)."""
    return None if value is None else round(value, 3)


# ----------------------------------------------------------------------------------------------------------
# The suite
# ----------------------------------------------------------------------------------------------------------


def _files(options: dict[str, Any], settings: list[str]) -> dict[str, Path]:
    data_dir = opt_path(options, "data_dir", required=False)
    files: dict[str, Path] = {}
    for s in settings:
        explicit = opt_path(options, f"{s}_file", required=False)
        if explicit is None and data_dir is None:
            raise ValueError(
                f"suite {SUITE!r} needs option 'data_dir' (the MLLM-Judge Dataset/Benchmark folder) or '{s}_file'"
            )
        files[s] = explicit if explicit is not None else data_dir / f"{s}.jsonl"  # type: ignore[operator]
        require_file(files[s], f"MLLM-as-a-Judge {s} file")
    return files


def _image_roots(options: dict[str, Any], files: dict[str, Path]) -> list[Path]:
    images_dir = opt_path(options, "images_dir", required=False)
    if images_dir is not None:
        return [images_dir]
    roots: list[Path] = []
    for f in files.values():
        for r in (f.parent, f.parent.parent, f.parent / "image", f.parent.parent / "image"):
            if r not in roots:
                roots.append(r)
    return roots


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    options = dict(config.options)
    check_known_options(options, OPTIONS, SUITE)
    settings = opt_choices(options, "settings", SETTINGS)
    aggs = aggregations(options, ("mean", "vote", "flex"))
    batch_size = opt_int(options, "chunk_size", 64) or 64
    image_size = opt_int(options, "image_size", None)
    files = _files(options, settings)  # every file checked before any judging
    images = ImageSource(
        _image_roots(options, files), opt(options, "missing_images", "error"), "MLLM-as-a-Judge image"
    )
    seeds = suite_seeds(options, config)
    parser = parser_option(options, SUITE)
    loaded: dict[str, tuple[list[Item], dict[str, int]]] = {}
    for setting in settings:  # read every file and find every image before any judging
        items, load_counts = load_items(setting, files[setting])
        if config.limit is not None:
            items = items[: config.limit]
        for item in items:
            images.check(item.image, f"{files[setting]} record {item.row}")
        loaded[setting] = (items, load_counts)

    metrics: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    per_seed_metrics: dict[str, dict[str, float | None]] = {}
    with SampleWriter(config.out_dir, SUITE) as writer:
        for setting in settings:
            items, load_counts = loaded[setting]
            set_counts: dict[str, int] = dict(load_counts)

            def build(item: Item, setting: str = setting) -> list[JudgeRequest]:
                image = prepare_image(
                    images.load(item.image, f"{files[setting]} record {item.row}"), backend, image_size
                )
                messages = build_messages(PROMPT_PROTOCOL[setting], item.question, item.responses, n_images=1)
                return [
                    JudgeRequest(
                        request_id=f"{SUITE}:{item.item_id}:r{item.row}",
                        messages=messages,
                        images=[image],
                        n_scores=len(item.responses) if setting != "score" else 1,
                        parser=request_parser(parser, prefix=setting == "batch"),
                        meta={"variant": "main", "suite": SUITE, "setting": setting},
                    )
                ]

            outcomes = judge_items(
                backend,
                items,
                build,
                seeds=seeds,
                sampling=config.sampling,
                batch_size=batch_size,
                writer=writer,
                counts=set_counts,
                desc=f"mllm_judge {setting}",
                log_fields=lambda it: {
                    "setting": it.setting,
                    "item_id": it.item_id,
                    "row": it.row,
                    "dataset": it.dataset,
                    "gt": it.gt,
                },
            )
            judged, kept = judged_items(items, outcomes, set_counts)
            per_seed = [[outcomes.get((i, "main", s)) for i in judged] for s in seeds]
            metrics[f"{setting}.parse_failure_rate"] = parse_failure_rate(set_counts)
            if setting == "batch":
                tied = sum(
                    1
                    for run in per_seed
                    for o in run
                    if o is not None and o.scores and M.has_tied_scores(o.scores)
                )
                metrics["batch.tied_scores_rate"] = M.rate(tied, set_counts.get("judgments", 0))
            if not kept:
                for agg in aggs:
                    metrics.update(prefixed(agg, _empty_metrics(setting)))
            else:
                for agg in aggs:
                    if agg == "mean":
                        runs = [
                            run_metrics(setting, kept, [prediction(setting, o, parser) for o in run])
                            for run in per_seed
                        ]
                        for s, r in zip(seeds, runs):
                            per_seed_metrics.setdefault(f"seed{s}", {}).update(r)
                        metrics.update(prefixed("mean", mean_over_runs(runs)))
                    elif agg == "vote":
                        metrics.update(
                            prefixed(
                                "vote",
                                run_metrics(setting, kept, voted_predictions(setting, per_seed, parser)),
                            )
                        )
                    else:
                        metrics.update(prefixed("flex", flex_metrics(setting, kept, per_seed, parser)))
            counts.update({f"{setting}.{k}": v for k, v in sorted(set_counts.items())})
        samples_path = writer.samples_path

    protocol = {
        "benchmark": "MLLM-as-a-Judge (Dongping-Chen/MLLM-Judge, Dataset/Benchmark)",
        "files": {s: str(p) for s, p in files.items()},
        "prompts": {
            s: f"perception_judge.core.protocol.build_messages({PROMPT_PROTOCOL[s]!r}), one image, scores 1-10 in <answer> tags"
            for s in settings
        },
        "parser": DESCRIPTIONS[parser],
        "pair_verdict": "A if s1 > s2, B if s1 < s2, else C",
        "score_mapping": "ceil(s/2): judge 1-10 onto the human 1-5 scale",
        "batch_prediction": "slots sorted by score, highest first; equal scores: the later slot first",
        "batch_gt_field": "human or human_answer; records with no ranking or <= 2 letters skipped",
        "scopes": "micro = pooled over all items; macro = unweighted mean over original_dataset subsets",
        "failures": (
            "published: a score >= 11 is a failure, a batch ranking may be shorter than the answers; "
            if parser == "published"
            else ""
        )
        + "strict metrics count a parse failure as wrong (pair) / excluded (pearson) / 1.0 (batch); "
        "*_compat metrics treat it as the published evaluators do (C / -1)",
        "aggregation": {a: _AGG_DESCRIPTION[a] for a in aggs},
        **aggregation_note(aggs, seeds),
        **judge_protocol(
            backend,
            config,
            image_size,
            "448x448 square, aspect ignored",
            seeds=seeds,
            published_sampling={**PERCEPTION_JUDGE_SAMPLING, "seeds": PERCEPTION_JUDGE_SEEDS},
        ),
    }
    head = aggs[0]
    candidates = [
        f"{head}.{name}.{scope}"
        for name in ("pair.acc_without_tie", "score.pearson_compat", "batch.norm_levenshtein")
        for scope in ("micro", "macro")
    ]
    primary = next((c for c in candidates if c in metrics), None)
    return suite_result(SUITE, metrics, protocol, counts, samples_path, per_seed_metrics, primary)


_AGG_DESCRIPTION = {
    "mean": "metrics per seed, then the mean over seeds (Perception-Judge protocol)",
    "vote": "per item over seeds: pair majority vote, score median, batch mean score per slot (failures "
    "abstain); then the metrics once",
    "flex": "replica of Flex-Judge test/evaluate.py: pair vote with failures as C; score Pearson on accumulated "
    "runs (failure -1, undefined r 0), median; batch distance on accumulated runs, max; headline = macro",
}


def _empty_metrics(setting: str) -> dict[str, float | None]:
    names = {
        "pair": ["acc_with_tie", "acc_with_tie_compat", "acc_without_tie"],
        "score": ["pearson", "pearson_compat"],
        "batch": ["norm_levenshtein", "norm_levenshtein_parsed"],
    }[setting]
    return {f"{setting}.{n}.{scope}": None for n in names for scope in ("micro", "macro")}
