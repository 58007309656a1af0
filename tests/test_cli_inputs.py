"""Issue 40: a new user's mistakes. Every subcommand of the entry point refuses a bad input (a missing file, a bad
value, an unknown key, a folder that is not what it should be) in one line on stderr with a non-zero exit and no
traceback, most before torch is even imported; no --help page shows reST markup; progress in a log file is plain
lines, never a terminal's bar."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_architecture import _subcommand_parsers

from perception_judge import cli
from perception_judge.core import io as pj_io

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def paths(tmp_path, monkeypatch):
    """Run in an empty folder holding a file, an empty folder, a recipe with an unknown key and a run folder."""
    monkeypatch.chdir(tmp_path)
    Path("a.txt").write_text("x")
    Path("empty").mkdir()
    Path("bad.yaml").write_text((REPO / "recipes" / "tiny.yaml").read_text() + "\nrewards_wieghts: 1\n")
    Path("run").mkdir()
    Path("run/perception_judge_run.json").write_text(json.dumps({"base_model": "gone", "tuning": "full"}))
    return tmp_path


# (argv, a fragment of the one line); every Command subcommand and eval action, then the training entry point
# with inputs that fail in recipe parsing
CASES = [
    (["nope"], "unknown command 'nope'"),
    (["make-tiny-model", "--arch", "nope", "--out", "o"], "make-tiny-model.arch: Input should be"),
    (["make-tiny-model", "--set", "colour=1", "--out", "o"], "make-tiny-model.colour: unknown option"),
    (["make-tiny-model", "--from-supervised", "empty", "--out", "o"], "no model in 'empty'"),
    (["make-tiny-model", "--config", "missing.yaml"], "config file 'missing.yaml' does not exist"),
    (
        ["make-tiny-model", "--out", "a.txt/m"],
        "cannot write the model to 'a.txt/m' (Not a directory): pass --out",
    ),
    (["synth", "--n", "-3", "--out", "s"], "n must be >= 0"),
    (["synth", "--n", "2", "--out", "a.txt"], "cannot write to --out 'a.txt'"),
    (["synth", "--n", "2", "--out", "s", "--set", "famlies=x"], "synth.famlies: unknown option"),
    (["build-ppjd", "--input", "missing", "--out", "p"], "source input 'missing' does not exist"),
    (["build-ppjd", "--input", "empty", "--out", "p"], "no .jsonl or .parquet files in 'empty'"),
    (["build-ppjd", "--input", "a.txt", "--out", "p"], "unsupported source file type"),
    (["build-ppjd", "--teacher", "nope"], "teacher.kind: Input should be"),
    (["export", "missing", "--out", "e"], "no PPJD records in 'missing'"),
    (["export", "empty", "--out", "e", "--mix", "bad"], "--mix 'bad': expected KEY=VALUE"),
    (["export", "empty", "--out", "e", "--set", "sed=1"], "export.sed: unknown option"),
    (
        ["merge-lora", "--adapter", "missing", "--out", "m"],
        "merge-lora: error: base: required, not given (no run",
    ),
    (["merge-lora", "--adapter", "empty"], "merge-lora: error: out: required, not given (flag --out)"),
    (["merge-lora", "--adapter", "empty", "--outt", "m"], "unrecognized arguments: --outt m"),
    (
        ["merge-lora", "--set", "dtype=fp8", "--adapter", "a", "--out", "m"],
        "merge-lora: error: dtype: Input should be",
    ),
    (["merge-lora", "--adapter", "empty", "--base", "empty", "--out", "m"], "Unrecognized model in empty"),
    (
        ["merge-lora", "--adapter", "empty", "--base", "empty", "--out", "a.txt/m"],
        "cannot write the merged model to 'a.txt/m' (Not a directory)",
    ),
    (["recipe-memory", "missing.yaml"], "recipe-memory: error: recipe 'missing.yaml' does not exist"),
    (
        ["recipe-memory", "bad.yaml"],
        "rewards_wieghts: unknown key of recipe bad.yaml (got 1); did you mean reward_weights, ",
    ),
    (
        ["recipe-memory", "--world", "0", "bad.yaml"],
        "recipe-memory: error: world: Input should be greater than or equal",
    ),
    (["eval"], "the following arguments are required: ACTION"),
    (["eval", "sweep", "missing"], "'missing/perception_judge_run.json' not found"),
    (["eval", "sweep", "empty"], "'empty/perception_judge_run.json' not found"),
    (
        ["eval", "sweep", "run", "--suites", "bias"],
        "the run file's base_model: model folder 'gone' does not exist",
    ),
    (
        ["eval", "run", "--model", "m=missing", "--suites", "bias", "--out", "o"],
        "models.m: model folder 'missing'",
    ),
    (
        ["eval", "run", "--model", "m=empty", "--suites", "bias", "--out", "o"],
        "'empty' is not a model folder",
    ),
    (["eval", "run", "--model", "m=x", "--suites", "bias,perception", "--out", "o"], "perception.data: the"),
    (["eval", "run", "--model", "m=x", "--temperature", "hot", "--out", "o"], "sampling.temperature"),
    (["eval", "run", "--model", "m=x", "--set", "bias.n_per_typ=1", "--out", "o"], "bias.n_per_typ: unknown"),
    (["eval", "collect", "empty"], "'empty/plan.json' not found"),
    (
        ["eval", "collect", "--set", "eval_dirr=empty"],
        "eval collect: error: eval_dir: required, not given (argument eval_dir); eval_dirr: unknown option (got 'empty')",
    ),
    (["eval", "report", "a.txt"], "'a.txt' has no cells/ folder"),
    (["eval", "list", "--bogus"], "unrecognized arguments: --bogus"),
    (["chat-template", "missing"], "model folder 'missing' does not exist"),
    (["chat-template", "empty"], "'empty' is not a model folder (no config.json)"),
    (["chat-template", "empty", "--think-prefix", "maybe"], "chat-template.think_prefix"),
    (
        ["chat-template", "empty", "--out", "a.txt/t.jinja"],
        "cannot write the template to 'a.txt': a file, not",
    ),
    (["learnability", "--steps", "-1"], "learnability.steps: Input should be greater than or equal to 1"),
    (["learnability", "--families", "nope"], "unknown tiny families ['nope']"),
    (["learnability", "--out", "a.txt/r.json"], "cannot write the result to 'a.txt': a file, not a folder"),
    (["learnability", "--keep-model", "a.txt/m"], "cannot write the model to 'a.txt/m' (Not a directory)"),
    (["demo", "--families", "nope"], "demo.families: unknown tiny families"),
    (["demo", "--out", "a.txt"], "Not a directory: 'a.txt'"),
    (["demo", "--set", "bogus=1"], "demo.bogus: unknown option"),
    (["train", "missing.yaml"], "perception-judge train: error: recipe 'missing.yaml' does not exist"),
    (
        ["train", "bad.yaml"],
        "rewards_wieghts: unknown key of recipe bad.yaml (got 1); did you mean reward_weights, ",
    ),
    (
        ["train", str(REPO / "recipes" / "tiny.yaml"), "--set", "learning_rate=-1"],
        "learning_rate: Input should be greater than 0 (got -1.0)",
    ),
    (
        ["train", "--config", "missing.yaml"],
        "perception-judge train: error: recipe 'missing.yaml' does not exist",
    ),
]


def _main(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's own refusals
        return int(e.code or 0)


def test_every_subcommand_refuses_bad_input_in_one_line(paths, capsys):
    """Each case exits non-zero with one line on stderr naming what is wrong, nothing on stdout, and writes nothing
    (an exception escaping the entry point fails this test: that is the traceback a user would see)."""
    walked = {c[0][0] if c[0][0] != "eval" or len(c[0]) == 1 else " ".join(c[0][:2]) for c in CASES}
    assert walked >= {*cli.COMMANDS, *(f"eval {a}" for a in ("sweep", "run", "collect", "report", "list"))}
    before = sorted(p.relative_to(paths) for p in paths.rglob("*"))
    for argv, fragment in CASES:
        code = _main(argv)
        out, err = capsys.readouterr()
        assert code != 0 and not out and "Traceback" not in err and "Value error," not in err, (
            argv,
            out,
            err,
        )
        assert len(err.strip().splitlines()) == 1 and fragment in err, (argv, err)
    assert sorted(p.relative_to(paths) for p in paths.rglob("*")) == before


def _first_of_each() -> list[list[str]]:
    """The first case of each subcommand and eval action, but the ones that parse a recipe (trl imports torch)."""
    firsts: dict[str, list[str]] = {}
    for argv, _ in CASES:
        firsts.setdefault(" ".join(argv[:2]) if argv[0] == "eval" else argv[0], argv)
    return [argv for name, argv in firsts.items() if name not in ("train", "recipe-memory")]


@pytest.mark.parametrize("argv", _first_of_each(), ids=" ".join)
def test_the_shell_sees_one_line_before_torch_is_imported(paths, argv):
    """From the shell (``python -m perception_judge.cli``): the same one line, in a fraction of a second, before
    torch is imported (what a model load and most of the start-up time would need)."""
    code = (
        "import sys; from perception_judge.cli import main\n"
        "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
        "print('torch' in sys.modules); sys.exit(rc)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
    assert done.returncode != 0 and done.stdout.strip() == "False", (argv, done.stdout, done.stderr[-2000:])
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


def test_no_help_page_shows_rest_markup(capsys):
    """Module docstrings are reST (``code``); a --help page shows `code` instead, on every subcommand and action."""
    pages = {name: p.format_help() for name, p in _subcommand_parsers().items() if p is not None}
    assert {"demo", "merge-lora", "chat-template", "eval run"} <= set(pages)
    for name, text in pages.items():
        assert "``" not in text, name
    assert "`" in pages["demo"] and "`perception-judge demo`" in pages["demo"]


def test_eval_run_help_describes_the_command_not_the_model_flag():
    run = _subcommand_parsers()["eval run"].format_help()
    description = run.split("options:")[0]
    assert "side by side" in description and "a judge to evaluate (repeatable)" not in description


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_progress_in_a_log_is_plain_lines(monkeypatch):
    """Where stderr is no terminal a loop prints a plain line at most every LINE_EVERY_S seconds (count, share, rate,
    ETA, the postfix) and one at the end; no carriage return, no escape code. On a terminal it is tqdm's bar."""
    log = _Log()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(pj_io, "LINE_EVERY_S", 0.0)
    bar = pj_io.progress_bar(4, "bias seed 0", "item")
    for _ in range(2):
        bar.set_postfix_str("judge / bias / seed 0")
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[1].startswith("bias seed 0: 2/4 item (50%), ") and ", ETA " in lines[1], lines
    assert lines[1].endswith("; judge / bias / seed 0") and len(lines) == 3 and "\r" not in log.getvalue()
    monkeypatch.setattr(pj_io, "LINE_EVERY_S", 3600.0)
    quiet = pj_io.progress_bar(4, "quick", "item")
    quiet.update(4)
    quiet.close()
    pj_io.progress_bar(4, "off", enabled=False).update(4)
    assert len(log.getvalue().splitlines()) == 3  # a quick loop and a disabled one print nothing
    monkeypatch.setattr(log, "isatty", lambda: True)
    from tqdm.std import tqdm

    assert isinstance(pj_io.progress_bar(4, "bar"), tqdm)


