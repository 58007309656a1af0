"""The ``perception-judge`` command line: one entry point, a subcommand per job.

Subcommands are looked up lazily, so ``perception-judge --help`` answers instantly and a subcommand only
imports what it needs. Each subcommand is a :class:`Command` object living next to the code it drives.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from perception_judge import __version__


@dataclass(frozen=True)
class Command:
    """A subcommand: ``add_arguments(parser)`` declares its flags, ``run(args)`` does the work (exit code);
    ``passthrough``: unknown ``--key value`` arguments go to ``args.passthrough`` (recipe overrides)."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    description: str = ""
    passthrough: bool = False


# name -> (module:attribute of a Command, one-line help). Listed in pipeline order.
COMMANDS: dict[str, tuple[str, str]] = {
    "make-tiny-model": (
        "perception_judge.tiny.cli:COMMAND",
        "build a tiny Qwen-VL judge folder offline (random weights, optional format warm start)",
    ),
    "synth": (
        "perception_judge.ppjd.cli:SYNTH",
        "generate the synthetic perceptual source (procedural images + known attributes)",
    ),
    "build-ppjd": (
        "perception_judge.ppjd.cli:BUILD",
        "build PPJD counterfactuals with a teacher (resumable, fault tolerant)",
    ),
    "export": (
        "perception_judge.ppjd.cli:EXPORT",
        "export PPJD records to the training set (datasets parquet)",
    ),
    "merge-lora": (
        "perception_judge.train.cli:MERGE_LORA",
        "merge a LoRA adapter into its base model and save the result",
    ),
    "recipe-memory": (
        "perception_judge.train.cli:RECIPE_MEMORY",
        "per-GPU memory of a training recipe (ZeRO stage, activations, weight sync, vLLM): does it fit?",
    ),
    "eval": (
        "perception_judge.evaluation.cli:COMMAND",
        "evaluate judges: bias / perception suites, benchmarks, sweeps, reports",
    ),
    "chat-template": (
        "perception_judge.evaluation.chat_template:COMMAND",
        "print a judge's chat template with the think prefill, for a server's --chat-template",
    ),
    "demo": (
        "perception_judge.tiny.demo:COMMAND",
        "the whole loop at toy scale, offline, under runs/demo/ (what `make demo` runs)",
    ),
}


def _top_help() -> str:
    width = max(len(n) for n in COMMANDS)
    commands = "\n".join(f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items())
    return (
        f"perception-judge {__version__}: train multimodal LLM judges that look at the image first.\n\n"
        "usage: perception-judge COMMAND [options]   (perception-judge COMMAND --help for its options)\n\n"
        f"commands:\n{commands}\n\n"
        "training runs through accelerate:  accelerate launch train_grpo.py recipes/tiny.yaml"
    )


def build_parser(name: str, command: Command) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"perception-judge {name}",
        description=command.description or COMMANDS[name][1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return 0
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"perception-judge: unknown command {name!r}\n\n{_top_help()}", file=sys.stderr)
        return 2
    module_name, attr = COMMANDS[name][0].split(":")
    command: Command = getattr(importlib.import_module(module_name), attr)
    parser = build_parser(name, command)
    if command.passthrough:
        args, args.passthrough = parser.parse_known_args(argv[1:])
    else:
        args = parser.parse_args(argv[1:])
    try:
        code = command.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
