"""Recipe parsing and validation: YAML + command line → the four argument dataclasses, before any model loads.

The recipe supplies ``TrlParser``'s defaults and the command line overrides them; recipe values pass the parser's own
checks (key, type, choices) as command-line values do. What the dataclasses accept but trl would only reject inside
the first step, or never, is checked here. Every problem is a :class:`RecipeError` naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.schema import PROTOCOLS
from perception_judge.train.args import JudgeArguments, Range, declared_ranges, protocol_mix_dict

# GRPOConfig fields that trl types as free text and checks only inside the first training step (or never): the
# parser gets them as choices
LATE_CHOICES = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none"),
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm_mode": ("colocate", "server"),
}
TRACKERS = ("wandb", "tensorboard", "trackio", "mlflow")  # each is also the package's import name
RESUME_LATEST = ("latest", "last", "true", "True", "auto")

# The ranges of trl's numeric fields the project checks (its own fields declare theirs, train.args), before any model
# loads: transformers accepts most of these silently, or fails inside the first step.
TRL_RANGES: dict[str, Range] = {
    **{
        key: Range(interval)
        for interval, keys in {
            "(0, inf)": "learning_rate repetition_penalty epsilon epsilon_high num_train_epochs logging_steps "
            "save_steps eval_steps",
            "[0, inf)": "weight_decay max_grad_norm warmup_steps top_k beta",
            "[1, inf)": "per_device_train_batch_size per_device_eval_batch_size gradient_accumulation_steps "
            "num_iterations save_total_limit lora_r max_completion_length",
            "[2, inf)": "num_generations",
            "[0, 1]": "warmup_ratio min_p",
            "(0, 1]": "top_p",
        }.items()
        for key in keys.split()
    },
    "temperature": Range("(0, inf)", why="GRPO needs sampled groups; validation samples too"),
    "max_steps": Range("[1, inf)", also=(-1,), text=">= 1 (or -1 to train num_train_epochs)"),
    "reward_weights": Range("(-inf, inf)", text="finite"),
}


class RecipeError(ValueError):
    """A recipe or command-line problem, reported before any model is loaded."""


@dataclass
class Recipe:
    """Everything a run is configured with."""

    script: Any  # trl.ScriptArguments
    training: Any  # trl.GRPOConfig
    model: Any  # trl.ModelConfig
    judge: JudgeArguments
    path: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def flat_args(self) -> dict[str, Any]:
        """Every resolved argument in one flat, JSON-serialisable mapping."""
        asdict = dataclasses.asdict
        parts = (asdict(self.script), self.training.to_dict(), asdict(self.model), asdict(self.judge))
        return json.loads(json.dumps({k: v for part in parts for k, v in part.items()}, default=str))


def make_parser() -> Any:
    """A ``TrlParser`` over the four dataclasses whose errors raise :class:`RecipeError` instead of exiting."""
    from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

    class _RecipeParser(TrlParser):
        def error(self, message: str) -> None:  # argparse would print usage and exit(2)
            raise RecipeError(message)

    parser = _RecipeParser((ScriptArguments, GRPOConfig, ModelConfig, JudgeArguments), prog="train_grpo.py")
    parser.set_defaults(dataset_test_split="validation")  # the split `perception-judge export` writes
    for key, choices in LATE_CHOICES.items():
        _actions(parser)[key].choices = choices
    return parser


def split_recipe_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """``[RECIPE.yaml] [--config RECIPE.yaml] [--key value ...]`` → (recipe path, remaining args)."""
    argv = list(argv)
    path = argv.pop(0) if argv and not argv[0].startswith("-") else None
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

    if not Path(path).is_file():
        raise RecipeError(f"recipe {str(path)!r} not found")
    try:
        config = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        raise RecipeError(f"recipe {str(path)!r} is not valid YAML: {e}") from None
    if not isinstance(config, dict | None):
        raise RecipeError(f"recipe {str(path)!r} must be a YAML mapping of key: value")
    return config or {}


def _actions(parser: Any) -> dict[str, Any]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def _suggest(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "string_to_bool": "a boolean"}


def _check_scalar(key: str, action: Any, value: Any, where: str) -> Any:
    """Check one YAML scalar against the parser's action for ``key``; return the value to use as default. Text
    goes through the action's type and choices as on the command line; other scalars must suit the field's type
    (trl wraps ``T | None`` converters but keeps T's name, so the name tells the field's number type)."""
    kind = getattr(action.type, "__name__", "")
    expected = _TYPE_NAMES.get(kind, "a valid value")
    if value is None:
        return None
    if action.choices is not None or isinstance(value, str):
        value = str(value)
        try:
            if action.type is not None:
                action.type(value)
        except Exception as e:  # argparse type functions raise various errors
            raise RecipeError(f"{where}: {key}: invalid value {value!r}: expected {expected} ({e})") from None
        if action.choices is not None and value not in [str(c) for c in action.choices]:
            choices = ", ".join(map(str, action.choices))
            raise RecipeError(f"{where}: {key}: invalid value {value!r}; choose one of {choices}")
    elif kind == "string_to_bool" and not isinstance(value, bool):
        raise RecipeError(f"{where}: {key}: expected true or false, got {value!r}")
    elif isinstance(value, bool) and kind in ("int", "float"):
        raise RecipeError(f"{where}: {key}: expected a number, got {value!r}")
    elif kind == "int" and isinstance(value, float):
        if not value.is_integer():
            raise RecipeError(f"{where}: {key}: expected an integer, got {value!r}")
        value = int(value)
    elif not isinstance(value, bool | int | float):  # numbers for text fields (a revision, a port) are kept
        raise RecipeError(f"{where}: {key}: expected {expected}, got {type(value).__name__} {value!r}")
    return value


def check_config(parser: Any, config: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a recipe mapping against the parser: unknown keys, types, choices. Returns cleaned defaults."""
    actions = _actions(parser)
    if unknown := [k for k in config if k not in actions]:
        details = "; ".join(f"{k!r}{_suggest(k, actions)}" for k in unknown)
        raise RecipeError(f"{where}: unknown key(s): {details}")
    annotations = {  # as declared: HfArgumentParser rewrites ``Field.type`` in place
        name: str(ann)
        for dtype in parser.dataclass_types
        for klass in reversed(dtype.__mro__)
        for name, ann in getattr(klass, "__annotations__", {}).items()
    }
    cleaned: dict[str, Any] = {}
    for key, value in config.items():
        action, annotation = actions[key], annotations.get(key, "")
        many = action.nargs in ("+", "*")
        if isinstance(value, dict) and "dict" not in annotation:
            raise RecipeError(f"{where}: {key}: a mapping is not allowed here (got {value!r})")
        if isinstance(value, list) and not many and "list" not in annotation:
            raise RecipeError(f"{where}: {key}: expected a single value, got the list {value!r}")
        if isinstance(value, dict) or (isinstance(value, list) and not many):
            cleaned[key] = value
        elif many and value is not None:
            items = value if isinstance(value, list) else [value]
            cleaned[key] = [_check_scalar(key, action, v, where) for v in items]
        else:
            cleaned[key] = _check_scalar(key, action, value, where)
    return cleaned


