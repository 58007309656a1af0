"""Evaluation sweeps: every model of a training run (or a list of judges) × suite × seed, resumable.

A *cell* is one (model, suite, seed). Each finished cell is written atomically to its own JSON file
``OUT/cells/<model>__<suite>__seed<seed>.json`` (the suite's per-sample files go to the folder of the same name),
so a sweep that is killed loses at most the cells in flight, and a re-run skips every finished cell whose
*fingerprint* (suite, seed, options, sampling, limit, backend settings, model folders, pixel policy, think prefix)
is unchanged. A cell whose suite raised is recorded as failed and retried on the next run.

Models of a training run (``RUN_DIR/perception_judge_run.json``, written by the trainer):

* ``base``: the run's ``base_model`` (step 0);
* ``checkpoint-<N>``: full weights, or a LoRA adapter on the base model (step N);
* ``final``: the model or adapter at the run's root, when present (step from ``trainer_state.json``, else the
  last checkpoint's).

Outputs: ``OUT/cells/``, ``OUT/results.csv`` (long format: model, step, kind, suite, metric, mean, std, n_seeds,
values), ``OUT/results.json`` (the same rows, plus models, cells and the plan), then the report
(:mod:`perception_judge.evaluation.report`).
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import json
import logging
import os
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.io import atomic_open, atomic_write_json
from perception_judge.core.redact import redact
from perception_judge.core.runinfo import RUN_FILE, RunInfo, read_run
from perception_judge.core.schema import Sampling, content_key
from perception_judge.evaluation.backends.common import (
    fingerprint,
    has_full_weights,
    has_processor,
    is_adapter_dir,
)
from perception_judge.evaluation.base import SUITES, JudgeBackend, SuiteConfig, get_suite, progress_bar
from perception_judge.evaluation.bias.metrics import mean_std

log = logging.getLogger(__name__)

_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
TRAIN_SET_PAIR_SUITES = ("position", "verbosity")
"""Pair-source suites whose pairs default to the run's training set (the ``ppjd`` source, ``trainset_dir``)."""


# --------------------------------------------------------------------------------------------------------------
# Runs and models
# --------------------------------------------------------------------------------------------------------------


@dataclass
class ModelEntry:
    """One judge to evaluate. ``spec`` holds the backend's model keys (``model``, ``adapter``, ``processor``)."""

    name: str
    step: int | None = None
    kind: str = "model"  # base | checkpoint | final | model
    spec: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _final_step(run_dir: Path, checkpoints: list[ModelEntry], raw: dict[str, Any]) -> int | None:
    """The step of the final model: ``trainer_state.json`` at the root, else the run file's ``global_step``,
    else the last checkpoint's step."""
    state = run_dir / "trainer_state.json"
    if state.is_file():
        try:
            return int(json.loads(state.read_text())["global_step"])
        except (ValueError, KeyError, TypeError):
            log.warning("%s has no usable global_step", state)
    if isinstance(raw.get("global_step"), int):
        return raw["global_step"]
    steps = [c.step for c in checkpoints if c.step is not None]
    return max(steps) if steps else None


def _entry_for_folder(
    name: str, step: int | None, kind: str, folder: Path, run: RunInfo
) -> ModelEntry | None:
    if is_adapter_dir(folder):
        spec = {"model": run.base_model, "adapter": str(folder)}
        spec["processor"] = str(folder) if has_processor(folder) else run.base_model
        return ModelEntry(name, step, kind, spec)
    if has_full_weights(folder):
        return ModelEntry(
            name,
            step,
            kind,
            {"model": str(folder), "processor": str(folder) if has_processor(folder) else run.base_model},
        )
    return None


