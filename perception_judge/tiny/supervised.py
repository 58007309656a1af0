"""Supervised runs of the tiny judge on the tiny world. A tiny judge's completion is ``<value>
<slots></think><answer>s</answer>...``: the value it perceives, the slots of the answers that state it, then a score
per answer (:func:`tiny_score`). The runs (:func:`supervised_tiny_judge`) differ only in where the value, the "think",
comes from (:data:`THINK_SOURCES`: ``guess``, ``prior``, ``position``, ``truth``; docs/tiny-substrate.md says what
each is for and why the runs look like this).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perception_judge import synth
from perception_judge.core.answers import extract_final_answer
from perception_judge.core.images import PixelPolicy
from perception_judge.core.io import progress_bar
from perception_judge.core.protocol import build_messages, parse_scores, render_generation_prompt
from perception_judge.tiny.world import TINY_FAMILIES, response_value, tiny_value, tiny_values

THINK_SOURCES = ("guess", "position", "prior", "truth")
FIRST_SLOT_BIAS = 3 / 4
SLOT_LETTERS = "ABC"
TINY_MATCH_SCORE = 8


def tiny_records(n: int, seed: int, families: Any = None) -> list[dict[str, Any]]:
    """``n`` tiny-world records with the programmatic counterfactuals (PPJD rows without the store):
    ``{"key", "family", "question", "image", "responses": {kind: text}, "value"}``."""
    out = []
    for item in synth.generate_items(n, seed, families or TINY_FAMILIES, text_only_fraction=0.0):
        cf = synth.counterfactuals(item.spec, item.response, item.answer, item.item_id, seed=seed)
        out.append(
            {
                "key": item.item_id,
                "family": item.spec["family"],
                "question": item.question,
                "image": item.image,
                "responses": {"r_c": item.response, "r_rp": cf.r_rp, "r_rp_r": cf.r_rp_r},
                "value": tiny_value(item.spec),
            }
        )
    return out


def tiny_score(response: str, think: str) -> int:
    """The tiny judge's score of one answer given the value it perceived:

        score = (8 if the answer states the perceived value else 3) - (1 if its answer does not follow from the
                 value it states, i.e. a reasoning slip)

    so r_c > r_rp > r_rp+r whenever the perceived value is the true one, and the scores never tie between the three
    answers of a record. A judge that perceives the wrong value ranks the answer that states it first."""
    value = response_value(response)
    slipped = value is not None and extract_final_answer(response) != value
    return (TINY_MATCH_SCORE if value == think else TINY_MATCH_SCORE - 5) - int(slipped)


def tiny_target(think: str, responses: list[str]) -> str:
    """The completion after the ``<think>`` prefill: the perceived value and the slots of the answers that state it
    (``none`` when no answer does), then :func:`tiny_score` of every answer.
    ``" red B</think><answer>3</answer><answer>8</answer>"``."""
    slots = " ".join(SLOT_LETTERS[i] for i, r in enumerate(responses) if response_value(r) == think) or "none"
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
        think = rng.choice(tiny_values(rec["family"]))
    elif think_source == "position":
        stated = responses[0] if rng.random() < FIRST_SLOT_BIAS else rng.choice(responses[1:])
        think = response_value(stated) or rec["value"]
    else:
        think = response_value(rng.choice(responses)) or rec["value"]
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


def _supervised_batch(processor: Any, examples: list[tuple[list[dict[str, Any]], Any, str]]) -> Any:
    """The model inputs of a batch of (messages, image, target) examples: prompt and target, then the EOS; labels
    on the target and the EOS only."""
    import torch

    tok = processor.tokenizer
    full = [render_generation_prompt(processor, m) + target for m, _, target in examples]
    batch = processor(text=full, images=[im for _, im, _ in examples], return_tensors="pt", padding=True)
    labels = torch.full_like(batch["input_ids"], -100)
    for row, (_, _, target) in enumerate(examples):  # left padding: the target is the tail
        n_target = len(tok(target, add_special_tokens=False)["input_ids"])
        labels[row, -n_target:] = batch["input_ids"][row, -n_target:]
    eos_col = torch.full((labels.shape[0], 1), tok.convert_tokens_to_ids("<|im_end|>"))
    batch["input_ids"] = torch.cat([batch["input_ids"], eos_col], dim=1)
    batch["attention_mask"] = torch.cat([batch["attention_mask"], torch.ones_like(eos_col)], dim=1)
    if "mm_token_type_ids" in batch:
        batch["mm_token_type_ids"] = torch.cat([batch["mm_token_type_ids"], torch.zeros_like(eos_col)], dim=1)
    batch["labels"] = torch.cat([labels, eos_col], dim=1)
    return batch


@dataclass
class _SupervisedStream:
    """The model-input batches of a supervised run, in order: fresh tiny-world records every step (drawn in blocks,
    seeded by the step), each made an example by :func:`_tiny_example` with one run-wide ``random.Random``. An
    iterable dataset, so a :class:`torch.utils.data.DataLoader` worker can make them while the model trains."""

    processor: Any
    steps: int
    think_source: str
    seed: int
    batch_size: int
    image_size: int
    families: Any = None

    def __iter__(self) -> Any:
        rng = random.Random(f"tiny-sft/{self.think_source}/{self.seed}")
        policy = _tiny_policy(self.image_size)
        pool: list[dict[str, Any]] = []
        for step in range(self.steps):
            if len(pool) < self.batch_size:
                pool = tiny_records(self.batch_size * 8, 10_000 * (self.seed + 1) + step, self.families)
                for rec in pool:
                    rec["image"] = policy.apply(rec["image"])
            examples = [_tiny_example(rng, pool.pop(), self.think_source) for _ in range(self.batch_size)]
            yield _supervised_batch(self.processor, examples)


def _prefetched(stream: _SupervisedStream, data_worker: bool) -> Any:
    """``stream``'s batches, made by one worker process a few steps ahead with ``data_worker`` (the data is a quarter
    of a step's time on the tiny judge, and the second core is otherwise idle), else in this process. One worker
    only: a second would repeat the stream."""
    if not data_worker:
        return iter(stream)
    import os

    import torch

    class _Dataset(torch.utils.data.IterableDataset):
        def __iter__(self) -> Any:
            return iter(stream)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the worker is forked after the tokenizer ran
    loader = torch.utils.data.DataLoader(
        _Dataset(), batch_size=None, num_workers=1, prefetch_factor=4, multiprocessing_context="fork"
    )
    return iter(loader)


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
    data_worker: bool = False,
    families: Any = None,
) -> dict[str, Any]:
    """Supervised judge training on fresh tiny-world records every step, the think from ``think_source``; saves the
    model to ``save_to`` (default: in place) and returns statistics (losses, seconds). ``freeze_vision`` defaults to
    freezing the vision tower unless the think is the truth. ``cosine``: :func:`_warmup_cosine` (with a constant rate
    a draw of the learnability check stalled at 0.61); ``data_worker``: :func:`_prefetched` (the same batches, hence
    weights); ``families``: default both."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if think_source not in THINK_SOURCES:
        raise ValueError(f"think_source must be one of {THINK_SOURCES}, got {think_source!r}")
    if freeze_vision is None:
        freeze_vision = think_source != "truth"
    model_dir = Path(model_dir)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
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
    stream = _SupervisedStream(processor, steps, think_source, seed, batch_size, image_size, families)
    bar = progress_bar(steps, f"supervised ({think_source})", "step", enabled=progress)
    for batch in _prefetched(stream, data_worker):
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
        "families": list(families or TINY_FAMILIES),
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
    optionally :func:`reset_vision_connector`, then ``steps`` of the ``prior`` think (it stops looking) and
    ``explore_steps`` of the ``position`` think (sampled it explores the answers' values, greedy it sits at chance
    in both orders); its verdict still follows the value it states, so GRPO has to teach it to state the value the
    image shows (docs/tiny-substrate.md). Records the statistics in ``tiny_model.json``."""
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
