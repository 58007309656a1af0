"""Self-enhancement bias: does the judge favour responses written by its own model? (protocol: ours,
judge-benchmarks.md §5; no reference implementation exists).

Candidates carry their provenance: ``answer1.name`` / ``answer2.name`` and ``name`` in MLLM-as-a-Judge,
``models`` in VL-RewardBench, ``names`` in a generic pairs JSONL (see
:mod:`perception_judge.evaluation.benchmarks.pairs`). Option ``own_model`` names the judge's own model (a name
or a comma-separated list of aliases); names match after lower-casing and dropping non-alphanumerics
(``GPT-4V`` = ``gpt4v``). Whether MLLM-as-a-Judge's ``name`` is the generating model is the benchmark's
convention, not checked here.

Settings (option ``settings``; default ``pair,score`` for the MLLM-as-a-Judge source, else ``pair``):

* ``pair`` — human-labelled pairs with exactly one own response, judged in both orders (our pair prompt).
  ``pair.self_preference`` = ``pair.own_win_rate_judge`` − ``pair.own_win_rate_human`` (share of decisive
  judgments / human verdicts that prefer the own response; 0 = no self-preference beyond the humans');
  ``pair.mean_score_gap`` = mean score(own) − score(other) over parsed judgments; ``pair.acc_own_preferred`` /
  ``pair.acc_other_preferred`` — accuracy on pairs where the human prefers the own / the other response (a
  tie or failure is wrong) and ``pair.acc_gap`` = their difference (the accuracy split of §5).
* ``score`` — MLLM-as-a-Judge ``score.jsonl`` (``score_file`` or ``data_dir``), our single prompt (1-10).
  ``score.gap`` = mean judge score of own − other responses (1-10); ``score.gap_vs_human`` = mean(ceil(s/2) −
  human | own) − mean(ceil(s/2) − human | other) on the 1-5 scale: the gap not explained by the human
  scores (0 = unbiased); ``score.human_gap`` = the humans' own − other gap (1-5), for reference.

Metrics per seed, then the mean over seeds (prefix ``mean.``); constants of the data (human rates) and
``parse_failure_rate`` outside the prefix.
"""

from __future__ import annotations

import re
from typing import Any

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import JudgeRequest
from perception_judge.evaluation.base import JudgeBackend, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks import mllm_judge
from perception_judge.evaluation.benchmarks.common import (
    ImageSource,
    Outcome,
    SampleWriter,
    check_known_options,
    judge_items,
    judge_protocol,
    judged_items,
    mean_over_runs,
    opt,
    opt_choices,
    opt_int,
    opt_list,
    opt_path,
    parse_failure_rate,
    prefixed,
    prepare_image,
    require_file,
    suite_result,
)
from perception_judge.evaluation.benchmarks.pair_sources import SOURCE_OPTIONS, infer_source, load_pair_source
from perception_judge.evaluation.benchmarks.pairs import (
    ORDERS,
    PairItem,
    order_outcomes,
    pair_requests,
    response_scores,
    response_verdict,
)

SUITE = "self_enhancement"
SETTINGS: tuple[str, ...] = ("pair", "score")
OPTIONS = (*SOURCE_OPTIONS, "own_model", "settings", "score_file", "chunk_size", "image_size")


def normalize_name(name: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "", str(name).lower()) if name is not None else ""


def own_names(options: dict[str, Any]) -> set[str]:
    raw = opt_list(options, "own_model", [])
    names = {normalize_name(n) for n in raw} - {""}
    if not names:
        raise ValueError(
            f"suite {SUITE!r} needs option 'own_model': the judge's own model name as it appears in the "
            "candidates' name fields (e.g. --set self_enhancement.own_model=gpt4v)"
        )
    return names


def pair_metrics(
    items: list[PairItem], own: list[int], outcomes: list[dict[str, Outcome | None]]
) -> dict[str, float | None]:
    """One run. ``own[i]`` is the index (0/1) of item i's own response; ``outcomes[i][order]``."""
    wins = decisive = 0
    gaps: list[float] = []
    hits: dict[str, list[float]] = {"own": [], "other": []}
    for it, w, outs in zip(items, own, outcomes):
        own_letter = "A" if w == 0 else "B"
        for order in ORDERS:
            v = response_verdict(outs.get(order), order)
            if v in ("A", "B"):
                decisive += 1
                wins += v == own_letter
            s = response_scores(outs.get(order), order)
            if s is not None:
                gaps.append(s[w] - s[1 - w])
            if it.preferred in ("A", "B"):
                hits["own" if it.preferred == own_letter else "other"].append(float(v == it.preferred))
    acc_own, acc_other = M.mean(hits["own"]), M.mean(hits["other"])
    return {
        "pair.own_win_rate_judge": M.rate(wins, decisive),
        "pair.mean_score_gap": M.mean(gaps),
        "pair.acc_own_preferred": acc_own,
        "pair.acc_other_preferred": acc_other,
        "pair.acc_gap": acc_own - acc_other if acc_own is not None and acc_other is not None else None,
    }


