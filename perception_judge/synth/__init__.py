"""The synthetic world: procedural images whose every perceptual attribute is known exactly, with their questions,
step-by-step responses and counterfactuals (docs/ppjd.md §1). One module per family (a :class:`~perception_judge
.synth.base.Family` record each), registered in :data:`~perception_judge.synth.world.REGISTRY`; ``world`` makes and
writes the items, ``counterfactuals`` gives r_rp and r_rp+r of a scene spec.
"""

from perception_judge.synth.bars import bar_geometry, bar_unit_px
from perception_judge.synth.base import COLOURS, word_count
from perception_judge.synth.clock import CLOCK_CENTRE, hand_angles
from perception_judge.synth.counterfactuals import counterfactuals
from perception_judge.synth.table import TABLE_COLS, TABLE_GRID_RGB, TABLE_HEADER_RGB
from perception_judge.synth.world import (
    DEFAULT_TEXT_ONLY_FRACTION,
    FAMILIES,
    SPEC_VERSION,
    TEXT_FAMILY,
    draw,
    generate_items,
    slips,
    solve,
    write_synthetic,
)

__all__ = [
    "CLOCK_CENTRE",
    "COLOURS",
    "DEFAULT_TEXT_ONLY_FRACTION",
    "FAMILIES",
    "SPEC_VERSION",
    "TABLE_COLS",
    "TABLE_GRID_RGB",
    "TABLE_HEADER_RGB",
    "TEXT_FAMILY",
    "bar_geometry",
    "bar_unit_px",
    "counterfactuals",
    "draw",
    "generate_items",
    "hand_angles",
    "slips",
    "solve",
    "word_count",
    "write_synthetic",
]
