"""The perceptual-sensitivity suite on held-out PPJD: does the judge prefer the correct response r_c over its
perceptual counterfactuals r_rp (perception errors) and r_rp_r (perception and reasoning errors)?

Data: the ``validation`` split of an exported training set (:func:`perception_judge.core.trainset.load_training_set`;
columns ``question``, ``responses`` in slot order, ``kinds``, ``images``, ``record_key``). Rows of one record are
merged, so every record contributes its question, image and the three responses once.

Protocols (all with the trained judge's own prompts, :func:`perception_judge.core.protocol.build_messages`):

``pair``    r_c vs r_rp and r_c vs r_rp_r, each pair judged in **both orders**. A judgement earns 1 when r_c
            gets the strictly higher score, 1/2 for a tie and 0 when r_c scores lower or the completion does not
            parse, so a judge that ignores the image sits at the chance level 0.5 whatever its tie rate
            (:func:`pair_accuracy`). Metrics: ``pair_acc_c_vs_rp``, ``pair_acc_c_vs_rp_r``, ``pair_acc`` (all pair
            judgements), each with ``<name>_ci95_lo`` / ``_ci95_hi`` (Wilson interval), ``_n``, ``_ties`` and
            ``_parse_failures`` (rates); ``pair_consistency`` (share of pairs whose verdict -- r_c better, other
            better, tie -- is the same in both orders, parse failures inconsistent), ``pair_parse_fail_rate``.
            Backend errors (a request the engine did not answer) are not judgements: they leave every
            denominator and are counted in ``error_rate``.
``batch``   the three responses in one prompt, slots permuted (one seeded permutation per record, or all six with
            ``batch_orders: all``). ``batch_ranking_reward`` = the training reward (fraction of the three pairs ordered
            as r_c > r_rp > r_rp_r; ties and parse failures 0); ``batch_kendall_tau`` = mean Kendall tau-b between
            the scores and that order over parsed completions; ``batch_parse_fail_rate``.
``single``  each response alone; the verdict is right when r_c scores >= ``tau`` (default 6) and a counterfactual
            < ``tau`` (:func:`perception_judge.rewards.verdict_reward`). ``single_verdict_acc`` (all),
            ``single_acc_r_c``, ``single_acc_perturbed``, ``single_parse_fail_rate``.

With k seeds every metric is the mean over seeds (``<metric>_std`` = sample std when k > 1).

Options: ``data`` (training-set folder or a parquet file; the sweep fills it from the run's ``train_set``),
``split`` (default ``validation``), ``protocols`` (default all three), ``batch_orders`` (``random`` | ``all``),
``tau`` (6.0), ``data_seed`` (0), ``chunk_size`` (256), ``prompt_style`` (default: the style the training set
was exported in), ``image_control`` and ``control_seed``:

``image_control=none``        every request carries its own record's image (default).
``image_control=mismatched``  every request carries the image of another record, a fixed seeded derangement
                              (``control_seed``, default 0) of the records: a judge that uses the image falls to
                              chance, one that reads only the text keeps its score. Run it beside ``none``.

Chance levels (``protocol["chance"]``): 0.5 for every pair accuracy and for the single verdict accuracy, 0.5 for
the batch ranking reward of distinct random scores, 0 for Kendall tau.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from pathlib import Path
from typing import Any

from perception_judge.core.protocol import build_messages
from perception_judge.core.schema import (
    DEFAULT_TAU,
    RESPONSE_KINDS,
    SLOTS,
    VERDICT_CORRECT,
    VERDICT_INCORRECT,
    JudgeRequest,
    JudgeResult,
    order_from_kinds,
)
from perception_judge.evaluation.base import (
    JudgeBackend,
    SuiteConfig,
    SuiteResult,
    is_backend_error,
    judge_chunks,
    write_samples,
)
from perception_judge.evaluation.benchmarks.metrics import rate
from perception_judge.evaluation.bias.metrics import mean_std
from perception_judge.rewards import ranking_reward, verdict_reward

PROTOCOL_NAMES = ("pair", "batch", "single")
DEFAULTS: dict[str, Any] = {
    "data": None,
    "split": "validation",
    "protocols": list(PROTOCOL_NAMES),
    "batch_orders": "random",
    "tau": DEFAULT_TAU,
    "data_seed": 0,
    "chunk_size": 256,
    "prompt_style": None,
    "image_control": "none",
    "control_seed": 0,
}
IMAGE_CONTROLS = ("none", "mismatched")
CHANCE = {
    "pair_acc": 0.5,
    "pair_acc_c_vs_rp": 0.5,
    "pair_acc_c_vs_rp_r": 0.5,
    "single_verdict_acc": 0.5,
    "batch_ranking_reward": 0.5,
    "batch_kendall_tau": 0.0,
}
COMPARISONS = (("r_c", "r_rp"), ("r_c", "r_rp_r"))


@dataclasses.dataclass
class Record:
    key: str
    question: str
    images: list[Any]
    responses: dict[str, str]


# --------------------------------------------------------------------------------------------------------------
# Pure metrics
# --------------------------------------------------------------------------------------------------------------


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall tau-b between two score lists: (C - D) / sqrt((P - Tx)(P - Ty)), with P the number of pairs and
    Tx, Ty the pairs tied in x, y (:func:`scipy.stats.kendalltau`, ``variant="b"``). 0.0 when either list is
    constant or shorter than two (no ordering information), and wherever scipy gives NaN."""
    if len(x) != len(y):
        raise ValueError("kendall_tau_b needs lists of equal length")
    if len(set(x)) < 2 or len(set(y)) < 2:
        return 0.0
    from scipy.stats import kendalltau  # lazy: scipy.stats costs most of a second to import

    tau = float(kendalltau(x, y, variant="b").statistic)
    return 0.0 if math.isnan(tau) else tau


