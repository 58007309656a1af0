"""The ``perception-judge`` command line: one entry point, a subcommand per job.

Subcommands are looked up lazily, so ``perception-judge --help`` answers instantly and a subcommand only
imports what it needs. Each subcommand is a :class:`~perception_judge.core.command.Command` living next to the code
it drives; ``train`` is trl's own parser (``perception_judge.train.run:COMMAND``), so accelerate can launch it on every
process: ``accelerate launch -m perception_judge.cli train RECIPE.yaml``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from perception_judge import __version__
from perception_judge.core.command import Command
from perception_judge.core.io import library_bars_off
from perception_judge.core.redact import redact_text

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
    "train": (
        "perception_judge.train.run:COMMAND",
        "GRPO training from a recipe (RECIPE.yaml [--key value ...]; docs/training.md)",
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
    "learnability": (
        "perception_judge.tiny.learnability:COMMAND",
        "can supervised training teach the tiny judge to look? (the upper bound of the demo's GRPO)",
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
        "training on several processes:  accelerate launch -m perception_judge.cli train recipes/tiny.yaml"
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line; the usage is what --help prints
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(name: str, command: Command) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"perception-judge {name}",
        description=(command.description or COMMANDS[name][1]).replace("``", "`"),  # reST in docstrings
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
        print(f"perception-judge: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if not sys.stderr.isatty():  # a log file: no library progress bars either
        library_bars_off()
    module_name, attr = COMMANDS[name][0].split(":")
    command = getattr(importlib.import_module(module_name), attr)
    if not isinstance(command, Command):  # a job with its own parser: training's, trl's
        return int(command(argv[1:]) or 0)
    parser = build_parser(name, command)
    if command.passthrough:
        args, args.passthrough = parser.parse_known_args(argv[1:])
    else:
        args = parser.parse_args(argv[1:])
    try:
        code = command.run(args)
    except (OSError, ValueError, KeyError, ImportError) as e:  # input or environment: one line, no traceback
        where = " ".join(filter(None, (name, vars(args).get("action"))))
        message = " ".join(redact_text(str(e.args[0] if isinstance(e, KeyError) and e.args else e)).split())
        print(f"perception-judge {where}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
