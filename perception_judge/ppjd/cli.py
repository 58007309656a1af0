"""``perception-judge synth | build-ppjd | export``: each command's options are one typed model whose documented keys
are its flags (:mod:`perception_judge.core.options`); ``build-ppjd``'s is :class:`~perception_judge.ppjd.options
.BuildJob`. API keys are never options: the key is read from the environment variable named by ``--api-key-env``
(server URLs that carry credentials belong in the ``--config`` file, not on the command line).
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from perception_judge.core.command import Command
from perception_judge.core.options import OptionError, Options, add_flags, options_from_args
from perception_judge.ppjd import sources
from perception_judge.ppjd.export import ExportOptions
from perception_judge.ppjd.options import BuildJob, TeacherOptions
from perception_judge.ppjd.partition import claim_partition, part_dir, resolve_part
from perception_judge.ppjd.runner import build, format_summary
from perception_judge.ppjd.store import FolderLocked
from perception_judge.synth import DEFAULT_TEXT_ONLY_FRACTION, FAMILIES


def _error(command: str, message: Any, code: int) -> int:
    print(f"perception-judge {command}: {message}", file=sys.stderr)
    return code


def _split_names(value: Any) -> Any:
    """Names given one by one, in a list, or comma-separated (``--families a,b``)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return value  # refused by the type check, naming the key
    return [n.strip() for v in value for n in str(v).split(",") if n.strip()]


class SynthOptions(Options):
    n: int
    """number of items to generate"""
    seed: int = 0
    """random seed; the same seed gives the same items"""
    out: str
    """output folder: items.jsonl, images/, synth_info.json"""
    families: Annotated[list[str], BeforeValidator(_split_names)] = Field(
        default_factory=lambda: list(FAMILIES)
    )
    """comma-separated image families to cycle through"""
    text_only_fraction: float = DEFAULT_TEXT_ONLY_FRACTION
    """fraction of text-only items, no image"""
    overwrite: bool = False
    """replace an existing items.jsonl in --out"""
    progress: bool | None = None
    """progress: a bar on a terminal, a line every 30 s in a log (default); --no-progress: none"""


def _synth_run(args: argparse.Namespace) -> int:
    from perception_judge.synth import write_synthetic

    try:
        o = options_from_args(SynthOptions, args, "synth")
        info = write_synthetic(
            o.out, o.n, o.seed, o.families, o.text_only_fraction, overwrite=o.overwrite, progress=o.progress
        )
    except (ValueError, FileExistsError) as e:
        return _error("synth", e, 2)
    except OSError as e:  # the folder cannot be made: nothing was generated
        return _error("synth", f"cannot write to --out {o.out!r}: {e.strerror or e}", 2)
    counts = ", ".join(f"{k} {v}" for k, v in info["counts"].items())
    print(f"wrote {info['n']} synthetic items (seed {info['seed']}: {counts}) to {o.out}")
    return 0


SYNTH = Command(
    add_arguments=lambda p: add_flags(p, SynthOptions),
    run=_synth_run,
    description=(
        "Generate the synthetic perceptual source: procedural images (counted shapes, bar charts, tables, clocks) "
        "whose every attribute is known, plus text-only items. Writes OUT/items.jsonl (one item per line, image as "
        "the relative path images/<id>.png), OUT/images/ and OUT/synth_info.json. Deterministic per --seed."
    ),
)


def _make_teacher(kind: str, t: TeacherOptions) -> Any:
    if kind == "programmatic":
        from perception_judge.ppjd.programmatic import ProgrammaticTeacher

        return ProgrammaticTeacher(seed=t.seed, concurrency=min(t.concurrency, 4))  # CPU-bound
    from perception_judge.ppjd.teacher import LLMTeacher

    if missing := [flag for flag, value in (("--base-url", t.base_urls), ("--model", t.model)) if not value]:
        raise OptionError(f"the llm teacher needs {' and '.join(missing)} (teacher.base_urls, teacher.model)")
    return LLMTeacher(t)


