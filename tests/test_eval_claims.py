"""Many workers on one sweep: `eval sweep --claim` workers run each cell once, `eval collect` writes the same
results as one process, a killed worker's cell is taken over once its lease runs out, and claims never double."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from perception_judge.evaluation.claims import Claims, PlanMismatch

sys.path.insert(0, str(Path(__file__).parent))
from conftest import skip_or_fail
from test_eval_sweep import dummy_run

JUDGE = textwrap.dedent(
    """
    import os, time
    from perception_judge.evaluation.backends.scripted import format_scores

    def judge(req, sampling):
        with open(os.environ["CALLS_LOG"], "a") as f:
            f.write(f"{os.getpid()} {req.request_id} {sampling.seed}\\n")
        time.sleep(float(os.environ.get("JUDGE_SLEEP", "0")))
        return format_scores(req, [7])
    """
)


def _cmd(run_dir: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "perception_judge.cli", "eval", "sweep", str(run_dir), "--out", str(out),
            "--suites", "bias", "--seeds", "0,1", "--backend", "scripted", "--set", "backend.fn=claimjudge:judge",
            "--set", "bias.source=builtin", "--set", "bias.n_per_type=1", "-q", *extra]  # fmt: skip


def _env(tmp_path: Path, **kw: str) -> dict[str, str]:
    (tmp_path / "claimjudge.py").write_text(JUDGE)
    repo = Path(__file__).resolve().parents[1]
    return {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{repo}",
        "CALLS_LOG": str(tmp_path / "calls.log"),
        **kw,
    }


def _rows(out: Path) -> list:
    data = json.loads((out / "results.json").read_text())
    return [{k: v for k, v in r.items()} for r in data["rows"]]


def test_three_claim_workers_match_one_process_and_collect_is_stable(tmp_path):
    run_dir = dummy_run(tmp_path / "run", steps=(1, 2, 3), final=False)  # 4 models x 1 suite x 2 seeds
    env = _env(tmp_path, JUDGE_SLEEP="0.002")
    one = subprocess.run(
        _cmd(run_dir, tmp_path / "one"), env=env, capture_output=True, text=True, timeout=300
    )
    assert one.returncode == 0, one.stderr[-2000:]
    one_calls = Counter(line.split(" ", 1)[1] for line in (tmp_path / "calls.log").read_text().splitlines())
    (tmp_path / "calls.log").unlink()

    out = tmp_path / "many"
    workers = [subprocess.Popen(_cmd(run_dir, out, "--claim"), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(3)]  # fmt: skip
    for w in workers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-2000:]
    assert not (out / "results.json").exists()  # workers never write the tables
    calls = Counter(line.split(" ", 1)[1] for line in (tmp_path / "calls.log").read_text().splitlines())
    assert calls == one_calls  # the same judge calls as one process: every cell run once (4 models x 2 seeds)
    assert len({line.split()[0] for line in (tmp_path / "calls.log").read_text().splitlines()}) >= 2  # shared

    collect = [sys.executable, "-m", "perception_judge.cli", "eval", "collect", str(out)]
    first = subprocess.run(collect, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    assert _rows(out) == _rows(tmp_path / "one")
    before = (out / "results.json").read_bytes(), (out / "results.csv").read_bytes()
    again = subprocess.run(collect, env=env, capture_output=True, text=True, timeout=120)
    assert (
        again.returncode == 0
        and ((out / "results.json").read_bytes(), (out / "results.csv").read_bytes()) == before
    )
    assert not list((out / "claims").glob("*.claim")) and not list((out / "claims").glob(".clock-*"))

    other = subprocess.run(
        _cmd(run_dir, out, "--claim", "--seeds", "0"), env=env, capture_output=True, text=True
    )
    assert other.returncode != 0 and "another plan" in other.stderr


def test_a_killed_workers_cell_is_taken_over_and_collect_reports_progress(tmp_path):
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)  # 2 models x 2 seeds
    env = _env(tmp_path, JUDGE_SLEEP="0.05")
    out = tmp_path / "eval"
    slow = subprocess.Popen(_cmd(run_dir, out, "--claim", "--lease", "1"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    claims = out / "claims"
    deadline = time.time() + 60
    while time.time() < deadline and not list(claims.glob("*.claim")):
        time.sleep(0.01)
    time.sleep(0.3)
    os.kill(slow.pid, signal.SIGKILL)
    slow.wait(timeout=30)
    held = [p.name for p in claims.glob("*.claim")]
    assert held, "the worker should have died holding a claim"

    collect = [sys.executable, "-m", "perception_judge.cli", "eval", "collect", str(out), "--no-report"]
    partial = subprocess.run(collect, env=env, capture_output=True, text=True)
    assert partial.returncode == 1 and "missing" in partial.stderr and "claimed" in partial.stderr

    time.sleep(1.2)  # the dead worker's lease runs out
    rest = subprocess.run(
        _cmd(run_dir, out, "--claim", "--lease", "1"), env=env, capture_output=True, text=True
    )
    assert rest.returncode == 0, rest.stderr[-2000:]
    done = subprocess.run(collect, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "results.json").read_text())
    assert [c["status"] for c in data["cells"]] == ["done"] * 4
    assert not list(claims.glob("*.claim")) and not list(claims.glob("*.takeover"))
    assert not list(out.rglob(".*.tmp-*"))


def _claim_many(out: str, cells: list[str], q) -> None:
    c = Claims(out, lease_s=30)
    won = [cell for cell in cells if c.acquire(cell)]
    q.put(won)
    c._stop.set()  # keep the claims: the others must see them held


def test_four_processes_on_500_cells_never_claim_one_twice(tmp_path):
    cells = [f"m{i // 10}__bias__seed{i % 10}" for i in range(500)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(str(tmp_path), cells, q)) for _ in range(4)]
    for p in procs:
        p.start()
    won = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    flat = [c for w in won for c in w]
    assert sorted(flat) == sorted(cells)  # each cell claimed exactly once


def test_a_stale_claim_is_taken_over_by_exactly_one_worker(tmp_path):
    a, b, c = Claims(tmp_path, lease_s=0.5), Claims(tmp_path, lease_s=0.5), Claims(tmp_path, lease_s=0.5)
    try:
        assert a.acquire("x") and not b.acquire("x")
        a._stop.set()  # a dies: no more heartbeats
        time.sleep(0.8)
        assert [b.acquire("x"), c.acquire("x")].count(True) == 1
        with pytest.raises(PlanMismatch, match="another plan"):
            b.pin_plan({"suites": ["bias"]}) or c.pin_plan({"suites": ["perception"]})
    finally:
        for w in (a, b, c):
            w.close()


@pytest.mark.ray
def test_ray_workers_on_a_local_cluster_match_one_process(tmp_path):
    """`eval sweep --ray 2`: two Ray tasks run the --claim worker, the driver collects; the same cells and
    results as one process (a local Ray cluster on this machine's CPUs)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        skip_or_fail("ray", "ray is not installed (make test-ray installs it)")
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)  # 2 models x 2 seeds
    env = _env(tmp_path, JUDGE_SLEEP="0.002", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    one = subprocess.run(
        _cmd(run_dir, tmp_path / "one"), env=env, capture_output=True, text=True, timeout=300
    )
    assert one.returncode == 0, one.stderr[-2000:]
    one_calls = Counter(line.split(" ", 1)[1] for line in (tmp_path / "calls.log").read_text().splitlines())
    (tmp_path / "calls.log").unlink()
    out = tmp_path / "ray"
    ray_run = subprocess.run(
        _cmd(run_dir, out, "--ray", "2", "--ray-gpus", "0"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ray_run.returncode == 0, ray_run.stdout[-2000:] + ray_run.stderr[-3000:]
    assert "ray: 2 workers, exit codes [0, 0]" in ray_run.stdout
    calls = Counter(line.split(" ", 1)[1] for line in (tmp_path / "calls.log").read_text().splitlines())
    assert calls == one_calls  # every cell judged once, by the Ray tasks (not the driver)
    assert os.getpid() not in {
        int(line.split()[0]) for line in (tmp_path / "calls.log").read_text().splitlines()
    }
    assert _rows(out) == _rows(tmp_path / "one")
    assert not list((out / "claims").glob("*.claim"))


def test_ray_without_the_package_names_the_extra(tmp_path, monkeypatch, capsys):
    """Without ray installed, --ray stops before any cell with the install line (the default suite's check of
    the Ray path; the claim worker itself is what the --claim tests above run)."""
    import builtins

    from perception_judge.cli import main

    real_import = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)
    args = ["eval", "sweep", str(run_dir), "--out", str(tmp_path / "o"), "--suites", "bias",
            "--backend", "scripted", "--ray", "2", "-q"]  # fmt: skip
    assert main(args) == 2  # the entry point prints an ImportError as one line
    assert "perception-judge[ray]" in capsys.readouterr().err
    assert not (tmp_path / "o" / "cells").exists()
