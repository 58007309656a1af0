"""Every PIL mode becomes the right RGB image; hostile image cells and decompression bombs get their own reasons."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from perception_judge.core.images import ImageError, load_image, to_rgb


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG" if image.mode not in ("CMYK", "F") else "TIFF")
    return buf.getvalue()


def test_high_bit_depth_greyscale_keeps_its_contrast():
    ramp16 = Image.fromarray(np.arange(256, dtype=np.uint16).reshape(16, 16) * 257)
    assert ramp16.mode == "I;16"
    out = np.asarray(load_image(_png(ramp16)))
    assert out.shape == (16, 16, 3) and out.min() == 0 and out.max() == 255  # it used to come out all white
    assert np.array_equal(out[..., 0].ravel(), np.arange(256))
    as_int = Image.fromarray(np.arange(256, dtype=np.int32).reshape(16, 16) * 100)
    assert as_int.mode == "I"
    grey_int = np.asarray(to_rgb(as_int))[..., 0]  # 32-bit values within 0..65535 read as a 16-bit range
    assert grey_int.max() == round(25500 / 65535 * 255) and grey_int[-1, -1] > grey_int[8, 0] > grey_int[0, 0]
    unit = Image.fromarray(np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8))
    assert unit.mode == "F"
    grey = np.asarray(to_rgb(unit))[..., 0]
    assert grey[0, 0] == 0 and grey[-1, -1] == 255 and 100 < grey[4, 0] < 160


def test_alpha_palette_and_cmyk_modes():
    la = Image.new("LA", (4, 4), (0, 0))  # fully transparent black: white background shows
    assert to_rgb(la).getpixel((0, 0)) == (255, 255, 255)
    p = Image.new("P", (4, 4), 1)
    p.putpalette([0, 0, 0, 200, 10, 10] + [0] * 762)
    p.info["transparency"] = 0
    assert to_rgb(p).getpixel((0, 0)) == (200, 10, 10)
    cmyk = Image.new("CMYK", (4, 4), (0, 255, 255, 0))  # pure red in CMYK
    r, g, b = load_image(_png(cmyk)).getpixel((1, 1))
    assert r > 200 and g < 40 and b < 40


def test_hostile_image_cells_and_bombs_get_their_own_reason(monkeypatch):
    for cell in ({"bytes": "some text"}, {"bytes": -1}, {"bytes": 3.5}):
        with pytest.raises(ImageError) as err:
            load_image(cell)
        assert err.value.reason == "bad_path" and "expected the encoded image as bytes" in str(err.value)
    big = _png(Image.new("L", (64, 64)))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 64 x 64 > 2 x 100: PIL refuses it as a bomb
    with pytest.raises(ImageError) as err:
        load_image(big, max_pixels=10**9)
    assert err.value.reason == "decompression_bomb"


def test_unreadable_paths_are_image_errors_not_crashes(tmp_path):
    for bad in ("images/a\x00b.png", str(tmp_path)):  # a NUL byte, a directory
        with pytest.raises(ImageError) as err:
            load_image(bad)
        assert err.value.reason in ("bad_path", "missing")