def _build_run(args: argparse.Namespace) -> int:
    from perception_judge.ppjd.store import check_out

    src, tch, bld = options_from_args(BuildJob, args).sections()
    if not src.inputs:
        raise OptionError("no input: pass --input (or source.inputs in --config)")
    if not bld.out:
        raise OptionError("no output folder: pass --out (or build.out in --config)")
    check_out(bld.out)
    source = sources.open_source(
        src.inputs,
        kind=src.kind,
        mapping=src.mapping or None,
        image_root=src.image_root,
        allow_text_only=src.allow_text_only,
        prefix_map=src.image_prefix_map or None,
    )
    kind = tch.kind if tch.kind != "auto" else "programmatic" if source.name == "synthetic" else "llm"
    teacher = _make_teacher(kind, tch)
    for warning in teacher.check(source):  # one request to a server: before anything is written
        print(f"perception-judge build-ppjd: warning: {warning}", file=sys.stderr)
    if bld.num_parts > 1 or bld.part is not None:
        part = resolve_part(bld.part, bld.num_parts)
        claim_partition(bld.out, bld.num_parts, source.describe(), teacher.describe())
        bld = bld.model_copy(update={"out": str(part_dir(bld.out, part, bld.num_parts)), "part": part})
    try:
        summary = build(source, teacher, bld, handle_signals=True)
    except FolderLocked as e:
        return _error("build-ppjd", e, 2)
    except OSError as e:  # the output folder cannot even be opened or its manifest started
        what = "disk full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        return _error("build-ppjd", f"cannot write to the output folder {bld.out!r}: {what}", 1)
    print(format_summary(summary))
    if summary.status in ("aborted", "failed", "incomplete"):
        return _error("build-ppjd", f"run {summary.status}: {summary.abort_reason}", 1)
    if summary.status == "interrupted":
        return _error("build-ppjd", "interrupted; run the same command again to resume", 130)
    return 0


BUILD = Command(
    add_arguments=lambda p: add_flags(p, BuildJob),
    run=_build_run,
    description=(
        "Build PPJD records: for each (image, question, answer, r_c) the teacher verifies r_c, extracts the visual "
        "facts, and writes r_rp (perceptual errors) and r_rp+r (perceptual and reasoning errors); both must end in "
        "answers that differ from the ground truth and from each other. Results are appended to "
        "OUT/records-*.jsonl, rejections (with stage and reason) to OUT/failures.jsonl. Re-running the same command "
        "resumes: finished keys are skipped, failed keys too unless --retry-failed. Inputs and teacher (one GET "
        "/models) are checked first. Exit codes: 0 done; 1 aborted, failed (over --max-failure-rate) or incomplete "
        "(items the teacher did not answer stay pending); 2 bad arguments, inputs or teacher; 130 interrupted."
    ),
)


def _export_run(args: argparse.Namespace) -> int:
    from perception_judge.ppjd.export import export_ppjd

    info = export_ppjd(args.ppjd_dir, args.out, options_from_args(ExportOptions, args, "export"))
    for warning in info.get("warnings", []):
        print(f"perception-judge export: warning: {warning}", file=sys.stderr)
    rows, records = info["rows_total"], info["records"]
    print(
        f"exported {records['train']} + {records['validation']} records as {rows['train']} train / "
        f"{rows['validation']} validation rows to {args.out}"
    )
    for what, key in (("invalid records", "skipped_records"), ("damaged lines", "damaged_lines")):
        if n := len(info.get(key) or ()):
            print(f"left out {n} {what} (listed in export_info.json)", file=sys.stderr)
    print(json.dumps({"rows": info["rows"]}))
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("ppjd_dir", help="PPJD folder written by build-ppjd")
    p.add_argument("--out", required=True, help="training-set folder (train/validation.parquet, README.md)")
    add_flags(p, ExportOptions)


EXPORT = Command(
    add_arguments=_export_args,
    run=_export_run,
    description=(
        "Export a PPJD folder to the training set read by the trainer and the evaluation "
        "(perception_judge.core.trainset.load_training_set): per record a seeded permutation of (r_c, r_rp, r_rp+r) "
        "into slots A/B/C with the batch-protocol prompt and the order string as ground truth, optionally pair "
        "and single rows (--mix); train / validation split by source image."
    ),
)
