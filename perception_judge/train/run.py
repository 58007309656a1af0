"""The training run behind ``train_grpo.py``: recipe → model path → processor → data → rewards → trainer → files.

Order matters: everything that can be wrong with a recipe or a training set fails before the model's weights
load (recipe parsing and validation, the pixel policy against the model config, row checks, overlong prompts).
:func:`build_run` assembles the trainer (tests inspect it), :func:`train` runs it and writes the run folder.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perception_judge.core.io import now
from perception_judge.core.options import problem
from perception_judge.core.protocol import prepare_processor, template_opens_think
from perception_judge.core.runinfo import RUN_FILE, list_checkpoints, update_run_info, write_run_info
from perception_judge.core.schema import Sampling
from perception_judge.train import models
from perception_judge.train.card import final_metrics, versions, write_model_card
from perception_judge.train.data import DataError, load_judge_data, pixel_policy_for, read_training_set
from perception_judge.train.memory import preflight
from perception_judge.train.recipe import RESUME_LATEST, Recipe, RecipeError, parse_recipe, report_to_list
from perception_judge.train.rewards import build_rewards, reward_weight_map


def say(msg: str) -> None:
    """Print on the main process only (all processes print in a multi-process run otherwise)."""
    if os.environ.get("RANK", "0") in ("0", "") and os.environ.get("LOCAL_RANK", "0") in ("0", ""):
        print(f"[perception-judge] {msg}", file=sys.stderr, flush=True)


def checkpoint_problem(folder: Path) -> str | None:
    """Why a ``checkpoint-N`` folder cannot be resumed from (None when it is complete). transformers writes
    ``trainer_state.json`` after the weights, optimizer and RNG states, so a crash while saving leaves a folder
    without it (or with a truncated one)."""
    state = folder / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json (saving was interrupted)"
    try:
        json.loads(state.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable trainer_state.json ({e})"
    return None


def resolve_resume(value: str | None, output_dir: str) -> str | None:
    """``resume_from_checkpoint``: None, ``latest`` (the newest complete ``checkpoint-N`` in output_dir; ``auto``:
    or a fresh start when there is none) or a folder. Incomplete checkpoints are skipped, saying which and why."""
    if not value:
        return None
    if value not in RESUME_LATEST:
        if not Path(value).is_dir():
            raise problem("resume_from_checkpoint", "not a checkpoint folder", value)
        if why := checkpoint_problem(Path(value)):
            raise problem("resume_from_checkpoint", f"an incomplete checkpoint: {why}", value)
        return value
    skipped = 0
    for name in reversed(list_checkpoints(output_dir)):
        if why := checkpoint_problem(Path(output_dir) / name):
            say(f"resume: skipping {name}: {why}")
            skipped += 1
            continue
        say(f"resume: from {name}" + (" (the newest complete one)" if skipped else ""))
        return str(Path(output_dir) / name)
    if value == "auto":
        return None
    what = f"no checkpoint to resume from (no complete checkpoint-N folder in {output_dir!r})"
    raise problem("resume_from_checkpoint", what, value)


def finished_at_step(checkpoint: str | None, max_steps: int) -> int | None:
    """The global step of a checkpoint that already reached ``max_steps`` (resuming it would train nothing but
    trl/transformers run one extra step), else None."""
    if not checkpoint or max_steps is None or max_steps <= 0:
        return None
    step = int(json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("global_step", 0))
    return step if step >= max_steps else None


@dataclass
class Run:
    """A built, not yet trained, run."""

    trainer: Any
    info: dict[str, Any]
    data: Any
    model_path: str
    resume: str | None
    state: Any


_RESOLVE = object()  # build_run's default: resolve resume_from_checkpoint itself


def _local_problem(path: str | None, marker: str) -> str | None:
    """Why ``path`` is not a local folder holding ``marker``; None when it is, or when it can be a hub id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not path:
        return None
    if not Path(path).exists():
        try:
            validate_repo_id(path)
        except HFValidationError:
            return "does not exist"
        return None
    return None if (Path(path) / marker).is_file() else f"holds no {marker}"


