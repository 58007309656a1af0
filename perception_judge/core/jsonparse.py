r"""Robust parsing of the JSON objects a teacher model writes (docs/ppjd.md §3 "Teacher JSON").

Teachers write LaTeX inside JSON strings without doubling the backslashes: invalid escapes (``\sqrt``, ``\(``)
make the object unparseable, and valid ones corrupt the text silently (``\boxed`` becomes backspace + "oxed",
``\frac`` form feed + "rac", ``\neq`` newline + "eq"). :func:`repair_json_text` doubles a backslash whenever the
escape cannot be meant as JSON: any invalid escape, every ``\b`` and ``\f``, and ``\n`` / ``\t`` / ``\r`` when the
letters after them spell a LaTeX command; well-formed JSON parses exactly as ``json.loads`` parses it.

Why not the ``json_repair`` package: it decodes ``\boxed`` / ``\times`` / ``\neq`` as control characters (the
very corruption above), and even ``strict=True`` silently completes truncated objects and quotes bare words, so a
cut-off or garbled teacher reply would pass as a valid record instead of raising ``truncated_json`` /
``invalid_json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from typing import Any


class JSONParseError(ValueError):
    """The text holds no usable JSON object. ``reason``: no_json, truncated_json, invalid_json, missing_keys."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


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
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
# Outside strings: a trailing comma or a bare Python literal (what repair_json_text rewrites; the rest is kept).
_OUTSIDE = re.compile(r",(?=[ \t\r\n]*[}\]])|(?<!\w)(?:True|False|None)(?!\w)")
_REWRITES = {"True": "true", "False": "false", "None": "null", ",": ""}
_QUOTE_OR_BACKSLASH = re.compile(r'["\\]')
_BRACE_OR_QUOTE = re.compile(r'[{}"]')
# The scanners below step from one special character to the next (no regex repetition over a string's body, whose
# backtracking stack cost ~150 bytes per character): linear time, memory proportional to the output alone.


def _string_end(text: str, i: int) -> int:
    """The index past the closing quote of the JSON string whose body starts at ``i`` (``len(text)`` if none)."""
    while m := _QUOTE_OR_BACKSLASH.search(text, i):
        if m.group() == '"':
            return m.end()
        i = m.end() + 1  # the escaped character
    return len(text)


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


def _edits(s: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, replacement) of each change :func:`repair_json_text` makes, in order."""
    i = 0
    while True:
        start = s.find('"', i)
        for m in _OUTSIDE.finditer(s, i, len(s) if start == -1 else start):
            yield m.start(), m.end(), _REWRITES[m.group()]
        if start == -1:
            return
        i = _string_end(s, start + 1)
        for m in _ESCAPE.finditer(s, start, i):
            if (new := _escape(m)) != m.group():
                yield m.start(), m.end(), new


def repair_json_text(s: str) -> str:
    """Double every backslash inside JSON strings that is LaTeX rather than a JSON escape; drop trailing
    commas; turn bare Python ``True``/``False``/``None`` into JSON. Text outside strings is otherwise kept (and
    text that needs no change is returned as it is, uncopied)."""
    out, done = None, 0
    for start, end, new in _edits(s):
        out = out or io.StringIO()
        out.write(s[done:start])
        out.write(new)
        done = end
    if out is None:
        return s
    out.write(s[done:])
    return out.getvalue()


_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)


def _object_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each top-level ``{...}`` (string-aware inside objects), lazily; a last (start, -1) for an
    object left open (truncated)."""
    depth, start, i = 0, 0, 0
    while m := (_BRACE_OR_QUOTE.search(text, i) if depth else _OPEN.search(text, i)):
        i = m.end()
        if m.group() == '"':
            i = _string_end(text, i)
        elif m.group() == "{":
            start, depth = (m.start() if depth == 0 else start), depth + 1
        elif (depth := depth - 1) == 0:
            yield start, i
    if depth:
        yield start, -1


_OPEN = re.compile(r"\{")


def _loads(candidate: str) -> Any:
    try:
        return json.loads(repair_json_text(candidate), strict=False)
    except RecursionError:  # nested thousands deep: a malformed reply, like any other
        raise json.JSONDecodeError("nested too deeply", candidate[:100], 0) from None


def _candidates(body: str, found: dict[str, int]) -> Iterator[tuple[str, bool]]:
    """(text, is a fence body) of the code fences, then of every top-level object; counts what it saw."""
    for m in _FENCE.finditer(body):
        found["candidates"] += 1
        yield m.group(1), True
    for start, end in _object_spans(body):
        if end == -1:
            found["truncated"] = 1
        else:
            found["candidates"] += 1
            found["spans"] += 1
            yield body[start:end], False


def _first_object(cand: str, fenced: bool) -> Any:
    """``cand`` parsed; for a fence body that does not parse, the first object inside it that does."""
    try:
        return _loads(cand)
    except json.JSONDecodeError:
        for start, end in _object_spans(cand) if fenced else ():
            if end != -1:
                with contextlib.suppress(json.JSONDecodeError):
                    return _loads(cand[start:end])
        raise


def parse_json_object(text: str, required: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The first JSON object in ``text`` that parses (after LaTeX/escape repair) and has the ``required``
    keys: code fences first, then every top-level ``{...}``. Raises :class:`JSONParseError` otherwise. Linear in
    the text's length, in time and in memory."""
    if not isinstance(text, str) or not text.strip():
        raise JSONParseError("no_json", "empty text")
    body = text.lstrip("\ufeff")
    if (think := body.rfind("</think>")) != -1:
        body = body[think + len("</think>") :]  # the reasoning before </think> is not the answer
    found = {"candidates": 0, "spans": 0, "truncated": 0}
    last_error, found_object_without_keys = "", False
    for cand, fenced in _candidates(body, found):
        if not cand.strip():
            continue
        try:
            obj = _first_object(cand.strip(), fenced)
        except json.JSONDecodeError as e:
            last_error = f"{e.msg} at char {e.pos}"
            continue
        if not isinstance(obj, dict):
            continue
        missing = [k for k in required if k not in obj]
        if not missing:
            return obj
        found_object_without_keys, last_error = True, f"object lacks {missing}"
    if found_object_without_keys:
        raise JSONParseError("missing_keys", last_error)
    if found["truncated"] and not found["spans"]:
        raise JSONParseError("truncated_json", "the JSON object is never closed")
    if not found["candidates"]:
        raise JSONParseError("no_json", "no JSON object in the text")
    raise JSONParseError("invalid_json", last_error or "no candidate parsed to an object")
