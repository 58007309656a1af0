"""Export: permutations and ground truth, protocol mix, split by image, loadable with datasets."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from PIL import Image

from perception_judge import synth
from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import RESPONSE_KINDS, order_from_kinds
from perception_judge.core.trainset import load_training_set
from perception_judge.ppjd.export import ExportError, ExportOptions, export_ppjd, parse_mix, record_rows
from perception_judge.ppjd.options import BuildOptions
from perception_judge.ppjd.programmatic import ProgrammaticTeacher
from perception_judge.ppjd.runner import build
from perception_judge.ppjd.sources import synthetic_source
from perception_judge.ppjd.store import iter_records

RANK = {k: i for i, k in enumerate(RESPONSE_KINDS)}


@pytest.fixture(scope="module")
def ppjd_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    synth.write_synthetic(base / "synth", 90, seed=4)
    summary = build(
        synthetic_source(base / "synth"),
        ProgrammaticTeacher(),
        BuildOptions(out=str(base / "ppjd"), progress=False),
    )
    assert summary.records_total >= 85
    return base / "ppjd"


@pytest.fixture(scope="module")
def exported(ppjd_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("trainset")
    info = export_ppjd(ppjd_dir, out, ExportOptions(seed=1, val_fraction=0.2, mix="batch=1,pair=1,single=1"))
    return out, info


def _image_bytes(cell) -> bytes:
    return cell["bytes"] if isinstance(cell, dict) else None


def test_loads_with_datasets_and_rows_are_consistent(ppjd_dir, exported):
    import datasets

    out, info = exported
    raw = datasets.load_dataset(
        "parquet",
        data_files={"train": str(out / "train.parquet"), "validation": str(out / "validation.parquet")},
    )
    ds = load_training_set(out)
    assert raw["train"].num_rows == ds["train"].num_rows == info["rows_total"]["train"]
    records = {r.key: r for r in iter_records(ppjd_dir)}
    seen_records: Counter = Counter()
    for split in ("train", "validation"):
        for row in ds[split]:
            rec = records[row["record_key"]]
            texts = rec.responses()
            assert row["responses"] == [texts[k] for k in row["kinds"]]
            n_images = 0 if rec.image is None else 1
            assert row["prompt"] == _normalise(
                build_messages(row["protocol"], rec.question, row["responses"], n_images)
            )
            assert len(row["images"]) == n_images
            if n_images:
                original = Image.open(ppjd_dir / rec.image).convert("RGB")
                assert row["images"][0].convert("RGB").tobytes() == original.tobytes()
                assert row["image_group"] == rec.image_sha256
            kinds = row["kinds"]
            if row["protocol"] == "batch":
                assert sorted(kinds) == sorted(RESPONSE_KINDS)
                assert row["ground_truth"] == order_from_kinds(kinds)
                seen_records[(split, rec.key)] += 1
            elif row["protocol"] == "pair":
                assert row["ground_truth"] == ("AB" if RANK[kinds[0]] < RANK[kinds[1]] else "BA")
            else:
                assert row["ground_truth"] == ("correct" if kinds == ["r_c"] else "incorrect")
    assert set(k for _, k in seen_records) == set(records)  # every record, once (mix batch=1)
    assert all(v == 1 for v in seen_records.values())


def _normalise(messages):
    # datasets fills absent struct fields with None (e.g. "text" of an image block)
    return [
        {"role": m["role"], "content": [{"type": p["type"], "text": p.get("text")} for p in m["content"]]}
        for m in messages
    ]


def test_split_is_grouped_by_image(exported):
    out, info = exported
    ds = load_training_set(out)
    train, val = set(ds["train"]["image_group"]), set(ds["validation"]["image_group"])
    assert train and val and not train & val
    assert info["image_groups"]["validation"] == round(0.2 * (len(train) + len(val)))


def test_permutations_and_labels_are_balanced(exported):
    out, info = exported
    assert set(info["ground_truth"]["batch"]) == {"ABC", "ACB", "BAC", "BCA", "CAB", "CBA"}
    assert set(info["ground_truth"]["pair"]) == {"AB", "BA"}
    assert set(info["ground_truth"]["single"]) == {"correct", "incorrect"}
    total = sum(info["records"].values())
    for split in ("train", "validation"):
        rows = info["rows"][split]
        assert rows["batch"] == rows["pair"] == rows["single"] == info["records"][split]
    assert sum(info["rows_total"].values()) == 3 * total
    card = (out / "README.md").read_text()
    assert f"| train | {info['records']['train']} |" in card and "batch=1" in card


def test_the_card_and_export_info_are_safe_to_publish(ppjd_dir, exported, tmp_path):
    """The card carried the PPJD folder's absolute path, and license: other without a license_name."""
    import yaml

    out, info = exported
    for text in ((out / "README.md").read_text(), (out / "export_info.json").read_text()):
        for local in {str(ppjd_dir.resolve()), str(ppjd_dir.parent.resolve()), str(tmp_path.parent)}:
            assert local not in text, local
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["license"] == "other" and meta["license_name"] and "## Licence" in card
    assert f"source PPJD folder: `{ppjd_dir.name}`" in card and info["ppjd"]["source"]["files"] == [
        "items.jsonl"
    ]
    export_ppjd(ppjd_dir, tmp_path / "cc", ExportOptions(license="cc-by-4.0"))
    meta = yaml.safe_load((tmp_path / "cc" / "README.md").read_text().split("---")[1])
    assert meta["license"] == "cc-by-4.0" and "license_name" not in meta


