"""The pairwise preference benchmarks read in their released layouts (Multimodal RewardBench, MMRB2): a prompt and
two responses, each a list of text and image parts, judged in both orders with the project's pair prompt or the
benchmark's own (``prompt``). :func:`run` scores the project's protocol (a tie or a failure is wrong, 95% Wilson
intervals) and, on the published prompt, ``official.*``: the benchmark's own script on the same completions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import JudgeRequest
from perception_judge.evaluation.base import INFO, JudgeBackend, Metric, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import common, pairs
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.published import DESCRIPTIONS
from perception_judge.evaluation.perception import wilson_interval

Parts = list[list[Any]]
"""``[["text", str] | ["image", reference], ...]`` in the benchmark's order."""
IMAGE = "\ue000"  # an image's place while the project's prompt is rendered (a private-use character)
SCORES = {"A": [1.0, 0.0], "B": [0.0, 1.0], "C": [0.0, 0.0]}
"""A verdict as a request parser's two scores (C: a tie, or an answer naming neither response)."""
METRICS = {
    **M.METRICS,
    "acc": Metric(chance=0.5),
    "acc_both_orders": Metric(chance=0.25),
    **{f"{m}_ci95_{end}": INFO for m in ("acc", "acc_both_orders") for end in ("lo", "hi")},
}


class PreferenceOptions(common.BenchmarkOptions):
    """``prompt``: the project's pair prompt or the benchmark's; ``parser=published`` reads the published
    prompt's verdict as the benchmark's script does, so it needs ``prompt=published``."""

    data_dir: common.DataPath
    prompt: Literal["project", "published"] = "project"

    @model_validator(mode="after")
    def _parser_reads_the_prompt(self) -> PreferenceOptions:
        if self.parser == "published" and self.prompt != "published":
            raise ValueError(
                "parser=published reads the published prompt's verdict: set prompt=published too"
            )
        return self


@dataclass
class ContentPair:
    """``parts``: [prompt, response a, response b]; ``preferred``: the human's "A" / "B"; ``group``: the
    category or task; ``record``: fields the benchmark's script reads; images in part order."""

    item_id: str
    parts: list[Parts]
    preferred: str
    group: str
    record: dict[str, Any]
    load_images: Callable[[], list[Any]]
    check_images: Callable[[], Any]


@dataclass(frozen=True)
class Benchmark:
    """What a suite adds to :func:`run`: its loader, its published request (``render(item, parts)``), its two
    request parsers for the published prompt (``{option value: (registered name, what it reads)}``) and its
    script (``official(judged, seed, out_dir, protocol)`` -> metrics; a number it cannot equal is None, its
    reason in ``protocol["undefined_metrics"]``)."""

    name: str
    title: str
    load: Callable[[Any, int | None], tuple[list[ContentPair], dict[str, int], Path]]
    render: Callable[[ContentPair, Sequence[Parts]], list[dict[str, Any]]]
    parsers: dict[str, tuple[str, str]]
    official: Callable[[common.Judged, int, Path, dict[str, Any]], dict[str, float | None]]
    rule: str


def text_of(parts: Parts) -> str:
    return "\n".join(str(v) for k, v in parts if k == "text")


def user_turn(parts: Parts) -> list[dict[str, Any]]:
    """One user message of text blocks and image placeholders in part order (no system turn, as published)."""
    blocks = [{"type": "text", "text": str(v)} if k == "text" else {"type": "image"} for k, v in parts]
    return [{"role": "user", "content": blocks}]


def project_messages(item: ContentPair, parts: Sequence[Parts]) -> list[dict[str, Any]]:
    """The project's pair prompt (``build_messages('pair')``), every image where it stands: those before the
    question's text first, as in training, the others inside the question or the answer they belong to."""
    lead = next((k for k, p in enumerate(parts[0]) if p[0] != "image"), len(parts[0]))
    texts = ["\n".join(str(v) if k == "text" else IMAGE for k, v in p) for p in (parts[0][lead:], *parts[1:])]
    messages = build_messages("pair", texts[0], texts[1:], n_images=lead)
    head, *rest = messages[1]["content"][-1]["text"].split(IMAGE)
    inline = [["text", head], *(p for piece in rest for p in (["image", None], ["text", piece]))]
    kept = [p for p in inline if p[0] == "image" or p[1].strip()]
    messages[1]["content"][lead:] = user_turn(kept)[0]["content"]
    return messages


