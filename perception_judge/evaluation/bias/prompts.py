"""Scoring prompts of the bias suite and the MM-JudgeBias-style ``### Score:`` parsers.

Two prompts score one (query, image, response) input on 1-10:

``single`` (default)
    Our trained judge's own pointwise format (:func:`perception_judge.core.protocol.build_messages` with the
    ``single`` protocol), parsed by the strict protocol parser (``<answer>`` tag after the reasoning).

``mmjb``
    A prompt with the *structure* of the MM-JudgeBias scoring prompt (``mm_judgebias/prompts.py`` in
    ``naver-ai/MM-JudgeBias``, Apache-2.0): a Prometheus-Vision-like task description with four rules, the
    instruction, the response, and the cues ``### Feedback:`` / ``### Score:``; one user message, no system
    prompt, text first and then the image (vLLM-style), the image mentioned even for text-only calls (upstream
    B11). The wording is ours. For exact prompt parity put the upstream template text in a file and pass it as
    the suite option ``mmjb_template_file`` (it must hold ``{instruction}`` and ``{response}``).

Parsers (registered in :data:`perception_judge.evaluation.base.PARSERS`):

``mmjb``         upstream-compatible (``scoring.py::extract_score`` order): ``float(text)``; else the first number
                 after the **last** ``### Score:``; else the last number anywhere; else None. No range check, minus
                 signs ignored by the regex. Two deliberate differences, both recorded in the suite's protocol:
                 a closed ``<think>…</think>`` block is stripped first (upstream B1), and non-finite values
                 (``nan``, ``inf``) are refused (upstream would poison the mean).
``mmjb_strict``  after the reasoning, exactly one integer 1-10 (optionally ``/10``) after the last ``### Score:``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from perception_judge.core.protocol import THINK_CLOSE, THINK_OPEN, build_messages
from perception_judge.core.schema import MAX_SCORE, MIN_SCORE, sha256_hex

PROMPTS = ("single", "mmjb")
SCORE_MARKER = "### Score:"

MMJB_TEMPLATE = (
    "### Task Description:\n"
    "You are given an instruction, a response written for it, and an image that comes with them.\n"
    "1. Write feedback that examines, in detail and strictly, how well the response carries out the "
    "instruction; do not give a general impression.\n"
    "2. After the feedback, give the response one integer score from 1 to 10.\n"
    '3. Use exactly this layout: "### Feedback: (your feedback) ### Score: (one integer from 1 to 10)"\n'
    "4. Write nothing before the feedback and nothing after the score.\n"
    "\n"
    "### The instruction to evaluate:\n"
    "{instruction}\n"
    "\n"
    "### Response to evaluate:\n"
    "{response}\n"
    "\n"
    "### Feedback:\n"
    "### Score:"
)


def load_template(path: str | Path | None) -> str:
    """The mmjb template: ours, or the text of ``path`` (must contain ``{instruction}`` and ``{response}``)."""
    if not path:
        return MMJB_TEMPLATE
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"mmjb_template_file {str(p)!r} does not exist")
    text = p.read_text(encoding="utf-8")
    for key in ("{instruction}", "{response}"):
        if key not in text:
            raise ValueError(f"mmjb_template_file {str(p)!r} lacks the placeholder {key}")
    return text


def mmjb_messages(
    instruction: str, response: str, has_image: bool, template: str = MMJB_TEMPLATE
) -> list[dict]:
    """One user message: the filled template, then the image placeholder (if any)."""
    text = template.replace("{instruction}", instruction).replace("{response}", response)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if has_image:
        content.append({"type": "image"})
    return [{"role": "user", "content": content}]


def score_messages(
    prompt: str, instruction: str, response: str, has_image: bool, template: str = MMJB_TEMPLATE
) -> tuple[list[dict], str]:
    """(messages, parser name) for one pointwise scoring call of the bias suite."""
    if prompt == "single":
        return build_messages("single", instruction, [response], 1 if has_image else 0), "protocol"
    if prompt == "mmjb":
        return mmjb_messages(instruction, response, has_image, template), "mmjb"
    raise ValueError(f"unknown bias-suite prompt {prompt!r}; choose one of {', '.join(PROMPTS)}")


def prompt_hash(prompt: str, template: str = MMJB_TEMPLATE) -> str:
    """A short hash of the prompt text that scores are produced with (recorded with every result)."""
    if prompt == "single":
        from perception_judge.core.protocol import system_prompt, user_text

        blob = system_prompt("single", 1) + "\x00" + user_text("single", "{instruction}", ["{response}"])
    else:
        blob = template
    return sha256_hex(f"{prompt}\x00{blob}")[:16]


# --------------------------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_STRICT_TAIL = re.compile(r"\s*\**\s*([0-9]{1,3})\s*(?:/\s*10)?\s*\**\s*\.?\s*")


def strip_think(text: str) -> tuple[str, bool]:
    """(text without a closed ``<think>…</think>`` block, whether one was stripped)."""
    if THINK_CLOSE in text:
        return text.rsplit(THINK_CLOSE, 1)[1], True
    return text, False


def upstream_extract_score(text: str | None) -> float | None:
    """The upstream parser order, verbatim in behaviour (no think stripping, nan/inf accepted)."""
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        pass
    if SCORE_MARKER in text:
        tail = text.rsplit(SCORE_MARKER, 1)[1]
        m = _NUMBER.search(tail)
        if m:
            return float(m.group(0))
    nums = _NUMBER.findall(text)
    if nums:
        return float(nums[-1])
    return None


def parse_mmjb(text: str, n: int = 1, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """Upstream-compatible ``### Score:`` parser (see the module docstring for its two deliberate changes)."""
    if not isinstance(text, str):
        return None, "completion is not text"
    body, _ = strip_think(text)
    value = upstream_extract_score(body)
    if value is None:
        return None, "no number in the completion"
    if not math.isfinite(value):
        return None, f"non-finite score {value!r}"
    if n != 1:
        return None, f"the mmjb parser reads one score, {n} were requested"
    return [value], None  # out-of-range values are kept (upstream-compatible); the suite counts them


