"""The PPJD folder: atomic appends, torn-line repair, no duplicates, shard rotation, the lock, the manifest."""

from __future__ import annotations

import json

import pytest

from perception_judge.core.schema import Failure, PPJDRecord
from perception_judge.ppjd.store import (
    FolderLocked,
    PPJDStore,
    iter_records,
    read_failures,
    read_manifest,
    shard_paths,
)


def _rec(i: int) -> PPJDRecord:
    return PPJDRecord(
        key=f"k{i:03d}",
        item_id=f"item{i}",
        source="test",
        question="q?",
        answer="1",
        r_c="\\boxed{1}",
        r_rp="\\boxed{2}",
        r_rp_r="\\boxed{3}",
        answer_rp="2",
        answer_rp_r="3",
        attributes=["a", "b", "c"],
    )


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_torn_tail_is_repaired_on_open(tmp_path):
    with PPJDStore(tmp_path) as store:
        for i in range(3):
            assert store.append_record(_rec(i))
        store.append_failure(Failure("f1", "item9", "validate", "rp_matches_gt"))
    shard = shard_paths(tmp_path)[0]
    with open(shard, "ab") as f:
        f.write(b'{"key": "k999", "item_id": "half a rec')  # what a kill -9 mid-write leaves
    with open(tmp_path / "failures.jsonl", "ab") as f:
        f.write(b'{"key": "f2", "sta')
    assert [r.key for r in iter_records(tmp_path)] == ["k000", "k001", "k002"]  # readers skip the torn tail
    with PPJDStore(tmp_path) as store:
        assert store.report.torn_lines_repaired == 2
        assert store.done == {"k000", "k001", "k002"} and set(store.failed) == {"f1"}
        assert shard.read_bytes().endswith(b"\n")
        assert store.append_record(_rec(3))
    lines = _lines(shard)
    assert [json.loads(x)["key"] for x in lines] == ["k000", "k001", "k002", "k003"]
    assert list(read_failures(tmp_path)) == ["f1"]


def test_done_keys_are_never_written_twice(tmp_path):
    with PPJDStore(tmp_path) as store:
        assert store.append_record(_rec(1))
        assert not store.append_record(_rec(1))
    with PPJDStore(tmp_path) as store:
        assert not store.append_record(_rec(1))
    # A duplicate line (e.g. copied shards) is ignored by readers and counted on open.
    shard = shard_paths(tmp_path)[0]
    shard.write_text(shard.read_text() * 2)
    assert len(list(iter_records(tmp_path))) == 1
    with PPJDStore(tmp_path) as store:
        assert store.report.duplicate_records == 1 and len(store.done) == 1


def test_shards_rotate_and_resume_in_the_last_one(tmp_path):
    with PPJDStore(tmp_path, shard_size=2) as store:
        for i in range(5):
            store.append_record(_rec(i))
    assert [len(_lines(p)) for p in shard_paths(tmp_path)] == [2, 2, 1]
    with PPJDStore(tmp_path, shard_size=2) as store:
        for i in range(5, 8):
            store.append_record(_rec(i))
        manifest = store.write_manifest()
    assert [len(_lines(p)) for p in shard_paths(tmp_path)] == [2, 2, 2, 2]
    assert [s["records"] for s in manifest["shards"]] == [2, 2, 2, 2]
    assert [r.key for r in iter_records(tmp_path)] == [f"k{i:03d}" for i in range(8)]


def test_failed_key_that_later_succeeds_counts_as_done(tmp_path):
    with PPJDStore(tmp_path) as store:
        store.append_failure(Failure("k001", "item1", "rewrite", "truncated"))
        assert store.counts()["failed"] == 1
        store.append_record(_rec(1))
        counts = store.counts()
    assert counts == {"records": 1, "failed": 0, "failed_by_reason": {}}
    with PPJDStore(tmp_path) as store:  # the failure line is history; the record wins
        assert "k001" in store.done and store.counts()["failed"] == 0


def test_one_writer_per_folder(tmp_path):
    with PPJDStore(tmp_path), pytest.raises(FolderLocked, match="another process"):
        PPJDStore(tmp_path).open()
    with PPJDStore(tmp_path):  # released on close
        pass


def _disk_full_after_half(monkeypatch, folder) -> None:
    """From now on every file opened for writing under ``folder`` takes half of what is written to it, then the
    disk is full (``builtins.open`` and ``io.open``, which ``Path.open`` calls)."""
    import builtins
    import errno
    import io

    real_open = io.open

    class Full:
        def __init__(self, f) -> None:
            self.f = f

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

    def opener(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return Full(f) if set(mode) & set("wax+") and str(folder) in str(file) else f

    monkeypatch.setattr(builtins, "open", opener)
    monkeypatch.setattr(io, "open", opener)


def test_manifest_is_written_atomically(tmp_path, monkeypatch):
    """A manifest write that fails part-way (the disk full after half its bytes) leaves the old manifest whole and
    no temporary file; written in place (``Path.write_text``) it would be cut in half."""
    with PPJDStore(tmp_path) as store:
        store.append_record(_rec(0))
        store.append_failure(Failure("x", "i", "load", "image_corrupt"))
        store.write_manifest(teacher="t")
        m = read_manifest(tmp_path)
        assert m["teacher"] == "t" and m["counts"]["records"] == 1
        assert m["counts"]["failed_by_reason"] == {"load/image_corrupt": 1}
        assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
        old = (tmp_path / "manifest.json").read_bytes()
        store.append_record(_rec(1))
        _disk_full_after_half(monkeypatch, tmp_path)
        with pytest.raises(OSError, match="No space left"):
            store.write_manifest(teacher="t2")
    monkeypatch.undo()
    assert (tmp_path / "manifest.json").read_bytes() == old
    assert read_manifest(tmp_path) == m
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_images_are_content_addressed(tmp_path):
    with PPJDStore(tmp_path) as store:
        rel, sha = store.put_image(b"\x89PNG fake bytes", "PNG")
        rel2, sha2 = store.put_image(b"\x89PNG fake bytes", "png")
    assert rel == rel2 == f"images/{sha}.png" and sha == sha2
    assert (tmp_path / rel).read_bytes() == b"\x89PNG fake bytes"
