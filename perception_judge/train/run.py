"""The training run behind ``train_grpo.py``: recipe → model path → processor → data → rewards → trainer → files.

Order matters: everything that can be wrong with a recipe or a training set fails before the model's weights
load (recipe parsing and validation, the pixel policy against the model config, row checks, overlong prompts).
:func:`build_run` assembles the trainer (tests inspect it), :func:`train` runs it and writes the run folder.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perception_judge.train.recipe import RESUME_LATEST, Recipe, RecipeError, parse_recipe, report_to_list


def say(msg: str) -> None:
    """Print on the main process only (all processes print in a multi-process run otherwise)."""
    if os.environ.get("RANK", "0") in ("0", "") and os.environ.get("LOCAL_RANK", "0") in ("0", ""):
        print(f"[perception-judge] {msg}", file=sys.stderr, flush=True)


def checkpoint_problem(folder: Path) -> str | None:
    """Why a ``checkpoint-N`` folder cannot be resumed from (None when it is complete). transformers writes
    ``trainer_state.json`` after the weights, optimizer and RNG states, so a crash while saving leaves a folder
    without it (or with a truncated one)."""
    import json

    state = folder / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json (saving was interrupted)"
    try:
        json.loads(state.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable trainer_state.json ({e})"
    return None


def checkpoint_step(folder: Path) -> int:
    try:
        return int(folder.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def newest_complete_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest complete ``checkpoint-N`` in ``output_dir`` and, for each newer one skipped, why."""
    out = Path(output_dir)
    if not out.is_dir():
        return None, []
    folders = sorted(
        (
            p
            for p in out.iterdir()
            if p.is_dir() and p.name.startswith("checkpoint-") and checkpoint_step(p) >= 0
        ),
        key=checkpoint_step,
        reverse=True,
    )
    skipped = []
    for folder in folders:
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append(f"{folder.name}: {problem}")
    return None, skipped


def resolve_resume(value: str | None, output_dir: str) -> str | None:
    """``resume_from_checkpoint``: None, ``latest`` (the newest complete ``checkpoint-N`` in output_dir) or a folder.

    ``auto`` resumes when a complete checkpoint exists and starts fresh otherwise; ``latest`` requires one.
    Incomplete checkpoints (a crash while saving) are skipped, and the run says which and why.
    """
    if not value:
        return None
    if value in RESUME_LATEST:
        last, skipped = newest_complete_checkpoint(output_dir)
        for line in skipped:
            say(f"resume: skipping {line}")
        if last is None:
            if value == "auto":
                return None
            raise RecipeError(
                f"resume_from_checkpoint={value}: no checkpoint to resume from (no complete checkpoint-N folder "
                f"in {output_dir!r})"
            )
        say(f"resume: from {last.name}" + (" (the newest complete one)" if skipped else ""))
        return str(last)
    if not Path(value).is_dir():
        raise RecipeError(f"resume_from_checkpoint: {value!r} is not a checkpoint folder")
    problem = checkpoint_problem(Path(value))
    if problem:
        raise RecipeError(f"resume_from_checkpoint: {value!r} is incomplete: {problem}")
    return value


def finished_at_step(checkpoint: str | None, max_steps: int) -> int | None:
    """The global step of a checkpoint that already reached ``max_steps`` (resuming it would train nothing but
    trl/transformers run one extra step), else None."""
    import json

    if not checkpoint or max_steps is None or max_steps <= 0:
        return None
    step = int(json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("global_step", 0))
    return step if step >= max_steps else None