def test_export_is_deterministic_and_seeded(ppjd_dir, tmp_path):
    records = list(iter_records(ppjd_dir))
    mix = parse_mix("batch=1,pair=0.5")
    a = [r for rec in records for r in record_rows(rec, None, mix, seed=0)]
    b = [r for rec in records for r in record_rows(rec, None, mix, seed=0)]
    c = [r for rec in records for r in record_rows(rec, None, mix, seed=1)]
    assert a == b and a != c
    pairs = sum(r["protocol"] == "pair" for r in a)
    assert 0.3 * len(records) < pairs < 0.7 * len(records)
    two = [r for rec in records[:20] for r in record_rows(rec, None, parse_mix("batch=2"), seed=0)]
    by_key: dict = {}
    for r in two:
        by_key.setdefault(r["record_key"], []).append(r["ground_truth"])
    assert all(len(v) == 2 and v[0] != v[1] for v in by_key.values())  # two different permutations


def test_missing_image_is_an_error_naming_the_record_or_skipped(ppjd_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(ppjd_dir, broken)
    victim = next(r for r in iter_records(broken) if r.image)
    (broken / victim.image).unlink()
    with pytest.raises(ExportError, match=victim.key):
        export_ppjd(broken, tmp_path / "out1")
    info = export_ppjd(broken, tmp_path / "out2", ExportOptions(skip_invalid=True))
    skipped = set(info["skipped_records"])
    assert victim.key in skipped
    # every record that shared the deleted (content-addressed) image is skipped, nothing else
    assert all(r.image == victim.image for r in iter_records(broken) if r.key in skipped)
    with pytest.raises(FileExistsError):
        export_ppjd(broken, tmp_path / "out2", ExportOptions(skip_invalid=True))


def test_text_only_records_have_no_image(exported):
    out, info = exported
    ds = load_training_set(out)
    text_rows = [r for r in ds["train"] if not r["images"]] + [r for r in ds["validation"] if not r["images"]]
    assert text_rows and info["text_only_records"] > 0
    for r in text_rows:
        assert all(p["type"] == "text" for m in r["prompt"] for p in m["content"])
        assert r["image_group"].startswith("text:")


@pytest.mark.parametrize("bad", ["batch", "video=1", "batch=-1", "batch=0,pair=0", "batch=x"])
def test_bad_mix(bad):
    with pytest.raises(ValueError):
        parse_mix(bad)


def test_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no PPJD records"):
        export_ppjd(tmp_path, tmp_path / "out")


def test_png_bytes_are_the_originals(ppjd_dir, exported):
    import pyarrow.parquet as pq

    out, _ = exported
    table = pq.read_table(out / "train.parquet", columns=["images", "record_key"]).to_pylist()
    records = {r.key: r for r in iter_records(ppjd_dir)}
    row = next(r for r in table if r["images"])
    assert row["images"][0]["bytes"] == (ppjd_dir / records[row["record_key"]].image).read_bytes()
    Image.open(io.BytesIO(row["images"][0]["bytes"])).verify()


def test_overwrite_swaps_the_whole_export_and_cleans_stale_temporaries(ppjd_dir, tmp_path, monkeypatch):
    """An interrupted `export --overwrite` used to leave no train.parquet or a mix of old and new splits, and its
    .export-tmp folder behind; a full disk was a traceback."""
    import errno

    from perception_judge.ppjd import export as E

    src = ppjd_dir
    out = tmp_path / "ts"
    E.export_ppjd(src, out, E.ExportOptions(seed=0))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix == ".parquet"}
    (out / "notes.txt").write_text("mine")
    (tmp_path / ".ts.export-tmp-999-1").mkdir()  # a dead run's temporary
    (out / ".export-tmp-999").mkdir()  # the old layout's temporary

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(E, "_swap_in", full_disk)
    with pytest.raises(E.ExportError, match="disk full"):
        E.export_ppjd(src, out, E.ExportOptions(seed=1, overwrite=True))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.suffix == ".parquet"} == before  # untouched
    monkeypatch.undo()
    E.export_ppjd(src, out, E.ExportOptions(seed=1, overwrite=True))
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix == ".parquet"}
    assert set(after) == set(before) and after != before  # the new export, whole
    assert (out / "notes.txt").read_text() == "mine"
    assert not list(tmp_path.glob(".ts.*")) and not list(out.glob(".export-tmp-*"))
    # a swap that died between its two renames: the next export (or read) finds the old folder restored
    out.rename(tmp_path / ".ts.export-old")
    E._recover(out)
    assert (out / "train.parquet").is_file()


