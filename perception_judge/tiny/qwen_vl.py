"""The real Qwen-VL processing layout of ``qwen2_5_vl`` and ``qwen3_vl``: chat templates (the project's own Jinja,
package data, rendering what the published ones render), image processor settings, special-token ids; the table of
both: docs/real-tokenizer.md "The real-shape judge"."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from perception_judge.tiny.qwen_vocab import qwen_tokenizer

ARCHS = ("qwen2_5_vl", "qwen3_vl")
TEMPLATE_FILES = {"qwen2_5_vl": "qwen2_5_vl_instruct.jinja", "qwen3_vl": "qwen3_vl_thinking.jinja"}
TOKENIZER_VARIANT = {"qwen2_5_vl": "qwen2_5", "qwen3_vl": "qwen3"}

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
IMAGE_SETTINGS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": 3_136, "longest_edge": 12_845_056},
        "image_mean": _CLIP_MEAN,
        "image_std": _CLIP_STD,
    },
    "qwen3_vl": {
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": 65_536, "longest_edge": 16_777_216},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    },
}
"""The image processors of Qwen2.5-VL-7B-Instruct and Qwen3-VL-8B (their ``preprocessor_config.json`` values)."""
VIDEO_SIZE = {
    "qwen2_5_vl": {"shortest_edge": 3_136, "longest_edge": 12_845_056},
    "qwen3_vl": {"shortest_edge": 4_096, "longest_edge": 25_165_824},
}

GENERATION_EOS = [151_645, 151_643]
"""Where a real Qwen-VL judge stops generating (``<|im_end|>``, ``<|endoftext|>``); it pads with 151643."""


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise ValueError(f"unknown Qwen-VL arch {arch!r}; choose one of {', '.join(ARCHS)}")
    return arch


@cache
def chat_template(arch: str) -> str:
    """The chat template of an arch, read from the package data file :data:`TEMPLATE_FILES` names."""
    name = TEMPLATE_FILES[check_arch(arch)]
    path = resources.files("perception_judge.tiny") / "templates" / name
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as e:  # an install without the package data
        raise FileNotFoundError(f"perception_judge/tiny/templates/{name} is missing from this install") from e


def image_processor(arch: str, **overrides: Any) -> Any:
    """The arch's ``Qwen2VLImageProcessor`` with the real settings (``overrides`` replace any of them)."""
    from transformers import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(**{**IMAGE_SETTINGS[check_arch(arch)], **overrides})


def video_processor(arch: str) -> Any:
    import transformers as tf

    settings = {k: v for k, v in IMAGE_SETTINGS[check_arch(arch)].items() if k != "size"}
    cls = tf.Qwen2VLVideoProcessor if arch == "qwen2_5_vl" else tf.Qwen3VLVideoProcessor
    return cls(**settings, size=dict(VIDEO_SIZE[arch]))


def qwen_vl_processor(
    arch: str, tokenizer: Any = None, template: str | None = None, **image_overrides: Any
) -> Any:
    """A ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor`` with Qwen's tokenizer (built offline unless given), the
    arch's chat template (or ``template``) and the real image and video processors."""
    import transformers as tf

    tokenizer = tokenizer if tokenizer is not None else qwen_tokenizer(TOKENIZER_VARIANT[check_arch(arch)])
    template = template if template is not None else chat_template(arch)
    tokenizer.chat_template = template
    cls = tf.Qwen2_5_VLProcessor if arch == "qwen2_5_vl" else tf.Qwen3VLProcessor
    return cls(
        image_processor=image_processor(arch, **image_overrides),
        tokenizer=tokenizer,
        video_processor=video_processor(arch),
        chat_template=template,
    )
