"""The judge protocol shared by training and evaluation: prompt -> rendered generation prompt -> completion -> scores.

Protocols: ``batch`` (N >= 2 responses as Assistant 1..N, one distinct integer score 1-10 each), ``pair`` (two
responses, two scores), ``single`` (one response, one score): reasoning inside ``<think>…</think>`` first, then one
``<answer>score</answer>`` tag per response, in order. Messages are trl conversational messages whose content is
always a list of blocks, with bare ``{"type": "image"}`` placeholders filled with the images in order.
:func:`render_generation_prompt` is the one place where a prompt becomes model input text (with the ``<think>\n``
prefill of :func:`prepare_processor`, docs/training.md "Prompts and images"); :func:`parse_scores` is the one parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from perception_judge.core.schema import MAX_SCORE, MIN_SCORE, SLOTS, validate_protocol

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
THINK_PREFIX = "<think>\n"

_ROLE = (
    "You are a careful, impartial judge of answers written by AI assistants. Some questions come with an image; "
    "when one is given, look at it first and check every visual claim an answer makes (counts, colours, text, "
    "numbers, positions) against what the image actually shows. An answer that reasons fluently from details "
    "the image contradicts is a wrong answer."
)
_CRITERIA = (
    "Judge correctness with respect to the image and the question first, then helpfulness, relevance and level "
    "of detail. Scores are integers from 1 (worst) to 10 (best)."
)
_NEUTRAL = "Do not let the length or the writing style of an answer sway you."
_NEUTRAL_ORDER = "Do not let the order in which the answers appear, their length or their style sway you."
_DISTINCT = "Give every answer a different score, so that the scores rank the answers from best to worst."
_FORMAT = (
    "Write your step-by-step reasoning inside <think> </think> first. After </think>, write {what} and nothing "
    "else, for example: <think> ... </think>{example}"
)
_EXAMPLE_SCORES = (6, 9, 3, 8, 2, 7, 4, 10, 5, 1)


def _example(n: int) -> str:
    return "".join(f"<answer>{s}</answer>" for s in _EXAMPLE_SCORES[:n])


def system_prompt(protocol: str, n: int) -> str:
    """The system prompt of a protocol for ``n`` responses."""
    validate_protocol(protocol)
    if protocol == "single":
        task = "You will see a question and one assistant's answer. Score the answer."
        fmt = _FORMAT.format(what="its score in one <answer> </answer> tag", example=_example(1))
        return " ".join([_ROLE, task, _CRITERIA, _NEUTRAL, fmt])
    count, n, rules = ("two", 2, []) if protocol == "pair" else (str(n), n, [_DISTINCT])
    task = f"You will see a question and the answers of {count} assistants. Score each answer."
    what = f"the {count} scores, one <answer> </answer> tag per assistant in the order they appear"
    return " ".join(
        [_ROLE, task, _CRITERIA, *rules, _NEUTRAL_ORDER, _FORMAT.format(what=what, example=_example(n))]
    )


def expected_scores(protocol: str, n_responses: int) -> int:
    """How many scores a completion must contain."""
    validate_protocol(protocol)
    return 1 if protocol == "single" else n_responses


_N_RESPONSES = {
    "single": (1, 1, "exactly one response"),
    "pair": (2, 2, "exactly two responses"),
    "batch": (2, len(SLOTS), f"2..{len(SLOTS)} responses"),
}


def _check_responses(protocol: str, responses: list[str]) -> None:
    lo, hi, what = _N_RESPONSES[protocol]
    if not lo <= len(responses) <= hi:
        raise ValueError(f"the {protocol} protocol judges {what}, got {len(responses)}")
    for i, r in enumerate(responses):
        if not isinstance(r, str):
            raise TypeError(f"response {i + 1} is {type(r).__name__}, expected str")


def user_text(protocol: str, question: str, responses: list[str]) -> str:
    """The text part of the user turn: the question, then each answer under its own heading."""
    if protocol == "single":
        parts = [f"## Question\n{question}", f"## The assistant's answer\n{responses[0]}"]
    else:
        parts = [f"## Question\n{question}"]
        parts += [f"## Answer of Assistant {i + 1}\n{r}" for i, r in enumerate(responses)]
    return "\n\n".join(parts)


PROMPT_STYLES = ("full", "tiny")
"""``full``: the judge prompt of real judges. ``tiny``: the same protocol in a dozen tokens for the CPU-scale judges
of the demo and CI (``judge`` as the system turn, then ``colour ? A shape red so red B shape blue so blue``;
docs/tiny-substrate.md says why). An exported training set records its style."""
TINY_SYSTEM = "judge"


def tiny_user_text(question: str, responses: list[str]) -> str:
    """The ``tiny`` style's user text: the question, then each answer after its slot letter."""
    parts = [question.strip()] if question.strip() else []
    parts += [f"{SLOTS[i]} {r.strip()}" for i, r in enumerate(responses)]
    return " ".join(parts)


