"""`make demo`: the whole loop at toy scale; the settings guard that keeps two runs from mixing; the demo's shipped
configuration; the demo from an installed package, outside the checkout."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perception_judge.tiny.demo import FILES, DemoError, DemoOptions, check_or_claim, settings

ROOT = Path(__file__).resolve().parents[1]


def _args(**kw):
    base = {"n_items": 120, "seed": 0, "mix": "batch=1,pair=0.5,single=0.5"}
    return DemoOptions(**{**base, **kw})


def test_settings_guard_never_mixes_two_runs(tmp_path):
    out = tmp_path / "demo"
    assert check_or_claim(out, settings(_args()), fresh=False) == "fresh"
    (out / "stage-output").write_text("x")
    assert check_or_claim(out, settings(_args()), fresh=False) == "resume"
    with pytest.raises(DemoError, match="n_items: 120 -> 40"):
        check_or_claim(out, settings(_args(n_items=40)), fresh=False)
    assert (out / "stage-output").exists(), "a refused run touches nothing"
    assert check_or_claim(out, settings(_args(n_items=40)), fresh=True) == "fresh"
    assert not (out / "stage-output").exists(), "--fresh starts from an empty folder"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DemoError, match="not made by the demo"):
        check_or_claim(foreign, settings(_args()), fresh=False)


def test_demo_refuses_an_unknown_family_before_any_stage(tmp_path):
    out = tmp_path / "demo"
    cmd = [sys.executable, "-m", "perception_judge.cli", "demo", "--out", str(out), "--families", "colour,shape"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown tiny families ['shape']" in proc.stderr, proc.stderr[-2000:]
    assert not out.exists(), "nothing is written"


def test_settings_record_the_families(tmp_path):
    from perception_judge.tiny.world import tiny_families

    out = tmp_path / "demo"
    assert settings(_args())["families"] == "colour", "the demo's default world: coloured shapes"
    check_or_claim(out, settings(_args()), fresh=False)
    (out / "stage-output").write_text("x")
    with pytest.raises(DemoError, match="families: 'colour' -> 'colour,count'"):
        check_or_claim(out, settings(_args(families=tiny_families("colour,count"))), fresh=False)


def _wilson95(p: float, n: int) -> list[float]:
    """The Wilson score interval (95%) of a proportion ``p`` of ``n``, written out here."""
    z2 = 1.959964**2
    centre, half = (p + z2 / (2 * n)), 1.959964 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return [(centre - half) / (1 + z2 / n), (centre + half) / (1 + z2 / n)]


def test_demo_end_to_end_then_resume(tmp_path):
    out = tmp_path / "demo"
    cmd = [
        sys.executable, "-m", "perception_judge.cli", "demo", "--out", str(out), "--n-items", "60",
        "--train-steps", "4", "--warm-start-steps", "40", "--learnability-steps", "0",
    ]  # fmt: skip
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "demo finished" in first.stdout
    assert json.loads((out / "synth" / "synth_info.json").read_text())["families"] == ["colour"]
    for path in [
        "eval/report.md",
        "eval/report.json",
        "eval/results.csv",
        "train/README.md",
        "trainset/train.parquet",
    ]:
        assert (out / path).is_file(), path
    assert sorted(p.name for p in (out / "eval" / "plots").glob("*.png")), "plots written"
    rows = list(csv.DictReader((out / "eval" / "results.csv").open()))
    models = {r["model"] for r in rows}
    assert {"base", "final"} <= models and any(m.startswith("checkpoint-") for m in models)
    # the numbers come from the run: the format-warm-started judge writes parseable verdicts
    warm = json.loads((out / "tiny-model" / "tiny_model.json").read_text())["warm_start"]
    assert warm["warm_start_steps"] > 0
    report = json.loads((out / "eval" / "report.json").read_text())
    assert report["summary"]["best_checkpoint"] in models
    fails = [
        float(r["mean"]) for r in rows if r["suite"] == "perception" and r["metric"] == "pair_parse_fail_rate"
    ]
    assert fails and max(fails) < 0.5, fails
    # the learning summary: every model with held-out accuracy, its interval, ties, parse failures and the control
    summary = json.loads((out / "summary.json").read_text())
    names = [m["name"] for m in summary["models"]]
    assert names[0] == "base" and summary["models"][0]["step"] is None and summary["last"] in names
    held_out = json.loads((out / "trainset" / "export_info.json").read_text())["records"]["validation"]
    for m in summary["models"]:
        for key in ("c_vs_rp", "c_vs_rpr", "c_vs_rp_mismatched"):
            block = m[key]
            n, acc = block["n"], block["accuracy"]
            assert n == 2 * held_out and block["chance"] == 0.5, (n, held_out)  # each pair in both orders
            ties, fails = block["ties"] * n, block["parse_failures"] * n  # whole counts behind the rates
            correct = (acc - block["ties"] / 2) * n  # ties count 1/2: accuracy = (correct + ties / 2) / n
            assert all(abs(c - round(c)) < 1e-9 for c in (correct, ties, fails)), (m["name"], key, block)
            assert round(correct) >= 0 and round(correct + ties + fails) <= n, (m["name"], key, block)
            assert block["ci95"] == pytest.approx(_wilson95(acc, n)), (m["name"], key, block)
    # GRPO ran on two processes: each wrote its rank file with the world size and the run's four steps
    ranks = [json.loads((out / "train" / "ranks" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["world_size"], r["global_step"]) for r in ranks] == [(0, 2, 4), (1, 2, 4)], ranks
    assert (
        ranks[0]["prompts"] == ranks[1]["prompts"] > 0 and ranks[0]["rollouts"] == ranks[1]["rollouts"] == 4
    )
    assert sorted(p.name for p in (out / "train" / "ranks").iterdir()) == ["rank-0.json", "rank-1.json"]
    assert json.loads((out / "train" / "perception_judge_run.json").read_text())["world_size"] == 2
    times = summary["timings"]  # each stage's wall and CPU seconds, also the demo's last lines
    assert {"synth", "ppjd", "export", "grpo", "sweep"} <= set(times), times
    assert all(t["wall_s"] > 0 and t["cpu_s"] > 0 for t in times.values()), times
    assert "time per stage, wall/CPU s: synth" in first.stdout
    assert (out / "eval" / "plots" / "learning_curve.png").is_file()
    assert "Does the judge learn to look?" in (out / "eval" / "report.md").read_text()
    # a re-run resumes: every stage is skipped or finds its work done
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "training: finished before, skipped" in again.stdout
    assert "0 run," in again.stdout and "already done" in again.stdout


def test_the_shipped_demo_files_are_the_checkouts():
    """The recipe, accelerate and eval configurations the demo runs ship in the package (``tiny/demo_files/``, at the
    checkout's relative paths); the checkout's copies are the same bytes, so the two cannot drift."""
    shipped = sorted(p.relative_to(FILES) for p in FILES.rglob("*") if p.is_file())
    assert [str(p) for p in shipped] == [
        "configs/accelerate/cpu_2proc.yaml",
        "eval/configs/tiny.yaml",
        "recipes/tiny_demo.yaml",
    ]
    for rel in shipped:
        assert (FILES / rel).read_bytes() == (ROOT / rel).read_bytes(), f"{rel}: the package copy differs"


@pytest.mark.slow
def test_demo_runs_from_an_installed_package_outside_the_checkout(tmp_path):
    """``pip install --target`` of the package (its data included), then ``perception-judge demo`` with its smallest
    settings from an empty folder with only the installed copy on the path: every stage, training included, runs
    from the package."""
    src, site, work = tmp_path / "src", tmp_path / "site", tmp_path / "work"
    shutil.copytree(
        ROOT / "perception_judge", src / "perception_judge", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    built = subprocess.run(
        [*pip, "--target", str(site), str(src)], capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (site / "perception_judge" / "tiny" / "demo_files" / "recipes" / "tiny_demo.yaml").is_file()
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    which = [sys.executable, "-c", "import perception_judge; print(perception_judge.__file__)"]
    where = subprocess.run(which, cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(site), where
    cmd = [sys.executable, "-m", "perception_judge.cli", "demo", "--n-items", "40", "--train-steps", "1",
           "--warm-start-steps", "0", "--learnability-steps", "0"]  # fmt: skip
    run = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "demo finished" in run.stdout and f"{site}/perception_judge/tiny/demo_files" in run.stdout
    out = work / "runs" / "demo"
    for path in [
        "summary.json",
        "eval/report.md",
        "train/perception_judge_run.json",
        "trainset/train.parquet",
    ]:
        assert (out / path).is_file(), path