def test_a_piped_evaluation_log_has_no_terminal_codes(tmp_path):
    """Issue 40: `eval` printed tqdm bars with escape codes into piped output (SLURM logs), its own and the
    libraries' (datasets), interleaved with log lines. Piped, it prints lines only."""
    from support.fake_run import make_validation_set

    data = make_validation_set(tmp_path / "ts", n=4)
    cmd = [sys.executable, "-m", "perception_judge.cli", "eval", "run", "--backend", "scripted", "--model",
           "random", "--suites", "bias,perception", "--set", f"perception.data={data}", "--set",
           "bias.source=builtin", "--set", "bias.n_per_type=1", "--out", str(tmp_path / "out")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    done = subprocess.run(cmd, capture_output=True, env=env, timeout=300)  # bytes: text mode reads \r as \n
    assert done.returncode == 0, done.stderr[-3000:]
    for stream in (done.stdout, done.stderr):
        assert b"\r" not in stream and b"\x1b" not in stream, stream[-2000:]
    assert b"cells: 2 run" in done.stdout


def test_demo_help_and_readme_give_the_same_two_family_command():
    """The two-family world's settings: `demo --help` and the README said different step counts."""
    from perception_judge.tiny.demo import DemoOptions

    advice = " ".join(DemoOptions.model_fields["families"].description.split())
    flags = advice.split("run it with ")[1].split(" (")[0]
    assert flags == "--learnability-steps 2000 --train-steps 1200", advice
    assert f"demo --families colour,count {flags}" in " ".join((REPO / "README.md").read_text().split())
