"""Teachers turn (image, question, answer, r_c) into the counterfactuals r_rp and r_rp+r (docs/ppjd.md §3).
:class:`LLMTeacher` makes three chat calls with our prompts and JSON replies, verify, attributes and rewrite; a
truncated or unusable reply is retried with a new seed. Text-only items use the question as the evidence.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from PIL import Image

from perception_judge.core.answers import normalize_answer
from perception_judge.core.images import to_data_url
from perception_judge.core.jsonparse import JSONParseError, parse_json_object
from perception_judge.core.schema import TEACHER_USAGE, Counterfactuals, SourceItem, StageError
from perception_judge.llm_client import ChatClient, LLMError
from perception_judge.ppjd.options import TeacherOptions

# The stage names every Failure names one of ("teacher": an unexpected exception inside a teacher).
STAGES: tuple[str, ...] = (
    *("source", "load", "precheck"),  # before the teacher
    *("verify", "attributes", "rewrite"),  # the teacher's stages
    *("answers", "validate", "store", "teacher"),
)

MIN_ATTRIBUTES = 3
MAX_ATTRIBUTES = 6


@dataclass
class TeacherInput:
    key: str
    item: SourceItem
    image: Image.Image | None  # RGB, or None for text-only items


@runtime_checkable
class Teacher(Protocol):
    name: str
    concurrency: int  # items in flight the teacher wants

    async def process(self, inp: TeacherInput) -> Counterfactuals:
        """The two counterfactuals of one item, or raise StageError."""

    def check(self, source: Any) -> list[str]:
        """Before any work: the warnings to print, or a ValueError saying why it cannot build ``source``."""

    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (no secrets)."""

    def usage(self) -> dict[str, int]:
        """Token and request counters so far."""

    async def aclose(self) -> None: ...


# Each system prompt opens with a sentence of its stage alone (the tests' fake server tells stages by it).
STAGE_MARKERS: dict[str, str] = {
    "verify": "You are grading a worked solution before it is used as a reference.",
    "attributes": "You extract the evidence a worked solution depends on.",
    "rewrite": "You write flawed versions of a correct worked solution.",
}

REWRITE_KEYS = ("misread", "misread_and_misreasoned")


def _verify_system(has_image: bool) -> str:
    evidence = "the image" if has_image else "the question text"
    given = "an image, a question" if has_image else "a question"
    return (
        f"{STAGE_MARKERS['verify']} You receive {given}, the reference answer to the question and a candidate "
        "solution. Decide whether the candidate solution is correct: its final answer must agree with the "
        f"reference answer, and every fact it relies on must agree with {evidence}. Ignore style and length. "
        'Reply with one JSON object and nothing else: {"correct": true or false, "note": "one short sentence"}.'
    )


def _attributes_system(has_image: bool) -> str:
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
        f"{STAGE_MARKERS['attributes']} You receive {'an image, ' if has_image else ''}a question, its reference "
        f"answer and a correct solution. {what} Keep every fact under 10 words. "
        'Reply with one JSON object and nothing else: {"facts": ["...", "..."]}.'
    )


