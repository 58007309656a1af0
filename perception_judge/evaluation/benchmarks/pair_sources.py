"""Where the pairs of the position, verbosity and self-enhancement suites come from (option ``source``, inferred
from the path option given when omitted): ``mllm_judge`` (``pair.jsonl``), ``vlrewardbench``, ``ppjd`` (every pair
of kinds of a training-set row, r_c > r_rp > r_rp_r) or ``pairs_jsonl``. See ``docs/benchmarks.md`` (pair sources).
The readers of the MLLM-as-a-Judge files and the VL-RewardBench rows live here, below those suites and these.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import RESPONSE_KINDS, SLOTS, JudgeRequest
from perception_judge.evaluation.benchmarks import common
from perception_judge.evaluation.benchmarks import metrics as M
from perception_judge.evaluation.benchmarks.pairs import PairItem
from perception_judge.evaluation.benchmarks.vlrb_cal import GROUPS

SOURCE_PATHS = {
    "mllm_judge": ("pair_file", "data_dir"),
    "vlrewardbench": ("data_dir",),
    "ppjd": ("trainset_dir",),
    "pairs_jsonl": ("pairs_file",),
}


class PairSourceOptions(common.JudgeOptions):
    """``split``: default ``validation`` (ppjd) or ``test`` (vlrewardbench)."""

    source: Literal["mllm_judge", "vlrewardbench", "ppjd", "pairs_jsonl"] | None = None
    data_dir: common.OptPath = None
    pair_file: common.OptPath = None
    images_dir: common.OptPath = None
    split: str | None = None
    trainset_dir: common.OptPath = None
    pairs_file: common.OptPath = None
    missing_images: Literal["error", "skip"] = "error"

    def uses_pairs(self) -> bool:
        return True

    @model_validator(mode="after")
    def _source_path(self) -> PairSourceOptions:
        """The pair source and its path, checked when the options are typed: before any model loads."""
        keys = SOURCE_PATHS[source := infer_source(self)] if self.uses_pairs() else ()
        if keys and not any(getattr(self, k) for k in keys):
            raise ValueError(f"pair source {source!r} needs the option {' or '.join(keys)} (a path)")
        return self


def infer_source(opts: PairSourceOptions) -> str:
    if opts.source is not None:
        return opts.source
    for key, source in (("pairs_file", "pairs_jsonl"), ("trainset_dir", "ppjd"), ("pair_file", "mllm_judge")):
        if getattr(opts, key) is not None:
            return source
    if opts.data_dir is not None:
        return "mllm_judge" if (opts.data_dir / "pair.jsonl").is_file() else "vlrewardbench"
    raise ValueError(
        "no pair source: set 'source' (mllm_judge, vlrewardbench, ppjd, pairs_jsonl) and its path option "
        "(data_dir, pair_file, trainset_dir or pairs_file)"
    )


_PREFERRED = {0: "A", 1: "B", "0": "A", "1": "B", "A": "A", "B": "B", "C": "C", "TIE": "C"}


def _preferred(value: Any) -> str | None:
    """A generic record's ``preferred``: 0 / "A" → "A", 1 / "B" → "B", "tie" / "C" → "C", null → None."""
    key = value.strip().upper() if isinstance(value, str) else value if type(value) is int else None
    if value is not None and key not in _PREFERRED:
        raise ValueError(f"'preferred' must be 0, 1, 'A', 'B', 'tie' or null, got {value!r}")
    return _PREFERRED.get(key)


def load_pair_source(opts: PairSourceOptions, limit: int | None) -> tuple[list[PairItem], dict[str, Any]]:
    """PairItems from the configured source (their image paths checked), and a description of the source."""
    source = infer_source(opts)
    if source == "mllm_judge":
        path = setting_file("pair", opts.pair_file, opts.data_dir)
        images = image_source(opts.images_dir, [path], opts.missing_images)
        items = [
            PairItem(
                item_id=it.item_id.replace(":", "_") + f"_r{it.row}",
                question=it.question,
                responses=list(it.responses),
                preferred=it.gt,
                group=it.dataset,
                names=list(it.names),
                load_images=lambda it=it: [images.load(it.image, it.where)],
                check_images=lambda it=it: images.check(it.image, it.where),
            )
            for it in mllm_judge_items("pair", path)[0]
        ]
        desc = {"source": "mllm_judge", "file": str(path)}
    elif source == "vlrewardbench":
        items, _, path = vlrewardbench_items(
            opts.data_dir, opts.split or "test", opts.images_dir, opts.missing_images
        )
        desc = {"source": "vlrewardbench", "path": str(path)}
    elif source == "ppjd":
        items, desc = _ppjd_items(opts.trainset_dir, opts.split or "validation")
    else:
        items, desc = _jsonl_items(opts.pairs_file, opts)
    items = items[:limit]  # a None limit keeps everything
    for item in items:
        item.check_images()
    return items, desc


