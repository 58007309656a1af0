"""Published judge prompts read from the user's copy of the published repository (``prompt_source``), where
``published_prompts.yaml`` says they are; parsed with ``ast``, never run: assignments under the conditions of
their ``if`` branches, a function's return value (``f()``), a dict literal's value (``["k"]``, its constant
siblings as conditions); literals, implicit joins and ``+`` concatenate; an f-string is a ``str.format``
template (fields named by NAMES, constants filled in). A missing or reshaped file: one error naming it."""

from __future__ import annotations

import ast
import hashlib
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

import yaml
from pydantic import BeforeValidator, model_validator

from perception_judge.core.options import Options

SOURCES: dict[str, list] = yaml.safe_load(Path(__file__).with_name("published_prompts.yaml").read_text())
"""Per suite, its published files and where each split's prompt lives in them (the YAML file's header)."""
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"  # an image's place in the Flex-Judge user text
PROJECT = {"origin": "project"}  # the provenance of the project's own prompts
Source = Annotated[Path | None, BeforeValidator(lambda v: Path(v).expanduser() if v else None)]  # the option
NAMES = {"q": "question", "a1": "answer_1", "a2": "answer_2", "i + 1": "n", "a[i]['answer']": "answer"}
"""The Flex-Judge scripts' f-string fields -> the placeholders the suites fill."""
KEY, WHERE = "args.split", {'["type"]': "text", "args.model_type": "vl"}  # where the file tests them


class PromptSourceError(ValueError):
    """A published prompt file missing or changed shape (one line: file, variable, what is wrong)."""


@dataclass(frozen=True)
class Prompt:
    """A split's published prompt: per turn its steps in file order (``=`` sets, ``+=`` appends, ``each``
    appends once per entry of ``each`` as a ``+=`` in a loop does, ``strip``), how it is sent, provenance."""

    texts: dict[str, tuple[tuple[str, str], ...]]
    fields: str
    image: str
    scale: tuple[int, int] | None
    parser: str
    provenance: dict[str, Any]

    def text(self, turn: str, values: dict | None = None, each: Sequence[dict] = ()) -> str:
        """The turn's text, the user turn's placeholders filled from ``values`` (and each of ``each``)."""
        out, fill = "", turn == "user" and bool(self.fields)
        for op, t in self.texts[turn]:
            entries = each if op == "each" else [{}]
            added = "".join(t.format(**(values or {}) | e) if fill else t for e in entries)
            out = out.strip() if op == "strip" else out * (op != "=") + added
        return out

    def render(self, question: str, responses: Sequence[str], n_images: int = 1) -> list[dict]:
        """``build_messages``' call: ``question``, ``answer_1``... and, per response, ``{n, answer}`` (``each``)."""
        values = {"question": question} | {f"answer_{n}": r for n, r in enumerate(responses, 1)}
        return self.messages(values, [{"n": n, "answer": r} for n, r in enumerate(responses, 1)], n_images)

    def messages(self, values: dict, each: Sequence[dict] = (), images: int = 1) -> list[dict]:
        """The published turns, ``{"type": "image"}`` where the script puts images (``last``: ``images``)."""
        text, blocks, last = self.text("user", values, each), [], images * (self.image == "last")
        for k, piece in enumerate(text.split(QWEN_IMAGE) if self.image == "marker" else [text, *[""] * last]):
            blocks += [{"type": "image"}] * bool(k) + [{"type": "text", "text": piece}] * bool(piece)
        system = [{"type": "text", "text": self.text("system")}] if "system" in self.texts else []
        return [{"role": "system", "content": system}] * bool(system) + [{"role": "user", "content": blocks}]


def _conditions(test: ast.expr) -> dict[str, set[Any]]:
    """``{expression: values}`` of an ``if`` test of ``==`` constants, or'ed on one expression."""
    tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    eq = [t for t in tests if isinstance(t, ast.Compare) and isinstance(t.ops[0], ast.Eq)]
    pairs = {(ast.unparse(t.left), c.value) for t in eq if isinstance(c := t.comparators[0], ast.Constant)}
    keys = {k for k, _ in pairs}
    return {keys.pop(): {v for _, v in pairs}} if len(pairs) == len(tests) and len(keys) == 1 else {}


