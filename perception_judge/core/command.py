"""A ``perception-judge`` subcommand as a record (:class:`Command`), defined next to the code it drives and named by
``module:attribute`` in the entry point's ``COMMANDS`` (:mod:`perception_judge.cli`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """A subcommand: ``add_arguments(parser)`` declares its flags, ``run(args)`` does the work (exit code);
    ``passthrough``: unknown ``--key value`` arguments go to ``args.passthrough`` (recipe overrides)."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    description: str = ""
    passthrough: bool = False
