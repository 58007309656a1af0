"""Teacher JSON parsing: LaTeX must survive intact, never silently turn into control characters."""

from __future__ import annotations

import json

import pytest

from perception_judge.core.answers import extract_final_answer
from perception_judge.core.jsonparse import JSONParseError, parse_json_object, repair_json_text

# (what a model writes inside a JSON string with single backslashes, what the text must be)
LATEX_CASES = [
    (r"so the answer is \boxed{3}", "so the answer is \\boxed{3}"),
    (r"\frac{1}{2} of 8", "\\frac{1}{2} of 8"),
    (r"3 \times 4 = 12", "3 \\times 4 = 12"),
    (r"\left( x \right)", "\\left( x \\right)"),
    (r"x \neq y", "x \\neq y"),
    (r"\theta = 30", "\\theta = 30"),
    (r"\text{red}", "\\text{red}"),
    (r"\beta + \rho", "\\beta + \\rho"),
    (r"\sqrt{2} \cdot 5", "\\sqrt{2} \\cdot 5"),
    (r"\( a \) and \[ b \]", "\\( a \\) and \\[ b \\]"),
    (r"\Delta \approx 0.5", "\\Delta \\approx 0.5"),
    (r"\tfrac{1}{3} \to \infty", "\\tfrac{1}{3} \\to \\infty"),
]


def test_plain_json_loads_has_the_silent_corruption_defect():
    # The defect we guard against: these parse "fine" with json.loads but the LaTeX is destroyed.
    raw = r'{"a": "\boxed{3} \frac{1}{2} \times \right \neq"}'
    corrupted = json.loads(raw)["a"]
    assert "\b" in corrupted and "\f" in corrupted and "\t" in corrupted and "\r" in corrupted
    assert extract_final_answer(corrupted) == ""  # the boxed answer is gone


@pytest.mark.parametrize(("written", "expected"), LATEX_CASES)
def test_single_backslash_latex_survives(written, expected):
    raw = '{"text": "' + written + '"}'
    value = parse_json_object(raw)["text"]
    assert value == expected
    assert not any(c in value for c in "\b\f\t\r")


def test_boxed_answer_extractable_after_parsing_sloppy_json():
    raw = '{"misread": "Step 1: I see 4 red circles.\\nStep 2: 4 + 2 = 6.\n\nSo the answer is \\boxed{6}."}'
    sloppy = raw.replace("\\\\", "\\")
    value = parse_json_object(sloppy)["misread"]
    assert extract_final_answer(value) == "6"


def test_real_json_escapes_are_kept():
    raw = r'{"a": "line one\nThe next line\tthen a tab\ne.g. this", "b": "quote \" and slash \/ and \\ backslash", "c": "\u00e9"}'
    obj = parse_json_object(raw)
    assert obj["a"] == "line one\nThe next line\tthen a tab\ne.g. this"
    assert obj["b"] == 'quote " and slash / and \\ backslash'
    assert obj["c"] == "é"


def test_properly_escaped_json_parses_exactly_like_json_loads():
    values = {
        "a": "\\boxed{\\frac{1}{2}}\nnext\tline",
        "b": ["\\times", 3, None, True, {"c": "\\neq"}],
        "d": "plain",
    }
    text = json.dumps(values)
    assert parse_json_object(text) == json.loads(text) == values
    assert repair_json_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"facts": ["4 apples", "red cube", "label 19"]}\n```',
        'Sure! Here it is:\n{"facts": ["4 apples", "red cube", "label 19"]}\nHope this helps.',
        '{"facts": ["4 apples", "red cube", "label 19",],}',
        "<think>I will write {braces} in my reasoning.</think>\n"
        + '{"facts": ["4 apples", "red cube", "label 19"]}',
    ],
)
def test_fences_prose_trailing_commas_and_reasoning(text):
    assert parse_json_object(text, required=("facts",)) == {"facts": ["4 apples", "red cube", "label 19"]}


def test_python_literals_are_accepted():
    assert parse_json_object('{"correct": True, "note": None, "x": False}') == {
        "correct": True,
        "note": None,
        "x": False,
    }


def test_skips_objects_without_required_keys():
    text = 'First {"unrelated": 1} then {"correct": false, "note": "no"}'
    assert parse_json_object(text, required=("correct",)) == {"correct": False, "note": "no"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no_json"),
        ("no braces at all", "no_json"),
        ('{"misread": "Step 1: I see', "truncated_json"),
        ('{"facts": [oops, 3]}', "invalid_json"),
        ('{"other": 1}', "missing_keys"),
    ],
)
def test_errors_have_reasons(text, reason):
    with pytest.raises(JSONParseError) as e:
        parse_json_object(text, required=("facts",) if reason == "missing_keys" else ())
    assert e.value.reason == reason


@pytest.mark.parametrize(
    "shape",
    [
        lambda n: (
            '{"note": "' + "a" * n + '"}'
        ),  # one huge string: the regex scan kept ~150 bytes a character
        lambda n: (
            '{"note": "' + "\\frac{1}{2} " * (n // 12) + '"}'
        ),  # LaTeX with single backslashes all along
        lambda n: '{"note": "' + "a" * n,  # never closed
    ],
    ids=["string", "escapes", "unclosed"],
)
def test_parser_memory_is_linear_and_small(shape):
    import tracemalloc

    text = shape(2_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(JSONParseError):
            parse_json_object(text, ("correct",))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / len(text) < 6, f"{peak / len(text):.1f} bytes per character"


def test_a_reply_nested_thousands_deep_is_malformed_json_not_a_recursion_error():
    for text in (
        "```json\n" + "[" * 5000 + "]" * 5000 + "\n```",
        '{"correct": ' + "[" * 5000 + "]" * 5000 + "}",
    ):
        with pytest.raises(JSONParseError) as e:
            parse_json_object(text, ("correct",))
        assert e.value.reason == "invalid_json" and "nested too deeply" in str(e.value)
