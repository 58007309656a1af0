"""The synthetic perceptual source: procedural images whose every perceptual attribute is known exactly.

Four image families and one text-only family:

* ``objects`` -- solid circles, squares and triangles in named colours on a 4x4 grid (counting questions);
* ``bars``    -- a labelled bar chart with printed values (reading, sums, differences, the largest bar);
* ``table``   -- a small priced order table (look-ups, price x quantity, column totals);
* ``clock``   -- an analogue clock with a blue hour hand and a red minute hand (reading, adding minutes);
* ``text``    -- arithmetic word problems with no image (the unnecessary-image bias needs them).

Every item has a scene spec (``item.spec``): ``family``, ``qtype``, ``params`` (what the question asks
about), ``attributes`` (the perceptual facts, enough to redraw the image), ``facts`` (3-6 short phrases of
them), ``caption`` (a 60-100-word description templated from the spec; empty for text items), ``keywords``
(3-6 query keywords) and ``domain``.

Responses are *rendered from the facts*: :func:`solve` turns (question params, perceived attributes, optional
reasoning slip) into a step-by-step response ending in ``\\boxed{}``. The correct response r_c is
``solve(spec)``; the programmatic teacher renders the counterfactuals from perturbed attributes with the same
template, so r_rp keeps r_c's wording with only the perceptual facts and what follows from them changed.

Items are deterministic per (seed, index): ``generate_items(10, s)[:5] == generate_items(5, s)``.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from perception_judge.core.io import atomic_open, atomic_write_text, progress_bar
from perception_judge.core.schema import SourceItem

SPEC_VERSION = 1
IMAGE_SIZE = 256
FAMILIES: tuple[str, ...] = ("objects", "bars", "table", "clock")
TEXT_FAMILY = "text"
TINY_FAMILIES: tuple[str, ...] = ("colour", "count")
ALL_FAMILIES: tuple[str, ...] = (*FAMILIES, *TINY_FAMILIES, TEXT_FAMILY)
DEFAULT_TEXT_ONLY_FRACTION = 0.15

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
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
TABLE_HEADER_RGB = (200, 220, 245)
TABLE_GRID_RGB = (110, 110, 110)
CLOCK_HOUR_HAND = "blue"
CLOCK_MINUTE_HAND = "red"

DOMAINS = {
    "objects": "counting",
    "bars": "chart",
    "table": "document",
    "clock": "clock reading",
    "text": "math word problem",
    "colour": "colour",
    "count": "counting",
}


class Unsolvable(ValueError):
    """A (perceived or perturbed) scene gives the question no well-defined answer, or a slip does not apply."""


# --------------------------------------------------------------------------------------------------------------
# Small text helpers
# --------------------------------------------------------------------------------------------------------------


def _plural(word: str, n: int) -> str:
    if n == 1:
        return word
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    return word + "s"


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def _join(parts: Sequence[str]) -> str:
    parts = list(parts)
    if not parts:
        return "nothing"
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _boxed(answer: str) -> str:
    return f"So the answer is \\boxed{{{answer}}}."


def _response(steps: Sequence[str], answer: str) -> str:
    return "\n".join(steps) + "\n\n" + _boxed(answer)


def word_count(text: str) -> int:
    return len(text.split())


def _fit_caption(required: Sequence[str], optional: Sequence[str]) -> str:
    """Required sentences plus as many optional ones as keep the caption within 60-100 words."""
    text = " ".join(required)
    for sentence in optional:
        if word_count(text) >= 60:
            break
        if word_count(text) + word_count(sentence) <= 100:
            text += " " + sentence
    return text


_STOP = {
    "a", "an", "the", "of", "in", "is", "are", "how", "many", "what", "which", "does", "do", "there", "and",
    "to", "on", "it", "its", "be", "by", "for", "with", "than", "get", "will", "after", "that", "this",
    "shown", "image", "each", "has", "have", "at", "as", "much", "more", "when", "from", "one", "answer",
    "format", "mm", "according", "these", "altogether",
}  # fmt: skip


def _keywords(question: str, extra: Sequence[str]) -> list[str]:
    words = re.findall(r"[A-Za-z][A-Za-z'-]+|\d+", question)
    out: list[str] = []
    for w in words:
        lw = w.lower().strip("'")
        if lw in _STOP or len(lw) < 2 or lw in out:
            continue
        out.append(lw)
    out = out[:5]
    for e in extra:  # the first family word always, more while there are fewer than 3 keywords
        if e not in out and (len(out) < 3 or e == extra[0]):
            out.append(e)
    return out[:6]


@lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _text_centered(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, size: int, fill) -> None:
    font = _font(size)
    box = draw.textbbox((0, 0), text, font=font)
    w, h = box[2] - box[0], box[3] - box[1]
    draw.text((xy[0] - w / 2 - box[0], xy[1] - h / 2 - box[1]), text, font=font, fill=fill)


# --------------------------------------------------------------------------------------------------------------
# Family: objects
# --------------------------------------------------------------------------------------------------------------


def _group_phrase(g: dict[str, Any]) -> str:
    return f"{g['count']} {g['colour']} {_plural(g['shape'], g['count'])}"


def _objects_scene(rng: random.Random) -> dict[str, Any]:
    n_groups = rng.randint(2, 4)
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    rng.shuffle(combos)
    chosen = combos[:n_groups]
    counts = [rng.randint(1, 4) for _ in chosen]
    while sum(counts) > 12:
        counts[counts.index(max(counts))] -= 1
    groups = [{"colour": c, "shape": s, "count": k} for (c, s), k in zip(chosen, counts)]
    cells = rng.sample(range(16), sum(counts))
    objects = []
    it = iter(cells)
    for g in groups:
        for _ in range(g["count"]):
            cell = next(it)
            row, col = divmod(cell, 4)
            size = rng.randint(30, 40)
            objects.append(
                {
                    "shape": g["shape"],
                    "colour": g["colour"],
                    "cx": col * 64 + 32 + rng.randint(-6, 6),
                    "cy": row * 64 + 32 + rng.randint(-6, 6),
                    "size": size,
                }
            )
    return {"background": "white", "groups": groups, "objects": objects, "total": sum(counts)}


def _objects_draw(attrs: dict[str, Any]) -> Image.Image:
    img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    d = ImageDraw.Draw(img)
    for o in attrs["objects"]:
        cx, cy, h = o["cx"], o["cy"], o["size"] // 2
        fill = COLOURS[o["colour"]]
        if o["shape"] == "circle":
            d.ellipse((cx - h, cy - h, cx + h, cy + h), fill=fill)
        elif o["shape"] == "square":
            s = round(h * 0.85)
            d.rectangle((cx - s, cy - s, cx + s, cy + s), fill=fill)
        else:
            d.polygon([(cx, cy - h), (cx + h, cy + h), (cx - h, cy + h)], fill=fill)
    return img


def _objects_question(attrs: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any], str]:
    groups = attrs["groups"]
    colour_counts: dict[str, int] = {}
    for g in groups:
        colour_counts[g["colour"]] = colour_counts.get(g["colour"], 0) + g["count"]
    options = ["count", "count_colour", "total"]
    pairs = [(a, b) for a in colour_counts for b in colour_counts if colour_counts[a] > colour_counts[b]]
    if pairs:
        options.append("more")
    qtype = rng.choice(options)
    if qtype == "count":
        g = rng.choice(groups)
        params = {"colour": g["colour"], "shape": g["shape"]}
        q = f"How many {g['colour']} {_plural(g['shape'], 2)} are there in the image?"
    elif qtype == "count_colour":
        colour = rng.choice(sorted(colour_counts))
        params = {"colour": colour}
        q = f"How many {colour} shapes are there in the image?"
    elif qtype == "total":
        params = {}
        q = "How many shapes are there in the image altogether?"
    else:
        a, b = rng.choice(pairs)
        params = {"colour_a": a, "colour_b": b}
        q = f"How many more {a} shapes than {b} shapes are there in the image?"
    return qtype, params, q


def _groups_listing(groups: list[dict[str, Any]]) -> str:
    return _join([_group_phrase(g) for g in groups])


def _step_listing(attrs: dict[str, Any]) -> str:
    return f"Step 1: Look at every shape in the image. I can see {_groups_listing(attrs['groups'])}."


def _solve_objects_count(params, attrs, slip):
    c, s = params["colour"], params["shape"]
    groups = attrs["groups"]
    n = sum(g["count"] for g in groups if g["colour"] == c and g["shape"] == s)
    steps = [_step_listing(attrs)]
    kind = slip["kind"] if slip else None
    if kind is None:
        steps.append(f"Step 2: Pick out the {c} {_plural(s, 2)}: there {_are(n)} {n} of them.")
        return _response(steps, str(n)), str(n)
    if kind == "ignore_colour":
        m = sum(g["count"] for g in groups if g["shape"] == s)
        steps.append(f"Step 2: Pick out the {_plural(s, 2)}: there {_are(m)} {m} of them.")
    elif kind == "ignore_shape":
        m = sum(g["count"] for g in groups if g["colour"] == c)
        steps.append(f"Step 2: Pick out the {c} shapes: there {_are(m)} {m} of them.")
    elif kind == "count_all":
        m = sum(g["count"] for g in groups)
        steps.append(f"Step 2: Count the shapes: there {_are(m)} {m} of them.")
    else:
        raise Unsolvable(f"slip {kind!r} does not apply")
    if m == n:
        raise Unsolvable("the slip does not change the answer")
    return _response(steps, str(m)), str(m)


def _sum_line(step: int, terms: list[int], slip: dict | None) -> tuple[str, int]:
    total = sum(terms)
    kind = slip["kind"] if slip else None
    if kind == "omit":
        if len(terms) < 2:
            raise Unsolvable("nothing to omit")
        terms = terms[:-1]
        total = sum(terms)
    elif kind == "arith":
        if len(terms) < 2:
            raise Unsolvable("no arithmetic to get wrong")
        total += slip.get("delta", 1)
    elif kind is not None:
        raise Unsolvable(f"slip {kind!r} does not apply")
    return f"Step {step}: Adding them up: {' + '.join(map(str, terms))} = {total}.", total


def _solve_objects_count_colour(params, attrs, slip):
    c = params["colour"]
    groups = attrs["groups"]
    sel = [g for g in groups if g["colour"] == c]
    steps = [_step_listing(attrs)]
    if not sel:
        if slip:
            raise Unsolvable("no terms for a slip")
        steps.append(f"Step 2: I cannot find any {c} shapes.")
        steps.append(f"Step 3: So there are 0 {c} shapes.")
        return _response(steps, "0"), "0"
    if slip and slip["kind"] == "other_colour":  # counts a group of another colour as well
        others = [g for g in groups if g["colour"] != c]
        if not others:
            raise Unsolvable("no other colour to confuse")
        sel = [*sel, others[0]]
        slip = None
    parts = [f"{g['count']} {_plural(g['shape'], g['count'])}" for g in sel]
    steps.append(f"Step 2: The {c} shapes are {_join(parts)}.")
    terms = [g["count"] for g in sel]
    if len(terms) == 1 and not slip:
        steps.append(f"Step 3: So there {_are(terms[0])} {terms[0]} {c} {_plural('shape', terms[0])}.")
        return _response(steps, str(terms[0])), str(terms[0])
    line, total = _sum_line(3, terms, slip)
    steps.append(line)
    return _response(steps, str(total)), str(total)


def _solve_objects_total(params, attrs, slip):
    terms = [g["count"] for g in attrs["groups"]]
    steps = [_step_listing(attrs)]
    line, total = _sum_line(2, terms, slip)
    steps.append(line)
    return _response(steps, str(total)), str(total)


def _solve_objects_more(params, attrs, slip):
    a, b = params["colour_a"], params["colour_b"]
    na = sum(g["count"] for g in attrs["groups"] if g["colour"] == a)
    nb = sum(g["count"] for g in attrs["groups"] if g["colour"] == b)
    steps = [
        _step_listing(attrs),
        f"Step 2: There {_are(na)} {na} {a} {_plural('shape', na)} and {nb} {b} {_plural('shape', nb)}.",
    ]
    kind = slip["kind"] if slip else None
    if kind == "wrong_op":
        d = na + nb
        steps.append(f"Step 3: The difference is {na} + {nb} = {d}.")
    else:
        d = na - nb
        if kind == "arith":
            d += slip.get("delta", 1)
        elif kind is not None:
            raise Unsolvable(f"slip {kind!r} does not apply")
        steps.append(f"Step 3: The difference is {na} - {nb} = {d}.")
    if d < 0:
        raise Unsolvable("negative difference")
    return _response(steps, str(d)), str(d)


def _objects_perturb(attrs: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    new = copy.deepcopy(attrs)
    groups = new["groups"]
    relevant = [
        g
        for g in groups
        if g["colour"] in (params.get("colour"), params.get("colour_a"), params.get("colour_b"))
        and params.get("shape") in (None, g["shape"])
    ] or groups
    g = rng.choice(relevant if rng.random() < 0.8 else groups)
    if rng.random() < 0.7:
        g["count"] = max(1, g["count"] + rng.choice((-2, -1, 1, 1, 2)))
    else:
        taken = {(x["colour"], x["shape"]) for x in groups}
        colours = [c for c in COLOURS if (c, g["shape"]) not in taken]
        if colours:
            g["colour"] = rng.choice(colours)
    new["total"] = sum(x["count"] for x in groups)
    return new


def _objects_facts(attrs: dict[str, Any]) -> list[str]:
    facts = [_group_phrase(g) for g in attrs["groups"]]
    facts.append(f"{attrs['total']} shapes in total")
    if len(facts) < 3:
        facts.append("a plain white background")
    return facts[:6]


def _objects_caption(attrs: dict[str, Any]) -> str:
    objs = attrs["objects"]
    tl = min(objs, key=lambda o: o["cx"] + o["cy"])
    br = max(objs, key=lambda o: o["cx"] + o["cy"])
    n = attrs["total"]
    required = [
        f"This is a simple computer-drawn picture on a plain white background containing {n} flat geometric "
        f"{_plural('shape', n)}.",
        f"Specifically, there {_are(attrs['groups'][0]['count'])} {_groups_listing(attrs['groups'])}.",
        f"The shape nearest the top left corner is {_a(tl['colour'])} {tl['shape']}, and the one nearest the "
        f"bottom right corner is {_a(br['colour'])} {br['shape']}.",
    ]
    optional = [
        "The shapes are spread over an invisible four-by-four grid with clear gaps, so no two of them touch "
        "or overlap.",
        "Every shape is filled with one solid colour and has no outline, shadow or label.",
        "There is no text anywhere in the picture.",
        "The style is flat and schematic, like an illustration from a counting exercise.",
    ]
    return _fit_caption(required, optional)


# --------------------------------------------------------------------------------------------------------------
# Family: bars
# --------------------------------------------------------------------------------------------------------------

_BAR_TOPICS = (
    ("Books read per day", ("Mon", "Tue", "Wed", "Thu", "Fri")),
    ("Boxes of fruit sold", ("Apples", "Pears", "Plums", "Figs", "Limes")),
    ("Goals scored per team", ("Lions", "Bears", "Hawks", "Wolves", "Foxes")),
    ("Rainy days per month", ("Jan", "Feb", "Mar", "Apr", "May")),
)
_BAR_Y_MAX = 10
_PLOT_TOP, _PLOT_BOTTOM, _PLOT_LEFT, _PLOT_RIGHT = 36, 206, 34, 248


def bar_unit_px() -> float:
    """Pixels per unit of value on the bar chart's y axis."""
    return (_PLOT_BOTTOM - _PLOT_TOP) / _BAR_Y_MAX