def check_batch_geometry(values: dict[str, Any], num_processes: int, label: str = "") -> None:
    """The GRPO batch arithmetic of docs/training.md "Batch geometry" (a generation round of
    ``per_device_train_batch_size × num_processes × steps_per_generation`` completions holds whole groups of
    ``num_generations``), checked with a message that names the keys and the numbers."""
    where = f" with {num_processes} process(es){label}"
    pd, ga = (int(values.get(k) or 1) for k in ("per_device_train_batch_size", "gradient_accumulation_steps"))
    ng = int(values.get("num_generations"))
    spg, gbs = values.get("steps_per_generation"), values.get("generation_batch_size")
    if spg is not None and gbs is not None:
        raise RecipeError("set either steps_per_generation or generation_batch_size, not both")
    if gbs is not None:
        if int(gbs) % (pd * num_processes):
            raise RecipeError(
                f"generation_batch_size={gbs} must be a multiple of per_device_train_batch_size × num_processes "
                f"= {pd} × {num_processes} = {pd * num_processes}{where}"
            )
        spg = int(gbs) // (pd * num_processes)
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
    if str(values.get("eval_strategy") or "no").lower() not in ("no", "intervalstrategy.no"):
        ped = int(values.get("per_device_eval_batch_size") or 1)
        nge = int(values.get("num_generations_eval") or ng)
        if (ped * num_processes) % nge:
            raise RecipeError(
                f"validation batch{where}: per_device_eval_batch_size × num_processes = {ped} × {num_processes} = "
                f"{ped * num_processes} is not a multiple of num_generations_eval={nge}"
            )


