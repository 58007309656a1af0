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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from perception_judge.core.images import PixelPolicy
from perception_judge.core.io import check_writable
from perception_judge.core.options import Flag, OptionError, Options
from perception_judge.core.redact import redact
from perception_judge.core.runinfo import RunInfo
from perception_judge.core.schema import Sampling
from perception_judge.core.trainset import split_path
from perception_judge.evaluation.backends import KINDS, BackendSpec, takes
from perception_judge.evaluation.base import Ints, Names
from perception_judge.evaluation.results import cell_id
from perception_judge.evaluation.suites import SUITES

log = logging.getLogger(__name__)

DEFAULT_SUITES = ("bias", "perception")
DATA_KEYS = ("data", "data_dir", "pair_file", "trainset_dir", "pairs_file")
"""Options naming a suite's data: one the job sets keeps the run's training set out of the suite (``Suite.from_run``)."""


class BackendOptions(Options):
    """The job's ``backend`` section: ``kind``, its options (typed by the plan), pixel policy, think prefix."""

    model_config = ConfigDict(extra="allow")
    kind: Annotated[Literal[tuple(KINDS)] | None, Flag("--backend")] = None
    """judge backend (default hf)"""
    batch_size: int | None = None
    """hf / vllm batch size"""
    dtype: str | None = None
    """hf / vllm dtype (auto, float32, bfloat16)"""
    device: str | None = None
    """hf device (auto, cpu, cuda)"""
    base_urls: Annotated[Names | None, Flag("--base-url")] = None
    """openai: server URL(s), comma-separated (default: $OPENAI_BASE_URL)"""
    think_prefix: Literal["auto", "off"] | None = None
    """think prefill (default: the run's, else auto)"""
    pixel_policy: PixelPolicy | None = None
    """pixel policy"""


