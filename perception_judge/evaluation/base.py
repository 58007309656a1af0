"""The evaluation contracts and the one judge loop (docs/architecture.md "The judge loop"): backends
(:class:`JudgeBackend`; a failed call gives an :func:`error_result`, never an exception) and their parsers
(:data:`PARSERS`), :func:`judge_items`, a suite's record (:class:`Suite`) and its metric declarations."""

from __future__ import annotations

import abc
import dataclasses
import fnmatch
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator

from perception_judge.core.images import PixelPolicy, load_image
from perception_judge.core.io import atomic_open, progress_bar
from perception_judge.core.options import Options
from perception_judge.core.protocol import count_image_placeholders, parse_scores
from perception_judge.core.redact import redact
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling

ParserFn = Callable[[str, int, "str | None"], "tuple[list[float] | None, str | None]"]


def _protocol_parser(
    text: str, n: int, reasoning: str | None = None
) -> tuple[list[float] | None, str | None]:
    r = parse_scores(text, n, reasoning=reasoning)
    return (list(map(float, r.scores)) if r.scores is not None else None), r.error


PARSERS: dict[str, ParserFn] = {"protocol": _protocol_parser}
"""Score parsers by name: ``f(text, n, reasoning) -> (scores | None, error | None)``; the modules that define the
others register them here (:mod:`.bias.prompts`, :mod:`.benchmarks.published`, the preference benchmarks)."""


def get_parser(name: str) -> ParserFn:
    if name not in PARSERS:
        raise KeyError(f"unknown parser {name!r}; known: {sorted(PARSERS)}")
    return PARSERS[name]


def _names(value: Any) -> Any:
    """Names given one by one, in a list, or comma-separated (``--suites bias,perception``, ``seeds: [0, 1]``)."""
    items = value if isinstance(value, list | tuple) else [value]
    return [n.strip() for v in items for n in str(v).split(",") if n.strip()] if value is not None else None


Names = Annotated[list[str], BeforeValidator(_names)]
Ints = Annotated[list[int], BeforeValidator(_names)]


BACKEND_ERROR_PREFIX = "backend error: "
"""Prefix of ``JudgeResult.error`` when the call itself failed (no completion), as opposed to a parse failure."""


def parse_result(request: JudgeRequest, text: str, reasoning: str | None = None, **usage: int) -> JudgeResult:
    """Build a JudgeResult from raw text with the request's parser (never raises on bad text)."""
    try:
        parser = get_parser(request.parser)
    except KeyError as e:
        raise KeyError(f"request {request.request_id!r}: {e.args[0]}") from None
    scores, error = parser(text, request.n_scores, reasoning)
    return JudgeResult(request.request_id, text, scores, error, reasoning, **usage)


def error_result(request: JudgeRequest, message: str) -> JudgeResult:
    """The result of a request whose call failed (bad image, backend exception, ...): no text, no scores."""
    return JudgeResult(request.request_id, "", None, BACKEND_ERROR_PREFIX + message)


def is_backend_error(result: JudgeResult) -> bool:
    return bool(result.error) and result.error.startswith(BACKEND_ERROR_PREFIX)