def parse_recipe(argv: list[str] | None = None, check_environment: bool = True) -> Recipe:
    """Parse and validate ``[RECIPE.yaml] [--key value ...]``; raises :class:`RecipeError` naming the problem."""
    path, cli = split_recipe_argv(list(sys.argv[1:] if argv is None else argv))
    where = f"recipe {path}" if path else "arguments"
    parser = make_parser()
    config = load_recipe_file(path) if path else {}
    env = config.pop("env", None) or {}
    if not isinstance(env, dict):
        raise RecipeError(f"{where}: env must be a mapping of VARIABLE: value")
    cleaned = check_config(parser, config, where)
    if path and isinstance(ds := cleaned.get("deepspeed"), str) and ds.lower() not in ("", "none"):
        cleaned["deepspeed"] = str((Path(path).parent / ds).resolve())  # it ships with the recipe
    for k, v in env.items():
        os.environ.setdefault(str(k), str(v))  # the caller's environment wins over the recipe
    parser.set_defaults_with_config(**cleaned)

    namespace, remaining = parser.parse_known_args(cli)
    if remaining:
        flags = [r for r in remaining if r.startswith("--")]
        details = "; ".join(f"{f!r}{_suggest(f.lstrip('-').split('=')[0], _actions(parser))}" for f in flags)
        raise RecipeError(f"command line: unknown argument(s): {details or repr(remaining)}")
    values = vars(namespace)
    # every numeric setting within its Range (trl's in TRL_RANGES, the project's declared with their fields), before
    # the geometry, whose messages would show a clamped value
    for key, limits in {**TRL_RANGES, **declared_ranges(JudgeArguments)}.items():
        if problem := limits.problem(key, values.get(key)):
            raise RecipeError(problem)
    check_batch_geometry(values, max(1, int(os.environ.get("WORLD_SIZE") or 1)))  # this launch
    if values.get("recipe_num_processes"):  # and for the GPU count the recipe was written for
        check_batch_geometry(values, int(values["recipe_num_processes"]), label=" (recipe_num_processes)")

    deepspeed, notes = _check_deepspeed(values, check_environment)
    try:
        recipe = Recipe(*parser.parse_dict(values), path=path, config=cleaned, overrides=cli)
    except (ValueError, TypeError) as e:  # the dataclasses' own checks (GRPOConfig.__post_init__)
        raise RecipeError(f"{where}: {e}") from None
    recipe.training.deepspeed, recipe.warnings = deepspeed, notes
    validate(recipe, check_environment=check_environment)
    return recipe


