"""Sources: field mapping, MMPR preset, parquet with image bytes, path safety, record keys."""

from __future__ import annotations

import base64
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from perception_judge import synth
from perception_judge.ppjd.sources import TableSource, item_key, open_source


def _png(color=(255, 0, 0), size=(16, 16)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def _jsonl(path, rows) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(_png())
    return tmp_path


def test_mmpr_preset_and_errors_stay_per_row(folder):
    rows = [
        {"image": "imgs/a.png", "question": "Q1", "answer_gt": "3", "chosen": "R1", "rejected": "x"},
        "{this is not json",
        {"image": "../escape.png", "question": "Q", "answer_gt": "1", "chosen": "R"},
        {"image": "/etc/hosts", "question": "Q", "answer_gt": "1", "chosen": "R"},
        {"question": "Q", "answer_gt": "1", "chosen": "R"},
        {"image": "https://example.com/x.png", "question": "Q", "answer_gt": "1", "chosen": "R"},
        {"image": ["imgs/a.png", "imgs/a.png"], "question": "Q", "answer_gt": "1", "chosen": "R"},
    ]
    _jsonl(folder / "mmpr_part.jsonl", rows)
    src = TableSource([folder / "mmpr_part.jsonl"], preset="mmpr", image_root=folder)
    items = list(src)
    assert len(items) == 7 and src.estimate_count() == 7
    good = items[0]
    assert (good.question, good.answer, good.response) == ("Q1", "3", "R1")
    assert good.image == str((folder / "imgs" / "a.png").resolve())
    assert good.meta["image_ref"] == "path:imgs/a.png" and good.item_id == "mmpr_part.jsonl:1"
    assert "invalid JSON" in items[1].meta["row_error"]
    assert items[2].meta["image_error"]["reason"] == "path_escapes_root"
    assert items[3].meta["image_error"]["reason"] == "path_escapes_root"
    assert items[4].meta["image_error"]["reason"] == "missing_field"
    assert items[5].meta["image_error"]["reason"] == "remote"
    assert items[6].meta["image_error"]["reason"] == "multiple_images"


def test_explicit_mapping_dotted_paths_and_candidates(folder):
    data_url = "data:image/png;base64," + base64.b64encode(_png((0, 0, 255))).decode()
    rows = [
        {"uid": "u1", "prompt": "Q", "label": "7", "out": {"text": "R"}, "img": data_url},
        {"uid": "u2", "prompt": "Q2", "label": "8", "out": {"text": "R2"}},
    ]
    _jsonl(folder / "x.jsonl", rows)
    src = TableSource([folder / "x.jsonl"], mapping={"response": "out.text"}, allow_text_only=True)
    a, b = list(src)
    assert (a.item_id, a.question, a.answer, a.response) == ("u1", "Q", "7", "R")
    assert isinstance(a.image, bytes) and a.meta["image_ref"].startswith("sha256:")
    assert b.image is None and "image_error" not in b.meta  # text-only allowed here
    with pytest.raises(ValueError, match="unknown fields"):
        TableSource([folder / "x.jsonl"], mapping={"picture": "img"})


def test_parquet_with_bytes_and_image_cells(tmp_path):
    table = pa.table(
        {
            "question": ["Q1", "Q2"],
            "answer": ["1", "2"],
            "response": ["R1", "R2"],
            "image": [{"bytes": _png(), "path": "a.png"}, {"bytes": _png((0, 255, 0)), "path": "b.png"}],
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    src = open_source([tmp_path])  # a folder of tables
    items = list(src)
    assert src.estimate_count() == 2 and [it.question for it in items] == ["Q1", "Q2"]
    assert all(isinstance(it.image, bytes) for it in items)
    assert items[0].meta["image_ref"] != items[1].meta["image_ref"]


def test_prefix_map(folder):
    (folder / "chart").mkdir()
    (folder / "chart" / "c.png").write_bytes(_png())
    _jsonl(
        folder / "chartqa_train.jsonl", [{"image": "c.png", "question": "Q", "answer": "1", "response": "R"}]
    )
    src = TableSource([folder / "chartqa_train.jsonl"], image_root=folder, prefix_map={"chartqa_": "chart"})
    (item,) = list(src)
    assert item.image == str((folder / "chart" / "c.png").resolve())
    _jsonl(folder / "other.jsonl", [{"image": "c.png"}])
    with pytest.raises(ValueError, match=r"other\.jsonl"):
        TableSource([folder / "other.jsonl"], image_root=folder, prefix_map={"chartqa_": "chart"})


def test_keys_are_content_hashes(folder):
    row = {"image": "imgs/a.png", "question": "Q", "answer": "1", "response": "R"}
    _jsonl(folder / "one.jsonl", [row, {**row, "response": "R2"}])
    _jsonl(folder / "two.jsonl", [{**row, "id": "other-id"}])
    a, b = list(TableSource([folder / "one.jsonl"], image_root=folder))
    (c,) = list(TableSource([folder / "two.jsonl"], image_root=folder))
    assert item_key(a) == item_key(c) != item_key(b)


def test_synth_folder_is_detected(tmp_path):
    synth.write_synthetic(tmp_path, 5, seed=0)
    src = open_source([tmp_path])
    items = list(src)
    assert src.name == "synthetic" and len(items) == 5
    assert all(it.spec and it.spec["family"] for it in items)
    assert sum(it.image is None for it in items) == sum(it.spec["family"] == "text" for it in items)


def test_missing_inputs_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_source([tmp_path / "nope.jsonl"])
    with pytest.raises(FileNotFoundError, match=r"no \.jsonl or \.parquet"):
        open_source([tmp_path])