def build_messages(
    protocol: str, question: str, responses: list[str], n_images: int = 1, style: str = "full"
) -> list[dict[str, Any]]:
    """trl conversational messages for one judge prompt in a prompt ``style`` (:data:`PROMPT_STYLES`).
    Content is always a list of blocks (so the messages store cleanly in Arrow / parquet); the user turn
    starts with ``n_images`` bare ``{"type": "image"}`` placeholders."""
    validate_protocol(protocol)
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")
    _check_responses(protocol, responses)
    if n_images < 0:
        raise ValueError("n_images must be >= 0")
    if style == "tiny":
        system, text = TINY_SYSTEM, tiny_user_text(question, responses)
    else:
        system, text = system_prompt(protocol, len(responses)), user_text(protocol, question, responses)
    images = [{"type": "image"} for _ in range(n_images)]
    return [
        {"role": "system", "content": [{"type": "text", "text": system}]},
        {"role": "user", "content": [*images, {"type": "text", "text": text}]},
    ]


def count_image_placeholders(messages: list[dict[str, Any]], block_type: str = "image") -> int:
    """Image blocks in messages: ``{"type": "image"}`` placeholders, or ``"image_url"`` parts of an OpenAI request."""
    blocks = [part for m in messages if isinstance(m.get("content"), list) for part in m["content"]]
    return sum(isinstance(part, dict) and part.get("type") == block_type for part in blocks)


_THINK_SUFFIX_JINJA = "{% if add_generation_prompt %}{{ '<think>\\n' }}{% endif %}"
_PROBE = [{"role": "user", "content": [{"type": "text", "text": "probe"}]}]


def opens_think_block(text: str) -> bool:
    """True when ``text`` ends inside an unclosed ``<think>`` block."""
    i = text.rfind(THINK_OPEN)
    return i != -1 and text.find(THINK_CLOSE, i) == -1


def _tokenizer_of(processing_class: Any) -> Any:
    return getattr(processing_class, "tokenizer", processing_class)


def chat_template_of(processing_class: Any) -> str:
    template = getattr(processing_class, "chat_template", None) or getattr(
        _tokenizer_of(processing_class), "chat_template", None
    )
    if not template:
        raise ValueError(
            f"{type(processing_class).__name__} has no chat template; a judge model needs one "
            "(chat_template.jinja in the model folder)"
        )
    if isinstance(template, dict):  # named templates: use the default one
        template = template.get("default") or next(iter(template.values()))
    return template


def template_opens_think(processing_class: Any) -> bool:
    """Whether the processor's chat template already opens a think block in its generation prompt."""
    text = processing_class.apply_chat_template(_PROBE, add_generation_prompt=True, tokenize=False)
    return opens_think_block(text)


def prepare_processor(processing_class: Any, think_prefix: str = "auto") -> Any:
    """Install the think prefix into a processor's (and its tokenizer's) chat template, in place; idempotent.
    ``"auto"`` appends ``<think>\\n`` to the generation prompt unless the template opens a think block itself;
    ``"off"`` leaves it alone. Call it on the processor trl's GRPOTrainer gets;
    :func:`render_generation_prompt` calls it for evaluation, so both see the same template."""
    if think_prefix not in ("auto", "off"):
        raise ValueError(f"think_prefix must be 'auto' or 'off', got {think_prefix!r}")
    if think_prefix == "off" or template_opens_think(processing_class):
        return processing_class
    patched = chat_template_of(processing_class) + _THINK_SUFFIX_JINJA
    processing_class.chat_template = patched
    _tokenizer_of(processing_class).chat_template = patched  # the processor itself when it has no tokenizer
    if not template_opens_think(processing_class):  # pragma: no cover - a template that ignores our suffix
        raise RuntimeError("could not install the <think> prefix into the chat template")
    return processing_class


def render_generation_prompt(
    processing_class: Any, messages: list[dict[str, Any]], think_prefix: str = "auto"
) -> str:
    """Render judge messages into the exact generation prompt the model sees (text, image tokens unexpanded)."""
    prepare_processor(processing_class, think_prefix)
    return processing_class.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


JUDGE_TAGS = re.compile(
    r"</?(?:answer|think(?:ing)?)>|#{1,6}[ \t]*Score[ \t]*:"
    r"|\[\[\s*(?:[0-9]+(?:\.[0-9]+)?|[A-D](?:\s*(?:>>|<<|>|<|=)\s*[A-D])?|tie)\s*\]\]",
    re.IGNORECASE,
)
"""Every verdict form a judge parser reads: this protocol's answer and think tags (open or close), the ``### Score:``
marker of the MM-JudgeBias prompt, and the bracket verdicts of MT-Bench-style judges (``[[8]]``, ``[[8.5]]``,
``[[A]]``, ``[[A>B]]``, ``[[A>>B]]``, ``[[A=B]]``, ``[[tie]]``). A response a judge is shown holds none (PPJD
refuses them in r_c and in both counterfactuals: a planted verdict would teach the judge to read it)."""

