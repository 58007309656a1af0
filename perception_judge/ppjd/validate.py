"""The teacher-independent stages: pre-checks before the teacher, answers and validation after it (the rules and
their reasons: docs/ppjd.md §3). **Both** counterfactual answers must differ from the ground truth (the published
release kept a record when *either* did), and no judge verdict syntax (:data:`~perception_judge.core.protocol
.JUDGE_TAGS`) may be in r_c or a counterfactual.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from perception_judge.core.answers import answers_match, extract_final_answer, find_boxed
from perception_judge.core.protocol import JUDGE_TAGS
from perception_judge.core.schema import SourceItem
from perception_judge.ppjd.options import BuildOptions
from perception_judge.ppjd.teacher import SCAFFOLDING_TOKENS, Counterfactuals, StageError

_THINK_RE = re.compile(r"</?think(?:ing)?>", re.IGNORECASE)
_LEAK_PATTERNS = (
    _THINK_RE,
    re.compile(r"\b(?:r_rp_r|r_rp|rp_r|r_c|r_rp\+r)\b"),  # our identifiers
    re.compile(r'(?m)^\s*[{\[]?\s*"[A-Za-z_][A-Za-z0-9_ ]{0,40}"\s*:'),  # a JSON object instead of prose
    re.compile(r"(?im)^\s*(?:version|solution|response)\s*[12]\s*[:.)]"),  # "Version 1:" headings
)


def _judge_tag(stage: str, name: str, text: str) -> None:
    if m := JUDGE_TAGS.search(text):
        detail = f"{name} contains {m.group()!r}, a verdict a judge parser reads (planted in training data)"
        raise StageError(stage, "judge_tags", detail)


def precheck(item: SourceItem, has_image: bool, options: BuildOptions) -> None:
    """Raise StageError(precheck, ...) for items the teacher should never see."""
    if missing := [n for n in ("question", "answer", "response") if not str(getattr(item, n) or "").strip()]:
        raise StageError("precheck", "missing_fields", f"item {item.item_id!r} has no {', '.join(missing)}")
    if _THINK_RE.search(item.response):
        raise StageError("precheck", "response_has_think", "r_c contains <think>/<thinking> tags")
    _judge_tag("precheck", "r_c", item.response)
    for reason, what, text, limit in (
        ("question_too_long", "the question", item.question, options.max_question_chars),
        ("response_too_long", "r_c", item.response, options.max_response_chars),
    ):
        if len(text) > limit:
            raise StageError("precheck", reason, f"{what} has {len(text)} characters (limit {limit})")
    if not has_image and options.text_only == "skip":
        raise StageError("precheck", "text_only_skipped", "the item has no image (--text-only skip)")


def similarity(a: str, b: str) -> float:
    """Word-level edit similarity in [0, 1] (difflib ratio over whitespace tokens)."""
    wa, wb = a.split(), b.split()
    return difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio() if wa or wb else 1.0


def find_leak(text: str, reference: str = "") -> str | None:
    """The first piece of prompt scaffolding in ``text`` that is not already in ``reference`` (r_c), or None.
    (A physics solution may legitimately write ``r_c``; it only counts as a leak when r_c does not.)"""
    for token in SCAFFOLDING_TOKENS:
        if token in text and token not in reference:
            return token
    for pattern in _LEAK_PATTERNS:
        for m in pattern.finditer(text):
            if m.group(0) not in reference:
                return m.group(0).strip()
    return None


@dataclass
class Validated:
    answer_rp: str
    answer_rp_r: str
    similarity_rp: float


def validate(item: SourceItem, cf: Counterfactuals, options: BuildOptions) -> Validated:
    """Answers and checks (see the module docstring); raises StageError(answers|validate, reason)."""
    a1, a2 = extract_final_answer(cf.r_rp), extract_final_answer(cf.r_rp_r)
    if not a1:
        raise StageError("answers", "no_answer_rp", "r_rp states no final answer")
    if not a2:
        raise StageError("answers", "no_answer_rp_r", "r_rp+r states no final answer")
    texts = (("r_rp", cf.r_rp), ("r_rp+r", cf.r_rp_r))
    for (name, _), answer, reason in zip(texts, (a1, a2), ("rp_matches_gt", "rp_r_matches_gt"), strict=True):
        if answers_match(answer, item.answer):
            detail = f"{name} answers {answer!r}, the ground truth is {item.answer!r}"
            raise StageError("validate", reason, detail)
    if cf.r_rp.strip() == cf.r_rp_r.strip():
        raise StageError("validate", "counterfactuals_identical", "r_rp and r_rp+r are the same text")
    if answers_match(a1, a2):
        raise StageError("validate", "counterfactual_answers_equal", f"r_rp and r_rp+r both answer {a1!r}")
    for name, text in texts:
        if (leak := find_leak(text, item.response)) is not None:
            raise StageError("validate", "scaffolding_leak", f"{name} contains {leak[:60]!r}")
        _judge_tag("validate", name, text)
    if options.require_boxed and find_boxed(item.response):
        for name, text in texts:
            if not find_boxed(text):
                raise StageError("validate", "format_changed", f"r_c uses \\boxed{{}} but {name} does not")
    sim = similarity(item.response, cf.r_rp)
    if sim < options.min_rp_similarity:
        detail = f"similarity(r_c, r_rp) = {sim:.3f} < {options.min_rp_similarity}"
        raise StageError("validate", "rp_too_far_from_rc", detail)
    return Validated(a1, a2, round(sim, 4))
