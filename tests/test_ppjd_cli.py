"""The three commands end to end (offline), their help, job configs and argument errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.fake_openai import FakeOpenAIServer

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


# --------------------------------------------------------------------------------------------------------------
# A new user's first hour (issue 40): an outcome, not just an end; every input checked before any work
# --------------------------------------------------------------------------------------------------------------


def _one_line(capsys, command: str) -> str:
    """The one error line a refused command printed (no traceback)."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"perception-judge {command}: "), err
    return err


def _own_rows(folder: Path, rows: int = 4, **renamed: str) -> Path:
    """A user's own JSONL (images beside it) with the common column names, or others (``renamed``)."""
    from PIL import Image

    (folder / "img").mkdir(parents=True)
    lines = []
    for i in range(rows):
        Image.new("RGB", (32, 32), (40 * i, 120, 0)).save(folder / "img" / f"{i}.png")
        row = {"img": f"img/{i}.png", "prompt": f"How many squares are in picture {i}?", "gt": str(i + 2),
               "solution": f"Step 1: I count {i + 2} squares.\nSo the answer is \\boxed{{{i + 2}}}."}  # fmt: skip
        lines.append(json.dumps({renamed.get(k, k): v for k, v in row.items()}))
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "rows.jsonl"


def test_the_programmatic_teacher_is_refused_on_a_users_own_rows(tmp_path, capsys):
    rows, out = _own_rows(tmp_path / "mine"), tmp_path / "ppjd"
    assert main(["build-ppjd", "--input", str(rows), "--out", str(out), "--teacher", "programmatic"]) == 2
    assert "only synthetic items" in _one_line(capsys, "build-ppjd") and not out.exists()


def test_an_unreachable_teacher_is_one_line_naming_the_url_in_seconds_and_nothing_is_written(
    tmp_path, capsys
):
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows, out = _own_rows(tmp_path / "mine"), tmp_path / "ppjd"
    argv = ["build-ppjd", "--input", str(rows), "--out", str(out), "--model", "m", "--no-progress"]
    start = time.monotonic()
    assert main([*argv, "--base-url", f"http://user:pw-Secret-9@127.0.0.1:{port}/v1"]) == 2
    err = _one_line(capsys, "build-ppjd")
    assert time.monotonic() - start < 10 and not out.exists()
    assert (
        f"the teacher at http://<redacted>@127.0.0.1:{port}/v1 cannot be reached" in err
        and "pw-Secret" not in err
    )
    with FakeOpenAIServer() as srv:  # a wrong model name, checked the same way
        assert main([*argv[:-3], "--model", "fake-teahcer", "--base-url", srv.base_url]) == 2
        err = _one_line(capsys, "build-ppjd")
        assert "serves no model 'fake-teahcer' (it lists ['fake-teacher'])" in err and not out.exists()
        # one server of two down: a warning, and the run goes to the other
        assert main([*argv[:-3], "--model", "fake-teacher", "--base-url", srv.base_url, "--base-url",
                     f"http://127.0.0.1:{port}/v1", "--set", "teacher.cooldown_s=60"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert f"warning: the teacher at http://127.0.0.1:{port}/v1 cannot be reached" in captured.err
    assert "requests go to the other servers" in captured.err and re.search(r"status +complete", captured.out)
    with FakeOpenAIServer(listed=False) as srv:  # a list that leaves the model out: GET /models/NAME finds it
        assert main([*argv[:-3], "--model", "fake-teacher", "--base-url", srv.base_url]) == 0
        assert srv.stats()["get_models"] == 2


def test_a_server_without_the_models_api_is_refused_with_the_way_around(tmp_path, capsys):
    """A proxy that answers chat completions but not GET /models was refused by the teacher check with no way
    around it; the refusal names teacher.check_server=false, which skips the check and builds."""
    rows, out = _own_rows(tmp_path / "mine"), tmp_path / "ppjd"
    argv = ["build-ppjd", "--input", str(rows), "--out", str(out), "--model", "fake-teacher", "--no-progress"]
    with FakeOpenAIServer(models_api=False) as srv:
        assert main([*argv, "--base-url", srv.base_url]) == 2
        err = _one_line(capsys, "build-ppjd")
        assert (
            "answers GET /models with" in err
            and "--set teacher.check_server=false" in err
            and not out.exists()
        )
        assert main([*argv, "--base-url", srv.base_url, "--set", "teacher.check_server=false"]) == 0
        assert srv.stats()["get_models"] == 1 and srv.stats()["requests"] > 1  # the refused run's GET only
    assert re.search(r"status +complete", capsys.readouterr().out)


def test_max_failure_rate_turns_a_mostly_failed_run_into_exit_1(tmp_path, capsys):
    syn = tmp_path / "syn"
    assert (
        main(["synth", "--n", "20", "--out", str(syn), "--text-only-fraction", "0.5", "--no-progress"]) == 0
    )
    argv = ["build-ppjd", "--input", str(syn), "--text-only", "skip", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "a"), "--max-failure-rate", "0.3"]) == 1
    captured = capsys.readouterr()
    assert (
        "items failed (--max-failure-rate 0.3)" in captured.err
        and "precheck/text_only_skipped" in captured.out
    )
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["runs"][-1]["status"] == "failed"
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0  # the default, 0.5: half the items may fail
    with pytest.raises(SystemExit):
        main(["build-ppjd", "--help"])
    assert "--max-failure-rate" in capsys.readouterr().out