def _scan(body: list[ast.stmt], cond: dict, loop: bool, func: str, found: dict[str, list]) -> None:
    """Assignments, return values and dict-literal values in file order: name -> [(op, node, conditions)]."""
    for node in body:
        if isinstance(node, ast.If):
            _scan(node.body, cond | _conditions(node.test), loop, func, found)
            _scan(node.orelse, cond, loop, func, found)
        elif hasattr(node, "body"):  # def, class, for, while, with, try
            inner, name = loop or isinstance(node, ast.For | ast.While), getattr(node, "name", func)
            handlers = [h.body for h in getattr(node, "handlers", [])]
            for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []), *handlers):
                _scan(block, cond, inner, name, found)
        else:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            name = target.id if isinstance(target, ast.Name) else f"{func}()" * isinstance(node, ast.Return)
            if name and getattr(node, "value", None) is not None:
                op = ("each" if loop else "+=") if isinstance(node, ast.AugAssign) else "="
                found.setdefault(name, []).append((op, node.value, cond))
            for d in (n for n in ast.walk(node) if isinstance(n, ast.Dict)):
                kv = [(f'["{k.value}"]', v) for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant)]
                sib = {k: {v.value} for k, v in kv if isinstance(v, ast.Constant)}
                for k, v in kv:
                    found.setdefault(k, []).append(("=", v, cond | sib))


