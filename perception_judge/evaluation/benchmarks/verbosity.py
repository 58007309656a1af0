"""Verbosity bias: responses padded with redundant sentences that add no facts (protocol: ours,
judge-benchmarks.md §5).

Padding (:func:`pad_response`, deterministic for a given ``pad_seed`` and item): generic filler sentences
("To put it another way, the points above are the core of the answer."), a restatement of the question (when
it is short) and a repetition of the response's first sentence, inserted before the response's last line (so a
final-answer line stays last) until the text is ``pad_ratio_min``–``pad_ratio_max`` times its length (default
1.5–2×, drawn per item; at least one sentence is added, so very short responses grow more).

Two probes on any pair source (:mod:`perception_judge.evaluation.benchmarks.pairs`), each judged in both orders
under every seed, with our pair prompt (option ``modes``, default both):

* ``self`` — a response against its own padded copy (every response of every pair). Same content, so an
  unbiased judge ties or prefers the concise one. ``self.concise_preferred_rate`` (the headline: how often the
  concise original wins), ``self.padded_preferred_rate``, ``self.tie_rate`` — shares of parsed judgments;
  ``self.mean_score_shift`` — mean score(padded) − score(original), 0 = unbiased.
* ``flip`` — on pairs with a human preference: (better, worse) vs (better, padded worse), same order and seed.
  ``flip.flip_rate_to_padded`` — among judgments that preferred the better response unpadded, the share that
  prefer the padded worse one (ideal 0); ``flip.acc_unpadded`` / ``flip.acc_worse_padded`` (tie or failure
  wrong) and ``flip.mean_score_shift_worse`` — mean score(padded worse) − score(worse).

Metrics per seed, then the mean over seeds (prefix ``mean.``); ``parse_failure_rate`` over all judgments.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from perception_judge.core.schema import JudgeRequest, sha256_hex
from perception_judge.evaluation.base import JudgeBackend, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.common import (
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
    parse_failure_rate,
    prefixed,
    prepare_image,
    suite_result,
)
from perception_judge.evaluation.benchmarks.pair_sources import SOURCE_OPTIONS, load_pair_source
from perception_judge.evaluation.benchmarks.pairs import (
    ORDERS,
    PairItem,
    requests_both_orders,
    response_scores,
    response_verdict,
)

SUITE = "verbosity"
MODES: tuple[str, ...] = ("self", "flip")
OPTIONS = (*SOURCE_OPTIONS, "modes", "pad_ratio_min", "pad_ratio_max", "pad_seed", "chunk_size", "image_size")

LEAD_INS: tuple[str, ...] = (
    "Let me go through this carefully.",
    "Here is my answer to the question.",
    "I will explain my reasoning step by step.",
    "Let us look at what the question asks.",
)
FILLERS: tuple[str, ...] = (
    "To put it another way, the points above are the core of the answer.",
    "This is worth stating clearly.",
    "In other words, the explanation above still applies.",
    "It helps to keep the question in mind here.",
    "As noted above, this is the key consideration.",
    "This follows from what was said before.",
    "Put simply, the reasoning stays the same.",
    "That is the main idea to take away.",
    "Looking at it once more leads to the same conclusion.",
    "Each of these steps matters for the final answer.",
)
_MAX_QUOTED = 200
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _rng(seed: int, key: str) -> random.Random:
    return random.Random(int(sha256_hex(f"{seed}:{key}")[:16], 16))


def pad_response(
    text: str, question: str, key: str, ratio_min: float = 1.5, ratio_max: float = 2.0, seed: int = 0
) -> str:
    """``text`` padded with redundant sentences to about ``ratio_min``–``ratio_max`` × its length.

    Deterministic in (seed, key). No new facts: only generic filler, a restatement of the question (if at most
    200 characters) and a repetition of the response's first sentence. A lead-in sentence goes first; the rest
    is inserted before the last line when the response has several lines (so a final-answer line stays last),
    else appended. At least one sentence is always added."""
    if not 1.0 <= ratio_min <= ratio_max:
        raise ValueError(f"need 1 <= pad_ratio_min <= pad_ratio_max, got {ratio_min}, {ratio_max}")
    rng = _rng(seed, key)
    target = math.ceil(len(text) * rng.uniform(ratio_min, ratio_max))
    pool = list(FILLERS)
    q = " ".join(question.split())
    if q and len(q) <= _MAX_QUOTED:
        pool.append(f"The question asks: {q}")
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0].strip() if text.strip() else ""
    if first and len(first) <= _MAX_QUOTED and first != text.strip():
        pool.append(f"To repeat the main point: {first}")
    rng.shuffle(pool)
    lead = rng.choice(LEAD_INS)
    added: list[str] = []
    length = len(text) + len(lead) + 1
    i = 0
    while length < target or not added:
        sentence = pool[i % len(pool)]
        added.append(sentence)
        length += len(sentence) + 1
        i += 1
        if len(added) > 200:  # pragma: no cover - a safety stop for absurd ratios
            break
    lines = text.rstrip().split("\n")
    filler = " ".join(added)
    if len(lines) > 1:
        body, last = "\n".join(lines[:-1]).rstrip(), lines[-1]
        padded = f"{lead} {body}\n{filler}\n{last}" if body else f"{lead} {filler}\n{last}"
    else:
        padded = f"{lead} {text.rstrip()} {filler}"
    return padded


def _padder(options: dict[str, Any]):
    lo = float(opt(options, "pad_ratio_min", 1.5))
    hi = float(opt(options, "pad_ratio_max", 2.0))
    seed = int(opt(options, "pad_seed", 0))
    if not 1.0 <= lo <= hi:
        raise ValueError(f"need 1 <= pad_ratio_min <= pad_ratio_max, got {lo}, {hi}")

    def pad(item: PairItem, which: int) -> str:
        return pad_response(item.responses[which], item.question, f"{item.item_id}:{which}", lo, hi, seed)

    return pad, {"pad_ratio_min": lo, "pad_ratio_max": hi, "pad_seed": seed}


def worse_index(item: PairItem) -> int | None:
    return {"A": 1, "B": 0}.get(item.preferred or "")


def self_metrics(
    items: list[PairItem], out: dict[tuple[int, str], Outcome | None]
) -> dict[str, float | None]:
    """``out[(i, variant)]``; variants ``self{r}_{order}`` judge (original r, padded r)."""
    verdicts, shifts = [], []
    for i in range(len(items)):
        for r in (0, 1):
            for order in ORDERS:
                o = out.get((i, f"self{r}_{order}"))
                v = response_verdict(o, order)
                if v is not None:
                    verdicts.append(v)
                s = response_scores(o, order)
                if s is not None:
                    shifts.append(s[1] - s[0])
    n = len(verdicts)
    return {
        "self.concise_preferred_rate": M.rate(sum(v == "A" for v in verdicts), n),
        "self.padded_preferred_rate": M.rate(sum(v == "B" for v in verdicts), n),
        "self.tie_rate": M.rate(sum(v == "C" for v in verdicts), n),
        "self.mean_score_shift": M.mean(shifts),
    }


def flip_metrics(
    items: list[PairItem], out: dict[tuple[int, str], Outcome | None]
) -> dict[str, float | None]:
    """Variants ``flip_base_{order}`` judge (r0, r1); ``flip_pad_{order}`` the same with the worse padded."""
    base_right = flips = 0
    acc_base: list[float] = []
    acc_pad: list[float] = []
    shifts: list[float] = []
    for i, it in enumerate(items):
        w = worse_index(it)
        if w is None:
            continue
        for order in ORDERS:
            ob, op = out.get((i, f"flip_base_{order}")), out.get((i, f"flip_pad_{order}"))
            vb, vp = response_verdict(ob, order), response_verdict(op, order)
            acc_base.append(float(vb == it.preferred))
            acc_pad.append(float(vp == it.preferred))
            if vb == it.preferred and vp is not None:
                base_right += 1
                flips += vp == ("A" if w == 0 else "B")
            sb, sp = response_scores(ob, order), response_scores(op, order)
            if sb is not None and sp is not None:
                shifts.append(sp[w] - sb[w])
    return {
        "flip.flip_rate_to_padded": M.rate(flips, base_right),
        "flip.acc_unpadded": M.mean(acc_base),
        "flip.acc_worse_padded": M.mean(acc_pad),
        "flip.mean_score_shift_worse": M.mean(shifts),
    }


def run(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    options = dict(config.options)
    check_known_options(options, OPTIONS, SUITE)
    modes = opt_choices(options, "modes", MODES)
    batch_size = opt_int(options, "chunk_size", 32) or 32
    image_size = opt_int(options, "image_size", None)
    seeds = [int(s) for s in config.seeds] or [0]
    pad, pad_settings = _padder(options)
    items, source = load_pair_source(options, config.limit, SUITE)
    counts: dict[str, int] = {"pairs": len(items)}
    ratios: list[float] = []

    def build(item: PairItem) -> list[JudgeRequest]:
        images = [prepare_image(im, backend, image_size) for im in item.load_images()]
        reqs: list[JudgeRequest] = []
        if "self" in modes:
            for r in (0, 1):
                padded = pad(item, r)
                ratios.append(len(padded) / max(1, len(item.responses[r])))
                reqs += requests_both_orders(
                    SUITE, item.item_id, item.question, [item.responses[r], padded], images, tag=f"self{r}_"
                )
        w = worse_index(item)
        if "flip" in modes and w is not None:
            padded_pair = list(item.responses)
            padded_pair[w] = pad(item, w)
            reqs += requests_both_orders(
                SUITE, item.item_id, item.question, item.responses, images, tag="flip_base_"
            )
            reqs += requests_both_orders(
                SUITE, item.item_id, item.question, padded_pair, images, tag="flip_pad_"
            )
        return reqs

    with SampleWriter(config.out_dir, SUITE) as writer:
        outcomes = judge_items(
            backend,
            items,
            build,
            seeds=seeds,
            sampling=config.sampling,
            batch_size=batch_size,
            writer=writer,
            counts=counts,
            desc="verbosity",
            log_fields=lambda it: {"item_id": it.item_id, "preferred": it.preferred},
        )
        samples_path = writer.samples_path
    judged, kept = judged_items(items, outcomes, counts)
    counts["flip_pairs"] = sum(worse_index(it) is not None for it in kept) if "flip" in modes else 0
    position = {i: j for j, i in enumerate(judged)}
    runs, per_seed = [], {}
    for s in seeds:
        out = {(position[i], v): o for (i, v, seed), o in outcomes.items() if seed == s}
        r: dict[str, float | None] = {}
        if "self" in modes:
            r.update(self_metrics(kept, out))
        if "flip" in modes:
            r.update(flip_metrics(kept, out))
        per_seed[f"seed{s}"] = r
        runs.append(r)
    metrics: dict[str, float | None] = {
        "parse_failure_rate": parse_failure_rate(counts),
        "mean_length_ratio": M.mean(ratios),
        **prefixed("mean", mean_over_runs(runs)),
    }
    protocol = {
        "bias": "verbosity (protocol: ours, judge-benchmarks.md §5)",
        **source,
        "modes": modes,
        "padding": {
            **pad_settings,
            "content": "generic filler, a restatement of the question, a repetition of the first sentence; no new "
            "facts; inserted before the last line",
        },
        "prompt": "perception_judge.core.protocol.build_messages('pair'), two 1-10 scores, both orders",
        "ideal": "self: padded_preferred_rate 0 and mean_score_shift 0; flip: flip_rate_to_padded 0",
        "aggregation": {"mean": "metrics per seed, then the mean over seeds"},
        **judge_protocol(backend, config, image_size, "n/a (our protocol)"),
    }
    primary = "mean.flip.flip_rate_to_padded" if "flip" in modes else "mean.self.padded_preferred_rate"
    return suite_result(SUITE, metrics, protocol, counts, samples_path, per_seed, primary)
