"""A PPJD build split into parts (build-ppjd --num-parts N --part I, run at the same time) and merged by export gives
tables byte-identical to one build and export of the same source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perception_judge import synth
from perception_judge.cli import main
from perception_judge.ppjd.partition import PartitionError, part_dir, part_of, resolve_part
from perception_judge.ppjd.store import iter_records

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    synth.write_synthetic(d, 60, seed=5)
    return d


def _build(source: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "perception_judge.cli", "build-ppjd", "--input", str(source), "--out", str(out),
           "--teacher", "programmatic", "--no-progress", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _tables(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.parquet"))}


def test_three_parts_at_once_merge_to_the_one_machine_export(source, tmp_path, capsys):
    one = tmp_path / "one"
    assert _build(source, one).wait() == 0
    assert main(["export", str(one), "--out", str(tmp_path / "t-one"), "--mix", "batch=1,pair=1"]) == 0

    split = tmp_path / "split"
    procs = [_build(source, split, "--num-parts", "3", "--part", str(i)) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    keys = [{r.key for r in iter_records(part_dir(split, i, 3))} for i in range(3)]
    assert all(keys) and not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    assert set().union(*keys) == {r.key for r in iter_records(one)}
    assert all(part_of(k, 3) == i for i, ks in enumerate(keys) for k in ks)
    info = json.loads((split / "partition.json").read_text())
    assert info["num_parts"] == 3 and info["scheme"] == "int(key, 16) % num_parts"

    assert main(["export", str(split), "--out", str(tmp_path / "t-split"), "--mix", "batch=1,pair=1"]) == 0
    ref, got = _tables(tmp_path / "t-one"), _tables(tmp_path / "t-split")
    assert ref and got == ref  # byte-identical tables

    # a part started with another N is refused, naming what differs
    capsys.readouterr()
    assert main(["build-ppjd", "--input", str(source), "--out", str(split), "--teacher", "programmatic",
                 "--num-parts", "2", "--part", "0", "--no-progress"]) == 2  # fmt: skip
    assert "num_parts" in capsys.readouterr().err

    # a missing part is refused by name; --allow-incomplete exports what is there and records it
    shutil.rmtree(part_dir(split, 1, 3))
    assert main(["export", str(split), "--out", str(tmp_path / "t-x")]) == 2
    assert "missing: part-00001-of-00003" in capsys.readouterr().err
    assert main(["export", str(split), "--out", str(tmp_path / "t-x"), "--allow-incomplete"]) == 0
    exported = json.loads((tmp_path / "t-x" / "export_info.json").read_text())
    assert exported["partition"]["missing"] == ["part-00001-of-00003"]


def test_the_part_index_defaults_to_the_slurm_array_task():
    assert resolve_part(None, 4, {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5"}) == 2
    assert resolve_part(3, 4, {}) == 3
    with pytest.raises(PartitionError, match="--part"):
        resolve_part(None, 4, {})
    with pytest.raises(PartitionError, match=r"0\.\.3"):
        resolve_part(4, 4, {})
    assert part_of("ff", 4) == 3 and part_of("10", 4) == 0


def _table_source(folder: Path) -> Path:
    """A jsonl table of 36 synthetic items with 6 duplicated rows (same content, other line) and 2 bad rows."""
    synth.write_synthetic(folder, 36, seed=11)
    items = [json.loads(x) for x in (folder / "items.jsonl").read_text().splitlines()]
    rows = [
        {
            "image": it["image"],
            "question": it["question"],
            "answer_gt": it["answer"],
            "chosen": it["response"],
        }
        for it in items
    ]
    rows += rows[:6]  # duplicates: one content key, built once, always in one part
    rows.append({**rows[0], "chosen": ""})  # bad: no response
    rows.append({**rows[1], "image": "images/missing.png"})  # bad: the image does not exist
    path = folder / "table.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _fast_retries(folder: Path) -> Path:
    path = folder / "fast-retries.yaml"
    path.write_text("teacher:\n  backoff_base_s: 0.005\n  backoff_max_s: 0.02\n")
    return path


def _llm_build(table: Path, out: Path, url: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "perception_judge.cli", "build-ppjd", "--input", str(table), "--source", "mmpr",
           "--out", str(out), "--teacher", "llm", "--base-url", url, "--model", "fake-teacher", "--concurrency", "2",
           "--config", str(_fast_retries(out.parent)), "--no-progress", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _failures(folders: list[Path]) -> dict[str, tuple[str, str]]:
    from perception_judge.ppjd.store import read_failures

    return {k: (f["stage"], f["reason"]) for d in folders for k, f in read_failures(d).items()}


def test_a_part_killed_with_sigkill_and_rerun_gives_the_one_machine_result(tmp_path):
    """Three parts at once against a teacher server with transient faults (429 / 500), over a source with
    duplicates and bad rows; part 1 is killed with SIGKILL mid-build and re-run: the merged export is
    byte-identical to one build and export, with the same record keys and the same failures."""
    import signal
    import time

    from support.fake_openai import FakeOpenAIServer, Faults

    table = _table_source(tmp_path / "src")
    with FakeOpenAIServer(latency_s=0.03, faults=Faults(rate_429=0.1, rate_500=0.1), seed=2) as srv:
        one = tmp_path / "one"
        ref = _llm_build(table, one, srv.base_url)
        _, err = ref.communicate(timeout=300)
        assert ref.returncode == 0, err[-2000:]

        split = tmp_path / "split"
        procs = [
            _llm_build(table, split, srv.base_url, "--num-parts", "3", "--part", str(i)) for i in range(3)
        ]
        victim = part_dir(split, 1, 3)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and procs[1].poll() is None:
            shards = list(victim.glob("records-*.jsonl")) if victim.exists() else []
            if sum(p.read_bytes().count(b"\n") for p in shards) >= 2:
                break
            time.sleep(0.01)
        assert procs[1].poll() is None, "part 1 finished before it could be killed"
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(timeout=30)
        for i in (0, 2):
            _, err = procs[i].communicate(timeout=300)
            assert procs[i].returncode == 0, err[-2000:]
        # the killed part is unfinished: export refuses it by name
        assert main(["export", str(split), "--out", str(tmp_path / "t-early")]) == 2
        rerun = _llm_build(table, split, srv.base_url, "--num-parts", "3", "--part", "1")
        _, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err[-2000:]

    parts = [part_dir(split, i, 3) for i in range(3)]
    keys = [[r.key for r in iter_records(p)] for p in parts]
    assert all(len(k) == len(set(k)) for k in keys), "a record written twice after the kill"
    assert set().union(*map(set, keys)) == {r.key for r in iter_records(one)}
    assert sum(map(len, keys)) == len({r.key for r in iter_records(one)})  # duplicated rows built once
    failures = _failures([one])
    assert _failures(parts) == failures
    assert ("precheck", "missing_fields") in failures.values() and (
        "load",
        "image_missing",
    ) in failures.values()
    assert main(["export", str(one), "--out", str(tmp_path / "t-one")]) == 0
    assert main(["export", str(split), "--out", str(tmp_path / "t-split")]) == 0
    ref_tables, got = _tables(tmp_path / "t-one"), _tables(tmp_path / "t-split")
    assert ref_tables and got == ref_tables
