"""``JudgeGRPOTrainer``: trl's GRPOTrainer plus bookkeeping, nothing that changes the algorithm.

Additions (all thin wrappers around trl methods):

* **step-time breakdown**, logged with trl's metrics: ``timing/generate_s`` (sampling), ``timing/rewards_s``
  (reward functions), ``timing/rollout_s`` (generation + old/ref log-probs + rewards + advantages),
  ``timing/update_s`` (forward/backward of the loss), ``timing/data_s`` (pixel policy on the batch), next to
  trl's ``step_time``;
* **processor on save**: checkpoints and the final model get the processor as loaded (the chat template without
  the installed think prefix; the run's ``think_prefix`` in ``perception_judge_run.json`` re-installs it), so a
  checkpoint is an ordinary model folder of its family;
* **model card**: trl's card is replaced by ours (base, data, recipe, rewards, metrics);
* **per-rank counters** (completions generated, prompts seen) for the rank summaries;
* **mixed batches**: a batch holding image and text-only prompts crashed trl 1.16's forward pass (text-only
  rows were passed to the processor as ``None``); they are passed as empty image lists;
* **completion tables**: with ``log_completions`` the logged prompts are flattened to text, which wandb's table
  accepts (block-list prompts made it raise);
* **resume fix**: full-model checkpoints are reloaded through ``from_pretrained`` (see
  :meth:`JudgeGRPOTrainer._load_from_checkpoint`): transformers' Trainer silently skipped every weight of a
  Qwen2.5-VL checkpoint.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from trl import GRPOTrainer


def prompt_as_text(messages: Any) -> Any:
    """A logged prompt as one string (``<image>`` where an image was): tracker tables need one type per column."""
    if not isinstance(messages, list):
        return messages
    lines = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else m
        if isinstance(content, list):
            content = "".join(
                "<image>" if isinstance(b, dict) and b.get("type") == "image" else (b.get("text") or "")
                for b in content
                if isinstance(b, dict)
            )
        lines.append(f"{m.get('role', '?')}: {content}" if isinstance(m, dict) else str(content))
    return "\n\n".join(lines)


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
        self._pj_window = {"rollout": 0.0, "update": 0.0}
        self.pj_counts = {"completions": 0, "prompts": 0, "rollouts": 0}
        super().__init__(*args, **kwargs)

    # -- timing -----------------------------------------------------------------------------------------------
    def _pj_metric(self, name: str, value: float) -> None:
        mode = "train" if self.model.training else "eval"
        self._metrics[mode][name].append(value)

    def _generate(self, prompts: list):
        start = time.perf_counter()
        out = super()._generate(prompts)
        self._pj_metric("timing/generate_s", time.perf_counter() - start)
        images = out[6]
        if images is not None and any(im is None for im in images):
            # trl marks the text-only prompts of a mixed batch with None, which the processor rejects in the
            # forward pass ("only a single or a list of entries is supported"); an empty list means the same
            out = (*out[:6], [im if im is not None else [] for im in images], *out[7:])
        return out

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        start = time.perf_counter()
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._pj_metric("timing/rewards_s", time.perf_counter() - start)
        return out

    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        elapsed = time.perf_counter() - start
        self._pj_metric("timing/rollout_s", elapsed)
        if self.model.training:
            self._pj_rollout_s += elapsed
            self.pj_counts["rollouts"] += 1
            self.pj_counts["completions"] += len(inputs)
            self.pj_counts["prompts"] += len(inputs) // max(1, self.num_generations)
        return out

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        self._pj_rollout_s = 0.0
        out = super().training_step(model, inputs, num_items_in_batch)
        total = time.perf_counter() - start
        self._pj_window["rollout"] += self._pj_rollout_s
        self._pj_window["update"] += total - self._pj_rollout_s
        if self._step % self.current_gradient_accumulation_steps == 0:  # trl's optimizer-step boundary
            self._metrics["train"]["timing/update_s"].append(self._pj_window["update"])
            if self._pj_data_timer is not None:
                self._metrics["train"]["timing/data_s"].append(self._pj_data_timer())
            self._pj_window = {"rollout": 0.0, "update": 0.0}
        return out

    # -- logging ----------------------------------------------------------------------------------------------
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.log_completions and self._logs["prompt"]:
            # block-list prompts ({"type": "image"} next to {"type": "text", "text": ...}) break wandb's table
            # type inference ("Data row contained incompatible types"); log them as text
            prompts = self._logs["prompt"]
            self._logs["prompt"] = deque((prompt_as_text(p) for p in prompts), maxlen=prompts.maxlen)
        super().log(logs, start_time)

    # -- resuming ---------------------------------------------------------------------------------------------
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """Full-model checkpoints load through ``from_pretrained`` (key conversion); the rest as in Trainer.

        Trainer's own path ``load_state_dict``-s the file with ``strict=False``: for Qwen2.5-VL, saved in its
        original key layout, nothing matches and the resumed run silently continues from the base weights.
        """
        from peft import PeftModel

        from perception_judge.train.models import has_full_weights, load_weights_into

        target = model if model is not None else self.model
        if (
            isinstance(target, PeftModel)
            or self.is_deepspeed_enabled
            or self.is_fsdp_enabled
            or not has_full_weights(resume_from_checkpoint)
        ):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_weights_into(target, resume_from_checkpoint)

    # -- saving -----------------------------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        if self._pj_save_processor is not None:
            self._pj_save_processor.save_pretrained(
                output_dir if output_dir is not None else self.args.output_dir
            )

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        if not self.is_world_process_zero():
            return
        if self._pj_card_writer is not None:
            self._pj_card_writer(self)
        else:  # pragma: no cover - only without the run wiring
            super().create_model_card(*args, **kwargs)
