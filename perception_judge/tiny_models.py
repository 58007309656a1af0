"""Tiny random-weight Qwen2.5-VL / Qwen3-VL judges, built offline in about a second.

``make_tiny_model(arch, out_dir, seed)`` writes a standard Hugging Face folder (config, safetensors, tokenizer,
processor, chat template) that ``AutoModelForImageTextToText`` and ``AutoProcessor`` load with
``HF_HUB_OFFLINE=1``. Tests, the ``tiny`` recipe and ``make demo`` use these instead of real checkpoints; the
code path is the one real checkpoints take.

The chat templates are ours, written to behave like the real families: the Qwen2.5-VL one adds a default
system turn and opens no think block (like Flex-VL-7B), the Qwen3-VL one behaves like the -Thinking models
(no default system turn, the generation prompt opens ``<think>``, earlier assistant turns lose their
reasoning).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARCHS = ("qwen2_5_vl", "qwen3_vl")

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
PLAIN_ADDED_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>"]

_VISION_PARTS = (
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content and content['text'] is not none %}"
    "{{ content['text'] }}"
    "{% endif %}"
)

QWEN2_5_VL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}" + _VISION_PARTS + "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

QWEN3_VL_THINKING_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{% set text = message['content'] %}"
    "{% else %}{% set ns = namespace(text='') %}"
    "{% for content in message['content'] %}"
    "{% set piece %}" + _VISION_PARTS + "{% endset %}"
    "{% set ns.text = ns.text + piece %}"
    "{% endfor %}{% set text = ns.text %}{% endif %}"
    "{% if message['role'] == 'assistant' and not loop.last and '</think>' in text %}"
    "{% set text = text.split('</think>')[-1].lstrip('\n') %}"
    "{% endif %}"
    "{{ text }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)

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


def _build_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        padding_side="left",
        model_max_length=4096,
    )
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    fast.add_tokens(PLAIN_ADDED_TOKENS)
    return fast


def make_tiny_model(arch: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Build a tiny random-weight Qwen-VL judge and save it to ``out_dir``; returns the folder.

    Deterministic for a seed: the same ``(arch, seed)`` gives bit-identical weights.
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    if arch not in ARCHS:
        raise ValueError(f"unknown tiny-model arch {arch!r}; choose one of {', '.join(ARCHS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = _build_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = dict(
        vocab_size=len(tok),
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
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=64,
    )
    top = dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    if arch == "qwen2_5_vl":
        patch = 14
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]}
        config = Qwen2_5_VLConfig(
            text_config=text,
            vision_config={**vision, "patch_size": patch, "window_size": 112, "fullatt_block_indexes": [1]},
            tie_word_embeddings=True,
            **top,
        )
        model = Qwen2_5_VLForConditionalGeneration(config)
        template = QWEN2_5_VL_TEMPLATE
        video = Qwen2VLVideoProcessor(
            patch_size=patch,
            merge_size=2,
            temporal_patch_size=2,
            min_pixels=28 * 28 * 4,
            max_pixels=28 * 28 * 16,
        )
        proc_cls = Qwen2_5_VLProcessor
    else:
        patch = 16
        text["head_dim"] = 32
        text["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        }
        config = Qwen3VLConfig(
            text_config=text,
            vision_config={
                **vision,
                "patch_size": patch,
                "num_position_embeddings": 256,
                "deepstack_visual_indexes": [0],
            },
            tie_word_embeddings=True,
            **top,
        )
        model = Qwen3VLForConditionalGeneration(config)
        template = QWEN3_VL_THINKING_TEMPLATE
        video = Qwen3VLVideoProcessor(
            patch_size=patch,
            merge_size=2,
            temporal_patch_size=2,
            size={"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 16},
        )
        proc_cls = Qwen3VLProcessor
    factor = patch * 2
    image_processor = Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=factor * factor * 4,
        max_pixels=factor * factor * 16,
    )
    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=True,
        temperature=1.0,
    )
    tok.chat_template = template
    processor = proc_cls(
        image_processor=image_processor, tokenizer=tok, video_processor=video, chat_template=template
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / "tiny_model.json").write_text(
        json.dumps({"arch": arch, "seed": seed, "patch_factor": factor}, indent=2)
    )
    return out


def patch_factor(config: Any) -> int:
    """The pixel factor (patch size × spatial merge) of a Qwen-VL config: 28 for Qwen2.5-VL, 32 for Qwen3-VL."""
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return 28
    return int(getattr(vision, "patch_size", 14)) * int(getattr(vision, "spatial_merge_size", 2))


# --------------------------------------------------------------------------------------------------------------
# Format warm-start
# --------------------------------------------------------------------------------------------------------------

WARM_START_REASONING = {  # names the last answer's heading, so the tag count follows a nearby token
    1: "I read the image and the assistant's answer.",
    2: "I read the image, then Assistant 1 and Assistant 2.",
    3: "I read the image, then Assistant 1 to Assistant 3.",
}


def _warm_start_example(rng: Any, items: list[Any]) -> tuple[list[dict[str, Any]], list[Any], str]:
    """(messages, images, target completion) for one random judge prompt built from synthetic items.

    Scores are random (distinct for the batch protocol): the warm start teaches the output *format* only, never
    which response is better, so any preference a later GRPO run shows comes from GRPO.
    """
    from perception_judge.protocol import build_messages

    protocol = rng.choice(["batch", "pair", "single"])
    item = rng.choice(items)
    n = {"batch": 3, "pair": 2, "single": 1}[protocol]
    pool = [it.response for it in rng.sample(items, k=min(len(items), 4))]
    responses = [item.response, *pool][:n]
    rng.shuffle(responses)
    question = item.question if rng.random() > 0.1 else ""  # the bias suite also sends empty queries
    has_image = item.image is not None and rng.random() > 0.1
    messages = build_messages(protocol, question, responses, n_images=1 if has_image else 0)
    scores = rng.sample(range(1, 11), k=n)
    target = WARM_START_REASONING[n] + "</think>" + "".join(f"<answer>{s}</answer>" for s in scores)
    return messages, ([item.image] if has_image else []), target


def warm_start_format(
    model_dir: str | Path,
    steps: int = 200,
    seed: int = 0,
    batch_size: int = 4,
    learning_rate: float = 3e-3,
    image_size: int = 56,
) -> dict[str, float]:
    """Teach a tiny judge the protocol's output format by a short supervised run, in place.

    A random-weight model never writes ``<answer>`` tags, so every judge reward is 0 and every evaluation
    metric is a parse failure. This warm start plays the part the SFT stage plays for real judges (Flex-VL-7B
    is Qwen2.5-VL-7B after judge SFT): it trains on judge prompts rendered by the shared renderer, built from
    synthetic items, with completions ``<reasoning></think><answer>s</answer>…`` whose scores are random. The
    model learns how many tags each protocol wants and where they go, not which answer is right.

    Returns statistics: the first and last training losses and the greedy format rate on fresh prompts.
    """
    import random as _random

    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from perception_judge.images import PixelPolicy
    from perception_judge.ppjd.synth import generate_items
    from perception_judge.protocol import parse_scores, render_generation_prompt

    model_dir = Path(model_dir)
    torch.manual_seed(seed)
    rng = _random.Random(seed)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    tok = processor.tokenizer
    policy = PixelPolicy(mode="fixed", size=image_size, factor=image_size)
    items = generate_items(48, seed=seed + 1000)
    for it in items:
        if it.image is not None:
            it.image = policy.apply(it.image)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    losses: list[float] = []

    def encode(examples: list[tuple[list[dict[str, Any]], list[Any], str]]) -> dict[str, Any]:
        prompts = [render_generation_prompt(processor, m) for m, _, _ in examples]
        images = [im for _, ims, _ in examples for im in ims]
        full = [p + t for p, (_, _, t) in zip(prompts, examples)]
        batch = processor(text=full, images=images or None, return_tensors="pt", padding=True)
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100
        for row, (_, _, target) in enumerate(examples):
            n_target = len(tok(target, add_special_tokens=False)["input_ids"])
            labels[row, : labels.shape[1] - n_target] = -100  # left padding: the target is the tail
        # append the end-of-turn token as the last supervised token
        eos_col = torch.full((labels.shape[0], 1), eos)
        batch["input_ids"] = torch.cat([batch["input_ids"], eos_col], dim=1)
        batch["attention_mask"] = torch.cat([batch["attention_mask"], torch.ones_like(eos_col)], dim=1)
        if "mm_token_type_ids" in batch:
            batch["mm_token_type_ids"] = torch.cat(
                [batch["mm_token_type_ids"], torch.zeros_like(eos_col)], dim=1
            )
        batch["labels"] = torch.cat([labels, eos_col], dim=1)
        return batch

    for _ in range(steps):
        batch = encode([_warm_start_example(rng, items) for _ in range(batch_size)])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())

    model.eval()
    ok = 0
    probes = [_warm_start_example(rng, items) for _ in range(8)]
    with torch.no_grad():
        for messages, images, target in probes:
            prompt = render_generation_prompt(processor, messages)
            inputs = processor(text=[prompt], images=images or None, return_tensors="pt")
            out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
            text = tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
            n = target.count("<answer>")
            ok += parse_scores(text, n, think_open=True).ok
    model.save_pretrained(model_dir)
    stats = {
        "warm_start_steps": steps,
        "loss_first": round(losses[0], 4) if losses else float("nan"),
        "loss_last": round(sum(losses[-10:]) / max(1, len(losses[-10:])), 4) if losses else float("nan"),
        "greedy_format_rate": ok / len(probes),
    }
    info_path = model_dir / "tiny_model.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info["warm_start"] = stats
    info_path.write_text(json.dumps(info, indent=2))
    return stats
