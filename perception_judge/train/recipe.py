"""Recipe parsing and validation: YAML + command line → the four argument dataclasses, before any model loads.

``accelerate launch train_grpo.py recipes/flex7b.yaml --learning_rate 1e-7`` reads the recipe with trl's
``TrlParser`` (the recipe supplies defaults, the command line overrides them) into
:class:`~perception_judge.train.args.JudgeScriptArguments`, ``trl.GRPOConfig``, ``trl.ModelConfig`` and
:class:`~perception_judge.train.args.JudgeArguments`. Every mistake a recipe can make is caught here and reported
as a :class:`RecipeError` naming the key:

* unknown keys (recipe or command line), with the closest known names;
* values of the wrong type or outside a field's choices (``learning_rate: fast``, ``loss_type: ppo``);
* batch geometry that trl would reject or that breaks prompt groups, for the actual process count and for the
  count the recipe assumes (``recipe_num_processes``);
* project settings: reward names and weights, protocol mix, think prefix, pixel policy, tiny-model arch;
* environment: a tracker or vLLM or flash-attention requested but not installed.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.schema import PROTOCOLS
from perception_judge.rewards import TIE_POLICIES
from perception_judge.train.args import (
    IMAGE_MODES,
    OVERLONG_POLICIES,
    THINK_PREFIXES,
    JudgeArguments,
    JudgeScriptArguments,
    protocol_mix_dict,
)

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
SCALE_REWARDS = ("group", "batch", "none")
IS_LEVELS = ("token", "sequence")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
VLLM_MODES = ("colocate", "server")
TRACKERS = {"wandb": "wandb", "tensorboard": "tensorboard", "trackio": "trackio", "mlflow": "mlflow"}
TRACKERS_NO_PACKAGE = ("none", "all")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
RESUME_LATEST = ("latest", "last", "true", "True", "auto")


class RecipeError(ValueError):
    """A recipe or command-line problem, reported before any model is loaded."""


@dataclass
class Recipe:
    """Everything a run is configured with."""

    script: JudgeScriptArguments
    training: Any  # trl.GRPOConfig
    model: Any  # trl.ModelConfig
    judge: JudgeArguments
    path: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def flat_args(self) -> dict[str, Any]:
        """Every resolved argument in one flat, JSON-serialisable mapping."""
        out: dict[str, Any] = {}
        out.update(_jsonable(dataclasses.asdict(self.script)))
        out.update(_jsonable(self.training.to_dict()))
        out.update(_jsonable(dataclasses.asdict(self.model)))
        out.update(_jsonable(dataclasses.asdict(self.judge)))
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "value") and isinstance(getattr(value, "value", None), str):  # enums
        return value.value
    return str(value)


def dataclass_types() -> tuple[type, ...]:
    from trl import GRPOConfig, ModelConfig

    return (JudgeScriptArguments, GRPOConfig, ModelConfig, JudgeArguments)


def make_parser() -> Any:
    """A ``TrlParser`` over the four dataclasses whose errors raise :class:`RecipeError` instead of exiting."""
    from trl import TrlParser

    class _RecipeParser(TrlParser):
        def error(self, message: str) -> None:  # argparse would print usage and exit(2)
            raise RecipeError(message)

    return _RecipeParser(dataclass_types(), prog="train_grpo.py")


# ----------------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------------


def split_recipe_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """``[RECIPE.yaml] [--config RECIPE.yaml] [--key value ...]`` → (recipe path, remaining args)."""
    argv = list(argv)
    path = None
    if argv and not argv[0].startswith("-"):
        path = argv.pop(0)
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise RecipeError("--config needs a recipe path")
        if path is not None:
            raise RecipeError(f"two recipes given: {path!r} and {argv[i + 1]!r}")
        path = argv[i + 1]
        del argv[i : i + 2]
    return path, argv


def load_recipe_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"recipe {str(p)!r} not found")
    try:
        config = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise RecipeError(f"recipe {str(p)!r} is not valid YAML: {e}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise RecipeError(f"recipe {str(p)!r} must be a YAML mapping of key: value")
    return config


def _known_keys(parser: Any) -> dict[str, Any]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _field_annotations() -> dict[str, str]:
    """Declared annotations (HfArgumentParser rewrites ``Field.type`` in place, so read ``__annotations__``)."""
    out: dict[str, str] = {}
    for dtype in dataclass_types():
        for klass in reversed(dtype.__mro__):
            for name, ann in getattr(klass, "__annotations__", {}).items():
                out[name] = str(ann)
    return out


def _type_name(tp: Any) -> str:
    name = getattr(tp, "__name__", "")
    if name == "string_to_bool":
        return "a boolean"
    if name in ("int", "float", "str"):
        return {"int": "an integer", "float": "a number", "str": "a string"}[name]
    return "a valid value"


def _check_scalar(key: str, action: Any, value: Any, where: str) -> Any:
    """Check one YAML scalar against an argparse action; return the value to use as default."""
    tp = action.type
    tname = getattr(tp, "__name__", "")
    if value is None:
        return value
    if action.choices is not None and not isinstance(value, str):
        value = str(value)
    if isinstance(value, str):
        if tp is not None:
            try:
                tp(value)
            except Exception as e:  # argparse type functions raise various errors
                raise RecipeError(
                    f"{where}: {key}: invalid value {value!r}: expected {_type_name(tp)} ({e})"
                ) from None
        if action.choices is not None and value not in [str(c) for c in action.choices]:
            raise RecipeError(
                f"{where}: {key}: invalid value {value!r}; choose one of {', '.join(map(str, action.choices))}"
            )
        return value
    if tname == "string_to_bool":
        if not isinstance(value, bool):
            raise RecipeError(f"{where}: {key}: expected true or false, got {value!r}")
        return value
    # trl wraps `T | None` converters but keeps T's name, so the name tells the field's number type
    if isinstance(value, bool):
        if tname in ("int", "float"):
            raise RecipeError(f"{where}: {key}: expected a number, got {value!r}")
        return value
    if isinstance(value, int | float):
        if tname == "int":
            if isinstance(value, float) and not value.is_integer():
                raise RecipeError(f"{where}: {key}: expected an integer, got {value!r}")
            return int(value)
        return value  # floats, and numbers for string fields (a revision, a port): the dataclass decides
    raise RecipeError(f"{where}: {key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")


def check_config(parser: Any, config: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a recipe mapping against the parser: unknown keys, types, choices. Returns cleaned defaults."""
    actions = _known_keys(parser)
    known = sorted(actions)
    unknown = [k for k in config if k not in actions]
    if unknown:
        details = "; ".join(f"{k!r}{_suggest(k, known)}" for k in unknown)
        raise RecipeError(f"{where}: unknown key(s): {details}")
    annotations = _field_annotations()
    cleaned: dict[str, Any] = {}
    for key, value in config.items():
        action = actions[key]
        ann = annotations.get(key, "")
        if isinstance(value, dict):
            if "dict" not in ann:
                raise RecipeError(f"{where}: {key}: a mapping is not allowed here (got {value!r})")
            cleaned[key] = value
            continue
        is_list_field = action.nargs in ("+", "*")
        if isinstance(value, list):
            if not is_list_field and "list" not in ann:
                raise RecipeError(f"{where}: {key}: expected a single value, got the list {value!r}")
            if is_list_field:
                cleaned[key] = [_check_scalar(key, action, v, where) for v in value]
            else:
                cleaned[key] = value
            continue
        if is_list_field and value is not None:
            cleaned[key] = [_check_scalar(key, action, value, where)]
            continue
        cleaned[key] = _check_scalar(key, action, value, where)
    return cleaned


