"""The three commands end to end (offline), their help, job configs and argument errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perception_judge.cli import main
from perception_judge.core.options import OptionError, resolve_options
from perception_judge.ppjd.options import BuildJob

REPO = Path(__file__).resolve().parents[1]


def test_synth_build_export_end_to_end(tmp_path, capsys):
    syn, ppjd, train = tmp_path / "syn", tmp_path / "ppjd", tmp_path / "train"
    assert main(["synth", "--n", "30", "--seed", "9", "--out", str(syn), "--no-progress"]) == 0
    assert (syn / "items.jsonl").is_file() and json.loads((syn / "synth_info.json").read_text())["n"] == 30
    assert main(["build-ppjd", "--input", str(syn), "--out", str(ppjd), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "build-ppjd summary" in out and "programmatic" in out
    assert main(["export", str(ppjd), "--out", str(train), "--mix", "batch=1,single=0.5"]) == 0
    out = capsys.readouterr().out
    assert "exported" in out
    from perception_judge.core.trainset import load_training_set

    ds = load_training_set(train)
    assert ds["train"].num_rows > 0 and set(ds["train"]["protocol"]) <= {"batch", "single"}
    # re-running the build resumes and writes nothing new
    assert main(["build-ppjd", "--input", str(syn), "--out", str(ppjd), "--no-progress"]) == 0
    assert "records written this run                     0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("synth", ["--n", "--seed", "--out", "--families", "--text-only-fraction"]),
        ("build-ppjd", ["--input", "--out", "--teacher", "--base-url", "--model", "--api-key-env", "--concurrency",
                        "--retry-failed", "--min-rp-similarity", "--image-root", "--map", "--config", "--limit"]),
        ("export", ["--out", "--seed", "--val-fraction", "--mix", "--skip-invalid"]),
    ],
)  # fmt: skip
def test_help_explains_every_flag(command, flags, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in flags:
        assert flag in text, flag
    assert "--api-key " not in text  # keys are never flags


@pytest.mark.parametrize("name", ["synthetic.yaml", "synthetic_llm.yaml", "mmpr.yaml", "openai.yaml"])
def test_shipped_job_configs_are_valid(name):
    cfg = resolve_options(BuildJob, config=REPO / "data_gen" / "configs" / name)
    assert cfg.source.inputs and cfg.build.out


def test_bad_config_names_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: {inputs: [x], colour: red}\nbuild: {out: y}\n")
    with pytest.raises(OptionError, match="colour"):
        resolve_options(BuildJob, config=bad)
    assert main(["build-ppjd", "--config", str(bad)]) == 2
    assert "colour" in capsys.readouterr().err


def test_argument_errors_exit_2(tmp_path, capsys, monkeypatch):
    assert main(["build-ppjd", "--out", str(tmp_path / "o")]) == 2
    assert "no input" in capsys.readouterr().err
    syn = tmp_path / "syn"
    assert main(["synth", "--n", "3", "--out", str(syn), "--no-progress"]) == 0
    for var in ("PPJD_BASE_URLS", "OPENAI_BASE_URL", "PPJD_MODEL"):  # options only: no environment fallback
        monkeypatch.setenv(var, "http://127.0.0.1:9/v1")
    assert main(["build-ppjd", "--input", str(syn), "--out", str(tmp_path / "o"), "--teacher", "llm"]) == 2
    assert "--base-url and --model" in capsys.readouterr().err
    assert main(["synth", "--n", "3", "--out", str(syn), "--no-progress"]) == 2  # exists, no --overwrite
    assert main(["export", str(tmp_path / "nothing"), "--out", str(tmp_path / "t")]) == 2
    assert main(["synth", "--n", "3", "--out", str(tmp_path / "s2"), "--families", "pie"]) == 2


def test_image_prefix_map_flag_reaches_the_source(tmp_path, monkeypatch, capsys):
    """MMPR's image_prefix_map was reachable only through a config file."""
    from perception_judge.ppjd import sources

    seen = {}

    def fake_open_source(inputs, **kw):
        seen.update(kw)
        raise ValueError("stop here")

    monkeypatch.setattr(sources, "open_source", fake_open_source)
    cfg = tmp_path / "job.yaml"
    cfg.write_text("source:\n  image_prefix_map: {ScienceQA: sqa}\n")
    argv = ["build-ppjd", "--input", str(tmp_path), "--out", str(tmp_path / "o"), "--config", str(cfg),
            "--image-prefix-map", "chartqa_=images/chart", "--image-prefix-map", "ScienceQA=other"]  # fmt: skip
    assert main(argv) == 2 and "stop here" in capsys.readouterr().err
    assert seen["prefix_map"] == {"ScienceQA": "other", "chartqa_": "images/chart"}
    assert (
        main(
            ["build-ppjd", "--input", str(tmp_path), "--out", str(tmp_path / "o"), "--image-prefix-map", "x"]
        )
        == 2
    )
    assert "expected PREFIX=FOLDER" in capsys.readouterr().err
