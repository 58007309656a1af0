"""``perception-judge synth | build-ppjd | export``.

Every ``build-ppjd`` setting can come from a YAML job config (``--config``, see ``data_gen/configs/``) and
be overridden by a flag. API keys are never flags: the key is read from the environment variable named by
``--api-key-env`` (default ``OPENAI_API_KEY``), and never printed or written.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

from perception_judge.cli import Command

# --------------------------------------------------------------------------------------------------------------
# synth
# --------------------------------------------------------------------------------------------------------------


def _synth_args(p: argparse.ArgumentParser) -> None:
    from perception_judge.synth import DEFAULT_TEXT_ONLY_FRACTION, FAMILIES

    p.add_argument("--n", type=int, required=True, help="number of items to generate")
    p.add_argument(
        "--seed", type=int, default=0, help="random seed; the same seed gives the same items (default 0)"
    )
    p.add_argument("--out", required=True, help="output folder: items.jsonl, images/, synth_info.json")
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated image families to cycle through (default: {','.join(FAMILIES)})",
    )
    p.add_argument(
        "--text-only-fraction",
        type=float,
        default=DEFAULT_TEXT_ONLY_FRACTION,
        help=f"fraction of text-only items, no image (default {DEFAULT_TEXT_ONLY_FRACTION})",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing items.jsonl in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _synth_run(args: argparse.Namespace) -> int:
    from perception_judge.synth import write_synthetic

    families = [f.strip() for f in args.families.split(",") if f.strip()]
    try:
        info = write_synthetic(
            args.out,
            args.n,
            args.seed,
            families,
            args.text_only_fraction,
            overwrite=args.overwrite,
            progress=not args.no_progress and sys.stderr.isatty(),
        )
    except (ValueError, FileExistsError) as e:
        print(f"perception-judge synth: {e}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{k} {v}" for k, v in info["counts"].items())
    print(f"wrote {info['n']} synthetic items (seed {info['seed']}: {counts}) to {args.out}")
    return 0


SYNTH = Command(
    add_arguments=_synth_args,
    run=_synth_run,
    description=(
        "Generate the synthetic perceptual source: procedural images (counted shapes, bar charts, tables, "
        "clocks) whose every attribute is known, plus text-only items. Writes OUT/items.jsonl (one item per "
        "line, image as the relative path images/<id>.png), OUT/images/ and OUT/synth_info.json. "
        "Deterministic per --seed."
    ),
)


# --------------------------------------------------------------------------------------------------------------
# build-ppjd
# --------------------------------------------------------------------------------------------------------------

_CONFIG_KEYS = {
    "source": {"kind", "inputs", "image_root", "mapping", "image_prefix_map", "allow_text_only"},
    "teacher": {
        "kind", "base_urls", "model", "api_key_env", "concurrency", "timeout_s", "max_retries",
        "backoff_base_s", "backoff_max_s", "image_max_side", "image_format", "max_tokens_param", "extra_body",
        "json_mode", "stage_attempts", "skip_verify", "stages", "seed",
    },
    "build": {
        "out", "shard_size", "fsync_every", "min_rp_similarity", "max_response_chars", "text_only", "limit",
        "retry_failed", "max_image_bytes", "max_image_pixels", "max_consecutive_failures", "require_boxed",
        "stop_grace_s", "num_parts",
    },
}  # fmt: skip


class ConfigError(ValueError):
    pass


def load_job_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a build-ppjd YAML job config (unknown keys are errors that name them)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{str(p)!r}: the config must be a mapping with source / teacher / build sections")
    unknown = sorted(set(data) - set(_CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"{str(p)!r}: unknown sections {unknown}; expected {sorted(_CONFIG_KEYS)}")
    for section, allowed in _CONFIG_KEYS.items():
        value = data.get(section) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{str(p)!r}: section {section!r} must be a mapping")
        bad = sorted(set(value) - allowed)
        if bad:
            raise ConfigError(f"{str(p)!r}: unknown keys in {section!r}: {bad}; allowed: {sorted(allowed)}")
        data[section] = value
    return data


def _build_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("input")
    g.add_argument(
        "--input",
        action="append",
        help="a synth folder, a .jsonl / .parquet file, or a folder of them (repeatable)",
    )
    g.add_argument(
        "--source",
        choices=["auto", "synthetic", "table", "jsonl", "parquet", "mmpr"],
        help="source kind: auto (a synth folder, else a table), synthetic, table/jsonl/parquet (field mapping), "
        "mmpr (image, question, answer_gt, chosen). Default auto",
    )
    g.add_argument(
        "--image-root",
        help="folder that relative image paths resolve under (default: the input file's folder); paths that "
        "are absolute or leave it are rejected per record",
    )
    g.add_argument(
        "--map",
        action="append",
        metavar="FIELD=COLUMN",
        help="field mapping for table sources, e.g. --map response=chosen --map image=meta.img (fields: "
        "item_id, image, question, answer, response); unmapped fields try common column names",
    )
    g.add_argument(
        "--allow-text-only",
        action="store_true",
        default=None,
        help="table sources: rows without an image are text-only items (default: a missing image is an error)",
    )
    g.add_argument(
        "--image-prefix-map",
        action="append",
        metavar="PREFIX=FOLDER",
        help="mmpr: the image folder of each annotation file by its name prefix, e.g. --image-prefix-map "
        "ScienceQA=images/ScienceQA (repeatable; the longest matching prefix wins; adds to the config's map)",
    )
    g.add_argument("--config", help="YAML job config (data_gen/configs/*.yaml); flags override it")

    g = p.add_argument_group("output")
    g.add_argument(
        "--out", help="PPJD output folder (records-*.jsonl, failures.jsonl, images/, manifest.json)"
    )
    g.add_argument("--shard-size", type=int, help="records per JSONL shard (default 5000)")
    g.add_argument(
        "--num-parts",
        type=int,
        help="split the build across N machines or processes: this run builds the items with "
        "int(key, 16) %% N == PART into OUT/part-0000I-of-0000N/ (export OUT merges the parts exactly)",
    )
    g.add_argument(
        "--part",
        type=int,
        help="with --num-parts: which part (default: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN)",
    )
    g.add_argument(
        "--retry-failed", action="store_true", default=None, help="retry keys that failed in earlier runs"
    )
    g.add_argument("--limit", type=int, help="process at most this many new items in this run")
    g.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: on a terminal)",
    )

    g = p.add_argument_group("teacher")
    g.add_argument(
        "--teacher",
        choices=["auto", "programmatic", "llm"],
        help="programmatic (synthetic items only, offline) or llm (an OpenAI-compatible server); auto picks "
        "programmatic for a synthetic source, llm otherwise",
    )
    g.add_argument(
        "--base-url",
        action="append",
        help="OpenAI-compatible base URL, repeatable (e.g. one per vllm serve instance); default: "
        "$PPJD_BASE_URLS (comma-separated), then $OPENAI_BASE_URL",
    )
    g.add_argument("--model", help="teacher model name (default: $PPJD_MODEL)")
    g.add_argument(
        "--api-key-env",
        help="environment variable holding the API key (default OPENAI_API_KEY; vllm serve needs none unless "
        "started with --api-key)",
    )
    g.add_argument("--concurrency", type=int, help="items (and requests) in flight (default 16)")
    g.add_argument("--timeout", type=float, help="seconds per request, whole request (default 180)")
    g.add_argument("--max-retries", type=int, help="retries per request on 429/5xx/timeouts (default 6)")
    g.add_argument(
        "--image-max-side", type=int, help="downscale images to this longest side before sending (1024)"
    )
    g.add_argument(
        "--json-mode", action="store_true", default=None, help='send response_format={"type":"json_object"}'
    )
    g.add_argument(
        "--stage-attempts", type=int, help="tries per stage on truncated / unparseable replies (default 3)"
    )
    g.add_argument(
        "--skip-verify",
        action="store_true",
        default=None,
        help="skip the verify stage (r_c already verified)",
    )
    g.add_argument(
        "--seed", type=int, help="seed of teacher sampling and programmatic perturbations (default 0)"
    )

    g = p.add_argument_group("validation")
    g.add_argument(
        "--min-rp-similarity",
        type=float,
        help="minimum word-level difflib similarity between r_c and r_rp (default 0.5)",
    )
    g.add_argument("--max-response-chars", type=int, help="skip items whose r_c is longer (default 4000)")
    g.add_argument(
        "--text-only", choices=["include", "skip"], help="items without an image: include (default) or skip"
    )
    g.add_argument("--max-image-bytes", type=int, help="reject larger image files (default 64 MiB)")
    g.add_argument("--max-image-pixels", type=int, help="reject images with more pixels (default 64 M)")
    g.add_argument(
        "--max-consecutive-failures",
        type=int,
        help="stop the run after this many teacher-call failures in a row (default 200)",
    )
    g.add_argument(
        "--stop-grace",
        type=float,
        help="seconds the items in flight get to finish after SIGINT/SIGTERM before they are cancelled and left "
        "pending for the next run (default 10)",
    )


def _pick(*values: Any, default: Any = None) -> Any:
    for v in values:
        if v is not None:
            return v
    return default


def _parse_map(entries: list[str] | None, flag: str = "--map", shape: str = "FIELD=COLUMN") -> dict[str, str]:
    out: dict[str, str] = {}
    for e in entries or []:
        if "=" not in e:
            raise ConfigError(f"{flag} {e!r}: expected {shape}")
        k, v = e.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _make_teacher(kind: str, args: argparse.Namespace, tcfg: dict[str, Any]) -> Any:
    seed = _pick(args.seed, tcfg.get("seed"), default=0)
    if kind == "programmatic":
        from perception_judge.ppjd.programmatic import ProgrammaticTeacher

        return ProgrammaticTeacher(seed=seed)
    from perception_judge.llm_client import ClientConfig
    from perception_judge.ppjd.teacher import LLMTeacher, LLMTeacherConfig

    base_urls = args.base_url or tcfg.get("base_urls")
    if not base_urls:
        env = os.environ.get("PPJD_BASE_URLS") or os.environ.get("OPENAI_BASE_URL")
        base_urls = [u for u in (env or "").split(",") if u.strip()]
    if isinstance(base_urls, str):
        base_urls = [base_urls]
    if not base_urls:
        raise ConfigError(
            "the llm teacher needs --base-url (or teacher.base_urls, $PPJD_BASE_URLS, $OPENAI_BASE_URL)"
        )
    model = _pick(args.model, tcfg.get("model"), os.environ.get("PPJD_MODEL"))
    if not model:
        raise ConfigError("the llm teacher needs --model (or teacher.model, $PPJD_MODEL)")
    client = ClientConfig(
        base_urls=list(base_urls),
        model=model,
        api_key_env=_pick(args.api_key_env, tcfg.get("api_key_env"), default="OPENAI_API_KEY"),
        concurrency=_pick(args.concurrency, tcfg.get("concurrency"), default=16),
        timeout_s=_pick(args.timeout, tcfg.get("timeout_s"), default=180.0),
        max_retries=_pick(args.max_retries, tcfg.get("max_retries"), default=6),
        backoff_base_s=tcfg.get("backoff_base_s", 1.0),
        backoff_max_s=tcfg.get("backoff_max_s", 60.0),
        image_max_side=_pick(args.image_max_side, tcfg.get("image_max_side"), default=1024),
        image_format=tcfg.get("image_format", "JPEG"),
        max_tokens_param=tcfg.get("max_tokens_param", "max_tokens"),
        extra_body=dict(tcfg.get("extra_body") or {}),
    )
    stages = dict(tcfg.get("stages") or {})
    unknown = sorted(set(stages) - {"verify", "attributes", "rewrite"})
    if unknown:
        raise ConfigError(
            f"teacher.stages has unknown stages {unknown}; expected verify, attributes, rewrite"
        )
    tconf = LLMTeacherConfig(
        stage_attempts=_pick(args.stage_attempts, tcfg.get("stage_attempts"), default=3),
        json_mode=bool(_pick(args.json_mode, tcfg.get("json_mode"), default=False)),
        skip_verify=bool(_pick(args.skip_verify, tcfg.get("skip_verify"), default=False)),
        seed=seed,
        **{k: v for k, v in stages.items()},
    )
    return LLMTeacher(client, tconf)


def _build_run(args: argparse.Namespace) -> int:
    from perception_judge.ppjd.runner import BuildConfig, build, format_summary
    from perception_judge.ppjd.sources import open_source
    from perception_judge.ppjd.store import FolderLocked
    from perception_judge.ppjd.validate import PrecheckConfig, ValidationConfig

    try:
        cfg = load_job_config(args.config) if args.config else {"source": {}, "teacher": {}, "build": {}}
        scfg, tcfg, bcfg = cfg["source"], cfg["teacher"], cfg["build"]
        inputs = args.input or scfg.get("inputs")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not inputs:
            raise ConfigError("no input: pass --input (or source.inputs in --config)")
        out = _pick(args.out, bcfg.get("out"))
        if not out:
            raise ConfigError("no output folder: pass --out (or build.out in --config)")
        mapping = {**(scfg.get("mapping") or {}), **_parse_map(args.map)}
        source = open_source(
            inputs,
            kind=_pick(args.source, scfg.get("kind"), default="auto"),
            mapping=mapping or None,
            image_root=_pick(args.image_root, scfg.get("image_root")),
            allow_text_only=_pick(args.allow_text_only, scfg.get("allow_text_only"), default=False),
            prefix_map={
                **(scfg.get("image_prefix_map") or {}),
                **_parse_map(args.image_prefix_map, "--image-prefix-map", "PREFIX=FOLDER"),
            }
            or None,
        )
        kind = _pick(args.teacher, tcfg.get("kind"), default="auto")
        if kind == "auto":
            kind = "programmatic" if source.name == "synthetic" else "llm"
        teacher = _make_teacher(kind, args, tcfg)
        concurrency = _pick(args.concurrency, tcfg.get("concurrency"), default=16)
        if kind == "programmatic":
            concurrency = min(concurrency, 4)  # CPU-bound: more workers do not help
        num_parts = _pick(args.num_parts, bcfg.get("num_parts"), default=1)
        part = 0
        if num_parts > 1 or args.part is not None:
            from perception_judge.ppjd.partition import claim_partition, part_dir, resolve_part

            part = resolve_part(args.part, num_parts)
            claim_partition(out, num_parts, source.describe(), teacher.describe())
            out = part_dir(out, part, num_parts)
        config = BuildConfig(
            out_dir=str(out),
            num_parts=num_parts,
            part=part,
            concurrency=concurrency,
            retry_failed=bool(_pick(args.retry_failed, bcfg.get("retry_failed"), default=False)),
            limit=_pick(args.limit, bcfg.get("limit")),
            shard_size=_pick(args.shard_size, bcfg.get("shard_size"), default=5000),
            fsync_every=bcfg.get("fsync_every", 32),
            max_image_bytes=_pick(
                args.max_image_bytes, bcfg.get("max_image_bytes"), default=64 * 1024 * 1024
            ),
            max_image_pixels=_pick(args.max_image_pixels, bcfg.get("max_image_pixels"), default=64_000_000),
            max_consecutive_failures=_pick(
                args.max_consecutive_failures, bcfg.get("max_consecutive_failures"), default=200
            ),
            precheck=PrecheckConfig(
                max_response_chars=_pick(
                    args.max_response_chars, bcfg.get("max_response_chars"), default=4000
                ),
                text_only=_pick(args.text_only, bcfg.get("text_only"), default="include"),
            ),
            validation=ValidationConfig(
                min_rp_similarity=_pick(args.min_rp_similarity, bcfg.get("min_rp_similarity"), default=0.5),
                require_boxed=bool(bcfg.get("require_boxed", True)),
            ),
            progress=args.progress,
            handle_signals=True,
            stop_grace_s=_pick(args.stop_grace, bcfg.get("stop_grace_s"), default=10.0),
        )
    except (ConfigError, ValueError, FileNotFoundError) as e:
        print(f"perception-judge build-ppjd: {e}", file=sys.stderr)
        return 2
    try:
        summary = build(source, teacher, config)
    except FolderLocked as e:
        print(f"perception-judge build-ppjd: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the output folder cannot even be opened or its manifest started
        what = "disk full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        print(f"perception-judge build-ppjd: cannot write to the output folder {config.out_dir!r}: {what}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(format_summary(summary))
    if summary.status == "aborted":
        print(f"perception-judge build-ppjd: run aborted: {summary.abort_reason}", file=sys.stderr)
        return 1
    if summary.status == "interrupted":
        print(
            "perception-judge build-ppjd: interrupted; run the same command again to resume", file=sys.stderr
        )
        return 130
    return 0


BUILD = Command(
    add_arguments=_build_args,
    run=_build_run,
    description=(
        "Build PPJD records: for each (image, question, answer, r_c) the teacher verifies r_c, extracts the "
        "visual facts, and writes r_rp (perceptual errors) and r_rp+r (perceptual and reasoning errors); both "
        "must end in answers that differ from the ground truth and from each other. Results are appended to "
        "OUT/records-*.jsonl, rejections (with stage and reason) to OUT/failures.jsonl. Re-running the same "
        "command resumes: finished keys are skipped, failed keys too unless --retry-failed. Exit codes: 0 done, "
        "1 aborted (e.g. bad API key), 2 bad arguments, 130 interrupted."
    ),
)


# --------------------------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------------------------


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("ppjd_dir", help="PPJD folder written by build-ppjd")
    p.add_argument(
        "--out", required=True, help="training-set folder (train.parquet, validation.parquet, README.md)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the slot permutations and the split (default 0)"
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="fraction of source images (image groups) that go to validation (default 0.1)",
    )
    p.add_argument(
        "--mix",
        default="batch=1",
        help="rows per record per protocol, e.g. batch=1,pair=0.5,single=0.5 (integer part always, fraction "
        "as a probability; default batch=1)",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip (and list) records whose image is missing or corrupt",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing export in --out")
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="a build split into parts (build-ppjd --num-parts): export even with missing or unfinished parts "
        "(export_info.json lists them); default: refuse, naming them",
    )
    p.add_argument(
        "--prompt-style",
        choices=("full", "tiny"),
        default="full",
        help="judge prompt wording: full (real judges, default) or tiny (the dozen-token prompt of the CPU-scale "
        "tiny judges; recorded in export_info.json, and the evaluation renders the same style)",
    )


def _export_run(args: argparse.Namespace) -> int:
    from perception_judge.ppjd.export import ExportConfig, ExportError, export_ppjd

    try:
        config = ExportConfig(
            seed=args.seed,
            val_fraction=args.val_fraction,
            mix=args.mix,
            skip_invalid=args.skip_invalid,
            allow_incomplete=args.allow_incomplete,
            overwrite=args.overwrite,
            prompt_style=args.prompt_style,
        )
        info = export_ppjd(args.ppjd_dir, args.out, config)
    except (ExportError, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"perception-judge export: {e}", file=sys.stderr)
        return 2
    rows = info["rows_total"]
    print(
        f"exported {info['records']['train']} + {info['records']['validation']} records as "
        f"{rows['train']} train / {rows['validation']} validation rows to {args.out}"
    )
    if info["skipped_records"]:
        print(
            f"skipped {len(info['skipped_records'])} invalid records (listed in export_info.json)",
            file=sys.stderr,
        )
    print(json.dumps({"rows": info["rows"]}))
    return 0


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

__all__ = ["BUILD", "EXPORT", "SYNTH", "load_job_config"]
