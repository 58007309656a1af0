"""The plan of an evaluation, resolved once before any model loads: :func:`resolve` -> :class:`EvalPlan`. Layers
shaped like an eval job YAML (:class:`JobConfig`) merge in the order of docs/evaluation.md §6, then everything is
typed (``OptionError`` naming ``WHERE.KEY``) and the output folder is checked writable. Nothing changes a plan.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field

from perception_judge.core.io import temp_name
from perception_judge.core.options import Flag, OptionError, Options
from perception_judge.core.redact import redact
from perception_judge.core.runinfo import RunInfo
from perception_judge.core.schema import Sampling
from perception_judge.evaluation.backends import KINDS, BackendSpec, takes
from perception_judge.evaluation.suites import SUITES

log = logging.getLogger(__name__)

DEFAULT_SUITES = ("bias", "perception")
PAIR_SOURCE_SUITES = ("position", "verbosity")
"""Pair-source suites whose pairs default to the run's training set (the ``ppjd`` source, ``trainset_dir``)."""
PAIR_SOURCE_PATHS = ("data_dir", "pair_file", "trainset_dir", "pairs_file")


def _names(value: Any) -> Any:
    """Names given one by one, in a list, or comma-separated (``--suites bias,perception``, ``seeds: [0, 1]``)."""
    items = value if isinstance(value, list | tuple) else [value]
    return [n.strip() for v in items for n in str(v).split(",") if n.strip()] if value is not None else None


Names = Annotated[list[str], BeforeValidator(_names)]
Ints = Annotated[list[int], BeforeValidator(_names)]


class SamplingOptions(Options):
    """Decoding (the job's ``sampling`` section); ``seed`` is ignored: ``seeds`` sets it."""

    temperature: float = Field(1.0, ge=0)
    """0 = greedy"""
    top_p: float = Field(0.95, gt=0, le=1)
    """nucleus sampling"""
    top_k: int | None = Field(20, ge=0)
    """0 disables top-k"""
    max_new_tokens: int = Field(4096, ge=1)
    """the token budget (default: the training run's max_completion_length, else 4096)"""
    seed: int | None = None

    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k or None, self.max_new_tokens)


class PixelOptions(Options):
    """The pixel policy (``backend.pixel_policy``; :class:`perception_judge.core.images.PixelPolicy`)."""

    mode: Annotated[Literal["fixed", "smart", "none"] | None, Flag("--pixel-mode")] = None
    """pixel policy mode (default: the run's, else fixed)"""
    size: Annotated[int | None, Flag("--pixel-size")] = None
    """fixed pixel policy size (default: the run's, else 448)"""
    min_pixels: int | None = None
    max_pixels: int | None = None
    factor: int | None = None


class BackendOptions(Options):
    """The job's ``backend`` section: ``kind``, its options (typed by the plan), pixel policy, think prefix."""

    model_config = ConfigDict(extra="allow")
    kind: Annotated[Literal["hf", "vllm", "openai", "scripted"] | None, Flag("--backend")] = None
    """judge backend (default hf)"""
    batch_size: int | None = None
    """hf / vllm batch size"""
    dtype: str | None = None
    """hf / vllm dtype (auto, float32, bfloat16)"""
    device: str | None = None
    """hf device (auto, cpu, cuda)"""
    base_urls: Annotated[Names | None, Flag("--base-url")] = None
    """openai: server URL(s), comma-separated"""
    think_prefix: Literal["auto", "off"] | None = None
    """think prefill (default: the run's, else auto)"""
    pixel_policy: PixelOptions | None = None
    """pixel policy"""


class JobConfig(Options):
    """An eval job: a YAML file (``--config``), ``--set KEY=VALUE`` (``SUITE.KEY`` for a suite's option) and the flags
    of its documented keys. ``options`` holds each suite's options, ``models`` the judges of ``eval run`` (``{name,
    model, adapter, step}``), ``models_filter`` the models of ``eval sweep`` (shell patterns), ``out`` the folder."""

    suites: Names | None = None
    """comma-separated suites (default: bias,perception)"""
    seeds: Ints | None = None
    """comma-separated judge seeds (default: 0)"""
    limit: int | None = Field(None, ge=1)
    """cap items per suite (bias: pairs per bias type)"""
    sampling: SamplingOptions | None = None
    """decoding"""
    backend: BackendOptions | None = None
    """the judge backend"""
    options: dict[str, dict[str, Any] | None] | None = None
    models: list[dict[str, Any]] | None = None
    out: str | None = None
    models_filter: Names | None = None


