"""The family registry and the items: :func:`solve`, :func:`perturb`, :func:`draw` of a scene spec (its keys:
docs/ppjd.md §1), and :func:`generate_items` / :func:`write_synthetic`. A family outside ``synth/`` (the toy wing's
``colour`` and ``count``) is registered by ``module:attribute`` and imported when first named (:func:`family`).

Responses are *rendered from the facts*: :func:`solve` turns (question params, perceived attributes, optional
reasoning slip) into a step-by-step response ending in ``\\boxed{}``, so the programmatic teacher's r_rp keeps r_c's
wording with only the perceptual facts and what follows from them changed. Items are deterministic per (seed,
index): ``generate_items(10, s)[:5] == generate_items(5, s)``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import math
import os
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from PIL import Image

from perception_judge.core.io import atomic_open, atomic_write_text, progress_bar
from perception_judge.core.schema import SourceItem
from perception_judge.synth.bars import FAMILY as BARS
from perception_judge.synth.base import Family, Unsolvable
from perception_judge.synth.clock import FAMILY as CLOCK
from perception_judge.synth.objects import FAMILY as OBJECTS
from perception_judge.synth.table import FAMILY as TABLE
from perception_judge.synth.text import FAMILY as TEXT

SPEC_VERSION = 1
REGISTRY: dict[str, Family | str] = {f.name: f for f in (OBJECTS, BARS, TABLE, CLOCK, TEXT)} | {
    "colour": "perception_judge.tiny.world:COLOUR",
    "count": "perception_judge.tiny.world:COUNT",
}
FAMILIES: tuple[str, ...] = ("objects", "bars", "table", "clock")
TEXT_FAMILY = "text"
DEFAULT_TEXT_ONLY_FRACTION = 0.15


def family(name: str) -> Family:
    """The family ``name`` of :data:`REGISTRY` (one named by ``module:attribute`` is imported now)."""
    entry = REGISTRY[name]
    if isinstance(entry, str):
        module, attr = entry.split(":")
        REGISTRY[name] = entry = getattr(importlib.import_module(module), attr)
    return entry


def slips(spec: dict[str, Any]) -> tuple[str, ...] | None:
    """The reasoning errors a spec's question type can make (for r_rp+r); None for an unknown family or type."""
    question = family(spec["family"]).questions.get(spec["qtype"]) if spec["family"] in REGISTRY else None
    return None if question is None else question[1]


def solve(
    spec: dict[str, Any], attributes: dict[str, Any] | None = None, slip: dict | None = None
) -> tuple[str, str]:
    """(response, final answer) for a spec's question, from ``attributes`` (default: the true ones). ``slip``
    (``{"kind": ..., "delta": ...}``, kinds in :func:`slips`) injects a reasoning error. Raises
    :class:`Unsolvable` when the attributes give no well-defined answer or the slip does not apply."""
    key = (spec["family"], spec["qtype"])
    if (kinds := slips(spec)) is None:
        raise ValueError(f"unknown synthetic question type {key}")
    kind, delta = (slip["kind"], slip.get("delta", 1)) if slip else (None, 0)
    if kind is not None and kind not in kinds:
        raise Unsolvable(f"slip {kind!r} does not apply to {key}")
    solver = family(key[0]).questions[key[1]][0]
    return solver(spec["params"], spec["attributes"] if attributes is None else attributes, kind, delta)


