"""Judge prompts and the one score parser, including malformed and adversarial completions."""

from __future__ import annotations

import pytest

from perception_judge.core.protocol import (
    build_messages,
    count_image_placeholders,
    expected_scores,
    format_ok,
    parse_scores,
    system_prompt,
)


def test_batch_messages_shape():
    msgs = build_messages("batch", "How many cubes?", ["three", "four", "five"])
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert all(isinstance(m["content"], list) for m in msgs), (
        "content is always a block list (Arrow-friendly)"
    )
    assert count_image_placeholders(msgs) == 1
    assert msgs[1]["content"][0] == {"type": "image"}
    text = msgs[1]["content"][-1]["text"]
    for i, r in enumerate(["three", "four", "five"], 1):
        assert f"Assistant {i}\n{r}" in text
    assert text.index("Assistant 1") < text.index("Assistant 2") < text.index("Assistant 3")
    sys_text = msgs[0]["content"][0]["text"]
    assert (
        "different score" in sys_text
        and "<think>" in sys_text
        and sys_text.split("for example:")[1].count("<answer>") == 3
    )


@pytest.mark.parametrize(
    "protocol,n,n_tags", [("single", 1, 1), ("pair", 2, 2), ("batch", 4, 4), ("batch", 2, 2)]
)
def test_system_prompt_example_has_one_tag_per_score(protocol, n, n_tags):
    assert system_prompt(protocol, n).split("for example:")[1].count("<answer>") == n_tags
    assert expected_scores(protocol, n) == n_tags


def test_text_only_and_multi_image():
    assert count_image_placeholders(build_messages("single", "2+2?", ["4"], n_images=0)) == 0
    assert count_image_placeholders(build_messages("pair", "q", ["a", "b"], n_images=2)) == 2


@pytest.mark.parametrize(
    "protocol,responses",
    [
        ("single", ["a", "b"]),
        ("pair", ["a"]),
        ("pair", ["a", "b", "c"]),
        ("batch", ["a"]),
        ("batch", ["x"] * 11),
        ("triple", ["a", "b"]),
    ],
)
def test_builder_rejects_wrong_response_counts(protocol, responses):
    with pytest.raises(ValueError):
        build_messages(protocol, "q", responses)


# ---- parser -------------------------------------------------------------------------------------------------

GOOD = [
    ("<think>r</think><answer>3</answer><answer>8</answer><answer>6</answer>", 3, [3, 8, 6]),
    ("<think>r</think>\n<answer> 7 </answer>\n<answer>\n2\n</answer>", 2, [7, 2]),
    ("reasoning without opening tag (prefilled)</think><answer>10</answer>", 1, [10]),
    ("<answer>1</answer>", 1, [1]),  # a judge without a think block (e.g. an API model)
    (
        "<think>I think <answer>9</answer><answer>9</answer> is wrong</think><answer>2</answer><answer>5</answer>",
        2,
        [2, 5],
    ),
    ("<think>a</think>x</think><answer>4</answer>", 1, [4]),  # the last </think> ends the reasoning
]


@pytest.mark.parametrize("text,n,scores", GOOD)
def test_parse_scores_valid(text, n, scores):
    r = parse_scores(text, n)
    assert r.scores == scores and r.error is None and r.ok


BAD = [
    ("<think>r</think><answer>0</answer>", 1, "outside"),
    ("<think>r</think><answer>11</answer>", 1, "outside"),
    ("<think>r</think><answer>7.5</answer>", 1, "not an integer"),
    ("<think>r</think><answer>-3</answer>", 1, "not an integer"),
    ("<think>r</think><answer>+3</answer>", 1, "not an integer"),
    ("<think>r</think><answer>seven</answer>", 1, "not an integer"),
    ("<think>r</think><answer></answer>", 1, "not an integer"),
    ("<think>r</think><answer>3</answer>", 2, "expected 2"),
    ("<think>r</think><answer>3</answer><answer>4</answer><answer>5</answer>", 2, "expected 2"),
    ("<think>r</think><answer>3</answer><answer>4", 2, "unbalanced"),
    ("<think>r</think><answer><answer>3</answer></answer>", 1, "unbalanced"),
    ("<think>I would give <answer>8</answer>", 1, "unclosed"),  # tags inside an unclosed think
    ("<think>r</think><think>again <answer>8</answer>", 1, "unclosed"),
    ("", 1, "expected 1"),
    ("no tags at all", 1, "expected 1"),
]


@pytest.mark.parametrize("text,n,reason", BAD)
def test_parse_scores_rejects(text, n, reason):
    r = parse_scores(text, n)
    assert r.scores is None and not r.ok
    assert reason in r.error


def test_tags_only_inside_think_are_ignored():
    r = parse_scores("<think>maybe <answer>3</answer><answer>8</answer></think>I refuse.", 2)
    assert r.scores is None and "expected 2" in r.error


def test_think_open_prefill_requires_closing():
    text = "reasoning that never ends <answer>5</answer>"
    assert parse_scores(text, 1).scores == [5]  # no think markup at all: the whole text is the answer
    r = parse_scores(text, 1, think_open=True)  # but the prompt opened <think>: still inside reasoning
    assert r.scores is None and "unclosed" in r.error
    assert parse_scores("done</think><answer>5</answer>", 1, think_open=True).scores == [5]


def test_separate_reasoning_part():
    assert parse_scores("<answer>4</answer><answer>9</answer>", 2, reasoning="long thoughts").scores == [4, 9]
    assert parse_scores("<answer>4</answer>", 1, reasoning="r", think_open=True).scores == [4]


def test_parser_never_raises_on_junk():
    for junk in [
        None,
        123,
        "<",
        "</think>" * 5,
        "<answer>" * 1000,
        "\x00\x01",
        "<answer>9" + "9" * 10000 + "</answer>",
    ]:
        r = parse_scores(junk, 1)
        assert r.scores is None and isinstance(r.error, str)


def test_very_long_completion_is_fine():
    text = "<think>" + ("blah " * 200_000) + "</think><answer>6</answer>"
    assert parse_scores(text, 1).scores == [6]


def test_format_ok():
    assert format_ok("<think>r</think><answer>3</answer><answer>5</answer>", 2)
    assert format_ok("  <think>r</think>\n<answer> 3 </answer>\n", 1)
    assert not format_ok("<think>r</think><answer>3</answer>", 2)  # wrong count
    assert not format_ok("<think>r</think>Score: <answer>3</answer>", 1)  # extra text
    assert not format_ok("<answer>3</answer>", 1)  # no think block
    assert not format_ok("<think>r<answer>3</answer>", 1)  # unclosed
    assert not format_ok("<think>a</think><think>b</think><answer>3</answer>", 1)
    assert not format_ok("<think>r</think><answer>12</answer>", 1)
    # with the <think>\n prefill the completion only closes the block
    assert format_ok("reasoning</think><answer>3</answer>", 1, think_open=True)
    assert not format_ok("reasoning</think><answer>3</answer>", 1, think_open=False)
    assert not format_ok("<think>again</think><answer>3</answer>", 1, think_open=True)
    # reasoning supplied separately (reasoning_content)
    assert format_ok("<answer>3</answer>", 1, reasoning="thoughts")
