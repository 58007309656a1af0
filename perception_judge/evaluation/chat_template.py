"""``perception-judge chat-template MODEL``: the chat template a judge is rendered with, for a server.

A server renders the template of the model folder, which for a base model does not open the think block that the
``hf`` and ``vllm`` backends prefill; serve a judge with this one (``--chat-template judge.jinja``) and the
``openai`` backend sends the very prompt the other backends render.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Literal

from perception_judge.core.command import Command
from perception_judge.core.io import check_writable
from perception_judge.core.options import Options, add_flags, options_from_args
from perception_judge.evaluation.backends.common import check_folder


def judge_chat_template(model: str | Path, think_prefix: str = "auto") -> str:
    """The chat template of a judge folder with the think prefill installed (``think_prefix="off"``: as saved)."""
    from transformers import AutoProcessor

    from perception_judge.core.protocol import chat_template_of, prepare_processor

    processor = prepare_processor(AutoProcessor.from_pretrained(model), think_prefix)
    return chat_template_of(processor)


class ChatTemplateOptions(Options):
    out: str | None = None
    """write the template here (default: standard output)"""
    think_prefix: Literal["auto", "off"] = "auto"
    """auto: open a <think> block in the generation prompt unless the template already does; off: as saved"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a judge model folder (its processor holds the chat template)")
    add_flags(p, ChatTemplateOptions)


def _run(args: argparse.Namespace) -> int:
    o = options_from_args(ChatTemplateOptions, args, "chat-template")
    if o.out:
        check_writable(Path(o.out).parent, "the template", "--out FILE")
    check_folder(args.model)
    text = judge_chat_template(args.model, o.think_prefix)
    if o.out:
        Path(o.out).write_text(text)
        print(f"wrote {o.out}: serve with --chat-template {o.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


COMMAND = Command(_add_arguments, _run, __doc__ or "")
