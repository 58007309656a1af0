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


# ---- prompt text and the think prefill (pinned: the numbers a judge earns depend on the exact words) ----------

PAIR_SYSTEM = (
    "You are a careful, impartial judge of answers written by AI assistants. Some questions come with an image; "
    "when one is given, look at it first and check every visual claim an answer makes (counts, colours, text, "
    "numbers, positions) against what the image actually shows. An answer that reasons fluently from details the "
    "image contradicts is a wrong answer. You will see a question and the answers of two assistants. Score each "
    "answer. Judge correctness with respect to the image and the question first, then helpfulness, relevance and "
    "level of detail. Scores are integers from 1 (worst) to 10 (best). Do not let the order in which the answers "
    "appear, their length or their style sway you. Write your step-by-step reasoning inside <think> </think> first. "
    "After </think>, write the two scores, one <answer> </answer> tag per assistant in the order they appear and "
    "nothing else, for example: <think> ... </think><answer>6</answer><answer>9</answer>"
)


def test_the_judge_prompts_word_for_word():
    import hashlib

    from perception_judge.core.protocol import tiny_user_text, user_text

    assert system_prompt("pair", 2) == PAIR_SYSTEM
    single, batch = system_prompt("single", 1), system_prompt("batch", 3)
    assert "You will see a question and one assistant's answer. Score the answer." in single
    assert "write its score in one <answer> </answer> tag and nothing else" in single
    assert "the answers of 3 assistants" in batch and "write the 3 scores, one <answer>" in batch
    assert [hashlib.sha256(s.encode()).hexdigest()[:16] for s in (single, batch)] == [
        "0eafd8dfc0ada333",  # the whole prompts, as reviewed; a change to their words changes these
        "618ddbb5f9dad551",
    ]
    assert user_text("single", "Q?", ["a"]) == "## Question\nQ?\n\n## The assistant's answer\na"
    assert user_text("pair", "Q?", ["a", "b"]) == (
        "## Question\nQ?\n\n## Answer of Assistant 1\na\n\n## Answer of Assistant 2\nb"
    )
    assert tiny_user_text(" colour ? ", [" shape red ", "shape blue"]) == "colour ? A shape red B shape blue"
    assert tiny_user_text("  ", ["x", "y"]) == "A x B y"
    single_user = build_messages("single", "Q?", ["a"], n_images=0)[1]["content"]
    assert single_user == [{"type": "text", "text": "## Question\nQ?\n\n## The assistant's answer\na"}]
    tiny = build_messages("pair", "colour ?", ["red", "blue"], style="tiny")
    assert tiny[0]["content"] == [{"type": "text", "text": "judge"}]
    assert tiny[1]["content"] == [{"type": "image"}, {"type": "text", "text": "colour ? A red B blue"}]


class _Processor:
    """A tokenizer-like stand-in: a chat template rendered by jinja2, its tokenizer (when given) holding it too; like a
    tokenizer's, ``apply_chat_template`` returns token ids unless ``tokenize`` is false."""

    def __init__(self, template, tokenizer=None, on_processor=True):
        self.chat_template = template if on_processor else None
        if tokenizer is not None:
            self.tokenizer = tokenizer
            tokenizer.chat_template = template

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
        import jinja2

        template = self.chat_template or self.tokenizer.chat_template
        text = jinja2.Template(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt
        )
        return [ord(c) for c in text] if tokenize else text


PLAIN = (
    "{% for m in messages %}[{{ m.role }}]{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
)
OPENS = PLAIN.replace("[assistant]", "[assistant]<think>\n")


def test_the_think_prefill_is_installed_once_where_the_template_lacks_it():
    from types import SimpleNamespace

    from perception_judge.core.protocol import prepare_processor, render_generation_prompt

    msgs = [{"role": "user", "content": "q"}]
    tok = SimpleNamespace()
    proc = _Processor(PLAIN, tok)
    assert render_generation_prompt(proc, msgs) == "[user][assistant]<think>\n"
    assert (
        proc.chat_template
        == tok.chat_template
        == PLAIN + "{% if add_generation_prompt %}{{ '<think>\\n' }}{% endif %}"
    )
    assert prepare_processor(proc) is proc and proc.chat_template.count("<think>") == 1  # idempotent
    assert render_generation_prompt(_Processor(PLAIN), msgs, think_prefix="off") == "[user][assistant]"
    bare = _Processor(PLAIN)  # no tokenizer: the processor is its own
    assert render_generation_prompt(bare, msgs) == "[user][assistant]<think>\n"
    opens = _Processor(OPENS, SimpleNamespace())
    assert (
        render_generation_prompt(opens, msgs) == "[user][assistant]<think>\n" and opens.chat_template == OPENS
    )
    on_tokenizer = _Processor(
        PLAIN, SimpleNamespace(), on_processor=False
    )  # the template only on the tokenizer
    assert render_generation_prompt(on_tokenizer, msgs) == "[user][assistant]<think>\n"
    with pytest.raises(ValueError, match=r"^think_prefix must be 'auto' or 'off', got 'on'$"):
        prepare_processor(_Processor(PLAIN), "on")
    deaf = _Processor(PLAIN)
    deaf.apply_chat_template = lambda *a, **k: (
        "[assistant]"
    )  # renders without its template: the suffix is lost
    with pytest.raises(RuntimeError, match=r"^could not install the <think> prefix into the chat template$"):
        prepare_processor(deaf)


