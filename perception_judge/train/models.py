"""Models for the trainer: resolve the base (tiny build, base-adapter merge), load model and processor, LoRA.

Qwen2.5-VL (Flex-VL) and Qwen3-VL (-Thinking) load through ``AutoModelForImageTextToText`` / ``AutoProcessor``
with the recipe's dtype and attention implementation. LoRA uses peft with the vision tower excluded by default
(``lora_exclude_modules: .*visual.*``), matching the published 32B run; full fine-tuning can freeze the vision
tower. :func:`merge_lora` (also ``perception-judge merge-lora``) folds an adapter into its base and saves a full
model folder with the processor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MERGE_MARKER = "perception_judge_merge.json"
DTYPES = ("auto", "bfloat16", "float16", "float32")


def is_local(path: str | os.PathLike[str]) -> bool:
    return Path(path).exists()


def record_path(path: str) -> str:
    """How a model path is recorded in run files: absolute for local folders, as given for hub ids."""
    return str(Path(path).resolve()) if is_local(path) else path


def main_process_first(desc: str = "") -> Any:
    """``PartialState().main_process_first()``: the main process does the work, the others then reuse it."""
    from accelerate import PartialState

    return PartialState().main_process_first()


_DIST_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
)


def _must_isolate() -> bool:
    """True inside a multi-process or ZeRO-3 run, where building a model on one rank alone would deadlock.

    Under ZeRO-3 every model construction enters ``deepspeed.zero.Init``, a collective: a model built by the main
    process while the other ranks wait at a barrier never finishes.
    """
    try:
        from transformers.integrations import is_deepspeed_zero3_enabled

        if is_deepspeed_zero3_enabled():
            return True
    except ImportError:  # pragma: no cover
        pass
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def run_cli_isolated(args: list[str]) -> None:
    """Run ``perception-judge ARGS`` in a fresh Python process (no distributed or DeepSpeed state)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in _DIST_ENV and not k.startswith("ACCELERATE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "perception_judge.cli", *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"perception-judge {' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def ensure_tiny_model(path: str, arch: str, seed: int = 0, warm_start_steps: int = 0) -> bool:
    """Build the tiny model at ``path`` when it has no ``config.json`` yet; returns True if it built one.

    ``warm_start_steps > 0`` also teaches it the judge output format (:func:`tiny_models.warm_start_format`).
    The model is built in a sibling temporary folder and renamed into place, so a crash never leaves a
    half-built (e.g. not yet warm-started) model that a re-run would take for a finished one.
    """
    import shutil

    from perception_judge.tiny_models import make_tiny_model, warm_start_format

    target = Path(path)
    if (target / "config.json").is_file():
        return False
    staging = target.with_name(f".{target.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    if _must_isolate():
        args = ["make-tiny-model", "--arch", arch, "--out", str(staging), "--seed", str(seed)]
        run_cli_isolated([*args, "--warm-start-steps", str(warm_start_steps)])
    else:
        make_tiny_model(arch, staging, seed=seed)
        if warm_start_steps:
            warm_start_format(staging, steps=warm_start_steps, seed=seed)
    if target.exists():  # an empty or partial folder without config.json
        shutil.rmtree(target)
    os.replace(staging, target)
    return True


def torch_dtype(name: str | None) -> Any:
    import torch

    if name in (None, "auto"):
        return "auto"
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def _processor_source(adapter: str, base: str) -> str:
    """Adapters saved by the trainer carry the processor; fall back to the base otherwise."""
    a = Path(adapter)
    for name in ("preprocessor_config.json", "processor_config.json", "tokenizer_config.json"):
        if (a / name).is_file():
            return adapter
    return base


def merge_lora(
    base: str,
    adapter: str,
    out: str | os.PathLike[str],
    dtype: str = "bfloat16",
    trust_remote_code: bool = False,
    revision: str | None = None,
) -> Path:
    """Load ``base``, apply the LoRA ``adapter``, merge it into the weights and save model + processor to ``out``.

    Writes ``perception_judge_merge.json`` (base, adapter, dtype) next to the weights.
    """
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = Path(out)
    model = AutoModelForImageTextToText.from_pretrained(
        base, dtype=torch_dtype(dtype), trust_remote_code=trust_remote_code, revision=revision
    )
    model = PeftModel.from_pretrained(model, adapter)
    model = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor = AutoProcessor.from_pretrained(
        _processor_source(adapter, base), trust_remote_code=trust_remote_code
    )
    processor.save_pretrained(out)
    marker = {"base": record_path(base), "adapter": record_path(adapter), "dtype": dtype}
    (out / MERGE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return out


def merged_base(
    base: str, adapter: str, out: str, dtype: str = "bfloat16", trust_remote_code: bool = False
) -> str:
    """Merge ``adapter`` into ``base`` at ``out`` once (main process first); reuse a matching earlier merge."""
    marker_path = Path(out) / MERGE_MARKER
    want = {"base": record_path(base), "adapter": record_path(adapter), "dtype": dtype}
    with main_process_first():
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
            run_cli_isolated([*args, "--trust-remote-code"] if trust_remote_code else args)
        else:
            merge_lora(base, adapter, out, dtype=dtype, trust_remote_code=trust_remote_code)
    return out


def resolve_model_path(
    model_args: Any, judge_args: Any, output_dir: str, trust_remote_code: bool = False
) -> str:
    """The folder (or hub id) the run loads: builds a tiny model or merges a base adapter when asked to."""
    path = model_args.model_name_or_path
    if judge_args.tiny_model_arch:
        with main_process_first():
            ensure_tiny_model(
                path,
                judge_args.tiny_model_arch,
                judge_args.tiny_model_seed,
                judge_args.tiny_model_warm_start_steps,
            )
    if judge_args.base_adapter:
        out = judge_args.merged_base_dir or os.path.join(output_dir, "merged_base")
        dtype = model_args.dtype if model_args.dtype in DTYPES else "bfloat16"
        path = merged_base(
            path, judge_args.base_adapter, out, dtype=dtype, trust_remote_code=trust_remote_code
        )
    return path


def load_processor(path: str, model_args: Any, trust_remote_code: bool = False) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(
        path,
        revision=model_args.model_revision,
        trust_remote_code=trust_remote_code,
        padding_side="left",
        truncation_side="left",
    )


def load_config(path: str, model_args: Any, trust_remote_code: bool = False) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(
        path, revision=model_args.model_revision, trust_remote_code=trust_remote_code
    )


def load_model(path: str, model_args: Any, trust_remote_code: bool = False) -> Any:
    """The policy model with the recipe's dtype and attention implementation (no device map: the trainer places it)."""
    from transformers import AutoModelForImageTextToText

    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": trust_remote_code,
        "dtype": torch_dtype(model_args.dtype),
    }
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    return AutoModelForImageTextToText.from_pretrained(path, **kwargs)


def vision_tower(model: Any) -> Any:
    """The vision tower module of a Qwen-VL model (``model.model.visual`` in transformers 5), or None."""
    for candidate in (model, getattr(model, "model", None)):
        if candidate is not None and hasattr(candidate, "visual"):
            return candidate.visual
    return None


def freeze_vision_tower(model: Any) -> int:
    """Freeze every parameter of the vision tower (incl. its merger); returns how many tensors were frozen."""
    tower = vision_tower(model)
    if tower is None:
        raise ValueError(f"{type(model).__name__} has no vision tower (`visual`) to freeze")
    n = 0
    for p in tower.parameters():
        p.requires_grad_(False)
        n += 1
    return n


def build_lora_config(model_args: Any, judge_args: Any) -> Any:
    """A peft ``LoraConfig`` from ModelConfig's LoRA fields, excluding ``lora_exclude_modules`` (the vision tower)."""
    from peft import LoraConfig

    targets = model_args.lora_target_modules or "all-linear"
    if isinstance(targets, list) and len(targets) == 1 and targets[0] == "all-linear":
        targets = "all-linear"
    kwargs: dict[str, Any] = dict(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=targets,
        modules_to_save=model_args.lora_modules_to_save,
        task_type=model_args.lora_task_type,
        use_rslora=model_args.use_rslora,
        use_dora=model_args.use_dora,
    )
    if judge_args.lora_exclude_modules:
        kwargs["exclude_modules"] = judge_args.lora_exclude_modules
    return LoraConfig(**kwargs)


def has_full_weights(folder: str | os.PathLike[str]) -> bool:
    f = Path(folder)
    return any(
        (f / name).is_file()
        for name in (
            "model.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "pytorch_model.bin.index.json",
        )
    )


def load_weights_into(model: Any, folder: str | os.PathLike[str]) -> None:
    """Load the full weights saved in ``folder`` into ``model`` (strict), through ``from_pretrained``.

    transformers 5 saves some architectures in their original checkpoint layout (Qwen2.5-VL: ``model.layers.*``,
    ``visual.*``) and renames keys on load; a plain ``load_state_dict`` of the file (what ``Trainer`` does on
    resume) matches no key and silently keeps the old weights. Loading through ``from_pretrained`` applies the
    key conversion; the copy lives on the CPU only while it is copied in.
    """
    import torch

    dtype = next(model.parameters()).dtype
    loaded = type(model).from_pretrained(folder, dtype=dtype, device_map="cpu")
    with torch.no_grad():
        result = model.load_state_dict(loaded.state_dict(), strict=False)
    del loaded
    if result.missing_keys or result.unexpected_keys:
        raise RuntimeError(
            f"checkpoint {str(folder)!r} does not match the model: missing {result.missing_keys[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )


def count_parameters(model: Any) -> dict[str, int]:
    total = trainable = 0
    for p in model.parameters():
        n = p.numel()
        total += n
        if p.requires_grad:
            trainable += n
    return {"total": total, "trainable": trainable}