def requests(
    suite: str, item: ContentPair, images: list[Any], render: Any, parser: str
) -> list[JudgeRequest]:
    """``orig`` (response a shown first) and ``swap`` (response b and its images first)."""
    q, a = (sum(k == "image" for k, _ in p) for p in item.parts[:2])
    swapped = [item.parts[0], item.parts[2], item.parts[1]], images[:q] + images[q + a :] + images[q : q + a]
    return [
        JudgeRequest(f"{suite}:{item.item_id}:{o}", render(item, p), list(im), 2, parser, {"variant": o})
        for o, (p, im) in zip(pairs.ORDERS, ((item.parts, images), swapped))
    ]


def seed_metrics(
    items: Sequence[ContentPair], verdicts: list[dict[str, str | None]]
) -> dict[str, float | None]:
    """One seed: :func:`pairs.order_metrics` (``acc`` over the judgements of both orders, ``acc_both_orders`` right
    in both, per group and macro), ``acc_both_orders`` per group, order consistency, Wilson intervals."""
    m = pairs.order_metrics(items, verdicts)
    right = lambda i: all(v == items[i].preferred for v in verdicts[i].values())  # noqa: E731
    both = pairs.group_accuracy(items, right, list(range(len(items))))
    m |= {k.replace("acc", "acc_both_orders", 1): v for k, v in both.items()}
    m["order_consistency"] = M.consistency_rate((v[pairs.ORIG], v[pairs.SWAP]) for v in verdicts)
    for name, n in (("acc", 2 * len(items)), ("acc_both_orders", len(items))):
        ci = wilson_interval(m[name] * n, n) if m[name] is not None else None
        m[f"{name}_ci95_lo"], m[f"{name}_ci95_hi"] = ci or (None, None)
    return m


def run(spec: Benchmark, backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    """Judge every pair in both orders under every seed (images checked first); the project's protocol per
    aggregation (``mean``: per seed, then the mean; ``vote``: per pair over seeds x orders), then ``official.*``."""
    bench = common.BenchmarkRun(spec.name, backend, config)
    opts, published, out = bench.opts, bench.opts.prompt == "published", Path(config.out_dir)
    items, counts, path = spec.load(opts, config.limit)
    for item in items:
        item.check_images()
    render, parser = (
        (spec.render, spec.parsers[opts.parser][0]) if published else (project_messages, "protocol")
    )
    log = lambda it: {"item_id": it.item_id, "group": it.group, "preferred": it.preferred}  # noqa: E731
    judged = bench.judge(
        items, lambda it: requests(spec.name, it, bench.images(it), render, parser), spec.name, counts, log
    )
    per_seed = {s: pairs.order_verdicts(judged, s) for s in bench.seeds}
    metrics: dict[str, float | None] = {"parse_failure_rate": judged.parse_failure_rate}
    for agg in opts.aggregation:
        voted = pairs.voted_verdicts(list(per_seed.values()), len(judged.items))
        m = bench.mean(lambda s: seed_metrics(judged.items, per_seed[s])) if agg == "mean" else None
        metrics |= common.prefixed(agg, m or pairs.voted_acc(judged.items, voted))
    protocol = {
        "benchmark": spec.title,
        "path": str(path),
        "prompt": "published: the benchmark's judge prompt (our wording), the item's parts in order, one user turn"
        if published
        else "the project's pair prompt: images before the question's text first, the others where they stand",
        "parser": f"{opts.parser}: {spec.parsers[opts.parser][1]}"
        if published
        else DESCRIPTIONS[opts.parser],
        "orders": "every pair judged with its first response shown first (orig) and second (swap), un-swapped",
        "correct": "the human's preferred response; a tie or a parse failure is wrong; 95% Wilson intervals over "
        "judgements (acc) and pairs (acc_both_orders)",
        "official_rule": spec.rule
        if published
        else "not reported: the benchmark's script reads the published "
        "prompt's verdict (set prompt=published)",
    }
    if published:
        official = bench.mean(lambda s: spec.official(judged, s, out, protocol), "official.")
        metrics |= common.prefixed("official", official)
        metrics |= dict.fromkeys(protocol.get("undefined_metrics", {}))  # never a number unlike the script's
    return bench.result(metrics, counts, protocol, "not resized")
