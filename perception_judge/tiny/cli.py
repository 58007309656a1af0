"""``perception-judge make-tiny-model``: a tiny random-weight Qwen-VL judge folder, built offline."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from perception_judge.core.command import Command
from perception_judge.synth import TINY_FAMILIES
from perception_judge.tiny.models import ARCHS, TOKENIZERS
from perception_judge.tiny.supervised import FIRST_SLOT_BIAS, tiny_families


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", choices=ARCHS, default="qwen2_5_vl", help="model family (default: %(default)s)")
    p.add_argument("--out", required=True, help="output folder (created; existing files are overwritten)")
    p.add_argument("--seed", type=int, default=0, help="weight seed; the same seed gives identical weights")
    p.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        default="byte",
        help="byte (default): the demo's 532-token byte-level BPE and tiny templates; qwen: Qwen's real tokenizer, "
        "chat templates, special-token ids and processor settings (docs/real-tokenizer.md)",
    )
    p.add_argument(
        "--vocab-size",
        type=int,
        help="embedding rows (default: the tokenizer's size; 151936 for qwen, 152064 the Qwen2.5-VL-7B layout)",
    )
    p.add_argument(
        "--warm-start-steps",
        type=int,
        default=0,
        help="then teach it the tiny judge format with this many supervised steps (a guessed value as the think, "
        "vision frozen: it scores by what it states and stays at chance); 0 (default) keeps the random weights",
    )
    p.add_argument(
        "--from-supervised",
        metavar="DIR",
        help="instead: copy this supervised tiny judge (`python -m perception_judge.tiny.learnability --keep-model "
        "DIR`) and make it blind (docs/tiny-substrate.md)",
    )
    p.add_argument("--blind-steps", type=int, default=300, help="its steps with a random think (%(default)s)")
    p.add_argument(
        "--explore-steps",
        type=int,
        default=900,
        help=f"then steps with the first answer's value {FIRST_SLOT_BIAS:.0%}% of the time (%(default)s)",
    )
    p.add_argument(
        "--families",
        type=tiny_families,
        default=",".join(TINY_FAMILIES),
        help="the tiny families of its blind and exploring steps, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--reset-connector", action="store_true", help="also re-initialise the vision connector first"
    )


def _run(args: argparse.Namespace) -> int:
    from perception_judge.tiny.models import built_in_place, make_tiny_model
    from perception_judge.tiny.supervised import make_blind, warm_start_format

    if args.warm_start_steps < 0:
        raise SystemExit("--warm-start-steps must be >= 0")
    if args.from_supervised:
        src, out = Path(args.from_supervised), Path(args.out)
        if not (src / "config.json").is_file():
            raise SystemExit(f"--from-supervised {src}: no model there (config.json missing)")
        with built_in_place(out) as staging:
            shutil.copytree(src, staging)
            blind = {
                "seed": args.seed,
                "reset_connector": args.reset_connector,
                "explore_steps": args.explore_steps,
                "families": args.families,
                "data_worker": True,  # batches made ahead in a second process: the same weights, a fifth less time
            }
            stats = make_blind(staging, args.blind_steps, **blind)
        print(
            f"blind judge from {src} written to {out}: {stats['steps']} steps, loss {stats['loss_first']} -> "
            f"{stats['loss_last']} in {stats['seconds']} s; {args.explore_steps} exploring steps"
        )
        return 0
    try:
        out = make_tiny_model(
            args.arch, args.out, seed=args.seed, tokenizer=args.tokenizer, vocab_size=args.vocab_size
        )
    except (ValueError, ModuleNotFoundError) as e:
        raise SystemExit(f"make-tiny-model: {e}") from e
    print(f"tiny {args.arch} judge (seed {args.seed}, {args.tokenizer} tokenizer) written to {out}")
    if args.warm_start_steps:
        stats = warm_start_format(out, steps=args.warm_start_steps, seed=args.seed)
        print(
            f"format warm start: {stats['warm_start_steps']} steps, loss {stats['loss_first']} -> "
            f"{stats['loss_last']} in {stats['seconds']} s"
        )
    return 0


COMMAND = Command(
    _add_arguments,
    _run,
    "Build a tiny random-weight Qwen2.5-VL or Qwen3-VL judge (config, safetensors, tokenizer, processor, chat\n"
    "template) that AutoModelForImageTextToText / AutoProcessor load offline. For tests and the demo; real\n"
    "runs point recipes at real checkpoints. --tokenizer qwen gives a real-shape judge: Qwen's tokenizer, chat\n"
    "templates, special-token ids, vocabulary size and processor settings.",
)