class Judge(Options):
    """A judge of ``eval run``: a ``models:`` entry or ``--model [NAME=]TARGET`` (the name defaults to TARGET's last
    part; TARGET is the ``model``, a scripted backend's ``fn``)."""

    name: str | None = None
    model: str | None = None
    fn: str | None = None
    adapter: str | None = None
    base_model: str | None = None
    processor: str | None = None
    step: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _target(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        name, sep, target = value.partition("=")
        return {"name": name, "model": target} if sep else {"model": value}

    @model_validator(mode="after")
    def _target_given(self) -> Judge:
        if not (self.model or self.fn):
            raise ValueError(
                "a judge needs 'model' (a folder, a served model's name, a scripted judge) or 'fn'"
            )
        return self

    def entry(self, kind: str) -> ModelEntry:
        """The judge's model entry (the backend's keys in ``spec``; a scripted backend's TARGET is its ``fn``)."""
        spec = self.model_dump(exclude={"name", "step"}, exclude_none=True)
        if (key := KINDS[kind].target) not in spec and "model" in spec:
            spec[key] = spec.pop("model")
        target = str(self.model or self.fn)
        return ModelEntry(self.name or Path(target.rstrip("/")).name or target, self.step, "model", spec)


class JobConfig(Options):
    """An eval job: a YAML file (``--config``), ``--set KEY=VALUE`` (``SUITE.KEY`` for a suite's option) and the flags
    of its documented keys. ``options`` holds each suite's options, ``models`` the judges of ``eval run``,
    ``models_filter`` the models of ``eval sweep`` (shell patterns)."""

    suites: Names | None = None
    """comma-separated suites (default: bias,perception)"""
    seeds: Ints | None = None
    """comma-separated judge seeds (default: 0)"""
    limit: int | None = Field(None, ge=1)
    """cap items per suite (bias: pairs per bias type)"""
    sampling: Sampling = Sampling()
    """decoding"""
    backend: BackendOptions | None = None
    """the judge backend"""
    options: dict[str, dict[str, Any] | None] | None = None
    out: Path | None = None
    """output folder"""
    force: bool = False
    """re-run finished cells too"""
    no_report: bool = False
    """write the results table but no report"""
    models: list[Judge] = Field(default_factory=list)
    models_filter: Names | None = None


class SweepJob(JobConfig):
    """``eval sweep``: the job and its workers."""

    models_filter: Annotated[Names | None, Flag("--models")] = None
    """only these models (shell patterns: base,checkpoint-*,final)"""
    claim: bool = False
    """one of many identical workers on this sweep (a SLURM array, srun tasks, Ray tasks): run only the cells this
    worker claims (exclusive-create claim files with a heartbeat lease); write no tables (`eval collect OUT` does,
    once every cell is done)"""
    lease: float = 60.0
    """--claim: seconds before a silent worker's cell is taken over"""
    max_attempts: int = 3
    """--claim: a cell that failed this often is left failed"""
    ray: Annotated[int | None, Flag(metavar="N")] = None
    """run N --claim workers as Ray tasks (pip install 'perception-judge[ray]'), then collect"""
    ray_gpus: float | None = None
    """--ray: GPUs per worker (default 1 when the cluster has GPUs, else 0)"""
    ray_address: str | None = None
    """--ray: a running cluster (auto inside one; default: start a local cluster)"""


class RunJob(JobConfig):
    """``eval run``: the job and its judges (``--model`` replaces the config's ``models``)."""

    models: Annotated[list[Judge], Flag("--model", "[NAME=]TARGET")] = Field(default_factory=list)
    """a judge to evaluate (repeatable): a model or adapter folder (hf, vllm; an adapter is loaded on the base its
    config names), a served model name (openai), a scripted judge (constant, random, module:function)"""
    adapter: str | None = None
    """LoRA adapter for a single --model"""
    base_model: str | None = None
    """base model of adapter folders whose config names another path"""

    @model_validator(mode="after")
    def _judges(self) -> RunJob:
        if not self.models:
            raise ValueError("no model to evaluate: pass --model [NAME=]TARGET (or models: in --config)")
        if self.adapter and len(self.models) != 1:
            raise ValueError("--adapter applies to exactly one --model")
        for judge in self.models:
            judge.adapter = judge.adapter or self.adapter
            judge.base_model = judge.base_model or self.base_model
        return self


@dataclass
class ModelEntry:
    """One judge to evaluate. ``spec`` holds the backend's model keys (``model``, ``adapter``, ``processor``)."""

    name: str
    step: int | None = None
    kind: str = "model"  # base | checkpoint | final | model
    spec: dict[str, Any] = field(default_factory=dict)


def check_cell_names(entries: Sequence[ModelEntry]) -> None:
    """Refuse judges whose names give the same cell file name (``cell_id`` keeps only ``A-Za-z0-9._-``): their
    results would overwrite each other. The error names both."""
    seen: dict[str, str] = {}
    for entry in entries:
        key = cell_id(entry.name, "x", 0)
        if seen.get(key) == entry.name:
            raise ValueError(f"judge {entry.name!r} is listed twice")
        if key in seen:
            raise ValueError(
                f"judges {seen[key]!r} and {entry.name!r} would share the result files {key.split('__')[0]}__*: "
                "give them names that differ in letters, digits, '.', '_' or '-'"
            )
        seen[key] = entry.name


@dataclass(frozen=True)
class EvalPlan:
    """Everything an eval command line decides, resolved once: the suites to run with every suite's typed options,
    the backend (with the pixel policy, think prefix and sampling), the seeds, the limit, the output folder, the
    judges of ``eval run`` (``models``), and the typed ``job`` (the sweep's ``models_filter``, ``no_report``, workers)."""

    suites: tuple[str, ...]
    options: Mapping[str, Options]
    backend: BackendSpec
    out_dir: Path
    seeds: tuple[int, ...] = (0,)
    limit: int | None = None
    force: bool = False
    warnings: tuple[str, ...] = ()
    models: tuple[ModelEntry, ...] = ()
    job: JobConfig = field(default_factory=JobConfig)

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


def _merge_backend(job: dict[str, Any], block: Any) -> None:
    """Merge a layer's backend block; a block of another kind keeps only the earlier keys that kind takes."""
    old = job.setdefault("backend", {})
    kind = block.get("kind") if isinstance(block, Mapping) and isinstance(old, dict) else None
    if kind and kind != old.get("kind", "hf") and kind in KINDS:
        shared = takes(kind) | {"pixel_policy", "think_prefix"}
        if dropped := sorted(k for k in old if k != "kind" and k not in shared):
            log.warning("backend %s: dropping the %s backend key(s) %s", kind, old.get("kind", "hf"), dropped)
        job["backend"] = {k: v for k, v in old.items() if k in shared}
    merge(job, {"backend": block or {}})


def _run_layer(run: RunInfo | None) -> dict[str, Any]:
    """What a training run's file says of its evaluation (layer 1)."""
    if run is None:
        return {}
    layer: dict[str, Any] = {
        "backend": {"pixel_policy": run.pixel_policy.to_dict(), "think_prefix": run.think_prefix}
    }
    if budget := (run.raw.get("args") or {}).get("max_completion_length"):
        layer["sampling"] = {"max_new_tokens": int(budget)}
    return layer


def _with_train_set(suite: str, opts: dict[str, Any], run: RunInfo | None) -> dict[str, Any]:
    """``opts`` with the run's training set as the suite's data (``Suite.from_run``), unless they name a source or
    data of their own."""
    key = SUITES[suite].from_run
    own = opts.get("source") not in (None, "ppjd") or any(opts.get(k) for k in DATA_KEYS)
    return {**opts, key: run.train_set} if key and run and run.train_set and not own else opts


def _suite_paths(suite: str, options: Options, train_set: str | None) -> None:
    """The files and folders a suite's options name exist with the shape its reader expects (``*_file`` a file,
    ``images_dir`` a folder, a training set's folder its split's parquet file)."""
    split = getattr(options, "split", None) or "validation"
    for key, value in options:
        if value is None or not (key == "data" or key.endswith(("_dir", "_file"))):
            continue
        p, hint = Path(str(value)).expanduser(), " (the run file's train_set)" * (str(value) == train_set)
        trainset = key == SUITES[suite].from_run
        if not p.exists():  # a run trained from the Hub names its dataset's id
            problem = (
                "does not exist" + f" here (a Hub dataset? --set {suite}.{key}=DIR of its files)" * bool(hint)
            )
        elif (key.endswith("_file") and not p.is_file()) or (key == "images_dir" and not p.is_dir()):
            problem = "is a folder, not a file" if p.is_dir() else "is a file, not a folder"
        elif trainset and p.is_dir() and not split_path(p, split).is_file():
            problem = f"holds no {split}.parquet (a training set as `perception-judge export` writes it)"
        else:
            continue
        raise OptionError(f"{suite}.{key}: {str(p)!r}{hint} {problem}")


def check_inputs(plan: EvalPlan, run: RunInfo | None = None) -> None:
    """Every path the plan names is there with the shape its reader expects, checked before any model loads and
    nothing written: the judges' model and adapter folders (:func:`~.backends.common.check_folder`: a Hub id is
    downloaded by the backend), a scripted judge's function, every suite's files and folders; an ``OptionError``
    names the key."""
    backend = KINDS[plan.backend.kind]
    judges = [(f"models.{e.name}", e.spec) for e in plan.models]
    for where, spec in judges + ([("the run file's base_model", {"model": run.base_model})] if run else []):
        try:
            backend.check_judge(spec, plan.backend.options)
        except (OSError, ValueError, ImportError) as e:
            raise OptionError(f"{where}: {e}") from None
    for suite in plan.suites:
        _suite_paths(suite, plan.options[suite], run.train_set if run else None)


def resolve(
    layers: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike[str] | None = None,
    run: RunInfo | None = None,
    force: bool = False,
    job: type[JobConfig] = JobConfig,
) -> EvalPlan:
    """The plan from the run file (``run``) and ``layers`` shaped like ``job`` (the config file, then the command
    line), merged in the order of the module docstring, then typed and checked once; raises ``OptionError`` naming
    what is wrong. ``out_dir`` wins over the job's ``out`` (default: the run's ``eval`` folder)."""
    merged: dict[str, Any] = {}
    for layer in (_run_layer(run), *layers):
        layer = dict(layer)
        _merge_backend(merged, layer.pop("backend", None))
        merge(merged, layer)
    config = job.parse(merged, "", what="key in the eval job")
    suites = tuple(config.suites or DEFAULT_SUITES)
    options = dict(config.options or {})
    if unknown := [s for s in (*suites, *options) if s not in SUITES]:
        raise OptionError(f"suites: unknown suite {unknown[0]!r}; available: {', '.join(SUITES)}")
    backend = BackendSpec.parse({"kind": "hf", **merged["backend"]}, config.sampling)
    typed = {s: SUITES[s].parse(_with_train_set(s, options.get(s) or {}, run)) for s in suites}
    for s in [s for s in options if s not in typed]:  # not run: its keys now, its requirements when it runs
        SUITES[s].options.check_keys(options[s], s, f"option of the {s} suite")
    trained = (run.raw.get("args") or {}).get("max_completion_length") if run else None
    budget = config.sampling.max_new_tokens
    warnings = (
        (f"sampling.max_new_tokens {budget} is below the {trained} tokens the run trained with "
         "(args.max_completion_length): a longer answer is cut off and scored as a parse failure",)
        if trained and budget < int(trained) else ()
    )  # fmt: skip
    for w in warnings:
        log.warning("%s", w)
    out = out_dir or config.out or (run.run_dir / "eval" if run else None)
    if out is None:
        raise OptionError("out: eval run needs --out DIR (or out: in the config)")
    check_cell_names(models := tuple(j.entry(backend.kind) for j in config.models))
    check_writable(Path(out), "the evaluation")
    seeds, force = tuple(config.seeds or (0,)), force or config.force
    return EvalPlan(suites, typed, backend, Path(out), seeds, config.limit, force, warnings, models, config)
