"""Generators for the nine MM-JudgeBias perturbations (small pure functions seeded by an explicit
``random.Random``), and pairs built from any base set (:func:`build_pairs`). The upstream generators were never
released (defect B14): every parameter is *our choice* (docs/evaluation.md §2), none part of a paper-parity claim.
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont, ImageOps

from perception_judge.core.images import image_bytes, load_image, to_rgb
from perception_judge.evaluation.bias.items import BaseItem
from perception_judge.evaluation.bias.taxonomy import BY_TYPE, select

NULL_IMAGE_SIZE = 224
KEYWORDS_HEADER = "[KEYWORDS FROM QUESTION]"
QUERY_HEADER = "[QUESTION]"
BOX_GREY = (135, 135, 135)
BOTTOM_MARGIN = 18

GEOMETRIC_OPS = ("rotate90", "rotate180", "rotate270", "rotate_small", "hflip", "scale", "pad")
ORIENTATION_OPS = ("rotate90", "rotate180", "rotate270", "hflip")
"""Ops that change the orientation: used only on orientation-free items (``flip_safe``: shapes to count), never
on text, charts, tables or clocks, whose reading they would change."""
PHOTOMETRIC_OPS = ("brightness", "contrast", "saturation", "hue", "blur", "jpeg", "grayscale")
TRANSFORM_OPS = GEOMETRIC_OPS + PHOTOMETRIC_OPS
_ENHANCERS = {
    "brightness": (ImageEnhance.Brightness, 0.7, 1.3),
    "contrast": (ImageEnhance.Contrast, 0.7, 1.3),
    "saturation": (ImageEnhance.Color, 0.6, 1.4),
}


def null_image(size: int = NULL_IMAGE_SIZE) -> Image.Image:
    """The null image: black ``size × size`` RGB (sent as an image, never as "no image")."""
    return Image.new("RGB", (size, size), (0, 0, 0))


def null_image_jpeg(size: int = NULL_IMAGE_SIZE) -> bytes:
    """The null image JPEG-encoded as upstream ships it (decodes to all zeros)."""
    return image_bytes(null_image(size), "JPEG", quality=95)


def empty_query() -> str:
    return ""


def append_caption(query: str, caption: str) -> str:
    """``Q + " " + caption`` (the detail-description perturbation)."""
    if not caption.strip():
        raise ValueError("append_caption needs a non-empty caption")
    return f"{query} {caption.strip()}"


def pick_donor(
    item: BaseItem, pool: list[BaseItem], rng: random.Random, need_image: bool = False
) -> BaseItem:
    """Another item of the pool (different id, query and image), preferably from another domain."""
    candidates = [
        d
        for d in pool
        if d.item_id != item.item_id
        and d.query != item.query
        and (not need_image or d.image is not None)
        and (d.image is None or item.image is None or d.image is not item.image)
    ]
    if not candidates:
        what = "an image item" if need_image else "an item"
        raise ValueError(f"no donor for item {item.item_id!r}: the base set has no other {what}")
    other_domain = [d for d in candidates if d.domain != item.domain or not item.domain]
    return rng.choice(other_domain or candidates)


def swap_query(item: BaseItem, pool: list[BaseItem], rng: random.Random) -> tuple[str, BaseItem]:
    """(an unrelated query, its donor item)."""
    donor = pick_donor(item, pool, rng)
    return donor.query, donor


def swap_image(item: BaseItem, pool: list[BaseItem], rng: random.Random) -> tuple[Image.Image, BaseItem]:
    """(an unrelated image, its donor item)."""
    donor = pick_donor(item, pool, rng, need_image=True)
    return donor.image, donor


def attach_unrelated_image(
    item: BaseItem, pool: list[BaseItem], rng: random.Random
) -> tuple[Image.Image, BaseItem]:
    """(an unrelated image for a text-only item, its donor item)."""
    if item.image is not None:
        raise ValueError(f"attach_unrelated_image needs a text-only item; {item.item_id!r} has an image")
    return swap_image(item, pool, rng)


def _fill_colour(img: Image.Image, rng: random.Random) -> tuple[int, int, int]:
    """White or the image's mean colour, at random."""
    if rng.random() < 0.5:
        return (255, 255, 255)
    return tuple(img.resize((1, 1), Image.Resampling.BOX).getpixel((0, 0)))[:3]