PROMPT_PROTOCOL = {"pair": "pair", "score": "single", "batch": "batch"}
GT_FIELDS = ("human", "human_answer")


@dataclass
class Item:
    """One benchmark record, normalised."""

    setting: str
    row: int  # 1-based position in the file
    item_id: str
    dataset: str
    question: str
    responses: list[str]
    names: list[str | None]
    image: Any
    gt: Any  # "A" | "B" | "C" (pair), int 1-5 (score), ranking string (batch)
    where: str = ""  # "<file> record <row>", for messages

    def request(self, suite: str, image: Any, parser: str = "protocol", prompt: Any = None) -> JudgeRequest:
        """The item's request: the project's prompt, or the published ``prompt`` (a ``prompt_source.Prompt``)."""
        render = prompt.render if prompt else functools.partial(build_messages, PROMPT_PROTOCOL[self.setting])
        return JudgeRequest(
            request_id=f"{suite}:{self.item_id}:r{self.row}",
            messages=render(self.question, self.responses, n_images=1),
            images=[image],
            n_scores=1 if self.setting == "score" else len(self.responses),
            parser=parser,
            meta={"variant": "main", "suite": suite, "setting": self.setting},
        )


def pair_gt(record: dict[str, Any]) -> str | None:
    v = common.first_field(record, GT_FIELDS)
    return v.strip().upper() if isinstance(v, str) and v.strip().upper() in M.VERDICTS else None


def score_gt(record: dict[str, Any]) -> int | None:
    v = common.first_field(record, GT_FIELDS)
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 5 else None


def batch_gt(record: dict[str, Any]) -> str | None:
    """The human ranking as slot letters (separators such as ``>`` or spaces dropped); None if absent."""
    v = common.first_field(record, GT_FIELDS)
    if not isinstance(v, str):
        return None
    return "".join(ch for ch in v.upper() if ch in SLOTS) or None


def _answer(value: Any, what: str, path: Path, row: int) -> tuple[str, str | None]:
    """(answer text, model name) of a ``{name, answer}`` cell or a bare string."""
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        return value["answer"], str(value["name"]) if value.get("name") is not None else None
    if isinstance(value, str):
        return value, None
    raise common.BenchmarkDataError(
        f"MLLM-as-a-Judge: {path!s} record {row}: {what} must be {{name, answer}}"
    )


def mllm_judge_items(setting: str, path: Path) -> tuple[list[Item], dict[str, int]]:
    """Items of one setting, and counts of the records left out (``skipped_<reason>``)."""
    records = common.read_jsonl(path, f"MLLM-as-a-Judge {setting} file")
    items: list[Item] = []
    counts: dict[str, int] = {"records": len(records)}

    def skip(reason: str) -> None:
        counts[f"skipped_{reason}"] = counts.get(f"skipped_{reason}", 0) + 1

    for row, rec in enumerate(records, 1):
        question = common.first_field(rec, ("instruction", "question"))
        if not isinstance(question, str):
            raise common.BenchmarkDataError(f"MLLM-as-a-Judge: {path!s} record {row}: no 'instruction' text")
        if setting == "pair":
            answers = [_answer(rec.get(k), repr(k), path, row) for k in ("answer1", "answer2")]
            gt, reason = pair_gt(rec), "no_gt"
        elif setting == "score":
            text, name = _answer(rec.get("answer"), "'answer'", path, row)
            answers = [(text, name if name is not None or rec.get("name") is None else str(rec["name"]))]
            gt, reason = score_gt(rec), "no_gt"
        else:
            raw = rec.get("answers")
            if not isinstance(raw, list) or not 2 <= len(raw) <= len(SLOTS):
                skip("bad_answers")
                continue
            answers = [_answer(a, f"answers[{j}]", path, row) for j, a in enumerate(raw)]
            gt, reason = batch_gt(rec), "gt_short"
            if gt is not None and len(gt) <= 2:  # the published rule: skip rankings of <= 2 letters
                gt = None
        if gt is None:
            skip(reason)
            continue
        ident = rec.get(f"{setting}_id", rec.get("id", row))
        dataset = str(rec.get("original_dataset") or "unknown")
        texts, names = [a for a, _ in answers], [n for _, n in answers]
        image, where = rec.get("image_path"), f"{path} record {row}"
        items.append(
            Item(setting, row, f"{setting}:{ident}", dataset, question, texts, names, image, gt, where)
        )
    return items, counts


