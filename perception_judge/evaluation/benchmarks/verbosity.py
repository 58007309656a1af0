"""Verbosity bias: responses padded with redundant sentences that add no facts (:func:`pad_response`), judged
against the concise originals on any pair source, both orders, every seed (protocol: ours, judge-benchmarks.md
§5). Probes (option ``modes``): ``self`` — a response against its own padded copy; ``flip`` — (better, worse)
vs (better, padded worse). Details: ``docs/benchmarks.md`` (verbosity).
"""

from __future__ import annotations

import itertools
import math
import random
import re

from pydantic import Field, model_validator

from perception_judge.core.schema import JudgeRequest, sha256_hex
from perception_judge.evaluation import base
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks import pairs
from perception_judge.evaluation.benchmarks.common import BenchmarkRun, Judged, choices, prefixed
from perception_judge.evaluation.benchmarks.pair_sources import PairSourceOptions, load_pair_source

NAME = "verbosity"
MODES: tuple[str, ...] = ("self", "flip")
METRICS: dict[str, base.Metric] = {
    **M.METRICS,
    "padded_preferred_rate": base.LOWER,
    "flip_rate_to_padded": base.LOWER,
    **dict.fromkeys(("concise_preferred_rate", "acc_unpadded", "acc_worse_padded"), base.Metric()),
    **dict.fromkeys(("mean_score_shift", "mean_score_shift_worse"), base.Metric(None, ideal=0.0)),
    **dict.fromkeys(("mean_length_ratio", "tie_rate"), base.INFO),
}

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


def pad_response(
    text: str, question: str, key: str, ratio_min: float = 1.5, ratio_max: float = 2.0, seed: int = 0
) -> str:
    """``text`` padded with redundant sentences (no new facts; docs/benchmarks.md, "Verbosity bias") to about
    ``ratio_min``–``ratio_max`` × its length, at least one sentence, a final line kept last; deterministic in
    (seed, key)."""
    if not 1.0 <= ratio_min <= ratio_max:
        raise ValueError(f"need 1 <= pad_ratio_min <= pad_ratio_max, got {ratio_min}, {ratio_max}")
    rng = random.Random(int(sha256_hex(f"{seed}:{key}")[:16], 16))
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
    for sentence in itertools.islice(itertools.cycle(pool), 201):  # a stop for absurd ratios
        if added and length >= target:
            break
        added.append(sentence)
        length += len(sentence) + 1
    lines = text.rstrip().split("\n")
    filler = " ".join(added)
    if len(lines) == 1:
        return f"{lead} {text.rstrip()} {filler}"
    body, last = "\n".join(lines[:-1]).rstrip(), lines[-1]
    return f"{lead} {body}\n{filler}\n{last}" if body else f"{lead} {filler}\n{last}"


class VerbosityOptions(PairSourceOptions):
    modes: choices(MODES) = MODES
    pad_ratio_min: float = 1.5
    pad_ratio_max: float = 2.0
    pad_seed: int = 0
    chunk_size: int = Field(32, ge=1)

    @model_validator(mode="after")
    def _check_ratios(self) -> VerbosityOptions:
        pad_response("", "", "", self.pad_ratio_min, self.pad_ratio_max)  # raises on bad bounds
        return self


def worse_index(item: pairs.PairItem) -> int | None:
    return {"A": 1, "B": 0}.get(item.preferred or "")


def self_metrics(judged: Judged, seed: int) -> dict[str, float | None]:
    """Variants ``self{r}_{order}`` judge (original r, padded r): the shares of parsed judgments preferring the
    concise original (``self.concise_preferred_rate``), the padded copy or neither, and
    ``self.mean_score_shift`` = mean score(padded) − score(original) (0 = unbiased)."""
    verdicts, shifts = [], []
    for i in range(len(judged.items)):
        for r in (0, 1):
            for order in pairs.ORDERS:
                scores = judged.scores(i, f"self{r}_{order}", seed)
                if scores is not None:
                    verdicts.append(pairs.response_verdict(scores, order))
                    s = pairs.response_scores(scores, order)
                    shifts.append(s[1] - s[0])  # type: ignore[index]
    n = len(verdicts)
    return {
        "self.concise_preferred_rate": M.rate(verdicts.count("A"), n),
        "self.padded_preferred_rate": M.rate(verdicts.count("B"), n),
        "self.tie_rate": M.rate(verdicts.count("C"), n),
        "self.mean_score_shift": M.mean(shifts),
    }


