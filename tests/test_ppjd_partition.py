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
