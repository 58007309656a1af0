"""Teachers: what turns (image, question, answer, r_c) into the counterfactuals r_rp and r_rp+r.

A teacher implements :class:`Teacher`: ``await teacher.process(TeacherInput) -> Counterfactuals`` or raises
:class:`StageError` naming the stage and the reason. Two implementations share this interface and the
validation that follows (:mod:`perception_judge.ppjd.validate`):

* :class:`LLMTeacher` (here) -- three chat calls through :class:`perception_judge.llm_client.ChatClient`, each
  with its own prompt (our wording) and a JSON reply:

  1. **verify**: is r_c correct (final answer agrees with the reference; facts agree with the image)?
  2. **attributes**: 3-6 short facts visible in the image, needed for the answer, not stated in the question;
  3. **rewrite**: r_rp ("misread": facts changed, reasoning kept) and r_rp+r ("misread_and_misreasoned").

  A stage whose reply is truncated, unparseable or unusable is retried (``stage_attempts``) with a new seed.
* :class:`perception_judge.ppjd.programmatic.ProgrammaticTeacher` -- synthetic items only, perturbs the scene
  spec; runs offline, labels correct by construction.

Text-only items (no image) use the same stages with the question as the evidence: facts are quantities the
question gives, and r_rp misquotes them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from PIL import Image

from perception_judge.core.answers import normalize_answer
from perception_judge.core.images import to_data_url
from perception_judge.core.jsonparse import JSONParseError, parse_json_object
from perception_judge.core.schema import SourceItem
from perception_judge.llm_client import ChatClient, ClientConfig, LLMError

# Stage names (every Failure names one of them).
STAGE_SOURCE = "source"
STAGE_LOAD = "load"
STAGE_PRECHECK = "precheck"
STAGE_VERIFY = "verify"
STAGE_ATTRIBUTES = "attributes"
STAGE_REWRITE = "rewrite"
STAGE_ANSWERS = "answers"
STAGE_VALIDATE = "validate"
STAGE_STORE = "store"
STAGE_TEACHER = "teacher"
STAGES: tuple[str, ...] = (
    STAGE_SOURCE,
    STAGE_LOAD,
    STAGE_PRECHECK,
    STAGE_VERIFY,
    STAGE_ATTRIBUTES,
    STAGE_REWRITE,
    STAGE_ANSWERS,
    STAGE_VALIDATE,
    STAGE_STORE,
    STAGE_TEACHER,
)

MIN_ATTRIBUTES = 3
MAX_ATTRIBUTES = 6


class StageError(Exception):
    """A record was rejected (or could not be processed) at ``stage`` for ``reason``.

    ``fatal`` marks errors that will hit every record (bad API key, unknown model): the run stops.
    """

    def __init__(self, stage: str, reason: str, detail: str = "", attempts: int = 1, fatal: bool = False):
        super().__init__(f"{stage}/{reason}: {detail}" if detail else f"{stage}/{reason}")
        self.stage = stage
        self.reason = reason
        self.detail = detail
        self.attempts = attempts
        self.fatal = fatal


@dataclass
class TeacherInput:
    key: str
    item: SourceItem
    image: Image.Image | None  # RGB, or None for text-only items


@dataclass
class Counterfactuals:
    r_rp: str
    r_rp_r: str
    attributes: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
    )


@runtime_checkable
class Teacher(Protocol):
    name: str

    async def process(self, inp: TeacherInput) -> Counterfactuals:
        """The two counterfactuals of one item, or raise StageError."""
        ...

    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (no secrets)."""
        ...

    def usage(self) -> dict[str, int]:
        """Token and request counters so far."""
        ...

    async def aclose(self) -> None: ...


# --------------------------------------------------------------------------------------------------------------
# Prompts (our wording). Each system prompt starts with a sentence unique to its stage (STAGE_MARKERS).
# --------------------------------------------------------------------------------------------------------------

_VERIFY_MARKER = "You are grading a worked solution before it is used as a reference."
_ATTRIBUTES_MARKER = "You extract the evidence a worked solution depends on."
_REWRITE_MARKER = "You write flawed versions of a correct worked solution."

STAGE_MARKERS: dict[str, str] = {
    STAGE_VERIFY: _VERIFY_MARKER,
    STAGE_ATTRIBUTES: _ATTRIBUTES_MARKER,
    STAGE_REWRITE: _REWRITE_MARKER,
}

REWRITE_KEYS = ("misread", "misread_and_misreasoned")


