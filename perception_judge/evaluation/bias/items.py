"""Base items of the bias suite: neutral (image, query, response) items the perturbations are applied to.

Image items need a caption (detail-description bias) and keywords (text-insertion bias; :func:`query_keywords`
of the query when missing); the synthetic world's scene specs hold both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from PIL import Image

from perception_judge.core.images import load_image

_STOPWORDS = frozenset(  # words that are never keywords (besides the ones shorter than 3 characters)
    """a an the of in on at to for from by with and or is are was were be been being this that these those what
    which who whom whose how many much does do did there their they it its as into than then image picture shown
    shows show please answer question give your you me can could would should one two""".split()  # noqa: SIM905 - 66 words read better as text than as 66 lines
)
_FLIP_SAFE_FAMILIES = ("shapes", "objects", "dots", "dot_grid", "clevr")


@dataclass
class BaseItem:
    """One unperturbed item: ``image`` a PIL image (RGB), or None for a text-only item; ``flip_safe``: the content
    is orientation-free (shapes to count: no text, chart, clock or left/right fact), so the visual-transformation
    bias may flip it and turn it by quarter turns."""

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
    out: list[str] = []
    for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]*|[0-9]+", query):
        if len(out) < k and len(w) >= 3 and w.lower() not in _STOPWORDS | {o.lower() for o in out}:
            out.append(w)
    return out


def from_source_item(src: Any) -> BaseItem:
    """Adapt a :class:`~perception_judge.core.schema.SourceItem` (or anything with the same attributes)."""
    spec = dict(getattr(src, "spec", None) or {})
    family = str(spec.get("family") or "")
    image = getattr(src, "image", None)
    keywords = spec.get("keywords") or []
    if isinstance(keywords, str):
        keywords = [k.strip() for k in keywords.split(",") if k.strip()]
    return BaseItem(
        item_id=str(src.item_id),
        query=str(src.question),
        response=str(src.response),
        image=None if image is None or family == "text" else load_image(image),
        caption=str(spec.get("caption") or ""),
        keywords=[str(k) for k in keywords],
        domain=str(spec.get("domain") or family or getattr(src, "source", "") or ""),
        flip_safe=bool(spec.get("flip_safe", family in _FLIP_SAFE_FAMILIES)),
        source=str(getattr(src, "source", "") or "synth"),
        meta={"family": family, "answer": getattr(src, "answer", "")},
    )


def synth_base_items(n: int, seed: int = 0) -> list[BaseItem]:
    """Base items from the synthetic world (image items, and text-only items added when none was drawn)."""
    from perception_judge.synth import generate_items

    items = [from_source_item(s) for s in generate_items(n, seed)]
    if not any(i.text_only for i in items):
        items += [from_source_item(s) for s in generate_items(max(2, n // 4), seed + 1, families=["text"])]
    return items


def builtin_base_items(n_image: int = 6, n_text: int = 3, seed: int = 0, size: int = 224) -> list[BaseItem]:
    """A small deterministic base set from the synthetic world: ``n_image`` image items (objects, bars and table
    families in turn, resized to ``size`` px, with captions and keywords) and ``n_text`` text-only items."""
    from perception_judge import synth

    families = ("objects", "bars", "table")
    drawn = {
        f: synth.generate_items(len(range(k, n_image, 3)), seed, families=[f]) for k, f in enumerate(families)
    }
    items = []
    for i in range(n_image):
        item = from_source_item(drawn[families[i % 3]][i // 3])
        image = item.image.resize((size, size))
        items.append(replace(item, item_id=f"builtin-{families[i % 3]}-{i}", image=image, source="builtin"))
    texts = synth.generate_items(n_text, seed, families=[synth.TEXT_FAMILY])
    items += [
        replace(from_source_item(s), item_id=f"builtin-text-{i}", source="builtin")
        for i, s in enumerate(texts)
    ]
    return items