def _world_size() -> int:
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def check_batch_geometry(values: dict[str, Any], num_processes: int, label: str = "") -> None:
    """The GRPO batch arithmetic, checked with a message that names the keys and the numbers.

    Per optimizer step each process sees ``per_device_train_batch_size × gradient_accumulation_steps``
    completions; one generation round produces ``generation_batch_size = per_device_train_batch_size ×
    num_processes × steps_per_generation`` completions, which must be whole groups of ``num_generations``.
    """
    where = f" with {num_processes} process(es){label}"
    pd = values.get("per_device_train_batch_size")
    pd = 1 if pd is None else int(pd)
    ga = values.get("gradient_accumulation_steps")
    ga = 1 if ga is None else int(ga)
    ng = values.get("num_generations")
    spg = values.get("steps_per_generation")
    gbs = values.get("generation_batch_size")
    if ng is None or int(ng) < 2:
        raise RecipeError(f"num_generations: GRPO needs at least 2 generations per prompt, got {ng!r}")
    ng = int(ng)
    if pd < 1 or ga < 1:
        raise RecipeError("per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    if spg is not None and gbs is not None:
        raise RecipeError("set either steps_per_generation or generation_batch_size, not both")
    if gbs is not None:
        gbs = int(gbs)
        if gbs % (pd * num_processes):
            raise RecipeError(
                f"generation_batch_size={gbs} must be a multiple of per_device_train_batch_size × num_processes "
                f"= {pd} × {num_processes} = {pd * num_processes}{where}"
            )
        spg = gbs // (pd * num_processes)
    spg = int(spg) if spg is not None else ga
    gbs = pd * num_processes * spg
    if gbs % ng:
        raise RecipeError(
            f"batch geometry{where}: per_device_train_batch_size × num_processes × steps_per_generation = "
            f"{pd} × {num_processes} × {spg} = {gbs} completions per generation round, which is not a multiple of "
            f"num_generations={ng}, so prompt groups would be split. Make {pd}×{num_processes}×{spg} divisible "
            f"by {ng} (e.g. per_device_train_batch_size={ng} or steps_per_generation={ng})"
        )
    if spg % ga and ga % spg:
        raise RecipeError(
            f"steps_per_generation={spg} and gradient_accumulation_steps={ga}: one must divide the other, so "
            "every optimizer step sees completions of whole generation rounds"
        )
    strategy = str(values.get("eval_strategy") or "no").lower()
    if strategy not in ("no", "intervalstrategy.no"):
        ped = int(values.get("per_device_eval_batch_size") or 1)
        nge = int(values.get("num_generations_eval") or ng)
        if (ped * num_processes) % nge:
            raise RecipeError(
                f"validation batch{where}: per_device_eval_batch_size × num_processes = {ped} × {num_processes} = "
                f"{ped * num_processes} is not a multiple of num_generations_eval={nge}"
            )


def parse_recipe(argv: list[str] | None = None, check_environment: bool = True) -> Recipe:
    """Parse and validate ``[RECIPE.yaml] [--key value ...]``; raises :class:`RecipeError` naming the problem."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    path, cli = split_recipe_argv(argv)
    where = f"recipe {path}" if path else "arguments"
    parser = make_parser()
    config = load_recipe_file(path) if path else {}
    env = config.pop("env", None) or {}
    if not isinstance(env, dict):
        raise RecipeError(f"{where}: env must be a mapping of VARIABLE: value")
    cleaned = check_config(parser, config, where)
    for k, v in env.items():
        os.environ.setdefault(str(k), str(v))  # the caller's environment wins over the recipe
    parser.set_defaults_with_config(**cleaned)

    namespace, remaining = parser.parse_known_args(cli)
    if remaining:
        known = sorted(_known_keys(parser))
        flags = [r for r in remaining if r.startswith("--")]
        details = "; ".join(f"{f!r}{_suggest(f.lstrip('-').split('=')[0], known)}" for f in flags) or repr(
            remaining
        )
        raise RecipeError(f"command line: unknown argument(s): {details}")
    values = vars(namespace)

    _check_ranges(values)  # before the geometry, whose messages would show a clamped value
    # Batch geometry, for this launch and for the GPU count the recipe was written for.
    check_batch_geometry(values, _world_size())
    assumed = values.get("recipe_num_processes")
    if assumed:
        check_batch_geometry(values, int(assumed), label=" (recipe_num_processes)")

    objs = []
    for dtype in dataclass_types():
        keys = {f.name for f in dataclasses.fields(dtype) if f.init}
        inputs = {k: v for k, v in values.items() if k in keys}
        try:
            objs.append(dtype(**inputs))
        except (ValueError, TypeError) as e:
            raise RecipeError(f"{where}: {dtype.__name__}: {e}") from None
    script, training, model, judge = objs
    recipe = Recipe(script, training, model, judge, path=path, config=cleaned, overrides=cli)
    validate(recipe, check_environment=check_environment)
    return recipe


# ----------------------------------------------------------------------------------------------------------
# Semantic validation
# ----------------------------------------------------------------------------------------------------------


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise RecipeError(f"{key}: invalid value {value!r}; choose one of {', '.join(choices)}")


def report_to_list(report_to: Any) -> list[str]:
    """Trackers as a list; ``"wandb,tensorboard"`` (the command-line form for several) is split."""
    if report_to is None:
        return ["none"]
    items = [report_to] if isinstance(report_to, str) else [str(r) for r in report_to]
    return [part.strip() for item in items for part in item.split(",") if part.strip()] or ["none"]


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# (key, lowest, highest, lowest allowed itself, highest allowed itself); None = unbounded. Checked before any model
# loads, so a typo in a recipe never costs a model load (transformers accepts most of these silently).
NUMERIC_RANGES: tuple[tuple[str, float | None, float | None, bool, bool], ...] = (
    ("learning_rate", 0.0, None, False, True),
    ("weight_decay", 0.0, None, True, True),
    ("max_grad_norm", 0.0, None, True, True),
    ("warmup_ratio", 0.0, 1.0, True, True),
    ("warmup_steps", 0, None, True, True),
    ("top_p", 0.0, 1.0, False, True),
    ("top_k", 0, None, True, True),
    ("min_p", 0.0, 1.0, True, True),
    ("repetition_penalty", 0.0, None, False, True),
    ("epsilon", 0.0, None, False, True),
    ("epsilon_high", 0.0, None, False, True),
    ("num_train_epochs", 0.0, None, False, True),
    ("per_device_train_batch_size", 1, None, True, True),
    ("per_device_eval_batch_size", 1, None, True, True),
    ("gradient_accumulation_steps", 1, None, True, True),
    ("num_generations", 2, None, True, True),
    ("num_iterations", 1, None, True, True),
    ("logging_steps", 0, None, False, True),
    ("save_steps", 0, None, False, True),
    ("eval_steps", 0, None, False, True),
    ("save_total_limit", 1, None, True, True),
)


def _check_ranges(t: Any) -> None:
    """Every numeric GRPO / training field within its range, naming the key and the range (see NUMERIC_RANGES).
    ``max_steps`` is -1 (use epochs) or >= 1."""
    get = t.get if isinstance(t, dict) else (lambda k, d=None: getattr(t, k, d))
    for key, lo, hi, lo_ok, hi_ok in NUMERIC_RANGES:
        v = get(key, None)
        if v is None or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        bad = (lo is not None and (v < lo or (v == lo and not lo_ok))) or (
            hi is not None and (v > hi or (v == hi and not hi_ok))
        )
        if bad:
            left = "unbounded" if lo is None else f"{'[' if lo_ok else '('}{lo:g}"
            right = "inf)" if hi is None else f"{hi:g}{']' if hi_ok else ')'}"
            raise RecipeError(f"{key} must be in {left}, {right}, got {v!r}")
    max_steps = get("max_steps", None)
    if isinstance(max_steps, int) and max_steps != -1 and max_steps < 1:
        raise RecipeError(f"max_steps must be >= 1 (or -1 to train num_train_epochs), got {max_steps}")


def validate(recipe: Recipe, check_environment: bool = True) -> None:
    """Cross-field checks of a parsed recipe (no model, no data touched)."""
    from perception_judge.tiny_models import ARCHS
    from perception_judge.train.rewards import check_reward_names, reward_weight_map

    s, t, m, j = recipe.script, recipe.training, recipe.model, recipe.judge
    if not s.dataset_name:
        raise RecipeError(
            "dataset_name: the training-set folder (written by `perception-judge export`) is required"
        )
    if not m.model_name_or_path:
        raise RecipeError("model_name_or_path is required")

    # rewards
    try:
        check_reward_names(j.reward_funcs)
        reward_weight_map(j.reward_funcs, t.reward_weights)
    except ValueError as e:
        raise RecipeError(f"reward_funcs / reward_weights: {e}") from None
    _choice("reward_ties", j.reward_ties, TIE_POLICIES)

    # data and rendering
    try:
        mix = protocol_mix_dict(j.protocol_mix)
    except ValueError as e:
        raise RecipeError(str(e)) from None
    if mix:
        bad = [p for p in mix if p not in PROTOCOLS]
        if bad:
            raise RecipeError(f"protocol_mix: unknown protocol(s) {bad}; known: {', '.join(PROTOCOLS)}")
    _choice("think_prefix", j.think_prefix, THINK_PREFIXES)
    _choice("image_mode", j.image_mode, IMAGE_MODES)
    _choice("overlong_prompts", j.overlong_prompts, OVERLONG_POLICIES)
    if j.max_prompt_tokens is not None and j.max_prompt_tokens < 1:
        raise RecipeError(f"max_prompt_tokens must be >= 1, got {j.max_prompt_tokens}")
    for key in ("max_train_samples", "max_eval_samples"):
        v = getattr(j, key)
        if v is not None and v < 1:
            raise RecipeError(f"{key} must be >= 1, got {v}")
    if j.image_factor < 0:
        raise RecipeError(f"image_factor must be >= 0 (0 = from the model), got {j.image_factor}")
    try:
        PixelPolicy(
            mode=j.image_mode,
            size=j.image_size,
            min_pixels=j.image_min_pixels,
            max_pixels=j.image_max_pixels,
            factor=j.image_factor or 1,
        )
    except ValueError as e:
        raise RecipeError(f"image_mode / image_size / image_*_pixels: {e}") from None
    if j.tiny_model_arch is not None:
        _choice("tiny_model_arch", j.tiny_model_arch, ARCHS)
    if j.tiny_model_warm_start_steps < 0:
        raise RecipeError(f"tiny_model_warm_start_steps must be >= 0, got {j.tiny_model_warm_start_steps}")
    if j.sample_log_steps < 0 or j.num_samples_to_log < 0:
        raise RecipeError("sample_log_steps and num_samples_to_log must be >= 0")
    if j.recipe_num_processes is not None and j.recipe_num_processes < 1:
        raise RecipeError(f"recipe_num_processes must be >= 1, got {j.recipe_num_processes}")

    _check_ranges(t)

    # GRPO knobs that trl would only reject deep inside the first step
    _choice("loss_type", t.loss_type, LOSS_TYPES)
    _choice("scale_rewards", t.scale_rewards, SCALE_REWARDS)
    _choice("importance_sampling_level", t.importance_sampling_level, IS_LEVELS)
    _choice("multi_objective_aggregation", t.multi_objective_aggregation, AGGREGATIONS)
    _choice("vllm_mode", t.vllm_mode, VLLM_MODES)
    if t.max_completion_length is None or t.max_completion_length < 1:
        raise RecipeError(
            f"max_completion_length must be a positive integer, got {t.max_completion_length!r} (trl's default "
            "of 512 is far too short for judge reasoning: set it explicitly)"
        )
    if t.beta < 0:
        raise RecipeError(f"beta (KL coefficient) must be >= 0, got {t.beta}")
    if not t.temperature > 0:
        raise RecipeError(
            f"temperature must be > 0, got {t.temperature}: GRPO needs sampled groups, and validation samples "
            "with the same settings"
        )
    gen_kwargs = t.generation_kwargs if isinstance(t.generation_kwargs, dict) else {}
    if gen_kwargs.get("do_sample") is False or gen_kwargs.get("temperature") == 0:
        raise RecipeError(
            "generation_kwargs: greedy decoding (do_sample false / temperature 0) gives identical completions "
            "in a group and zero advantages; remove it"
        )
    if t.remove_unused_columns:
        raise RecipeError(
            "remove_unused_columns must stay false: the rewards read the protocol and ground_truth columns"
        )
    if t.use_vllm and t.vllm_mode == "colocate" and j.image_mode != "fixed":
        raise RecipeError(
            f"image_mode={j.image_mode!r} with vLLM colocate mode: trl 1.16 sends processor-expanded prompt ids "
            "with the images and mixed image sizes corrupt rollouts (trl#6401). Use image_mode: fixed, or "
            "vllm_mode: server"
        )
    if m.attn_implementation is not None and not str(m.attn_implementation).startswith("kernels-community/"):
        _choice("attn_implementation", m.attn_implementation, ATTN_IMPLEMENTATIONS)
    if m.use_peft and m.lora_r < 1:
        raise RecipeError(f"lora_r must be >= 1, got {m.lora_r}")
    if m.use_peft and j.freeze_vision_tower and not j.lora_exclude_modules:
        recipe.warnings.append("freeze_vision_tower with LoRA: the vision tower is frozen anyway")

    trackers = report_to_list(t.report_to)
    if t.report_to and any("," in str(r) for r in t.report_to):  # transformers takes a list, not "a,b"
        t.report_to = [name for name in trackers if name != "none"]
    for name in trackers:
        if name in TRACKERS_NO_PACKAGE:
            continue
        if name not in TRACKERS:
            raise RecipeError(
                f"report_to: unknown tracker {name!r}; use wandb, trackio, tensorboard, mlflow or none"
            )

    if not check_environment:
        return
    for name in trackers:
        if name in TRACKERS and not _importable(TRACKERS[name]):
            raise RecipeError(
                f"report_to: {name} is not installed; `pip install -e '.[track]'` (wandb, tensorboard) or "
                f"`pip install {name}`, or set report_to: none"
            )
    if t.use_vllm and not _importable("vllm"):
        raise RecipeError("use_vllm: vLLM is not installed; `pip install -e '.[gpu]'` or set use_vllm: false")
    if m.attn_implementation in ("flash_attention_2", "flash_attention_3") and not _importable("flash_attn"):
        raise RecipeError(
            f"attn_implementation: {m.attn_implementation} needs the flash-attn package; install it or use sdpa"
        )
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true" and not t.use_cpu:
        import torch

        if not torch.cuda.is_available():
            raise RecipeError(
                "DeepSpeed without a GPU needs use_cpu: true (otherwise accelerate sees a single process and "
                "DeepSpeed's batch-size check fails)"
            )
    resume = t.resume_from_checkpoint
    if resume and resume not in RESUME_LATEST and not Path(resume).is_dir():
        raise RecipeError(
            f"resume_from_checkpoint: {resume!r} is neither 'latest' nor an existing checkpoint folder"
        )
