"""``parser=published`` on the benchmark suites: a completion read exactly as the published evaluation code reads
it, a regex over the **whole** completion (a think block included): the **tags** reading (:func:`tag_ints`, every
published reader) or the **blocks** reading (:func:`block_ints`, the Perception-Judge notebook's batch cell only).
The upstream lines and what each reading keeps: docs/benchmarks.md "Prompts, parsing and failures".
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Annotated

from pydantic import AfterValidator

from perception_judge.evaluation.base import PARSERS as PARSER_FNS
from perception_judge.evaluation.benchmarks.metrics import ranking_from_scores

TAG = re.compile(r"<answer>(\d+)</answer>")
BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
DIGITS = re.compile(r"\d+")
CAP = 10**15 - 1
"""Larger values read as CAP: every integer up to 15 digits is exact as a float score (a completion with a longer
number is out of every range either way; ``int()`` is never run on more than 4,000 digits)."""
LETTERS = string.ascii_uppercase
"""The published batch rankings label the scores ``string.ascii_uppercase[:len(v)]`` (at most 26)."""

PARSERS = ("strict", "published")
"""Values of the suites' ``parser`` option."""


def _value(digits: str) -> int:
    return min(int(digits), CAP) if len(digits) <= 4000 else CAP


def whole_completion(text: str | None, reasoning: str | None = None) -> str:
    """The completion as the published scripts read it: the reasoning a backend split off, put back in front as a
    think block (``<think>{reasoning}</think>{text}``); the text alone when there is none."""
    text = text if isinstance(text, str) else ""
    return f"<think>{reasoning}</think>{text}" if reasoning else text


def tag_ints(text: str) -> list[int]:
    """The tag reading: the integers of ``re.findall(r"<answer>(\\d+)</answer>", text)``, in order, anywhere in
    the text (the module docstring has the published lines): ``<think><answer>3</answer></think><answer>11</answer>
    <answer> 7 </answer><answer>7.5</answer>`` gives ``[3, 11]``."""
    return [_value(d) for d in TAG.findall(text)] if isinstance(text, str) else []


def block_ints(text: str) -> list[int]:
    """The block reading (the Perception-Judge notebook's batch cell only): every run of digits inside every
    ``<answer>...</answer>`` block, in order: ``<answer>4, 6</answer><answer>7.5</answer><answer>nan</answer>``
    gives ``[4, 6, 7, 5]``."""
    if not isinstance(text, str):
        return []
    return [_value(d) for block in BLOCK.findall(text) for d in DIGITS.findall(block)]


def parse_published(text: str, n: int, reasoning: str | None = None) -> tuple[list[float] | None, str | None]:
    """``parser="published"``: the first ``n`` of :func:`tag_ints` over the whole completion; fewer is a failure
    (the published scripts' ``score[1]`` IndexError, caught as a tie: ``pred = "C"`` / ``[0, 0]`` / ``2``)."""
    ints = tag_ints(whole_completion(text, reasoning))
    if len(ints) < n:
        return None, f"published rule: {len(ints)} of {n} <answer>digits</answer> tags"
    return [float(v) for v in ints[:n]], None


def parse_published_prefix(
    text: str, n: int, reasoning: str | None = None
) -> tuple[list[float] | None, str | None]:
    """``parser="published_prefix"``: the first ``min(k, n)`` of the ``k`` :func:`block_ints` (the notebook's
    batch cell, cut to the ranking's length ``n``); none is a failure."""
    ints = block_ints(whole_completion(text, reasoning))
    if not ints:
        return None, "published rule: no integer inside an <answer> block"
    return [float(v) for v in ints[:n]], None


def published_ranking(values: Sequence[float]) -> str:
    """``"".join(label for _, label in sorted(zip(values, string.ascii_uppercase[:len(values)]), reverse=True))``
    as a pure rule: the letters of the first 26 values, highest value first, equal values with the later letter
    first (the batch readers of ``test/evaluate.py`` lines 132-134 and the notebook's batch cell): ``[3, 9, 9, 1,
    12]`` gives ``"ECBAD"``."""
    return ranking_from_scores(list(values)[: len(LETTERS)], LETTERS)


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
    "published": "published: re.findall(r'<answer>(\\d+)</answer>') over the whole completion (think included), the "
    "first n matches (only digits directly between the tags; no [[n]] fallback), out-of-range values kept, then the "
    "benchmark's own rule; MLLM-as-a-Judge batch: the Perception-Judge notebook reads every integer inside every "
    "<answer> block (cut to the ranking's length), Flex-Judge every tag",
}
"""What each ``parser`` value means, for the suites' protocol records and the report."""

PARSER_FNS.update(published=parse_published, published_prefix=parse_published_prefix)
