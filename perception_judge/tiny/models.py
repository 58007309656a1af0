"""Tiny random-weight Qwen2.5-VL / Qwen3-VL judges, built offline in about a second.

:func:`make_tiny_model` writes a standard Hugging Face folder that ``AutoModelForImageTextToText`` and
``AutoProcessor`` load offline; tests, the ``tiny`` recipes (model provider :func:`ensure_tiny_model`) and ``make
demo`` use them, on the code path of real checkpoints. :data:`TOKENIZERS` says what each tokenizer gives; the byte
one's small templates behave like the real families': Qwen2.5-VL's adds a default system turn and opens no think
block (like Flex-VL-7B), Qwen3-VL's is the -Thinking models' (no default system turn, the generation prompt opens
``<think>``, earlier assistant turns lose their reasoning).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import NonNegativeInt

from perception_judge.tiny.qwen_vl import ARCHS, check_arch, qwen_vl_processor
from perception_judge.tiny.qwen_vocab import QWEN_VOCAB_SIZE, SPECIAL_TOKENS

TINY_ROPE_THETA = 10.0
PLAIN_ADDED_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>"]

_CORPUS = [
    "You are a careful, impartial judge of answers written by AI assistants.",
    "Look at the image first and check every visual claim against what the image shows.",
    "There are 3 red circles, 2 blue squares and 4 green triangles in the picture.",
    "The bar for March is 42, the bar for April is 17, so the difference is 25.",
    "The clock shows 7:45. The table lists Alice 12, Bob 30, Carol 8.",
    "<think> The answer says four, but I count three. </think><answer>3</answer><answer>9</answer><answer>6</answer>",
    "Question: How many objects are yellow? Answer: \\boxed{2}",
    "Step 1: read the chart. Step 2: add the values. Final answer: 59.",
    "0 1 2 3 4 5 6 7 8 9 10 score scores assistant answer question image",
]
# The tiny prompt style's words (protocol.PROMPT_STYLES, synth.TINY_FAMILIES) become single tokens: a 0.2M-parameter
# judge learns a dozen-token prompt in minutes, not one of byte pieces.
_TINY_WORDS = (
    "judge colour ? count ? A B C none shape shapes so red green blue yellow purple 1 2 3 4 </think><answer>8</answer>"
    + "".join(f" \\boxed{{{v}}}" for v in ("red", "green", "blue", "yellow", "purple", 1, 2, 3, 4))
)


def _build_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(_CORPUS * 4 + [_TINY_WORDS] * 64, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        padding_side="left",
        model_max_length=4096,
    )
    fast.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    fast.add_tokens(PLAIN_ADDED_TOKENS)
    return fast


TOKENIZERS = ("byte", "qwen")
"""``byte``: the 532-token byte-level BPE above (the learning demo's; a dozen-token tiny prompt). ``qwen``: Qwen's
real tokenizer and chat templates (:mod:`~perception_judge.tiny.qwen_vl`), the real special-token ids and processor
settings, and Qwen's vocabulary size."""


def _byte_processor(arch: str) -> Any:
    """The demo's processor: the byte tokenizer, our tiny templates (package data ``templates/tiny_<arch>.jinja``),
    small pixel budgets (4-16 image tokens)."""
    import transformers as tf

    tok = _build_tokenizer()
    patch = 14 if arch == "qwen2_5_vl" else 16
    grid = dict(patch_size=patch, merge_size=2, temporal_patch_size=2)
    pixels = {"shortest_edge": (patch * 2) ** 2 * 4, "longest_edge": (patch * 2) ** 2 * 16}
    template = (resources.files("perception_judge.tiny") / "templates" / f"tiny_{arch}.jinja").read_text(
        "utf-8"
    )
    if arch == "qwen2_5_vl":
        proc_cls = tf.Qwen2_5_VLProcessor
        video = tf.Qwen2VLVideoProcessor(
            **grid, min_pixels=pixels["shortest_edge"], max_pixels=pixels["longest_edge"]
        )
    else:
        proc_cls = tf.Qwen3VLProcessor
        video = tf.Qwen3VLVideoProcessor(**grid, size=pixels)
    image_processor = tf.Qwen2VLImageProcessor(**grid, size=pixels)
    tok.chat_template = template
    return proc_cls(
        image_processor=image_processor, tokenizer=tok, video_processor=video, chat_template=template
    )


def _configs(arch: str, vocab_size: int, ids: dict[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tiny text and vision configs of an arch (hidden 64, 2 layers; vision hidden 32, 2 layers)."""
    text: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    vision: dict[str, Any] = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=64,
    )
    # A small rope base: with 1e6 the 4-6 M-RoPE rotary pairs per axis barely turn over a 2 x 2 image grid.
    rope = {"rope_type": "default", "rope_theta": TINY_ROPE_THETA}
    if arch == "qwen2_5_vl":
        text["rope_parameters"] = {**rope, "mrope_section": [4, 6, 6]}
        vision.update(patch_size=14, window_size=112, fullatt_block_indexes=[1])
    else:
        text["head_dim"] = 32
        text["rope_parameters"] = {**rope, "mrope_section": [6, 5, 5], "mrope_interleaved": True}
        vision.update(patch_size=16, num_position_embeddings=256, deepstack_visual_indexes=[0])
    return text, vision


def make_tiny_model(
    arch: str, out_dir: str | Path, seed: int = 0, tokenizer: str = "byte", vocab_size: int | None = None
) -> Path:
    """Build a tiny random-weight Qwen-VL judge and save it to ``out_dir``; returns the folder.

    ``tokenizer`` is one of :data:`TOKENIZERS`; ``vocab_size`` (the embedding rows) defaults to the byte
    tokenizer's size, or to Qwen's 151,936 with ``"qwen"`` (152,064 is the Qwen2.5-VL-7B layout); it must hold
    every token. Deterministic for a seed: the same ``(arch, seed, tokenizer, vocab_size)`` gives bit-identical
    weights.
    """
    import torch
    import transformers as tf

    check_arch(arch)
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose one of {', '.join(TOKENIZERS)}")
    processor = _byte_processor(arch) if tokenizer == "byte" else qwen_vl_processor(arch)
    tok = processor.tokenizer
    default_size = len(tok) if tokenizer == "byte" else QWEN_VOCAB_SIZE
    vocab_size = default_size if vocab_size is None else int(vocab_size)
    if vocab_size < len(tok):
        raise ValueError(
            f"vocab_size {vocab_size} is smaller than the {tokenizer} tokenizer ({len(tok)} tokens)"
        )
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text, vision = _configs(arch, vocab_size, ids)
    config_cls, model_cls = (
        (tf.Qwen2_5_VLConfig, tf.Qwen2_5_VLForConditionalGeneration)
        if arch == "qwen2_5_vl"
        else (tf.Qwen3VLConfig, tf.Qwen3VLForConditionalGeneration)
    )
    torch.manual_seed(seed)
    config = config_cls(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=True,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    model = model_cls(config)
    eos, pad = ids["<|im_end|>"], ids["<|endoftext|>"]
    model.generation_config = tf.GenerationConfig(
        eos_token_id=[eos, pad], pad_token_id=pad, do_sample=True, temperature=1.0
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    factor = vision["patch_size"] * vision["spatial_merge_size"]
    info = {
        "arch": arch,
        "seed": seed,
        "patch_factor": factor,
        "tokenizer": tokenizer,
        "vocab_size": vocab_size,
    }
    (out / "tiny_model.json").write_text(json.dumps(info, indent=2))
    return out


@contextlib.contextmanager
def built_in_place(target: str | Path) -> Iterator[Path]:
    """A sibling folder to build ``target`` in, renamed into place when the block ends: a crash never leaves a
    half-built model that a re-run would take for a finished one."""
    target = Path(target)
    staging = target.with_name(f".{target.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    yield staging
    shutil.rmtree(target, ignore_errors=True)  # an empty or partial folder without config.json
    os.replace(staging, target)


def ensure_tiny_model(
    path: str, arch: Literal[ARCHS] = "qwen2_5_vl", seed: int = 0, warm_start_steps: NonNegativeInt = 0
) -> bool:
    """The tiny recipes' model provider (``model_provider: perception_judge.tiny.models:ensure_tiny_model``, its
    options the other parameters): build the tiny model at ``path`` unless it has a ``config.json``; True if it
    built one (``warm_start_steps``: then teach it the output format, :func:`~.supervised.warm_start_format`),
    :func:`built_in_place`."""
    from perception_judge.tiny.supervised import warm_start_format

    if (Path(path) / "config.json").is_file():
        return False
    with built_in_place(path) as staging:
        make_tiny_model(arch, staging, seed=seed)
        if warm_start_steps:
            warm_start_format(staging, steps=warm_start_steps, seed=seed)
    return True
