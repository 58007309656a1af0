"""Rewards: ranking_reward against every permutation and tie pattern for N = 2..5; the trl callables."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from perception_judge.core.schema import SLOTS, ground_truth_for, order_from_kinds
from perception_judge.rewards import (
    REWARDS,
    JudgeReward,
    completion_text,
    format_reward,
    get_reward,
    pair_reward,
    ranking_reward,
    verdict_reward,
)


def _kendall_fraction(scores, order, half_ties):
    """Independent reference: rank slots by score, count discordant pairs by brute force."""
    n = len(order)
    pos = {slot: i for i, slot in enumerate(order)}  # ground-truth rank per slot
    good = Fraction(0)
    total = 0
    for a, b in itertools.combinations(range(n), 2):
        total += 1
        sa, sb = scores[a], scores[b]
        truth = pos[SLOTS[a]] < pos[SLOTS[b]]  # True: slot a should score higher
        if sa == sb:
            if not half_ties:
                return Fraction(0)
            good += Fraction(1, 2)
        elif (sa > sb) == truth:
            good += 1
    return good / total


def test_published_table_n3():
    # GT "ABC" against every predicted order; a predicted order is realised by scores 9 > 5 > 1.
    expected = {"ABC": 1, "ACB": 2 / 3, "BAC": 2 / 3, "BCA": 1 / 3, "CAB": 1 / 3, "CBA": 0}
    for pred, value in expected.items():
        scores = [0, 0, 0]
        for s, slot in zip((9, 5, 1), pred):
            scores[SLOTS.index(slot)] = s
        assert ranking_reward(scores, "ABC") == pytest.approx(value)
    assert ranking_reward([5, 5, 1], "ABC") == 0.0  # a tie
    assert ranking_reward(None, "ABC") == 0.0  # a parse failure


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_every_permutation_and_tie_pattern(n):
    slots = SLOTS[:n]
    values = range(1, n + 1)
    # every score vector over n values covers every strict ranking and every tie pattern
    for scores in itertools.product(values, repeat=n):
        for order in ("".join(p) for p in itertools.permutations(slots)):
            for half in (False, True):
                want = _kendall_fraction(scores, order, half)
                got = ranking_reward(list(scores), order, ties="half" if half else "zero")
                assert got == pytest.approx(float(want)), (scores, order, half)


def test_ranking_reward_input_checks():
    with pytest.raises(ValueError):
        ranking_reward([1, 2, 3], "ABD")
    with pytest.raises(ValueError, match=r"^3 scores for an order string of 2 slots \('AB'\)$"):
        ranking_reward([1, 2, 3], "AB")
    with pytest.raises(ValueError, match=r"^ties must be one of \('zero', 'half'\), got 'ignore'$"):
        ranking_reward([1, 2], "AB", ties="ignore")
    with pytest.raises(ValueError, match="names 3 slots, expected 2"):
        pair_reward([8, 3, 1], "ABC")  # a pair is two responses, whatever the scores


def test_pair_and_verdict():
    assert pair_reward([8, 3], "AB") == 1.0 and pair_reward([8, 3], "BA") == 0.0
    assert pair_reward([5, 5], "AB") == 0.0 and pair_reward([5, 5], "AB", ties="half") == 0.5
    assert pair_reward(None, "BA") == 0.0
    assert verdict_reward(6, "correct", tau=6) == 1.0 and verdict_reward(5, "correct", tau=6) == 0.0
    assert verdict_reward(5, "incorrect", tau=6) == 1.0 and verdict_reward(6, "incorrect", tau=6) == 0.0
    assert verdict_reward(None, "correct") == 0.0
    with pytest.raises(ValueError, match=r"^verdict must be one of \('correct', 'incorrect'\), got 'maybe'$"):
        verdict_reward(5, "maybe")


def test_order_from_kinds():
    assert order_from_kinds(["r_rp_r", "r_c", "r_rp"]) == "BCA"
    assert order_from_kinds(["r_c", "r_rp"]) == "AB"


def test_ground_truth_for_each_protocol():
    assert ground_truth_for("batch", ["r_rp_r", "r_c", "r_rp"]) == "BCA"
    assert ground_truth_for("pair", ["r_rp", "r_c"]) == "BA"
    assert ground_truth_for("pair", ["r_rp", "r_rp_r"]) == "AB"
    assert ground_truth_for("single", ["r_c"]) == "correct"
    assert ground_truth_for("single", ["r_rp_r"]) == "incorrect"
    with pytest.raises(ValueError):
        ground_truth_for("single", ["r_c", "r_rp"])


# ---- trl callables --------------------------------------------------------------------------------------------


def _conv(text, **extra):
    return [{"role": "assistant", "content": text, **extra}]


def _trl_kwargs(n):
    """The keyword arguments trl 1.16 passes besides the dataset columns."""
    logged = {}
    return logged, {
        "completion_ids": [[1, 2, 3]] * n,
        "trainer_state": object(),
        "log_extra": lambda column, values: logged.setdefault(("extra", column), values),
        "log_metric": lambda name, value: logged.setdefault(name, value),
        "images": [[object()]] * n,
        "record_key": ["k"] * n,
    }


def test_trl_callable_mixed_protocols():
    completions = [
        _conv(
            "<think>x</think><answer>2</answer><answer>9</answer><answer>5</answer>"
        ),  # batch, GT BCA: perfect
        _conv("<think>x</think><answer>9</answer><answer>9</answer><answer>5</answer>"),  # batch tie -> 0
        _conv("<think>x</think><answer>8</answer><answer>3</answer>"),  # pair, GT AB -> 1
        _conv("<think>x</think><answer>8</answer>"),  # single, correct -> 1
        _conv("<think><answer>1</answer><answer>9</answer><answer>5</answer>"),  # unclosed think -> 0
        "<think>x</think><answer>2</answer><answer>5</answer><answer>9</answer>",  # plain string completion, GT BCA -> 2/3
    ]
    protocol = ["batch", "batch", "pair", "single", "batch", "batch"]
    truth = ["BCA", "BCA", "AB", "correct", "BCA", "BCA"]
    logged, extra = _trl_kwargs(len(completions))
    prompts = [[{"role": "user", "content": "q"}]] * len(completions)
    judge = REWARDS["judge"](
        prompts=prompts, completions=completions, protocol=protocol, ground_truth=truth, **extra
    )
    assert judge == pytest.approx([1.0, 0.0, 1.0, 1.0, 0.0, 2 / 3])
    assert logged["judge/parse_failure_rate"] == pytest.approx(1 / 6)
    ranking = REWARDS["batch_ranking"](
        prompts=prompts, completions=completions, protocol=protocol, ground_truth=truth, **extra
    )
    assert ranking[2] is None and ranking[3] is None and ranking[0] == 1.0
    pair = REWARDS["pair_preference"](
        prompts=prompts, completions=completions, protocol=protocol, ground_truth=truth, **extra
    )
    assert pair == [None, None, 1.0, None, None, None]
    verdict = REWARDS["pointwise_verdict"](
        prompts=prompts, completions=completions, protocol=protocol, ground_truth=truth, **extra
    )
    assert verdict == [None, None, None, 1.0, None, None]
    fmt = REWARDS["format"](
        prompts=prompts, completions=completions, protocol=protocol, ground_truth=truth, **extra
    )
    assert fmt == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_trl_callable_reasoning_content_and_think_open():
    done = _conv("<answer>9</answer><answer>2</answer>", reasoning_content="I compared the counts.")
    prefilled = _conv("counting...</think><answer>9</answer><answer>2</answer>")
    never_closed = _conv("counting... <answer>9</answer><answer>2</answer>")
    reward = get_reward("pair_preference", think_open=True)
    out = reward(
        prompts=None,
        completions=[done, prefilled, never_closed],
        protocol=["pair"] * 3,
        ground_truth=["AB"] * 3,
    )
    assert out == [1.0, 1.0, 0.0]


def test_trl_callable_options_and_names():
    half = get_reward("batch_ranking", ties="half")
    assert half.__name__ == "batch_ranking" and REWARDS["batch_ranking"].ties == "zero"
    out = half(
        prompts=None,
        completions=[_conv("<think>x</think><answer>5</answer><answer>5</answer><answer>1</answer>")],
        protocol=["batch"],
        ground_truth=["ABC"],
    )
    assert out == [pytest.approx(5 / 6)]
    with pytest.raises(
        KeyError,
        match="unknown reward 'nope'; registered: batch_ranking, format, judge, pair_preference, pointwise_verdict",
    ):
        get_reward("nope")
    with pytest.raises(ValueError, match=r"^reward 'judge' has no option\(s\) \['temperature'\]$"):
        get_reward("judge", temperature=2)


def test_trl_callable_data_errors_are_loud():
    with pytest.raises(KeyError) as e:
        REWARDS["judge"](prompts=None, completions=[_conv("x")], protocol=["batch"])
    assert e.value.args[0] == (
        "reward 'judge' needs the dataset column 'ground_truth' (trl passes dataset columns as keyword arguments; "
        "keep remove_unused_columns=False)"
    )
    with pytest.raises(ValueError, match="row 0"):
        REWARDS["judge"](prompts=None, completions=[_conv("x")], protocol=["batch"], ground_truth=["AAB"])
    with pytest.raises(ValueError, match="row 0"):
        REWARDS["judge"](prompts=None, completions=[_conv("x")], protocol=["essay"], ground_truth=["AB"])


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        5,
        [],
        [{}],
        [{"role": "assistant"}],
        [{"role": "assistant", "content": None}],
        "<answer>" * 50,
        "</think>" * 3,
    ],
)
def test_malformed_completions_never_crash_or_earn_credit(junk):
    for name, reward in REWARDS.items():
        out = reward(
            prompts=None, completions=[junk, junk], protocol=["batch", "pair"], ground_truth=["ABC", "BA"]
        )
        assert all(v in (None, 0.0) for v in out), (name, out)


def test_format_reward_pure():
    assert format_reward("<think>a</think><answer>1</answer>", 1) == 1.0
    assert format_reward("<answer>1</answer>", 1) == 0.0
    assert format_reward("<answer>1</answer>", 1, reasoning="looked") == 1.0  # the reasoning came separately
    assert (
        format_reward("a</think><answer>1</answer>", 1, think_open=True) == 1.0
    )  # the prompt opened the block
    assert format_reward("a</think><answer>1</answer>", 1) == 0.0


def test_completion_text_reads_every_completion_shape():
    assert completion_text("plain") == ("plain", None)
    assert completion_text({"role": "assistant", "content": "one message"}) == ("one message", None)
    blocks = [{"type": "text", "text": "a"}, "junk", {"type": "image"}, {"type": "text", "text": "b"}]
    assert completion_text(_conv(blocks)) == ("ab", None)
    assert completion_text(_conv("x", reasoning_content="r1")) == ("x", "r1")
    assert completion_text(_conv("x", reasoning="r2")) == ("x", "r2")
    assert completion_text(_conv("x", reasoning="")) == ("x", None)
    assert completion_text(_conv(5)) == ("", None)
    assert completion_text([]) == ("", None) and completion_text([42]) == ("", None)


def test_reward_options_reach_the_scores():
    single = {"protocol": ["single"], "ground_truth": ["correct"]}
    six = [_conv("<think>x</think><answer>6</answer>")]
    assert get_reward("pointwise_verdict")(completions=six, **single) == [1.0]  # tau 6 by default
    assert get_reward("pointwise_verdict", tau=7)(completions=six, **single) == [0.0]
    assert get_reward("pointwise_verdict")(completions=[_conv("<think>x</think>")], **single) == [0.0]
    tie = [_conv("<think>x</think><answer>5</answer><answer>5</answer>")]
    assert get_reward("pair_preference", ties="half")(
        completions=tie, protocol=["pair"], ground_truth=["AB"]
    ) == [0.5]
    prefilled = [_conv("x</think><answer>5</answer>")]
    assert get_reward("format", think_open=True)(completions=prefilled, **single) == [1.0]
    assert get_reward("format")(
        completions=[_conv("<answer>5</answer>", reasoning_content="r")], **single
    ) == [1.0]
    done = [_conv("<answer>9</answer><answer>2</answer>", reasoning_content="compared")]
    assert get_reward("judge", think_open=True)(completions=done, protocol=["pair"], ground_truth=["AB"]) == [
        1.0
    ]
    with pytest.raises(ValueError, match=r"^ties must be one of \('zero', 'half'\), got 'all'$"):
        JudgeReward("r", ("pair",), ties="all")


def test_each_completion_is_parsed_once_and_only_logging_rewards_log(monkeypatch):
    from perception_judge import rewards

    calls = []
    parse = rewards.parse_scores
    monkeypatch.setattr(rewards, "parse_scores", lambda *a, **k: calls.append(1) or parse(*a, **k))
    logged, extra = _trl_kwargs(2)
    done = [_conv("<think>x</think><answer>9</answer><answer>2</answer>")] * 2
    assert (
        REWARDS["judge"](completions=done, protocol=["pair"] * 2, ground_truth=["AB"] * 2, **extra)
        == [1.0] * 2
    )
    assert len(calls) == 2 and logged == {"judge/parse_failure_rate": 0.0}
    logged.clear()
    REWARDS["pair_preference"](completions=done, protocol=["pair"] * 2, ground_truth=["AB"] * 2, **extra)
    assert logged == {}, "pair_preference does not log parse failures"
    # a column one row short is a data bug, not a shorter batch
    with pytest.raises(ValueError, match="shorter"):
        REWARDS["judge"](completions=done, protocol=["pair"], ground_truth=["AB"])


def _seconds_per_call(fn, text, floor_s=0.03, rounds=5):
    """Best of ``rounds`` of: calls repeated until ``floor_s`` of this process's CPU time has passed, per call (CPU
    time, not wall time: other processes on a loaded machine do not count)."""
    import time

    best = float("inf")
    for _ in range(rounds):
        calls, start = 0, time.process_time()
        while (elapsed := time.process_time() - start) < floor_s:
            fn(text)
            calls += 1
        best = min(best, elapsed / calls)
    return best


@pytest.mark.parametrize(
    "unit", ["<answer>", "<answer>5</answer>", "<answer>1<answer>", "</answer>", "<think>"]
)
@pytest.mark.parametrize(("name", "protocol", "truth"), [("judge", "batch", "ABC"), ("batch_ranking", "batch", "BCA"),
                                                         ("pair_preference", "pair", "AB"), ("format", "single", "correct"),
                                                         ("pointwise_verdict", "single", "incorrect")])  # fmt: skip
def test_every_reward_is_linear_in_the_completion_length(unit, name, protocol, truth):
    """24 KB of repeated <answer> took 0.65 s to score and 96 KB 10.8 s (a search from every opening tag to the
    end); time(4x length) / time(1x length) must stay well under 16, the quadratic ratio."""
    reward = REWARDS[name]

    def score(text):
        return reward(completions=[text], protocol=[protocol], ground_truth=[truth])

    short, long = ("<think>x</think>" + unit * (n // len(unit)) for n in (6_000, 24_000))
    ratio = _seconds_per_call(score, long) / _seconds_per_call(score, short)
    assert ratio < 8, f"{name} on {unit!r}: 4x the length took {ratio:.1f}x the time"
