r"""Robust parsing of the JSON objects a teacher model writes.

Teachers wrap JSON in code fences or prose, leave trailing commas, write Python ``True``/``None``, and -- the
important one -- write LaTeX inside JSON strings without doubling the backslashes. Invalid escapes (``\sqrt``,
``\(``) then make the object unparseable, and *valid* ones corrupt the text silently: ``\boxed`` becomes backspace
+ "oxed", ``\frac`` form feed + "rac", ``\times`` tab + "imes", ``\neq`` newline + "eq", so the final answer reads
as empty and a bad record passes validation. :func:`repair_json_text` walks the text with a small string-aware
tokenizer and doubles a backslash whenever the escape cannot be meant as JSON: any invalid escape, every ``\b`` and
``\f``, and ``\n`` / ``\t`` / ``\r`` when the letters after them spell a LaTeX command. A genuine newline before a
word ("\nThe answer") stays a newline; well-formed JSON parses exactly as ``json.loads`` parses it.

Why not the ``json_repair`` package: it decodes ``\boxed`` / ``\times`` / ``\neq`` as control characters (the
very corruption above), and even ``strict=True`` silently completes truncated objects and quotes bare words, so a
cut-off or garbled teacher reply would pass as a valid record instead of raising ``truncated_json`` /
``invalid_json``.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any


class JSONParseError(ValueError):
    """The text holds no usable JSON object. ``reason``: no_json, truncated_json, invalid_json, missing_keys."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# LaTeX commands that start with the letters of a JSON escape (n, t, r). Only an exact match of the whole
# letter run after the backslash counts, so "\nThe" (newline + "The") is not mistaken for a command.
_LATEX_N = {
    "neq", "ne", "nabla", "nu", "neg", "not", "ni", "nmid", "nleq", "ngeq", "nless", "ngtr", "nsubseteq",
    "nsupseteq", "notin", "newline", "noindent", "nolimits", "normalsize", "newcommand", "nexists", "nparallel",
    "nearrow", "nwarrow", "natural", "ncong", "nsim", "nrightarrow", "nleftarrow", "nRightarrow", "nLeftarrow",
}  # fmt: skip
_LATEX_T = {
    "times", "text", "textbf", "textit", "textrm", "texttt", "textsf", "textup", "textnormal", "textstyle",
    "theta", "tan", "tanh", "tau", "to", "tfrac", "tilde", "top", "triangle", "triangleleft", "triangleright",
    "therefore", "tiny", "tt", "textcolor", "textsuperscript", "textsubscript", "textdegree", "tbinom",
    "thinspace", "twoheadrightarrow",
}  # fmt: skip
_LATEX_R = {
    "right", "rightarrow", "rho", "rangle", "rfloor", "rceil", "rbrace", "rbrack", "rm", "rVert", "rvert",
    "rightleftharpoons", "rightharpoonup", "rule", "root", "ref", "raisebox", "rq",
}  # fmt: skip
_AMBIGUOUS = {"n": _LATEX_N, "t": _LATEX_T, "r": _LATEX_R}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LETTERS = re.compile(r"[A-Za-z]*")
_STRING = r'"(?:[^"\\]|\\.|\\\Z)*"?'  # a JSON string, possibly unterminated
# A string, a trailing comma, or a bare Python literal (what repair_json_text rewrites; the rest of the text is kept).
_TOKEN = re.compile(_STRING + r"|,(?=[ \t\r\n]*[}\]])|(?<!\w)(?:True|False|None)(?!\w)", re.DOTALL)
_BRACE_OR_STRING = re.compile(r"[{}]|" + _STRING, re.DOTALL)
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
_REWRITES = {"True": "true", "False": "false", "None": "null", ",": ""}


def _is_latex_command(s: str, i: int) -> bool:
    """Whether the escape letter at ``s[i]`` (n, t or r) begins a LaTeX command rather than a JSON escape."""
    word = _LETTERS.match(s, i).group()
    if word not in _AMBIGUOUS[s[i]]:
        return False
    after = s[i + len(word) : i + len(word) + 2]
    # "\ne.g." is a newline followed by "e.g.", not \ne.
    return not (len(after) == 2 and after[0] == "." and after[1].isalpha())


def _escape(m: re.Match[str]) -> str:
    s, i, d = m.string, m.start(), m.group(1)
    if d and (
        d in '"\\/'
        or (d == "u" and _HEX4.fullmatch(s[i + 2 : i + 6]))
        or (d in "ntr" and not _is_latex_command(s, i + 1))
    ):
        return m.group()
    return "\\\\" + d  # LaTeX (\boxed, \frac, \times, \sqrt, \( ...): never a JSON escape


def _repair_token(m: re.Match[str]) -> str:
    token = m.group()
    return _ESCAPE.sub(_escape, token) if token.startswith('"') else _REWRITES[token]


def repair_json_text(s: str) -> str:
    """Double every backslash inside JSON strings that is LaTeX rather than a JSON escape; drop trailing
    commas; turn bare Python ``True``/``False``/``None`` into JSON. Text outside strings is otherwise kept."""
    return _TOKEN.sub(_repair_token, s)


_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)


def _balanced_objects(text: str) -> tuple[list[str], bool]:
    """Top-level ``{...}`` spans (string-aware); and whether an object was left open (truncated)."""
    spans: list[str] = []
    i = 0
    while (start := text.find("{", i)) != -1:
        depth = 0
        for m in _BRACE_OR_STRING.finditer(text, start):
            depth += {"{": 1, "}": -1}.get(m.group(), 0)
            if depth == 0:
                spans.append(text[start : m.end()])
                i = m.end()
                break
        else:
            return spans, True
    return spans, False


def _loads(candidate: str) -> Any:
    return json.loads(repair_json_text(candidate), strict=False)


def parse_json_object(text: str, required: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The first JSON object in ``text`` that parses (after LaTeX/escape repair) and has the ``required``
    keys: code fences first, then every top-level ``{...}``. Raises :class:`JSONParseError` otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise JSONParseError("no_json", "empty text")
    body = text.lstrip("\ufeff").rsplit("</think>", 1)[-1]  # the reasoning before </think> is not the answer
    spans, truncated = _balanced_objects(body)
    candidates = [m.group(1) for m in _FENCE.finditer(body)] + spans
    last_error = ""
    found_object_without_keys = False
    for cand in filter(None, (c.strip() for c in candidates)):
        try:
            obj = _loads(cand)
        except json.JSONDecodeError as e:
            last_error, obj = f"{e.msg} at char {e.pos}", None
            for sub in _balanced_objects(cand)[0]:  # else the first object inside it that parses
                with contextlib.suppress(json.JSONDecodeError):
                    obj = _loads(sub)
                    break
            if obj is None:
                continue
        if not isinstance(obj, dict):
            continue
        missing = [k for k in required if k not in obj]
        if not missing:
            return obj
        found_object_without_keys, last_error = True, f"object lacks {missing}"
    if found_object_without_keys:
        raise JSONParseError("missing_keys", last_error)
    if truncated and not spans:
        raise JSONParseError("truncated_json", "the JSON object is never closed")
    if not candidates:
        raise JSONParseError("no_json", "no JSON object in the text")
    raise JSONParseError("invalid_json", last_error or "no candidate parsed to an object")