def check_inputs(recipe: Recipe) -> Any:
    """Every input the recipe names, checked before any model is built or loaded (docs/training.md "Inputs are
    checked before any model is built or loaded"): the base adapter and the model when they are local folders (the
    model only without a model provider), then the training set, read whole. Returns the training set."""
    m, j = recipe.model, recipe.judge
    folders = {"base_adapter": (j.base_adapter, "adapter_config.json")}
    if not j.model_provider:
        folders["model_name_or_path"] = (m.model_name_or_path, "config.json")
    for key, (path, marker) in folders.items():
        if why := _local_problem(path, marker):
            raise problem(key, why, path)
    s, t = recipe.script, recipe.training
    eval_on = str(getattr(t.eval_strategy, "value", t.eval_strategy)) != "no"
    splits = (s.dataset_train_split, s.dataset_test_split) if eval_on else (s.dataset_train_split,)
    return read_training_set(s.dataset_name, splits, s.dataset_config)


def precision(recipe: Recipe) -> dict[str, Any]:
    """How a run holds and computes its weights, with fp32 master weights on every path (docs/training.md "Precision"):
    DeepSpeed's own; else full fine-tuning loads the model in float32 under bf16 autocast; LoRA's adapters are fp32."""
    t, m, plugin = recipe.training, recipe.model, recipe.training.deepspeed_plugin
    weights = (m.dtype or "auto") if plugin or m.use_peft else "float32"
    masters = "DeepSpeed" if plugin else "peft's adapters" if m.use_peft else "the model"
    compute = "bfloat16" if t.bf16 else "float16" if t.fp16 else weights
    return dict(weights=weights, compute=compute, masters=masters, zero_stage=plugin and plugin.zero_stage)


def _run_info(recipe: Recipe, run: Run, config: Any, policy: Any, think_open: bool) -> dict[str, Any]:
    """What ``perception_judge_run.json`` records of a run when it starts."""
    t, m, j, s = recipe.training, recipe.model, recipe.judge, recipe.script
    sampled = {k: getattr(t, k) for k in ("temperature", "top_p", "top_k", "seed")}
    return {
        "format": 1,
        "status": "running",
        "started_at": now(),
        "output_dir": str(Path(t.output_dir).resolve()),
        "recipe": str(Path(recipe.path).resolve()) if recipe.path else None,
        "overrides": recipe.overrides,
        "train_set": str(Path(s.dataset_name).resolve()) if Path(s.dataset_name).exists() else s.dataset_name,
        "base_adapter": j.base_adapter,
        "think_prefix": j.think_prefix,
        "args": recipe.flat_args(),
        "final_metrics": None,
        "versions": versions(),
        "base_model": models.record_path(run.model_path),
        "model_type": config.model_type,
        "tuning": "lora" if m.use_peft else "full",
        "precision": precision(recipe),
        "pixel_policy": policy.to_dict(),
        "rewards": reward_weight_map(j.reward_funcs, t.reward_weights),
        "reward_options": {"ties": j.reward_ties, "tau": j.reward_tau, "think_open": think_open},
        "data": run.data.report_dict(),
        "world_size": run.state.num_processes,
        "trackers": report_to_list(t.report_to),
        "validation": {
            "enabled": run.data.validation is not None,
            "sampling": Sampling(max_new_tokens=t.max_completion_length, **sampled).model_dump(),
            "num_generations": t.num_generations_eval or t.num_generations,
        },
        "resumed_from": run.resume,
    }


