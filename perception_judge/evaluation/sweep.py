"""Evaluation sweeps: every model of a training run (or a list of judges) × suite × seed, one *cell* each, written
to its own file when it ends (:mod:`.results`); a re-run skips every finished cell whose :func:`cell_fingerprint` is
unchanged and retries the failed ones (docs/evaluation.md §4). The plan (:mod:`.plan`) is read, never changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import itertools
import json
import logging
import os
import shutil
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_json, progress_bar
from perception_judge.core.runinfo import RUN_FILE as RUN_FILE
from perception_judge.core.runinfo import RunInfo, has_full_weights, list_checkpoints, read_run
from perception_judge.core.schema import content_key
from perception_judge.evaluation.backends import KINDS
from perception_judge.evaluation.backends.common import fingerprint, has_processor, is_adapter_dir
from perception_judge.evaluation.base import JudgeBackend, SuiteConfig
from perception_judge.evaluation.plan import EvalPlan, ModelEntry, check_cell_names, jsonable, resolve
from perception_judge.evaluation.results import (
    CELLS_DIR,
    cell_id,
    cell_path,
    collect_cells,
    read_cell,
    write_results,
)
from perception_judge.evaluation.suites import SUITES

log = logging.getLogger(__name__)


def _model_spec(folder: Path, run: RunInfo) -> dict[str, Any] | None:
    """The model keys of a run's folder: a LoRA adapter on the base model, full weights, or None (neither)."""
    processor = str(folder) if has_processor(folder) else run.base_model
    if is_adapter_dir(folder):
        return {"model": run.base_model, "adapter": str(folder), "processor": processor}
    if (folder / "config.json").is_file() and has_full_weights(folder):
        return {"model": str(folder), "processor": processor}
    return None


def _final_step(run: RunInfo, checkpoints: list[ModelEntry]) -> int | None:
    """``trainer_state.json`` at the root, else the run file's ``global_step``, else the last checkpoint's step."""
    state = run.run_dir / "trainer_state.json"
    if state.is_file():
        try:
            return int(json.loads(state.read_text())["global_step"])
        except (ValueError, KeyError, TypeError):
            log.warning("%s has no usable global_step", state)
    if isinstance(run.raw.get("global_step"), int):
        return run.raw["global_step"]
    return max((c.step for c in checkpoints if c.step is not None), default=None)


def discover_models(run: RunInfo) -> list[ModelEntry]:
    """``base`` (step 0), every complete ``checkpoint-<N>`` (by step) and ``final`` (the run's root) of a run."""
    ckpts: list[ModelEntry] = []
    for folder in map(run.run_dir.joinpath, list_checkpoints(run.run_dir)):  # by step
        if (spec := _model_spec(folder, run)) is not None:
            ckpts.append(ModelEntry(folder.name, int(folder.name.split("-")[-1]), "checkpoint", spec))
        else:
            log.warning(
                "skipping %s: neither full weights nor a LoRA adapter (incomplete checkpoint?)", folder
            )
    spec = _model_spec(run.run_dir, run)
    final = [ModelEntry("final", _final_step(run, ckpts), "final", spec)] if spec is not None else []
    return [ModelEntry("base", 0, "base", {"model": run.base_model}), *ckpts, *final]


