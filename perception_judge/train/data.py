"""Training data for the GRPO trainer (docs/training.md "Data"): load the exported set, check every row, keep the
protocol mix, drop or refuse overlong prompts, and apply the pixel policy lazily as rows are read, so the trainer,
HF generation and vLLM all see images of one policy. Each step is counted in a :class:`SplitReport`.
"""

from __future__ import annotations

import io
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import PixelPolicy, pixel_policy_conflict, processor_pixel_bounds
from perception_judge.core.options import problem
from perception_judge.core.protocol import count_image_placeholders, render_generation_prompt
from perception_judge.core.schema import (
    COL_GROUND_TRUTH,
    COL_IMAGES,
    COL_PROMPT,
    COL_PROTOCOL,
    COL_RECORD_KEY,
    validate_ground_truth,
)


class DataError(ValueError):
    """The training set cannot be used as it is (names the split and the row)."""


@dataclass
class SplitReport:
    """What happened to one split on its way to the trainer."""

    split: str
    rows_in: int = 0
    protocols_in: dict[str, int] = field(default_factory=dict)
    dropped_by_protocol_mix: int = 0
    dropped_overlong: int = 0
    dropped_by_max_samples: int = 0
    rows_out: int = 0
    protocols_out: dict[str, int] = field(default_factory=dict)
    prompt_tokens_max: int = 0
    prompt_tokens_mean: float = 0.0
    overlong_examples: list[str] = field(default_factory=list)

    def summary(self) -> str:
        dropped = {
            "dropped by protocol_mix": self.dropped_by_protocol_mix,
            "dropped as overlong prompts": self.dropped_overlong,
            "beyond max samples": self.dropped_by_max_samples,
        }
        parts = [f"{self.split}: {self.rows_in} rows in", *(f"{n} {why}" for why, n in dropped.items() if n)]
        mix = ", ".join(f"{k} {v}" for k, v in sorted(self.protocols_out.items()))
        parts.append(f"{self.rows_out} rows used ({mix})")
        if self.rows_out:
            parts.append(f"prompt tokens max {self.prompt_tokens_max}, mean {self.prompt_tokens_mean:.0f}")
        return "; ".join(parts)


def patch_factor(config: Any) -> int:
    """The pixel factor (patch size × spatial merge) of a Qwen-VL config: 28 for Qwen2.5-VL, 32 for Qwen3-VL."""
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return 28
    return int(getattr(vision, "patch_size", 14)) * int(getattr(vision, "spatial_merge_size", 2))


def pixel_policy_for(judge_args: Any, model_config: Any = None, processor: Any = None) -> PixelPolicy:
    """The recipe's ``pixel_policy`` over the model's: an unset ``factor`` is patch × merge of the model config (28 /
    32), an unset ``min_pixels`` the processor's least area. A policy the processor would resize images of (a fixed
    side or smart bounds outside its area bounds) is refused: it resizes silently, and the token counts are wrong."""
    bounds = processor_pixel_bounds(processor) if processor is not None else None
    model = {"factor": patch_factor(model_config) if model_config is not None else 28}
    model["min_pixels"] = bounds[0] if bounds else 56 * 56
    policy = PixelPolicy.parse({**model, **(judge_args.pixel_policy or {})}, "pixel_policy")
    if conflict := pixel_policy_conflict(policy, bounds):
        raise problem("pixel_policy", f"{conflict}; choose values inside its bounds", policy.to_dict())
    return policy


class PixelPolicyTransform:
    """``datasets`` transform applying a pixel policy to the ``images`` column as rows are read; ``seconds``
    accumulates the time spent (reported as ``timing/data_s``)."""

    def __init__(self, policy: PixelPolicy) -> None:
        self.policy = policy
        self.seconds = 0.0

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        start = time.perf_counter()
        if COL_IMAGES in batch:
            batch[COL_IMAGES] = [[self.policy.apply(im) for im in row or []] for row in batch[COL_IMAGES]]
        self.seconds += time.perf_counter() - start
        return batch