def image_budget_warning(lengths: Any, policy: Any) -> str | None:
    """A warning when the model's image processor would resize the policy's images again."""
    if policy.mode != "fixed":
        return None
    expected = (policy.size // policy.factor) ** 2
    actual = lengths.image_tokens(policy.size, policy.size)
    if actual != expected:
        return (
            f"the image processor turns {policy.size}x{policy.size} images into {actual} tokens, not {expected}: "
            "its min/max pixel bounds resize them again (sizes stay uniform; set image_size inside its bounds)"
        )
    return None


def build_run_info(recipe: Recipe, **fields: Any) -> dict[str, Any]:
    from perception_judge.train.card import now, versions

    dataset = recipe.script.dataset_name
    info: dict[str, Any] = {
        "format": 1,
        "status": "running",
        "started_at": now(),
        "output_dir": str(Path(recipe.training.output_dir).resolve()),
        "recipe": str(Path(recipe.path).resolve()) if recipe.path else None,
        "overrides": recipe.overrides,
        "train_set": str(Path(dataset).resolve()) if Path(dataset).exists() else dataset,
        "base_adapter": recipe.judge.base_adapter,
        "think_prefix": recipe.judge.think_prefix,
        "args": recipe.flat_args(),
        "final_metrics": None,
        "versions": versions(),
    }
    info.update(fields)
    return info


@dataclass
class Run:
    """A built, not yet trained, run."""

    recipe: Recipe
    trainer: Any
    info: dict[str, Any]
    data: Any
    processor: Any
    model_path: str
    resume: str | None
    state: Any


_RESOLVE = object()  # build_run's default: resolve resume_from_checkpoint itself


def build_run(recipe: Recipe, write_files: bool = True, resume: Any = _RESOLVE) -> Run:
    """Resolve the model, load processor and data, check everything, then load the model and build the trainer."""
    from accelerate import PartialState

    from perception_judge.core.protocol import prepare_processor, template_opens_think
    from perception_judge.core.runinfo import RUN_FILE, update_run_info, write_run_info
    from perception_judge.train import models
    from perception_judge.train.callbacks import (
        CompletionSamplesCallback,
        RankSummaryCallback,
        RunFileCallback,
        ValidationMetricsCallback,
    )
    from perception_judge.train.card import final_metrics, now, write_model_card
    from perception_judge.train.data import PromptLengths, load_judge_data, pixel_policy_for
    from perception_judge.train.rewards import build_rewards, reward_weight_map
    from perception_judge.train.trainer import JudgeGRPOTrainer

    t, m, j, s = recipe.training, recipe.model, recipe.judge, recipe.script
    state = PartialState()
    for w in recipe.warnings:
        say(f"warning: {w}")
    if j.recipe_num_processes and state.num_processes != j.recipe_num_processes:
        say(
            f"warning: the recipe assumes {j.recipe_num_processes} processes, this run has {state.num_processes}: "
            f"{t.generation_batch_size // t.num_generations} prompts per generation round"
        )
    output_dir = t.output_dir
    if resume is _RESOLVE:  # train() passes the checkpoint it already resolved
        resume = resolve_resume(t.resume_from_checkpoint, output_dir)

    # 1. model folder (tiny build / base-adapter merge), processor, config: no weights loaded yet
    model_path = models.resolve_model_path(m, j, output_dir, t.trust_remote_code)
    processor = models.load_processor(model_path, m, t.trust_remote_code)
    shipped_processor = models.load_processor(model_path, m, t.trust_remote_code)  # saved with checkpoints
    prepare_processor(processor, j.think_prefix)
    # The checkpoints carry the chat template training rendered with (its <think> prefill included), so a trained
    # judge served by vLLM / an OpenAI-compatible server gets the same prompt as in training.
    prepare_processor(shipped_processor, j.think_prefix)
    think_open = template_opens_think(processor)
    config = models.load_config(model_path, m, t.trust_remote_code)
    policy = pixel_policy_for(j, config)

    # 2. data: row checks, protocol mix, overlong prompts, pixel policy
    eval_on = str(getattr(t.eval_strategy, "value", t.eval_strategy)) != "no"
    data = load_judge_data(s, j, processor, policy, seed=t.seed, with_validation=eval_on)
    for rep in data.reports.values():
        say(rep.summary())
    warning = image_budget_warning(PromptLengths(processor, policy, j.think_prefix), policy)
    if warning:
        say(f"warning: {warning}")
    if eval_on and data.validation is None:
        from transformers.trainer_utils import IntervalStrategy

        say("warning: no validation rows: validation is switched off")
        t.eval_strategy = IntervalStrategy.NO
        t.do_eval = False
        t.eval_on_start = False

    # 3. rewards
    rewards = build_rewards(j.reward_funcs, j.reward_ties, j.reward_tau, think_open)
    weights = reward_weight_map(j.reward_funcs, t.reward_weights)

    info = build_run_info(
        recipe,
        base_model=models.record_path(model_path),
        model_type=config.model_type,
        tuning="lora" if m.use_peft else "full",
        pixel_policy=policy.to_dict(),
        rewards=weights,
        reward_options={"ties": j.reward_ties, "tau": j.reward_tau, "think_open": think_open},
        data=data.report_dict(),
        world_size=state.num_processes,
        trackers=report_to_list(t.report_to),
        validation={
            "enabled": data.validation is not None,
            "sampling": {"do_sample": True, "temperature": t.temperature, "top_p": t.top_p, "top_k": t.top_k},
            "num_generations": t.num_generations_eval or t.num_generations,
        },
        resumed_from=resume,
    )
    if write_files and state.is_main_process:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        if resume and (Path(output_dir) / RUN_FILE).is_file():  # continue the run's record
            update_run_info(
                output_dir, **{k: v for k, v in info.items() if k != "started_at"}, resumed_at=now()
            )
        else:
            write_run_info(output_dir, info)

    # 4. model and trainer
    model = models.load_model(model_path, m, t.trust_remote_code)
    if j.freeze_vision_tower and not m.use_peft:
        say(f"vision tower frozen ({models.freeze_vision_tower(model)} tensors)")
    peft_config = models.build_lora_config(m, j) if m.use_peft else None

    def card_writer(trainer: Any) -> None:
        write_model_card(output_dir, info, final_metrics(trainer.state.log_history))

    samples = CompletionSamplesCallback(j.sample_log_steps, j.num_samples_to_log, output_dir)
    ranks = RankSummaryCallback(output_dir)
    callbacks = [samples, ranks, ValidationMetricsCallback(output_dir)]
    if write_files:
        callbacks.append(RunFileCallback(output_dir))
    trainer = JudgeGRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=t,
        train_dataset=data.train,
        eval_dataset=data.validation,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=callbacks,
        save_processor=shipped_processor,
        card_writer=card_writer,
        data_timer=data.pop_transform_seconds,
    )
    samples.bind(trainer)
    ranks.bind(trainer)
    params = models.count_parameters(trainer.model)
    say(
        f"model {model_path} ({config.model_type}, {'LoRA' if m.use_peft else 'full'}): "
        f"{params['trainable']:,} of {params['total']:,} parameters trainable; {state.num_processes} process(es); "
        f"prompt opens <think>: {think_open}; rewards {weights}"
    )
    info["parameters"] = params
    if write_files and state.is_main_process:
        update_run_info(output_dir, parameters=params)
    return Run(recipe, trainer, info, data, processor, model_path, resume, state)


