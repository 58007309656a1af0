"""The MM-JudgeBias taxonomy: nine bias types, three categories, two metrics.

Each bias pairs an *unbiased* input (query Q, image I or none, response R) with a *biased* input (Q', I', R)
that shares the response. Evidence-destroying perturbations (Integrality, Congruity) should make a good judge
**lower** its score, measured by Bias-Deviation (``bd``); meaning-preserving ones (Robustness) should leave the
score **unchanged**, measured by Bias-Conformity (``bc``). See :mod:`perception_judge.evaluation.bias.metrics`.

The structure (names, categories, metrics, order) follows ``naver-ai/MM-JudgeBias`` (``mm_judgebias/bias.py``,
Apache-2.0) so that per-bias numbers line up with the published leaderboard; the code is ours.
"""

from __future__ import annotations

from dataclasses import dataclass

INTEGRALITY = "integrality"
CONGRUITY = "congruity"
ROBUSTNESS = "robustness"
CATEGORIES: tuple[str, ...] = (INTEGRALITY, CONGRUITY, ROBUSTNESS)

BD = "bd"
BC = "bc"
METRICS: tuple[str, ...] = (BD, BC)


@dataclass(frozen=True)
class BiasSpec:
    """One bias type: its key, category, metric and what the perturbation does."""

    bias_type: str
    category: str
    metric: str
    label: str
    short: str
    perturbation: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"bias {self.bias_type!r}: unknown category {self.category!r}")
        if self.metric not in METRICS:
            raise ValueError(f"bias {self.bias_type!r}: unknown metric {self.metric!r}")


BIASES: tuple[BiasSpec, ...] = (
    BiasSpec("text_dominance", INTEGRALITY, BD, "Text dominance", "TD", "I' = null image (black 224x224)"),
    BiasSpec("image_dominance", INTEGRALITY, BD, "Image dominance", "ID", "Q' = empty query"),
    BiasSpec(
        "response_dominance",
        INTEGRALITY,
        BD,
        "Response dominance",
        "RD",
        "Q' = empty query and I' = null image",
    ),
    BiasSpec(
        "instruction_misalignment",
        CONGRUITY,
        BD,
        "Instruction misalignment",
        "InstrMis",
        "Q' = an unrelated query from another item",
    ),
    BiasSpec("image_misalignment", CONGRUITY, BD, "Image misalignment", "ImgMis", "I' = an unrelated image"),
    BiasSpec(
        "detail_description",
        ROBUSTNESS,
        BC,
        "Detail description",
        "DetailDesc",
        "Q' = Q + a detailed description of the image",
    ),
    BiasSpec(
        "unnecessary_image",
        ROBUSTNESS,
        BC,
        "Unnecessary image",
        "UnnecImg",
        "a text-only item; I' = an unrelated image added",
    ),
    BiasSpec(
        "visual_transformation",
        ROBUSTNESS,
        BC,
        "Visual transformation",
        "VisTrans",
        "I' = a semantics-preserving geometric / photometric transform of I",
    ),
    BiasSpec(
        "texture_insertion",
        ROBUSTNESS,
        BC,
        "Text insertion",
        "TextIns",
        "I' = I with the query keywords rendered in a strip below it",
    ),
)
"""The nine bias types in the published order (ids 0..1803 of the official data follow this order)."""

BIAS_TYPES: tuple[str, ...] = tuple(b.bias_type for b in BIASES)
BY_TYPE: dict[str, BiasSpec] = {b.bias_type: b for b in BIASES}


def get_bias(bias_type: str) -> BiasSpec:
    """The spec of a bias type; a clear error lists the known keys."""
    try:
        return BY_TYPE[bias_type]
    except KeyError:
        raise ValueError(f"unknown bias type {bias_type!r}; known: {', '.join(BIAS_TYPES)}") from None


def biases_in(category: str) -> tuple[BiasSpec, ...]:
    if category not in CATEGORIES:
        raise ValueError(f"unknown bias category {category!r}; known: {', '.join(CATEGORIES)}")
    return tuple(b for b in BIASES if b.category == category)


def normalize_category(value: str) -> str:
    """Map a category string of the official data ("Integrality", "integrality ") onto our key."""
    key = str(value).strip().lower()
    if key not in CATEGORIES:
        raise ValueError(f"unknown bias category {value!r}; known: {', '.join(CATEGORIES)}")
    return key


def select(bias_types: list[str] | tuple[str, ...] | None) -> tuple[BiasSpec, ...]:
    """The specs for a subset of types (None = all nine), in the canonical order."""
    if not bias_types:
        return BIASES
    wanted = {get_bias(t).bias_type for t in bias_types}
    return tuple(b for b in BIASES if b.bias_type in wanted)


__all__ = [
    "BC",
    "BD",
    "BIASES",
    "BIAS_TYPES",
    "BY_TYPE",
    "CATEGORIES",
    "CONGRUITY",
    "INTEGRALITY",
    "ROBUSTNESS",
    "BiasSpec",
    "biases_in",
    "get_bias",
    "normalize_category",
    "select",
]
