"""Resuming: half-written checkpoints are skipped (named, with the reason), a finished run trains nothing."""

from __future__ import annotations

import json

import pytest

from perception_judge.train import run as R
from perception_judge.train.recipe import RecipeError, parse_recipe


def _checkpoint(out, step, complete=True, weights=True):
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    if weights:
        (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_half_written_checkpoint_is_skipped_with_its_reason(tmp_path, capsys):
    _checkpoint(tmp_path, 4)
    _checkpoint(tmp_path, 6, complete=False)  # killed while saving: weights, no trainer state
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-10" / "trainer_state.json").write_text("{trunc")
    assert R.resolve_resume("latest", str(tmp_path)) == str(tmp_path / "checkpoint-4")
    err = capsys.readouterr().err
    assert "skipping checkpoint-10: unreadable trainer_state.json" in err
    assert "skipping checkpoint-6: no trainer_state.json" in err
    assert "resume: from checkpoint-4 (the newest complete one)" in err
    with pytest.raises(
        RecipeError,
        match=r"^resume_from_checkpoint: an incomplete checkpoint: no trainer_state\.json .*\(got '.*checkpoint-6'\)$",
    ):
        R.resolve_resume(str(tmp_path / "checkpoint-6"), str(tmp_path))


def test_no_complete_checkpoint_starts_fresh_with_auto_and_refuses_latest(tmp_path):
    _checkpoint(tmp_path, 2, complete=False)
    assert R.resolve_resume("auto", str(tmp_path)) is None
    with pytest.raises(
        RecipeError,
        match=r"^resume_from_checkpoint: no checkpoint to resume from \(no complete checkpoint-N folder in '.*'\) \(got 'latest'\)$",
    ):
        R.resolve_resume("latest", str(tmp_path))


def test_resuming_a_finished_run_trains_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    _checkpoint(out, 2)
    _checkpoint(out, 4)
    recipe = parse_recipe(
        [
            "recipes/tiny.yaml",
            "--output_dir",
            str(out),
            "--max_steps",
            "4",
            "--resume_from_checkpoint",
            "auto",
        ],
        check_environment=False,
    )
    metrics = R.train(
        recipe
    )  # the checkpoint is fake: loading it would fail, so returning proves nothing ran
    assert metrics == {"global_step": 4, "already_complete": True}
    assert "is complete: checkpoint-4 is at step 4 of max_steps 4" in capsys.readouterr().err
    assert R.finished_at_step(str(out / "checkpoint-2"), 4) is None


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("top_p", "2", r"^top_p: Input should be less than or equal to 1 \(got 2\.0\)$"),
        ("epsilon", "-0.2", r"^epsilon: Input should be greater than 0 \(got -0\.2\)$"),
        ("weight_decay", "-5", r"^weight_decay: Input should be greater than or equal to 0 \(got -5\.0\)$"),
        (
            "max_steps",
            "-3",
            r"^max_steps: Input should be greater than or equal to 1: or -1 to train num_train_epochs \(got -3\)$",
        ),
        ("learning_rate", "-1e-4", r"^learning_rate: Input should be greater than 0 \(got -0\.0001\)$"),
        (
            "per_device_train_batch_size",
            "0",
            r"^per_device_train_batch_size: Input should be greater than or equal to 1 \(got 0\)$",
        ),
    ],
)
def test_out_of_range_recipe_values_are_refused_before_any_model_loads(key, value, message, tmp_path):
    with pytest.raises(RecipeError, match=message):
        parse_recipe(
            ["recipes/tiny.yaml", "--output_dir", str(tmp_path), f"--{key}={value}"], check_environment=False
        )


def test_training_set_schema_errors_name_the_file_and_the_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from perception_judge.core.trainset import load_training_set

    folder = tmp_path / "ts"
    folder.mkdir()
    pq.write_table(pa.table({"prompt": ["x"], "protocol": ["pair"]}), folder / "train.parquet")
    with pytest.raises(ValueError, match=r"train\.parquet: missing column\(s\) \['images', 'ground_truth'"):
        load_training_set(folder)
    (folder / "train.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"train\.parquet: not a readable parquet file"):
        load_training_set(folder)