def _stage(config: Any) -> int | None:
    """The ZeRO stage of a DeepSpeed configuration (a JSON file, a mapping; None: the launch's), None without one."""
    if not config and (config := os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")) == "none":
        launched = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
        return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", 2)) if launched else None
    config = config if isinstance(config, dict) else json.loads(Path(config).read_text())
    return int(config["zero_optimization"].get("stage", 0))


def zero_stage(training: Any) -> int | None:
    """The ZeRO stage a run uses (its DeepSpeed plugin's once set up, else its ``deepspeed`` configuration's, else
    its launch's); None without DeepSpeed."""
    if plugin := getattr(training, "deepspeed_plugin", None):
        return int(plugin.zero_stage)
    return _stage(training.deepspeed)


def _check_deepspeed(values: dict[str, Any], check_environment: bool) -> tuple[Any, list[str]]:
    """``deepspeed`` against the launch: a DeepSpeed launch configuration of its ZeRO stage replaces it (accelerate
    refuses both), another stage is refused; it needs DeepSpeed, a GPU (or ``use_cpu``) and a launcher. Returns the
    run's and the notes to print; the training arguments get it only when ``check_environment``."""
    ds, launch = values.get("deepspeed"), _stage(None)
    if str(ds).lower() in ("", "none"):
        ds = None
    elif isinstance(ds, str) and not Path(ds).is_file():
        raise RecipeError(f"deepspeed: {ds!r} not found")
    try:
        stage = _stage(ds)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise RecipeError(f"deepspeed: {ds!r} is no DeepSpeed configuration ({e!r})") from None
    if launch is not None and launch != stage:
        raise RecipeError(
            f"deepspeed: the recipe's {ds} is ZeRO-{stage}, the launch configuration ZeRO-{launch}: launch without "
            "a DeepSpeed --config_file, or pass --deepspeed none to use the launch's"
        )
    if check_environment and stage is not None:
        import torch

        if not _importable("deepspeed"):
            raise RecipeError("deepspeed: DeepSpeed is not installed (`pip install -e '.[deepspeed]'`)")
        if not values.get("use_cpu") and not torch.cuda.is_available():  # DeepSpeed's batch check would fail
            raise RecipeError("DeepSpeed without a GPU needs use_cpu: true")
        if "LOCAL_RANK" not in os.environ:  # DeepSpeed would look for an MPI launch
            launchers = "torchrun, or accelerate launch (one process: with a DeepSpeed --config_file)"
            raise RecipeError(f"DeepSpeed needs a distributed launch: {launchers}")
    if ds and launch is not None:
        values["deepspeed"] = None
        return None, [f"the launch's DeepSpeed settings (ZeRO-{launch}) replace deepspeed: {ds}"]
    values["deepspeed"] = ds if check_environment else None  # inspecting a recipe sets no DeepSpeed up
    return ds, []


def report_to_list(report_to: Any) -> list[str]:
    """Trackers as a list; ``"wandb,tensorboard"`` (the command-line form for several) is split."""
    items = [report_to] if isinstance(report_to, str) else [str(r) for r in report_to or []]
    return [part.strip() for item in items for part in item.split(",") if part.strip()] or ["none"]


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _check_judge(recipe: Recipe) -> None:
    """The project's keys that need more than a range: rewards, protocol mix, pixel policy, model provider."""
    from perception_judge.train.models import provider_options
    from perception_judge.train.rewards import check_reward_names, reward_weight_map

    j = recipe.judge
    try:
        check_reward_names(j.reward_funcs)
        reward_weight_map(j.reward_funcs, recipe.training.reward_weights)
    except ValueError as e:
        raise RecipeError(f"reward_funcs / reward_weights: {e}") from None
    try:
        mix = protocol_mix_dict(j.protocol_mix) or {}
        PixelPolicy(
            j.image_mode, j.image_size, j.image_min_pixels or 1, j.image_max_pixels, j.image_factor or 1
        )
    except ValueError as e:
        key = "protocol_mix" if "protocol_mix" in str(e) else "image_mode / image_size / image_*_pixels"
        raise RecipeError(f"{key}: {e}") from None
    if bad := [p for p in mix if p not in PROTOCOLS]:
        raise RecipeError(f"protocol_mix: unknown protocol(s) {bad}; known: {', '.join(PROTOCOLS)}")
    try:  # the command line's options update the recipe's
        options = recipe.config.get("model_provider_options")
        j.model_provider_options = provider_options(j.model_provider, j.model_provider_options, options)
    except ValueError as e:
        raise RecipeError(f"model_provider / model_provider_options: {e}") from None


def _check_training(recipe: Recipe) -> None:
    """trl settings that break a judge run: greedy decoding, dropped columns, vLLM colocate with mixed image
    sizes, unknown attention kernels and trackers."""
    t, m, j = recipe.training, recipe.model, recipe.judge
    if t.max_completion_length is None:
        raise RecipeError("max_completion_length: set it (trl's default of 512 is far too short for judges)")
    gen_kwargs = t.generation_kwargs if isinstance(t.generation_kwargs, dict) else {}
    if gen_kwargs.get("do_sample") is False or gen_kwargs.get("temperature") == 0:
        raise RecipeError(
            "generation_kwargs: greedy decoding (do_sample false / temperature 0) gives identical completions "
            "in a group and zero advantages; remove it"
        )
    if t.remove_unused_columns:
        raise RecipeError("remove_unused_columns must stay false: the rewards read protocol and ground_truth")
    if t.use_vllm and t.vllm_mode == "colocate" and j.image_mode != "fixed":
        raise RecipeError(
            f"image_mode={j.image_mode!r} with vLLM colocate mode: mixed image sizes corrupt rollouts (trl#6401); use "
            "image_mode: fixed, or vllm_mode: server"
        )
    if m.attn_implementation and not m.attn_implementation.startswith("kernels-community/"):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        if m.attn_implementation not in (kernels := ("eager", *ALL_ATTENTION_FUNCTIONS.valid_keys())):
            raise RecipeError(f"attn_implementation: {m.attn_implementation!r} is none of {kernels}")
    if m.use_peft and j.freeze_vision_tower and not j.lora_exclude_modules:
        recipe.warnings.append("freeze_vision_tower with LoRA: the vision tower is frozen anyway")
    trackers = report_to_list(t.report_to)
    if t.report_to and any("," in str(r) for r in t.report_to):  # transformers takes a list, not "a,b"
        t.report_to = [name for name in trackers if name != "none"]
    if unknown := [n for n in trackers if n not in ("none", "all", *TRACKERS)]:
        raise RecipeError(f"report_to: unknown tracker {unknown[0]!r}; use {', '.join(TRACKERS)} or none")


def _check_environment(recipe: Recipe) -> None:
    """The packages and devices the recipe asks for are there."""
    t, m = recipe.training, recipe.model
    for name in [n for n in report_to_list(t.report_to) if n in TRACKERS]:
        if not _importable(name):
            raise RecipeError(
                f"report_to: {name} is not installed (`pip install {name}`), or set report_to: none"
            )
    if t.use_vllm and not _importable("vllm"):
        raise RecipeError("use_vllm: vLLM is not installed; `pip install -e '.[gpu]'` or set use_vllm: false")
    if m.attn_implementation in ("flash_attention_2", "flash_attention_3") and not _importable("flash_attn"):
        raise RecipeError(
            f"attn_implementation: {m.attn_implementation} needs the flash-attn package (or use sdpa)"
        )


def validate(recipe: Recipe, check_environment: bool = True) -> None:
    """Cross-field checks of a parsed recipe (no model, no data touched; the ranges are checked before)."""
    if not recipe.script.dataset_name:
        raise RecipeError(
            "dataset_name (the training-set folder `perception-judge export` writes) is required"
        )
    if not recipe.model.model_name_or_path:
        raise RecipeError("model_name_or_path is required")
    _check_judge(recipe)
    _check_training(recipe)
    if check_environment:
        _check_environment(recipe)
