"""Shared machinery of the benchmark suites: reading benchmark files, images, the judge loop, per-sample
output, seed aggregation and option handling.

Reading files
    :func:`read_jsonl` and :func:`load_table` read JSONL / JSON / parquet files and ``datasets`` folders
    (``save_to_disk``, a ``DatasetDict`` folder, or a folder of parquet shards). Every failure raises
    :class:`BenchmarkDataError` (or its ``FileNotFoundError`` subclass :class:`BenchmarkFileMissing`) whose
    message names the file, and the line or row where it applies.

Seeds
    Each item is judged once per seed (``config.seeds``; ``sampling.seed`` set per run). Results are combined
    by one or more **aggregations** (option ``aggregation``):

    * ``mean`` — metrics per seed, then the mean over seeds (the Perception-Judge protocol);
    * ``vote`` — predictions combined per item over seeds (pair: majority vote, score: median, batch: mean
      score per slot; parse failures abstain), then the metrics once (Flex-Judge style, our item-level form);
    * ``flex`` — MLLM-as-a-Judge only: a replica of Flex-Judge's ``test/evaluate.py`` (see
      :mod:`perception_judge.evaluation.benchmarks.mllm_judge`).

    Metric names start with the aggregation (``mean.pair.acc_with_tie.micro``), so every number states it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception_judge.core.images import ImageError, PixelPolicy, load_image, resolve_under
from perception_judge.core.schema import JudgeRequest, JudgeResult, Sampling
from perception_judge.evaluation.base import (
    JudgeBackend,
    SuiteConfig,
    SuiteResult,
    is_backend_error,
    lower_is_better,
    progress_bar,
)
from perception_judge.evaluation.benchmarks import metrics as M

AGGREGATIONS: tuple[str, ...] = ("mean", "vote", "flex")
PERCEPTION_JUDGE_SAMPLING = {"temperature": 1.0, "top_p": 0.95, "top_k": 20}
PERCEPTION_JUDGE_SEEDS = [0, 1, 2]


# ----------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------


class BenchmarkDataError(ValueError):
    """A benchmark file or record cannot be used. The message names the file (and line / row)."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = str(path) if path is not None else None


class BenchmarkFileMissing(BenchmarkDataError, FileNotFoundError):
    """A benchmark file or folder does not exist."""


class SkipItem(Exception):
    """Raised while building an item's requests: leave the item out and count ``reason``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# ----------------------------------------------------------------------------------------------------------
# Options
# ----------------------------------------------------------------------------------------------------------


def opt(options: dict[str, Any], key: str, default: Any = None) -> Any:
    """The option's value; ``default`` when it is absent or None."""
    value = options.get(key)
    return default if value is None else value


def opt_list(options: dict[str, Any], key: str, default: Sequence[str]) -> list[str]:
    """A list option given as a list or as a comma-separated string (``--set suite.settings=pair,score``)."""
    value = options.get(key)
    if value is None:
        return list(default)
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value]
    raise ValueError(f"option {key!r} must be a list or a comma-separated string, got {value!r}")


def opt_int(options: dict[str, Any], key: str, default: int | None) -> int | None:
    value = options.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {key!r} must be an integer, got {value!r}") from None


def opt_path(options: dict[str, Any], key: str, required: bool = True, suite: str = "") -> Path | None:
    value = options.get(key)
    if value is None or value == "":
        if required:
            name = f"{suite}.{key}" if suite else key
            raise ValueError(f"option {key!r} is required (e.g. --set {name}=/path/to/...)")
        return None
    return Path(str(value)).expanduser()


def opt_choices(
    options: dict[str, Any], key: str, allowed: Sequence[str], default: Sequence[str] | None = None
) -> list[str]:
    """A list option (:func:`opt_list`) naming some of ``allowed``; default ``default``, else all of them."""
    values = opt_list(options, key, allowed if default is None else default)
    if not values or any(v not in allowed for v in values):
        raise ValueError(f"option {key!r} must name some of {', '.join(allowed)}, got {values!r}")
    return values


