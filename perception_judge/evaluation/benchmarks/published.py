"""``parser=published`` on the benchmark suites: the published evaluators' looser reading of a completion
(MLLM-as-a-Judge's ``evaluate_metric`` notebook, Flex-Judge's ``test/*_vllm.py`` scripts), so that numbers
compare with theirs. The scores are the integers inside ``<answer>`` blocks anywhere in the text (a think block
included), else inside ``[[...]]``; out-of-range values are kept for each benchmark's own rule. ``published``
takes the first ``n`` (fewer is a failure), ``published_prefix`` the first ``min(k, n)`` of the ``k >= 1``
found (MLLM-as-a-Judge batch). See ``docs/benchmarks.md`` (Prompts, parsing and failures).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
BRACKET = re.compile(r"\[\[([^\[\]]*)\]\]")
DIGITS = re.compile(r"\d+")
MAX_DIGITS = 6
"""A longer run of digits is read as 999999 (out of range either way; never ``int()`` a 10,000-digit string)."""

PARSERS = ("strict", "published")
"""Values of the suites' ``parser`` option."""


def _ints(chunks: list[str]) -> list[int]:
    digits = [d for chunk in chunks for d in DIGITS.findall(chunk)]
    return [int(d) if len(d) <= MAX_DIGITS else 10**MAX_DIGITS - 1 for d in digits]


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
    return _ints(ANSWER_BLOCK.findall(text)) or _ints(BRACKET.findall(text))


def parse_published(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """``parser="published"``: the first ``n`` integers of :func:`answer_ints` (the reasoning, when a backend
    split it off, is searched first, as the published scripts read the whole completion)."""
    ints = _answer_ints(text, reasoning)
    if len(ints) < n:
        return None, f"published rule: {len(ints)} of {n} answer integers"
    return [float(v) for v in ints[:n]], None


def parse_published_prefix(
    text: str, n: int, reasoning: str | None = None
) -> tuple[list[float] | None, str | None]:
    """``parser="published_prefix"``: the first ``min(k, n)`` of the ``k`` integers found; none is a failure."""
    ints = _answer_ints(text, reasoning)
    if not ints:
        return None, "published rule: no answer integer"
    return [float(v) for v in ints[:n]], None


def _answer_ints(text: str, reasoning: str | None) -> list[int]:
    return answer_ints(f"<think>{reasoning}</think>{text}" if reasoning else text)


def _check_parser(value: str) -> str:
    value = value.strip().lower()
    if value not in PARSERS:
        raise ValueError(f"option 'parser' must be one of {list(PARSERS)}, got {value!r}")
    return value


ParserOption = Annotated[str, AfterValidator(_check_parser)]
"""The suites' ``parser`` option (``strict``, the default, or ``published``), checked."""


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