def pair_verdict(scores: list[float] | None, correct_slot: int) -> str:
    """``"correct"`` (r_c scored strictly higher), ``"wrong"``, ``"tie"`` or ``"fail"`` (no scores)."""
    if scores is None:
        return "fail"
    a, b = scores[correct_slot], scores[1 - correct_slot]
    return "correct" if a > b else ("tie" if a == b else "wrong")


def pair_accuracy(correct: int, ties: int, fails: int, n: int) -> float | None:
    """Pair accuracy with ties as half credit: ``(correct + ties / 2) / n``.

    ``n`` counts every judgement that got an answer from the engine (``correct + ties + wrong + fails``); a parse
    failure earns 0. A judge that ignores the image scores 0.5 in expectation, whether it ties or guesses.
    None when ``n == 0``.
    """
    if n <= 0:
        return None
    if correct + ties + fails > n:
        raise ValueError(f"correct + ties + fails ({correct + ties + fails}) exceeds n ({n})")
    return (correct + 0.5 * ties) / n


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """Wilson score interval of a proportion ``successes / n`` (95% for the default z):

        centre = (p + z^2 / 2n) / (1 + z^2 / n),  half = z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n)

    ``successes`` may be fractional (ties as half credit). The two orders of one pair are counted as separate
    judgements, so the interval is somewhat narrower than one over independent pairs. None when ``n == 0``.
    """
    if n <= 0:
        return None
    p = min(1.0, max(0.0, successes / n))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def derangement(n: int, seed: int) -> list[int]:
    """A seeded permutation of ``range(n)`` with no fixed point (record i gets the image of record ``perm[i]``);
    the identity for n < 2 (nothing to swap with)."""
    if n < 2:
        return list(range(n))
    rng = random.Random(f"perception/image-control/{seed}/{n}")
    order = list(range(n))
    rng.shuffle(order)
    perm = [0] * n
    for i in range(n):  # a random cycle through all records: never a fixed point
        perm[order[i]] = order[(i + 1) % n]
    return perm


def apply_image_control(records: list[Record], control: str, seed: int) -> list[Record]:
    """The records with their images replaced according to ``control`` (see :data:`IMAGE_CONTROLS`)."""
    if control not in IMAGE_CONTROLS:
        raise ValueError(f"image_control must be one of {IMAGE_CONTROLS}, got {control!r}")
    if control == "none":
        return records
    with_image = [i for i, r in enumerate(records) if r.images]
    perm = derangement(len(with_image), seed)
    out = list(records)
    for j, i in enumerate(with_image):
        out[i] = dataclasses.replace(records[i], images=list(records[with_image[perm[j]]].images))
    return out


# --------------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------------


