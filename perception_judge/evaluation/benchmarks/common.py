"""Shared machinery of the benchmark suites: their options, reading benchmark files (on ``datasets``) and images,
and one suite call (:class:`BenchmarkRun`). Read failures raise :class:`BenchmarkDataError` naming the file (and
the line or row); see ``docs/benchmarks.md``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from perception_judge.core.images import ImageError, PixelPolicy, load_image, resolve_under
from perception_judge.core.options import CommaList, Options
from perception_judge.core.schema import JudgeRequest, Sampling
from perception_judge.evaluation import base
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.published import ParserOption, request_parser, whole_completion
from perception_judge.evaluation.prompt_source import PROJECT, PublishedPromptOptions, comparable

PERCEPTION_JUDGE_SAMPLING = Sampling().model_dump(include={"temperature", "top_p", "top_k"})
"""Perception-Judge's published sampling: the defaults of the one sampling record."""
PERCEPTION_JUDGE_SEEDS = [0, 1, 2]
AGGREGATIONS = {
    "mean": "metrics per seed, then the mean over seeds",
    "vote": "per item, majority verdict over seeds x orders (failures abstain), then accuracy",
}
"""How each aggregation combines seeds (a suite with other rules records its own)."""


class BenchmarkDataError(ValueError):
    """A benchmark file or record cannot be used. The message names the file (and line / row)."""


class BenchmarkFileMissing(BenchmarkDataError, FileNotFoundError):
    """A benchmark file or folder does not exist."""


def _path(value: Any) -> Any:
    return Path(str(value)).expanduser() if value not in (None, "") else None


def choices(allowed: Sequence[str]) -> Any:
    """A list option (a list or ``"a,b"``) naming some of ``allowed``; ``"all"`` names every one."""

    def check(values: list[str]) -> list[str]:
        values = list(allowed) if values == ["all"] else list(dict.fromkeys(values))
        if not values or any(v not in allowed for v in values):
            raise ValueError(f"must name some of {', '.join(allowed)} (or 'all'), got {values!r}")
        return values

    return Annotated[CommaList, AfterValidator(check)]


OptPath = Annotated[Path | None, BeforeValidator(_path)]
DataPath = Annotated[Path, BeforeValidator(_path)]
"""A path option (``~`` expanded; an empty value is no path): optional, or required."""


class JudgeOptions(Options):
    """Options of every benchmark suite: items per backend call, a square image size (default: the pixel policy)."""

    model_config = ConfigDict(validate_default=True)
    chunk_size: int = Field(64, ge=1)
    image_size: int | None = None


class BenchmarkOptions(JudgeOptions, PublishedPromptOptions):
    """Options of the published benchmarks. ``seeds`` (default ``config.seeds``): the seeds judged in this call;
    the item-level aggregations need every seed in one call (``--seeds 0 --set SUITE.seeds=[0,1,2]``)."""

    data_dir: OptPath = None
    images_dir: OptPath = None
    aggregation: choices(("mean", "vote")) = ("mean",)
    seeds: base.Ints | None = None
    missing_images: Literal["error", "skip"] = "error"
    parser: ParserOption = "strict"


