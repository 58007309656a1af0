"""Checkpoint sweeps: model discovery, resumable cells (a crash and a real SIGKILL), the results table, the
report, the CLI, and the hf backend end to end over full and LoRA runs of a tiny model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import OptionError
from perception_judge.evaluation import sweep as S
from perception_judge.evaluation.backends.scripted import ScriptedBackend, format_scores
from perception_judge.evaluation.base import SuiteConfig
from perception_judge.evaluation.plan import resolve
from perception_judge.evaluation.suites import SUITES

BIAS_OPTS = {"bias": {"source": "builtin", "n_per_type": 1}}


def dummy_run(root: Path, steps=(10, 20), tuning="full", final=True, incomplete=(), train_set=None) -> Path:
    """A run folder with placeholder weight files (for scripted backends, which load nothing)."""
    root.mkdir(parents=True, exist_ok=True)
    base = root / "base"
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_bytes(b"base")
    info = {
        "base_model": str(base),
        "model_type": "qwen2_5_vl",
        "tuning": tuning,
        "think_prefix": "off",
        "pixel_policy": PixelPolicy(size=56).to_dict(),
        "rewards": {},
        "train_set": train_set,
    }
    (root / S.RUN_FILE).write_text(json.dumps(info))

    def weights(d: Path, tag: str) -> None:
        d.mkdir(exist_ok=True)
        if tuning == "lora":
            (d / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 4}))
            (d / "adapter_model.safetensors").write_bytes(tag.encode())
        else:
            (d / "config.json").write_text("{}")
            (d / "model.safetensors").write_bytes(tag.encode())

    for s in steps:
        weights(root / f"checkpoint-{s}", f"w{s}")
    for s in incomplete:
        (root / f"checkpoint-{s}").mkdir()
        (root / f"checkpoint-{s}" / "optimizer.pt").write_bytes(b"x")
    if final:
        weights(root, "final")
        (root / "trainer_state.json").write_text(json.dumps({"global_step": max(steps) + 5}))
    return root


def test_discover_models_full_lora_and_incomplete(tmp_path, caplog):
    run = S.read_run(dummy_run(tmp_path / "full", incomplete=(15,)))
    entries = S.discover_models(run)
    assert [(e.name, e.step, e.kind) for e in entries] == [
        ("base", 0, "base"),
        ("checkpoint-10", 10, "checkpoint"),
        ("checkpoint-20", 20, "checkpoint"),
        ("final", 25, "final"),
    ]
    assert "checkpoint-15" in caplog.text
    assert entries[1].spec == {"model": str(tmp_path / "full" / "checkpoint-10"), "processor": run.base_model}
    lora = S.discover_models(S.read_run(dummy_run(tmp_path / "lora", tuning="lora", final=False)))
    assert [e.name for e in lora] == ["base", "checkpoint-10", "checkpoint-20"]
    assert lora[1].spec["adapter"].endswith("checkpoint-10") and lora[1].spec["model"].endswith("base")
    assert [e.name for e in S.select_models(entries, ["checkpoint-*"])] == ["checkpoint-10", "checkpoint-20"]
    with pytest.raises(ValueError, match="no model matches"):
        S.select_models(entries, ["nope"])
    assert run.pixel_policy.size == 56 and run.think_prefix == "off"


def test_read_run_errors_name_file_and_key(tmp_path):
    with pytest.raises(FileNotFoundError, match=S.RUN_FILE):
        S.read_run(tmp_path)
    (tmp_path / S.RUN_FILE).write_text(json.dumps({"tuning": "full"}))
    with pytest.raises(KeyError, match="base_model"):
        S.read_run(tmp_path)


def _plan(out: Path, suites=("bias",), seeds=(0, 1), run=None, **job) -> S.EvalPlan:
    """A plan of scripted judges (``job``: more eval job keys; ``run``: the training run it evaluates)."""
    options = {**BIAS_OPTS, **job.pop("options", {})}
    backend = {"kind": "scripted", "fn": "constant"}
    return resolve(
        [{"suites": list(suites), "seeds": list(seeds), "options": options, "backend": backend, **job}],
        out,
        run,
    )


def _factory(calls: list, crash_after_cells: int | None = None):
    """Scripted backends that count their calls; optionally crash (KeyboardInterrupt) in the (k+1)-th cell."""
    state = {"cells": 0}

    def make(entry, plan):
        def fn(req, sampling):
            if req.request_id.endswith("-0-unbiased"):  # the first request of a bias cell
                state["cells"] += 1
                if crash_after_cells is not None and state["cells"] > crash_after_cells:
                    raise KeyboardInterrupt
            calls.append((entry.name, req.request_id, sampling.seed))
            return format_scores(req, [8 if entry.name == "base" else 1 + (entry.step or 0) % 9])

        return ScriptedBackend(fn, label=entry.name)

    return make


def test_crash_then_rerun_does_not_redo_finished_cells(tmp_path):
    run_dir = dummy_run(tmp_path / "run")
    out = tmp_path / "eval"
    calls: list = []
    with pytest.raises(KeyboardInterrupt):
        S.sweep(run_dir, _plan(out), backend_factory=_factory(calls, crash_after_cells=3), progress=False)
    done = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    assert len(done) == 3 and len(calls) == 3 * 18  # 9 pairs x 2 sides per cell
    calls2: list = []
    outcome, data = S.sweep(run_dir, _plan(out), backend_factory=_factory(calls2), progress=False)
    assert outcome.skipped == 3 and outcome.done == 8 - 3 and outcome.failed == 0
    assert len(calls2) == (8 - 3) * 18  # nothing finished was judged again
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json") if p.name in done} == done
    ran = {f"{m}__bias__seed{s}.json" for m, _, s in calls2}
    assert ran and not ran & set(done)
    # the table: one row per model x metric, models ordered by step
    assert [m["name"] for m in data["models"]] == ["base", "checkpoint-10", "checkpoint-20", "final"]
    rows = [r for r in data["rows"] if r["metric"] == "overall"]
    assert [r["model"] for r in rows] == ["base", "checkpoint-10", "checkpoint-20", "final"]
    assert rows[0]["n_seeds"] == 2 and rows[0]["values"] == {"0": rows[0]["mean"], "1": rows[0]["mean"]}
    assert [r["metric"] for r in data["rows"] if SUITES["bias"].metric(r["metric"]) is None] == []  # declared
    for name in ("results.csv", "results.json", "report.md", "report.json", "plan.json"):
        assert (out / name).is_file(), name
    outcome, _ = S.sweep(run_dir, _plan(out), backend_factory=_factory(calls2), progress=False)
    assert outcome.skipped == 8 and outcome.done == 0


def test_changed_settings_rerun_and_failed_cells_are_retried(tmp_path):
    run_dir = dummy_run(tmp_path / "run", steps=(5,), final=False)
    out = tmp_path / "eval"
    calls: list = []
    S.sweep(run_dir, _plan(out, seeds=(0,)), backend_factory=_factory(calls), progress=False, report=False)
    n = len(calls)
    S.sweep(
        run_dir,
        _plan(out, seeds=(0,), sampling={"temperature": 0.5}),
        backend_factory=_factory(calls),
        progress=False,
        report=False,
    )
    assert len(calls) == 2 * n  # decoding changed: every cell again

    def broken(entry, plan):
        if entry.name == "checkpoint-5":
            raise OSError("weights are corrupt")
        return _factory(calls)(entry, plan)

    # perception on a run without train_set: refused by the plan now, not a failed cell
    with pytest.raises(OptionError, match=r"perception\.data: .*needs the option data"):
        _plan(out, seeds=(0,), suites=("bias", "perception"))
    outcome, _ = S.sweep(run_dir, _plan(out, seeds=(0,)), backend_factory=broken, progress=False)
    assert outcome.failed == 1  # checkpoint-5 x bias
    cell = json.loads((out / "cells" / "checkpoint-5__bias__seed0.json").read_text())
    assert cell["status"] == "failed" and "weights are corrupt" in cell["error"]
    assert not (out / "cells" / "base__perception__seed0.json").exists()
    assert "Failed cells" in (out / "report.md").read_text()
    outcome, _ = S.sweep(
        run_dir, _plan(out, seeds=(0,), suites=("bias",)), backend_factory=_factory(calls), progress=False
    )
    assert outcome.done == 1 and outcome.skipped == 1  # the failed cell is retried, the finished one skipped


JUDGE_MODULE = textwrap.dedent(
    """
    import os, time
    from perception_judge.evaluation.backends.scripted import format_scores

    def judge(req, sampling):
        with open(os.environ["CALLS_LOG"], "a") as f:
            f.write(req.request_id + "\\n")
        time.sleep(0.01)
        return format_scores(req, [8])
    """
)


def test_sigkill_mid_sweep_then_rerun_skips_finished_cells(tmp_path):
    run_dir = dummy_run(tmp_path / "run", steps=(1, 2), final=False)
    (tmp_path / "slowjudge.py").write_text(JUDGE_MODULE)
    log = tmp_path / "calls.log"
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "CALLS_LOG": str(log),
    }
    cmd = [
        sys.executable,
        "-m",
        "perception_judge.cli",
        "eval",
        "sweep",
        str(run_dir),
        "--suites",
        "bias",
        "--seeds",
        "0,1,2",
        "--backend",
        "scripted",
        "--set",
        "backend.fn=slowjudge:judge",
        "--set",
        "bias.source=builtin",
        "--set",
        "bias.n_per_type=1",
        "-q",
    ]
    cells = run_dir / "eval" / "cells"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and len(list(cells.glob("*.json"))) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    finished = {p.name: p.stat().st_mtime_ns for p in cells.glob("*.json")}
    assert 2 <= len(finished) < 9, "the sweep should have been killed mid-way"
    first_calls = log.read_text().splitlines()
    log.unlink()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{9 - len(finished)} run, {len(finished)} already done (skipped)" in done.stdout
    assert {p.name: p.stat().st_mtime_ns for p in cells.glob("*.json") if p.name in finished} == finished
    second_calls = log.read_text().splitlines()
    assert (
        len(second_calls) <= (9 - len(finished)) * 18
    )  # at most the unfinished cells' calls (less if resumed)
    assert len(first_calls) >= len(finished) * 18
    data = json.loads((run_dir / "eval" / "results.json").read_text())
    assert sum(c["status"] == "done" for c in data["cells"]) == 9


def test_cli_eval_run_compares_judges_and_report_rerender(tmp_path, capsys):
    from support.fake_run import make_validation_set

    from perception_judge.cli import main

    ts = make_validation_set(tmp_path / "ts", n=2)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(
        "suites: [bias, perception]\nseeds: [0]\nsampling: {temperature: 0, max_new_tokens: 16}\n"
        "options:\n  bias: {source: builtin, n_per_type: 1}\n"
    )
    out = tmp_path / "cmp"
    code = main(
        [
            "eval",
            "run",
            "--config",
            str(cfg),
            "--backend",
            "scripted",
            "--model",
            "const=constant",
            "--model",
            "rand=random",
            "--set",
            f"perception.data={ts}",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "cells: 4 run, 0 already done" in text and "best model:" in text
    rep = json.loads((out / "report.json").read_text())
    assert rep["summary"]["best"] in ("const", "rand") and set(rep["tables"]) == {"bias", "perception"}
    plan = json.loads((out / "plan.json").read_text())["plan"]
    assert plan["backend"]["sampling"]["temperature"] == 0 and plan["options"]["perception"]["data"] == str(
        ts
    )
    (out / "report.md").unlink()
    assert main(["eval", "report", str(out)]) == 0 and (out / "report.md").is_file()
    assert main(["eval", "list"]) == 0 and "texture_insertion" in capsys.readouterr().out
    # collect, report and list take --config and --set as every command does
    (out / "report.md").unlink()
    (config := tmp_path / "report.yaml").write_text(f"eval_dir: {out}\n")
    assert main(["eval", "report", "--config", str(config)]) == 0 and (out / "report.md").is_file()
    (out / "results.json").unlink()
    assert main(["eval", "collect", "--set", f"eval_dir={out}", "--no-report"]) == 0
    assert (out / "results.json").is_file()
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {out}/results.csv, results.json"  # no report
    assert main(["eval", "list", "--set", "suite=bias"]) == 2
    assert "error: suite: unknown option (got 'bias')" in capsys.readouterr().err
    assert main(["eval", "collect"]) == 2
    assert "error: eval_dir: required, not given (argument eval_dir)" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "run",
                "--backend",
                "scripted",
                "--model",
                "x=constant",
                "--out",
                str(out),
                "--set",
                "nosuite.k=1",
            ]
        )
        == 2
    )
    assert "neither a suite" in capsys.readouterr().err
    assert main(["eval", "sweep", str(tmp_path / "nowhere"), "-q"]) == 2
    assert "perception_judge_run.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["eval", "sweep", "--help"])
    assert e.value.code == 0 and "RUN_DIR" in capsys.readouterr().out.upper()


def test_set_items_and_plan_building():
    from perception_judge.cli import build_parser
    from perception_judge.evaluation.cli import COMMAND, job_layers

    def layers(*sets: str) -> tuple[dict, dict]:
        argv = ["run", "--model", "m=x", "--out", "o", *(a for s in sets for a in ("--set", s))]
        config, flags = job_layers(build_parser("eval", COMMAND).parse_args(argv))
        assert flags.pop("models") == ["m=x"] and flags.pop("out") == "o"  # one job model: flags of the job
        return config, flags

    cfg, flags = layers(
        "bias.n_per_type=8",
        "perception.protocols=[pair, batch]",
        "sampling.temperature=0.3",
        "backend.batch_size=4",
        "bias.prompt=mmjb",
    )
    assert flags == {} and cfg == {
        "options": {
            "bias": {"n_per_type": 8, "prompt": "mmjb"},
            "perception": {"protocols": ["pair", "batch"]},
        },
        "sampling": {"temperature": 0.3},
        "backend": {"batch_size": 4},
    }
    with pytest.raises(ValueError, match=r"SUITE\.KEY=VALUE"):
        layers("bias=3")
    with pytest.raises(ValueError, match="unknown suite"):
        resolve([{"suites": ["bias", "nope"]}], Path("x"))


def test_suite_config_gets_the_run_train_set(tmp_path):
    run = S.read_run(dummy_run(tmp_path / "r", train_set=str(tmp_path / "ts")))
    plan = _plan(tmp_path / "o", suites=("bias", "perception"), run=run)
    cfg = S.suite_config(S.ModelEntry("checkpoint-10", 10, "checkpoint"), "perception", 1, plan)
    assert isinstance(cfg, SuiteConfig) and cfg.options.data == str(tmp_path / "ts") and cfg.seeds == [1]
    assert cfg.out_dir == tmp_path / "o" / "cells" / "checkpoint-10__perception__seed1"
    bias = S.suite_config(S.ModelEntry("final", 12, "final"), "bias", 0, plan)
    assert bias.options.model_key == "final" and bias.options.source == "builtin"


def test_position_and_verbosity_pairs_default_to_the_run_train_set(tmp_path):
    ts = str(tmp_path / "ts")
    run = S.read_run(dummy_run(tmp_path / "r", train_set=ts))
    entry = S.ModelEntry("checkpoint-10", 10, "checkpoint")
    suites = ("position", "verbosity", "self_enhancement")
    own = {"self_enhancement": {"own_model": "me", "pairs_file": "own.jsonl"}}  # its own pairs: no default
    plan = _plan(tmp_path / "o", suites=suites, run=run, options=own)
    for suite in ("position", "verbosity"):
        assert str(S.suite_config(entry, suite, 0, plan).options.trainset_dir) == ts
    assert S.suite_config(entry, "self_enhancement", 0, plan).options.trainset_dir is None
    ppjd = {"position": {"source": "ppjd", "split": "train"}}  # the ppjd source without its folder
    plan = _plan(tmp_path / "o", suites=suites, run=run, options=ppjd | own)
    assert str(S.suite_config(entry, "position", 0, plan).options.trainset_dir) == ts
    for given in (
        {"pairs_file": "p.jsonl"},
        {"data_dir": "d"},
        {"trainset_dir": "other"},
        {"source": "vlrewardbench", "data_dir": "d"},
    ):
        plan = _plan(tmp_path / "o", suites=suites, run=run, options={"verbosity": given} | own)
        opts = S.suite_config(entry, "verbosity", 0, plan).options
        assert {k: str(getattr(opts, k)) for k in given} == given
        assert (
            "trainset_dir" in given or opts.trainset_dir is None
        )  # the run's training set was not filled in
    with pytest.raises(
        OptionError, match=r"verbosity: .*pair source 'vlrewardbench' needs the option data_dir"
    ):
        _plan(
            tmp_path / "o", suites=suites, run=run, options={"verbosity": {"source": "vlrewardbench"}} | own
        )
    no_train_set = S.read_run(dummy_run(tmp_path / "r2"))  # nothing filled in: no pair source, refused
    with pytest.raises(OptionError, match=r"position: .*no pair source"):
        _plan(tmp_path / "o2", suites=("position",), run=no_train_set)


def test_sweep_runs_position_on_the_run_train_set(tmp_path):
    from perception_judge.tiny.toyset import write_toy_training_set

    ts = write_toy_training_set(tmp_path / "ts", n_train=2, n_validation=3)
    run_dir = dummy_run(tmp_path / "run", steps=(10,), final=False, train_set=str(ts))
    plan = _plan(tmp_path / "eval", suites=("position",), seeds=(0,), run=S.read_run(run_dir))
    outcome, _ = S.sweep(run_dir, plan, progress=False)
    assert outcome.failed == 0 and outcome.done == 2
    cell = json.loads((tmp_path / "eval" / "cells" / "base__position__seed0.json").read_text())
    assert cell["result"]["protocol"]["source"] == "ppjd" and cell["result"]["protocol"]["folder"] == str(ts)
    assert cell["result"]["counts"]["items"] > 0


# ------------------------------------------------------------------------------------------------ hf end to end
@pytest.mark.parametrize("tuning", ["full", "lora"])
def test_hf_sweep_end_to_end_on_tiny_runs(tmp_path, tiny_qwen25, tuning):
    from support.fake_run import make_fake_run, make_validation_set

    from perception_judge.cli import main

    ts = make_validation_set(tmp_path / "ts", n=2)
    run_dir = make_fake_run(tmp_path / "run", tiny_qwen25, tuning=tuning, steps=(1, 2), train_set=ts)
    args = [
        "eval",
        "sweep",
        str(run_dir),
        "--suites",
        "bias,perception",
        "--max-new-tokens",
        "4",
        "--set",
        "bias.source=builtin",
        "--set",
        "bias.n_per_type=1",
        "--set",
        "perception.protocols=[pair,single]",
        "--batch-size",
        "8",
        "--dtype",
        "float32",
        "--device",
        "cpu",
        "-q",
    ]
    assert main(args) == 0
    out = run_dir / "eval"
    data = json.loads((out / "results.json").read_text())
    assert [m["name"] for m in data["models"]] == ["base", "checkpoint-1", "checkpoint-2", "final"]
    assert len(data["cells"]) == 8 and all(c["status"] == "done" for c in data["cells"])
    cell = json.loads((out / "cells" / "checkpoint-1__bias__seed0.json").read_text())
    backend = cell["result"]["protocol"]["backend"]
    assert backend["backend"] == "hf" and backend["pixel_policy"]["size"] == 56  # the run's pixel policy
    assert (backend["adapter"] is not None) == (tuning == "lora")
    fps = {
        json.loads((out / "cells" / f"{m}__bias__seed0.json").read_text())["result"]["protocol"]["backend"][
            "weights_fingerprint"
        ]
        for m in ("base", "checkpoint-1", "checkpoint-2", "final")
    }
    assert len(fps) == 4  # four different models were loaded
    samples = (out / "cells" / "final__perception__seed0" / "samples.jsonl").read_text().splitlines()
    assert json.loads(samples[0])["text"].startswith("<think>\n")
    assert {p.name for p in (out / "plots").glob("*.png")} >= {
        "bias_vs_step.png",
        "perception_vs_step.png",
        "perception_protocols.png",
    }
    md = (out / "report.md").read_text()
    assert "## bias" in md and "## perception" in md
    assert "No model stands out" in md  # random weights never give a verdict: every model ties
    header = next(line for line in (out / "results.csv").read_text().splitlines())
    assert header == "model,step,kind,suite,metric,mean,std,n_seeds,values"
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    assert main(args) == 0  # the second run skips every cell
    assert {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")} == mtimes


@pytest.mark.parametrize(
    "config", sorted(Path(__file__).resolve().parents[1].glob("eval/configs/*.yaml")), ids=lambda p: p.stem
)
def test_shipped_eval_configs_build_a_plan(config, tmp_path, monkeypatch):
    from perception_judge.cli import build_parser
    from perception_judge.evaluation.cli import COMMAND, plan_of

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # as compare_api_judges.yaml says to

    data = ["--set", "bias.data=d", "--set", "perception.data=ts", "--set", "perception_mismatched.data=ts"]
    args = build_parser("eval", COMMAND).parse_args(
        ["run", "--config", str(config), "--out", str(tmp_path), "--model", "m=x", *data]
    )
    plan = plan_of(args)
    assert plan.suites and plan.seeds and plan.backend.kind in ("hf", "vllm", "openai", "scripted")
    from perception_judge.evaluation.suites import SUITES

    for suite, opts in plan.options.items():
        assert isinstance(opts, SUITES[suite].options)  # typed: an unknown option would have been refused


def test_backend_pixel_policy_is_used_and_fingerprinted(tmp_path):
    """A job config's backend.pixel_policy is the one the backend gets (it used to be overwritten by the run's policy
    while still entering the cell fingerprint), and it decides whether a finished cell is reused."""
    entry = S.ModelEntry("m", None, "model", {"fn": "constant"})
    run = S.read_run(dummy_run(tmp_path / "run", train_set="ts"))  # its pixel policy: fixed 56
    run_policy = PixelPolicy(mode="fixed", size=56, factor=28)
    own = {"mode": "fixed", "size": 112, "factor": 28}
    job = {"suites": ["perception"], "backend": {"kind": "scripted", "pixel_policy": own}}
    plan = resolve([job], tmp_path, run)
    backend = S.BackendPool(plan, [entry]).get(entry)
    assert backend.pixel_policy == PixelPolicy(**own)
    plain = resolve([{"suites": ["perception"], "backend": {"kind": "scripted"}}], tmp_path, run)
    assert S.BackendPool(plain, [entry]).get(entry).pixel_policy == run_policy
    assert S.cell_fingerprint(entry, "perception", 0, plan) != S.cell_fingerprint(
        entry, "perception", 0, plain
    )


def test_openai_backend_asks_for_a_lora_checkpoint_by_its_served_name(tmp_path):
    """Over a LoRA run the openai backend asks the server for each checkpoint under its entry name (the name it is
    served under with --lora-modules); it used to ask for the base model every time, so every checkpoint scored as
    the base."""
    run = S.read_run(dummy_run(tmp_path / "run", tuning="lora"))
    entries = S.discover_models(run)
    plan = resolve(
        [{"suites": ["bias"], "backend": {"kind": "openai", "base_urls": ["http://127.0.0.1:9/v1"]}}],
        tmp_path,
    )
    pool = S.BackendPool(plan, entries)
    asked = {e.name: pool.get(e).model for e in entries}
    assert asked == {
        "base": run.base_model,
        "checkpoint-10": "checkpoint-10",
        "checkpoint-20": "checkpoint-20",
        "final": "final",
    }


def test_judge_names_that_collide_as_file_names_are_refused(tmp_path):
    plan = resolve([{"suites": ["bias"], "backend": {"kind": "scripted"}}], tmp_path)
    entries = [
        S.ModelEntry("judge a", None, "model", {"fn": "constant"}),
        S.ModelEntry("judge/a", None, "model"),
    ]
    with pytest.raises(ValueError, match="'judge a' and 'judge/a' would share the result files judge_a__"):
        S.run_cells(entries, plan, progress=False)
    assert not list((tmp_path / "cells").glob("*")) if (tmp_path / "cells").exists() else True
    with pytest.raises(ValueError, match="listed twice"):
        S.check_cell_names([entries[0], entries[0]])
    S.check_cell_names([entries[0], S.ModelEntry("judge-a")])  # distinct file names pass


def test_api_keys_never_reach_the_sweep_files(tmp_path):
    from perception_judge.core.redact import REDACTED, redact

    secret = "sk-live-0123456789abcdefghijkl"
    backend = {"kind": "openai", "model": "m", "api_key": secret, "concurrency": 32, "api_key_env": "MY_KEY",
               "base_urls": ["http://127.0.0.1:9/v1"]}  # fmt: skip
    plan = resolve(
        [{"suites": ["bias"], "backend": backend, "options": {"bias": {"model_key": secret}}}], tmp_path
    )
    d = plan.to_dict()
    assert d["backend"]["api_key"] == REDACTED and d["backend"]["concurrency"] == 32
    assert d["backend"]["api_key_env"] == "MY_KEY"  # the variable's name is no secret
    assert d["options"]["bias"]["model_key"] == REDACTED  # a value that looks like a key, in any option
    S.atomic_write_json(
        tmp_path / "plan.json", {"plan": plan.backend.to_dict(), "nested": [{"client_secret": "x"}]}
    )
    text = (tmp_path / "plan.json").read_text()
    assert secret not in text and '"client_secret": "<redacted>"' in text
    assert redact({"max_new_tokens": 16, "tokens": "abc"}) == {"max_new_tokens": 16, "tokens": REDACTED}


@pytest.mark.parametrize("kind", ["openai", "vllm"])
def test_backend_flag_drops_another_kinds_config_keys(kind, tmp_path, monkeypatch):
    """`--backend vllm` / `openai` with a config whose backend block is hf's kept hf-only keys ('device',
    'batch_size'), so every cell failed in the backend's constructor; now the plan keeps only keys the chosen kind
    takes, and a key a kind does not take is an error that names it."""
    from perception_judge.cli import build_parser
    from perception_judge.evaluation.backends import KINDS, load_backend
    from perception_judge.evaluation.cli import COMMAND, plan_of

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # the openai backend's server

    config = Path(__file__).resolve().parents[1] / "eval/configs/tiny.yaml"
    data = ["--set", "perception.data=ts", "--set", "perception_mismatched.data=ts"]
    args = build_parser("eval", COMMAND).parse_args(
        ["run", "--config", str(config), "--out", str(tmp_path), "--model", "m=x", "--backend", kind, *data]
    )
    plan = plan_of(args)
    assert plan.backend.kind == kind
    assert type(plan.backend.options) is KINDS[kind].Options  # only keys the chosen kind takes
    assert "device" not in plan.backend.to_dict()
    if kind == "vllm":
        assert (
            plan.backend.options.batch_size == 32 and plan.backend.options.dtype == "float32"
        )  # shared keys stay
    with pytest.raises(
        ValueError, match=rf"backend\.device: unknown option of the {kind} backend \(got 'cpu'\)"
    ):
        load_backend({"kind": kind, "model": "m", "device": "cpu"})


def test_a_cell_whose_backend_died_is_failed_and_redone(tmp_path):
    """A cell whose judge calls mostly failed in the backend (the server killed mid-run) used to be recorded as
    done, the sweep exited 0 and a re-run skipped it. Now it is failed with the count, and a re-run redoes it."""
    from perception_judge.evaluation.base import error_result

    run_dir = dummy_run(tmp_path / "run", steps=(5,), final=False)
    out = tmp_path / "eval"
    alive = {"calls": 0, "until": 3}

    class DyingBackend(ScriptedBackend):
        def judge(self, requests, sampling):
            good = super().judge(requests, sampling)
            out = []
            for res in good:
                alive["calls"] += 1
                dead = alive["calls"] > alive["until"]
                out.append(error_result(res_req[res.request_id], "connection refused") if dead else res)
            return out

    res_req: dict = {}

    def factory(entry, plan):
        backend = DyingBackend(
            lambda req, s: (res_req.setdefault(req.request_id, req), format_scores(req, [8]))[1]
        )
        return backend

    plan = _plan(out, seeds=(0,))
    outcome, _ = S.sweep(run_dir, plan, backend_factory=factory, progress=False)
    assert outcome.failed == 2 and outcome.done == 0  # base and checkpoint-5: nearly every call failed
    cell = json.loads((out / "cells" / "checkpoint-5__bias__seed0.json").read_text())
    assert cell["status"] == "failed" and "failed in the backend" in cell["error"]
    assert "Failed cells" in (out / "report.md").read_text()

    alive["until"] = 10**9  # the server is back
    outcome, _ = S.sweep(run_dir, plan, backend_factory=factory, progress=False)
    assert outcome.done == 2 and outcome.skipped == 0

    assert S.backend_failure({"n_backend_errors": 1, "n_calls": 100}) is None  # transient errors stay
    assert "3 of 10" in S.backend_failure({"backend_errors": 3, "judgments": 10})


def test_a_judge_name_of_240_characters_keeps_its_files_within_the_limits(tmp_path):
    """Issue 29 item 10: `eval run` with a 240-character judge name judged the whole cell, then failed writing it
    (OSError: [Errno 36] File name too long). A long name is cut and hashed in file names; the name itself stays
    whole in the results."""
    from perception_judge.cli import main
    from perception_judge.evaluation.results import cell_id

    name = "judge-" + "x" * 200 + "/" + "y" * 33  # 240 characters
    out = tmp_path / "long"
    args = ["eval", "run", "--backend", "scripted", "--model", f"{name}=constant", "--suites", "bias",
            "--set", "bias.source=builtin", "--set", "bias.n_per_type=1", "--out", str(out), "-q"]  # fmt: skip
    assert main(args) == 0
    (cell,) = (out / "cells").glob("*.json")
    assert all(len(p.name) <= 100 for p in out.rglob("*"))
    assert json.loads(cell.read_text())["model"] == name and json.loads(cell.read_text())["status"] == "done"
    assert {r["model"] for r in json.loads((out / "results.json").read_text())["rows"]} == {name}
    assert main(args) == 0  # the re-run finds the cell under the same file name and skips it
    other = name[:-1] + "z"  # the same first 239 characters: other files
    assert cell_id(other, "bias", 0) != cell_id(name, "bias", 0) and len(cell_id(other, "bias", 0)) < 100
    assert cell_id("short name", "bias", 0) == "short_name__bias__seed0"  # short names read as before
