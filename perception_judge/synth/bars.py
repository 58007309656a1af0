"""The ``bars`` family: a labelled bar chart with printed values (reading, sums, differences, the largest bar)."""

from __future__ import annotations

import random
from typing import Any

from PIL import Image

from perception_judge.synth.base import (
    COLOURS,
    IMAGE_SIZE,
    Attrs,
    Family,
    Unsolvable,
    answer,
    canvas,
    fit_caption,
    join,
    text_centered,
)

_TOPICS = (
    ("Books read per day", ("Mon", "Tue", "Wed", "Thu", "Fri")),
    ("Boxes of fruit sold", ("Apples", "Pears", "Plums", "Figs", "Limes")),
    ("Goals scored per team", ("Lions", "Bears", "Hawks", "Wolves", "Foxes")),
    ("Rainy days per month", ("Jan", "Feb", "Mar", "Apr", "May")),
)
_Y_MAX = 10
_PLOT_TOP, _PLOT_BOTTOM, _PLOT_LEFT, _PLOT_RIGHT = 36, 206, 34, 248


def bar_unit_px() -> float:
    """Pixels per unit of value on the bar chart's y axis."""
    return (_PLOT_BOTTOM - _PLOT_TOP) / _Y_MAX


def bar_geometry(n: int, index: int) -> tuple[int, int]:
    """(left x, right x) of bar ``index`` of ``n`` (inclusive pixel columns)."""
    slot = (_PLOT_RIGHT - _PLOT_LEFT) / n
    width = int(slot * 0.6)
    x0 = int(_PLOT_LEFT + slot * index + (slot - width) / 2)
    return x0, x0 + width - 1


def _scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    title, labels = rng.choice(_TOPICS)
    n = rng.randint(3, 5)
    values = rng.sample(range(1, _Y_MAX + 1), n)
    colours = rng.sample(list(COLOURS), n)
    bars = [{"label": lab, "value": v, "colour": c} for lab, v, c in zip(labels[:n], values, colours)]
    attrs = {"chart": "bar", "title": title, "bars": bars, "y_max": _Y_MAX}
    qtype = rng.choice(["value", "sum", "diff", "argmax"])
    if qtype == "value":
        label = rng.choice(bars)["label"]
        return attrs, qtype, {"label": label}, f"What value does the bar for {label} show in the chart?"
    if qtype == "sum":
        a, b = (x["label"] for x in rng.sample(bars, 2))
        return attrs, qtype, {"a": a, "b": b}, f"What is the sum of the values for {a} and {b} in the chart?"
    if qtype == "diff":
        q = "What is the difference between the highest and the lowest value in the chart?"
        return attrs, qtype, {}, q
    return attrs, qtype, {}, "Which category has the highest value in the chart?"


def _draw(attrs: Attrs) -> Image.Image:
    img, d = canvas()
    text_centered(d, (IMAGE_SIZE / 2, 14), attrs["title"], 13)
    unit = bar_unit_px()
    for v in range(0, _Y_MAX + 1, 2):
        y = round(_PLOT_BOTTOM - v * unit)
        d.line((_PLOT_LEFT - 4, y, _PLOT_LEFT, y), fill=(0, 0, 0))
        text_centered(d, (_PLOT_LEFT - 14, y), str(v), 10)
    bars = attrs["bars"]
    for i, b in enumerate(bars):
        x0, x1 = bar_geometry(len(bars), i)
        top = round(_PLOT_BOTTOM - b["value"] * unit)
        d.rectangle((x0, top, x1, _PLOT_BOTTOM - 1), fill=COLOURS[b["colour"]])
        text_centered(d, ((x0 + x1) / 2, top - 9), str(b["value"]), 12)
        text_centered(d, ((x0 + x1) / 2, _PLOT_BOTTOM + 14), b["label"], 11)
    d.line((_PLOT_LEFT, _PLOT_TOP - 6, _PLOT_LEFT, _PLOT_BOTTOM), fill=(0, 0, 0))
    d.line((_PLOT_LEFT, _PLOT_BOTTOM, _PLOT_RIGHT, _PLOT_BOTTOM), fill=(0, 0, 0))
    return img


def _values(attrs: Attrs) -> dict[str, int]:
    return {b["label"]: b["value"] for b in attrs["bars"]}


def _step_read(attrs: Attrs) -> str:
    listing = ", ".join(f"{b['label']} = {b['value']}" for b in attrs["bars"])
    return f"Step 1: Read the value printed on each bar: {listing}."