def load_records(path: str | Path, split: str = "validation", limit: int | None = None) -> list[Record]:
    """Merge the rows of a split into one :class:`Record` per ``record_key`` (order of first appearance)."""
    from perception_judge.core.trainset import features, load_training_set

    p = Path(path)
    if p.is_file() and p.suffix == ".parquet":
        from datasets import load_dataset

        ds = load_dataset("parquet", data_files=str(p), split="train").cast(features())
    elif p.is_dir():
        dd = load_training_set(p, [split])
        if split not in dd:
            raise FileNotFoundError(f"no {split}.parquet in {str(p)!r}")
        ds = dd[split]
    else:
        raise FileNotFoundError(
            f"perception data {str(p)!r} not found (a training-set folder or a .parquet file)"
        )
    missing = [
        c for c in ("question", "responses", "kinds", "images", "record_key") if c not in ds.column_names
    ]
    if missing:
        raise ValueError(f"{str(p)!r} lacks the columns {missing}")
    records: dict[str, Record] = {}
    for row in ds:
        key = row["record_key"]
        rec = records.get(key)
        if rec is None:
            if limit is not None and len(records) >= limit:
                continue
            rec = records[key] = Record(key, row["question"], list(row["images"] or []), {})
        for kind, text in zip(row["kinds"], row["responses"]):
            if kind in RESPONSE_KINDS:
                rec.responses.setdefault(kind, text)
    return list(records.values())


# --------------------------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------------------------


def build_requests(
    records: list[Record], protocols: list[str], batch_orders: str, data_seed: int, style: str = "full"
) -> list[JudgeRequest]:
    """Every request of the suite; ``meta`` carries what scoring needs (protocol, kinds in slot order)."""
    reqs: list[JudgeRequest] = []
    for rec in records:
        n_img = len(rec.images)

        def add(protocol: str, kinds: list[str], tag: str, rec: Record = rec, n_img: int = n_img) -> None:
            responses = [rec.responses[k] for k in kinds]
            reqs.append(
                JudgeRequest(
                    request_id=f"perception-{protocol}-{rec.key}-{tag}",
                    messages=build_messages(protocol, rec.question, responses, n_img, style=style),
                    images=list(rec.images),
                    n_scores=1 if protocol == "single" else len(kinds),
                    parser="protocol",
                    meta={"suite": "perception", "protocol": protocol, "record": rec.key, "kinds": kinds},
                )
            )

        if "pair" in protocols:
            for good, bad in COMPARISONS:
                if good in rec.responses and bad in rec.responses:
                    add("pair", [good, bad], f"{bad}-first_c")
                    add("pair", [bad, good], f"{bad}-second_c")
        if "batch" in protocols and all(k in rec.responses for k in RESPONSE_KINDS):
            perms = list(itertools.permutations(RESPONSE_KINDS))
            if batch_orders == "all":
                chosen = perms
            elif batch_orders == "random":
                chosen = [random.Random(f"perception:{data_seed}:{rec.key}").choice(perms)]
            else:
                raise ValueError(f"batch_orders must be 'random' or 'all', got {batch_orders!r}")
            for perm in chosen:
                add("batch", list(perm), "".join(SLOTS[RESPONSE_KINDS.index(k)] for k in perm))
        if "single" in protocols:
            for kind in RESPONSE_KINDS:
                if kind in rec.responses:
                    add("single", [kind], kind)
    return reqs


