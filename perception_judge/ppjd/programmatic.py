"""The programmatic teacher: counterfactuals of synthetic items, correct by construction, fully offline.

It implements the same :class:`~perception_judge.ppjd.teacher.Teacher` interface as the LLM teacher and its
output goes through the same validation; the logic lives in :mod:`perception_judge.synth.counterfactuals`. For an
item with a scene spec (:mod:`perception_judge.synth`):

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

from typing import Any

from perception_judge import synth
from perception_judge.ppjd.teacher import Counterfactuals, StageError, TeacherInput


class ProgrammaticTeacher:
    """Counterfactuals from the scene spec of synthetic items (:func:`perception_judge.synth.counterfactuals`)."""

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
        try:
            cf = synth.counterfactuals(
                item.spec, item.response, item.answer, inp.key, seed=self.seed, item_id=item.item_id
            )
        except synth.NoCounterfactual as e:
            raise StageError(e.stage, e.reason, e.detail) from None
        return Counterfactuals(r_rp=cf.r_rp, r_rp_r=cf.r_rp_r, attributes=cf.facts, meta=cf.meta)


__all__ = ["ProgrammaticTeacher"]
