"""Small offline data in the project's formats, for tests, benchmarks, dry runs and docs, independent of the PPJD
builder and the trainer: a training set as ``perception-judge export`` writes it (:func:`write_toy_training_set`,
:func:`toy_rows`: drawn counting scenes with a known answer and the three PPJD responses, r_c correct, r_rp a wrong
count with the logic kept, r_rp_r a wrong count and wrong logic), a held-out PPJD split (:func:`make_validation_set`)
and a training-run folder as ``train_grpo.py`` writes it (:func:`make_fake_run`: full-weight checkpoints are the
base with perturbed weights, LoRA ones random peft adapters).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from perception_judge.core.images import PixelPolicy
from perception_judge.core.io import atomic_write_json
from perception_judge.core.runinfo import write_run_info
from perception_judge.core.schema import RESPONSE_KINDS, content_key, sha256_hex
from perception_judge.core.trainset import rows_to_dataset, split_path, training_row

_COLORS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 60), "yellow": (230, 200, 30)}


def draw_scene(rng: random.Random, size: int) -> tuple[Image.Image, dict[str, int]]:
    """A ``size``-pixel square with a few coloured discs; returns the image and the count per colour."""
    image = Image.new("RGB", (size, size), (250, 250, 250))
    draw = ImageDraw.Draw(image)
    counts: dict[str, int] = {}
    r = max(2, size // 12)
    for name in rng.sample(sorted(_COLORS), 2):
        counts[name] = rng.randint(1, 4)
        for _ in range(counts[name]):
            x, y = rng.randint(r, size - r), rng.randint(r, size - r)
            draw.ellipse((x - r, y - r, x + r, y + r), fill=_COLORS[name])
    return image, counts


def _responses(colour: str, n: int, rng: random.Random) -> dict[str, str]:
    wrong = n + rng.choice([1, 2])
    wrong2 = max(0, n - 1) if n > 1 else n + 3
    return {
        "r_c": f"I count the {colour} discs one by one: there are {n}. The answer is \\boxed{{{n}}}.",
        "r_rp": f"I count the {colour} discs one by one: there are {wrong}. The answer is \\boxed{{{wrong}}}.",
        "r_rp_r": f"There are {wrong2} discs of other colours, so {colour} must be {wrong2}. \\boxed{{{wrong2}}}",
    }


def toy_rows(
    n: int,
    protocols: tuple[str, ...] = ("batch", "pair", "single"),
    image_size: int = 56,
    seed: int = 0,
    text_only_every: int = 0,
    text_only_pattern: str = "",
) -> list[dict[str, Any]]:
    """``n`` training rows cycling through ``protocols``, one image each; every ``text_only_every``-th row (from
    the last one of each cycle) is text-only, as exported for items without an image. ``text_only_pattern``
    (e.g. ``"IITT"``, repeated over the rows) says it row by row instead: ``T`` text-only, ``I`` with its image."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        protocol = protocols[i % len(protocols)]
        image, counts = draw_scene(rng, image_size)
        colour = rng.choice(sorted(counts))
        question = f"How many {colour} discs are in the image?"
        texts = _responses(colour, counts[colour], rng)
        if protocol == "single":
            kinds = [rng.choice(RESPONSE_KINDS)]
        else:
            kinds = list(RESPONSE_KINDS) if protocol == "batch" else ["r_c", rng.choice(["r_rp", "r_rp_r"])]
            rng.shuffle(kinds)
        if text_only_pattern:
            text_only = text_only_pattern[i % len(text_only_pattern)] == "T"
        else:
            text_only = bool(text_only_every) and (i + 1) % text_only_every == 0
        if text_only:
            question = question.replace("in the image", f"in a picture that shows {counts[colour]} of them")
        images, key = [] if text_only else [image], content_key("toy", seed, i, protocol)
        rows.append(training_row(protocol, question, texts, kinds, images, key, sha256_hex(image.tobytes())))
    return rows