def setting_file(setting: str, explicit: Path | None, data_dir: Path | None) -> Path:
    """The file of one setting: ``explicit`` (option ``<setting>_file``) or ``data_dir/<setting>.jsonl`` (the
    options have checked that one is given)."""
    return common.require_file(explicit or data_dir / f"{setting}.jsonl", f"MLLM-as-a-Judge {setting} file")  # type: ignore[operator]


def image_source(images_dir: Path | None, files: list[Path], missing: str) -> common.ImageSource:
    """The images: under ``images_dir``, else each file's folder, its parent, and ``image/`` under either."""
    roots = (
        r for f in files for r in (f.parent, f.parent.parent, f.parent / "image", f.parent.parent / "image")
    )
    folders = [images_dir] if images_dir is not None else list(dict.fromkeys(roots))
    return common.ImageSource(folders, missing, "MLLM-as-a-Judge image")


def checked_items(
    setting: str, path: Path, images: common.ImageSource, limit: int | None
) -> tuple[list[Item], dict[str, int]]:
    """:func:`mllm_judge_items`, the first ``limit`` kept (None keeps all), their images found before any judging."""
    items, counts = mllm_judge_items(setting, path)
    for item in items[:limit]:
        images.check(item.image, item.where)
    return items[:limit], counts


CATEGORY_BY_PREFIX: dict[str, str] = {
    "mathverse": "reasoning",
    "mmmu": "reasoning",
    "hallucination": "hallucination",
    "rlhf": "hallucination",
    "rlaif": "hallucination",
    "wildvision": "general",
    "vlfeedback": "general",
}
"""The id prefixes of lmms-eval's VL-RewardBench task; any other prefix is ``general``."""
_TEXT_COLUMNS = ("id", "query", "question", "response", "responses", "human_ranking", "models", "category")


def category_of(record: dict[str, Any]) -> tuple[str, bool]:
    """(category, defaulted): an explicit ``category`` field, else the mapped id prefix, else "general"."""
    explicit = record.get("category")
    if isinstance(explicit, str) and explicit.strip().lower() in GROUPS:
        return explicit.strip().lower(), False
    prefix = str(record.get("id") or "").split("-")[0].split("_")[0].lower()
    return CATEGORY_BY_PREFIX.get(prefix, "general"), prefix not in CATEGORY_BY_PREFIX


def preferred_from_ranking(ranking: Any) -> str | None:
    """``[0, 1]`` → "A" (response 0 better), ``[1, 0]`` → "B"; None when absent or equal."""
    if not isinstance(ranking, list | tuple) or len(ranking) != 2:
        return None
    try:
        r0, r1 = float(ranking[0]), float(ranking[1])
    except (TypeError, ValueError):
        return None
    return "A" if r0 < r1 else "B" if r1 < r0 else None


