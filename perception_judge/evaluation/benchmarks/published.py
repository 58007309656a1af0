"""The published evaluators' parsing rule, for ``parser=published`` on the benchmark suites.

The project's own parser (``parser=strict``, :func:`perception_judge.core.protocol.parse_scores`) accepts exactly
``n`` ``<answer>`` tags after the reasoning, each an integer 1-10, and calls anything else a parse failure. The
published evaluation code of MLLM-as-a-Judge (the Perception-Judge ``evaluate_metric`` notebook), Flex-Judge's
``test/*_vllm.py`` scripts (VL-RewardBench, MJ-Bench, MLLM-as-a-Judge pair) read completions more loosely, and a
number taken under one rule is not comparable with one taken under the other. ``parser=published`` reproduces the
loose rule, as documented for those scripts (``../shared/reference/judge-benchmarks.md`` §3,
``perception-judge-paper-method.md`` §6):

* the scores are **the integers inside ``<answer>...</answer>`` blocks, anywhere in the text** (a think block
  included), in order; every run of digits in a block counts (``<answer>7, 9</answer>`` gives 7 and 9; ``nan``,
  ``-`` and words give nothing, ``7.5`` gives 7 and 5);
* when no block holds an integer, the integers inside ``[[...]]`` double brackets are read instead (the
  MLLM-as-a-Judge prompts' ``[[8]]`` form; single brackets are not read: ``[Assistant 1's Answer]`` is no score);
* **out-of-range values are kept** (0, 11, 42): each benchmark's own rule then applies: the pair verdict compares
  them as they are; the score setting maps ``s >= 11`` to a failure (-1) and everything else through ``ceil(s/2)``
  (so 0 stays 0); the batch setting sorts them.

Two parser names, registered in :data:`perception_judge.evaluation.base.PARSERS`:

``published``         the first ``n`` integers; fewer than ``n`` is a failure (pair: verdict C under the published
                      conventions, the ``*_compat`` metrics; score: -1).
``published_prefix``  the first ``min(k, n)`` of the ``k >= 1`` integers found (MLLM-as-a-Judge batch: "every int
                      in every answer block, truncated to the number of answers"; a shorter ranking is scored as it
                      is, an empty one is a failure, distance 1.0).
"""

from __future__ import annotations

import re
from typing import Any

ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
BRACKET = re.compile(r"\[\[([^\[\]]*)\]\]")
DIGITS = re.compile(r"\d+")
MAX_DIGITS = 6
"""A longer run of digits is read as 999999 (out of range either way; never ``int()`` a 10,000-digit string)."""

PARSERS = ("strict", "published")
"""Values of the suites' ``parser`` option."""


def _ints(chunks: list[str]) -> list[int]:
    out: list[int] = []
    for chunk in chunks:
        for digits in DIGITS.findall(chunk):
            out.append(int(digits) if len(digits) <= MAX_DIGITS else 10**MAX_DIGITS - 1)
    return out


def answer_ints(text: str) -> list[int]:
    """Every integer of every ``<answer>`` block, anywhere in ``text``; the bracketed integers when no block has
    one (see the module docstring).

    >>> answer_ints("<think>maybe <answer>3</answer></think><answer>11</answer> <answer>nan</answer>")
    [3, 11]
    >>> answer_ints("Assistant 1: [[8]], Assistant 2: [[0]]")
    [8, 0]
    """
    if not isinstance(text, str):
        return []
    ints = _ints(ANSWER_BLOCK.findall(text))
    return ints if ints else _ints(BRACKET.findall(text))


def parse_published(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """``parser="published"``: the first ``n`` integers of :func:`answer_ints` (the reasoning, when a backend
    split it off, is searched first, as the published scripts read the whole completion)."""
    ints = answer_ints(_whole(text, reasoning))
    if len(ints) < n:
        return None, f"published rule: {len(ints)} of {n} answer integers"
    return [float(v) for v in ints[:n]], None


def parse_published_prefix(
    text: str, n: int, reasoning: str | None = None
) -> tuple[list[float] | None, str | None]:
    """``parser="published_prefix"``: the first ``min(k, n)`` of the ``k`` integers found; none is a failure."""
    ints = answer_ints(_whole(text, reasoning))
    if not ints:
        return None, "published rule: no answer integer"
    return [float(v) for v in ints[:n]], None


def _whole(text: str, reasoning: str | None) -> str:
    return f"<think>{reasoning}</think>{text}" if reasoning else (text if isinstance(text, str) else "")


def parser_option(options: dict[str, Any], suite: str) -> str:
    """The suite's ``parser`` option (``strict``, the default, or ``published``), checked."""
    value = str(options.get("parser", "strict")).strip().lower()
    if value not in PARSERS:
        raise ValueError(f"suite {suite!r}: option 'parser' must be one of {list(PARSERS)}, got {value!r}")
    return value


def request_parser(parser: str, prefix: bool = False) -> str:
    """The request-level parser name for a suite's ``parser`` option."""
    if parser == "strict":
        return "protocol"
    return "published_prefix" if prefix else "published"


DESCRIPTIONS = {
    "strict": "strict (project): exactly n <answer> tags after the reasoning, integers 1-10; anything else a failure",
    "published": "published: the first n integers inside <answer> blocks anywhere in the text (think included; "
    "[[n]] brackets when no block has one), out-of-range values kept, then the benchmark's own rule",
}
"""What each ``parser`` value means, for the suites' protocol records and the report."""
