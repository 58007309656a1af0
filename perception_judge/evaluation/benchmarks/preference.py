"""Pairwise preference benchmarks in their released layouts (Multimodal RewardBench, MMRB2): a prompt and two
responses of text and image parts, judged in both orders with the project's pair prompt or the benchmark's own (read
from ``prompt_source``); the project's protocol (ties and failures wrong, 95% Wilson intervals) and ``official.*``,
the benchmark's own script."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import JudgeRequest
from perception_judge.evaluation.base import INFO, JudgeBackend, SuiteConfig, SuiteResult
from perception_judge.evaluation.benchmarks import common, pairs
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.published import DESCRIPTIONS
from perception_judge.evaluation.stats import wilson_interval

IMAGE = "\ue000"  # an image's place while the project's prompt is rendered (a private-use character)
SCORES = {"A": [1.0, 0.0], "B": [0.0, 1.0], "C": [0.0, 0.0]}  # a verdict as a parser's scores (C: neither)
CI = {f"{m}_ci95_{end}": INFO for m in ("acc", "acc_both_orders") for end in ("lo", "hi")}
METRICS = {**M.METRICS, **CI}


class PreferenceOptions(common.BenchmarkOptions):
    """``prompt``: the project's pair prompt or the benchmark's, read from ``prompt_source`` (``parser=published``
    needs ``published``)."""

    PROMPT = "published"
    data_dir: common.DataPath
    prompt: Literal["project", "published"] = "project"

    @model_validator(mode="after")
    def _check(self) -> PreferenceOptions:
        if self.parser == "published" and self.prompt != "published":
            raise ValueError(
                "parser=published reads the published prompt's verdict: set prompt=published too"
            )
        if self.prompt == "published" and self.prompt_source is None:
            raise ValueError(
                "prompt=published reads the benchmark's prompt from prompt_source=DIR (its checkout)"
            )
        return self


@dataclass
class ContentPair:
    """``parts``: [prompt, response a, response b], each ``[["text", str] | ["image", ref], ...]``; ``preferred``:
    "A" / "B"; ``group``: the category or task; ``record``: fields its script reads; images in part order."""

    item_id: str
    parts: list[list[list[Any]]]
    preferred: str
    group: str
    record: dict[str, Any]
    load_images: Callable[[], list[Any]]
    check_images: Callable[[], Any]


@dataclass(frozen=True)
class Benchmark:
    """A suite for :func:`run`: ``load(opts, limit)``, ``render(prompts, item, parts)`` (the published request from
    the published prompts), the published prompt's parsers (option -> (name, rule)), ``official(judged, seed,
    out_dir, protocol)`` and its rule."""

    name: str
    load: Callable[..., tuple[list[ContentPair], dict[str, int], Path]]
    render: Callable[..., list[dict[str, Any]]]
    parsers: dict[str, tuple[str, str]]
    official: Callable[..., dict[str, float | None]]
    rule: str


def user_turn(parts: list[list[Any]]) -> list[dict[str, Any]]:
    """One user message of text blocks and image placeholders in part order (no system turn, as published)."""
    blocks = [{"type": "text", "text": v} if k == "text" else {"type": k} for k, v in parts]
    return [{"role": "user", "content": blocks}]


def project_messages(item: ContentPair, parts: list[list[list[Any]]]) -> list[dict[str, Any]]:
    """``build_messages('pair')`` with every image where it stands (those before the question's text first)."""
    lead = next((k for k, p in enumerate(parts[0]) if p[0] != "image"), len(parts[0]))
    texts = ["\n".join(str(v) if k == "text" else IMAGE for k, v in p) for p in (parts[0][lead:], *parts[1:])]
    messages = build_messages("pair", texts[0], texts[1:], n_images=lead)
    head, *rest = messages[1]["content"][-1]["text"].split(IMAGE)
    inline = [["text", head], *(p for piece in rest for p in (["image", None], ["text", piece]))]
    blocks = user_turn([p for p in inline if p[0] == "image" or p[1].strip()])[0]["content"]
    messages[1]["content"][lead:] = blocks
    return messages


def requests(name: str, item: ContentPair, images: list[Any], render: Any, parser: str) -> list[JudgeRequest]:
    """``orig`` (response a shown first) and ``swap`` (response b and its images first)."""
    q, a = (sum(k == "image" for k, _ in p) for p in item.parts[:2])
    swap = [item.parts[0], item.parts[2], item.parts[1]], images[:q] + images[q + a :] + images[q : q + a]
    return [
        JudgeRequest(f"{name}:{item.item_id}:{o}", render(item, p), list(im), 2, parser, {"variant": o})
        for o, (p, im) in zip(pairs.ORDERS, ((item.parts, images), swap))
    ]


def seed_metrics(items: list[ContentPair], verdicts: list[dict[str, str | None]]) -> dict[str, float | None]:
    """:func:`pairs.order_metrics`, ``acc_both_orders`` by group and Wilson intervals."""
    m = pairs.order_metrics(items, verdicts)
    right = [set(v.values()) == {it.preferred} for it, v in zip(items, verdicts)]
    both = pairs.group_accuracy(items, right.__getitem__, list(range(len(items))))
    m |= {k.replace("acc", "acc_both_orders", 1): v for k, v in both.items()}
    for name, n in (("acc", 2 * len(items)), ("acc_both_orders", len(items))):
        ci = wilson_interval(m[name] * n, n) if m[name] is not None else None
        m[f"{name}_ci95_lo"], m[f"{name}_ci95_hi"] = ci or (None, None)
    return m


def run(spec: Benchmark, backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    """Every pair in both orders under every seed, images checked first; the project's protocol per aggregation
    (``mean``: per seed, then the mean; ``vote``: per pair over seeds x orders), then ``official.*`` per seed."""
    bench = common.BenchmarkRun(spec.name, backend, config)
    opts, published = bench.opts, bench.opts.prompt == "published"
    items, counts, path = spec.load(opts, config.limit)
    for item in items:
        item.check_images()
    render, parser = project_messages, "protocol"
    if published:
        render, parser = functools.partial(spec.render, bench.prompts), spec.parsers[opts.parser][0]
    build = lambda it: requests(spec.name, it, bench.images(it), render, parser)  # noqa: E731
    log = lambda it: {"item_id": it.item_id, "group": it.group, "preferred": it.preferred}  # noqa: E731
    judged = bench.judge(items, build, spec.name, counts, log)
    metrics = pairs.aggregated(bench, judged, seed_metrics)[0]
    rule = f"{opts.parser}: {spec.parsers[opts.parser][1]}" if published else DESCRIPTIONS["strict"]
    protocol = {"benchmark": spec.name, "path": str(path), "parser": rule}
    protocol["correct"] = "the human's preferred response, in both orders; a tie or a failure is wrong"
    protocol["official_rule"] = (
        spec.rule if published else "none: the script reads the published prompt's verdict"
    )
    if published:
        official = bench.mean(lambda s: spec.official(judged, s, Path(config.out_dir), protocol), "official.")
        metrics |= common.prefixed("official", official)
        metrics |= dict.fromkeys(protocol.get("undefined_metrics", {}))  # never a number unlike the script's
    return bench.result(metrics, counts, protocol, "not resized", parser=parser)
