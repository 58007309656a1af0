"""``make demo`` / ``perception-judge demo``: the whole loop at toy scale, offline, under ``runs/demo/``.

    tiny synthetic world (coloured shapes; ``--families colour,count`` adds counting) -> PPJD (programmatic
    teacher) -> training-set export (tiny prompt style) -> learnability check (a supervised tiny Qwen-VL judge) ->
    base judge (that judge made blind: it writes verdicts but does not look) -> GRPO (``accelerate launch -m
    perception_judge.cli train`` with the demo's recipe) -> evaluation sweep (perception suite with real and with
    mismatched images, bias suite) over the base model and every checkpoint -> report, learning curve and
    ``summary.json`` (does the judge learn to look?)

Every stage is the command a user would type (printed before it runs), so the demo doubles as a worked example. Its
recipe, accelerate and eval configurations ship in the package (``demo_files/``), so it runs from any folder.
Re-running resumes: finished stages are skipped and the resumable ones (PPJD build, training, sweep) pick up where
they stopped. ``runs/demo/demo.json`` records the settings the folder was made with; a re-run with other settings
(or other recipe / eval config files) refuses to mix the two runs and asks for ``--fresh``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from perception_judge import __version__
from perception_judge.core.command import Command
from perception_judge.core.options import Options, add_flags, options_from_args
from perception_judge.core.runinfo import RUN_FILE, read_run_info
from perception_judge.core.schema import sha256_hex
from perception_judge.tiny.world import TinyFamilies

FILES = Path(__file__).with_name("demo_files")
RECIPE = FILES / "recipes" / "tiny_demo.yaml"
EVAL_CONFIG = FILES / "eval" / "configs" / "tiny.yaml"
# GRPO on both cores: two gloo processes
ACCELERATE_CONFIG = FILES / "configs" / "accelerate" / "cpu_2proc.yaml"
DEMO_FORMAT = 5
_NOISE = ("get_accelerator", "new PAD/BOS/EOS tokens")  # the stages print no progress bars into a pipe
_WHERE = {
    "synth/": "synthetic items: items.jsonl + images/ (every perceptual attribute known)",
    "ppjd/": "PPJD records (records-*.jsonl), failures.jsonl, manifest.json",
    "trainset/": "training set: train/validation parquet + README.md dataset card",
    "tiny-model/": "the tiny Qwen2.5-VL judge the run started from",
    "train/": "checkpoints, final model + processor, README.md model card, perception_judge_run.json",
    "summary.json": "held-out accuracy with 95% CI, ties, parse failures, mismatched control, per model",
    "eval/report.md": "the report: does the judge learn to look, then tables per suite and model",
    "eval/plots/learning_curve.png": "held-out accuracy and training reward against step",
    "eval/plots/": "PNG plots: the nine biases, metrics vs training step, per-protocol accuracies",
    "eval/results.csv": "one row per (model, suite, seed) cell, every metric (also results.json)",
}


class DemoError(RuntimeError):
    pass


class DemoOptions(Options):
    out: str = "runs/demo"
    """demo folder"""
    fresh: bool = False
    """delete the demo folder first and start over"""
    n_items: int = 1200
    """synthetic items"""
    seed: int = 0
    """seed of the synthetic source and the export"""
    mix: str = "batch=1,pair=1"
    """protocol mix of the export"""
    families: TinyFamilies = ("colour",)
    """the tiny world's families, comma-separated; colour,count adds 1-4 dark squares, which GRPO learns far more
    slowly: run it with --learnability-steps 2000 --train-steps 1200 (one GRPO process was measured: about 15
    minutes, docs/tiny-substrate.md)"""
    train_steps: int | None = None
    """GRPO steps (default: the recipe's max_steps); saves 4 checkpoints"""
    warm_start_steps: int | None = None
    """format warm-start steps of a generated judge (default: the recipe's)"""
    blind_steps: int = 300
    """steps that make the supervised judge blind"""
    explore_steps: int = 900
    """then steps that make its think explore the answers' values"""
    learnability_steps: int = 2500
    """supervised steps of the learnability check run before GRPO (about 3 minutes; 0 skips it)"""
    reset_connector: bool = False
    """also re-initialise the base judge's vision-language connector, so GRPO must learn a new one"""


class Stage(NamedTuple):
    key: str  # its entry in timings.json
    title: str
    skipped: str | None  # what to print when it was done before; None: run it (the resumable ones always run)
    cmd: list[str]
    ok_codes: tuple[int, ...] = (0,)


def _sha(path: Path) -> str:
    return sha256_hex(path.read_bytes())[:16]


def settings(o: DemoOptions) -> dict[str, Any]:
    """What defines a demo run; a folder made with other settings is never silently continued."""
    return {
        "format": DEMO_FORMAT,
        **o.model_dump(exclude={"out", "fresh"}),
        "families": ",".join(o.families),
        "recipe_sha": _sha(RECIPE),
        "eval_config_sha": _sha(EVAL_CONFIG),
    }


def check_or_claim(out: Path, wanted: dict[str, Any], fresh: bool) -> str:
    """Start fresh, resume a matching run, or refuse: returns "fresh" or "resume"."""
    marker = out / "demo.json"
    if fresh and out.exists():
        shutil.rmtree(out)
    if out.exists() and any(out.iterdir()):
        if not marker.is_file():
            raise DemoError(
                f"{out} exists but was not made by the demo (no demo.json); move it away or run with FRESH=1 "
                "(make demo FRESH=1 / perception-judge demo --fresh) to replace it"
            )
        have = json.loads(marker.read_text()).get("settings", {})
        if have != wanted:
            diff = ", ".join(f"{k}: {have.get(k)!r} -> {v!r}" for k, v in wanted.items() if have.get(k) != v)
            raise DemoError(
                f"{out} holds a demo run made with other settings ({diff}); it will not be mixed with this one. "
                "Re-run with FRESH=1 (make demo FRESH=1 / perception-judge demo --fresh) to start over."
            )
        return "resume"
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(
        json.dumps({"settings": wanted, "version": __version__, "created": time.time()}, indent=2)
    )
    return "fresh"


def run_stage(
    title: str, cmd: list[str], log: Path, env: dict[str, str], ok_codes: tuple[int, ...] = (0,)
) -> dict[str, float]:
    """Run one stage as a subprocess, echoing the command; output goes to the terminal and to ``log``. Returns
    its wall and CPU seconds (user + system of its processes: comparable on a loaded machine)."""
    shown = " ".join(shlex.quote(c) for c in cmd).replace(
        sys.executable + " -m perception_judge.cli", "perception-judge"
    )
    shown = shown.replace(sys.executable + " -m accelerate.commands.launch", "accelerate launch")
    print(f"\n==> {title}\n    $ {shown}", flush=True)
    t0, cpu0 = time.perf_counter(), _child_cpu()
    with log.open("a") as fh:
        fh.write(f"\n$ {shown}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            s = line.strip()
            if s and not any(n in s for n in _NOISE) and not s.startswith(("{'", "warnings.warn")):
                print("    " + line.rstrip(), flush=True)
        code = proc.wait()
    secs, cpu = time.perf_counter() - t0, _child_cpu() - cpu0
    if code not in ok_codes:
        raise DemoError(f"stage '{title}' failed (exit {code}); the full output is in {log}")
    print(f"    done in {secs:.0f} s ({cpu:.0f} s CPU)", flush=True)
    return {"wall_s": round(secs, 1), "cpu_s": round(cpu, 1)}


def _child_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _train_flags(o: DemoOptions) -> list[str]:
    """The recipe values the demo's flags override: --train-steps (4 checkpoints) and --warm-start-steps."""
    flags: dict[str, int | str] = {}
    if o.train_steps:
        every = max(1, o.train_steps // 4)
        flags = {
            "max_steps": o.train_steps,
            "save_steps": every,
            "eval_steps": every,
            "logging_steps": min(10, every),
        }
    if o.warm_start_steps is not None:  # updates the recipe's model_provider_options
        flags["model_provider_options"] = f"warm_start_steps={o.warm_start_steps}"
    return [arg for key, value in flags.items() for arg in (f"--{key}", str(value))]


def _free_port() -> int:
    """A TCP port free now, for the GRPO stage's rendezvous (accelerate's default, 29500, may be another run's)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stages(o: DemoOptions, out: Path, rel: str) -> list[Stage]:
    cli = [sys.executable, "-m", "perception_judge.cli"]
    seed = ["--seed", str(o.seed)]
    families = ",".join(o.families)
    done = {
        "synth": (out / "synth" / "synth_info.json").is_file(),
        "export": (out / "trainset" / "export_info.json").is_file(),
        "learn": (out / "learnability.json").is_file(),
        "base": (out / "tiny-model" / "config.json").is_file(),
        "train": (out / "train" / RUN_FILE).is_file()
        and read_run_info(out / "train").get("status") == "finished",
    }
    extra = _train_flags(o)
    stages = [
        Stage(
            "synth",
            f"1/5 synthetic perceptual source (the tiny world: {' and '.join(o.families)} images with known "
            "attributes)",
            "1/5 synthetic source: done before, skipped" if done["synth"] else None,
            [*cli, "synth", "--n", str(o.n_items), *seed, "--out", f"{rel}/synth", "--families", families,
             "--text-only-fraction", "0", "--no-progress"],
        ),
        Stage(
            "ppjd",
            "2/5 PPJD: verified counterfactuals r_rp and r_rp+r (programmatic teacher; resumes)",
            None,
            [*cli, "build-ppjd", "--input", f"{rel}/synth", "--out", f"{rel}/ppjd", "--teacher", "programmatic",
             "--no-progress"],
        ),
        Stage(
            "export",
            "3/5 export to the training set (datasets parquet, split by source image)",
            "3/5 export: done before, skipped" if done["export"] else None,
            [*cli, "export", f"{rel}/ppjd", "--out", f"{rel}/trainset", "--mix", o.mix, *seed, "--prompt-style",
             "tiny", "--overwrite"],
        ),
    ]  # fmt: skip
    if o.learnability_steps:
        stages += [
            Stage(
                "learnability",
                "4a/5 learnability check: supervised training on the PPJD verdict target (the upper bound of GRPO)",
                "4a/5 learnability check: done before, skipped" if done["learn"] else None,
                [*cli, "learnability", "--steps", str(o.learnability_steps), *seed, "--families", families, "--out",
                 f"{rel}/learnability.json", "--no-progress", "--keep-model", f"{rel}/supervised-model"],
                (0, 1),
            ),
            Stage(
                "base",
                "4b/5 base judge: the supervised judge made blind (vision frozen, its think becomes a random value, "
                "then one of the values the answers state: it keeps the verdict format, stops looking and explores)",
                "4b/5 base judge: done before, skipped" if done["base"] else None,
                [*cli, "make-tiny-model", "--from-supervised", f"{rel}/supervised-model", "--out",
                 f"{rel}/tiny-model", "--blind-steps", str(o.blind_steps), "--explore-steps",
                 str(o.explore_steps), *seed, "--families", families,
                 *(["--reset-connector"] if o.reset_connector else [])],
            ),
        ]  # fmt: skip
    return [
        *stages,
        Stage(
            "grpo",
            "4/5 GRPO on a tiny Qwen2.5-VL judge, two processes (built and format-warm-started on first use; resumes)",
            "4/5 training: finished before, skipped" if done["train"] else None,
            [sys.executable, "-m", "accelerate.commands.launch", "--config_file", _path(ACCELERATE_CONFIG),
             "--main_process_port", str(_free_port()), "-m", "perception_judge.cli", "train",
             _path(RECIPE), "--model_name_or_path", f"{rel}/tiny-model", "--dataset_name", f"{rel}/trainset",
             "--output_dir", f"{rel}/train", "--resume_from_checkpoint", "auto", "--disable_tqdm", "true",
             *extra],
        ),
        Stage(
            "sweep",
            "5/5 evaluation sweep: perception (real and mismatched images) + bias suites over the base model and "
            "every checkpoint (resumes)",
            None,
            [*cli, "eval", "sweep", f"{rel}/train", "--config", _path(EVAL_CONFIG), "--out", f"{rel}/eval", "-q"],
        ),
    ]  # fmt: skip


def _path(file: Path) -> str:
    """A shipped file as the stages are given it: relative to the current folder when it is inside it."""
    return os.path.relpath(file) if file.resolve().is_relative_to(Path.cwd().resolve()) else str(file)


def main_demo(args: argparse.Namespace) -> int:
    o = options_from_args(DemoOptions, args, "demo")
    out = Path(o.out)
    try:
        mode = check_or_claim(out, settings(o), o.fresh)
    except DemoError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 2
    rel = os.path.relpath(out)
    offline = dict.fromkeys(
        ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "PYTHONUNBUFFERED"), "1"
    )
    env = dict(os.environ, **offline, TOKENIZERS_PARALLELISM="false")
    env.setdefault("WANDB_MODE", "disabled")
    # One thread: the tiny judge trains as fast as with two, and the float reduction order (hence the GRPO trajectory)
    # no longer depends on the machine's core count.
    env.setdefault("OMP_NUM_THREADS", "1")
    log = out / "demo.log"
    print(
        f"perception-judge demo ({'starting fresh' if mode == 'fresh' else 'resuming'}) in {rel}/; log: {rel}/demo.log"
    )
    t0 = time.perf_counter()
    times_path = out / "timings.json"
    # a resumed run keeps the times of the stages it skips
    times = json.loads(times_path.read_text()) if times_path.is_file() else {}
    try:
        for stage in _stages(o, out, rel):
            if stage.skipped is None:
                times[stage.key] = run_stage(stage.title, stage.cmd, log, env, stage.ok_codes)
                times_path.write_text(json.dumps(times, indent=2) + "\n")
            else:
                print(f"\n==> {stage.skipped}")
        from perception_judge.tiny.demo_summary import write_demo_summary

        summary = write_demo_summary(out)
    except DemoError as e:
        print(
            f"\ndemo: {e}\nRe-run `make demo` to resume from here, or `make demo FRESH=1` to start over.",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("\ndemo: interrupted; `make demo` resumes from here", file=sys.stderr)
        return 130
    print(f"\n==> demo finished in {time.perf_counter() - t0:.0f} s. Where everything is:")
    for path, what in _WHERE.items():
        print(f"  {rel}/{path:<18} {what}")
    for line in _summary_lines(out) + _learning_lines(summary) + _time_lines(summary):
        print("  " + line)
    return 0


def _time_lines(summary: dict[str, Any] | None) -> list[str]:
    """Each stage's wall and CPU seconds (user + system of its processes), as its last run measured them."""
    times = (summary or {}).get("timings") or {}
    if not times:
        return []
    shown = ", ".join(f"{k} {v['wall_s']:.0f}/{v['cpu_s']:.0f}" for k, v in times.items())
    wall, cpu = (sum(v[k] for v in times.values()) for k in ("wall_s", "cpu_s"))
    return [
        f"time per stage, wall/CPU s: {shown}; total {wall:.0f} s wall ({wall / 60:.1f} min), {cpu:.0f} s CPU"
    ]


def _summary_lines(out: Path) -> list[str]:
    lines = []
    report = out / "eval" / "report.json"
    if report.is_file():
        summary = json.loads(report.read_text()).get("summary", {})
        lines.append(f"best checkpoint: {summary.get('best_checkpoint')}  ({summary.get('criterion', '')})")
        for suite, info in summary.get("per_suite", {}).items():
            value = info.get("value")
            shown = "n/a" if value is None else f"{value:.3f}"
            lines.append(f"  {suite}: {info.get('metric')} = {shown} for {info.get('best')}")
    if (out / "train" / RUN_FILE).is_file():
        final = read_run_info(out / "train").get("final_metrics") or {}
        keys = ("rewards/judge/mean", "rewards/format/mean", "judge/parse_failure_rate")
        got = ", ".join(f"{k} {final[k]:.3f}" for k in keys if isinstance(final.get(k), int | float))
        if got:
            lines.append(f"last training step: {got}")
    return lines


def _learning_lines(summary: dict[str, Any] | None) -> list[str]:
    if not summary:
        return []
    from perception_judge.tiny.demo_summary import fmt_block

    lines = [
        "held-out pair accuracy (chance 0.5; ties count 1/2), r_c vs r_rp | r_c vs r_rp+r | mismatched images:"
    ]
    for m in summary["models"]:
        blocks = " | ".join(fmt_block(m[k]) for k in ("c_vs_rp", "c_vs_rpr", "c_vs_rp_mismatched"))
        lines.append(f"  {m['name']:<18} {blocks}")
    if "learned" in summary:
        lines.append(
            f"the last checkpoint ({summary['last']}) meets the learning targets: {summary['learned']}"
        )
    return lines


COMMAND = Command(lambda p: add_flags(p, DemoOptions), main_demo, __doc__ or "")
