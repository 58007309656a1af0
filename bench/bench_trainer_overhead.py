"""Overhead of ``train_grpo.py`` over a plain trl ``GRPOTrainer`` script (target: median step-time ratio <= 1.05).

Both sides train the same tiny Qwen2.5-VL model on the same toy training set with the same batch, generation
settings, rewards and seed (so they sample the same completions and do the same work). The plain side is a
straight trl script: ``GRPOTrainer(model=<path>, args=GRPOConfig(...), reward_funcs=[...])`` on the parquet
split, with the processor prepared by the shared protocol so that the prompts are identical. The measured side is
``python train_grpo.py recipes/tiny.yaml`` with its data checks, pixel policy, timing wrappers, callbacks and run
files. The runs alternate in one invocation (plain then ours, then ours then plain, ...) so slow drifts of a shared machine hit
both; the first steps of every run are dropped as warm-up, and the medians of trl's own ``step_time`` are compared.

    python bench/bench_trainer_overhead.py [--rounds 4 --steps 14 --warmup 4]

Prints one ``BENCH_RESULT {json}`` line per metric.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny.yaml"
TARGET = 1.05


def result(name: str, value: float, target: float | None, unit: str, higher_is_better: bool = False) -> None:
    """Print one metric for ``bench/run_all.py``; every metric here is a time or a time ratio (lower is better)."""
    row = {
        "name": name,
        "value": round(value, 4),
        "target": target,
        "unit": unit,
        "higher_is_better": higher_is_better,
    }
    print("BENCH_RESULT " + json.dumps(row), flush=True)


def plain_trl(data: str, model: str, out: str, steps: int) -> None:
    """The baseline: trl's GRPOTrainer as its documentation uses it, same settings as recipes/tiny.yaml."""
    import dataclasses

    import yaml
    from transformers import AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    from perception_judge.core.protocol import prepare_processor, template_opens_think
    from perception_judge.core.trainset import load_training_set
    from perception_judge.rewards import REWARDS
    from perception_judge.train.rewards import DIAGNOSTIC_REWARDS

    recipe = yaml.safe_load(RECIPE.read_text())
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    kwargs = {k: v for k, v in recipe.items() if k in fields and k != "env"}
    kwargs.update(
        output_dir=out,
        max_steps=steps,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        reward_weights=recipe["reward_weights"],
    )
    args = GRPOConfig(**kwargs)
    processor = prepare_processor(AutoProcessor.from_pretrained(model, padding_side="left"), "auto")
    think_open = template_opens_think(processor)
    rewards = [
        REWARDS["judge"].with_options(think_open=think_open),
        REWARDS["format"].with_options(think_open=think_open),
        DIAGNOSTIC_REWARDS["digit_fraction"],
    ]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=load_training_set(data)["train"],
        processing_class=processor,
    )
    trainer.train()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "trainer_state.json").write_text(json.dumps({"log_history": trainer.state.log_history}))


def _run(cmd: list[str]) -> float:
    start = time.time()
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )
    if proc.returncode != 0:
        sys.exit(f"bench run failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return time.time() - start


def _step_times(out: Path, warmup: int) -> tuple[list[float], float | None]:
    logs = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [h["step_time"] for h in logs if "step_time" in h][warmup:]
    runtime = next((h["train_runtime"] for h in logs if "train_runtime" in h), None)
    return steps, runtime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="pairs of runs, the order alternating")
    ap.add_argument("--steps", type=int, default=14, help="optimizer steps per run")
    ap.add_argument("--warmup", type=int, default=4, help="first steps of each run left out")
    ap.add_argument("--plain", nargs=3, metavar=("DATA", "MODEL", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.plain:
        plain_trl(*args.plain, steps=args.steps)
        return 0

    from perception_judge.tiny.models import make_tiny_model
    from perception_judge.tiny.toyset import write_toy_training_set

    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as tmp:
        data = str(write_toy_training_set(Path(tmp) / "data", n_train=64, n_validation=0))
        model = str(make_tiny_model("qwen2_5_vl", Path(tmp) / "model"))
        plain_steps: list[float] = []
        ours_steps: list[float] = []
        plain_rt: list[float] = []
        ours_rt: list[float] = []

        def run_plain(r: int) -> None:
            out = Path(tmp) / f"plain{r}"
            _run([sys.executable, __file__, "--steps", str(args.steps), "--plain", data, model, str(out)])
            s, rt = _step_times(out, args.warmup)
            plain_steps.extend(s)
            plain_rt.extend([rt] if rt else [])

        def run_ours(r: int) -> None:
            out = Path(tmp) / f"ours{r}"
            _run(
                [
                    sys.executable, str(ROOT / "train_grpo.py"), str(RECIPE),
                    "--dataset_name", data, "--model_name_or_path", model, "--output_dir", str(out),
                    "--max_steps", str(args.steps), "--eval_strategy", "no", "--save_strategy", "no",
                ]
            )  # fmt: skip
            s, rt = _step_times(out, args.warmup)
            ours_steps.extend(s)
            ours_rt.extend([rt] if rt else [])

        for r in range(args.rounds):
            order = (
                (run_plain, run_ours) if r % 2 == 0 else (run_ours, run_plain)
            )  # neither side always first
            for fn in order:
                fn(r)
            print(
                f"round {r + 1}/{args.rounds}: plain median {statistics.median(plain_steps):.4f} s, "
                f"train_grpo.py median {statistics.median(ours_steps):.4f} s",
                flush=True,
            )
    mp, mo = statistics.median(plain_steps), statistics.median(ours_steps)
    ratio = mo / mp
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(
        f"median step time over {len(plain_steps)} / {len(ours_steps)} steps: plain trl {mp:.4f} s, "
        f"train_grpo.py {mo:.4f} s -> ratio {ratio:.3f} (target <= {TARGET}) {verdict}"
    )
    result("trainer_overhead_step_time_ratio", ratio, TARGET, "x")
    result("trainer_step_time_median_plain_trl", mp, None, "s")
    result("trainer_step_time_median_train_grpo", mo, None, "s")
    if plain_rt and ours_rt:
        rt_ratio = statistics.median(ours_rt) / statistics.median(plain_rt)
        print(f"train_runtime (whole loop incl. callbacks and logging) ratio: {rt_ratio:.3f}")
        result("trainer_overhead_train_runtime_ratio", rt_ratio, None, "x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