def _pieces(node: ast.expr, consts: dict) -> list[tuple[bool, str]] | None:
    """(is a placeholder, text) pieces of a string expression (literals, ``+``, plain f-strings) or None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pieces(node.left, consts), _pieces(node.right, consts)
        return left + right if left is not None and right is not None else None
    if not isinstance(node, ast.JoinedStr):
        return [(False, node.value)] if isinstance(node, ast.Constant) and type(node.value) is str else None
    out = []
    for v in node.values:
        src = ast.unparse(v.value) if isinstance(v, ast.FormattedValue) else None
        if src is not None and (v.conversion != -1 or v.format_spec):
            return None  # a conversion or format spec ("{q!r}"): not a layout this reader follows
        known = src is None or src in consts
        out.append((False, str(consts[src]) if src else v.value) if known else (True, NAMES.get(src, src)))
    return out


def _read(src: dict, split: str, found: dict, consts: dict, where: str, digest: str) -> Prompt:
    """One split's turns: the variable's records under the split's conditions, as steps, checked."""
    spec, texts, conds = src["splits"][split], {}, {KEY: split} | WHERE
    for turn, var in [(t, spec[t]) for t in ("system", "user") if t in spec]:
        at, steps, names = f"{where}, variable {var}" + f" (split {split!r})" * bool(split), [], set()
        tested = [(k, v) for k, v in conds.items() if any(k in r[2] for r in found.get(var, []))]
        for op, node, _ in [r for r in found.get(var, []) if all(v in r[2].get(k, ()) for k, v in tested)]:
            call = node.func if isinstance(node, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr == "strip" and ast.unparse(call.value) == var:
                steps.append(("strip", ""))
            elif (pieces := _pieces(node, consts)) is None:
                raise PromptSourceError(f"{at}: not a string or plain f-string (line {node.lineno})")
            else:  # an f-string with placeholders is a template, its text escaped
                names |= (new := {t for p, t in pieces if p})
                esc = (lambda t: t.replace("{", "{{").replace("}", "}}")) if new else str
                steps.append((op, "".join("{" + t + "}" if p else esc(t) for p, t in pieces)))
        if not steps:
            raise PromptSourceError(f"{at}: absent")
        if turn == "user" and "fields" in spec:  # a str.format template: its own placeholders
            try:
                names = {f for _, t in steps for _, f, _, _ in string.Formatter().parse(t) if f is not None}
            except ValueError as e:
                raise PromptSourceError(f"{at}: not a str.format template ({e})") from None
        if names != (want := set(spec.get("fields", "").split() * (turn == "user"))):
            raise PromptSourceError(f"{at}: placeholders {sorted(names)}, expected {sorted(want)}")
        if (scale := spec["scale"]) and turn == "system" and "{}-{}".format(*scale) not in steps[-1][1]:
            raise PromptSourceError(f"{at}: does not ask for scores {scale[0]}-{scale[1]}")
        texts[turn] = tuple(steps)
    provenance = {"origin": "published", "repository": src["repository"], "file": src["file"], "split": split}
    provenance |= {"variable": ", ".join(spec[t] for t in texts), "sha256": digest}
    scale = tuple(spec["scale"]) if spec["scale"] else None
    return Prompt(texts, spec.get("fields", ""), src["image"], scale, src["parser"], provenance)


def read_prompts(suite: str, prompt_source: str | Path, splits: Sequence[str] = ()) -> dict[str, Prompt]:
    """Each split's published prompt (default: all the suite's), checked, from DIR (the first of the suite's
    files there) or the one file (the suite's file of that name, else its first)."""
    listed, path = SOURCES.get(suite, []), Path(prompt_source)
    named = [s for s in listed if Path(s["file"]).name == path.name] or listed[:1]
    found = [(s, path) for s in named] if path.is_file() else [(s, path / s["file"]) for s in listed]
    if not (found := [(s, p) for s, p in found if p.is_file()]):
        wanted = " or ".join(f"{s['file']} ({s['repository']})" for s in listed) or "published prompt for it"
        raise PromptSourceError(f"{suite}.prompt_source {str(path)!r}: no {wanted} there")
    src, path = found[0]
    where = f"{suite}.prompt_source {str(path)!r} ({src['repository']} {src['file']})"
    try:
        _scan(ast.parse(data := path.read_bytes(), str(path)).body, {}, False, "", records := {})
    except (SyntaxError, ValueError) as e:
        raise PromptSourceError(f"{where}: not Python ({e})") from None
    once = {n: rs[0][1] for n, rs in records.items() if len(rs) == 1 and not rs[0][2]}  # bound once, always
    consts = {n: node.value for n, node in once.items() if isinstance(node, ast.Constant)}
    turns = {v for split in src["splits"].values() for v in (split.get("system"), split["user"])}
    offered = [s for v in turns if (s := {k for *_, c in records.get(v, []) for k in c.get(KEY, ())})]
    if new := sorted(map(str, set.intersection(*offered or [set()]) - set(src["splits"]))):
        raise PromptSourceError(f"{where}: a prompt for split(s) {new} the suite does not know")
    if unknown := [s for s in splits if s not in src["splits"]]:
        raise PromptSourceError(f"{where}: no published prompt for split(s) {unknown}")
    digest = hashlib.sha256(data).hexdigest()
    return {s: _read(src, s, records, consts, where, digest) for s in splits or src["splits"]}


def comparable(suite: str, prompts: dict[str, Prompt], parser: str, data: dict[str, Any]) -> dict[str, Any]:
    """The one rule of the mark "comparable with the published table" (``table``, ``metrics``: its numbers): the
    published prompt (so its scale: the suites score by it), read by the published parser, on official data, whole."""
    used = {p.provenance["repository"] for p in prompts.values()}
    src = next((s for s in SOURCES[suite] if s["repository"] in used), SOURCES[suite][0])
    why = ["prompt and scale: the project's"] * (not prompts)
    why += [f"parser: {parser} (the published reading: {src['parser']})"] * (parser != src["parser"])
    why += [f"data: {data['source']}, not the official data"] * (data["source"] != "official")
    why += [f"data: {', '.join(data['left_out'])}"] * bool(data["left_out"])
    return {"table": src["table"], "metrics": src["metrics"], "ok": not why, "why_not": why}


class PublishedPromptOptions(Options):
    """Options of a suite with a published prompt: ``prompt_source`` (a checkout of the repository, or the file) is
    read when they are typed, before any model loads (``SPLITS_KEY``: the option listing the splits to read)."""

    SUITE: ClassVar[str] = ""
    SPLITS_KEY: ClassVar[str] = ""
    PROMPT: ClassVar[str] = ""  # the value of the ``prompt`` option that sends the published prompt
    prompt_source: Source = None

    def prompts(self) -> dict[str, Prompt]:
        """Each split's published prompt; ``{}`` without a ``prompt_source`` (the project's prompts)."""
        splits = getattr(self, self.SPLITS_KEY, ())  # "": no such option, every split
        return read_prompts(self.SUITE, self.prompt_source, splits) if self.prompt_source else {}

    @model_validator(mode="after")
    def _readable(self) -> Self:
        if self.prompt_source and self.PROMPT and getattr(self, "prompt", None) != self.PROMPT:
            raise ValueError(f"prompt_source holds the published prompt: set prompt={self.PROMPT} too")
        self.prompts()
        return self
