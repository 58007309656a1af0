"""The one schema every stage shares: source items, PPJD records, failures, training rows, judge requests; stages
talk to each other only through these types and the column names below.

Vocabulary: ``r_c``, ``r_rp``, ``r_rp_r`` (``r_rp+r`` in the paper) as docs/ppjd.md defines them, target order r_c >
r_rp > r_rp_r. A *slot* is the position of a response in a judge prompt (``A`` is "Assistant 1", ``B`` "Assistant
2", ...); an *order string* lists slots best to worst (``"BCA"``: slot B best, then C, then A).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from perception_judge.core.options import Options

PROTOCOLS: tuple[str, ...] = ("batch", "pair", "single")

SLOTS = "ABCDEFGHIJ"
"""Slot letters; ``SLOTS[i]`` is "Assistant i+1". At most 10 responses per prompt."""

MIN_SCORE = 1
MAX_SCORE = 10
DEFAULT_TAU = 6.0
"""The pointwise threshold: a 1-10 score >= tau says "correct" (the verdict reward, the single-protocol metrics)."""

RESPONSE_KINDS: tuple[str, ...] = ("r_c", "r_rp", "r_rp_r")
"""PPJD response kinds, best to worst."""

# Ground-truth labels of the single (pointwise) protocol.
VERDICT_CORRECT = "correct"
VERDICT_INCORRECT = "incorrect"
VERDICTS: tuple[str, ...] = (VERDICT_CORRECT, VERDICT_INCORRECT)

# Columns of the exported training / validation set (Hugging Face `datasets` parquet).
COL_PROMPT = "prompt"  # trl conversational messages with {"type": "image"} placeholders
COL_IMAGES = "images"  # list of images (datasets Image feature), in placeholder order
COL_PROTOCOL = "protocol"  # "batch" | "pair" | "single"
COL_GROUND_TRUTH = "ground_truth"  # order string (batch, pair) or verdict (single)
COL_QUESTION = "question"
COL_RESPONSES = "responses"  # response texts in slot order
COL_KINDS = "kinds"  # response kind per slot, e.g. ["r_rp_r", "r_c", "r_rp"]
COL_RECORD_KEY = "record_key"
COL_IMAGE_GROUP = "image_group"  # sha256 of the source image: the train/validation split groups on it
TRAIN_COLUMNS: tuple[str, ...] = (
    COL_PROMPT, COL_IMAGES, COL_PROTOCOL, COL_GROUND_TRUTH, COL_QUESTION, COL_RESPONSES, COL_KINDS,
    COL_RECORD_KEY, COL_IMAGE_GROUP,
)  # fmt: skip


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_key(*parts: Any) -> str:
    """A stable 20-hex-digit key for a tuple of JSON-serialisable parts (field order matters)."""
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return sha256_hex(blob)[:20]


def validate_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    return protocol


def validate_order(order: str, n: int | None = None) -> str:
    """Check an order string: distinct slot letters A.. covering exactly the first ``len(order)`` slots."""
    if not isinstance(order, str) or len(order) < 2:
        raise ValueError(f"order string must name at least two slots, got {order!r}")
    if n is not None and len(order) != n:
        raise ValueError(f"order string {order!r} names {len(order)} slots, expected {n}")
    if sorted(order) != list(SLOTS[: len(order)]):
        raise ValueError(f"order string {order!r} must be a permutation of {SLOTS[: len(order)]!r}")
    return order


def validate_ground_truth(protocol: str, ground_truth: Any) -> str:
    """Check a training row's protocol and ground truth: a verdict (``single``), an order string of two slots
    (``pair``) or of any length (``batch``). Raises ``ValueError`` saying what is wrong."""
    if validate_protocol(protocol) == "single":
        if ground_truth not in VERDICTS:
            raise ValueError(f"single-protocol ground truth must be one of {VERDICTS}, got {ground_truth!r}")
    else:
        try:
            validate_order(ground_truth, 2 if protocol == "pair" else None)
        except ValueError as e:
            raise ValueError(f"bad ground truth for protocol {protocol!r}: {e}") from None
    return ground_truth


def order_from_kinds(kinds: list[str] | tuple[str, ...]) -> str:
    """The order string for responses of the given kinds in slot order, best (r_c) to worst (r_rp_r).

    >>> order_from_kinds(["r_rp_r", "r_c", "r_rp"])
    'BCA'
    """
    rank = {k: i for i, k in enumerate(RESPONSE_KINDS)}
    slots = sorted(range(len(kinds)), key=lambda i: rank[kinds[i]])
    return "".join(SLOTS[i] for i in slots)


def ground_truth_for(protocol: str, kinds: list[str] | tuple[str, ...]) -> str:
    """The ground truth of a training row whose slots hold responses of ``kinds``: the order string for batch
    and pair rows (``["r_rp", "r_c"]`` -> ``"BA"``), the verdict for a single row (r_c is ``correct``)."""
    validate_protocol(protocol)
    if protocol == "single":
        if len(kinds) != 1:
            raise ValueError(f"a single-protocol row holds one response, got kinds {list(kinds)}")
        return VERDICT_CORRECT if kinds[0] == "r_c" else VERDICT_INCORRECT
    return order_from_kinds(kinds)


@dataclass
class SourceItem:
    """One input of the PPJD builder: (image, question, ground-truth answer, correct response r_c). ``image``
    is a path (already resolved under the source's root), raw bytes, a PIL image, or None for text-only items.
    ``spec`` holds the scene spec of synthetic items (every perceptual attribute, known exactly); real sources
    leave it None."""

    item_id: str
    question: str
    answer: str
    response: str
    image: Any = None
    source: str = ""
    spec: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class PPJDRecord:
    """A finished PPJD record: r_c and its two verified counterfactuals. ``image`` is a path relative to the
    PPJD folder (images are stored there by content hash), or None for text-only records."""

    key: str
    item_id: str
    source: str
    question: str
    answer: str
    r_c: str
    r_rp: str
    r_rp_r: str
    answer_rp: str
    answer_rp_r: str
    attributes: list[str]
    image: str | None = None
    image_sha256: str | None = None
    teacher: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def responses(self) -> dict[str, str]:
        return {"r_c": self.r_c, "r_rp": self.r_rp, "r_rp_r": self.r_rp_r}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PPJDRecord:
        fields = dataclasses.fields(cls)
        required = {f.name for f in fields if f.default is f.default_factory is dataclasses.MISSING}
        if missing := required - set(d):
            raise ValueError(f"PPJD record {d.get('key', '?')!r} lacks {sorted(missing)}")
        return cls(**{k: v for k, v in d.items() if k in {f.name for f in fields}})


@dataclass
class Failure:
    """Why a source item did not become a record. Every rejection names a stage and a reason."""

    key: str
    item_id: str
    stage: str
    reason: str
    detail: str = ""
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class StageError(Exception):
    """An item rejected (or not processed) at ``stage`` for ``reason``: its :class:`Failure`. ``fatal`` marks errors
    that will hit every item (bad API key, unknown model): the build stops."""

    def __init__(self, stage: str, reason: str, detail: str = "", attempts: int = 1, fatal: bool = False):
        super().__init__(f"{stage}/{reason}: {detail}" if detail else f"{stage}/{reason}")
        self.stage, self.reason, self.detail = stage, reason, detail
        self.attempts, self.fatal = attempts, fatal


TEACHER_USAGE = ("prompt_tokens", "completion_tokens", "calls")


@dataclass
class Counterfactuals:
    """What a PPJD teacher makes of one item: r_rp, r_rp+r, the facts (``attributes``) they misread, what it did
    (``meta``) and its token counts (``usage``, :data:`TEACHER_USAGE`)."""

    r_rp: str
    r_rp_r: str
    attributes: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TEACHER_USAGE, 0))


class Sampling(Options):
    """The one decoding record: a judge call's (the eval job's ``sampling`` section, every backend), a teacher
    stage's (``ppjd.options.Stages``). ``max_tokens`` is accepted for ``max_new_tokens``; ``seed`` is set per call
    (from an eval job's ``seeds``, a teacher's ``seed``)."""

    model_config = ConfigDict(frozen=True)
    temperature: float = Field(1.0, ge=0)
    """0 = greedy"""
    top_p: float | None = Field(0.95, gt=0, le=1)
    """nucleus sampling"""
    top_k: Annotated[int | None, AfterValidator(lambda k: k or None)] = Field(20, ge=0)
    """0 disables top-k"""
    max_new_tokens: int = Field(4096, ge=1)
    """the token budget (default: the training run's max_completion_length, else 4096)"""
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _max_tokens(cls, data: Any) -> Any:
        """``max_tokens`` (a teacher stage's word) wins over a ``max_new_tokens`` merged in from a default."""
        if isinstance(data, dict) and "max_tokens" in data:
            data = {k: v for k, v in data.items() if k != "max_tokens"} | {
                "max_new_tokens": data["max_tokens"]
            }
        return data


@dataclass
class JudgeRequest:
    """One judge call: conversational messages with ``{"type": "image"}`` placeholders and the images.
    ``n_scores`` is how many scores the parser must find (batch N, pair 2, single 1); ``parser`` names the
    parser: ``"protocol"`` (``<answer>`` tags, perception_judge.core.protocol.parse_scores) or another name
    registered by the evaluation package (e.g. the MM-JudgeBias ``### Score:`` format)."""

    request_id: str
    messages: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)
    n_scores: int = 1
    parser: str = "protocol"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class JudgeResult:
    request_id: str
    text: str
    scores: list[float] | None
    error: str | None = None
    reasoning: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
