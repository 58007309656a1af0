"""``perception-judge make-tiny-model``: a tiny random-weight Qwen-VL judge folder, built offline."""

from __future__ import annotations

import argparse

from perception_judge.cli import Command
from perception_judge.tiny_models import ARCHS


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", choices=ARCHS, default="qwen2_5_vl", help="model family (default: %(default)s)")
    p.add_argument("--out", required=True, help="output folder (created; existing files are overwritten)")
    p.add_argument("--seed", type=int, default=0, help="weight seed; the same seed gives identical weights")
    p.add_argument(
        "--warm-start-steps",
        type=int,
        default=0,
        help="then teach it the judge output format with this many supervised steps (random scores, no "
        "preferences; ~0.1 s a step); 0 (default) leaves the weights random",
    )


def _run(args: argparse.Namespace) -> int:
    from perception_judge.tiny_models import make_tiny_model, warm_start_format

    if args.warm_start_steps < 0:
        raise SystemExit("--warm-start-steps must be >= 0")
    out = make_tiny_model(args.arch, args.out, seed=args.seed)
    print(f"tiny {args.arch} judge (seed {args.seed}) written to {out}")
    if args.warm_start_steps:
        stats = warm_start_format(out, steps=args.warm_start_steps, seed=args.seed)
        print(
            f"format warm start: {stats['warm_start_steps']} steps, loss {stats['loss_first']} -> "
            f"{stats['loss_last']}, greedy format rate {stats['greedy_format_rate']:.0%}"
        )
    return 0


COMMAND = Command(
    _add_arguments,
    _run,
    "Build a tiny random-weight Qwen2.5-VL or Qwen3-VL judge (config, safetensors, tokenizer, processor, chat\n"
    "template) that AutoModelForImageTextToText / AutoProcessor load offline. For tests and the demo; real\n"
    "runs point recipes at real checkpoints.",
)
