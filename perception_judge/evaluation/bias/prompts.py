"""Scoring prompts of the bias suite and the MM-JudgeBias-style ``### Score:`` parsers (docs/evaluation.md §2,
"Prompts and parsers"): ``single``, our judge's pointwise format, and ``mmjb``, the *structure* of the MM-JudgeBias
scoring prompt (``mm_judgebias/prompts.py`` in ``naver-ai/MM-JudgeBias``, Apache-2.0; our wording, :data:`MMJB`,
unless ``prompt_source`` gives the published text; the image mentioned even for text-only calls, upstream B11). The
parsers ``mmjb`` and ``mmjb_strict`` are registered in :data:`perception_judge.evaluation.base.PARSERS`.
"""

from __future__ import annotations

import contextlib
import math
import re

from perception_judge.core.protocol import THINK_CLOSE, THINK_OPEN, build_messages, system_prompt, user_text
from perception_judge.core.schema import MAX_SCORE, MIN_SCORE, sha256_hex
from perception_judge.evaluation.base import PARSERS
from perception_judge.evaluation.prompt_source import PROJECT, Prompt

SCORE_MARKER = "### Score:"

MMJB_TEMPLATE = """### Task Description:
You are given an instruction, a response written for it, and an image that comes with them.
1. Write feedback that examines, in detail and strictly, how well the response carries out the instruction; \
do not give a general impression.
2. After the feedback, give the response one integer score from 1 to 10.
3. Use exactly this layout: "### Feedback: (your feedback) ### Score: (one integer from 1 to 10)"
4. Write nothing before the feedback and nothing after the score.

### The instruction to evaluate:
{instruction}

### Response to evaluate:
{response}

### Feedback:
### Score:"""


MMJB = Prompt({"user": (("=", MMJB_TEMPLATE),)}, "instruction response", "last", (1, 10), "mmjb", PROJECT)
"""Our wording of the published prompt, sent as ``prompt_source``'s would be: one user turn, the text, then the image."""


def score_messages(
    prompt: str, instruction: str, response: str, has_image: bool, mmjb: Prompt = MMJB
) -> list[dict]:
    """The messages of one pointwise scoring call: the ``single`` protocol, or the ``mmjb`` prompt's one user message
    (the template filled, ``str.format`` as upstream's ``EVAL_PROMPT.format``, then the image placeholder if any)."""
    if prompt == "single":
        return build_messages("single", instruction, [response], int(has_image))
    return mmjb.messages({"instruction": instruction, "response": response}, images=int(has_image))


def prompt_hash(prompt: str, mmjb: Prompt = MMJB) -> str:
    """A short hash of the prompt text that scores are produced with (recorded with every result)."""
    template = "".join(text for _, text in mmjb.texts["user"])
    if prompt == "single":
        template = system_prompt("single", 1) + "\x00" + user_text("single", "{instruction}", ["{response}"])
    return sha256_hex(f"{prompt}\x00{template}")[:16]


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_STRICT_TAIL = re.compile(r"\s*\**\s*([0-9]{1,3})\s*(?:/\s*10)?\s*\**\s*\.?\s*")


def strip_think(text: str) -> str:
    """The text after a closed ``<think>…</think>`` block (the whole text when there is none)."""
    return text.rsplit(THINK_CLOSE, 1)[-1]


def upstream_extract_score(text: str | None) -> float | None:
    """The upstream parser order, verbatim in behaviour (no think stripping, nan/inf accepted)."""
    if text is None:
        return None
    with contextlib.suppress(ValueError):
        return float(text.strip())
    if SCORE_MARKER in text and (m := _NUMBER.search(text.rsplit(SCORE_MARKER, 1)[1])):
        return float(m.group(0))
    nums = _NUMBER.findall(text)
    return float(nums[-1]) if nums else None


def parse_mmjb(text: str, n: int = 1, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """The upstream-compatible parser (``scoring.py::extract_score`` order): ``float(text)``; else the first number
    after the **last** ``### Score:``; else the last number anywhere; else None. No range check (the suite counts
    out-of-range values), minus signs ignored by the regex. Two deliberate differences, both recorded in the
    suite's protocol: a closed ``<think>…</think>`` block is stripped first (upstream B1), and non-finite values
    (``nan``, ``inf``) are refused (upstream would poison the mean)."""
    if not isinstance(text, str):
        return None, "completion is not text"
    value = upstream_extract_score(strip_think(text))
    if value is None:
        return None, "no number in the completion"
    if not math.isfinite(value):
        return None, f"non-finite score {value!r}"
    if n != 1:
        return None, f"the mmjb parser reads one score, {n} were requested"
    return [value], None


def parse_mmjb_strict(
    text: str, n: int = 1, reasoning: str | None = None
) -> tuple[list[float] | None, str | None]:
    """The strict parser: after the reasoning, exactly one integer 1-10 (optionally ``/10``) after the last
    ``### Score:`` (bold markers and a final full stop allowed)."""
    if not isinstance(text, str):
        return None, "completion is not text"
    if n != 1:
        return None, f"the mmjb parser reads one score, {n} were requested"
    if THINK_OPEN in text and THINK_CLOSE not in text:
        return None, "unclosed <think> block"
    body = strip_think(text)
    if SCORE_MARKER not in body:
        return None, f"no {SCORE_MARKER!r} marker"
    tail = body.rsplit(SCORE_MARKER, 1)[1]
    m = _STRICT_TAIL.fullmatch(tail)
    if not m:
        return None, f"not a single integer score after the marker: {tail.strip()[:20]!r}"
    value = int(m.group(1))
    if not MIN_SCORE <= value <= MAX_SCORE:
        return None, f"score {value} outside {MIN_SCORE}-{MAX_SCORE}"
    return [float(value)], None


def is_out_of_range(scores: list[float] | None, error: str | None) -> bool:
    """Whether a parse result holds (or was refused for) a score outside 1-10."""
    if scores is not None and any(not MIN_SCORE <= s <= MAX_SCORE for s in scores):
        return True
    return bool(error) and "outside" in error


PARSERS.update(mmjb=parse_mmjb, mmjb_strict=parse_mmjb_strict)