def _bars_scene(rng: random.Random) -> dict[str, Any]:
    title, labels = rng.choice(_BAR_TOPICS)
    n = rng.randint(3, 5)
    values = rng.sample(range(1, _BAR_Y_MAX + 1), n)
    colours = rng.sample(list(COLOURS), n)
    bars = [{"label": lab, "value": v, "colour": c} for lab, v, c in zip(labels[:n], values, colours)]
    return {"chart": "bar", "title": title, "bars": bars, "y_max": _BAR_Y_MAX}


def bar_geometry(n: int, index: int) -> tuple[int, int]:
    """(left x, right x) of bar ``index`` of ``n`` (inclusive pixel columns)."""
    slot = (_PLOT_RIGHT - _PLOT_LEFT) / n
    width = int(slot * 0.6)
    x0 = int(_PLOT_LEFT + slot * index + (slot - width) / 2)
    return x0, x0 + width - 1


def _bars_draw(attrs: dict[str, Any]) -> Image.Image:
    img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    d = ImageDraw.Draw(img)
    _text_centered(d, (IMAGE_SIZE / 2, 14), attrs["title"], 13, (0, 0, 0))
    unit = bar_unit_px()
    for v in range(0, _BAR_Y_MAX + 1, 2):
        y = round(_PLOT_BOTTOM - v * unit)
        d.line((_PLOT_LEFT - 4, y, _PLOT_LEFT, y), fill=(0, 0, 0))
        _text_centered(d, (_PLOT_LEFT - 14, y), str(v), 10, (0, 0, 0))
    bars = attrs["bars"]
    for i, b in enumerate(bars):
        x0, x1 = bar_geometry(len(bars), i)
        top = round(_PLOT_BOTTOM - b["value"] * unit)
        d.rectangle((x0, top, x1, _PLOT_BOTTOM - 1), fill=COLOURS[b["colour"]])
        _text_centered(d, ((x0 + x1) / 2, top - 9), str(b["value"]), 12, (0, 0, 0))
        _text_centered(d, ((x0 + x1) / 2, _PLOT_BOTTOM + 14), b["label"], 11, (0, 0, 0))
    d.line((_PLOT_LEFT, _PLOT_TOP - 6, _PLOT_LEFT, _PLOT_BOTTOM), fill=(0, 0, 0))
    d.line((_PLOT_LEFT, _PLOT_BOTTOM, _PLOT_RIGHT, _PLOT_BOTTOM), fill=(0, 0, 0))
    return img


