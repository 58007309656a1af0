"""Base items of the bias suite: neutral (image, query, response) items that the perturbations are applied to.

A :class:`BaseItem` is independent of where it came from. Three sources:

* :func:`from_source_item` adapts a PPJD :class:`~perception_judge.schema.SourceItem` (the synthetic generator
  ``perception_judge.ppjd.synth.generate_items`` gives image items with a scene spec holding a caption and
  keywords, and text-only items with family ``"text"``);
* :func:`builtin_base_items` is a small procedural set of our own (shapes, bar charts, tables, text-only
  arithmetic), used when the PPJD generator is not installed and by tests;
* tests and users can build items directly with PIL.

Every image item needs a caption (detail-description bias) and keywords (text-insertion bias); when keywords
are missing they are taken from the query (:func:`query_keywords`).
"""

from __future__ import annotations

import contextlib
import random
import re
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw

from perception_judge.images import load_image

_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "how",
        "many",
        "much",
        "does",
        "do",
        "did",
        "there",
        "their",
        "they",
        "it",
        "its",
        "as",
        "into",
        "than",
        "then",
        "image",
        "picture",
        "shown",
        "shows",
        "show",
        "please",
        "answer",
        "question",
        "give",
        "your",
        "you",
        "me",
        "can",
        "could",
        "would",
        "should",
        "one",
        "two",
    ]
)


@dataclass
class BaseItem:
    """One unperturbed item. ``image`` is a PIL image (RGB) or None for a text-only item.

    ``flip_safe`` says the content is orientation-free (shapes to count: no text, chart, clock or left/right
    fact), so flips and quarter turns keep the meaning; only then does the visual-transformation bias use them.
    """

    item_id: str
    query: str
    response: str
    image: Image.Image | None = None
    caption: str = ""
    keywords: list[str] = field(default_factory=list)
    domain: str = ""
    flip_safe: bool = False
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text_only(self) -> bool:
        return self.image is None

    def keywords_or_query(self) -> list[str]:
        return list(self.keywords) or query_keywords(self.query)


def query_keywords(query: str, k: int = 5) -> list[str]:
    """Up to ``k`` content words of a query, in order, without duplicates (a fallback for keyword lists)."""
    words = re.findall(r"[A-Za-z][A-Za-z0-9'-]*|[0-9]+", query)
    out: list[str] = []
    for w in words:
        lw = w.lower()
        if lw in _STOPWORDS or len(lw) < 3 or lw in (o.lower() for o in out):
            continue
        out.append(w)
        if len(out) == k:
            break
    return out


_TEXT_FAMILIES = ("text",)
_FLIP_SAFE_FAMILIES = ("shapes", "objects", "dots", "dot_grid", "clevr")


def from_source_item(src: Any) -> BaseItem:
    """Adapt a :class:`~perception_judge.schema.SourceItem` (or anything with the same attributes)."""
    spec = dict(getattr(src, "spec", None) or {})
    family = str(spec.get("family", "") or "")
    image = getattr(src, "image", None)
    pil = None if image is None or family in _TEXT_FAMILIES else load_image(image)
    keywords = spec.get("keywords") or []
    if isinstance(keywords, str):
        keywords = [k.strip() for k in keywords.split(",") if k.strip()]
    return BaseItem(
        item_id=str(src.item_id),
        query=str(src.question),
        response=str(src.response),
        image=pil,
        caption=str(spec.get("caption", "") or ""),
        keywords=[str(k) for k in keywords],
        domain=str(spec.get("domain", "") or family or getattr(src, "source", "") or ""),
        flip_safe=bool(spec.get("flip_safe", family in _FLIP_SAFE_FAMILIES)),
        source=str(getattr(src, "source", "") or "synth"),
        meta={"family": family, "answer": getattr(src, "answer", "")},
    )


