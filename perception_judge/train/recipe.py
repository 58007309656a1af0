"""Recipe parsing and validation: YAML + command line → the four argument dataclasses, before any model loads.

The recipe supplies ``TrlParser``'s defaults and the command line overrides them (``--set KEY=VALUE`` is ``--KEY
VALUE``); recipe values pass the parser's own checks (key, type, choices) as command-line values do. What the
dataclasses accept but trl would only reject inside the first step, or never, is checked here. Every problem is one
line in the project's one error format (``core.options``: ``KEY: what is wrong (got VALUE)``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_origin, get_type_hints

from pydantic import BeforeValidator, Field, create_model

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import OptionError, Options, Why, key_values, problem, read_config
from perception_judge.train.args import JudgeArguments, ProtocolMix

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


RANGES: type[Options] = create_model(  # type: ignore[call-overload]
    "RecipeRanges",
    __base__=Options,
    **{
        key: (Annotated[float | None, Field(allow_inf_nan=False, **bounds), *more], None)
        for bounds, keys, *more in (
            ({"gt": 0}, "learning_rate repetition_penalty epsilon epsilon_high num_train_epochs logging_steps "
             "save_steps eval_steps"),
            ({"ge": 0}, "weight_decay max_grad_norm warmup_steps top_k beta"),
            ({"ge": 1}, "per_device_train_batch_size per_device_eval_batch_size gradient_accumulation_steps "
             "num_iterations save_total_limit lora_r max_completion_length vllm_tensor_parallel_size"),
            ({"ge": 2}, "num_generations"),
            ({"ge": 0, "le": 1}, "warmup_ratio min_p"),
            ({"gt": 0, "le": 1}, "top_p vllm_gpu_memory_utilization"),
            ({"gt": 0}, "temperature", Why("GRPO needs sampled groups; validation samples too")),
            ({"ge": 1}, "max_steps", BeforeValidator(lambda n: None if n == -1 else n),
             Why("or -1 to train num_train_epochs")),
        )
        for key in keys.split()
    },
    reward_weights=(list[Annotated[float, Field(allow_inf_nan=False)]] | None, None),
    **{k: (h, None) for k, h in get_type_hints(JudgeArguments, include_extras=True).items() if get_origin(h) is Annotated},
)  # fmt: skip
"""The numeric recipe keys checked before any model loads: trl's (transformers accepts most of these silently, or
fails inside the first step) and the project's, with the constraints their fields declare (``train.args``)."""

RecipeError = OptionError  # a recipe or command-line problem, reported before any model is loaded


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
    """A ``TrlParser`` over the four dataclasses raising :class:`RecipeError` (``--config``, ``--set``: its help)."""
    from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

    class _RecipeParser(TrlParser):
        def error(
            self, message: str
        ) -> None:  # argparse would print usage and exit(2); "argument --KEY: ..."
            raise RecipeError(re.sub(r"^argument --(\w+)(/\S+)?: ", r"\1: ", message))

    parser = _RecipeParser((ScriptArguments, GRPOConfig, ModelConfig, JudgeArguments), prog="train_grpo.py")
    parser.set_defaults(dataset_test_split="validation")  # the split `perception-judge export` writes
    for key, choices in LATE_CHOICES.items():
        _actions(parser)[key].choices = choices
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="the recipe (YAML)")
    parser.add_argument("--set", metavar="KEY=VALUE", default=argparse.SUPPRESS, help="as --KEY VALUE")
    return parser


def split_recipe_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """``[RECIPE.yaml] [--config RECIPE.yaml] [--set KEY=VALUE ...] [--key value ...]`` → (recipe path, the overrides
    as ``--key value``: ``--set KEY=VALUE`` is ``--KEY VALUE``, ``--set MAPPING.KEY=VALUE`` ``--MAPPING KEY=VALUE``)."""
    argv, out = list(argv), []
    path = argv.pop(0) if argv and not argv[0].startswith("-") else None
    while argv:
        if (arg := argv.pop(0)) not in ("--config", "--set"):
            out.append(arg)
        elif not argv:
            raise problem(arg, "expected a value, none given")
        elif arg == "--config" and path is not None:
            raise problem("--config", f"a second recipe besides {path!r}", argv[0])
        elif arg == "--config":
            path = argv.pop(0)
        else:
            ((key, value),) = key_values([argv.pop(0)], "--set", split=False).items()
            key, _, inner = key.partition(".")
            out += [f"--{key}", f"{inner}={value}" if inner else value]
    return path, out


def _actions(parser: Any) -> dict[str, Any]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def _suggest(key: str, known: Any) -> str:
    if key.startswith("image_") and (new := key.removeprefix("image_")) in PixelPolicy.model_fields:
        return f"; now pixel_policy.{new} (recipe: pixel_policy: {{{new}: ...}}, --pixel_policy {new}=...)"
    close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "string_to_bool": "a boolean"}


