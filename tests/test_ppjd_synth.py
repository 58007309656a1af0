"""The synthetic perceptual source: determinism, spec keys, and attributes checked on the drawn pixels."""

from __future__ import annotations

import io
import json
import math
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from perception_judge import synth
from perception_judge.core.answers import answers_match, extract_final_answer
from perception_judge.tiny import world as toy


@pytest.fixture(scope="module")
def items():
    return synth.generate_items(160, seed=11)


def _by_family(items, family):
    out = [it for it in items if it.spec["family"] == family]
    assert out, f"no {family} items"
    return out


def _components(mask: np.ndarray) -> list[np.ndarray]:
    """4-connected components of a boolean mask, as arrays of (y, x)."""
    seen = np.zeros_like(mask, dtype=bool)
    comps = []
    h, w = mask.shape
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        stack = [(y0, x0)]
        seen[y0, x0] = True
        pts = []
        while stack:
            y, x = stack.pop()
            pts.append((y, x))
            for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        comps.append(np.array(pts))
    return comps


def _mask(img: Image.Image, rgb) -> np.ndarray:
    return np.all(np.asarray(img.convert("RGB")) == np.array(rgb, dtype=np.uint8), axis=-1)


def _shape_of(pts: np.ndarray) -> str:
    ys, xs = pts[:, 0], pts[:, 1]
    fill = len(pts) / ((ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1))
    if fill > 0.95:
        return "square"
    if fill > 0.7:
        return "circle"
    return "triangle"


def test_deterministic_per_seed_and_prefix_stable():
    a = synth.generate_items(12, seed=5)
    b = synth.generate_items(12, seed=5)
    c = synth.generate_items(6, seed=5)
    d = synth.generate_items(12, seed=6)
    key = lambda it: (it.item_id, it.question, it.answer, it.response, json.dumps(it.spec, sort_keys=True))  # noqa: E731
    assert [key(x) for x in a] == [key(x) for x in b]
    assert [key(x) for x in a[:6]] == [key(x) for x in c]
    assert [key(x) for x in a] != [key(x) for x in d]
    for x, y in zip(a, b):
        if x.image is not None:
            assert x.image.tobytes() == y.image.tobytes()


def test_spec_keys_caption_keywords(items):
    families = Counter(it.spec["family"] for it in items)
    assert set(families) == {"objects", "bars", "table", "clock", "text"}
    assert families["text"] == round(160 * synth.DEFAULT_TEXT_ONLY_FRACTION)
    for it in items:
        spec = it.spec
        for key in ("family", "attributes", "caption", "keywords", "domain", "qtype", "params", "facts"):
            assert key in spec, key
        assert 3 <= len(spec["keywords"]) <= 6, spec["keywords"]
        assert 3 <= len(spec["facts"]) <= 6
        if spec["family"] == "text":
            assert it.image is None and spec["caption"] == ""
        else:
            assert isinstance(it.image, Image.Image) and it.image.size == (256, 256)
            assert 60 <= synth.word_count(spec["caption"]) <= 100, spec["caption"]
        json.dumps(spec)  # JSON-serialisable


def test_response_is_step_by_step_and_boxes_the_answer(items):
    for it in items:
        assert it.response.startswith("Step 1:")
        assert it.response.rstrip().endswith("}.")
        assert answers_match(extract_final_answer(it.response), it.answer)
        assert synth.solve(it.spec) == (it.response, it.answer)


def test_objects_colours_counts_and_shapes_match_the_pixels(items):
    for it in _by_family(items, "objects"):
        groups = it.spec["attributes"]["groups"]
        expected = Counter({(g["colour"], g["shape"]): g["count"] for g in groups})
        found: Counter = Counter()
        for name, rgb in synth.COLOURS.items():
            for comp in _components(_mask(it.image, rgb)):
                assert len(comp) > 200, "a shape is too small or split"
                found[(name, _shape_of(comp))] += 1
        assert found == expected, it.item_id
        assert sum(found.values()) == it.spec["attributes"]["total"]


def test_bar_values_and_colours_match_the_pixels(items):
    unit = synth.bar_unit_px()
    for it in _by_family(items, "bars"):
        bars = it.spec["attributes"]["bars"]
        for i, bar in enumerate(bars):
            comps = _components(_mask(it.image, synth.COLOURS[bar["colour"]]))
            assert len(comps) == 1, (it.item_id, bar)
            ys, xs = comps[0][:, 0], comps[0][:, 1]
            assert abs((ys.max() - ys.min() + 1) - bar["value"] * unit) <= 1.0
            x0, x1 = synth.bar_geometry(len(bars), i)
            assert (xs.min(), xs.max()) == (x0, x1)


def test_clock_hands_point_at_the_time(items):
    cx, cy = synth.CLOCK_CENTRE
    for it in _by_family(items, "clock"):
        a = it.spec["attributes"]
        want_h, want_m = synth.hand_angles(a["hour"], a["minute"])
        for colour, want in ((a["hour_hand"], want_h), (a["minute_hand"], want_m)):
            ys, xs = np.nonzero(_mask(it.image, synth.COLOURS[colour]))
            far = np.argmax((xs - cx) ** 2 + (ys - cy) ** 2)
            angle = math.degrees(math.atan2(xs[far] - cx, -(ys[far] - cy))) % 360
            diff = min(abs(angle - want), 360 - abs(angle - want))
            assert diff < 6, (it.item_id, colour, angle, want)


def test_table_rows_and_header_match_the_pixels(items):
    for it in _by_family(items, "table"):
        rows = it.spec["attributes"]["rows"]
        column = _mask(it.image, synth.TABLE_GRID_RGB)[:, synth.TABLE_COLS[0] + 3]
        lines = int(np.sum(column[1:] & ~column[:-1]) + column[0])
        assert lines == len(rows) + 2
        header = _mask(it.image, synth.TABLE_HEADER_RGB)
        assert header.sum() > 1000


