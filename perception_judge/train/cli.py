"""``perception-judge merge-lora``: fold a LoRA adapter into its base model and save a full model folder.

    perception-judge merge-lora --base Qwen/Qwen2.5-VL-32B-Instruct --adapter sungnyun/Flex-VL-32B-LoRA \\
        --out runs/merged/flex-vl-32b --dtype bfloat16

Also merges the adapters this trainer writes (``--adapter runs/x/checkpoint-30``; the base is the run's
``base_model`` in ``perception_judge_run.json`` when ``--base`` is omitted). The processor is taken from the
adapter folder when it has one (trainer checkpoints do), else from the base.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perception_judge.cli import Command


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapter", required=True, help="LoRA adapter folder or hub id")
    parser.add_argument(
        "--base", help="base model folder or hub id (default: base_model of the run the adapter belongs to)"
    )
    parser.add_argument("--out", required=True, help="output folder for the merged model and its processor")
    parser.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float16", "float32", "auto"],
        help="weights dtype",
    )
    parser.add_argument("--trust-remote-code", action="store_true", help="allow custom model code")


def base_from_run(adapter: str) -> str | None:
    """The ``base_model`` of the run an adapter folder (or checkpoint folder inside it) belongs to."""
    from perception_judge.core.runinfo import RUN_FILE, read_run_info

    runs = [folder for folder in (Path(adapter), Path(adapter).parent) if (folder / RUN_FILE).is_file()]
    return read_run_info(runs[0]).get("base_model") if runs else None


def _run(args: argparse.Namespace) -> int:
    from perception_judge.train.models import merge_lora

    base = args.base or base_from_run(args.adapter)
    if not base:
        print(
            "merge-lora: --base is required (the adapter is not inside a run folder with perception_judge_run.json)",
            file=sys.stderr,
        )
        return 2
    out = merge_lora(base, args.adapter, args.out, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    print(f"merged {args.adapter} into {base} -> {out}")
    return 0


MERGE_LORA = Command(add_arguments=_add_arguments, run=_run, description=__doc__)
