r"""Robust parsing of the JSON objects a teacher model writes.

Teachers wrap JSON in code fences or prose, forget commas' consequences (trailing commas), write Python
``True``/``None``, and -- the important one -- write LaTeX inside JSON strings without doubling the
backslashes. Two things go wrong with plain ``json.loads`` then:

* invalid escapes (``\sqrt``, ``\cdot``, ``\(``, ``\Delta``) make the whole object unparseable;
* *valid* escapes corrupt the text silently: ``\boxed`` becomes backspace + "oxed", ``\frac`` form feed +
  "rac", ``\times`` tab + "imes", ``\right`` carriage return + "ight", ``\neq`` newline + "eq". The
  ``\boxed{}`` is then gone, the final answer reads as empty, and a bad record passes validation.

:func:`repair_json_text` walks the text with a small string-aware lexer and doubles a backslash whenever the
escape cannot be meant as JSON: any invalid escape, every ``\b`` and ``\f`` (a teacher never means a
backspace or form feed), and ``\n`` / ``\t`` / ``\r`` when the letters after them spell a LaTeX command
(``\neq``, ``\times``, ``\theta``, ``\right``, ...). A genuine newline followed by a word ("\nThe answer")
stays a newline. Properly escaped text (``\\boxed``) is left alone, so well-formed JSON parses exactly as
``json.loads`` would parse it.

Why not the ``json_repair`` package: it decodes ``\boxed`` / ``\times`` / ``\right`` / ``\neq`` as
backspace, tab, carriage return and newline (the very corruption above), and it has no mode that repairs only
trailing commas and Python literals: even ``strict=True`` silently completes truncated objects
(``{"a": "Step 1: I see`` -> a finished string) and quotes bare words (``[oops, 3]``), so a cut-off or garbled
teacher reply would pass as a valid record instead of raising ``truncated_json`` / ``invalid_json``.
"""

from __future__ import annotations

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


def _letter_run(s: str, i: int) -> str:
    j = i
    while j < len(s) and s[j].isascii() and s[j].isalpha():
        j += 1
    return s[i:j]


def _is_latex_command(s: str, i: int) -> bool:
    """Whether the escape letter at ``s[i]`` (n, t or r) begins a LaTeX command rather than a JSON escape."""
    word = _letter_run(s, i)
    if word not in _AMBIGUOUS[s[i]]:
        return False
    after = s[i + len(word) : i + len(word) + 2]
    # "\ne.g." is a newline followed by "e.g.", not \ne.
    return not (len(after) == 2 and after[0] == "." and after[1].isalpha())


def repair_json_text(s: str) -> str:
    """Double every backslash inside JSON strings that is LaTeX rather than a JSON escape; drop trailing
    commas; turn bare Python ``True``/``False``/``None`` into JSON. Text outside strings is otherwise kept."""
    out: list[str] = []
    i, n, in_str = 0, len(s), False
    while i < n:
        c = s[i]
        if not in_str:
            if c == '"':
                in_str = True
            elif c == ",":
                j = i + 1
                while j < n and s[j] in " \t\r\n":
                    j += 1
                if j < n and s[j] in "}]":
                    i += 1  # trailing comma
                    continue
            elif c in "TFN" and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")):
                for word, repl in (("True", "true"), ("False", "false"), ("None", "null")):
                    end = i + len(word)
                    if s.startswith(word, i) and (end >= n or not (s[end].isalnum() or s[end] == "_")):
                        out.append(repl)
                        i = end
                        break
                else:
                    out.append(c)
                    i += 1
                continue
            out.append(c)
            i += 1
            continue
        if c == '"':
            in_str = False
            out.append(c)
            i += 1
            continue
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:  # a lone backslash at the very end
            out.append("\\\\")
            i += 1
            continue
        d = s[i + 1]
        if d in '"\\/':
            out.append(c + d)
            i += 2
        elif d == "u" and _HEX4.fullmatch(s[i + 2 : i + 6]):
            out.append(s[i : i + 6])
            i += 6
        elif d in "bf":  # \boxed, \frac, \beta, \forall ...: never a backspace / form feed
            out.append("\\\\")
            i += 1
        elif d in "ntr":
            if _is_latex_command(s, i + 1):
                out.append("\\\\")
                i += 1
            else:
                out.append(c + d)
                i += 2
        else:  # invalid JSON escape: \sqrt, \cdot, \(, \Delta, \{ ...
            out.append("\\\\")
            i += 1
    return "".join(out)


_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)


def _strip_reasoning(text: str) -> str:
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return text


def _balanced_objects(text: str) -> tuple[list[str], bool]:
    """Top-level ``{...}`` spans (string-aware); and whether an object was left open (truncated)."""
    spans: list[str] = []
    i, n = 0, len(text)
    truncated = False
    while i < n:
        start = text.find("{", i)
        if start == -1:
            break
        depth, j, in_str = 0, start, False
        while j < n:
            c = text[j]
            if in_str:
                if c == "\\":
                    j += 2
                    continue
                if c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:
            truncated = True
            break
        spans.append(text[start : j + 1])
        i = j + 1
    return spans, truncated


def _loads(candidate: str) -> Any:
    return json.loads(repair_json_text(candidate), strict=False)


def parse_json_object(text: str, required: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The first JSON object in ``text`` that parses (after LaTeX/escape repair) and has the ``required`` keys.

    Looks in code fences first, then at every top-level ``{...}`` in the text (reasoning before a
    ``</think>`` is ignored). Raises :class:`JSONParseError` with a reason code otherwise.
    """
    if not isinstance(text, str) or not text.strip():
        raise JSONParseError("no_json", "empty text")
    body = _strip_reasoning(text.lstrip("\ufeff"))
    candidates: list[str] = [m.group(1) for m in _FENCE.finditer(body)]
    spans, truncated = _balanced_objects(body)
    candidates += spans
    last_error = ""
    found_object_without_keys = False
    for cand in candidates:
        cand = cand.strip()
        if not cand:
            continue
        try:
            obj = _loads(cand)
        except json.JSONDecodeError as e:
            inner, _ = _balanced_objects(cand)
            obj = None
            for sub in inner:
                try:
                    obj = _loads(sub)
                    break
                except json.JSONDecodeError:
                    continue
            if obj is None:
                last_error = f"{e.msg} at char {e.pos}"
                continue
        if not isinstance(obj, dict):
            continue
        missing = [k for k in required if k not in obj]
        if missing:
            found_object_without_keys = True
            last_error = f"object lacks {missing}"
            continue
        return obj
    if found_object_without_keys:
        raise JSONParseError("missing_keys", last_error)
    if truncated and not spans:
        raise JSONParseError("truncated_json", "the JSON object is never closed")
    if not candidates:
        raise JSONParseError("no_json", "no JSON object in the text")
    raise JSONParseError("invalid_json", last_error or "no candidate parsed to an object")


__all__ = ["JSONParseError", "parse_json_object", "repair_json_text"]
