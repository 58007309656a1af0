"""The evaluation how-tos run as written, by bash, from a folder laid out as the repository root: the rehearsal of
docs/howto-mmjb-official.md (a scripted judge on nine rows in the layout of the official data's Hub snapshot) and
docs/howto-dry-runs.md (scripted judges side by side, a judge function of one's own, a sweep that loads no weights),
whose stated numbers are the numbers the runs write."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from test_eval_sweep import dummy_run

REPO = Path(__file__).resolve().parents[1]


def _run_block(doc: str, marker: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The doc's marked bash block, run in ``cwd`` with `perception-judge` this checkout's entry point."""
    text = (REPO / "docs" / doc).read_text()
    block = text.split(f"<!-- howto:{marker} -->\n```bash\n", 1)[1].split("\n```\n", 1)[0]
    prelude = (
        "set -euo pipefail\n"
        f'perception-judge() {{ PYTHONPATH="{REPO}${{PYTHONPATH:+:$PYTHONPATH}}" "{sys.executable}" '
        '-m perception_judge.cli "$@"; }\n'
        f'python() {{ "{sys.executable}" "$@"; }}\n'
    )
    (cwd / "eval").symlink_to(REPO / "eval")
    done = subprocess.run(
        ["bash", "-c", prelude + block],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _results(folder: Path) -> dict[tuple[str, str, str], float]:
    with (folder / "results.csv").open() as f:
        return {
            (r["model"], r["suite"], r["metric"]): float(r["mean"]) for r in csv.DictReader(f) if r["mean"]
        }


def test_the_mmjb_official_howto_runs_as_written(tmp_path):
    done = _run_block("howto-mmjb-official.md", "mmjb-official", tmp_path)
    out = tmp_path / "runs" / "mmjb-rehearsal"
    cells = sorted(p.name for p in (out / "cells").glob("*.json"))
    assert cells == [f"rehearsal__bias__seed{s}.json" for s in (0, 1, 2)]  # the config's three seeds
    result = json.loads((out / "cells" / cells[0]).read_text())["result"]
    assert result["counts"]["n_pairs"] == 9 and result["counts"]["n_missing_image"] == 0
    assert (
        result["protocol"]["data"].items()
        >= {"source": "official", "parity": "complete", "n_pairs": 9}.items()
    )
    assert (
        result["extra"]["load_report"]["filled_from_dir"] == 2
    )  # the two restricted images, from images_dir
    assert (out / "cells" / "rehearsal__bias__seed0" / "judgements" / "seed_0" / "0000.json").is_file()
    assert "| rehearsal |" in done.stdout and "DetailDesc (BC)" in done.stdout  # the report's head


def test_the_dry_runs_howto_runs_as_written_and_its_numbers_hold(tmp_path):
    run = dummy_run(tmp_path / "stand-in-run")  # placeholder weights: a scripted sweep loads none
    _run_block("howto-dry-runs.md", "dry-runs", tmp_path, RUN=str(run))
    compare, first, sweep = (_results(tmp_path / "runs" / "dry" / n) for n in ("compare", "first", "sweep"))
    doc = " ".join((REPO / "docs" / "howto-dry-runs.md").read_text().split())
    bd = (
        "text_dominance",
        "image_dominance",
        "response_dominance",
        "instruction_misalignment",
        "image_misalignment",
    )
    bc = ("detail_description", "unnecessary_image", "visual_transformation", "texture_insertion")
    assert [compare["always-8", "bias", t] for t in bd + bc] == [0.0] * 5 + [1.0] * 4
    assert f"`overall` {compare['always-8', 'bias', 'overall']:.3f}, four of nine" in doc
    assert f"`pair_acc` {compare['always-8', 'perception', 'pair_acc']:.3f}, a tie counting half" in doc
    said = f"`pair_acc` {first['first', 'perception', 'pair_acc']:.3f} and `pair_consistency` "
    assert said + f"{first['first', 'perception', 'pair_consistency']:.3f}" in doc
    assert ("coin", "perception", "pair_acc") in compare
    assert {m for m, _, _ in sweep} == {"base", "checkpoint-10", "checkpoint-20", "final"}
    assert "no model stands out" in (tmp_path / "runs" / "dry" / "sweep" / "report.md").read_text().lower()
