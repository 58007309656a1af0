"""The toy's world, the tiny families ``colour`` and ``count``: one attribute that a 0.2M-parameter judge can see at
56 px (the demo and CI substrate; docs/tiny-substrate.md says why it looks like this). ``perception-judge synth
--families colour`` draws them: :data:`perception_judge.synth.world.REGISTRY` names them by ``module:attribute``.

Responses are four words, ``"<what> <perceived value> so \\boxed{<answer>}"``; r_rp misreads the value for another
value the generator draws (so no text-only rule separates r_c from r_rp), r_rp+r also slips from the value to a
different in-range answer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Annotated, Any

from PIL import Image
from pydantic import BeforeValidator

from perception_judge.core.options import OptionError
from perception_judge.synth.base import COLOURS, Attrs, Family, Solver, Unsolvable, canvas

TINY_IMAGE_SIZE = 56
TINY_COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple")
TINY_COUNTS: tuple[int, ...] = (1, 2, 3, 4)
TINY_CELL = TINY_IMAGE_SIZE // 2
TINY_INK = (20, 20, 20)
TINY_FAMILIES: tuple[str, ...] = ("colour", "count")


def tiny_families(names: str | Sequence[str]) -> tuple[str, ...]:
    """``"colour,count"`` (or a list of names) as a tuple of tiny family names, each once (the ``--families``
    option of the tiny stages); an empty or unknown name is an :class:`OptionError` naming it and the known ones."""
    parts = [f.strip() for n in ([names] if isinstance(names, str) else names) for f in str(n).split(",")]
    if bad := [f for f in parts if f not in TINY_FAMILIES]:
        raise OptionError(f"unknown tiny families {bad}; the tiny world has {', '.join(TINY_FAMILIES)}")
    return tuple(dict.fromkeys(parts))


TinyFamilies = Annotated[tuple[str, ...], BeforeValidator(tiny_families)]
"""An option naming tiny families (``--families colour,count``)."""


def _colour_scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    side = rng.randint(26, 44)  # size and place vary, so no two images need be alike
    x, y = rng.randint(2, TINY_IMAGE_SIZE - side - 2), rng.randint(2, TINY_IMAGE_SIZE - side - 2)
    attrs = {
        "colour": rng.choice(TINY_COLOURS),
        "shape": rng.choice(("circle", "square")),
        "box": [x, y, x + side, y + side],
    }
    return attrs, "colour", {}, "colour ?"


def _colour_draw(attrs: Attrs) -> Image.Image:
    img, d = canvas(TINY_IMAGE_SIZE)
    box = tuple(attrs.get("box", (8, 8, TINY_IMAGE_SIZE - 9, TINY_IMAGE_SIZE - 9)))
    (d.ellipse if attrs["shape"] == "circle" else d.rectangle)(box, fill=COLOURS[attrs["colour"]])
    return img


def _count_boxes(cells: Sequence[int], rng: random.Random) -> list[list[int]]:
    boxes = []
    for cell in cells:
        side = rng.randint(10, 16)
        x = (cell % 2) * TINY_CELL + rng.randint(2, TINY_CELL - side - 2)
        y = (cell // 2) * TINY_CELL + rng.randint(2, TINY_CELL - side - 2)
        boxes.append([x, y, x + side, y + side])
    return boxes


def _count_scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    n = rng.choice(TINY_COUNTS)
    cells = sorted(rng.sample(range(4), n))
    return {"count": n, "cells": cells, "boxes": _count_boxes(cells, rng)}, "count", {}, "count ?"


def _count_draw(attrs: Attrs) -> Image.Image:
    img, d = canvas(TINY_IMAGE_SIZE)
    for box in attrs["boxes"]:
        d.rectangle(tuple(box), fill=TINY_INK)
    return img


def _solver(what: str, key: str, values: Sequence[Any]) -> Solver:
    """``"<what> <value> so \\boxed{<answer>}"``; a slip moves the answer ``delta`` steps along ``values`` (in range)."""

    def solve_tiny(params: dict[str, Any], attrs: Attrs, kind: str | None, delta: int) -> tuple[str, str]:
        seen = attrs[key]
        answer = seen
        if kind is not None:
            i = values.index(seen) + int(delta)
            if not 0 <= i < len(values):
                raise Unsolvable(f"a slip of {delta} leaves the range of {key}")
            answer = values[i]
        return f"{what} {seen} so \\boxed{{{answer}}}", str(answer)

    return solve_tiny


def _perturber(key: str, values: Sequence[Any]) -> Any:
    def perturb_tiny(attrs: Attrs, params: dict[str, Any], rng: random.Random) -> None:
        attrs[key] = rng.choice([v for v in values if v != attrs[key]])
        if key == "count":  # keep the attributes drawable
            attrs["cells"] = sorted(rng.sample(range(4), attrs[key]))
            attrs["boxes"] = _count_boxes(attrs["cells"], rng)

    return perturb_tiny


def tiny_value(spec: dict[str, Any], attributes: Attrs | None = None) -> str:
    """The one perceptual value of a tiny-family item, as the word its responses use (``"red"``, ``"3"``)."""
    attrs = spec["attributes"] if attributes is None else attributes
    return str(attrs["colour" if spec["family"] == "colour" else "count"])


def tiny_values(family: str) -> tuple[str, ...]:
    """Every value a tiny family draws, as words."""
    return TINY_COLOURS if family == "colour" else tuple(str(v) for v in TINY_COUNTS)


def response_value(response: str) -> str | None:
    """The perceived value a tiny response states (its second word), or None for other responses."""
    words = response.split()
    return words[1] if len(words) == 4 and words[2] == "so" and words[3].startswith("\\boxed{") else None


COLOUR = Family(
    name="colour",
    domain="colour",
    keywords=("colour", "shape", "image"),
    scene=_colour_scene,
    questions={"colour": (_solver("shape", "colour", TINY_COLOURS), ("shift",))},
    perturb=_perturber("colour", TINY_COLOURS),
    facts=lambda a: [f"one {a['shape']}", f"colour {a['colour']}", "white background"],
    draw=_colour_draw,
    image_size=TINY_IMAGE_SIZE,
    caption=lambda a: f"One {a['colour']} {a['shape']} on a white background.",
)
COUNT = Family(
    name="count",
    domain="counting",
    keywords=("count", "squares", "image"),
    scene=_count_scene,
    questions={"count": (_solver("shapes", "count", TINY_COUNTS), ("shift",))},
    perturb=_perturber("count", TINY_COUNTS),
    facts=lambda a: [f"{a['count']} squares", "dark squares", "one square per quadrant at most"],
    draw=_count_draw,
    image_size=TINY_IMAGE_SIZE,
    caption=lambda a: f"{a['count']} dark squares on a white background, at most one per quadrant.",
)
