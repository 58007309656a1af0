"""The ``table`` family: a small priced order table (look-ups, price x quantity, column totals)."""

from __future__ import annotations

import random
from typing import Any

from PIL import Image

from perception_judge.synth.base import (
    IMAGE_SIZE,
    Attrs,
    Family,
    Unsolvable,
    answer,
    canvas,
    fit_caption,
    plural,
    sum_line,
    text_centered,
)

_TOPICS = (
    ("Stationery order", ("Pens", "Pencils", "Rulers", "Erasers", "Notebooks", "Folders")),
    ("Bakery order", ("Muffins", "Bagels", "Scones", "Cookies", "Donuts", "Pretzels")),
    ("Garden order", ("Seeds", "Pots", "Gloves", "Rakes", "Hoses", "Trowels")),
)
TABLE_HEADER_RGB = (200, 220, 245)
TABLE_GRID_RGB = (110, 110, 110)
TABLE_ROW_H = 30
TABLE_TOP = 36
TABLE_COLS = (12, 120, 190, 244)


def _scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    title, items = rng.choice(_TOPICS)
    names = rng.sample(items, rng.randint(3, 5))
    rows = [{"item": name, "price": rng.randint(1, 9), "qty": rng.randint(1, 9)} for name in names]
    attrs = {"title": title, "columns": ["Item", "Price ($)", "Qty"], "rows": rows}
    qtype = rng.choice(["lookup", "cost", "qty_total"])
    if qtype == "lookup":
        item, column = rng.choice(rows)["item"], rng.choice(["price", "qty"])
        what = "price in dollars" if column == "price" else "quantity ordered"
        return attrs, qtype, {"item": item, "column": column}, f"What is the {what} for {item} in the table?"
    if qtype == "cost":
        r = rng.choice(rows)
        q = f"How much do the {r['item']} cost in total, in dollars (price times quantity)?"
        return attrs, qtype, {"item": r["item"]}, q
    return attrs, qtype, {}, "How many items were ordered altogether, according to the Qty column?"


def _draw(attrs: Attrs) -> Image.Image:
    img, d = canvas()
    text_centered(d, (IMAGE_SIZE / 2, 16), attrs["title"], 14)
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
            text_centered(d, ((a + b) / 2, cy), text, 13)
    return img


def _row(attrs: Attrs, item: str) -> dict[str, Any]:
    for r in attrs["rows"]:
        if r["item"] == item:
            return r
    raise Unsolvable(f"no row for {item!r}")


def _solve_lookup(params, attrs, kind, delta):
    col = params["column"]
    r = _row(attrs, params["item"])
    v = r[col]
    if kind == "wrong_column":
        col = "qty" if col == "price" else "price"
        v = r[col]
        if v == r[params["column"]]:
            raise Unsolvable("both columns hold the same value")
    elif kind:  # neighbour: reads the next row (the previous one for the last)
        rows = attrs["rows"]
        i = rows.index(r)
        v = rows[i + 1 if i + 1 < len(rows) else i - 1][col]
        if v == r[col]:
            raise Unsolvable("neighbour has the same value")
    name = "price" if col == "price" else "quantity"
    step1 = f"Step 1: Find the row for {params['item']} in the table."
    return answer([step1, f"Step 2: In that row, the {name} column shows {v}."], v)


def _solve_cost(params, attrs, kind, delta):
    r = _row(attrs, params["item"])
    p, q = r["price"], r["qty"]
    if kind == "wrong_op":
        c, op = p + q, "+"
    else:
        c, op = p * q + (delta if kind == "arith" else 0), "\\times"
    steps = [
        f"Step 1: The row for {params['item']} shows a price of {p} {plural('dollar', p)} and a quantity of {q}.",
        f"Step 2: The total cost is the price times the quantity: ${p} {op} {q} = {c}$.",
    ]
    return answer(steps, c)


def _solve_qty_total(params, attrs, kind, delta):
    rows = attrs["rows"]
    listing = ", ".join(f"{r['item']} {r['qty']}" for r in rows)
    line, total = sum_line(2, [r["qty"] for r in rows], kind, delta)
    return answer([f"Step 1: The Qty column lists {listing}.", line], total)


def _perturb(attrs: Attrs, params: dict[str, Any], rng: random.Random) -> None:
    rows = attrs["rows"]
    named = [r for r in rows if r["item"] == params.get("item")]
    r = rng.choice(named if named and rng.random() < 0.85 else rows)
    col = params.get("column") or rng.choice(["price", "qty"])
    if rng.random() < 0.3:
        col = "qty" if col == "price" else "price"
    r[col] = max(1, r[col] + rng.choice((-3, -2, -1, 1, 2, 3)))


def _caption(attrs: Attrs) -> str:
    rows = attrs["rows"]
    listing = "; ".join(
        f"{r['item']} at {r['price']} {plural('dollar', r['price'])}, quantity {r['qty']}" for r in rows
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
    return fit_caption(required, optional)


FAMILY = Family(
    name="table",
    domain="document",
    keywords=("table", "prices", "quantities"),
    scene=_scene,
    questions={
        "lookup": (_solve_lookup, ("neighbour", "wrong_column")),
        "cost": (_solve_cost, ("arith", "wrong_op")),
        "qty_total": (_solve_qty_total, ("arith", "omit")),
    },
    perturb=_perturb,
    facts=lambda attrs: [f"{r['item']}: price {r['price']}, quantity {r['qty']}" for r in attrs["rows"]][:6],
    draw=_draw,
    caption=_caption,
)
