"""The suite registry: every suite's record (:class:`~perception_judge.evaluation.base.Suite`) by name. Registering
a suite is adding its module's ``SUITE`` to :data:`SUITES` (docs/evaluation.md §6); the plan, the sweep, ``eval
list`` and the report read the records, never the modules' internals.
"""

from __future__ import annotations

from perception_judge.evaluation import perception
from perception_judge.evaluation.base import Suite
from perception_judge.evaluation.benchmarks import (
    mjbench,
    mllm_judge,
    mmrb2,
    multimodal_rewardbench,
    position,
    self_enhancement,
    verbosity,
    vlrewardbench,
)
from perception_judge.evaluation.bias import suite as bias

SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        bias.SUITE,
        perception.SUITE,
        perception.MISMATCHED,
        mllm_judge.SUITE,
        vlrewardbench.SUITE,
        mjbench.SUITE,
        multimodal_rewardbench.SUITE,
        mmrb2.SUITE,
        position.SUITE,
        verbosity.SUITE,
        self_enhancement.SUITE,
    )
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; available: {', '.join(SUITES)}")
    return SUITES[name]