def score_seed(
    requests: list[JudgeRequest], results: list[JudgeResult], tau: float
) -> tuple[dict[str, float | None], dict[str, int], list[dict]]:
    """Metrics, counts and per-sample lines of one seed."""
    c: dict[str, int] = {"errors": 0}
    for prefix in ("pair", "pair_rp", "pair_rp_r"):
        for what in ("n", "correct", "tie", "fail"):
            c[f"{prefix}_{what}"] = 0
    c.update(
        dict.fromkeys(
            (
                "pair_groups",
                "pair_consistent",
                "batch_n",
                "batch_fail",
                "single_n",
                "single_fail",
                "single_correct",
                "single_n_c",
                "single_correct_c",
                "single_n_bad",
                "single_correct_bad",
            ),
            0,
        )
    )
    batch_rewards: list[float] = []
    taus: list[float] = []
    groups: dict[tuple[str, str], list[str]] = {}
    lines = []
    for req, res in zip(requests, results):
        m = req.meta
        kinds = m["kinds"]
        line = {
            "request_id": req.request_id,
            "protocol": m["protocol"],
            "record": m["record"],
            "kinds": kinds,
            "scores": res.scores,
            "error": res.error,
            "text": res.text,
        }
        if is_backend_error(res):  # the engine gave no answer: not a judgement at all
            c["errors"] += 1
            line["verdict"] = "error"
            lines.append(line)
            continue
        if m["protocol"] == "pair":
            other = kinds[1] if kinds[0] == "r_c" else kinds[0]
            verdict = pair_verdict(res.scores, kinds.index("r_c"))
            for prefix in ("pair", f"pair_{other[2:]}"):
                c[f"{prefix}_n"] += 1
                c[f"{prefix}_correct"] += verdict == "correct"
                c[f"{prefix}_tie"] += verdict == "tie"
                c[f"{prefix}_fail"] += verdict == "fail"
            groups.setdefault((m["record"], other), []).append(verdict)
            line["verdict"] = verdict
        elif m["protocol"] == "batch":
            order = order_from_kinds(kinds)
            reward = ranking_reward(res.scores, order, ties="zero")
            batch_rewards.append(reward)
            c["batch_n"] += 1
            if res.scores is None:
                c["batch_fail"] += 1
            else:
                gt = [float(len(RESPONSE_KINDS) - RESPONSE_KINDS.index(k)) for k in kinds]
                t = kendall_tau_b(list(res.scores), gt)
                taus.append(t)
                line["kendall_tau"] = t
            line["reward"] = reward
            line["order"] = order
        else:
            kind = kinds[0]
            verdict = VERDICT_CORRECT if kind == "r_c" else VERDICT_INCORRECT
            r = verdict_reward(res.scores[0] if res.scores else None, verdict, tau)
            c["single_n"] += 1
            c["single_fail"] += res.scores is None
            c["single_correct"] += int(r)
            if kind == "r_c":
                c["single_n_c"] += 1
                c["single_correct_c"] += int(r)
            else:
                c["single_n_bad"] += 1
                c["single_correct_bad"] += int(r)
            line["verdict_reward"] = r
        lines.append(line)
    for verdicts in groups.values():
        if len(verdicts) == 2:
            c["pair_groups"] += 1
            c["pair_consistent"] += verdicts[0] == verdicts[1] and verdicts[0] != "fail"
    metrics: dict[str, float | None] = {}
    for name, prefix in (
        ("pair_acc_c_vs_rp", "pair_rp"),
        ("pair_acc_c_vs_rp_r", "pair_rp_r"),
        ("pair_acc", "pair"),
    ):
        n, correct, ties, fails = (c[f"{prefix}_{w}"] for w in ("n", "correct", "tie", "fail"))
        metrics[name] = pair_accuracy(correct, ties, fails, n)
        ci = wilson_interval(correct + 0.5 * ties, n)
        metrics[f"{name}_ci95_lo"], metrics[f"{name}_ci95_hi"] = ci if ci else (None, None)
        metrics[f"{name}_n"] = n
        metrics[f"{name}_ties"] = rate(ties, n)
        metrics[f"{name}_parse_failures"] = rate(fails, n)
    metrics.update(
        {
            "pair_consistency": rate(c["pair_consistent"], c["pair_groups"]),
            "pair_parse_fail_rate": rate(c["pair_fail"], c["pair_n"]),
            "batch_ranking_reward": sum(batch_rewards) / len(batch_rewards) if batch_rewards else None,
            "batch_kendall_tau": sum(taus) / len(taus) if taus else None,
            "batch_parse_fail_rate": rate(c["batch_fail"], c["batch_n"]),
            "single_verdict_acc": rate(c["single_correct"], c["single_n"]),
            "single_acc_r_c": rate(c["single_correct_c"], c["single_n_c"]),
            "single_acc_perturbed": rate(c["single_correct_bad"], c["single_n_bad"]),
            "single_parse_fail_rate": rate(c["single_fail"], c["single_n"]),
            "error_rate": rate(c["errors"], len(requests)),
        }
    )
    return metrics, c, lines


def _style_of(data: str | Path) -> str:
    from perception_judge.core.trainset import prompt_style_of

    p = Path(data)
    return prompt_style_of(p if p.is_dir() else p.parent)


