"""The synthetic world: procedural images whose every perceptual attribute is known exactly, with their
questions, step-by-step responses and counterfactuals. Used by every stage that needs items with a known truth:
the PPJD builder (its synthetic source and programmatic teacher), the tiny models and the bias suite.

Each family is one module with one :class:`~perception_judge.synth.base.Family` record (scene and question,
solvers with their reasoning slips, perturbation, facts, drawing, caption), registered in
:data:`~perception_judge.synth.world.REGISTRY`: ``objects``, ``bars``, ``table``, ``clock`` (256 px), the tiny
``colour`` and ``count`` (56 px, the demo's), and the text-only ``text``. :mod:`~perception_judge.synth.world`
makes and writes the items, :mod:`~perception_judge.synth.counterfactuals` gives r_rp and r_rp+r of a scene spec.
"""

from perception_judge.synth.bars import bar_geometry, bar_unit_px
from perception_judge.synth.base import COLOURS, Family, Unsolvable, word_count
from perception_judge.synth.clock import CLOCK_CENTRE, hand_angles
from perception_judge.synth.counterfactuals import Counterfactual, NoCounterfactual, counterfactuals
from perception_judge.synth.table import TABLE_COLS, TABLE_GRID_RGB, TABLE_HEADER_RGB
from perception_judge.synth.tiny import TINY_IMAGE_SIZE, TINY_INK, response_value, tiny_value, tiny_values
from perception_judge.synth.world import (
    ALL_FAMILIES,
    DEFAULT_TEXT_ONLY_FRACTION,
    FAMILIES,
    REGISTRY,
    SLIPS,
    SPEC_VERSION,
    TEXT_FAMILY,
    TINY_FAMILIES,
    draw,
    facts,
    generate_items,
    item_to_row,
    iter_items,
    perturb,
    solve,
    write_synthetic,
)

__all__ = [
    "ALL_FAMILIES",
    "CLOCK_CENTRE",
    "COLOURS",
    "DEFAULT_TEXT_ONLY_FRACTION",
    "FAMILIES",
    "REGISTRY",
    "SLIPS",
    "SPEC_VERSION",
    "TABLE_COLS",
    "TABLE_GRID_RGB",
    "TABLE_HEADER_RGB",
    "TEXT_FAMILY",
    "TINY_FAMILIES",
    "TINY_IMAGE_SIZE",
    "TINY_INK",
    "Counterfactual",
    "Family",
    "NoCounterfactual",
    "Unsolvable",
    "bar_geometry",
    "bar_unit_px",
    "counterfactuals",
    "draw",
    "facts",
    "generate_items",
    "hand_angles",
    "item_to_row",
    "iter_items",
    "perturb",
    "response_value",
    "solve",
    "tiny_value",
    "tiny_values",
    "word_count",
    "write_synthetic",
]
