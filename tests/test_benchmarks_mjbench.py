"""MJ-Bench suite: two images per request, both image orders, accuracy with and without ties.

Colour judge: red 8, blue 3, green 5, gray → parse failure, white → 9 in the first slot / 1 in the second.

alignment: (red, blue, 0) ✓✓ | (blue, red, 1) ✓✓ | (red, blue, 1) ✗✗ | (green, green, 0) tie, tie |
           label 2 → skipped.   with tie 2/4 per order; without tie 2/3 per order.
safety:    (red, blue, 0) ✓✓ | (gray, red, 1) fail, fail.   with tie 1/2; without tie 1/1.
quality:   (white, blue, 1) orig A ✗, swapped → B ✓ | (red, blue, 0) ✓✓.   with tie (1/2 + 2/2)/2;
           without tie (1/2 + 2/2)/2.
"""

from __future__ import annotations

import pytest
from benchmark_fixtures import MJ, backend, color_judge, config, mj_rows, recording, write_mjbench_disk

from perception_judge.evaluation.benchmarks.common import BenchmarkDataError, BenchmarkFileMissing
from perception_judge.evaluation.benchmarks.mjbench import SUITE as run
from perception_judge.evaluation.benchmarks.mjbench import parse_label

approx = pytest.approx


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    return write_mjbench_disk(tmp_path_factory.mktemp("mj") / "mjbench")


def test_splits_with_and_without_tie(disk, tmp_path):
    judge = recording(color_judge)
    seen = judge.seen

    res = run(backend(judge), config(tmp_path, data_dir=str(disk), aggregation="all"))
    m = res.metrics
    assert m["mean.alignment.acc_with_tie"] == approx(2 / 4)
    assert m["mean.alignment.acc_without_tie"] == approx(2 / 3)
    assert m["mean.safety.acc_with_tie"] == approx(1 / 2)
    assert m["mean.safety.acc_without_tie"] == approx(1.0)
    assert m["mean.quality.acc_with_tie"] == approx((1 / 2 + 1) / 2)
    assert m["mean.quality.acc_without_tie"] == approx((1 / 2 + 1) / 2)
    assert m["mean.avg.acc_with_tie"] == approx((1 / 2 + 1 / 2 + 3 / 4) / 3)
    assert m["mean.avg.acc_without_tie"] == approx((2 / 3 + 1 + 3 / 4) / 3)
    assert m["safety.parse_failure_rate"] == approx(2 / 4)
    assert m["alignment.pred_tie_rate"] == approx(2 / 8)
    # vote over the two orders: quality item 1 gets A + B = C
    assert m["vote.alignment.acc_with_tie"] == approx(2 / 4)
    assert m["vote.alignment.acc_without_tie"] == approx(2 / 3)
    assert m["vote.quality.acc_with_tie"] == approx(1 / 2)
    assert m["vote.quality.acc_without_tie"] == approx(1.0)
    assert m["vote.safety.acc_without_tie"] == approx(1.0)
    assert res.counts["alignment.skipped_no_gt"] == 1
    assert res.counts["alignment.items"] == 4
    # two image placeholders and two images per request; the swapped request has the images reversed
    req = seen[0]
    user = req.messages[1]["content"]
    assert [p["type"] for p in user] == ["image", "image", "text"] and len(req.images) == 2
    assert "a alignment prompt 0" in user[-1]["text"]
    orig, swap = seen[0], seen[1]
    assert orig.images[0].getpixel((0, 0)) == swap.images[1].getpixel((0, 0)) == (255, 0, 0)


def test_parquet_files_default_label_and_image_size(tmp_path):
    from datasets import Dataset

    for split in MJ:
        Dataset.from_list(mj_rows(split, with_label=False)).to_parquet(str(tmp_path / f"{split}.parquet"))
    with pytest.raises(BenchmarkDataError, match=r"alignment\.parquet.*default_label"):
        run(backend(color_judge), config(tmp_path / "o", data_dir=str(tmp_path)))
    sizes = set()

    def judge(req, sampling):
        sizes.update(im.size for im in req.images)
        return color_judge(req, sampling)

    res = run(
        backend(judge),
        config(tmp_path / "o", data_dir=str(tmp_path), splits="alignment", default_label=0, image_size=336),
    )
    # every label is 0 now: (red, blue) ✓✓ ×2, (blue, red) ✗✗, (green, green) tie
    assert res.metrics["mean.alignment.acc_with_tie"] == approx(3 / 5)
    assert res.counts["alignment.items"] == 5
    assert sizes == {(336, 336)}
    assert "warning" in res.protocol["images"]  # the default backend policy would resize again


def test_missing_split_is_named(disk, tmp_path):
    with pytest.raises(BenchmarkFileMissing, match="split 'bias'"):
        run(backend(color_judge), config(tmp_path, data_dir=str(disk), splits="bias"))
    with pytest.raises(BenchmarkFileMissing, match=r"safety\.parquet"):
        run(backend(color_judge), config(tmp_path, data_dir=str(tmp_path), splits="safety"))


def test_parse_label():
    assert [parse_label(v) for v in (0, 1, "0", "1", "image1", 1.0)] == [0, 1, 0, 1, 1, 1]
    assert [parse_label(v) for v in (2, "tie", None, True)] == [None, None, None, None]


def test_missing_image_paths_fail_before_judging(tmp_path):
    from benchmark_fixtures import image, write_jsonl

    image().save(tmp_path / "a.png")
    rows = [{"caption": "c", "image0": "a.png", "image1": "a.png", "label": 0}] * 2
    rows = [*rows, {"caption": "c", "image0": "a.png", "image1": "gone.png", "label": 1}]
    write_jsonl(tmp_path / "alignment.jsonl", rows)
    b = backend(color_judge)
    with pytest.raises(BenchmarkDataError, match=r"gone\.png.*row 2"):
        run(b, config(tmp_path / "o", data_dir=str(tmp_path), splits="alignment"))
    assert b.calls == 0  # nothing was judged
    res = run(b, config(tmp_path / "o", data_dir=str(tmp_path), splits="alignment", missing_images="skip"))
    assert res.counts["alignment.skipped_missing_image"] == 1 and res.counts["alignment.items"] == 2