def discover_models(run: RunInfo, include_base: bool = True) -> list[ModelEntry]:
    """base, every complete checkpoint (by step) and the final model of a run. Incomplete checkpoint folders
    (no weights, no adapter) are skipped with a warning."""
    entries: list[ModelEntry] = []
    if include_base:
        entries.append(ModelEntry("base", 0, "base", {"model": run.base_model}))
    ckpts: list[ModelEntry] = []
    for d in sorted(run.run_dir.iterdir()) if run.run_dir.is_dir() else []:
        m = _CKPT_RE.match(d.name)
        if not (m and d.is_dir()):
            continue
        e = _entry_for_folder(d.name, int(m.group(1)), "checkpoint", d, run)
        if e is None:
            log.warning("skipping %s: neither full weights nor a LoRA adapter (incomplete checkpoint?)", d)
            continue
        ckpts.append(e)
    ckpts.sort(key=lambda e: e.step or 0)
    entries += ckpts
    final = _entry_for_folder("final", None, "final", run.run_dir, run)
    if final is not None:
        final.step = _final_step(run.run_dir, ckpts, run.raw)
        entries.append(final)
    return entries


def select_models(entries: list[ModelEntry], patterns: list[str] | None) -> list[ModelEntry]:
    """Keep the entries whose name matches one of the shell patterns (``base``, ``checkpoint-*``, ``final``)."""
    if not patterns:
        return entries
    kept = [e for e in entries if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    if not kept:
        raise ValueError(f"no model matches {patterns}; available: {[e.name for e in entries]}")
    return kept


# --------------------------------------------------------------------------------------------------------------
# The plan and its cells
# --------------------------------------------------------------------------------------------------------------


@dataclass
class EvalPlan:
    """Everything that decides the numbers of a sweep, besides the models."""

    suites: list[str]
    out_dir: Path
    seeds: list[int] = field(default_factory=lambda: [0])
    sampling: Sampling = field(default_factory=Sampling)
    limit: int | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # suite -> options
    backend: dict[str, Any] = field(default_factory=lambda: {"kind": "hf"})
    pixel_policy: PixelPolicy = field(default_factory=PixelPolicy)
    think_prefix: str = "auto"
    force: bool = False

    def __post_init__(self) -> None:
        unknown = [s for s in self.suites if s not in SUITES]
        if unknown:
            raise KeyError(f"unknown suite(s) {unknown}; available: {', '.join(SUITES)}")
        if not self.suites:
            raise ValueError("no suite to run")
        self.out_dir = Path(self.out_dir)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suites": list(self.suites),
            "seeds": list(self.seeds),
            "sampling": dataclasses.asdict(self.sampling),
            "limit": self.limit,
            "options": redact(_jsonable(self.options)),
            "backend": redact(_jsonable(self.backend)),
            "pixel_policy": self.pixel_policy.to_dict(),
            "think_prefix": self.think_prefix,
        }


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=lambda o: f"<{type(o).__name__}>"))


def cell_id(model: str, suite: str, seed: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model)
    return f"{safe}__{suite}__seed{seed}"


def effective_pixel_policy(plan: EvalPlan) -> PixelPolicy:
    """The pixel policy a sweep's backends use: ``backend.pixel_policy`` when the job config sets one, else the
    plan's (the training run's)."""
    from perception_judge.evaluation.backends import parse_spec

    given = parse_spec(plan.backend).get("pixel_policy")
    if given is None:
        return plan.pixel_policy
    return given if isinstance(given, PixelPolicy) else PixelPolicy(**dict(given))


def cell_fingerprint(entry: ModelEntry, suite: str, seed: int, plan: EvalPlan) -> str:
    """What must match for a finished cell to be reused."""
    folders = [entry.spec.get("model"), entry.spec.get("adapter")]
    weights = fingerprint(*[f for f in folders if f and Path(str(f)).is_dir()])
    return content_key(
        suite,
        int(seed),
        _jsonable(plan.options.get(suite, {})),
        dataclasses.asdict(plan.sampling),
        plan.limit,
        {k: v for k, v in _jsonable(plan.backend).items() if k not in ("progress",)},
        _jsonable(entry.spec),
        weights,
        effective_pixel_policy(plan).to_dict(),
        plan.think_prefix,
    )


def _claim_cell_dir(folder: Path, fp: str) -> None:
    """Mark a cell's output folder with the fingerprint it is run with; leftovers of an interrupted run with
    other settings are removed first (an interrupted run with the same settings is kept: suites resume from it)."""
    import shutil

    mark = folder / ".fingerprint"
    if folder.is_dir() and (not mark.is_file() or mark.read_text().strip() != fp):
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mark.write_text(fp)


