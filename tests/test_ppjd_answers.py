"""Final-answer extraction, normalisation and comparison."""

from __future__ import annotations

import pytest

from perception_judge.core.answers import answers_match, extract_final_answer, find_boxed, normalize_answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (r"first \boxed{2} then \boxed{3}", "3"),
        (r"the value is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"nested \boxed{ {a}+\{b\} }", r"{a}+\{b\}"),
        (r"spaced \boxed {7}", "7"),
        ("Reasoning...\nFinal answer: 42.", "42"),
        ("The final answer is **B**", "B"),
        ("Steps\nAnswer: 4:05", "4:05"),
        ("So the answer is 12 apples.", "12 apples"),
        ("no answer here", ""),
        (r"broken \boxed{3", ""),
    ],
)
def test_extract_final_answer(text, answer):
    assert extract_final_answer(text) == answer


def test_find_boxed_handles_deep_nesting():
    assert find_boxed(r"\boxed{\sqrt{\frac{a}{b}}} and \fbox{x}") == [r"\sqrt{\frac{a}{b}}", "x"]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("3", "3.0"),
        ("1,000", "1000"),
        (r"\frac{1}{2}", "0.5"),
        ("1/2", r"\dfrac{1}{2}"),
        (r"\boxed{\text{Red}}.", "red"),
        ("$12$", "12"),
        ("B", "(B) 12 apples"),
        ("(c)", "C"),
        ("4:05", "4:05"),
        ("Pears", "pears"),
    ],
)
def test_answers_match(a, b):
    assert answers_match(a, b)
    assert answers_match(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [("3", "4"), ("4:05", "4:06"), ("B", "Bob"), ("red", "blue"), ("", ""), ("", "3"), ("0.5", "0.51")],
)
def test_answers_differ(a, b):
    assert not answers_match(a, b)


def test_normalize_answer_is_canonical():
    assert normalize_answer(r"  \boxed{ $3.50$ } ") == "3.5"
    assert normalize_answer("**Answer**") == "answer"
