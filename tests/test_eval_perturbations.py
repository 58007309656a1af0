"""The nine perturbation generators, checked on real pixels, and pair building from any base set."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image, ImageDraw

from perception_judge.core.images import PixelPolicy
from perception_judge.core.schema import SourceItem
from perception_judge.evaluation.bias import perturbations as P
from perception_judge.evaluation.bias.items import (
    BaseItem,
    builtin_base_items,
    from_source_item,
    query_keywords,
)
from perception_judge.evaluation.bias.taxonomy import BIAS_TYPES


def _scene(size=(96, 72), colour=(200, 30, 30)) -> Image.Image:
    img = Image.new("RGB", size, (240, 240, 240))
    d = ImageDraw.Draw(img)
    d.ellipse((10, 10, 40, 40), fill=colour)
    d.rectangle((50, 20, 80, 60), fill=(30, 30, 200))
    return img


def _items() -> list[BaseItem]:
    return [
        BaseItem(
            "a",
            "How many red circles are there?",
            "One.",
            _scene(),
            "A red circle " * 20,
            ["red", "circles"],
            "shapes",
            flip_safe=True,
        ),
        BaseItem(
            "b",
            "What does the sign say?",
            "STOP.",
            _scene(colour=(0, 200, 0)),
            "A sign " * 30,
            ["sign"],
            "text",
        ),
        BaseItem(
            "c",
            "What is shown in the chart?",
            "Bars.",
            _scene((80, 80), (0, 0, 0)),
            "A chart " * 30,
            [],
            "charts",
        ),
        BaseItem("t1", "What is 2 + 3?", "5.", None, "", [], "arithmetic"),
        BaseItem("t2", "Name a prime number.", "7.", None, "", [], "arithmetic"),
    ]


def test_null_image_is_black_224_and_jpeg_decodes_to_zeros():
    img = P.null_image()
    assert img.size == (224, 224) and img.mode == "RGB"
    assert not np.asarray(img).any()
    decoded = Image.open(io.BytesIO(P.null_image_jpeg()))
    assert decoded.size == (224, 224) and not np.asarray(decoded.convert("RGB")).any()
    # still all zeros after the training pixel policy
    assert not np.asarray(PixelPolicy().apply(img)).any()


def test_query_generators():
    assert P.empty_query() == ""
    assert P.append_caption("Q?", "  A long caption.  ") == "Q? A long caption."
    with pytest.raises(ValueError):
        P.append_caption("Q?", " ")


def test_swaps_pick_another_item_preferably_of_another_domain():
    items = _items()
    rng = random.Random(0)
    for _ in range(20):
        q, donor = P.swap_query(items[0], items, rng)
        assert donor.item_id != "a" and q == donor.query and donor.domain != "shapes"
        img, donor = P.swap_image(items[0], items, rng)
        assert donor.image is not None and img is donor.image and donor.item_id != "a"
    img, donor = P.attach_unrelated_image(items[3], items, rng)
    assert donor.image is not None and img is donor.image
    with pytest.raises(ValueError, match="text-only"):
        P.attach_unrelated_image(items[0], items, rng)
    with pytest.raises(ValueError, match="no donor"):
        P.swap_image(items[0], [items[0]], rng)


@pytest.mark.parametrize("op", P.TRANSFORM_OPS)
@pytest.mark.parametrize(
    "policy",
    [
        PixelPolicy(),
        PixelPolicy(mode="smart", factor=28, max_pixels=448 * 448),
        PixelPolicy(mode="fixed", size=64, factor=32),
    ],
    ids=["fixed448", "smart28", "fixed64"],
)
def test_each_transform_keeps_the_size_policy(op, policy):
    img = _scene((120, 90))
    out, done = P.visual_transform(img, random.Random(3), ops=[op], flip_safe=True)
    assert out.mode == "RGB" and len(done) == 1
    w, h = out.size
    if op in P.PHOTOMETRIC_OPS:
        assert out.size == img.size
    else:
        assert min(w, h) >= 0.75 * 90 and max(w, h) <= 1.5 * 120  # never blown up or collapsed
    resized = policy.apply(out)
    assert resized.size == policy.target_size(w, h)
    if policy.mode != "none":
        assert resized.size[0] % policy.factor == 0 and resized.size[1] % policy.factor == 0


def test_transforms_change_pixels_but_not_too_much():
    img = _scene((120, 90))
    for op in ("brightness", "contrast", "blur", "jpeg", "grayscale", "hue", "saturation"):
        out, _ = P.visual_transform(img, random.Random(1), ops=[op])
        diff = np.abs(np.asarray(out, dtype=int) - np.asarray(img, dtype=int)).mean()
        assert 0 < diff < 80, (op, diff)
    out, _ = P.visual_transform(img, random.Random(1), ops=["rotate180"], flip_safe=True)
    assert np.array_equal(np.asarray(out), np.asarray(img)[::-1, ::-1])


def test_random_transforms_respect_orientation_safety():
    img = _scene()
    for seed in range(60):
        _, done = P.visual_transform(img, random.Random(seed), flip_safe=False)
        assert 1 <= len(done) <= 2
        assert not any(d.startswith(("hflip", "rotate90", "rotate180", "rotate270")) for d in done)
    with pytest.raises(ValueError, match="flip_safe"):
        P.visual_transform(img, random.Random(0), ops=["hflip"])
    with pytest.raises(ValueError, match="unknown visual transformation"):
        P.visual_transform(img, random.Random(0), ops=["melt"], flip_safe=True)


def test_text_insertion_adds_a_strip_holding_the_keywords():
    img = _scene((200, 150))
    out, info = P.insert_text(img, keywords=["red", "circles", "count"], rng=random.Random(0))
    w, h = out.size
    assert w == 200 and h == 150 + info["strip_height"]
    assert (
        0.30 * 150 <= info["strip_height"] <= 150
    )  # at least 0.3x the height, more only if the text needs it
    a = np.asarray(out)
    assert np.array_equal(a[:150], np.asarray(img))  # the original, pixel-identical, on top
    assert info["lines"][0] == P.KEYWORDS_HEADER
    body = " ".join(info["lines"][1:])
    assert all(k in body for k in ("red", "circles", "count"))
    x0, y0, x1, y1 = info["box"]
    assert y0 >= 150 and y1 == h - P.BOTTOM_MARGIN
    box = a[y0:y1, x0:x1]
    grey = np.all(box == P.BOX_GREY, axis=-1).mean()
    white = np.all(box >= 245, axis=-1).mean()
    black = np.all(box <= 10, axis=-1).mean()
    assert grey > 0.4 and white > 0.01 and black > 0.01  # a grey box with white text outlined in black
    margin = a[150:y0]
    assert np.all(margin == 255)  # the strip above the box is white


def test_text_insertion_query_mode_and_tiny_images():
    out, info = P.insert_text(Image.new("RGB", (48, 40), "navy"), query="How many boats?", mode="query")
    assert info["lines"][0] == P.QUERY_HEADER and out.size[1] > 40
    assert "boats" in " ".join(info["lines"])
    with pytest.raises(ValueError):
        P.insert_text(_scene(), keywords=[])
    with pytest.raises(ValueError):
        P.insert_text(_scene(), mode="sticker")


def test_build_pairs_covers_all_nine_types_with_the_right_sides():
    items = _items()
    pairs = P.build_pairs(items, n_per_type=2, seed=0)
    assert [p.pair_id for p in pairs] == list(range(len(pairs)))
    by_type = {}
    for p in pairs:
        by_type.setdefault(p.bias_type, []).append(p)
    assert list(by_type) == list(BIAS_TYPES)  # canonical order, id blocks by type
    for p in pairs:
        u, b = p.unbiased, p.biased
        assert p.response and p.meta["bias_category"] == p.category
        if p.bias_type == "unnecessary_image":
            assert u.image is None and b.image is not None and b.image_source != p.meta["item_id"]
        else:
            assert u.image is not None
        if p.bias_type in ("text_dominance", "response_dominance"):
            assert not np.asarray(b.image).any() and b.image.size == (224, 224)
        if p.bias_type in ("image_dominance", "response_dominance"):
            assert b.query == ""
        if p.bias_type == "instruction_misalignment":
            assert b.query != u.query and b.image is u.image
        if p.bias_type == "image_misalignment":
            assert b.image is not u.image and b.query == u.query
        if p.bias_type == "detail_description":
            assert b.query.startswith(u.query + " ") and len(b.query) > len(u.query) + 20
        if p.bias_type == "visual_transformation":
            assert p.meta["ops"] and b.query == u.query
        if p.bias_type == "texture_insertion":
            assert b.image.size[1] > u.image.size[1] and p.meta["inserted_text"]
    again = P.build_pairs(items, n_per_type=2, seed=0)
    assert [(p.bias_type, p.meta["item_id"], p.biased.query) for p in again] == [
        (p.bias_type, p.meta["item_id"], p.biased.query) for p in pairs
    ]
    with pytest.raises(ValueError, match="text-only"):
        P.build_pairs([i for i in items if not i.text_only], bias_types=["unnecessary_image"])


def test_builtin_items_have_captions_keywords_and_text_only_items():
    items = builtin_base_items(n_image=6, n_text=2, seed=1)
    assert sum(i.text_only for i in items) == 2
    for i in items:
        if not i.text_only:
            assert 60 <= len(i.caption.split()) <= 100, i.item_id
            assert i.keywords and i.image.size == (224, 224)
    assert query_keywords("How many red circles are in the picture?") == ["red", "circles"]


def test_source_item_adapter():
    src = SourceItem(
        "s1",
        "How many cubes?",
        "3",
        "There are 3 cubes.",
        image=_scene(),
        spec={"family": "objects", "caption": "cap " * 70, "keywords": ["cubes"], "domain": "counting"},
    )
    item = from_source_item(src)
    assert (
        item.image.size == (96, 72)
        and item.keywords == ["cubes"]
        and item.domain == "counting"
        and item.flip_safe
    )
    text = from_source_item(SourceItem("s2", "2+2?", "4", "4.", image=None, spec={"family": "text"}))
    assert text.text_only and text.keywords_or_query() == []


def test_synth_base_items_when_available():
    from perception_judge import synth
    from perception_judge.evaluation.bias.items import synth_base_items

    items = synth_base_items(12, seed=0)
    assert any(i.text_only for i in items) and any(not i.text_only for i in items)
    pairs = P.build_pairs(items, n_per_type=1, seed=0)
    assert {p.bias_type for p in pairs} == set(BIAS_TYPES)
    assert synth is not None