def _undecoded_images(ds: Any) -> Any:
    """The ``images`` column as raw ``{"bytes", "path"}`` cells (no decoding)."""
    from datasets import Image, List

    return ds.select_columns([COL_IMAGES]).cast_column(COL_IMAGES, List(Image(decode=False)))[COL_IMAGES]


def check_rows(ds: Any, split: str, source: str = "") -> None:
    """Fail on the first malformed row: protocol, ground truth, image count vs placeholders, unreadable image."""
    from PIL import Image

    columns = [ds[column] for column in (COL_PROMPT, COL_PROTOCOL, COL_GROUND_TRUTH, COL_RECORD_KEY)]
    for i, (prompt, protocol, truth, key, images) in enumerate(zip(*columns, _undecoded_images(ds))):
        where = f"{source}: {split} row {i} ({key})" if source else f"{split} row {i} ({key})"
        try:
            validate_ground_truth(protocol, truth)
        except ValueError as e:
            raise DataError(f"{where}: {e}") from None
        n_placeholders, n_images = count_image_placeholders(prompt), len(images or [])
        if n_placeholders != n_images:
            raise DataError(
                f"{where}: {n_placeholders} image placeholder(s) in the prompt but {n_images} image(s)"
            )
        for k, cell in enumerate(images or [], 1):
            try:
                with Image.open(io.BytesIO(cell["bytes"]) if cell.get("bytes") else cell["path"]) as im:
                    im.verify()  # PNG: every chunk's CRC; a zeroed stretch of an uncompressed parquet page lands here
            except Exception as e:  # PIL raises many types for a damaged image
                raise DataError(f"{where}: image {k} is damaged ({type(e).__name__}: {e})") from None


def protocol_mix_indices(
    protocols: list[str], mix: dict[str, float] | None, seed: int = 0, strict: bool = True
) -> list[int]:
    """Row indices that realise ``mix`` (relative weights per protocol) without oversampling any protocol: the
    kept count of protocol p is ``round(w_p * N)`` with the largest N such that no protocol needs more rows
    than it has (weight 0 or unlisted: dropped), picked at random (seeded), in their original order; a
    protocol the mix asks for but the data lacks is an error (``strict``) or left out of the proportions."""
    if mix is None:
        return list(range(len(protocols)))
    by_protocol: dict[str, list[int]] = {}
    for i, p in enumerate(protocols):
        by_protocol.setdefault(p, []).append(i)
    weights = {p: w for p, w in mix.items() if w > 0}
    missing = sorted(p for p in weights if not by_protocol.get(p))
    if missing and strict:
        raise ValueError(
            f"protocol_mix asks for {', '.join(missing)} but there are no such rows "
            f"(rows per protocol: {dict(sorted((p, len(v)) for p, v in by_protocol.items()))})"
        )
    weights = {p: w for p, w in weights.items() if p not in missing}
    if not weights:
        return []
    shares = {p: w / sum(weights.values()) for p, w in weights.items()}
    n_total = min(len(by_protocol[p]) / share for p, share in shares.items())  # no protocol oversampled
    rng = random.Random(seed)
    keep: list[int] = []
    for p, share in shares.items():
        rng.shuffle(by_protocol[p])
        keep += by_protocol[p][: round(share * n_total)]
    return sorted(keep)