def _bars_question(attrs: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any], str]:
    bars = attrs["bars"]
    qtype = rng.choice(["value", "sum", "diff", "argmax"])
    if qtype == "value":
        b = rng.choice(bars)
        return qtype, {"label": b["label"]}, f"What value does the bar for {b['label']} show in the chart?"
    if qtype == "sum":
        a, b = rng.sample(bars, 2)
        return (
            qtype,
            {"a": a["label"], "b": b["label"]},
            f"What is the sum of the values for {a['label']} and {b['label']} in the chart?",
        )
    if qtype == "diff":
        return qtype, {}, "What is the difference between the highest and the lowest value in the chart?"
    return qtype, {}, "Which category has the highest value in the chart?"


def _values(attrs: dict[str, Any]) -> dict[str, int]:
    return {b["label"]: b["value"] for b in attrs["bars"]}


def _step_read_bars(attrs: dict[str, Any]) -> str:
    listing = ", ".join(f"{b['label']} = {b['value']}" for b in attrs["bars"])
    return f"Step 1: Read the value printed on each bar: {listing}."


def _solve_bars_value(params, attrs, slip):
    vals = _values(attrs)
    label = params["label"]
    v = vals[label]
    if slip:
        if slip["kind"] != "neighbour":
            raise Unsolvable("slip does not apply")
        labels = list(vals)
        i = labels.index(label)
        j = i + 1 if i + 1 < len(labels) else i - 1
        v = vals[labels[j]]
        if v == vals[label]:
            raise Unsolvable("the neighbour has the same value")
    steps = [_step_read_bars(attrs), f"Step 2: The bar for {label} shows {v}."]
    return _response(steps, str(v)), str(v)


def _solve_bars_sum(params, attrs, slip):
    vals = _values(attrs)
    a, b = params["a"], params["b"]
    va, vb = vals[a], vals[b]
    steps = [_step_read_bars(attrs), f"Step 2: {a} is {va} and {b} is {vb}."]
    kind = slip["kind"] if slip else None
    if kind == "wrong_op":
        s = va - vb
        steps.append(f"Step 3: {va} - {vb} = {s}.")
    else:
        s = va + vb + (slip.get("delta", 1) if kind == "arith" else 0)
        if kind not in (None, "arith"):
            raise Unsolvable("slip does not apply")
        steps.append(f"Step 3: {va} + {vb} = {s}.")
    return _response(steps, str(s)), str(s)


def _extremes(vals: dict[str, int]) -> tuple[str, str]:
    ordered = sorted(vals.values())
    if len(ordered) < 2 or ordered[-1] == ordered[-2] or ordered[0] == ordered[1]:
        raise Unsolvable("tied highest or lowest bar")
    hi = max(vals, key=vals.__getitem__)
    lo = min(vals, key=vals.__getitem__)
    return hi, lo


def _solve_bars_diff(params, attrs, slip):
    vals = _values(attrs)
    hi, lo = _extremes(vals)
    kind = slip["kind"] if slip else None
    if kind == "second":
        ranked = sorted(vals, key=vals.__getitem__, reverse=True)
        hi = ranked[1]
        if hi == lo:
            raise Unsolvable("only two bars")
    steps = [
        _step_read_bars(attrs),
        f"Step 2: The highest bar is {hi} with {vals[hi]} and the lowest bar is {lo} with {vals[lo]}.",
    ]
    d = vals[hi] - vals[lo]
    if kind == "arith":
        d += slip.get("delta", 1)
    elif kind not in (None, "second"):
        raise Unsolvable("slip does not apply")
    steps.append(f"Step 3: {vals[hi]} - {vals[lo]} = {d}.")
    return _response(steps, str(d)), str(d)


def _solve_bars_argmax(params, attrs, slip):
    vals = _values(attrs)
    hi, lo = _extremes(vals)
    pick = hi
    if slip:
        if slip["kind"] != "lowest":
            raise Unsolvable("slip does not apply")
        pick = lo
    steps = [
        _step_read_bars(attrs),
        f"Step 2: Comparing the bars, the tallest one is {pick} with {vals[pick]}.",
    ]
    return _response(steps, pick), pick


