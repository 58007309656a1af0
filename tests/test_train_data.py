"""Trainer data: row checks, protocol mix, exact prompt lengths, overlong-prompt accounting, lazy pixel policy."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import OptionError
from perception_judge.core.protocol import build_messages, prepare_processor
from perception_judge.core.trainset import rows_to_dataset, split_path
from perception_judge.tiny.toyset import toy_rows, write_toy_training_set
from perception_judge.train.args import JudgeArguments
from perception_judge.train.data import (
    DataError,
    PromptLengths,
    load_judge_data,
    pixel_policy_for,
    protocol_mix_indices,
)


@pytest.fixture(scope="module")
def toy_set(tmp_path_factory):
    # 40 px images: the policy (56 px) must resize every one of them
    return write_toy_training_set(
        tmp_path_factory.mktemp("toyset"), n_train=12, n_validation=3, image_size=40
    )


@pytest.fixture(scope="module")
def processor(tiny_qwen25):
    from transformers import AutoProcessor

    return prepare_processor(AutoProcessor.from_pretrained(tiny_qwen25), "auto")


def _script(folder):
    return SimpleNamespace(
        dataset_name=str(folder),
        dataset_config=None,
        dataset_train_split="train",
        dataset_test_split="validation",
    )


def test_load_applies_policy_lazily_and_reports(toy_set, processor):
    policy = PixelPolicy(mode="fixed", size=56, factor=28)
    data = load_judge_data(_script(toy_set), JudgeArguments(), processor, policy)
    assert len(data.train) == 12 and len(data.validation) == 3
    row = data.train[0]
    assert [im.size for im in row["images"]] == [(56, 56)]
    assert data.validation[0]["images"][0].size == (56, 56)
    rep = data.reports["train"]
    assert rep.rows_in == rep.rows_out == 12 and rep.dropped_overlong == 0
    assert rep.protocols_out == {"batch": 4, "pair": 4, "single": 4}
    assert rep.prompt_tokens_max > 0 and "12 rows used" in rep.summary()
    assert data.pop_transform_seconds() > 0 and data.pop_transform_seconds() == 0
    # trl needs every column for the rewards
    assert {"prompt", "images", "protocol", "ground_truth"} <= set(row)


def test_prompt_lengths_are_exact(processor, tiny_qwen25):
    policy = PixelPolicy(mode="fixed", size=56, factor=28)
    lengths = PromptLengths(processor, policy, "auto")
    rows = toy_rows(3, image_size=90)
    n = lengths([r["prompt"] for r in rows], [[im.size for im in r["images"]] for r in rows])
    from perception_judge.core.protocol import render_generation_prompt

    for row, got in zip(rows, n):
        text = render_generation_prompt(processor, row["prompt"], "auto")
        images = [policy.apply(im) for im in row["images"]]
        ids = processor(text=[text], images=[images], return_tensors="pt")["input_ids"][0]
        assert got == len(ids)
    smart_policy = PixelPolicy(mode="smart", factor=28, min_pixels=56 * 56, max_pixels=112 * 112)
    w, h = smart_policy.target_size(224, 112)
    assert PromptLengths(processor, smart_policy, "auto").image_tokens(224, 112) == (w // 28) * (h // 28)


def test_overlong_prompts_are_counted_not_silently_dropped(toy_set, processor):
    policy = PixelPolicy(mode="fixed", size=56, factor=28)
    full = load_judge_data(_script(toy_set), JudgeArguments(), processor, policy)
    lengths = PromptLengths(processor, policy, "auto")
    train_lengths = lengths(full.train["prompt"], [[(56, 56)]] * len(full.train))
    limit = sorted(train_lengths)[len(train_lengths) // 2]
    n_over = sum(1 for x in train_lengths if x > limit)
    assert 0 < n_over < len(train_lengths)

    data = load_judge_data(_script(toy_set), JudgeArguments(max_prompt_tokens=limit), processor, policy)
    rep = data.reports["train"]
    assert rep.dropped_overlong == n_over and rep.rows_out == 12 - n_over
    assert rep.prompt_tokens_max <= limit and len(rep.overlong_examples) == min(5, n_over)
    assert "dropped as overlong" in rep.summary()

    with pytest.raises(DataError, match=r"train: \d+ prompt\(s\) longer than max_prompt_tokens"):
        load_judge_data(
            _script(toy_set),
            JudgeArguments(max_prompt_tokens=limit, overlong_prompts="error"),
            processor,
            policy,
        )


def test_protocol_mix_keeps_proportions_without_oversampling():
    protocols = ["batch"] * 30 + ["pair"] * 10 + ["single"] * 20
    keep = protocol_mix_indices(protocols, {"batch": 0.5, "pair": 0.5})
    counts = Counter(protocols[i] for i in keep)
    assert counts == {"batch": 10, "pair": 10}
    assert keep == sorted(keep)
    keep = protocol_mix_indices(protocols, {"batch": 1.0})
    assert Counter(protocols[i] for i in keep) == {"batch": 30}
    assert protocol_mix_indices(protocols, None) == list(range(60))
    with pytest.raises(ValueError, match="no such rows"):
        protocol_mix_indices(["batch"] * 4, {"batch": 1, "pair": 1})
    assert len(protocol_mix_indices(["batch"] * 4, {"batch": 1, "pair": 1}, strict=False)) == 4


def test_protocol_mix_on_a_training_set(toy_set, processor):
    policy = PixelPolicy(mode="fixed", size=56, factor=28)
    data = load_judge_data(_script(toy_set), JudgeArguments(protocol_mix={"batch": 1.0}), processor, policy)
    assert set(data.train["protocol"]) == {"batch"}
    assert data.reports["train"].dropped_by_protocol_mix == 8


def _write(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    rows_to_dataset(rows).to_parquet(str(split_path(folder, "train")))
    return folder


def test_malformed_rows_fail_naming_the_row(tmp_path, processor):
    policy = PixelPolicy(mode="fixed", size=56, factor=28)
    rows = toy_rows(3)
    rows[1]["prompt"] = build_messages("batch", "q", ["a", "b", "c"], n_images=2)  # 2 placeholders, 1 image
    folder = _write(tmp_path / "bad_images", rows)
    with pytest.raises(DataError, match=r"train row 1 .*2 image placeholder\(s\).*1 image"):
        load_judge_data(_script(folder), JudgeArguments(), processor, policy)

    rows = toy_rows(3)
    rows[2]["ground_truth"] = "AAB"
    folder = _write(tmp_path / "bad_truth", rows)
    with pytest.raises(DataError, match="train row 2"):
        load_judge_data(_script(folder), JudgeArguments(), processor, policy)

    with pytest.raises(DataError, match="no training set"):
        load_judge_data(_script(tmp_path / "missing"), JudgeArguments(), processor, policy)


def test_pixel_policy_factor_comes_from_the_model(tiny_qwen25, tiny_qwen3):
    from transformers import AutoConfig

    q25 = pixel_policy_for(
        JudgeArguments(pixel_policy={"size": 448}), AutoConfig.from_pretrained(tiny_qwen25)
    )
    q3 = pixel_policy_for(JudgeArguments(pixel_policy={"size": 448}), AutoConfig.from_pretrained(tiny_qwen3))
    assert (q25.factor, q3.factor) == (28, 32)
    with pytest.raises(
        OptionError,
        match=r"^pixel_policy: fixed image size 56 is not a multiple of the patch factor 32 \(got ",
    ):
        pixel_policy_for(JudgeArguments(pixel_policy={"size": 56}), AutoConfig.from_pretrained(tiny_qwen3))
    # a factor the recipe names wins over the model's
    assert (
        pixel_policy_for(
            JudgeArguments(pixel_policy={"size": 56, "factor": 28}), AutoConfig.from_pretrained(tiny_qwen3)
        ).factor
        == 28
    )


def test_pixel_bounds_come_from_the_model_processor(tiny_qwen3):
    """Qwen3-VL's processor keeps images of 65,536-16,777,216 pixels and resizes any other, silently; the policy
    takes its least area from the processor and refuses values it would resize (before any weight loads)."""
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoProcessor

    from perception_judge.core.images import processor_pixel_bounds

    config = AutoConfig.from_pretrained(tiny_qwen3)
    # Qwen3-VL's preprocessor_config.json (building a Qwen2VLImageProcessor(min_pixels=...) here would change the
    # class default for every processor built after it, a transformers 5.17 bug)
    qwen3 = SimpleNamespace(
        image_processor=SimpleNamespace(size={"shortest_edge": 65536, "longest_edge": 16777216})
    )
    assert processor_pixel_bounds(qwen3) == (65536, 16777216)
    assert processor_pixel_bounds(AutoProcessor.from_pretrained(tiny_qwen3)) == (32 * 32 * 4, 32 * 32 * 16)
    smart = pixel_policy_for(JudgeArguments(pixel_policy={"mode": "smart"}), config, qwen3)
    assert (smart.min_pixels, smart.max_pixels) == (65536, 448 * 448)
    assert pixel_policy_for(JudgeArguments(pixel_policy={"size": 448}), config, qwen3).size == 448
    with pytest.raises(
        OptionError,
        match=r"^pixel_policy: size 224 \(50,176 pixels\) is outside .* 65,536-16,777,216 pixels: it would resize every image; choose values inside its bounds \(got ",
    ):
        pixel_policy_for(JudgeArguments(pixel_policy={"size": 224}), config, qwen3)
    with pytest.raises(
        OptionError, match=r"^pixel_policy: min_pixels/max_pixels 3,136-200,704 reach outside"
    ):
        pixel_policy_for(JudgeArguments(pixel_policy={"mode": "smart", "min_pixels": 56 * 56}), config, qwen3)


HUB_README = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
  - split: validation
    path: data/validation-*
- config_name: small
  data_files:
  - split: train
    path: small/train-*
---
# a training set as a Hub download lays it out
"""