class PromptLengths:
    """Exact prompt lengths in tokens as the trainer builds them (rendered text + expanded image tokens)."""

    def __init__(self, processor: Any, policy: PixelPolicy, think_prefix: str) -> None:
        self.processor = processor
        self.policy = policy
        self.think_prefix = think_prefix
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self._image_tokens: dict[tuple[int, int], int] = {}

    def image_tokens(self, width: int, height: int) -> int:
        """Tokens one image of this *original* size becomes after the policy and the image processor."""
        size = self.policy.target_size(width, height)
        image_processor = getattr(self.processor, "image_processor", None)
        if image_processor is not None and size not in self._image_tokens:
            from PIL import Image

            grid = image_processor(images=[Image.new("RGB", size)], return_tensors="pt")["image_grid_thw"][0]
            merge = int(getattr(image_processor, "merge_size", 2) or 1)
            self._image_tokens[size] = int(grid.prod().item()) // (merge * merge)
        return self._image_tokens.get(size, 1)

    def resize_warning(self) -> str | None:
        """A warning when the model's image processor would resize the policy's (fixed) images again."""
        if self.policy.mode != "fixed":
            return None
        size, expected = self.policy.size, (self.policy.size // self.policy.factor) ** 2
        if (actual := self.image_tokens(size, size)) == expected:
            return None
        return (
            f"the image processor turns {size}x{size} images into {actual} tokens, not {expected}: its min/max "
            "pixel bounds resize them again (sizes stay uniform; set image_size inside its bounds)"
        )

    def __call__(self, prompts: list[Any], image_sizes: list[list[tuple[int, int]]]) -> list[int]:
        texts = [render_generation_prompt(self.processor, p, self.think_prefix) for p in prompts]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        # each image placeholder renders as one image-pad token that the processor expands
        return [
            len(t) + sum(self.image_tokens(w, h) - 1 for w, h in sizes) for t, sizes in zip(ids, image_sizes)
        ]


def _image_sizes(ds: Any, policy: PixelPolicy) -> list[list[tuple[int, int]]]:
    """Original (width, height) of every image per row; only image headers are read (not for ``fixed``)."""
    from PIL import Image

    def size(cell: dict[str, Any]) -> tuple[int, int]:
        if policy.mode == "fixed":
            return policy.size, policy.size
        with Image.open(io.BytesIO(cell["bytes"]) if cell.get("bytes") else cell["path"]) as im:
            return im.size

    return [[size(cell) for cell in row or []] for row in _undecoded_images(ds)]


def prepare_split(
    ds: Any, split: str, judge_args: Any, lengths: PromptLengths, max_samples: int | None, seed: int
) -> tuple[Any, SplitReport]:
    """Check, mix-filter, length-filter and cap one split; returns the selected dataset and its report."""
    limit = judge_args.max_prompt_tokens
    report = SplitReport(split=split, rows_in=len(ds), protocols_in=dict(Counter(ds[COL_PROTOCOL])))
    try:
        mix = judge_args.protocol_mix or None
        keep = protocol_mix_indices(ds[COL_PROTOCOL], mix, seed, strict=split == "train")
    except ValueError as e:
        raise DataError(f"{split}: {e}") from None
    report.dropped_by_protocol_mix = len(ds) - len(keep)
    if len(keep) != len(ds):
        ds = ds.select(keep)

    if len(ds):
        n_tokens = lengths(ds[COL_PROMPT], _image_sizes(ds, lengths.policy))
        over = {i for i, n in enumerate(n_tokens) if limit is not None and n > limit}
        if over:
            keys = ds[COL_RECORD_KEY]
            report.overlong_examples = [f"{keys[i]} ({n_tokens[i]} tokens)" for i in sorted(over)[:5]]
            if judge_args.overlong_prompts == "error":
                raise DataError(
                    f"{split}: {len(over)} prompt(s) longer than max_prompt_tokens={limit}, e.g. "
                    f"{', '.join(report.overlong_examples)}; raise the limit, shrink the images, or set "
                    "overlong_prompts: drop"
                )
            report.dropped_overlong = len(over)
            ds = ds.select([i for i in range(len(ds)) if i not in over])
            n_tokens = [n for i, n in enumerate(n_tokens) if i not in over]
        report.prompt_tokens_max = max(n_tokens, default=0)
        report.prompt_tokens_mean = sum(n_tokens) / len(n_tokens) if n_tokens else 0.0

    if max_samples is not None and len(ds) > max_samples:
        report.dropped_by_max_samples = len(ds) - max_samples
        ds = ds.select(range(max_samples))
    report.rows_out = len(ds)
    report.protocols_out = dict(Counter(ds[COL_PROTOCOL])) if len(ds) else {}
    return ds, report


@dataclass
class JudgeData:
    train: Any
    validation: Any | None
    reports: dict[str, SplitReport]
    transform: PixelPolicyTransform
    lengths: PromptLengths

    def report_dict(self) -> dict[str, Any]:
        return {k: asdict(v) for k, v in self.reports.items()}

    def pop_transform_seconds(self) -> float:
        seconds, self.transform.seconds = self.transform.seconds, 0.0
        return seconds


def _load_dataset(name: str, config: str | None) -> Any:
    """``load_dataset(dataset_name, dataset_config)`` as trl's scripts call it, cast to the training-set columns."""
    from datasets import DatasetDict, load_dataset

    from perception_judge.core.trainset import to_training_features

    what = f"{name!r}" + (f" (config {config!r})" if config else "")
    try:
        dsd = load_dataset(name, name=config)
    except Exception as e:  # not found, offline, no such config, unreadable files: datasets raises many types
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
        raise DataError(f"dataset_name {what}: cannot be loaded ({why})") from None
    return DatasetDict({split: to_training_features(ds, f"{what} {split}") for split, ds in dsd.items()})


def read_training_set(folder: str, splits: tuple[str, ...] = (), config: str | None = None) -> Any:
    """The training set ``folder`` read whole, the rows of ``splits`` checked (:func:`check_rows`): the folder
    ``perception-judge export`` wrote, else what ``datasets.load_dataset(folder, config)`` reads, as trl's scripts
    do (a Hub dataset id, a folder laid out as a Hub download, a config of either), cast to the training-set
    columns; the prompts are used as the rows hold them (no export_info.json is read). Every problem a
    :class:`DataError` naming the file or the dataset: no such folder or dataset, another schema, a damaged file
    (datasets' own error names none), a malformed row or image."""
    import pyarrow.parquet as pq
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from perception_judge.core.trainset import SPLITS, load_training_set, split_path

    exported = config is None and any(split_path(folder, split).is_file() for split in SPLITS)
    try:
        hub = not exported and (config is not None or Path(folder).exists() or not validate_repo_id(folder))
    except HFValidationError:
        hub = False  # a path that does not exist: named as a missing export folder
    try:
        dsd = _load_dataset(folder, config) if hub else load_training_set(folder)
    except (FileNotFoundError, ValueError) as e:
        raise DataError(str(e)) from None
    except Exception as e:  # datasets.exceptions.DatasetGenerationError
        for path in [split_path(folder, split) for split in SPLITS if split_path(folder, split).is_file()]:
            try:
                pq.read_table(path)
            except Exception as damage:  # pyarrow raises several types for a damaged file
                raise DataError(
                    f"{path}: a damaged parquet file ({type(damage).__name__}: {damage})"
                ) from None
        raise DataError(f"{folder}: the training set cannot be read ({type(e).__name__}: {e})") from None
    for split in [s for s in splits if s in dsd]:
        check_rows(dsd[split], split, folder if hub else str(split_path(folder, split)))
    return dsd


def load_judge_data(
    script_args: Any,
    judge_args: Any,
    processor: Any,
    policy: PixelPolicy,
    seed: int = 0,
    with_validation: bool = True,
    dataset: Any = None,
) -> JudgeData:
    """Check and filter the training set named by ``dataset_name`` (``dataset``: already read and its rows checked
    by :func:`read_training_set`); apply the pixel policy lazily."""
    name = script_args.dataset_name
    train_split, test_split = script_args.dataset_train_split, script_args.dataset_test_split
    used = (train_split, test_split) if with_validation else (train_split,)
    dsd = dataset if dataset is not None else read_training_set(name, used, script_args.dataset_config)
    if train_split not in dsd:
        raise DataError(f"{name}: no {train_split!r} split (found {', '.join(dsd) or 'none'})")

    lengths = PromptLengths(processor, policy, judge_args.think_prefix)
    transform = PixelPolicyTransform(policy)
    reports: dict[str, SplitReport] = {}
    train, reports["train"] = prepare_split(
        dsd[train_split], "train", judge_args, lengths, judge_args.max_train_samples, seed
    )
    if len(train) == 0:
        raise DataError(f"{name}: no training rows left ({reports['train'].summary()})")
    validation = None
    if with_validation and test_split and test_split in dsd:
        validation, reports["validation"] = prepare_split(
            dsd[test_split], "validation", judge_args, lengths, judge_args.max_eval_samples, seed
        )
    validation = validation.with_transform(transform) if validation is not None and len(validation) else None
    return JudgeData(train.with_transform(transform), validation, reports, transform, lengths)