def _solve_value(params, attrs, kind, delta):
    vals, label = _values(attrs), params["label"]
    v = vals[label]
    if kind:  # neighbour: reads the next bar (the previous one for the last)
        labels = list(vals)
        i = labels.index(label)
        v = vals[labels[i + 1 if i + 1 < len(labels) else i - 1]]
        if v == vals[label]:
            raise Unsolvable("the neighbour has the same value")
    return answer([_step_read(attrs), f"Step 2: The bar for {label} shows {v}."], v)


def _solve_sum(params, attrs, kind, delta):
    a, b = params["a"], params["b"]
    va, vb = _values(attrs)[a], _values(attrs)[b]
    if kind == "wrong_op":
        s, op = va - vb, "-"
    else:
        s, op = va + vb + (delta if kind == "arith" else 0), "+"
    return answer(
        [_step_read(attrs), f"Step 2: {a} is {va} and {b} is {vb}.", f"Step 3: {va} {op} {vb} = {s}."], s
    )


def _extremes(vals: dict[str, int]) -> tuple[str, str]:
    ordered = sorted(vals.values())
    if len(ordered) < 2 or ordered[-1] == ordered[-2] or ordered[0] == ordered[1]:
        raise Unsolvable("tied highest or lowest bar")
    return max(vals, key=vals.__getitem__), min(vals, key=vals.__getitem__)


def _solve_diff(params, attrs, kind, delta):
    vals = _values(attrs)
    hi, lo = _extremes(vals)
    if kind == "second":
        hi = sorted(vals, key=vals.__getitem__, reverse=True)[1]
        if hi == lo:
            raise Unsolvable("only two bars")
    d = vals[hi] - vals[lo] + (delta if kind == "arith" else 0)
    steps = [
        _step_read(attrs),
        f"Step 2: The highest bar is {hi} with {vals[hi]} and the lowest bar is {lo} with {vals[lo]}.",
        f"Step 3: {vals[hi]} - {vals[lo]} = {d}.",
    ]
    return answer(steps, d)


def _solve_argmax(params, attrs, kind, delta):
    vals = _values(attrs)
    hi, lo = _extremes(vals)
    pick = lo if kind else hi  # the slip: the lowest bar
    return answer(
        [_step_read(attrs), f"Step 2: Comparing the bars, the tallest one is {pick} with {vals[pick]}."], pick
    )


def _perturb(attrs: Attrs, params: dict[str, Any], rng: random.Random) -> None:
    bars = attrs["bars"]
    named = [b for b in bars if b["label"] in (params.get("label"), params.get("a"), params.get("b"))]
    if rng.random() < 0.25 and len(bars) >= 2:
        x, y = rng.sample(bars, 2)
        x["value"], y["value"] = y["value"], x["value"]
    else:
        b = rng.choice(named if named and rng.random() < 0.85 else bars)
        b["value"] = min(_Y_MAX + 2, max(1, b["value"] + rng.choice((-3, -2, -1, 1, 2, 3))))


def _caption(attrs: Attrs) -> str:
    bars = attrs["bars"]
    vals = _values(attrs)
    hi, lo = max(vals, key=vals.__getitem__), min(vals, key=vals.__getitem__)
    colours = [f"{b['label']} is {b['colour']}" for b in bars]
    values = [f"{b['label']} {b['value']}" for b in bars]
    required = [
        f'The image is a vertical bar chart titled "{attrs["title"]}" on a white background.',
        f"It has {len(bars)} bars, one each for {join([b['label'] for b in bars])}, and each bar has its own "
        f"colour: {join(colours)}.",
        f"The value of every bar is printed just above it: {join(values)}.",
        f"The tallest bar is {hi} and the shortest is {lo}.",
    ]
    optional = [
        "A vertical axis on the left runs from 0 to 10 with tick labels every two units.",
        "The category names are written below the horizontal axis.",
        "There is no legend and no grid.",
    ]
    return fit_caption(required, optional)


FAMILY = Family(
    name="bars",
    domain="chart",
    keywords=("bar chart", "values", "categories"),
    scene=_scene,
    questions={
        "value": (_solve_value, ("neighbour",)),
        "sum": (_solve_sum, ("arith", "wrong_op")),
        "diff": (_solve_diff, ("arith", "second")),
        "argmax": (_solve_argmax, ("lowest",)),
    },
    perturb=_perturb,
    facts=lambda attrs: [f"the {b['label']} bar shows {b['value']}" for b in attrs["bars"]][:6],
    draw=_draw,
    caption=_caption,
)