def _hub_layout(folder, rows, small_rows):
    """A folder laid out as ``datasets`` reads a Hub dataset: parquet shards under data/ (plus a column the
    training set does not have), a second config, a README whose YAML lists them."""
    for where, split, part in (
        ("data", "train", rows[:6]),
        ("data", "validation", rows[6:]),
        ("small", "train", small_rows),
    ):
        (folder / where).mkdir(parents=True, exist_ok=True)
        ds = rows_to_dataset(part).add_column("licence_note", ["cc-by-4.0"] * len(part))
        ds.to_parquet(str(folder / where / f"{split}-00000-of-00001.parquet"))
    (folder / "README.md").write_text(HUB_README)
    return folder


def test_dataset_name_takes_a_hub_download_and_its_configs_and_checks_the_rows(tmp_path, processor):
    """--dataset_name took only a local export folder; trl users pass a Hub id or a load_dataset spec."""
    from perception_judge.train.data import read_training_set

    rows = toy_rows(8)
    hub = _hub_layout(tmp_path / "hub", rows, toy_rows(3, seed=5))
    dsd = read_training_set(str(hub), ("train", "validation"))
    assert {k: len(v) for k, v in dsd.items()} == {"train": 6, "validation": 2}
    assert "licence_note" not in dsd["train"].column_names and dsd["train"][0]["images"][0].size == (56, 56)
    assert dsd["train"]["record_key"] == [r["record_key"] for r in rows[:6]]
    small = read_training_set(str(hub), ("train",), config="small")  # trl's dataset_config
    assert list(small) == ["train"] and len(small["train"]) == 3
    script = SimpleNamespace(**{**vars(_script(hub)), "dataset_config": "small"})
    data = load_judge_data(script, JudgeArguments(), processor, PixelPolicy(mode="fixed", size=56, factor=28))
    assert len(data.train) == 3 and data.validation is None
    with pytest.raises(DataError, match=r"config 'nope'.*cannot be loaded"):
        read_training_set(str(hub), ("train",), config="nope")
    with pytest.raises(DataError, match=r"dataset_name 'someone/not-downloaded': cannot be loaded"):
        read_training_set("someone/not-downloaded", ("train",))  # offline: never the network

    bad = toy_rows(8)
    bad[2]["ground_truth"] = "AAB"  # the project's row check runs on whatever comes back
    with pytest.raises(DataError, match=rf"{tmp_path / 'bad'}: train row 2"):
        read_training_set(str(_hub_layout(tmp_path / "bad", bad, bad[:1])), ("train",))
    other = tmp_path / "other" / "data"
    other.mkdir(parents=True)
    rows_to_dataset(rows).remove_columns(["kinds"]).to_parquet(str(other / "train-00000-of-00001.parquet"))
    with pytest.raises(DataError, match=r"'.*other' train: missing column\(s\) \['kinds'\]"):
        read_training_set(str(other.parent), ("train",))
