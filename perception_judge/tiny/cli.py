"""``perception-judge make-tiny-model``: a tiny random-weight Qwen-VL judge folder, built offline."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from perception_judge.core.command import Command
from perception_judge.core.io import check_writable
from perception_judge.core.options import Flag, OptionError, Options, add_flags, options_from_args
from perception_judge.tiny.models import ARCHS, TOKENIZERS
from perception_judge.tiny.supervised import FIRST_SLOT_BIAS
from perception_judge.tiny.world import TINY_FAMILIES, TinyFamilies


class TinyModelOptions(Options):
    arch: Literal[ARCHS] = "qwen2_5_vl"  # type: ignore[valid-type]
    """model family"""
    out: str
    """output folder (created; existing files are overwritten)"""
    seed: int = 0
    """weight seed; the same seed gives identical weights"""
    tokenizer: Literal[TOKENIZERS] = "byte"  # type: ignore[valid-type]
    """byte: the demo's 532-token byte-level BPE and tiny templates; qwen: Qwen's real tokenizer, chat templates,
    special-token ids and processor settings (docs/real-tokenizer.md)"""
    vocab_size: int | None = None
    """embedding rows (default: the tokenizer's size; 151936 for qwen, 152064 the Qwen2.5-VL-7B layout)"""
    warm_start_steps: Annotated[int, Field(ge=0)] = 0
    """then teach it the tiny judge format with this many supervised steps (a guessed value as the think, vision
    frozen: it scores by what it states and stays at chance); 0 keeps the random weights"""
    from_supervised: Annotated[str | None, Flag(metavar="DIR")] = None
    """instead: copy this supervised tiny judge (`perception-judge learnability --keep-model DIR`) and make it blind
    (docs/tiny-substrate.md)"""
    blind_steps: int = 300
    """its steps with a random think"""
    explore_steps: int = Field(
        900, description=f"then steps with the first answer's value {FIRST_SLOT_BIAS:.0%} of the time"
    )
    families: TinyFamilies = TINY_FAMILIES
    """the tiny families of its blind and exploring steps, comma-separated"""
    reset_connector: bool = False
    """also re-initialise the vision connector first"""


def _blind(o: TinyModelOptions) -> int:
    from perception_judge.tiny.models import built_in_place
    from perception_judge.tiny.supervised import make_blind

    src, out = Path(o.from_supervised or ""), Path(o.out)
    if not (src / "config.json").is_file():
        raise OptionError(f"make-tiny-model.from_supervised: no model in {str(src)!r} (config.json missing)")
    with built_in_place(out) as staging:
        shutil.copytree(src, staging)
        stats = make_blind(  # data_worker: batches made ahead in a second process (the same weights, a fifth less time)
            staging,
            o.blind_steps,
            o.seed,
            o.reset_connector,
            o.explore_steps,
            families=o.families,
            data_worker=True,
        )
    print(
        f"blind judge from {src} written to {out}: {stats['steps']} steps, loss {stats['loss_first']} -> "
        f"{stats['loss_last']} in {stats['seconds']} s; {o.explore_steps} exploring steps"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from perception_judge.tiny.models import make_tiny_model
    from perception_judge.tiny.supervised import warm_start_format

    o = options_from_args(TinyModelOptions, args, "make-tiny-model")
    check_writable(o.out, "the model", "--out DIR")
    if o.from_supervised:
        return _blind(o)
    try:
        out = make_tiny_model(o.arch, o.out, seed=o.seed, tokenizer=o.tokenizer, vocab_size=o.vocab_size)
    except (ValueError, ModuleNotFoundError) as e:
        raise SystemExit(f"make-tiny-model: {e}") from e
    print(f"tiny {o.arch} judge (seed {o.seed}, {o.tokenizer} tokenizer) written to {out}")
    if o.warm_start_steps:
        stats = warm_start_format(out, steps=o.warm_start_steps, seed=o.seed)
        print(
            f"format warm start: {stats['warm_start_steps']} steps, loss {stats['loss_first']} -> "
            f"{stats['loss_last']} in {stats['seconds']} s"
        )
    return 0


COMMAND = Command(
    lambda p: add_flags(p, TinyModelOptions),
    _run,
    "Build a tiny random-weight Qwen2.5-VL or Qwen3-VL judge (config, safetensors, tokenizer, processor, chat\n"
    "template) that AutoModelForImageTextToText / AutoProcessor load offline. For tests and the demo; real\n"
    "runs point recipes at real checkpoints. --tokenizer qwen gives a real-shape judge: Qwen's tokenizer, chat\n"
    "templates, special-token ids, vocabulary size and processor settings.",
)