@dataclass(frozen=True)
class EvalPlan:
    """Everything that decides the numbers of an evaluation, besides the models: the suites to run with every
    suite's typed options, the backend (with the pixel policy, think prefix and sampling), the seeds, the limit."""

    suites: tuple[str, ...]
    options: Mapping[str, Options]
    backend: BackendSpec
    out_dir: Path
    seeds: tuple[int, ...] = (0,)
    limit: int | None = None
    force: bool = False
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plan as ``plan.json`` records it (secrets redacted)."""
        return redact(
            {
                "suites": list(self.suites),
                "seeds": list(self.seeds),
                "limit": self.limit,
                "options": {s: jsonable(o.model_dump()) for s, o in self.options.items()},
                "backend": self.backend.to_dict(),
                "warnings": list(self.warnings),
            }
        )


def jsonable(x: Any) -> Any:
    """``x`` as JSON holds it (objects JSON cannot hold, such as images, become ``"<TypeName>"``)."""
    return json.loads(
        json.dumps(x, default=lambda o: str(o) if isinstance(o, Path) else f"<{type(o).__name__}>")
    )


def merge(into: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``layer`` merged into ``into`` (in place): mappings key by key, anything else replaced."""
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
    return into


def _merge_backend(job: dict[str, Any], block: Mapping[str, Any] | None) -> None:
    """Merge a layer's backend block; a block of another kind keeps only the earlier keys that kind takes."""
    block = dict(block or {})
    old = job.setdefault("backend", {})
    kind = block.get("kind")
    if kind and kind != old.get("kind", "hf") and kind in KINDS:
        shared = takes(kind) | {"pixel_policy", "think_prefix"}
        if dropped := sorted(k for k in old if k != "kind" and k not in shared):
            log.warning("backend %s: dropping the %s backend key(s) %s", kind, old.get("kind", "hf"), dropped)
        job["backend"] = {k: v for k, v in old.items() if k in shared}
    merge(job["backend"], block)


def _run_layer(run: RunInfo | None) -> dict[str, Any]:
    """What a training run's file says of its evaluation (layer 1)."""
    if run is None:
        return {}
    layer: dict[str, Any] = {
        "backend": {"pixel_policy": run.pixel_policy.to_dict(), "think_prefix": run.think_prefix}
    }
    if budget := (run.raw.get("args") or {}).get("max_completion_length"):
        layer["sampling"] = {"max_new_tokens": int(budget)}
    if run.train_set:
        layer["options"] = {s: {"data": run.train_set} for s in ("perception", "perception_mismatched")}
    return layer


def check_writable(folder: Path) -> None:
    """Create ``folder`` and write a probe file in it; an ``OptionError`` names the folder when that fails (a
    read-only run folder, a full disk), before any model loads."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = temp_name(folder / ".write-probe")
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        probe.unlink()
    except OSError as e:
        raise OptionError(
            f"cannot write the evaluation to {str(folder)!r} ({e.strerror or e}): pass --out DIR, a folder you can "
            "write to"
        ) from None


def resolve(
    layers: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike[str],
    run: RunInfo | None = None,
    force: bool = False,
) -> EvalPlan:
    """The plan from the run file (``run``) and ``layers`` (the config file, then the command line), in the order
    of the module docstring, typed and checked; raises ``OptionError`` naming what is wrong."""
    job: dict[str, Any] = {}
    for layer in (_run_layer(run), *layers):
        layer = JobConfig.parse(layer, "", what="key in the eval job").model_dump(exclude_unset=True)
        _merge_backend(job, layer.pop("backend", None))
        merge(job, layer)
    config = JobConfig.parse(job, "", what="key in the eval job")
    suites = tuple(config.suites or DEFAULT_SUITES)
    options = dict(config.options or {})
    if unknown := [s for s in (*suites, *options) if s not in SUITES]:
        raise OptionError(f"suites: unknown suite {unknown[0]!r}; available: {', '.join(SUITES)}")
    for suite in PAIR_SOURCE_SUITES if run and run.train_set else ():  # unless a source names other pairs
        opts = options.get(suite) or {}
        if opts.get("source") in (None, "ppjd") and not any(opts.get(k) for k in PAIR_SOURCE_PATHS):
            options[suite] = {**opts, "trainset_dir": run.train_set}
    typed = {s: SUITES[s].parse(options.get(s)) for s in dict.fromkeys((*suites, *options))}
    sampling = (config.sampling or SamplingOptions()).sampling()
    backend = BackendSpec.parse({"kind": "hf", **job.get("backend", {})}, sampling)
    trained = (run.raw.get("args") or {}).get("max_completion_length") if run else None
    warnings = (
        (f"sampling.max_new_tokens {sampling.max_new_tokens} is below the {trained} tokens the run trained with "
         "(args.max_completion_length): a longer answer is cut off and scored as a parse failure",)
        if trained and sampling.max_new_tokens < int(trained) else ()
    )  # fmt: skip
    for w in warnings:
        log.warning("%s", w)
    check_writable(Path(out_dir))
    seeds = tuple(config.seeds or (0,))
    return EvalPlan(suites, typed, backend, Path(out_dir), seeds, config.limit, force, warnings)
