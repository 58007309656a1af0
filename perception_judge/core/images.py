"""Image loading and the one pixel policy shared by the PPJD export, the trainer, vLLM rollouts and evaluation.

Qwen-VL image sides should be multiples of 28 (14 px patches merged 2×2) or 32 (Qwen3-VL), vLLM colocate mode in
trl 1.16 breaks on batches of mixed image sizes (trl#6401), and the published release evaluated on 448×448 squares:
:class:`PixelPolicy` is one policy applied everywhere a judge sees an image. ``mode="fixed"`` (default): every image
a ``size × size`` square; ``"smart"``: aspect kept, sides rounded to ``factor``, area within [min_pixels,
max_pixels]; ``"none"``: images left alone (the processor then resizes them itself).
"""

from __future__ import annotations

import base64
import io
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from PIL import Image, UnidentifiedImageError
from pydantic import ConfigDict, model_validator

from perception_judge.core.options import Flag, Options

# Decompression-bomb guard: refuse anything above this many pixels before decoding it.
DEFAULT_MAX_IMAGE_PIXELS = 64_000_000
DEFAULT_MAX_IMAGE_BYTES = 64 * 1024 * 1024


class ImageError(ValueError):
    """An image could not be used; ``reason`` is a short machine-readable code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


class PixelPolicy(Options):
    """The one pixel-policy record (the module docstring): the eval job's ``backend.pixel_policy``, the recipe's and
    the run file's ``pixel_policy``."""

    model_config = ConfigDict(frozen=True)
    mode: Annotated[Literal["fixed", "smart", "none"], Flag("--pixel-mode")] = "fixed"
    """pixel policy mode (default: the run's, else fixed)"""
    size: Annotated[int, Flag("--pixel-size")] = 448
    """fixed pixel policy size (default: the run's, else 448)"""
    min_pixels: int = 56 * 56
    max_pixels: int = 448 * 448
    factor: int = 28

    @model_validator(mode="after")
    def _check(self) -> PixelPolicy:
        if self.factor < 1 or self.size < self.factor:
            raise ValueError(
                f"pixel policy needs size >= factor >= 1 (size={self.size}, factor={self.factor})"
            )
        if self.mode == "fixed" and self.size % self.factor:
            raise ValueError(
                f"fixed image size {self.size} is not a multiple of the patch factor {self.factor}"
            )
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels}, {self.max_pixels}")
        return self

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) this policy gives an image of the given size."""
        if self.mode == "none":
            return width, height
        if self.mode == "fixed":
            return self.size, self.size
        return smart_resize(width, height, self.factor, self.min_pixels, self.max_pixels)

    def apply(self, image: Image.Image) -> Image.Image:
        """RGB image resized by the policy (bicubic)."""
        image = to_rgb(image)
        size = self.target_size(*image.size)
        return image if size == image.size else image.resize(size, Image.Resampling.BICUBIC)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


def processor_pixel_bounds(processor: Any) -> tuple[int, int] | None:
    """(least, largest) image area in pixels a Qwen-VL processor keeps as it is (it resizes images outside them):
    its image processor's ``min_pixels`` / ``max_pixels``, or ``size["shortest_edge"]`` / ``["longest_edge"]``;
    None when it names none."""
    image_processor = getattr(processor, "image_processor", processor)
    size = getattr(image_processor, "size", None)

    def field(name: str, size_key: str) -> Any:
        value = getattr(image_processor, name, None)
        if value is None and size is not None:  # a dict, or transformers 5's SizeDict
            value = size.get(size_key) if isinstance(size, dict) else getattr(size, size_key, None)
        return value

    low, high = field("min_pixels", "shortest_edge"), field("max_pixels", "longest_edge")
    return (int(low), int(high)) if low and high else None


def pixel_policy_conflict(policy: PixelPolicy, bounds: tuple[int, int] | None) -> str | None:
    """Why the model's processor would resize images this policy made (None when it keeps them): a fixed side
    whose area, or smart bounds that, fall outside the processor's (least, largest) area. The processor's resize
    is silent, and the image-token counts the project computes from the policy would be wrong."""
    if bounds is None or policy.mode == "none":
        return None
    low, high = bounds
    if policy.mode == "fixed":
        area = policy.size * policy.size
        if not low <= area <= high:
            return (
                f"size {policy.size} ({area:,} pixels) is outside the model processor's "
                f"{low:,}-{high:,} pixels: it would resize every image"
            )
        return None
    if policy.min_pixels < low or policy.max_pixels > high:
        return (
            f"min_pixels/max_pixels {policy.min_pixels:,}-{policy.max_pixels:,} reach outside the model "
            f"processor's {low:,}-{high:,} pixels: it would resize those images"
        )
    return None


def smart_resize(
    width: int, height: int, factor: int = 28, min_pixels: int = 56 * 56, max_pixels: int = 448 * 448
) -> tuple[int, int]:
    """Sides rounded to multiples of ``factor``, aspect ratio kept, area clamped to [min_pixels, max_pixels]."""
    if width < 1 or height < 1:
        raise ImageError("bad_size", f"{width}x{height}")
    if max(width, height) / min(width, height) > 200:
        raise ImageError("bad_aspect", f"aspect ratio of {width}x{height} exceeds 200")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return w, h


def _to_8bit(image: Image.Image) -> Image.Image:
    """An ``L`` image from a 16-bit, 32-bit integer or float single-channel image, by its value range (PIL's own
    ``convert`` clips at 255, so a 16-bit greyscale scan came out white)."""
    import numpy as np

    a = np.asarray(image, dtype=np.float64)
    if image.mode.startswith("I;16"):
        top = 65535.0
    elif image.mode == "F" and a.size and np.nanmax(a) <= 1.0 and np.nanmin(a) >= 0.0:
        top = 1.0
    else:
        finite = a[np.isfinite(a)]
        hi = float(finite.max()) if finite.size else 0.0
        top = 255.0 if hi <= 255.0 else (65535.0 if hi <= 65535.0 else hi)
    a = np.nan_to_num(a, nan=0.0, posinf=top, neginf=0.0)
    return Image.fromarray(np.clip(np.rint(a / top * 255.0), 0, 255).astype(np.uint8), mode="L")


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB from any PIL mode: transparency over white, 16-bit / 32-bit / float greyscale scaled by its range."""
    if image.mode == "RGB":
        return image
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        return _to_8bit(image).convert("RGB")
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.split()[-1])
        return background
    return image.convert("RGB")


