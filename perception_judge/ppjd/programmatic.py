"""The programmatic teacher: counterfactuals of synthetic items, correct by construction, fully offline.

It implements the same :class:`~perception_judge.ppjd.teacher.Teacher` interface as the LLM teacher and its
output goes through the same validation. For an item with a scene spec (:mod:`perception_judge.ppjd.synth`):

* **verify** -- r_c must be exactly what the spec renders, with the spec's answer (``rc_mismatch`` otherwise);
* **attributes** -- the spec's fact phrases;
* **rewrite** -- r_rp re-renders r_c's template from attributes with one perceptual fact misread (a count
  3 -> 4, a colour red -> blue, a bar's value, a clock hand, a table cell), so only that fact and what follows
  from it change; r_rp+r misreads a fact *and* injects a reasoning slip (wrong arithmetic, wrong operation,
  the wrong row or bar, a forgotten carry ...). Both answers must differ from the ground truth, and from each
  other.

Randomness is seeded per record key, so results do not depend on concurrency or on resuming.
"""

from __future__ import annotations

import random
from typing import Any

from perception_judge.ppjd import synth
from perception_judge.ppjd.answers import answers_match
from perception_judge.ppjd.teacher import (
    MIN_ATTRIBUTES,
    STAGE_ATTRIBUTES,
    STAGE_REWRITE,
    STAGE_VERIFY,
    Counterfactuals,
    StageError,
    TeacherInput,
)

MAX_TRIES = 64


def _changed_facts(spec: dict[str, Any], attrs: dict[str, Any]) -> list[str]:
    before = synth._FACTS[spec["family"]](spec["attributes"])
    after = synth._FACTS[spec["family"]](attrs)
    return [f"{a} -> {b}" for a, b in zip(before, after) if a != b]


class ProgrammaticTeacher:
    """Counterfactuals from the scene spec of synthetic items (see the module docstring)."""

    name = "programmatic"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "failures": 0}

    def describe(self) -> dict[str, Any]:
        return {"kind": "programmatic", "seed": self.seed, "spec_version": synth.SPEC_VERSION}

    def usage(self) -> dict[str, int]:
        return dict(self._usage)

    async def aclose(self) -> None:
        return None

    async def process(self, inp: TeacherInput) -> Counterfactuals:
        return self.counterfactuals(inp)

    def counterfactuals(self, inp: TeacherInput) -> Counterfactuals:
        item = inp.item
        spec = item.spec
        if not spec or "family" not in spec or "qtype" not in spec or "attributes" not in spec:
            raise StageError(
                STAGE_VERIFY,
                "no_spec",
                f"item {item.item_id!r} has no synthetic scene spec; the programmatic teacher only handles "
                "`perception-judge synth` items (use --teacher llm for other sources)",
            )
        key = (spec["family"], spec["qtype"])
        if key not in synth.SOLVERS:
            raise StageError(STAGE_VERIFY, "unknown_qtype", f"no solver for {key}")
        try:
            r_c, answer = synth.solve(spec)
        except (synth.Unsolvable, KeyError, TypeError, ValueError) as e:
            raise StageError(STAGE_VERIFY, "rc_mismatch", f"the spec does not solve: {e}") from None
        if r_c != item.response or not answers_match(answer, item.answer):
            raise StageError(
                STAGE_VERIFY, "rc_mismatch", "r_c or the answer differs from what the scene spec renders"
            )
        facts = list(spec.get("facts") or [])
        if len(facts) < MIN_ATTRIBUTES:
            raise StageError(STAGE_ATTRIBUTES, "too_few_attributes", f"{len(facts)} facts in the spec")

        rng = random.Random(f"ppjd/programmatic/{self.seed}/{inp.key}")
        perceived: dict[str, Any] | None = None
        r_rp = a_rp = ""
        for _ in range(MAX_TRIES):
            attrs = synth.perturb(spec, spec["attributes"], rng)
            try:
                text, ans = synth.solve(spec, attrs)
            except synth.Unsolvable:
                continue
            if not answers_match(ans, item.answer):
                perceived, r_rp, a_rp = attrs, text, ans
                break
        if perceived is None:
            raise StageError(STAGE_REWRITE, "no_perturbation", "no misread fact changes the answer")

        slips = synth.SLIPS[key]
        r_rp_r = ""
        slip_used: dict[str, Any] | None = None
        attrs_r: dict[str, Any] | None = None
        for _ in range(MAX_TRIES):
            attrs2 = perceived if rng.random() < 0.5 else synth.perturb(spec, spec["attributes"], rng)
            if attrs2 == spec["attributes"]:
                continue
            slip = {"kind": rng.choice(slips), "delta": rng.choice((-2, -1, 1, 2))}
            try:
                text, ans = synth.solve(spec, attrs2, slip)
            except synth.Unsolvable:
                continue
            if answers_match(ans, item.answer) or answers_match(ans, a_rp) or text == r_rp:
                continue
            # The perceptual error must show in the text, not only the reasoning slip.
            try:
                plain, _ = synth.solve(spec, attrs2)
            except synth.Unsolvable:
                continue
            if plain == r_c:
                continue
            r_rp_r, slip_used, attrs_r = text, slip, attrs2
            break
        if slip_used is None or attrs_r is None:
            raise StageError(STAGE_REWRITE, "no_reasoning_slip", "no slip gives a third distinct answer")
        meta = {
            "perturbed_rp": _changed_facts(spec, perceived),
            "perturbed_rp_r": _changed_facts(spec, attrs_r),
            "slip": slip_used["kind"],
        }
        return Counterfactuals(r_rp=r_rp, r_rp_r=r_rp_r, attributes=facts[:6], meta=meta)


__all__ = ["ProgrammaticTeacher"]
