"""Final-answer extraction, normalisation and comparison for PPJD validation.

An empty answer never matches anything: validation treats "no final answer" as its own rejection instead of as
"different from the ground truth" (a defect of the published release).
"""

from __future__ import annotations

import math
import re

_BOXED_START = re.compile(r"\\(?:boxed|fbox)\s*\{")


def find_boxed(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{...}`` / ``\\fbox{...}`` in ``text``, in order (nesting allowed)."""
    out: list[str] = []
    if not isinstance(text, str):
        return out
    pos = 0
    while True:
        m = _BOXED_START.search(text, pos)
        if m is None:
            return out
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2  # escaped brace inside the box: \{ \}
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1])
            pos = i
        else:  # unbalanced: the rest of the text is not a complete box
            return out


_FINAL_PATTERNS = (
    re.compile(r"final\s+answer\s*(?:is\s*[:：]?|[:：])\s*(.+)", re.IGNORECASE),
    re.compile(r"(?:^|\n)\s*(?:\*\*)?answer(?:\*\*)?\s*[:：]\s*(.+)", re.IGNORECASE),
    re.compile(r"the\s+answer\s+is\s*[:：]?\s*(.+)", re.IGNORECASE),
)


def extract_final_answer(text: str) -> str:
    """The final answer stated by a response: last ``\\boxed{}``, else the last "final answer" statement, else ""."""
    if not isinstance(text, str) or not text.strip():
        return ""
    if boxed := find_boxed(text):
        return boxed[-1].strip()
    for pattern in _FINAL_PATTERNS:
        stated = [m.group(1).strip() for m in pattern.finditer(text)]
        if stated and (line := _strip_decorations(stated[-1].splitlines()[0] if stated[-1] else "")):
            return line
    return ""


_TEXT_CMDS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mathit|operatorname|mbox)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3})((?:,\d{3})+)(?![\d])")
_OPTION = re.compile(r"^(?:option\s+)?\(?([a-z])\)?(?:[.:)]\s*.*)?$")
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_FRACTION = re.compile(r"^([+-]?\d+(?:\.\d+)?)\s*/\s*([+-]?\d+(?:\.\d+)?)$")


def _strip_decorations(s: str) -> str:
    """Drop surrounding whitespace, markdown emphasis, quotes and trailing punctuation."""
    prev = None
    while prev != s:
        prev = s
        s = s.strip().strip("*_`\"'").strip()
        s = re.sub(r"[\s.;,!]+$", "", s)
    return s


def _unwrap_boxed(s: str) -> str:
    while True:
        stripped = s.strip()
        boxes = find_boxed(stripped)
        if len(boxes) == 1 and _BOXED_START.match(stripped) and stripped.endswith("}"):
            s = boxes[0]
        else:
            return s


def normalize_answer(answer: str) -> str:
    """A canonical form for comparing final answers (lowercase, no LaTeX wrappers, canonical numbers)."""
    if not isinstance(answer, str):
        answer = "" if answer is None else str(answer)
    s = _unwrap_boxed(_strip_decorations(answer.replace("$", "")))
    for _ in range(3):
        s = _TEXT_CMDS.sub(r"\1", s)
    s = _FRAC.sub(r"\1/\2", s)
    s = re.sub(r"\\left|\\right", "", s)
    s = re.sub(r"\\[,;:! ]", " ", s)
    s = s.replace("\\%", "%").replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\cdot", "*").replace("\\times", "*")
    s = _strip_decorations(s).lower()
    s = re.sub(r"\s+", " ", s)
    s = _THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), s)
    if not _NUMBER.match(s):
        return s
    value = float(s)
    whole = math.isfinite(value) and value == int(value) and abs(value) < 1e15
    return str(int(value)) if whole else repr(value)


def _as_number(s: str) -> float | None:
    s = s.replace(" ", "").rstrip("%")
    if _NUMBER.match(s):
        return float(s)
    m = _FRACTION.match(s)
    den = float(m.group(2)) if m else 0.0
    return float(m.group(1)) / den if den else None


def _option_letter(s: str) -> str | None:
    m = _OPTION.match(s)
    return m.group(1) if m else None


def answers_match(a: str, b: str) -> bool:
    """True when two final answers mean the same thing. Empty answers never match."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if not na or not nb:
        return False
    if na == nb:
        return True
    xa, xb = _as_number(na), _as_number(nb)
    if xa is not None and xb is not None:
        return math.isclose(xa, xb, rel_tol=1e-6, abs_tol=1e-9)
    # Multiple choice: "b" vs "(b) 12 apples" / "b. 12 apples".
    if min(len(na), len(nb)) == 1 and (la := _option_letter(na)) is not None and la == _option_letter(nb):
        short, long_ = (na, nb) if len(na) == 1 else (nb, na)
        return bool(re.match(rf"^(?:option\s+)?\(?{re.escape(short)}\)?(?:[.:)]|$)", long_))
    return False