def _rewrite_system(has_image: bool) -> str:
    evidence, short = ("the image", "the image") if has_image else ("the question text", "the question")
    return (
        f"{STAGE_MARKERS['rewrite']} They train a judge to notice solutions whose claims about {short} are false. "
        f"You receive the question, its reference answer, the correct solution and a list of facts taken from "
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


_SYSTEM_PROMPTS = {"verify": _verify_system, "attributes": _attributes_system, "rewrite": _rewrite_system}


def stage_messages(
    stage: str, item: SourceItem, has_image: bool, facts: list[str] | None = None
) -> list[dict]:
    """trl-style messages of one teacher stage: our system prompt, then the image placeholder (when the item has an
    image) and the ``<question>``, ``<reference_answer>``, ``<solution>`` (and for rewrite ``<facts>``) blocks."""
    blocks = {"question": item.question, "reference_answer": item.answer, "solution": item.response}
    if stage == "rewrite" and facts is not None:
        blocks["facts"] = "\n".join(f"- {f}" for f in facts)
    text = "\n\n".join(f"<{tag}>\n{body}\n</{tag}>" for tag, body in blocks.items())
    images: list[dict[str, Any]] = [{"type": "image"}] if has_image else []
    return [
        {"role": "system", "content": _SYSTEM_PROMPTS[stage](has_image)},
        {"role": "user", "content": [*images, {"type": "text", "text": text}]},
    ]


# Never in a counterfactual: our prompt tags and JSON keys, the published release's leaked keys, think tags and
# the stage markers.
SCAFFOLDING_TOKENS: tuple[str, ...] = (
    *(f"<{end}{tag}>" for tag in ("question", "reference_answer", "solution", "facts") for end in ("", "/")),
    *("misread_and_misreasoned", '"misread"', '"facts"', '"correct":'),
    *("PERCEPTION_ATTRS", "perception_attrs", "rejected_perception", "<think>", "</think>"),
    *STAGE_MARKERS.values(),
)


def clean_attributes(raw: Any, question: str = "", drop_stated: bool = True) -> list[str]:
    """A teacher's fact list as strings (numbers too): trimmed, de-duplicated, at most 12 words and 150 characters
    each, at most 6; with ``drop_stated``, facts already in the question's text are dropped (they need no image)."""
    if not isinstance(raw, list):
        return []
    q = f" {normalize_answer(question)} "
    out: list[str] = []
    for x in raw:
        if isinstance(x, bool) or not isinstance(x, str | int | float):
            continue
        s = " ".join(str(x).split()).strip(" -*\u2022.;:")
        if not s or len(s) > 150 or len(s.split()) > 12 or s.lower() in map(str.lower, out):
            continue
        if not (drop_stated and question and f" {normalize_answer(s)} " in q):
            out.append(s)
    return out[:MAX_ATTRIBUTES]


_FATAL_LLM = {"auth", "not_found"}  # bad_request is per record (e.g. a prompt over the context)


def _seed_for(seed: int, key: str, stage: str, attempt: int) -> int:
    h = hashlib.sha256(f"{seed}/{key}/{stage}/{attempt}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


_VERDICTS = {"true": True, "yes": True, "correct": True, "false": False, "no": False, "incorrect": False}


class _Retry(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class LLMTeacher:
    """The teacher that asks an OpenAI-compatible model (see the module docstring)."""

    def __init__(self, options: TeacherOptions, client: ChatClient | None = None) -> None:
        self.options = options
        self.client = client or ChatClient(options)
        self.name = f"llm:{options.model}"
        self.concurrency = options.concurrency

    def describe(self) -> dict[str, Any]:
        o = self.options
        stages = o.stages.model_dump() | o.model_dump(
            include={"stage_attempts", "json_mode", "seed", "skip_verify"}
        )
        return {"kind": "llm", "model": o.model, "client": o.public_dict(), "stages": stages}

    def usage(self) -> dict[str, int]:
        return dict(self.client.usage)

    async def aclose(self) -> None:
        await self.client.aclose()

    def check(self, source: Any) -> list[str]:
        return asyncio.run(self.client.check()) if self.options.check_server else []

    async def _stage(
        self,
        stage: str,
        inp: TeacherInput,
        required: tuple[str, ...],
        check: Callable[[dict[str, Any]], Any],
        usage: dict[str, int],
        images: list[str],
        facts: list[str] | None = None,
    ) -> Any:
        sampling = getattr(self.options.stages, stage)
        messages = stage_messages(stage, inp.item, bool(images), facts)
        reason, detail, calls = "bad_json", "", 0
        for attempt in range(1, self.options.stage_attempts + 1):
            try:
                resp = await self.client.chat(
                    messages,
                    images,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                    max_tokens=sampling.max_new_tokens,
                    seed=_seed_for(self.options.seed, inp.key, stage, attempt),
                    response_format={"type": "json_object"} if self.options.json_mode else None,
                )
            except LLMError as e:  # a reply over max_reply_bytes is the reply's fault, not the transport's
                why = e.reason if e.reason == "reply_too_large" else f"llm_{e.reason}"
                raise StageError(stage, why, e.detail, calls + e.attempts, e.reason in _FATAL_LLM) from None
            calls += resp.attempts
            usage["prompt_tokens"] += resp.prompt_tokens
            usage["completion_tokens"] += resp.completion_tokens
            usage["calls"] += 1
            try:
                return check(parse_json_object(resp.text, required))
            except JSONParseError as e:
                if resp.finish_reason == "length" or e.reason == "truncated_json":
                    reason = "truncated"
                    detail = f"the reply ended before its JSON did (max_tokens={sampling.max_new_tokens})"
                else:
                    reason = e.reason if e.reason in ("no_json", "missing_keys") else "bad_json"
                    detail = f"{e.detail}; reply starts {resp.text[:120]!r}"
            except _Retry as r:
                reason, detail = r.reason, r.detail
        raise StageError(stage, reason, detail, attempts=calls)

    async def process(self, inp: TeacherInput) -> Counterfactuals:
        item, cfg = inp.item, self.options
        usage = dict.fromkeys(TEACHER_USAGE, 0)
        meta: dict[str, Any] = {}
        # the image is encoded once per record: every stage sends the same one
        images = []
        if inp.image is not None:
            images = [to_data_url(inp.image, max_side=cfg.image_max_side, fmt=cfg.image_format)]
        if not cfg.skip_verify:

            def check_verify(obj: dict[str, Any]) -> dict[str, Any]:
                verdict = _VERDICTS.get(str(obj.get("correct")).strip().lower())  # JSON true/false, or words
                if verdict is None:
                    raise _Retry("bad_json", f"'correct' is {obj.get('correct')!r}, not true/false")
                return {"correct": verdict, "note": str(obj.get("note", ""))[:300]}

            v = await self._stage("verify", inp, ("correct",), check_verify, usage, images)
            if not v["correct"]:
                raise StageError("verify", "rc_rejected", v["note"] or "the teacher judged r_c incorrect")
            meta["verify_note"] = v["note"]

        def check_facts(obj: dict[str, Any]) -> list[str]:
            facts = clean_attributes(obj.get("facts"), item.question, drop_stated=inp.image is not None)
            if len(facts) < MIN_ATTRIBUTES:
                raise _Retry("too_few_attributes", f"{len(facts)} usable facts in {obj.get('facts')!r}"[:300])
            return facts

        facts = await self._stage("attributes", inp, ("facts",), check_facts, usage, images)

        def check_rewrite(obj: dict[str, Any]) -> tuple[str, str]:
            a, b = (obj.get(k) for k in REWRITE_KEYS)
            if not (isinstance(a, str) and a.strip() and isinstance(b, str) and b.strip()):
                raise _Retry("empty_rewrite", "a counterfactual is missing, empty or not a string")
            return a.strip(), b.strip()

        r_rp, r_rp_r = await self._stage("rewrite", inp, REWRITE_KEYS, check_rewrite, usage, images, facts)
        return Counterfactuals(r_rp=r_rp, r_rp_r=r_rp_r, attributes=facts, meta=meta, usage=usage)