def _bars_perturb(attrs: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    new = copy.deepcopy(attrs)
    bars = new["bars"]
    named = [b for b in bars if b["label"] in (params.get("label"), params.get("a"), params.get("b"))]
    if rng.random() < 0.25 and len(bars) >= 2:
        x, y = rng.sample(bars, 2)
        x["value"], y["value"] = y["value"], x["value"]
        return new
    b = rng.choice(named if named and rng.random() < 0.85 else bars)
    b["value"] = min(_BAR_Y_MAX + 2, max(1, b["value"] + rng.choice((-3, -2, -1, 1, 2, 3))))
    return new


def _bars_facts(attrs: dict[str, Any]) -> list[str]:
    facts = [f"the {b['label']} bar shows {b['value']}" for b in attrs["bars"]]
    return facts[:6]


def _bars_caption(attrs: dict[str, Any]) -> str:
    bars = attrs["bars"]
    vals = _values(attrs)
    hi, lo = max(vals, key=vals.__getitem__), min(vals, key=vals.__getitem__)
    labels = [b["label"] for b in bars]
    colours = [f"{b['label']} is {b['colour']}" for b in bars]
    values = [f"{b['label']} {b['value']}" for b in bars]
    required = [
        f'The image is a vertical bar chart titled "{attrs["title"]}" on a white background.',
        f"It has {len(bars)} bars, one each for {_join(labels)}, and each bar has its own colour: "
        f"{_join(colours)}.",
        f"The value of every bar is printed just above it: {_join(values)}.",
        f"The tallest bar is {hi} and the shortest is {lo}.",
    ]
    optional = [
        "A vertical axis on the left runs from 0 to 10 with tick labels every two units.",
        "The category names are written below the horizontal axis.",
        "There is no legend and no grid.",
    ]
    return _fit_caption(required, optional)


# --------------------------------------------------------------------------------------------------------------
# Family: table
# --------------------------------------------------------------------------------------------------------------

_TABLE_TOPICS = (
    ("Stationery order", ("Pens", "Pencils", "Rulers", "Erasers", "Notebooks", "Folders")),
    ("Bakery order", ("Muffins", "Bagels", "Scones", "Cookies", "Donuts", "Pretzels")),
    ("Garden order", ("Seeds", "Pots", "Gloves", "Rakes", "Hoses", "Trowels")),
)
TABLE_ROW_H = 30
TABLE_TOP = 36
TABLE_COLS = (12, 120, 190, 244)


def _table_scene(rng: random.Random) -> dict[str, Any]:
    title, items = rng.choice(_TABLE_TOPICS)
    n = rng.randint(3, 5)
    names = rng.sample(items, n)
    rows = [{"item": name, "price": rng.randint(1, 9), "qty": rng.randint(1, 9)} for name in names]
    return {"title": title, "columns": ["Item", "Price ($)", "Qty"], "rows": rows}


def _table_draw(attrs: dict[str, Any]) -> Image.Image:
    img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    d = ImageDraw.Draw(img)
    _text_centered(d, (IMAGE_SIZE / 2, 16), attrs["title"], 14, (0, 0, 0))
    rows = attrs["rows"]
    x0, x1, x2, x3 = TABLE_COLS
    top = TABLE_TOP
    bottom = top + TABLE_ROW_H * (len(rows) + 1)
    d.rectangle((x0, top, x3, top + TABLE_ROW_H), fill=TABLE_HEADER_RGB)
    for r in range(len(rows) + 2):
        y = top + r * TABLE_ROW_H
        d.line((x0, y, x3, y), fill=TABLE_GRID_RGB)
    for x in (x0, x1, x2, x3):
        d.line((x, top, x, bottom), fill=TABLE_GRID_RGB)
    cells = [attrs["columns"]] + [[r["item"], str(r["price"]), str(r["qty"])] for r in rows]
    for ri, cell_row in enumerate(cells):
        cy = top + ri * TABLE_ROW_H + TABLE_ROW_H / 2
        for (a, b), text in zip(((x0, x1), (x1, x2), (x2, x3)), cell_row):
            _text_centered(d, ((a + b) / 2, cy), text, 13, (0, 0, 0))
    return img


def _table_question(attrs: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any], str]:
    rows = attrs["rows"]
    qtype = rng.choice(["lookup", "cost", "qty_total"])
    if qtype == "lookup":
        r = rng.choice(rows)
        column = rng.choice(["price", "qty"])
        what = "price in dollars" if column == "price" else "quantity ordered"
        return (
            qtype,
            {"item": r["item"], "column": column},
            f"What is the {what} for {r['item']} in the table?",
        )
    if qtype == "cost":
        r = rng.choice(rows)
        return (
            qtype,
            {"item": r["item"]},
            f"How much do the {r['item']} cost in total, in dollars (price times quantity)?",
        )
    return qtype, {}, "How many items were ordered altogether, according to the Qty column?"


def _row(attrs: dict[str, Any], item: str) -> dict[str, Any]:
    for r in attrs["rows"]:
        if r["item"] == item:
            return r
    raise Unsolvable(f"no row for {item!r}")


def _solve_table_lookup(params, attrs, slip):
    col = params["column"]
    r = _row(attrs, params["item"])
    v = r[col]
    if slip and slip["kind"] == "wrong_column":
        col = "qty" if col == "price" else "price"
        v = r[col]
        if v == r[params["column"]]:
            raise Unsolvable("both columns hold the same value")
    elif slip:
        if slip["kind"] != "neighbour":
            raise Unsolvable("slip does not apply")
        rows = attrs["rows"]
        i = rows.index(r)
        other = rows[i + 1] if i + 1 < len(rows) else rows[i - 1]
        v = other[col]
        if v == r[col]:
            raise Unsolvable("neighbour has the same value")
    name = "price" if col == "price" else "quantity"
    steps = [
        f"Step 1: Find the row for {params['item']} in the table.",
        f"Step 2: In that row, the {name} column shows {v}.",
    ]
    return _response(steps, str(v)), str(v)


def _solve_table_cost(params, attrs, slip):
    r = _row(attrs, params["item"])
    p, q = r["price"], r["qty"]
    steps = [
        f"Step 1: The row for {params['item']} shows a price of {p} {_plural('dollar', p)} and a quantity of {q}."
    ]
    kind = slip["kind"] if slip else None
    if kind == "wrong_op":
        c = p + q
        steps.append(f"Step 2: The total cost is the price times the quantity: ${p} + {q} = {c}$.")
    else:
        c = p * q + (slip.get("delta", 1) if kind == "arith" else 0)
        if kind not in (None, "arith"):
            raise Unsolvable("slip does not apply")
        steps.append(f"Step 2: The total cost is the price times the quantity: ${p} \\times {q} = {c}$.")
    return _response(steps, str(c)), str(c)


def _solve_table_qty_total(params, attrs, slip):
    rows = attrs["rows"]
    listing = ", ".join(f"{r['item']} {r['qty']}" for r in rows)
    steps = [f"Step 1: The Qty column lists {listing}."]
    line, total = _sum_line(2, [r["qty"] for r in rows], slip)
    steps.append(line)
    return _response(steps, str(total)), str(total)


def _table_perturb(attrs: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    new = copy.deepcopy(attrs)
    rows = new["rows"]
    named = [r for r in rows if r["item"] == params.get("item")]
    r = rng.choice(named if named and rng.random() < 0.85 else rows)
    col = params.get("column") or rng.choice(["price", "qty"])
    if rng.random() < 0.3:
        col = "qty" if col == "price" else "price"
    r[col] = max(1, r[col] + rng.choice((-3, -2, -1, 1, 2, 3)))
    return new


def _table_facts(attrs: dict[str, Any]) -> list[str]:
    facts = [f"{r['item']}: price {r['price']}, quantity {r['qty']}" for r in attrs["rows"]]
    return facts[:6]


def _table_caption(attrs: dict[str, Any]) -> str:
    rows = attrs["rows"]
    listing = "; ".join(
        f"{r['item']} at {r['price']} {_plural('dollar', r['price'])}, quantity {r['qty']}" for r in rows
    )
    required = [
        f'The image shows a small table titled "{attrs["title"]}" on a white background.',
        f"It has a shaded blue header row with the columns Item, Price and Qty, followed by {len(rows)} rows "
        "separated by thin grey grid lines.",
        f"The rows read: {listing}.",
    ]
    optional = [
        "All text is printed in black in a plain sans-serif font.",
        "Each number sits in its own cell next to the item name, so every value can be read directly.",
        "There are no totals, notes or other text below the table.",
        "The layout looks like a simple printed order form.",
    ]
    return _fit_caption(required, optional)


# --------------------------------------------------------------------------------------------------------------
# Family: clock
# --------------------------------------------------------------------------------------------------------------

CLOCK_CENTRE = (128, 128)
CLOCK_FACES: dict[str, tuple[int, int, int]] = {
    "white": (255, 255, 255),
    "cream": (250, 240, 215),
    "light grey": (228, 228, 228),
    "pale green": (225, 245, 225),
}
CLOCK_RIMS: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "dark grey": (70, 70, 70),
    "navy": (20, 30, 90),
}
CLOCK_RADIUS = 110
HOUR_HAND_LEN = 52
MINUTE_HAND_LEN = 76