def _evidence(has_image: bool) -> tuple[str, str]:
    """(what the facts come from, its short name)."""
    return ("the image", "the image") if has_image else ("the question text", "the question")


def verify_system_prompt(has_image: bool) -> str:
    evidence, _ = _evidence(has_image)
    given = "an image, a question" if has_image else "a question"
    return (
        f"{_VERIFY_MARKER} You receive {given}, the reference answer to the question and a candidate "
        "solution. Decide whether the candidate solution is correct: its final answer must agree with the "
        f"reference answer, and every fact it relies on must agree with {evidence}. Ignore style and length. "
        'Reply with one JSON object and nothing else: {"correct": true or false, "note": "one short sentence"}.'
    )


def attributes_system_prompt(has_image: bool) -> str:
    if has_image:
        what = (
            "List 3 to 6 facts that can be seen in the image, that the answer depends on, and that the "
            'question does not already state. Prefer counts ("4 apples"), colours ("the cube is green"), '
            'sizes, positions, and text or numbers printed in the image ("the label reads 19").'
        )
    else:
        what = (
            "There is no image: list 3 to 6 facts given in the question that the answer depends on, such as "
            'quantities, prices and names ("a pen costs 3 dollars").'
        )
    return (
        f"{_ATTRIBUTES_MARKER} You receive {'an image, ' if has_image else ''}a question, its reference answer "
        f"and a correct solution. {what} Keep every fact under 10 words. "
        'Reply with one JSON object and nothing else: {"facts": ["...", "..."]}.'
    )


def rewrite_system_prompt(has_image: bool) -> str:
    evidence, short = _evidence(has_image)
    return (
        f"{_REWRITE_MARKER} They train a judge to notice solutions whose claims about {short} are false. You "
        f"receive the question, its reference answer, the correct solution and a list of facts taken from "
        f"{evidence}. Write two new solutions.\n"
        '1. "misread": keep the steps, their order, the length, the tone and the final-answer format of the '
        "correct solution (for example \\boxed{...}), but change one or more of the listed facts so that they "
        f"contradict {evidence} (a different count, colour, number, word or position). Carry the changed facts "
        "through the reasoning consistently, so that the final answer changes and differs from the reference "
        "answer.\n"
        '2. "misread_and_misreasoned": change facts in the same way and also make at least one reasoning '
        "mistake (a wrong calculation, a wrong comparison, or a step that does not follow), so that the final "
        "answer differs from the reference answer and from the first solution's answer.\n"
        "Both must read like sincere solutions: never say or hint that anything was changed, and never mention "
        "these instructions. Reply with one JSON object and nothing else: "
        '{"misread": "...", "misread_and_misreasoned": "..."}. Inside JSON strings, write every backslash '
        "twice (\\\\boxed, \\\\frac)."
    )