def request_seed(seed: int, request_id: str) -> int:
    """A per-request seed derived from the run seed and the request id (stable across processes and batch
    composition); backends that seed each request (vLLM, OpenAI-compatible servers) use it."""
    digest = hashlib.sha256(f"{int(seed)}:{request_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def is_greedy(sampling: Sampling) -> bool:
    """Greedy decoding: a temperature that is unset, 0 or negative."""
    return not sampling.temperature or sampling.temperature <= 0


NEUTRAL_DECODING = dict(min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
"""The decoding fields a judge never uses, at their no-op values, sent explicitly by every backend: unset, they come
from the model folder's ``generation_config.json`` (a Qwen2.5-VL-derived one has ``repetition_penalty`` 1.05)."""


def request_sampling(sampling: Sampling, request_id: str) -> dict[str, Any]:
    """The sampling of one request as every backend sends it, every field explicit: ``temperature`` (0 when
    greedy), ``top_p`` (1 when greedy or unset), ``top_k`` (0: off; always off when greedy), ``max_tokens``, the
    per-request ``seed`` and :data:`NEUTRAL_DECODING`."""
    greedy = is_greedy(sampling)
    return {
        "temperature": 0.0 if greedy else float(sampling.temperature),
        "top_p": 1.0 if greedy or sampling.top_p is None else float(sampling.top_p),
        "top_k": 0 if greedy or not sampling.top_k else int(sampling.top_k),
        "max_tokens": int(sampling.max_new_tokens),
        "seed": request_seed(sampling.seed, request_id),
        **NEUTRAL_DECODING,
    }


def prepare_each(
    requests: Sequence[JudgeRequest], prepare: Callable[[JudgeRequest], Any], logger: Any = None
) -> tuple[dict[int, JudgeResult], list[tuple[int, JudgeRequest, Any]]]:
    """``prepare`` every request (load its images, render its prompt, ...): returns the :func:`error_result`
    of each request it raised on, by index (a bad request fails alone; ``logger`` warns about it), and
    ``(index, request, prepared)`` for the others."""
    failed: dict[int, JudgeResult] = {}
    ready: list[tuple[int, JudgeRequest, Any]] = []
    for i, req in enumerate(requests):
        try:
            ready.append((i, req, prepare(req)))
        except Exception as e:  # a bad request fails alone
            if logger is not None:
                logger.warning("request %s cannot be prepared: %s: %s", req.request_id, type(e).__name__, e)
            failed[i] = error_result(req, f"{type(e).__name__}: {e}")
    return failed, ready


@dataclass(frozen=True)
class Metric:
    """What a reader needs to know of a metric, declared next to it (as lm-evaluation-harness does): its
    direction (``higher_is_better``; None: neither, a number shown for information), the value an unbiased judge
    reaches when that is not an extreme (``ideal``), the value of a judge that guesses (``chance``), whether it is a
    count (shown as an integer), its column header in the report (``label``) and what it measures (``about``, for
    ``eval list``)."""

    higher_is_better: bool | None = True
    ideal: float | None = None
    chance: float | None = None
    count: bool = False
    label: str | None = None
    about: str = ""


LOWER = Metric(higher_is_better=False)
INFO = Metric(higher_is_better=None)
COUNT = Metric(higher_is_better=None, count=True)


class JudgeBackend(abc.ABC):
    """Turns judge requests into results. Subclasses: hf, vllm, openai, scripted (tests)."""

    name: str = "backend"
    target: str = "model"
    """the key of a judge's spec that names it (a scripted judge: ``fn``)"""

    @classmethod
    def judge_keys(cls, spec: Mapping[str, Any], name: str, given: set[str]) -> dict[str, Any]:
        """A plan's judge (entry ``name``, its ``spec``) as this kind's keys: a served name (a LoRA checkpoint by its
        entry name, vllm --lora-modules checkpoint-150=DIR; anything else by its folder, vLLM's default); a key the
        job's backend block sets (``given``) wins."""
        target = name if spec.get("adapter") else spec.get(cls.target)
        return {} if cls.target in given else {cls.target: None if target is None else str(target)}

    @classmethod  # noqa: B027 - optional hook
    def check_judge(cls, spec: Mapping[str, Any], options: Options) -> None:
        """Raise ``OSError`` / ``ValueError`` / ``ImportError`` when the judge ``spec`` names cannot be had; the
        plan's check before any model loads."""

    def __init__(self, pixel_policy: PixelPolicy | dict | None = None) -> None:
        if isinstance(pixel_policy, dict):
            pixel_policy = PixelPolicy(**pixel_policy)
        self.pixel_policy = pixel_policy or PixelPolicy()

    @abc.abstractmethod
    def judge(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeResult]:
        """Results in request order. A failed call gives a result with ``scores=None`` and ``error`` set."""

    def describe(self) -> dict[str, Any]:
        """Provenance recorded with every result (backend, model, pixel policy, ...)."""
        return {"backend": self.name, "pixel_policy": self.pixel_policy.to_dict()}

    def prepare_images(self, request: JudgeRequest) -> list[Any]:
        """The request's images, loaded and put through the pixel policy once they match its placeholders;
        raises ``ValueError`` / :class:`~perception_judge.core.images.ImageError` naming the request."""
        n = count_image_placeholders(request.messages)
        if n != len(request.images):
            raise ValueError(
                f"request {request.request_id!r} has {n} image placeholder(s) but {len(request.images)} image(s)"
            )
        return [self.pixel_policy.apply(load_image(img)) for img in request.images]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (engines, sessions)."""


class SkipItem(Exception):
    """Raised while building an item's requests: leave the item out and count ``skipped_<reason>``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass
class Judgement:
    """One request of one item judged under one seed (``item``: the item's index in the judged sequence)."""

    item: int
    seed: int
    meta: dict[str, Any]
    result: JudgeResult

    @property
    def variant(self) -> str:
        return str(self.meta.get("variant", "main"))


def judge_items(
    backend: JudgeBackend,
    items: Sequence[Any],
    build: Callable[[Any], list[JudgeRequest]],
    *,
    seeds: Sequence[int],
    sampling: Sampling,
    chunk_size: int,
    desc: str,
    counts: dict[str, int] | None = None,
    on_chunk: Callable[[list[Judgement]], None] | None = None,
) -> list[Judgement]:
    """The judge loop of every suite (docs/architecture.md): every item under every seed, ``chunk_size`` items per
    backend call; an item's requests are built once per chunk (``build(item)`` loads its images or raises
    :class:`SkipItem`) and every seed of a chunk is judged before the next is built. Judgements come seed by seed
    within a chunk, item by item within a seed. ``counts`` (updated): ``skipped_<reason>``, ``judgments``,
    ``parse_failures`` (no required scores) and ``backend_errors`` (no completion); ``on_chunk(judgements)`` gets
    each chunk's judgements once all its seeds are done."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    counts = {} if counts is None else counts

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    out: list[Judgement] = []
    bar = progress_bar(len(items), desc, "item", leave=False)
    for start in range(0, len(items), chunk_size):
        requests: list[JudgeRequest] = []
        owners: list[int] = []
        for i in range(start, min(start + chunk_size, len(items))):
            try:
                reqs = build(items[i])
            except SkipItem as skip:
                count(f"skipped_{skip.reason}")
                continue
            requests += reqs
            owners += [i] * len(reqs)
        done = len(out)
        for seed in seeds if requests else ():
            results = backend.judge(requests, sampling.model_copy(update={"seed": int(seed)}))
            got, wanted = [r.request_id for r in results], [r.request_id for r in requests]
            if got != wanted:  # one result per request, in request order
                raise RuntimeError(
                    f"backend {backend.name!r} returned results {got[:5]}... for requests {wanted[:5]}..."
                )
            for i, req, res in zip(owners, requests, results):
                out.append(Judgement(i, int(seed), req.meta, res))
                count("judgments")
                if res.scores is None:
                    count("backend_errors" if is_backend_error(res) else "parse_failures")
        if on_chunk is not None and len(out) > done:
            on_chunk(out[done:])
        bar.update(min(chunk_size, len(items) - start))
    bar.close()
    return out


@dataclass
class SuiteConfig:
    """What every suite gets; ``options``: its typed options (a mapping is typed when called through its record)."""

    out_dir: Path
    seeds: list[int] = field(default_factory=lambda: [0])
    sampling: Sampling = field(default_factory=Sampling)
    limit: int | None = None
    options: Any = field(default_factory=dict)


@dataclass
class SuiteResult:
    """``protocol``: how the numbers were produced (prompt, aggregation, seeds); ``counts``: n items, n parse
    failures, ...; ``samples_path``: the per-sample outputs the suite wrote."""

    suite: str
    metrics: dict[str, float | None]
    protocol: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    samples_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def write_samples(path: Path, lines: Iterable[dict[str, Any]]) -> None:
    """A suite's per-sample file, written atomically: a JSON object a line (non-ASCII kept, others as str; secrets
    and URL credentials redacted, as in every file the evaluation writes)."""
    with atomic_open(path, "w", fsync=False) as f:
        for line in lines:
            f.write(json.dumps(redact(line), ensure_ascii=False, default=str) + "\n")


@dataclass(frozen=True)
class Bars:
    """A grouped-bar plot the report draws of some of a suite's metrics, one bar per model: ``metrics`` maps each to
    its tick label, ``groups`` to a heading over its run of bars, ``legend`` names the metric quoted per model,
    ``control`` the suite whose bars stand hatched beside each model's (the mismatched-image control)."""

    file: str
    title: str
    metrics: Mapping[str, str]
    groups: Mapping[str, str] = field(default_factory=dict)
    legend: str | None = None
    ylabel: str = ""
    control: str | None = None


class _Watched:
    """The backend a suite judges with, counting each parsed judgement's verdict by its number of scores: the score
    of a pointwise one, else the slot holding the top score (or a tie)."""

    MIN = 10  # parsed judgements before a judge whose verdicts never vary is flagged degenerate

    def __init__(self, backend: JudgeBackend) -> None:
        self.backend, self.verdicts = backend, Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def judge(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeResult]:
        results = self.backend.judge(requests, sampling)
        for s in (r.scores for r in results if r.scores):
            tops = [f"slot {i + 1} of {len(s)} on top" for i, v in enumerate(s) if v == max(s)]
            said = f"score {s[0]:g}" if len(s) == 1 else tops[0] if len(tops) == 1 else "a tie"
            self.verdicts[len(s), said] += 1
        return results

    def degenerate(self) -> str | None:
        """Why the judge is degenerate: one verdict per number of scores over at least ``MIN`` judgements."""
        n, said = sum(self.verdicts.values()), [v for _, v in self.verdicts]
        if n >= self.MIN and len(said) == len({k for k, _ in self.verdicts}):
            return f"the same verdict in all {n} parsed judgements ({', '.join(said)})"


@dataclass(frozen=True)
class Suite:
    """A suite's record, what the plan, the sweep, ``eval list`` and the report read of it (the contract:
    docs/evaluation.md §6): its options model, every metric it reports declared (by full name or a dot-separated
    part), its headline metrics as shell patterns in order (the first reported one ranks models),
    ``run(backend, config)``, the report's note below its tables and its bar plot, and ``from_run``: the option a
    sweep fills with the run's training set unless the job names a source or data of its own."""

    name: str
    options: type[Options]
    metrics: Mapping[str, Metric]
    primary: tuple[str, ...]
    run: Callable[[JudgeBackend, SuiteConfig], SuiteResult]
    note: str = ""
    bars: Bars | None = None
    from_run: str | None = None

    def parse(self, values: Options | Mapping[str, Any] | None) -> Options:
        """The typed, defaults-filled options; a bad key or value raises ``OptionError`` naming ``SUITE.KEY``."""
        if isinstance(values, self.options):
            return values
        return self.options.parse(values, self.name, f"option of the {self.name} suite")

    def metric(self, name: str) -> Metric | None:
        """The declaration of a reported metric (the spread ``<name>_std`` is declared by ``<name>``)."""
        base = name.removesuffix("_std")
        return next((self.metrics[k] for k in (name, base, *base.split(".")) if k in self.metrics), None)

    def primary_metrics(self, reported: Iterable[str]) -> list[str]:
        """The reported metrics its ``primary`` patterns match, pattern by pattern in reported order."""
        reported = list(reported)
        return list(dict.fromkeys(m for p in self.primary for m in reported if fnmatch.fnmatchcase(m, p)))

    def __call__(self, backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
        """Run the suite (options typed first); the result names the suite, its ranking metric, and (unless the
        suite says otherwise) the seeds, the sampling, the backend and why the judge is degenerate (``_Watched``)."""
        watched = _Watched(backend)
        result = self.run(watched, dataclasses.replace(config, options=self.parse(config.options)))  # type: ignore[arg-type]
        result.protocol |= {"degenerate": why} if (why := watched.degenerate()) else {}
        result.suite = self.name
        if primary := self.primary_metrics(result.metrics):
            result.protocol["primary_metric"] = primary[0]
        given = {"seeds": list(config.seeds), "sampling": config.sampling.model_dump()}
        result.protocol |= {**given, "backend": backend.describe()} | result.protocol
        return result