def train(recipe: Recipe) -> dict[str, Any]:
    """Build and run one GRPO training, save the final model and the run files; returns the final metrics."""
    import torch

    from perception_judge.core.runinfo import update_run_info
    from perception_judge.train.card import final_metrics, now, write_model_card

    output_dir = recipe.training.output_dir
    start = time.time()
    resume = resolve_resume(recipe.training.resume_from_checkpoint, output_dir)
    done_step = finished_at_step(resume, recipe.training.max_steps)
    if done_step is not None:
        say(
            f"the run in {output_dir} is complete: {Path(resume).name} is at step {done_step} of max_steps "
            f"{recipe.training.max_steps}; nothing to train (raise max_steps to continue it)"
        )
        return {"global_step": done_step, "already_complete": True}
    try:
        run = build_run(recipe, resume=resume)
        run.trainer.train(resume_from_checkpoint=run.resume)
    except BaseException as e:
        from perception_judge.core.runinfo import RUN_FILE

        if os.environ.get("RANK", "0") in ("0", "") and (Path(output_dir) / RUN_FILE).is_file():
            update_run_info(
                output_dir, status="failed", error=f"{type(e).__name__}: {e}"[:2000], failed_at=now()
            )
        raise
    trainer, state = run.trainer, run.state
    trainer.save_model(output_dir)
    trainer.save_state()
    metrics = final_metrics(trainer.state.log_history)
    metrics["global_step"] = trainer.state.global_step
    if state.is_main_process:
        run.info.update(final_metrics=metrics, status="finished")
        update_run_info(
            output_dir,
            final_metrics=metrics,
            status="finished",
            finished_at=now(),
            train_seconds=round(time.time() - start, 1),
        )
        write_model_card(output_dir, run.info, metrics)
        say(f"done: {trainer.state.global_step} steps; model, processor and README.md in {output_dir}")
    state.wait_for_everyone()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return metrics


def main(argv: list[str] | None = None) -> int:
    from perception_judge.train.data import DataError

    try:
        recipe = parse_recipe(argv)
    except RecipeError as e:
        print(f"train_grpo.py: error: {e}", file=sys.stderr)
        return 2
    try:
        train(recipe)
    except (RecipeError, DataError) as e:
        print(f"train_grpo.py: error: {e}", file=sys.stderr)
        return 2
    return 0