def apply_op(img: Image.Image, op: str, rng: random.Random) -> tuple[Image.Image, str]:
    """Apply one named op with a random parameter from its range; returns (image, description)."""
    img = to_rgb(img)
    w, h = img.size
    if op in ("rotate90", "rotate180", "rotate270"):
        return img.rotate(int(op[len("rotate") :]), expand=True), op
    if op == "hflip":
        return ImageOps.mirror(img), op
    if op == "grayscale":
        return ImageOps.grayscale(img).convert("RGB"), op
    if op in _ENHANCERS:
        enhancer, low, high = _ENHANCERS[op]
        f = rng.uniform(low, high)
        return enhancer(img).enhance(f), f"{op}({f:.2f})"
    if op == "rotate_small":
        angle = rng.uniform(5, 15) * rng.choice((-1, 1))
        out = img.rotate(angle, Image.Resampling.BICUBIC, expand=True, fillcolor=_fill_colour(img, rng))
        return out, f"rotate({angle:+.1f})"
    if op == "scale":
        f = rng.uniform(0.8, 1.2)
        out = img.resize((max(1, round(w * f)), max(1, round(h * f))), Image.Resampling.BICUBIC)
        return out, f"scale({f:.2f})"
    if op == "pad":
        f = rng.uniform(1.05, 1.2)
        W, H = max(w + 2, round(w * f)), max(h + 2, round(h * f))
        canvas = Image.new("RGB", (W, H), _fill_colour(img, rng))
        canvas.paste(img, ((W - w) // 2, (H - h) // 2))
        return canvas, f"pad({f:.2f})"
    if op == "hue":
        shift = rng.uniform(-0.05, 0.05)
        delta = round(shift * 255)
        hue, sat, val = img.convert("HSV").split()
        out = Image.merge("HSV", (hue.point(lambda x: (x + delta) % 256), sat, val)).convert("RGB")
        return out, f"hue({shift:+.3f})"
    if op == "blur":
        sigma = rng.uniform(0.5, 1.5)
        return img.filter(ImageFilter.GaussianBlur(sigma)), f"blur({sigma:.2f})"
    if op == "jpeg":
        q = rng.randint(30, 70)
        return load_image(image_bytes(img, "JPEG", quality=q)), f"jpeg(q={q})"
    raise ValueError(f"unknown visual transformation {op!r}; known: {', '.join(TRANSFORM_OPS)}")


def visual_transform(
    img: Image.Image,
    rng: random.Random,
    ops: list[str] | tuple[str, ...] | None = None,
    flip_safe: bool = False,
) -> tuple[Image.Image, list[str]]:
    """A semantics-preserving transformation: ``ops`` applied in order, or 1-2 random ops (at most one
    geometric, at most one photometric). Orientation changes (flips, quarter turns) only when ``flip_safe``.
    Returns (image, descriptions of the ops done)."""
    if ops is None:
        geo = [o for o in GEOMETRIC_OPS if flip_safe or o not in ORIENTATION_OPS]
        if rng.choice((1, 2)) == 2:
            ops = [rng.choice(geo), rng.choice(PHOTOMETRIC_OPS)]
        else:
            ops = [rng.choice(geo + list(PHOTOMETRIC_OPS))]
    done = []
    out = to_rgb(img)
    for op in ops:
        if op in ORIENTATION_OPS and not flip_safe:
            raise ValueError(
                f"{op} changes the meaning of images with text, charts or clocks; pass flip_safe=True"
            )
        out, desc = apply_op(out, op, rng)
        done.append(desc)
    return out, done


def _layout(
    draw: ImageDraw.ImageDraw, header: str, body: str, width: int, size: int
) -> tuple[list[str], int, int, bool]:
    """Wrap header + body to ``width`` px at font ``size``; returns (lines, line height, block height, whether
    every line fits the width). Words are never split."""
    font = ImageFont.load_default(size=size)
    chars = max(4, int(width / max(1.0, draw.textlength("abcdefghijklmnopqrstuvwxyz", font=font) / 26)))
    lines = [line for text in (header, body) for line in textwrap.wrap(text, chars, break_long_words=False)]
    fits = all(draw.textlength(line, font=font) + 4 <= width for line in lines)
    top, bottom = draw.textbbox((0, 0), "Ag[]", font=font, stroke_width=2)[1::2]
    line_h = bottom - top + max(2, size // 4)
    return lines, line_h, line_h * len(lines), fits


def insert_text(
    img: Image.Image,
    keywords: list[str] | None = None,
    query: str | None = None,
    mode: str = "keywords",
    rng: random.Random | None = None,
) -> tuple[Image.Image, dict[str, Any]]:
    """Render the query keywords (``mode="keywords"``) or the query (``mode="query"``) in a strip below the image
    (the layout of docs/evaluation.md §2: :data:`BOX_GREY` box :data:`BOTTOM_MARGIN` px above the bottom, first line
    :data:`KEYWORDS_HEADER` or :data:`QUERY_HEADER`). Returns (image, info with ``lines``, ``text``,
    ``strip_height``, ``box`` and ``font_size``)."""
    if mode == "keywords" and keywords:
        header, body = KEYWORDS_HEADER, ", ".join(keywords)
    elif mode == "query" and query:
        header, body = QUERY_HEADER, query
    else:
        raise ValueError(
            f"insert_text(mode={mode!r}): give keywords with mode 'keywords' or a query with 'query'"
        )
    rng = rng or random.Random(0)
    img = to_rgb(img)
    w, h = img.size
    strip = max(1, round(h * rng.uniform(0.30, 0.45)))
    margin_x, pad = max(4, w // 20), max(3, w // 40)
    probe = ImageDraw.Draw(Image.new("RGB", (8, 8)))
    size = max(10, min(28, round(strip * 0.16)))
    while True:  # shrink the font until the text fits the strip (down to 10 px) and the width (down to 6 px)
        lines, line_h, block_h, fits = _layout(probe, header, body, w - 2 * margin_x - 2 * pad, size)
        tall = block_h + 2 * pad + BOTTOM_MARGIN + 6 > strip
        if size <= 6 or (fits and (not tall or size <= 10)):
            break
        size -= 1
    strip = max(strip, block_h + 2 * pad + BOTTOM_MARGIN + 6)
    canvas = Image.new("RGB", (w, h + strip), (255, 255, 255))
    canvas.paste(img, (0, 0))
    draw = ImageDraw.Draw(canvas)
    box_h = block_h + 2 * pad
    y1 = h + strip - BOTTOM_MARGIN
    box = (margin_x, y1 - box_h, w - margin_x, y1)
    draw.rounded_rectangle(box, radius=max(3, min(12, box_h // 4)), fill=BOX_GREY)
    font = ImageFont.load_default(size=size)
    for i, line in enumerate(lines):
        x = (w - draw.textlength(line, font=font)) / 2
        y = box[1] + pad + i * line_h
        draw.text((x, y), line, font=font, fill=(255, 255, 255), stroke_width=2, stroke_fill=(0, 0, 0))
    return canvas, {"lines": lines, "text": body, "strip_height": strip, "box": box, "font_size": size}


@dataclass
class BiasSide:
    """One side of a pair. ``image`` is a PIL image, an image cell / path (official data), or None (no image
    part at all). ``query_source`` / ``image_source`` name the item the query / image came from."""

    query: str
    image: Any = None
    query_source: str = ""
    image_source: str | None = None


@dataclass
class BiasPair:
    """An unbiased and a biased input sharing one response; ``meta``: the MM-JudgeBias metadata fields
    (:data:`~.loader.META_FIELDS`) plus generator details."""

    pair_id: int
    bias_type: str
    response: str
    unbiased: BiasSide
    biased: BiasSide
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def category(self) -> str:
        return BY_TYPE[self.bias_type].category


def _eligible(bias_type: str, item: BaseItem) -> bool:
    if bias_type == "unnecessary_image":
        return item.text_only
    return not item.text_only and (bias_type != "detail_description" or bool(item.caption.strip()))


def make_pair(
    pair_id: int,
    bias_type: str,
    item: BaseItem,
    pool: list[BaseItem],
    rng: random.Random,
    insertion_mode: str = "keywords",
) -> BiasPair:
    """The pair of one bias type for one base item."""
    unbiased = BiasSide(item.query, item.image, item.item_id, None if item.text_only else item.item_id)
    q, img, q_src, img_src = item.query, item.image, item.item_id, unbiased.image_source
    extra: dict[str, Any] = {}
    if bias_type in ("text_dominance", "response_dominance"):
        img, img_src = null_image(), "null"
    if bias_type in ("image_dominance", "response_dominance"):
        q, q_src = empty_query(), "empty"
    if bias_type == "instruction_misalignment":
        q, donor = swap_query(item, pool, rng)
        q_src = donor.item_id
    if bias_type in ("image_misalignment", "unnecessary_image"):
        swap = swap_image if bias_type == "image_misalignment" else attach_unrelated_image
        img, donor = swap(item, pool, rng)
        img_src = donor.item_id
    if bias_type == "detail_description":
        q = append_caption(item.query, item.caption)
    if bias_type == "visual_transformation":
        img, extra["ops"] = visual_transform(item.image, rng, flip_safe=item.flip_safe)
    if bias_type == "texture_insertion":
        keywords = item.keywords_or_query()
        img, info = insert_text(item.image, keywords=keywords, query=item.query, mode=insertion_mode, rng=rng)
        extra["inserted_text"] = info["text"]
    meta = {"bias_category": BY_TYPE[bias_type].category, "task_type": item.meta.get("task_type", "")}
    meta |= {"domain_type": item.domain, "difficulty": item.meta.get("difficulty", "")}
    meta |= {"unbiased_source": item.source, "biased_source": item.source, "item_id": item.item_id, **extra}
    return BiasPair(pair_id, bias_type, item.response, unbiased, BiasSide(q, img, q_src, img_src), meta)


def build_pairs(
    items: list[BaseItem],
    n_per_type: int | None = None,
    bias_types: list[str] | tuple[str, ...] | None = None,
    seed: int = 0,
    insertion_mode: str = "keywords",
) -> list[BiasPair]:
    """Pairs for every requested bias type (canonical order, ids 0..N-1 in blocks by type, as upstream):
    ``n_per_type`` items per type drawn (seeded) from the eligible ones (None = all): types 1-6, 8, 9 image items
    (6 with a caption), type 7 text-only items. A type without an eligible item raises ``ValueError`` naming it."""
    pairs: list[BiasPair] = []
    for spec in select(bias_types):
        rng = random.Random(f"bias-pairs:{seed}:{spec.bias_type}")
        eligible = [i for i in items if _eligible(spec.bias_type, i)]
        if not eligible:
            need = "text-only items" if spec.bias_type == "unnecessary_image" else "image items"
            raise ValueError(f"bias type {spec.bias_type!r} needs {need}; the base set has none")
        rng.shuffle(eligible)
        for item in eligible[:n_per_type]:
            pairs.append(make_pair(len(pairs), spec.bias_type, item, items, rng, insertion_mode))
    return pairs
