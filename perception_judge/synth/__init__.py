"""The synthetic world: procedural images whose every perceptual attribute is known exactly, with their
questions, step-by-step responses and counterfactuals. One package, used by every stage that needs items with a
known truth: the PPJD builder (its synthetic source and programmatic teacher), the tiny models (their training
and check records) and the bias suite (its built-in base items).

* :mod:`~perception_judge.synth.world`          -- the families (scene, drawing, question, solver, facts, slips)
* :mod:`~perception_judge.synth.counterfactuals` -- r_rp and r_rp+r from a scene spec
"""

from perception_judge.synth import world
from perception_judge.synth.counterfactuals import Counterfactual, NoCounterfactual, counterfactuals
from perception_judge.synth.world import *  # noqa: F403 -- the families' public API (world.__all__)

__all__ = [*world.__all__, "Counterfactual", "NoCounterfactual", "counterfactuals", "world"]
