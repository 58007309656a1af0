"""The ``clock`` family: an analogue clock with a blue hour hand and a red minute hand (reading, adding minutes)."""

from __future__ import annotations

import math
import random
from typing import Any

from PIL import Image

from perception_judge.synth.base import (
    COLOURS,
    Attrs,
    Family,
    Unsolvable,
    answer,
    article,
    canvas,
    fit_caption,
    text_centered,
)

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
CLOCK_HOUR_HAND = "blue"
CLOCK_MINUTE_HAND = "red"
HOUR_HAND_LEN = 52
MINUTE_HAND_LEN = 76


def hand_angles(hour: int, minute: int) -> tuple[float, float]:
    """Clockwise angles from 12 o'clock, in degrees, of the hour and the minute hand."""
    return ((hour % 12) + minute / 60) * 30.0, minute * 6.0


def _scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    attrs = {
        "hour": rng.randint(1, 12),
        "minute": rng.randrange(0, 60, 5),
        "hour_hand": CLOCK_HOUR_HAND,
        "minute_hand": CLOCK_MINUTE_HAND,
        "face": rng.choice(list(CLOCK_FACES)),
        "rim": rng.choice(list(CLOCK_RIMS)),
    }
    if rng.random() < 0.5:
        return attrs, "read", {}, "What time does the clock show? Answer in h:mm format."
    add = rng.choice((15, 20, 25, 30, 35, 40, 45, 50))
    q = f"What time will it be {add} minutes after the time shown on the clock? Answer in h:mm format."
    return attrs, "later", {"add": add}, q


def _point(radius: float, degrees: float) -> tuple[float, float]:
    """The point ``radius`` px from the centre, ``degrees`` clockwise from 12 o'clock."""
    a = math.radians(degrees)
    return CLOCK_CENTRE[0] + radius * math.sin(a), CLOCK_CENTRE[1] - radius * math.cos(a)


def _draw(attrs: Attrs) -> Image.Image:
    img, d = canvas()
    cx, cy = CLOCK_CENTRE
    r = CLOCK_RADIUS
    face, rim = CLOCK_FACES[attrs.get("face", "white")], CLOCK_RIMS[attrs.get("rim", "black")]
    d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=face, outline=rim, width=4)
    for k in range(0, 60, 5):
        d.line((*_point(r - 10, k * 6), *_point(r - 3, k * 6)), fill=(0, 0, 0), width=2)
    for h in range(1, 13):
        text_centered(d, _point(r - 24, h * 30), str(h), 14)
    ha, ma = hand_angles(attrs["hour"], attrs["minute"])
    d.line((cx, cy, *_point(HOUR_HAND_LEN, ha)), fill=COLOURS[attrs["hour_hand"]], width=7)
    d.line((cx, cy, *_point(MINUTE_HAND_LEN, ma)), fill=COLOURS[attrs["minute_hand"]], width=4)
    d.ellipse((cx - 5, cy - 5, cx + 5, cy + 5), fill=(0, 0, 0))
    return img


def _time(h: int, m: int) -> str:
    return f"{h}:{m:02d}"


def _mark(m: int) -> int:
    """The number the minute hand points at."""
    return m // 5 if m else 12


def _read_steps(attrs: Attrs, minute_factor: bool) -> tuple[list[str], int, int]:
    """Steps 1-2 and the time read; the slip ``minute_factor`` reads the number the minute hand points at as
    minutes."""
    h, m = attrs["hour"], attrs["minute"]
    if minute_factor and m == 0:
        raise Unsolvable("slip has no effect at minute 0")
    shown = m // 5 if minute_factor else m
    where = f"points at the {h}" if m == 0 else f"is between the {h} and the {h % 12 + 1}"
    minute_line = f"Step 2: The long minute hand points at the {_mark(m)}, which means {shown} minutes."
    return [f"Step 1: The short hour hand {where}.", minute_line], h, shown


def _solve_read(params, attrs, kind, delta):
    steps, h, m = _read_steps(attrs, kind == "minute_factor")
    t = _time(h, m)
    return answer([*steps, f"Step 3: So the clock shows {t}."], t)


def _solve_later(params, attrs, kind, delta):
    steps, h, m = _read_steps(attrs, kind == "minute_factor")
    steps.append(f"Step 3: So the clock shows {_time(h, m)}.")
    add = params["add"]
    total = m + add + (5 * delta if kind == "arith" else 0)
    line = f"Step 4: Adding {add} minutes: {m} + {add} = {total} minutes."
    if total >= 60:
        t = _time(h if kind == "no_carry" else h % 12 + 1, total - 60)
        line += f" That is one hour and {total - 60} minutes, so the time will be {t}."
    elif kind == "no_carry":
        raise Unsolvable("no carry to forget")
    else:
        t = _time(h, total)
        line += f" So the time will be {t}."
    return answer([*steps, line], t)


def _perturb(attrs: Attrs, params: dict[str, Any], rng: random.Random) -> None:
    if rng.random() < 0.65:
        attrs["minute"] = (attrs["minute"] + rng.choice((-15, -10, -5, 5, 10, 15))) % 60
    else:
        attrs["hour"] = (attrs["hour"] - 1 + rng.choice((-2, -1, 1, 2))) % 12 + 1


def _facts(attrs: Attrs) -> list[str]:
    h, m = attrs["hour"], attrs["minute"]
    where = f"at the {h}" if m == 0 else f"between {h} and {h % 12 + 1}"
    return [
        f"the blue hour hand points {where}",
        f"the red minute hand points at the {_mark(m)}",
        f"the clock reads {_time(h, m)}",
    ]


def _caption(attrs: Attrs) -> str:
    h, m = attrs["hour"], attrs["minute"]
    where = f"at the {h}" if m == 0 else f"between the {h} and the {h % 12 + 1}"
    required = [
        f"The image shows an analogue clock with {article(attrs.get('face', 'white'))} face and a thick "
        f"{attrs.get('rim', 'black')} rim on a white background.",
        "The numbers 1 to 12 are printed around the dial, with a small tick mark at every number.",
        "Two hands meet at a black centre dot: a short, thick blue hour hand and a long, thin red minute hand.",
        f"The hour hand points {where} and the minute hand points at the {_mark(m)}, so the clock "
        f"reads {_time(h, m)}.",
    ]
    optional = [
        "There is no second hand and no other text in the picture.",
        "The drawing is flat and simple.",
    ]
    return fit_caption(required, optional)


FAMILY = Family(
    name="clock",
    domain="clock reading",
    keywords=("clock", "time", "hands"),
    scene=_scene,
    questions={
        "read": (_solve_read, ("minute_factor",)),
        "later": (_solve_later, ("no_carry", "arith", "minute_factor")),
    },
    perturb=_perturb,
    facts=_facts,
    draw=_draw,
    caption=_caption,
)
