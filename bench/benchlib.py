"""What every benchmark script shares: the one-line result record ``bench/run_all.py`` collects."""

from __future__ import annotations

import json
from typing import Any

MARK = "BENCH_RESULT "


def emit(name: str, value: float | None, target: float | None = None, unit: str = "", **extra: Any) -> None:
    """Print ``BENCH_RESULT {"name", "value", "target", "unit", "higher_is_better", ...}`` (value rounded to 4
    places; ``value=None`` with ``skipped="why"`` for a measurement this machine cannot make)."""
    line = {
        "name": name,
        "value": None if value is None else round(float(value), 4),
        "target": target,
        "unit": unit,
        "higher_is_better": extra.pop("higher_is_better", True),
        **extra,
    }
    print(MARK + json.dumps(line), flush=True)