def read_cell(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------------------------------
# Backends for models
# --------------------------------------------------------------------------------------------------------------

BackendFactory = Callable[[ModelEntry, EvalPlan], JudgeBackend]


def served_model_name(entry: ModelEntry) -> str | None:
    """The model name the ``openai`` backend asks a server for: a LoRA checkpoint is served under its entry name
    (``vllm ... --enable-lora --lora-modules checkpoint-150=RUN/checkpoint-150``), anything else under its folder
    (vLLM's default served name is the ``--model`` argument)."""
    if entry.spec.get("adapter"):
        return entry.name
    model = entry.spec.get("model")
    return None if model is None else str(model)


class BackendPool:
    """Builds the backend of each model from the plan's backend settings; with vLLM and LoRA checkpoints one
    engine (LoRA enabled) serves the base model and every adapter."""

    def __init__(self, plan: EvalPlan, entries: list[ModelEntry]) -> None:
        self.plan = plan
        self.entries = entries
        self._shared: dict[str, Any] = {}
        self._users: dict[str, int] = {}  # base model -> entries still to be served by its shared engine
        for e in entries:
            base = e.spec.get("model")
            if base:
                self._users[str(base)] = self._users.get(str(base), 0) + 1

    def get(self, entry: ModelEntry) -> JudgeBackend:
        from perception_judge.evaluation.backends import load_backend, parse_spec

        settings = parse_spec(self.plan.backend)
        kind = settings["kind"]
        spec = dict(settings)
        if kind in ("hf", "vllm"):
            spec.update({k: v for k, v in entry.spec.items() if v is not None})
            spec.setdefault("think_prefix", self.plan.think_prefix)
        elif kind == "openai":
            spec.setdefault("model", served_model_name(entry))
        elif kind == "scripted":
            spec.setdefault("fn", entry.spec.get("fn") or "constant")
        spec["pixel_policy"] = effective_pixel_policy(self.plan)  # the job config's, else the run's
        spec["label"] = entry.name
        if kind == "vllm" and any(e.spec.get("adapter") for e in self.entries):
            base = spec["model"]
            engine_owner = self._shared.get(base)
            if engine_owner is None:
                owner_spec = {k: v for k, v in spec.items() if k not in ("adapter", "processor")}
                owner_spec["enable_lora"] = True
                ranks = [e.spec["adapter"] for e in self.entries if e.spec.get("adapter")]
                from perception_judge.evaluation.backends.vllm import adapter_rank

                owner_spec["max_lora_rank"] = max(adapter_rank(a) for a in ranks)
                owner_spec["label"] = "base"
                engine_owner = self._shared[base] = load_backend(owner_spec)
            if entry.spec.get("adapter"):
                return engine_owner.for_adapter(entry.spec["adapter"], label=entry.name)
            return engine_owner
        return load_backend(spec)

    def release(self, backend: JudgeBackend, entry: ModelEntry | None = None) -> None:
        """Done with a model: close its backend; a shared engine closes after the last model it serves."""
        base = str(entry.spec.get("model")) if entry is not None else None
        if base is not None and base in self._shared:
            self._users[base] -= 1
            if backend is not self._shared[base]:
                backend.close()  # an adapter view: releases nothing of the shared engine
            if self._users[base] <= 0:
                self._shared.pop(base).close()
            return
        if backend in self._shared.values():
            return  # a shared engine lives until its last model or close_all
        backend.close()

    def close_all(self) -> None:
        for b in self._shared.values():
            b.close()
        self._shared.clear()


# --------------------------------------------------------------------------------------------------------------
# Running cells
# --------------------------------------------------------------------------------------------------------------


MAX_BACKEND_ERROR_RATE = 0.05
"""A cell whose judge calls failed in the backend (a dead server, a crashed engine) beyond this share is recorded
as failed: the run exits non-zero, a re-run redoes it, the report lists it. Below it, the errors are transient
and each suite counts them as errors (never as the judge's parse failures)."""


def backend_failure(counts: dict[str, Any]) -> str | None:
    """Why a finished suite's backend errors fail its cell (None when they stay within
    :data:`MAX_BACKEND_ERROR_RATE`). Reads the counts every suite reports: ``n_backend_errors`` or
    ``backend_errors`` over ``n_requests``, ``n_calls`` or ``judgments``."""
    errors = counts.get("n_backend_errors", counts.get("backend_errors")) or 0
    total = counts.get("n_requests") or counts.get("n_calls") or counts.get("judgments") or 0
    if not errors or not total or errors / total <= MAX_BACKEND_ERROR_RATE:
        return None
    return (
        f"{errors} of {total} judge calls failed in the backend ({errors / total:.0%}, more than "
        f"{MAX_BACKEND_ERROR_RATE:.0%}): is the server or engine up? Re-run the sweep to redo this cell"
    )


@dataclass
class SweepOutcome:
    done: int = 0
    skipped: int = 0
    failed: int = 0
    elsewhere: int = 0  # cells another --claim worker held
    cells: list[dict[str, Any]] = field(default_factory=list)


def suite_config(
    entry: ModelEntry, suite: str, seed: int, plan: EvalPlan, run: RunInfo | None
) -> SuiteConfig:
    options = dict(plan.options.get(suite, {}))
    if (
        suite in ("perception", "perception_mismatched")
        and not options.get("data")
        and run is not None
        and run.train_set
    ):
        options["data"] = run.train_set
    if suite in TRAIN_SET_PAIR_SUITES and run is not None and run.train_set:
        from perception_judge.evaluation.benchmarks.pair_sources import SOURCE_PATH_OPTIONS

        no_source = options.get("source") in (None, "ppjd") and not any(
            options.get(k) for k in SOURCE_PATH_OPTIONS
        )
        if no_source:
            options["trainset_dir"] = run.train_set
    if suite == "bias":
        options.setdefault("model_key", entry.name)
    return SuiteConfig(
        out_dir=plan.out_dir / "cells" / cell_id(entry.name, suite, seed),
        seeds=[int(seed)],
        sampling=plan.sampling,
        limit=plan.limit,
        options=options,
    )


def check_cell_names(entries: list[ModelEntry]) -> None:
    """Refuse judges whose names give the same cell file name (``cell_id`` keeps only ``A-Za-z0-9._-``): their results
    would overwrite each other. The error names both."""
    seen: dict[str, str] = {}
    for entry in entries:
        key = cell_id(entry.name, "x", 0)
        if key in seen and seen[key] != entry.name:
            raise ValueError(
                f"judges {seen[key]!r} and {entry.name!r} would share the result files {key.split('__')[0]}__*: "
                "give them names that differ in letters, digits, '.', '_' or '-'"
            )
        if key in seen:
            raise ValueError(f"judge {entry.name!r} is listed twice")
        seen[key] = entry.name


def run_cells(
    entries: list[ModelEntry],
    plan: EvalPlan,
    run: RunInfo | None = None,
    backend_factory: BackendFactory | None = None,
    progress: bool = True,
    claims: Any = None,
    max_attempts: int = 3,
) -> SweepOutcome:
    """Run every unfinished cell; returns what was done, skipped (already finished) and failed. With ``claims``
    (:class:`~perception_judge.evaluation.claims.Claims`) this is one of many workers: a cell runs only once this
    worker has claimed it, a model is loaded only for a cell it claimed, and a cell that failed ``max_attempts``
    times is left failed."""
    check_cell_names(entries)
    cells_dir = plan.out_dir / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    outcome = SweepOutcome()
    todo: list[tuple[ModelEntry, str, int, str, Path]] = []
    for entry in entries:
        for suite in plan.suites:
            for seed in plan.seeds:
                cid = cell_id(entry.name, suite, seed)
                path = cells_dir / f"{cid}.json"
                fp = cell_fingerprint(entry, suite, seed, plan)
                old = read_cell(path)
                if not plan.force and old and old.get("status") == "done" and old.get("fingerprint") == fp:
                    outcome.skipped += 1
                    outcome.cells.append(old)
                    continue
                if old and old.get("status") == "done" and old.get("fingerprint") != fp and not plan.force:
                    log.info("cell %s: settings changed since it was run; running it again", cid)
                if (
                    claims is not None
                    and old
                    and old.get("status") == "failed"
                    and old.get("fingerprint") == fp
                    and int(old.get("attempts", 1)) >= max_attempts
                ):
                    outcome.failed += 1  # retried enough: left for a person to look at
                    outcome.cells.append(old)
                    continue
                todo.append((entry, suite, seed, fp, path))
    pending = {item[0].name for item in todo}
    pool = BackendPool(plan, [e for e in entries if e.name in pending]) if backend_factory is None else None
    bar = progress_bar(len(todo) if progress else 0, "cells", "cell")
    try:
        by_model: dict[str, list[tuple[ModelEntry, str, int, str, Path]]] = {}
        for item in todo:
            by_model.setdefault(item[0].name, []).append(item)
        for name, items in by_model.items():
            entry = items[0][0]
            backend: JudgeBackend | None = None
            load_error = None
            loaded = False
            load_s = 0.0
            try:
                for entry, suite, seed, fp, path in items:
                    if claims is not None:
                        if not claims.acquire(cell_id(entry.name, suite, seed)):
                            outcome.elsewhere += 1  # another worker has it
                            bar.update(1)
                            continue
                        now = read_cell(path)
                        if now and now.get("status") == "done" and now.get("fingerprint") == fp:
                            claims.release(cell_id(entry.name, suite, seed))  # finished meanwhile
                            outcome.skipped += 1
                            outcome.cells.append(now)
                            bar.update(1)
                            continue
                    if not loaded:  # a model is loaded for the first cell this worker runs
                        loaded, t_load = True, time.time()
                        try:
                            backend = backend_factory(entry, plan) if backend_factory else pool.get(entry)
                        except Exception as e:  # record it on every cell of this model
                            load_error = f"{type(e).__name__}: {e}"
                            log.error("cannot load model %s: %s", name, load_error)
                        load_s = time.time() - t_load
                    bar.set_postfix_str(f"{name} / {suite} / seed {seed}")
                    cell = {
                        "cell": cell_id(entry.name, suite, seed),
                        "model": entry.name,
                        "step": entry.step,
                        "kind": entry.kind,
                        "suite": suite,
                        "seed": int(seed),
                        "fingerprint": fp,
                        "model_spec": _jsonable(entry.spec),
                        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    }
                    t0 = time.time()
                    _claim_cell_dir(plan.out_dir / "cells" / cell["cell"], fp)
                    if backend is None:
                        cell.update(status="failed", error=f"model could not be loaded: {load_error}")
                    else:
                        try:
                            cfg = suite_config(entry, suite, seed, plan, run)
                            result = get_suite(suite)(backend, cfg)
                            cell.update(status="done", result=_jsonable(result.to_dict()))
                            too_many = backend_failure(result.counts)
                            if too_many:  # the numbers would rest on the calls that happened to succeed
                                log.error("cell %s failed: %s", cell["cell"], too_many)
                                cell.update(status="failed", error=too_many)
                        except Exception as e:  # one failing cell does not stop the sweep
                            log.error("cell %s failed: %s: %s", cell["cell"], type(e).__name__, e)
                            cell.update(
                                status="failed",
                                error=f"{type(e).__name__}: {e}",
                                traceback=traceback.format_exc(limit=8),
                            )
                    cell["seconds"] = round(time.time() - t0, 3)
                    cell["model_load_seconds"] = round(load_s, 3)
                    cell["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
                    previous = read_cell(path)
                    if cell["status"] == "failed":
                        same = (
                            previous
                            and previous.get("fingerprint") == fp
                            and previous.get("status") == "failed"
                        )
                        cell["attempts"] = int(previous.get("attempts", 1)) + 1 if same else 1
                    atomic_write_json(path, cell)
                    if claims is not None:
                        claims.release(cell["cell"])
                    outcome.cells.append(cell)
                    if cell["status"] == "done":
                        outcome.done += 1
                    else:
                        outcome.failed += 1
                    bar.update(1)
            finally:
                if backend is not None:
                    if pool is not None:
                        pool.release(backend, entry)
                    else:
                        backend.close()
    finally:
        bar.close()
        if pool is not None:
            pool.close_all()
    return outcome


# --------------------------------------------------------------------------------------------------------------
# The results table
# --------------------------------------------------------------------------------------------------------------

CSV_COLUMNS = ("model", "step", "kind", "suite", "metric", "mean", "std", "n_seeds", "values")


def collect_cells(out_dir: Path) -> list[dict[str, Any]]:
    cells = []
    for p in sorted((Path(out_dir) / "cells").glob("*.json")):
        c = read_cell(p)
        if c and "suite" in c and "model" in c:
            cells.append(c)
    return cells


def model_order(cells: list[dict[str, Any]], entries: list[ModelEntry] | None = None) -> list[str]:
    """Models ordered by step (base first, final last among equal steps), then name."""
    if entries:
        names = [e.name for e in entries]
        extra = sorted({c["model"] for c in cells} - set(names))
        return names + extra
    info = {}
    for c in cells:
        kind_rank = {"base": 0, "checkpoint": 1, "final": 2}.get(c.get("kind", "model"), 3)
        step = c.get("step")
        info[c["model"]] = (step is None, step if step is not None else 0, kind_rank, c["model"])
    return sorted(info, key=lambda m: info[m])


def build_rows(cells: list[dict[str, Any]], order: list[str] | None = None) -> list[dict[str, Any]]:
    """Long-format rows: one per (model, suite, metric), mean and sample std over the finished seeds."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    meta: dict[str, dict[str, Any]] = {}
    for c in cells:
        if c.get("status") != "done":
            continue
        grouped.setdefault((c["model"], c["suite"]), []).append(c)
        meta[c["model"]] = {"step": c.get("step"), "kind": c.get("kind", "model")}
    order = order or model_order(cells)
    rows = []
    for model in order:
        for (m, suite), cs in sorted(grouped.items(), key=lambda kv: kv[0][1]):
            if m != model:
                continue
            cs = sorted(cs, key=lambda c: c["seed"])
            names: list[str] = []
            for c in cs:
                for k in c["result"]["metrics"]:
                    if k not in names:
                        names.append(k)
            for metric in names:
                values = {str(c["seed"]): c["result"]["metrics"].get(metric) for c in cs}
                mean, std = mean_std(list(values.values()))
                rows.append(
                    {
                        "model": model,
                        "step": meta[model]["step"],
                        "kind": meta[model]["kind"],
                        "suite": suite,
                        "metric": metric,
                        "mean": mean,
                        "std": std,
                        "n_seeds": sum(v is not None for v in values.values()),
                        "values": values,
                    }
                )
    return rows


def write_results(
    out_dir: Path,
    entries: list[ModelEntry] | None = None,
    plan: EvalPlan | None = None,
    run: RunInfo | None = None,
    saved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``results.csv`` and ``results.json`` from every cell file under ``out_dir``; returns the JSON."""
    out_dir = Path(out_dir)
    cells = collect_cells(out_dir)
    order = model_order(cells, entries)
    rows = build_rows(cells, order)
    with atomic_open(out_dir / "results.csv") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**r, "values": json.dumps(r["values"])})
    models = []
    for name in order:
        c = next((c for c in cells if c["model"] == name), None)
        if c is not None:
            models.append(
                {
                    "name": name,
                    "step": c.get("step"),
                    "kind": c.get("kind", "model"),
                    "spec": c.get("model_spec", {}),
                }
            )
    saved = saved or {}
    data = {
        "run_dir": str(run.run_dir) if run else saved.get("run_dir"),
        "run": _jsonable(run.raw) if run else saved.get("run"),
        "plan": plan.to_dict() if plan else saved.get("plan"),
        "models": models,
        "suites": sorted({c["suite"] for c in cells}),
        "cells": [
            {k: c.get(k) for k in ("cell", "model", "step", "suite", "seed", "status", "error", "seconds")}
            for c in cells
        ],
        "rows": rows,
    }
    atomic_write_json(out_dir / "results.json", data)
    return data


