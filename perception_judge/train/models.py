"""Models for the trainer: resolve the base (the recipe's model provider, base-adapter merge), LoRA (the vision tower
excluded by default, as the published 32B run did), vision-tower freezing and placeholder images, weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

MERGE_MARKER = "perception_judge_merge.json"
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "tokenizer_config.json")
_LAUNCHER_VARIABLE = re.compile(r"\w*RANK$|\w*WORLD_SIZE$|MASTER_|ACCELERATE_")  # torchrun / accelerate


def record_path(path: str) -> str:
    """How a model path is recorded in run files: absolute for local folders, as given for hub ids."""
    return str(Path(path).resolve()) if Path(path).exists() else path


def _merge_record(base: str, adapter: str, dtype: str) -> dict[str, str]:
    return {"base": record_path(base), "adapter": record_path(adapter), "dtype": dtype}


def _must_isolate() -> bool:
    """True in a multi-process or ZeRO-3 run, where building a model on one rank alone would deadlock (under
    ZeRO-3 every model construction enters ``deepspeed.zero.Init``, a collective)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled() or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def run_isolated(args: list[str]) -> None:
    """Run ``python ARGS`` in a fresh process (no distributed or DeepSpeed state)."""
    env = {k: v for k, v in os.environ.items() if not _LAUNCHER_VARIABLE.match(k)}
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"python {' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def provider_options(provider: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """A recipe's ``model_provider_options`` checked against ``provider``: it imports and takes them (its keyword
    parameters); returns them converted to the annotated types (``"0"`` to an int, a ``Literal`` checked)."""
    import inspect
    import typing

    from pydantic import TypeAdapter, ValidationError

    from perception_judge.core.options import problem
    from perception_judge.train.rewards import import_callable

    key, out = "model_provider_options", dict(options or {})
    if not provider:
        if out:
            raise problem(key, "given without a model_provider", out)
        return {}
    function = import_callable(provider, "model_provider")
    try:
        inspect.signature(function).bind("path", **out)
    except TypeError as e:
        raise problem(key, f"{provider} does not take them: {e}", out) from None
    hints = typing.get_type_hints(function, include_extras=True)
    for name in [n for n in out if n in hints]:
        try:
            out[name] = TypeAdapter(hints[name]).validate_python(out[name])
        except ValidationError as e:
            raise problem(f"{key}.{name}", e.errors()[0]["msg"], out[name]) from None
    return out


def provide_model(provider: str, path: str, options: dict[str, Any]) -> None:
    """Call the recipe's model provider, ``provider(path, **options)`` (it builds or fetches the model at ``path``
    and returns at once when it is there): on the main process first, then on the others; in a fresh process
    where building a model on one rank would deadlock (:func:`_must_isolate`)."""
    from accelerate import PartialState

    from perception_judge.train.rewards import import_callable

    with PartialState().main_process_first():
        if _must_isolate():
            run_isolated(["-m", "perception_judge.train.models", provider, path, json.dumps(options)])
        else:
            import_callable(provider, "model_provider")(path, **options)


def merge_lora(
    base: str,
    adapter: str,
    out: str | os.PathLike[str],
    dtype: str = "bfloat16",
    trust_remote_code: bool = False,
) -> Path:
    """Load ``base``, apply the LoRA ``adapter``, merge it into the weights and save model + processor to ``out``,
    with ``perception_judge_merge.json`` (base, adapter, dtype) next to the weights. The processor comes from the
    adapter when it carries one (the trainer's adapters do), else from the base."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = Path(out)
    model = AutoModelForImageTextToText.from_pretrained(
        base, dtype=dtype, trust_remote_code=trust_remote_code
    )
    PeftModel.from_pretrained(model, adapter).merge_and_unload().save_pretrained(out)
    source = adapter if any((Path(adapter) / name).is_file() for name in PROCESSOR_FILES) else base
    AutoProcessor.from_pretrained(source, trust_remote_code=trust_remote_code).save_pretrained(out)
    (out / MERGE_MARKER).write_text(json.dumps(_merge_record(base, adapter, dtype), indent=2) + "\n")
    return out


def merged_base(
    base: str, adapter: str, out: str, dtype: str = "bfloat16", trust_remote_code: bool = False
) -> str:
    """Merge ``adapter`` into ``base`` at ``out`` once (main process first); reuse a matching earlier merge."""
    from accelerate import PartialState

    marker_path = Path(out) / MERGE_MARKER
    want = _merge_record(base, adapter, dtype)
    with PartialState().main_process_first():  # the main process merges, the others reuse its merge
        if marker_path.is_file():
            have = json.loads(marker_path.read_text())
            if have != want:
                raise ValueError(
                    f"merged_base_dir {out!r} holds a different merge ({have}); expected {want}. Point "
                    "merged_base_dir elsewhere or delete it"
                )
        elif (Path(out) / "config.json").is_file():
            raise ValueError(
                f"merged_base_dir {out!r} holds a model without {MERGE_MARKER}; refusing to reuse it"
            )
        elif _must_isolate():
            args = ["merge-lora", "--base", base, "--adapter", adapter, "--out", str(out), "--dtype", dtype]
            run_isolated(
                ["-m", "perception_judge.cli", *args, *(["--trust-remote-code"] if trust_remote_code else [])]
            )
        else:
            merge_lora(base, adapter, out, dtype=dtype, trust_remote_code=trust_remote_code)
    return out


def resolve_model_path(
    model_args: Any, judge_args: Any, output_dir: str, trust_remote_code: bool = False
) -> str:
    """The folder (or hub id) the run loads: the recipe's model provider runs first, then a base adapter is merged
    when the recipe names one."""
    path, j = model_args.model_name_or_path, judge_args
    if j.model_provider:
        provide_model(j.model_provider, path, j.model_provider_options or {})
    if j.base_adapter:
        out = j.merged_base_dir or os.path.join(output_dir, "merged_base")
        dtype = model_args.dtype or "bfloat16"
        path = merged_base(path, j.base_adapter, out, dtype=dtype, trust_remote_code=trust_remote_code)
    return path


def vision_tower(model: Any) -> Any:
    """The vision tower module of a Qwen-VL model (``model.model.visual`` in transformers 5), or None."""
    for candidate in (model, getattr(model, "model", None)):
        if hasattr(candidate, "visual"):
            return candidate.visual
    return None


def freeze_vision_tower(model: Any) -> int:
    """Freeze every parameter of the vision tower (incl. its merger); returns how many tensors were frozen."""
    tower = vision_tower(model)
    if tower is None:
        raise ValueError(f"{type(model).__name__} has no vision tower (`visual`) to freeze")
    params = list(tower.parameters())
    for p in params:
        p.requires_grad_(False)
    return len(params)


def _vision_models(model: Any) -> list[Any]:
    """The inner vision-language modules of ``model`` (``Qwen2_5_VLModel``, ``Qwen3VLModel``: the ones holding the
    vision tower as a child module next to a language model), through any PEFT or DeepSpeed wrapper."""
    return [
        m
        for m in model.modules()
        if "visual" in m._modules and hasattr(m, "get_image_features") and hasattr(m, "get_input_embeddings")
    ]


def _placeholder_image(module: Any, device: Any) -> tuple[Any, Any]:
    """The smallest input the vision tower takes: one temporal patch of ``merge x merge`` zero patches."""
    import torch

    vc = module.config.vision_config
    merge, dim = vc.spatial_merge_size, vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    dtype = next(module.visual.parameters()).dtype
    pixels = torch.zeros(merge * merge, dim, dtype=dtype, device=device)
    return pixels, torch.tensor([[1, merge, merge]], device=device)


def _needs_placeholder(args: tuple, kwargs: dict) -> bool:
    """True for a forward pass without image input that is not a decoding step (no or an empty KV cache)."""
    pixels, cache = kwargs.get("pixel_values"), kwargs.get("past_key_values")
    if pixels is not None and pixels.numel() > 0:
        return False
    if cache is not None and cache.get_seq_length() > 0:
        return False
    if kwargs.get("inputs_embeds") is not None or kwargs.get("pixel_values_videos") is not None:
        return False
    return kwargs.get("input_ids", args[0] if args else None) is not None


def _install_placeholder_hooks(module: Any) -> None:
    """A pass without images gets the placeholder image as its ``pixel_values`` (the pre-hook), a mask that puts its
    features at no token and the position ids of a text-only pass: the modules of a pass with images run, the output
    is that of the pass without."""
    import torch

    pending = [False]
    image_token_mask, position_ids = module.get_placeholder_mask, module.compute_3d_position_ids

    def mark(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        pending[0] = _needs_placeholder(args, kwargs)
        if not pending[0]:
            return None
        pixels, grid = _placeholder_image(module, kwargs.get("input_ids", args[0] if args else None).device)
        return args, {**kwargs, "pixel_values": pixels, "image_grid_thw": grid}

    def placeholder_mask(input_ids: Any, inputs_embeds: Any, **features: Any) -> tuple[Any, Any]:
        if not pending[0]:
            return image_token_mask(input_ids, inputs_embeds=inputs_embeds, **features)
        nowhere = torch.zeros(inputs_embeds.shape, dtype=torch.bool, device=inputs_embeds.device)
        return nowhere, nowhere

    def text_position_ids(*args: Any, **kwargs: Any) -> Any:
        if pending[0]:
            pending[0] = False
            kwargs["image_grid_thw"] = None
        return position_ids(*args, **kwargs)

    module.get_placeholder_mask, module.compute_3d_position_ids = placeholder_mask, text_position_ids
    module.register_forward_pre_hook(mark, with_kwargs=True)


def keep_vision_tower_in_step(model: Any) -> int:
    """Make every forward pass of ``model`` run its vision tower, text-only ones too (decoding steps aside), so every
    rank runs the same modules (docs/training.md, "Mixed image and text-only rows"). Returns how many
    vision-language modules got the hooks (0 for a text-only model); idempotent."""
    modules = _vision_models(model)
    for module in modules:
        if not getattr(module, "_pj_keeps_vision_tower", False):
            _install_placeholder_hooks(module)
            module._pj_keeps_vision_tower = True
    return len(modules)


def build_lora_config(model_args: Any, judge_args: Any) -> Any:
    """trl's LoRA config of the ModelConfig fields (all linear layers unless ``lora_target_modules`` says
    otherwise), excluding ``lora_exclude_modules`` (the vision tower)."""
    from trl import get_peft_config

    targets = model_args.lora_target_modules or "all-linear"
    config = get_peft_config(dataclasses.replace(model_args, use_peft=True, lora_target_modules=targets))
    if judge_args.lora_exclude_modules:
        config.exclude_modules = judge_args.lora_exclude_modules
    return config


def load_weights_into(model: Any, folder: str | os.PathLike[str]) -> None:
    """Load the full weights saved in ``folder`` into ``model`` (strict) through ``from_pretrained``, on the CPU:
    transformers 5 renames the keys of some saved layouts (Qwen2.5-VL) on load, so a plain ``load_state_dict`` of
    the file (what ``Trainer`` does on resume) matches no key and silently keeps the old weights."""
    import torch

    loaded = type(model).from_pretrained(folder, dtype=next(model.parameters()).dtype, device_map="cpu")
    with torch.no_grad():
        result = model.load_state_dict(loaded.state_dict(), strict=False)
    del loaded
    if result.missing_keys or result.unexpected_keys:
        raise RuntimeError(
            f"checkpoint {str(folder)!r} does not match the model: missing {result.missing_keys[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )


if __name__ == "__main__":  # provide_model in a fresh process: PROVIDER PATH OPTIONS_JSON
    from perception_judge.train.rewards import import_callable

    import_callable(sys.argv[1], "model_provider")(sys.argv[2], **json.loads(sys.argv[3]))
