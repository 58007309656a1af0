"""The benchmark suites through the evaluation sweep (one cell per model × suite × seed) with a scripted judge
loaded by name, from files written by the test."""

from __future__ import annotations

import pytest
from benchmark_fixtures import write_jsonl, write_mjbench_disk, write_mllm_judge, write_vlrb_disk

from perception_judge.evaluation import sweep


def test_suites_run_through_the_sweep(tmp_path):
    bench = write_mllm_judge(tmp_path / "mllm")
    vlrb = write_vlrb_disk(tmp_path / "vlrb")
    mj = write_mjbench_disk(tmp_path / "mj")
    pairs = write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {
                "id": "p1",
                "question": "Which?",
                "responses": ["Q=8 a", "Q=3 b"],
                "preferred": 0,
                "names": ["me", "x"],
            }
        ],
    )
    from perception_judge.evaluation.plan import resolve

    job = dict(
        suites=["mllm_judge", "vlrewardbench", "mjbench", "position", "verbosity", "self_enhancement"],
        seeds=[0, 1],
        options={
            "mllm_judge": {"data_dir": str(bench)},
            "vlrewardbench": {"data_dir": str(vlrb)},
            "mjbench": {"data_dir": str(mj), "splits": "alignment"},
            "position": {"pairs_file": str(pairs)},
            "verbosity": {"pairs_file": str(pairs)},
            "self_enhancement": {"pairs_file": str(pairs), "own_model": "me"},
        },
        backend={"kind": "scripted"},
    )
    plan = resolve([job], tmp_path / "out")
    entry = sweep.ModelEntry(name="oracle", spec={"fn": "benchmark_fixtures:oracle"})
    outcome, data = sweep.evaluate([entry], plan, report=False, progress=False)
    failed = [(c["cell"], c.get("error")) for c in outcome.cells if c["status"] != "done"]
    assert not failed and outcome.done == 12
    rows = {(r["suite"], r["metric"]): r for r in data["rows"]}
    # seed 1 flips one MLLM-as-a-Judge pair: mean over the two seed cells = the Perception-Judge protocol
    row = rows[("mllm_judge", "mean.pair.acc_with_tie.micro")]
    assert row["mean"] == pytest.approx((3 / 6 + 4 / 6) / 2) and row["n_seeds"] == 2
    assert rows[("vlrewardbench", "mean.acc")]["mean"] == pytest.approx(7 / 12)
    assert rows[("mjbench", "mean.alignment.acc_with_tie")]["mean"] == pytest.approx(2 / 4)
    assert rows[("position", "mean.consistency_rate")]["mean"] == pytest.approx(1.0)
    assert rows[("verbosity", "mean.self.tie_rate")]["mean"] == pytest.approx(1.0)
    assert rows[("self_enhancement", "mean.pair.own_win_rate_judge")]["mean"] == pytest.approx(1.0)
    from perception_judge.evaluation.suites import SUITES

    assert [k for k in rows if SUITES[k[0]].metric(k[1]) is None] == []  # every suite declares its metrics


def test_suites_with_a_real_tiny_judge(tiny_qwen25, tmp_path):
    """A random-weight tiny Qwen2.5-VL through the HF backend: the prompts render, one and two images reach
    the model, and an unparsable judge gives parse_failure_rate 1.0 and None (not 0.0) where no data exists."""
    from benchmark_fixtures import write_mjbench_disk, write_mllm_judge

    from perception_judge.core.schema import Sampling
    from perception_judge.evaluation.backends import load_backend
    from perception_judge.evaluation.base import SuiteConfig
    from perception_judge.evaluation.suites import get_suite

    judge = load_backend(
        {"kind": "hf", "model": str(tiny_qwen25), "pixel_policy": {"mode": "fixed", "size": 56}}
    )
    try:
        sampling = Sampling(max_new_tokens=4)
        bench = write_mllm_judge(tmp_path / "mllm")
        cfg = SuiteConfig(
            tmp_path / "o1", [0], sampling, 2, {"data_dir": str(bench), "settings": "pair,score"}
        )
        res = get_suite("mllm_judge")(judge, cfg)
        assert res.counts["pair.judgments"] == 2 and res.metrics["pair.parse_failure_rate"] == 1.0
        assert res.metrics["mean.score.pearson.micro"] is None
        mj = write_mjbench_disk(tmp_path / "mj")
        cfg = SuiteConfig(tmp_path / "o2", [0], sampling, 1, {"data_dir": str(mj), "splits": "alignment"})
        res = get_suite("mjbench")(judge, cfg)
        assert res.counts["alignment.judgments"] == 2 and res.metrics["alignment.parse_failure_rate"] == 1.0
        assert res.metrics["mean.alignment.acc_without_tie"] is None
    finally:
        judge.close()


def test_cli_eval_run_with_in_suite_seeds_and_report(tmp_path):
    import json

    from perception_judge import cli

    bench = write_mllm_judge(tmp_path / "mllm")
    vlrb = write_vlrb_disk(tmp_path / "vlrb")
    out = tmp_path / "eval"
    code = cli.main(
        [
            "eval", "run", "--backend", "scripted", "--model", "oracle=benchmark_fixtures:oracle",
            "--suites", "mllm_judge,vlrewardbench", "--seeds", "0", "-q",
            "--set", f"mllm_judge.data_dir={bench}", "--set", "mllm_judge.seeds=[0,1]",
            "--set", "mllm_judge.aggregation=all", "--set", f"vlrewardbench.data_dir={vlrb}",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    rows = {
        (r["suite"], r["metric"]): r["mean"] for r in json.loads((out / "results.json").read_text())["rows"]
    }
    # both seeds judged inside the one cell: mean, vote and flex all available
    assert rows[("mllm_judge", "mean.pair.acc_with_tie.micro")] == pytest.approx((3 / 6 + 4 / 6) / 2)
    assert rows[("mllm_judge", "vote.pair.acc_with_tie.micro")] == pytest.approx(3 / 6)
    assert rows[("mllm_judge", "flex.pair.acc_with_tie.macro")] == round(
        (1 + round(1 / 3, 3)) / 2, 3
    )  # the script's "Ave"
    assert rows[("vlrewardbench", "mean.acc")] == pytest.approx(7 / 12)
    from perception_judge.evaluation.suites import SUITES

    assert [k for k in rows if SUITES[k[0]].metric(k[1]) is None] == []  # vote and flex metrics too
    report = (out / "report.md").read_text()
    assert "mllm_judge" in report and "vlrewardbench" in report