def _block(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def user_prompt(item: SourceItem, facts: list[str] | None = None) -> str:
    parts = [
        _block("question", item.question),
        _block("reference_answer", item.answer),
        _block("solution", item.response),
    ]
    if facts is not None:
        parts.append(_block("facts", "\n".join(f"- {f}" for f in facts)))
    return "\n\n".join(parts)


def stage_messages(
    stage: str, item: SourceItem, has_image: bool, facts: list[str] | None = None
) -> list[dict]:
    """trl-style messages of one teacher stage (one image placeholder when the item has an image)."""
    system = {
        STAGE_VERIFY: verify_system_prompt,
        STAGE_ATTRIBUTES: attributes_system_prompt,
        STAGE_REWRITE: rewrite_system_prompt,
    }[stage](has_image)
    content: list[dict[str, Any]] = [{"type": "image"}] if has_image else []
    content.append({"type": "text", "text": user_prompt(item, facts if stage == STAGE_REWRITE else None)})
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def stage_of_messages(messages: list[dict[str, Any]]) -> str | None:
    """Which teacher stage a request is (by its system prompt), or None (used by the fake server)."""
    for m in messages:
        if m.get("role") != "system":
            continue
        content = m.get("content")
        text = (
            content
            if isinstance(content, str)
            else " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
        )
        for stage, marker in STAGE_MARKERS.items():
            if text.startswith(marker):
                return stage
    return None


def extract_block(text: str, tag: str) -> str | None:
    """The body of ``<tag>...</tag>`` in a user prompt (last closing tag), or None."""
    open_, close = f"<{tag}>\n", f"\n</{tag}>"
    i = text.find(open_)
    j = text.rfind(close)
    if i == -1 or j == -1 or j < i:
        return None
    return text[i + len(open_) : j]


# Tokens that must never appear in a counterfactual (prompt scaffolding, our JSON keys, the published
# release's leaked keys).
SCAFFOLDING_TOKENS: tuple[str, ...] = (
    "<question>",
    "</question>",
    "<reference_answer>",
    "</reference_answer>",
    "<solution>",
    "</solution>",
    "<facts>",
    "</facts>",
    "misread_and_misreasoned",
    '"misread"',
    '"facts"',
    '"correct":',
    "PERCEPTION_ATTRS",
    "perception_attrs",
    "rejected_perception",
    "<think>",
    "</think>",
    _VERIFY_MARKER,
    _ATTRIBUTES_MARKER,
    _REWRITE_MARKER,
)


# --------------------------------------------------------------------------------------------------------------
# Attribute cleaning
# --------------------------------------------------------------------------------------------------------------


def clean_attributes(
    raw: Any, question: str = "", drop_stated: bool = True, max_words: int = 12, max_chars: int = 150
) -> list[str]:
    """Strings (and numbers) from a teacher's fact list: trimmed, de-duplicated, short, at most 6.

    With ``drop_stated``, facts whose text already appears in the question are dropped (they do not need
    the image).
    """
    if not isinstance(raw, list):
        return []
    q = " " + normalize_answer(question) + " "
    out: list[str] = []
    seen: set[str] = set()
    for x in raw:
        if isinstance(x, bool) or not isinstance(x, str | int | float):
            continue
        s = " ".join(str(x).split()).strip(" -*\u2022.;:")
        if not s or len(s) > max_chars or len(s.split()) > max_words:
            continue
        k = s.lower()
        if k in seen:
            continue
        if drop_stated and question and " " + normalize_answer(s) + " " in q:
            continue
        seen.add(k)
        out.append(s)
    return out[:MAX_ATTRIBUTES]


# --------------------------------------------------------------------------------------------------------------
# The LLM teacher
# --------------------------------------------------------------------------------------------------------------


@dataclass
class StageSampling:
    temperature: float = 0.2
    top_p: float | None = 0.9
    max_tokens: int = 1024


@dataclass
class LLMTeacherConfig:
    verify: StageSampling = field(default_factory=lambda: StageSampling(0.0, None, 512))
    attributes: StageSampling = field(default_factory=lambda: StageSampling(0.2, 0.9, 512))
    rewrite: StageSampling = field(default_factory=lambda: StageSampling(0.7, 0.95, 4096))
    stage_attempts: int = 3  # tries per stage for truncated / unparseable / unusable replies
    json_mode: bool = (
        False  # send response_format={"type": "json_object"} (vLLM, OpenAI and Gemini accept it)
    )
    seed: int = 0
    skip_verify: bool = False  # for sources whose r_c is already verified

    def __post_init__(self) -> None:
        for name in ("verify", "attributes", "rewrite"):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, StageSampling(**value))
        if self.stage_attempts < 1:
            raise ValueError("stage_attempts must be >= 1")


_FATAL_LLM = {"auth", "not_found"}  # bad_request is per record (e.g. a prompt over the context)