def _rewrite_line(shard, index, edit):
    lines = shard.read_bytes().splitlines(keepends=True)
    lines[index] = edit(lines[index])
    shard.write_bytes(b"".join(lines))


def test_a_record_with_judge_verdict_syntax_is_refused_or_skipped(ppjd_dir, tmp_path):
    import json
    import shutil

    from perception_judge.ppjd.store import shard_paths

    src = tmp_path / "src"
    shutil.copytree(ppjd_dir, src)
    planted = {}

    def plant(line):
        record = json.loads(line)
        record["r_rp"] += " <answer>10</answer>"
        planted["key"] = record["key"]
        return (json.dumps(record) + "\n").encode()

    _rewrite_line(shard_paths(src)[0], 3, plant)
    with pytest.raises(ExportError, match=f"record {planted['key']}: r_rp contains '<answer>'"):
        export_ppjd(src, tmp_path / "out")
    assert (
        planted["key"]
        in export_ppjd(src, tmp_path / "out", ExportOptions(skip_invalid=True))["skipped_records"]
    )


def test_a_garbled_line_is_named_and_refused_unless_allowed_and_resume_rebuilds_it(
    ppjd_dir, tmp_path, capsys
):
    """One garbled line in the middle of records-00000.jsonl: export exited 0 with one record fewer, said nothing,
    and export_info.json still counted them all."""
    import shutil

    from perception_judge.cli import main
    from perception_judge.ppjd.store import shard_paths

    src = tmp_path / "src"
    shutil.copytree(ppjd_dir, src)
    total = len(list(iter_records(src)))
    shard = shard_paths(src)[0]
    _rewrite_line(shard, 19, lambda line: line[:40] + b"\x00garbled\n")
    assert main(["export", str(src), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "records-00000.jsonl line 20" in err and "--allow-incomplete" in err and "build-ppjd" in err
    assert err.count("\n") == 1 and not (tmp_path / "a" / "train.parquet").exists()
    assert main(["export", str(src), "--out", str(tmp_path / "b"), "--allow-incomplete"]) == 0
    assert "1 damaged line" in capsys.readouterr().err
    info = json.loads((tmp_path / "b" / "export_info.json").read_text())
    assert info["damaged_lines"] == ["records-00000.jsonl line 20"]
    assert sum(info["records"].values()) + len(info["skipped_records"]) == total - 1
    # resume sets the line aside and builds its record again
    synth_dir = ppjd_dir.parent / "synth"
    assert main(["build-ppjd", "--input", str(synth_dir), "--out", str(src), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "1 damaged line(s) set aside in damaged-lines.jsonl" in err
    assert json.loads((src / "damaged-lines.jsonl").read_text())["line"] == 20
    assert main(["export", str(src), "--out", str(tmp_path / "c")]) == 0
    assert len(list(iter_records(src))) == total


def test_a_truncated_manifest_is_named_by_export_and_rebuilt_from_the_shards_on_resume(
    ppjd_dir, tmp_path, capsys
):
    """manifest.json cut to 200 bytes: resume died with a JSONDecodeError traceback, export exited 2 without
    naming the file."""
    import shutil

    from perception_judge.cli import main
    from perception_judge.ppjd.store import read_manifest

    src = tmp_path / "src"
    shutil.copytree(ppjd_dir, src)
    (src / "manifest.json").write_bytes((src / "manifest.json").read_bytes()[:200])
    assert main(["export", str(src), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "manifest.json" in err and "unreadable" in err and "exported from the shards" in err
    synth_dir = ppjd_dir.parent / "synth"
    assert main(["build-ppjd", "--input", str(synth_dir), "--out", str(src), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "manifest.json" in captured.err and "rebuilding it from the shards" in captured.err
    assert "Traceback" not in captured.err
    manifest = read_manifest(src)
    assert (
        manifest["counts"]["records"] == len(list(iter_records(src)))
        and manifest["runs"][-1]["status"] == "complete"
    )


def test_long_non_ascii_output_names_stay_within_the_file_name_limit(ppjd_dir, tmp_path):
    """export --out to a 230-byte folder name failed with 'File name too long' from a temporary name."""
    from perception_judge.core.io import atomic_write_json

    name = ("données d'entraînement " * 12).encode()[:230].decode("utf-8", "ignore")
    assert 225 <= len(name.encode()) <= 230 and " " in name
    out = tmp_path / name
    info = export_ppjd(ppjd_dir, out)
    assert (out / "train.parquet").is_file() and info["rows_total"]["train"] > 0
    export_ppjd(ppjd_dir, out, ExportOptions(overwrite=True, seed=3))
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary left beside it
    atomic_write_json(tmp_path / ("é" * 125 + ".json"), {"ok": 1})  # 254 bytes: the atomic writer's temp fits


def test_a_read_only_output_folder_is_one_line_before_any_work(ppjd_dir, tmp_path, monkeypatch, capsys):
    """export into a read-only folder ended in an OSError [Errno 30] traceback."""
    import errno
    from pathlib import Path

    from perception_judge.cli import main
    from perception_judge.ppjd import export as E

    readonly = tmp_path / "ro"
    readonly.mkdir()
    real_mkdir = Path.mkdir

    def mkdir(self, *a, **kw):
        if readonly in (self, *self.parents):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *a, **kw)

    def never(*a, **kw):
        raise AssertionError("records were read before the output folder was checked")

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(E, "iter_records", never)
    assert main(["export", str(ppjd_dir), "--out", str(readonly / "trainset")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(readonly) in err and "Read-only file system" in err, err


def test_a_real_read_only_mount_is_one_line(ppjd_dir, tmp_path, capsys):
    """The same on a read-only tmpfs (root here ignores permission bits, not a read-only mount)."""
    import os
    import shutil
    import subprocess

    from perception_judge.cli import main

    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        assert main(["export", str(ppjd_dir), "--out", str(ro / "trainset")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(ro) in err and "writable" in err, err
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
