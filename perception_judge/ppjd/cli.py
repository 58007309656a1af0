"""``perception-judge synth | build-ppjd | export``: each command's options are a typed model (:class:`_Options`).

``build-ppjd`` reads a YAML job config (``--config``, see ``data_gen/configs/``) with ``source``, ``teacher`` and
``build`` sections; a flag overrides the key it names. API keys are never flags: the key is read from the
environment variable named by ``--api-key-env``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BeforeValidator, ConfigDict, Field

from perception_judge.cli import Command
from perception_judge.core.options import OptionError, Options
from perception_judge.llm_client import ClientConfig
from perception_judge.ppjd import sources
from perception_judge.ppjd.export import ExportConfig
from perception_judge.ppjd.partition import claim_partition, part_dir, resolve_part
from perception_judge.ppjd.runner import BuildConfig, build, format_summary
from perception_judge.ppjd.store import FolderLocked
from perception_judge.ppjd.teacher import LLMTeacherConfig, StageSampling
from perception_judge.ppjd.validate import PrecheckConfig, ValidationConfig
from perception_judge.synth import DEFAULT_TEXT_ONLY_FRACTION, FAMILIES

SOURCE_KINDS = ("auto", "synthetic", "table", "jsonl", "parquet", "mmpr")
TEACHER_KINDS = ("auto", "programmatic", "llm")
# the flags not named after their key (--key-name)
_FLAG_NAMES = {
    "source.inputs": "--input",
    "source.kind": "--source",
    "source.mapping": "--map",
    "teacher.kind": "--teacher",
    "teacher.base_urls": "--base-url",
    "teacher.timeout_s": "--timeout",
    "build.stop_grace_s": "--stop-grace",
}
# repeatable flags whose KEY=VALUE entries add to a mapping: (flag, what an entry looks like)
_PAIR_FLAGS = {
    "source.mapping": ("--map", "FIELD=COLUMN"),
    "source.image_prefix_map": ("--image-prefix-map", "PREFIX=FOLDER"),
}


class ConfigError(ValueError):
    """A bad job config or flag; the message names the file or flag and the key."""


class _Options(Options):
    """A command's options, or a section of a build-ppjd job config. A key with a docstring has a flag, and the
    docstring is its help (:func:`_add_flags`)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


def _add_flags(parser: Any, model: type[Options], prefix: str = "") -> None:
    """A flag per documented key of ``model``, ``--key-name`` unless ``_FLAG_NAMES`` names it, with dest
    ``prefix + key``: a switch for a bool, choices for a Literal, repeatable for a list or mapping. Its default is
    None, so a flag that was not given leaves the key to the config file or the model's default."""
    for name, field in model.model_fields.items():
        if not field.description:
            continue
        key = prefix + name
        flag = _FLAG_NAMES.get(key, "--" + name.replace("_", "-"))
        kw: dict[str, Any] = {"dest": key, "help": field.description, "required": field.is_required()}
        metavar = _PAIR_FLAGS.get(key, ("", flag.lstrip("-").replace("-", "_").upper()))[1]
        if field.annotation is bool:
            kw |= {"action": "store_true", "default": None}
        elif get_origin(field.annotation) is Literal:
            kw["choices"] = get_args(field.annotation)
        elif get_origin(field.annotation) in (list, dict):
            kw |= {"action": "append", "metavar": metavar}
        else:  # int | None: int
            types = [t for t in get_args(field.annotation) if t is not type(None)] or [field.annotation]
            kw |= {"type": types[0], "metavar": metavar}
        parser.add_argument(flag, **kw)


def _error(command: str, message: Any, code: int) -> int:
    print(f"perception-judge {command}: {message}", file=sys.stderr)
    return code


def _given(args: argparse.Namespace, model: type[Options], prefix: str = "") -> dict[str, Any]:
    """The values of the flags of ``model`` that were given."""
    return {name: v for name in model.model_fields if (v := getattr(args, prefix + name, None)) is not None}


