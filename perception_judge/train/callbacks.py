"""Tracking callbacks: completion samples with their images, validation metrics, rank summaries, run-file upkeep.

trl already logs, to every ``report_to`` tracker, the per-reward means and stds (``rewards/<name>/mean``), the
total ``reward``, ``frac_reward_zero_std``, completion lengths, KL, entropy, clip ratios and ``step_time``; with
``log_completions: true`` it also writes ``completions/completions_<step>.parquet`` and a wandb/trackio table
with the images. These callbacks add what is missing for every tracker, ``none`` included:

* :class:`CompletionSamplesCallback` — every ``sample_log_steps`` optimizer steps, ``samples/step-<N>.jsonl``
  (prompt text, completion, per-reward values, advantage, image files under ``samples/images/``), and the same
  as text + image to TensorBoard when that tracker is on;
* :class:`ValidationMetricsCallback` — every validation's metrics appended to ``validation_metrics.jsonl``;
* :class:`RankSummaryCallback` — ``ranks/rank-<k>.json`` per process at the end (world size, completions and
  prompts that rank generated), the evidence that every rank took part;
* :class:`RunFileCallback` — keeps ``perception_judge_run.json`` current (status, checkpoints, last step).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from perception_judge.core.schema import sha256_hex


class _Bound(TrainerCallback):
    """A callback that can reach the trainer (bound after the trainer is built)."""

    trainer: Any = None

    def bind(self, trainer: Any) -> _Bound:
        self.trainer = trainer
        return self


def _message_text(messages: Any) -> str:
    """The text of the last user turn of trl-logged messages (image payloads left out)."""
    if isinstance(messages, str):
        return messages
    text = ""
    for m in messages or []:
        if not isinstance(m, dict) or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(
                p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text"
            )
    return text


def _completion_text(completion: Any) -> str:
    from perception_judge.rewards import completion_text

    text, reasoning = completion_text(completion)
    return f"{reasoning}\n{text}" if reasoning else text


def _save_image(image: Any, folder: Path) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    data = buf.getvalue()
    name = sha256_hex(data)[:16] + ".png"
    path = folder / name
    if not path.exists():
        path.write_bytes(data)
    return name


class CompletionSamplesCallback(_Bound):
    def __init__(self, every: int, k: int, output_dir: str) -> None:
        self.every = every
        self.k = k
        self.folder = Path(output_dir) / "samples"

    def samples(self) -> list[dict[str, Any]]:
        logs = self.trainer._logs
        prompts = list(logs["prompt"])
        completions = list(logs["completion"])
        advantages = list(logs["advantages"])
        images = list(logs["images"]) if logs.get("images") is not None else []
        rewards = {name: list(vals) for name, vals in logs["rewards"].items()}
        n = min(len(prompts), len(completions))
        out = []
        for i in range(min(n, self.k)):
            out.append(
                {
                    "prompt": _message_text(prompts[i]),
                    "completion": _completion_text(completions[i]),
                    "rewards": {
                        name: (None if v[i] != v[i] else v[i]) for name, v in rewards.items() if i < len(v)
                    },
                    "advantage": advantages[i] if i < len(advantages) else None,
                    "images": list(images[i] or []) if i < len(images) else [],
                }
            )
        return out

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.trainer is None or not self.every or not state.is_world_process_zero:
            return
        if logs is None or any(k.startswith("eval_") for k in logs) or state.global_step % self.every:
            return
        if getattr(self, "_last_step", None) == state.global_step:
            return
        self._last_step = state.global_step
        samples = self.samples()
        if not samples:
            return
        image_dir = self.folder / "images"
        image_dir.mkdir(parents=True, exist_ok=True)
        records = []
        for s in samples:
            files = [f"images/{_save_image(im, image_dir)}" for im in s.pop("images")]
            records.append({"step": state.global_step, **s, "images": files})
        path = self.folder / f"step-{state.global_step:06d}.jsonl"
        with path.open("w") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        self._to_tensorboard(state.global_step, records)

    def _to_tensorboard(self, step: int, records: list[dict[str, Any]]) -> None:
        writer = None
        for cb in self.trainer.callback_handler.callbacks:
            if type(cb).__name__ == "TensorBoardCallback":
                writer = getattr(cb, "tb_writer", None)
        if writer is None:
            return
        import numpy as np
        from PIL import Image

        for i, r in enumerate(records):
            rewards = ", ".join(f"{k}={v:.3g}" for k, v in r["rewards"].items() if v is not None)
            text = (
                f"**rewards** {rewards}\n\n**prompt**\n\n{r['prompt']}\n\n**completion**\n\n{r['completion']}"
            )
            writer.add_text(f"samples/{i}", text, step)
            if r["images"]:
                arr = np.asarray(Image.open(self.folder / r["images"][0]).convert("RGB"))
                writer.add_image(f"samples/{i}/image", arr, step, dataformats="HWC")


class ValidationMetricsCallback(TrainerCallback):
    def __init__(self, output_dir: str) -> None:
        self.path = Path(output_dir) / "validation_metrics.jsonl"

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not state.is_world_process_zero or not metrics:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        clean = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        with self.path.open("a") as f:
            f.write(json.dumps({"step": state.global_step, **clean}) + "\n")


class RankSummaryCallback(_Bound):
    def __init__(self, output_dir: str) -> None:
        self.folder = Path(output_dir) / "ranks"

    def on_train_end(self, args, state, control, **kwargs):
        if self.trainer is None:
            return
        acc = self.trainer.accelerator
        self.folder.mkdir(parents=True, exist_ok=True)
        summary = {
            "rank": acc.process_index,
            "local_rank": acc.local_process_index,
            "world_size": acc.num_processes,
            "distributed_type": str(acc.distributed_type),
            "host": os.uname().nodename,
            "global_step": state.global_step,
            **self.trainer.pj_counts,
        }
        (self.folder / f"rank-{acc.process_index}.json").write_text(json.dumps(summary, indent=2) + "\n")


class RunFileCallback(TrainerCallback):
    """Records checkpoints and progress in ``perception_judge_run.json`` as they happen (main process)."""

    def __init__(self, output_dir: str) -> None:
        self.output_dir = output_dir

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from perception_judge.core.runinfo import update_run_info

        update_run_info(self.output_dir, global_step=state.global_step)
