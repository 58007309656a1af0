"""The files of an evaluation folder that the sweep writes and the report (and ``make demo``) reads; this module is
their one owner (docs/evaluation.md §5): ``cells/<model>__<suite>__seed<seed>.json`` (one cell: status, fingerprint,
``result`` = ``SuiteResult.to_dict()`` or ``error``), ``results.csv`` and ``results.json`` (mean and sample std over
the finished seeds, per model, suite and metric)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_open, atomic_write_json
from perception_judge.core.schema import sha256_hex
from perception_judge.evaluation.stats import mean_std

CELLS_DIR = "cells"
CSV_COLUMNS = ("model", "step", "kind", "suite", "metric", "mean", "std", "n_seeds", "values")
_KIND_RANK = {"base": 0, "checkpoint": 1, "final": 2}


MAX_NAME = 64
"""Characters of a judge's name in its file names: a longer name keeps its first 47 and a hash of the whole name,
so cell files, their folders and their temporary names stay within any file system's limit."""


def cell_id(model: str, suite: str, seed: int) -> str:
    """``<model>__<suite>__seed<seed>``, the model name reduced to ``A-Za-z0-9._-`` (and hashed when long)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model)
    if len(safe) > MAX_NAME:
        safe = f"{safe[: MAX_NAME - 17]}-{sha256_hex(model)[:16]}"
    return f"{safe}__{suite}__seed{seed}"


def cell_path(out_dir: Path, cell: str) -> Path:
    return Path(out_dir) / CELLS_DIR / f"{cell}.json"


def read_cell(path: Path) -> dict[str, Any] | None:
    """A cell file, or None when it is missing or torn."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def collect_cells(out_dir: Path) -> list[dict[str, Any]]:
    cells = [read_cell(p) for p in sorted((Path(out_dir) / CELLS_DIR).glob("*.json"))]
    return [c for c in cells if c and "suite" in c and "model" in c]


def model_order(cells: list[dict[str, Any]], names: list[str] | None = None) -> list[str]:
    """``names`` first, then the others by name; without names by step (base first, final last), then name."""
    if names:
        return names + sorted({c["model"] for c in cells} - set(names))
    info = {
        c["model"]: (c.get("step") is None, c.get("step") or 0, _KIND_RANK.get(c.get("kind", "model"), 3))
        for c in cells
    }
    return sorted(info, key=lambda m: (*info[m], m))


def build_rows(cells: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """Long-format rows, one per (model in ``order``, suite, metric): mean and std over the finished seeds."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in sorted((c for c in cells if c.get("status") == "done"), key=lambda c: c["seed"]):
        grouped.setdefault((c["model"], c["suite"]), []).append(c)
    rows = []
    for model in order:
        for suite in sorted(s for m, s in grouped if m == model):
            cs = grouped[model, suite]
            head = (model, cs[-1].get("step"), cs[-1].get("kind", "model"), suite)
            for metric in dict.fromkeys(k for c in cs for k in c["result"]["metrics"]):
                values = {str(c["seed"]): c["result"]["metrics"].get(metric) for c in cs}
                mean, std = mean_std(list(values.values()))
                n_seeds = sum(v is not None for v in values.values())
                rows.append(dict(zip(CSV_COLUMNS, (*head, metric, mean, std, n_seeds, values))))
    return rows


def write_results(out_dir: Path, saved: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``results.csv`` and ``results.json`` from every cell file under ``out_dir``; returns the JSON.
    ``saved`` (the sweep's ``plan.json``) gives the run, the plan and the model order."""
    out_dir, saved = Path(out_dir), saved or {}
    cells = collect_cells(out_dir)
    order = model_order(cells, [m["name"] for m in saved.get("models", [])])
    rows = build_rows(cells, order)
    with atomic_open(out_dir / "results.csv") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows({**r, "values": json.dumps(r["values"])} for r in rows)
    first = {c["model"]: c for c in reversed(cells)}  # each model's first cell
    models = [
        {"name": m, "step": c.get("step"), "kind": c.get("kind", "model"), "spec": c.get("model_spec", {})}
        for m in order
        if (c := first.get(m)) is not None
    ]
    data = {
        "run_dir": saved.get("run_dir"),
        "run": saved.get("run"),
        "plan": saved.get("plan"),
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


def read_results(out_dir: Path) -> dict[str, Any]:
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} not found: run `perception-judge eval sweep/run` first")
    return json.loads(path.read_text(encoding="utf-8"))


def done_results(out_dir: Path, data: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(cell summary, its ``result``) of every finished cell listed in ``results.json`` whose file is readable."""
    out = []
    for c in data.get("cells", []):
        cell = read_cell(cell_path(out_dir, c["cell"])) if c.get("status") == "done" else None
        if cell is not None:
            out.append((c, cell.get("result") or {}))
    return out