def slug(name: str) -> str:
    """A metric-name-safe form of a subset / category name: lowercase, runs of other characters → ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_") or "unknown"


def first_field(record: dict[str, Any], names: Sequence[str]) -> Any:
    """The value of the first of ``names`` present in the record and not None / empty string."""
    return next((record[n] for n in names if record.get(n) is not None and record.get(n) != ""), None)


def mean_over_runs(runs: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """Per metric, the mean over runs (seeds) of the runs where it is defined; None where it never is."""
    return {k: M.mean(run.get(k) for run in runs) for k in dict.fromkeys(k for run in runs for k in run)}


def two_texts(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(r, str) for r in value)


def prefixed(prefix: str, metrics: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in metrics.items()}


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise BenchmarkFileMissing(f"{what}: no such file {str(path)!r}")
    if not path.is_file():
        raise BenchmarkDataError(f"{what}: {str(path)!r} is not a file")
    return path


def read_jsonl(path: str | Path, what: str = "benchmark file") -> list[dict[str, Any]]:
    """Records of a JSONL file (blank lines skipped) or of a JSON file holding a list of objects (or ``{"data":
    [...]}``, ``{"pairs": [...]}``); :mod:`json`, not ``datasets``: records mix types, and a bad line is named."""
    path = require_file(Path(path), what)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchmarkDataError(f"{what}: cannot read {str(path)!r}: {e}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{what}: {str(path)!r} is not valid JSON: {e}") from None
        if isinstance(data, dict):
            data = next((data[k] for k in ("data", "pairs") if isinstance(data.get(k), list)), data)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise BenchmarkDataError(f"{what}: {str(path)!r} must hold a list of JSON objects")
        return data
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{what}: {path!s}:{lineno}: invalid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise BenchmarkDataError(f"{what}: {path!s}:{lineno}: expected a JSON object")
        records.append(record)
    return records


@dataclass
class Table:
    """Rows of one benchmark split: a list of dicts (JSON files) or a ``datasets.Dataset`` (everything else)."""

    path: Path
    rows: Any
    columns: list[str]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def holds_paths(self, column: str) -> bool:
        """Whether a column holds image *paths* (strings) rather than inline images."""
        features = getattr(self.rows, "features", None)
        if features is not None:
            return getattr(features.get(column), "dtype", None) in ("string", "large_string")
        return any(isinstance(r.get(column), str) for r in self.rows)

    def view(self, columns: Sequence[str]) -> Any:
        """Rows restricted to the given columns (those that exist), without decoding the others."""
        cols = [c for c in columns if c in self.columns]
        if isinstance(self.rows, list):
            return [{c: r.get(c) for c in cols} for r in self.rows]
        return self.rows.select_columns(cols)


def _parquet(files: list[Path], what: str) -> Table:
    from datasets import load_dataset

    try:
        ds = load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    except Exception as e:  # pyarrow and datasets raise several types for a broken or mismatched file
        shown = str(files[0]) if len(files) == 1 else [str(f) for f in files]
        raise BenchmarkDataError(f"{what}: cannot read parquet {shown!r}: {e}") from None
    return Table(files[0] if len(files) == 1 else files[0].parent, ds, list(ds.column_names))


def _from_disk(folder: Path, split: str | None, what: str) -> Table:
    from datasets import DatasetDict, load_from_disk

    try:
        ds = load_from_disk(str(folder))
    except Exception as e:  # datasets raises several types for a broken folder
        raise BenchmarkDataError(f"{what}: cannot load the datasets folder {str(folder)!r}: {e}") from None
    if isinstance(ds, DatasetDict):
        if split is None and len(ds) != 1:
            raise BenchmarkDataError(
                f"{what}: {str(folder)!r} holds splits {sorted(ds)}; choose one with the 'split' option"
            )
        split = split or next(iter(ds))
        if split not in ds:
            raise BenchmarkFileMissing(
                f"{what}: split {split!r} not in the datasets folder {str(folder)!r} (splits: {sorted(ds)})"
            )
        ds = ds[split]
    return Table(folder, ds, list(ds.column_names))


def _is_datasets_folder(folder: Path) -> bool:
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def load_table(path: str | Path, split: str | None = None, what: str = "benchmark") -> Table:
    """Load one split of a benchmark from ``path``: a ``.jsonl`` / ``.json`` / ``.parquet`` file, a
    ``datasets.save_to_disk`` folder (a ``DatasetDict`` → ``split``), or a folder holding ``{split}.parquet``,
    ``.jsonl``, ``.json``, a ``{split}/`` datasets folder or ``{split}-*.parquet`` shards (also under ``data/``)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise BenchmarkFileMissing(f"{what}: no such file or folder {str(path)!r}")
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return _parquet([path], what)
        if suffix in (".jsonl", ".json"):
            rows = read_jsonl(path, what)
            return Table(path, rows, sorted({k for r in rows for k in r}))
        raise BenchmarkDataError(
            f"{what}: unsupported file type {str(path)!r} (expected .jsonl, .json or .parquet)"
        )
    if _is_datasets_folder(path):
        return _from_disk(path, split, what)
    if split is None:
        raise BenchmarkDataError(
            f"{what}: {str(path)!r} is a folder but not a datasets folder; name a file or set the 'split' option"
        )
    for name in (f"{split}.parquet", f"{split}.jsonl", f"{split}.json"):
        if (path / name).is_file():
            return load_table(path / name, None, what)
    if _is_datasets_folder(path / split):
        return _from_disk(path / split, None, what)
    for pattern in (f"{split}-*.parquet", f"data/{split}-*.parquet", f"{split}/*.parquet"):
        if shards := sorted(path.glob(pattern)):
            return _parquet(shards, what)
    raise BenchmarkFileMissing(
        f"{what}: no {split!r} split in {str(path)!r}: expected {split}.parquet, {split}.jsonl, {split}.json, "
        f"a {split}/ datasets folder, {split}-*.parquet shards, or a datasets folder (save_to_disk)"
    )