def hand_angles(hour: int, minute: int) -> tuple[float, float]:
    """Clockwise angles from 12 o'clock, in degrees, of the hour and the minute hand."""
    return ((hour % 12) + minute / 60) * 30.0, minute * 6.0


def _clock_scene(rng: random.Random) -> dict[str, Any]:
    return {
        "hour": rng.randint(1, 12),
        "minute": rng.randrange(0, 60, 5),
        "hour_hand": CLOCK_HOUR_HAND,
        "minute_hand": CLOCK_MINUTE_HAND,
        "face": rng.choice(list(CLOCK_FACES)),
        "rim": rng.choice(list(CLOCK_RIMS)),
    }


def _clock_draw(attrs: dict[str, Any]) -> Image.Image:
    img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    d = ImageDraw.Draw(img)
    cx, cy = CLOCK_CENTRE
    r = CLOCK_RADIUS
    face = CLOCK_FACES[attrs.get("face", "white")]
    rim = CLOCK_RIMS[attrs.get("rim", "black")]
    d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=face, outline=rim, width=4)
    for k in range(60):
        if k % 5:
            continue
        a = math.radians(k * 6)
        x0, y0 = cx + (r - 10) * math.sin(a), cy - (r - 10) * math.cos(a)
        x1, y1 = cx + (r - 3) * math.sin(a), cy - (r - 3) * math.cos(a)
        d.line((x0, y0, x1, y1), fill=(0, 0, 0), width=2)
    for h in range(1, 13):
        a = math.radians(h * 30)
        _text_centered(d, (cx + (r - 24) * math.sin(a), cy - (r - 24) * math.cos(a)), str(h), 14, (0, 0, 0))
    ha, ma = hand_angles(attrs["hour"], attrs["minute"])
    for angle, length, width, colour in (
        (ha, HOUR_HAND_LEN, 7, attrs["hour_hand"]),
        (ma, MINUTE_HAND_LEN, 4, attrs["minute_hand"]),
    ):
        a = math.radians(angle)
        d.line(
            (cx, cy, cx + length * math.sin(a), cy - length * math.cos(a)), fill=COLOURS[colour], width=width
        )
    d.ellipse((cx - 5, cy - 5, cx + 5, cy + 5), fill=(0, 0, 0))
    return img


def _clock_question(attrs: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any], str]:
    if rng.random() < 0.5:
        return "read", {}, "What time does the clock show? Answer in h:mm format."
    add = rng.choice((15, 20, 25, 30, 35, 40, 45, 50))
    return (
        "later",
        {"add": add},
        f"What time will it be {add} minutes after the time shown on the clock? Answer in h:mm format.",
    )


def _fmt_time(h: int, m: int) -> str:
    return f"{h}:{m:02d}"


def _clock_read_steps(attrs: dict[str, Any], slip: dict | None) -> tuple[list[str], int, int]:
    h, m = attrs["hour"], attrs["minute"]
    mark = m // 5 if m else 12
    if m == 0:
        hour_line = f"Step 1: The short hour hand points at the {h}."
    else:
        hour_line = f"Step 1: The short hour hand is between the {h} and the {h % 12 + 1}."
    kind = slip["kind"] if slip else None
    if kind == "minute_factor":
        if m == 0:
            raise Unsolvable("slip has no effect at minute 0")
        shown = m // 5
        minute_line = f"Step 2: The long minute hand points at the {mark}, which means {shown} minutes."
        return [hour_line, minute_line], h, shown
    minute_line = f"Step 2: The long minute hand points at the {mark}, which means {m} minutes."
    return [hour_line, minute_line], h, m


def _solve_clock_read(params, attrs, slip):
    if slip and slip["kind"] != "minute_factor":
        raise Unsolvable("slip does not apply")
    steps, h, m = _clock_read_steps(attrs, slip)
    t = _fmt_time(h, m)
    steps.append(f"Step 3: So the clock shows {t}.")
    return _response(steps, t), t


def _solve_clock_later(params, attrs, slip):
    kind = slip["kind"] if slip else None
    steps, h, m = _clock_read_steps(attrs, slip if kind == "minute_factor" else None)
    steps.append(f"Step 3: So the clock shows {_fmt_time(h, m)}.")
    add = params["add"]
    total = m + add + (5 * slip.get("delta", 1) if kind == "arith" else 0)
    if kind not in (None, "minute_factor", "arith", "no_carry"):
        raise Unsolvable("slip does not apply")
    line = f"Step 4: Adding {add} minutes: {m} + {add} = {total} minutes."
    if total >= 60:
        h2 = h % 12 + 1
        if kind == "no_carry":
            h2 = h
        t = _fmt_time(h2, total - 60)
        line += f" That is one hour and {total - 60} minutes, so the time will be {t}."
    else:
        if kind == "no_carry":
            raise Unsolvable("no carry to forget")
        t = _fmt_time(h, total)
        line += f" So the time will be {t}."
    steps.append(line)
    return _response(steps, t), t