def perturb(spec: dict[str, Any], attributes: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A copy of ``attributes`` with one perceptual fact misread."""
    new = copy.deepcopy(attributes)
    family(spec["family"]).perturb(new, spec["params"], rng)
    return new


def facts(spec: dict[str, Any], attributes: dict[str, Any] | None = None) -> list[str]:
    """The short fact phrases of a spec's attributes (default: the true ones)."""
    return family(spec["family"]).facts(spec["attributes"] if attributes is None else attributes)


def draw(spec: dict[str, Any]) -> Image.Image | None:
    """Redraw the image of a spec (None for text items). Deterministic."""
    drawn = family(spec["family"])
    return drawn.draw(spec["attributes"]) if drawn.draw else None


_STOP = {
    "a", "an", "the", "of", "in", "is", "are", "how", "many", "what", "which", "does", "do", "there", "and",
    "to", "on", "it", "its", "be", "by", "for", "with", "than", "get", "will", "after", "that", "this",
    "shown", "image", "each", "has", "have", "at", "as", "much", "more", "when", "from", "one", "answer",
    "format", "mm", "according", "these", "altogether",
}  # fmt: skip


def _keywords(question: str, extra: Sequence[str]) -> list[str]:
    words = dict.fromkeys(w.lower().strip("'") for w in re.findall(r"[A-Za-z][A-Za-z'-]+|\d+", question))
    out = [w for w in words if w not in _STOP and len(w) >= 2][:5]
    for e in extra:  # the first family word always, more while there are fewer than 3 keywords
        if e not in out and (len(out) < 3 or e == extra[0]):
            out.append(e)
    return out[:6]


def _make_item(seed: int, index: int, name: str) -> SourceItem:
    fam = family(name)
    rng = random.Random(f"perception-judge/synth/v{SPEC_VERSION}/{seed}/{index}")
    attrs, qtype, params, question = fam.scene(rng)
    image = fam.draw(attrs) if fam.draw else None
    spec: dict[str, Any] = {
        "version": SPEC_VERSION,
        "family": name,
        "qtype": qtype,
        "params": params,
        "attributes": attrs,
        "facts": fam.facts(attrs),
        "caption": fam.caption(attrs) if fam.caption else "",
        "keywords": _keywords(question, fam.keywords),
        "domain": fam.domain,
        "text_only": image is None,
    }
    response, answer = solve(spec)
    return SourceItem(
        item_id=f"synth-{seed}-{index:06d}",
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
    if unknown := [f for f in fams if f not in REGISTRY]:
        raise ValueError(f"unknown synthetic families {unknown}; known: {', '.join(REGISTRY)}")
    return fams


def _items(n: int, seed: int, fams: Sequence[str], text_only_fraction: float) -> Iterator[SourceItem]:
    frac = Fraction(text_only_fraction).limit_denominator(1000)
    for i in range(n):
        n_text = math.floor(i * frac)  # text-only items so far: they are spread evenly
        text = math.floor((i + 1) * frac) > n_text
        yield _make_item(seed, i, TEXT_FAMILY if text else fams[(i - n_text) % len(fams)])


def generate_items(
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    text_only_fraction: float = DEFAULT_TEXT_ONLY_FRACTION,
) -> list[SourceItem]:
    """``n`` synthetic items, deterministic per ``seed``, cycling through ``families`` (default: the four
    image families); a ``text_only_fraction`` of them, spread evenly, are text-only (``image`` None, family
    ``"text"``, which ``families`` may also list). ``item.image`` is a PIL image."""
    fams = _check_args(n, families, text_only_fraction)
    return list(_items(n, seed, fams, text_only_fraction))


def write_synthetic(
    out_dir: str | os.PathLike[str],
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    text_only_fraction: float = DEFAULT_TEXT_ONLY_FRACTION,
    overwrite: bool = False,
    progress: bool | None = False,
) -> dict[str, Any]:
    """Write ``items.jsonl``, ``images/<id>.png`` and ``synth_info.json`` into ``out_dir``; returns the info.
    Streams (constant memory). ``items.jsonl`` appears only once complete (written to a temp file, then
    renamed); an existing one is an error unless ``overwrite``."""
    fams = _check_args(n, families, text_only_fraction)
    out = Path(out_dir)
    items_path = out / "items.jsonl"
    if items_path.exists() and not overwrite:
        raise FileExistsError(f"{str(items_path)!r} exists; pass --overwrite to replace it")
    (out / "images").mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    qtypes: Counter[str] = Counter()
    bar = progress_bar(n, "synth", "item", enabled=progress)
    with contextlib.closing(bar), atomic_open(items_path, fsync=False) as f:
        for item in _items(n, seed, fams, text_only_fraction):
            rel = None if item.image is None else f"images/{item.item_id}.png"
            if rel is not None:
                with atomic_open(out / rel, "wb", fsync=False) as png:
                    item.image.save(png, format="PNG")
            f.write(json.dumps({**vars(item), "image": rel}, ensure_ascii=False) + "\n")
            counts[item.spec["family"]] += 1
            qtypes[f"{item.spec['family']}/{item.spec['qtype']}"] += 1
            bar.update(1)
    info = {
        "generator": "perception_judge.ppjd.synth",  # the name files have carried since the first release
        "spec_version": SPEC_VERSION,
        "n": n,
        "seed": seed,
        "families": list(fams),
        "text_only_fraction": text_only_fraction,
        "counts": dict(sorted(counts.items())),
        "question_types": dict(sorted(qtypes.items())),
        "image_size": [max(family(f).image_size for f in fams)] * 2,
    }
    atomic_write_text(out / "synth_info.json", json.dumps(info, indent=2) + "\n")
    return info