# --------------------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------------------


def sweep(
    run_dir: str | os.PathLike[str],
    plan: EvalPlan | None = None,
    suites: list[str] | None = None,
    models: list[str] | None = None,
    backend_factory: BackendFactory | None = None,
    report: bool = True,
    progress: bool = True,
    **claim_options: Any,
) -> tuple[SweepOutcome, dict[str, Any]]:
    """Evaluate the base model and every checkpoint of a run (``claim_options``: ``claim``, ``lease_s``,
    ``max_attempts`` of :func:`evaluate`). ``plan`` defaults to the given suites with the
    run's pixel policy and think prefix, written to ``RUN_DIR/eval``."""
    run = read_run(run_dir)
    if plan is None:
        plan = EvalPlan(suites=suites or ["bias", "perception"], out_dir=run.run_dir / "eval")
    plan.pixel_policy = run.pixel_policy
    plan.think_prefix = run.think_prefix
    entries = select_models(discover_models(run), models)
    return evaluate(entries, plan, backend_factory, report, progress, run=run, **claim_options)


def evaluate(
    entries: list[ModelEntry],
    plan: EvalPlan,
    backend_factory: BackendFactory | None = None,
    report: bool = True,
    progress: bool = True,
    *,
    run: RunInfo | None = None,
    claim: bool = False,
    lease_s: float = 60.0,
    max_attempts: int = 3,
) -> tuple[SweepOutcome, dict[str, Any]]:
    """Evaluate a list of judges: same cells, table and report as a sweep (``run``: the training run they
    come from, when a sweep evaluates one). With ``claim`` this is one of many workers sharing the folder
    (:mod:`perception_judge.evaluation.claims`): it runs the cells it claims and writes no table; ``collect``
    writes them once every cell is done."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    saved = {
        "plan": plan.to_dict(),
        "models": [e.to_dict() for e in entries],
        "run_dir": str(run.run_dir) if run else None,
        "run": _jsonable(run.raw) if run else None,
    }
    if claim:
        from perception_judge.evaluation.claims import Claims

        claims = Claims(plan.out_dir, lease_s)
        try:
            claims.pin_plan({"plan": saved["plan"], "models": saved["models"]})
            atomic_write_json(plan.out_dir / "plan.json", saved)
            outcome = run_cells(entries, plan, run, backend_factory, progress, claims, max_attempts)
        finally:
            claims.close()
        return outcome, {}
    atomic_write_json(plan.out_dir / "plan.json", saved)
    outcome = run_cells(entries, plan, run, backend_factory, progress)
    data = write_results(plan.out_dir, entries, plan, run)
    if report:
        from perception_judge.evaluation.report import write_report

        write_report(plan.out_dir)
    return outcome, data


def collect(
    out_dir: str | os.PathLike[str], report: bool = True
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """After ``--claim`` workers: write ``results.{csv,json}`` (and the report) from the cell files, and say what is
    not done: ``missing`` (never finished), ``failed`` and ``claimed`` (a worker holds it now). Re-running it on
    the same cells writes the same bytes."""
    from perception_judge.evaluation.claims import claimed_cells

    out_dir = Path(out_dir)
    plan_file = out_dir / "plan.json"
    if not plan_file.is_file():
        raise FileNotFoundError(
            f"{str(plan_file)!r} not found: OUT must be the --out of an `eval sweep --claim` run"
        )
    saved = json.loads(plan_file.read_text(encoding="utf-8"))
    entries = [ModelEntry(**m) for m in saved.get("models", [])]
    plan_d = saved.get("plan") or {}
    status = {c["cell"]: c.get("status") for c in collect_cells(out_dir)}
    expected = [
        cell_id(e.name, suite, int(seed))
        for e in entries
        for suite in plan_d.get("suites", [])
        for seed in plan_d.get("seeds", [])
    ]
    state = {
        "missing": [c for c in expected if c not in status],
        "failed": [c for c in expected if status.get(c) == "failed"],
        "claimed": claimed_cells(out_dir),
    }
    data = write_results(out_dir, entries, saved=saved)
    if report:
        from perception_judge.evaluation.report import write_report

        write_report(out_dir)
    return data, state


__all__ = [
    "RUN_FILE",
    "BackendPool",
    "EvalPlan",
    "ModelEntry",
    "RunInfo",
    "SweepOutcome",
    "build_rows",
    "cell_fingerprint",
    "cell_id",
    "collect",
    "collect_cells",
    "discover_models",
    "evaluate",
    "read_run",
    "run_cells",
    "select_models",
    "sweep",
    "write_results",
]