def test_chat_template_of_and_opens_think_block():
    from types import SimpleNamespace

    from perception_judge.core.protocol import chat_template_of, opens_think_block

    both = SimpleNamespace(chat_template="T", tokenizer=SimpleNamespace(chat_template="U"))
    assert chat_template_of(both) == "T"
    assert chat_template_of(SimpleNamespace(tokenizer=SimpleNamespace(chat_template="U"))) == "U"
    assert (
        chat_template_of(SimpleNamespace(chat_template=None, tokenizer=SimpleNamespace(chat_template="U")))
        == "U"
    )
    assert chat_template_of(SimpleNamespace(chat_template={"tool_use": "X", "default": "D"})) == "D"
    assert chat_template_of(SimpleNamespace(chat_template={"tool_use": "X", "rag": "R"})) == "X"
    with pytest.raises(
        ValueError, match=r"^SimpleNamespace has no chat template; a judge model needs one \("
    ):
        chat_template_of(SimpleNamespace(chat_template=""))
    with pytest.raises(
        ValueError, match=r"^object has no chat template; .* \(chat_template.jinja in the model folder\)$"
    ):
        chat_template_of(object())
    assert opens_think_block("x<think>\n") and opens_think_block("<think>a</think><think>b")
    assert not opens_think_block("<think>a</think>") and not opens_think_block("plain")
    assert not opens_think_block("</think><think>a</think>")


def test_parse_failures_say_why_and_keep_the_final_text():
    """Exact reasons and the final answer text beside them (edges the mutation run found)."""
    r = parse_scores("<think>r</think><answer>3</answer>", 2)
    assert (r.error, r.final) == ("expected 2 <answer> tags, found 1", "<answer>3</answer>")
    assert parse_scores("<think>r</think><answer>3</answer>", 1).final == "<answer>3</answer>"
    r = parse_scores("<think>r</think><answer><answer>3</answer>", 1)
    assert (r.error, r.final) == ("unbalanced <answer> tags", "<answer><answer>3</answer>")
    assert parse_scores("x</think><answer>11</answer>", 1).final == "<answer>11</answer>"
    assert parse_scores("<answer>" + "x" * 20 + "</answer>", 1).error == f"not an integer score: {'x' * 20!r}"
    r = parse_scores("<answer>" + "x" * 21 + "</answer>", 1)
    assert (r.error, r.final) == (
        f"not an integer score: {'x' * 17 + '...'!r}",
        "<answer>" + "x" * 21 + "</answer>",
    )
    assert (
        parse_scores("<answer>" + "9" * 21 + "</answer>", 1).error
        == "score 99999999999999999... outside 1-10"
    )
    assert parse_scores("<answer>0007</answer>", 1).scores == [7]  # four digits are read
    assert (
        parse_scores("<answer>00007</answer>", 1).error == "score 00007 outside 1-10"
    )  # five never reach int()
    assert parse_scores(None, 1).error == "completion is not text"
    assert parse_scores("no close", 1, think_open=True).error == "unclosed <think> block"
    assert parse_scores("<think>no close", 1).error == "unclosed <think> block"
    # the text after the LAST </think> is the answer: tags between two closings are reasoning
    assert parse_scores("<think>a</think><answer>1</answer></think><answer>4</answer>", 1).scores == [4]
    with pytest.raises(ValueError, match=r"^n must be >= 1, got 0$"):
        parse_scores("<answer>1</answer>", 0)
    assert not format_ok(None, 1)
    assert not format_ok(
        "<think>x</think><answer>3</answer>", 1, reasoning="r"
    )  # think markup beside reasoning


def test_builder_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"^unknown prompt style 'huge'; choose one of full, tiny$"):
        build_messages("pair", "q", ["a", "b"], style="huge")
    with pytest.raises(ValueError, match=r"^the pair protocol judges exactly two responses, got 3$"):
        build_messages("pair", "q", ["a", "b", "c"])
    with pytest.raises(TypeError, match=r"^response 2 is int, expected str$"):
        build_messages("pair", "q", ["a", 2])
    with pytest.raises(ValueError, match=r"^n_images must be >= 0$"):
        build_messages("pair", "q", ["a", "b"], n_images=-1)
