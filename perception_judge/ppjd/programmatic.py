"""The programmatic teacher: counterfactuals of synthetic items from their scene spec
(:mod:`perception_judge.synth.counterfactuals`), correct by construction, offline, seeded per record key."""

from __future__ import annotations

import itertools
from typing import Any

from perception_judge import synth
from perception_judge.llm_client import USAGE_KEYS
from perception_judge.ppjd.teacher import Counterfactuals, TeacherInput


class ProgrammaticTeacher:
    name = "programmatic"

    def __init__(self, seed: int = 0, concurrency: int = 4) -> None:
        self.seed = seed
        self.concurrency = concurrency  # CPU-bound: more items in flight gain nothing

    def describe(self) -> dict[str, Any]:
        return {"kind": "programmatic", "seed": self.seed, "spec_version": synth.SPEC_VERSION}

    def usage(self) -> dict[str, int]:
        return dict.fromkeys(USAGE_KEYS, 0)

    async def aclose(self) -> None:
        return None

    def check(self, source: Any) -> list[str]:
        if any(item.spec for item in itertools.islice(source, 50)):
            return []
        raise ValueError(  # nothing to verify r_c against
            "the programmatic teacher builds only synthetic items (a spec per row, as `perception-judge synth` "
            "writes) and the first rows of this source have none: use --teacher llm, or --input a synth folder"
        )

    async def process(self, inp: TeacherInput) -> Counterfactuals:
        return self.counterfactuals(inp)

    def counterfactuals(self, inp: TeacherInput) -> Counterfactuals:
        item = inp.item
        return synth.counterfactuals(
            item.spec, item.response, item.answer, inp.key, seed=self.seed, item_id=item.item_id
        )
