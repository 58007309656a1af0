"""``JudgeGRPOTrainer``: trl's GRPOTrainer plus bookkeeping that leaves the algorithm alone, and its callbacks.

The trainer logs the step-time breakdown of docs/training.md "Tracking", saves ``save_processor`` (the chat template
training rendered with) with every checkpoint, writes the model card with ``card_writer``, counts completions and
prompts per rank, and fixes mixed image/text-only batches, logged prompts and full-model resume (see the methods).
The callbacks write what trl does not log, for every tracker.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from accelerate.utils import gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer

from perception_judge.core.images import image_bytes
from perception_judge.core.runinfo import has_full_weights, update_run_info
from perception_judge.core.schema import sha256_hex
from perception_judge.rewards import completion_text
from perception_judge.train.models import keep_vision_tower_in_step
from perception_judge.train.sync import use_layerwise_sync

# What trl 1.16's ``GRPOTrainer._generate`` returns, in order (its last ``return`` statement). The trainer reads the
# tuple by these names; tests/test_train_components.py checks them against the installed trl's source, so a trl
# release that changes the layout fails loudly there instead of silently here.
GENERATE_FIELDS = (
    "prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs", "extra_fields", "images",
    "tool_images",
)  # fmt: skip


def _text(content: Any, image: str = "") -> Any:
    """Block-list message content as text (``image`` for each image block); other content as it is."""
    if not isinstance(content, list):
        return content
    blocks = [b for b in content if isinstance(b, dict)]
    return "".join(image if b.get("type") == "image" else (b.get("text") or "") for b in blocks)


def prompt_as_text(messages: Any) -> Any:
    """A logged prompt as one string (``<image>`` where an image was): tracker tables need one type per column."""
    if not isinstance(messages, list):
        return messages
    return "\n\n".join(
        f"{m.get('role', '?')}: {_text(m.get('content'), '<image>')}"
        if isinstance(m, dict)
        else str(_text(m, "<image>"))
        for m in messages
    )


class JudgeGRPOTrainer(GRPOTrainer):
    def __init__(
        self,
        *args: Any,
        save_processor: Any = None,
        card_writer: Any = None,
        data_timer: Any = None,
        **kwargs: Any,
    ) -> None:
        self._pj_save_processor = save_processor
        self._pj_card_writer = card_writer
        self._pj_data_timer = data_timer
        self._pj_rollout_s = 0.0
        self._pj_update_s = 0.0
        self.pj_counts = {"completions": 0, "prompts": 0, "rollouts": 0, "text_only_rollouts": 0}
        self._pj_images: list = []
        super().__init__(*args, **kwargs)
        if self.use_vllm:  # trl gathers the whole model to merge LoRA for every weight sync
            use_layerwise_sync(self.vllm_generation)
        # trl gathers the logged images only on ranks whose generation batch has one (`if images is not None`), a
        # collective the other ranks never join: a deadlock as soon as one rank's batch is all text-only. The
        # trainer gathers them itself, on every rank (an empty list per text-only prompt).
        self._pj_log_multimodal, self.log_multimodal = self.log_multimodal, False
        for model in (self.model, getattr(self, "ref_model", None)):
            if model is not None:
                keep_vision_tower_in_step(model)

    def _timed(self, name: str, method: Any, *args: Any) -> Any:
        start = time.perf_counter()
        out = method(*args)
        self._metrics["train" if self.model.training else "eval"][name].append(time.perf_counter() - start)
        return out

    def _generate(self, prompts: list):
        out = dict(
            zip(GENERATE_FIELDS, self._timed("timing/generate_s", super()._generate, prompts), strict=True)
        )
        images = out["images"]
        if images is not None and any(im is None for im in images):
            # trl marks the text-only prompts of a mixed batch with None, which the processor rejects in the
            # forward pass ("only a single or a list of entries is supported"); an empty list means the same
            out["images"] = [im if im is not None else [] for im in images]
        self._pj_images = out["images"] if out["images"] is not None else [[] for _ in prompts]
        if self.model.training and not any(self._pj_images):
            self.pj_counts["text_only_rollouts"] += 1
        return tuple(out[name] for name in GENERATE_FIELDS)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        args = (inputs, prompts, completions, completion_ids_list)
        return self._timed("timing/rewards_s", super()._calculate_rewards, *args)

    def _generate_and_score_completions(self, inputs):
        out = self._timed("timing/rollout_s", super()._generate_and_score_completions, inputs)
        if self._pj_log_multimodal:  # every rank joins the gather, image or not (see __init__)
            self._logs["images"].extend(gather_object(self._pj_images))
        if self.model.training:
            self._pj_rollout_s += self._metrics["train"]["timing/rollout_s"][-1]
            self.pj_counts["rollouts"] += 1
            self.pj_counts["completions"] += len(inputs)
            self.pj_counts["prompts"] += len(inputs) // max(1, self.num_generations)
        return out

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        self._pj_rollout_s = 0.0
        out = super().training_step(model, inputs, num_items_in_batch)
        self._pj_update_s += time.perf_counter() - start - self._pj_rollout_s
        if self._step % self.current_gradient_accumulation_steps == 0:  # trl's optimizer-step boundary
            self._metrics["train"]["timing/update_s"].append(self._pj_update_s)
            if self._pj_data_timer is not None:
                self._metrics["train"]["timing/data_s"].append(self._pj_data_timer())
            self._pj_update_s = 0.0
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.log_completions and self._logs["prompt"]:
            # block-list prompts ({"type": "image"} next to {"type": "text", "text": ...}) break wandb's table
            # type inference ("Data row contained incompatible types"); log them as text
            prompts = self._logs["prompt"]
            self._logs["prompt"] = deque((prompt_as_text(p) for p in prompts), maxlen=prompts.maxlen)
        super().log(logs, start_time)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """Full-model checkpoints load through ``from_pretrained`` (:func:`~.models.load_weights_into`: Trainer's
        own non-strict load matches no key of a Qwen2.5-VL save and silently keeps the base weights)."""
        from peft import PeftModel

        from perception_judge.train.models import load_weights_into

        target = model if model is not None else self.model
        trainers_own = isinstance(target, PeftModel) or self.is_deepspeed_enabled or self.is_fsdp_enabled
        if trainers_own or not has_full_weights(resume_from_checkpoint):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_weights_into(target, resume_from_checkpoint)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        if self._pj_save_processor is not None:
            self._pj_save_processor.save_pretrained(output_dir or self.args.output_dir)

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        if self._pj_card_writer is None:
            super().create_model_card(*args, **kwargs)
        elif self.is_world_process_zero():
            self._pj_card_writer(self)


class _Bound(TrainerCallback):
    """A callback that can reach the trainer (bound after the trainer is built)."""

    trainer: Any = None

    def bind(self, trainer: Any) -> _Bound:
        self.trainer = trainer
        return self


def _user_text(messages: Any) -> str:
    """The text of the last user turn of trl-logged messages (image payloads left out)."""
    if isinstance(messages, str):
        return messages
    turns = [
        _text(m.get("content")) for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"
    ]
    return next((text for text in reversed(turns) if isinstance(text, str)), "")


class CompletionSamplesCallback(_Bound):
    def __init__(self, every: int, k: int, output_dir: str) -> None:
        self.every = every
        self.k = k
        self.folder = Path(output_dir) / "samples"
        self.last_step: int | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.trainer is None or not self.every or not state.is_world_process_zero or logs is None:
            return
        step = state.global_step
        if any(k.startswith("eval_") for k in logs) or step % self.every or self.last_step == step:
            return
        self.last_step = step
        log = self.trainer._logs
        prompts, completions, advantages = (list(log[key]) for key in ("prompt", "completion", "advantages"))
        images = list(log["images"]) if log.get("images") is not None else []
        rewards = {name: list(values) for name, values in log["rewards"].items()}
        records = []
        for i in range(min(len(prompts), len(completions), self.k)):
            text, reasoning = completion_text(completions[i])
            files = []
            for image in (images[i] or []) if i < len(images) else []:
                data = image_bytes(image)
                path = self.folder / "images" / f"{sha256_hex(data)[:16]}.png"
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                files.append(f"images/{path.name}")
            scores = {name: (None if v[i] != v[i] else v[i]) for name, v in rewards.items() if i < len(v)}
            record = {
                "step": step,
                "prompt": _user_text(prompts[i]),
                "completion": f"{reasoning}\n{text}" if reasoning else text,
                "rewards": scores,
                "advantage": advantages[i] if i < len(advantages) else None,
                "images": files,
            }
            records.append(record)
        if records:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"step-{step:06d}.jsonl"
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            self._to_tensorboard(step, records)

    def _to_tensorboard(self, step: int, records: list[dict[str, Any]]) -> None:
        handler = self.trainer.callback_handler
        boards = [cb for cb in handler.callbacks if type(cb).__name__ == "TensorBoardCallback"]
        writer = getattr(boards[-1], "tb_writer", None) if boards else None
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


class RunFolderCallback(_Bound):
    """``validation_metrics.jsonl`` (one line per validation), ``ranks/rank-<k>.json`` per process at the end, and
    (``run_file``) ``perception_judge_run.json`` updated on every save (main process)."""

    def __init__(self, output_dir: str, run_file: bool = True) -> None:
        self.output_dir = Path(output_dir)
        self.run_file = run_file

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not state.is_world_process_zero or not metrics:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        clean = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        with (self.output_dir / "validation_metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": state.global_step, **clean}) + "\n")

    def on_train_end(self, args, state, control, **kwargs):
        if self.trainer is None:
            return
        acc = self.trainer.accelerator
        summary = {
            "rank": acc.process_index,
            "local_rank": acc.local_process_index,
            "world_size": acc.num_processes,
            "distributed_type": str(acc.distributed_type),
            "host": os.uname().nodename,
            "global_step": state.global_step,
            **self.trainer.pj_counts,
        }
        (self.output_dir / "ranks").mkdir(parents=True, exist_ok=True)
        (self.output_dir / "ranks" / f"rank-{acc.process_index}.json").write_text(
            json.dumps(summary, indent=2) + "\n"
        )

    def on_save(self, args, state, control, **kwargs):
        if self.run_file and state.is_world_process_zero:
            update_run_info(self.output_dir, global_step=state.global_step)
