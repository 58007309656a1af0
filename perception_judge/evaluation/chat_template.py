"""``perception-judge chat-template MODEL``: the chat template a judge is rendered with, for a server.

A server renders the template of the model folder, which for a base model does not open the think block that the
``hf`` and ``vllm`` backends prefill; serve a judge with this one (``--chat-template judge.jinja``) and the
``openai`` backend sends the very prompt the other backends render.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perception_judge.core.command import Command


def judge_chat_template(model: str | Path, think_prefix: str = "auto") -> str:
    """The chat template of a judge folder with the think prefill installed (``think_prefix="off"``: as saved)."""
    from transformers import AutoProcessor

    from perception_judge.core.protocol import chat_template_of, prepare_processor

    processor = prepare_processor(AutoProcessor.from_pretrained(model), think_prefix)
    return chat_template_of(processor)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a judge model folder (its processor holds the chat template)")
    p.add_argument("--out", help="write the template here (default: standard output)")
    p.add_argument(
        "--think-prefix",
        choices=("auto", "off"),
        default="auto",
        help="auto (default): open a <think> block in the generation prompt unless the template already does",
    )


def _run(args: argparse.Namespace) -> int:
    text = judge_chat_template(args.model, args.think_prefix)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}: serve with --chat-template {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


COMMAND = Command(_add_arguments, _run, __doc__ or "")
