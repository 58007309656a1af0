"""The run file ``perception_judge_run.json``, the contract between a training run and everything that reads it:
``train_grpo.py`` writes it and keeps it current, the sweep (:func:`read_run`) takes the base model, tuning, pixel
policy, think prefix and training set from it. This module is its only reader and writer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.io import atomic_write_json, now

RUN_FILE = "perception_judge_run.json"


@dataclass
class RunInfo:
    """What a sweep needs from ``perception_judge_run.json``."""

    run_dir: Path
    base_model: str
    model_type: str = ""
    tuning: str = "full"
    think_prefix: str = "auto"
    pixel_policy: PixelPolicy = field(default_factory=PixelPolicy)
    train_set: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def read_run(run_dir: str | os.PathLike[str]) -> RunInfo:
    """Read a run's ``perception_judge_run.json``; errors name the missing file or key."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(path)!r} not found: RUN_DIR must be the output folder of train_grpo.py (it writes {RUN_FILE})"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{str(path)!r} is not valid JSON: {e}") from None
    if not raw.get("base_model"):
        raise KeyError(f"{str(path)!r} lacks the key 'base_model'")
    base = str(raw["base_model"])
    if not os.path.isabs(base) and (run_dir / base).exists():
        base = str(run_dir / base)
    tuning = raw.get("tuning", "full")
    if tuning not in ("full", "lora"):
        raise ValueError(f"{str(path)!r}: tuning must be 'full' or 'lora', got {tuning!r}")
    train_set = raw.get("train_set")
    if train_set and not os.path.isabs(train_set) and not Path(train_set).exists():
        train_set = str(run_dir / train_set) if (run_dir / train_set).exists() else train_set
    return RunInfo(
        run_dir=run_dir,
        base_model=base,
        model_type=str(raw.get("model_type", "")),
        tuning=tuning,
        think_prefix=str(raw.get("think_prefix", "auto")),
        pixel_policy=PixelPolicy.parse(raw.get("pixel_policy"), "pixel_policy"),
        train_set=train_set,
        raw=raw,
    )


def read_run_info(output_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The run file as written (a dict)."""
    return json.loads((Path(output_dir) / RUN_FILE).read_text())


def write_run_info(output_dir: str | os.PathLike[str], info: dict[str, Any]) -> Path:
    path = Path(output_dir) / RUN_FILE
    atomic_write_json(path, info, indent=2)
    return path


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
"""The file names a full transformers save writes (one file, or the index of its shards)."""


def has_full_weights(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a full model save (not only a LoRA adapter or trainer state)."""
    return any((Path(folder) / name).is_file() for name in WEIGHT_FILES)


def list_checkpoints(output_dir: str | os.PathLike[str]) -> list[str]:
    """``checkpoint-N`` folders of a run, by step."""
    found = [
        p.name
        for p in Path(output_dir).glob("checkpoint-*")
        if p.is_dir() and p.name.split("-")[-1].isdigit()
    ]
    return sorted(found, key=lambda n: int(n.split("-")[-1]))


def update_run_info(folder: str | os.PathLike[str], /, **fields: Any) -> None:
    """Merge ``fields`` into the run file in ``folder`` and refresh its checkpoint list."""
    info = read_run_info(folder) if (Path(folder) / RUN_FILE).is_file() else {}
    info.update(fields)
    info["checkpoints"] = list_checkpoints(folder)
    info["updated_at"] = now()
    write_run_info(folder, info)
