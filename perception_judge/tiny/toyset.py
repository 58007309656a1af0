"""A small offline training set as ``perception-judge export`` writes it, for tests, benchmarks and dry runs,
independent of the PPJD builder (:func:`write_toy_training_set`, :func:`toy_rows`: drawn counting scenes with a known
answer and the three PPJD responses, r_c correct, r_rp a wrong count with the logic kept, r_rp_r a wrong count and
wrong logic). Held-out splits and fake training runs for the tests are in ``tests/support/fake_run.py``.
"""

from __future__ import annotations

import inspect
import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from perception_judge.core.io import atomic_write_json
from perception_judge.core.schema import RESPONSE_KINDS, content_key, sha256_hex
from perception_judge.core.trainset import rows_to_dataset, split_path, training_row

_COLORS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 60), "yellow": (230, 200, 30)}


def draw_scene(rng: random.Random, size: int) -> tuple[Image.Image, dict[str, int]]:
    """A ``size``-pixel square with a few coloured discs; returns the image and the count per colour."""
    image = Image.new("RGB", (size, size), (250, 250, 250))
    draw = ImageDraw.Draw(image)
    counts: dict[str, int] = {}
    r = max(2, size // 12)
    for name in rng.sample(sorted(_COLORS), 2):
        counts[name] = rng.randint(1, 4)
        for _ in range(counts[name]):
            x, y = rng.randint(r, size - r), rng.randint(r, size - r)
            draw.ellipse((x - r, y - r, x + r, y + r), fill=_COLORS[name])
    return image, counts


def _responses(colour: str, n: int, rng: random.Random) -> dict[str, str]:
    wrong = n + rng.choice([1, 2])
    wrong2 = max(0, n - 1) if n > 1 else n + 3
    return {
        "r_c": f"I count the {colour} discs one by one: there are {n}. The answer is \\boxed{{{n}}}.",
        "r_rp": f"I count the {colour} discs one by one: there are {wrong}. The answer is \\boxed{{{wrong}}}.",
        "r_rp_r": f"There are {wrong2} discs of other colours, so {colour} must be {wrong2}. \\boxed{{{wrong2}}}",
    }


def toy_rows(
    n: int,
    protocols: tuple[str, ...] = ("batch", "pair", "single"),
    image_size: int = 56,
    seed: int = 0,
    text_only_every: int = 0,
    text_only_pattern: str = "",
) -> list[dict[str, Any]]:
    """``n`` training rows cycling through ``protocols``, one image each; every ``text_only_every``-th row (from
    the last one of each cycle) is text-only, as exported for items without an image. ``text_only_pattern``
    (e.g. ``"IITT"``, repeated over the rows) says it row by row instead: ``T`` text-only, ``I`` with its image."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        protocol = protocols[i % len(protocols)]
        image, counts = draw_scene(rng, image_size)
        colour = rng.choice(sorted(counts))
        question = f"How many {colour} discs are in the image?"
        texts = _responses(colour, counts[colour], rng)
        if protocol == "single":
            kinds = [rng.choice(RESPONSE_KINDS)]
        else:
            kinds = list(RESPONSE_KINDS) if protocol == "batch" else ["r_c", rng.choice(["r_rp", "r_rp_r"])]
            rng.shuffle(kinds)
        if text_only_pattern:
            text_only = text_only_pattern[i % len(text_only_pattern)] == "T"
        else:
            text_only = bool(text_only_every) and (i + 1) % text_only_every == 0
        if text_only:
            question = question.replace("in the image", f"in a picture that shows {counts[colour]} of them")
        images, key = [] if text_only else [image], content_key("toy", seed, i, protocol)
        rows.append(training_row(protocol, question, texts, kinds, images, key, sha256_hex(image.tobytes())))
    return rows


def write_toy_training_set(
    folder: str | Path, n_train: int = 16, n_validation: int = 4, **options: Any
) -> Path:
    """Write a toy training set folder (``train.parquet``, ``validation.parquet``, ``export_info.json``) of
    :func:`toy_rows` with ``options`` (its keyword arguments, recorded in ``export_info.json``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = toy_rows(n_train + n_validation, **options)
    rows_to_dataset(rows[:n_train]).to_parquet(str(split_path(folder, "train")))
    if n_validation:
        rows_to_dataset(rows[n_train:]).to_parquet(str(split_path(folder, "validation")))
    defaults = {k: p.default for k, p in inspect.signature(toy_rows).parameters.items() if k != "n"}
    counts = {"train": n_train, "validation": n_validation}
    info = {"source": "perception_judge.tiny.toyset", "counts": counts} | defaults | options
    atomic_write_json(folder / "export_info.json", info, indent=2)
    return folder
