"""Tiny random-weight Qwen2.5-VL / Qwen3-VL judges, built offline in about a second.

``make_tiny_model(arch, out_dir, seed)`` writes a standard Hugging Face folder (config, safetensors, tokenizer,
processor, chat template) that ``AutoModelForImageTextToText`` and ``AutoProcessor`` load with
``HF_HUB_OFFLINE=1``. Tests, the ``tiny`` recipe and ``make demo`` use these instead of real checkpoints; the
code path is the one real checkpoints take.

With the default ``tokenizer="byte"`` the judge has the learning demo's 532-token byte-level BPE and our small
chat templates, written to behave like the real families: the Qwen2.5-VL one adds a default system turn and opens
no think block (like Flex-VL-7B), the Qwen3-VL one behaves like the -Thinking models (no default system turn, the
generation prompt opens ``<think>``, earlier assistant turns lose their reasoning); judge prompts render exactly
as with the published templates. ``tokenizer="qwen"`` gives a real-shape judge: Qwen's own tokenizer, the real
Qwen2.5-VL-Instruct / Qwen3-VL-Thinking templates, special-token ids, vocabulary size and processor settings
(:mod:`perception_judge.tiny`, docs/real-tokenizer.md).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

from perception_judge import synth
from perception_judge.core.answers import extract_final_answer
from perception_judge.core.images import PixelPolicy
from perception_judge.core.io import progress_bar
from perception_judge.core.protocol import build_messages, parse_scores, render_generation_prompt
from perception_judge.tiny import QWEN_VOCAB_SIZE, qwen_vl_processor

ARCHS = ("qwen2_5_vl", "qwen3_vl")

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip
TINY_ROPE_THETA = 10.0
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
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    fast.add_tokens(PLAIN_ADDED_TOKENS)
    return fast


TOKENIZERS = ("byte", "qwen")
"""``byte``: the 532-token byte-level BPE above (the learning demo's; a dozen-token tiny prompt). ``qwen``: Qwen's
real tokenizer and chat templates (:mod:`perception_judge.tiny`), the real special-token ids and processor
settings, and Qwen's vocabulary size."""


def _byte_processor(arch: str) -> Any:
    """The demo's processor: the byte tokenizer, our tiny templates, small pixel budgets (4-16 image tokens)."""
    import transformers as tf

    tok = _build_tokenizer()
    patch = 14 if arch == "qwen2_5_vl" else 16
    factor = patch * 2
    if arch == "qwen2_5_vl":
        template, proc_cls = QWEN2_5_VL_TEMPLATE, tf.Qwen2_5_VLProcessor
        video = tf.Qwen2VLVideoProcessor(
            patch_size=patch,
            merge_size=2,
            temporal_patch_size=2,
            min_pixels=28 * 28 * 4,
            max_pixels=28 * 28 * 16,
        )
    else:
        template, proc_cls = QWEN3_VL_THINKING_TEMPLATE, tf.Qwen3VLProcessor
        video = tf.Qwen3VLVideoProcessor(
            patch_size=patch,
            merge_size=2,
            temporal_patch_size=2,
            size={"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 16},
        )
    image_processor = tf.Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": factor * factor * 4, "longest_edge": factor * factor * 16},
    )
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

    if arch not in ARCHS:
        raise ValueError(f"unknown tiny-model arch {arch!r}; choose one of {', '.join(ARCHS)}")
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


def patch_factor(config: Any) -> int:
    """The pixel factor (patch size × spatial merge) of a Qwen-VL config: 28 for Qwen2.5-VL, 32 for Qwen3-VL."""
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return 28
    return int(getattr(vision, "patch_size", 14)) * int(getattr(vision, "spatial_merge_size", 2))


# Supervised runs on the tiny world (docs/tiny-substrate.md says why they look like this). A tiny judge completion is
# "<value> <slots></think><answer>s</answer>...": the value it perceives, the slots of the answers that state it, then
# a score per answer (tiny_score). The runs differ only in where the value (the "think") comes from:
#   guess  (the format warm start) -- one of the values the answers shown state (for a single answer: any value of the
#          family), so the target never depends on the image; vision frozen. The judge learns the format and to score
#          by its stated value, and stays at chance.
#   prior  (make_blind, first) -- any value of the family, vision frozen: a supervised judge keeps its verdicts and
#          stops looking.
#   position (make_blind, then) -- the value the first answer states with probability 3/4, else one another answer
#          states, vision frozen: the think explores the stated values (1/4 of samples name the other answer's) while
#          greedy decoding follows the first slot, a position bias, so the judge stays at chance in both orders (with
#          2/3 the stronger supervised judge of one draw kept part of its image reading: base 0.67).
#   truth  (the learnability check) -- the value the image shows: the upper bound of what GRPO can reach.

THINK_SOURCES = ("guess", "position", "prior", "truth")
FIRST_SLOT_BIAS = 3 / 4
SLOT_LETTERS = "ABC"
TINY_MATCH_SCORE = 8


def tiny_records(n: int, seed: int, families: Any = None) -> list[dict[str, Any]]:
    """``n`` tiny-world records with the programmatic counterfactuals (PPJD rows without the store):
    ``{"key", "family", "question", "image", "responses": {kind: text}, "value"}``."""
    out = []
    for item in synth.generate_items(n, seed, families or synth.TINY_FAMILIES, text_only_fraction=0.0):
        cf = synth.counterfactuals(item.spec, item.response, item.answer, item.item_id, seed=seed)
        out.append(
            {
                "key": item.item_id,
                "family": item.spec["family"],
                "question": item.question,
                "image": item.image,
                "responses": {"r_c": item.response, "r_rp": cf.r_rp, "r_rp_r": cf.r_rp_r},
                "value": synth.tiny_value(item.spec),
            }
        )
    return out


def tiny_score(response: str, think: str) -> int:
    """The tiny judge's score of one answer given the value it perceived:

        score = (8 if the answer states the perceived value else 3) - (1 if its answer does not follow from the
                 value it states, i.e. a reasoning slip)

    so r_c > r_rp > r_rp+r whenever the perceived value is the true one, and the scores never tie between the three
    answers of a record. A judge that perceives the wrong value ranks the answer that states it first."""
    value = synth.response_value(response)
    slipped = value is not None and extract_final_answer(response) != value
    return (TINY_MATCH_SCORE if value == think else TINY_MATCH_SCORE - 5) - int(slipped)


def tiny_target(think: str, responses: list[str]) -> str:
    """The completion after the ``<think>`` prefill: the perceived value and the slots of the answers that state it
    (``none`` when no answer does), then :func:`tiny_score` of every answer.
    ``" red B</think><answer>3</answer><answer>8</answer>"``."""
    slots = (
        " ".join(SLOT_LETTERS[i] for i, r in enumerate(responses) if synth.response_value(r) == think)
        or "none"
    )
    return f" {think} {slots}</think>" + "".join(
        f"<answer>{tiny_score(r, think)}</answer>" for r in responses
    )


def _tiny_example(
    rng: random.Random, rec: dict[str, Any], think_source: str
) -> tuple[list[dict[str, Any]], Any, str]:
    protocol = rng.choices(["pair", "batch", "single"], weights=[3, 1, 1])[0]
    kinds = ["r_c", "r_rp", "r_rp_r"]
    if protocol == "pair":
        kinds = ["r_c", rng.choice(["r_rp", "r_rp_r"])]
    elif protocol == "single":
        kinds = [rng.choice(kinds)]
    rng.shuffle(kinds)
    responses = [rec["responses"][k] for k in kinds]
    if think_source == "truth":
        think = rec["value"]
    elif think_source == "prior" or protocol == "single":
        think = rng.choice(synth.tiny_values(rec["family"]))
    elif think_source == "position":
        stated = responses[0] if rng.random() < FIRST_SLOT_BIAS else rng.choice(responses[1:])
        think = synth.response_value(stated) or rec["value"]
    else:
        think = synth.response_value(rng.choice(responses)) or rec["value"]
    messages = build_messages(protocol, rec["question"], responses, n_images=1, style="tiny")
    return messages, rec["image"], tiny_target(think, responses)


def _tiny_policy(image_size: int) -> PixelPolicy:
    return PixelPolicy(mode="fixed", size=image_size, factor=image_size)


def _warmup_cosine(steps: int) -> Any:
    """The rate factor at step ``i``: linear warm-up over the first ``min(50, steps // 10)`` steps, then a cosine from
    1 down to 0.1 at ``steps``."""
    warmup = min(50, steps // 10)

    def factor(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * i / max(1, steps)))

    return factor


def supervised_tiny_judge(
    model_dir: str | Path,
    steps: int,
    think_source: str = "guess",
    seed: int = 0,
    batch_size: int = 32,
    learning_rate: float = 2e-3,
    freeze_vision: bool | None = None,
    cosine: bool = True,
    image_size: int = 56,
    save_to: str | Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Supervised judge training on fresh tiny-world records every step (see the comment above); saves the model to
    ``save_to`` (default: in place) and returns statistics (losses, seconds). ``freeze_vision`` defaults to
    freezing the vision tower unless the think is the truth. ``cosine``: warm up over the first
    ``min(50, steps // 10)`` steps, then decay the rate to 10% along a cosine (with a constant rate one
    draw of the learnability check stayed at 0.61 after 1500 and 2500 steps, its colour think confusing
    purple and blue; 1500 steps with the decay left another draw's count think at 0.67; 2000 steps with the
    decay took both to 1.00); ``False`` keeps the rate constant (the short format warm start)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if think_source not in THINK_SOURCES:
        raise ValueError(f"think_source must be one of {THINK_SOURCES}, got {think_source!r}")
    if freeze_vision is None:
        freeze_vision = think_source != "truth"
    model_dir = Path(model_dir)
    torch.manual_seed(seed)
    rng = random.Random(f"tiny-sft/{think_source}/{seed}")
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    tok = processor.tokenizer
    policy = _tiny_policy(image_size)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    if freeze_vision:
        for name, param in model.named_parameters():
            if name.startswith("visual.") or ".visual." in name:
                param.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(steps)) if cosine else None
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    pool: list[dict[str, Any]] = []
    bar = progress_bar(steps, f"supervised ({think_source})", "step", enabled=progress)
    for step in range(steps):
        if len(pool) < batch_size:  # fresh images every step, drawn in blocks
            pool = tiny_records(batch_size * 8, seed=10_000 * (seed + 1) + step)
            for rec in pool:
                rec["image"] = policy.apply(rec["image"])
        examples = [_tiny_example(rng, pool.pop(), think_source) for _ in range(batch_size)]
        full = [render_generation_prompt(processor, m) + target for m, _, target in examples]
        batch = processor(text=full, images=[im for _, im, _ in examples], return_tensors="pt", padding=True)
        labels = torch.full_like(batch["input_ids"], -100)
        for row, (_, _, target) in enumerate(examples):  # left padding: the target is the tail
            n_target = len(tok(target, add_special_tokens=False)["input_ids"])
            labels[row, -n_target:] = batch["input_ids"][row, -n_target:]
        eos_col = torch.full((labels.shape[0], 1), eos)
        batch["input_ids"] = torch.cat([batch["input_ids"], eos_col], dim=1)
        batch["attention_mask"] = torch.cat([batch["attention_mask"], torch.ones_like(eos_col)], dim=1)
        if "mm_token_type_ids" in batch:
            batch["mm_token_type_ids"] = torch.cat(
                [batch["mm_token_type_ids"], torch.zeros_like(eos_col)], dim=1
            )
        batch["labels"] = torch.cat([labels, eos_col], dim=1)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.close()
    model.save_pretrained(save_to or model_dir)
    if save_to:
        processor.save_pretrained(save_to)
    return {
        "steps": steps,
        "think_source": think_source,
        "freeze_vision": bool(freeze_vision),
        "learning_rate": learning_rate,
        "cosine": cosine,
        "batch_size": batch_size,
        "loss_first": round(losses[0], 4) if losses else None,
        "loss_last": round(sum(losses[-20:]) / len(losses[-20:]), 4) if losses else None,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def reset_vision_connector(model_dir: str | Path, seed: int = 0) -> int:
    """Re-initialise the vision-language connector (``visual.merger``) of a saved model in place: the vision tower
    still computes its features, but the language model no longer receives them in the space it learned. Returns
    the number of parameters reset."""
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".visual.merger." not in name and not name.startswith("visual.merger."):
                continue
            if param.dim() > 1:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            elif name.endswith("weight"):  # layer norm scale
                param.fill_(1.0)
            else:
                param.zero_()
            n += param.numel()
    model.save_pretrained(model_dir)
    return n


def _record(model_dir: str | Path, key: str, stats: dict[str, Any]) -> None:
    """Add a training stage's statistics to the model's ``tiny_model.json`` (and mark its prompt style)."""
    info_path = Path(model_dir) / "tiny_model.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info[key] = stats
    info["prompt_style"] = "tiny"
    info_path.write_text(json.dumps(info, indent=2))


def make_blind(
    model_dir: str | Path,
    steps: int = 300,
    seed: int = 0,
    reset_connector: bool = False,
    explore_steps: int = 900,
    **kwargs: Any,
) -> dict[str, Any]:
    """Turn a supervised tiny judge into a base judge that does not look, in place, vision frozen throughout:
    optionally :func:`reset_vision_connector`; ``steps`` supervised steps whose think is a random value of the family
    (``think_source="prior"``: the target never depends on the image, so the judge stops looking); then
    ``explore_steps`` steps whose think is a value an answer states, the first answer's three times in four
    (``"position"``: sampled, it names the other answer's value a quarter of the time, which is what GRPO needs to
    explore; greedy, it follows the first slot, so it sits at chance with the answers shown in both orders). The
    verdict still follows the stated value (learned under supervision), so what GRPO has to teach is to state the
    value the image shows. Records the statistics in ``tiny_model.json``."""
    reset = reset_vision_connector(model_dir, seed) if reset_connector else 0
    stats = supervised_tiny_judge(
        model_dir, steps, think_source="prior", seed=seed, freeze_vision=True, **kwargs
    )
    stats["connector_parameters_reset"] = reset
    if explore_steps:
        stats["explore"] = supervised_tiny_judge(
            model_dir, explore_steps, think_source="position", seed=seed, freeze_vision=True, **kwargs
        )
    _record(model_dir, "blind", stats)
    return stats


def warm_start_format(
    model_dir: str | Path, steps: int = 300, seed: int = 0, **kwargs: Any
) -> dict[str, Any]:
    """The format warm start of a generated tiny judge, in place: :func:`supervised_tiny_judge` with guessed values
    (the target never depends on the image) and a frozen vision tower. Records its statistics in
    ``tiny_model.json``."""
    stats = supervised_tiny_judge(model_dir, steps, think_source="guess", seed=seed, cosine=False, **kwargs)
    stats["warm_start_steps"] = steps
    stats["greedy_format_rate"] = greedy_format_rate(model_dir, tiny_records(8, seed + 99))
    _record(model_dir, "warm_start", stats)
    return stats


def greedy_format_rate(model_dir: str | Path, records: list[dict[str, Any]], image_size: int = 56) -> float:
    """The fraction of greedy pair verdicts (r_c vs r_rp, one per record) that parse as two scores: the probe of a
    format warm start. (The evaluation's ``perception`` suite measures the same model's accuracy.)"""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    processor.tokenizer.padding_side = "left"
    policy = _tiny_policy(image_size)
    prompts = [
        render_generation_prompt(
            processor,
            build_messages(
                "pair", r["question"], [r["responses"]["r_c"], r["responses"]["r_rp"]], style="tiny"
            ),
        )
        for r in records
    ]
    batch = processor(
        text=prompts, images=[policy.apply(r["image"]) for r in records], return_tensors="pt", padding=True
    )
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=16, do_sample=False)
    texts = processor.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(parse_scores(t, 2, think_open=True).ok for t in texts) / max(1, len(texts))
