"""The family protocol (:class:`Family`) and what the families share: colours, text and drawing helpers."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from PIL import Image, ImageDraw, ImageFont

IMAGE_SIZE = 256

# Solid fill colours. Shapes and bars are drawn without anti-aliasing, so these exact RGB values are on the
# pixels (tests count connected components per colour).
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 150, 60),
    "blue": (35, 75, 215),
    "yellow": (235, 190, 20),
    "orange": (240, 120, 20),
    "purple": (130, 50, 170),
}

Attrs = dict[str, Any]
Solver = Callable[[dict[str, Any], Attrs, "str | None", int], tuple[str, str]]
"""``(params, attributes, slip kind or None, slip delta) -> (response, final answer)``."""


class Unsolvable(ValueError):
    """A (perceived or perturbed) scene gives the question no well-defined answer, or a slip does not apply."""


@dataclass(frozen=True)
class Family:
    """One synthetic family, registered in :data:`perception_judge.synth.world.REGISTRY`. ``scene(rng)`` draws
    the attributes and a question about them: ``(attributes, qtype, params, question)``. ``questions`` maps
    each question type to its solver and the reasoning slips it can make (for r_rp+r);
    ``perturb(attributes, params, rng)`` misreads one fact in place, on a copy :func:`world.perturb` makes
    (for r_rp); ``facts`` lists 3-6 short phrases of the attributes. ``draw`` and ``caption`` are None for a
    text-only family; ``image_size`` is the side of its images."""

    name: str
    domain: str
    keywords: tuple[str, ...]
    scene: Callable[[random.Random], tuple[Attrs, str, dict[str, Any], str]]
    questions: dict[str, tuple[Solver, tuple[str, ...]]]
    perturb: Callable[[Attrs, dict[str, Any], random.Random], None]
    facts: Callable[[Attrs], list[str]]
    draw: Callable[[Attrs], Image.Image] | None = None
    caption: Callable[[Attrs], str] | None = None
    image_size: int = IMAGE_SIZE


def plural(word: str, n: int) -> str:
    return word if n == 1 else word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def article(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def are(n: int) -> str:
    return "is" if n == 1 else "are"


def join(parts: Sequence[str]) -> str:
    parts = list(parts)
    if len(parts) <= 1:
        return parts[0] if parts else "nothing"
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def answer(steps: Sequence[str], value: Any) -> tuple[str, str]:
    """(the step-by-step response ending in ``\\boxed{value}``, the final answer)."""
    final = str(value)
    return "\n".join(steps) + f"\n\nSo the answer is \\boxed{{{final}}}.", final


def word_count(text: str) -> int:
    return len(text.split())


def fit_caption(required: Sequence[str], optional: Sequence[str]) -> str:
    """Required sentences plus as many optional ones as keep the caption within 60-100 words."""
    text = " ".join(required)
    for sentence in optional:
        if word_count(text) >= 60:
            break
        if word_count(text) + word_count(sentence) <= 100:
            text += " " + sentence
    return text


def sum_line(step: int, terms: list[int], kind: str | None, delta: int) -> tuple[str, int]:
    """``Step N: Adding them up: a + b = total.``; the slips ``omit`` (drop the last term) and ``arith``."""
    if kind is not None and len(terms) < 2:
        raise Unsolvable("nothing to omit or add up wrongly")
    if kind == "omit":
        terms = terms[:-1]
    total = sum(terms) + (delta if kind == "arith" else 0)
    return f"Step {step}: Adding them up: {' + '.join(map(str, terms))} = {total}.", total


def canvas(size: int = IMAGE_SIZE) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    img = Image.new("RGB", (size, size), (255, 255, 255))
    return img, ImageDraw.Draw(img)


@lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def text_centered(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, size: int) -> None:
    """Black text centred on ``xy``."""
    font = _font(size)
    box = draw.textbbox((0, 0), text, font=font)
    w, h = box[2] - box[0], box[3] - box[1]
    draw.text((xy[0] - w / 2 - box[0], xy[1] - h / 2 - box[1]), text, font=font, fill=(0, 0, 0))