def parse_mmjb_strict(
    text: str, n: int = 1, reasoning: str | None = None
) -> tuple[list[float] | None, str | None]:
    """Strict ``### Score:`` parser: the final answer must end in exactly one integer 1-10 after the marker."""
    if not isinstance(text, str):
        return None, "completion is not text"
    if n != 1:
        return None, f"the mmjb parser reads one score, {n} were requested"
    if THINK_OPEN in text and THINK_CLOSE not in text:
        return None, "unclosed <think> block"
    body, _ = strip_think(text)
    if SCORE_MARKER not in body:
        return None, f"no {SCORE_MARKER!r} marker"
    tail = body.rsplit(SCORE_MARKER, 1)[1]
    m = _STRICT_TAIL.fullmatch(tail)
    if not m:
        shown = tail.strip()[:20]
        return None, f"not a single integer score after the marker: {shown!r}"
    value = int(m.group(1))
    if not MIN_SCORE <= value <= MAX_SCORE:
        return None, f"score {value} outside {MIN_SCORE}-{MAX_SCORE}"
    return [float(value)], None


def is_out_of_range(scores: list[float] | None, error: str | None) -> bool:
    """Whether a parse result holds (or was refused for) a score outside 1-10."""
    if scores is not None and any(not MIN_SCORE <= s <= MAX_SCORE for s in scores):
        return True
    return bool(error) and "outside" in error


__all__ = [
    "MMJB_TEMPLATE",
    "PROMPTS",
    "SCORE_MARKER",
    "is_out_of_range",
    "load_template",
    "mmjb_messages",
    "parse_mmjb",
    "parse_mmjb_strict",
    "prompt_hash",
    "score_messages",
    "strip_think",
    "upstream_extract_score",
]