def test_every_path_is_checked_before_any_work(tmp_path, capsys):
    rows = _own_rows(tmp_path / "mine", gt="expected")  # no answer column the auto-detection knows
    out = tmp_path / "ppjd"
    argv = ["build-ppjd", "--teacher", "llm", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    assert main([*argv, "--input", str(rows), "--out", str(out)]) == 2
    err = _one_line(capsys, "build-ppjd")
    assert (
        "no answer column in its first row (it has expected, img, prompt, solution)" in err and "--map" in err
    )
    fine = ["--input", str(rows), "--map", "answer=expected"]
    assert main([*argv, *fine, "--out", str(out), "--image-root", str(tmp_path / "nope")]) == 2
    assert "--image-root" in _one_line(capsys, "build-ppjd")
    (tmp_path / "file").write_text("x")
    assert main([*argv, *fine, "--out", str(tmp_path / "file")]) == 2
    assert "file' is a file or a folder" in _one_line(capsys, "build-ppjd")
    assert main([*argv, *fine, "--out", str(tmp_path / "mine")]) == 2  # the data folder itself
    assert "is a file or a folder of other files" in _one_line(capsys, "build-ppjd")
    assert main([*argv, "--input", str(tmp_path / "empty.jsonl"), "--out", str(out)]) == 2
    (tmp_path / "empty.jsonl").write_text("\n")
    assert main([*argv, "--input", str(tmp_path / "empty.jsonl"), "--out", str(out)]) == 2
    assert "holds no readable row" in capsys.readouterr().err
    assert not out.exists() and sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["img", "rows.jsonl"]
    assert main(["synth", "--n", "3", "--out", "/proc/nope/x", "--no-progress"]) == 2
    assert "cannot write to --out '/proc/nope/x'" in _one_line(capsys, "synth")
    assert main(["synth", "--n", "3", "--out", str(tmp_path / "file"), "--no-progress"]) == 2
    _one_line(capsys, "synth")


def test_an_export_of_a_folder_without_records_is_an_error(tmp_path, capsys):
    syn, ppjd = tmp_path / "syn", tmp_path / "ppjd"
    assert main(["synth", "--n", "4", "--out", str(syn), "--text-only-fraction", "1", "--no-progress"]) == 0
    assert (
        main(["build-ppjd", "--input", str(syn), "--out", str(ppjd), "--text-only", "skip", "--no-progress"])
        == 1
    )
    capsys.readouterr()
    assert main(["export", str(ppjd), "--out", str(tmp_path / "t")]) == 2
    assert "no records in" in _one_line(capsys, "export") and not (tmp_path / "t").exists()
    (tmp_path / "file").write_text("x")  # found after the whole export was written, as a traceback
    assert main(["export", str(ppjd), "--out", str(tmp_path / "file")]) == 2
    assert "is a file, not a folder" in _one_line(capsys, "export")


def test_the_own_data_howto_runs_as_written(tmp_path):
    """docs/howto-own-data.md's command block, run by bash as it stands: the rehearsal on the programmatic path, then
    made-up rows whose columns are found by name, a fake server as the teacher, the export checked as the trainer
    checks it."""
    import os
    import subprocess
    import sys

    doc = (REPO / "docs" / "howto-own-data.md").read_text()
    block = doc.split("<!-- howto:own-data -->\n```bash\n", 1)[1].split("\n```\n", 1)[0]
    prelude = (
        f'set -euo pipefail\nperception-judge() {{ "{sys.executable}" -m perception_judge.cli "$@"; }}\n'
    )
    prelude += f'python() {{ "{sys.executable}" "$@"; }}\n'
    with FakeOpenAIServer() as srv:
        env = {**os.environ, "PYTHONPATH": str(REPO), "TEACHER_URL": srv.base_url, "TEACHER_MODEL": srv.model}
        res = subprocess.run(
            ["bash", "-c", prelude + block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert (tmp_path / "runs/rehearsal/trainset/train.parquet").is_file()
    records = [
        json.loads(line) for f in (tmp_path / "runs/mine/ppjd").glob("records-*.jsonl") for line in f.open()
    ]
    assert sorted(r["answer"] for r in records) == [
        "2",
        "3",
        "4",
        "5",
    ]  # img, prompt, gt, solution found by name
    assert "DatasetDict" in res.stdout and "validation" in res.stdout