def _is_path(cell: Any) -> bool:
    return isinstance(cell, str) and not cell.startswith("data:")


class ImageSource:
    """Loads benchmark images: paths under one or more roots, or inline cells (PIL, bytes, ``{bytes, path}``
    dicts). ``missing="error"`` raises a :class:`BenchmarkDataError` naming the file; ``"skip"`` raises
    :class:`SkipItem` so the item is left out and counted."""

    def __init__(self, roots: Sequence[Path], missing: str = "error", what: str = "image") -> None:
        self.roots = [Path(r) for r in roots]
        self.missing = missing
        self.what = what

    def _resolve(self, cell: str, context: str) -> Path:
        """The file an image path names, confined to the image roots (``../``, a symlink out or an absolute path
        elsewhere raise :class:`ImageError` ``path_escapes_root``). An extra leading folder is tolerated
        (``image/200.jpg`` under the image folder)."""
        if Path(cell).is_absolute():
            path = Path(cell).resolve()
            if not any(path == r or r in path.parents for r in (root.resolve() for root in self.roots)):
                raise ImageError(
                    "path_escapes_root",
                    f"absolute image path {cell!r} is outside the image roots {[str(r) for r in self.roots]}",
                )
            candidates = [path]
        else:
            candidates, escaped = [], None
            for root in self.roots:
                try:
                    candidates.append(resolve_under(root, cell))
                except ImageError as e:
                    escaped = e
            if escaped is not None and not candidates:  # the path leaves every root: never try its name
                raise escaped
            for root in self.roots if len(Path(cell).parts) > 1 else ():
                with contextlib.suppress(ImageError):
                    candidates.append(resolve_under(root, Path(cell).name))
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            shown = str(candidates[0]) if candidates else cell
            raise ImageError("missing", f"no image file at {shown!r} (image_path {cell!r} in {context})")
        return found

    def _guarded(self, context: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ImageError as e:
            if self.missing == "skip":
                raise base.SkipItem(f"{e.reason}_image", f"{context}: {e}") from None
            raise BenchmarkDataError(f"{self.what} for {context}: {e}") from None

    def check(self, cell: Any, context: str) -> None:
        """Fail fast, before any judging: in ``error`` mode, an image path that resolves to no file raises
        :class:`BenchmarkDataError` naming it (inline cells and ``skip`` mode are checked when loaded)."""
        if self.missing == "error" and (cell is None or _is_path(cell)):
            self._guarded(
                context, lambda: self._resolve(cell, context) if cell is not None else load_image(cell)
            )

    def load(self, cell: Any, context: str) -> Any:
        if isinstance(cell, dict) and not cell.get("bytes") and cell.get("path"):
            cell = cell["path"]
        return self._guarded(
            context, lambda: load_image(self._resolve(cell, context) if _is_path(cell) else cell)
        )


class TableImages:
    """The image cells of a table's ``columns``, loaded per row from ``images_dir`` (default: the table's folder)."""

    def __init__(
        self, table: Table, columns: list[str], images_dir: Path | None, missing: str, what: str
    ) -> None:
        self.rows, self.columns = table.view(columns), columns
        root = images_dir or (table.path if table.path.is_dir() else table.path.parent)
        self.source = ImageSource([root], missing, what)
        self.paths = any(table.holds_paths(c) for c in columns)

    def load(self, i: int, where: str) -> list[Any]:
        return [self.source.load(self.rows[i][c], f"{where} {c}") for c in self.columns]

    def check(self, i: int, where: str) -> None:
        for c in self.columns if self.paths else ():
            self.source.check(self.rows[i][c], f"{where} {c}")


class Judged:
    """The judgements of one :meth:`BenchmarkRun.judge` call by judged item (skipped items left out): ``items``,
    their positions in the judged sequence (``index``), :meth:`scores` and :meth:`completion`."""

    def __init__(
        self, items: Sequence[Any], judgements: list[base.Judgement], counts: dict[str, int]
    ) -> None:
        self.index = sorted({j.item for j in judgements})
        position = {i: k for k, i in enumerate(self.index)}
        self.items = [items[i] for i in self.index]
        self._scores = {(position[j.item], j.variant, j.seed): j.result.scores for j in judgements}
        self._texts = {
            (position[j.item], j.variant, j.seed): whole_completion(j.result.text, j.result.reasoning)
            for j in judgements
        }
        self.counts = counts
        counts["items"] = len(self.items)

    def scores(self, i: int, variant: str, seed: int) -> list[float] | None:
        """The scores of judged item ``i``'s request ``variant`` under ``seed``; None on a failure."""
        return self._scores.get((i, variant, seed))

    def completion(self, i: int, variant: str, seed: int) -> str:
        """That judgement's :func:`~.published.whole_completion`; ``""`` for a failed call or a missing judgement."""
        return self._texts.get((i, variant, seed), "")

    @property
    def parse_failure_rate(self) -> float | None:
        """Parse failures / judgments (every seed); backend errors are not the judge's failures."""
        return M.rate(self.counts.get("parse_failures", 0), self.counts.get("judgments", 0))


class BenchmarkRun:
    """One call of a benchmark suite: its options (``opts``), the seeds it judges, the per-sample lines and the
    per-seed metrics; :meth:`result` writes ``<suite>.samples.jsonl`` and completes the protocol record."""

    def __init__(self, suite: str, backend: base.JudgeBackend, config: base.SuiteConfig) -> None:
        self.suite, self.backend, self.config = suite, backend, config
        self.opts: Any = config.options
        seeds = getattr(self.opts, "seeds", None) or config.seeds
        self.seeds = list(dict.fromkeys(int(s) for s in seeds)) or [0]
        self.prompts = self.opts.prompts() if isinstance(self.opts, PublishedPromptOptions) else {}
        self.lines: list[dict[str, Any]] = []
        self.per_seed: dict[str, dict[str, float | None]] = {}

    def image(self, image: Any) -> Any:
        """Resize an image for the judge: to an ``image_size`` square when the option is set, otherwise by the
        backend's pixel policy (backends apply their policy again; it is idempotent)."""
        if self.opts.image_size:
            return PixelPolicy(mode="fixed", size=int(self.opts.image_size), factor=1).apply(image)
        return self.backend.pixel_policy.apply(image)

    def images(self, item: Any) -> list[Any]:
        return [self.image(im) for im in item.load_images()]

    def judge(
        self,
        items: Sequence[Any],
        build: Callable[[Any], list[JudgeRequest]],
        desc: str,
        counts: dict[str, int],
        log: Callable[[Any], dict[str, Any]],
    ) -> Judged:
        """Judge ``items`` under every seed (:func:`~perception_judge.evaluation.base.judge_items`); one sample
        line per judgement, with ``log(item)``'s fields."""
        judgements = base.judge_items(
            self.backend,
            items,
            build,
            seeds=self.seeds,
            sampling=self.config.sampling,
            chunk_size=self.opts.chunk_size,
            desc=desc,
            counts=counts,
        )
        for j in judgements:
            r = j.result
            fields = {k: getattr(r, k) for k in ("scores", "error", "text", "reasoning")}
            line = {"request_id": r.request_id, "seed": j.seed, "variant": j.variant}
            self.lines.append(line | log(items[j.item]) | fields)
        return Judged(items, judgements, counts)

    def mean(self, metrics_of_seed: Callable[[int], dict[str, float | None]], prefix: str = "") -> dict:
        """:func:`mean_over_runs` of ``metrics_of_seed(seed)`` over the seeds; each seed's metrics are kept
        (``prefix`` + name) under ``extra["per_seed"]["seed<s>"]``."""
        runs = [metrics_of_seed(s) for s in self.seeds]
        for s, run in zip(self.seeds, runs):
            self.per_seed.setdefault(f"seed{s}", {}).update({prefix + k: v for k, v in run.items()})
        return mean_over_runs(runs)

    def result(
        self,
        metrics: dict[str, float | None],
        counts: dict[str, int],
        protocol: dict[str, Any],
        published_images: str,
        published_sampling: bool = False,
        parser: str | None = None,
    ) -> base.SuiteResult:
        """The suite's :class:`SuiteResult`. ``protocol`` is completed with the images, sampling, seeds and
        backend of the run and its deviations from Perception-Judge's published sampling (``published_sampling``);
        with a published prompt, the prompt's provenance, the data and the mark of the request ``parser``."""
        if isinstance(self.opts, PublishedPromptOptions):
            limit = [f"limit {self.config.limit}"] * (self.config.limit is not None)
            skipped = re.compile(r"skipped_(no_prompt|\w+_image)$")
            left = limit + [f"{k} {v}" for k, v in counts.items() if v and skipped.search(k)]
            protocol["data"] = {"source": "official", "complete": not left, "left_out": left}
            protocol["prompt"] = {s: p.provenance for s, p in self.prompts.items()} or dict(PROJECT)
            used = parser or request_parser(self.opts.parser)
            protocol["comparable"] = comparable(self.opts.SUITE, self.prompts, used, protocol["data"])
        path = Path(self.config.out_dir) / f"{self.suite}.samples.jsonl"
        base.write_samples(path, self.lines)
        aggs = getattr(self.opts, "aggregation", ["mean"])
        if "aggregation" not in protocol:
            protocol["aggregation"] = {a: AGGREGATIONS[a] for a in aggs}
        if len(self.seeds) == 1 and any(a in ("vote", "flex") for a in aggs):
            protocol["aggregation_note"] = (
                "vote/flex combine seeds per item, so they need every seed in one suite call; with a single seed "
                "they equal that run (the CLI and the sweep run one cell per seed: set SUITE.seeds=[0,1,2])"
            )
        policy = self.backend.pixel_policy.to_dict()
        images: dict[str, Any] = {"backend_pixel_policy": policy, "published": published_images}
        if size := self.opts.image_size:
            images["suite_image_size"] = f"{size}x{size} square (aspect ignored)"
            if policy.get("mode") == "fixed" and policy.get("size") != int(size):
                images["warning"] = (
                    f"the backend's fixed pixel policy ({policy.get('size')}px) resizes the images again; set the "
                    "backend pixel policy instead of image_size to change what the model sees"
                )
        sampling = self.config.sampling.model_dump()
        sampling.pop("seed", None)
        protocol.update(images=images, sampling=sampling, seeds=self.seeds)
        if published_sampling:
            published = PERCEPTION_JUDGE_SAMPLING.items()
            deviations = [
                f"{k}={sampling.get(k)} (published {v})" for k, v in published if sampling.get(k) != v
            ]
            if self.seeds != PERCEPTION_JUDGE_SEEDS:
                deviations.append(
                    f"seeds {self.seeds} in this call (published {PERCEPTION_JUDGE_SEEDS}; a sweep averages its "
                    "seed cells)"
                )
            protocol["published_sampling"] = {**PERCEPTION_JUDGE_SAMPLING, "seeds": PERCEPTION_JUDGE_SEEDS}
            protocol["deviations_from_published"] = deviations
        extra = {"per_seed": self.per_seed} if self.per_seed else {}
        return base.SuiteResult(self.suite, metrics, protocol, counts, str(path), extra)