def aggregations(options: dict[str, Any], allowed: Sequence[str] = ("mean", "vote")) -> list[str]:
    """The ``aggregation`` option: one name, a list, or ``"all"``; default ``["mean"]``."""
    raw = opt_list(options, "aggregation", ["mean"])
    if raw == ["all"]:
        return list(allowed)
    bad = [a for a in raw if a not in allowed]
    if bad or not raw:
        raise ValueError(f"aggregation must be one or more of {', '.join(allowed)} (or 'all'), got {raw!r}")
    return list(dict.fromkeys(raw))


def check_known_options(options: dict[str, Any], known: Iterable[str], suite: str) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(
            f"unknown option(s) for suite {suite!r}: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


def slug(name: str) -> str:
    """A metric-name-safe form of a subset / category name: lowercase, runs of other characters → ``_``."""
    s = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
    return s or "unknown"


# ----------------------------------------------------------------------------------------------------------
# Reading benchmark files
# ----------------------------------------------------------------------------------------------------------


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise BenchmarkFileMissing(f"{what}: no such file {str(path)!r}", path)
    if not path.is_file():
        raise BenchmarkDataError(f"{what}: {str(path)!r} is not a file", path)
    return path


def read_jsonl(path: str | Path, what: str = "benchmark file") -> list[dict[str, Any]]:
    """Records of a JSONL file (one JSON object a line; blank lines skipped) or of a JSON file holding a list
    of objects. Errors name the file and the line."""
    path = require_file(Path(path), what)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchmarkDataError(f"{what}: cannot read {str(path)!r}: {e}", path) from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{what}: {str(path)!r} is not valid JSON: {e}", path) from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise BenchmarkDataError(f"{what}: {str(path)!r} must hold a list of JSON objects", path)
        return data
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{what}: {path!s}:{lineno}: invalid JSON ({e.msg})", path) from None
        if not isinstance(record, dict):
            raise BenchmarkDataError(f"{what}: {path!s}:{lineno}: expected a JSON object", path)
        records.append(record)
    return records


class _ArrowRows(Sequence):
    """Row dicts of a pyarrow table, decoded one at a time (image cells stay ``{bytes, path}`` dicts)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.table.slice(i % len(self), 1).to_pylist()[0]

    @property
    def column_names(self) -> list[str]:
        return list(self.table.column_names)


@dataclass
class Table:
    """Rows of one benchmark split: a list of dicts, a ``datasets.Dataset`` or parquet rows (all indexable)."""

    path: Path
    rows: Sequence[dict[str, Any]]
    columns: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self.rows)):
            yield self.rows[i]

    def holds_paths(self, column: str) -> bool:
        """Whether a column holds image *paths* (strings) rather than inline images, judged from its type
        (Arrow / ``datasets``) or its values (JSON rows)."""
        rows = self.rows
        features = getattr(rows, "features", None)
        if features is not None:
            return getattr(features.get(column), "dtype", None) in ("string", "large_string")
        if isinstance(rows, _ArrowRows):
            import pyarrow as pa

            t = rows.table.schema.field(column).type
            return bool(pa.types.is_string(t) or pa.types.is_large_string(t))
        return any(isinstance(r.get(column), str) for r in rows)

    def view(self, columns: Sequence[str]) -> Sequence[dict[str, Any]]:
        """Rows restricted to the given columns (those that exist), without decoding the others: read text
        fields of every row through one view and fetch image cells per batch through another."""
        cols = [c for c in columns if c in self.columns]
        rows = self.rows
        if hasattr(rows, "select_columns"):  # datasets.Dataset: an Arrow view, images decoded on access only
            return rows.select_columns(cols)
        if isinstance(rows, _ArrowRows):
            return _ArrowRows(rows.table.select(cols))
        return [{c: r.get(c) for c in cols} for r in rows]


def _read_parquet(files: list[Path], what: str) -> Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for f in files:
        try:
            tables.append(pq.read_table(f, memory_map=True))
        except (OSError, pa.ArrowException) as e:
            raise BenchmarkDataError(f"{what}: cannot read parquet file {str(f)!r}: {e}", f) from None
    try:
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    except pa.ArrowException as e:
        raise BenchmarkDataError(
            f"{what}: parquet shards {[str(f) for f in files]} do not match: {e}"
        ) from None
    rows = _ArrowRows(table)
    return Table(files[0] if len(files) == 1 else files[0].parent, rows, rows.column_names)


def _load_from_disk(folder: Path, split: str | None, what: str) -> Table:
    from datasets import DatasetDict, load_from_disk

    try:
        ds = load_from_disk(str(folder))
    except Exception as e:  # datasets raises several types for a broken folder
        raise BenchmarkDataError(
            f"{what}: cannot load the datasets folder {str(folder)!r}: {e}", folder
        ) from None
    if isinstance(ds, DatasetDict):
        if split is None:
            if len(ds) != 1:
                raise BenchmarkDataError(
                    f"{what}: {str(folder)!r} holds splits {sorted(ds)}; choose one with the 'split' option",
                    folder,
                )
            split = next(iter(ds))
        if split not in ds:
            raise BenchmarkFileMissing(
                f"{what}: split {split!r} not in the datasets folder {str(folder)!r} (splits: {sorted(ds)})",
                folder,
            )
        ds = ds[split]
    return Table(folder, ds, list(ds.column_names))


def _is_datasets_folder(folder: Path) -> bool:
    """A folder written by ``save_to_disk``: a DatasetDict (``dataset_dict.json``) or a Dataset (``state.json``)."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def load_table(path: str | Path, split: str | None = None, what: str = "benchmark") -> Table:
    """Load one split of a benchmark from ``path``:

    * a ``.jsonl`` / ``.json`` / ``.parquet`` file;
    * a folder written by ``datasets.save_to_disk`` (a ``Dataset``, or a ``DatasetDict`` → ``split``);
    * a folder holding ``{split}.parquet``, ``{split}.jsonl``, ``{split}.json``, a ``{split}/`` datasets
      folder, or parquet shards ``{split}-*.parquet`` (also under ``data/``, the Hugging Face hub layout).

    Errors name the file or folder and what was expected there."""
    path = Path(path).expanduser()
    if not path.exists():
        raise BenchmarkFileMissing(f"{what}: no such file or folder {str(path)!r}", path)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return _read_parquet([path], what)
        if suffix in (".jsonl", ".json"):
            rows = read_jsonl(path, what)
            return Table(path, rows, sorted({k for r in rows for k in r}))
        raise BenchmarkDataError(
            f"{what}: unsupported file type {str(path)!r} (expected .jsonl, .json or .parquet)", path
        )
    if _is_datasets_folder(path):
        return _load_from_disk(path, split, what)
    if split is None:
        raise BenchmarkDataError(
            f"{what}: {str(path)!r} is a folder but not a datasets folder; name a file or set the 'split' option",
            path,
        )
    for name in (f"{split}.parquet", f"{split}.jsonl", f"{split}.json"):
        if (path / name).is_file():
            return load_table(path / name, None, what)
    if (path / split).is_dir() and _is_datasets_folder(path / split):
        return _load_from_disk(path / split, None, what)
    for pattern in (f"{split}-*.parquet", f"data/{split}-*.parquet", f"{split}/*.parquet"):
        shards = sorted(path.glob(pattern))
        if shards:
            return _read_parquet(shards, what)
    raise BenchmarkFileMissing(
        f"{what}: no {split!r} split in {str(path)!r}: expected {split}.parquet, {split}.jsonl, {split}.json, "
        f"a {split}/ datasets folder, {split}-*.parquet shards, or a datasets folder (save_to_disk)",
        path / f"{split}.parquet",
    )


def first_field(record: dict[str, Any], names: Sequence[str]) -> Any:
    """The value of the first of ``names`` present in the record and not None / empty string."""
    for n in names:
        v = record.get(n)
        if v is not None and v != "":
            return v
    return None


# ----------------------------------------------------------------------------------------------------------
# Images
# ----------------------------------------------------------------------------------------------------------


class ImageSource:
    """Loads benchmark images: relative paths under one or more roots, or inline cells (PIL, bytes, ``{bytes,
    path}`` dicts). ``missing="error"`` raises a :class:`BenchmarkDataError` naming the file; ``"skip"``
    raises :class:`SkipItem` so the item is left out and counted."""

    def __init__(self, roots: Sequence[Path], missing: str = "error", what: str = "image") -> None:
        if missing not in ("error", "skip"):
            raise ValueError(f"option 'missing_images' must be 'error' or 'skip', got {missing!r}")
        self.roots = [Path(r) for r in roots]
        self.missing = missing
        self.what = what

    def _candidates(self, rel: str) -> list[Path]:
        """The files a relative image path may name, each confined to its root: a path that leaves every root
        (``../``, a symlink out) raises :class:`ImageError` ``path_escapes_root``."""
        out: list[Path] = []
        escaped: ImageError | None = None
        for root in self.roots:
            try:
                out.append(resolve_under(root, rel))
            except ImageError as e:
                escaped = e
        if not out and escaped is not None:  # the path itself leaves every root: never try its bare name
            raise escaped
        rel_path = Path(rel)
        if (
            len(rel_path.parts) > 1
        ):  # tolerate an extra leading folder ("image/200.jpg" under the image folder)
            for root in self.roots:
                with contextlib.suppress(ImageError):
                    out.append(resolve_under(root, rel_path.name))
        return out

    def _confined_absolute(self, cell: str) -> Path:
        """An absolute image path is read only when it lies under one of the image roots."""
        path = Path(cell).resolve()
        for root in self.roots:
            r = Path(root).resolve()
            if path == r or r in path.parents:
                return path
        raise ImageError(
            "path_escapes_root",
            f"absolute image path {cell!r} is outside the image roots {[str(r) for r in self.roots]}",
        )

    def check(self, cell: Any, context: str) -> None:
        """Fail fast, before any judging: in ``error`` mode, an image path that resolves to no file raises
        :class:`BenchmarkDataError` naming it (inline cells and ``skip`` mode are checked when loaded)."""
        if self.missing != "error":
            return
        if isinstance(cell, str) and not cell.startswith("data:"):
            try:
                path = Path(cell)
                if cell.strip() and (
                    self._confined_absolute(cell).is_file()
                    if path.is_absolute()
                    else any(c.is_file() for c in self._candidates(cell))
                ):
                    return
            except ImageError:
                pass
            self.load(cell, context)  # raises with the full message
        elif cell is None:
            self.load(cell, context)

    def load(self, cell: Any, context: str) -> Any:
        try:
            if isinstance(cell, str) and not cell.startswith("data:"):
                if Path(cell).is_absolute():
                    return load_image(self._confined_absolute(cell))
                candidates = self._candidates(cell)
                for c in candidates:
                    if c.is_file():
                        return load_image(c)
                shown = str(candidates[0]) if candidates else cell
                raise ImageError("missing", f"no image file at {shown!r} (image_path {cell!r} in {context})")
            if isinstance(cell, dict) and not cell.get("bytes") and cell.get("path"):
                return self.load(cell["path"], context)
            return load_image(cell)
        except ImageError as e:
            if self.missing == "skip":
                raise SkipItem(f"{e.reason}_image", f"{context}: {e}") from None
            raise BenchmarkDataError(f"{self.what} for {context}: {e}") from None


def prepare_image(image: Any, backend: JudgeBackend, image_size: int | None) -> Any:
    """Resize an image for the judge: to an ``image_size`` square when the suite option is set, otherwise by
    the backend's pixel policy (backends apply their policy again; it is idempotent)."""
    if image_size:
        return PixelPolicy(mode="fixed", size=int(image_size), factor=1).apply(image)
    return backend.pixel_policy.apply(image)


def image_protocol(backend: JudgeBackend, image_size: int | None, published: str) -> dict[str, Any]:
    policy = backend.pixel_policy.to_dict()
    out: dict[str, Any] = {"backend_pixel_policy": policy, "published": published}
    if image_size:
        out["suite_image_size"] = f"{image_size}x{image_size} square (aspect ignored)"
        if policy.get("mode") == "fixed" and policy.get("size") != int(image_size):
            out["warning"] = (
                f"the backend's fixed pixel policy ({policy.get('size')}px) resizes the images again; set the "
                "backend pixel policy instead of image_size to change what the model sees"
            )
    return out


# ----------------------------------------------------------------------------------------------------------
# Judging
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """The parsed result of one request for one seed (the completion text goes to the samples file)."""

    scores: list[float] | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.scores is not None


class SampleWriter:
    """Per-sample outputs: one JSON line per (request, seed) under ``config.out_dir``."""

    def __init__(self, out_dir: str | Path | None, name: str) -> None:
        self.path: Path | None = None
        self._fh = None
        if out_dir is not None:
            out = Path(out_dir)
            out.mkdir(parents=True, exist_ok=True)
            self.path = out / f"{name}.samples.jsonl"
            self._fh = self.path.open("w", encoding="utf-8")

    @property
    def samples_path(self) -> str | None:
        """The samples file as a string for :class:`SuiteResult` (None without an ``out_dir``)."""
        return str(self.path) if self.path else None

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def seed_sampling(sampling: Sampling, seed: int) -> Sampling:
    return dataclasses.replace(sampling, seed=int(seed))


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def judge_items(
    backend: JudgeBackend,
    items: Sequence[Any],
    build: Callable[[Any], list[JudgeRequest]],
    *,
    seeds: Sequence[int],
    sampling: Sampling,
    batch_size: int,
    writer: SampleWriter,
    counts: dict[str, int],
    log_fields: Callable[[Any], dict[str, Any]] | None = None,
    desc: str = "judging",
) -> dict[tuple[int, str, int], Outcome]:
    """Judge every item under every seed, ``batch_size`` items per backend call (images load once per chunk;
    every seed of a chunk is judged before the next chunk loads).

    ``build(item)`` returns the item's requests, each with ``meta["variant"]`` naming it (e.g. ``"orig"`` /
    ``"swap"``), or raises :class:`SkipItem` (counted as ``skipped_<reason>``). Returns
    ``{(item index, variant, seed): Outcome}``; items are identified by their position in ``items``.

    Counts: ``judgments`` (requests × seeds), ``parse_failures`` (a completion without the required scores)
    and ``backend_errors`` (the call itself failed: no completion). Both kinds of failure reach the metrics as
    a missing prediction; only the first is the judge's ``parse_failure_rate``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    outcomes: dict[tuple[int, str, int], Outcome] = {}
    indexed = list(enumerate(items))
    progress = progress_bar(len(indexed), desc, "item", leave=False)
    for chunk in chunks(indexed, batch_size):
        progress.update(len(chunk))
        requests: list[JudgeRequest] = []
        owners: list[int] = []
        for index, item in chunk:
            try:
                reqs = build(item)
            except SkipItem as skip:
                key = f"skipped_{skip.reason}"
                counts[key] = counts.get(key, 0) + 1
                continue
            requests.extend(reqs)
            owners.extend([index] * len(reqs))
        if not requests:
            continue
        for seed in seeds:
            results = backend.judge(requests, seed_sampling(sampling, seed))
            _check_results(requests, results, backend)
            for index, req, res in zip(owners, requests, results):
                variant = str(req.meta.get("variant", "main"))
                outcome = Outcome(list(res.scores) if res.scores is not None else None, res.error)
                outcomes[(index, variant, int(seed))] = outcome
                counts["judgments"] = counts.get("judgments", 0) + 1
                if not outcome.ok:
                    key = "backend_errors" if is_backend_error(res) else "parse_failures"
                    counts[key] = counts.get(key, 0) + 1
                record = {"request_id": req.request_id, "seed": int(seed), "variant": variant}
                if log_fields is not None:
                    record.update(log_fields(items[index]))
                record.update(
                    {
                        "scores": outcome.scores,
                        "error": res.error,
                        "text": res.text,
                        "reasoning": res.reasoning,
                    }
                )
                writer.write(record)
    progress.close()
    return outcomes


def judged_items(
    items: Sequence[Any], outcomes: dict[tuple[int, str, int], Outcome], counts: dict[str, int]
) -> tuple[list[int], list[Any]]:
    """The indices (into ``items``) of the items :func:`judge_items` judged, skipped ones left out, and those
    items; counts them as ``items``."""
    judged = sorted({i for (i, _, _) in outcomes})
    kept = [items[i] for i in judged]
    counts["items"] = len(kept)
    return judged, kept


def parse_failure_rate(counts: dict[str, int]) -> float | None:
    """Parse failures / judgments (every seed) of the counts :func:`judge_items` keeps."""
    return M.rate(counts.get("parse_failures", 0), counts.get("judgments", 0))


def _check_results(requests: list[JudgeRequest], results: list[JudgeResult], backend: JudgeBackend) -> None:
    if len(results) != len(requests):
        raise RuntimeError(
            f"backend {backend.name!r} returned {len(results)} results for {len(requests)} requests"
        )
    for req, res in zip(requests, results):
        if res.request_id != req.request_id:
            raise RuntimeError(
                f"backend {backend.name!r} returned result {res.request_id!r} in place of {req.request_id!r}"
            )


# ----------------------------------------------------------------------------------------------------------
# Aggregating runs and describing the protocol
# ----------------------------------------------------------------------------------------------------------


def mean_over_runs(runs: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """Per metric, the mean over runs (seeds) of the runs where it is defined; None where it never is."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run if k not in keys]
    out: dict[str, float | None] = {}
    for k in keys:
        values = [run.get(k) for run in runs if run.get(k) is not None]
        out[k] = sum(values) / len(values) if values else None  # type: ignore[arg-type]
    return out


def suite_seeds(options: dict[str, Any], config: SuiteConfig) -> list[int]:
    """The seeds judged inside this suite call: option ``seeds`` (a list or ``"0,1,2"``) or ``config.seeds``.

    ``perception-judge eval`` and the sweep run one cell per seed, so a cell sees one seed; the item-level
    aggregations (``vote``, ``flex``) need every seed in one call: run with ``--seeds 0`` and
    ``--set SUITE.seeds=[0,1,2]``."""
    raw = options.get("seeds")
    if raw is None:
        seeds = [int(s) for s in config.seeds]
    else:
        try:
            seeds = [int(s) for s in opt_list(options, "seeds", [])] if not isinstance(raw, int) else [raw]
        except ValueError:
            raise ValueError(f"option 'seeds' must be a list of integers, got {raw!r}") from None
    return list(dict.fromkeys(seeds)) or [0]


def aggregation_note(aggs: Sequence[str], seeds: Sequence[int]) -> dict[str, str]:
    """A protocol note when an item-level aggregation sees a single seed (a sweep runs one cell per seed)."""
    if len(seeds) > 1 or not any(a in ("vote", "flex") for a in aggs):
        return {}
    return {
        "aggregation_note": "vote/flex combine seeds per item, so they need every seed in one suite call; with a "
        "single seed they equal that run (the CLI and the sweep run one cell per seed: set SUITE.seeds=[0,1,2])"
    }


IDEAL_ZERO_PATTERNS: tuple[str, ...] = (
    "score_bias",
    "score_shift",
    "self_preference",
    "score_gap",
    ".gap",
    "acc_gap",
)


def report_hints(metrics: dict[str, float | None], primary: str | None) -> dict[str, Any]:
    """Protocol keys the report reads: the suite's ``primary_metric`` (ranks models), the metrics where lower
    is better, and (for readers) those whose ideal is 0 or 0.5 rather than an extreme."""
    lower = [m for m in metrics if lower_is_better(m)]
    ideal = {m: 0.0 for m in metrics if m not in lower and any(p in m for p in IDEAL_ZERO_PATTERNS)}
    ideal.update({m: 0.5 for m in metrics if m.endswith("first_position_win_rate")})
    out: dict[str, Any] = {"lower_is_better": lower}
    if primary is not None and primary in metrics:
        out["primary_metric"] = primary
    if ideal:
        out["ideal_values"] = ideal
    return out


def judge_protocol(
    backend: JudgeBackend,
    config: SuiteConfig,
    image_size: int | None,
    published_images: str,
    *,
    seeds: Sequence[int] | None = None,
    published_sampling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The protocol keys every benchmark suite ends with: ``images`` (:func:`image_protocol`), the sampling and
    seeds (:func:`sampling_protocol`) and ``backend``."""
    return {
        "images": image_protocol(backend, image_size, published_images),
        **sampling_protocol(config, published_sampling, seeds),
        "backend": backend.describe(),
    }


def suite_result(
    suite: str,
    metrics: dict[str, float | None],
    protocol: dict[str, Any],
    counts: dict[str, int],
    samples_path: str | None,
    per_seed: dict[str, dict[str, float | None]],
    primary: str | None,
) -> SuiteResult:
    """The suite's :class:`SuiteResult`: ``protocol`` completed with :func:`report_hints` (``primary`` ranks
    models), the per-seed metrics under ``extra["per_seed"]`` when there are any."""
    protocol.update(report_hints(metrics, primary))
    return SuiteResult(
        suite=suite,
        metrics=metrics,
        protocol=protocol,
        counts=counts,
        samples_path=samples_path,
        extra={"per_seed": per_seed} if per_seed else {},
    )


def prefixed(prefix: str, metrics: dict[str, float | None]) -> dict[str, float | None]:
    return {f"{prefix}.{k}": v for k, v in metrics.items()}


def macro(values: dict[str, float | None]) -> float | None:
    """Unweighted mean over groups of the defined per-group values."""
    defined = [v for v in values.values() if v is not None]
    return sum(defined) / len(defined) if defined else None


def sampling_protocol(
    config: SuiteConfig, published: dict[str, Any] | None = None, seeds: Sequence[int] | None = None
) -> dict[str, Any]:
    """The sampling and seeds of the run (``seeds``: those judged in this call, default ``config.seeds``), and
    how they differ from the published protocol."""
    s = dataclasses.asdict(config.sampling)
    s.pop("seed", None)
    run_seeds = [int(x) for x in (seeds if seeds is not None else config.seeds)]
    out: dict[str, Any] = {"sampling": s, "seeds": run_seeds}
    if published:
        deviations = []
        for k, v in published.items():
            if k == "seeds":
                if run_seeds != list(v):
                    deviations.append(
                        f"seeds {run_seeds} in this call (published {list(v)}; a sweep averages its seed cells)"
                    )
            elif s.get(k) != v:
                deviations.append(f"{k}={s.get(k)} (published {v})")
        out["published_sampling"] = published
        out["deviations_from_published"] = deviations
    return out


__all__ = [
    "AGGREGATIONS",
    "BenchmarkDataError",
    "BenchmarkFileMissing",
    "ImageSource",
    "Outcome",
    "SampleWriter",
    "SkipItem",
    "Table",
    "aggregations",
    "judge_items",
    "judge_protocol",
    "judged_items",
    "load_table",
    "macro",
    "mean_over_runs",
    "opt_choices",
    "parse_failure_rate",
    "prepare_image",
    "read_jsonl",
    "seed_sampling",
    "slug",
    "suite_result",
]