def _load_data(recipe: Recipe, dataset: Any, processor: Any, policy: Any) -> Any:
    """Row checks, protocol mix, overlong prompts, pixel policy; validation off when no row is left for it."""
    t = recipe.training
    eval_on = str(getattr(t.eval_strategy, "value", t.eval_strategy)) != "no"
    data = load_judge_data(
        recipe.script, recipe.judge, processor, policy, seed=t.seed, with_validation=eval_on, dataset=dataset
    )
    for rep in data.reports.values():
        say(rep.summary())
    if warning := data.lengths.resize_warning():
        say(f"warning: {warning}")
    if eval_on and data.validation is None:
        from transformers.trainer_utils import IntervalStrategy

        say("warning: no validation rows: validation is switched off")
        t.eval_strategy, t.do_eval, t.eval_on_start = IntervalStrategy.NO, False, False
    return data


def _trainer(recipe: Recipe, run: Run, processor: Any, shipped_processor: Any, write_files: bool) -> Any:
    """Load the model and build the trainer with its callbacks."""
    from transformers import AutoModelForImageTextToText

    from perception_judge.train.trainer import CompletionSamplesCallback, JudgeGRPOTrainer, RunFolderCallback

    t, m, j = recipe.training, recipe.model, recipe.judge
    hub = {"revision": m.model_revision, "trust_remote_code": t.trust_remote_code}
    attn = {"attn_implementation": m.attn_implementation} if m.attn_implementation else {}
    p = run.info["precision"]
    t.model_init_kwargs = {"dtype": m.dtype or "auto", **(t.model_init_kwargs or {})}  # trl's reference model
    model = AutoModelForImageTextToText.from_pretrained(run.model_path, dtype=p["weights"], **hub, **attn)
    if j.freeze_vision_tower and not m.use_peft:
        say(f"vision tower frozen ({models.freeze_vision_tower(model)} tensors)")
    callbacks = [
        CompletionSamplesCallback(j.sample_log_steps, j.num_samples_to_log, t.output_dir),
        RunFolderCallback(t.output_dir, run_file=write_files),
    ]
    trainer = JudgeGRPOTrainer(
        model=model,
        reward_funcs=build_rewards(
            j.reward_funcs, j.reward_ties, j.reward_tau, run.info["reward_options"]["think_open"]
        ),
        args=t,
        train_dataset=run.data.train,
        eval_dataset=run.data.validation,
        processing_class=processor,
        peft_config=models.build_lora_config(m, j) if m.use_peft else None,
        callbacks=callbacks,
        save_processor=shipped_processor,
        card_writer=lambda tr: write_model_card(t.output_dir, run.info, final_metrics(tr.state.log_history)),
        data_timer=run.data.pop_transform_seconds,
    )
    for callback in callbacks:
        callback.bind(trainer)
    return trainer