def score_metrics(
    items: list[mllm_judge.Item], is_own: list[bool], outcomes: list[Outcome | None]
) -> dict[str, float | None]:
    raw: dict[bool, list[float]] = {True: [], False: []}
    resid: dict[bool, list[float]] = {True: [], False: []}
    for it, own, o in zip(items, is_own, outcomes):
        if o is None or o.scores is None:
            continue
        raw[own].append(o.scores[0])
        resid[own].append(M.ceil_half(o.scores[0]) - it.gt)
    m_own, m_other = M.mean(raw[True]), M.mean(raw[False])
    r_own, r_other = M.mean(resid[True]), M.mean(resid[False])
    return {
        "score.mean_own": m_own,
        "score.mean_other": m_other,
        "score.gap": m_own - m_other if m_own is not None and m_other is not None else None,
        "score.gap_vs_human": r_own - r_other if r_own is not None and r_other is not None else None,
    }


def _own_pairs(items: list[PairItem], own: set[str]) -> tuple[list[PairItem], list[int], dict[str, int]]:
    """The pairs with exactly one own response, the index of that response, and counts of the others."""
    kept: list[PairItem] = []
    own_index: list[int] = []
    counts = {"pairs": len(items), "skipped_no_own": 0, "skipped_both_own": 0}
    for it in items:
        flags = [normalize_name(n) in own for n in it.names]
        if sum(flags) == 0:
            counts["skipped_no_own"] += 1
        elif sum(flags) == 2:
            counts["skipped_both_own"] += 1
        else:
            kept.append(it)
            own_index.append(flags.index(True))
    return kept, own_index, counts


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    options = dict(config.options)
    check_known_options(options, OPTIONS, SUITE)
    own = own_names(options)
    source_name = infer_source(options)
    default_settings = SETTINGS if source_name == "mllm_judge" else ("pair",)
    settings = opt_choices(options, "settings", SETTINGS, default_settings)
    batch_size = opt_int(options, "chunk_size", 64) or 64
    image_size = opt_int(options, "image_size", None)
    seeds = [int(s) for s in config.seeds] or [0]

    def prepare(im: Any) -> Any:
        return prepare_image(im, backend, image_size)

    # read everything before any judging
    pair_source: dict[str, Any] = {}
    if "pair" in settings:
        all_pairs, pair_source = load_pair_source(options, None, SUITE)
        pairs, own_index, pair_counts = _own_pairs(all_pairs, own)
        if config.limit is not None:
            pairs, own_index = pairs[: config.limit], own_index[: config.limit]
    score_file = None
    if "score" in settings:
        score_file = opt_path(options, "score_file", required=False)
        if score_file is None:
            data_dir = opt_path(options, "data_dir", required=False)
            if data_dir is None:
                raise ValueError(
                    "the score setting needs option 'score_file' or 'data_dir' (MLLM-as-a-Judge)"
                )
            score_file = data_dir / "score.jsonl"
        files = {"score": require_file(score_file, "MLLM-as-a-Judge score file")}
        images = ImageSource(
            mllm_judge._image_roots(options, files),
            opt(options, "missing_images", "error"),
            "MLLM-as-a-Judge image",
        )
        score_items, score_counts = mllm_judge.load_items("score", score_file)
        if config.limit is not None:
            score_items = score_items[: config.limit]
        for it in score_items:
            images.check(it.image, f"{score_file} record {it.row}")

    metrics: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    per_seed: dict[str, dict[str, float | None]] = {}
    with SampleWriter(config.out_dir, SUITE) as writer:
        if "pair" in settings:
            c = pair_counts
            outcomes = judge_items(
                backend,
                pairs,
                lambda it: pair_requests(it, SUITE, prepare=prepare),
                seeds=seeds,
                sampling=config.sampling,
                batch_size=batch_size,
                writer=writer,
                counts=c,
                log_fields=lambda it: {
                    "setting": "pair",
                    "item_id": it.item_id,
                    "names": it.names,
                    "preferred": it.preferred,
                },
                desc="self_enhancement pair",
            )
            judged, items_j = judged_items(pairs, outcomes, c)
            own_j = [own_index[i] for i in judged]
            runs = []
            for s in seeds:
                r = pair_metrics(items_j, own_j, order_outcomes(outcomes, judged, s))
                per_seed.setdefault(f"seed{s}", {}).update(r)
                runs.append(r)
            labelled = [(it.preferred, w) for it, w in zip(items_j, own_j) if it.preferred in ("A", "B")]
            human_rate = M.rate(sum(p == ("A" if w == 0 else "B") for p, w in labelled), len(labelled))
            metrics["pair.own_win_rate_human"] = human_rate
            mean_runs = mean_over_runs(runs)
            judge_rate = mean_runs.get("pair.own_win_rate_judge")
            mean_runs["pair.self_preference"] = (
                judge_rate - human_rate if judge_rate is not None and human_rate is not None else None
            )
            metrics.update(prefixed("mean", mean_runs))
            metrics["pair.parse_failure_rate"] = parse_failure_rate(c)
            counts.update({f"pair.{k}": v for k, v in sorted(c.items())})

        if "score" in settings:
            c = score_counts

            def build(it: mllm_judge.Item) -> list[JudgeRequest]:
                image = prepare(images.load(it.image, f"{score_file} record {it.row}"))
                return [
                    JudgeRequest(
                        request_id=f"{SUITE}:{it.item_id}:r{it.row}",
                        messages=build_messages("single", it.question, it.responses, n_images=1),
                        images=[image],
                        n_scores=1,
                        parser="protocol",
                        meta={"variant": "main", "suite": SUITE},
                    )
                ]

            outcomes = judge_items(
                backend,
                score_items,
                build,
                seeds=seeds,
                sampling=config.sampling,
                batch_size=batch_size,
                writer=writer,
                counts=c,
                log_fields=lambda it: {
                    "setting": "score",
                    "item_id": it.item_id,
                    "name": it.names[0],
                    "gt": it.gt,
                },
                desc="self_enhancement score",
            )
            judged, items_s = judged_items(score_items, outcomes, c)
            is_own = [normalize_name(it.names[0]) in own for it in items_s]
            c["own_items"] = sum(is_own)
            runs = []
            for s in seeds:
                r = score_metrics(items_s, is_own, [outcomes.get((i, "main", s)) for i in judged])
                per_seed.setdefault(f"seed{s}", {}).update(r)
                runs.append(r)
            metrics.update(prefixed("mean", mean_over_runs(runs)))
            h_own = M.mean(it.gt for it, o in zip(items_s, is_own) if o)
            h_other = M.mean(it.gt for it, o in zip(items_s, is_own) if not o)
            metrics["score.human_gap"] = (
                h_own - h_other if h_own is not None and h_other is not None else None
            )
            metrics["score.parse_failure_rate"] = parse_failure_rate(c)
            counts.update({f"score.{k}": v for k, v in sorted(c.items())})
        samples_path = writer.samples_path

    for name in ("pair.self_preference", "score.gap_vs_human"):  # bias magnitudes, for ranking judges
        value = metrics.get(f"mean.{name}")
        if f"mean.{name}" in metrics:
            metrics[f"mean.{name}_abs"] = abs(value) if value is not None else None
    protocol = {
        "bias": "self-enhancement (protocol: ours, judge-benchmarks.md §5)",
        "own_model": sorted(own),
        "name_matching": "lower-cased, non-alphanumerics dropped, exact match against own_model aliases",
        **({"pair_source": pair_source} if pair_source else {}),
        **({"score_file": str(score_file)} if score_file else {}),
        "settings": settings,
        "prompts": {
            "pair": "perception_judge.core.protocol.build_messages('pair'), both orders",
            "score": "perception_judge.core.protocol.build_messages('single'), 1-10; ceil(s/2) against the human 1-5",
        },
        "ideal": "self_preference 0, acc_gap 0, score.gap_vs_human 0",
        "aggregation": {"mean": "metrics per seed, then the mean over seeds"},
        **judge_protocol(backend, config, image_size, "n/a (our protocol)"),
    }
    primary = "mean.pair.self_preference_abs" if "pair" in settings else "mean.score.gap_vs_human_abs"
    return suite_result(SUITE, metrics, protocol, counts, samples_path, per_seed, primary)