def run(backend: JudgeBackend, config: SuiteConfig, suite_name: str = "perception") -> SuiteResult:
    """Run the perceptual-sensitivity suite (see the module docstring)."""
    unknown = set(config.options) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown perception-suite option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    opts = {**DEFAULTS, **config.options}
    if not opts["data"]:
        raise ValueError(
            "the perception suite needs the option data=PATH (an exported training set with validation.parquet); "
            "a sweep takes it from the run's train_set"
        )
    protocols = [p for p in opts["protocols"] if p]
    bad = set(protocols) - set(PROTOCOL_NAMES)
    if bad:
        raise ValueError(f"unknown perception protocol(s) {sorted(bad)}; known: {PROTOCOL_NAMES}")
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    style = opts["prompt_style"] or _style_of(opts["data"])
    control = str(opts["image_control"])
    records = load_records(opts["data"], opts["split"], config.limit)
    records = apply_image_control(records, control, int(opts["control_seed"]))
    requests = build_requests(records, protocols, opts["batch_orders"], int(opts["data_seed"]), style)
    per_seed: dict[str, Any] = {}
    all_lines: list[dict] = []
    totals: dict[str, int] = {}
    for seed in config.seeds:
        sampling = dataclasses.replace(config.sampling, seed=int(seed))
        results: list[JudgeResult] = []
        chunk = max(1, int(opts["chunk_size"]))
        for _, out in judge_chunks(backend, requests, sampling, chunk, f"perception seed {seed}"):
            results += out
        metrics, counts, lines = score_seed(requests, results, float(opts["tau"]))
        per_seed[str(seed)] = {"metrics": metrics, "counts": counts}
        for line in lines:
            line["seed"] = seed
        all_lines += lines
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
    names = list(next(iter(per_seed.values()))["metrics"]) if per_seed else []
    metrics: dict[str, float | None] = {}
    stds: dict[str, float | None] = {}
    for name in names:
        m, s = mean_std([per_seed[k]["metrics"][name] for k in per_seed])
        metrics[name] = m
        stds[f"{name}_std"] = s
    if len(per_seed) > 1:
        metrics.update(stds)
    samples_path = out_dir / "samples.jsonl"
    write_samples(samples_path, all_lines)
    counts = {
        "n_records": len(records),
        "n_requests": len(requests) * len(per_seed),
        "n_runs": len(per_seed),
        "n_pair_judgements": totals.get("pair_n", 0),
        "n_batch_judgements": totals.get("batch_n", 0),
        "n_single_judgements": totals.get("single_n", 0),
        "n_parse_failures": totals.get("pair_fail", 0)
        + totals.get("batch_fail", 0)
        + totals.get("single_fail", 0),
        "n_backend_errors": totals.get("errors", 0),
    }
    protocol = {
        "suite": "perception",
        "data": str(opts["data"]),
        "split": opts["split"],
        "protocols": protocols,
        "batch_orders": opts["batch_orders"],
        "tau": float(opts["tau"]),
        "seeds": list(config.seeds),
        "sampling": dataclasses.asdict(config.sampling),
        "backend": backend.describe(),
        "parser": "protocol (perception_judge.core.protocol.parse_scores: final answer only, exactly N tags, 1-10)",
        "prompt_style": style,
        "image_control": control,
        "control_seed": int(opts["control_seed"]),
        "control": control != "none",  # a control suite: reported, never used to pick the best checkpoint
        "chance": dict(CHANCE),
        "pair_rule": "1 when r_c scores strictly higher, 1/2 for a tie, 0 for lower or a parse failure; both "
        "orders; backend errors leave the denominator; 95% Wilson interval",
        "batch_rule": "ranking_reward(ties='zero'), failures 0; Kendall tau-b over parsed completions",
        "aggregation": "per seed, then mean over seeds (sample std when k > 1)",
        "primary_metric": "pair_acc",
        "higher_is_better": True,
        "lower_is_better": [
            n for n in names if n.endswith(("parse_fail_rate", "_ties", "_parse_failures", "error_rate"))
        ],
    }
    extra = {"per_seed": per_seed}
    return SuiteResult(suite_name, metrics, protocol, counts, str(samples_path), extra)


def run_mismatched(backend: JudgeBackend, config: SuiteConfig) -> SuiteResult:
    """The ``perception_mismatched`` suite: :func:`run` with ``image_control=mismatched`` (the control a sweep runs
    beside ``perception``, so the report shows both)."""
    options = {"image_control": "mismatched", **config.options}
    return run(backend, dataclasses.replace(config, options=options), suite_name="perception_mismatched")


__all__ = [
    "CHANCE",
    "DEFAULTS",
    "IMAGE_CONTROLS",
    "Record",
    "apply_image_control",
    "build_requests",
    "derangement",
    "kendall_tau_b",
    "load_records",
    "pair_accuracy",
    "pair_verdict",
    "run",
    "run_mismatched",
    "score_seed",
    "wilson_interval",
]
