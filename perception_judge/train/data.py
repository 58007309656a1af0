"""Training data for the GRPO trainer: load the exported set, check it, filter it, and apply the pixel policy.

Steps (each counted in a :class:`SplitReport`, nothing is dropped silently):

1. :func:`perception_judge.core.trainset.load_training_set` reads ``train.parquet`` / ``validation.parquet``;
2. every row is checked: known protocol, a ground truth that fits it, as many images as ``{"type": "image"}``
   placeholders (a data bug fails the run before training, naming the row);
3. the protocol mix keeps the chosen protocols in the chosen proportions (subsampling, never oversampling);
4. prompts longer than ``max_prompt_tokens`` (rendered exactly as the trainer renders them, image tokens
   included) are dropped and counted, or fail the run (``overlong_prompts: error``);
5. the :class:`~perception_judge.core.images.PixelPolicy` is applied lazily to every image as rows are read, so the
   trainer, HF generation and vLLM all see images of the policy's size (one fixed size by default: vLLM colocate
   mode never sees mixed sizes).
"""

from __future__ import annotations

import io
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from perception_judge.core.images import PixelPolicy
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        parts = [f"{self.split}: {self.rows_in} rows in"]
        if self.dropped_by_protocol_mix:
            parts.append(f"{self.dropped_by_protocol_mix} dropped by protocol_mix")
        if self.dropped_overlong:
            parts.append(f"{self.dropped_overlong} dropped as overlong prompts")
        if self.dropped_by_max_samples:
            parts.append(f"{self.dropped_by_max_samples} beyond max samples")
        mix = ", ".join(f"{k} {v}" for k, v in sorted(self.protocols_out.items()))
        parts.append(f"{self.rows_out} rows used ({mix})")
        if self.rows_out:
            parts.append(f"prompt tokens max {self.prompt_tokens_max}, mean {self.prompt_tokens_mean:.0f}")
        return "; ".join(parts)


# ----------------------------------------------------------------------------------------------------------
# Pixel policy
# ----------------------------------------------------------------------------------------------------------


def pixel_policy_for(judge_args: Any, model_config: Any = None) -> PixelPolicy:
    """The run's pixel policy; ``image_factor: 0`` takes patch × merge from the model config (28 / 32)."""
    from perception_judge.tiny_models import patch_factor

    factor = judge_args.image_factor or (patch_factor(model_config) if model_config is not None else 28)
    try:
        return PixelPolicy(
            mode=judge_args.image_mode,
            size=judge_args.image_size,
            min_pixels=judge_args.image_min_pixels,
            max_pixels=judge_args.image_max_pixels,
            factor=factor,
        )
    except ValueError as e:
        raise DataError(f"pixel policy for this model (patch factor {factor}): {e}") from None


