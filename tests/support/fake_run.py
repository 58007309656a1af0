"""Test scaffolding in the project's formats: a held-out PPJD split (:func:`make_validation_set`) and a training-run
folder as ``perception-judge train`` writes it (:func:`make_fake_run`: full-weight checkpoints are the base with
perturbed weights, LoRA ones random peft adapters)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from perception_judge.core.images import PixelPolicy
from perception_judge.core.runinfo import write_run_info
from perception_judge.core.schema import RESPONSE_KINDS
from perception_judge.core.trainset import rows_to_dataset, training_row

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