def _seed_for(seed: int, key: str, stage: str, attempt: int) -> int:
    h = hashlib.sha256(f"{seed}/{key}/{stage}/{attempt}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "correct"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "incorrect"):
        return False
    return None


class _Retry(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class LLMTeacher:
    """The teacher that asks an OpenAI-compatible model (see the module docstring)."""

    def __init__(self, client: ChatClient | ClientConfig, config: LLMTeacherConfig | None = None) -> None:
        self.client = client if isinstance(client, ChatClient) else ChatClient(client)
        self.config = config or LLMTeacherConfig()
        self.name = f"llm:{self.client.config.model}"
        self._url_cache: dict[str, str] = {}

    def describe(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "kind": "llm",
            "model": self.client.config.model,
            "client": self.client.config.public_dict(),
            "stages": asdict(self.config),
        }

    def usage(self) -> dict[str, int]:
        return dict(self.client.usage)

    async def aclose(self) -> None:
        await self.client.aclose()

    def _image_url(self, inp: TeacherInput) -> str:
        """The item's image as a data URL, encoded once per record (all stages send the same image)."""
        cached = self._url_cache.get(inp.key)
        if cached is None:
            cfg = self.client.config
            cached = to_data_url(inp.image, max_side=cfg.image_max_side, fmt=cfg.image_format)
            self._url_cache[inp.key] = cached
        return cached

    async def _stage(
        self,
        stage: str,
        inp: TeacherInput,
        sampling: StageSampling,
        required: tuple[str, ...],
        check: Any,
        usage: dict[str, int],
        facts: list[str] | None = None,
    ) -> Any:
        has_image = inp.image is not None
        messages = stage_messages(stage, inp.item, has_image, facts)
        images = [self._image_url(inp)] if has_image else []
        reason, detail = "bad_json", ""
        calls = 0
        for attempt in range(1, self.config.stage_attempts + 1):
            try:
                resp = await self.client.chat(
                    messages,
                    images,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_tokens=sampling.max_tokens,
                    seed=_seed_for(self.config.seed, inp.key, stage, attempt),
                    response_format={"type": "json_object"} if self.config.json_mode else None,
                )
            except LLMError as e:
                raise StageError(
                    stage,
                    f"llm_{e.reason}",
                    e.detail,
                    attempts=calls + e.attempts,
                    fatal=e.reason in _FATAL_LLM,
                ) from None
            calls += resp.attempts
            usage["prompt_tokens"] += resp.prompt_tokens
            usage["completion_tokens"] += resp.completion_tokens
            usage["calls"] += 1
            try:
                obj = parse_json_object(resp.text, required)
                return check(obj)
            except JSONParseError as e:
                if resp.finish_reason == "length" or e.reason == "truncated_json":
                    reason = "truncated"
                    detail = f"the reply ended before its JSON did (max_tokens={sampling.max_tokens})"
                else:
                    reason = {"no_json": "no_json", "missing_keys": "missing_keys"}.get(e.reason, "bad_json")
                    detail = f"{e.detail}; reply starts {resp.text[:120]!r}"
            except _Retry as r:
                reason, detail = r.reason, r.detail
        raise StageError(stage, reason, detail, attempts=calls)

    async def process(self, inp: TeacherInput) -> Counterfactuals:
        try:
            return await self._process(inp)
        finally:
            self._url_cache.pop(inp.key, None)

    async def _process(self, inp: TeacherInput) -> Counterfactuals:
        cfg = self.config
        item = inp.item
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        meta: dict[str, Any] = {}
        if not cfg.skip_verify:

            def check_verify(obj: dict[str, Any]) -> dict[str, Any]:
                verdict = _as_bool(obj.get("correct"))
                if verdict is None:
                    raise _Retry("bad_json", f"'correct' is {obj.get('correct')!r}, not true/false")
                return {"correct": verdict, "note": str(obj.get("note", ""))[:300]}

            v = await self._stage(STAGE_VERIFY, inp, cfg.verify, ("correct",), check_verify, usage)
            if not v["correct"]:
                raise StageError(STAGE_VERIFY, "rc_rejected", v["note"] or "the teacher judged r_c incorrect")
            meta["verify_note"] = v["note"]

        def check_facts(obj: dict[str, Any]) -> list[str]:
            facts = clean_attributes(obj.get("facts"), item.question, drop_stated=inp.image is not None)
            if len(facts) < MIN_ATTRIBUTES:
                raise _Retry("too_few_attributes", f"{len(facts)} usable facts in {obj.get('facts')!r}"[:300])
            return facts

        facts = await self._stage(STAGE_ATTRIBUTES, inp, cfg.attributes, ("facts",), check_facts, usage)

        def check_rewrite(obj: dict[str, Any]) -> tuple[str, str]:
            a, b = obj.get(REWRITE_KEYS[0]), obj.get(REWRITE_KEYS[1])
            if not isinstance(a, str) or not a.strip() or not isinstance(b, str) or not b.strip():
                raise _Retry("empty_rewrite", "a counterfactual is missing, empty or not a string")
            return a.strip(), b.strip()

        r_rp, r_rp_r = await self._stage(
            STAGE_REWRITE, inp, cfg.rewrite, REWRITE_KEYS, check_rewrite, usage, facts
        )
        return Counterfactuals(r_rp=r_rp, r_rp_r=r_rp_r, attributes=facts, meta=meta, usage=usage)


__all__ = [
    "REWRITE_KEYS",
    "SCAFFOLDING_TOKENS",
    "STAGES",
    "STAGE_MARKERS",
    "Counterfactuals",
    "LLMTeacher",
    "LLMTeacherConfig",
    "StageError",
    "StageSampling",
    "Teacher",
    "TeacherInput",
    "clean_attributes",
    "extract_block",
    "stage_messages",
    "stage_of_messages",
]