_ANSWER_TAG_RE = re.compile(r"<(/?)answer>")
_INT_RE = re.compile(r"[0-9]+")
_FORMAT_TAIL_RE = re.compile(r"\s*(?:<answer>\s*[0-9]+\s*</answer>\s*)+")


@dataclass(frozen=True)
class ParseResult:
    """``scores`` is a list of ``n`` ints in 1-10, or None with a short reason in ``error``."""

    scores: list[int] | None
    error: str | None = None
    final: str = ""

    @property
    def ok(self) -> bool:
        return self.scores is not None


def final_answer_part(
    text: str, reasoning: str | None = None, think_open: bool = False
) -> tuple[str | None, str | None]:
    """Split off the reasoning: return (final answer text, None) or (None, error).

    * text after the last ``</think>`` is the final answer;
    * a ``<think>`` without a later ``</think>`` is an unclosed block: no final answer;
    * ``think_open=True`` says the prompt itself opened the block (the ``<think>\\n`` prefill), so a completion
      with no ``</think>`` never closed it;
    * a separately supplied ``reasoning`` (``reasoning_content``) means ``text`` is already the final answer.
    """
    if not isinstance(text, str):
        return None, "completion is not text"
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    elif think_open and reasoning is None:
        return None, "unclosed <think> block"
    return (None, "unclosed <think> block") if THINK_OPEN in text else (text, None)


def _answer_tags(text: str) -> list[str] | None:
    """The bodies of the ``<answer>…</answer>`` tags of ``text``, or None when opening and closing tags do not
    alternate. One pass over the tags (a search from every opening tag to the text's end was quadratic)."""
    bodies, opened = [], -1
    for m in _ANSWER_TAG_RE.finditer(text):
        if (m.group(1) == "/") != (opened != -1):
            return None  # an opening tag inside a tag, or a closing tag outside one
        if opened == -1:
            opened = m.end()
        else:
            bodies.append(text[opened : m.start()])
            opened = -1
    return bodies if opened == -1 else None


def parse_scores(text: str, n: int, reasoning: str | None = None, think_open: bool = False) -> ParseResult:
    """Parse exactly ``n`` integer scores in 1-10 from the final answer of a judge completion. Rules: only
    ``<answer>…</answer>`` tags after the reasoning count; exactly ``n`` of them; each holds an unsigned
    integer (surrounding whitespace allowed) between 1 and 10. Decimals, signs, words, empty tags,
    out-of-range values, unbalanced tags and unclosed think blocks are errors. Never raises on bad text."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    final, err = final_answer_part(text, reasoning, think_open)
    if final is None:
        return ParseResult(None, err)
    tags = _answer_tags(final)
    if tags is None:
        return ParseResult(None, "unbalanced <answer> tags", final)
    if len(tags) != n:
        return ParseResult(None, f"expected {n} <answer> tags, found {len(tags)}", final)
    scores: list[int] = []
    for raw in tags:
        value = raw.strip()
        shown = value if len(value) <= 20 else value[:17] + "..."
        if not _INT_RE.fullmatch(value):
            return ParseResult(None, f"not an integer score: {shown!r}", final)
        if len(value) > 4 or not MIN_SCORE <= int(value) <= MAX_SCORE:  # never int() a 10,000-digit string
            return ParseResult(None, f"score {shown} outside {MIN_SCORE}-{MAX_SCORE}", final)
        scores.append(int(value))
    return ParseResult(scores, None, final)


def format_ok(text: str, n: int, reasoning: str | None = None, think_open: bool = False) -> bool:
    """A closed think block followed by exactly the ``n`` answer tags the protocol requires, and nothing else.
    Without the prefill (``think_open=False``) the completion must open the block itself; with it, the
    completion must close it exactly once and never reopen it."""
    if not isinstance(text, str):
        return False
    if reasoning is not None:  # the reasoning came separately: the text is the final answer alone
        if THINK_OPEN in text or THINK_CLOSE in text:
            return False
        tail = text
    else:
        if text.count(THINK_CLOSE) != 1:
            return False
        head, tail = text.split(THINK_CLOSE)
        opens = head.count(THINK_OPEN)
        if opens != (0 if think_open else 1) or not (think_open or head.lstrip().startswith(THINK_OPEN)):
            return False
    return bool(_FORMAT_TAIL_RE.fullmatch(tail)) and parse_scores(tail, n).ok