def _check_scalar(key: str, action: Any, value: Any) -> Any:
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
        except Exception:  # argparse type functions raise various errors
            raise problem(key, f"expected {expected}", value) from None
        if action.choices is not None and value not in [str(c) for c in action.choices]:
            raise problem(key, f"expected one of {', '.join(map(str, action.choices))}", value)
    elif kind == "string_to_bool" and not isinstance(value, bool):
        raise problem(key, "expected true or false", value)
    elif isinstance(value, bool) and kind in ("int", "float"):
        raise problem(key, "expected a number", value)
    elif kind == "int" and isinstance(value, float):
        if not value.is_integer():
            raise problem(key, "expected an integer", value)
        value = int(value)
    elif not isinstance(value, bool | int | float):  # numbers for text fields (a revision, a port) are kept
        raise problem(key, f"expected {expected}", value)
    return value


def check_config(parser: Any, config: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a recipe mapping against the parser: unknown keys, types, choices. Returns cleaned defaults."""
    actions = _actions(parser)
    if unknown := [k for k in config if k not in actions]:
        what = f"unknown key of {where}"
        raise RecipeError("; ".join(f"{problem(k, what, config[k])}{_suggest(k, actions)}" for k in unknown))
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
            raise problem(key, "expected a single value, not a mapping", value)
        if isinstance(value, list) and not many and "list" not in annotation:
            raise problem(key, "expected a single value, not a list", value)
        if isinstance(value, dict) or (isinstance(value, list) and not many):
            cleaned[key] = value
        elif many and value is not None:
            items = value if isinstance(value, list) else [value]
            cleaned[key] = [_check_scalar(key, action, v) for v in items]
        else:
            cleaned[key] = _check_scalar(key, action, value)
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
        raise problem("steps_per_generation", "set it or generation_batch_size, not both", spg)
    if gbs is not None:
        if int(gbs) % (pd * num_processes):
            what = f"not a multiple of per_device_train_batch_size × num_processes = {pd} × {num_processes}{where}"
            raise problem("generation_batch_size", what, gbs)
        spg = int(gbs) // (pd * num_processes)
    spg = int(spg) if spg is not None else ga
    gbs = pd * num_processes * spg
    if gbs % ng:
        what = f"per_device_train_batch_size × num_processes × steps_per_generation = {pd} × {num_processes} × {spg}"
        what += f" = {gbs} completions per generation round{where} would split its groups"
        hint = f"e.g. per_device_train_batch_size={ng} or steps_per_generation={ng}"
        raise problem("num_generations", f"{what} ({hint})", ng)
    if spg % ga and ga % spg:
        what = f"it or gradient_accumulation_steps={ga} must divide the other (whole rounds per step)"
        raise problem("steps_per_generation", what, spg)
    if str(values.get("eval_strategy") or "no").lower() not in ("no", "intervalstrategy.no"):
        ped = int(values.get("per_device_eval_batch_size") or 1)
        nge = int(values.get("num_generations_eval") or ng)
        if (ped * num_processes) % nge:
            what = f"the validation batch {ped} × {num_processes}{where} is not a multiple of num_generations_eval={nge}"
            raise problem("per_device_eval_batch_size", what, ped)


def parse_recipe(argv: list[str] | None = None, check_environment: bool = True) -> Recipe:
    """Parse and validate ``[RECIPE.yaml] [--key value ...]``; raises :class:`RecipeError` naming the problem."""
    path, cli = split_recipe_argv(list(sys.argv[1:] if argv is None else argv))
    where = f"recipe {path}" if path else "arguments"
    parser = make_parser()
    config = read_config(path, "recipe") if path else {}
    env = config.pop("env", None) or {}
    if not isinstance(env, dict):
        raise problem("env", "expected a mapping of VARIABLE: value", env)
    cleaned = check_config(parser, config, where)
    if path and isinstance(ds := cleaned.get("deepspeed"), str) and ds.lower() not in ("", "none"):
        cleaned["deepspeed"] = str((Path(path).parent / ds).resolve())  # it ships with the recipe
    for k, v in env.items():
        os.environ.setdefault(str(k), str(v))  # the caller's environment wins over the recipe
    parser.set_defaults_with_config(**cleaned)

    namespace, remaining = parser.parse_known_args(cli)
    if remaining:
        flags = [f.split("=")[0] for f in remaining if f.startswith("--")] or remaining
        raise RecipeError(
            "; ".join(f"{problem(f, 'unknown argument')}{_suggest(f[2:], _actions(parser))}" for f in flags)
        )
    values = vars(namespace)
    RANGES.parse({k: values.get(k) for k in RANGES.model_fields})  # before the geometry, which divides
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
        raise problem("deepspeed", "no such file", ds)
    try:
        stage = _stage(ds)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise problem("deepspeed", f"not a DeepSpeed configuration ({e!r})", ds) from None
    if launch is not None and launch != stage:
        what = f"ZeRO-{stage}, the launch configuration ZeRO-{launch}: launch without a DeepSpeed --config_file, or "
        raise problem("deepspeed", what + "pass --deepspeed none to use the launch's", ds)
    if check_environment and stage is not None:
        import torch

        if not _importable("deepspeed"):
            raise problem("deepspeed", "DeepSpeed is not installed (`pip install -e '.[deepspeed]'`)", ds)
        if not values.get("use_cpu") and not torch.cuda.is_available():  # DeepSpeed's batch check would fail
            raise problem("use_cpu", "DeepSpeed without a GPU needs use_cpu: true", values.get("use_cpu"))
        if "LOCAL_RANK" not in os.environ:  # DeepSpeed would look for an MPI launch
            launchers = "torchrun, or accelerate launch (one process: with a DeepSpeed --config_file)"
            raise problem("deepspeed", f"DeepSpeed needs a distributed launch: {launchers}", ds)
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
    """The project's keys that need more than a range: rewards, the mappings (``KEY=VALUE,...`` on the command line
    updates the recipe's; a protocol mix replaces it) and the pixel policy (the model fills in the rest later)."""
    from perception_judge.train.models import provider_options
    from perception_judge.train.rewards import check_reward_names, reward_weight_map

    j, t = recipe.judge, recipe.training
    check_reward_names(j.reward_funcs)
    reward_weight_map(j.reward_funcs, t.reward_weights)
    for key in ("protocol_mix", "pixel_policy", "model_provider_options"):
        if isinstance(value := getattr(j, key), str):
            mix = key == "protocol_mix"  # a bare PROTOCOL weighs 1; the mix replaces the recipe's
            under = recipe.config.get(key) if not mix and isinstance(recipe.config.get(key), dict) else {}
            setattr(j, key, {**under, **key_values([value], f"--{key}", default="1" if mix else None)})
    if j.protocol_mix:
        mix = ProtocolMix.parse(j.protocol_mix, "protocol_mix")
        j.protocol_mix = mix.model_dump(include=set(j.protocol_mix))
    policy = PixelPolicy.parse({"factor": 1, "min_pixels": 1, **(j.pixel_policy or {})}, "pixel_policy")
    j.pixel_policy = policy.model_dump(include=set(j.pixel_policy or {}))
    if t.use_vllm and t.vllm_mode == "colocate" and policy.mode != "fixed":
        what = "mixed image sizes corrupt vLLM colocate rollouts (trl#6401): use fixed, or vllm_mode: server"
        raise problem("pixel_policy.mode", what, policy.mode)
    j.model_provider_options = provider_options(j.model_provider, j.model_provider_options)


def _check_training(recipe: Recipe) -> None:
    """trl settings that break a judge run: greedy decoding, dropped columns, vLLM colocate with mixed image
    sizes, unknown attention kernels and trackers."""
    t, m, j = recipe.training, recipe.model, recipe.judge
    if t.max_completion_length is None:
        raise problem("max_completion_length", "required (trl's 512 is far too short for judges)")
    gen_kwargs = t.generation_kwargs if isinstance(t.generation_kwargs, dict) else {}
    if gen_kwargs.get("do_sample") is False or gen_kwargs.get("temperature") == 0:
        raise problem("generation_kwargs", "greedy: identical completions, zero advantages", gen_kwargs)
    if t.remove_unused_columns:
        raise problem("remove_unused_columns", "must be false: the rewards read protocol, ground_truth", True)
    if (attn := m.attn_implementation) and not attn.startswith("kernels-community/"):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        if attn not in (kernels := ("eager", *ALL_ATTENTION_FUNCTIONS.valid_keys())):
            raise problem("attn_implementation", f"expected one of {', '.join(kernels)}", attn)
    if m.use_peft and j.freeze_vision_tower and not j.lora_exclude_modules:
        recipe.warnings.append("freeze_vision_tower with LoRA: the vision tower is frozen anyway")
    trackers = report_to_list(t.report_to)
    if t.report_to and any("," in str(r) for r in t.report_to):  # transformers takes a list, not "a,b"
        t.report_to = [name for name in trackers if name != "none"]
    if unknown := [n for n in trackers if n not in ("none", "all", *TRACKERS)]:
        raise problem("report_to", f"unknown tracker; use {', '.join(TRACKERS)} or none", unknown[0])


def _check_environment(recipe: Recipe) -> None:
    """The packages and devices the recipe asks for are there."""
    t, m = recipe.training, recipe.model
    for name in [n for n in report_to_list(t.report_to) if n in TRACKERS]:
        if not _importable(name):
            raise problem("report_to", f"not installed (`pip install {name}`), or set report_to: none", name)
    if t.use_vllm and not _importable("vllm"):
        raise problem("use_vllm", "vLLM is not installed (`pip install -e '.[gpu]'`), or set it false", True)
    flash = ("flash_attention_2", "flash_attention_3")
    if (attn := m.attn_implementation) in flash and not _importable("flash_attn"):
        raise problem("attn_implementation", "needs the flash-attn package (or use sdpa)", attn)


def validate(recipe: Recipe, check_environment: bool = True) -> None:
    """Cross-field checks of a parsed recipe (no model, no data touched; the ranges are checked before)."""
    if not recipe.script.dataset_name:
        raise problem("dataset_name", "required, not given (the folder `perception-judge export` writes)")
    if not recipe.model.model_name_or_path:
        raise problem("model_name_or_path", "required, not given")
    _check_judge(recipe)
    _check_training(recipe)
    if check_environment:
        _check_environment(recipe)