class PixelPolicyTransform:
    """``datasets`` transform applying a pixel policy to the ``images`` column as rows are read.

    ``seconds`` accumulates the time spent (reported as ``timing/data_s``).
    """

    def __init__(self, policy: PixelPolicy) -> None:
        self.policy = policy
        self.seconds = 0.0
        self.images = 0

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        start = time.perf_counter()
        if COL_IMAGES in batch:
            out = []
            for images in batch[COL_IMAGES]:
                out.append([self.policy.apply(im) for im in (images or [])])
                self.images += len(images or [])
            batch[COL_IMAGES] = out
        self.seconds += time.perf_counter() - start
        return batch

    def pop_seconds(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s


# ----------------------------------------------------------------------------------------------------------
# Row checks, protocol mix, prompt lengths
# ----------------------------------------------------------------------------------------------------------


def _undecoded_images(ds: Any) -> Any:
    """The ``images`` column as raw ``{"bytes", "path"}`` cells (no decoding)."""
    from datasets import Image, List

    return ds.select_columns([COL_IMAGES]).cast_column(COL_IMAGES, List(Image(decode=False)))[COL_IMAGES]


def check_rows(ds: Any, split: str) -> None:
    """Fail on the first malformed row: protocol, ground truth, image count vs placeholders."""
    prompts = ds[COL_PROMPT]
    protocols = ds[COL_PROTOCOL]
    truths = ds[COL_GROUND_TRUTH]
    keys = ds[COL_RECORD_KEY]
    images = _undecoded_images(ds)
    for i, (prompt, protocol, truth, key, imgs) in enumerate(zip(prompts, protocols, truths, keys, images)):
        where = f"{split} row {i} ({key})"
        try:
            validate_ground_truth(protocol, truth)
        except ValueError as e:
            raise DataError(f"{where}: {e}") from None
        n_placeholders = count_image_placeholders(prompt)
        n_images = len(imgs or [])
        if n_placeholders != n_images:
            raise DataError(
                f"{where}: {n_placeholders} image placeholder(s) in the prompt but {n_images} image(s)"
            )


def protocol_mix_indices(
    protocols: list[str], mix: dict[str, float] | None, seed: int = 0, strict: bool = True
) -> list[int]:
    """Row indices that realise ``mix`` (relative weights per protocol) without oversampling any protocol.

    Protocols with weight 0 or not listed are dropped. The kept count of protocol p is ``round(w_p * N)`` with
    the largest N such that no protocol needs more rows than it has; rows are picked at random (seeded) and
    returned in their original order. A protocol the mix asks for but the data lacks is an error
    (``strict``) or is left out of the proportions.
    """
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
    total_w = sum(weights.values())
    shares = {p: w / total_w for p, w in weights.items()}
    available = {p: len(by_protocol[p]) for p in shares}
    # Largest total N with share * N <= available for every protocol.
    n_total = min(available[p] / shares[p] for p in shares)
    rng = random.Random(seed)
    keep: list[int] = []
    for p, share in shares.items():
        rows = list(by_protocol.get(p, []))
        rng.shuffle(rows)
        keep += rows[: min(len(rows), round(share * n_total))]
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
        if size not in self._image_tokens:
            from PIL import Image

            image_processor = getattr(self.processor, "image_processor", None)
            if image_processor is None:
                self._image_tokens[size] = 1
            else:
                out = image_processor(images=[Image.new("RGB", size)], return_tensors="pt")
                grid = out["image_grid_thw"][0]
                merge = int(getattr(image_processor, "merge_size", 2) or 1)
                self._image_tokens[size] = int(grid.prod().item()) // (merge * merge)
        return self._image_tokens[size]

    def __call__(self, prompts: list[Any], image_sizes: list[list[tuple[int, int]]]) -> list[int]:
        texts = [render_generation_prompt(self.processor, p, self.think_prefix) for p in prompts]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        out = []
        for toks, sizes in zip(ids, image_sizes):
            # each image placeholder renders as one image-pad token that the processor expands
            out.append(len(toks) + sum(self.image_tokens(w, h) - 1 for w, h in sizes))
        return out


def _image_sizes(ds: Any, policy: PixelPolicy) -> list[list[tuple[int, int]]]:
    """Original (width, height) of every image per row; only image headers are read (not for ``fixed``)."""
    from PIL import Image

    cells = _undecoded_images(ds)
    out = []
    for row in cells:
        sizes = []
        for cell in row or []:
            if policy.mode == "fixed":
                sizes.append((policy.size, policy.size))
                continue
            if cell.get("bytes"):
                with Image.open(io.BytesIO(cell["bytes"])) as im:
                    sizes.append(im.size)
            else:
                with Image.open(cell["path"]) as im:
                    sizes.append(im.size)
        out.append(sizes)
    return out


def prepare_split(
    ds: Any,
    split: str,
    *,
    mix: dict[str, float] | None,
    lengths: PromptLengths | None,
    max_prompt_tokens: int | None,
    overlong: str,
    max_samples: int | None,
    seed: int,
) -> tuple[Any, SplitReport]:
    """Check, mix-filter, length-filter and cap one split; returns the selected dataset and its report."""
    report = SplitReport(split=split, rows_in=len(ds))
    report.protocols_in = dict(Counter(ds[COL_PROTOCOL]))
    check_rows(ds, split)

    try:
        keep = protocol_mix_indices(ds[COL_PROTOCOL], mix, seed, strict=split == "train")
    except ValueError as e:
        raise DataError(f"{split}: {e}") from None
    report.dropped_by_protocol_mix = len(ds) - len(keep)
    if len(keep) != len(ds):
        ds = ds.select(keep)

    if lengths is not None and len(ds):
        n_tokens = lengths(ds[COL_PROMPT], _image_sizes(ds, lengths.policy))
        report.prompt_tokens_max = max(n_tokens)
        report.prompt_tokens_mean = sum(n_tokens) / len(n_tokens)
        if max_prompt_tokens is not None:
            over = [i for i, n in enumerate(n_tokens) if n > max_prompt_tokens]
            if over:
                keys = ds[COL_RECORD_KEY]
                report.overlong_examples = [f"{keys[i]} ({n_tokens[i]} tokens)" for i in over[:5]]
                if overlong == "error":
                    raise DataError(
                        f"{split}: {len(over)} prompt(s) longer than max_prompt_tokens={max_prompt_tokens}, e.g. "
                        f"{', '.join(report.overlong_examples)}; raise the limit, shrink the images, or set "
                        "overlong_prompts: drop"
                    )
                report.dropped_overlong = len(over)
                overset = set(over)
                ds = ds.select([i for i in range(len(ds)) if i not in overset])
                kept = [n for i, n in enumerate(n_tokens) if i not in overset]
                report.prompt_tokens_max = max(kept) if kept else 0
                report.prompt_tokens_mean = sum(kept) / len(kept) if kept else 0.0

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
    policy: PixelPolicy
    transforms: list[PixelPolicyTransform]

    def report_dict(self) -> dict[str, Any]:
        return {k: v.to_dict() for k, v in self.reports.items()}

    def pop_transform_seconds(self) -> float:
        return sum(t.pop_seconds() for t in self.transforms)


def load_judge_data(
    script_args: Any,
    judge_args: Any,
    processor: Any,
    policy: PixelPolicy,
    seed: int = 0,
    with_validation: bool = True,
) -> JudgeData:
    """Load, check and filter the training set named by ``dataset_name``; apply the pixel policy lazily."""
    from perception_judge.core.trainset import load_training_set
    from perception_judge.train.args import protocol_mix_dict

    try:
        dsd = load_training_set(script_args.dataset_name)
    except (FileNotFoundError, ValueError) as e:
        raise DataError(str(e)) from None
    train_split = script_args.dataset_train_split
    if train_split not in dsd:
        raise DataError(
            f"{script_args.dataset_name}: no {train_split!r} split (found {', '.join(dsd) or 'none'})"
        )
    mix = protocol_mix_dict(judge_args.protocol_mix)
    lengths = PromptLengths(processor, policy, judge_args.think_prefix)
    common = dict(
        mix=mix,
        lengths=lengths,
        max_prompt_tokens=judge_args.max_prompt_tokens,
        overlong=judge_args.overlong_prompts,
        seed=seed,
    )
    reports: dict[str, SplitReport] = {}
    train, reports["train"] = prepare_split(
        dsd[train_split], "train", max_samples=judge_args.max_train_samples, **common
    )
    if len(train) == 0:
        raise DataError(f"{script_args.dataset_name}: no training rows left ({reports['train'].summary()})")
    transforms = [PixelPolicyTransform(policy)]
    train = train.with_transform(transforms[0])

    validation = None
    test_split = script_args.dataset_test_split
    if with_validation and test_split and test_split in dsd:
        validation, reports["validation"] = prepare_split(
            dsd[test_split], "validation", max_samples=judge_args.max_eval_samples, **common
        )
        if len(validation):
            transforms.append(PixelPolicyTransform(policy))
            validation = validation.with_transform(transforms[-1])
        else:
            validation = None
    return JudgeData(train, validation, reports, policy, transforms)