def resolve_under(root: str | os.PathLike[str], relative: str) -> Path:
    """Resolve a relative image path under ``root``; refuse absolute paths and escapes (``..``, symlinks)."""
    if not isinstance(relative, str) or not relative.strip():
        raise ImageError("bad_path", "empty image path")
    if os.path.isabs(relative) or relative.startswith(("/", "\\")) or relative[1:2] == ":":
        raise ImageError("path_escapes_root", f"absolute image path {relative!r} is not allowed")
    if "\x00" in relative:
        raise ImageError("bad_path", f"image path {relative[:80]!r} contains a NUL byte")
    try:
        root_path = Path(root).resolve()
        candidate = (root_path / relative).resolve()
    except (OSError, ValueError) as e:  # a name the file system refuses
        raise ImageError("bad_path", f"image path {relative[:80]!r}: {type(e).__name__}: {e}") from None
    if candidate != root_path and root_path not in candidate.parents:
        raise ImageError(
            "path_escapes_root", f"image path {relative!r} leaves the image root {str(root_path)!r}"
        )
    return candidate


def read_image_file(path: Path, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> bytes:
    """The bytes of an image file; :class:`ImageError` ``missing`` or ``too_large`` (checked before reading)."""
    if not path.is_file():
        raise ImageError("missing", f"no image file at {str(path)!r}")
    size = path.stat().st_size
    if size > max_bytes:
        raise ImageError("too_large", f"{str(path)!r} is {size} bytes (limit {max_bytes})")
    return path.read_bytes()


def cell_value(cell: dict[str, Any]) -> bytes | str:
    """The encoded image of a ``{"bytes", "path"}`` cell (the datasets Image cell), else its path. ImageError
    ``missing`` when it has neither, ``bad_path`` when its bytes are not bytes (a hostile or broken row)."""
    raw = cell.get("bytes")
    if raw is None or raw == b"":
        if not cell.get("path"):
            raise ImageError("missing", "image cell has neither bytes nor path")
        return cell["path"]
    if not isinstance(raw, bytes | bytearray | memoryview):
        kind = type(raw).__name__
        raise ImageError("bad_path", f"image cell 'bytes' is {kind}, expected the encoded image as bytes")
    return bytes(raw)


def load_image(
    src: Any,
    root: str | os.PathLike[str] | None = None,
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> Image.Image:
    """Load an RGB image from a path (relative to ``root`` when given), bytes, a data URL, a ``{"bytes",
    "path"}`` dict (the datasets Image cell), or a PIL image. Raises :class:`ImageError` with a reason code:
    ``missing``, ``bad_path``, ``path_escapes_root``, ``too_large``, ``decompression_bomb``, ``corrupt``."""
    if isinstance(src, Image.Image):
        _check_pixels(src.size, max_pixels)
        return to_rgb(src)
    if isinstance(src, dict):
        return load_image(cell_value(src), root, max_bytes, max_pixels)
    if isinstance(src, bytes | bytearray | memoryview):
        data = bytes(src)
    elif isinstance(src, str | os.PathLike):
        s = os.fspath(src)
        if s.startswith("data:"):
            data = decode_data_url(s)
        else:
            try:
                data = read_image_file(resolve_under(root, s) if root is not None else Path(s), max_bytes)
            except ImageError:
                raise
            except (OSError, ValueError) as e:  # a name too long, a directory, permissions ...
                detail = f"cannot read image {s[:120]!r}: {type(e).__name__}: {e}"
                raise ImageError("bad_path", detail) from None
    elif src is None:
        raise ImageError("missing", "no image")
    else:
        raise ImageError("bad_path", f"unsupported image value of type {type(src).__name__}")
    if len(data) > max_bytes:
        raise ImageError("too_large", f"{len(data)} bytes (limit {max_bytes})")
    if not data:
        raise ImageError("corrupt", "empty image data")
    try:
        image = Image.open(io.BytesIO(data))  # lazy: the size is known before any pixel is decoded
        _check_pixels(image.size, max_pixels)
        image.load()
    except ImageError:
        raise
    except Image.DecompressionBombError as e:
        raise ImageError("decompression_bomb", f"{e}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ImageError("corrupt", f"{type(e).__name__}: {e}") from None
    return to_rgb(image)


def _check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    if size[0] * size[1] > max_pixels:
        raise ImageError("too_large", f"{size[0]}x{size[1]} exceeds {max_pixels} pixels")


def image_bytes(image: Image.Image, fmt: str = "PNG", quality: int = 90) -> bytes:
    buf = io.BytesIO()
    jpeg = fmt.upper() in ("JPEG", "JPG")
    to_rgb(image).save(buf, format="JPEG" if jpeg else fmt, **({"quality": quality} if jpeg else {}))
    return buf.getvalue()


def downscale(image: Image.Image, max_side: int) -> Image.Image:
    """Shrink (never enlarge) so the longest side is at most ``max_side`` (LANCZOS)."""
    w, h = image.size
    if max(w, h) <= max_side:
        return image
    scale = max_side / max(w, h)
    return image.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.LANCZOS)


def to_data_url(image: Image.Image, max_side: int | None = 1024, fmt: str = "JPEG", quality: int = 90) -> str:
    """A base64 data URL for OpenAI-compatible ``image_url`` parts, downscaled to ``max_side``."""
    image = to_rgb(image)
    if max_side:
        image = downscale(image, max_side)
    mime = "jpeg" if fmt.upper() in ("JPEG", "JPG") else fmt.lower()
    return f"data:image/{mime};base64," + base64.b64encode(image_bytes(image, fmt, quality)).decode("ascii")


def decode_data_url(url: str) -> bytes:
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or ";base64" not in head:
        raise ImageError("corrupt", "not a base64 data URL")
    try:
        return base64.b64decode(payload, validate=True)
    except ValueError as e:
        raise ImageError("corrupt", f"bad base64 payload: {e}") from None