def build_run(recipe: Recipe, write_files: bool = True, resume: Any = _RESOLVE) -> Run:
    """Check every input, resolve the model (provider, base-adapter merge), load processor and data, check them,
    then load the model and build the trainer."""
    from accelerate import PartialState
    from transformers import AutoConfig, AutoProcessor

    t, m, j = recipe.training, recipe.model, recipe.judge
    state = PartialState()
    for w in recipe.warnings:
        say(f"warning: {w}")
    if j.recipe_num_processes and state.num_processes != j.recipe_num_processes:
        say(
            f"warning: the recipe assumes {j.recipe_num_processes} processes, this run has {state.num_processes}: "
            f"{t.generation_batch_size // t.num_generations} prompts per generation round"
        )
    if resume is _RESOLVE:  # train() passes the checkpoint it already resolved
        resume = resolve_resume(t.resume_from_checkpoint, t.output_dir)
    dataset = check_inputs(recipe)

    # the model folder (provider, base-adapter merge), processor, config: no weights loaded yet. The checkpoints get
    # a processor of their own with the chat template training renders with (its <think> prefill included), so a
    # trained judge served by vLLM / an OpenAI-compatible server gets the same prompt as in training.
    model_path = models.resolve_model_path(m, j, t.output_dir, t.trust_remote_code)
    run = Run(trainer=None, info={}, data=None, model_path=model_path, resume=resume, state=state)
    hub = {"revision": m.model_revision, "trust_remote_code": t.trust_remote_code}
    sides = {"padding_side": "left", "truncation_side": "left"}
    processor, shipped_processor = (
        prepare_processor(AutoProcessor.from_pretrained(run.model_path, **sides, **hub), j.think_prefix)
        for _ in range(2)
    )
    think_open = template_opens_think(processor)
    config = AutoConfig.from_pretrained(run.model_path, **hub)
    policy = pixel_policy_for(j, config, processor)
    run.data = _load_data(recipe, dataset, processor, policy)
    longest = max(r.prompt_tokens_max for r in run.data.reports.values())
    if why := preflight(recipe, config, state.num_processes, longest):  # before any weights load
        raise RecipeError(f"memory: {why} (--skip_memory_check true to start anyway)")
    run.info = _run_info(recipe, run, config, policy, think_open)
    if write_files and state.is_main_process:
        if resume and (Path(t.output_dir) / RUN_FILE).is_file():  # continue the run's record
            kept = {k: v for k, v in run.info.items() if k != "started_at"}
            update_run_info(t.output_dir, **kept, resumed_at=now())
        else:
            write_run_info(t.output_dir, run.info)

    run.trainer = _trainer(recipe, run, processor, shipped_processor, write_files)
    count, p = run.trainer.model.num_parameters, run.info["precision"]
    params = {"total": count(), "trainable": count(only_trainable=True)}
    say(
        f"model {run.model_path} ({config.model_type}, {'LoRA' if m.use_peft else 'full'}): "
        f"{params['trainable']:,} of {params['total']:,} parameters trainable; {state.num_processes} process(es); "
        f"prompt opens <think>: {think_open}; rewards {run.info['rewards']}; weights in {p['weights']}, compute in "
        f"{p['compute']}, fp32 master weights: {p['masters']}"
    )
    run.info["parameters"] = params
    if write_files and state.is_main_process:
        update_run_info(t.output_dir, parameters=params)
    return run


def train(recipe: Recipe) -> dict[str, Any]:
    """Build and run one GRPO training, save the final model and the run files; returns the final metrics."""
    output_dir, max_steps = recipe.training.output_dir, recipe.training.max_steps
    start = time.time()
    resume = resolve_resume(recipe.training.resume_from_checkpoint, output_dir)
    if (done_step := finished_at_step(resume, max_steps)) is not None:
        say(
            f"the run in {output_dir} is complete: {Path(resume).name} is at step {done_step} of max_steps "
            f"{max_steps}; nothing to train (raise max_steps to continue it)"
        )
        return {"global_step": done_step, "already_complete": True}
    try:
        run = build_run(recipe, resume=resume)
        run.trainer.train(resume_from_checkpoint=run.resume)
    except BaseException as e:
        if os.environ.get("RANK", "0") in ("0", "") and (Path(output_dir) / RUN_FILE).is_file():
            error = f"{type(e).__name__}: {e}"[:2000]
            update_run_info(output_dir, status="failed", error=error, failed_at=now())
        raise
    trainer, state = run.trainer, run.state
    trainer.save_model(output_dir)
    trainer.save_state()
    metrics = {**final_metrics(trainer.state.log_history), "global_step": trainer.state.global_step}
    if state.is_main_process:
        done = {"final_metrics": metrics, "status": "finished"}
        run.info.update(done)
        update_run_info(output_dir, **done, finished_at=now(), train_seconds=round(time.time() - start, 1))
        write_model_card(output_dir, run.info, metrics)
        say(f"done: {trainer.state.global_step} steps; model, processor and README.md in {output_dir}")
    state.wait_for_everyone()
    state.destroy_process_group()
    return metrics


def main(argv: list[str] | None = None, prog: str = "train_grpo.py") -> int:
    try:
        train(parse_recipe(argv))
    except (RecipeError, DataError) as e:
        print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)  # one line
        return 2
    return 0


COMMAND = functools.partial(main, prog="perception-judge train")  # the `perception-judge train` subcommand