def write_toy_training_set(
    folder: str | Path,
    n_train: int = 16,
    n_validation: int = 4,
    protocols: tuple[str, ...] = ("batch", "pair", "single"),
    image_size: int = 56,
    seed: int = 0,
    text_only_every: int = 0,
    text_only_pattern: str = "",
) -> Path:
    """Write a toy training set folder (``train.parquet``, ``validation.parquet``, ``export_info.json``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = toy_rows(n_train + n_validation, protocols, image_size, seed, text_only_every, text_only_pattern)
    rows_to_dataset(rows[:n_train]).to_parquet(str(split_path(folder, "train")))
    if n_validation:
        rows_to_dataset(rows[n_train:]).to_parquet(str(split_path(folder, "validation")))
    info = dict(
        source="perception_judge.tiny.toyset",
        counts={"train": n_train, "validation": n_validation},
        protocols=list(protocols),
        image_size=image_size,
        seed=seed,
        text_only_every=text_only_every,
        text_only_pattern=text_only_pattern,
    )
    atomic_write_json(folder / "export_info.json", info, indent=2)
    return folder


_MODEL_FILES = ("config.json", "generation_config.json", "tiny_model.json")
_COLOURS = [
    ("red", (220, 40, 40)),
    ("blue", (40, 80, 220)),
    ("green", (40, 170, 70)),
    ("orange", (240, 140, 30)),
]


def validation_records(n: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` records: an image of k circles, a question, and r_c / r_rp / r_rp_r responses."""
    rng = random.Random(f"fixture-records:{seed}")
    out = []
    for i in range(n):
        name, rgb = _COLOURS[i % len(_COLOURS)]
        k = rng.randint(2, 5)
        img = Image.new("RGB", (64, 48), (250, 250, 250))
        d = ImageDraw.Draw(img)
        for j in range(k):
            d.ellipse((4 + j * 12, 18, 14 + j * 12, 28), fill=rgb)
        responses = {
            "r_c": f"I count {k} {name} circles in a row. The answer is {k}.",
            "r_rp": f"I count {k + 1} {name} circles in a row. The answer is {k + 1}.",
            "r_rp_r": f"I count {k + 2} {name} circles, and doubling gives {2 * k + 4}. The answer is {2 * k + 4}.",
        }
        question = f"How many {name} circles are in the image?"
        out.append({"key": f"fixture-{seed}-{i}", "question": question, "image": img, "responses": responses})
    return out


def make_validation_set(
    folder: str | Path, n: int = 4, seed: int = 0, splits: tuple[str, ...] = ("validation",)
) -> Path:
    """Write an exported-training-set folder with batch, pair and single rows for ``n`` records."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"fixture-rows:{seed}")
    rows = []
    for rec in validation_records(n, seed):
        kinds = list(RESPONSE_KINDS)
        rng.shuffle(kinds)
        pair = ["r_c", "r_rp"] if rng.random() < 0.5 else ["r_rp", "r_c"]
        single = [rng.choice(RESPONSE_KINDS)]
        for protocol, row_kinds in (("batch", kinds), ("pair", pair), ("single", single)):
            args = (rec["question"], rec["responses"], row_kinds, [rec["image"]], rec["key"], rec["key"])
            rows.append(training_row(protocol, *args))
    ds = rows_to_dataset(rows)
    for split in splits:
        ds.to_parquet(str(folder / f"{split}.parquet"))
    return folder


def _save_model(base: Path, dst: Path, seed: int, tuning: str, scale: float) -> None:
    """The base model with weights perturbed by ``scale`` (full), or a random LoRA adapter on it, plus the
    processor files of the base."""
    import torch
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.float32)
    if tuning == "lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj"],
            exclude_modules=r".*visual.*",
            init_lora_weights=False,
        )
        model = get_peft_model(model, cfg)
    else:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * scale)
    dst.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dst)
    for f in base.iterdir():  # the processor files
        if f.is_file() and f.suffix != ".safetensors" and f.name not in _MODEL_FILES:
            shutil.copy2(f, dst / f.name)


def make_fake_run(
    run_dir: str | Path,
    base_model: str | Path,
    tuning: str = "full",
    steps: tuple[int, ...] = (1, 2),
    final: bool = True,
    train_set: str | Path | None = None,
    pixel_policy: PixelPolicy | None = None,
    think_prefix: str = "auto",
    scale: float = 0.02,
) -> Path:
    """A training-run folder in the trainer's layout: the run file, ``checkpoint-<N>/`` with processor files, the
    final model or adapter at the root and ``trainer_state.json``."""
    run_dir, base = Path(run_dir), Path(base_model)
    run_dir.mkdir(parents=True, exist_ok=True)
    info = {
        "base_model": str(base),
        "model_type": json.loads((base / "config.json").read_text()).get("model_type", ""),
        "tuning": tuning,
        "think_prefix": think_prefix,
        "pixel_policy": (pixel_policy or PixelPolicy(mode="fixed", size=56, factor=28)).to_dict(),
        "rewards": {"judge": 1.0},
        "train_set": str(train_set) if train_set else None,
    }
    write_run_info(run_dir, info)
    for step in steps:
        _save_model(base, run_dir / f"checkpoint-{step}", step, tuning, scale)
        (run_dir / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if final:
        last = max(steps) if steps else 0
        _save_model(base, run_dir, 1000 + last, tuning, scale)
        (run_dir / "trainer_state.json").write_text(json.dumps({"global_step": last}))
    return run_dir