def vlrewardbench_items(
    path: Path, split: str, images_dir: Path | None, missing_images: str
) -> tuple[list[PairItem], dict[str, int], Path]:
    """The benchmark's pairs (images loaded lazily), counts of the rows left out or adjusted, and the data path."""
    table = common.load_table(path, split, "VL-RewardBench")
    image_col = next((c for c in ("image", "image_path") if c in table.columns), None)
    if image_col is None:
        raise common.BenchmarkDataError(f"VL-RewardBench: {str(table.path)!r} has no 'image' column")
    images = common.TableImages(table, [image_col], images_dir, missing_images, "VL-RewardBench image")
    items: list[PairItem] = []
    counts = {"rows": len(table), "skipped_no_gt": 0, "category_defaulted": 0, "duplicate_ids": 0}
    seen_ids: set[str] = set()
    for i, rec in enumerate(table.view(_TEXT_COLUMNS)):
        where = f"{table.path} row {i}"
        question = common.first_field(rec, ("query", "question"))
        responses = common.first_field(rec, ("response", "responses"))
        if not isinstance(question, str):
            raise common.BenchmarkDataError(f"VL-RewardBench: {where}: no 'query' text")
        if not common.two_texts(responses):
            raise common.BenchmarkDataError(f"VL-RewardBench: {where}: 'response' must hold two strings")
        preferred = preferred_from_ranking(rec.get("human_ranking"))
        if preferred is None:
            counts["skipped_no_gt"] += 1
            continue
        group, defaulted = category_of(rec)
        counts["category_defaulted"] += defaulted
        models = rec.get("models")
        names = [str(m) for m in models] if isinstance(models, list) and len(models) == 2 else [None, None]
        record_id = str(rec.get("id") if rec.get("id") is not None else i)
        # the hub release has rows that share an id: the row index keeps their requests apart
        counts["duplicate_ids"] += record_id in seen_ids
        item_id = f"{record_id}#row{i}" if record_id in seen_ids else record_id
        seen_ids.add(item_id)
        load, check = (functools.partial(f, i, where) for f in (images.load, images.check))
        item = PairItem(item_id, question, list(responses), preferred, group, names, record_id, load, check)
        items.append(item)
    return items, counts, table.path


def _ppjd_items(folder: Path, split: str) -> tuple[list[PairItem], dict[str, Any]]:
    from perception_judge.core.trainset import load_training_set

    if not folder.is_dir():
        raise common.BenchmarkFileMissing(f"PPJD training set: no such folder {str(folder)!r}")
    try:
        ds = load_training_set(folder, splits=[split])[split]
    except FileNotFoundError as e:
        raise common.BenchmarkFileMissing(f"PPJD training set: {e} (split {split!r})") from None
    imgs = ds.select_columns(["images"])
    rank = {k: i for i, k in enumerate(RESPONSE_KINDS)}
    seen: set[tuple[str, str, str]] = set()
    items: list[PairItem] = []
    for i, row in enumerate(ds.select_columns(["question", "responses", "kinds", "record_key"])):
        responses, kinds = list(row["responses"]), list(row["kinds"])
        for a, b in combinations(range(len(kinds)), 2):
            ka, kb = kinds[a], kinds[b]
            key = (str(row["record_key"]), *sorted((ka, kb)))
            if ka not in rank or kb not in rank or ka == kb or key in seen:
                continue
            seen.add(key)
            items.append(
                PairItem(
                    item_id=f"{row['record_key']}_{ka}_vs_{kb}",
                    question=str(row["question"]),
                    responses=[responses[a], responses[b]],
                    preferred="A" if rank[ka] < rank[kb] else "B",
                    group="_vs_".join(sorted((ka, kb), key=rank.get)),
                    names=[ka, kb],
                    load_images=lambda i=i: list(imgs[i]["images"]),
                )
            )
    return items, {"source": "ppjd", "folder": str(folder), "split": split}


def _jsonl_items(path: Path, opts: PairSourceOptions) -> tuple[list[PairItem], dict[str, Any]]:
    records = common.read_jsonl(path, "pairs file")
    images = common.ImageSource([opts.images_dir or path.parent], opts.missing_images, "pair image")
    items = []
    for row, rec in enumerate(records, 1):
        where = f"pairs file: {path!s} record {row}"
        responses = rec.get("responses")
        question = common.first_field(rec, ("question", "query", "instruction"))
        if not common.two_texts(responses):
            raise common.BenchmarkDataError(f"{where}: 'responses' must be two strings")
        if not isinstance(question, str):
            raise common.BenchmarkDataError(f"{where}: no 'question'")
        try:
            preferred = _preferred(rec.get("preferred"))
        except ValueError as e:
            raise common.BenchmarkDataError(f"{where}: {e}") from None
        item = PairItem(
            item_id=str(rec.get("id", row)),
            question=question,
            responses=list(responses),
            preferred=preferred,
            group=str(rec.get("group") or rec.get("category") or ""),
            names=[str(n) if n is not None else None for n in rec.get("names") or [None, None]][:2],
        )
        if (image := common.first_field(rec, ("image", "image_path"))) is not None:
            context = f"{path} record {row}"
            item.load_images = lambda image=image, c=context: [images.load(image, c)]
            item.check_images = functools.partial(images.check, image, context)
        items.append(item)
    return items, {"source": "pairs_jsonl", "file": str(path)}
