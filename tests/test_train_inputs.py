"""Every input a recipe names is checked before any model is built or loaded: the training-set folder and its split
files, the resume checkpoint, the base adapter, the model folder when local. An error is one line naming the file,
exit code 2, no traceback; the recipe's model provider (which builds a missing tiny model) never runs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = (ROOT / "recipes" / "tiny.yaml").read_text()


@pytest.fixture(scope="module")
def toy_set(tmp_path_factory):
    from perception_judge.tiny.toyset import write_toy_training_set

    return write_toy_training_set(tmp_path_factory.mktemp("inputs"), n_train=48, n_validation=2)


def _train(capsys, tmp_path, *args: str, recipe: str = str(ROOT / "recipes" / "tiny.yaml")) -> str:
    """Run ``train_grpo.py`` in process; assert exit code 2 and one error line (datasets may print progress bars
    before it); return that line."""
    from perception_judge.train.run import main

    code = main([recipe, "--output_dir", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("train_grpo.py: error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_a_missing_training_set_is_named_before_the_model_is_built(capsys, tmp_path):
    model = tmp_path / "tiny-model"  # the recipe's model provider would build it (with its warm start)
    err = _train(
        capsys, tmp_path, "--dataset_name", str(tmp_path / "nope"), "--model_name_or_path", str(model)
    )
    assert "no training set in" in err and str(tmp_path / "nope") in err
    assert not model.exists()


@pytest.mark.parametrize("pattern", ["", "T"], ids=["image-page", "compressed-page"])
def test_a_damaged_parquet_file_is_named_before_the_model_is_built(capsys, tmp_path, pattern):
    """2,000 zeroed bytes in the middle, the footer intact: with images they land in the (uncompressed) image bytes,
    in a text-only set in a compressed page, where datasets raised its DatasetGenerationError naming no file."""
    from perception_judge.tiny.toyset import write_toy_training_set

    data = write_toy_training_set(tmp_path / "data", n_train=48, n_validation=2, text_only_pattern=pattern)
    raw = bytearray((data / "train.parquet").read_bytes())
    middle = len(raw) // 2
    raw[middle - 1000 : middle + 1000] = bytes(2000)
    (data / "train.parquet").write_bytes(bytes(raw))
    model = tmp_path / "tiny-model"
    err = _train(capsys, tmp_path, "--dataset_name", str(data), "--model_name_or_path", str(model))
    expected = "image 1 is damaged" if pattern == "" else "a damaged parquet file (OSError: Corrupt snappy"
    assert f"{data / 'train.parquet'}: " in err and expected in err, err
    assert not model.exists()


def test_local_model_adapter_and_checkpoint_folders_are_checked_first(capsys, tmp_path, toy_set):
    model, common = tmp_path / "tiny-model", ["--dataset_name", str(toy_set)]
    err = _train(
        capsys, tmp_path, *common, "--model_name_or_path", str(model), "--base_adapter", str(tmp_path / "a")
    )
    assert err.endswith(f"base_adapter: does not exist (got {str(tmp_path / 'a')!r})") and not model.exists()
    resume = ["--model_name_or_path", str(model), "--resume_from_checkpoint", str(tmp_path / "ckpt")]
    err = _train(capsys, tmp_path, *common, *resume)
    assert err.endswith(f"resume_from_checkpoint: not a checkpoint folder (got {str(tmp_path / 'ckpt')!r})")
    assert not model.exists()

    # without a model provider a local model folder must hold a model
    no_provider = tmp_path / "no-provider.yaml"
    no_provider.write_text(
        "\n".join(line for line in TINY.splitlines() if not line.startswith("model_provider"))
    )
    err = _train(capsys, tmp_path, *common, "--model_name_or_path", str(model), recipe=str(no_provider))
    assert err.endswith(f"model_name_or_path: does not exist (got {str(model)!r})")
    model.mkdir()
    err = _train(capsys, tmp_path, *common, "--model_name_or_path", str(model), recipe=str(no_provider))
    assert err.endswith(f"model_name_or_path: holds no config.json (got {str(model)!r})")


def test_a_dataset_config_reaches_the_check_before_the_model_is_built(capsys, tmp_path, toy_set):
    """trl's --dataset_config is the name of load_dataset: a config the training set lacks is one line."""
    model = tmp_path / "tiny-model"
    err = _train(capsys, tmp_path, "--dataset_name", str(toy_set), "--dataset_config", "nope",
                 "--model_name_or_path", str(model))  # fmt: skip
    assert f"dataset_name {str(toy_set)!r} (config 'nope'): cannot be loaded" in err and not model.exists()