def _clock_perturb(attrs: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    new = copy.deepcopy(attrs)
    if rng.random() < 0.65:
        new["minute"] = (new["minute"] + rng.choice((-15, -10, -5, 5, 10, 15))) % 60
    else:
        new["hour"] = (new["hour"] - 1 + rng.choice((-2, -1, 1, 2))) % 12 + 1
    return new


def _clock_facts(attrs: dict[str, Any]) -> list[str]:
    h, m = attrs["hour"], attrs["minute"]
    where = f"at the {h}" if m == 0 else f"between {h} and {h % 12 + 1}"
    return [
        f"the blue hour hand points {where}",
        f"the red minute hand points at the {m // 5 if m else 12}",
        f"the clock reads {_fmt_time(h, m)}",
    ]


def _clock_caption(attrs: dict[str, Any]) -> str:
    h, m = attrs["hour"], attrs["minute"]
    where = f"at the {h}" if m == 0 else f"between the {h} and the {h % 12 + 1}"
    required = [
        f"The image shows an analogue clock with {_a(attrs.get('face', 'white'))} face and a thick "
        f"{attrs.get('rim', 'black')} rim on a white background.",
        "The numbers 1 to 12 are printed around the dial, with a small tick mark at every number.",
        "Two hands meet at a black centre dot: a short, thick blue hour hand and a long, thin red minute hand.",
        f"The hour hand points {where} and the minute hand points at the {m // 5 if m else 12}, so the clock "
        f"reads {_fmt_time(h, m)}.",
    ]
    optional = [
        "There is no second hand and no other text in the picture.",
        "The drawing is flat and simple.",
    ]
    return _fit_caption(required, optional)


# --------------------------------------------------------------------------------------------------------------
# Family: text (no image)
# --------------------------------------------------------------------------------------------------------------

_NAMES = (
    "Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Ines", "Ravi", "Lena", "Kofi", "Yuki", "Sara", "Tom", "Nia",
    "Ivan", "Maya",
)  # fmt: skip
_ANIMALS = (  # (four-legged singular, plural, two-legged singular, plural)
    ("cow", "cows", "chicken", "chickens"),
    ("horse", "horses", "duck", "ducks"),
    ("goat", "goats", "goose", "geese"),
    ("sheep", "sheep", "hen", "hens"),
    ("pig", "pigs", "turkey", "turkeys"),
)
_SHARED = ("stickers", "marbles", "cards", "sweets", "pencils")
_THINGS = (("notebook", "notebooks"), ("sandwich", "sandwiches"), ("ticket", "tickets"), ("plant", "plants"))


def _text_scene(rng: random.Random) -> tuple[str, dict[str, Any], dict[str, Any], str]:
    qtype = rng.choice(["change", "legs", "share"])
    name = rng.choice(_NAMES)
    if qtype == "change":
        thing, things = rng.choice(_THINGS)
        p, q = rng.randint(2, 9), rng.randint(2, 6)
        bill = next(b for b in (10, 20, 50, 100) if b > p * q)
        attrs = {"numbers": {"price": p, "quantity": q, "paid": bill}}
        params = {"name": name, "thing": thing, "things": things}
        question = (
            f"One {thing} costs {p} dollars. {name} buys {q} {things} and pays with a {bill}-dollar note. "
            f"How much change does {name} get, in dollars?"
        )
    elif qtype == "legs":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        four, fours, two, twos = rng.choice(_ANIMALS)
        attrs = {"numbers": {fours: a, twos: b}}
        params = {"name": name, "animals": [four, fours, two, twos]}
        question = (
            f"{name}'s farm has {a} {fours} and {b} {twos}. How many legs do these animals have altogether?"
        )
    else:
        k, each = rng.randint(2, 6), rng.randint(2, 9)
        things = rng.choice(_SHARED)
        attrs = {"numbers": {"total": k * each, "friends": k}}
        params = {"name": name, "things": things}
        question = f"{name} shares {k * each} {things} equally among {k} friends. How many {things} does each friend get?"
    return qtype, params, attrs, question


def _solve_text_change(params, attrs, slip):
    nums = attrs["numbers"]
    p, q, paid = nums["price"], nums["quantity"], nums["paid"]
    thing, things, name = params["thing"], params["things"], params["name"]
    kind = slip["kind"] if slip else None
    if kind == "wrong_op":
        cost = p + q
        cost_line = (
            f"Step 1: One {thing} costs {p} dollars, so {q} {things} cost ${p} + {q} = {cost}$ dollars."
        )
    else:
        cost = p * q
        cost_line = (
            f"Step 1: One {thing} costs {p} dollars, so {q} {things} cost ${p} \\times {q} = {cost}$ dollars."
        )
    change = paid - cost + (slip.get("delta", 1) if kind == "arith" else 0)
    if kind not in (None, "wrong_op", "arith"):
        raise Unsolvable("slip does not apply")
    if change < 0:
        raise Unsolvable("negative change")
    steps = [
        cost_line,
        f"Step 2: {name} pays {paid} dollars, so the change is ${paid} - {cost} = {change}$ dollars.",
    ]
    return _response(steps, str(change)), str(change)


def _solve_text_legs(params, attrs, slip):
    nums = attrs["numbers"]
    four, fours, two, twos = params["animals"]
    a, b = nums[fours], nums[twos]
    kind = slip["kind"] if slip else None
    chicken_legs = 4 if kind == "four_legs" else 2
    if kind not in (None, "four_legs", "arith"):
        raise Unsolvable("slip does not apply")
    total = 4 * a + chicken_legs * b + (slip.get("delta", 1) if kind == "arith" else 0)
    steps = [
        f"Step 1: Each {four} has 4 legs, so {a} {fours} have ${a} \\times 4 = {4 * a}$ legs.",
        f"Step 2: Each {two} has {chicken_legs} legs, so {b} {twos} have ${b} \\times {chicken_legs} = "
        f"{chicken_legs * b}$ legs.",
        f"Step 3: Together that makes ${4 * a} + {chicken_legs * b} = {total}$ legs.",
    ]
    return _response(steps, str(total)), str(total)


def _solve_text_share(params, attrs, slip):
    nums = attrs["numbers"]
    total, k = nums["total"], nums["friends"]
    things = params["things"]
    kind = slip["kind"] if slip else None
    if kind == "wrong_op":
        each = total * k
        line = f"Step 2: Each friend gets ${total} \\times {k} = {each}$ {things}."
    else:
        if k <= 0 or total % k:
            raise Unsolvable(f"the {things} do not divide evenly")
        each = total // k + (slip.get("delta", 1) if kind == "arith" else 0)
        if kind not in (None, "arith"):
            raise Unsolvable("slip does not apply")
        line = f"Step 2: Each friend gets ${total} \\div {k} = {each}$ {things}."
    steps = [f"Step 1: There are {total} {things} and {k} friends.", line]
    return _response(steps, str(each)), str(each)


def _text_perturb(attrs: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    new = copy.deepcopy(attrs)
    nums = new["numbers"]
    key = rng.choice(sorted(nums))
    if key == "total":  # keep the division exact so the misread still yields a whole answer
        nums[key] = max(nums["friends"], nums[key] + nums["friends"] * rng.choice((-2, -1, 1, 2)))
    else:
        nums[key] = max(1, nums[key] + rng.choice((-3, -2, -1, 1, 2, 3)))
    return new


def _text_facts(attrs: dict[str, Any]) -> list[str]:
    facts = [f"{k} = {v}" for k, v in attrs["numbers"].items()]
    while len(facts) < 3:
        facts.append("the question gives all the numbers needed")
    return facts[:6]


# --------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------

Solver = Callable[[dict[str, Any], dict[str, Any], "dict[str, Any] | None"], tuple[str, str]]

# --------------------------------------------------------------------------------------------------------------
# Tiny families: one attribute that a 0.2M-parameter judge can see at 56 px (the demo and CI substrate)
# --------------------------------------------------------------------------------------------------------------
# Responses are four words, "<what> <perceived value> so \boxed{<answer>}"; r_rp misreads the value for another value the
# generator draws (so no text-only rule separates r_c from r_rp), r_rp+r also slips from the value to a different
# in-range answer. See docs/tiny-substrate.md for why the substrate looks like this.

TINY_IMAGE_SIZE = 56
TINY_COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple")
TINY_COUNTS: tuple[int, ...] = (1, 2, 3, 4)
TINY_CELL = TINY_IMAGE_SIZE // 2
TINY_INK = (20, 20, 20)


def _colour_scene(rng: random.Random) -> dict[str, Any]:
    side = rng.randint(26, 44)  # size and place vary, so no two images need be alike
    x, y = rng.randint(2, TINY_IMAGE_SIZE - side - 2), rng.randint(2, TINY_IMAGE_SIZE - side - 2)
    return {
        "colour": rng.choice(TINY_COLOURS),
        "shape": rng.choice(("circle", "square")),
        "box": [x, y, x + side, y + side],
    }


def _colour_draw(attrs: dict[str, Any]) -> Image.Image:
    img = Image.new("RGB", (TINY_IMAGE_SIZE, TINY_IMAGE_SIZE), "white")
    d = ImageDraw.Draw(img)
    box = tuple(attrs.get("box", (8, 8, TINY_IMAGE_SIZE - 9, TINY_IMAGE_SIZE - 9)))
    fill = COLOURS[attrs["colour"]]
    (d.ellipse if attrs["shape"] == "circle" else d.rectangle)(box, fill=fill)
    return img


def _count_boxes(cells: Sequence[int], rng: random.Random) -> list[list[int]]:
    boxes = []
    for cell in cells:
        side = rng.randint(10, 16)
        x = (cell % 2) * TINY_CELL + rng.randint(2, TINY_CELL - side - 2)
        y = (cell // 2) * TINY_CELL + rng.randint(2, TINY_CELL - side - 2)
        boxes.append([x, y, x + side, y + side])
    return boxes


def _count_scene(rng: random.Random) -> dict[str, Any]:
    n = rng.choice(TINY_COUNTS)
    cells = sorted(rng.sample(range(4), n))
    return {"count": n, "cells": cells, "boxes": _count_boxes(cells, rng)}


def _count_draw(attrs: dict[str, Any]) -> Image.Image:
    img = Image.new("RGB", (TINY_IMAGE_SIZE, TINY_IMAGE_SIZE), "white")
    d = ImageDraw.Draw(img)
    for box in attrs["boxes"]:
        d.rectangle(tuple(box), fill=TINY_INK)
    return img


def _tiny_question(family: str) -> Callable[[dict[str, Any], random.Random], tuple[str, dict[str, Any], str]]:
    return lambda attrs, rng: (family, {}, f"{family} ?")


def _tiny_solver(what: str, key: str, values: Sequence[Any]) -> Callable[..., tuple[str, str]]:
    """``"<what> <value> so \\boxed{<answer>}"``; a slip moves the answer ``delta`` steps along ``values`` (in range)."""

    def solve_tiny(params: dict[str, Any], attrs: dict[str, Any], slip: dict | None) -> tuple[str, str]:
        seen = attrs[key]
        answer = seen
        if slip is not None:
            i = values.index(seen) + int(slip["delta"])
            if not 0 <= i < len(values):
                raise Unsolvable(f"a slip of {slip['delta']} leaves the range of {key}")
            answer = values[i]
        return f"{what} {seen} so \\boxed{{{answer}}}", str(answer)

    return solve_tiny


def _tiny_perturber(key: str, values: Sequence[Any]) -> Callable[..., dict[str, Any]]:
    def perturb_tiny(attrs: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        new = copy.deepcopy(attrs)
        new[key] = rng.choice([v for v in values if v != attrs[key]])
        if key == "count":  # keep the attributes drawable
            new["cells"] = sorted(rng.sample(range(4), new[key]))
            new["boxes"] = _count_boxes(new["cells"], rng)
        return new

    return perturb_tiny


def tiny_value(spec: dict[str, Any], attributes: dict[str, Any] | None = None) -> str:
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


SOLVERS: dict[tuple[str, str], Solver] = {
    ("objects", "count"): _solve_objects_count,
    ("objects", "count_colour"): _solve_objects_count_colour,
    ("objects", "total"): _solve_objects_total,
    ("objects", "more"): _solve_objects_more,
    ("bars", "value"): _solve_bars_value,
    ("bars", "sum"): _solve_bars_sum,
    ("bars", "diff"): _solve_bars_diff,
    ("bars", "argmax"): _solve_bars_argmax,
    ("table", "lookup"): _solve_table_lookup,
    ("table", "cost"): _solve_table_cost,
    ("table", "qty_total"): _solve_table_qty_total,
    ("clock", "read"): _solve_clock_read,
    ("clock", "later"): _solve_clock_later,
    ("text", "change"): _solve_text_change,
    ("text", "legs"): _solve_text_legs,
    ("text", "share"): _solve_text_share,
    ("colour", "colour"): _tiny_solver("shape", "colour", TINY_COLOURS),
    ("count", "count"): _tiny_solver("shapes", "count", TINY_COUNTS),
}

SLIPS: dict[tuple[str, str], tuple[str, ...]] = {
    ("objects", "count"): ("ignore_colour", "ignore_shape", "count_all"),
    ("objects", "count_colour"): ("arith", "omit", "other_colour"),
    ("objects", "total"): ("arith", "omit"),
    ("objects", "more"): ("wrong_op", "arith"),
    ("bars", "value"): ("neighbour",),
    ("bars", "sum"): ("arith", "wrong_op"),
    ("bars", "diff"): ("arith", "second"),
    ("bars", "argmax"): ("lowest",),
    ("table", "lookup"): ("neighbour", "wrong_column"),
    ("table", "cost"): ("arith", "wrong_op"),
    ("table", "qty_total"): ("arith", "omit"),
    ("clock", "read"): ("minute_factor",),
    ("clock", "later"): ("no_carry", "arith", "minute_factor"),
    ("text", "change"): ("wrong_op", "arith"),
    ("text", "legs"): ("four_legs", "arith"),
    ("text", "share"): ("wrong_op", "arith"),
    ("colour", "colour"): ("shift",),
    ("count", "count"): ("shift",),
}
"""Reasoning errors each question type can make (used for r_rp+r)."""

PERTURBERS: dict[str, Callable[[dict[str, Any], dict[str, Any], random.Random], dict[str, Any]]] = {
    "objects": _objects_perturb,
    "bars": _bars_perturb,
    "table": _table_perturb,
    "clock": _clock_perturb,
    "text": _text_perturb,
    "colour": _tiny_perturber("colour", TINY_COLOURS),
    "count": _tiny_perturber("count", TINY_COUNTS),
}
"""Perceptual perturbations: a copy of the attributes with one misread fact (a count, colour, value, time)."""

_SCENES = {
    "objects": _objects_scene,
    "bars": _bars_scene,
    "table": _table_scene,
    "clock": _clock_scene,
    "colour": _colour_scene,
    "count": _count_scene,
}
_DRAW = {
    "objects": _objects_draw,
    "bars": _bars_draw,
    "table": _table_draw,
    "clock": _clock_draw,
    "colour": _colour_draw,
    "count": _count_draw,
}
_QUESTIONS = {
    "objects": _objects_question,
    "bars": _bars_question,
    "table": _table_question,
    "clock": _clock_question,
    "colour": _tiny_question("colour"),
    "count": _tiny_question("count"),
}
FACTS = {
    "objects": _objects_facts,
    "bars": _bars_facts,
    "table": _table_facts,
    "clock": _clock_facts,
    "text": _text_facts,
    "colour": lambda a: [f"one {a['shape']}", f"colour {a['colour']}", "white background"],
    "count": lambda a: [f"{a['count']} squares", "dark squares", "one square per quadrant at most"],
}
_CAPTIONS = {
    "objects": _objects_caption,
    "bars": _bars_caption,
    "table": _table_caption,
    "clock": _clock_caption,
    "colour": lambda a: f"One {a['colour']} {a['shape']} on a white background.",
    "count": lambda a: f"{a['count']} dark squares on a white background, at most one per quadrant.",
}


def solve(
    spec: dict[str, Any], attributes: dict[str, Any] | None = None, slip: dict | None = None
) -> tuple[str, str]:
    """(response, final answer) for a spec's question, from ``attributes`` (default: the true ones).

    ``slip`` (``{"kind": ..., "delta": ...}``, kinds in :data:`SLIPS`) injects a reasoning error. Raises
    :class:`Unsolvable` when the attributes give no well-defined answer or the slip does not apply.
    """
    key = (spec["family"], spec["qtype"])
    if key not in SOLVERS:
        raise ValueError(f"unknown synthetic question type {key}")
    return SOLVERS[key](spec["params"], spec["attributes"] if attributes is None else attributes, slip)


def perturb(spec: dict[str, Any], attributes: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A copy of ``attributes`` with one perceptual fact misread."""
    return PERTURBERS[spec["family"]](attributes, spec["params"], rng)


def draw(spec: dict[str, Any]) -> Image.Image | None:
    """Redraw the image of a spec (None for text items). Deterministic."""
    if spec["family"] == TEXT_FAMILY:
        return None
    return _DRAW[spec["family"]](spec["attributes"])


# --------------------------------------------------------------------------------------------------------------
# Items
# --------------------------------------------------------------------------------------------------------------


def _item_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"perception-judge/synth/v{SPEC_VERSION}/{seed}/{index}")


def _make_item(seed: int, index: int, family: str) -> SourceItem:
    rng = _item_rng(seed, index)
    item_id = f"synth-{seed}-{index:06d}"
    if family == TEXT_FAMILY:
        qtype, params, attrs, question = _text_scene(rng)
        image = None
        caption = ""
        extra_kw = ["arithmetic", "word problem", "numbers"]
    else:
        attrs = _SCENES[family](rng)
        qtype, params, question = _QUESTIONS[family](attrs, rng)
        image = _DRAW[family](attrs)
        caption = _CAPTIONS[family](attrs)
        extra_kw = {
            "objects": ["shapes", "count", "colours"],
            "bars": ["bar chart", "values", "categories"],
            "table": ["table", "prices", "quantities"],
            "clock": ["clock", "time", "hands"],
            "colour": ["colour", "shape", "image"],
            "count": ["count", "squares", "image"],
        }[family]
    spec: dict[str, Any] = {
        "version": SPEC_VERSION,
        "family": family,
        "qtype": qtype,
        "params": params,
        "attributes": attrs,
        "facts": FACTS[family](attrs),
        "caption": caption,
        "keywords": _keywords(question, extra_kw),
        "domain": DOMAINS[family],
        "text_only": image is None,
    }
    response, answer = solve(spec)
    return SourceItem(
        item_id=item_id,
        question=question,
        answer=answer,
        response=response,
        image=image,
        source="synthetic",
        spec=spec,
        meta={"seed": seed, "index": index},
    )


def _check_args(n: int, families: Sequence[str] | None, text_only_fraction: float) -> tuple[str, ...]:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0.0 <= text_only_fraction <= 1.0:
        raise ValueError(f"text_only_fraction must be in [0, 1], got {text_only_fraction}")
    fams = tuple(families) if families else FAMILIES
    unknown = [f for f in fams if f not in ALL_FAMILIES]
    if unknown:
        raise ValueError(f"unknown synthetic families {unknown}; known: {', '.join(ALL_FAMILIES)}")
    return fams


def iter_items(
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    text_only_fraction: float = DEFAULT_TEXT_ONLY_FRACTION,
) -> Iterator[SourceItem]:
    """Stream synthetic items (see :func:`generate_items`)."""
    fams = _check_args(n, families, text_only_fraction)
    frac = Fraction(text_only_fraction).limit_denominator(1000)
    image_index = 0
    for i in range(n):
        text_only = math.floor((i + 1) * frac) > math.floor(i * frac)
        if text_only:
            family = TEXT_FAMILY
        else:
            family = fams[image_index % len(fams)]
            image_index += 1
        yield _make_item(seed, i, family)


def generate_items(
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    text_only_fraction: float = DEFAULT_TEXT_ONLY_FRACTION,
) -> list[SourceItem]:
    """``n`` synthetic items, deterministic per ``seed``.

    Items cycle through ``families`` (default: the four image families); in addition, a
    ``text_only_fraction`` of the items, spread evenly, are text-only (``image`` None, family ``"text"``).
    ``"text"`` may also be listed in ``families`` (``families=["text"]`` gives only text items).
    ``item.image`` is a PIL image.
    """
    return list(iter_items(n, seed, families, text_only_fraction))


def item_to_row(item: SourceItem, image_path: str | None) -> dict[str, Any]:
    """The items.jsonl row of a synthetic item (image as a path relative to the synth folder)."""
    return {
        "item_id": item.item_id,
        "question": item.question,
        "answer": item.answer,
        "response": item.response,
        "image": image_path,
        "source": item.source,
        "spec": item.spec,
        "meta": item.meta,
    }


def write_synthetic(
    out_dir: str | os.PathLike[str],
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    text_only_fraction: float = DEFAULT_TEXT_ONLY_FRACTION,
    overwrite: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Write ``items.jsonl``, ``images/<id>.png`` and ``synth_info.json`` into ``out_dir``; returns the info.

    Streams (constant memory). ``items.jsonl`` appears only once complete (written to a temp file, then
    renamed); an existing one is an error unless ``overwrite``.
    """
    fams = _check_args(n, families, text_only_fraction)
    out = Path(out_dir)
    items_path = out / "items.jsonl"
    if items_path.exists() and not overwrite:
        raise FileExistsError(f"{str(items_path)!r} exists; pass --overwrite to replace it")
    (out / "images").mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    qtypes: dict[str, int] = {}
    bar = progress_bar(n, "synth", "item", enabled=progress)
    with atomic_open(items_path, fsync=False) as f:
        for item in iter_items(n, seed, fams, text_only_fraction):
            rel = None
            if item.image is not None:
                rel = f"images/{item.item_id}.png"
                with atomic_open(out / rel, "wb", fsync=False) as png:
                    item.image.save(png, format="PNG")
            f.write(json.dumps(item_to_row(item, rel), ensure_ascii=False) + "\n")
            fam = item.spec["family"]
            counts[fam] = counts.get(fam, 0) + 1
            qkey = f"{fam}/{item.spec['qtype']}"
            qtypes[qkey] = qtypes.get(qkey, 0) + 1
            bar.update(1)
    bar.close()
    info = {
        "generator": "perception_judge.ppjd.synth",  # the name files have carried since the first release
        "spec_version": SPEC_VERSION,
        "n": n,
        "seed": seed,
        "families": list(fams),
        "text_only_fraction": text_only_fraction,
        "counts": dict(sorted(counts.items())),
        "question_types": dict(sorted(qtypes.items())),
        "image_size": [TINY_IMAGE_SIZE] * 2 if set(fams) <= set(TINY_FAMILIES) else [IMAGE_SIZE] * 2,
    }
    atomic_write_text(out / "synth_info.json", json.dumps(info, indent=2) + "\n")
    return info


__all__ = [
    "ALL_FAMILIES",
    "CLOCK_CENTRE",
    "CLOCK_FACES",
    "CLOCK_HOUR_HAND",
    "CLOCK_MINUTE_HAND",
    "CLOCK_RADIUS",
    "CLOCK_RIMS",
    "COLOURS",
    "DEFAULT_TEXT_ONLY_FRACTION",
    "DOMAINS",
    "FACTS",
    "FAMILIES",
    "HOUR_HAND_LEN",
    "IMAGE_SIZE",
    "MINUTE_HAND_LEN",
    "PERTURBERS",
    "SHAPES",
    "SLIPS",
    "SOLVERS",
    "SPEC_VERSION",
    "TABLE_COLS",
    "TABLE_GRID_RGB",
    "TABLE_HEADER_RGB",
    "TABLE_ROW_H",
    "TABLE_TOP",
    "TEXT_FAMILY",
    "TINY_CELL",
    "TINY_COLOURS",
    "TINY_COUNTS",
    "TINY_FAMILIES",
    "TINY_IMAGE_SIZE",
    "TINY_INK",
    "Unsolvable",
    "bar_geometry",
    "bar_unit_px",
    "draw",
    "generate_items",
    "hand_angles",
    "item_to_row",
    "iter_items",
    "perturb",
    "response_value",
    "solve",
    "tiny_value",
    "tiny_values",
    "word_count",
    "write_synthetic",
]