def _split_names(value: Any) -> Any:
    """Names given one by one, in a list, or comma-separated (``--families a,b``, ``base_urls: URL1,URL2``)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return value  # refused by the type check, naming the key
    return [n.strip() for v in value for n in str(v).split(",") if n.strip()]


_Names = Annotated[list[str], BeforeValidator(_split_names)]
_Paths = Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]  # one, or several


class SynthOptions(_Options):
    n: int
    """number of items to generate"""
    seed: int = 0
    """random seed; the same seed gives the same items (default 0)"""
    out: str
    """output folder: items.jsonl, images/, synth_info.json"""
    families: _Names = Field(
        default_factory=lambda: list(FAMILIES),
        description=f"comma-separated image families to cycle through (default: {','.join(FAMILIES)})",
    )
    text_only_fraction: float = Field(
        DEFAULT_TEXT_ONLY_FRACTION,
        description=f"fraction of text-only items, no image (default {DEFAULT_TEXT_ONLY_FRACTION})",
    )
    overwrite: bool = False
    """replace an existing items.jsonl in --out"""
    no_progress: bool = False
    """no progress bar"""


def _synth_run(args: argparse.Namespace) -> int:
    from perception_judge.synth import write_synthetic

    try:
        o = SynthOptions.parse(_given(args, SynthOptions), "synth")
        progress = not o.no_progress and sys.stderr.isatty()
        info = write_synthetic(
            o.out, o.n, o.seed, o.families, o.text_only_fraction, overwrite=o.overwrite, progress=progress
        )
    except (ValueError, FileExistsError) as e:
        return _error("synth", e, 2)
    counts = ", ".join(f"{k} {v}" for k, v in info["counts"].items())
    print(f"wrote {info['n']} synthetic items (seed {info['seed']}: {counts}) to {o.out}")
    return 0


SYNTH = Command(
    add_arguments=lambda p: _add_flags(p, SynthOptions),
    run=_synth_run,
    description=(
        "Generate the synthetic perceptual source: procedural images (counted shapes, bar charts, tables, clocks) "
        "whose every attribute is known, plus text-only items. Writes OUT/items.jsonl (one item per line, image as "
        "the relative path images/<id>.png), OUT/images/ and OUT/synth_info.json. Deterministic per --seed."
    ),
)


class SourceOptions(_Options):
    kind: Literal[SOURCE_KINDS] = "auto"
    """source kind: auto (a synth folder, else a table), synthetic, table/jsonl/parquet (field mapping), mmpr
    (image, question, answer_gt, chosen). Default auto"""
    inputs: _Paths = Field(default_factory=list)
    """a synth folder, a .jsonl / .parquet file, or a folder of them (repeatable)"""
    image_root: str | None = None
    """folder that relative image paths resolve under (default: the input file's folder); paths that are absolute
    or leave it are rejected per record"""
    mapping: dict[str, str] = Field(default_factory=dict)
    """field mapping for table sources, e.g. --map response=chosen --map image=meta.img (fields: item_id, image,
    question, answer, response); unmapped fields try common column names"""
    image_prefix_map: dict[str, str] = Field(default_factory=dict)
    """mmpr: the image folder of each annotation file by its name prefix, e.g. --image-prefix-map
    ScienceQA=images/ScienceQA (repeatable; the longest matching prefix wins; adds to the config's map)"""
    allow_text_only: bool = False
    """table sources: rows without an image are text-only items (default: a missing image is an error)"""


class TeacherOptions(_Options):
    kind: Literal[TEACHER_KINDS] = "auto"
    """programmatic (synthetic items only, offline) or llm (an OpenAI-compatible server); auto picks programmatic
    for a synthetic source, llm otherwise"""
    base_urls: _Names = Field(default_factory=list)
    """OpenAI-compatible base URL, repeatable (e.g. one per vllm serve instance); default: $PPJD_BASE_URLS
    (comma-separated), then $OPENAI_BASE_URL"""
    model: str | None = None
    """teacher model name (default: $PPJD_MODEL)"""
    api_key_env: str = ClientConfig.api_key_env
    """environment variable holding the API key (default OPENAI_API_KEY; vllm serve needs none unless started with
    --api-key)"""
    concurrency: int = ClientConfig.concurrency
    """items (and requests) in flight (default 16)"""
    timeout_s: float = ClientConfig.timeout_s
    """seconds per request, whole request (default 180)"""
    max_retries: int = ClientConfig.max_retries
    """retries per request on 429/5xx/timeouts (default 6)"""
    backoff_base_s: float = ClientConfig.backoff_base_s
    backoff_max_s: float = ClientConfig.backoff_max_s
    image_max_side: int = ClientConfig.image_max_side
    """downscale images to this longest side before sending (1024)"""
    image_format: str = ClientConfig.image_format
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = ClientConfig.max_tokens_param
    extra_body: dict[str, Any] = Field(default_factory=dict)
    json_mode: bool = LLMTeacherConfig.json_mode
    """send response_format={"type":"json_object"}"""
    stage_attempts: int = LLMTeacherConfig.stage_attempts
    """tries per stage on truncated / unparseable replies (default 3)"""
    skip_verify: bool = LLMTeacherConfig.skip_verify
    """skip the verify stage (r_c already verified)"""
    stages: dict[Literal["verify", "attributes", "rewrite"], StageSampling] = Field(default_factory=dict)
    seed: int = LLMTeacherConfig.seed
    """seed of teacher sampling and programmatic perturbations (default 0)"""


class BuildOptions(_Options):
    out: str | None = None
    """PPJD output folder (records-*.jsonl, failures.jsonl, images/, manifest.json)"""
    shard_size: int = BuildConfig.shard_size
    """records per JSONL shard (default 5000)"""
    fsync_every: int = BuildConfig.fsync_every
    min_rp_similarity: float = ValidationConfig.min_rp_similarity
    """minimum word-level difflib similarity between r_c and r_rp (default 0.5)"""
    max_response_chars: int = PrecheckConfig.max_response_chars
    """skip items whose r_c is longer (default 4000)"""
    text_only: Literal["include", "skip"] = PrecheckConfig.text_only
    """items without an image: include (default) or skip"""
    limit: int | None = BuildConfig.limit
    """process at most this many new items in this run"""
    retry_failed: bool = BuildConfig.retry_failed
    """retry keys that failed in earlier runs"""
    max_image_bytes: int = BuildConfig.max_image_bytes
    """reject larger image files (default 64 MiB)"""
    max_image_pixels: int = BuildConfig.max_image_pixels
    """reject images with more pixels (default 64 M)"""
    max_consecutive_failures: int = BuildConfig.max_consecutive_failures
    """stop the run after this many teacher-call failures in a row (default 200)"""
    require_boxed: bool = ValidationConfig.require_boxed
    stop_grace_s: float = BuildConfig.stop_grace_s
    """seconds the items in flight get to finish after SIGINT/SIGTERM before they are cancelled and left pending
    for the next run (default 10)"""
    num_parts: int = BuildConfig.num_parts
    """split the build across N machines or processes: this run builds the items with int(key, 16) %% N == PART
    into OUT/part-0000I-of-0000N/ (export OUT merges the parts exactly)"""


_SECTIONS = {"source": SourceOptions, "teacher": TeacherOptions, "build": BuildOptions}
_CLIENT_KEYS = {f.name for f in fields(ClientConfig)} & set(TeacherOptions.model_fields)
_CLIENT_KEYS -= {"base_urls", "model"}


def _parse_job(data: dict[str, Any], where: str) -> tuple[SourceOptions, TeacherOptions, BuildOptions]:
    """The options of a job's sections; an unknown section or key, or a bad value, is a ConfigError naming it."""
    try:
        if unknown := sorted(set(data) - set(_SECTIONS)):
            raise OptionError(f"unknown sections {unknown}; expected {sorted(_SECTIONS)}")
        for name in _SECTIONS:
            if not isinstance(data.get(name) or {}, dict):
                raise OptionError(f"section {name!r} must be a mapping")
        return tuple(
            model.parse(data.get(name), name, f"keys in {name!r}") for name, model in _SECTIONS.items()
        )
    except OptionError as e:
        raise ConfigError(f"{where}: {e}") from None


def load_job_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The sections of a build-ppjd YAML job config, checked (:func:`_parse_job`)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{str(p)!r}: the config must be a mapping with source / teacher / build sections")
    _parse_job(data, repr(str(p)))
    return {name: data.get(name) or {} for name in _SECTIONS}


def _build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML job config (data_gen/configs/*.yaml); flags override it")
    part_help = "with --num-parts: which part (default: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN)"
    p.add_argument("--part", type=int, help=part_help)
    progress_help = "progress bar (default: on a terminal)"
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, help=progress_help)
    for section, model in _SECTIONS.items():
        _add_flags(p.add_argument_group(f"{section} (config section {section!r})"), model, f"{section}.")


def _pairs(entries: list[str], key: str) -> dict[str, str]:
    if bad := [e for e in entries if "=" not in e]:
        flag, shape = _PAIR_FLAGS[key]
        raise ConfigError(f"{flag} {bad[0]!r}: expected {shape}")
    return {k.strip(): v.strip() for k, _, v in (e.partition("=") for e in entries)}


def _job_options(args: argparse.Namespace) -> tuple[SourceOptions, TeacherOptions, BuildOptions]:
    """The job config's options with the flags given on top (a flag's dest is the SECTION.KEY it overrides)."""
    job = load_job_config(args.config) if args.config else {}
    for section, model in _SECTIONS.items():
        values = job.setdefault(section, {})
        for key, value in _given(args, model, f"{section}.").items():
            pairs = f"{section}.{key}" in _PAIR_FLAGS
            values[key] = {**(values.get(key) or {}), **_pairs(value, f"{section}.{key}")} if pairs else value
    return _parse_job(job, "build-ppjd")


def _make_teacher(kind: str, t: TeacherOptions) -> Any:
    if kind == "programmatic":
        from perception_judge.ppjd.programmatic import ProgrammaticTeacher

        return ProgrammaticTeacher(seed=t.seed)
    from perception_judge.ppjd.teacher import LLMTeacher

    env_urls = os.environ.get("PPJD_BASE_URLS") or os.environ.get("OPENAI_BASE_URL") or ""
    urls = [u for u in t.base_urls or env_urls.split(",") if u.strip()]
    if not urls:
        raise ConfigError(
            "the llm teacher needs --base-url (or teacher.base_urls, $PPJD_BASE_URLS, $OPENAI_BASE_URL)"
        )
    model = t.model or os.environ.get("PPJD_MODEL")
    if not model:
        raise ConfigError("the llm teacher needs --model (or teacher.model, $PPJD_MODEL)")
    client = ClientConfig(base_urls=urls, model=model, **t.model_dump(include=_CLIENT_KEYS))
    stages = {"stage_attempts": t.stage_attempts, "json_mode": t.json_mode, "skip_verify": t.skip_verify}
    return LLMTeacher(client, LLMTeacherConfig(seed=t.seed, **stages, **t.stages))


def _build_run(args: argparse.Namespace) -> int:
    try:
        src, tch, bld = _job_options(args)
        if not src.inputs:
            raise ConfigError("no input: pass --input (or source.inputs in --config)")
        if not bld.out:
            raise ConfigError("no output folder: pass --out (or build.out in --config)")
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
        out, part = bld.out, 0
        if bld.num_parts > 1 or args.part is not None:
            part = resolve_part(args.part, bld.num_parts)
            claim_partition(out, bld.num_parts, source.describe(), teacher.describe())
            out = str(part_dir(out, part, bld.num_parts))
        config = BuildConfig(
            out_dir=out,
            part=part,
            concurrency=min(tch.concurrency, 4) if kind == "programmatic" else tch.concurrency,  # CPU-bound
            precheck=PrecheckConfig(max_response_chars=bld.max_response_chars, text_only=bld.text_only),
            validation=ValidationConfig(
                min_rp_similarity=bld.min_rp_similarity, require_boxed=bld.require_boxed
            ),
            progress=args.progress,
            handle_signals=True,
            **bld.model_dump(
                exclude={"out", "max_response_chars", "text_only", "min_rp_similarity", "require_boxed"}
            ),
        )
    except (ConfigError, ValueError, FileNotFoundError) as e:
        return _error("build-ppjd", e, 2)
    try:
        summary = build(source, teacher, config)
    except FolderLocked as e:
        return _error("build-ppjd", e, 2)
    except OSError as e:  # the output folder cannot even be opened or its manifest started
        what = "disk full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        return _error("build-ppjd", f"cannot write to the output folder {config.out_dir!r}: {what}", 1)
    print(format_summary(summary))
    if summary.status == "aborted":
        return _error("build-ppjd", f"run aborted: {summary.abort_reason}", 1)
    if summary.status == "interrupted":
        return _error("build-ppjd", "interrupted; run the same command again to resume", 130)
    return 0


BUILD = Command(
    add_arguments=_build_args,
    run=_build_run,
    description=(
        "Build PPJD records: for each (image, question, answer, r_c) the teacher verifies r_c, extracts the visual "
        "facts, and writes r_rp (perceptual errors) and r_rp+r (perceptual and reasoning errors); both must end in "
        "answers that differ from the ground truth and from each other. Results are appended to "
        "OUT/records-*.jsonl, rejections (with stage and reason) to OUT/failures.jsonl. Re-running the same command "
        "resumes: finished keys are skipped, failed keys too unless --retry-failed. Exit codes: 0 done, 1 aborted "
        "(e.g. bad API key), 2 bad arguments, 130 interrupted."
    ),
)


def _export_run(args: argparse.Namespace) -> int:
    from perception_judge.ppjd.export import ExportError, export_ppjd

    try:
        info = export_ppjd(args.ppjd_dir, args.out, ExportConfig.parse(_given(args, ExportConfig), "export"))
    except (ExportError, ValueError, FileNotFoundError, FileExistsError) as e:
        return _error("export", e, 2)
    rows, records = info["rows_total"], info["records"]
    print(
        f"exported {records['train']} + {records['validation']} records as {rows['train']} train / "
        f"{rows['validation']} validation rows to {args.out}"
    )
    if info["skipped_records"]:
        skipped = len(info["skipped_records"])
        print(f"skipped {skipped} invalid records (listed in export_info.json)", file=sys.stderr)
    print(json.dumps({"rows": info["rows"]}))
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("ppjd_dir", help="PPJD folder written by build-ppjd")
    p.add_argument(
        "--out", required=True, help="training-set folder (train.parquet, validation.parquet, README.md)"
    )
    _add_flags(p, ExportConfig)


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