def synth_base_items(n: int, seed: int = 0) -> list[BaseItem]:
    """Base items from the PPJD synthetic generator (image items and text-only items).

    Raises ImportError naming the module when the PPJD generator is not installed.
    """
    from perception_judge.ppjd.synth import generate_items  # owned by the PPJD builder

    items = [from_source_item(s) for s in generate_items(n, seed)]
    if not any(i.text_only for i in items):
        with contextlib.suppress(TypeError, ValueError):  # a generator without the families filter
            items += [
                from_source_item(s) for s in generate_items(max(2, n // 4), seed + 1, families=["text"])
            ]
    return items


# --------------------------------------------------------------------------------------------------------------
# A small procedural base set of our own
# --------------------------------------------------------------------------------------------------------------

_COLOURS = {
    "red": (220, 40, 40),
    "blue": (40, 80, 220),
    "green": (40, 170, 70),
    "yellow": (235, 200, 30),
    "purple": (140, 60, 170),
    "orange": (240, 140, 30),
}
_NUM_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _shapes_item(i: int, rng: random.Random, size: int) -> BaseItem:
    colour, other = rng.sample(list(_COLOURS), 2)
    n, m = rng.randint(2, 6), rng.randint(1, 4)
    img = Image.new("RGB", (size, size), (250, 250, 250))
    d = ImageDraw.Draw(img)
    cells = rng.sample(range(16), n + m)
    cell = size // 4
    for k, c in enumerate(cells):
        x, y = (c % 4) * cell + cell // 6, (c // 4) * cell + cell // 6
        box = (x, y, x + cell * 2 // 3, y + cell * 2 // 3)
        if k < n:
            d.ellipse(box, fill=_COLOURS[colour])
        else:
            d.rectangle(box, fill=_COLOURS[other])
    q = f"How many {colour} circles are in the picture?"
    r = f"I count the {colour} circles one by one: there are {_NUM_WORDS[n]} of them. The final answer is {n}."
    caption = (
        f"The picture shows a plain light grey background divided into an invisible four by four grid. "
        f"There are {n} {colour} circles and {m} {other} squares placed in separate cells of the grid, with no "
        f"shape overlapping another. The circles are filled with a solid {colour} colour and have no outline, "
        f"and the squares are solid {other}. Nothing else appears in the picture: there is no text, no border "
        f"and no shadow, so the shapes and their colours are the only content."
    )
    return BaseItem(
        f"builtin-shapes-{i}",
        q,
        r,
        img,
        caption,
        [colour, "circles", "picture"],
        "shapes",
        flip_safe=True,
        source="builtin",
        meta={"answer": str(n)},
    )


def _bars_item(i: int, rng: random.Random, size: int) -> BaseItem:
    labels = ["Mon", "Tue", "Wed", "Thu"]
    values = [rng.randint(2, 9) for _ in labels]
    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)
    base, bw = size - 24, size // 6
    for k, (lab, v) in enumerate(zip(labels, values)):
        x = 12 + k * (bw + 10)
        d.rectangle((x, base - v * (base - 20) // 10, x + bw, base), fill=(60, 110, 200))
        d.text((x, base + 4), lab, fill=(0, 0, 0))
    j = rng.randrange(len(labels))
    q = f"What is the value of the bar labelled {labels[j]} in the bar chart?"
    r = f"The bar above {labels[j]} reaches the level {values[j]}, so its value is {values[j]}."
    caption = (
        "The image is a simple vertical bar chart on a white background with four blue bars of equal width. "
        "The bars are labelled Mon, Tue, Wed and Thu from left to right, with the labels written in small black "
        f"letters under each bar. Their heights are {', '.join(map(str, values))} units respectively on a scale "
        "from zero to ten. There is no title, no legend and no gridline, and the axis itself is not drawn, so "
        "the heights of the bars carry all of the information in the chart."
    )
    return BaseItem(
        f"builtin-bars-{i}",
        q,
        r,
        img,
        caption,
        ["value", "bar", labels[j], "chart"],
        "charts",
        flip_safe=False,
        source="builtin",
        meta={"answer": str(values[j])},
    )


def _table_item(i: int, rng: random.Random, size: int) -> BaseItem:
    names = rng.sample(["Alice", "Bob", "Carol", "Dan", "Eve", "Finn"], 3)
    ages = [rng.randint(18, 70) for _ in names]
    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)
    row = size // 5
    for k, (nm, age) in enumerate([("Name", "Age"), *zip(names, map(str, ages))]):
        y = 10 + k * row
        d.rectangle((8, y, size - 8, y + row), outline=(0, 0, 0))
        d.text((14, y + 4), nm, fill=(0, 0, 0))
        d.text((size // 2 + 6, y + 4), age, fill=(0, 0, 0))
    j = rng.randrange(len(names))
    q = f"According to the table, how old is {names[j]}?"
    r = f"The row for {names[j]} lists the age {ages[j]}, so {names[j]} is {ages[j]} years old."
    caption = (
        "The image shows a small table drawn with thin black lines on a white background. It has a header row "
        "with the column titles Name and Age, followed by three rows of data. "
        + " ".join(f"The row for {nm} gives the age {a}." for nm, a in zip(names, ages))
        + " The text is written in a plain black font, left aligned in each cell, and there are no colours, "
        "pictures or notes outside the table."
    )
    return BaseItem(
        f"builtin-table-{i}",
        q,
        r,
        img,
        caption,
        ["table", names[j], "old"],
        "tables",
        flip_safe=False,
        source="builtin",
        meta={"answer": str(ages[j])},
    )


def _text_item(i: int, rng: random.Random) -> BaseItem:
    a, b = rng.randint(12, 60), rng.randint(3, 30)
    q = f"A shelf holds {a} books and {b} more are added. How many books are on the shelf now?"
    r = f"Adding {b} books to the {a} already there gives {a} + {b} = {a + b}. The final answer is {a + b}."
    return BaseItem(
        f"builtin-text-{i}",
        q,
        r,
        None,
        "",
        ["shelf", "books", "added"],
        "arithmetic",
        source="builtin",
        meta={"answer": str(a + b)},
    )


def builtin_base_items(n_image: int = 6, n_text: int = 3, seed: int = 0, size: int = 224) -> list[BaseItem]:
    """A deterministic procedural base set: ``n_image`` image items cycling over shapes / bar chart / table,
    and ``n_text`` text-only items. Each image item has a 60-100-word caption and keywords."""
    rng = random.Random(f"builtin-base-items:{seed}")
    makers = (_shapes_item, _bars_item, _table_item)
    items = [makers[i % len(makers)](i, rng, size) for i in range(n_image)]
    items += [_text_item(i, rng) for i in range(n_text)]
    return items


__all__ = [
    "BaseItem",
    "builtin_base_items",
    "from_source_item",
    "query_keywords",
    "synth_base_items",
]