def select_models(entries: list[ModelEntry], patterns: list[str] | None) -> list[ModelEntry]:
    """Keep the entries whose name matches one of the shell patterns (``base``, ``checkpoint-*``, ``final``)."""
    kept = [e for e in entries if not patterns or any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    if patterns and not kept:
        raise ValueError(f"no model matches {patterns}; available: {[e.name for e in entries]}")
    return kept


def cell_fingerprint(entry: ModelEntry, suite: str, seed: int, plan: EvalPlan) -> str:
    """What must match for a finished cell to be reused: the suite's typed options (defaults filled, so writing a
    default out changes nothing), the backend spec (options, pixel policy, think prefix, sampling), the seed, the
    limit, the model folders and a fingerprint of their weight files."""
    folders = [f for f in (entry.spec.get("model"), entry.spec.get("adapter")) if f and Path(str(f)).is_dir()]
    options = jsonable(plan.options[suite].model_dump())
    backend, spec = plan.backend.to_dict(), jsonable(entry.spec)
    return content_key(suite, int(seed), options, backend, plan.limit, spec, fingerprint(*folders))


BackendFactory = Callable[[ModelEntry, EvalPlan], JudgeBackend]


class BackendPool:
    """Each judge's backend from the plan's spec; with vLLM and LoRA checkpoints one engine serves them all."""

    def __init__(
        self, plan: EvalPlan, entries: list[ModelEntry], factory: BackendFactory | None = None
    ) -> None:
        self.plan, self.entries, self.factory = plan, entries, factory  # factory: builds every backend
        self._shared: dict[str, Any] = {}  # base model -> its shared engine
        self._users = Counter(str(e.spec["model"]) for e in entries if e.spec.get("model"))  # its models left

    def get(self, entry: ModelEntry) -> JudgeBackend:
        if self.factory is not None:
            return self.factory(entry, self.plan)
        spec = self.plan.backend
        keys = KINDS[spec.kind].judge_keys(entry.spec, entry.name, spec.options.model_fields_set)
        keys["label"] = entry.name
        if spec.kind != "vllm" or not any(e.spec.get("adapter") for e in self.entries):
            return spec.build(**keys)
        from perception_judge.evaluation.backends.vllm import adapter_rank

        if (owner := self._shared.get(keys["model"])) is None:
            rank = max(adapter_rank(e.spec["adapter"]) for e in self.entries if e.spec.get("adapter"))
            owner = self._shared[keys["model"]] = spec.build(
                model=keys["model"], enable_lora=True, max_lora_rank=rank, label="base"
            )
        adapter = entry.spec.get("adapter")
        return owner.for_adapter(adapter, label=entry.name) if adapter else owner

    def release(self, backend: JudgeBackend, entry: ModelEntry) -> None:
        """Done with a model: close its backend; a shared engine closes after the last model it serves."""
        base = str(entry.spec.get("model"))
        if base in self._shared:
            self._users[base] -= 1
            if backend is not self._shared[base]:
                backend.close()  # an adapter view: releases nothing of the shared engine
            if self._users[base] <= 0:
                self._shared.pop(base).close()
        elif backend not in self._shared.values():  # a shared engine lives until its last model or close_all
            backend.close()

    def close_all(self) -> None:
        for b in self._shared.values():
            b.close()
        self._shared.clear()


MAX_BACKEND_ERROR_RATE = 0.05
"""A cell whose judge calls failed in the backend (a dead server, a crashed engine) beyond this share is recorded
as failed: the run exits non-zero, a re-run redoes it, the report lists it. Below it, the errors are transient
and each suite counts them as errors (never as the judge's parse failures)."""


def backend_failure(counts: dict[str, Any]) -> str | None:
    """Why a finished suite's backend errors fail its cell, from its counts; None within the limit."""
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

    def add(self, cell: dict[str, Any], counter: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        self.cells.append(cell)


def suite_config(entry: ModelEntry, suite: str, seed: int, plan: EvalPlan) -> SuiteConfig:
    """The suite's config for one cell: its typed options (a ``model_key`` left unset is the judge's name)."""
    options = plan.options[suite]
    if "model_key" in type(options).model_fields and options.model_key is None:
        options = options.model_copy(update={"model_key": entry.name})
    out_dir = plan.out_dir / CELLS_DIR / cell_id(entry.name, suite, seed)
    return SuiteConfig(out_dir, [int(seed)], plan.backend.sampling, plan.limit, options)


def _run_cell(
    entry: ModelEntry, suite: str, seed: int, fp: str, plan: EvalPlan, backend: Any
) -> dict[str, Any]:
    """Run one cell (``backend``: the judge, or why it could not be loaded); one failing cell never stops the
    sweep (its error is recorded). The cell's folder is marked with its fingerprint; leftovers of an interrupted
    run with other settings are removed first (one with the same settings is kept: suites resume from it)."""
    cell = {"cell": cell_id(entry.name, suite, seed), "model": entry.name, "step": entry.step}
    cell |= {"kind": entry.kind, "suite": suite, "seed": int(seed), "fingerprint": fp}
    cell["model_spec"] = jsonable(entry.spec)
    cell["started"], t0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.time()
    folder = plan.out_dir / CELLS_DIR / cell["cell"]
    mark = folder / ".fingerprint"
    if folder.is_dir() and (not mark.is_file() or mark.read_text().strip() != fp):
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mark.write_text(fp)
    if isinstance(backend, str):
        cell.update(status="failed", error=f"model could not be loaded: {backend}")
    else:
        try:
            result = SUITES[suite](backend, suite_config(entry, suite, seed, plan))
            cell.update(status="done", result=jsonable(result.to_dict()))
            if too_many := backend_failure(result.counts):  # the numbers would rest on the calls that worked
                cell.update(status="failed", error=too_many)
        except Exception as e:
            cell.update(
                status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=8)
            )
        if cell["status"] == "failed":
            log.error("cell %s failed: %s", cell["cell"], cell["error"])
    cell["seconds"] = round(time.time() - t0, 3)
    return cell


Todo = dict[str, list[tuple[ModelEntry, str, int, str]]]


def _todo(
    entries: list[ModelEntry], plan: EvalPlan, outcome: SweepOutcome, claims: Any, max_attempts: int
) -> Todo:
    """The cells to run, by model; the finished ones (same fingerprint) go to ``outcome`` as skipped, and with
    ``claims`` the ones that failed ``max_attempts`` times as failed (left for a person to look at)."""
    todo: Todo = {}
    for entry, suite, seed in itertools.product(entries, plan.suites, plan.seeds):
        cid, fp = cell_id(entry.name, suite, seed), cell_fingerprint(entry, suite, seed, plan)
        old = read_cell(cell_path(plan.out_dir, cid)) or {}
        same = old.get("fingerprint") == fp
        if old.get("status") == "done" and not plan.force:
            if same:
                outcome.add(old, "skipped")
                continue
            log.info("cell %s: settings changed since it was run; running it again", cid)
        given_up = same and old.get("status") == "failed" and old.get("attempts", 1) >= max_attempts
        if claims is not None and given_up:
            outcome.add(old, "failed")
            continue
        todo.setdefault(entry.name, []).append((entry, suite, seed, fp))
    return todo


def _finish(cell: dict[str, Any], path: Path, load_s: float, fp: str) -> dict[str, Any]:
    """Time a cell, count its attempts (one more after a failure with the same settings), write it."""
    cell |= {"model_load_seconds": round(load_s, 3), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if cell["status"] == "failed":
        previous = read_cell(path) or {}
        same = previous.get("fingerprint") == fp and previous.get("status") == "failed"
        cell["attempts"] = int(previous.get("attempts", 1)) + 1 if same else 1
    atomic_write_json(path, cell)
    return cell


def run_cells(
    entries: list[ModelEntry],
    plan: EvalPlan,
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
    (plan.out_dir / CELLS_DIR).mkdir(parents=True, exist_ok=True)
    outcome = SweepOutcome()
    todo = _todo(entries, plan, outcome, claims, max_attempts)
    pool = BackendPool(plan, [e for e in entries if e.name in todo], backend_factory)
    bar = progress_bar(sum(map(len, todo.values())) if progress else 0, "cells", "cell")
    try:
        for items in todo.values():
            entry, backend, load_s = items[0][0], None, None
            try:
                for entry, suite, seed, fp in items:
                    bar.update(1)
                    cid = cell_id(entry.name, suite, seed)
                    path = cell_path(plan.out_dir, cid)
                    if claims is not None:
                        if not claims.acquire(cid):
                            outcome.elsewhere += 1  # another worker has it
                            continue
                        now = read_cell(path)
                        if now and now.get("status") == "done" and now.get("fingerprint") == fp:
                            claims.release(cid)  # finished meanwhile
                            outcome.add(now, "skipped")
                            continue
                    if load_s is None:  # a model is loaded for the first cell this worker runs
                        t_load = time.time()
                        try:
                            backend = pool.get(entry)
                        except Exception as e:  # recorded on every cell of this model
                            backend = f"{type(e).__name__}: {e}"
                            log.error("cannot load model %s: %s", entry.name, backend)
                        load_s = time.time() - t_load
                    bar.set_postfix_str(f"{entry.name} / {suite} / seed {seed}")
                    cell = _finish(_run_cell(entry, suite, seed, fp, plan, backend), path, load_s, fp)
                    if claims is not None:
                        claims.release(cid)
                    outcome.add(cell, cell["status"])  # "done" or "failed"
            finally:
                if backend is not None and not isinstance(backend, str):
                    pool.release(backend, entry)
    finally:
        bar.close()
        pool.close_all()
    return outcome


def sweep(
    run_dir: str | os.PathLike[str],
    plan: EvalPlan | None = None,
    models: list[str] | None = None,
    backend_factory: BackendFactory | None = None,
    report: bool = True,
    progress: bool = True,
    **claim_options: Any,
) -> tuple[SweepOutcome, dict[str, Any]]:
    """Evaluate the base model and every checkpoint of a run (``models``: default the plan's ``models_filter``;
    ``claim_options``: ``claim``, ``lease_s``, ``max_attempts`` of :func:`evaluate`). ``plan`` should be resolved
    with the run (:func:`~.plan.resolve`, which takes its pixel policy, think prefix, token budget and training set);
    the default runs the bias and perception suites into ``RUN_DIR/eval``."""
    run = read_run(run_dir)
    plan = plan or resolve([], run.run_dir / "eval", run)
    entries = select_models(discover_models(run), models or plan.job.models_filter)
    return evaluate(entries, plan, backend_factory, report, progress, run=run, **claim_options)


def _write_tables(out_dir: Path, saved: dict[str, Any], report: bool) -> dict[str, Any]:
    data = write_results(out_dir, saved)
    if report:
        from perception_judge.evaluation.report import write_report

        write_report(out_dir)
    return data


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
    """Evaluate a list of judges: same cells, table and report as a sweep (``run``: the training run they come
    from, when a sweep evaluates one). With ``claim`` this is one of many workers sharing the folder
    (:mod:`perception_judge.evaluation.claims`): it runs the cells it claims and writes no table; ``collect`` writes
    them once every cell is done."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    models = [dataclasses.asdict(e) for e in entries]
    saved = {"plan": plan.to_dict(), "models": models, "run_dir": str(run.run_dir) if run else None}
    saved["run"] = jsonable(run.raw) if run else None
    if not claim:
        atomic_write_json(plan.out_dir / "plan.json", saved)
        outcome = run_cells(entries, plan, backend_factory, progress)
        return outcome, _write_tables(plan.out_dir, saved, report)
    from perception_judge.evaluation.claims import Claims

    with contextlib.closing(Claims(plan.out_dir, lease_s)) as claims:
        claims.pin_plan({"plan": saved["plan"], "models": saved["models"]})
        atomic_write_json(plan.out_dir / "plan.json", saved)
        return run_cells(entries, plan, backend_factory, progress, claims, max_attempts), {}


def collect(
    out_dir: str | os.PathLike[str], report: bool = True
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """After ``--claim`` workers: write ``results.{csv,json}`` (and the report) from the cell files, and say what is
    not done: ``missing`` (never finished), ``failed`` and ``claimed`` (a worker holds it now). Re-running it on
    the same cells writes the same bytes."""
    from perception_judge.evaluation.claims import claimed_cells

    out_dir = Path(out_dir)
    if not (out_dir / "plan.json").is_file():
        raise FileNotFoundError(
            f"{str(out_dir / 'plan.json')!r} not found: OUT must be the --out of an `eval sweep --claim` run"
        )
    saved = json.loads((out_dir / "plan.json").read_text(encoding="utf-8"))
    plan = saved.get("plan") or {}
    status = {c["cell"]: c.get("status") for c in collect_cells(out_dir)}
    grid = itertools.product(saved.get("models", []), plan.get("suites", []), plan.get("seeds", []))
    expected = [cell_id(m["name"], suite, int(seed)) for m, suite, seed in grid]
    state = {
        "missing": [c for c in expected if c not in status],
        "failed": [c for c in expected if status.get(c) == "failed"],
        "claimed": claimed_cells(out_dir),
    }
    return _write_tables(out_dir, saved, report), state
