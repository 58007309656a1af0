"""The perceptual-sensitivity suite on held-out PPJD: does the judge prefer the correct response r_c over its
perceptual counterfactuals r_rp and r_rp_r? Protocols ``pair`` (both orders), ``batch`` and ``single`` with the
trained judge's own prompts; ``image_control=mismatched`` is the ``perception_mismatched`` control (another record's
image: a judge that uses the image falls to chance). Metrics and rules: docs/evaluation.md §3.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from perception_judge.core.options import CommaList, Options
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
from perception_judge.evaluation import base
from perception_judge.evaluation.stats import mean_std, rate, wilson_interval
from perception_judge.rewards import ranking_reward, verdict_reward

PROTOCOL_NAMES = ("pair", "batch", "single")
COMPARISONS = (("r_c", "r_rp"), ("r_c", "r_rp_r"))
PAIR_METRICS = {"pair_acc_c_vs_rp": "pair_rp", "pair_acc_c_vs_rp_r": "pair_rp_r", "pair_acc": "pair"}
"""The pair accuracies and the prefix of their counts."""
_COLUMNS = ("question", "responses", "kinds", "images", "record_key")


def _known_protocols(values: list[str]) -> list[str]:
    if bad := sorted(set(values) - set(PROTOCOL_NAMES)):
        raise ValueError(f"unknown perception protocol(s) {bad}; known: {', '.join(PROTOCOL_NAMES)}")
    return values


def _needs_data(data: str | None) -> str:
    if not data:
        raise ValueError(
            "the perception suite needs the option data=PATH (an exported training set with validation.parquet); "
            "a sweep takes it from the run's train_set"
        )
    return data


class PerceptionOptions(Options):
    """``data``: a training-set folder or a parquet file (a sweep fills it from the run's ``train_set``);
    ``prompt_style``: default, the style the training set was exported in."""

    model_config = ConfigDict(validate_default=True)
    data: Annotated[str | None, AfterValidator(_needs_data)] = None
    split: str = "validation"
    protocols: Annotated[CommaList, AfterValidator(_known_protocols)] = PROTOCOL_NAMES
    batch_orders: Literal["random", "all"] = "random"
    tau: float = DEFAULT_TAU
    data_seed: int = 0
    chunk_size: int = Field(256, ge=1)
    prompt_style: str | None = None
    image_control: Literal["none", "mismatched"] = "none"
    control_seed: int = 0


class MismatchedOptions(PerceptionOptions):
    """The control's options: every image replaced by another record's unless ``image_control`` says otherwise."""

    image_control: Literal["none", "mismatched"] = "mismatched"


METRICS: dict[str, base.Metric] = {
    **{name: base.Metric(chance=0.5) for name in PAIR_METRICS},
    **{f"{name}_{end}": base.INFO for name in PAIR_METRICS for end in ("ci95_lo", "ci95_hi")},
    **{f"{name}_n": base.COUNT for name in PAIR_METRICS},
    **{f"{name}_{part}": base.LOWER for name in PAIR_METRICS for part in ("ties", "parse_failures")},
    **dict.fromkeys(("pair_consistency", "single_acc_r_c", "single_acc_perturbed"), base.Metric()),
    "single_verdict_acc": base.Metric(chance=0.5),
    "batch_ranking_reward": base.Metric(chance=0.5),  # distinct random scores
    "batch_kendall_tau": base.Metric(chance=0.0),
    **{f"{p}_parse_fail_rate": base.LOWER for p in PROTOCOL_NAMES},
    "error_rate": base.LOWER,
}
PRIMARY = ("pair_acc", "pair_acc_c_vs_rp", "pair_acc_c_vs_rp_r", "pair_acc_n", "pair_consistency",
           "batch_ranking_reward", "batch_kendall_tau", "single_verdict_acc")  # fmt: skip


@dataclasses.dataclass
class Record:
    key: str
    question: str
    images: list[Any]
    responses: dict[str, str]


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
    """Pair accuracy with ties as half credit: ``(correct + ties / 2) / n``, ``n`` every judgement that got an answer
    from the engine (``correct + ties + wrong + fails``; a parse failure earns 0); None when ``n == 0``. A judge
    that ignores the image scores 0.5 in expectation, whether it ties or guesses."""
    if n <= 0:
        return None
    if correct + ties + fails > n:
        raise ValueError(f"correct + ties + fails ({correct + ties + fails}) exceeds n ({n})")
    return (correct + 0.5 * ties) / n


def derangement(n: int, seed: int) -> list[int]:
    """A seeded permutation of ``range(n)`` with no fixed point (record i gets the image of record ``perm[i]``);
    the identity for n < 2 (nothing to swap with)."""
    if n < 2:
        return list(range(n))
    order = list(range(n))
    random.Random(f"perception/image-control/{seed}/{n}").shuffle(order)
    successor = dict(zip(order, order[1:] + order[:1]))  # a random cycle through all records: no fixed point
    return [successor[i] for i in range(n)]


def apply_image_control(records: list[Record], control: str, seed: int) -> list[Record]:
    """The records with their images replaced according to ``control`` (``none``, ``mismatched``)."""
    if control == "none":
        return records
    with_image = [i for i, r in enumerate(records) if r.images]
    perm = derangement(len(with_image), seed)
    out = list(records)
    for j, i in enumerate(with_image):
        out[i] = dataclasses.replace(records[i], images=list(records[with_image[perm[j]]].images))
    return out


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
    if missing := [c for c in _COLUMNS if c not in ds.column_names]:
        raise ValueError(f"{str(p)!r} lacks the columns {missing}")
    records: dict[str, Record] = {}
    for row in ds:
        key = row["record_key"]
        if key not in records:
            if limit is not None and len(records) >= limit:
                continue
            records[key] = Record(key, row["question"], list(row["images"] or []), {})
        for kind, text in zip(row["kinds"], row["responses"]):
            if kind in RESPONSE_KINDS:
                records[key].responses.setdefault(kind, text)
    return list(records.values())


def build_requests(
    records: list[Record], protocols: list[str], batch_orders: str, data_seed: int, style: str = "full"
) -> list[JudgeRequest]:
    """Every request of the suite; ``meta`` carries what scoring needs (protocol, kinds in slot order)."""
    reqs: list[JudgeRequest] = []
    perms = list(itertools.permutations(RESPONSE_KINDS))
    for rec in records:

        def add(protocol: str, kinds: list[str], tag: str, rec: Record = rec) -> None:
            responses = [rec.responses[k] for k in kinds]
            meta = {"suite": "perception", "protocol": protocol, "record": rec.key, "kinds": kinds}
            reqs.append(
                JudgeRequest(
                    request_id=f"perception-{protocol}-{rec.key}-{tag}",
                    messages=build_messages(protocol, rec.question, responses, len(rec.images), style=style),
                    images=list(rec.images),
                    n_scores=1 if protocol == "single" else len(kinds),
                    parser="protocol",
                    meta=meta,
                )
            )

        if "pair" in protocols:
            for good, bad in COMPARISONS:
                if good in rec.responses and bad in rec.responses:
                    add("pair", [good, bad], f"{bad}-first_c")
                    add("pair", [bad, good], f"{bad}-second_c")
        if "batch" in protocols and all(k in rec.responses for k in RESPONSE_KINDS):
            rng = random.Random(f"perception:{data_seed}:{rec.key}")
            for perm in perms if batch_orders == "all" else [rng.choice(perms)]:
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
    keys = ["errors", *(f"{p}_{w}" for p in PAIR_METRICS.values() for w in ("n", "correct", "tie", "fail"))]
    keys += ["pair_groups", "pair_consistent", "batch_n", "batch_fail", "single_n", "single_fail"]
    keys += ["single_correct", "single_n_c", "single_correct_c", "single_n_bad", "single_correct_bad"]
    c = dict.fromkeys(keys, 0)
    batch_rewards: list[float] = []
    taus: list[float] = []
    groups: dict[tuple[str, str], list[str]] = {}
    lines = []
    for req, res in zip(requests, results):
        m, kinds = req.meta, req.meta["kinds"]
        line = {"request_id": req.request_id, **{k: m[k] for k in ("protocol", "record", "kinds")}}
        line |= {"scores": res.scores, "error": res.error, "text": res.text}
        lines.append(line)
        if base.is_backend_error(res):  # the engine gave no answer: not a judgement at all
            c["errors"] += 1
            line["verdict"] = "error"
        elif m["protocol"] == "pair":
            other = kinds[1] if kinds[0] == "r_c" else kinds[0]
            verdict = line["verdict"] = pair_verdict(res.scores, kinds.index("r_c"))
            for prefix in ("pair", f"pair_{other[2:]}"):
                c[f"{prefix}_n"] += 1
                for what in ("correct", "tie", "fail"):
                    c[f"{prefix}_{what}"] += verdict == what
            groups.setdefault((m["record"], other), []).append(verdict)
        elif m["protocol"] == "batch":
            line["order"] = order = order_from_kinds(kinds)
            line["reward"] = reward = ranking_reward(res.scores, order, ties="zero")
            batch_rewards.append(reward)
            c["batch_n"] += 1
            c["batch_fail"] += res.scores is None
            if res.scores is not None:
                gt = [float(len(RESPONSE_KINDS) - RESPONSE_KINDS.index(k)) for k in kinds]
                line["kendall_tau"] = t = kendall_tau_b(list(res.scores), gt)
                taus.append(t)
        else:
            own = "c" if kinds[0] == "r_c" else "bad"
            verdict = VERDICT_CORRECT if own == "c" else VERDICT_INCORRECT
            line["verdict_reward"] = r = verdict_reward(res.scores[0] if res.scores else None, verdict, tau)
            for suffix in ("", f"_{own}"):
                c[f"single_n{suffix}"] += 1
                c[f"single_correct{suffix}"] += int(r)
            c["single_fail"] += res.scores is None
    for verdicts in groups.values():
        if len(verdicts) == 2:
            c["pair_groups"] += 1
            c["pair_consistent"] += verdicts[0] == verdicts[1] and verdicts[0] != "fail"
    metrics: dict[str, float | None] = {}
    for name, prefix in PAIR_METRICS.items():
        n, correct, ties, fails = (c[f"{prefix}_{w}"] for w in ("n", "correct", "tie", "fail"))
        lo, hi = wilson_interval(correct + 0.5 * ties, n) or (None, None)
        metrics[name] = pair_accuracy(correct, ties, fails, n)
        metrics |= {f"{name}_ci95_lo": lo, f"{name}_ci95_hi": hi, f"{name}_n": n}
        metrics |= {f"{name}_ties": rate(ties, n), f"{name}_parse_failures": rate(fails, n)}
    metrics |= {
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
    return metrics, c, lines


def run(backend: base.JudgeBackend, config: base.SuiteConfig) -> base.SuiteResult:
    """Run the perceptual-sensitivity suite (see the module docstring)."""
    opts: PerceptionOptions = config.options
    from perception_judge.core.trainset import prompt_style_of

    data = Path(opts.data)
    style = opts.prompt_style or prompt_style_of(data if data.is_dir() else data.parent)
    records = load_records(data, opts.split, config.limit)
    records = apply_image_control(records, opts.image_control, opts.control_seed)
    requests = build_requests(records, opts.protocols, opts.batch_orders, opts.data_seed, style)
    seeds = list(dict.fromkeys(int(s) for s in config.seeds))
    judged = base.judge_items(
        backend, requests, lambda r: [r], seeds=seeds, sampling=config.sampling, chunk_size=opts.chunk_size,
        desc="perception",
    )  # fmt: skip
    per_seed: dict[str, Any] = {}
    all_lines: list[dict] = []
    totals: Counter[str] = Counter()
    for seed in seeds:
        metrics, counts, lines = score_seed(requests, [j.result for j in judged if j.seed == seed], opts.tau)
        per_seed[str(seed)] = {"metrics": metrics, "counts": counts}
        all_lines += [{**line, "seed": seed} for line in lines]
        totals.update(counts)
    runs = [run["metrics"] for run in per_seed.values()]
    spread = {name: mean_std([r[name] for r in runs]) for name in (runs[0] if runs else {})}
    metrics = {name: m for name, (m, _) in spread.items()}
    if len(runs) > 1:
        metrics |= {f"{name}_std": s for name, (_, s) in spread.items()}
    samples = Path(config.out_dir) / "samples.jsonl"
    base.write_samples(samples, all_lines)
    counts = {
        "n_records": len(records),
        "n_requests": len(requests) * len(per_seed),
        "n_runs": len(per_seed),
        **{f"n_{p}_judgements": totals[f"{p}_n"] for p in PROTOCOL_NAMES},
        "n_parse_failures": sum(totals[f"{p}_fail"] for p in PROTOCOL_NAMES),
        "n_backend_errors": totals["errors"],
    }
    protocol = {
        "suite": "perception",
        "data": str(opts.data),
        **opts.model_dump(
            include={"split", "protocols", "batch_orders", "tau", "image_control", "control_seed"}
        ),
        "parser": "protocol (perception_judge.core.protocol.parse_scores: final answer only, exactly N tags, 1-10)",
        "prompt_style": style,
        "control": opts.image_control != "none",  # a control suite: reported, never ranked
        "pair_rule": "1 when r_c scores strictly higher, 1/2 for a tie, 0 for lower or a parse failure; both "
        "orders; backend errors leave the denominator; 95% Wilson interval",
        "batch_rule": "ranking_reward(ties='zero'), failures 0; Kendall tau-b over parsed completions",
        "aggregation": "per seed, then mean over seeds (sample std when k > 1)",
    }
    return base.SuiteResult("perception", metrics, protocol, counts, str(samples), {"per_seed": per_seed})


BARS = base.Bars(
    "perception_protocols.png", "Perceptual sensitivity per protocol (held-out PPJD)",
    {"pair_acc_c_vs_rp": "pair: r_c > r_rp", "pair_acc_c_vs_rp_r": "pair: r_c > r_rp+r",
     "pair_consistency": "pair: order consistency", "batch_ranking_reward": "batch: ranking reward",
     "batch_kendall_tau": "batch: Kendall τ", "single_verdict_acc": "single: verdict acc."},
    control="perception_mismatched",
)  # fmt: skip
SUITE = base.Suite("perception", PerceptionOptions, METRICS, PRIMARY, run, bars=BARS, from_run="data")
MISMATCHED = base.Suite("perception_mismatched", MismatchedOptions, METRICS, PRIMARY, run, from_run="data")
"""The control a sweep runs beside ``perception`` (``image_control=mismatched``), so the report shows both."""
