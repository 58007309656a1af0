"""The evaluation plan: every setting typed and checked before any model loads, resolved once in one order (run file,
config file, --set, flags), the token budget of the training run, the cell fingerprint on typed options, and an
output folder that cannot be written refused in one line."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_eval_sweep import _plan, dummy_run

from perception_judge.cli import build_parser, main
from perception_judge.core.options import OptionError
from perception_judge.evaluation import sweep as S
from perception_judge.evaluation.backends.hf import HFBackend
from perception_judge.evaluation.backends.scripted import ScriptedBackend
from perception_judge.evaluation.cli import COMMAND, plan_of

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_model_loads(monkeypatch):
    """Fail the test if any judge is built."""

    def refuse(*args, **kwargs):
        raise AssertionError("a judge was built")

    monkeypatch.setattr(HFBackend, "__init__", refuse)
    monkeypatch.setattr(ScriptedBackend, "__init__", refuse)


SELF = ("--set", "self_enhancement.own_model=me", "--set", "self_enhancement.pairs_file=p.jsonl")


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--set", "bias.n_per_typ=2"], ["bias.n_per_typ: unknown option", "n_per_type"]),
        (["--set", "perception.protocol=pair"], ["perception.protocol: unknown option", "protocols"]),
        (
            ["--suites", "bias", "--set", "perception.protocol=pair"],
            ["perception.protocol: unknown option", "protocols"],
        ),
        (["--set", "perception.protocols=[pair,trio]"], ["perception.protocols", "pair, batch, single"]),
        (["--set", "bias.prompt=fancy"], ["bias.prompt", "'single' or 'mmjb'"]),
        (["--set", "bias.bias_types=text_dominance,colour"], ["bias.bias_types", "texture_insertion"]),
        (
            ["--suites", "mjbench", "--set", "mjbench.data_dir=d", "--set", "mjbench.splits=[]"],
            ["mjbench.splits"],
        ),
        (["--suites", "mjbench"], ["mjbench.data_dir", "required"]),
        (["--suites", "bias,nope"], ["unknown suite 'nope'", "self_enhancement"]),
        (["--set", "backend.batch_size=0"], ["backend.batch_size", "greater than or equal to 1"]),
        (["--dtype", "fp8"], ["backend.dtype", "'bfloat16'"]),
        (
            ["--set", "backend.kind=vllm", "--set", "backend.device=cpu"],
            ["backend.device: unknown option", "known"],
        ),
        (["--set", "sampling.top_p=2"], ["sampling.top_p", "less than or equal to 1"]),
        (
            ["--set", "backend.pixel_policy.mode=square"],
            ["backend.pixel_policy.mode", "'fixed', 'smart' or 'none'"],
        ),
        (
            ["--set", "backend.pixel_policy.size=50"],
            ["backend.pixel_policy", "not a multiple of the patch factor 28"],
        ),
        (["--set", "backend.think_prefix=always"], ["backend.think_prefix", "'auto' or 'off'"]),
        # requirements between options, once checked by the suites after the judge had loaded (issue 42)
        (["--suites", "perception"], ["perception.data", "needs the option data=PATH"]),
        (["--suites", "bias", "--set", "bias.source=official"], ["bias.data", "needs the option data=PATH"]),
        (["--suites", "mllm_judge"], ["mllm_judge: ", "set option 'data_dir'", "'pair_file'"]),
        (
            ["--suites", "position", "--set", "position.source=ppjd"],
            ["position: ", "needs the option trainset_dir"],
        ),
        (
            ["--suites", "self_enhancement", *SELF, "--set", "self_enhancement.settings=[pair,score]"],
            ["self_enhancement: ", "the score setting needs the option score_file or data_dir"],
        ),
    ],
)
def test_a_bad_option_exits_2_before_any_model_loads(tmp_path, capsys, no_model_loads, flags, names):
    """Issue 31: a misspelled suite option was found only once the judge had loaded (each cell recorded as failed,
    exit 1, a report written; a sweep loaded every checkpoint to fail each cell). Now the plan refuses it: exit 2,
    one line naming WHERE.KEY and what it allows, nothing written, no model built."""
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)
    assert main(["eval", "sweep", str(run_dir), *flags, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perception-judge eval sweep: error: "), err
    for name in names:
        assert name in err[0]
    assert not (run_dir / "eval").exists()


def test_options_of_a_suite_the_job_does_not_run_wait_for_a_job_that_runs_it(tmp_path, no_model_loads):
    """eval/configs/tiny.yaml carries perception options; a sweep of its bias suite alone over a run with no training
    set (``--suites bias``) was refused for perception's missing data -- a suite it would not run. Its keys are still
    checked (the case above); its requirements wait for a job that runs it."""
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)
    args = _args("sweep", str(run_dir), "--config", str(REPO / "eval/configs/tiny.yaml"), "--suites", "bias")
    plan = _build(args)
    assert plan.suites == ("bias",) and set(plan.options) == {"bias"}
    args = _args("sweep", str(run_dir), "--config", str(REPO / "eval/configs/tiny.yaml"))
    with pytest.raises(OptionError, match=r"perception\.data: .*needs the option data=PATH"):
        _build(args)


def test_a_bad_option_exits_2_from_the_shell_before_torch_is_imported(tmp_path):
    """The command line refuses a bad option in seconds: before torch, transformers or trl is even imported (what a
    model load, and most of the start-up time, would need)."""
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)
    code = (
        "import sys; from perception_judge.cli import main\n"
        f"rc = main(['eval', 'sweep', {str(run_dir)!r}, '--set', 'bias.n_per_typ=2'])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules)); sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert done.returncode == 2 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-2000:])
    assert "bias.n_per_typ: unknown option" in done.stderr and not (run_dir / "eval").exists()


def test_writing_a_default_out_does_not_rerun_finished_cells(tmp_path):
    """Issue 31: the fingerprint hashed the raw options, so writing a default out explicitly re-ran finished cells;
    it hashes the typed, defaults-filled options now."""
    run_dir = dummy_run(tmp_path / "run", steps=(5,), final=False)
    out = tmp_path / "eval"
    first, _ = S.sweep(run_dir, _plan(out, seeds=(0,)), progress=False, report=False)
    assert first.done == 2
    defaults = {
        "bias": {
            "source": "builtin",
            "n_per_type": 1,
            "prompt": "single",
            "data_seed": 0,
            "empty": "upstream",
        }
    }
    spelled_out = _plan(
        out, seeds=(0,), options=defaults, sampling={"top_k": 20, "temperature": 1.0}, limit=None
    )
    again, _ = S.sweep(run_dir, spelled_out, progress=False, report=False)
    assert again.skipped == 2 and again.done == 0
    changed = _plan(out, seeds=(0,), options={"bias": {"source": "builtin", "n_per_type": 2}})
    assert S.sweep(run_dir, changed, progress=False, report=False)[0].done == 2


def _args(*argv: str):
    return build_parser("eval", COMMAND).parse_args(list(argv))


def _build(args, run=None):
    if run is not None:
        args.run_dir = run.run_dir
    return plan_of(args)


def test_settings_resolve_in_one_order_run_file_config_set_flags(tmp_path):
    """The pixel policy, the think prefix and the sampling, each from the run file, then the config file, then
    --set, then the flags; one typed backend spec holds them."""
    run = S.read_run(
        dummy_run(tmp_path / "run", steps=(1,), final=False, train_set="ts")
    )  # fixed 56, no think
    cfg = tmp_path / "job.yaml"
    cfg.write_text("backend: {kind: scripted, pixel_policy: {size: 112}}\nsampling: {temperature: 0.5}\n")
    out = str(tmp_path / "o")
    plan = _build(_args("sweep", "r", "--out", out), run)
    assert (plan.backend.pixel_policy.size, plan.backend.think_prefix) == (56, "off")  # the run file
    plan = _build(_args("sweep", "r", "--out", out, "--config", str(cfg)), run)
    assert (
        plan.backend.pixel_policy.size == 112 and plan.backend.sampling.temperature == 0.5
    )  # the config file
    assert plan.backend.pixel_policy.factor == 28 and plan.backend.think_prefix == "off"  # the rest kept
    flags = ("--set", "backend.pixel_policy.size=168", "--set", "sampling.temperature=0.7")
    plan = _build(_args("sweep", "r", "--out", out, "--config", str(cfg), *flags), run)
    assert plan.backend.pixel_policy.size == 168 and plan.backend.sampling.temperature == 0.7  # --set
    more = ("--pixel-size", "224", "--temperature", "0", "--think-prefix", "auto")
    plan = _build(_args("sweep", "r", "--out", out, "--config", str(cfg), *flags, *more), run)
    assert plan.backend.pixel_policy.size == 224 and plan.backend.sampling.temperature == 0  # the flags
    assert plan.backend.think_prefix == "auto" and plan.backend.kind == "scripted"
    assert plan.to_dict()["backend"]["pixel_policy"]["size"] == 224  # plan.json: one home for each setting


def _run_with_budget(tmp_path: Path, budget: int) -> S.RunInfo:
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False, train_set="ts")
    info = json.loads((run_dir / S.RUN_FILE).read_text())
    (run_dir / S.RUN_FILE).write_text(json.dumps({**info, "args": {"max_completion_length": budget}}))
    return S.read_run(run_dir)


def test_the_token_budget_follows_the_training_run(tmp_path, caplog):
    """Issue 28 item 6: perception_protocol.yaml allowed 4,096 new tokens where training allows 24,576 / 32,768, so a
    thinking judge's long answer was scored as a parse failure. The budget follows the run's max_completion_length
    unless the job sets one; a smaller one is a warning, in the plan and on stderr."""
    run = _run_with_budget(tmp_path, 24576)
    config = REPO / "eval/configs/perception_protocol.yaml"
    out = str(tmp_path / "o")
    plan = _build(_args("sweep", "r", "--config", str(config), "--out", out), run)
    assert plan.backend.sampling.max_new_tokens == 24576 and not plan.warnings
    vllm = plan.backend.options
    assert vllm.max_model_len is None or vllm.max_model_len > 24576  # room for the prompt and the answer
    short = _build(
        _args("sweep", "r", "--config", str(config), "--out", out, "--max-new-tokens", "4096"), run
    )
    assert short.backend.sampling.max_new_tokens == 4096
    assert "below the 24576 tokens the run trained with" in short.warnings[0]
    assert short.warnings[0] in caplog.text
    assert short.to_dict()["warnings"] == list(short.warnings)
    longer = _build(_args("sweep", "r", "--out", out, "--max-new-tokens", "32768"), run)
    assert longer.backend.sampling.max_new_tokens == 32768 and not longer.warnings


def test_a_read_only_run_folder_fails_in_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys):
    """Issue 29 item 11: `eval sweep` of a read-only run folder without --out ended in an OSError [Errno 30]
    traceback. Every write under the run folder fails with EROFS here (tests run as root, which ignores permission
    bits); the sweep stops with one line naming the folder and --out, and builds no judge."""
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False)
    real_mkdir, real_open = os.mkdir, os.open

    def read_only(real):
        def call(path, *args, **kwargs):
            if str(path).startswith(str(run_dir)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "mkdir", read_only(real_mkdir))
    monkeypatch.setattr(os, "open", read_only(real_open))
    monkeypatch.setattr(ScriptedBackend, "__init__", lambda *a, **k: pytest.fail("a judge was built"))
    assert main(["eval", "sweep", str(run_dir), "--backend", "scripted", "--suites", "bias", "-q"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"cannot write the evaluation to '{run_dir / 'eval'}' (Read-only file system)" in line
    assert "--out" in line
    other = tmp_path / "elsewhere"
    args = ["eval", "sweep", str(run_dir), "--backend", "scripted", "--suites", "bias", "--out", str(other)]
    monkeypatch.undo()
    assert main([*args, "--set", "bias.source=builtin", "--set", "bias.n_per_type=1", "-q"]) == 0


def test_a_failed_write_probe_leaves_no_folder_behind(tmp_path, monkeypatch):
    """A full disk lets the folders be made and the probe fail: the refusal removes the folders it made."""
    from perception_judge.core.io import check_writable
    from perception_judge.core.options import OptionError

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(os, "open", full)
    with pytest.raises(OptionError, match=r"cannot write the evaluation to .*\(No space left on device\)"):
        check_writable(tmp_path / "a" / "b", "the evaluation")
    assert not (tmp_path / "a").exists()


@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only file system (a tmpfs remounted read-only) holding a run folder; skipped where this process
    may not mount one."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        dummy_run(disk / "run", steps=(1,), final=False, train_set="ts")
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
        yield disk / "run"
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_real_read_only_run_folder_fails_in_one_line(read_only_mount):
    cmd = [sys.executable, "-m", "perception_judge.cli", "eval", "sweep", str(read_only_mount), "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"'{read_only_mount / 'eval'}' (Read-only file system): pass --out DIR" in line


def test_server_credentials_never_reach_the_evaluation_records(tmp_path, capsys):
    """Issue 29 item 9: credentials in a server URL (http://user:secret@host/v1, ?api_key=...) must not reach
    plan.json, cells/*.json, report.json or report.md (nor the terminal): a judge served with them, and a server that
    fails whose errors name the URL."""
    from support import fake_openai as fake

    with fake.FakeOpenAIServer(model="judge", seed=1) as srv:
        good = srv.base_url.replace("http://", "http://judge:hunter2@")
        bad = "http://admin:hunter3@127.0.0.1:9/v1?api_key=hunter4"
        for name, url in (("good", good), ("bad", bad)):
            argv = ["eval", "run", "--backend", "openai", "--base-url", url, "--model", f"{name}=judge",
                    "--suites", "bias", "--set", "bias.source=builtin", "--set", "bias.n_per_type=1",
                    "--set", "backend.max_retries=0", "--set", "backend.api_key=sk-test0123456789abcdefgh",
                    "--out", str(tmp_path / name)]  # fmt: skip
            assert main(argv) == (0 if name == "good" else 1)
    cell = json.loads(next((tmp_path / "good" / "cells").glob("*.json")).read_text())
    assert cell["status"] == "done" and "<redacted>@127.0.0.1" in json.dumps(
        cell["result"]["protocol"]["backend"]
    )
    failed = json.loads(next((tmp_path / "bad" / "cells").glob("*.json")).read_text())
    assert failed["status"] == "failed"
    written = [
        p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".md", ".csv", ".jsonl")
    ]
    assert {p.name for p in written} >= {"plan.json", "report.json", "report.md", "results.json"}
    captured = capsys.readouterr()
    for text in [p.read_text() for p in written] + [captured.out, captured.err]:
        for secret in ("hunter2", "hunter3", "hunter4", "sk-test0123456789abcdefgh"):
            assert secret not in text


def test_eval_run_judges_are_typed_entries_checked_by_the_plan(tmp_path, capsys, no_model_loads):
    """Issue 42: `eval run`'s judges were a list of dicts checked by hand after the plan (and the YAML read twice).
    Now a `models:` entry and `--model [NAME=]TARGET` are one typed entry of the plan (a scripted backend's TARGET is
    its function); no judge, --adapter with several, two names for one file, or a misspelled key exit 2 in one
    line before any model loads."""
    out, bias = str(tmp_path / "o"), ("--suites", "bias")
    plan = _build(
        _args(
            "run", *bias, "--model", "a=constant", "--model", "random", "--backend", "scripted", "--out", out
        )
    )
    assert [(e.name, e.spec) for e in plan.models] == [
        ("a", {"fn": "constant"}),
        ("random", {"fn": "random"}),
    ]
    cfg = tmp_path / "job.yaml"
    cfg.write_text("models: [{name: ours, model: runs/x/checkpoint-40, step: 40}]\nout: " + out + "\n")
    (entry,) = _build(_args("run", *bias, "--config", str(cfg), "--base-model", "b")).models
    assert (entry.name, entry.step, entry.spec) == (
        "ours",
        40,
        {"model": "runs/x/checkpoint-40", "base_model": "b"},
    )
    for flags, message in (
        ([], "no model to evaluate"),
        (["--model", "x", "--model", "y", "--adapter", "a"], "--adapter applies to exactly one --model"),
        (["--model", "m=x", "--model", "m=y"], "judge 'm' is listed twice"),
        (["--set", "models=[{modle: x}]"], "models.0.modle: unknown key in the eval job"),
    ):
        assert main(["eval", "run", "--suites", "bias", "--out", str(tmp_path / "no"), *flags]) == 2, flags
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert message in line, line
    assert not (tmp_path / "no").exists()


@pytest.fixture
def inputs(tmp_path):
    """Paths of every shape: a model folder, an adapter whose base is gone, an empty folder, a file."""
    base, adapter, empty = tmp_path / "base", tmp_path / "adapter", tmp_path / "empty"
    for folder in (base, adapter, empty):
        folder.mkdir()
    (base / "config.json").write_text("{}")
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(tmp_path / "gone")})
    )
    (tmp_path / "a.txt").write_text("x")
    return {
        "base": base,
        "adapter": adapter,
        "empty": empty,
        "file": tmp_path / "a.txt",
        "gone": tmp_path / "gone",
    }


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--suites", "bias,perception", "--model", "m={base}"],
            "perception.data: the perception suite needs",
        ),
        (["--model", "m={gone}"], "models.m: model folder '{gone}' does not exist"),
        (["--model", "m={empty}"], "models.m: '{empty}' is not a model folder (no config.json)"),
        (["--model", "m={file}"], "models.m: '{file}' is not a model folder (a file)"),
        (["--model", "m={adapter}"], "models.m: model folder '{gone}' does not exist"),  # the base it names
        (["--model", "m={base}", "--adapter", "{empty}"], "'{empty}' is not a LoRA adapter folder"),
        (
            ["--model", "m=Qwen/No-Such-Judge"],
            "'Qwen/No-Such-Judge': no such folder, nor a Hub model in the cache",
        ),
        (
            ["--backend", "scripted", "--model", "m=no_such_module:judge"],
            "models.m: No module named 'no_such_module'",
        ),
        (["--backend", "scripted", "--model", "m=fair"], "models.m: unknown scripted judge 'fair'"),
        (
            ["--suites", "perception", "--set", "perception.data={empty}"],
            "perception.data: '{empty}' holds no validation",
        ),
        (
            ["--suites", "mjbench", "--set", "mjbench.data_dir={gone}"],
            "mjbench.data_dir: '{gone}' does not exist",
        ),
        (
            ["--set", "bias.source=official", "--set", "bias.data={gone}"],
            "bias.data: '{gone}' does not exist",
        ),
        (
            ["--suites", "position", "--set", "position.pairs_file={empty}"],
            "position.pairs_file: '{empty}' is a folder, not a file",
        ),
        (["--set", "bias.images_dir={file}"], "bias.images_dir: '{file}' is a file, not a folder"),
        (
            ["--suites", "position", "--set", "position.trainset_dir={empty}"],
            "position.trainset_dir: '{empty}' holds",
        ),
    ],
)
def test_every_path_is_checked_before_any_model_loads(
    inputs, tmp_path, capsys, no_model_loads, flags, message
):
    """Issue 40: `eval run --suites bias,perception` without perception.data ran the bias cell first; a model folder
    that does not exist was a failed cell (on a GPU node: a 7B load and a finished suite before the typo shows). Now
    every path a job names is checked with the plan: exit 2, one line naming the key, no judge built, nothing
    written (not even the output folder)."""
    argv = [f.format(**inputs) for f in flags]
    judge = [] if "--model" in argv else ["--model", f"m={inputs['base']}"]
    out = tmp_path / "out" / "eval"
    assert main(["eval", "run", "--suites", "bias", *judge, *argv, "--out", str(out), "-q"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("perception-judge eval run: error: ") and message.format(**inputs) in line, line
    assert not (tmp_path / "out").exists()


def test_a_sweep_checks_the_run_files_paths_before_any_model_loads(tmp_path, capsys, no_model_loads):
    """A sweep's judges and data come from the run file: a base model that is gone and a training set that moved
    are refused in one line naming where the path came from, before the first cell."""
    run_dir = dummy_run(tmp_path / "run", steps=(1,), final=False, train_set=str(tmp_path / "moved"))
    assert main(["eval", "sweep", str(run_dir), "-q"]) == 2
    line = capsys.readouterr().err.strip()
    assert f"perception.data: '{tmp_path / 'moved'}' (the run file's train_set) does not exist" in line, line
    assert "(a Hub dataset? --set perception.data=DIR of its files)" in line  # a run trained from the Hub
    shutil.rmtree(run_dir / "base")
    assert main(["eval", "sweep", str(run_dir), "--suites", "bias", "-q"]) == 2
    line = capsys.readouterr().err.strip()
    assert f"the run file's base_model: model folder '{run_dir / 'base'}' does not exist" in line, line
    assert not (run_dir / "eval").exists()


def test_a_hub_id_is_left_to_the_backend_to_download(tmp_path, monkeypatch):
    """A judge named by a Hub id is downloaded by transformers or vLLM, so the plan lets it through; offline
    (HF_HUB_OFFLINE) only one in the Hugging Face cache passes."""
    import huggingface_hub
    from huggingface_hub import constants

    from perception_judge.evaluation.plan import check_inputs

    args = _args(
        "run", "--suites", "bias", "--model", "q=Qwen/Qwen2.5-VL-7B-Instruct", "--out", str(tmp_path)
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    check_inputs(_build(args))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="nor a Hub model in the cache"):
        check_inputs(_build(args))
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: f"/cache/{repo}/{name}")
    check_inputs(_build(args))