def flip_metrics(judged: Judged, seed: int) -> dict[str, float | None]:
    """Variants ``flip_base_{order}`` judge (r0, r1), ``flip_pad_{order}`` the same with the worse padded.
    ``flip.flip_rate_to_padded``: among judgments that preferred the better response unpadded, the share that
    prefer the padded worse one (ideal 0); ``flip.acc_unpadded`` / ``flip.acc_worse_padded`` (a tie or failure
    wrong); ``flip.mean_score_shift_worse`` = mean score(padded worse) − score(worse)."""
    base_right = flips = 0
    acc_base: list[float] = []
    acc_pad: list[float] = []
    shifts: list[float] = []
    for i, it in enumerate(judged.items):
        w = worse_index(it)
        if w is None:
            continue
        for order in pairs.ORDERS:
            ob, op = judged.scores(i, f"flip_base_{order}", seed), judged.scores(i, f"flip_pad_{order}", seed)
            vb, vp = pairs.response_verdict(ob, order), pairs.response_verdict(op, order)
            acc_base.append(float(vb == it.preferred))
            acc_pad.append(float(vp == it.preferred))
            if vb == it.preferred and vp is not None:
                base_right += 1
                flips += vp == ("A" if w == 0 else "B")
            sb, sp = pairs.response_scores(ob, order), pairs.response_scores(op, order)
            if sb is not None and sp is not None:
                shifts.append(sp[w] - sb[w])
    return {
        "flip.flip_rate_to_padded": M.rate(flips, base_right),
        "flip.acc_unpadded": M.mean(acc_base),
        "flip.acc_worse_padded": M.mean(acc_pad),
        "flip.mean_score_shift_worse": M.mean(shifts),
    }


def run(backend: base.JudgeBackend, config: base.SuiteConfig) -> base.SuiteResult:
    bench = BenchmarkRun(NAME, backend, config)
    opts = bench.opts
    items, source = load_pair_source(opts, config.limit)
    counts: dict[str, int] = {"pairs": len(items)}
    ratios: list[float] = []

    def pad(item: pairs.PairItem, which: int) -> str:
        bounds = (opts.pad_ratio_min, opts.pad_ratio_max)
        return pad_response(
            item.responses[which], item.question, f"{item.item_id}:{which}", *bounds, opts.pad_seed
        )

    def build(item: pairs.PairItem) -> list[JudgeRequest]:
        images = bench.images(item)
        reqs: list[JudgeRequest] = []
        if "self" in opts.modes:
            for r in (0, 1):
                padded = pad(item, r)
                ratios.append(len(padded) / max(1, len(item.responses[r])))
                reqs += pairs.pair_requests(NAME, item, images, [item.responses[r], padded], tag=f"self{r}_")
        w = worse_index(item)
        if "flip" in opts.modes and w is not None:
            padded_pair = list(item.responses)
            padded_pair[w] = pad(item, w)
            reqs += pairs.pair_requests(NAME, item, images, tag="flip_base_")
            reqs += pairs.pair_requests(NAME, item, images, padded_pair, tag="flip_pad_")
        return reqs

    judged = bench.judge(
        items, build, "verbosity", counts, lambda it: {"item_id": it.item_id, "preferred": it.preferred}
    )
    counts["flip_pairs"] = (
        sum(worse_index(it) is not None for it in judged.items) if "flip" in opts.modes else 0
    )
    probes = [fn for mode, fn in (("self", self_metrics), ("flip", flip_metrics)) if mode in opts.modes]
    metrics = {
        "parse_failure_rate": judged.parse_failure_rate,
        "mean_length_ratio": M.mean(ratios),
        **prefixed("mean", bench.mean(lambda s: {k: v for fn in probes for k, v in fn(judged, s).items()})),
    }
    protocol = {
        "bias": "verbosity (protocol: ours, judge-benchmarks.md §5)",
        **source,
        "modes": opts.modes,
        "padding": {
            **opts.model_dump(include={"pad_ratio_min", "pad_ratio_max", "pad_seed"}),
            "content": "generic filler, a restatement of the question, a repetition of the first sentence; no new "
            "facts; inserted before the last line",
        },
        "prompt": "perception_judge.core.protocol.build_messages('pair'), two 1-10 scores, both orders",
        "ideal": "self: padded_preferred_rate 0 and mean_score_shift 0; flip: flip_rate_to_padded 0",
    }
    return bench.result(metrics, counts, protocol, "n/a (our protocol)")


PRIMARY = (
    "mean.flip.flip_rate_to_padded",
    "mean.self.padded_preferred_rate",
    "mean.self.concise_preferred_rate",
    "mean.*mean_score_shift*",
)
SUITE = base.Suite(NAME, VerbosityOptions, METRICS, PRIMARY, run, from_run="trainset_dir")
