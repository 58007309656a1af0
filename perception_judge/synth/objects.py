"""The ``objects`` family: solid circles, squares and triangles in named colours on a 4x4 grid (counting)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from PIL import Image

from perception_judge.synth.base import (
    COLOURS,
    Attrs,
    Family,
    Unsolvable,
    answer,
    are,
    article,
    canvas,
    fit_caption,
    join,
    plural,
    sum_line,
)

SHAPES: tuple[str, ...] = ("circle", "square", "triangle")


def _group_phrase(g: dict[str, Any]) -> str:
    return f"{g['count']} {g['colour']} {plural(g['shape'], g['count'])}"


def _listing(attrs: Attrs) -> str:
    return join([_group_phrase(g) for g in attrs["groups"]])


def _scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    n_groups = rng.randint(2, 4)
    rng.shuffle(combos)
    chosen = combos[:n_groups]
    counts = [rng.randint(1, 4) for _ in chosen]
    while sum(counts) > 12:
        counts[counts.index(max(counts))] -= 1
    groups = [{"colour": c, "shape": s, "count": k} for (c, s), k in zip(chosen, counts)]
    cells = iter(rng.sample(range(16), sum(counts)))
    objects = []
    for g in groups:
        for _ in range(g["count"]):
            row, col = divmod(next(cells), 4)
            size = rng.randint(30, 40)
            cx, cy = col * 64 + 32 + rng.randint(-6, 6), row * 64 + 32 + rng.randint(-6, 6)
            objects.append({"shape": g["shape"], "colour": g["colour"], "cx": cx, "cy": cy, "size": size})
    attrs = {"background": "white", "groups": groups, "objects": objects, "total": sum(counts)}
    colour_counts: Counter[str] = Counter()
    for g in groups:
        colour_counts[g["colour"]] += g["count"]
    pairs = [(a, b) for a in colour_counts for b in colour_counts if colour_counts[a] > colour_counts[b]]
    qtype = rng.choice(["count", "count_colour", "total"] + (["more"] if pairs else []))
    if qtype == "count":
        g = rng.choice(groups)
        q = f"How many {g['colour']} {plural(g['shape'], 2)} are there in the image?"
        return attrs, qtype, {"colour": g["colour"], "shape": g["shape"]}, q
    if qtype == "count_colour":
        colour = rng.choice(sorted(colour_counts))
        return attrs, qtype, {"colour": colour}, f"How many {colour} shapes are there in the image?"
    if qtype == "total":
        return attrs, qtype, {}, "How many shapes are there in the image altogether?"
    a, b = rng.choice(pairs)
    q = f"How many more {a} shapes than {b} shapes are there in the image?"
    return attrs, qtype, {"colour_a": a, "colour_b": b}, q


def _draw(attrs: Attrs) -> Image.Image:
    img, d = canvas()
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


def _step_listing(attrs: Attrs) -> str:
    return f"Step 1: Look at every shape in the image. I can see {_listing(attrs)}."


def _solve_count(params, attrs, kind, delta):
    c, s = params["colour"], params["shape"]
    picks = {  # slip -> (the groups it counts, what step 2 picks out)
        None: (lambda g: g["colour"] == c and g["shape"] == s, f"Pick out the {c} {plural(s, 2)}"),
        "ignore_colour": (lambda g: g["shape"] == s, f"Pick out the {plural(s, 2)}"),
        "ignore_shape": (lambda g: g["colour"] == c, f"Pick out the {c} shapes"),
        "count_all": (lambda g: True, "Count the shapes"),
    }
    counted, what = picks[kind]
    m = sum(g["count"] for g in attrs["groups"] if counted(g))
    if kind and m == sum(g["count"] for g in attrs["groups"] if picks[None][0](g)):
        raise Unsolvable("the slip does not change the answer")
    return answer([_step_listing(attrs), f"Step 2: {what}: there {are(m)} {m} of them."], m)


def _solve_count_colour(params, attrs, kind, delta):
    c, groups = params["colour"], attrs["groups"]
    sel = [g for g in groups if g["colour"] == c]
    steps = [_step_listing(attrs)]
    if not sel:
        if kind:
            raise Unsolvable("no terms for a slip")
        return answer(
            [*steps, f"Step 2: I cannot find any {c} shapes.", f"Step 3: So there are 0 {c} shapes."], 0
        )
    if kind == "other_colour":  # counts a group of another colour as well
        others = [g for g in groups if g["colour"] != c]
        if not others:
            raise Unsolvable("no other colour to confuse")
        sel, kind = [*sel, others[0]], None
    parts = [f"{g['count']} {plural(g['shape'], g['count'])}" for g in sel]
    steps.append(f"Step 2: The {c} shapes are {join(parts)}.")
    terms = [g["count"] for g in sel]
    if len(terms) == 1 and not kind:
        n = terms[0]
        return answer([*steps, f"Step 3: So there {are(n)} {n} {c} {plural('shape', n)}."], n)
    line, total = sum_line(3, terms, kind, delta)
    return answer([*steps, line], total)


def _solve_total(params, attrs, kind, delta):
    line, total = sum_line(2, [g["count"] for g in attrs["groups"]], kind, delta)
    return answer([_step_listing(attrs), line], total)


def _solve_more(params, attrs, kind, delta):
    a, b = params["colour_a"], params["colour_b"]
    na, nb = (sum(g["count"] for g in attrs["groups"] if g["colour"] == x) for x in (a, b))
    if kind == "wrong_op":
        d, op = na + nb, "+"
    else:
        d, op = na - nb + (delta if kind == "arith" else 0), "-"
    if d < 0:
        raise Unsolvable("negative difference")
    steps = [
        _step_listing(attrs),
        f"Step 2: There {are(na)} {na} {a} {plural('shape', na)} and {nb} {b} {plural('shape', nb)}.",
        f"Step 3: The difference is {na} {op} {nb} = {d}.",
    ]
    return answer(steps, d)


def _perturb(attrs: Attrs, params: dict[str, Any], rng: random.Random) -> None:
    groups = attrs["groups"]
    named, shape = (params.get("colour"), params.get("colour_a"), params.get("colour_b")), params.get("shape")
    relevant = [g for g in groups if g["colour"] in named and shape in (None, g["shape"])] or groups
    g = rng.choice(relevant if rng.random() < 0.8 else groups)
    if rng.random() < 0.7:
        g["count"] = max(1, g["count"] + rng.choice((-2, -1, 1, 1, 2)))
    else:
        taken = {(x["colour"], x["shape"]) for x in groups}
        if colours := [c for c in COLOURS if (c, g["shape"]) not in taken]:
            g["colour"] = rng.choice(colours)
    attrs["total"] = sum(x["count"] for x in groups)


def _facts(attrs: Attrs) -> list[str]:
    facts = [_group_phrase(g) for g in attrs["groups"]]
    facts.append(f"{attrs['total']} shapes in total")
    if len(facts) < 3:
        facts.append("a plain white background")
    return facts[:6]


def _caption(attrs: Attrs) -> str:
    objs = attrs["objects"]
    tl = min(objs, key=lambda o: o["cx"] + o["cy"])
    br = max(objs, key=lambda o: o["cx"] + o["cy"])
    n = attrs["total"]
    required = [
        f"This is a simple computer-drawn picture on a plain white background containing {n} flat geometric "
        f"{plural('shape', n)}.",
        f"Specifically, there {are(attrs['groups'][0]['count'])} {_listing(attrs)}.",
        f"The shape nearest the top left corner is {article(tl['colour'])} {tl['shape']}, and the one nearest the "
        f"bottom right corner is {article(br['colour'])} {br['shape']}.",
    ]
    optional = [
        "The shapes are spread over an invisible four-by-four grid with clear gaps, so no two of them touch "
        "or overlap.",
        "Every shape is filled with one solid colour and has no outline, shadow or label.",
        "There is no text anywhere in the picture.",
        "The style is flat and schematic, like an illustration from a counting exercise.",
    ]
    return fit_caption(required, optional)


FAMILY = Family(
    name="objects",
    domain="counting",
    keywords=("shapes", "count", "colours"),
    scene=_scene,
    questions={
        "count": (_solve_count, ("ignore_colour", "ignore_shape", "count_all")),
        "count_colour": (_solve_count_colour, ("arith", "omit", "other_colour")),
        "total": (_solve_total, ("arith", "omit")),
        "more": (_solve_more, ("wrong_op", "arith")),
    },
    perturb=_perturb,
    facts=_facts,
    draw=_draw,
    caption=_caption,
)
