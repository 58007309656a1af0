"""The options of a ``build-ppjd`` job, one typed model (:class:`BuildJob`) that is also the runtime configuration:
the source reads :class:`SourceOptions`, the LLM teacher and its client :class:`TeacherOptions`, the runner, the
pre-checks and the validation :class:`BuildOptions`. A documented key is also a flag (:mod:`perception_judge.core
.options`); a ``--config`` YAML file (``data_gen/configs/``) has the sections ``source``, ``teacher`` and ``build``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from perception_judge.core.images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS
from perception_judge.core.options import Flag, Options
from perception_judge.core.schema import Sampling
from perception_judge.llm_client import ClientConfig

_Paths = Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]  # one, or several


class SourceOptions(Options):
    kind: Annotated[Literal["auto", "synthetic", "table", "jsonl", "parquet", "mmpr"], Flag("--source")] = (
        "auto"
    )
    """source kind: auto (a synth folder, else a table), synthetic, table/jsonl/parquet (field mapping), mmpr
    (image, question, answer_gt, chosen)"""
    inputs: Annotated[_Paths, Flag("--input")] = Field(default_factory=list)
    """a synth folder, a .jsonl / .parquet file, or a folder of them (repeatable)"""
    image_root: str | None = None
    """folder that relative image paths resolve under (default: the input file's folder); paths that are absolute
    or leave it are rejected per record"""
    mapping: Annotated[dict[str, str], Flag("--map", "FIELD=COLUMN")] = Field(default_factory=dict)
    """field mapping for table sources, e.g. --map response=chosen --map image=meta.img (fields: item_id, image,
    question, answer, response); unmapped fields try common column names"""
    image_prefix_map: Annotated[dict[str, str], Flag(metavar="PREFIX=FOLDER")] = Field(default_factory=dict)
    """mmpr: the image folder of each annotation file by its name prefix, e.g. --image-prefix-map
    ScienceQA=images/ScienceQA (repeatable; the longest matching prefix wins; adds to the config's map)"""
    allow_text_only: bool = False
    """table sources: rows without an image are text-only items (default: a missing image is an error)"""


class Stages(Options):
    """Sampling per teacher stage (``--set teacher.stages.rewrite.max_tokens=8192``; the rest keeps its default);
    every setting is sent to every server, ``top_k`` only when set."""

    verify: Sampling = Sampling(temperature=0.0, top_p=None, top_k=None, max_tokens=512)
    attributes: Sampling = Sampling(temperature=0.2, top_p=0.9, top_k=None, max_tokens=512)
    rewrite: Sampling = Sampling(temperature=0.7, top_p=0.95, top_k=None, max_tokens=4096)


class TeacherOptions(ClientConfig):
    """The teacher: its kind, and for the LLM teacher its client (:class:`ClientConfig`) and stages."""

    kind: Annotated[Literal["auto", "programmatic", "llm"], Flag("--teacher")] = "auto"
    """programmatic (synthetic items only, offline) or llm (an OpenAI-compatible server); auto picks programmatic
    for a synthetic source, llm otherwise"""
    json_mode: bool = False
    """send response_format={"type": "json_object"}"""
    stage_attempts: Annotated[int, Field(ge=1)] = 3
    """tries per stage on truncated / unparseable replies"""
    skip_verify: bool = False
    """skip the verify stage (r_c already verified)"""
    check_server: bool = True
    """GET /models before the first item (false: a server without that API; a wrong URL, key or model then fails
    the first items instead)"""
    stages: Stages = Stages()
    seed: int = 0
    """seed of teacher sampling and programmatic perturbations"""


class BuildOptions(Options):
    """The run (output folder, limits, parts) and the teacher-independent checks (docs/ppjd.md §3)."""

    out: str | None = None
    """PPJD output folder (records-*.jsonl, failures.jsonl, images/, manifest.json)"""
    num_parts: Annotated[int, Field(ge=1)] = 1
    """split the build across N machines or processes: this run builds the items with int(key, 16) % N == PART
    into OUT/part-0000I-of-0000N/ (export OUT merges the parts exactly)"""
    part: int | None = None
    """with --num-parts: which part (default: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN)"""
    limit: Annotated[int | None, Field(ge=0)] = None
    """process at most this many new items in this run"""
    retry_failed: bool = False
    """retry keys that failed in earlier runs"""
    concurrency: Annotated[int | None, Field(ge=1)] = None  # items in flight (default: the teacher's)
    shard_size: Annotated[int, Field(ge=1)] = 5000
    """records per JSONL shard"""
    fsync_every: int = 32
    manifest_every_s: float = 10.0
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    """reject larger image files"""
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    """reject images with more pixels"""
    max_consecutive_failures: int = 200
    """stop the run after this many items in a row fail at the teacher (no answer, or no usable JSON)"""
    max_failure_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    """exit 1 (run status failed) when more than this fraction of the items a run tries fail (1: never)"""
    stop_grace_s: Annotated[float, Field(ge=0), Flag("--stop-grace")] = 10.0
    """seconds the items in flight get to finish after SIGINT/SIGTERM before they are cancelled and left pending
    for the next run"""
    progress: bool | None = None
    """progress: a bar on a terminal, a line every 30 s in a log (default); --no-progress: none"""
    max_response_chars: int = 4000
    """skip items whose r_c is longer"""
    max_question_chars: int = 4000
    text_only: Literal["include", "skip"] = "include"
    """items without an image: include or skip"""
    min_rp_similarity: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    """minimum word-level difflib similarity between r_c and r_rp"""
    require_boxed: bool = True  # counterfactuals keep r_c's \boxed{} answer format


class BuildJob(Options):
    """A build-ppjd job (``--config`` YAML, ``--set SECTION.KEY=VALUE``, flags)."""

    source: SourceOptions = SourceOptions()
    """where the items come from"""
    teacher: TeacherOptions = TeacherOptions()
    """who writes the counterfactuals"""
    build: BuildOptions = BuildOptions()
    """the run and its checks"""

    def sections(self) -> tuple[SourceOptions, TeacherOptions, BuildOptions]:
        return self.source, self.teacher, self.build