def test_write_synthetic_folder(tmp_path):
    info = synth.write_synthetic(tmp_path, 14, seed=2)
    rows = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert len(rows) == 14 == info["n"]
    assert json.loads((tmp_path / "synth_info.json").read_text())["seed"] == 2
    reference = synth.generate_items(14, seed=2)
    for row, item in zip(rows, reference):
        assert row["item_id"] == item.item_id and row["answer"] == item.answer
        if item.image is None:
            assert row["image"] is None
        else:
            assert row["image"] == f"images/{item.item_id}.png"
            on_disk = Image.open(io.BytesIO((tmp_path / row["image"]).read_bytes())).convert("RGB")
            assert on_disk.tobytes() == item.image.tobytes()
    with pytest.raises(FileExistsError):
        synth.write_synthetic(tmp_path, 3, seed=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"families": ["pie"]}, "unknown synthetic families"),
        ({"text_only_fraction": 1.5}, "text_only_fraction"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        synth.generate_items(3, 0, **kwargs)


def test_families_filter_and_text_only():
    only_clocks = synth.generate_items(8, 0, families=["clock"], text_only_fraction=0.0)
    assert {it.spec["family"] for it in only_clocks} == {"clock"}
    all_text = synth.generate_items(5, 0, text_only_fraction=1.0)
    assert all(it.image is None for it in all_text)
    assert all(it.image is None for it in synth.generate_items(4, 0, families=["text"]))
    mixed = synth.generate_items(6, 0, families=["bars", "text"], text_only_fraction=0.0)
    assert [it.spec["family"] for it in mixed] == ["bars", "text"] * 3


def test_the_synth_command_draws_the_toy_families_the_registry_names_by_module_path(tmp_path):
    """``perception-judge synth --families colour,count``: the toy wing's families, reached through the registry's
    ``module:attribute`` entries (nothing of synth imports the toy), at their own image size."""
    from perception_judge.cli import main
    from perception_judge.synth.world import REGISTRY, family

    flags = ["--families", "colour,count", "--text-only-fraction", "0", "--no-progress"]
    assert main(["synth", "--n", "4", "--out", str(tmp_path), *flags]) == 0
    info = json.loads((tmp_path / "synth_info.json").read_text())
    assert info["counts"] == {"colour": 2, "count": 2} and info["image_size"] == [toy.TINY_IMAGE_SIZE] * 2
    assert family("count") is toy.COUNT and REGISTRY["colour"] is toy.COLOUR
    assert synth.write_synthetic(tmp_path / "w", 2, 0, ["colour", "bars"])["image_size"] == [256, 256]


def test_tiny_families_stay_in_range_and_leave_no_text_shortcut():
    """r_rp states another value the generator draws, uniformly, and r_rp+r slips to an in-range answer: a rule
    that reads only the text cannot tell r_c from r_rp (the old +-2 unclamped count perturbation could)."""
    from collections import Counter

    from perception_judge.ppjd.programmatic import ProgrammaticTeacher
    from perception_judge.ppjd.teacher import TeacherInput

    items = synth.generate_items(400, 3, families=toy.TINY_FAMILIES, text_only_fraction=0.0)
    teacher = ProgrammaticTeacher(seed=0)
    seen: dict[str, Counter] = {"r_c": Counter(), "r_rp": Counter()}
    for item in items:
        fam = item.spec["family"]
        values = toy.tiny_values(fam)
        assert item.image.size == (toy.TINY_IMAGE_SIZE,) * 2
        cf = teacher.counterfactuals(TeacherInput(item.item_id, item, item.image))
        v_c, v_rp, v_rpr = (toy.response_value(t) for t in (item.response, cf.r_rp, cf.r_rp_r))
        assert v_c == toy.tiny_value(item.spec) and v_rp != v_c and v_rpr != v_c
        assert {v_c, v_rp, v_rpr} <= set(values)
        slipped = extract_final_answer(cf.r_rp_r)
        assert slipped in values and slipped != v_rpr  # the slip stays in range
        seen["r_c"][(fam, v_c)] += 1
        seen["r_rp"][(fam, v_rp)] += 1
    for fam in toy.TINY_FAMILIES:  # every value is stated about as often by r_c as by r_rp
        for v in toy.tiny_values(fam):
            a, b = seen["r_c"][(fam, v)], seen["r_rp"][(fam, v)]
            assert a > 20 and b > 20 and abs(a - b) < 0.6 * max(a, b), (fam, v, a, b)


def test_tiny_images_show_their_value():
    items = synth.generate_items(60, 1, families=toy.TINY_FAMILIES, text_only_fraction=0.0)
    for item in items:
        img = item.image
        attrs = item.spec["attributes"]
        if item.spec["family"] == "colour":
            x0, y0, x1, y1 = attrs["box"]
            assert img.getpixel(((x0 + x1) // 2, (y0 + y1) // 2)) == synth.COLOURS[attrs["colour"]]
        else:
            pixels = np.asarray(img)
            ink = np.all(pixels == toy.TINY_INK, axis=-1)
            quadrants = [
                ink[r * 28 : (r + 1) * 28, c * 28 : (c + 1) * 28].any() for r in (0, 1) for c in (0, 1)
            ]
            assert (
                sum(quadrants) == attrs["count"]
                and [i for i, q in enumerate(quadrants) if q] == attrs["cells"]
            )
    distinct = {it.image.tobytes() for it in items}
    assert len(distinct) == len(items), "size and place vary: held-out images are new images"
